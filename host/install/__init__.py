"""Putting the agent on a board: ``agent install`` and ``agent status`` over SSH (agent.py),
the commands they run (commands.py), the wheel (wheel.py) and the service unit
(service.py)."""
