"""``edgequal``: the host CLI. A thin layer over the host library.

Exit codes: 0 pass, 1 gate or verification failed (or a failed qualification),
2 bad usage or input file, 3 device, transport or runtime failure. Errors print
one line with a hint; tracebacks only with --debug. Only argparse is imported at
start, so ``edgequal --help`` is fast.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edgequal.agent.plan import Plan

QUALIFY_EXAMPLES = """\
examples:
  edgequal qualify model.onnx --golden golden.npz
  edgequal qualify model.onnx --golden golden.npz --device pi5 --plan standard -o pi5.report.json
  edgequal qualify dynamic.onnx --device ssh://pi@bench-pi5 --shape image=1x3x224x224
"""


def _add_global_options(parser: argparse.ArgumentParser, top: bool) -> None:
    """Options that may stand before or after the subcommand (``--debug``).

    The top parser holds the defaults; below it a default would overwrite what
    was given before the subcommand, so there the option is set only when given.
    """
    default = False if top else argparse.SUPPRESS
    parser.add_argument("--debug", action="store_true", default=default, help="show tracebacks")


def _add_global_options_below(parser: argparse.ArgumentParser) -> None:
    """Give every subcommand, at any depth, the global options."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                _add_global_options(sub, top=False)
                _add_global_options_below(sub)


def _add_tls_options(parser: argparse.ArgumentParser) -> None:
    """``--tls-ca``, ``--tls-cert``, ``--tls-key`` for a grpc:// device (kept in its entry)."""
    parser.add_argument(
        "--tls-ca", type=Path, help="CA certificate (PEM) that signed the agent's TLS certificate"
    )
    parser.add_argument("--tls-cert", type=Path, help="this host's certificate for mutual TLS")
    parser.add_argument("--tls-key", type=Path, help="the private key of --tls-cert")


def _add_connection_options(parser: argparse.ArgumentParser) -> None:
    """How to reach a device: token and TLS (grpc://), known_hosts, key and agent command (ssh://)."""
    parser.add_argument("--token-file", type=Path, help="bearer token for a grpc:// device")
    _add_tls_options(parser)
    parser.add_argument(
        "--known-hosts", type=Path, help="known_hosts for ssh:// (default ~/.ssh/known_hosts)"
    )
    parser.add_argument("--agent-cmd", help="edgequal-agent command on an ssh:// device")
    parser.add_argument("--ssh-key", type=Path, help="private key file for an ssh:// device")


def _open_device_from_args(args):
    """The device ``--device`` names, opened with the connection options (identity proved)."""
    from .devices import open_device

    return open_device(
        args.device,
        args.token_file,
        args.known_hosts,
        args.agent_cmd,
        args.ssh_key,
        tls=_tls_from_args(args),
    )


def _tls_from_args(args) -> dict[str, str] | None:
    from .devices import tls_options

    return tls_options(args.tls_ca, args.tls_cert, args.tls_key) or None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="edgequal", description="Qualify an exported model on the device that will run it."
    )
    _add_global_options(p, top=True)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    d = sub.add_parser("demo", help="qualify example models on a local agent (no device needed)")
    d.add_argument(
        "--out",
        type=Path,
        default=Path("edgequal-demo"),
        help="where models and reports go (default ./edgequal-demo)",
    )
    d.add_argument(
        "--sustain",
        default="0",
        help="also run a sustained phase on the ONNX model, e.g. 30s (default: skip)",
    )

    q = sub.add_parser(
        "qualify",
        help="qualify MODEL on a device",
        description="Measure MODEL on a device (load, latency, sustained throughput, drift) "
        "and write the report it signs.",
        epilog=QUALIFY_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
        help="device profile, e.g. raspberry-pi/5 (default: matched from the fingerprint)",
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
    q.add_argument(
        "--window", help="sustained window length (default 30 s, or a tenth of runs under 5 min)"
    )
    q.add_argument(
        "--runtime",
        default="auto",
        help="auto (default: from the model file), onnxruntime or litert",
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
    _add_edge_shape_flag(q)
    _add_measurement_flags(q)
    _add_connection_options(q)
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
    q.add_argument(
        "--gate", type=Path, metavar="POLICY", help="then gate the report on POLICY.toml"
    )
    q.add_argument("--html", type=Path, metavar="PAGE", help="also write the report page here")
    q.add_argument("--junit", type=Path, metavar="FILE", help="with --gate: write JUnit XML here")

    g = sub.add_parser("golden", help="golden sets")
    gsub = g.add_subparsers(dest="golden_command", required=True)
    gm = gsub.add_parser("make", help="make a golden set: inputs plus reference outputs")
    gm.add_argument("model", type=Path)
    gm.add_argument(
        "--inputs",
        type=Path,
        required=True,
        help="NPZ (NAME or CASE/NAME arrays) or a DIR of NPZ files",
    )
    gm.add_argument(
        "--outputs", type=Path, help="reference outputs, same naming; default: run the model here"
    )
    gm.add_argument("--decision", help="argmax | topk:K | threshold:OUTPUT>VALUE")
    _add_edge_shape_flag(gm, recorded=True)
    pre = gm.add_argument_group(
        "input contract",
        "what the model was trained on (every input; per input in a TOML, see docs/measurement.md)",
    )
    pre.add_argument(
        "--preprocessing", type=Path, metavar="TOML", help="default: a TOML beside --inputs"
    )
    pre.add_argument("--layout", choices=("NCHW", "NHWC"), type=str.upper)
    pre.add_argument("--range", metavar="LO,HI", help="values the model was trained on, e.g. 0,1")
    pre.add_argument("--mean", metavar="M[,M..]", help="normalization mean per channel")
    pre.add_argument("--std", metavar="S[,S..]", help="normalization std per channel")
    pre.add_argument("--scale", type=float, help="scale applied to 8-bit pixels, e.g. 0.00392")
    pre.add_argument("--color-order", choices=("RGB", "BGR", "GRAY"), type=str.upper)
    pre.add_argument("--resize", metavar="HxW", help="the size inputs were resized to")
    gm.add_argument("-o", "--output", type=Path, required=True)

    v = sub.add_parser("verify", help="verify a signed report")
    v.add_argument("report", type=Path)
    v.add_argument("--device", help="the device that must have signed it")
    v.add_argument(
        "--artifact",
        type=Path,
        action="append",
        default=[],
        help="a file whose sha256 must be a subject",
    )

    dv = sub.add_parser("devices", help="trusted devices")
    dsub = dv.add_subparsers(dest="devices_command", required=True)
    dsub.add_parser("list", help="list trusted devices")
    ds = dsub.add_parser("show", help="show one device")
    ds.add_argument("name")
    dt = dsub.add_parser("trust", help="pin a device's key (shows its fingerprint)")
    dt.add_argument("name")
    dt.add_argument("address", help="grpc://HOST:PORT")
    dt.add_argument("--token-file", type=Path)
    _add_tls_options(dt)
    dt.add_argument(
        "--fingerprint", help="expected key fingerprint (SHA256:...); refuse if different"
    )
    df = dsub.add_parser("forget", help="forget a device")
    df.add_argument("name")
    dsub.add_parser("profiles", help="list device profiles")

    rn = sub.add_parser(
        "runs",
        help="runs on a device: list, show, fetch or cancel (also one a host left behind)",
    )
    rsub = rn.add_subparsers(dest="runs_command", required=True)
    for command, text in (
        ("list", "the run in progress and the runs this host started there"),
        ("show", "one run: in progress, or its signed report's status"),
        ("fetch", "verify a run's signed report and write it"),
        ("cancel", "cancel the run in progress (it is still signed: incomplete, cancelled)"),
    ):
        rp = rsub.add_parser(command, help=text)
        if command != "list":
            rp.add_argument("run_id")
        rp.add_argument("--device", default="local", help="local (default), NAME or address")
        _add_connection_options(rp)
        if command in ("fetch", "cancel"):
            rp.add_argument(
                "--wait", action="store_true", help="wait for the run to end and fetch its report"
            )
            rp.add_argument(
                "-o",
                "--output",
                type=Path,
                help="write the report here (default: RUN_ID.report.json in the reports dir "
                "of qualify)",
            )

    a = sub.add_parser("agent", help="install or inspect the agent on a board")
    asub = a.add_subparsers(dest="agent_command", required=True)
    ai = asub.add_parser("install", help="install the agent over SSH")
    ai.add_argument("url", help="ssh://USER@HOST[:PORT]")
    ai.add_argument("--extras", default="onnx,litert")
    ai.add_argument(
        "--wheelhouse", type=Path, help="install only from this directory (labs without internet)"
    )
    ai.add_argument(
        "--service",
        default="systemd",
        choices=["systemd", "background", "none"],
        help="systemd unit (default), a background process, or install only",
    )
    ai.add_argument("--ssh-key", type=Path, help="private key file for SSH")
    ai.add_argument(
        "--prefix", default="~/.local/share/edgequal", help="install prefix on the board"
    )
    ai.add_argument("--python", default="python3", help="the board's Python 3.10+")
    ai.add_argument(
        "--system-site-packages",
        action="store_true",
        help="let the venv see the board's system packages (e.g. a vendor onnxruntime-gpu)",
    )
    ai.add_argument("--listen", default="0.0.0.0:50051")
    ai.add_argument("--name", help="device name to pin (default: the host name)")
    ai.add_argument("--known-hosts", type=Path)
    ast = asub.add_parser("status", help="agent version, runtimes, key, service")
    ast.add_argument("target", help="ssh://USER@HOST or a device name")
    ast.add_argument("--known-hosts", type=Path)
    _add_gate_parsers(sub)
    _add_fleet_parsers(sub)
    _add_global_options_below(p)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``edgequal``."""
    args = _parser().parse_args(argv)
    from edgequal.agent.errors import AgentError

    from .errors import HostError

    try:
        return _dispatch(args)
    except (HostError, AgentError) as e:
        if args.debug:
            raise
        from .render import print_error

        print_error(str(e), e.hint)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # a bug, not a user error: still one line unless --debug
        if args.debug:
            raise
        from .render import print_error

        print_error(
            f"internal error: {type(e).__name__}: {e}", "run again with --debug for the traceback"
        )
        return 3


def _dispatch(args) -> int:
    if args.command == "demo":
        return cmd_demo(args)
    if args.command == "qualify":
        return cmd_qualify(args)
    if args.command == "golden":
        return cmd_golden_make(args)
    if args.command == "verify":
        return cmd_verify(args)
    if args.command == "devices":
        return cmd_devices(args)
    if args.command == "runs":
        return cmd_runs(args)
    if args.command == "agent":
        return cmd_agent(args)
    if args.command in ("gate", "compare", "report"):
        return cmd_gate_compare_report(args)
    if args.command == "fleet":
        return cmd_fleet(args)
    if args.command == "history":
        return cmd_history(args)
    if args.command == "approve":
        return _cmd_fleet_approve(args)
    raise AssertionError(args.command)


def _add_measurement_flags(q) -> None:
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
        "--operators", action="store_true", default=None, help="per-operator time, delegate use"
    )
    m.add_argument("--scenario-time", metavar="DURATION", help="time per scenario point")
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


EDGE_SHAPE_HINT = (
    "write LABEL:INPUT=DIMS[,INPUT2=DIMS], e.g. largest:image=1x3x1024x1024 or empty:tokens=1x0"
)


def _add_edge_shape_flag(parser, recorded: bool = False) -> None:
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
    }


def _plan_from_args(args, profile=None) -> Plan:
    """The plan: the preset, then the device profile's durations and limits, then explicit flags."""
    from edgequal.agent.plan import make_plan, parse_duration_s, parse_shape_args

    base = profile.plan_fields(args.plan) if profile is not None else {}
    flags = {
        "runtime": args.runtime,
        "threads": args.threads,
        "shapes": parse_shape_args(args.shape) or None,
        "edge_shapes": parse_edge_shape_args(args.edge_shape),
        "sustain_s": parse_duration_s(args.sustain) if args.sustain else None,
        "window_s": parse_duration_s(args.window) if args.window else None,
        **_measurement_flags(args),
    }
    return make_plan(args.plan, **{**base, **{k: v for k, v in flags.items() if v is not None}})


def _pick_profile(args, transport, address: str):
    """``--profile``, else the profile the device's fingerprint matches; none for the local agent.

    The local agent is the machine you are sitting at, not a target board: its plan is
    the preset alone unless a profile is asked for.
    """
    from .profiles import load_profile, match_profile

    if args.profile:
        return load_profile(args.profile)
    if address == "local":
        return None
    return match_profile(transport.info().get("fingerprint") or {})


def cmd_qualify(args) -> int:
    import json

    from .coload_args import parse_coload
    from .qualify import printable, qualify
    from .render import ProgressDisplay, print_note, print_summary, write_json

    model = args.model
    if not model.is_file():
        from .errors import UsageError

        raise UsageError(f"model file not found: {model}")
    policy = _load_gate_policy(args.gate) if args.gate else None
    _plan_from_args(args)  # refuse bad flags before connecting
    device = _open_device_from_args(args)
    transport, name, address = device.transport, device.name, device.address
    with transport:
        plan = _plan_from_args(args, _pick_profile(args, transport, address))
        with ProgressDisplay(
            f"qualifying {printable(model.name)} on {address}", enabled=not args.json
        ) as display:
            qualification = qualify(
                transport,
                model,
                args.golden,
                plan,
                known=device.known,
                device_name=name,
                on_event=display.on_event,
                out=args.output or _default_report_path(model),
                allow_golden_mismatch=args.allow_golden_mismatch,
                on_notice=print_note,
                coload_models=parse_coload(args.coload)[1],
            )
    from .nonces import NonceLedger

    NonceLedger().record(
        qualification.report.nonce, qualification.report.run_id, qualification.envelope
    )
    predicate = qualification.report.predicate
    for note in qualification.notes:
        print_note(note)
    if args.json:
        write_json(json.dumps(predicate, indent=1))
        print_note(f"signed report: {printable(qualification.path)}")
    else:
        print_summary(predicate, address, printable(qualification.path))
    if policy is not None or args.html:
        return _gate_after_qualify(args, policy, qualification.path, name, predicate)
    from edgequal.agent.qualification import exit_code_for

    if qualification.interrupted:
        print_note(f"run {qualification.report.run_id} was cancelled; its signed report is above")
        return 130
    return exit_code_for(predicate["status"], predicate.get("findings", []))


def _default_report_path(model: Path) -> Path:
    """Where a report goes without ``-o``: the host's reports dir, never the working directory."""
    import time

    from .paths import reports_dir

    return reports_dir() / f"{model.stem}-{time.strftime('%Y%m%dT%H%M%S')}.report.json"


def cmd_golden_make(args) -> int:
    from .golden import make_golden
    from .render import print_line

    digest = make_golden(
        args.model,
        args.inputs,
        args.output,
        outputs=args.outputs,
        decision=args.decision,
        preprocessing=_declared_preprocessing(args),
        on_warning=lambda text: print_line(f"warning: {text}"),
        edge_shapes=parse_edge_shape_args(args.edge_shape),
    )
    print_line(f"golden set {args.output} sha256 {digest}")
    return 0


def _declared_preprocessing(args) -> dict:
    """The input-contract flags as ``{"*": keys}`` over an optional ``--preprocessing`` TOML's."""
    from .errors import UsageError
    from .golden import read_preprocessing_toml

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
    declared = read_preprocessing_toml(args.preprocessing) if args.preprocessing else {}
    declared.setdefault("*", {}).update({k: v for k, v in flags.items() if v is not None})
    return declared


def cmd_verify(args) -> int:
    from .errors import UsageError
    from .nonces import NonceLedger
    from .render import print_line
    from .trust import KnownDevices
    from .verify import verify_envelope

    try:
        envelope = args.report.read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read report {args.report}: {e.strerror}") from e
    report = verify_envelope(
        envelope, known=KnownDevices(), device=args.device, artifacts=args.artifact
    )
    issued_here = NonceLedger().check(report.nonce, report.run_id, envelope)
    print_line(
        f"verified: run {report.run_id} signed by device '{report.device_name}' ({report.fingerprint}), "
        f"status {report.status}, {len(report.subjects)} subjects"
        + (", nonce issued by this host" if issued_here else ", nonce not issued by this host")
    )
    return 0


def cmd_devices(args) -> int:
    from .errors import UsageError
    from .render import print_line, print_table
    from .trust import KnownDevices

    known = KnownDevices()
    if args.devices_command == "list":
        rows = [[e.name, " ".join(e.addresses), e.fingerprint] for e in known.list()]
        print_table("Trusted devices", ["name", "addresses", "key fingerprint"], rows)
        return 0
    if args.devices_command == "show":
        entry = known.get(args.name)
        if entry is None:
            raise UsageError(f"unknown device '{args.name}'", hint="edgequal devices list")
        print_line(
            f"{entry.name}\n  address {entry.address}\n  key ed25519 {entry.public_key_b64()}\n  fingerprint {entry.fingerprint}"
            + "".join(f"\n  also at {a}" for a in entry.addresses[1:])
            + (f"\n  token file {entry.token_file}" if entry.token_file else "")
            + "".join(f"\n  {k.replace('_', ' ')} {v}" for k, v in entry.tls.items())
        )
        return 0
    if args.devices_command == "forget":
        known.forget(args.name)
        print_line(f"forgot device '{args.name}'")
        return 0
    if args.devices_command == "profiles":
        from .profiles import all_profiles

        rows = [[p.name, p.description, p.architecture, str(p.cores)] for p in all_profiles()]
        print_table("Device profiles", ["name", "description", "arch", "cores"], rows)
        return 0
    if args.devices_command == "trust":
        from .devices import trust_device

        entry = trust_device(
            known, args.name, args.address, args.token_file, args.fingerprint, _tls_from_args(args)
        )
        print_line(f"trusted '{args.name}' at {args.address}: ed25519 key {entry.fingerprint}")
        return 0
    raise AssertionError(args.devices_command)


def cmd_runs(args) -> int:
    """``runs list|show|fetch|cancel``: runs on a device, including those a host left behind."""
    from .render import print_line, print_table
    from .runs import RunLedger

    ledger = RunLedger()
    device = _open_device_from_args(args)
    with device.transport as transport:
        if args.runs_command == "list":
            lease = transport.info().get("lease")
            rows = []
            if lease:
                rows.append([lease["run_id"], f"in progress for {lease['holder']}", ""])
            for run in reversed(ledger.runs(device.name)):
                if not lease or run.run_id != lease["run_id"]:
                    rows.append([run.run_id, "started by this host", run.model])
            print_table(f"Runs on {device.name}", ["run id", "state", "model"], rows)
            return 0
        run_id = args.run_id
        if args.runs_command == "cancel":
            transport.cancel(run_id)
            print_line(f"run {run_id} on {device.name} is stopping; it is still signed")
            if not args.wait:
                return 0
        if args.runs_command == "show":
            lease = transport.info().get("lease")
            if lease and lease["run_id"] == run_id:
                print_line(
                    f"run {run_id} on {device.name}: in progress for {lease['holder']}, "
                    f"lease expires at unix ms {lease['expires_unix_ms']}"
                )
                return 0
        report, path = _fetch_run(args, transport, device, ledger)
        reason = report.predicate.get("reason")
        print_line(
            f"run {run_id} on {device.name}: {report.status}"
            + (f" ({reason})" if reason else "")
            + (f"; signed report written to {path}" if path else "")
        )
        return 0


def _fetch_run(args, transport, device, ledger):
    """Fetch (``--wait``: once the run ends), verify and, for fetch/cancel, write a run's report."""
    from .nonces import NonceLedger
    from .qualify import printable
    from .runs import REPORT_WAIT_S, report_path_for, wait_for_report, write_report
    from .verify import verify_envelope

    run_id = args.run_id
    wait_s = REPORT_WAIT_S if getattr(args, "wait", False) else 0
    envelope = wait_for_report(transport, run_id, wait_s)
    started = ledger.get(run_id)
    report = verify_envelope(
        envelope,
        known=device.known,
        device=device.name,
        expected_run_id=run_id,
        expected_nonce=started.nonce if started else None,
    )
    nonces = NonceLedger()
    if started and not nonces.check(report.nonce, run_id, envelope):
        nonces.record(report.nonce, run_id, envelope)
    if args.runs_command == "show":
        return report, None
    path = write_report(args.output or report_path_for(run_id), envelope)
    return report, printable(path)


def cmd_agent(args) -> int:
    import json

    from .render import print_line, print_note

    if args.agent_command == "install":
        from .install import install_agent

        result = install_agent(
            args.url,
            extras=tuple(x for x in args.extras.split(",") if x),
            wheelhouse=args.wheelhouse,
            service=args.service,
            listen=args.listen,
            prefix=args.prefix,
            python=args.python,
            device_name=args.name,
            system_site_packages=args.system_site_packages,
            known_hosts=args.known_hosts,
            key_file=args.ssh_key,
            on_step=lambda message: print_note(f"agent install: {message}"),
        )
        print_line(str(result))
        return 0
    from .install import agent_status

    print_line(json.dumps(agent_status(args.target, known_hosts=args.known_hosts), indent=1))
    return 0


def cmd_demo(args) -> int:
    from .demo import run_demo

    return run_demo(args.out, args.sustain)


# --- gate, compare, report html (host/gate.py, host/compare.py, host/report_html.py) ---


def _add_gate_parsers(sub) -> None:
    gt = sub.add_parser("gate", help="judge a signed report against a policy (and a baseline)")
    gt.add_argument("report", type=Path)
    gt.add_argument("--policy", type=Path, required=True, help="policy TOML (docs/gating.md)")
    gt.add_argument("--baseline", type=Path, help="the last approved report to compare with")
    gt.add_argument("--junit", type=Path, metavar="FILE", help="write JUnit XML here")
    gt.add_argument("--json", action="store_true", help="print the verdict as JSON")
    gt.add_argument("--device", help="the device that must have signed the report")
    gt.add_argument("--html", type=Path, metavar="PAGE", help="also write the report page here")
    c = sub.add_parser("compare", help="compare reports side by side (the first is the reference)")
    c.add_argument("reports", type=Path, nargs="+", metavar="REPORT")
    c.add_argument("--json", action="store_true", help="print the comparison as JSON")
    r = sub.add_parser("report", help="render reports")
    rsub = r.add_subparsers(dest="report_command", required=True)
    rh = rsub.add_parser("html", help="one self-contained HTML page with plots")
    rh.add_argument("reports", type=Path, nargs="+", metavar="REPORT")
    rh.add_argument("-o", "--output", type=Path, required=True, metavar="PAGE")
    rh.add_argument("--device", help="the device that must have signed the reports")


def _load_gate_policy(path: Path):
    from .policy import load_policy

    return load_policy(path)


def cmd_gate_compare_report(args) -> int:
    """``gate``: exit 0 passed, 1 failed; ``compare``/``report html``: 1 if a report did not verify."""
    import json

    from .render import print_line, write_json
    from .report_file import load_report
    from .trust import KnownDevices

    if args.command == "gate":
        from .gate import run_gate

        policy = _load_gate_policy(args.policy)
        result = run_gate(args.report, policy, device=args.device, baseline_path=args.baseline)
        return _finish_gate(args, result)
    known = KnownDevices()
    reports = [
        load_report(p, known=known, device=getattr(args, "device", None)) for p in args.reports
    ]
    if args.command == "compare":
        from .compare import compare_reports
        from .render import print_comparison

        comparison = compare_reports(reports).to_json()
        if args.json:
            write_json(json.dumps(comparison, indent=1))
        else:
            print_comparison(comparison)
    else:
        from .report_html import write_report_html

        write_report_html(args.output, reports)
        print_line(f"report page {args.output}")
    return 0 if all(r.verified for r in reports) else 1


def _finish_gate(args, result) -> int:
    """JUnit, page, and the verdict on the screen or as JSON; the gate's exit code."""
    import json

    from .render import print_gate_result, write_json

    if getattr(args, "junit", None):
        from .junit import write_junit

        write_junit(args.junit, [result])
    if getattr(args, "html", None):
        from .report_file import load_report
        from .report_html import write_report_html
        from .trust import KnownDevices

        write_report_html(
            args.html, [load_report(result.report, known=KnownDevices())], gate=[result]
        )
    if args.command == "gate" and args.json:
        write_json(json.dumps(result.to_json(), indent=1))
    elif args.command == "gate" or not args.json:  # qualify --json keeps stdout one JSON document
        print_gate_result(result.to_json())
    return 0 if result.passed else 1


def _gate_after_qualify(args, policy, report_path: Path, device_name: str, predicate) -> int:
    """``qualify --gate POLICY`` / ``--html PAGE``: the gate decides the exit code when asked."""
    if policy is None:
        from edgequal.agent.qualification import exit_code_for

        from .report_file import load_report
        from .report_html import write_report_html
        from .trust import KnownDevices

        write_report_html(args.html, [load_report(report_path, known=KnownDevices())])
        return exit_code_for(predicate["status"], predicate.get("findings", []))
    from .gate import run_gate

    result = run_gate(report_path, policy, device=device_name)
    return _finish_gate(args, result)


# -- fleet and history -----------------------------------------------------------


def _add_fleet_parsers(sub) -> None:
    f = sub.add_parser("fleet", help="qualify many models on a lab's boards (docs/fleet.md)")
    fsub = f.add_subparsers(dest="fleet_command", required=True)
    fr = fsub.add_parser(
        "run",
        help="every model on every matching device, devices in parallel",
        description="Run every model of MODELS.toml on every device of LAB.toml that carries "
        "the tags, one run at a time per device under its lease; write the signed reports, "
        "index.json, junit.xml and a matrix page to --out.",
    )
    fr.add_argument("lab", type=Path, help="the lab file (docs/lab.example.toml)")
    fr.add_argument("--models", type=Path, required=True, help="the models file")
    fr.add_argument("--tags", help="only devices with all these tags, e.g. pi,arm64")
    fr.add_argument("--plan", choices=["quick", "standard", "soak"], default="quick")
    fr.add_argument("--sustain", help="sustained phase duration for every run (0 to skip)")
    fr.add_argument("--out", type=Path, default=Path("fleet-out"), help="output directory")
    fr.add_argument(
        "--resume", action="store_true", help="keep runs whose report in --out verifies"
    )
    fr.add_argument("--gate", type=Path, metavar="POLICY", help="gate every report on POLICY")
    fr.add_argument(
        "--wait",
        nargs="?",
        const="forever",
        metavar="TIMEOUT",
        help="wait for a device another host holds (in order of arrival), up to TIMEOUT "
        "(e.g. 30m) or without limit; default: fail fast naming the holder",
    )
    fr.add_argument("--retries", type=int, default=2, help="retries per run (default 2)")
    fr.add_argument("--history", metavar="URL", help="history database URL (default: the lab's)")
    fr.add_argument(
        "--no-record", action="store_true", help="do not record the reports in the history"
    )
    fr.add_argument(
        "--health-file",
        type=Path,
        metavar="FILE",
        help="boards marked unhealthy here are skipped (default: the lab's, see fleet health)",
    )

    fh = fsub.add_parser(
        "health",
        help="a small known model on every board; unhealthy boards are skipped by fleet run",
        description="Run the micro example model on every board; report fingerprint, agent "
        "version, clock sync, disk limits and temperature at rest; mark a board that fails or "
        "drifted (firmware, kernel, OS, runtime changed since its last healthy check) "
        "unhealthy until it passes again.",
    )
    fh.add_argument("lab", type=Path)
    fh.add_argument("--tags", help="only devices with all these tags")
    fh.add_argument("--out", type=Path, default=Path("health-out"), help="the check runs' outputs")
    fh.add_argument("--health-file", type=Path, metavar="FILE", help="the health state file")
    fh.add_argument(
        "--accept",
        action="store_true",
        help="accept fingerprint changes (a deliberate update) as the new healthy state",
    )
    fh.add_argument("--wait", nargs="?", const="forever", metavar="TIMEOUT")
    fh.add_argument("--retries", type=int, default=1)
    fh.add_argument("--json", action="store_true")

    # ``edgequal approve`` and its alias ``edgequal fleet approve``: one parser shape, one command.
    for parent in (sub, fsub):
        fa = parent.add_parser(
            "approve",
            help="keep a verified report, its model, golden set, plan and runtime "
            "configuration in DIR",
        )
        fa.add_argument("report", type=Path)
        fa.add_argument("--model", type=Path, required=True, help="the model the report measured")
        fa.add_argument("--golden", type=Path, help="the golden set it used")
        fa.add_argument("--into", type=Path, required=True, metavar="DIR", help="the approved set")
        fa.add_argument("--name", help="the model's name in the set (default: the file's stem)")
    fq = fsub.add_parser(
        "requalify",
        help="re-run approved models where firmware or runtime changed; gate each against "
        "its approved report",
    )
    fq.add_argument("approved", type=Path, metavar="DIR", help="the approved set")
    fq.add_argument("lab", type=Path)
    fq.add_argument("--policy", type=Path, required=True, help="gate policy with [baseline]")
    fq.add_argument("--all", action="store_true", help="re-run every approved pair")
    fq.add_argument("--out", type=Path, default=Path("requalify-out"))
    fq.add_argument("--wait", nargs="?", const="forever", metavar="TIMEOUT")
    fq.add_argument("--retries", type=int, default=2)
    fq.add_argument("--history", metavar="URL")
    fq.add_argument("--no-record", action="store_true")
    fq.add_argument(
        "--health-file", type=Path, metavar="FILE", help="boards marked unhealthy are skipped"
    )

    h = sub.add_parser("history", help="verified reports over time (docs/fleet.md)")
    hsub = h.add_subparsers(dest="history_command", required=True)
    hl = hsub.add_parser("list", help="recorded runs, newest first")
    hs = hsub.add_parser(
        "show", help="one recorded run (RUN_ID, or the newest for --device/--model), verified"
    )
    hs.add_argument("run_id", nargs="?", metavar="RUN_ID", help="a run id or its prefix")
    ht = hsub.add_parser(
        "trend",
        help="figures over time per board × model, firmware and runtime changes marked",
    )
    ht.add_argument(
        "--html", type=Path, metavar="PAGE", help="also write the trend page (plots) to PAGE"
    )
    hr = hsub.add_parser("record", help="verify reports and record them")
    hr.add_argument("reports", type=Path, nargs="+")
    hr.add_argument("--device", help="the device that must have signed them")
    for q in (hl, hs, ht, hr):
        q.add_argument(
            "--db", metavar="URL", help="database URL (default: SQLite in the state dir)"
        )
    for q in (hl, hs, ht):
        q.add_argument("--device", help="only this device")
        q.add_argument("--model", help="only this model (name, name without extension, SHA-256)")
        q.add_argument("--json", action="store_true")
    for q in (hl, ht):
        q.add_argument("--limit", type=int, default=50, help="rows (per board × model for trend)")


def _wait_s(text: str | None) -> float | None:
    """``--wait``: absent 0 (fail fast), bare None (no limit), else the duration."""
    from edgequal.agent.plan import parse_duration_s

    if text == "forever":
        return None
    return 0.0 if text is None else parse_duration_s(text)


def _history_recorder(args, lab):
    from .history import History

    if args.no_record:
        return None
    url = args.history or (lab.history_url.read("lab history_url") if lab.history_url else None)
    history = History.open(url)
    return lambda path, device: history.record_file(path, device=device)


def _run_fleet(lab, models, options, args, title: str, **kwargs) -> int:
    from .fleet import FleetRunner
    from .render import FleetMatrix, print_note, print_table

    notes = kwargs.pop("notes", None)
    runner = FleetRunner(lab, models, options, record_report=_history_recorder(args, lab), **kwargs)
    matrix = FleetMatrix(
        title, [m.name for m in models], list(dict.fromkeys(r.device for r in runner.result.runs))
    )
    runner.on_change = matrix.on_change
    runner.result.notes = notes or {}
    with matrix:
        result = runner.run()
    rows = [
        [r.model, r.device, r.state, str(r.attempts), r.gate_summary or "", r.error or ""]
        for r in result.runs
    ]
    print_table(title, ["model", "device", "state", "attempts", "gate", "error"], rows)
    print_note(f"reports, index.json, junit.xml and index.html in {options.out_dir}")
    return result.exit_code()


def cmd_fleet(args) -> int:
    if args.fleet_command == "approve":
        return _cmd_fleet_approve(args)
    if args.fleet_command == "health":
        return _cmd_fleet_health(args)
    if args.fleet_command == "requalify":
        return _cmd_fleet_requalify(args)
    from edgequal.agent.plan import parse_duration_s

    from .fleet import FleetOptions
    from .health import HealthState, default_health_path
    from .inventory import load_lab, load_models, parse_tags

    lab = load_lab(args.lab)
    models = load_models(args.models)
    wait_s = _wait_s(args.wait)
    unhealthy = HealthState.load(args.health_file or default_health_path(lab)).unhealthy()
    overrides = {"sustain_s": parse_duration_s(args.sustain)} if args.sustain else {}
    options = FleetOptions(
        out_dir=args.out,
        tags=parse_tags(args.tags),
        plan=args.plan,
        plan_overrides=overrides,
        resume=args.resume,
        policy_path=args.gate,
        wait_s=wait_s,
        retries=max(0, args.retries),
        lease_ttl_s=lab.lease_ttl_s,
        unhealthy=unhealthy,
    )
    return _run_fleet(lab, models, options, args, f"fleet {lab.name}")


def _cmd_fleet_health(args) -> int:
    """``fleet health``: 0 every board healthy, 1 any unhealthy."""
    import json

    from .health import check_health, default_health_path
    from .inventory import load_lab, parse_tags
    from .render import print_note, print_table, write_json

    lab = load_lab(args.lab)
    state_path = args.health_file or default_health_path(lab)
    checks = check_health(
        lab,
        state_path,
        args.out,
        tags=parse_tags(args.tags),
        accept=args.accept,
        wait_s=_wait_s(args.wait),
        retries=max(0, args.retries),
    )
    if args.json:
        write_json(json.dumps([c.to_json() for c in checks], indent=1, default=str))
    else:
        rows = []
        for c in checks:
            clock = c.clock or {}
            offset = clock.get("offset_s")
            rows.append(
                [
                    c.device,
                    "healthy" if c.healthy else "UNHEALTHY",
                    c.status or "",
                    c.agent_version or "",
                    ""
                    if not clock
                    else ("synced" if clock.get("synced") else "UNSYNCED")
                    + ("" if offset is None else f" ({offset:+.1f} s)"),
                    _disk_text(c.disk),
                    c.temp_at_rest_c
                    if isinstance(c.temp_at_rest_c, str)
                    else f"{c.temp_at_rest_c:.1f} °C",
                    (c.key_fingerprint or "")[:23],
                    "; ".join(c.reasons),
                ]
            )
        columns = [
            "device",
            "health",
            "check",
            "agent",
            "clock",
            "disk",
            "temp at rest",
            "key",
            "why",
        ]
        print_table(f"health {lab.name}", columns, rows)
        print_note(f"health state: {state_path}")
    return 0 if all(c.healthy for c in checks) else 1


def _disk_text(disk: dict) -> str:
    parts = []
    if disk.get("free_bytes"):
        parts.append(f"{disk['free_bytes'] / 2**30:.1f} GiB free")
    quota = disk.get("quota_bytes")
    parts.append(f"quota {quota / 2**30:.1f} GiB" if quota else "no quota")
    if disk.get("max_artifact_bytes"):
        parts.append(f"artifacts ≤ {disk['max_artifact_bytes'] / 2**20:.0f} MiB")
    return ", ".join(parts)


def _cmd_fleet_approve(args) -> int:
    from .render import print_note
    from .requalify import approve

    name, device = approve(args.report, args.model, args.golden, args.into, name=args.name)
    print_note(f"approved {name} on {device} in {args.into}")
    return 0


def _cmd_fleet_requalify(args) -> int:
    from .fleet import FleetOptions
    from .inventory import load_lab
    from .render import print_note
    from .requalify import plan_requalification

    lab = load_lab(args.lab)
    _load_gate_policy(args.policy)  # a bad policy is refused even when nothing runs
    plan = plan_requalification(args.approved, lab, every=args.all)
    for u in plan.unchanged:
        print_note(f"{u['model']} on {u['device']}: firmware and runtime unchanged; not re-run")
    for key, changes in plan.changes.items():
        what = ", ".join(f"{c['field']}: {c['approved']} → {c['now']}" for c in changes)
        print_note(f"{key}: {what or 're-run'}")
    if not plan.runs:
        print_note("nothing changed since the approvals: nothing to re-qualify")
        return 0
    from .health import HealthState, default_health_path

    options = FleetOptions(
        out_dir=args.out,
        policy_path=args.policy,
        wait_s=_wait_s(args.wait),
        retries=max(0, args.retries),
        lease_ttl_s=lab.lease_ttl_s,
        # A drifted board is what a re-qualification is for; one that fails its check is not.
        unhealthy=HealthState.load(args.health_file or default_health_path(lab)).unhealthy(
            drift=False
        ),
    )
    notes = {"changes": plan.changes, "unchanged": plan.unchanged}
    return _run_fleet(
        lab, plan.models, options, args, f"requalify {lab.name}", pairs=plan.runs, notes=notes
    )


def cmd_history(args) -> int:
    import json

    from .history import History
    from .render import print_note, print_table, write_json

    history = History.open(args.db)
    if args.history_command == "record":
        from .trust import KnownDevices

        known = KnownDevices()
        added = sum(
            1 for p in args.reports if history.record_file(p, device=args.device, known=known)
        )
        print_table("recorded", ["reports", "new"], [[str(len(args.reports)), str(added)]])
        return 0
    if args.history_command == "show":
        return _history_show(history, args)
    if args.history_command == "list":
        rows = history.list(device=args.device, model=args.model, limit=args.limit)
        if args.json:
            write_json(json.dumps(rows, indent=1, default=str))
            return 0
        print_table(f"history ({history.url_for_display})", _HISTORY_COLUMNS, _history_rows(rows))
        return 0
    trends = history.trends(device=args.device, model=args.model, limit=args.limit)
    if args.html:
        from .history_page import write_trend_page

        write_trend_page(args.html, trends, source=history.url_for_display)
    if args.json:
        payload = [{"device": d, "model": m, "runs": rows} for (d, m), rows in trends.items()]
        write_json(json.dumps(payload, indent=1, default=str))
    else:
        if not trends:
            print_note("no recorded runs match")
        for (device, model), rows in trends.items():
            print_table(
                f"{model} on {device}", _HISTORY_COLUMNS + ["changed"], _history_rows(rows, True)
            )
    if args.html:
        print_note(f"trend page: {args.html}")
    return 0


_HISTORY_COLUMNS = ["measured", "device", "model", "status", "p50 ms", "p99 ms", "runtime", "run"]


def _history_rows(rows: list[dict], changes: bool = False) -> list[list[str]]:
    table = []
    for r in rows:
        line = [
            str(r["measured_at"])[:19],
            r["device"],
            r["model_name"],
            r["status"],
            "" if r["p50_ms"] is None else f"{r['p50_ms']:.3f}",
            "" if r["p99_ms"] is None else f"{r['p99_ms']:.3f}",
            f"{r['runtime'] or ''} {r['runtime_version'] or ''}".strip(),
            r["run_id"],
        ]
        if changes:
            line.append(", ".join(r.get("changes", [])))
        table.append(line)
    return table


def _history_show(history, args) -> int:
    """``history show``: one run's row, and its stored envelope verified again here."""
    import json

    from .errors import HostError, UsageError
    from .render import print_table, write_json
    from .trust import KnownDevices
    from .verify import verify_envelope

    row = history.show(args.run_id, device=args.device, model=args.model)
    if row is None:
        raise UsageError("no recorded run matches", hint="edgequal history list")
    envelope = row.pop("envelope")
    try:
        verify_envelope(envelope, known=KnownDevices(), device=row["device"])
        row["signature"] = "verified against the pinned key"
    except HostError as e:
        row["signature"] = f"not verified here: {e}"
    if args.json:
        write_json(json.dumps(row, indent=1, default=str))
        return 0
    fields = [[k, "" if v is None else str(v)] for k, v in row.items() if k != "id"]
    print_table(f"run {row['run_id']} on {row['device']}", ["field", "value"], fields)
    return 0


if __name__ == "__main__":
    sys.exit(main())
