"""Real ``edgequal-agent serve`` processes, each with its own state directory: the one way
the tests start an agent process.

Loaded with ``load_test_helper("local_agents")`` (the ``local_agents`` fixture of
tests/conftest.py); tests/host/conftest.py's ``start_agent`` fixture wraps :func:`serve`.

- :func:`serve`: ``edgequal-agent --state-dir STATE serve --listen HOST:0`` with the
  options a test asks for (``--root``, ``--token-file``, ``--debug``, anything else).
- :func:`start_agent`: the same with the state under ``base/name`` (the fleet tests);
  :func:`start_agents` starts several at once and waits for them together.
"""

from __future__ import annotations

import base64
import datetime
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

_RUN_LINE = re.compile(
    r"^(\S+ \S+) INFO edgequal\.agent\.service\.server: run (\S+) (started|ended)"
)

AGENT = [sys.executable, "-m", "edgequal.agent.cli"]
"""The agent's command line, run by the interpreter running the tests."""


@dataclass
class LocalAgent:
    """One started agent: its process, address, port, state directory and log file.

    The log holds the process's stdout and stderr (with ``debug``, every authorized call).
    """

    proc: subprocess.Popen
    address: str
    port: int
    state_dir: Path
    log_path: Path
    new_session: bool = False

    @property
    def state(self) -> Path:
        """The agent's state directory (``state_dir``)."""
        return self.state_dir

    def log(self) -> str:
        """What the agent wrote so far."""
        return self.log_path.read_text(errors="replace")

    def public_key_raw(self) -> bytes:
        """The device key's raw public bytes, as the agent stored them."""
        return base64.b64decode((self.state_dir / "device_key.pub").read_text())

    def stop(self) -> None:
        """SIGTERM (the whole session when it has its own), SIGKILL after 10 s; then wait."""
        if self.proc.poll() is not None:
            return
        self._signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def _signal(self, sig: int) -> None:
        try:
            if self.new_session:
                os.killpg(self.proc.pid, sig)
            else:
                self.proc.send_signal(sig)
        except ProcessLookupError:
            pass

    def stored_files(self) -> list[str]:
        """Every artifact (committed or partial) and report the agent holds."""
        found = []
        for sub in ("artifacts", "reports", "runs"):
            root = self.state_dir / sub
            if root.exists():
                found += [str(p) for p in root.rglob("*") if p.is_file()]
        return found

    def run_records(self) -> list[Path]:
        """The signed reports the agent stored (one per qualification it ran)."""
        reports = self.state_dir / "reports"
        return sorted(reports.glob("*.dsse.json")) if reports.exists() else []

    def run_intervals(self) -> list[tuple[datetime.datetime, datetime.datetime]]:
        """(start, end) of every run, from the agent's own log ("run R started" / "ended")."""
        starts, ends = {}, {}
        for line in self.log().splitlines():
            m = _RUN_LINE.match(line)
            if m:
                when = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
                (starts if m.group(3) == "started" else ends)[m.group(2)] = when
        return sorted((starts[r], ends[r]) for r in starts if r in ends)


def serve(
    state: Path,
    *,
    root: Path | None = None,
    token_file: Path | None = None,
    args: Sequence[str] = (),
    debug: bool = False,
    host: str = "127.0.0.1",
    wrapper: Sequence[str] = (),
    new_session: bool = False,
    env: dict | None = None,
    start_timeout_s: float = 60.0,
) -> LocalAgent:
    """Start ``edgequal-agent --state-dir STATE serve --listen HOST:0`` and wait for its port.

    ``root``: ``--root`` (the probe root, a board's sysfs tree); ``token_file``:
    ``--token-file``; ``args``: any other ``serve`` options; ``debug``: ``--debug``.
    ``wrapper`` goes in front of the command (e.g. ``ip netns exec NS``); ``new_session``
    starts it in its own session, so :meth:`LocalAgent.stop` (or ``os.killpg``) reaches
    its workers too. The log is ``STATE.log`` beside the state directory.
    """
    started = _spawn(state, root, token_file, args, debug, host, wrapper, new_session, env)
    return _wait_for_port(*started, start_timeout_s)


def _spawn(state, root, token_file, args, debug, host, wrapper, new_session, env) -> tuple:
    state = Path(state)
    state.parent.mkdir(parents=True, exist_ok=True)
    port_file = state.parent / f"{state.name}.port"
    port_file.unlink(missing_ok=True)  # an agent that ran on this state before
    log_path = state.parent / f"{state.name}.log"
    command = [*wrapper, *AGENT, *(["--debug"] if debug else []), "--state-dir", str(state)]
    command += ["serve", "--listen", f"{host}:0", "--port-file", str(port_file)]
    if root is not None:
        command += ["--root", str(root)]
    if token_file is not None:
        command += ["--token-file", str(token_file)]
    command += list(args)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=new_session, env=env
        )
    return proc, state, port_file, log_path, host, new_session


def _wait_for_port(proc, state, port_file, log_path, host, new_session, timeout_s) -> LocalAgent:
    deadline = time.monotonic() + timeout_s
    while not (port_file.exists() and port_file.read_text().strip()):
        if proc.poll() is not None:
            raise RuntimeError(f"agent on {state} exited {proc.returncode}: {log_path.read_text()}")
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait(timeout=10)
            raise RuntimeError(f"agent on {state} did not start in {timeout_s:g} s")
        time.sleep(0.02)
    port = int(port_file.read_text())
    return LocalAgent(proc, f"grpc://{host}:{port}", port, state, log_path, new_session)


def start_agent(base: Path, name: str, **options) -> LocalAgent:
    """:func:`serve` with the state directory ``base/name/state``."""
    return serve(Path(base) / name / "state", **options)


def start_agents(
    base: Path,
    names: Sequence[str],
    start_timeout_s: float = 60.0,
    args: dict[str, Sequence[str]] | None = None,
    debug: bool = False,
) -> list:
    """:func:`start_agent` for each name, the processes started at once (their start-up runs
    side by side); returns them in order once every one serves. ``args`` maps a name to
    its ``serve`` options. Any that started are stopped if one fails to."""
    args = args or {}
    spawned = [
        _spawn(
            Path(base) / name / "state",
            None,
            None,
            tuple(args.get(name, ())),
            debug,
            "127.0.0.1",
            (),
            False,
            None,
        )  # fmt: skip
        for name in names
    ]
    agents: list[LocalAgent] = []
    try:
        for started in spawned:
            agents.append(_wait_for_port(*started, start_timeout_s))
    except BaseException:
        for proc, *_ in spawned:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        raise
    return agents


def worker_processes(parent) -> list:
    """The live ``edgequal.agent.worker`` processes among ``parent``'s descendants (a
    ``psutil.Process``: an agent, or the test process running phases itself)."""
    import psutil

    found = []
    for child in parent.children(recursive=True):
        try:
            worker = "edgequal.agent.worker" in " ".join(child.cmdline())
            if worker and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.Error:  # ended meanwhile
            pass
    return found
