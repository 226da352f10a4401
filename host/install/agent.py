"""``edgequal agent install`` and ``edgequal agent status``: put the agent on a board over SSH.

:func:`install_agent` does, over one SSH connection whose host key was checked
against known_hosts:

1. builds a wheel of this project (or takes one), uploads it to ``<prefix>/wheels``;
2. creates ``<prefix>/venv`` with the board's ``python3`` unless it exists (a
   second install reuses it, so it upgrades in place);
3. ``pip install``s the wheel with its runtime extras, from the board's package
   index, or with ``wheelhouse`` only from those files (uploaded to
   ``<prefix>/wheelhouse``, ``--no-index``) for labs without internet;
4. writes a random access token to ``<prefix>/token`` (mode 0600) unless one is there;
5. starts ``edgequal-agent serve`` (see *service* below);
6. reads the device's report-signing public key with ``edgequal-agent key show``
   over the verified SSH channel and pins it in ``known_devices`` under the
   device name, with a host-side copy of the token (``<config>/tokens/NAME.token``);
7. returns an :class:`InstallResult` whose ``grpc_address`` is what to pass to
   ``--device`` (or use the device name).

The device key lives in the agent's state directory (``--state-dir``, default
``~/.local/state/edgequal-agent`` on the board), never in the venv, so
reinstalling keeps the device's identity and its pin stays valid.

*service*:

- ``"systemd"``: a unit ``edgequal-agent.service`` (a system unit as root, else
  a user unit under ``~/.config/systemd/user``), enabled and (re)started. Where
  systemd is not usable (containers, boards without it) nothing is started and
  the result says how to start the agent by hand.
- ``"background"``: ``nohup edgequal-agent serve ... &`` with a pid file and a
  log in the prefix; a reinstall stops the old process first. It does not come
  back after a reboot.
- ``"none"``: nothing is started; ``InstallResult.start_command`` is the command.
"""

from __future__ import annotations

import os
import secrets
import shlex
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from edgequal.contract.runtimes import RUNTIME_EXTRAS

from ..devices.trust import KnownDevices, check_device_name, decode_public_key, default_device_name
from ..errors import TransportError, UsageError
from ..transport.schemes import GRPC, REMOTE, SSH, is_scheme, scheme_of
from ..transport.ssh import DEFAULT_INSTALL_PREFIX, SSHTransport
from ..transport.ssh_options import SSHOptions
from ..transport.ssh_session import SSHSession
from ..transport.ssh_target import resolve_target
from .commands import (
    check_extras,
    grpc_address_for,
    listen_address,
    pip_install_command,
    serve_argv,
    shell_join,
)
from .service import service_state, start_background, start_systemd
from .wheel import build_wheel

SERVICES = ("systemd", "background", "none")
DEFAULT_LISTEN = "0.0.0.0:50051"
DEFAULT_EXTRAS = RUNTIME_EXTRAS
MIN_PYTHON = (3, 10)
PIP_TIMEOUT_S = 1800.0
PIP_IDLE_TIMEOUT_S = 600.0
VENV_TIMEOUT_S = 300.0


@dataclass
class InstallResult:
    """What ``install_agent`` did and how to reach the agent now."""

    name: str
    grpc_address: str
    ssh_url: str
    fingerprint: str
    public_key_b64: str
    agent_version: str
    prefix: str
    venv: str
    remote_token_file: str
    token_file: str
    known_devices: str
    service: str
    """``systemd``, ``systemd-user``, ``background`` or ``not started``."""
    running: bool
    start_command: str
    state_dir: str | None = None
    upgraded: bool = False
    notes: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        verb = "upgraded" if self.upgraded else "installed"
        lines = [
            f"edgequal-agent {self.agent_version} {verb} on {self.ssh_url} in {self.venv}",
            f"device key ed25519 {self.fingerprint} pinned as '{self.name}' in {self.known_devices}",
            f"token: {self.remote_token_file} on the board, {self.token_file} here",
        ]
        if self.running:
            lines.append(f"agent running ({self.service}); use --device {self.name}")
            lines.append(f"address: {self.grpc_address}")
        else:
            lines.append(f"agent not started; start it on the board with:\n  {self.start_command}")
            lines.append(f"then use --device {self.name} ({self.grpc_address})")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)


# ----- install --------------------------------------------------------------------------


def install_agent(
    url: str,
    extras: Sequence[str] = DEFAULT_EXTRAS,
    wheelhouse: Path | None = None,
    service: str = "systemd",
    listen: str = DEFAULT_LISTEN,
    prefix: str = DEFAULT_INSTALL_PREFIX,
    python: str = "python3",
    known_devices: KnownDevices | Path | None = None,
    device_name: str | None = None,
    system_site_packages: bool = False,
    *,
    ssh_options: SSHOptions | None = None,
    state_dir: str | None = None,
    wheel: Path | None = None,
    replace_key: bool = False,
    on_step: Callable[[str], None] | None = None,
) -> InstallResult:
    """Install (or upgrade) the agent on the board at ``url`` and pin its key; see the module doc.

    ``python`` is the board's interpreter that creates the venv (>= 3.10);
    ``system_site_packages`` lets the venv see the board's own packages (a
    vendor onnxruntime on a Jetson). ``state_dir`` is the agent's state dir on
    the board (default: the agent's own default). ``wheel`` skips the local
    build. ``replace_key`` re-pins a device whose key changed (after checking it
    out of band); otherwise a changed key raises UntrustedDevice. ``on_step``
    receives one line per step, for progress output. ``ssh_options`` says how to log in
    (known_hosts, key file, ssh_config...; its ``agent_cmd`` is not read: the agent run is
    the one installed).
    """
    if service not in SERVICES:
        raise UsageError(f"unknown service {service!r}", hint=f"use one of: {', '.join(SERVICES)}")
    extras = check_extras(extras)
    listen_address(listen)
    if wheelhouse is not None and not Path(wheelhouse).is_dir():
        raise UsageError(f"wheelhouse {wheelhouse} is not a directory")
    known = (
        known_devices if isinstance(known_devices, KnownDevices) else KnownDevices(known_devices)
    )
    step = on_step or (lambda _msg: None)
    ssh_options = ssh_options or SSHOptions()
    target = resolve_target(url, ssh_options.ssh_config)
    name = device_name or default_device_name(target.alias)
    check_device_name(name)

    with tempfile.TemporaryDirectory(prefix="edgequal-install-") as tmp:
        if wheel is None:
            step("building the edgequal wheel")
            wheel = build_wheel(Path(tmp))
        wheel = Path(wheel)
        if not wheel.is_file():
            raise UsageError(f"wheel {wheel} does not exist")
        with SSHSession(url, ssh_options) as ssh:
            return _install(
                ssh, target.host, name, known, wheel, extras, wheelhouse, service, listen,
                prefix, python, system_site_packages, state_dir, replace_key, step,
            )  # fmt: skip


def _install(
    ssh: SSHSession,
    ssh_host: str,
    name: str,
    known: KnownDevices,
    wheel: Path,
    extras: tuple[str, ...],
    wheelhouse: Path | None,
    service: str,
    listen: str,
    prefix: str,
    python: str,
    system_site_packages: bool,
    state_dir: str | None,
    replace_key: bool,
    step: Callable[[str], None],
) -> InstallResult:
    step(f"connected to {ssh.target.url} (host key checked)")
    prefix = ssh.expand(prefix).rstrip("/")
    venv = f"{prefix}/venv"
    if state_dir:
        state_dir = ssh.expand(state_dir)
    agent_cmd = shlex.quote(f"{venv}/bin/edgequal-agent")
    agent = SSHTransport(
        ssh.url, options=replace(ssh.options, agent_cmd=agent_cmd), session=ssh, state_dir=state_dir
    )
    notes: list[str] = []

    _check_python(ssh, python)
    ssh.makedirs(prefix, 0o700)
    ssh.run_remote(f"chmod 700 {shlex.quote(prefix)}")
    ssh.makedirs(f"{prefix}/wheels")
    remote_wheel = f"{prefix}/wheels/{wheel.name}"
    step(f"uploading {wheel.name}")
    ssh.check_remote(
        f"rm -f {shlex.quote(prefix)}/wheels/edgequal-*.whl", "remove old edgequal wheels"
    )
    ssh.put_file(wheel, remote_wheel)
    find_links = None
    if wheelhouse is not None:
        find_links = f"{prefix}/wheelhouse"
        step(f"uploading the wheelhouse {wheelhouse}")
        _upload_wheelhouse(ssh, Path(wheelhouse), find_links)

    upgraded = _make_venv(ssh, python, venv, system_site_packages, step)
    version = _pip_install(ssh, venv, remote_wheel, extras, find_links, step)
    remote_token = f"{prefix}/token"
    token = _agent_token(ssh, remote_token)

    # The key pinned is the one that signs a fresh challenge (over the checked SSH channel).
    raw = agent.prove_identity(None)

    argv = serve_argv(venv, listen, remote_token, state_dir)
    start_command = shell_join(argv)
    kind, running = "not started", False
    if service == "systemd":
        kind, running = start_systemd(ssh, argv, notes, step)
    elif service == "background":
        kind, running = start_background(ssh, prefix, argv, listen, step)
    if not running and kind == "not started" and service != "none":
        notes.append("no service manager was usable: start the agent by hand (see above)")

    grpc_address = grpc_address_for(listen, ssh_host)
    host_token = known.path.parent / "tokens" / f"{name}.token"
    _write_private(host_token, token + "\n")
    entry = known.trust(name, grpc_address, raw, replace=replace_key, token_file=str(host_token))
    # One device, one name, one key: the SSH address it was installed over is one of its addresses.
    entry = known.add_address(name, ssh.url)
    step(f"pinned {entry.fingerprint} as '{name}'")
    return InstallResult(
        name=name,
        grpc_address=grpc_address,
        ssh_url=ssh.target.url,
        fingerprint=entry.fingerprint,
        public_key_b64=entry.public_key_b64(),
        agent_version=version,
        prefix=prefix,
        venv=venv,
        remote_token_file=remote_token,
        token_file=str(host_token),
        known_devices=str(known.path),
        service=kind,
        running=running,
        start_command=start_command,
        state_dir=state_dir,
        upgraded=upgraded,
        notes=notes,
    )


def _make_venv(ssh: SSHSession, python: str, venv: str, system_site_packages: bool, step) -> bool:
    """The board's venv for the agent, created unless it exists; whether it existed (an
    upgrade)."""
    upgraded = ssh.exists(f"{venv}/bin/python")
    if upgraded:
        step(f"reusing {venv}")
    else:
        step(f"creating {venv}")
        venv_cmd = [python, "-m", "venv"]
        if system_site_packages:
            venv_cmd.append("--system-site-packages")
        try:
            ssh.check_remote(shell_join(venv_cmd + [venv]), "create the venv", VENV_TIMEOUT_S)
        except TransportError as e:
            e.hint = e.hint or (
                "on Debian, Ubuntu and Raspberry Pi OS: sudo apt install python3-venv"
            )
            raise
    return upgraded


def _pip_install(ssh: SSHSession, venv: str, remote_wheel: str, extras, find_links, step) -> str:
    """edgequal with ``extras`` installed into ``venv`` from the pushed wheel (and the
    wheelhouse, when given); the version installed."""
    step(f"installing edgequal[{','.join(extras)}] into {venv}")
    first, second = pip_install_command(venv, remote_wheel, extras, find_links)
    for cmd in (first, second):
        try:
            ssh.check_remote(cmd, "pip install", PIP_TIMEOUT_S, PIP_IDLE_TIMEOUT_S)
        except TransportError as e:
            e.hint = e.hint or (
                "with --wheelhouse, the directory must hold wheels of every dependency for "
                "the board's Python and CPU; without it, the board needs its package index"
            )
            raise
    return ssh.check_remote(
        shell_join(
            [
                f"{venv}/bin/python",
                "-c",
                "import importlib.metadata as m; print(m.version('edgequal'))",
            ]
        ),
        "read the installed version",
    ).strip()


def _agent_token(ssh: SSHSession, remote_token: str) -> str:
    """The agent's bearer token on the board: the existing one is kept, so hosts that
    already hold it keep working; else a new one, written 0600."""
    token = ssh.read_file(remote_token).decode().strip() if ssh.exists(remote_token) else ""
    if not token:
        token = secrets.token_urlsafe(32)
        ssh.write_file(remote_token, (token + "\n").encode("ascii"), 0o600)
    return token


def _check_python(ssh: SSHSession, python: str) -> None:
    probe = "import sys; print('%d.%d' % sys.version_info[:2])"
    result = ssh.run_remote(shell_join([python, "-c", probe]))
    if result.rc != 0:
        raise TransportError(
            f"cannot run {python} on {ssh.target.known_hosts_name}: "
            f"{(result.stderr.strip().splitlines() or ['no message'])[-1]}",
            hint="install Python 3.10 or newer on the board, or pass its path (python=...)",
        )
    major, minor = (int(x) for x in result.stdout.strip().split("."))
    if (major, minor) < MIN_PYTHON:
        raise TransportError(
            f"{python} on {ssh.target.known_hosts_name} is Python {major}.{minor}; the agent "
            f"needs {MIN_PYTHON[0]}.{MIN_PYTHON[1]} or newer",
            hint="install a newer Python on the board and pass its path (python=...)",
        )


def _upload_wheelhouse(ssh: SSHSession, local: Path, remote: str) -> None:
    ssh.makedirs(remote)
    for path in sorted(local.iterdir()):
        if not path.is_file() or not path.name.endswith((".whl", ".tar.gz", ".zip")):
            continue
        target = f"{remote}/{path.name}"
        if ssh.remote_size(target) == path.stat().st_size:
            continue
        ssh.put_file(path, target)


def _write_private(path: Path, text: str) -> None:
    """Write a secret file with mode 0600 (its directory 0700)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(text)
    os.replace(tmp, path)


# ----- status ------------------------------------------------------------------------


def agent_status(
    url_or_name: str,
    *,
    ssh_options: SSHOptions | None = None,
    known_devices: KnownDevices | Path | None = None,
    prefix: str = DEFAULT_INSTALL_PREFIX,
    state_dir: str | None = None,
) -> dict:
    """Version, runtimes, key fingerprint and whether the service runs, for an agent.

    ``url_or_name`` is an ``ssh://`` address, or a device name from
    ``known_devices``: one pinned at an ``ssh://`` address is asked over SSH; one
    at a ``grpc://`` address (or a ``grpc://`` address of a trusted device) is
    reached as every command reaches it (its pinned key proved first, then its TLS
    files and token from its entry; UntrustedDevice otherwise), and the service
    counts as running when the agent answers. ``pinned_as`` names the device
    whose pinned key matches, and ``key_matches_pin`` says whether the device
    still presents the key pinned for the given name.
    """
    known = (
        known_devices if isinstance(known_devices, KnownDevices) else KnownDevices(known_devices)
    )
    entry = None
    address = url_or_name
    if scheme_of(url_or_name) not in REMOTE:
        entry = known.get(url_or_name)
        if entry is None:
            raise UsageError(
                f"unknown device {url_or_name!r}",
                hint="give ssh://USER@HOST, or a name from `edgequal devices list`",
            )
        address = entry.options.get("ssh") or entry.address
    if is_scheme(address, SSH):
        status = _ssh_status(address, ssh_options or SSHOptions(), prefix, state_dir)
    elif is_scheme(address, GRPC):
        status = _grpc_status(url_or_name if entry is not None else address, known)
    else:
        raise UsageError(f"cannot ask {address!r} for its status", hint="use ssh://USER@HOST")
    pinned = _find_pin(known, status.get("public_key_b64", ""))
    status["pinned_as"] = pinned.name if pinned else None
    if entry is not None:
        status["key_matches_pin"] = entry.public_key_b64() == status.get("public_key_b64")
    return status


def _find_pin(known: KnownDevices, key_b64: str):
    try:
        return known.find_by_key(decode_public_key(key_b64))
    except (ValueError, UsageError):
        return None


def _summary(info: dict) -> dict:
    runtimes = {
        r["name"]: (r.get("version") if r.get("available") else f"missing: {r.get('reason', '')}")
        for r in info.get("runtimes", [])
    }
    return {
        "address": info.get("address"),
        "agent_version": info.get("agent_version"),
        "runtimes": runtimes,
        "key_fingerprint": info.get("key_fingerprint"),
        "public_key_b64": info.get("public_key_b64"),
    }


def _ssh_status(url: str, ssh_options: SSHOptions, prefix: str, state_dir: str | None) -> dict:
    # The agent under ``prefix`` when there is one, else the one on the login PATH.
    with SSHSession(url, replace(ssh_options, agent_cmd=None)) as ssh:
        prefix = ssh.expand(prefix).rstrip("/")
        agent = SSHTransport(url, session=ssh, state_dir=state_dir)
        agent_path = f"{prefix}/venv/bin/edgequal-agent"
        if ssh.exists(agent_path):
            agent.agent_cmd = shlex.quote(agent_path)
        status = _summary(agent.info())
        status["service"] = service_state(ssh, prefix)
    return status


def _grpc_status(address: str, known: KnownDevices) -> dict:
    """Status over gRPC, the device reached as every command reaches it (devices/resolve.py:
    its pinned key proved first, its TLS files and token from its entry)."""
    from ..devices.resolve import open_device

    try:
        device = open_device(address, known=known)
        with device.transport as transport:
            info = transport.info()
    except TransportError as e:
        return {
            "address": address,
            "service": {"kind": "unknown", "running": False, "error": str(e)},
        }
    status = _summary(info)
    status["address"] = device.address
    status["service"] = {"kind": "unknown", "running": True, "busy": info.get("busy")}
    return status


__all__ = ["InstallResult", "agent_status", "install_agent"]
