"""The ``divergence`` and ``kernel_path`` worker jobs on real models in real workers: a 1 %
weight change planted in one Conv of the example CNN is named against the golden set's
intermediate tensors (whole, and range by range under a small memory budget); the int8
example made to saturate is named at its saturating QuantizeLinear; two LiteRT op
resolvers agree node by node."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from edgequal.agent.worker.jobs import DivergenceSettings, WorkerJob
from edgequal.agent.worker.supervisor import run_job
from edgequal.contract.plan import make_plan
from edgequal.host.examples.catalog import build_example, example_inputs
from edgequal.host.golden import make_golden

# Workers: a CPU-second and more each.
pytestmark = pytest.mark.slow


def _planted(model: Path, out: Path, tensor: str, factor: float) -> Path:
    import onnx
    from onnx import numpy_helper

    m = onnx.load(model)
    for init in m.graph.initializer:
        if init.name == tensor:
            changed = (numpy_helper.to_array(init) * np.float32(factor)).astype(np.float32)
            init.CopyFrom(numpy_helper.from_array(changed, init.name))
    onnx.save(m, out)
    return out


def _run(model: Path, golden: Path, runtime: str = "onnxruntime", **settings) -> dict:
    job = WorkerJob.for_phase("divergence", model, golden, make_plan("quick"), runtime)
    ended = run_job(replace(job, divergence=DivergenceSettings(**settings)).to_json())
    assert ended.ok, ended.error
    return ended.result


@pytest.fixture(scope="module")
def mid(tmp_path_factory):
    d = tmp_path_factory.mktemp("mid")
    model = build_example("mid", d)
    golden = d / "g.npz"
    cases = {f"c{i}": feeds for i, feeds in enumerate(example_inputs("mid", 2))}
    make_golden(model, cases, golden, intermediates=True)
    return model, golden, _planted(model, d / "planted.onnx", "conv3.weight", 1.01)


def test_a_planted_weight_change_is_named_against_the_golden_intermediates(mid):
    _, golden, planted = mid
    out = _run(planted, golden, case="c1")
    loc = out["localization"]
    assert out["ranges"] == 1 and out["reproduced"] is True
    assert loc["found"] and loc["node"] == "conv3" and loc["op_type"] == "Conv"
    assert loc["error_before"] == 0.0  # relu2, its input, is the reference's exactly
    assert loc["ratio"] > 3  # a 1 % change against a 0.1 % tolerance
    assert [c["node"] for c in loc["curve"] if c["divergent"]][0] == "conv3"
    assert not any(c["divergent"] for c in loc["curve"][: loc["curve"].index(
        next(c for c in loc["curve"] if c["node"] == "conv3"))])  # fmt: skip


def test_range_by_range_under_a_small_budget_names_the_same_node(mid):
    _, golden, planted = mid
    out = _run(planted, golden, case="c1", budget_bytes=300_000)
    assert out["ranges"] > 2 and out["ranges_run"] < out["ranges"]  # stopped at the find
    assert out["kept_bytes"] > out["budget_bytes"]
    assert out["localization"]["node"] == "conv3"


def test_the_unchanged_model_against_its_own_intermediates_agrees(mid):
    model, golden, _ = mid
    loc = _run(model, golden, case="c0")["localization"]
    assert not loc["found"] and loc["compared"] == 16 and loc["skipped"] == 0


def test_the_int8_example_made_to_saturate_is_named_at_its_first_saturating_node(tmp_path):
    model = build_example("classifier_qdq", tmp_path)
    golden = tmp_path / "g.npz"
    cases = {f"c{i}": feeds for i, feeds in enumerate(example_inputs("classifier_qdq", 2))}
    make_golden(model, cases, golden, intermediates=True)
    # The ReLU's quantization scale an eighth of the calibrated one: its uint8 output clips.
    saturating = _planted(model, tmp_path / "sat.onnx", "relu.scale", 1 / 8)
    loc = _run(saturating, golden, case="c0")["localization"]
    assert loc["found"] and loc["op_type"] == "QuantizeLinear" and loc["output"] == "relu_q"
    assert loc["saturation"]["dtype"] == "uint8" and loc["saturation"]["saturated"]


def test_two_litert_op_resolvers_agree_node_by_node(tmp_path):
    model = build_example("classifier_tflite", tmp_path)
    golden = tmp_path / "g.npz"
    make_golden(
        model, {"c0": example_inputs("classifier_tflite", 1)[0]}, golden, intermediates=True
    )
    reference = {"graph_optimization": "all", "providers": None, "op_resolver": "builtin-ref"}
    job = WorkerJob.for_phase("divergence", model, golden, make_plan("quick"), "litert")
    job = replace(
        job,
        op_resolver="auto",
        divergence=DivergenceSettings(case="c0", reference=reference, reference_label="ref"),
    )
    ended = run_job(job.to_json())
    assert ended.ok, ended.error
    loc = ended.result["localization"]
    assert not loc["found"] and loc["compared"] >= 3
    assert {c["op_type"] for c in loc["curve"]} >= {"CONV_2D", "FULLY_CONNECTED"}
    # And against the golden set's tensors, which the host's LiteRT recorded the same way.
    against_golden = _run(model, golden, "litert", case="c0")["localization"]
    assert not against_golden["found"] and against_golden["compared"] == loc["compared"]


def test_a_divergence_keeping_tensors_prevents_is_bisected_to_its_fused_node(tmp_path):
    """The int8 example with 8-bit weights: on x86 without VNNI onnxruntime's fused int8
    conv saturates u8×s8 products (docs/measurement.md); with every tensor kept nothing
    fuses and nothing differs, so the node is found by bisecting how much is kept. Other
    CPUs' kernels do not saturate: nothing to localise there."""
    from edgequal.agent.runtimes import RuntimeOptions, runtime_class
    from edgequal.host.examples.onnx_models import build_classifier_qdq

    model = tmp_path / "q8.onnx"
    build_classifier_qdq(model, "8-bit weights", weight_qmax=127)
    feeds = example_inputs("classifier", 4)
    runs = {}
    for level in ("disabled", "all"):
        rt = runtime_class("onnxruntime")(RuntimeOptions(graph_optimization=level))
        rt.load(model)
        runs[level] = [rt.run(f)["score"] for f in feeds]
    worst = max(range(4), key=lambda i: float(np.abs(runs["all"][i] - runs["disabled"][i]).max()))
    if float(np.abs(runs["all"][worst] - runs["disabled"][worst]).max()) < 1e-3:
        pytest.skip("this CPU's fused int8 kernels agree with the unfused ones")
    golden = tmp_path / "g.npz"
    make_golden(model, {f"c{i}": f for i, f in enumerate(feeds)}, golden)
    reference = {"graph_optimization": "disabled", "providers": None, "op_resolver": None}
    job = WorkerJob.for_phase("divergence", model, golden, make_plan("quick"), "onnxruntime")
    settings = DivergenceSettings(case=f"c{worst}", reference=reference, reference_label="ref")
    ended = run_job(replace(job, graph_optimization="all", divergence=settings).to_json())
    assert ended.ok, ended.error
    out = ended.result
    assert out["reproduced"] is False and not out["localization"]["found"]
    assert out["fusion"]["node"] == "conv" and out["fusion"]["op_type"] == "Conv"
    assert out["fusion"]["sessions"] <= 6  # log2 of 18 nodes, and the run with none kept
