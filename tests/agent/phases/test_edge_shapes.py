"""Edges of the input range: the dynamic example model at its largest and smallest declared
sizes through the real worker and onnxruntime, a shape the runtime refuses, a shape over
the memory limit, and edge shapes recorded in a golden set and repeated by a later run."""

from __future__ import annotations

import json
import re
import threading
import zipfile

import numpy as np
import pytest
from edgequal.agent.phases.edge_shapes import planned_edge_shapes, stops_later_phases
from edgequal.agent.phases.qualification import run_measurement
from edgequal.agent.worker.jobs import EdgeSettings, WorkerJob
from edgequal.cli.main import main as edgequal_main
from edgequal.contract.errors import BadInput
from edgequal.contract.exit_codes import exit_code_for
from edgequal.contract.golden import (
    GoldenCase,
    golden_edge_shapes,
    read_golden,
    read_manifest,
    write_golden,
)
from edgequal.contract.plan import make_plan
from edgequal.host.examples.catalog import example_inputs

# The runs of the dynamic model are short; the edges are timed for 0.2 s each.
EDGE_PLAN = {
    "cold_runs": 1,
    "warmup_min_runs": 5,
    "warmup_min_s": 0.05,
    "warmup_max_s": 0.3,
    "latency_min_runs": 20,
    "latency_min_s": 0.05,
    "sustain_s": 0.0,
    "edge_latency_s": 0.2,
    "edge_min_runs": 3,
}
LARGEST = [1, 3, 512, 512]
SMALLEST = [1, 3, 1, 1]
EMPTY = [1, 3, 0, 0]  # onnxruntime's Conv refuses an image with no pixels
HUGE = [1, 3, 2048, 2048]  # its input is 48 MB, its Conv output 128 MB: the run takes over 250 MB
MEMORY_LIMIT_MB = 200  # the worker with onnxruntime loaded takes about 75 MB


@pytest.fixture(scope="module")
def edge_run(example_models):
    """One qualification of the dynamic model with four edge shapes, then the operator
    profile (a phase after the edges: it must still run after their findings)."""
    plan = make_plan(
        "quick",
        **EDGE_PLAN,
        shapes={"image": [1, 3, 32, 32]},
        memory_limit_mb=MEMORY_LIMIT_MB,
        operator_profile=True,
        edge_shapes=[
            {"label": "largest", "shapes": {"image": LARGEST}},
            {"label": "smallest", "shapes": {"image": SMALLEST}},
            {"label": "empty", "shapes": {"image": EMPTY}},
            {"label": "huge", "shapes": {"image": HUGE}},
        ],
    )
    events: list[dict] = []
    out = run_measurement(example_models["dynamic"], None, plan, on_event=events.append)
    return out, events


def _entries(out: dict) -> dict[str, dict]:
    return {e["label"]: e for e in out["results"]["edge_shapes"]}


@pytest.mark.slow
def test_largest_and_smallest_sizes_have_latency_memory_and_outputs(edge_run):
    out, events = edge_run
    assert [e["label"] for e in out["results"]["edge_shapes"]] == [
        "largest",
        "smallest",
        "empty",
        "huge",
    ]
    entries = _entries(out)
    for label, shape in (("largest", LARGEST), ("smallest", SMALLEST)):
        e = entries[label]
        assert e["ok"] is True and e["source"] == "plan"
        assert e["shapes"] == {"image": shape}
        assert e["runs"] >= EDGE_PLAN["edge_min_runs"]
        s = e["summary"]
        assert s["count"] == e["runs"]
        assert 0 < s["min_ms"] <= s["p50_ms"] <= s["max_ms"]
        assert s["min_ms"] <= s["mean_ms"] <= s["max_ms"]
        # The embedding is [batch, 8] whatever the image size.
        assert e["outputs"] == {"embedding": [1, 8]}
        assert e["peak_rss_bytes"] > e["rss_added_by_inference_bytes"]
    largest, smallest = entries["largest"], entries["smallest"]
    # The largest image is held for every run: its float32 bytes alone are 3 MB.
    assert largest["rss_added_by_inference_bytes"] >= np.prod(LARGEST) * 4
    assert largest["peak_rss_bytes"] >= smallest["peak_rss_bytes"]
    # Within one run: a 512x512 image takes longer than a single pixel.
    assert largest["summary"]["min_ms"] > smallest["summary"]["p50_ms"]
    progress = [e for e in events if e.get("phase") == "edge_shapes" and e["type"] == "progress"]
    assert {"edge shape largest (1/4)", "largest: first_run", "smallest: latency"} <= {
        e["message"] for e in progress
    }


@pytest.mark.slow
def test_a_shape_the_runtime_refuses_is_a_finding_and_the_others_are_still_measured(edge_run):
    out, _ = edge_run
    empty = _entries(out)["empty"]
    assert empty["ok"] is False and empty["cause"] == "error"
    assert "onnxruntime" in empty["message"]
    finding = next(f for f in out["findings"] if f["label"] == "empty")
    assert finding == {
        "phase": "edge_shapes",
        "kind": "edge_shape_failed",
        "label": "empty",
        "input": "image",
        "shape": EMPTY,
        "cause": "error",
        "message": f"edge shape 'empty' (image=1x3x0x0): {empty['message']}",
        "runtime": "onnxruntime",
    }
    # The shape after it was measured (and killed), and the phase after the edges ran.
    assert _entries(out)["huge"]["ok"] is False
    assert "operators" in out["results"] and "latency" in out["results"]
    assert out["status"] == "failed"
    assert out["reason"].startswith("edge shape 'empty' (image=1x3x0x0)")
    assert exit_code_for(out["status"], out["findings"]) == 1


@pytest.mark.slow
def test_a_shape_over_the_memory_limit_is_a_memory_finding(edge_run):
    out, _ = edge_run
    huge = _entries(out)["huge"]
    assert huge["ok"] is False and huge["cause"] == "memory"
    assert f"{MEMORY_LIMIT_MB} MB memory limit" in huge["message"]
    finding = next(f for f in out["findings"] if f["label"] == "huge")
    assert finding["cause"] == "memory" and finding["input"] == "image"
    assert finding["shape"] == HUGE
    assert [f["label"] for f in out["findings"]] == ["empty", "huge"]


def _golden_make(model, tmp_path, *flags) -> tuple[int, object]:
    inputs = tmp_path / "in.npz"
    np.savez(inputs, **example_inputs("dynamic", 1)[0])
    out = tmp_path / "g.npz"
    argv = ["golden", "make", str(model), "--inputs", str(inputs), *flags, "-o", str(out)]
    return edgequal_main(argv), out


@pytest.mark.slow
def test_golden_make_records_edge_shapes_and_a_later_run_repeats_them(
    example_models, tmp_path, capsys
):
    rc, golden = _golden_make(
        example_models["dynamic"],
        tmp_path,
        "--edge-shape",
        "one-pixel:image=1x3x1x1",
        "--edge-shape",
        "wide:image=1x3x16x96",
    )
    assert rc == 0, capsys.readouterr().err
    recorded = [
        {"label": "one-pixel", "shapes": {"image": [1, 3, 1, 1]}},
        {"label": "wide", "shapes": {"image": [1, 3, 16, 96]}},
    ]
    assert read_golden(golden).manifest["edge_shapes"] == recorded
    # The plan's own 'wide' replaces the recorded one; 'one-pixel' comes from the set.
    plan = make_plan(
        "quick", **EDGE_PLAN, edge_shapes=[{"label": "wide", "shapes": {"image": [1, 3, 8, 64]}}]
    )
    out = run_measurement(example_models["dynamic"], golden, plan)
    entries = out["results"]["edge_shapes"]
    assert [(e["label"], e["source"], e["ok"]) for e in entries] == [
        ("wide", "plan", True),
        ("one-pixel", "golden", True),
    ]
    assert entries[0]["shapes"] == {"image": [1, 3, 8, 64]}
    assert entries[1]["shapes"] == {"image": [1, 3, 1, 1]}
    assert all(e["runs"] >= EDGE_PLAN["edge_min_runs"] for e in entries)
    assert out["findings"] == [] and out["status"] != "failed"
    # The plan in the report is the plan as sent: the golden set's shapes are in the results.
    assert out["plan"]["edge_shapes"] == [{"label": "wide", "shapes": {"image": [1, 3, 8, 64]}}]


@pytest.mark.parametrize(
    "edges, message",
    [
        ([], "'edge_shapes' must be a non-empty list"),
        ([{"label": "a b", "shapes": {"x": [1]}}], "'edge_shapes[0].label' must be a short name"),
        ([{"label": "a", "shapes": {"x": [1]}}] * 2, "'edge_shapes' names 'a' twice"),
        ([{"label": "a", "shapes": {"x": [-1]}}], "'edge_shapes[0].shapes' must map input"),
        ([{"label": "a", "shapes": {}}], "'edge_shapes[0].shapes' must map input"),
        ([{"label": "a", "shapes": {"x": [1]}, "seconds": 3}], "'edge_shapes[0]' must be"),
        (
            [{"label": f"s{i}", "shapes": {"x": [i]}} for i in range(17)],
            "'edge_shapes' lists 17 shapes; at most 16",
        ),
    ],
)
def test_plan_edge_shapes_are_validated_by_field(edges, message):
    with pytest.raises(BadInput, match=re.escape("plan field " + message)):
        make_plan("quick", edge_shapes=edges)


def test_plan_edge_timing_fields_are_validated():
    with pytest.raises(BadInput, match="'edge_min_runs' must be at least 1"):
        make_plan("quick", edge_min_runs=0)
    with pytest.raises(BadInput, match="'edge_latency_s' must not be negative"):
        make_plan("quick", edge_latency_s=-1.0)
    plan = make_plan("quick", edge_shapes=[{"label": "empty", "shapes": {"tokens": [1, 0]}}])
    job = WorkerJob.for_phase(
        "edge_shape", "m.onnx", None, plan, "onnxruntime", edge=EdgeSettings("e", {"t": [0]}, 1, 2)
    )
    assert WorkerJob.from_json(json.loads(json.dumps(job.to_json()))) == job


def _golden(path, manifest: dict):
    write_golden(path, manifest, [GoldenCase("c0", {"x": np.zeros((1, 4), np.float32)})])
    return path


def test_the_plan_wins_over_the_golden_set_on_a_label(tmp_path):
    golden = _golden(
        tmp_path / "g.npz",
        {
            "edge_shapes": [
                {"label": "largest", "shapes": {"x": [1, 4096]}},
                {"label": "empty", "shapes": {"x": [1, 0]}},
            ]
        },
    )
    plan = make_plan("quick", edge_shapes=[{"label": "largest", "shapes": {"x": [1, 64]}}])
    assert planned_edge_shapes(plan, golden) == [
        {"label": "largest", "shapes": {"x": [1, 64]}, "source": "plan"},
        {"label": "empty", "shapes": {"x": [1, 0]}, "source": "golden"},
    ]
    assert planned_edge_shapes(make_plan("quick"), None) == []
    assert planned_edge_shapes(make_plan("quick"), _golden(tmp_path / "h.npz", {})) == []


@pytest.mark.parametrize(
    "value, field",
    [
        ("largest", "'edge_shapes' must be a non-empty list"),
        ([{"label": "big", "shapes": {"x": ["1"]}}], "'edge_shapes[0].shapes'"),
        ([{"label": "", "shapes": {"x": [1]}}], "'edge_shapes[0].label'"),
    ],
)
def test_a_bad_edge_shapes_manifest_is_refused_before_anything_runs(
    value, field, tmp_path, example_models
):
    golden = _golden(tmp_path / "g.npz", {"edge_shapes": value})
    with pytest.raises(BadInput, match=re.escape("manifest field " + field)):
        golden_edge_shapes(golden)
    with pytest.raises(BadInput, match="manifest field 'edge_shapes"):
        read_golden(golden)  # the worker's reader applies the same rule
    with pytest.raises(BadInput, match="manifest field 'edge_shapes"):
        run_measurement(example_models["micro"], golden, make_plan("quick"))


def test_the_manifest_is_read_without_loading_any_array(tmp_path):
    golden = _golden(tmp_path / "g.npz", {"edge_shapes": [{"label": "e", "shapes": {"x": [1, 0]}}]})
    # Replace the one input array by bytes that are no .npy at all: the manifest still reads.
    broken = tmp_path / "broken.npz"
    with zipfile.ZipFile(golden) as src, zipfile.ZipFile(broken, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, b"garbage" if info.filename.startswith("inputs/") else data)
    assert read_manifest(broken)["edge_shapes"] == [{"label": "e", "shapes": {"x": [1, 0]}}]
    with pytest.raises(BadInput, match="not a golden set"):
        read_golden(broken)
    not_zip = tmp_path / "not.npz"
    not_zip.write_bytes(b"PK but not really")
    with pytest.raises(BadInput, match="is not a golden set file"):
        read_manifest(not_zip)
    no_manifest = tmp_path / "none.npz"
    np.savez(no_manifest, x=np.zeros(3))
    with pytest.raises(BadInput, match="has no manifest"):
        read_manifest(no_manifest)


def test_only_failed_edge_shapes_let_later_phases_run():
    edge = {"phase": "edge_shapes", "kind": "edge_shape_failed", "message": "m"}
    assert not stops_later_phases([])
    assert not stops_later_phases([edge, edge])
    assert stops_later_phases([edge, {"phase": "latency", "kind": "worker_failure"}])


def _loaded(model):
    from edgequal.agent.runtimes import runtime_class

    cls = runtime_class("onnxruntime")
    cls.import_module()
    rt = cls()
    rt.load(model)
    return rt


def test_inputs_an_edge_shape_does_not_name_keep_the_main_shape(example_models, golden_sets):
    from edgequal.agent.worker.main import edge_feeds

    model = example_models["multi_input"]
    rt = _loaded(model)
    edge = EdgeSettings("wide", {"features": [1, 16]}, 0.1, 1)
    plan = make_plan("quick")
    with_golden = WorkerJob.for_phase(
        "edge_shape", model, golden_sets["multi_input"], plan, "onnxruntime", edge=edge
    )
    feeds = edge_feeds(with_golden, rt)
    case0 = read_golden(golden_sets["multi_input"]).cases[0].inputs
    # 'scale' is golden case 0's own array; 'features' is synthesized at the edge's size.
    np.testing.assert_array_equal(feeds["scale"], case0["scale"])
    assert feeds["features"].shape == (1, 16) and feeds["features"].dtype == np.float32
    assert not np.array_equal(feeds["features"], case0["features"])
    without = WorkerJob.for_phase("edge_shape", model, None, plan, "onnxruntime", edge=edge)
    feeds = edge_feeds(without, rt)
    assert feeds["scale"].shape == () and feeds["scale"].dtype == np.int64
    assert list(feeds) == ["features", "scale"]
    rt.close()


def test_zero_sized_dimensions_are_synthesized(example_models):
    from edgequal.agent.worker.main import edge_feeds

    model = example_models["dynamic"]
    rt = _loaded(model)
    edge = EdgeSettings("empty", {"image": [0, 3, 5, 0]}, 0.1, 1)
    job = WorkerJob.for_phase(
        "edge_shape", model, None, make_plan("quick"), "onnxruntime", edge=edge
    )
    assert edge_feeds(job, rt)["image"].shape == (0, 3, 5, 0)
    rt.close()


def test_a_worker_that_shows_no_progress_in_time_is_a_timeout_finding(example_models):
    from edgequal.agent.phases.edge_shapes import measure_edge_shapes

    # No interpreter starts, imports numpy and onnxruntime and loads a model in 10 ms.
    plan = make_plan("quick", phase_timeout_s=0.01, edge_latency_s=0.0)
    edges = [{"label": "any", "shapes": {"image": [1, 3, 8, 8]}, "source": "plan"}]
    findings: list[dict] = []
    entries = measure_edge_shapes(
        example_models["dynamic"],
        None,
        plan,
        "onnxruntime",
        edges,
        lambda e: None,
        threading.Event(),
        findings,
    )
    assert entries[0]["ok"] is False and entries[0]["cause"] == "timeout"
    assert findings[0]["message"] == f"edge shape 'any' (image=1x3x8x8): {entries[0]['message']}"
    assert entries[0]["message"].startswith("timeout")
    assert [(f["kind"], f["cause"], f["input"], f["shape"]) for f in findings] == [
        ("edge_shape_failed", "timeout", "image", [1, 3, 8, 8])
    ]


def test_an_edge_shape_must_fit_the_declared_inputs():
    from edgequal.contract.golden import edge_shape_misfit
    from edgequal.contract.tensors import TensorSpec

    specs = [TensorSpec("image", "float32", ["batch", 3, "height", "width"])]
    assert edge_shape_misfit({"image": [0, 3, 0, 0]}, specs) is None
    assert edge_shape_misfit({"image": [1, 4, 8, 8]}, specs) == {
        "input": "image",
        "message": "input 'image' is declared float32 [batch,3,height,width]; 1x4x8x8 does not fit it",
    }
    assert edge_shape_misfit({"image": [1, 3, 8]}, specs)["input"] == "image"
    assert edge_shape_misfit({"img": [1]}, specs) == {
        "input": "img",
        "message": "the model has no input 'img' (inputs: image)",
    }
