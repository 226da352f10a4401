"""int8 on x86 without VNNI, end to end through the real worker and onnxruntime: the finding
that names the likely cause, and the optimisation check that measures the drift once more
with graph optimisation off in the same run.

The model saturates on purpose: the example classifier quantized with full 8-bit weights
(``build_classifier_qdq(weight_qmax=127)``), whose u8×s8 pairs reach 64770 and saturate in
onnxruntime's kernels on an AVX2 / AVX-512BW CPU without VNNI. This machine may well have
VNNI, where those kernels are exact: what the tests show is the finding's rule, fed by the
probe root's recorded /proc/cpuinfo of a Skylake-SP (no VNNI), on a real drift beyond
tolerance (the quantization's own, against the float model's outputs at fp32 tolerance),
and the optimisation-off drift really measured and compared. They do not show saturation
itself, which needs such a CPU (tests/host/examples/test_catalog.py emulates it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from edgequal.agent.phases.qualification import run_measurement
from edgequal.agent.probes.cpuinfo import read_cpuinfo
from edgequal.host.examples.catalog import build_example, example_inputs
from edgequal.host.examples.onnx_models import build_classifier_qdq
from edgequal.host.golden import make_golden

# Starts worker processes running onnxruntime: the fast loop skips it.
pytestmark = pytest.mark.slow

SYSFS = Path(__file__).resolve().parents[2] / "fixtures" / "sysfs"
NO_VNNI = SYSFS / "x86-skylake-sp"
CASES = 8


@pytest.fixture(scope="module")
def saturating(tmp_path_factory):
    """``(model, golden)``: the 8-bit QDQ classifier and a golden set of the float
    classifier's outputs at the default fp32 tolerance (so its drift is beyond it)."""
    import onnxruntime as ort

    out = tmp_path_factory.mktemp("int8")
    model = out / "classifier_qdq_8bit.onnx"
    build_classifier_qdq(model, "8-bit weights: saturates on x86 without VNNI", weight_qmax=127)
    reference = ort.InferenceSession(str(build_example("classifier", out)))
    cases = {f"case{i:02d}": c for i, c in enumerate(example_inputs("classifier_qdq", CASES))}
    outputs = out / "reference.npz"
    np.savez(
        outputs,
        **{
            f"{name}/{o.name}": value
            for name, feeds in cases.items()
            for o, value in zip(reference.get_outputs(), reference.run(None, feeds), strict=True)
        },
    )
    golden = out / "g.npz"
    make_golden(model, cases, golden, outputs=outputs, decision="threshold:score>0.5")
    return model, golden


def test_the_recorded_cpu_has_no_vnni():
    cpu = read_cpuinfo(NO_VNNI)
    assert cpu["isa"] == "x86" and "avx512bw" in cpu["flags"]
    assert "avx512_vnni" not in cpu["flags"] and "avx_vnni" not in cpu["flags"]


def test_drift_on_x86_without_vnni_names_the_cause_and_the_check_measures_it_again(
    saturating, quick_plan
):
    model, golden = saturating
    out = run_measurement(model, golden, quick_plan(check_optimization=True), root=NO_VNNI)
    assert out["fingerprint"]["cpu_isa"] == "x86"
    assert "avx512_vnni" not in out["fingerprint"]["cpu_flags"]
    results = out["results"]
    assert results["model_io"]["int8_form"] == "qdq"
    assert results["drift"]["passed"] is False
    check = results["optimization_check"]
    assert check["graph_optimization"] == "disabled" and check["compared_with"] == "all"
    # Measured again in the same run, in a worker of its own: with optimisation off the
    # graph's QuantizeLinear/DequantizeLinear and float kernels run, and drift too.
    assert check["drift"]["passed"] is False
    assert check["drift"]["outputs"]["score"]["cases"] == CASES
    off, on = check["max_abs_unoptimized"], check["max_abs"]
    assert 1e-3 < off < 0.05
    if on < 0.05:  # exact kernels (VNNI, or none saturated): the same drift both ways
        assert check["cause"] == "not_optimization"
        assert abs(on - off) < 1e-4
    else:  # a CPU whose kernels saturate: the drift comes from them
        assert check["cause"] in ("optimized_kernels", "not_optimization")
    finding = out["findings"][-1]
    assert finding["kind"] == "int8_without_vnni" and finding["quantization"] == "qdq"
    assert (
        "likely cause x86 without VNNI: u8×s8 products may saturate; quantize with "
        "reduce_range or s8 activations" in finding["message"]
    )
    if check["cause"] == "not_optimization":
        assert "with graph optimisation off it drifts as well" in finding["message"]
    assert out["status"] == "failed" and out["reason"] == finding["message"]


def test_no_finding_where_the_cpu_has_vnni_or_is_arm(saturating, quick_plan, tmp_path):
    model, golden = saturating
    vnni = tmp_path / "vnni" / "proc"
    vnni.mkdir(parents=True)
    text = (NO_VNNI / "proc" / "cpuinfo").read_text()
    (vnni / "cpuinfo").write_text(text.replace(" avx512vl ", " avx512vl avx512_vnni "))
    for root in (vnni.parent, SYSFS / "pi5"):
        out = run_measurement(model, golden, quick_plan(), root=root)
        assert out["results"]["drift"]["passed"] is False
        assert "optimization_check" not in out["results"]  # not asked
        assert not any(f.get("kind") == "int8_without_vnni" for f in out["findings"])
