"""int8 models and the CPU that runs them: which form a graph is quantized in, what drift on
x86 without VNNI most likely means, and what re-measuring with graph optimisation off shows.

Pure functions over a model's node operator types, the fingerprint's CPU fields and drift
results (docs/measurement.md "int8 on x86 without VNNI"). The worker lists the operator
types (``runtimes/onnx_graph.py``); nothing here imports a runtime.

Why it matters: onnxruntime's u8×s8 kernels on x86 without VNNI (AVX2, AVX-512BW) multiply
with ``vpmaddubsw``, which adds two adjacent products into an int16 that saturates at
±32767; with uint8 activations up to 255 and 8-bit weights a pair can reach 64770. With
VNNI (``vpdpbusd``) and on arm64 the sums are exact int32. Graph optimisation is what
turns a QDQ graph into those kernels: with it off, onnxruntime runs the graph's
QuantizeLinear/DequantizeLinear and float kernels, which cannot saturate.
"""

from __future__ import annotations

from collections.abc import Iterable

VNNI_FLAGS = ("avx512_vnni", "avx_vnni")
"""Either gives x86 an exact u8×s8 dot product into int32 (``vpdpbusd``)."""


def lacks_vnni(isa: str | None, flags: list[str] | None) -> bool:
    """True for an x86 CPU whose recorded flags have neither ``avx512_vnni`` nor ``avx_vnni``:
    onnxruntime's u8×s8 kernels there add pairs of products in saturating int16."""
    return isa == "x86" and flags is not None and not any(f in flags for f in VNNI_FLAGS)


QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})
INTEGER_OPS = frozenset(
    {
        "QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger",
        # com.microsoft contrib ops a quantizer or onnxruntime's optimiser writes
        "QGemm", "QLinearAdd", "QLinearMul", "QLinearConcat", "QLinearSigmoid",
        "QLinearLeakyRelu", "QLinearGlobalAveragePool", "QLinearAveragePool",
        "QLinearSoftmax", "QAttention", "DynamicQuantizeMatMul",
    }
)  # fmt: skip

SATURATION_CAUSE = (
    "x86 without VNNI: u8×s8 products may saturate; quantize with reduce_range or s8 activations"
)
FINDING_KIND = "int8_without_vnni"


def quantization_form(op_types: Iterable[str]) -> str | None:
    """``"qlinear"`` for a graph with integer operators (QLinearConv, MatMulInteger, …),
    ``"qdq"`` for QuantizeLinear/DequantizeLinear pairs around float operators, None for a
    float graph (DequantizeLinear alone, weights stored in int8, quantizes no activation)."""
    ops = set(op_types)
    if ops & INTEGER_OPS:
        return "qlinear"
    if ops >= QDQ_OPS:
        return "qdq"
    return None


def worst_max_abs(drift: dict | None) -> float | None:
    """The largest ``max_abs`` over a drift result's outputs (None when none has one)."""
    values = [o.get("max_abs") for o in ((drift or {}).get("outputs") or {}).values()]
    values = [v for v in values if v is not None]
    return max(values) if values else None


def _flips(drift: dict | None) -> list[str] | None:
    decisions = (drift or {}).get("decisions")
    return list(decisions["flips"]) if decisions else None


def optimization_check(optimized: dict, unoptimized: dict, level: str) -> dict:
    """Drift at the plan's graph optimisation level (``level``) beside drift with it off.

    ``cause`` says what the two show: ``optimized_kernels`` when the drift passes with
    optimisation off and fails with it on (the kernels optimisation chose make it),
    ``not_optimization`` when it fails either way, ``none`` when it passes at the plan's
    level. ``unoptimized`` is kept whole (the report's drift shape).
    """
    if optimized.get("passed", True):
        cause = "none"
    elif unoptimized.get("passed", True):
        cause = "optimized_kernels"
    else:
        cause = "not_optimization"
    return {
        "graph_optimization": "disabled",
        "compared_with": level,
        "cause": cause,
        "max_abs": worst_max_abs(optimized),
        "max_abs_unoptimized": worst_max_abs(unoptimized),
        "flips": _flips(optimized),
        "flips_unoptimized": _flips(unoptimized),
        "drift": unoptimized,
    }


_CHECK_WORDS = {
    "optimized_kernels": "with graph optimisation off the drift is within tolerance "
    "(max abs {off:.3g} against {on:.3g}): the optimised int8 kernels cause it",
    "not_optimization": "with graph optimisation off it drifts as well (max abs {off:.3g} "
    "against {on:.3g}): the quantization itself, not the optimised kernels, causes it",
}


def int8_drift_finding(
    form: str | None,
    cpu_isa: str | None,
    cpu_flags: list[str] | None,
    drift: dict | None,
    check: dict | None = None,
    runtime: str = "onnxruntime",
) -> dict | None:
    """The finding naming the likely cause when an int8 model (``form`` "qdq" or "qlinear")
    drifted beyond its tolerance on an x86 CPU whose flags have no VNNI; None otherwise.

    ``check`` (:func:`optimization_check`), when the plan asked for it, adds what the
    re-measure with optimisation off showed to the message.
    """
    if form is None or drift is None or drift.get("passed", True):
        return None
    if not lacks_vnni(cpu_isa, cpu_flags):
        return None
    message = f"int8 ({form}) outputs drifted beyond tolerance; likely cause {SATURATION_CAUSE}"
    finding = {
        "phase": "drift",
        "cause": "cpu",
        "kind": FINDING_KIND,
        "message": message,
        "runtime": runtime,
        "quantization": form,
        "hint": "re-run with --check-optimization to see whether the optimised kernels "
        "cause it, or quantize with reduce_range (7-bit weights) or s8 activations",
    }
    if check is not None and check["cause"] in _CHECK_WORDS:
        on, off = check["max_abs"] or 0.0, check["max_abs_unoptimized"] or 0.0
        finding["message"] += "; " + _CHECK_WORDS[check["cause"]].format(on=on, off=off)
        finding["optimization_check"] = check["cause"]
        finding["hint"] = "quantize with reduce_range (7-bit weights) or s8 activations"
    return finding
