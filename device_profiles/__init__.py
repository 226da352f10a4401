"""Device profiles: one TOML per board, vendor/board.toml."""
