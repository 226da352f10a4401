"""One SSH connection to a board: exec channels for commands, SFTP for files, under a watchdog.

:class:`SSHSession` is what the SSH transport and ``edgequal agent install``
share. It connects the way ``ssh`` does:

- the host key is checked against known_hosts and unknown or changed keys are
  refused (see :mod:`edgequal.host.transport.ssh_target`);
- authentication: an explicit key file, ``IdentityFile`` from ``~/.ssh/config``,
  the ssh-agent, the default ``~/.ssh/id_*`` keys, and a password prompt only
  when standard input is a terminal.

Every step runs under a :class:`Watchdog`: when a step makes no progress for
its time limit (SFTP and exec reads can block forever when a board drops off
the network, paramiko #1380) the connection is closed and a TransportError
names the step. The next operation reconnects.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import posixpath
import select
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import paramiko

from ..errors import TransportError, UsageError
from .ssh_options import SSHOptions
from .ssh_target import (
    UnknownHostKey,
    host_key_error,
    known_hosts_files,
    new_client,
    resolve_target,
)

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


class Watchdog:
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

    def __enter__(self) -> Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def last_line(text: str) -> str:
    """The last non-empty line of ``text`` (a remote command's error message)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


@dataclass
class _Conn:
    """An open SSH client and its SFTP session, once one was opened."""

    client: paramiko.SSHClient
    sftp: paramiko.SFTPClient | None = None


class SSHSession:
    """One SSH connection to ``url`` (``ssh://USER@HOST[:PORT]``, HOST may be an ``~/.ssh/config`` alias).

    ``options`` (:class:`SSHOptions`) says how to log in: known_hosts, key file,
    ssh_config, whether the ssh-agent and default keys are tried, and the time limit
    of each step without progress. The connection opens on first use and reopens
    after it dropped; ``running`` is the channel of the streaming command in progress.
    """

    def __init__(
        self, url: str, options: SSHOptions | None = None, *, password_prompt: bool = True
    ):
        self.url = url
        self.options = options or SSHOptions()
        self.target = resolve_target(url, self.options.ssh_config)
        self.password_prompt = password_prompt
        self.step_timeout_s = self.options.step_timeout_s
        self.running: paramiko.Channel | None = None
        self._conn: _Conn | None = None
        self._conn_lock = threading.RLock()
        self._home: str | None = None

    def __enter__(self) -> SSHSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close the SFTP session and the SSH connection."""
        with self._conn_lock:
            self._drop()

    # ----- connection -------------------------------------------------------------

    def _connect_once(self, password: str | None) -> paramiko.SSHClient:
        t = self.target
        o = self.options
        files = known_hosts_files(t, o.known_hosts)
        client = new_client(files)
        key_files = ([str(o.key_file)] if o.key_file else []) + list(t.key_files)
        key_files = [k for k in key_files if os.path.exists(k)]
        sock = paramiko.ProxyCommand(t.proxy_command) if t.proxy_command else None
        try:
            client.connect(
                t.host,
                port=t.port,
                username=t.user,
                password=password,
                key_filename=key_files or None,
                allow_agent=o.allow_agent and password is None,
                look_for_keys=o.look_for_keys and password is None,
                timeout=self.step_timeout_s,
                banner_timeout=self.step_timeout_s,
                auth_timeout=self.step_timeout_s,
                channel_timeout=self.step_timeout_s,
                sock=sock,
            )
        except (UnknownHostKey, paramiko.BadHostKeyException) as e:
            client.close()
            raise host_key_error(t, e, files) from e
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
    ) -> Iterator[Watchdog]:
        """Run a step under a watchdog; turn every failure into one TransportError naming it."""
        idle_s = idle_s or self.step_timeout_s
        watchdog = Watchdog(idle_s, self._abort_transport, total_s)
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

    def _timeout_error(self, step: str, watchdog: Watchdog) -> TransportError:
        return TransportError(
            f"{step} on {self.target.known_hosts_name} {watchdog.reason or 'timed out'}; "
            "the SSH connection was closed",
            hint="check that the device is still reachable, then run the command again",
        )

    # ----- remote commands ----------------------------------------------------------

    def execute(
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
            self.running = channel if on_stdout else self.running
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
                if self.running is channel:
                    self.running = None
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
        rc, out, err = self.execute(
            cmd, f"remote command `{short(cmd)}`", idle_timeout_s or timeout_s, total_s=timeout_s
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
        rc, out, err = self.execute(cmd, step, idle_timeout_s or timeout_s, total_s=timeout_s)
        if rc != 0:
            raise self.remote_failure(step, rc, err.decode("utf-8", "replace"))
        return out.decode("utf-8", "replace")

    def remote_failure(self, step: str, rc: int, stderr: str) -> TransportError:
        line = last_line(stderr) or "(no message on stderr)"
        return TransportError(
            f"{step} failed on {self.target.known_hosts_name} (exit {rc}): {line}"
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
        return self.upload(Path(local), remote, 0, on_progress, f"upload {Path(local).name}")

    def upload(
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

    def remote_size(self, path: str) -> int | None:
        """The size of a remote file in bytes, or None when it does not exist."""
        sftp = self._sftp()
        with self._watch(f"stat {path}"):
            try:
                return sftp.stat(path).st_size
            except FileNotFoundError:
                return None


def short(text: str, limit: int = 80) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
