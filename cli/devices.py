"""``edgequal devices``, ``runs`` and ``agent``: trusted devices and profiles, the runs on a
device (also those a host left behind), the agent installed on a board."""

from __future__ import annotations

import json
from pathlib import Path

from edgequal.contract.cli_args import examples
from edgequal.contract.runtimes import RUNTIME_EXTRAS

from .device_args import (
    add_board_ssh_options,
    add_connection_options,
    add_tls_options,
    open_device_from_args,
    ssh_options_from_args,
    tls_from_args,
)


def cmd_devices(args) -> int:
    from ..host.devices.trust import KnownDevices
    from ..host.errors import UsageError
    from ..host.present.terminal.summary import print_line, print_table

    known = KnownDevices()
    if args.devices_command == "list":
        if args.json:
            from ..host.present.terminal.summary import write_json

            listed = [
                {
                    "name": e.name,
                    "addresses": list(e.addresses),
                    "fingerprint": e.fingerprint,
                    "public_key_b64": e.public_key_b64(),
                    "token_file": e.token_file,
                    "tls": dict(e.tls),
                }
                for e in known.list()
            ]
            write_json(json.dumps(listed, indent=1))
            return 0
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
        from ..host.devices.profiles import all_profiles

        rows = [[p.name, p.description, p.architecture, str(p.cores)] for p in all_profiles()]
        print_table("Device profiles", ["name", "description", "arch", "cores"], rows)
        return 0
    if args.devices_command == "trust":
        from ..host.devices.resolve import trust_device

        entry = trust_device(
            known,
            args.name,
            args.address,
            args.token_file,
            args.fingerprint,
            tls_from_args(args),
            replace_key=args.replace_key,
        )
        print_line(f"trusted '{args.name}' at {args.address}: ed25519 key {entry.fingerprint}")
        return 0
    raise AssertionError(args.devices_command)


def cmd_runs(args) -> int:
    """``runs list|show|fetch|cancel``: runs on a device, including those a host left behind."""
    from ..host.devices.runs import RunLedger
    from ..host.present.terminal.summary import print_line, print_table

    ledger = RunLedger()
    device = open_device_from_args(args)
    with device.transport as transport:
        if args.runs_command == "list":
            lease = transport.info().get("lease")
            listed = []
            if lease:
                from edgequal.contract.lease import Lease

                listed.append(
                    {
                        "run_id": lease["run_id"],
                        "state": "in progress",
                        "holder": lease["holder"],
                        "detail": Lease.from_json(lease).describe(),
                        "model": None,
                    }
                )
            for run in reversed(ledger.runs(device.name)):
                if not lease or run.run_id != lease["run_id"]:
                    listed.append(
                        {
                            "run_id": run.run_id,
                            "state": "started by this host",
                            "started_unix": run.started_unix,
                            "model": run.model,
                        }
                    )
            if args.json:
                from ..host.present.terminal.summary import write_json

                write_json(json.dumps({"device": device.name, "runs": listed}, indent=1))
                return 0
            rows = [
                [
                    r["run_id"],
                    r["state"] + (f" for {r['holder']}" if "holder" in r else ""),
                    r["model"] or "",
                ]
                for r in listed
            ]
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
                from edgequal.contract.lease import Lease

                print_line(
                    f"run {run_id} on {device.name}: in progress for {lease['holder']}, "
                    + Lease.from_json(lease).timing()
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
    from ..host.devices.nonces import NonceLedger
    from ..host.devices.runs import REPORT_WAIT_S, report_path_for, wait_for_report, write_report
    from ..host.devices.verify import verify_envelope
    from ..host.errors import printable

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
    from ..host.present.terminal.summary import print_line, print_note

    if args.agent_command == "install":
        from ..host.install.agent import install_agent

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
            ssh_options=ssh_options_from_args(args),
            on_step=lambda message: print_note(f"agent install: {message}"),
        )
        print_line(str(result))
        return 0
    if args.agent_command == "runtime":
        return _cmd_agent_runtime(args)
    from ..host.install.agent import agent_status

    status = agent_status(args.target, ssh_options=ssh_options_from_args(args))
    print_line(json.dumps(status, indent=1))
    return 0


def _cmd_agent_runtime(args) -> int:
    """``agent runtime add|list|remove``: runtime environments on a board, over SSH."""
    from ..host.install.runtime_envs import add_runtime_env, list_runtime_envs, remove_runtime_env
    from ..host.present.terminal.summary import print_line, print_note

    ssh_options = ssh_options_from_args(args)
    if args.runtime_command == "add":
        env = add_runtime_env(
            args.target,
            args.requirement,
            name=args.name,
            extra=args.extra,
            from_approved=args.from_approved,
            wheelhouse=args.wheelhouse,
            on_step=lambda line: print_note(f"agent runtime add: {line}"),
            ssh_options=ssh_options,
        )
        print_line(
            f"added {env['name']}: {env['runtime']} {env['version']} (Python {env['python']}, "
            f"{len(env.get('wheels') or [])} wheels) on {args.target}"
        )
        return 0
    if args.runtime_command == "remove":
        print_line(remove_runtime_env(args.target, args.name, ssh_options=ssh_options))
        return 0
    envs = list_runtime_envs(args.target, ssh_options=ssh_options)
    for e in envs:
        state = "ok" if e.get("available") else e.get("reason")
        print_line(f"{e['name']}: {e['runtime']} {e['version']} (Python {e['python']}) {state}")
    if not envs:
        print_line(
            "no runtime environments (edgequal agent runtime add TARGET onnxruntime==VERSION)"
        )
    return 0


RUNS_EXAMPLES = {
    "list": ("edgequal runs list --device pi5 --json",),
    "show": (),
    "fetch": ("edgequal runs fetch RUN_ID --device pi5 --wait -o run.report.json",),
    "cancel": ("edgequal runs cancel RUN_ID --device pi5 --wait",),
}


def add_parsers(sub) -> None:
    """``devices``, ``runs`` and ``agent``: their flags."""
    _add_devices_parser(sub)
    _add_runs_parser(sub)
    _add_agent_parser(sub)


def _add_devices_parser(sub) -> None:
    """``devices list|show|trust|forget|profiles``."""
    dv = sub.add_parser("devices", help="trusted devices")
    examples(dv, "edgequal devices list", "edgequal devices trust pi5 grpc://pi5.lab:50051")
    dsub = dv.add_subparsers(dest="devices_command", required=True)
    dl = dsub.add_parser("list", help="list trusted devices")
    dl.add_argument("--json", action="store_true", help="print the devices as JSON")
    examples(dl, "edgequal devices list", "edgequal devices list --json")
    ds = dsub.add_parser("show", help="show one device")
    ds.add_argument("name")
    examples(ds, "edgequal devices show pi5")
    dt = dsub.add_parser("trust", help="pin a device's key (shows its fingerprint)")
    examples(
        dt,
        "edgequal devices trust pi5 grpc://pi5.lab:50051 --token-file pi5.token",
        "edgequal devices trust pi5 grpc://pi5.lab:50051 --fingerprint SHA256:...",
        "edgequal devices trust lab3 grpc://lab3:50051 --tls-ca ca.pem --tls-cert me.pem "
        "--tls-key me.key",
    )
    dt.add_argument("name")
    dt.add_argument("address", help="grpc://HOST:PORT")
    dt.add_argument("--token-file", type=Path)
    add_tls_options(dt)
    dt.add_argument(
        "--fingerprint", help="expected key fingerprint (SHA256:...); refuse if different"
    )
    dt.add_argument(
        "--replace-key",
        action="store_true",
        help="pin a new key for a device already trusted (needs --fingerprint of the new key)",
    )
    df = dsub.add_parser("forget", help="forget a device")
    df.add_argument("name")
    examples(df, "edgequal devices forget pi5")
    examples(dsub.add_parser("profiles", help="list device profiles"), "edgequal devices profiles")


def _add_runs_parser(sub) -> None:
    """``runs list|show|fetch|cancel``: one device's runs, with its connection options."""
    rn = sub.add_parser(
        "runs",
        help="runs on a device: list, show, fetch or cancel (also one a host left behind)",
    )
    examples(rn, "edgequal runs list --device pi5", "edgequal runs fetch RUN_ID --device pi5")
    rsub = rn.add_subparsers(dest="runs_command", required=True)
    for command, text in (
        ("list", "the run in progress and the runs this host started there"),
        ("show", "one run: in progress, or its signed report's status"),
        ("fetch", "verify a run's signed report and write it"),
        ("cancel", "cancel the run in progress (it is still signed: incomplete, cancelled)"),
    ):
        rp = rsub.add_parser(command, help=text)
        examples(
            rp,
            f"edgequal runs {command}" + (" RUN_ID" if command != "list" else "") + " --device pi5",
            *RUNS_EXAMPLES[command],
        )
        if command != "list":
            rp.add_argument("run_id")
        else:
            rp.add_argument("--json", action="store_true", help="print the runs as JSON")
        rp.add_argument("--device", default="local", help="local (default), NAME or address")
        add_connection_options(rp)
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


def _add_agent_parser(sub) -> None:
    """``agent install|runtime|status``: the agent on a board, over SSH."""
    a = sub.add_parser("agent", help="install or inspect the agent on a board")
    examples(a, "edgequal agent install ssh://pi@bench-pi5", "edgequal agent status pi5")
    asub = a.add_subparsers(dest="agent_command", required=True)
    ai = asub.add_parser("install", help="install the agent over SSH")
    examples(
        ai,
        "edgequal agent install ssh://pi@bench-pi5 --extras litert",
        "edgequal agent install ssh://pi@bench-pi5 --wheelhouse wheels/ --service background",
    )
    ai.add_argument("url", help="ssh://USER@HOST[:PORT]")
    ai.add_argument("--extras", default=",".join(RUNTIME_EXTRAS))
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
    _add_agent_runtime_parser(asub)
    ast = asub.add_parser("status", help="agent version, runtimes, key, service")
    examples(ast, "edgequal agent status pi5", "edgequal agent status ssh://pi@bench-pi5")
    ast.add_argument("target", help="ssh://USER@HOST or a device name")
    ast.add_argument("--known-hosts", type=Path)


def _add_agent_runtime_parser(asub) -> None:
    """``agent runtime add|list|remove``: runtime environments on a board, over SSH."""
    art = asub.add_parser(
        "runtime", help="runtime environments on a board (installed over SSH only)"
    )
    examples(
        art,
        "edgequal agent runtime add ssh://pi@bench-pi5 onnxruntime==1.20.1",
        "edgequal agent runtime list ssh://pi@bench-pi5",
    )
    artsub = art.add_subparsers(dest="runtime_command", required=True)
    ara = artsub.add_parser(
        "add", help="collect a runtime's wheels here, push them over SSH, install them there"
    )
    examples(
        ara,
        "edgequal agent runtime add ssh://pi@bench-pi5 onnxruntime==1.20.1",
        "edgequal agent runtime add ssh://pi@bench-pi5 --from-approved approved/classifier",
        "edgequal agent runtime add ssh://pi@bench-pi5 onnxruntime==1.17.3 'numpy<2'",
    )
    ara.add_argument("target", help="ssh://USER@HOST of a trusted device")
    ara.add_argument("requirement", nargs="?", help="an exact pin, e.g. onnxruntime==1.20.1")
    ara.add_argument(
        "extra",
        nargs="*",
        metavar="EXTRA",
        help="more requirements installed beside it, e.g. 'numpy<2' (default: the numpy "
        "the runtime was built for)",
    )
    ara.add_argument("--name", help="the environment's name (default DIST-VERSION)")
    ara.add_argument(
        "--from-approved",
        type=Path,
        metavar="DIR/MODEL",
        help="restore the environment this approved model was qualified with (same wheel digests)",
    )
    ara.add_argument("--wheelhouse", type=Path, help="collect wheels only from this directory")
    arl = artsub.add_parser("list", help="the board's runtime environments")
    examples(arl, "edgequal agent runtime list ssh://pi@bench-pi5")
    arl.add_argument("target", help="ssh://USER@HOST of a trusted device")
    arr = artsub.add_parser("remove", help="delete a runtime environment on the board")
    examples(arr, "edgequal agent runtime remove ssh://pi@bench-pi5 onnxruntime-1.20.1")
    arr.add_argument("target", help="ssh://USER@HOST of a trusted device")
    arr.add_argument("name")
    for sp in (ara, arl, arr):
        add_board_ssh_options(sp)
