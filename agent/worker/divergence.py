"""The kernel-path jobs of a worker (``phases/kernel_paths.py``, docs/divergence.md).

``kernel_path``: one path (the job's runtime options) over the golden set: drift, a short
warm latency, and where its operators ran. ``divergence``: one case again with every
intermediate tensor kept, on the job's path and on the reference (another path's options
in this same process, or the golden set's recorded intermediates), compared node by node
(``measure/divergence.py``); range by range when the kept tensors do not fit the budget.
"""

from __future__ import annotations

from dataclasses import replace

from .io import load_runtime, phase, read_golden_for
from .jobs import WorkerJob

# A path's latency is a comparison between paths, not the qualification's figure: short.
PATH_LATENCY_MAX_RUNS = 200
PATH_LATENCY_MAX_S = 1.0


def run_kernel_path(job: WorkerJob) -> dict:
    """Drift against the golden outputs, a short latency, operator placement."""
    from ..measure.drift import measure_drift
    from ..measure.latency import measure_latency
    from ..measure.operators import cpu_fallback, delegate_coverage, operator_profile

    rt, _, _ = load_runtime(job)
    golden = read_golden_for(job, rt)
    out: dict = {"runtime": rt.describe()}
    phase("drift")
    out["drift"] = measure_drift(rt, golden)
    feeds = golden.cases[0].inputs
    settings = replace(
        job.latency,
        min_runs=min(job.latency.min_runs, PATH_LATENCY_MAX_RUNS),
        max_runs=min(job.latency.max_runs, max(PATH_LATENCY_MAX_RUNS, job.latency.min_runs)),
        min_s=min(job.latency.min_s, PATH_LATENCY_MAX_S),
        max_s=min(job.latency.max_s or PATH_LATENCY_MAX_S * 4, PATH_LATENCY_MAX_S * 4),
        warmup_max_s=min(job.latency.warmup_max_s, PATH_LATENCY_MAX_S),
        max_extension=1.0,
    )
    timed = measure_latency(rt.bind(feeds), settings, on_phase=phase)
    out["latency"] = timed["summary"]
    accelerator = [p for p in (job.providers or ()) if p != "CPUExecutionProvider"]
    if accelerator:
        phase("operators")
        events = rt.node_timings(feeds, 5)
        if events is not None:
            profile = operator_profile(events, 5)
            out["placement"] = {
                "providers": sorted({e.get("provider") or "?" for e in events}),
                "off_cpu_nodes": sum(
                    1
                    for e in events
                    if (e.get("provider") or "CPUExecutionProvider") != "CPUExecutionProvider"
                ),
                "nodes": len({e["node"] for e in events}),
            }
            fallback = cpu_fallback(events, job.providers)
            if fallback is not None:
                out["placement"]["cpu_fallback"] = fallback
            out["placement"]["operators"] = len(profile.get("operators", []))
    nodes = rt.graph_nodes()
    if nodes is not None:
        coverage = delegate_coverage(nodes)
        out["placement"] = {
            "delegate": "XNNPACK" if coverage["delegate_applied"] else None,
            "nodes": coverage["nodes"],
            "off_cpu_nodes": 0,
            "delegated_nodes": coverage["delegated_nodes"],
            "left_operators": coverage["left_operators"],
        }
    return out


def _reference_runtime(job: WorkerJob):
    """The reference path's runtime in this process: the job's, with the reference options."""
    ref = job.divergence.reference
    reference_job = replace(
        job,
        graph_optimization=ref.get("graph_optimization") or job.graph_optimization,
        providers=tuple(ref["providers"]) if ref.get("providers") else job.providers,
        op_resolver=ref.get("op_resolver"),
        xnnpack=ref.get("xnnpack", job.xnnpack),
        output_fault=None,
    )
    rt, _, _ = load_runtime(reference_job)
    return rt


def run_divergence(job: WorkerJob) -> dict:
    """The first divergent node of the job's path on one case (``measure.divergence``)."""
    from ..measure.divergence import localize, merge_localizations, node_ranges

    settings = job.divergence
    rt, _, _ = load_runtime(job)
    golden = read_golden_for(job, rt)
    case = next((c for c in golden.cases if c.name == settings.case), None)
    if case is None:
        from edgequal.contract.errors import BadInput

        raise BadInput(f"the golden set has no case {settings.case!r}")
    nodes = rt.tensor_nodes()
    out: dict = {"case": case.name, "against": settings.reference_label}
    if nodes is None:
        return {**out, "skipped": f"{rt.name} cannot keep intermediate tensors"}
    if settings.reference is None and not case.intermediates:
        return {
            **out,
            "skipped": "the golden set holds no intermediate tensors for this case "
            "(golden make --intermediates)",
        }
    reference_rt = _reference_runtime(job) if settings.reference is not None else None
    inputs = set(case.inputs)
    finals = [o.name for o in rt.outputs()]
    names = [n for node in nodes for n in node["outputs"] if n and n not in inputs]
    phase("sizes")
    sizes = rt.kept_tensor_bytes(names)
    per_node = [2 * sum(sizes.get(n, 0) for n in node["outputs"]) for node in nodes]
    ranges = node_ranges(per_node, settings.budget_bytes)
    out.update(
        {
            "nodes": len(nodes),
            "kept_bytes": sum(per_node),
            "budget_bytes": settings.budget_bytes,
            "ranges": len(ranges),
        }
    )
    parts = []
    reproduced = None
    for i, (start, end) in enumerate(ranges):
        phase(f"range {i + 1}/{len(ranges)}")
        span = nodes[start:end]
        # The range's outputs and what it reads: the first divergent node's inputs are compared.
        wanted = {n for node in span for n in (*node["outputs"], *node["inputs"]) if n}
        wanted -= inputs
        actual = {**case.inputs, **rt.run_keeping(case.inputs, sorted(wanted))}
        if reference_rt is not None:
            reference = {**case.inputs, **reference_rt.run_keeping(case.inputs, sorted(wanted))}
        else:
            reference = {**case.inputs, **case.intermediates, **case.outputs}
        # Indices stay the graph's: the span's nodes are compared at their own positions.
        part = localize(
            [n if start <= k < end else {**n, "outputs": []} for k, n in enumerate(nodes)],
            reference,
            actual,
            finals,
            settings.atol,
            settings.rtol,
        )
        part["skipped"] = sum(
            1 for node in span if not any(o in reference and o in actual for o in node["outputs"])
        )
        if reproduced is None:
            reproduced = _outputs_differ(reference, actual, finals, settings)
        parts.append(part)
        if part["found"]:
            _growth_at_outputs(part, reference, actual, finals, settings)
            break
        del actual, reference
    located = merge_localizations(parts)
    out["ranges_run"] = len(parts)
    out["reproduced"] = reproduced
    out["localization"] = located
    # Keeping every tensor stopped the divergence (a fusion it prevents): bisect over how
    # much is kept, within the budget (a prefix of the graph kept at once).
    if (
        not located["found"]
        and reproduced is False
        and reference_rt is not None
        and len(ranges) == 1
    ):
        phase("fusion")
        out["fusion"] = fusion_bisect(rt, reference_rt, case.inputs, nodes, finals, settings)
    return out


def fusion_bisect(rt, reference_rt, feeds, nodes, finals, settings) -> dict | None:
    """Which node's kept output stops the divergence: the outputs of ``nodes[:k]`` kept, do
    the model's outputs still differ? True with none kept (the path as it runs), false with
    all; bisecting ``k`` finds the node whose output, kept, prevents the fusion that
    diverges: it is inside that fused kernel, and every tensor before it agrees.

    None when the outputs do not differ even with nothing kept (nothing to find)."""
    inputs = set(feeds)
    runs = 0

    def differs(k: int) -> bool:
        nonlocal runs
        runs += 1
        names = [n for node in nodes[:k] for n in node["outputs"] if n and n not in inputs]
        names = [n for n in names if n not in finals]
        actual = rt.run_keeping(feeds, names)
        reference = reference_rt.run_keeping(feeds, names)
        return bool(_outputs_differ(reference, actual, finals, settings))

    if not differs(0):
        return None
    lo, hi = 0, len(nodes)  # differs(lo), not differs(hi): every tensor kept agreed
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if differs(mid):
            lo = mid
        else:
            hi = mid
    from ..measure.divergence import node_label

    node = nodes[hi - 1]
    return {
        "node": node_label(node, hi - 1),
        "op_type": node["op_type"],
        "index": hi - 1,
        "sessions": runs,
    }


def _growth_at_outputs(part: dict, reference, actual, finals, settings) -> None:
    """The model outputs' worst error ratio over the divergent node's own (its range may
    not reach the outputs, which every kept run returns)."""
    from ..measure.divergence import tensor_error

    ratios = [
        tensor_error(reference[n], actual[n], settings.atol, settings.rtol)["ratio"]
        for n in finals
        if n in reference and n in actual
    ]
    own = part.get("ratio")
    if ratios and own:
        part["growth"]["at_outputs"] = max(ratios) / own


def _outputs_differ(reference, actual, finals, settings) -> bool | None:
    """Whether the model's outputs differ beyond the node tolerance in this kept run
    (None when neither side holds them): keeping tensors can stop a fusion that caused it."""
    from ..measure.divergence import tensor_error

    ratios = [
        tensor_error(reference[n], actual[n], settings.atol, settings.rtol)["ratio"]
        for n in finals
        if n in reference and n in actual
    ]
    return any(r > 1.0 for r in ratios) if ratios else None
