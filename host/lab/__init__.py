"""A lab of many boards: inventory (lab.toml, models.toml), fleet runs, board health, the
history database, approval and re-qualification."""
