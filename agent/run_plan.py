"""``edgequal-agent run-plan``: one plan from a host over SSH, run on this board.

The host has pushed the model and golden set into the store and sends the plan as a
file; the run prints its events and then the signed envelope as JSON lines on stdout.
A host that goes away (the pipe closes, a hang-up, a terminate) cancels the run, which
is still signed and stored. When an agent installed as a service holds the state
directory, the plan is handed to it over loopback gRPC and its stream relayed.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import sys
import threading
from pathlib import Path

from edgequal.contract.errors import AgentError, BadInput, DeviceBusy

from .config import probe_root, read_settings

log = logging.getLogger("edgequal.agent")


class _EventLines:
    """JSON lines on stdout for ``run-plan``; a host that went away cancels the run.

    A closed pipe (the SSH session ended) is what gRPC's disconnect is, plus a
    cancel: the run stops, is signed ``incomplete: cancelled`` and stored, and
    the rest of the output goes nowhere instead of raising BrokenPipeError. The
    pipe is watched between events too (POLLERR once its reader is gone), so a
    long quiet phase does not keep a run going for a host that left.
    """

    WATCH_INTERVAL_MS = 500

    def __init__(self, cancel: threading.Event):
        self.cancel = cancel
        self.broken = False
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="stdout-watch", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        import select

        try:
            poller = select.poll()
            poller.register(sys.stdout.fileno(), select.POLLERR | select.POLLHUP)
        except (OSError, ValueError, AttributeError):
            return  # not a file descriptor we can watch; writes still notice
        while not self._done.is_set():
            for _, mask in poller.poll(self.WATCH_INTERVAL_MS):
                if mask & (select.POLLERR | select.POLLHUP):
                    self._gone()
                    return

    def _gone(self) -> None:
        with self._lock:
            if self.broken:
                return
            self.broken = True
            self.cancel.set()
            log.warning("the host is gone (stdout closed); cancelling the run")
            # Later writes and the interpreter's final flush must not fail on the pipe.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)

    def emit(self, obj: dict) -> None:
        """Write one line, or note the host is gone and cancel the run."""
        if self.broken:
            return
        try:
            sys.stdout.write(json.dumps(obj) + "\n")
            sys.stdout.flush()
        except (BrokenPipeError, ValueError, OSError):
            self._gone()

    def close(self) -> None:
        """Stop watching the pipe."""
        self._done.set()


def cmd_run_plan(args, state_dir: Path) -> int:
    import signal

    from edgequal.contract.keys import load_or_create_device_key
    from edgequal.contract.lease import Lease
    from edgequal.contract.plan import Plan

    from .phases.coload import config_path, resolve_plan
    from .run_request import (
        RunRequest,
        check_extra_files,
        check_plan_bounds,
        new_run_id,
        subjects_as_files,
    )
    from .runs import Runs
    from .runtimes.envs import RuntimeEnvs, resolve_plan_envs
    from .service.lease import DEFAULT_MAX_RUN_S
    from .service.state_lock import StateLock
    from .service.store import ArtifactStore

    try:
        spec = json.loads(args.plan_file.read_text())
    except (OSError, ValueError, RecursionError) as e:
        raise BadInput(f"cannot read plan file {args.plan_file}: {e}") from e
    if not isinstance(spec, dict):
        raise BadInput(f"plan file {args.plan_file} must hold a JSON object")
    try:
        asked = {
            "run_id": spec.get("run_id") or new_run_id(),
            "model_digest": spec["model_digest"],
            "golden_digest": spec.get("golden_digest"),
            "nonce": spec["nonce"],
            "model_name": spec.get("model_name", "model"),
            "golden_name": spec.get("golden_name"),
            "extra_files": subjects_as_files(spec.get("extra_subjects") or []),
        }
    except KeyError as e:
        raise BadInput(f"plan file {args.plan_file} lacks '{e.args[0]}'") from None
    plan = spec.get("plan", {})
    if not isinstance(plan, dict):
        raise BadInput(f"plan file {args.plan_file}: 'plan' must be a JSON object")
    check_plan_bounds(plan, DEFAULT_MAX_RUN_S)
    request = RunRequest(**asked, plan=Plan.from_json(plan))  # the one parse of this plan
    settings = read_settings(state_dir)
    store = ArtifactStore(Path(state_dir) / "artifacts", **settings.store_options())
    request.extra_files = check_extra_files(request.model_name, request.extra_files, store)
    resolve_plan(request.plan, store, config_path(Path(state_dir)))  # refused before anything runs
    resolve_plan_envs(request.plan, RuntimeEnvs(state_dir))  # an unknown environment too
    try:
        lock = StateLock.acquire(state_dir, "run-plan")
    except DeviceBusy:
        serving = _serving_agent(state_dir)
        if serving is None:
            raise
        return _run_plan_through(serving, request, spec.get("holder") or "ssh")
    try:
        key = load_or_create_device_key(state_dir)
        runs = Runs(
            state_dir, key, store, probe_root(args.root), memory_limit_mb=settings.memory_limit_mb
        )
        cancel = threading.Event()
        # The same ends as over gRPC: the host leaving (hang-up, terminate, interrupt,
        # closed pipe) or the lease running out cancels the run, which is still signed.
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(signum, lambda *_: cancel.set())
        lines = _EventLines(cancel)
        lease = Lease.starting_now(
            request.run_id,
            spec.get("holder") or "ssh",
            DEFAULT_MAX_RUN_S,
            expected_s=request.plan.timed_s(),
        )
        timer = threading.Timer(DEFAULT_MAX_RUN_S, cancel.set)
        timer.daemon = True
        lock.set_lease(lease)
        lines.emit({"event": {"type": "run", "run_id": request.run_id}})
        timer.start()
        try:
            envelope = runs.execute(
                request, on_event=lambda e: lines.emit({"event": e}), cancel=cancel
            )
        finally:
            timer.cancel()
            lock.set_lease(None)
        if not lines.broken:
            runs.mark_delivered(request.run_id)  # before it leaves: one report per run
        lines.emit({"envelope": base64.b64encode(envelope).decode(), "run_id": request.run_id})
        delivered = not lines.broken
        lines.close()
    finally:
        lock.release()
    # The report is stored either way; 3 says the host did not receive it (fetch it by run id).
    return 0 if delivered else 3


def _serving_agent(state_dir: Path) -> dict | None:
    """The ``serve`` agent holding ``state_dir``, if it can take a plan over loopback gRPC."""
    from .service.state_lock import peek

    holder = peek(state_dir) or {}
    if holder.get("command") != "serve" or not holder.get("port") or holder.get("tls"):
        return None
    return holder


def _run_plan_through(serving: dict, request, holder: str) -> int:
    """Hand the plan to the ``serve`` agent of this state directory and relay its stream.

    An agent installed as a service holds the state directory, so an SSH host's
    ``run-plan`` would find it busy; the artifacts the host pushed are already in the
    shared store, so the run is the service's (the same lease, the same one run at a
    time), and the output is what run-plan prints itself: event lines, then the
    envelope. A host that leaves cancels the run, as it would over gRPC.
    """
    import grpc
    from edgequal.contract.auth import read_token_file

    from ..protos import edgequal_v1_pb2 as pb
    from ..protos import edgequal_v1_pb2_grpc as pb_grpc
    from .service.auth import AUTHORIZATION_KEY

    token = read_token_file(Path(serving["token_file"])) if serving.get("token_file") else None
    metadata = ((AUTHORIZATION_KEY, f"Bearer {token}"),) if token else ()
    cancel = threading.Event()
    lines = _EventLines(cancel)
    extra = [{"name": f["name"], "digest": {"sha256": f["sha256"]}} for f in request.extra_files]
    message = pb.QualifyRequest(
        model_digest=request.model_digest,
        golden_digest=request.golden_digest or "",
        plan_json=json.dumps(request.plan.to_json()),
        nonce=request.nonce,
        model_name=request.model_name or "",
        golden_name=request.golden_name or "",
        holder=holder,
        extra_subjects_json=json.dumps(extra) if extra else "",
    )
    run_id = None
    delivered = False
    finished = threading.Event()
    with grpc.insecure_channel(f"127.0.0.1:{serving['port']}") as channel:
        stub = pb_grpc.AgentStub(channel)

        def cancel_when_gone() -> None:
            cancel.wait()
            if run_id and not finished.is_set():
                with contextlib.suppress(grpc.RpcError, ValueError):
                    stub.Cancel(pb.CancelRequest(run_id=run_id), metadata=metadata, timeout=10)

        threading.Thread(target=cancel_when_gone, daemon=True).start()
        try:
            for m in stub.Qualify(message, metadata=metadata):
                if m.run_id and run_id is None:
                    run_id = m.run_id
                    lines.emit({"event": {"type": "run", "run_id": run_id}})
                if m.HasField("event_json"):
                    lines.emit({"event": json.loads(m.event_json)})
                elif m.HasField("envelope"):
                    envelope = bytes(m.envelope)
                    lines.emit({"envelope": base64.b64encode(envelope).decode(), "run_id": run_id})
                    delivered = not lines.broken
        except grpc.RpcError as e:
            raise AgentError(
                f"the agent serving this state directory refused the run: {e.details()}"
            ) from None
        finally:
            finished.set()
            lines.close()
            cancel.set()
    return 0 if delivered else 3
