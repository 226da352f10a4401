"""The edgequal driver in labgrid's own pytest: ``pytest --lg-env env.yaml`` in a child
process, the driver bound to a NetworkService naming a real local agent, a real model."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("labgrid", reason="the labgrid extra")


@pytest.mark.slow  # a real agent and a pytest session of its own
def test_a_labgrid_test_qualifies_through_the_driver(tmp_path, local_agents, example_models):
    from edgequal.host.devices.resolve import trust_device
    from edgequal.host.devices.trust import KnownDevices

    [agent] = local_agents.start_agents(tmp_path / "agents", ["bench"])
    try:
        trust_device(KnownDevices(), "bench", agent.address)
        (tmp_path / "env.yaml").write_text(
            "imports:\n  - edgequal.labgrid_driver\n"
            "targets:\n  main:\n    resources:\n      NetworkService:\n"
            f'        address: "{agent.address}"\n        username: "edgequal"\n'
            "    drivers:\n      EdgequalDriver: {}\n"
        )
        (tmp_path / "test_board.py").write_text(
            "def test_micro(target):\n"
            '    driver = target.get_driver("EdgequalDriver")\n'
            f'    report = driver.qualify(r"{example_models["micro"]}", plan="quick",\n'
            '        cold_runs=1, warmup_min_s=0.1, latency="0.1s", threads=1, sustain=0)\n'
            '    assert report.device == "bench", report.device\n'
            "    assert report.status in ('passed', 'degraded', 'inconclusive'), report.status\n"
            "    print('RUN', report.run_id)\n"
        )
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "labgrid", "--lg-env", "env.yaml"]
            + ["-q", "-s", "-p", "no:cacheprovider", "test_board.py"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        run_id = proc.stdout.split("RUN ", 1)[1].split()[0]
        assert [p.name for p in agent.run_records()] == [f"{run_id}.dsse.json"]
    finally:
        agent.stop()
