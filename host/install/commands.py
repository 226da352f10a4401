"""The text of what ``edgequal agent install`` runs and writes on a board, as pure functions.

Nothing here touches the network or a file: each function turns settings into
a command line, a unit file or an address, so each is tested on its own.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from edgequal.contract.auth import parse_listen
from edgequal.contract.errors import BadInput
from edgequal.contract.runtimes import RUNTIME_EXTRAS

from ..errors import UsageError

SERVICE_NAME = "edgequal-agent"
KNOWN_EXTRAS = (*RUNTIME_EXTRAS, "pipeline", "signing")
_WILDCARD_HOSTS = ("", "0.0.0.0", "::", "*")


def listen_address(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) -> (host, port), as the agent parses it; port 0 is refused."""
    try:
        host, port = parse_listen(listen)
    except BadInput as e:
        raise UsageError(str(e), hint=e.hint or "use HOST:PORT, e.g. 0.0.0.0:50051") from e
    if port == 0:
        raise UsageError(f"bad listen address {listen!r}", hint="use HOST:PORT, e.g. 0.0.0.0:50051")
    return host, port


def grpc_address_for(listen: str, ssh_host: str) -> str:
    """The ``grpc://`` address the host uses: the SSH host when the agent listens on every interface."""
    host, port = listen_address(listen)
    if host in _WILDCARD_HOSTS:
        host = ssh_host
    if ":" in host:
        host = f"[{host}]"
    return f"grpc://{host}:{port}"


def loopback_for(listen: str) -> tuple[str, int]:
    """Where a process on the board itself reaches an agent listening on ``listen``."""
    host, port = listen_address(listen)
    if host in ("", "0.0.0.0", "*"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return host, port


def check_extras(extras: Sequence[str]) -> tuple[str, ...]:
    """The extras to install, stripped; UsageError naming the first unknown one."""
    extras = tuple(e.strip() for e in extras if e and e.strip())
    unknown = [e for e in extras if e not in KNOWN_EXTRAS]
    if unknown:
        raise UsageError(
            f"unknown extra {unknown[0]!r}", hint=f"choose from {', '.join(KNOWN_EXTRAS)}"
        )
    return extras


def shell_join(argv: Sequence[str]) -> str:
    """One shell command line from ``argv``, every word quoted as needed."""
    return " ".join(shlex.quote(a) for a in argv)


def serve_argv(venv: str, listen: str, token_file: str, state_dir: str | None = None) -> list[str]:
    """The agent's command line as a service runs it."""
    argv = [f"{venv}/bin/edgequal-agent"]
    if state_dir:
        argv += ["--state-dir", state_dir]
    return argv + ["serve", "--listen", listen, "--token-file", token_file]


def systemd_unit(argv: Sequence[str], user_unit: bool) -> str:
    """The text of ``edgequal-agent.service`` running ``argv``."""
    exec_start = " ".join(_systemd_quote(a) for a in argv)
    return (
        "[Unit]\n"
        "Description=edgequal agent (on-device model qualification)\n"
        "After=network-online.target\n"
        "Wants=network-online.target\n"
        "\n"
        "[Service]\n"
        f"ExecStart={exec_start}\n"
        "Restart=on-failure\n"
        "RestartSec=5\n" + ("" if user_unit else "OOMScoreAdjust=-500\n") + "\n"
        # A runaway model must be the OOM killer's choice, not the agent that reports it.
        "[Install]\n"
        f"WantedBy={'default.target' if user_unit else 'multi-user.target'}\n"
    )


def _systemd_quote(arg: str) -> str:
    if arg and not re.search(r'[\s"\'\\$%;]', arg):
        return arg
    return (
        '"'
        + arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
        + '"'
    )


def pip_install_command(
    venv: str, wheel: str, extras: Sequence[str], find_links: str | None
) -> tuple[str, str]:
    """The two pip commands: install/upgrade with extras, then force this exact wheel in.

    The second one matters when the version number did not change (a rebuilt
    checkout): pip would otherwise keep the old files. With ``find_links`` (the
    wheelhouse) pip reads no configuration file, so a board's own index or
    find-links settings cannot add packages from elsewhere.
    """
    pip = [
        f"{venv}/bin/python",
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-input",
    ]
    env = ""
    if find_links:
        pip += ["--no-index", "--find-links", find_links]
        env = "PIP_CONFIG_FILE=/dev/null "
    spec = f"{wheel}[{','.join(extras)}]" if extras else wheel
    first = pip + ["--upgrade", spec]
    second = pip + ["--no-deps", "--force-reinstall", wheel]
    return env + shell_join(first), env + shell_join(second)


def background_start_command(argv: Sequence[str], log_file: str, pid_file: str) -> str:
    """Start the agent with ``nohup`` in the background, its pid in ``pid_file``."""
    q = shlex.quote
    return f"nohup {shell_join(argv)} > {q(log_file)} 2>&1 < /dev/null & echo $! > {q(pid_file)}"


def wait_listening_script(host: str, port: int, timeout_s: float) -> str:
    """Python that exits 0 once ``host:port`` accepts a connection, 1 after ``timeout_s``."""
    return (
        "import socket, sys, time\n"
        f"deadline = time.monotonic() + {timeout_s}\n"
        "while time.monotonic() < deadline:\n"
        "    try:\n"
        f"        socket.create_connection(({host!r}, {port}), 1).close(); sys.exit(0)\n"
        "    except OSError:\n"
        "        time.sleep(0.2)\n"
        "sys.exit(1)\n"
    )


def background_pid_command(pid_file: str) -> str:
    """Print the pid in ``pid_file`` when that process is an edgequal agent (else nothing, rc 1)."""
    return (
        f'pid=$(cat {shlex.quote(pid_file)} 2>/dev/null) && [ -n "$pid" ] && '
        f'grep -q edgequal-agent /proc/"$pid"/cmdline 2>/dev/null && echo "$pid"'
    )


def background_stop_command(pid_file: str) -> str:
    """Stop an agent started by an earlier background install (only if it is that agent)."""
    q = shlex.quote
    return (
        f'pid=$(cat {q(pid_file)} 2>/dev/null) && [ -n "$pid" ] && '
        f'grep -q edgequal-agent /proc/"$pid"/cmdline 2>/dev/null && kill "$pid" && '
        f'for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done; '
        f"rm -f {q(pid_file)}"
    )
