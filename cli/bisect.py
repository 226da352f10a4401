"""``edgequal bisect runtime``: the first runtime version at which a model got slower or its
outputs moved, between a good and a bad one (host/lab/bisect.py; docs/measurement.md
"Bisecting a runtime version").

Exit codes: 0 the first bad version found, 1 not reproducible (the bad version is not
DIFFERENT from the good one) or undecided, 2 bad usage, 3 device or install failure.
"""

from __future__ import annotations

from pathlib import Path

from edgequal.contract.cli_args import examples

from .device_args import add_connection_options, open_device_from_args
from .plan_args import add_length_options, length_flags


def add_parsers(sub) -> None:
    """``bisect runtime``: its flags."""
    b = sub.add_parser(
        "bisect",
        help="find the first runtime version at which a model regressed",
        description="Find the first bad version between a good and a bad one.",
    )
    examples(
        b,
        "edgequal bisect runtime model.onnx --device pi5 --good onnxruntime==1.19.0 "
        "--bad onnxruntime==1.22.1",
    )
    bsub = b.add_subparsers(dest="bisect_command", required=True)
    r = bsub.add_parser(
        "runtime",
        help="bisect the released versions of a runtime between --good and --bad",
        description="Install the versions between --good and --bad as runtime environments on "
        "the device (as `agent runtime add` does), measure each beside the good one in one run, "
        "in binary-search order, and name the first bad one with the operators that moved. "
        "Exit 0 found, 1 not reproducible or undecided, 2 bad usage, 3 device or install failure.",
    )
    r.add_argument("model", type=Path)
    r.add_argument("--golden", type=Path, help="golden set (drift is compared on its cases)")
    r.add_argument("--device", default="local", help="local | NAME | grpc://H:P | ssh://U@H")
    r.add_argument(
        "--good", required=True, metavar="DIST==A", help="a version without the regression"
    )
    r.add_argument("--bad", required=True, metavar="DIST==B", help="a version with it")
    r.add_argument(
        "--metric",
        choices=("p50", "drift"),
        default="p50",
        help="p50: a clean p50 DIFFERENT from the good version's, the bad version's way; "
        "drift: outputs beyond the golden set's tolerances of the good version's, or a flipped "
        "decision (default p50)",
    )
    r.add_argument(
        "--versions",
        metavar="A,B,C",
        help="the versions to bisect (those between --good and --bad are used; no network)",
    )
    r.add_argument(
        "--wheelhouse",
        type=Path,
        metavar="DIR",
        help="install from the wheels in DIR only (no index), and, without --versions, bisect "
        "the versions it holds",
    )
    r.add_argument("--plan", default="quick", choices=("quick", "standard", "soak"))
    add_length_options(r)
    r.add_argument(
        "--rounds",
        type=int,
        metavar="N",
        help="ABBA latency segments per version and run (default 4)",
    )
    r.add_argument(
        "--reports", type=Path, metavar="DIR", help="where each run's signed report goes"
    )
    r.add_argument("--json", action="store_true", help="print the result as JSON")
    add_connection_options(r)
    examples(
        r,
        "edgequal bisect runtime model.onnx --device pi5 --good onnxruntime==1.19.0 "
        "--bad onnxruntime==1.22.1",
        "edgequal bisect runtime model.onnx --golden g.npz --metric drift --good onnxruntime==1.19.0 "
        "--bad onnxruntime==1.32.0 --versions 1.20.1,1.24.1 --wheelhouse wheels/",
    )


def cmd_bisect(args) -> int:
    """``bisect runtime``: versions, then the search on the device, then the table."""
    import json

    from ..host.errors import UsageError
    from ..host.judge.policy import BASELINE_DEFAULTS
    from ..host.judge.verdict import VERDICT_DEFAULTS
    from ..host.lab.bisect import (
        bisect_versions,
        parse_pins,
        parse_version_list,
        registry_versions,
        versions_between,
        wheelhouse_versions,
    )
    from ..host.model_file import check_model_file
    from ..host.present.terminal.summary import print_note, print_table, write_json

    good, bad = parse_pins(args.good, args.bad)
    check_model_file(args.model, good.runtime)
    if args.golden is not None and not args.golden.is_file():
        raise UsageError(f"golden set not found: {args.golden}")
    if args.wheelhouse is not None and not args.wheelhouse.is_dir():
        raise UsageError(f"wheelhouse {args.wheelhouse} is not a directory")
    if args.repeat is not None:
        raise UsageError(
            "bisect runtime takes no --repeat",
            hint="each version is measured in ABBA segments beside the good one: raise --rounds",
        )
    if args.rounds is not None and args.rounds < 1:
        raise UsageError(f"--rounds must be at least 1, got {args.rounds}")
    available = None
    if args.versions:
        available = parse_version_list(args.versions)
    elif args.wheelhouse is not None:
        available = wheelhouse_versions(args.wheelhouse, good.distribution)
    if args.reports is not None:
        args.reports.mkdir(parents=True, exist_ok=True)
    settings = {**VERDICT_DEFAULTS, **BASELINE_DEFAULTS}
    with open_device_from_args(args) as device:
        if available is None:  # the index's releases with a wheel for the board
            available = registry_versions(good.distribution, _board_tags(device))
        versions = versions_between(available, good.version, bad.version)
        if not args.json:
            print_note(
                f"bisecting {len(versions)} versions of {good.distribution}: {', '.join(versions)}"
            )
        ensure = _installer(device, args, good.distribution)

        def measure(baseline: str, candidate: str) -> dict:
            envs = [ensure(baseline), ensure(candidate)]
            plan = device.plan(
                args.plan,
                runtime_envs=envs,
                runtime_env_rounds=args.rounds,
                operator_profile=True,
                **length_flags(args),
            )
            out = None
            if args.reports is not None:  # a version measured again keeps both reports
                stem = f"{args.model.stem}-{candidate}-vs-{baseline}"
                out = args.reports / f"{stem}.report.json"
                again = 2
                while out.exists():
                    out, again = args.reports / f"{stem}-{again}.report.json", again + 1
            report = device.qualify(args.model, args.golden, plan=plan, out=out)
            return {
                "predicate": report.predicate,
                "path": report.path,
                "baseline_env": envs[0],
                "candidate_env": envs[1],
            }

        def progress(t) -> None:
            if not args.json:
                print_note(f"{good.distribution} {t.version}: {t.verdict} ({t.why})")

        result = bisect_versions(
            good.distribution, versions, measure, args.metric, settings, progress
        )
    if args.json:
        write_json(json.dumps(result.to_json(), indent=1))
    else:
        print_table(
            f"{args.model.name}: {good.distribution} {good.version} (good) to {bad.version} (bad), "
            f"{args.metric}",
            ["version", args.metric, "good's", "ratio", "verdict vs good", "bad?"],
            [_row(t) for t in result.trials],
            whole=("version",),
        )
        print_note(result.headline())
    return result.exit_code


def _row(t) -> list[str]:
    unit = " ms" if t.metric == "p50" else ""

    def fig(v):
        return "—" if v is None else f"{v:.4g}{unit}"

    return [
        t.version,
        fig(t.figure),
        fig(t.baseline_figure),
        "—" if t.ratio is None else f"×{t.ratio:.3f}",
        f"{t.verdict}: {t.why}",
        "bad" if t.bad else ("?" if t.verdict == "UNKNOWN" else "good"),
    ]


def _board_tags(device) -> dict | None:
    """The wheel tags an ssh:// board's agent reports (``runtime tags``); None elsewhere:
    the local agent is this host's Python, and a grpc:// device installs nothing."""
    from ..host.transport.schemes import SSH, is_scheme

    if not is_scheme(device.address, SSH):
        return None
    return device.transport.agent_json(["runtime", "tags"], "read the board's wheel tags")


def _installer(device, args, distribution: str):
    """``ensure(version)``: the name of the device's environment of that version, installed
    first when the device lacks it: on the local agent by its own ``runtime add``, over SSH
    as ``agent runtime add`` does; a grpc:// device must hold them already (installing runs
    code, which no RPC may do)."""
    from edgequal.contract.runtimes import Requirement

    from ..host.errors import HostError, UsageError
    from ..host.install.runtime_envs import add_local_runtime_env, add_runtime_env
    from ..host.present.terminal.summary import print_note
    from ..host.transport.schemes import LOCAL, SSH, is_scheme

    def installed() -> set[str]:
        listed = (device.transport.info().get("fingerprint") or {}).get("runtime_envs") or []
        return {e.get("name") for e in listed if isinstance(e, dict)}

    def ensure(version: str) -> str:
        req = Requirement(distribution, version)
        name = req.default_name
        if name in installed():
            return name
        if not args.json:
            print_note(f"installing {req} on {device.address}")
        try:
            if is_scheme(device.address, LOCAL):
                add_local_runtime_env(
                    device.transport.state_dir, str(req), wheelhouse=args.wheelhouse
                )
            elif is_scheme(device.address, SSH):
                add_runtime_env(
                    device.address,
                    str(req),
                    wheelhouse=args.wheelhouse,
                    known_devices=device.known,
                    agent_cmd=args.agent_cmd,
                    known_hosts=args.known_hosts,
                    key_file=args.ssh_key,
                )
            else:
                raise UsageError(
                    f"{device.address} has no runtime environment {name}",
                    hint=f"install it over SSH first: edgequal agent runtime add ssh://USER@HOST {req}",
                )
        except UsageError as e:
            if not is_scheme(device.address, LOCAL) and not is_scheme(device.address, SSH):
                raise
            raise HostError(f"installing {req} failed: {e}", hint=e.hint) from e
        return name

    return ensure
