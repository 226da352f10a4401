"""The ``ssh://USER@HOST[:PORT]`` transport: the agent's one-shot CLI over OpenSSH.

Nothing listens on the device: every operation is an ``edgequal-agent``
command run over an exec channel, and artifacts travel over SFTP.

- Host keys come from ``known_hosts`` (the user's ``~/.ssh/known_hosts`` unless
  one is given) with a policy that rejects unknown keys; a changed key is refused
  too. The error says which key was offered (its ``SHA256:`` fingerprint, as
  ``ssh-keygen -l`` prints it) and how to trust it. Keys are never added here.
- Authentication as ``ssh`` does it: an explicit key file, ``IdentityFile`` from
  ``~/.ssh/config``, the ssh-agent, the default ``~/.ssh/id_*`` keys, and a
  password prompt only when standard input is a terminal.
- ``~/.ssh/config`` host aliases: ``HostName``, ``User``, ``Port``,
  ``IdentityFile``, ``UserKnownHostsFile`` and ``ProxyCommand``.
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
- Every step runs under a watchdog: when a step makes no progress for its time
  limit (SFTP and exec reads can block forever when a board drops off the
  network, paramiko #1380) the connection is closed and a TransportError names
  the step. The next operation reconnects.
"""

from __future__ import annotations

import base64
import contextlib
import getpass
import hashlib
import json
import logging
import os
import posixpath
import select
import shlex
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import paramiko

from ..errors import TransportError, UsageError
from .base import ProgressEvent, PushResult, QualifyRequest, Transport

log = logging.getLogger(__name__)

DEFAULT_AGENT_CMD = "edgequal-agent"
# Where `edgequal agent install` puts the agent's venv; used when the default
# agent command is not on the non-interactive login PATH.
DEFAULT_INSTALL_PREFIX = "~/.local/share/edgequal"
DEFAULT_SSH_PORT = 22
GLOBAL_KNOWN_HOSTS = Path("/etc/ssh/ssh_known_hosts")
DEFAULT_STEP_TIMEOUT_S = 60.0
DEFAULT_RUN_IDLE_TIMEOUT_S = 900.0
DEFAULT_RUN_TIMEOUT_S = 4 * 3600.0
KEEPALIVE_INTERVAL_S = 15
# SFTP writes go out in pieces of at most ~32 KiB; read the local file in larger blocks.
UPLOAD_BLOCK_BYTES = 256 * 1024
_READ_BYTES = 65536
_POLL_S = 0.2


class RemoteResult(NamedTuple):
    """What a remote command did: exit status, stdout and stderr (decoded UTF-8)."""

    rc: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class SSHTarget:
    """Where to connect, after ``~/.ssh/config`` was applied to the URL."""

    alias: str
    host: str
    port: int
    user: str
    key_files: tuple[str, ...] = ()
    known_hosts_files: tuple[str, ...] = ()
    proxy_command: str | None = None

    @property
    def known_hosts_name(self) -> str:
        """The name known_hosts records this server under: ``host`` or ``[host]:port``."""
        return self.host if self.port == DEFAULT_SSH_PORT else f"[{self.host}]:{self.port}"

    @property
    def url(self) -> str:
        """Return ``ssh://user@host:port`` with the resolved values."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"ssh://{self.user}@{host}:{self.port}"


def parse_ssh_url(url: str) -> tuple[str | None, str, int | None]:
    """Split ``ssh://[USER@]HOST[:PORT]`` into (user, host, port); UsageError when malformed.

    HOST may be an ``~/.ssh/config`` alias or a bracketed IPv6 address.
    """
    if not url.startswith("ssh://"):
        raise UsageError(f"not an ssh:// address: {url!r}", hint="use ssh://USER@HOST[:PORT]")
    rest = url[len("ssh://") :].rstrip("/")
    if not rest or "/" in rest or any(c.isspace() for c in rest):
        raise UsageError(f"bad ssh address {url!r}", hint="use ssh://USER@HOST[:PORT]")
    user, _, hostport = rest.rpartition("@")
    port_text = None
    if hostport.startswith("["):
        host, sep, tail = hostport[1:].partition("]")
        if not sep or (tail and not tail.startswith(":")):
            raise UsageError(f"bad ssh address {url!r}", hint="write IPv6 hosts as [ADDR]:PORT")
        port_text = tail[1:] or None
    elif ":" in hostport:
        host, _, port_text = hostport.partition(":")
    else:
        host = hostport
    port = None
    if port_text is not None:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise UsageError(f"bad port in ssh address {url!r}")
        port = int(port_text)
    if not host:
        raise UsageError(f"no host in ssh address {url!r}", hint="use ssh://USER@HOST[:PORT]")
    return (user or None), host, port


def resolve_target(url: str, ssh_config: Path | None = None) -> SSHTarget:
    """Apply ``~/.ssh/config`` (or ``ssh_config``) to an ssh:// URL; parts in the URL win."""
    user, alias, port = parse_ssh_url(url)
    config_path = Path(ssh_config) if ssh_config else Path.home() / ".ssh" / "config"
    options: dict = {}
    if config_path.is_file():
        try:
            options = paramiko.SSHConfig.from_path(str(config_path)).lookup(alias)
        except (OSError, paramiko.SSHException, ValueError) as e:
            raise UsageError(f"cannot read {config_path}: {e}") from e
    host = options.get("hostname") or alias
    if port is None:
        port = int(options.get("port", DEFAULT_SSH_PORT))
    user = user or options.get("user") or getpass.getuser()
    key_files = tuple(os.path.expanduser(p) for p in options.get("identityfile", []))
    known = options.get("userknownhostsfile")
    known_files = tuple(os.path.expanduser(p) for p in known.split()) if known else ()
    proxy = options.get("proxycommand")
    if proxy and proxy.lower() == "none":
        proxy = None
    return SSHTarget(alias, host, port, user, key_files, known_files, proxy)


def host_key_fingerprint(key: paramiko.PKey) -> str:
    """Return ``SHA256:<unpadded base64>`` of an SSH public key, as ``ssh-keygen -l`` prints it."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")


def _keyscan_type(key: paramiko.PKey) -> str:
    """The ``ssh-keyscan -t`` name of a key (ed25519, ecdsa, rsa)."""
    name = key.get_name()
    if "ed25519" in name:
        return "ed25519"
    if "ecdsa" in name:
        return "ecdsa"
    return "rsa"


class _UnknownHostKey(paramiko.SSHException):
    """The server's host key is not in known_hosts (raised by the reject policy)."""

    def __init__(self, hostname: str, key: paramiko.PKey):
        super().__init__(f"host {hostname} not in known_hosts")
        self.hostname = hostname
        self.key = key


class _RejectUnknownHostKey(paramiko.MissingHostKeyPolicy):
    """Refuse every host key not already in known_hosts, keeping the key for the message."""

    def missing_host_key(self, client, hostname, key):  # noqa: D102 - paramiko's hook
        raise _UnknownHostKey(hostname, key)


class _Watchdog:
    """Calls ``on_expire`` once if not kicked within ``idle_s``, or after ``total_s`` in all."""

    def __init__(self, idle_s: float, on_expire: Callable[[], None], total_s: float | None = None):
        self.idle_s = idle_s
        self.total_s = total_s
        self.fired = False
        self.reason = ""
        self._on_expire = on_expire
        now = time.monotonic()
        self._idle_deadline = now + idle_s
        self._total_deadline = now + total_s if total_s else None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="ssh-watchdog", daemon=True)

    def kick(self) -> None:
        """Note progress: the idle limit starts again."""
        self._idle_deadline = time.monotonic() + self.idle_s

    def expired(self) -> bool:
        """True once the watchdog fired."""
        return self.fired

    def _watch(self) -> None:
        while not self._stop.wait(0.1):
            now = time.monotonic()
            if self._total_deadline and now > self._total_deadline:
                self.reason = f"did not finish within {self.total_s:g} s"
            elif now > self._idle_deadline:
                self.reason = f"made no progress for {self.idle_s:g} s"
            else:
                continue
            self.fired = True
            with contextlib.suppress(Exception):
                self._on_expire()
            return

    def __enter__(self) -> _Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _last_line(text: str) -> str:
    """The last non-empty line of ``text`` (a remote command's error message)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _digest_hex(digest: str) -> str:
    """``sha256:HEX`` or ``HEX`` -> ``HEX``."""
    return digest.split(":", 1)[1] if digest.startswith("sha256:") else digest


@dataclass
class _Conn:
    client: paramiko.SSHClient
    sftp: paramiko.SFTPClient | None = None


class SSHTransport(Transport):
    """A device's agent reached over SSH (exec channels for commands, SFTP for files).

    ``url`` is ``ssh://USER@HOST[:PORT]`` (HOST may be an ``~/.ssh/config`` alias).
    ``known_hosts`` replaces ``~/.ssh/known_hosts``; ``key_file`` is tried before the
    ssh-agent and the default keys. ``agent_cmd`` is the agent's command line on the
    device (when left at ``edgequal-agent`` and that is not on the remote PATH, the
    venv of ``edgequal agent install``'s default prefix is used); ``state_dir``
    sets ``$EDGEQUAL_AGENT_STATE`` for every agent command. ``step_timeout_s``
    bounds each step without progress; ``run_idle_timeout_s`` and ``run_timeout_s``
    bound a qualification (no output for that long, and in all).
    """

    def __init__(
        self,
        url: str,
        known_hosts: Path | None = None,
        key_file: Path | str | None = None,
        password_prompt: bool = True,
        agent_cmd: str = DEFAULT_AGENT_CMD,
        state_dir: str | None = None,
        step_timeout_s: float = DEFAULT_STEP_TIMEOUT_S,
        *,
        ssh_config: Path | None = None,
        allow_agent: bool = True,
        look_for_keys: bool = True,
        run_idle_timeout_s: float = DEFAULT_RUN_IDLE_TIMEOUT_S,
        run_timeout_s: float = DEFAULT_RUN_TIMEOUT_S,
    ):
        self.address = url
        self.target = resolve_target(url, ssh_config)
        self.known_hosts = Path(known_hosts).expanduser() if known_hosts else None
        self.key_file = str(Path(key_file).expanduser()) if key_file else None
        self.password_prompt = password_prompt
        self.agent_cmd = agent_cmd
        self.state_dir = state_dir
        self.step_timeout_s = step_timeout_s
        self.allow_agent = allow_agent
        self.look_for_keys = look_for_keys
        self.run_idle_timeout_s = run_idle_timeout_s
        self.run_timeout_s = run_timeout_s
        self.last_run_id: str | None = None
        self._conn: _Conn | None = None
        self._conn_lock = threading.RLock()
        self._resolved_agent_cmd: str | None = None
        self._running: paramiko.Channel | None = None
        self._home: str | None = None

    # ----- connection -------------------------------------------------------------

    def _known_hosts_files(self) -> list[Path]:
        if self.known_hosts:
            return [self.known_hosts]
        if self.target.known_hosts_files:
            files = [Path(p) for p in self.target.known_hosts_files]
        else:
            files = [Path.home() / ".ssh" / "known_hosts"]
        # OpenSSH's GlobalKnownHostsFile; the user's file stays first (the hint names it).
        return files + [GLOBAL_KNOWN_HOSTS]

    def _host_key_error(self, e: Exception, files: list[Path]) -> TransportError:
        t = self.target
        shown = " or ".join(str(f) for f in files if f == files[0] or f.is_file())
        first = files[0]
        port_opt = "" if t.port == DEFAULT_SSH_PORT else f"-p {t.port} "
        if isinstance(e, _UnknownHostKey):
            kt = _keyscan_type(e.key)
            return TransportError(
                f"host key of {t.known_hosts_name} is not in {shown}: the server offered "
                f"{e.key.get_name()} {host_key_fingerprint(e.key)} (refused, nothing was sent)",
                hint=(
                    f"compare that fingerprint with the device's own "
                    f"(`ssh-keygen -lf /etc/ssh/ssh_host_{kt}_key.pub` on its console), then "
                    f"trust it: `ssh-keyscan {port_opt}-t {kt} {t.host} >> {first}`"
                ),
            )
        got, expected = e.key, e.expected_key
        kt = _keyscan_type(got)
        return TransportError(
            f"host key of {t.known_hosts_name} CHANGED: {shown} pins {expected.get_name()} "
            f"{host_key_fingerprint(expected)}, the server offered {got.get_name()} "
            f"{host_key_fingerprint(got)}; someone may be intercepting the connection, or "
            f"the device was reinstalled (refused, nothing was sent)",
            hint=(
                f"only if the device was reinstalled: confirm the new fingerprint on its console, "
                f"then `ssh-keygen -R '{t.known_hosts_name}' -f {first}` and "
                f"`ssh-keyscan {port_opt}-t {kt} {t.host} >> {first}`"
            ),
        )

    def _new_client(self, files: list[Path]) -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        for f in files:
            if f.is_file():
                try:
                    client.load_host_keys(str(f))
                except (OSError, paramiko.SSHException) as e:
                    raise UsageError(f"cannot read known_hosts file {f}: {e}") from e
        # Never AutoAddPolicy: an unknown key is refused and the user decides.
        client.set_missing_host_key_policy(_RejectUnknownHostKey())
        return client

    def _connect_once(self, password: str | None) -> paramiko.SSHClient:
        t = self.target
        files = self._known_hosts_files()
        client = self._new_client(files)
        key_files = [k for k in ([self.key_file] if self.key_file else []) + list(t.key_files)]
        key_files = [k for k in key_files if os.path.exists(k)]
        sock = paramiko.ProxyCommand(t.proxy_command) if t.proxy_command else None
        try:
            client.connect(
                t.host,
                port=t.port,
                username=t.user,
                password=password,
                key_filename=key_files or None,
                allow_agent=self.allow_agent and password is None,
                look_for_keys=self.look_for_keys and password is None,
                timeout=self.step_timeout_s,
                banner_timeout=self.step_timeout_s,
                auth_timeout=self.step_timeout_s,
                channel_timeout=self.step_timeout_s,
                sock=sock,
            )
        except (_UnknownHostKey, paramiko.BadHostKeyException) as e:
            client.close()
            raise self._host_key_error(e, files) from e
        except paramiko.AuthenticationException:
            client.close()
            raise
        except (OSError, EOFError, paramiko.SSHException) as e:
            client.close()
            raise TransportError(
                f"cannot connect to {t.known_hosts_name} over SSH: {e or type(e).__name__}",
                hint=f"check that the device is on and `ssh -p {t.port} {t.user}@{t.host}` works",
            ) from e
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(KEEPALIVE_INTERVAL_S)
        return client

    def _connect(self) -> paramiko.SSHClient:
        t = self.target
        try:
            return self._connect_once(None)
        except paramiko.AuthenticationException as e:
            interactive = self.password_prompt and sys.stdin is not None and sys.stdin.isatty()
            if not interactive:
                raise TransportError(
                    f"SSH authentication as {t.user} on {t.known_hosts_name} failed ({e})",
                    hint="pass a key with --ssh-key, load it into ssh-agent, or add "
                    "IdentityFile to ~/.ssh/config",
                ) from e
        password = getpass.getpass(f"{t.user}@{t.host}'s password: ")
        try:
            return self._connect_once(password)
        except paramiko.AuthenticationException as e:
            raise TransportError(
                f"SSH authentication as {t.user} on {t.known_hosts_name} failed ({e})",
                hint="check the user name and password",
            ) from e

    def _connection(self) -> _Conn:
        """The live connection, (re)connecting when there is none or it dropped."""
        with self._conn_lock:
            conn = self._conn
            transport = conn.client.get_transport() if conn else None
            if conn is None or transport is None or not transport.is_active():
                if conn is not None:
                    self._drop(conn)
                with self._watch(f"connect to {self.target.known_hosts_name}"):
                    client = self._connect()
                self._conn = conn = _Conn(client)
            return conn

    def _drop(self, conn: _Conn | None = None) -> None:
        """Close a connection (the watchdog's way to unblock a hung read)."""
        conn = conn or self._conn
        if conn is None:
            return
        with contextlib.suppress(Exception):
            if conn.sftp is not None:
                conn.sftp.close()
        with contextlib.suppress(Exception):
            conn.client.close()
        if self._conn is conn:
            self._conn = None

    def _abort_transport(self) -> None:
        """Close the socket under the current connection without taking any lock."""
        conn = self._conn
        if conn is None:
            return
        transport = conn.client.get_transport()
        with contextlib.suppress(Exception):
            if transport is not None:
                transport.sock.close()
        with contextlib.suppress(Exception):
            conn.client.close()

    @contextlib.contextmanager
    def _watch(
        self, step: str, idle_s: float | None = None, total_s: float | None = None
    ) -> Iterator[_Watchdog]:
        """Run a step under a watchdog; turn every failure into one TransportError naming it."""
        idle_s = idle_s or self.step_timeout_s
        watchdog = _Watchdog(idle_s, self._abort_transport, total_s)
        try:
            with watchdog:
                yield watchdog
        except (TransportError, UsageError):
            if watchdog.fired:
                raise self._timeout_error(step, watchdog) from None
            raise
        except (OSError, EOFError, paramiko.SSHException) as e:
            self._drop()
            if watchdog.fired:
                raise self._timeout_error(step, watchdog) from e
            raise TransportError(
                f"{step} on {self.target.known_hosts_name} failed: "
                f"{e or type(e).__name__} (connection lost?)",
                hint="check the device and the network, then run the command again "
                "(uploads resume where they stopped)",
            ) from e
        if watchdog.fired:
            self._drop()
            raise self._timeout_error(step, watchdog)

    def _timeout_error(self, step: str, watchdog: _Watchdog) -> TransportError:
        return TransportError(
            f"{step} on {self.target.known_hosts_name} {watchdog.reason or 'timed out'}; "
            "the SSH connection was closed",
            hint="check that the device is still reachable, then run the command again",
        )

    # ----- remote commands ----------------------------------------------------------

    def _exec(
        self,
        command: str,
        step: str,
        timeout_s: float | None = None,
        stdin: bytes | None = None,
        on_stdout: Callable[[bytes], None] | None = None,
        total_s: float | None = None,
    ) -> tuple[int, bytes, bytes]:
        """Run ``command`` in the remote login shell; return (rc, stdout, stderr) bytes.

        ``timeout_s`` is the longest the command may go without output (and, with
        ``total_s`` unset, in all). With ``on_stdout``, stdout is handed over as it
        arrives instead of being collected.
        """
        timeout_s = timeout_s or self.step_timeout_s
        total_s = total_s or timeout_s
        conn = self._connection()
        out = bytearray()
        err = bytearray()
        deadline = time.monotonic() + total_s
        with self._watch(step, timeout_s, total_s) as watchdog:
            transport = conn.client.get_transport()
            if transport is None:
                raise EOFError("SSH connection closed")
            channel = transport.open_session(timeout=self.step_timeout_s)
            self._running = channel if on_stdout else self._running
            try:
                channel.exec_command(command)
                if stdin is not None:
                    channel.sendall(stdin)
                channel.shutdown_write()
                while True:
                    got = False
                    while channel.recv_ready():
                        data = channel.recv(_READ_BYTES)
                        if not data:
                            break
                        got = True
                        if on_stdout is not None:
                            on_stdout(data)
                        else:
                            out += data
                    while channel.recv_stderr_ready():
                        data = channel.recv_stderr(_READ_BYTES)
                        if not data:
                            break
                        got = True
                        err += data
                    if got:
                        watchdog.kick()
                    # The exit status follows all of the command's output on the wire.
                    if channel.exit_status_ready() and not (
                        channel.recv_ready() or channel.recv_stderr_ready()
                    ):
                        break
                    if channel.closed or watchdog.expired():
                        break
                    if time.monotonic() > deadline:
                        watchdog.reason = f"did not finish within {total_s:g} s"
                        watchdog.fired = True
                        break
                    select.select([channel], [], [], _POLL_S)
            finally:
                if self._running is channel:
                    self._running = None
                with contextlib.suppress(Exception):
                    channel.close()
            if watchdog.expired():
                raise EOFError("watchdog closed the connection")
            if not channel.exit_status_ready():
                raise EOFError("the channel closed before the command exited")
            return channel.recv_exit_status(), bytes(out), bytes(err)

    def run_remote(
        self, cmd: str, timeout_s: float | None = None, idle_timeout_s: float | None = None
    ) -> RemoteResult:
        """Run a shell command on the device; return (rc, stdout, stderr) without raising on rc.

        ``timeout_s`` (default ``step_timeout_s``) bounds the whole command,
        ``idle_timeout_s`` (default: the same) the time it may go without output.
        """
        timeout_s = timeout_s or self.step_timeout_s
        rc, out, err = self._exec(
            cmd, f"remote command `{_short(cmd)}`", idle_timeout_s or timeout_s, total_s=timeout_s
        )
        return RemoteResult(rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))

    def check_remote(
        self,
        cmd: str,
        step: str,
        timeout_s: float | None = None,
        idle_timeout_s: float | None = None,
    ) -> str:
        """Run a shell command; return its stdout, or raise TransportError naming ``step`` with its stderr."""
        timeout_s = timeout_s or self.step_timeout_s
        rc, out, err = self._exec(cmd, step, idle_timeout_s or timeout_s, total_s=timeout_s)
        if rc != 0:
            raise self._remote_failure(step, rc, err.decode("utf-8", "replace"))
        return out.decode("utf-8", "replace")

    def _remote_failure(self, step: str, rc: int, stderr: str) -> TransportError:
        line = _last_line(stderr) or "(no message on stderr)"
        return TransportError(
            f"{step} failed on {self.target.known_hosts_name} (exit {rc}): {line}"
        )

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
            found = self.check_remote(probe, "look for edgequal-agent").strip()
            if not found:
                raise TransportError(
                    f"edgequal-agent is not installed on {self.target.known_hosts_name}",
                    hint=f"install it with `edgequal agent install {self.address}`",
                )
            self._resolved_agent_cmd = shlex.quote(found)
        return self._resolved_agent_cmd

    def agent_json(self, args: Sequence[str], step: str, timeout_s: float | None = None) -> dict:
        """Run an agent command that prints one JSON object; return it."""
        out = self.check_remote(self.agent_command(args), step, timeout_s).strip()
        for text in (out, _last_line(out)):
            try:
                value = json.loads(text)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
        raise TransportError(
            f"{step}: the agent on {self.target.known_hosts_name} printed no JSON object "
            f"({_short(out) or 'nothing'})",
            hint="the device's edgequal-agent may be older than this host; reinstall it",
        )

    # ----- files ----------------------------------------------------------------------

    def _sftp(self) -> paramiko.SFTPClient:
        conn = self._connection()
        if conn.sftp is None:
            with self._watch("open SFTP session"):
                conn.sftp = conn.client.open_sftp()
                # Bounds each SFTP request; the watchdog covers what this misses.
                conn.sftp.get_channel().settimeout(self.step_timeout_s)
        return conn.sftp

    def home(self) -> str:
        """The remote user's home directory."""
        if self._home is None:
            sftp = self._sftp()
            with self._watch("find the remote home directory"):
                self._home = sftp.normalize(".")
        return self._home

    def expand(self, path: str) -> str:
        """Expand a leading ``~`` in a remote path (SFTP does not)."""
        if path == "~" or path.startswith("~/"):
            return self.home() + path[1:]
        return path

    def exists(self, path: str) -> bool:
        """True when the remote path exists."""
        sftp = self._sftp()
        with self._watch(f"stat {path}"):
            try:
                sftp.stat(self.expand(path))
            except FileNotFoundError:
                return False
        return True

    def makedirs(self, path: str, mode: int = 0o755) -> None:
        """``mkdir -p`` over SFTP."""
        sftp = self._sftp()
        path = self.expand(path)
        with self._watch(f"create directory {path}"):
            parts = [p for p in path.split("/") if p]
            current = "/" if path.startswith("/") else ""
            for part in parts:
                current = posixpath.join(current, part) if current else part
                try:
                    sftp.stat(current)
                except FileNotFoundError:
                    sftp.mkdir(current, mode)

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Write ``data`` to a remote file, setting ``mode`` before any byte is written."""
        sftp = self._sftp()
        path = self.expand(path)
        with self._watch(f"write {path}"), sftp.open(path, "w") as f:
            f.chmod(mode)
            f.write(data)

    def read_file(self, path: str, limit_bytes: int = 1 << 20) -> bytes:
        """Read a small remote file (at most ``limit_bytes``)."""
        sftp = self._sftp()
        path = self.expand(path)
        with self._watch(f"read {path}"), sftp.open(path, "r") as f:
            return f.read(limit_bytes)

    def put_file(
        self, local: Path, remote: str, on_progress: Callable[[int, int], None] | None = None
    ) -> int:
        """Copy a local file to the device; return the bytes sent."""
        remote = self.expand(remote)
        return self._upload(Path(local), remote, 0, on_progress, f"upload {Path(local).name}")

    def _upload(
        self,
        local: Path,
        remote: str,
        start: int,
        on_progress: Callable[[int, int], None] | None,
        step: str,
    ) -> int:
        """Write ``local[start:]`` at offset ``start`` of ``remote``; return the bytes sent."""
        sftp = self._sftp()
        size = local.stat().st_size
        sent = 0
        with self._watch(step) as watchdog:
            try:
                exists = True
                sftp.stat(remote)
            except FileNotFoundError:
                exists = False
            with (
                sftp.open(remote, "r+" if exists and start else "w") as dst,
                open(local, "rb") as src,
            ):
                if start:
                    # Anything past the offset the device reported is not trusted.
                    dst.truncate(start)
                    dst.seek(start)
                    src.seek(start)
                dst.set_pipelined(True)
                while True:
                    block = src.read(UPLOAD_BLOCK_BYTES)
                    if not block:
                        break
                    dst.write(block)
                    sent += len(block)
                    watchdog.kick()
                    if on_progress is not None:
                        on_progress(start + sent, size)
                # Leaving the block closes the file, which waits for every write's reply.
        return sent

    # ----- Transport ---------------------------------------------------------------

    def info(self) -> dict:
        """The agent's info in the gRPC transport's shape, from ``info --json`` and ``key show --json``.

        Keys: address, agent_version, fingerprint (the board), runtimes (list of
        {name, available, version, reason}), public_key_b64, key_fingerprint,
        busy (None: not known over SSH), key (``key show --json`` as printed),
        probes (every probe reading).
        """
        raw = self.agent_json(["info", "--json"], "read the agent's info")
        key = self.agent_json(["key", "show", "--json"], "read the device key")
        probes = raw.get("probes") or {}
        runtimes = raw.get("runtimes") or {}
        if isinstance(runtimes, dict):
            runtimes = [
                {
                    "name": name,
                    "available": bool(r.get("available")),
                    "version": r.get("version") or "",
                    "reason": r.get("reason") or "",
                }
                for name, r in runtimes.items()
            ]
        return {
            "address": self.address,
            "agent_version": raw.get("agent_version", ""),
            "fingerprint": probes.get("fingerprint", raw.get("fingerprint", {})),
            "runtimes": runtimes,
            "public_key_b64": key.get("public_key_b64", ""),
            "key_fingerprint": key.get("fingerprint", ""),
            "busy": None,
            "key": key,
            "probes": probes,
        }

    def store_stat(self, digest: str) -> dict:
        """``store stat DIGEST``: {"digest", "committed_offset", "complete", "partial_path"}."""
        return self.agent_json(["store", "stat", digest], f"check {digest} in the device's store")

    def push(
        self, path: Path, digest: str, on_progress: Callable[[int, int], None] | None = None
    ) -> PushResult:
        """Upload ``path`` unless the device holds ``digest``; resume a partial upload."""
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
        partial = self.expand(partial)
        committed = int(stat.get("committed_offset", stat.get("committed")) or 0)
        self.makedirs(posixpath.dirname(partial), 0o700)
        remote_size = self._remote_size(partial)
        # Resume from what the device really holds, never past the local file's end.
        start = 0 if remote_size is None else min(committed, remote_size, size)
        sent = self._upload(path, partial, start, on_progress, f"upload {path.name}")
        self.agent_json(["store", "commit", digest], f"commit {digest} on the device")
        return PushResult(digest=digest, size=size, bytes_sent=sent)

    def _remote_size(self, path: str) -> int | None:
        sftp = self._sftp()
        with self._watch(f"stat {path}"):
            try:
                return sftp.stat(path).st_size
            except FileNotFoundError:
                return None

    def qualify(self, request: QualifyRequest, on_event: Callable[[ProgressEvent], None]) -> bytes:
        """Run ``run-plan`` on the device, streaming events; return the signed envelope bytes."""
        doc = {
            "model_digest": request.model_digest,
            "golden_digest": request.golden_digest,
            "plan": request.plan,
            "nonce": request.nonce,
            "model_name": request.model_name,
            "golden_name": request.golden_name,
        }
        if request.holder:
            doc["holder"] = request.holder
        plan_path = self.check_remote(
            'mktemp "${TMPDIR:-/tmp}/edgequal-plan.XXXXXXXX"', "create the plan file"
        ).strip()
        try:
            self.write_file(plan_path, json.dumps(doc).encode("utf-8"), 0o600)
            return self._run_plan(plan_path, on_event)
        finally:
            with contextlib.suppress(TransportError, OSError, paramiko.SSHException):
                self.run_remote(f"rm -f -- {shlex.quote(plan_path)}")

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
                on_event(message["event"])
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

        rc, _, err = self._exec(
            self.agent_command(["run-plan", plan_path]),
            "qualification (run-plan)",
            timeout_s=self.run_idle_timeout_s,
            on_stdout=on_stdout,
            total_s=self.run_timeout_s,
        )
        if buffer.strip():
            handle_line(bytes(buffer).strip())
        if rc != 0:
            raise self._remote_failure(
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
        step = f"fetch report {run_id}"
        rc, out, err = self._exec(self.agent_command(["report", run_id]), step)
        if rc != 0:
            raise self._remote_failure(step, rc, err.decode("utf-8", "replace"))
        return out

    def cancel(self, run_id: str) -> None:
        """Stop the run this transport is streaming by closing its channel.

        Closing the channel closes the run-plan's stdout; the agent then ends the
        run with a signed report it keeps (fetch it with :meth:`get_report`).
        """
        channel = self._running
        if channel is None:
            raise TransportError(
                f"no run in progress over this SSH connection to cancel ({run_id})",
                hint="over SSH a run can only be stopped by the connection that started it",
            )
        channel.close()

    def close(self) -> None:
        """Close the SFTP session and the SSH connection."""
        with self._conn_lock:
            self._drop()


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
