"""``qualify --paths ep:OpenVINO`` on x86-64 with onnxruntime-openvino in a runtime
environment of its own (docs/divergence.md): the agent's own onnxruntime does not offer the
provider, the environment's does, so the path runs there, in that environment's Python,
and its row names the environment. Real wheels from PyPI (cached like the bisect tests'),
the real local agent, the example classifier against its golden set."""

from __future__ import annotations

import platform
from pathlib import Path

import numpy as np
import pytest
from edgequal.cli.main import main as edgequal_main
from edgequal.host.examples.catalog import build_example, example_inputs

OPENVINO = "1.24.1"
"""onnxruntime-openvino's release: its wheel carries the OpenVINO libraries (84 MB)."""

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheelhouse(test_helper) -> Path:
    """onnxruntime-openvino and what it needs, with the suite's numpy."""
    return test_helper("wheel_cache").download_wheels(
        f"openvino-{OPENVINO}", [f"onnxruntime-openvino=={OPENVINO}"]
    )


@pytest.mark.skipif(
    platform.machine() != "x86_64", reason="onnxruntime-openvino publishes x86-64 wheels only"
)
def test_the_openvino_path_runs_in_its_own_environment(tmp_path, wheelhouse, monkeypatch, capsys):
    from edgequal.host.devices.trust import KnownDevices
    from edgequal.host.install.runtime_envs import add_local_runtime_env
    from edgequal.host.judge.report_file import load_report

    board = tmp_path / "local-agent"
    monkeypatch.setenv("EDGEQUAL_LOCAL_STATE", str(board))
    manifest = add_local_runtime_env(
        board, f"onnxruntime-openvino=={OPENVINO}", wheelhouse=wheelhouse
    )
    env = manifest["name"]
    model = build_example("classifier", tmp_path)
    inputs = tmp_path / "inputs.npz"
    cases = example_inputs("classifier", 3)
    np.savez(inputs, **{f"c{i}/image": c["image"] for i, c in enumerate(cases)})
    golden = tmp_path / "g.npz"
    assert (
        edgequal_main(["golden", "make", str(model), "--inputs", str(inputs), "-o", str(golden)])
        == 0
    )
    report = tmp_path / "r.json"
    argv = ["qualify", str(model), "--golden", str(golden), "-o", str(report)]
    argv += ["--cold-runs", "1", "--warmup", "0.1s", "--latency", "0.1s", "--sustain", "0"]
    argv += ["--paths", "opt:all,ep:OpenVINO", "--runtime-env", env, "--runtime-env-rounds", "1"]
    assert edgequal_main(argv) in (0, 1), capsys.readouterr().err
    out = capsys.readouterr().out
    assert "ep:OpenVINO" in out

    predicate = load_report(report, known=KnownDevices(), require=True).predicate
    paths = {e["name"]: e for e in predicate["results"]["kernel_paths"]["paths"]}
    # The agent's own onnxruntime (the CPU wheel) has no OpenVINO provider: the path ran in
    # the environment, named in its row, with its own drift and latency.
    import onnxruntime

    assert "OpenVINOExecutionProvider" not in onnxruntime.get_available_providers()
    ov = paths["ep:OpenVINO"]
    assert (ov["status"], ov["runtime_env"]) == ("ok", env), ov
    assert ov["described"]["version"] == OPENVINO
    assert ov["described"]["providers"][0] == "OpenVINOExecutionProvider"
    assert ov["latency"]["count"] > 0
    # Its drift against the golden outputs is measured (how far depends on the CPU: OpenVINO
    # may run in bf16 where the CPU has it), beside the agent's own reference path's.
    assert ov["drift"]["cases"] == 3 and ov["drift"]["max_abs"] >= 0.0
    assert paths["opt:all"]["status"] == "ok" and paths["opt:all"]["reference"] is True
    # OpenVINO took the graph off onnxruntime's CPU kernels (here as one fused subgraph).
    placement = ov["placement"]
    assert placement["providers"] == ["OpenVINOExecutionProvider"], placement
    assert placement["off_cpu_nodes"] > 0 and placement["cpu_fallback"]["cpu_nodes"] == []
