"""``edgequal qualify``, ``golden make`` and ``demo``: the plan from the flags (preset, then
device profile, then flags), the run on the device, the report written and summarised."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from edgequal.contract.cli_args import examples
from edgequal.contract.runtimes import RUNTIME_NAMES

from .device_args import add_connection_options, open_device_from_args
from .input_contract_args import add_input_contract_options, declared_preprocessing
from .judge import check_plan_for_policy, gate_after_qualify, load_gate_policy
from .measurement_args import (
    add_edge_shape_option,
    add_measurement_options,
    measurement_flags,
    parse_edge_shape_args,
)
from .plan_args import add_length_options, length_flags

if TYPE_CHECKING:
    from edgequal.contract.plan import Plan


def _plan_flags(args) -> dict:
    """The plan fields the flags set (None: not given; the preset's or profile's stays)."""
    from edgequal.contract.cli_args import parse_duration_s, parse_shape_args

    return {
        "runtime": args.runtime if args.runtime != "auto" else None,
        "threads": args.threads,
        "shapes": parse_shape_args(args.shape) or None,
        "edge_shapes": parse_edge_shape_args(args.edge_shape),
        "sustain_s": parse_duration_s(args.sustain) if args.sustain else None,
        "window_s": parse_duration_s(args.window) if args.window else None,
        **length_flags(args),
        **measurement_flags(args),
        "policy_sha256": _committed_policy(args),
    }


def _committed_policy(args) -> str | None:
    """The sha256 of ``--gate``'s or ``--policy``'s policy, signed inside the plan so a gate
    can show its limits were fixed before the run (host/judge/claims.py)."""
    path = args.gate or args.policy
    if path is None:
        return None
    if args.gate is not None and args.policy is not None and args.gate != args.policy:
        from ..host.errors import UsageError

        raise UsageError(
            "--gate and --policy name different policies",
            hint="--gate commits its policy and gates on it; give one of them",
        )
    return load_gate_policy(path).sha256


def _plan_from_args(args) -> Plan:
    """The plan before a device is known (the preset and the flags): checked against
    ``--gate``'s policy before connecting; a profile never adds a phase (``make_plan``)."""
    from edgequal.contract.plan import make_plan

    return make_plan(args.plan, None, **_plan_flags(args))


def cmd_qualify(args) -> int:
    """``edgequal qualify``: the library's ``Device.qualify``, shown on the terminal."""
    import json

    from ..host.errors import UsageError, printable
    from ..host.model_file import check_model_file, check_shapes
    from ..host.present.terminal.summary import (
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
    policy = load_gate_policy(args.gate) if args.gate else None
    flags_plan = _plan_from_args(args)  # bad flags, before connecting
    check_plan_for_policy(flags_plan, policy)
    runtime = check_model_file(model, args.runtime)
    if args.golden is not None and not args.golden.is_file():
        raise UsageError(
            f"golden set not found: {args.golden}",
            hint=f"make one with: edgequal golden make {model} --inputs INPUTS.npz -o {args.golden}",
        )
    check_shapes(model, runtime, flags_plan.shapes)
    if flags_plan.kernel_paths:
        from edgequal.contract.kernel_paths import expand_paths

        expand_paths(flags_plan.kernel_paths, runtime)  # a path of another runtime: bad usage
        if args.golden is None:
            raise UsageError("--paths needs --golden: each path is a run of the golden set")
    if args.model_signature is not None:
        from edgequal.host.model_file import check_model_signature_file

        check_model_signature_file(args.model_signature)
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
                model_signature=args.model_signature,
                command=getattr(args, "argv", None),
            )
    predicate = report.predicate
    for note in report.notes:
        print_note(note)
    if args.json:
        write_json(json.dumps(predicate, indent=1))
        print_note(f"signed report: {printable(report.path)}")
        for line in reproduce_lines(report.path):
            print_note(line)
    else:
        # The name the device is trusted under (its key signed this), not its address.
        print_summary(
            predicate, report.device, printable(report.path), reproduce_lines(report.path)
        )
    if policy is not None or args.html:
        return gate_after_qualify(args, policy, report.path, device.name, predicate)
    if report.interrupted:
        print_note(f"run {report.run_id} was cancelled; its signed report is above")
    return report.exit_code


def reproduce_lines(path) -> tuple[str, ...]:
    """The summary's lines under the report's path, from its sidecar: the command that made
    the report and the one that repeats it and compares (``edgequal rerun``)."""
    from ..host.devices.reproduce import read_sidecar

    data = read_sidecar(path) if path is not None else None
    if not data:
        return ()
    made = (f"command: {data['command']}",) if data.get("command") else ()
    return (*made, f"reproduce: {data['rerun']}")


def _qualify_repeated(args, policy) -> int:
    """``qualify MODEL --baseline REPORT --repeat-until-decided N`` (host/judge/repeat.py):
    exit 0 SAME or faster, 1 DIFFERENT and slower, or still UNKNOWN after N pairs."""
    import json

    from ..host.devices.trust import KnownDevices
    from ..host.errors import UsageError
    from ..host.judge.policy import BASELINE_DEFAULTS
    from ..host.judge.repeat import baseline_artifacts, repeat_decision, repeat_until_decided
    from ..host.judge.report_file import load_report
    from ..host.present.terminal.summary import print_note, print_table, write_json

    if args.baseline is None or args.repeat_until_decided is None:
        raise UsageError("--baseline and --repeat-until-decided go together")
    base = load_report(args.baseline, known=KnownDevices(), require=True)
    base_model, base_golden = baseline_artifacts(
        base.subjects,
        [args.baseline.parent, args.model.parent],
        args.baseline_model,
        args.baseline_golden,
    )
    settings = {**BASELINE_DEFAULTS, **(policy.baseline if policy else {})}
    with open_device_from_args(args) as device:
        plan = device.plan(args.plan, profile=args.profile, **_plan_flags(args))

        def run(side: str) -> dict:
            model, golden = (
                (base_model, base_golden) if side == "baseline" else (args.model, args.golden)
            )
            report = device.qualify(
                model, golden, plan=plan, on_notice=print_note, command=getattr(args, "argv", None)
            )
            return {"predicate": report.predicate, "path": report.path}

        def progress(result) -> None:
            v = result.verdict
            print_note(
                f"pair {result.pairs}: baseline {result.baseline_p50_ms[-1]:.4g} ms, "
                f"candidate {result.candidate_p50_ms[-1]:.4g} ms: {v['text']}"
            )

        result = repeat_until_decided(
            run, args.repeat_until_decided, settings["min_effect"], settings, progress
        )
    verdict = result.verdict
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
                    verdict["text"],
                ]
            ],
        )
    decided = repeat_decision(verdict)
    if decided is None:
        print_note(f"still UNKNOWN after {result.pairs} pairs: raise --repeat-until-decided")
    return 0 if decided else 1


def printable_name(path) -> str:
    """A file's name for a table title."""
    from ..host.devices.qualify import printable

    return printable(path.name)


def cmd_golden_make(args) -> int:
    from ..host.golden import make_golden, parse_tolerance_args
    from ..host.judge.accuracy import labels_summary
    from ..host.present.terminal.summary import print_line, print_note

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
        preprocessing=declared_preprocessing(args),
        on_warning=warn,
        edge_shapes=parse_edge_shape_args(args.edge_shape),
        raw=args.raw,
        pipeline=args.pipeline,
        reference_inputs=args.reference_inputs,
        model_signature=args.model_signature,
        trusted_keys=args.trusted_key,
        intermediates=args.intermediates,
        labels=args.labels,
    )
    if args.json:
        import json

        from edgequal.contract.golden import read_golden

        from ..host.present.terminal.summary import write_json

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
            "model_signature": (g.manifest.get("model") or {}).get("signature"),
            "labels": labels_summary(g.manifest.get("labels")),
            "warnings": warnings,
        }
        write_json(json.dumps(made, indent=1))
        return 0
    from edgequal.contract.golden import read_golden

    made = read_golden(args.output)
    cases = len(made.cases)
    signed = (made.manifest.get("model") or {}).get("signature")
    labelled = labels_summary(made.manifest.get("labels"))
    print_line(
        f"golden set {args.output}: {cases} case{'s' if cases != 1 else ''}, sha256 {digest}"
        + (f"; model signature verified by {signed['key']}" if signed else "")
        + (f"; {labelled['line']}" if labelled else "")
    )
    return 0


def cmd_demo(args) -> int:
    from .demo import run_demo

    return run_demo(args.out, args.sustain, quick=args.quick, summaries=args.summaries)


def add_parsers(sub) -> None:
    """``demo``, ``qualify`` and ``golden make``: their flags."""
    _add_demo_parser(sub)
    _add_qualify_parser(sub)
    _add_golden_parser(sub)


def _add_demo_parser(sub) -> None:
    """``demo``: where its files go, the sustained length, quick, summaries."""
    d = sub.add_parser("demo", help="qualify example models on a local agent (no device needed)")
    d.add_argument(
        "-o",
        "--out",
        type=Path,
        default=None,
        help="where models, reports and the page go (default: the demo folder of the state "
        "directory, ~/.local/state/edgequal/demo)",
    )
    d.add_argument(
        "--sustain",
        default=None,
        help="length of the sustained phase on the emulated board, e.g. 30s (default 12s, 6s with --quick)",
    )
    d.add_argument(
        "--quick", action="store_true", help="shorter phases: the whole demo in about 20 s"
    )
    d.add_argument(
        "--summaries",
        action="store_true",
        help="also print each model's terminal summary, as qualify does (the page has them)",
    )
    examples(d, "edgequal demo", "edgequal demo --out /tmp/eq-demo --sustain 30s")


def _add_qualify_parser(sub) -> None:
    """``qualify``: the model, its golden set and device, the plan, the measurement options,
    where the report goes; then :func:`_add_qualify_judging_flags`."""
    q = sub.add_parser(
        "qualify",
        help="qualify MODEL on a device",
        description="Measure MODEL on a device (load, latency, sustained throughput, drift) "
        "and write the report it signs.",
    )
    examples(
        q,
        "edgequal qualify model.onnx --golden golden.npz",
        "edgequal qualify model.onnx --golden golden.npz --device pi5 --plan standard -o pi5.report.json",
        "edgequal qualify dynamic.onnx --device ssh://pi@bench-pi5 --shape image=1x3x224x224",
    )
    q.add_argument("model", type=Path, help="the model file (.onnx or .tflite)")
    q.add_argument(
        "--golden",
        type=Path,
        help="golden set (.npz from 'edgequal golden make'); without it, no drift check",
    )
    q.add_argument(
        "--device",
        default="local",
        help="local (default), a trusted NAME, grpc://HOST:PORT or ssh://USER@HOST[:PORT]",
    )
    q.add_argument(
        "--profile",
        help="device profile, e.g. raspberry-pi/5 (default: matched from the fingerprint); "
        "it sets threads, trip temperature and throttle indicators, never a phase",
    )
    q.add_argument(
        "--plan",
        default="quick",
        choices=["quick", "standard", "soak"],
        help="quick (default, CI): 3 cold loads, 200 runs/3 s warm, no sustained phase; "
        "standard: 7 cold loads, 1000 runs/60 s warm, 10 min sustained; "
        "soak: as standard with 30 min sustained (up to 60 while still heating)",
    )
    q.add_argument(
        "--sustain", help="sustained phase duration, e.g. 90s, 10m (0 to skip); overrides --plan"
    )
    add_length_options(q)
    q.add_argument(
        "--window", help="sustained window length (default 30 s, or a tenth of runs under 5 min)"
    )
    q.add_argument(
        "--runtime",
        default="auto",
        help=f"auto (default: from the model file), {' or '.join(RUNTIME_NAMES)}",
    )
    q.add_argument(
        "--threads",
        type=int,
        help="intra-op threads for the runtime (default: the device profile's, else the runtime's)",
    )
    q.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=1x3x224x224",
        help="sizes for an input with dynamic dimensions (repeat for each input)",
    )
    add_edge_shape_option(q)
    add_measurement_options(q)
    add_connection_options(q)
    q.add_argument(
        "--allow-golden-mismatch",
        action="store_true",
        help="qualify with a golden set made for another model file (its recorded sha256 differs)",
    )
    q.add_argument(
        "-o",
        "--output",
        type=Path,
        help="write the signed report here (default: MODEL-TIME.report.json in "
        "$XDG_STATE_HOME/edgequal/reports, ~/.local/state/edgequal/reports)",
    )
    q.add_argument("--json", action="store_true", help="print the verified predicate as JSON")
    _add_qualify_judging_flags(q)


def _add_qualify_judging_flags(q) -> None:
    """qualify's flags for judging the run: a baseline run interleaved until decided, the
    policy committed in the plan and gated on, the model signature, the page and JUnit."""
    q.add_argument(
        "--baseline",
        type=Path,
        metavar="REPORT",
        help="with --repeat-until-decided: the report whose model and golden set (by digest) "
        "run interleaved with MODEL",
    )
    q.add_argument(
        "--repeat-until-decided",
        type=int,
        metavar="N",
        help="run MODEL and the baseline's artifacts in pairs on this device until their "
        "p50s are SAME or DIFFERENT, at most N pairs (docs/gating.md)",
    )
    q.add_argument(
        "--baseline-model",
        type=Path,
        metavar="FILE",
        help="the baseline's model file (default: found by its digest beside REPORT or MODEL)",
    )
    q.add_argument(
        "--baseline-golden",
        type=Path,
        metavar="FILE",
        help="the baseline's golden set (default: found by its digest beside REPORT or MODEL)",
    )
    q.add_argument(
        "--gate",
        type=Path,
        metavar="POLICY",
        help="commit POLICY.toml's digest in the signed plan, then gate the report on it",
    )
    q.add_argument(
        "--policy",
        type=Path,
        metavar="POLICY",
        help="commit POLICY.toml's digest in the signed plan (gate later with edgequal gate)",
    )
    q.add_argument(
        "--model-signature",
        type=Path,
        metavar="SIG",
        help="the model's OpenSSF Model Signing signature: the device verifies it before "
        "loading the model, against the keys its agent.toml trusts (docs/security.md)",
    )
    q.add_argument("--html", type=Path, metavar="PAGE", help="also write the report page here")
    q.add_argument("--junit", type=Path, metavar="FILE", help="with --gate: write JUnit XML here")


def _add_golden_parser(sub) -> None:
    """``golden make``: the model, its inputs (prepared or raw), reference outputs, decision
    rule, tolerances, signature, edge shapes and input contract."""
    g = sub.add_parser("golden", help="golden sets")
    examples(g, "edgequal golden make model.onnx --inputs inputs.npz -o golden.npz")
    gsub = g.add_subparsers(dest="golden_command", required=True)
    gm = gsub.add_parser("make", help="make a golden set: inputs plus reference outputs")
    examples(
        gm,
        "edgequal golden make model.onnx --inputs inputs.npz -o golden.npz",
        "edgequal golden make model.onnx --inputs cases/ --decision 'threshold:score>0.5' -o g.npz",
        "edgequal golden make model.onnx --inputs in.npz --tolerance probs=1e-3,1e-2 -o g.npz",
        "edgequal golden make model.onnx --inputs in.npz --range 0,1 --color-order RGB -o g.npz",
    )
    gm.add_argument("model", type=Path)
    source = gm.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--inputs",
        type=Path,
        help="NPZ (NAME or CASE/NAME arrays) or a DIR of NPZ files: prepared tensors",
    )
    source.add_argument(
        "--raw",
        type=Path,
        metavar="DIR",
        help="raw files (PNG, JPEG, 16-bit WAV, UTF-8 text): one case per file stem, or a "
        "cases.csv (case,INPUT..) for several inputs; needs --pipeline",
    )
    gm.add_argument(
        "--pipeline",
        type=Path,
        metavar="TOML",
        help="with --raw: the stages per input ([inputs.NAME] decode = image|audio|text, ...; "
        "docs/measurement.md)",
    )
    gm.add_argument(
        "--outputs",
        type=Path,
        help="reference outputs, same naming (with --raw: the training framework's, from the "
        "same files); default: run the model here",
    )
    gm.add_argument(
        "--reference-inputs",
        type=Path,
        metavar="NPZ",
        help="with --raw: the tensors the training pipeline fed the model (CASE/INPUT), "
        "compared with the device's preprocessing",
    )
    gm.add_argument("--decision", help="argmax | topk:K | threshold:OUTPUT>VALUE")
    gm.add_argument(
        "--labels",
        type=Path,
        metavar="FILE",
        help="each case's true class (CSV 'case,class' or JSON, which may also set k and "
        "output): the device's accuracy is scored against them (docs/accuracy.md)",
    )
    gm.add_argument(
        "--intermediates",
        action="store_true",
        help="also record every intermediate tensor of the reference run: a model changed "
        "since is localised to its first divergent node (docs/divergence.md)",
    )
    gm.add_argument(
        "--tolerance",
        action="append",
        default=[],
        metavar="OUTPUT=ATOL,RTOL|CLASS",
        help="per-output tolerance the drift check applies: absolute and relative "
        "(e.g. probs=1e-3,1e-2), or a class fp32, fp16, int8 (e.g. probs=int8); "
        "OUTPUT may be * for every output; repeatable (default: the model's dtype class)",
    )
    _add_golden_signature_flags(gm)
    add_edge_shape_option(gm, recorded=True)
    add_input_contract_options(gm)
    gm.add_argument("-o", "--output", type=Path, required=True, help="the golden set to write")
    gm.add_argument("--json", action="store_true", help="print the golden set's summary as JSON")


def _add_golden_signature_flags(gm) -> None:
    """``golden make --model-signature SIG --trusted-key PUB``: the model's signature checked
    on the host before it is run."""
    gm.add_argument(
        "--model-signature",
        type=Path,
        metavar="SIG",
        help="the model's OpenSSF Model Signing signature, verified here before the model is "
        "run (with the verifier the agent uses); the golden set records its digest",
    )
    gm.add_argument(
        "--trusted-key",
        type=Path,
        action="append",
        default=[],
        metavar="PUB",
        help="with --model-signature: a producer's public key (PEM, EC P-256/P-384); repeatable",
    )
