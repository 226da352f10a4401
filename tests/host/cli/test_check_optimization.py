"""``edgequal qualify --check-optimization`` through the CLI and the local agent, whose probe
root (``$EDGEQUAL_ROOT``) is a recorded x86 board without VNNI: the report's finding names
the likely cause and the summary shows the drift measured again with optimisation off.
(The rule and the saturating model: tests/agent/phases/test_int8_without_vnni.py.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from edgequal.cli.main import main as edgequal_main
from edgequal.host.examples.catalog import build_example, example_inputs
from edgequal.host.examples.onnx_models import build_classifier_qdq

# Starts a local agent and its workers: the fast loop skips it.
pytestmark = pytest.mark.slow

NO_VNNI = Path(__file__).resolve().parents[2] / "fixtures" / "sysfs" / "x86-skylake-sp"


def test_qualify_check_optimization_on_x86_without_vnni(tmp_path, monkeypatch, capsys, short_plan):
    model = tmp_path / "classifier_qdq_8bit.onnx"
    build_classifier_qdq(model, "8-bit weights", weight_qmax=127)
    reference = build_example("classifier", tmp_path)
    inputs = tmp_path / "inputs.npz"
    np.savez(
        inputs, **{f"c{i}/image": c["image"] for i, c in enumerate(example_inputs("classifier", 6))}
    )
    outputs = tmp_path / "reference.npz"
    golden = tmp_path / "g.npz"
    assert (
        edgequal_main(
            [
                "golden",
                "make",
                str(reference),
                "--inputs",
                str(inputs),
                "-o",
                str(tmp_path / "ref.npz"),
            ]
        )
        == 0
    )
    from edgequal.contract.golden import read_golden

    ref = read_golden(tmp_path / "ref.npz")
    np.savez(outputs, **{f"{c.name}/{k}": v for c in ref.cases for k, v in c.outputs.items()})
    argv = ["golden", "make", str(model), "--inputs", str(inputs), "--outputs", str(outputs)]
    assert edgequal_main([*argv, "--decision", "threshold:score>0.5", "-o", str(golden)]) == 0
    capsys.readouterr()

    monkeypatch.setenv("EDGEQUAL_ROOT", str(NO_VNNI))
    report = tmp_path / "r.json"
    qualify = ["qualify", str(model), "--golden", str(golden), "-o", str(report), *short_plan]
    assert edgequal_main([*qualify, "--check-optimization"]) == 1  # drift failed: not qualified
    out = capsys.readouterr().out
    assert "likely cause x86 without VNNI: u8×s8 products may saturate; quantize with" in out
    assert "optimisation check: max abs" in out and "with graph optimisation off" in out

    from edgequal.host.devices.trust import KnownDevices
    from edgequal.host.judge.report_file import load_report

    p = load_report(report, known=KnownDevices()).predicate
    assert p["plan"]["check_optimization"] is True
    assert p["fingerprint"]["cpu_model"] == "Intel(R) Xeon(R) Platinum 8175M CPU @ 2.50GHz"
    check = p["results"]["optimization_check"]
    assert check["compared_with"] == "all" and check["drift"]["outputs"]["score"]["cases"] == 6
    assert p["findings"][-1]["kind"] == "int8_without_vnni"
    page = tmp_path / "page.html"
    assert edgequal_main(["report", "html", str(report), "-o", str(page)]) == 0
    assert "optimisation check: max abs" in page.read_text()
    assert "likely cause x86 without VNNI" in page.read_text()  # the finding, on the page


def test_the_library_asks_for_it_as_a_plan_field(tmp_path, monkeypatch):
    """``Device.qualify(..., check_optimization=True)``: the same run, through the library."""
    import edgequal
    from edgequal.host.golden import make_golden

    model = build_example("classifier_qdq", tmp_path)
    golden = tmp_path / "g.npz"
    cases = {f"c{i}": feeds for i, feeds in enumerate(example_inputs("classifier_qdq", 4))}
    make_golden(model, cases, golden)  # reference: onnxruntime here, at its default level
    monkeypatch.setenv("EDGEQUAL_ROOT", str(NO_VNNI))
    with edgequal.connect("local") as device:
        report = device.qualify(
            model, golden, check_optimization=True, cold_runs=1, latency_min_s=0.1,
            latency_min_runs=50, warmup_min_s=0.05, warmup_max_s=0.5, out=tmp_path / "r.json",
        )  # fmt: skip
    results = report.predicate["results"]
    assert report.predicate["plan"]["check_optimization"] is True
    # Its own outputs as reference: no drift at the default level, and none without it
    # beyond float rounding (the example's int8 kernels are exact), so nothing to explain.
    check = results["optimization_check"]
    assert check["cause"] == "none" and check["max_abs_unoptimized"] < 1e-5
    assert not any(f.get("kind") == "int8_without_vnni" for f in report.predicate["findings"])
