"""The ``ssh://USER@HOST[:PORT]`` transport: the agent's one-shot CLI over OpenSSH.

Nothing listens on the device: every operation is an ``edgequal-agent``
command run over an exec channel of an :class:`~edgequal.host.transport.ssh_session.SSHSession`
(host keys checked against known_hosts, every step under a watchdog), and
artifacts travel over SFTP.

- push: ``edgequal-agent store stat DIGEST`` says whether the device holds the
  artifact and how many bytes of a partial upload it already has; the rest is
  written over SFTP into the store's partial file from that offset, then
  ``edgequal-agent store commit DIGEST`` checks the sha256 on the device and
  renames it into the store. An upload cut off part way resumes from the bytes
  the device already has.
- qualify: the request is written as a plan file in the device's temp dir and
  ``edgequal-agent run-plan FILE`` prints JSON lines: ``{"event": ...}`` for
  progress, then ``{"envelope": BASE64, "run_id": ...}``. The envelope bytes are
  returned unchanged, so the report verifies exactly as over gRPC.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import posixpath
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path

import paramiko
from edgequal.contract.info import AgentInfo

from ..errors import TransportError, UsageError
from .base import (
    IdentityProof,
    OpenOptions,
    ProgressEvent,
    PushResult,
    QualifyRequest,
    Transport,
)
from .ssh_options import SSHOptions
from .ssh_session import SSHSession, last_line, short

log = logging.getLogger(__name__)

DEFAULT_AGENT_CMD = "edgequal-agent"
# Where `edgequal agent install` puts the agent's venv; used when the default
# agent command is not on the non-interactive login PATH.
DEFAULT_INSTALL_PREFIX = "~/.local/share/edgequal"
DEFAULT_RUN_IDLE_TIMEOUT_S = 900.0
DEFAULT_RUN_TIMEOUT_S = 4 * 3600.0


def _digest_hex(digest: str) -> str:
    """``sha256:HEX`` or ``HEX`` -> ``HEX``."""
    return digest.split(":", 1)[1] if digest.startswith("sha256:") else digest


class SSHTransport(Transport):
    """A device's agent reached over SSH (exec channels for commands, SFTP for files).

    ``url`` is ``ssh://USER@HOST[:PORT]`` (HOST may be an ``~/.ssh/config`` alias).
    The connection is ``session``, an open :class:`SSHSession` the caller keeps
    (it stays open on close), else one opened with ``options``. ``options``
    (:class:`SSHOptions`, default the session's) also names the agent's command line
    on the device (when none is given and ``edgequal-agent`` is not on the remote
    PATH, the venv of ``edgequal agent install``'s default prefix is used); ``state_dir`` sets
    ``$EDGEQUAL_AGENT_STATE`` for every agent command. ``run_idle_timeout_s``
    and ``run_timeout_s`` bound a qualification (no output for that long, and in all).
    """

    @classmethod
    def open_address(cls, address: str, options: OpenOptions) -> SSHTransport:
        """``ssh://USER@HOST[:PORT]``, reached with the command's :class:`SSHOptions`."""
        return cls(address, options=options.ssh, pinned_key=options.pinned_key)

    def __init__(
        self,
        url: str,
        *,
        options: SSHOptions | None = None,
        state_dir: str | None = None,
        run_idle_timeout_s: float = DEFAULT_RUN_IDLE_TIMEOUT_S,
        run_timeout_s: float = DEFAULT_RUN_TIMEOUT_S,
        session: SSHSession | None = None,
        pinned_key: bytes | None = None,
    ):
        self.address = url
        self.pinned_key = pinned_key
        self._owns_session = session is None
        if options is None:
            options = session.options if session is not None else SSHOptions()
        self.session = session or SSHSession(url, options)
        self.target = self.session.target
        self.agent_cmd = options.agent_cmd or DEFAULT_AGENT_CMD
        self.state_dir = state_dir
        self.run_idle_timeout_s = run_idle_timeout_s
        self.run_timeout_s = run_timeout_s
        self.last_run_id: str | None = None
        self._resolved_agent_cmd: str | None = None

    # ----- agent commands -------------------------------------------------------------

    def agent_command(self, args: Sequence[str]) -> str:
        """The shell command line that runs the agent with ``args`` on the device."""
        env = f"EDGEQUAL_AGENT_STATE={shlex.quote(self.state_dir)} " if self.state_dir else ""
        return env + self._agent() + "".join(" " + shlex.quote(a) for a in args)

    def _agent(self) -> str:
        if self.agent_cmd != DEFAULT_AGENT_CMD:
            return self.agent_cmd
        if self._resolved_agent_cmd is None:
            fallback = DEFAULT_INSTALL_PREFIX.replace("~", "$HOME", 1) + "/venv/bin/edgequal-agent"
            probe = (
                f"if command -v {DEFAULT_AGENT_CMD} >/dev/null 2>&1; then echo {DEFAULT_AGENT_CMD}; "
                f'elif [ -x "{fallback}" ]; then echo "{fallback}"; fi'
            )
            found = self.session.check_remote(probe, "look for edgequal-agent").strip()
            if not found:
                raise TransportError(
                    f"edgequal-agent is not installed on {self.target.known_hosts_name}",
                    hint=f"install it with `edgequal agent install {self.address}`",
                )
            self._resolved_agent_cmd = shlex.quote(found)
        return self._resolved_agent_cmd

    def agent_json(self, args: Sequence[str], step: str, timeout_s: float | None = None) -> dict:
        """Run an agent command that prints one JSON object; return it."""
        out = self.session.check_remote(self.agent_command(args), step, timeout_s).strip()
        for text in (out, last_line(out)):
            try:
                value = json.loads(text)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
        raise TransportError(
            f"{step}: the agent on {self.target.known_hosts_name} printed no JSON object "
            f"({short(out) or 'nothing'})",
            hint="the device's edgequal-agent may be older than this host; reinstall it",
        )

    # ----- Transport ---------------------------------------------------------------

    def prove(self, challenge: bytes) -> IdentityProof:
        """``key prove --challenge HEX``: the agent signs ``challenge`` with its device key."""
        answer = self.agent_json(
            ["key", "prove", "--challenge", challenge.hex()], "prove the device key"
        )
        try:
            return IdentityProof(
                base64.b64decode(answer["public_key_b64"], validate=True),
                base64.b64decode(answer["signature_b64"], validate=True),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise TransportError(
                f"the agent on {self.target.known_hosts_name} answered the identity challenge "
                "without a key and signature",
                hint="the device's edgequal-agent may be older than this host; reinstall it",
            ) from e

    def info(self) -> dict:
        """The agent's Info (:meth:`AgentInfo.to_json`, as over gRPC) plus the address.

        ``info --json`` prints the same :class:`AgentInfo` gRPC ``Info`` sends, with
        ``root`` and every probe reading (``probes``) besides; the lease is that of
        whichever agent holds the device's state directory.
        """
        self.ensure_identity()
        raw = self.agent_json(["info", "--json"], "read the agent's info")
        return {"address": self.address, **AgentInfo.from_json(raw).to_json()}

    def store_stat(self, digest: str) -> dict:
        """``store stat DIGEST``: {"digest", "committed_offset", "complete", "partial_path"}."""
        return self.agent_json(["store", "stat", digest], f"check {digest} in the device's store")

    def push(
        self, path: Path, digest: str, on_progress: Callable[[int, int], None] | None = None
    ) -> PushResult:
        """Upload ``path`` unless the device holds ``digest``; resume a partial upload."""
        self.ensure_identity()
        path = Path(path)
        size = path.stat().st_size
        stat = self.store_stat(digest)
        if stat.get("complete"):
            if on_progress is not None:
                on_progress(size, size)
            return PushResult(digest=digest, size=size, bytes_sent=0)
        partial = stat.get("partial_path")
        if not partial:
            if not stat.get("state_dir"):
                raise TransportError(
                    "the agent's `store stat` names neither partial_path nor state_dir",
                    hint="the device's edgequal-agent may be older than this host; reinstall it",
                )
            partial = posixpath.join(
                stat["state_dir"], "artifacts", "partial", _digest_hex(digest) + ".part"
            )
        partial = self.session.expand(partial)
        committed = int(stat.get("committed_offset", stat.get("committed")) or 0)
        self.session.makedirs(posixpath.dirname(partial), 0o700)
        remote_size = self.session.remote_size(partial)
        # Resume from what the device really holds, never past the local file's end.
        start = 0 if remote_size is None else min(committed, remote_size, size)
        sent = self.session.upload(path, partial, start, on_progress, f"upload {path.name}")
        self.agent_json(["store", "commit", digest], f"commit {digest} on the device")
        return PushResult(digest=digest, size=size, bytes_sent=sent)

    def qualify(self, request: QualifyRequest, on_event: Callable[[ProgressEvent], None]) -> bytes:
        """Run ``run-plan`` on the device, streaming events; return the signed envelope bytes."""
        self.ensure_identity()
        doc = {
            "model_digest": request.model_digest,
            "golden_digest": request.golden_digest,
            "plan": request.plan,
            "nonce": request.nonce,
            "model_name": request.model_name,
            "golden_name": request.golden_name,
            "extra_subjects": request.extra_subjects(),
        }
        if request.holder:
            doc["holder"] = request.holder
        plan_path = self.session.check_remote(
            'mktemp "${TMPDIR:-/tmp}/edgequal-plan.XXXXXXXX"', "create the plan file"
        ).strip()
        try:
            self.session.write_file(plan_path, json.dumps(doc).encode("utf-8"), 0o600)
            return self._run_plan(plan_path, on_event)
        finally:
            with contextlib.suppress(TransportError, OSError, paramiko.SSHException):
                self.session.run_remote(f"rm -f -- {shlex.quote(plan_path)}")

    def _run_plan(self, plan_path: str, on_event: Callable[[ProgressEvent], None]) -> bytes:
        buffer = bytearray()
        result: dict = {}

        def handle_line(line: bytes) -> None:
            try:
                message = json.loads(line)
            except ValueError:
                log.debug("run-plan printed a non-JSON line: %r", line[:200])
                return
            if not isinstance(message, dict):
                return
            if "event" in message:
                event = message["event"]
                if isinstance(event, dict) and event.get("type") == "run":
                    self.last_run_id = event.get("run_id")
                on_event(event)
            elif "envelope" in message:
                result["envelope"] = message["envelope"]
                result["run_id"] = message.get("run_id")

        def on_stdout(data: bytes) -> None:
            buffer.extend(data)
            while True:
                newline = buffer.find(b"\n")
                if newline < 0:
                    return
                line = bytes(buffer[:newline]).strip()
                del buffer[: newline + 1]
                if line:
                    handle_line(line)

        rc, _, err = self.session.execute(
            self.agent_command(["run-plan", plan_path]),
            "qualification (run-plan)",
            timeout_s=self.run_idle_timeout_s,
            on_stdout=on_stdout,
            total_s=self.run_timeout_s,
        )
        if buffer.strip():
            handle_line(bytes(buffer).strip())
        if rc != 0:
            raise self.session.remote_failure(
                "qualification (run-plan)", rc, err.decode("utf-8", "replace")
            )
        if "envelope" not in result:
            raise TransportError(
                f"run-plan on {self.target.known_hosts_name} ended without a signed report",
                hint="see the agent's log on the device",
            )
        self.last_run_id = result.get("run_id")
        try:
            return base64.b64decode(result["envelope"], validate=True)
        except (ValueError, TypeError) as e:
            raise TransportError("run-plan printed an envelope that is not base64") from e

    def get_report(self, run_id: str) -> bytes:
        """``report RUN_ID``: the stored envelope's bytes, as the agent printed them."""
        self.ensure_identity()
        step = f"fetch report {run_id}"
        rc, out, err = self.session.execute(self.agent_command(["report", run_id]), step)
        if rc != 0:
            raise self.session.remote_failure(step, rc, err.decode("utf-8", "replace"))
        return out

    def cancel(self, run_id: str) -> None:
        """Stop ``run_id``; it still ends with a signed report the device keeps.

        The run this transport is streaming is stopped by closing its channel (the
        run-plan's stdout closes and the agent cancels the run). Any other run
        (started by a host that went away) by ``edgequal-agent cancel RUN_ID``,
        which signals its run-plan; UsageError when it is not in progress.
        """
        self.ensure_identity()
        channel = self.session.running
        if channel is not None and run_id == self.last_run_id:
            channel.close()
            return
        answer = self.agent_json(["cancel", run_id], f"cancel run {run_id}")
        if not answer.get("cancelled"):
            raise UsageError(str(answer.get("message") or f"run {run_id} was not cancelled"))

    def close(self) -> None:
        """Close the SSH connection (a session handed in by the caller stays open)."""
        if self._owns_session:
            self.session.close()
