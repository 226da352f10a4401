"""Where an ``ssh://`` address leads, and which host keys it may present.

- :func:`resolve_target` applies ``~/.ssh/config`` (``HostName``, ``User``,
  ``Port``, ``IdentityFile``, ``UserKnownHostsFile``, ``ProxyCommand``) to an
  ``ssh://USER@HOST[:PORT]`` URL; parts written in the URL win.
- Host keys come from ``known_hosts`` (the user's ``~/.ssh/known_hosts`` unless
  one is given, then OpenSSH's global file) with :class:`RejectUnknownHostKey`:
  unknown keys are refused, and a changed key is refused too.
  :func:`host_key_error` says which key was offered (its ``SHA256:``
  fingerprint, as ``ssh-keygen -l`` prints it) and how to trust it. Keys are
  never added here.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import paramiko

from ..errors import TransportError, UsageError, refuse_credentials
from .schemes import SSH, is_scheme

DEFAULT_SSH_PORT = 22
GLOBAL_KNOWN_HOSTS = Path("/etc/ssh/ssh_known_hosts")


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
    if not is_scheme(url, SSH):
        raise UsageError(f"not an ssh:// address: {url!r}", hint="use ssh://USER@HOST[:PORT]")
    refuse_credentials(url)
    rest = SSH.rest(url).rstrip("/")
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


class UnknownHostKey(paramiko.SSHException):
    """The server's host key is not in known_hosts (raised by the reject policy)."""

    def __init__(self, hostname: str, key: paramiko.PKey):
        super().__init__(f"host {hostname} not in known_hosts")
        self.hostname = hostname
        self.key = key


class RejectUnknownHostKey(paramiko.MissingHostKeyPolicy):
    """Refuse every host key not already in known_hosts, keeping the key for the message."""

    def missing_host_key(self, client, hostname, key):  # noqa: D102 - paramiko's hook
        raise UnknownHostKey(hostname, key)


def known_hosts_files(target: SSHTarget, known_hosts: Path | None = None) -> list[Path]:
    """The known_hosts files to check, the one a hint should name first.

    ``known_hosts`` replaces every other file; otherwise the config's
    ``UserKnownHostsFile`` (or ``~/.ssh/known_hosts``), then the global file.
    """
    if known_hosts:
        return [known_hosts]
    if target.known_hosts_files:
        files = [Path(p) for p in target.known_hosts_files]
    else:
        files = [Path.home() / ".ssh" / "known_hosts"]
    # OpenSSH's GlobalKnownHostsFile; the user's file stays first (the hint names it).
    return files + [GLOBAL_KNOWN_HOSTS]


def new_client(files: list[Path]) -> paramiko.SSHClient:
    """An SSH client holding the keys of ``files`` that refuses every other host key."""
    client = paramiko.SSHClient()
    for f in files:
        if f.is_file():
            try:
                client.load_host_keys(str(f))
            except (OSError, paramiko.SSHException) as e:
                raise UsageError(f"cannot read known_hosts file {f}: {e}") from e
    # Never AutoAddPolicy: an unknown key is refused and the user decides.
    client.set_missing_host_key_policy(RejectUnknownHostKey())
    return client


def host_key_error(
    target: SSHTarget, e: UnknownHostKey | paramiko.BadHostKeyException, files: list[Path]
) -> TransportError:
    """The error for an unknown or changed host key: the offered fingerprint and how to trust it."""
    t = target
    shown = " or ".join(str(f) for f in files if f == files[0] or f.is_file())
    first = files[0]
    port_opt = "" if t.port == DEFAULT_SSH_PORT else f"-p {t.port} "
    if isinstance(e, UnknownHostKey):
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
