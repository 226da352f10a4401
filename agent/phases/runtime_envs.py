"""One model under several runtime environments in one run (docs/measurement.md "Runtime
environments").

For the environments a plan names (``plan.runtime_envs``, resolved on the device by
``runtimes/envs.py``), in order, the first being the baseline:

1. cold load: ``plan.cold_runs`` fresh workers per environment, the environments
   alternating in ABBA order (``measure.runtime_envs.segment_order``);
2. warm latency: one ``env_segments`` worker per environment, each loaded and warmed up
   once, then ``plan.runtime_env_rounds`` timed segments each, in ABBA order, so a
   change of the board's state falls on every environment alike; one segment is the
   environment's share of the plan's latency runs and seconds;
3. drift: each environment against the golden set, and each against the first one
   (their outputs compared directly, with the decision flips between them);
4. operators (when the plan asks for the operator profile, ``plan.operator_profile``):
   one ``operators`` worker per environment, so the time by operator type of each
   runtime version sits beside the others (``edgequal bisect runtime`` diffs them).

The result holds one entry per environment in the shapes of the run's own
``cold_load``, ``latency``, ``drift`` and ``memory``, and one ``pairs`` entry per
environment after the first: p50 and p99 ratios with 95 % intervals, the cold-load
ratio, the rounds in which it was slower, the drift and flips between the two. A
worker that fails is a finding naming its environment; the others are still measured.
"""

from __future__ import annotations

import queue
import tempfile
import threading
from pathlib import Path

import numpy as np
from edgequal.contract.plan import Plan, loop_limit_s
from edgequal.contract.stats import summarize_latency

from ..measure.latency import encode_samples
from ..measure.runtime_envs import (
    latency_ratios,
    pair_interference,
    rounds_slower,
    segment_budget,
    segment_order,
)
from ..worker.jobs import ScenarioSettings, WorkerJob, latency_settings
from ..worker.supervisor import Worker
from .cold_load import cold_load_once, summarize_cold_runs
from .workers import EventSink, finding_from, run_sampled

SETTLE_S = 0.1
"""Untimed calls before each segment: the worker sat idle while the others measured."""


def _decode(b64: str) -> np.ndarray:
    import base64

    return np.frombuffer(base64.b64decode(b64), dtype="<i8").astype(np.int64)


class _EnvWorker:
    """One environment's ``env_segments`` worker: its events in a queue, its outcome when done."""

    def __init__(self, env, job: WorkerJob, plan: Plan, cancel, timeout_s: float):
        self.env = env
        self.events: queue.Queue = queue.Queue()
        self.worker = Worker(
            job.to_json(),
            phase_timeout_s=timeout_s,
            memory_limit_mb=plan.memory_limit_mb,
            on_event=self.events.put,
            cancel=cancel,
            python=env.worker_python(),
            env=env.worker_env(),
        )
        self.outcome = None
        self.worker.start()
        self._thread = threading.Thread(target=self._wait, daemon=True)
        self._thread.start()

    def _wait(self) -> None:
        self.outcome = self.worker.wait()
        self.events.put(None)

    def await_event(self, kind: str) -> dict | None:
        """The next event of ``kind``; None when the worker ended first."""
        while True:
            event = self.events.get()
            if event is None:
                self.events.put(None)  # later calls see the end too
                return None
            if event.get("event") == kind:
                return event

    def finish(self, outputs_path: Path):
        """Ask for the drift and the saved outputs; the worker's outcome."""
        self.worker.send({"cmd": "finish", "outputs_path": str(outputs_path)})
        self._thread.join()
        return self.outcome

    def kill(self) -> None:
        self.worker.kill()
        self._thread.join(10)


def measure_runtime_envs(
    model, golden, plan: Plan, runtime: str, envs: list, emit: EventSink, cancel, findings
) -> dict:
    """Cold load, interleaved warm latency and drift under each of ``envs``; see the module doc."""
    entries = [{**env.fingerprint_entry(), "status": "ok"} for env in envs]
    failed: set[int] = set()

    def fail(i: int, finding: dict) -> None:
        finding = {**finding, "phase": "runtime_envs", "runtime_env": envs[i].name}
        finding["message"] = f"runtime environment {envs[i].name}: {finding['message']}"
        findings.append(finding)
        entries[i]["status"] = "failed"
        entries[i]["reason"] = finding["message"]
        failed.add(i)

    # 1. cold load, ABBA over the environments
    cold_runs: dict[int, list] = {i: [] for i in range(len(envs))}
    order = segment_order(len(envs), plan.cold_runs)
    for done, (_, i) in enumerate(order):
        if i in failed or cancel.is_set():
            continue
        emit(
            {
                "type": "progress",
                "phase": "runtime_envs",
                "done": done,
                "total": len(order),
                "message": f"cold start in {envs[i].name}",
            }
        )
        own: list[dict] = []
        r = cold_load_once(model, golden, plan, runtime, cancel, own, env=envs[i])
        if r is None:
            fail(i, own[0] if own else {"kind": "worker_failure", "message": "cold load failed"})
            continue
        cold_runs[i].append(r)
    for i, runs in cold_runs.items():
        if runs and i not in failed:
            entries[i]["cold_load"] = summarize_cold_runs(runs)

    # 2. warm latency, interleaved segments
    if not cancel.is_set():
        _interleaved(model, golden, plan, runtime, envs, entries, fail, failed, emit, cancel)
    pairs = _pairs(entries, envs, failed, golden, plan.seed)
    if plan.operator_profile:
        _operators(model, golden, plan, runtime, envs, entries, fail, failed, emit, cancel)
    return {
        "rounds": plan.runtime_env_rounds,
        "order": "ABBA",
        "baseline": envs[0].name,
        "environments": entries,
        "pairs": pairs,
    }


def _interleaved(model, golden, plan, runtime, envs, entries, fail, failed, emit, cancel):
    settings = latency_settings(plan)
    budget = segment_budget(
        plan.latency_min_runs, plan.latency_min_s, plan.latency_max_runs, plan.runtime_env_rounds
    )
    job = WorkerJob.for_phase("env_segments", model, golden, plan, runtime, latency=settings)
    timeout_s = plan.phase_timeout_s + loop_limit_s(
        plan.latency_min_s, plan.latency_max_s, plan.latency_max_extension
    )
    workers: dict[int, _EnvWorker] = {}
    samples: dict[int, list[np.ndarray]] = {i: [] for i in range(len(envs))}
    segments: dict[int, list[dict]] = {i: [] for i in range(len(envs))}
    try:
        # One at a time: a warm-up never runs beside another environment's.
        for i, env in enumerate(envs):
            if i in failed:
                continue
            emit({"type": "progress", "phase": "runtime_envs", "message": f"loading {env.name}"})
            w = _EnvWorker(env, job, plan, cancel, timeout_s)
            workers[i] = w
            ready = w.await_event("ready")
            if ready is None:
                fail(i, finding_from(w.outcome, "runtime_envs", runtime))
                continue
            entries[i]["shape"] = ready.get("shape")
        order = segment_order(len(envs), plan.runtime_env_rounds)
        for index, (r, i) in enumerate(order):
            if i in failed or cancel.is_set():
                continue
            w = workers[i]
            emit(
                {
                    "type": "progress",
                    "phase": "runtime_envs",
                    "done": index,
                    "total": len(order),
                    "message": f"latency round {r + 1}/{plan.runtime_env_rounds} in {envs[i].name}",
                }
            )
            w.worker.send({"cmd": "segment", "index": index, "settle_s": SETTLE_S, **budget})
            seg = w.await_event("segment")
            if seg is None:
                fail(i, finding_from(w.outcome, "runtime_envs", runtime))
                continue
            taken = _decode(seg.pop("samples_ns_b64"))
            samples[i].append(taken)
            segments[i].append(
                {
                    "round": r,
                    "runs": int(seg["runs"]),
                    "p50_ms": round(float(np.median(taken)) / 1e6, 6) if taken.size else None,
                    "t0": seg["t0"],
                    "t1": seg["t1"],
                    "sched_ns": seg.get("sched_ns"),
                }
            )
        with tempfile.TemporaryDirectory(prefix="edgequal-envs-") as tmp:
            for i, w in workers.items():
                if i in failed or cancel.is_set():
                    continue
                path = Path(tmp) / f"{i}.npz"
                ended = w.finish(path)
                if not ended.ok:
                    fail(i, finding_from(ended, "runtime_envs", runtime))
                    continue
                _fill_entry(entries[i], ended.result, samples[i], segments[i], path)
    finally:
        for w in workers.values():
            w.kill()
    for i in range(len(envs)):
        entries[i]["_segments"] = samples[i]


def _operators(model, golden, plan, runtime, envs, entries, fail, failed, emit, cancel):
    """Each environment's operator profile (``entries[i]["operators"]``, the shape of the
    run's own ``operators``), one worker after another: none runs beside another."""
    job = WorkerJob.for_phase(
        "operators", model, golden, plan, runtime, scenario=ScenarioSettings.from_plan(plan)
    )
    for i, env in enumerate(envs):
        if i in failed or cancel.is_set():
            continue
        emit({"type": "progress", "phase": "runtime_envs", "message": f"operators in {env.name}"})
        ended, _, _ = run_sampled(
            job,
            phase_timeout_s=plan.phase_timeout_s,
            memory_limit_mb=plan.memory_limit_mb,
            cancel=cancel,
            python=env.worker_python(),
            env=env.worker_env(),
        )
        if not ended.ok:
            fail(i, finding_from(ended, "runtime_envs", runtime))
            continue
        entries[i]["operators"] = {k: v for k, v in ended.result.items() if k != "runtime"}


def _fill_entry(entry: dict, result: dict, samples, segments, outputs_path: Path) -> None:
    """An environment's entry in the shapes of the run's own results."""
    joined = np.concatenate(samples) if samples else np.empty(0, dtype=np.int64)
    entry["runtime_info"] = result["runtime"]
    entry["model_io"] = {"inputs": result["inputs"], "outputs": result["outputs"]}
    entry["latency"] = {
        "per_shape": [
            {
                "shape": result["shape"],
                "warmup": result["warmup"],
                "summary": summarize_latency(joined) if joined.size else {"count": 0},
                "samples_ns_b64": encode_samples(joined),
                "segments": segments,
            }
        ]
    }
    if "drift" in result:
        entry["drift"] = result["drift"]
    entry["memory"] = result["memory"]
    with np.load(outputs_path) as saved:
        entry["_outputs"] = {
            case["case"]: {name: saved[key] for name, key in case["outputs"].items()}
            for case in result["saved_outputs"]
        }


def _pairs(entries: list[dict], envs: list, failed: set, golden, seed: int) -> list[dict]:
    """Each environment after the first against the first: latency, cold load, drift."""
    from edgequal.contract.drift_rules import parse_decision_rule

    from ..measure.drift import drift_report, output_tolerances

    tolerances_of, rule = {}, None
    if golden is not None:
        from edgequal.contract.golden import read_golden

        g = read_golden(Path(golden))
        tolerances_of = g.tolerances
        rule = parse_decision_rule(g.decision) if g.decision else None
    pairs = []
    base = entries[0]
    for i in range(1, len(entries)):
        cand = entries[i]
        pair = {"baseline": envs[0].name, "candidate": envs[i].name}
        if 0 in failed or i in failed or "latency" not in base or "latency" not in cand:
            pair["measured"] = False
            pairs.append(pair)
            continue
        pair["measured"] = True
        b_shape, c_shape = base["latency"]["per_shape"][0], cand["latency"]["per_shape"][0]
        pair.update(
            latency_ratios(
                b_shape["summary"], c_shape["summary"], base["_segments"], cand["_segments"], seed
            )
        )
        # Segments that waited for a CPU make the comparison the neighbour's: not decisive.
        pair["interference"] = pair_interference(b_shape["segments"], c_shape["segments"])
        pair["rounds_slower"] = rounds_slower(
            [s["p50_ms"] for s in b_shape["segments"]], [s["p50_ms"] for s in c_shape["segments"]]
        )
        for key in ("total_ms", "first_inference_ms", "load_ms"):
            a = (base.get("cold_load") or {}).get(key, {}).get("median")
            b = (cand.get("cold_load") or {}).get(key, {}).get("median")
            name = "cold_load_ratio" if key == "total_ms" else f"{key.removesuffix('_ms')}_ratio"
            pair[name] = round(b / a, 4) if a and b else None
        outputs = [(o["name"], o["dtype"]) for o in cand["model_io"]["outputs"]]
        cases = [
            (case, cand["_outputs"][case], base["_outputs"][case])
            for case in base["_outputs"]
            if case in cand["_outputs"]
        ]
        between = drift_report(cases, output_tolerances(outputs, tolerances_of), rule)
        pair["drift_between"] = between
        pair["flips_between"] = (between.get("decisions") or {}).get("flip_count", 0)
        pair["flipped_cases"] = (between.get("decisions") or {}).get("flips", [])
        pairs.append(pair)
    for entry in entries:
        entry.pop("_segments", None)
        entry.pop("_outputs", None)
    return pairs
