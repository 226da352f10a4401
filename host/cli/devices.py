"""``edgequal devices``, ``runs`` and ``agent``: trusted devices and profiles, the runs on a
device (also those a host left behind), the agent installed on a board."""

from __future__ import annotations

import json

from .device_args import open_device_from_args, tls_from_args


def cmd_devices(args) -> int:
    from ..devices.trust import KnownDevices
    from ..errors import UsageError
    from ..present.terminal.summary import print_line, print_table

    known = KnownDevices()
    if args.devices_command == "list":
        if args.json:
            from ..present.terminal.summary import write_json

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
        from ..devices.profiles import all_profiles

        rows = [[p.name, p.description, p.architecture, str(p.cores)] for p in all_profiles()]
        print_table("Device profiles", ["name", "description", "arch", "cores"], rows)
        return 0
    if args.devices_command == "trust":
        from ..devices.resolve import trust_device

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
    from ..devices.runs import RunLedger
    from ..present.terminal.summary import print_line, print_table

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
                from ..present.terminal.summary import write_json

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
    from ..devices.nonces import NonceLedger
    from ..devices.qualify import printable
    from ..devices.runs import REPORT_WAIT_S, report_path_for, wait_for_report, write_report
    from ..devices.verify import verify_envelope

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
    from ..present.terminal.summary import print_line, print_note

    if args.agent_command == "install":
        from ..install.agent import install_agent

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
    if args.agent_command == "runtime":
        return _cmd_agent_runtime(args)
    from ..install.agent import agent_status

    print_line(json.dumps(agent_status(args.target, known_hosts=args.known_hosts), indent=1))
    return 0


def _cmd_agent_runtime(args) -> int:
    """``agent runtime add|list|remove``: runtime environments on a board, over SSH."""
    from ..install.runtime_envs import add_runtime_env, list_runtime_envs, remove_runtime_env
    from ..present.terminal.summary import print_line, print_note

    options = {
        "known_hosts": args.known_hosts,
        "key_file": args.ssh_key,
        "agent_cmd": args.agent_cmd,
    }
    if args.runtime_command == "add":
        env = add_runtime_env(
            args.target,
            args.requirement,
            name=args.name,
            from_approved=args.from_approved,
            wheelhouse=args.wheelhouse,
            on_step=lambda line: print_note(f"agent runtime add: {line}"),
            **options,
        )
        print_line(
            f"added {env['name']}: {env['runtime']} {env['version']} (Python {env['python']}, "
            f"{len(env.get('wheels') or [])} wheels) on {args.target}"
        )
        return 0
    if args.runtime_command == "remove":
        print_line(remove_runtime_env(args.target, args.name, **options))
        return 0
    envs = list_runtime_envs(args.target, **options)
    for e in envs:
        state = "ok" if e.get("available") else e.get("reason")
        print_line(f"{e['name']}: {e['runtime']} {e['version']} (Python {e['python']}) {state}")
    if not envs:
        print_line(
            "no runtime environments (edgequal agent runtime add TARGET onnxruntime==VERSION)"
        )
    return 0
