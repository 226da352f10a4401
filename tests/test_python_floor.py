"""The agent runs on the Python of the boards: 3.10 (JetPack 6) and later, checked statically.

This machine has one interpreter, so the floor is checked by vermin, which reads the
source and names the lowest Python each construct needs (docs/device-reach.md).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_agent_and_protos_need_no_python_newer_than_3_10():
    vermin = shutil.which("vermin", path=str(Path(sys.executable).parent)) or shutil.which("vermin")
    assert vermin, "vermin is in the test extra: pip install -e '.[test]'"
    proc = subprocess.run(
        [vermin, "--no-tips", "--target=3.10-", "--violations", "--eval-annotations"]
        + [str(ROOT / "agent"), str(ROOT / "protos")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    # With --violations vermin lists only what the target cannot run, and exits non-zero then.
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Minimum required versions: 3.10" in proc.stdout or "No known" in proc.stdout
