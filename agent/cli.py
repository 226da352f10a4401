"""``edgequal-agent``: serve, run-plan, measure, key show, info, runtime, store, report, cancel.

Errors print one line with a hint (tracebacks only with --debug). Exit codes:
0 pass, 1 measurement failed, 2 bad usage or input, 3 device or runtime failure.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import sys
from pathlib import Path

from edgequal.contract.cli_args import (
    OneLineParser,
    examples,
    global_default,
    spread_global_options,
)
from edgequal.contract.errors import AgentError, BadInput, DeviceBusy
from edgequal.contract.state_dirs import default_state_dir

from .config import probe_root, read_settings
from .run_plan import cmd_run_plan

log = logging.getLogger("edgequal.agent")


def _add_global_options(parser: argparse.ArgumentParser, top: bool) -> None:
    """``--debug`` and ``--state-dir``, before or after the subcommand
    (:func:`~edgequal.contract.cli_args.spread_global_options`)."""
    parser.add_argument(
        "--debug", action="store_true", default=global_default(top, False), help="show tracebacks"
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=global_default(top, None),
        help="agent state: key, artifacts, reports (default $EDGEQUAL_AGENT_STATE, "
        "else $XDG_STATE_HOME/edgequal-agent, ~/.local/state/edgequal-agent)",
    )


def _parser() -> argparse.ArgumentParser:
    from edgequal.contract import __version__

    p = OneLineParser(prog="edgequal-agent", description="edgequal device agent")
    p.add_argument("--version", action="version", version=f"edgequal-agent {__version__}")
    _add_global_options(p, top=True)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_serve_parser(sub)
    r = sub.add_parser(
        "run-plan", help="one-shot run (SSH mode): JSON-lines events, then the signed envelope"
    )
    r.add_argument("plan_file", type=Path, help="the plan JSON the host wrote")
    _add_root_option(r, "prefix for /sys, /proc, /etc reads")
    examples(r, "edgequal-agent run-plan /tmp/plan.json   # what an SSH host runs")
    _add_measure_parser(sub)
    _add_key_and_info_parsers(sub)
    _add_runtime_parser(sub)
    st = sub.add_parser("store", help="artifact store (used by the SSH transport)")
    st.add_argument("args", nargs=argparse.REMAINDER)
    examples(st, "edgequal-agent store stat SHA256_HEX   # what the SSH transport runs")

    rp = sub.add_parser("report", help="print a stored signed report by run id")
    rp.add_argument("run_id")
    examples(rp, "edgequal-agent report RUN_ID > run.report.json")

    cn = sub.add_parser(
        "cancel", help="cancel the run-plan run in progress (SSH mode): it is still signed"
    )
    cn.add_argument("run_id")
    examples(cn, "edgequal-agent cancel RUN_ID")
    spread_global_options(p, _add_global_options)
    return p


def _add_root_option(parser, help: str | None) -> None:
    """``--root``: the prefix of /sys, /proc and /etc reads (an emulated or recorded board);
    read back by ``config.probe_root``."""
    parser.add_argument("--root", help=help)


def _add_serve_parser(sub) -> None:
    """``serve``: where it listens, token and TLS, probes' root, metrics, store and worker limits."""
    s = sub.add_parser("serve", help="serve the gRPC API")
    s.add_argument(
        "--listen", default="127.0.0.1:50051", help="HOST:PORT (default 127.0.0.1:50051)"
    )
    s.add_argument(
        "--token-file", type=Path, help="file holding the bearer token every RPC must carry"
    )
    s.add_argument("--tls-cert", type=Path)
    s.add_argument("--tls-key", type=Path)
    s.add_argument(
        "--client-ca", type=Path, help="require client certificates signed by this CA (mutual TLS)"
    )
    _add_root_option(s, "prefix for /sys, /proc, /etc reads (default $EDGEQUAL_ROOT or /)")
    s.add_argument("--port-file", type=Path, help="write the bound port here once serving")
    s.add_argument(
        "--metrics-textfile",
        type=Path,
        metavar="PATH",
        help="keep the agent's state here as OpenMetrics text for node_exporter's textfile "
        "collector (busy, current run, last status per model, temperatures at rest)",
    )
    s.add_argument(
        "--metrics-interval",
        default="15s",
        help="how often --metrics-textfile is rewritten (default 15s)",
    )
    size = {"type": _size_arg, "metavar": "SIZE"}
    s.add_argument(
        "--artifact-quota",
        **size,
        help="most the artifact store holds, uploads in progress included (e.g. 10GiB; "
        "default: no quota; agent.toml [store] quota)",
    )
    s.add_argument(
        "--min-free",
        **size,
        help="free disk uploads never take (default 256MiB; agent.toml [store] min_free)",
    )
    s.add_argument(
        "--max-artifact",
        **size,
        help="largest single artifact (default 2GiB; agent.toml [store] max_artifact)",
    )
    s.add_argument(
        "--memory-limit",
        **size,
        help="a worker's memory limit when the plan sets none (default: half the board's "
        "memory; agent.toml [worker] memory_limit)",
    )
    examples(
        s,
        "edgequal-agent serve   # loopback only, no token needed",
        "edgequal-agent serve --listen 0.0.0.0:50051 --token-file /etc/edgequal/token",
        "edgequal-agent serve --state-dir /var/lib/edgequal --listen 0.0.0.0:50051 "
        "--tls-cert c.pem --tls-key k.pem --client-ca ca.pem",
    )


def _add_measure_parser(sub) -> None:
    """``measure``: a model file measured here, without a host."""
    m = sub.add_parser("measure", help="measure a model file here, without a host")
    m.add_argument("model", type=Path)
    m.add_argument("--golden", type=Path)
    m.add_argument("--plan", default="quick", help="quick | standard | soak")
    m.add_argument("--runtime", default="auto", help="auto | onnxruntime | litert")
    m.add_argument("--threads", type=int)
    m.add_argument("--shape", action="append", default=[], metavar="NAME=1x3x224x224")
    m.add_argument("--sustain", help="sustained phase duration, e.g. 30s, 10m (0 to skip)")
    m.add_argument("--window", help="sustained window length, e.g. 2s")
    _add_root_option(m, None)
    m.add_argument(
        "--runtime-env",
        action="append",
        default=None,
        metavar="NAME",
        help="also measure under this installed runtime environment (repeatable; default: the agent's own)",
    )
    m.add_argument("--json", action="store_true", help="print the full result as JSON")
    examples(
        m,
        "edgequal-agent measure model.onnx",
        "edgequal-agent measure model.tflite --golden g.npz --plan standard --json",
        "edgequal-agent measure dynamic.onnx --shape image=1x3x224x224 --sustain 2m",
    )


def _add_key_and_info_parsers(sub) -> None:
    """``key show|prove`` and ``info``."""
    k = sub.add_parser("key", help="the device key: show it, or prove holding it")
    k.add_argument("action", choices=["show", "prove"])
    k.add_argument("--json", action="store_true")
    k.add_argument(
        "--challenge", help="prove: the host's fresh challenge in hex (16 to 1024 bytes)"
    )
    examples(
        k,
        "edgequal-agent key show",
        "edgequal-agent --state-dir ~/.local/state/edgequal/local-agent key show   # edgequal's "
        "local agent",
    )

    i = sub.add_parser("info", help="fingerprint, probes, runtimes")
    _add_root_option(i, "prefix for /sys, /proc, /etc reads")
    i.add_argument("--json", action="store_true")
    examples(i, "edgequal-agent info", "edgequal-agent info --json")


def _add_runtime_parser(sub) -> None:
    """``runtime add|list|remove|tags``: runtime environments beside the agent's own."""
    rt = sub.add_parser(
        "runtime", help="runtime environments: other runtime versions beside the agent's own"
    )
    examples(
        rt,
        "edgequal-agent runtime add onnxruntime==1.20.1 --find-links wheels/ --no-index",
        "edgequal-agent runtime list --json",
    )
    rts = rt.add_subparsers(dest="runtime_command", required=True)
    ra = rts.add_parser("add", help="install a runtime version in an environment of its own")
    ra.add_argument("requirement", help="an exact pin: onnxruntime==1.20.1, ai-edge-litert==…")
    ra.add_argument(
        "extra",
        nargs="*",
        metavar="EXTRA",
        help="more requirements installed beside it, e.g. 'numpy<2' (default: the numpy "
        "the runtime was built for)",
    )
    ra.add_argument("--name", help="the environment's name (default DIST-VERSION)")
    ra.add_argument(
        "--find-links", action="append", default=[], type=Path, metavar="DIR", help="wheels here"
    )
    ra.add_argument("--no-index", action="store_true", help="only --find-links, no package index")
    ra.add_argument(
        "--exact-wheels",
        type=Path,
        metavar="FILE",
        help="JSON [{file, sha256}]: install exactly these wheels from --find-links (a restore)",
    )
    ra.add_argument("--json", action="store_true")
    examples(
        ra,
        "edgequal-agent runtime add onnxruntime==1.20.1",
        "edgequal-agent runtime add onnxruntime==1.20.1 --find-links wheels/ --no-index --json",
    )
    rl = rts.add_parser("list", help="installed environments, each imported in a child process")
    rl.add_argument("--json", action="store_true")
    examples(rl, "edgequal-agent runtime list", "edgequal-agent runtime list --json")
    rr = rts.add_parser("remove", help="delete an environment")
    rr.add_argument("name")
    examples(rr, "edgequal-agent runtime remove onnxruntime-1.20.1")
    examples(
        rts.add_parser(
            "tags",
            help="JSON: the wheel tags this agent's Python takes (a host collects wheels for it)",
        ),
        "edgequal-agent runtime tags   # what agent runtime add collects wheels for",
    )


def _size_arg(text: str) -> int:
    from .config import parse_size_bytes

    try:
        return parse_size_bytes(text, "size")
    except BadInput as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``edgequal-agent``."""
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    state_dir = args.state_dir or default_state_dir()
    try:
        return COMMANDS[args.command](args, state_dir)
    except AgentError as e:
        if args.debug:
            raise
        hint = f" (hint: {e.hint})" if e.hint else ""
        print(f"edgequal-agent: error: {e}{hint}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # a bug, not a user error: still one line unless --debug
        if args.debug:
            raise
        print(
            f"edgequal-agent: internal error: {type(e).__name__}: {e} (hint: --debug shows the traceback)",
            file=sys.stderr,
        )
        return 3


def cmd_serve(args, state_dir: Path) -> int:
    import signal

    from edgequal.contract.auth import read_token_file
    from edgequal.contract.cli_args import parse_duration_s

    from .probes.fingerprint import fingerprint
    from .runtimes import ProbedRuntimes
    from .service.server import serve

    token = read_token_file(args.token_file) if args.token_file else None
    interval_s = parse_duration_s(args.metrics_interval)
    if interval_s <= 0:
        raise BadInput("--metrics-interval must be longer than 0 s", hint="e.g. 15s")
    tls = None
    if args.tls_cert or args.tls_key:
        if not (args.tls_cert and args.tls_key):
            raise BadInput("--tls-cert and --tls-key go together")
        tls = (args.tls_cert, args.tls_key, args.client_ca)
    settings = read_settings(
        state_dir,
        quota_bytes=args.artifact_quota,
        min_free_bytes=args.min_free,
        max_artifact_bytes=args.max_artifact,
        memory_limit_bytes=args.memory_limit,
    )

    server = serve(
        args.listen,
        state_dir,
        probe_root(args.root),
        token=token,
        tls=tls,
        fingerprint_fn=fingerprint,
        runtimes_fn=ProbedRuntimes(),
        **settings.server_options(),
    )
    if server.state_lock is not None:
        # How run-plan (an SSH host's run on this device) hands its plan to this agent.
        server.state_lock.set_endpoint(
            server.listen,
            server.port,
            token_file=str(Path(args.token_file).resolve()) if args.token_file else None,
            tls=tls is not None,
        )
    if args.port_file:
        tmp = args.port_file.with_name(args.port_file.name + ".tmp")
        tmp.write_text(str(server.port))
        tmp.replace(args.port_file)
    metrics = None
    if args.metrics_textfile:
        from .service.metrics_textfile import MetricsTextfile

        metrics = MetricsTextfile(args.metrics_textfile, server.service, interval_s).start()
    signal.signal(signal.SIGTERM, lambda *_: server.stop())
    server.wait_for_termination()
    if metrics is not None:
        metrics.stop()
    return 0


def cmd_measure(args, state_dir: Path) -> int:
    from edgequal.contract.cli_args import parse_duration_s, parse_shape_args
    from edgequal.contract.exit_codes import exit_code_for
    from edgequal.contract.plan import Plan, make_plan
    from edgequal.contract.signing import json_clean
    from edgequal.contract.summary import format_summary

    from .phases.qualification import run_measurement

    plan = make_plan(
        args.plan,
        runtime=args.runtime,
        threads=args.threads,
        shapes=parse_shape_args(args.shape) or None,
        sustain_s=parse_duration_s(args.sustain) if args.sustain else None,
        window_s=parse_duration_s(args.window) if args.window else None,
    )

    if plan.memory_limit_mb is None:  # the same default as a run from a host
        from dataclasses import replace

        from .worker.supervisor import default_memory_limit_mb

        limit = read_settings(state_dir).memory_limit_mb or default_memory_limit_mb(
            probe_root(args.root)
        )
        plan = replace(plan, memory_limit_mb=limit)

    def progress(event: dict) -> None:
        if not args.json and event.get("type") == "phase" and event.get("state") == "started":
            print(f"... {event['phase']}", file=sys.stderr)

    from .runtimes.envs import RuntimeEnvs

    if args.runtime_env:
        plan = Plan.from_json({**plan.to_json(), "runtime_envs": args.runtime_env})
    measurement = run_measurement(
        args.model,
        args.golden,
        plan,
        root=probe_root(args.root),
        on_event=progress,
        runtime_envs=RuntimeEnvs(state_dir),
    )
    if args.json:
        print(json.dumps(json_clean(measurement), indent=1))
    else:
        print(format_summary(measurement))
    return exit_code_for(measurement["status"], measurement["findings"])


def cmd_key(args, state_dir: Path) -> int:
    """``key show`` reads the key and never makes one; ``key prove`` makes it on first use
    (the SSH form of enrolment). Either way the state directory read is named."""
    from edgequal.contract.keys import load_device_key, load_or_create_device_key
    from edgequal.contract.state_dirs import local_agent_state_dir

    if args.action == "prove":
        return _prove(load_or_create_device_key(state_dir), args.challenge)
    key = load_device_key(state_dir)
    if key is None:
        local = local_agent_state_dir()
        hint = "the agent makes its key when it first serves or runs a plan"
        if Path(state_dir) != local and load_device_key(local) is not None:
            hint = (
                "the agent edgequal starts on this host (--device local) keeps its key in "
                f"{local}: edgequal-agent --state-dir {local} key show"
            )
        raise BadInput(f"no device key in {state_dir} (nothing was created)", hint=hint)
    if args.json:
        print(
            json.dumps(
                {
                    "public_key_b64": key.public_key_b64(),
                    "fingerprint": key.fingerprint(),
                    "keyid": key.keyid(),
                    "state_dir": str(state_dir),
                }
            )
        )
    else:
        print(
            f"ed25519 {key.public_key_b64()}\nfingerprint {key.fingerprint()}\n"
            f"state dir {state_dir}"
        )
    return 0


def _prove(key, challenge_hex: str | None) -> int:
    """``key prove --challenge HEX``: one JSON line, the SSH form of the Prove RPC."""
    from edgequal.contract.identity import prove_identity

    try:
        challenge = bytes.fromhex(challenge_hex or "")
    except ValueError:
        raise BadInput("key prove: --challenge must be hex") from None
    signature = prove_identity(key, challenge)
    print(
        json.dumps(
            {
                "public_key_b64": key.public_key_b64(),
                "fingerprint": key.fingerprint(),
                "signature_b64": base64.b64encode(signature).decode("ascii"),
            }
        )
    )
    return 0


def probed_runtime_envs(state_dir: Path):
    """The state directory's runtime environments, each trial import bounded by the
    operator's ``[runtimes] probe_timeout_s`` (``info`` and ``runtime list``, as ``serve``)."""
    from .runtimes.envs import RuntimeEnvs

    return RuntimeEnvs(state_dir, probe_timeout_s=read_settings(state_dir).env_probe_timeout_s)


def agent_info(state_dir: Path, root: Path):
    """This device's :class:`~edgequal.contract.info.AgentInfo`, as gRPC Info would answer it.

    Runtimes are found by a trial import in a child process each, never here;
    the lease is that of whichever agent holds the state directory, if any.
    """
    from edgequal.contract import __version__
    from edgequal.contract.info import AgentInfo, Limits
    from edgequal.contract.keys import load_or_create_device_key
    from edgequal.contract.lease import Lease

    from .probes import read_all
    from .runtimes import detect_runtimes
    from .service.state_lock import peek
    from .service.store import ArtifactStore

    readings = read_all(root)
    holder = peek(state_dir) or {}
    lease = Lease.from_json(holder["lease"]) if holder.get("lease") else None
    key = load_or_create_device_key(state_dir)
    return AgentInfo(
        agent_version=__version__,
        fingerprint={
            **(readings.get("fingerprint") or {}),
            "runtime_envs": probed_runtime_envs(state_dir).statuses(),
        },
        runtimes=detect_runtimes(probe_import=True),
        public_key_raw=key.public_key_raw(),
        key_fingerprint=key.fingerprint(),
        limits=Limits.of_store(ArtifactStore(Path(state_dir) / "artifacts")),
        lease=lease,
        extra={"root": str(root), "probes": readings},
    )


def cmd_info(args, state_dir: Path) -> int:
    root = probe_root(args.root)
    info = agent_info(state_dir, root)
    if args.json:
        print(json.dumps(info.to_json(), indent=1, default=str))
    else:
        print(f"edgequal-agent {info.agent_version} (root {root}, protocol {info.protocol})")
        print(f"  key: {info.key_fingerprint}")
        print(f"  busy: {info.lease.describe() if info.lease else 'no'}")
        for r in info.runtimes:
            print(f"  {r.name}: {r.version if r.available else 'missing: ' + r.reason}")
        for e in info.fingerprint.get("runtime_envs") or []:
            print(f"  runtime env {_env_line(e)}")
        for section, value in info.extra["probes"].items():
            print(f"  {section}: {json.dumps(value, default=str)}")
    return 0


def _env_line(e: dict) -> str:
    state = "ok" if e["available"] else e["reason"]
    return f"{e['name']}: {e['runtime']} {e['version']} (Python {e['python']}) {state}"


def cmd_runtime(args, state_dir: Path) -> int:
    """``runtime add|list|remove``: the device owner's runtime environments (runtimes/envs.py).

    Installing runs pip, and so code from the package index: it happens here, on the
    device's own shell (or over SSH, which runs this), never through an RPC. Nothing is
    added or removed while a run holds the device.
    """
    from .runtimes.envs import RuntimeEnvs
    from .service.state_lock import peek

    envs = RuntimeEnvs(state_dir, on_step=lambda line: print(f"... {line}", file=sys.stderr))
    if args.runtime_command == "tags":
        from .runtimes.installer import wheel_tags

        print(json.dumps(wheel_tags()))
        return 0
    if args.runtime_command == "list":
        statuses = probed_runtime_envs(state_dir).statuses()
        if args.json:
            print(json.dumps(statuses, indent=1))
        for e in [] if args.json else statuses:
            print(_env_line(e))
        if not statuses and not args.json:
            print("no runtime environments (edgequal-agent runtime add onnxruntime==VERSION)")
        return 0
    lease = (peek(state_dir) or {}).get("lease")
    if lease:
        raise DeviceBusy(
            f"run {lease.get('run_id') or '(leased)'} holds the device",
            hint="change runtime environments between runs",
        )
    if args.runtime_command == "remove":
        gone = envs.remove(args.name)
        print(f"removed {gone.name} ({gone.requirement})")
        return 0
    exact = None
    if args.exact_wheels is not None:
        try:
            exact = json.loads(args.exact_wheels.read_text())
        except (OSError, ValueError) as e:
            raise BadInput(f"cannot read {args.exact_wheels}: {e}") from e
        if not isinstance(exact, list) or not all(isinstance(w, dict) for w in exact):
            raise BadInput(f"{args.exact_wheels} must hold a JSON list of {{file, sha256}}")
    from .runtimes.installer import add_env

    env = add_env(
        envs,
        args.requirement,
        args.name,
        find_links=args.find_links,
        no_index=args.no_index,
        exact_wheels=exact,
        extra=args.extra,
    )
    if args.json:
        print(json.dumps(env.to_json(), indent=1))
    else:
        print(f"added {env.name}: {env.runtime} {env.version} (Python {env.python}) in {env.path}")
    return 0


def cmd_store(args, state_dir: Path) -> int:
    from .service.store import store_main

    return store_main(args.args, state_dir)


def cmd_report(args, state_dir: Path) -> int:
    from .runs import Runs

    sys.stdout.buffer.write(Runs(state_dir, key=None, store=None).read_report(args.run_id))
    sys.stdout.flush()
    return 0


def cmd_cancel(args, state_dir: Path) -> int:
    """Stop a ``run-plan`` run from another login: SIGTERM its process, which signs it cancelled.

    Prints ``{"cancelled": bool, "message": str}``. A run held by ``serve`` is
    cancelled over gRPC (its ``Cancel`` RPC), not by signalling the server.
    """
    import signal

    from .run_request import check_run_id
    from .service.state_lock import peek

    run_id = check_run_id(args.run_id)
    holder = peek(state_dir) or {}
    lease = holder.get("lease") or {}
    if lease.get("run_id") != run_id:
        cancelled, message = False, f"run {run_id} is not in progress"
    elif holder.get("command") != "run-plan" or not holder.get("pid"):
        cancelled = False
        message = (
            f"run {run_id} belongs to the agent serving on port {holder.get('port')}: "
            "cancel it over gRPC"
        )
    else:
        os.kill(int(holder["pid"]), signal.SIGTERM)
        cancelled, message = True, f"run {run_id} is stopping; its report says it was cancelled"
    print(json.dumps({"cancelled": cancelled, "message": message}))
    return 0


COMMANDS = {
    "serve": cmd_serve,
    "run-plan": cmd_run_plan,
    "measure": cmd_measure,
    "key": cmd_key,
    "info": cmd_info,
    "runtime": cmd_runtime,
    "store": cmd_store,
    "report": cmd_report,
    "cancel": cmd_cancel,
}

if __name__ == "__main__":
    sys.exit(main())
