"""Where the time goes and which nodes ran where: pure over what the runtime reports.

onnxruntime's profiler writes one event per node run (``cat: Node``, name
``<node>_kernel_time``, ``dur`` in µs, ``args.op_name``, ``args.provider``);
:func:`operator_profile` takes each node's median run and sums the nodes by operator
type. :func:`cpu_fallback` lists the nodes that ran on the CPU although an accelerator
provider was asked for.
For LiteRT, :func:`delegate_coverage` works out from the node list which operators a
delegate (XNNPACK) took and which it left to the interpreter's own kernels.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from statistics import median

CPU_PROVIDER = "CPUExecutionProvider"
# Providers that add no accelerator: asking for them with the CPU provider is not a
# request to move nodes off the CPU.
_NOT_ACCELERATORS = {CPU_PROVIDER}
TOP_OPERATORS = 10


def node_events(trace: Iterable[Mapping], skip_runs: int = 0) -> list[dict]:
    """The per-node kernel runs of an onnxruntime profile trace: ``{node, op_type, provider, dur_us}``.

    ``skip_runs`` drops the nodes of the first inferences (``model_run`` events by start
    time): the first run allocates and is not what the model costs.
    """
    trace = list(trace)
    starts = sorted(e.get("ts", 0) for e in trace if e.get("name") == "model_run")
    after = starts[skip_runs] if 0 < skip_runs < len(starts) else None
    out = []
    for e in trace:
        name = e.get("name", "")
        if e.get("cat") != "Node" or not name.endswith("_kernel_time"):
            continue
        if after is not None and e.get("ts", 0) < after:
            continue
        args = e.get("args") or {}
        out.append(
            {
                "node": name[: -len("_kernel_time")],
                "op_type": args.get("op_name", "?"),
                "provider": args.get("provider"),
                "dur_us": float(e.get("dur", 0)),
            }
        )
    return out


def operator_profile(events: Sequence[Mapping], runs: int, top: int = TOP_OPERATORS) -> dict:
    """Time by operator type and by node, heaviest first, each with its share of the total.

    ``runs`` is how many profiled inferences the events cover: times are per inference. A
    node's time is its median kernel run times its runs per inference, so one run that
    waited for a CPU (the profiler times the wall clock) does not own the profile; an
    operator type's time is its nodes' sum.
    """
    runs = max(1, runs)
    by_node: dict[str, dict] = {}
    for e in events:
        node = by_node.setdefault(
            e["node"],
            {"node": e["node"], "op_type": e["op_type"], "provider": e["provider"], "durs": []},
        )
        node["durs"].append(e["dur_us"])
    by_op: dict[str, dict] = {}
    for node in by_node.values():
        node["us"] = median(node["durs"]) * len(node["durs"])  # over all ``runs``
        op = by_op.setdefault(node["op_type"], {"op_type": node["op_type"], "us": 0.0, "n": 0})
        op["us"] += node["us"]
        op["n"] += 1
    total = sum(o["us"] for o in by_op.values())

    def share(us: float) -> float:
        return round(us / total, 4) if total > 0 else 0.0

    ops = sorted(by_op.values(), key=lambda o: -o["us"])
    nodes = sorted(by_node.values(), key=lambda n: -n["us"])
    return {
        "runs": runs,
        "total_us_per_run": round(total / runs, 3),
        "operators": [
            {
                "op_type": o["op_type"],
                "us_per_run": round(o["us"] / runs, 3),
                "share": share(o["us"]),
                "nodes": o["n"],
            }
            for o in ops[:top]
        ],
        "nodes": [
            {
                "node": n["node"],
                "op_type": n["op_type"],
                "provider": n["provider"],
                "us_per_run": round(n["us"] / runs, 3),
                "share": share(n["us"]),
            }
            for n in nodes[:top]
        ],
        "operator_types": len(by_op),
        "node_count": len(by_node),
    }


def nodes_by_provider(events: Sequence[Mapping]) -> dict[str, list[str]]:
    """Node names per provider that ran them, in first-run order."""
    out: dict[str, list[str]] = {}
    for e in events:
        names = out.setdefault(e["provider"] or "unknown", [])
        if e["node"] not in names:
            names.append(e["node"])
    return out


def cpu_fallback(events: Sequence[Mapping], requested: Sequence[str] | None) -> dict | None:
    """Nodes that ran on the CPU although an accelerator provider was asked for (None: none asked).

    ``finding`` is true when any node fell back: a silent CPU fallback is what makes a
    board look slow for a reason nobody sees.
    """
    accelerators = [p for p in (requested or []) if p not in _NOT_ACCELERATORS]
    if not accelerators:
        return None
    placed = nodes_by_provider(events)
    fell_back = [
        {"node": e["node"], "op_type": e["op_type"]}
        for e in _first_runs(events)
        if e["provider"] == CPU_PROVIDER
    ]
    return {
        "requested": list(requested),
        "accelerators": accelerators,
        "nodes_per_provider": {p: len(n) for p, n in placed.items()},
        "cpu_nodes": fell_back,
        "finding": bool(fell_back),
    }


def _first_runs(events: Sequence[Mapping]) -> list[Mapping]:
    seen, out = set(), []
    for e in events:
        if e["node"] not in seen:
            seen.add(e["node"])
            out.append(e)
    return out


def delegate_coverage(ops: Sequence[Mapping], delegate_op: str = "DELEGATE") -> dict:
    """Which of a LiteRT graph's nodes a delegate took, from the interpreter's node list.

    ``ops`` are ``{index, op_name, inputs, outputs}`` as the interpreter lists them: the
    model's own nodes first, then one ``DELEGATE`` node per partition a delegate took.
    A model node belongs to a partition when it lies on a path from the partition's
    inputs to its outputs: walking back from the partition's outputs through the nodes
    that produce them, stopping at the partition's inputs.
    """
    model_nodes = [o for o in ops if o["op_name"] != delegate_op]
    partitions = [o for o in ops if o["op_name"] == delegate_op]
    taken = delegated_nodes(ops, delegate_op)
    left = [o for o in model_nodes if int(o["index"]) not in taken]
    left_types: dict[str, int] = {}
    for o in left:
        left_types[o["op_name"]] = left_types.get(o["op_name"], 0) + 1
    return {
        "delegate_applied": bool(partitions),
        "partitions": len(partitions),
        "nodes": len(model_nodes),
        "delegated_nodes": len(taken),
        "whole_graph": bool(partitions) and not left,
        "left_operators": [{"op_type": k, "nodes": v} for k, v in left_types.items()],
        "left_nodes": [{"index": int(o["index"]), "op_type": o["op_name"]} for o in left],
    }


def delegated_nodes(ops: Sequence[Mapping], delegate_op: str = "DELEGATE") -> set[int]:
    """The indices of the model nodes a delegate's partitions took (:func:`delegate_coverage`)."""
    model_nodes = [o for o in ops if o["op_name"] != delegate_op]
    partitions = [o for o in ops if o["op_name"] == delegate_op]
    producer = {}
    for node in model_nodes:
        for t in node["outputs"]:
            producer[int(t)] = node
    taken: set[int] = set()
    for part in partitions:
        boundary = {int(t) for t in part["inputs"]}
        stack = [int(t) for t in part["outputs"]]
        seen: set[int] = set()
        while stack:
            t = stack.pop()
            if t in seen or t in boundary or t not in producer:
                continue
            seen.add(t)
            node = producer[t]
            taken.add(int(node["index"]))
            stack.extend(int(i) for i in node["inputs"])
    return taken
