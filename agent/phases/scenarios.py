"""The optional service scenarios of a qualification (docs/measurement.md "Service
scenarios"): per-operator time, the batch sweep, thread scaling and the server scenario,
each in its own worker beside the contention sampler, its figures read with what else used
the CPU meanwhile, an accelerator's CPU fallback named."""

from __future__ import annotations

from edgequal.contract.plan import Plan

from ..measure.attribution import contention_between, interference_present
from ..worker.jobs import ScenarioSettings, WorkerJob
from .workers import EventSink, finding_from, run_sampled

# The optional service scenarios, in the order they run: (plan switch, job kind, result key).
SCENARIOS = (
    ("operator_profile", "operators", "operators"),
    ("batch_sizes", "batch_sweep", "batch_sweep"),
    ("thread_scaling", "thread_scaling", "thread_scaling"),
    ("server", "server", "server"),
)


def planned_scenarios(plan: Plan) -> list[tuple[str, str]]:
    """``(job kind, result key)`` of each service scenario the plan asks for.

    Asking for an accelerator provider runs the operator phase too: which nodes fell
    back to the CPU is only known from what ran where.
    """
    from ..measure.operators import CPU_PROVIDER

    accelerator = any(p != CPU_PROVIDER for p in plan.providers or ())
    return [
        (kind, key)
        for switch, kind, key in SCENARIOS
        if getattr(plan, switch) or (kind == "operators" and accelerator)
    ]


def _scenario_budget_s(kind: str, plan: Plan) -> float:
    """How long a scenario's worker may run beyond the phase timeout (its planned seconds)."""
    s = plan.scenario_s
    if kind == "batch_sweep":
        return s * len(plan.batch_sizes or ())
    if kind == "thread_scaling":
        return s * 64
    if kind == "server":
        return s * (3 + plan.server_search_steps) * 4  # a saturated step drains its queue
    return 0.0


def measure_scenario(
    kind: str, model, golden, plan: Plan, runtime, emit: EventSink, cancel, findings
) -> dict | None:
    """One service scenario in its own worker (docs/measurement.md "Service scenarios")."""

    def forward(event: dict) -> None:
        if event.get("event") == "phase":
            emit({"type": "progress", "phase": kind, "message": event["phase"]})

    ended, samples, sampler = run_sampled(
        WorkerJob.for_phase(
            kind, model, golden, plan, runtime, scenario=ScenarioSettings.from_plan(plan)
        ),
        phase_timeout_s=plan.phase_timeout_s + _scenario_budget_s(kind, plan),
        memory_limit_mb=plan.memory_limit_mb,
        on_event=forward,
        cancel=cancel,
    )
    if not ended.ok:
        findings.append(finding_from(ended, kind, runtime))
        return None
    result = ended.result
    if "span_monotonic_s" in result:
        # What else used the CPU while the scenario ran: its figures are read with this.
        t0, t1 = result.pop("span_monotonic_s")
        evidence = contention_between(
            samples, t0, t1, sampler.cpu_count, sampler.clock_ticks_per_s, result.pop("sched_ns")
        )
        result["interference"] = evidence
        result["interference_present"] = interference_present(evidence)
    fallback = result.get("cpu_fallback")
    if fallback and fallback["finding"]:
        nodes = fallback["cpu_nodes"]
        findings_note = ", ".join(f"{n['node']} ({n['op_type']})" for n in nodes[:5])
        result["fallback_finding"] = (
            f"{len(nodes)} node(s) ran on the CPU although {', '.join(fallback['accelerators'])} "
            f"was asked for: {findings_note}{' …' if len(nodes) > 5 else ''}"
        )
    return result
