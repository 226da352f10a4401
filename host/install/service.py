"""Starting the agent on a board and finding out how it runs: systemd, background, or not at all.

Each function works over an open :class:`~edgequal.host.transport.ssh_session.SSHSession`;
the command text comes from :mod:`edgequal.host.install.commands`.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable

from ..errors import TransportError
from ..transport.ssh_session import SSHSession
from .commands import (
    SERVICE_NAME,
    background_pid_command,
    background_start_command,
    background_stop_command,
    loopback_for,
    shell_join,
    systemd_unit,
    wait_listening_script,
)

START_TIMEOUT_S = 30.0


def _systemd_usable(ssh: SSHSession, user: bool) -> bool:
    """True when systemctl exists and a systemd instance (system or user) answers."""
    check = "systemctl --user show-environment" if user else "test -d /run/systemd/system"
    return (
        ssh.run_remote(f"command -v systemctl >/dev/null 2>&1 && {check} >/dev/null 2>&1").rc == 0
    )


def _is_root(ssh: SSHSession) -> bool:
    return ssh.run_remote("id -u").stdout.strip() == "0"


def start_systemd(
    ssh: SSHSession, argv: list[str], notes: list[str], step: Callable[[str], None]
) -> tuple[str, bool]:
    """Install, enable and (re)start ``edgequal-agent.service``; return (kind, running).

    A system unit as root, else a user unit; where systemd is not usable nothing
    is started, and ``notes`` says so.
    """
    root = _is_root(ssh)
    if not _systemd_usable(ssh, user=not root):
        notes.append("systemd is not usable on the board, so no unit was installed")
        return "not started", False
    if root:
        unit_dir, ctl, kind = "/etc/systemd/system", "systemctl", "systemd"
    else:
        unit_dir, ctl, kind = "~/.config/systemd/user", "systemctl --user", "systemd-user"
    unit_path = f"{ssh.expand(unit_dir)}/{SERVICE_NAME}.service"
    step(f"writing {unit_path}")
    ssh.makedirs(ssh.expand(unit_dir))
    ssh.write_file(unit_path, systemd_unit(argv, user_unit=not root).encode("utf-8"), 0o644)
    ssh.check_remote(
        f"{ctl} daemon-reload && {ctl} enable {SERVICE_NAME} && {ctl} restart {SERVICE_NAME}",
        f"start {SERVICE_NAME}.service",
        120,
    )
    if not root:
        linger = ssh.run_remote('loginctl enable-linger "$(id -un)"')
        if linger.rc != 0:
            notes.append(
                "the user unit stops when you log out: run `sudo loginctl enable-linger "
                f"{ssh.target.user}` on the board to keep it running"
            )
    running = ssh.run_remote(f"{ctl} is-active --quiet {SERVICE_NAME}").rc == 0
    return kind, running


def start_background(
    ssh: SSHSession, prefix: str, argv: list[str], listen: str, step: Callable[[str], None]
) -> tuple[str, bool]:
    """Start the agent with ``nohup`` (stopping one an earlier install started); wait until it listens."""
    pid_file = f"{prefix}/agent.pid"
    log_file = f"{prefix}/agent.log"
    ssh.run_remote(background_stop_command(pid_file), timeout_s=20)
    step(f"starting the agent in the background (log {log_file})")
    ssh.check_remote(background_start_command(argv, log_file, pid_file), "start the agent")
    host, port = loopback_for(listen)
    wait = wait_listening_script(host, port, START_TIMEOUT_S)
    venv_python = argv[0].rsplit("/", 1)[0] + "/python"
    alive = f"kill -0 $(cat {shlex.quote(pid_file)}) 2>/dev/null"
    result = ssh.run_remote(
        f"{shell_join([venv_python, '-c', wait])} && {alive}", timeout_s=START_TIMEOUT_S + 10
    )
    if result.rc != 0:
        log_tail = ssh.run_remote(f"tail -n 5 {shlex.quote(log_file)}").stdout.strip().splitlines()
        raise TransportError(
            f"the agent did not start listening on {listen}: "
            f"{log_tail[-1] if log_tail else 'no output'}",
            hint=f"see {log_file} on the board",
        )
    return "background", True


def service_state(ssh: SSHSession, prefix: str) -> dict:
    """Which service runs the agent, and whether it is running now."""
    for ctl, kind in (("systemctl", "systemd"), ("systemctl --user", "systemd-user")):
        probe = ssh.run_remote(
            f"command -v systemctl >/dev/null 2>&1 && {ctl} cat {SERVICE_NAME} >/dev/null 2>&1"
        )
        if probe.rc == 0:
            active = ssh.run_remote(f"{ctl} is-active {SERVICE_NAME}").stdout.strip()
            return {"kind": kind, "running": active == "active", "state": active}
    probe = ssh.run_remote(background_pid_command(f"{prefix}/agent.pid"))
    if probe.stdout.strip():
        return {"kind": "background", "running": True, "pid": int(probe.stdout.strip())}
    if ssh.exists(f"{prefix}/agent.pid"):
        return {"kind": "background", "running": False}
    return {"kind": "none", "running": False}
