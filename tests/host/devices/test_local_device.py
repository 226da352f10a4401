"""The ``local`` device is one device: a second host process reaches the agent already
serving its state directory (``<state>/agent.lock``) and is told it is busy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from edgequal.agent.service.state_lock import peek
from edgequal.cli.main import main as edgequal_main
from edgequal.contract.exit_codes import exit_code_for
from edgequal.contract.signing import MEASURED_STATUSES
from edgequal.host.devices.trust import KnownDevices
from edgequal.host.devices.verify import verify_envelope


def _wait_for_lease(state: Path, proc: subprocess.Popen, timeout_s: float = 120) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        holder = peek(state) or {}
        if holder.get("lease"):
            return holder
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the first run never started"
        time.sleep(0.1)


@pytest.mark.slow
def test_two_local_qualifications_at_once_never_measure_together(
    example_models, tmp_path, capsys, short_plan
):
    state = Path(os.environ["EDGEQUAL_LOCAL_STATE"])
    first_report = tmp_path / "first.json"
    first = subprocess.Popen(
        [sys.executable, "-m", "edgequal.cli", "qualify", str(example_models["micro"])]
        + ["--device", "local", "--sustain", "2s", "-o", str(first_report), "--json"]
        + short_plan,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        holder = _wait_for_lease(state, first)
        assert holder["command"] == "serve" and holder["port"]
        # The second host does not start a second agent on the same state directory:
        # it reaches the first one, which says it is busy.
        rc = edgequal_main(
            ["qualify", str(example_models["micro"]), "--device", "local", "--sustain", "0"]
            + ["-o", str(tmp_path / "second.json")]
        )
        err = capsys.readouterr().err
        assert rc == 3, err
        assert "device busy" in err and holder["lease"]["run_id"] in err
        assert not (tmp_path / "second.json").exists()
        assert peek(state)["pid"] == holder["pid"]  # the first agent still serves
        out, err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    predicate = json.loads(out)
    assert predicate["status"] in MEASURED_STATUSES, err
    assert first.returncode == exit_code_for(predicate["status"], predicate["findings"])
    assert predicate["run_id"] == holder["lease"]["run_id"]
    # One run measured, one report on the device, and it verifies.
    assert [p.name for p in (state / "reports").glob("*.dsse.json")] == [
        f"{predicate['run_id']}.dsse.json"
    ]
    verify_envelope(first_report.read_bytes(), known=KnownDevices(), device="local")
    assert peek(state) is None  # the first host stopped the agent it started
