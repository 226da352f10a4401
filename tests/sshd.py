"""A real OpenSSH ``sshd`` on 127.0.0.1 for tests, with throwaway keys.

:func:`start_sshd` writes an ``sshd_config`` into a temporary directory, makes a
fresh ed25519 host key and an ed25519 client key that is the only authorized
key, starts ``/usr/sbin/sshd -D -e -f CONFIG`` on a free loopback port and waits
until the port accepts. It also writes a ``known_hosts`` file holding the host
key under ``[127.0.0.1]:PORT``, the way ``ssh`` records a non-default port.

The server lets in only the current user, by public key only, with SFTP served
by ``internal-sftp``. ``StrictModes no`` because the temporary files live in
directories sshd would otherwise find too open; ``PermitRootLogin
prohibit-password`` because CI runs as root.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/local/sbin/sshd", "/sbin/sshd")
LOOPBACK = "127.0.0.1"
START_TIMEOUT_S = 15.0


def find_sshd() -> str | None:
    """Return the absolute path of ``sshd`` (sshd re-executes itself, so it must be absolute)."""
    found = shutil.which("sshd")
    if found:
        return os.path.abspath(found)
    return next((p for p in SSHD_CANDIDATES if os.access(p, os.X_OK)), None)


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def make_ed25519_key(path: Path, comment: str) -> str:
    """Create an unencrypted ed25519 key pair at ``path`` and return the public key line."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return Path(f"{path}.pub").read_text().strip()


def known_hosts_line(port: int, public_key_line: str, host: str = LOOPBACK) -> str:
    """Return a known_hosts line for ``host`` on ``port`` (``[host]:port`` unless port is 22)."""
    key_type, key_b64 = public_key_line.split()[:2]
    name = host if port == 22 else f"[{host}]:{port}"
    return f"{name} {key_type} {key_b64}\n"


@dataclass
class SSHServer:
    """A running sshd and everything a client needs to reach it."""

    host: str
    port: int
    user: str
    workdir: Path
    client_key: Path
    known_hosts: Path
    host_public_key: str
    log_path: Path
    process: subprocess.Popen = field(repr=False)

    @property
    def url(self) -> str:
        """Return ``ssh://USER@127.0.0.1:PORT``."""
        return f"ssh://{self.user}@{self.host}:{self.port}"

    def options(self, agent_cmd: str | None = None, step_timeout_s: float = 60, **changes):
        """The host's ``SSHOptions`` for this server (its key, its known_hosts, no ssh-agent
        and no default keys), with ``changes`` applied."""
        from edgequal.host.transport.ssh_options import SSHOptions

        fields = {
            "known_hosts": self.known_hosts,
            "key_file": self.client_key,
            "allow_agent": False,
            "look_for_keys": False,
            "agent_cmd": agent_cmd,
            "step_timeout_s": step_timeout_s,
        }
        return SSHOptions(**{**fields, **changes})

    def transport(self, agent_cmd: str, state_dir: Path, step_timeout_s: float = 30):
        """A host ``SSHTransport`` to this server (its key, its known_hosts, no ssh-agent)."""
        from edgequal.host.transport.ssh import SSHTransport

        return SSHTransport(
            self.url, options=self.options(agent_cmd, step_timeout_s), state_dir=str(state_dir)
        )

    def other_host_key_known_hosts(self, path: Path) -> Path:
        """Write a known_hosts at ``path`` that pins a *different* ed25519 key for this server."""
        other = path.with_suffix(".otherkey")
        public = make_ed25519_key(other, "not-the-server")
        path.write_text(known_hosts_line(self.port, public, self.host))
        return path

    def log(self) -> str:
        """Return what sshd has logged so far (useful in assertion messages)."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop sshd (and, with it, every session it serves)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def _sshd_config(workdir: Path, port: int, user: str, host_key: Path) -> str:
    return "\n".join(
        [
            f"Port {port}",
            f"ListenAddress {LOOPBACK}",
            f"HostKey {host_key}",
            f"PidFile {workdir / 'sshd.pid'}",
            f"AuthorizedKeysFile {workdir / 'authorized_keys'}",
            "StrictModes no",
            "UsePAM no",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            f"AllowUsers {user}",
            "Subsystem sftp internal-sftp",
            # Tests open several sessions and connections at once.
            "MaxSessions 32",
            "MaxStartups 64",
            "LogLevel VERBOSE",
            "",
        ]
    )


def _wait_until_accepting(proc: subprocess.Popen, port: int, deadline: float) -> bool:
    """Poll until the port accepts a connection; False if sshd exited or time ran out."""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, port), timeout=1):
            return True
        time.sleep(0.05)
    return False


def start_sshd(workdir: Path, sshd: str | None = None) -> SSHServer:
    """Start sshd on a free loopback port with fresh keys under ``workdir``; RuntimeError if it fails."""
    sshd = sshd or find_sshd()
    if sshd is None:
        raise RuntimeError("sshd not found (install openssh-server)")
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    user = getpass.getuser()
    host_key = workdir / "ssh_host_ed25519_key"
    host_public = make_ed25519_key(host_key, "edgequal-test-host")
    client_key = workdir / "client_ed25519"
    client_public = make_ed25519_key(client_key, "edgequal-test-client")
    (workdir / "authorized_keys").write_text(client_public + "\n")
    if os.geteuid() == 0:
        # The privilege-separation directory sshd insists on when started as root.
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    last_error = ""
    for _attempt in range(3):
        # Another process may take the free port before sshd binds it: retry on a new one.
        port = free_port()
        config = workdir / "sshd_config"
        config.write_text(_sshd_config(workdir, port, user, host_key))
        log_path = workdir / f"sshd-{port}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sshd, "-D", "-e", "-f", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        if _wait_until_accepting(proc, port, time.monotonic() + START_TIMEOUT_S):
            known_hosts = workdir / "known_hosts"
            known_hosts.write_text(known_hosts_line(port, host_public))
            return SSHServer(
                host=LOOPBACK,
                port=port,
                user=user,
                workdir=workdir,
                client_key=client_key,
                known_hosts=known_hosts,
                host_public_key=host_public,
                log_path=log_path,
                process=proc,
            )
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        last_error = log_path.read_text(errors="replace").strip()
    raise RuntimeError(f"sshd did not start: {last_error or 'no output'}")
