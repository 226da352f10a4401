"""Shared fixtures for the probe tests: recorded board trees and replayed board commands."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SYSFS = FIXTURES / "sysfs"
COMMANDS = FIXTURES / "commands"

# Only system directories: no board tool is found unless a test adds its replay.
BASE_PATH = "/usr/bin:/bin"


@pytest.fixture
def board_tools(monkeypatch):
    """Call with a board name to put its replayed commands on PATH (or None for no board tools)."""

    def use(board: str | None) -> None:
        path = BASE_PATH if board is None else f"{COMMANDS / board / 'bin'}:{BASE_PATH}"
        monkeypatch.setenv("PATH", path)

    use(None)
    return use
