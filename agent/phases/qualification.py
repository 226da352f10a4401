"""One qualification, phase by phase: cold load, warm latency, drift, memory, the service
scenarios, edge shapes (``edge_shapes.py``), sustained (``sustained.py``).

Every phase runs in fresh worker processes (``jobs.WorkerJob``); this module starts
them, samples the competition for CPU from the agent while they run
(``workers.run_sampled``), hands the samples to the pure scoring in
``measure/``, and assembles the results object (schema
``edgequal.results/v1``, docs/report-schema.md). It never raises for trouble with
the model or the runtime: that becomes a finding and a status. It raises AgentError
only for a request that cannot start at all.
"""

from __future__ import annotations

import platform
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from edgequal.contract import __version__
from edgequal.contract.errors import BadInput
from edgequal.contract.plan import Plan
from edgequal.contract.preemption import decisive_summary
from edgequal.contract.runtimes import runtime_for, runtime_kind, runtimes_with
from edgequal.contract.stats import repeat_spread

from ..config import output_fault_setting, proc_root
from ..measure.quantization import int8_drift_finding, optimization_check
from ..measure.timed_outputs import timed_outputs_finding
from ..probes.contention import contention_unmeasurable
from ..probes.cooldown import wait_for_cooldown
from ..probes.fingerprint import fingerprint as probe_fingerprint
from ..probes.thermal import read_thermal
from ..worker.jobs import WorkerJob
from ..worker.supervisor import run_job
from .cold_load import measure_cold_load
from .edge_shapes import measure_edge_shapes, planned_edge_shapes, stops_later_phases
from .pipeline import golden_has_pipeline, measure_pipeline
from .scenarios import measure_scenario, planned_scenarios
from .sustained import measure_sustained
from .warm import measure_warm
from .workers import EventSink, finding_from

RESULTS_SCHEMA = "edgequal.results/v1"


def measure_unoptimized_drift(model, golden, plan: Plan, runtime, cancel, findings) -> dict | None:
    """The optimisation check: drift over the golden set once more, in a fresh worker with
    onnxruntime's graph optimisation off (None, with a finding, when that worker fails)."""
    job = replace(
        WorkerJob.for_phase("drift", model, golden, plan, runtime), graph_optimization="disabled"
    )
    ended = run_job(
        job.to_json(),
        phase_timeout_s=plan.phase_timeout_s,
        memory_limit_mb=plan.memory_limit_mb,
        cancel=cancel,
    )
    if not ended.ok:
        findings.append(finding_from(ended, "optimization_check", runtime))
        return None
    return ended.result["drift"]


def optimization_check_skipped(plan: Plan, runtime: str, results: dict) -> str | None:
    """Why the optimisation check the plan asks for cannot run here, or None when it can."""
    if not runtime_kind(runtime).graph_optimization:
        owners = " and ".join(runtimes_with("graph_optimization"))
        return f"graph optimisation is an {owners} setting; {runtime} has none to turn off"
    if plan.graph_optimization == "disabled":
        return "the plan already measures with graph optimisation off"
    if results.get("drift") is None or "pipeline" in results:
        return "no drift to compare: the check needs a golden set of model inputs"
    return None


def check_providers(runtime: str, plan: Plan, cancel=None) -> dict | None:
    """Refuse, before anything runs, execution providers this device does not have.

    The agent imports no runtime itself: a short worker asks onnxruntime's
    ``get_available_providers()``. Returns what it said (None when none were asked).
    """
    if not plan.providers:
        return None
    if not runtime_kind(runtime).execution_providers:
        raise BadInput(
            f"execution providers apply to {' and '.join(runtimes_with('execution_providers'))}; "
            f"this model runs on {runtime}",
            hint="drop --providers (LiteRT's XNNPACK delegate is on unless --no-xnnpack)",
        )
    ended = run_job(
        WorkerJob.for_phase("providers", Path("-"), None, plan, runtime).to_json(),
        phase_timeout_s=plan.phase_timeout_s,
        cancel=cancel,
    )
    if not ended.ok:
        return None  # the runtime itself is broken: the cold load reports that as a finding
    offered = ended.result["available"] or []
    missing = [p for p in plan.providers if p not in offered]
    if missing:
        raise BadInput(
            f"execution provider {missing[0]} is not installed on this device "
            f"(onnxruntime {ended.result['version']} offers {', '.join(offered)})",
            hint="drop it from --providers, or install the onnxruntime build that has it",
        )
    return ended.result


def decide_status(results: dict, findings: list[dict]) -> tuple[str, str | None]:
    """passed, degraded, inconclusive or failed, with the reason for anything but passed.

    failed: a phase could not complete (rejection, crash, timeout), drift out of
    tolerance, or a failed sustained verdict (throttling or under-voltage).
    inconclusive: a sustained drop that interference (other processes' CPU, run-queue
    wait, steal) explains, a latency shape that got too few calls that kept the CPU
    within the plan's limits, or an unsteady untagged latency phase (co-load) that
    interference explains: re-run on a quiet board.
    degraded: latency never steadied with no interference measured, the sustained
    verdict is degraded (throttled) or unexplained, or nodes fell back to the CPU under
    an accelerator provider the plan asked for.
    """
    if findings:
        return "failed", findings[0]["message"]
    drift = results.get("drift")
    if drift is not None and not drift.get("passed", True):
        return "failed", drift.get("reason") or "outputs drifted beyond tolerance"
    sustained = results.get("sustained") or {}
    verdict = sustained.get("verdict")
    if verdict == "failed":
        return "failed", f"sustained verdict failed: {sustained.get('reason') or 'throttling'}"
    interference, reasons = [], []
    for entry in (results.get("latency") or {}).get("per_shape", []):
        unsteady = not entry["warmup"]["steady"]
        pre = entry.get("preemption")
        if pre is not None:
            # Measured through interference: only too few clean calls leave it undecided.
            if not pre["clean_enough"]:
                bound = f" ({pre['limit_s']:g} s)" if pre.get("limit_s") else ""
                interference.append(
                    f"latency for {entry['shape']}: {pre['calls'] - pre['excluded']} of "
                    f"{pre['calls']} calls kept the CPU, {pre['needed']} needed within the "
                    f"plan's limits{bound}, while other processes took the CPU"
                )
            elif unsteady:
                busy = (
                    " while other processes took the CPU"
                    if entry.get("cause") == "interference"
                    else ""
                )
                reasons.append(
                    f"latency for {entry['shape']} never reached a steady state{busy} "
                    "(judged on the calls that kept the CPU)"
                )
        elif entry.get("cause") == "interference":
            what = "never reached a steady state" if unsteady else "has a heavy tail"
            interference.append(
                f"latency for {entry['shape']} {what} while other processes took the CPU"
            )
        elif unsteady:
            reasons.append(f"latency for {entry['shape']} never reached a steady state")
        if (entry.get("coload") or {}).get("cause") == "interference":
            interference.append(
                f"latency with co-load for {entry['shape']} ran while undeclared processes "
                "took the CPU"
            )
    if verdict == "inconclusive":
        why = str(sustained.get("reason") or "").removesuffix("; re-run on a quiet board")
        interference.append(f"sustained: {why}")
    if interference:
        return "inconclusive", "; ".join(interference) + "; re-run on a quiet board"
    if verdict in ("degraded", "unexplained"):
        reasons.append(f"sustained: {sustained.get('reason')}")
    fallback = (results.get("operators") or {}).get("fallback_finding")
    if fallback:  # a silent CPU fallback is what makes a board slow for a reason nobody sees
        reasons.append(fallback)
    if reasons:
        return "degraded", "; ".join(reasons)
    return "passed", None


def repeat_figures(results: dict) -> dict:
    """One run's figures that repeated runs compare: the first input shape's p50 and p99
    (the clean ones where they decide) and the sustained throughput, where measured."""
    per_shape = (results.get("latency") or {}).get("per_shape") or []
    out = {}
    if per_shape:
        s = decisive_summary(per_shape[0])
        out["p50_ms"], out["p99_ms"] = s.get("p50_ms"), s.get("p99_ms")
    sustained = results.get("sustained") or {}
    if sustained.get("sustained_per_s") is not None:
        out["sustained_per_s"] = sustained["sustained_per_s"]
    return out


def measure_repeats(results, plan, emit, cancel, root, latency, sustained) -> dict:
    """Runs 2..N of ``plan.repeat``: the cool-down (where the plan waits for one), then the
    warm latency phase again (and the sustained phase where planned), each run's figures
    kept (:func:`repeat_figures`; run 1's are the report's own), with their spread:
    ``{n, runs: [{run, cooldown, figures}], spread: {figure: stats.repeat_spread}}``.
    The report's other figures stay run 1's."""
    kept = (
        "latency", "sustained", "runtime", "model_io", "memory", "drift", "coload", "timed_outputs",
    )  # fmt: skip
    first = {k: results.get(k) for k in kept}
    runs = [{"run": 1, "cooldown": None, "figures": repeat_figures(results)}]
    idle_c = read_thermal(root)["authoritative_temp_c"]
    for i in range(2, plan.repeat + 1):
        if cancel.is_set():
            break
        cooldown = None
        if plan.cooldown:
            cooldown = wait_for_cooldown(
                lambda: read_thermal(root)["authoritative_temp_c"],
                idle_c,
                plan.cooldown_timeout_s,
                cancel=cancel,
            )
        emit({"type": "progress", "phase": "repeat", "message": f"run {i} of {plan.repeat}"})
        latency()
        if sustained is not None:
            sustained()
        runs.append({"run": i, "cooldown": cooldown, "figures": repeat_figures(results)})
    results.update({k: v for k, v in first.items() if v is not None})
    keys = [k for k in runs[0]["figures"] if all(r["figures"].get(k) is not None for r in runs)]
    return {
        "n": len(runs),
        "runs": runs,
        "spread": {k: repeat_spread([r["figures"][k] for r in runs]) for k in keys},
    }


def run_measurement(
    model_path: Path,
    golden_path: Path | None,
    plan: Plan | Mapping,
    *,
    root: Path = Path("/"),
    on_event: EventSink | None = None,
    cancel: threading.Event | None = None,
    model_name: str | None = None,
    coload=None,
    runtime_envs=None,
) -> dict:
    """Run every planned phase and return ``{plan, fingerprint, results, findings, status, reason}``.

    ``plan`` is a :class:`Plan` or its JSON; the returned ``plan`` is the JSON as run.
    ``coload`` is the plan's co-load resolved on this device (``coload.resolve``);
    ``runtime_envs`` the device's runtime environments (``runtimes.envs.RuntimeEnvs``),
    needed when the plan names some (``plan.runtime_envs``).
    """
    emit = on_event or (lambda e: None)
    cancel = cancel or threading.Event()
    plan = plan if isinstance(plan, Plan) else Plan.from_json(plan)
    model_path = Path(model_path)
    _check_request(model_path, golden_path, plan, coload, runtime_envs)
    runtime = runtime_for(model_path, plan.runtime, model_name)
    envs = runtime_envs.resolve(plan.runtime_envs, runtime) if plan.runtime_envs else []
    check_providers(runtime, plan, cancel)
    edges = planned_edge_shapes(plan, Path(golden_path) if golden_path is not None else None)
    t_start = time.monotonic()  # an NTP step mid-run must not change it
    fingerprint, idle_c = _fingerprint(root, plan, envs, emit)
    run = _Phases(model_path, golden_path, plan, runtime, root, emit, cancel)
    run.fingerprint, run.idle_c, run.envs, run.edges, run.coload = (
        fingerprint, idle_c, envs, edges, coload,
    )  # fmt: skip
    results, findings = run.results, run.findings
    try:
        for name, step in run.planned():
            if stops_later_phases(findings) or cancel.is_set():
                break
            emit({"type": "phase", "phase": name, "state": "started"})
            step()
            emit({"type": "phase", "phase": name, "state": "done"})
    finally:
        run.release()
    if plan.repeat > 1 and not (stops_later_phases(findings) or cancel.is_set()):
        emit({"type": "phase", "phase": "repeat", "state": "started"})
        sustained = run.sustained if plan.sustain_s > 0 else None
        results["repeats"] = measure_repeats(
            results, plan, emit, cancel, root, run.latency, sustained
        )
        emit({"type": "phase", "phase": "repeat", "state": "done"})
    results["elapsed_s"] = round(time.monotonic() - t_start, 3)
    _note_contention(results)
    run.diagnose()
    if cancel.is_set():
        status, reason = "incomplete", "cancelled"
    else:
        status, reason = decide_status(results, findings)
    return {
        "plan": plan.to_json(),
        "fingerprint": fingerprint,
        "results": results,
        "findings": findings,
        "status": status,
        "reason": reason,
    }


def _check_request(model_path: Path, golden_path, plan: Plan, coload, runtime_envs) -> None:
    """Refuse a run that cannot start: files missing, a co-load or runtime environments
    without the agent's state."""
    if not model_path.is_file():
        raise BadInput(f"model file not found: {model_path}")
    if golden_path is not None and not Path(golden_path).is_file():
        raise BadInput(f"golden set not found: {golden_path}")
    if plan.coload and coload is None:
        raise BadInput(
            "a co-load needs the agent's store and configuration",
            hint="qualify through a serving agent or edgequal-agent run-plan",
        )
    if plan.runtime_envs and runtime_envs is None:
        raise BadInput(
            "runtime environments need the agent's state directory",
            hint="qualify through a serving agent or edgequal-agent run-plan",
        )


def _fingerprint(root: Path, plan: Plan, envs: list, emit: EventSink) -> tuple[dict, float | None]:
    """The board's fingerprint before the run (with the agent, Python, the runtime
    environments and an output fault named), and its temperature at rest: the sustained
    phase's cooldown target (None without one)."""
    emit({"type": "phase", "phase": "fingerprint", "state": "started"})
    fingerprint = probe_fingerprint(root)
    # The board's temperature before this run loaded it: the sustained phase's cooldown target.
    idle_c = read_thermal(root)["authoritative_temp_c"] if plan.sustain_s > 0 else None
    fingerprint.setdefault("agent_version", __version__)
    fingerprint.setdefault("python", platform.python_version())
    fingerprint.setdefault("python_executable", sys.executable)
    if envs:
        fingerprint["runtime_envs"] = [env.fingerprint_entry() for env in envs]
    fault = output_fault_setting()
    if fault:  # the fault injector is on: the signed report says so
        from ..runtimes.faults import OutputFault

        fingerprint["output_fault"] = str(OutputFault.parse(fault))
    emit({"type": "phase", "phase": "fingerprint", "state": "done"})
    return fingerprint, idle_c


def _note_contention(results: dict) -> None:
    """Whether other processes' CPU use was measurable here; an unexplained sustained drop
    says so when it was not."""
    unmeasurable = contention_unmeasurable(proc_root())
    results["contention"] = {"measurable": unmeasurable is None, "reason": unmeasurable}
    if unmeasurable and (results.get("sustained") or {}).get("verdict") == "unexplained":
        results["sustained"]["reason"] += "; interference is not measurable on this machine"


class _Phases:
    """One run's inputs and its growing results: a method per phase that runs it and files
    its figures (:meth:`planned` lists them in order), and :meth:`diagnose`, the findings
    that name the cause of a drift once every phase has run."""

    def __init__(self, model_path, golden_path, plan: Plan, runtime: str, root, emit, cancel):
        self.model_path, self.golden_path, self.plan, self.runtime = (
            model_path, golden_path, plan, runtime,
        )  # fmt: skip
        self.root, self.emit, self.cancel = root, emit, cancel
        self.findings: list[dict] = []
        self.results: dict = {"schema": RESULTS_SCHEMA}
        self.fingerprint: dict = {}
        self.idle_c: float | None = None
        self.envs: list = []
        self.edges: list = []
        self.coload = None
        self.kept = None  # the cold load's last worker, for the latency phase

    def release(self) -> None:
        """End a kept worker no phase took (a finding that stops the run, a cancel)."""
        if self.kept is not None:
            self.kept.end()
            self.kept = None

    def _args(self) -> tuple:
        return (self.model_path, self.golden_path, self.plan, self.runtime)

    def planned(self) -> list[tuple[str, Callable[[], None]]]:
        """The phases this plan runs, in order: ``(name, run)``."""
        plan, golden_path = self.plan, self.golden_path
        phases = [("cold_load", self.cold_load), ("latency", self.latency)]
        if self.envs:
            phases.append(("runtime_envs", self.environments))
        if golden_has_pipeline(golden_path):
            phases.append(("pipeline", self.pipeline))
        if plan.check_optimization:
            phases.append(("optimization_check", self.optimization))
        if plan.kernel_paths:
            if golden_path is None or golden_has_pipeline(golden_path):
                why = "no golden set" if golden_path is None else "a golden set of raw files"
                self.results["kernel_paths"] = {
                    "skipped": f"{why}: each kernel path is a run of a golden set of model inputs",
                    "paths": [],
                }
            else:
                phases.append(("kernel_paths", self.kernel_paths))
        if self.edges:
            phases.append(("edge_shapes", self.edge_shapes))
        phases += [(kind, self.scenario(kind, key)) for kind, key in planned_scenarios(plan)]
        if plan.sustain_s > 0:
            phases.append(("sustained", self.sustained))
        return phases

    def cold_load(self) -> None:
        value, self.kept = measure_cold_load(
            *self._args(), self.emit, self.cancel, self.findings, keep_last=True
        )
        if value is not None:
            self.results["cold_load"] = value

    def latency(self) -> None:
        results, coload = self.results, self.coload
        kept, self.kept = self.kept, None
        try:
            value = measure_warm(
                *self._args(), self.emit, self.cancel, self.findings, coload, self.root, kept
            )
        finally:
            if kept is not None:  # ended by its job, or never given one (a co-load failed)
                kept.end()
        if value is None:
            return
        if coload:
            results["coload"] = {
                "declared": [{"label": load.label, **load.decl} for load in coload],
                "rounds": self.plan.coload_rounds,
                "latency": value.pop("coload_latency"),
                "sustained": None,
            }
        results["runtime"] = value["runtime"]
        results["model_io"] = {"inputs": value["inputs"], "outputs": value["outputs"]}
        if "int8_form" in value:  # a runtime that lists operator types: the int8 form, or None
            results["model_io"]["int8_form"] = value["int8_form"]
        results["latency"] = {"per_shape": value["latency"]}
        results["memory"] = value["memory"]
        if "drift" in value:
            results["drift"] = value["drift"]
        if "timed_outputs" in value:  # a new dict: repeated runs keep run 1's (measure_repeats)
            results["timed_outputs"] = {
                **(results.get("timed_outputs") or {}),
                "latency": value["timed_outputs"],
            }

    def pipeline(self) -> None:
        value = measure_pipeline(*self._args(), self.emit, self.cancel, self.findings)
        if value is None:
            return
        if "drift" in value:  # the whole path's outputs, from the raw files
            self.results["drift"] = value.pop("drift")
        self.fingerprint["pipeline_libraries"] = value["libraries"]
        self.results["pipeline"] = value

    def optimization(self) -> None:
        results = self.results
        skipped = optimization_check_skipped(self.plan, self.runtime, results)
        if skipped:
            results["optimization_check"] = {"skipped": skipped}
            return
        unoptimized = measure_unoptimized_drift(*self._args(), self.cancel, self.findings)
        if unoptimized is not None:
            results["optimization_check"] = optimization_check(
                results["drift"], unoptimized, self.plan.graph_optimization
            )

    def kernel_paths(self) -> None:
        from .kernel_paths import measure_kernel_paths

        self.results["kernel_paths"] = measure_kernel_paths(
            *self._args(), self.envs, self.emit, self.cancel
        )

    def edge_shapes(self) -> None:
        self.results["edge_shapes"] = measure_edge_shapes(
            *self._args(), self.edges, self.emit, self.cancel, self.findings
        )

    def sustained(self) -> None:
        results = self.results
        results["sustained"] = measure_sustained(
            *self._args(),
            self.root,
            self.emit,
            self.cancel,
            self.findings,
            self.idle_c,
            self.coload,
        )
        if "timed_outputs" in results["sustained"]:
            checked = results["sustained"].pop("timed_outputs")
            results["timed_outputs"] = {
                **(results.get("timed_outputs") or {}),
                "sustained": checked,
            }
        if self.coload and "coload" in results:
            results["coload"]["sustained"] = results["sustained"].pop("coload_achieved", None)

    def environments(self) -> None:
        from .runtime_envs import measure_runtime_envs

        self.results["runtime_envs"] = measure_runtime_envs(
            *self._args(), self.envs, self.emit, self.cancel, self.findings
        )

    def scenario(self, kind: str, key: str) -> Callable[[], None]:
        def run() -> None:
            value = measure_scenario(kind, *self._args(), self.emit, self.cancel, self.findings)
            if value is not None:
                self.results[key] = value

        return run

    def diagnose(self) -> None:
        """After every phase (a finding ends later phases, and these only name the cause of
        what was measured): a failed drift localised to its first node past tolerance where
        the golden set carries the reference's intermediate tensors; the int8 saturation
        finding; outputs that changed while timed."""
        results, findings, cancel = self.results, self.findings, self.cancel
        drift = results.get("drift")
        drift_failed = drift is not None and not drift.get("passed", True)
        stopped = cancel.is_set() or stops_later_phases(findings)
        if drift_failed and "pipeline" not in results and not stopped:
            from .kernel_paths import divergence_finding, localize_drift

            located = localize_drift(*self._args(), drift, cancel)
            if located is not None:
                results["divergence"] = located
                finding = divergence_finding(located, self.runtime)
                if finding is not None:
                    findings.append(finding)
        cause = int8_drift_finding(
            (results.get("model_io") or {}).get("int8_form"),
            self.fingerprint.get("cpu_isa"),
            self.fingerprint.get("cpu_flags"),
            results.get("drift"),
            results.get("optimization_check"),
            self.runtime,
        )
        if cause is not None and not cancel.is_set():
            findings.append(cause)
        for name, checked in (results.get("timed_outputs") or {}).items():
            changed = timed_outputs_finding(name, checked, self.runtime)
            if changed is not None and not cancel.is_set():
                findings.append(changed)
