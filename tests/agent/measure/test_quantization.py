"""The int8 rules as pure functions: the graph's form, the x86-without-VNNI finding, the
optimisation check's verdict; literal inputs, hand-checked answers."""

from __future__ import annotations

from pathlib import Path

from edgequal.agent.measure.quantization import (
    SATURATION_CAUSE,
    int8_drift_finding,
    lacks_vnni,
    optimization_check,
    quantization_form,
)
from edgequal.agent.probes.cpuinfo import parse_cpuinfo, read_cpuinfo

SYSFS = Path(__file__).resolve().parents[2] / "fixtures" / "sysfs"
SKYLAKE = ["avx", "avx2", "avx512bw", "avx512f", "avx512vl", "f16c", "fma", "sse4_1", "sse4_2"]


def drift(passed: bool, max_abs: float, flips=()) -> dict:
    return {
        "passed": passed,
        "outputs": {"score": {"max_abs": max_abs}, "probs": {"max_abs": max_abs / 2}},
        "decisions": {"flips": list(flips)},
    }


def test_quantization_form_of_graphs():
    assert quantization_form(["QuantizeLinear", "DequantizeLinear", "Conv", "Relu"]) == "qdq"
    assert quantization_form(["QuantizeLinear", "QLinearConv", "DequantizeLinear"]) == "qlinear"
    assert quantization_form(["DynamicQuantizeLinear", "MatMulInteger", "Cast"]) == "qlinear"
    assert quantization_form(["DequantizeLinear", "MatMul"]) is None  # weight-only int8
    assert quantization_form(["Conv", "Relu", "Gemm"]) is None
    assert quantization_form([]) is None


def test_cpuinfo_of_recorded_boards():
    x86 = read_cpuinfo(SYSFS / "x86-skylake-sp")
    assert x86["model_name"] == "Intel(R) Xeon(R) Platinum 8175M CPU @ 2.50GHz"
    assert (x86["isa"], x86["flags"]) == ("x86", SKYLAKE)
    pi5 = read_cpuinfo(SYSFS / "pi5")
    assert (pi5["isa"], pi5["flags"]) == ("arm", ["asimd", "asimddp", "asimdhp", "fphp"])
    assert parse_cpuinfo("") == {"model_name": None, "isa": None, "flags": None}
    assert read_cpuinfo(SYSFS / "pi4")["reason"] == "no flags or Features line in /proc/cpuinfo"


def test_lacks_vnni_only_on_x86_without_either_flag():
    assert lacks_vnni("x86", SKYLAKE)
    assert not lacks_vnni("x86", [*SKYLAKE, "avx512_vnni"])
    assert not lacks_vnni("x86", ["avx2", "avx_vnni"])  # Alder Lake: AVX-VNNI without AVX-512
    assert not lacks_vnni("arm", ["asimd"])
    assert not lacks_vnni("x86", None) and not lacks_vnni(None, None)  # unknown: no claim


def test_optimization_check_verdicts():
    on, off = drift(False, 0.418, ["case01", "case07"]), drift(True, 0.0175, [])
    check = optimization_check(on, off, "all")
    assert check["cause"] == "optimized_kernels"
    assert (check["max_abs"], check["max_abs_unoptimized"]) == (0.418, 0.0175)
    assert (check["flips"], check["flips_unoptimized"]) == (["case01", "case07"], [])
    assert check["drift"] is off and check["compared_with"] == "all"
    assert optimization_check(on, drift(False, 0.4), "all")["cause"] == "not_optimization"
    assert optimization_check(drift(True, 1e-5), off, "extended")["cause"] == "none"


def test_the_finding_names_the_cause_only_for_int8_drift_on_x86_without_vnni():
    failed = drift(False, 0.418)
    finding = int8_drift_finding("qdq", "x86", SKYLAKE, failed)
    assert finding["kind"] == "int8_without_vnni" and finding["phase"] == "drift"
    assert finding["message"] == (
        "int8 (qdq) outputs drifted beyond tolerance; likely cause " + SATURATION_CAUSE
    )
    assert SATURATION_CAUSE == (
        "x86 without VNNI: u8×s8 products may saturate; quantize with reduce_range or "
        "s8 activations"
    )
    assert "--check-optimization" in finding["hint"]
    assert int8_drift_finding("qdq", "x86", SKYLAKE, drift(True, 1e-3)) is None
    assert int8_drift_finding(None, "x86", SKYLAKE, failed) is None  # a float model
    assert int8_drift_finding("qdq", "x86", [*SKYLAKE, "avx512_vnni"], failed) is None
    assert int8_drift_finding("qlinear", "arm", ["asimd"], failed) is None
    assert int8_drift_finding("qdq", "x86", SKYLAKE, None) is None  # no golden set


def test_the_finding_says_what_the_optimisation_check_showed():
    on, off = drift(False, 0.418), drift(True, 0.0175)
    found = int8_drift_finding("qdq", "x86", SKYLAKE, on, optimization_check(on, off, "all"))
    assert found["message"].endswith(
        "; with graph optimisation off the drift is within tolerance (max abs 0.0175 against "
        "0.418): the optimised int8 kernels cause it"
    )
    assert found["optimization_check"] == "optimized_kernels"
    both = optimization_check(on, drift(False, 0.41), "all")
    found = int8_drift_finding("qlinear", "x86", SKYLAKE, on, both)
    assert (
        "with graph optimisation off it drifts as well (max abs 0.41 against 0.418)"
        in (found["message"])
    )


def test_when_the_optimisation_check_cannot_run_it_says_why():
    from edgequal.agent.phases.qualification import optimization_check_skipped
    from edgequal.contract.plan import make_plan

    plan, measured = make_plan("quick", check_optimization=True), {"drift": drift(False, 0.4)}
    assert optimization_check_skipped(plan, "onnxruntime", measured) is None
    assert optimization_check_skipped(plan, "litert", measured) == (
        "graph optimisation is an onnxruntime setting; litert has none to turn off"
    )
    off = make_plan("quick", check_optimization=True, graph_optimization="disabled")
    assert optimization_check_skipped(off, "onnxruntime", measured) == (
        "the plan already measures with graph optimisation off"
    )
    assert optimization_check_skipped(plan, "onnxruntime", {}) == (
        "no drift to compare: the check needs a golden set of model inputs"
    )
