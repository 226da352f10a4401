"""Every example model through the real worker and runtime, and the ways a run can go wrong."""

from __future__ import annotations

import os
import signal
import threading
import time

import psutil
import pytest
from edgequal.agent.phases.qualification import run_measurement
from edgequal.agent.worker.jobs import WorkerJob, latency_settings
from edgequal.agent.worker.supervisor import Worker
from edgequal.contract.errors import BadInput, GoldenMismatch
from edgequal.contract.exit_codes import exit_code_for
from edgequal.contract.golden import GoldenCase, read_golden, write_golden
from edgequal.contract.plan import make_plan

# Every test here starts worker processes running real runtimes: the fast loop skips it.
pytestmark = pytest.mark.slow

RUNNABLE = [
    "classifier",
    "dynamic",
    "multi_input",
    "classifier_fp16",
    "classifier_tflite",
    "classifier_int8",
]


def assert_passed_or_explained(out: dict) -> None:
    """Passed; or, where a 0.5 s warm-up did not settle on a shared machine, a status whose
    cause the report's own evidence shows: inconclusive only when too few calls kept the
    CPU, degraded only for a warm-up that never settled on the calls that did."""
    causes = set()
    for entry in out["results"]["latency"]["per_shape"]:
        causes.add(entry["cause"])
        if entry["cause"] == "interference":
            ev = entry["interference"]
            assert (
                ev["runq_wait_share"] >= 0.05
                or ev["steal_share"] >= 0.02
                or ev["other_cpus"] >= 0.5
            ), ev
    if out["status"] == "passed":
        return
    assert out["status"] in ("degraded", "inconclusive"), out["reason"]
    short = [
        e for e in out["results"]["latency"]["per_shape"] if not e["preemption"]["clean_enough"]
    ]
    assert (out["status"] == "inconclusive") == bool(short)
    if short:
        assert "calls kept the CPU" in out["reason"], out["reason"]
    else:
        assert "never reached a steady state" in out["reason"], out["reason"]


@pytest.mark.parametrize("name", RUNNABLE)
def test_every_example_model_qualifies_through_the_worker(
    name, example_models, golden_sets, fast_plan
):
    out = run_measurement(example_models[name], golden_sets[name], fast_plan)
    assert_passed_or_explained(out)
    results = out["results"]
    expected_runtime = (
        "litert" if name in ("classifier_tflite", "classifier_int8") else "onnxruntime"
    )
    assert results["runtime"]["runtime"] == expected_runtime
    cold = results["cold_load"]
    assert len(cold["runs"]) == 1
    for key in ("import_ms", "load_ms", "first_inference_ms", "total_ms"):
        assert cold[key]["median"] > 0
    run = cold["runs"][0]
    assert run["total_ms"] >= run["import_ms"] + run["load_ms"] + run["first_inference_ms"]
    assert cold["page_cache_evicted"] is True
    shapes = results["latency"]["per_shape"]
    assert len(shapes) == (3 if name == "dynamic" else 1)
    for entry in shapes:
        s = entry["summary"]
        assert s["count"] >= 50
        assert 0 < s["min_ms"] <= s["p50_ms"] <= s["p90_ms"] <= s["max_ms"]
        assert s["p50_ci_ms"][0] <= s["p50_ms"] <= s["p50_ci_ms"][1]
    drift = results["drift"]
    # The reference came from the same runtime on the same machine: outputs are identical.
    assert drift["passed"]
    for o in drift["outputs"].values():
        assert o["max_abs"] == 0.0 and o["nan_count"] == 0
    assert results["memory"]["peak_rss_bytes"] > results["memory"]["rss_added_by_load_bytes"] > 0
    # The latency phase ran in the cold load's process, the model it loaded kept: its
    # memory figures are that load's (a process of its own would measure its own load).
    assert results["memory"]["rss_added_by_load_bytes"] == run["rss_added_by_load_bytes"]


def test_the_last_cold_load_process_runs_the_warm_phase_and_none_is_left(
    example_models, quick_plan, local_agents
):
    """With three cold loads, the third process stays for the latency phase (one process
    start less a run: seconds on a small board); the first two end at their result. A
    run cancelled after its cold load ends the kept process too: none is left behind."""
    plan = quick_plan(cold_runs=3)
    out = run_measurement(example_models["micro"], None, plan)
    runs = out["results"]["cold_load"]["runs"]
    assert len(runs) == 3
    memory = out["results"]["memory"]
    assert memory["rss_added_by_load_bytes"] == runs[2]["rss_added_by_load_bytes"]
    assert all(r["process_to_result_ms"] >= r["total_ms"] for r in runs)
    assert local_agents.worker_processes(psutil.Process()) == []
    cancel = threading.Event()

    def cancel_after_cold_load(event: dict) -> None:
        if event.get("phase") == "cold_load" and event.get("state") == "done":
            cancel.set()

    out = run_measurement(
        example_models["micro"], None, plan, on_event=cancel_after_cold_load, cancel=cancel
    )
    assert out["status"] == "incomplete" and "latency" not in out["results"]
    assert len(out["results"]["cold_load"]["runs"]) == 3
    deadline = time.monotonic() + 10
    while local_agents.worker_processes(psutil.Process()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert local_agents.worker_processes(psutil.Process()) == []


def test_raw_samples_are_kept_and_match_the_summary(example_models, fast_plan):
    import base64

    import numpy as np

    out = run_measurement(example_models["micro"], None, fast_plan)
    entry = out["results"]["latency"]["per_shape"][0]
    samples = np.frombuffer(base64.b64decode(entry["samples_ns_b64"]), dtype="<i8")
    assert len(samples) == entry["summary"]["count"]
    assert samples.min() / 1e6 == pytest.approx(entry["summary"]["min_ms"], abs=1e-6)
    assert samples.max() / 1e6 == pytest.approx(entry["summary"]["max_ms"], abs=1e-6)


def test_latency_stop_rule_needs_both_runs_and_seconds(example_models):
    plan = make_plan(
        "quick",
        cold_runs=1,
        warmup_min_runs=5,
        warmup_min_s=0.05,
        warmup_max_s=0.5,
        latency_min_runs=20,
        latency_min_s=0.5,
    )
    out = run_measurement(example_models["micro"], None, plan)
    entry = out["results"]["latency"]["per_shape"][0]
    s = entry["summary"]
    # micro runs in microseconds: the 20 runs come long before the 0.5 s, so the loop ran
    # on until the seconds were done too (the loop's own clock, whatever the machine's load).
    assert s["count"] > 20
    # ... unless it reached the plan's cap of raw samples first (docs/measurement.md).
    assert entry["loop_s"] >= 0.5 or s["count"] == out["plan"]["latency_max_runs"]
    assert s["count"] * s["mean_ms"] <= entry["loop_s"] * 1e3  # timed calls fit in the loop


def test_unsupported_operator_is_a_finding_with_its_name(example_models, fast_plan):
    out = run_measurement(example_models["unsupported_op"], None, fast_plan)
    assert out["status"] == "failed"
    finding = out["findings"][0]
    assert finding["kind"] == "model_rejected"
    assert "Frobnicate" in finding["operator"]
    assert "onnxruntime" in finding["message"]
    import onnxruntime

    assert onnxruntime.__version__ in finding["message"]


@pytest.mark.parametrize("kind", ["empty", "truncated", "random"])
@pytest.mark.parametrize("model", ["classifier", "classifier_tflite"])
def test_broken_model_files_are_rejected_cleanly(
    kind, model, example_models, tmp_path, fast_plan, corrupt_model_bytes
):
    src = example_models[model]
    bad = corrupt_model_bytes(kind, src, tmp_path / f"bad{src.suffix}")
    out = run_measurement(bad, None, fast_plan)
    assert out["status"] == "failed"
    assert out["findings"][0]["kind"] == "model_rejected"
    assert out["findings"][0]["phase"] == "cold_load"
    assert "rejected the model" in out["findings"][0]["message"]


def test_nan_output_without_a_golden_set_is_a_finding(example_models, fast_plan):
    out = run_measurement(example_models["nan_output"], None, fast_plan)
    assert out["status"] == "failed"
    finding = out["findings"][0]
    assert finding["kind"] == "nonfinite_output" and finding["phase"] == "cold_load"
    # y = sqrt(x - 10) on synthesized inputs in [0, 1): all four values are NaN.
    assert finding["message"] == (
        "output 'y' holds 4 NaN and 0 Inf of 4 values on the first inference"
    )
    assert exit_code_for(out["status"], out["findings"]) == 1


def test_nan_output_fails_drift(example_models, tmp_path, fast_plan):
    import numpy as np

    model = example_models["nan_output"]
    # A reference that a healthy model would produce; the device gives NaN.
    x = np.full((1, 4), 14.0, dtype=np.float32)
    manifest = {
        "inputs": [{"name": "x", "dtype": "float32", "shape": [1, 4]}],
        "outputs": [{"name": "y", "dtype": "float32", "shape": [1, 4]}],
    }
    golden = tmp_path / "g.npz"
    write_golden(
        golden, manifest, [GoldenCase("c0", {"x": np.zeros((1, 4), np.float32)}, {"y": x})]
    )
    out = run_measurement(model, golden, fast_plan)
    assert out["status"] == "failed"
    y = out["results"]["drift"]["outputs"]["y"]
    assert y["nan_count"] == 4 and not y["passed"]


def _golden_with(tmp_path, golden_path, mutate):
    g = read_golden(golden_path)
    for case in g.cases:
        mutate(case)
    path = tmp_path / "mutated.npz"
    write_golden(path, g.manifest, g.cases)
    return path


def test_golden_with_wrong_dtype_names_the_input(example_models, golden_sets, tmp_path, fast_plan):
    path = _golden_with(
        tmp_path,
        golden_sets["classifier"],
        lambda c: c.inputs.update(image=c.inputs["image"].astype("float64")),
    )
    with pytest.raises(
        GoldenMismatch,
        match=r"input 'image': model expects float32 \[1,3,32,32\], file holds float64 \[1,3,32,32\]",
    ):
        run_measurement(example_models["classifier"], path, fast_plan)


def test_golden_with_wrong_shape_names_the_input(example_models, golden_sets, tmp_path, fast_plan):
    path = _golden_with(
        tmp_path,
        golden_sets["classifier"],
        lambda c: c.inputs.update(image=c.inputs["image"][:, :, :16]),
    )
    with pytest.raises(
        GoldenMismatch,
        match=r"model expects float32 \[1,3,32,32\], file holds float32 \[1,3,16,32\]",
    ):
        run_measurement(example_models["classifier"], path, fast_plan)


def test_golden_with_missing_input_names_it(example_models, golden_sets, tmp_path, fast_plan):
    path = _golden_with(tmp_path, golden_sets["multi_input"], lambda c: c.inputs.pop("scale"))
    with pytest.raises(GoldenMismatch, match=r"'scale' is missing: model expects int64 \[\]"):
        run_measurement(example_models["multi_input"], path, fast_plan)


def test_dynamic_model_without_shape_asks_for_one(example_models, fast_plan):
    with pytest.raises(BadInput, match="dynamic dimensions") as e:
        run_measurement(example_models["dynamic"], None, fast_plan)
    assert "--shape image=" in e.value.hint


def test_dynamic_model_with_shape(example_models):
    plan = make_plan(
        "quick",
        cold_runs=1,
        warmup_min_s=0.05,
        warmup_max_s=0.5,
        latency_min_runs=20,
        latency_min_s=0.05,
        shapes={"image": [2, 3, 20, 24]},
    )
    out = run_measurement(example_models["dynamic"], None, plan)
    assert_passed_or_explained(out)
    assert out["results"]["latency"]["per_shape"][0]["shape"] == "image=2x3x20x24"


def test_unknown_runtime_is_bad_input():
    with pytest.raises(BadInput, match="unknown runtime 'tensorrt'"):
        make_plan("quick", runtime="tensorrt")


def test_negative_duration_is_bad_input():
    with pytest.raises(BadInput, match="'latency_min_s' must not be negative"):
        make_plan("quick", latency_min_s=-1)
    from edgequal.contract.cli_args import parse_duration_s

    with pytest.raises(BadInput, match="must not be negative"):
        parse_duration_s("-5s")


def _warm_job(model, **plan_fields) -> dict:
    """The JSON of a ``warm`` worker job for ``model`` with the plan's latency fields set."""
    plan = make_plan("quick", **plan_fields)
    settings = latency_settings(plan)
    job = WorkerJob.for_phase("warm", model, None, plan, "onnxruntime", latency=settings)
    assert WorkerJob.from_json(job.to_json()) == job
    return job.to_json()


def test_worker_killed_by_a_signal_mid_latency_is_reported(example_models):
    job = _warm_job(
        example_models["mid"],
        threads=1,
        warmup_min_runs=5,
        warmup_min_s=0.05,
        warmup_max_s=1.0,
        latency_min_runs=100000,
        latency_min_s=30.0,
        latency_max_runs=100000,
    )
    seen = []
    worker = Worker(job, phase_timeout_s=60, on_event=seen.append)
    worker.start()

    def kill_when_timing():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if any(e.get("phase") == "latency" for e in seen):
                time.sleep(0.2)
                os.kill(worker.pid, signal.SIGSEGV)
                return
            time.sleep(0.02)

    threading.Thread(target=kill_when_timing, daemon=True).start()
    outcome = worker.wait()
    assert not outcome.ok
    assert outcome.cause == "signal"
    assert outcome.phase == "latency"
    assert "SIGSEGV" in outcome.error["message"]


def test_hang_is_killed_at_the_phase_timeout(example_models):
    job = _warm_job(
        example_models["micro"],
        warmup_min_runs=5,
        warmup_min_s=0.01,
        warmup_max_s=0.1,
        latency_min_runs=10,
        latency_min_s=60.0,
        latency_max_runs=1_000_000,
    )
    # The timeout bounds every phase, the start's interpreter and runtime import too
    # (about 0.65 CPU-s): 5 s asks an eighth of a CPU of it (three copies of the suite at
    # once leave a worker about a fifth), and the 60 s loop ends at its timeout, long
    # before its own end.
    worker = Worker(job, phase_timeout_s=5.0)
    worker.start()
    t0 = time.monotonic()
    outcome = worker.wait()
    assert time.monotonic() - t0 < 30
    assert outcome.cause == "timeout" and outcome.phase == "latency"
    with pytest.raises(ProcessLookupError):
        os.killpg(outcome.pid, 0)


def test_memory_limit_kills_the_worker(example_models):
    plan = make_plan("quick")
    job = WorkerJob.for_phase("cold_load", example_models["mid"], None, plan, "onnxruntime")
    # The worker's interpreter, numpy and onnxruntime alone take more than 30 MB.
    worker = Worker(job.to_json(), memory_limit_mb=30)
    worker.start()
    outcome = worker.wait()
    assert not outcome.ok
    assert outcome.cause == "memory"
    assert "30 MB memory limit" in outcome.error["message"]


def test_a_worker_holds_numpys_blas_to_one_thread_unless_the_operator_set_it(
    example_models, monkeypatch
):
    """Workers start with ``OPENBLAS_NUM_THREADS=1`` (``runtimes.child_env``): numpy's idle
    BLAS threads would spin beside the runtime's import and load while the cold load is
    timed. An operator's own setting is kept."""
    job = _warm_job(example_models["micro"], latency_min_runs=100000, latency_min_s=30.0)
    for operators, expected in ((None, "1"), ("3", "3")):
        if operators is None:
            monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
        else:
            monkeypatch.setenv("OPENBLAS_NUM_THREADS", operators)
        worker = Worker(job, phase_timeout_s=60)
        worker.start()
        try:
            environ = psutil.Process(worker.pid).environ()
        finally:
            worker.cancel.set()
            worker.wait()
        assert environ["OPENBLAS_NUM_THREADS"] == expected
