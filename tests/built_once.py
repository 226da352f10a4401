"""Something expensive built once per test run, shared by every xdist worker of the run.

A session-scoped fixture is made once per worker (tests/conftest.py): two workers that
both run modules asking for the same real runs would each make them. :func:`once_per_run`
lets the first worker build into a folder of the run's shared base temporary directory,
under a file lock, and every other worker wait for it and read what it wrote. Loaded with
``load_test_helper("built_once")``.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from pathlib import Path

MANIFEST = "built.json"


def shared_dir(tmp_path_factory) -> Path:
    """The run's base temporary directory: the one every xdist worker's lies in, or this
    process's own without xdist."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once_per_run(tmp_path_factory, name: str, build: Callable[[Path], dict]) -> dict:
    """``build(folder)``'s JSON-able result, built by the first worker of this run that
    asks (the others wait on the lock, then read it). A build that raises writes nothing:
    the next worker to ask builds again."""
    shared = shared_dir(tmp_path_factory)
    folder = shared / f"once-{name}"
    with open(shared / f"once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = folder / MANIFEST
        if done.exists():
            return json.loads(done.read_text())
        folder.mkdir(exist_ok=True)
        result = build(folder)
        partial = folder / f"{MANIFEST}.part"
        partial.write_text(json.dumps(result))
        partial.replace(done)
        return result
