"""``runtime add`` of a runtime built for NumPy 1.x, end to end with real wheels from the
package index: by default the environment gets the numpy the runtime was built for; given
NumPy 2 it is refused as the packaging conflict it is, never as the board's fault."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# pip installs a runtime into a new venv for tens of seconds: the fast loop skips it.
pytestmark = pytest.mark.slow

OLD = "1.17.3"  # built for NumPy 1.x (onnxruntime supports NumPy 2 from 1.19)
NUMPY_2 = importlib.metadata.version("numpy")
AGENT = [sys.executable, "-m", "edgequal.agent.cli"]
WHEELS = Path(
    os.environ.get("EDGEQUAL_TEST_WHEELS")
    or Path.home()
    / ".cache"
    / "edgequal-tests"
    / f"wheels-py{sys.version_info[0]}{sys.version_info[1]}"
)


@pytest.fixture(scope="module")
def wheels() -> Path:
    """onnxruntime 1.17.3 with its dependencies, a NumPy 1.x and this Python's NumPy 2."""
    complete = WHEELS / f".complete-numpy-conflict-{OLD}-{NUMPY_2}"
    if not complete.exists():
        WHEELS.mkdir(parents=True, exist_ok=True)
        for reqs in ([f"onnxruntime=={OLD}", "numpy<2"], [f"numpy=={NUMPY_2}"]):
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:"]
                + ["-d", str(WHEELS), *reqs],
                check=True,
                capture_output=True,
                timeout=900,
            )
        complete.touch()
    return WHEELS


def _add(state: Path, wheels: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*AGENT, "--state-dir", str(state), "runtime", "add", f"onnxruntime=={OLD}", *args]
        + ["--find-links", str(wheels), "--no-index"],
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_numpy_2_beside_a_numpy_1_runtime_is_a_packaging_conflict(wheels, tmp_path):
    done = _add(tmp_path / "state", wheels, f"numpy=={NUMPY_2}")
    assert done.returncode == 2, done.stderr
    error = [line for line in done.stderr.splitlines() if line.startswith("edgequal-agent: error")]
    assert error == [
        f"edgequal-agent: error: runtime environment onnxruntime-{OLD}: onnxruntime=={OLD} was "
        f"built for NumPy 1.x and the environment got numpy {NUMPY_2}: a packaging conflict, not "
        f"the board (hint: install it with a NumPy 1.x: edgequal-agent runtime add "
        f"onnxruntime=={OLD} 'numpy<2')"
    ]
    assert "does not work on this board" not in done.stderr
    assert not (tmp_path / "state" / "runtimes" / f"onnxruntime-{OLD}").exists()


def test_by_default_the_environment_gets_the_numpy_its_runtime_was_built_for(wheels, tmp_path):
    done = _add(tmp_path / "state", wheels, "--json")
    assert done.returncode == 0, done.stderr
    env = json.loads(done.stdout)
    assert env["version"] == OLD
    numpy_wheels = [w["file"] for w in env["wheels"] if w["file"].startswith("numpy-")]
    assert len(numpy_wheels) == 1 and numpy_wheels[0].startswith("numpy-1.")
