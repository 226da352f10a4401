"""The tests' wheelhouse: runtime wheels downloaded once per machine and Python, kept
between sessions (``~/.cache/edgequal-tests/wheels-pyXY``, or $EDGEQUAL_TEST_WHEELS), for
the tests that install runtimes into environments with ``--no-index``. Loaded through
``load_test_helper("wheel_cache")``."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

NUMPY = importlib.metadata.version("numpy")
"""The suite's numpy: every download pins it, so an environment gets the numpy it runs with."""

WHEEL_CACHE = Path(
    os.environ.get("EDGEQUAL_TEST_WHEELS")
    or Path.home()
    / ".cache"
    / "edgequal-tests"
    / f"wheels-py{sys.version_info[0]}{sys.version_info[1]}"
)


def download_wheels(tag: str, requirements: Sequence[str]) -> Path:
    """The wheelhouse, with ``requirements`` (each downloaded with the suite's numpy and
    what it needs, binary wheels only) once a marker named by ``tag`` says so."""
    WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
    complete = WHEEL_CACHE / f".complete-{tag}-{NUMPY}"
    if not complete.exists():
        for requirement in requirements:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:"]
                + ["-d", str(WHEEL_CACHE), requirement, f"numpy=={NUMPY}"],
                check=True,
                capture_output=True,
                timeout=900,
            )
        complete.touch()
    return WHEEL_CACHE
