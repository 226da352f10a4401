"""Kernel paths side by side (``qualify --paths``, docs/divergence.md), and where outputs
diverge.

Each path the plan names (``contract/kernel_paths.py``) is a run of the golden set in a
fresh worker with that path's runtime options (``kernel_path`` job): drift against the
golden outputs, flips, a short latency, the operators placed off the CPU or fallen back.
A path the board lacks is named absent with the reason; an execution provider the
agent's own onnxruntime lacks is looked for in the plan's runtime environments
(``--runtime-env``), and run there when one offers it. A path whose drift fails is
localised (``divergence`` job): its worst case again with every intermediate tensor kept,
beside the reference path (the first) in the same worker, or against the golden set's
recorded intermediates when it has them; the first node past tolerance is named.

The same localisation runs for the qualification's own drift when it fails and the
golden set carries intermediates (:func:`localize_drift`): a model changed since its
golden set was made.
"""

from __future__ import annotations

import zipfile
from dataclasses import replace
from pathlib import Path

from edgequal.contract.kernel_paths import KernelPath, absent_reason, expand_paths
from edgequal.contract.plan import Plan
from edgequal.contract.runtimes import runtime_kind

from ..measure.divergence import divergence_message, worst_case
from ..worker.jobs import DivergenceSettings, WorkerJob, latency_settings
from ..worker.supervisor import run_job
from .workers import EventSink, finding_from

# The kept tensors of both sides of one localisation run: at most this share of the
# memory the board has available (or of the plan's worker memory limit), and at most
# DEFAULT_BUDGET_MB; more goes range by range.
MEMORY_SHARE = 0.25
DEFAULT_BUDGET_MB = 256


def mem_available_bytes(proc_root: Path = Path("/proc")) -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes, None where there is none."""
    try:
        text = (Path(proc_root) / "meminfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


def budget_bytes(plan: Plan, available: int | None) -> int:
    """The bytes the kept tensors may take (see MEMORY_SHARE)."""
    if plan.divergence_memory_mb is not None:
        return int(plan.divergence_memory_mb * 2**20)
    bounds = [DEFAULT_BUDGET_MB * 2**20]
    if available:
        bounds.append(int(available * MEMORY_SHARE))
    if plan.memory_limit_mb:
        bounds.append(int(plan.memory_limit_mb * 2**20 * MEMORY_SHARE))
    return min(bounds)


def _job(kind: str, model, golden, plan: Plan, runtime: str, options: dict, **settings):
    job = WorkerJob.for_phase(kind, model, golden, plan, runtime, **settings)
    return replace(
        job,
        graph_optimization=options["graph_optimization"],
        providers=tuple(options["providers"]) if options["providers"] else None,
        op_resolver=options["op_resolver"],
    )


def _providers_here(runtime: str, plan: Plan, cancel, env=None) -> dict | None:
    """``{"available", "version"}`` of the runtime in the agent's own Python or ``env``."""
    job = WorkerJob.for_phase("providers", Path("-"), None, plan, runtime)
    kwargs = {"python": env.worker_python(), "env": env.worker_env()} if env else {}
    ended = run_job(job.to_json(), phase_timeout_s=plan.phase_timeout_s, cancel=cancel, **kwargs)
    return ended.result if ended.ok else None


def measure_kernel_paths(
    model, golden, plan: Plan, runtime: str, envs: list, emit: EventSink, cancel
) -> dict:
    """Every path of ``plan.kernel_paths``: see the module doc. Findings of a path's worker
    stay in its entry: a path is a diagnosis beside the qualification, not its verdict."""
    paths = expand_paths(plan.kernel_paths, runtime)
    providers = runtime_kind(runtime).execution_providers
    here = _providers_here(runtime, plan, cancel) if providers else None
    env_providers = {}
    budget = budget_bytes(plan, mem_available_bytes())
    entries = []
    reference = None  # the first path that ran: the others are compared with it
    for n, path in enumerate(paths):
        if cancel.is_set():
            break
        emit({"type": "progress", "phase": "kernel_paths", "done": n, "total": len(paths),
              "message": path.name})  # fmt: skip
        entry = {
            "name": path.name,
            "runtime": runtime,
            "options": path.options(plan.graph_optimization),
        }
        env = None
        if here is not None:
            reason = absent_reason(path, here["available"], here["version"])
            if reason is not None:
                env = _env_offering(path, envs, env_providers, runtime, plan, cancel)
                if env is None:
                    entries.append({**entry, "status": "absent", "reason": reason})
                    continue
                entry["runtime_env"] = env.name
        run_kwargs = {"python": env.worker_python(), "env": env.worker_env()} if env else {}
        job = _job("kernel_path", model, golden, plan, runtime, entry["options"],
                   latency=latency_settings(plan))  # fmt: skip
        ended = run_job(
            job.to_json(),
            phase_timeout_s=plan.phase_timeout_s,
            memory_limit_mb=plan.memory_limit_mb,
            cancel=cancel,
            **run_kwargs,
        )
        if not ended.ok:
            failure = finding_from(ended, "kernel_paths", runtime)
            entries.append({**entry, "status": "failed", "reason": failure["message"],
                            "finding": failure})  # fmt: skip
            continue
        result = ended.result
        drift = result["drift"]
        entry.update(
            {
                "status": "ok",
                "described": result["runtime"],
                "drift": path_drift_summary(drift),
                "latency": {
                    k: result["latency"].get(k) for k in ("count", "p50_ms", "mean_ms", "p90_ms")
                },
                "placement": result.get("placement"),
            }
        )
        if reference is None:
            reference = (path, entry)
            entry["reference"] = True
        if not drift.get("passed", True):
            entry["divergence"] = localize_path(
                model, golden, plan, runtime, path, reference, drift, budget, cancel, run_kwargs
            )
        entries.append(entry)
    return {
        "reference": reference[0].name if reference else None,
        "budget_bytes": budget,
        "paths": entries,
    }


def _env_offering(path: KernelPath, envs, cache: dict, runtime: str, plan: Plan, cancel):
    """The first of the plan's runtime environments whose onnxruntime offers the path's provider."""
    for env in envs:
        if env.name not in cache:
            cache[env.name] = (
                _providers_here(runtime, plan, cancel, env) if env.worker_python() else None
            )
        offered = cache[env.name]
        if (
            offered is not None
            and absent_reason(path, offered["available"], offered["version"]) is None
        ):
            return env
    return None


def path_drift_summary(drift: dict) -> dict:
    """A path's drift in a few figures: passed, the worst output's max abs and PSNR, flips."""
    outputs = drift.get("outputs") or {}
    decisions = drift.get("decisions") or {}
    return {
        "passed": drift.get("passed", True),
        "max_abs": max((o["max_abs"] or 0.0 for o in outputs.values()), default=None),
        "psnr_db": min((o["psnr_db"] for o in outputs.values()), default=None),
        "flips": decisions.get("flip_count"),
        "cases": max((o["cases"] for o in outputs.values()), default=0),
        "worst_case": worst_case(drift),
    }


def localize_path(
    model, golden, plan, runtime, path, reference, drift, budget, cancel, run_kwargs
) -> dict:
    """The first divergent node of ``path``'s worst case: against the golden set's
    intermediates when it has them, else against the reference path (in the same worker)."""
    case = worst_case(drift)
    has_intermediates = golden_has_intermediates(golden, case)
    if has_intermediates:
        settings = DivergenceSettings(case=case, budget_bytes=budget)
    elif reference is not None and reference[0].name != path.name:
        ref_path, ref_entry = reference
        settings = DivergenceSettings(
            case=case,
            reference=ref_entry["options"],
            reference_label=f"the reference path {ref_path.name}",
            budget_bytes=budget,
        )
    else:
        return {
            "skipped": "the reference path drifts itself and the golden set holds no "
            "intermediate tensors to compare it with (golden make --intermediates)",
            "case": case,
        }
    return run_localization(model, golden, plan, runtime, path.options(plan.graph_optimization),
                            settings, cancel, run_kwargs)  # fmt: skip


def run_localization(model, golden, plan, runtime, options, settings, cancel, run_kwargs=None):
    """The ``divergence`` job and its message (``{"failed": ...}`` when its worker fails)."""
    job = _job("divergence", model, golden, plan, runtime, options, divergence=settings)
    ended = run_job(
        job.to_json(),
        phase_timeout_s=plan.phase_timeout_s,
        memory_limit_mb=plan.memory_limit_mb,
        cancel=cancel,
        **(run_kwargs or {}),
    )
    if not ended.ok:
        return {
            "failed": finding_from(ended, "divergence", runtime)["message"],
            "case": settings.case,
        }
    out = ended.result
    if "localization" in out:
        out["message"] = localization_message(out)
    return out


def localization_message(out: dict) -> str:
    """The finding's line, with what keeping tensors changed and how the graph was gone through."""
    located = out["localization"]
    text = divergence_message(located, out["against"])
    fusion = out.get("fusion")
    if not located["found"] and fusion:
        text = (
            f"first divergent node: inside the kernel onnxruntime fuses across {fusion['node']} "
            f"({fusion['op_type']}): keeping its output stops the divergence, and every tensor "
            f"before it agrees with {out['against']} (bisected over {fusion['sessions']} "
            "sessions)"
        )
    elif not located["found"] and out.get("reproduced") is False:
        text += (
            "; with every tensor kept the outputs agree too: the divergence is in a fused "
            "kernel that keeping its intermediate tensors prevents"
        )
    if out.get("ranges", 1) > 1:
        text += (
            f"; the kept tensors ({out['kept_bytes'] / 2**20:.3g} MiB) exceed the budget "
            f"({out['budget_bytes'] / 2**20:.3g} MiB): compared range by range, "
            f"{out['ranges_run']} of {out['ranges']} ranges"
        )
    return text


def golden_has_intermediates(golden, case: str | None) -> bool:
    """Whether the golden set records intermediate tensors for ``case``."""
    if golden is None or case is None:
        return False
    try:  # the member names only: the agent does not load the tensors
        with zipfile.ZipFile(golden) as zf:
            return any(n.startswith(f"intermediates/{case}/") for n in zf.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def localize_drift(model, golden, plan: Plan, runtime: str, drift: dict, cancel) -> dict | None:
    """The qualification's own drift failed: its worst case against the golden set's
    intermediate tensors (None when the set has none: nothing to localise against)."""
    case = worst_case(drift)
    if not golden_has_intermediates(golden, case):
        return None
    options = {
        "graph_optimization": plan.graph_optimization,
        "providers": list(plan.providers) if plan.providers else None,
        "op_resolver": None,
    }
    settings = DivergenceSettings(case=case, budget_bytes=budget_bytes(plan, mem_available_bytes()))
    return run_localization(model, golden, plan, runtime, options, settings, cancel)


def divergence_finding(located: dict, runtime: str) -> dict | None:
    """The finding naming the first divergent node of the qualification's own drift."""
    if "message" not in located:
        return None
    loc = located["localization"]
    return {
        "phase": "divergence",
        "cause": "model" if loc["found"] else "none",
        "kind": "divergence",
        "message": located["message"],
        "runtime": runtime,
        "node": loc.get("node"),
        "op_type": loc.get("op_type"),
        "case": located["case"],
    }
