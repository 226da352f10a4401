"""``edgequal qualify``, ``golden make`` and ``demo``: the plan from the flags (preset, then
device profile, then flags), the run on the device, the report written and summarised."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .device_args import open_device_from_args
from .judge import _check_plan_for_policy, _gate_after_qualify, _load_gate_policy
from .plan_args import length_flags

if TYPE_CHECKING:
    from edgequal.agent.plan import Plan


EDGE_SHAPE_HINT = (
    "write LABEL:INPUT=DIMS[,INPUT2=DIMS], e.g. largest:image=1x3x1024x1024 or empty:tokens=1x0"
)


def parse_edge_shape_args(items: list[str]) -> list[dict] | None:
    """``LABEL:INPUT=1x3x1024x1024[,INPUT2=1x0]`` arguments into the plan's ``edge_shapes``
    (sizes may be 0); labels and limits are checked by the plan's own rule."""
    from edgequal.agent.errors import BadInput
    from edgequal.agent.plan import EDGE_LABEL

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
    from edgequal.agent.golden import check_edge_shapes

    return check_edge_shapes(out, "--edge-shape")


def _measurement_flags(args) -> dict:
    """The plan fields of the flags ``_add_measurement_flags`` adds (None: not given)."""
    from edgequal.agent.errors import BadInput
    from edgequal.agent.plan import parse_duration_s

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
    }


def _plan_flags(args) -> dict:
    """The plan fields the flags set (None: not given; the preset's or profile's stays)."""
    from edgequal.agent.plan import parse_duration_s, parse_shape_args

    return {
        "runtime": args.runtime if args.runtime != "auto" else None,
        "threads": args.threads,
        "shapes": parse_shape_args(args.shape) or None,
        "edge_shapes": parse_edge_shape_args(args.edge_shape),
        "sustain_s": parse_duration_s(args.sustain) if args.sustain else None,
        "window_s": parse_duration_s(args.window) if args.window else None,
        **length_flags(args),
        **_measurement_flags(args),
    }


def _plan_from_args(args) -> Plan:
    """The plan before a device is known (the preset and the flags): checked against
    ``--gate``'s policy before connecting; a profile never adds a phase (``make_plan``)."""
    from edgequal.agent.plan import make_plan

    return make_plan(args.plan, None, **_plan_flags(args))


def cmd_qualify(args) -> int:
    """``edgequal qualify``: the library's ``Device.qualify``, shown on the terminal."""
    import json

    from ..devices.qualify import printable
    from ..errors import UsageError
    from ..model_file import check_model_file, check_shapes
    from ..present.terminal.summary import (
        ProgressDisplay,
        print_note,
        print_plan,
        print_summary,
        write_json,
    )
    from .coload_args import parse_coload

    # Everything the host can check is checked before a device is contacted.
    # Flags first, then the files they name, then the shapes against the model's inputs.
    model = args.model
    policy = _load_gate_policy(args.gate) if args.gate else None
    flags_plan = _plan_from_args(args)  # bad flags, before connecting
    _check_plan_for_policy(flags_plan, policy)
    runtime = check_model_file(model, args.runtime)
    if args.golden is not None and not args.golden.is_file():
        raise UsageError(
            f"golden set not found: {args.golden}",
            hint=f"make one with: edgequal golden make {model} --inputs INPUTS.npz -o {args.golden}",
        )
    check_shapes(model, runtime, flags_plan.shapes)
    if args.repeat_until_decided is not None or args.baseline is not None:
        return _qualify_repeated(args, policy)
    with open_device_from_args(args) as device:
        # The preset, then the profile (--profile, else the fingerprint's), then the flags.
        plan = device.plan(args.plan, profile=args.profile, **_plan_flags(args))
        print_plan(plan, stderr=args.json)
        with ProgressDisplay(
            f"qualifying {printable(model.name)} on {device.address}", enabled=not args.json
        ) as display:
            report = device.qualify(
                model,
                args.golden,
                plan=plan,
                out=args.output,
                on_progress=display.on_event,
                on_notice=print_note,
                allow_golden_mismatch=args.allow_golden_mismatch,
                coload_models=parse_coload(args.coload)[1],
            )
    predicate = report.predicate
    for note in report.notes:
        print_note(note)
    if args.json:
        write_json(json.dumps(predicate, indent=1))
        print_note(f"signed report: {printable(report.path)}")
    else:
        print_summary(predicate, device.address, printable(report.path))
    if policy is not None or args.html:
        return _gate_after_qualify(args, policy, report.path, device.name, predicate)
    if report.interrupted:
        print_note(f"run {report.run_id} was cancelled; its signed report is above")
    return report.exit_code


def _qualify_repeated(args, policy) -> int:
    """``qualify MODEL --baseline REPORT --repeat-until-decided N`` (host/judge/repeat.py):
    exit 0 SAME or faster, 1 DIFFERENT and slower, or still UNKNOWN after N pairs."""
    import json

    from ..devices.trust import KnownDevices
    from ..errors import UsageError
    from ..judge.policy import BASELINE_DEFAULTS
    from ..judge.repeat import baseline_artifact, repeat_until_decided
    from ..judge.report_file import load_report
    from ..present.terminal.summary import print_note, print_table, write_json

    if args.baseline is None or args.repeat_until_decided is None:
        raise UsageError("--baseline and --repeat-until-decided go together")
    base = load_report(args.baseline, known=KnownDevices(), require=True)
    roles = {s.get("role") or ("model" if i == 0 else None): s for i, s in enumerate(base.subjects)}
    where = [args.baseline.parent, args.model.parent]
    base_model = baseline_artifact(
        roles["model"]["sha256"],
        roles["model"]["name"],
        [args.baseline_model] if args.baseline_model else where,
        "--baseline-model",
    )
    base_golden = None
    if roles.get("golden"):
        base_golden = baseline_artifact(
            roles["golden"]["sha256"],
            roles["golden"]["name"],
            [args.baseline_golden] if args.baseline_golden else where,
            "--baseline-golden",
        )
    settings = {**BASELINE_DEFAULTS, **(policy.baseline if policy else {})}
    with open_device_from_args(args) as device:
        plan = device.plan(args.plan, profile=args.profile, **_plan_flags(args))

        def run(side: str) -> dict:
            model, golden = (
                (base_model, base_golden) if side == "baseline" else (args.model, args.golden)
            )
            report = device.qualify(model, golden, plan=plan, on_notice=print_note)
            return {"predicate": report.predicate, "path": report.path}

        def progress(result) -> None:
            v = result.verdict
            print_note(
                f"pair {result.pairs}: baseline {result.baseline_p50_ms[-1]:.4g} ms, "
                f"candidate {result.candidate_p50_ms[-1]:.4g} ms: {v['verdict']} ({v['why']})"
            )

        result = repeat_until_decided(
            run, args.repeat_until_decided, settings["min_effect"], settings, progress
        )
    verdict = result.verdict
    slower = verdict["ratio"] is not None and verdict["ratio"] > 1.0
    if args.json:
        write_json(json.dumps(result.to_json(), indent=1))
    else:
        print_table(
            f"{printable_name(args.model)} against {printable_name(base_model)}",
            ["pairs", "baseline p50 (median)", "candidate p50 (median)", "ratio", "verdict"],
            [
                [
                    str(result.pairs),
                    f"{sorted(result.baseline_p50_ms)[len(result.baseline_p50_ms) // 2]:.4g} ms",
                    f"{sorted(result.candidate_p50_ms)[len(result.candidate_p50_ms) // 2]:.4g} ms",
                    "" if verdict["ratio"] is None else f"×{verdict['ratio']:.3f}",
                    f"{verdict['verdict']}: {verdict['why']}",
                ]
            ],
        )
    if verdict["verdict"] == "UNKNOWN":
        print_note(f"still UNKNOWN after {result.pairs} pairs: raise --repeat-until-decided")
        return 1
    return 1 if verdict["verdict"] == "DIFFERENT" and slower else 0


def printable_name(path) -> str:
    """A file's name for a table title."""
    from ..devices.qualify import printable

    return printable(path.name)


def cmd_golden_make(args) -> int:
    from ..golden import make_golden, parse_tolerance_args
    from ..present.terminal.summary import print_line, print_note

    warnings: list[str] = []

    def warn(text: str) -> None:
        warnings.append(text)
        (print_note if args.json else print_line)(f"warning: {text}")

    digest = make_golden(
        args.model,
        args.inputs,
        args.output,
        outputs=args.outputs,
        decision=args.decision,
        tolerances=parse_tolerance_args(args.tolerance),
        preprocessing=_declared_preprocessing(args),
        on_warning=warn,
        edge_shapes=parse_edge_shape_args(args.edge_shape),
        raw=args.raw,
        pipeline=args.pipeline,
        reference_inputs=args.reference_inputs,
    )
    if args.json:
        import json

        from edgequal.agent.golden import read_golden

        from ..present.terminal.summary import write_json

        g = read_golden(args.output)
        made = {
            "golden": str(args.output),
            "sha256": digest,
            "model": g.manifest.get("model"),
            "cases": [c.name for c in g.cases],
            "inputs": g.manifest.get("inputs"),
            "outputs": g.manifest.get("outputs"),
            "decision": g.decision,
            "tolerances": g.tolerances,
            "reference": g.manifest.get("reference"),
            "warnings": warnings,
        }
        write_json(json.dumps(made, indent=1))
        return 0
    print_line(f"golden set {args.output} sha256 {digest}")
    return 0


def _declared_preprocessing(args) -> dict:
    """The input-contract flags as ``{"*": keys}`` over an optional ``--preprocessing`` TOML's."""
    from ..errors import UsageError
    from ..golden import read_preprocessing_toml

    def numbers(flag: str, text: str | None) -> list[float] | None:
        if text is None:
            return None
        try:
            return [float(x) for x in text.split(",")]
        except ValueError:
            raise UsageError(f"{flag} takes numbers separated by commas, not {text!r}") from None

    resize = None
    if args.resize is not None:
        h, _, w = args.resize.lower().partition("x")
        if not (h.isdigit() and w.isdigit()):
            raise UsageError(f"--resize takes HEIGHTxWIDTH, e.g. 224x224, not {args.resize!r}")
        resize = [int(h), int(w)]
    flags = {
        "layout": args.layout,
        "range": numbers("--range", args.range),
        "mean": numbers("--mean", args.mean),
        "std": numbers("--std", args.std),
        "scale": args.scale,
        "color_order": args.color_order,
        "resize": resize,
    }
    if args.preprocessing and args.raw:
        raise UsageError(
            "--preprocessing declares prepared inputs; with --raw the keys go in --pipeline"
        )
    declared = read_preprocessing_toml(args.preprocessing) if args.preprocessing else {}
    declared.setdefault("*", {}).update({k: v for k, v in flags.items() if v is not None})
    return declared


def cmd_demo(args) -> int:
    from ..examples.demo import run_demo

    return run_demo(args.out, args.sustain, quick=args.quick)
