"""qualify's measurement options, declared once with the rule that reads them back: providers,
limits and service scenarios, kernel paths, declared co-load, runtime environments side by
side, and ``--edge-shape`` (which ``golden make`` records too). ``add_*`` puts the flags on
a parser; ``measurement_flags`` and ``parse_edge_shape_args`` turn the parsed namespace into
plan fields (docs/measurement.md). Imported by the parser; argparse only at import.
"""

from __future__ import annotations

EDGE_SHAPE_HINT = (
    "write LABEL:INPUT=DIMS[,INPUT2=DIMS], e.g. largest:image=1x3x1024x1024 or empty:tokens=1x0"
)


def parse_edge_shape_args(items: list[str]) -> list[dict] | None:
    """``LABEL:INPUT=1x3x1024x1024[,INPUT2=1x0]`` arguments into the plan's ``edge_shapes``
    (sizes may be 0); labels and limits are checked by the plan's own rule."""
    from edgequal.contract.declarations import EDGE_LABEL
    from edgequal.contract.errors import BadInput

    out = []
    for item in items or []:
        label, sep, rest = item.partition(":")
        shapes: dict[str, list[int]] = {}
        ok = bool(sep and label.strip() and rest)
        for part in rest.split(",") if ok else ():
            name, eq, dims = part.strip().partition("=")
            try:
                values = [int(d) for d in dims.lower().split("x")] if dims else []
            except ValueError:
                values = []
            if not eq or not name or not values or any(v < 0 for v in values) or name in shapes:
                ok = False
                break
            shapes[name] = values
        if not ok:
            raise BadInput(f"cannot read --edge-shape '{item}'", hint=EDGE_SHAPE_HINT)
        label = label.strip()
        if not EDGE_LABEL.fullmatch(label):
            raise BadInput(
                f"--edge-shape '{item}': the label must be a short name "
                "(up to 32 letters, digits, '.', '_', '-')",
                hint=EDGE_SHAPE_HINT,
            )
        if any(e["label"] == label for e in out):
            raise BadInput(f"--edge-shape names the label '{label}' twice")
        out.append({"label": label, "shapes": shapes})
    if not out:
        return None
    from edgequal.contract.golden import check_edge_shapes

    return check_edge_shapes(out, "--edge-shape")


def add_edge_shape_option(parser, recorded: bool = False) -> None:
    """``--edge-shape``, repeatable (docs/measurement.md "Edges of the input range")."""
    parser.add_argument(
        "--edge-shape",
        action="append",
        default=[],
        metavar="LABEL:INPUT=DIMS[,INPUT=DIMS]",
        help=(
            "record an edge of the input range every qualification with this set measures"
            if recorded
            else "also measure this edge of the input range (latency, peak memory, a run)"
        )
        + ", e.g. largest:image=1x3x1024x1024 or empty:tokens=1x0 (repeat for each)",
    )


def add_measurement_options(q) -> None:
    """qualify's flags for providers, limits and the service scenarios (docs/measurement.md)."""
    m = q.add_argument_group("providers, limits and service scenarios")
    m.add_argument(
        "--providers",
        help="onnxruntime execution providers in priority order, e.g. "
        "CUDAExecutionProvider,CPUExecutionProvider (refused if the device lacks one)",
    )
    m.add_argument("--memory-limit", type=int, metavar="MB", help="kill a worker above this RSS")
    m.add_argument("--phase-timeout", metavar="DURATION", help="a worker silent this long hangs")
    m.add_argument(
        "--batch-sizes", metavar="1,2,4,8", help="batch sweep over these sizes (dynamic batch)"
    )
    m.add_argument(
        "--thread-scaling", action="store_true", default=None, help="latency for 1..N threads"
    )
    m.add_argument(
        "--server", action="store_true", default=None, help="server scenario (Poisson arrivals)"
    )
    m.add_argument("--server-rate", type=float, metavar="PER_S", help="server target rate")
    m.add_argument("--p99-bound", metavar="DURATION", help="server p99 bound, e.g. 15ms")
    m.add_argument(
        "--operators",
        "--operator-profile",
        dest="operators",
        action="store_true",
        default=None,
        help="per-operator time, delegate use",
    )
    m.add_argument("--scenario-time", metavar="DURATION", help="time per scenario point")
    m.add_argument(
        "--check-optimization",
        action="store_true",
        default=None,
        help="measure the drift once more with onnxruntime's graph optimisation off, in the "
        "same run: do the optimised kernels cause it?",
    )
    k = q.add_argument_group("kernel paths and where outputs diverge (docs/divergence.md)")
    k.add_argument(
        "--paths",
        metavar="PATH[,PATH..]",
        help="also run the golden set through each kernel path and localise a path that "
        "drifts to its first divergent node: opt:LEVEL (onnxruntime graph optimisation), "
        "ep:PROVIDER (CPU, XNNPACK, OpenVINO, CUDA, TensorRT), resolver:NAME (LiteRT: auto, "
        "builtin, builtin-ref, builtin-no-delegates), or all; the first is the reference",
    )
    k.add_argument(
        "--divergence-memory",
        type=float,
        metavar="MB",
        help="memory the kept intermediate tensors may take (default: a quarter of what the "
        "board has available, at most 256); beyond it, range by range",
    )
    c = q.add_argument_group("declared co-load (docs/measurement.md)")
    c.add_argument(
        "--coload",
        action="append",
        metavar="KIND:VALUE",
        help="background work beside the latency and sustained phases: model:PATH[@RATE], "
        "cpu:CORES, membw:CORES or command:NAME (a name in the agent's configuration); repeatable",
    )
    c.add_argument(
        "--coload-rounds", type=int, metavar="N", help="plain/co-load alternations (default 4)"
    )
    e = q.add_argument_group("runtime environments side by side (docs/measurement.md)")
    e.add_argument(
        "--runtime-env",
        action="append",
        metavar="NAME",
        help="also measure under this runtime environment installed on the device (repeatable; "
        "'default' is the agent's own; the first is the baseline of the ratios)",
    )
    e.add_argument(
        "--runtime-env-rounds", type=int, metavar="N", help="segments per environment (default 4)"
    )


def measurement_flags(args) -> dict:
    """The plan fields of the flags ``add_measurement_options`` adds (None: not given)."""
    from edgequal.contract.cli_args import parse_duration_s
    from edgequal.contract.errors import BadInput

    from .coload_args import parse_coload

    def duration(text):
        return parse_duration_s(text) if text else None

    sizes = None
    if args.batch_sizes:
        try:
            sizes = [int(b) for b in args.batch_sizes.split(",") if b.strip()]
        except ValueError:
            raise BadInput(
                f"cannot read --batch-sizes '{args.batch_sizes}'", hint="write e.g. 1,2,4,8"
            ) from None
    p99 = duration(args.p99_bound)
    return {
        "providers": [p.strip() for p in args.providers.split(",") if p.strip()]
        if args.providers
        else None,
        "memory_limit_mb": args.memory_limit,
        "phase_timeout_s": duration(args.phase_timeout),
        "batch_sizes": sizes,
        "thread_scaling": args.thread_scaling,
        "server": args.server,
        "server_rate_per_s": args.server_rate,
        "server_p99_ms": p99 * 1e3 if p99 is not None else None,
        "operator_profile": args.operators,
        "scenario_s": duration(args.scenario_time),
        "coload": parse_coload(args.coload)[0],
        "coload_rounds": args.coload_rounds,
        "runtime_envs": args.runtime_env,
        "runtime_env_rounds": args.runtime_env_rounds,
        "check_optimization": args.check_optimization,
        "kernel_paths": [p.strip() for p in args.paths.split(",") if p.strip()]
        if args.paths
        else None,
        "divergence_memory_mb": args.divergence_memory,
    }
