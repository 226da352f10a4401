"""Runtime environments: several versions of a runtime installed side by side on one board.

An environment is a virtual environment under the agent's state directory
(``runtimes/<name>/venv``) holding one runtime at one exact version (``onnxruntime==1.20.1``,
``ai-edge-litert==…``, ``tflite-runtime==…``), the packages it declares (numpy among them)
and, through a link in its site-packages, this agent's own ``edgequal.agent`` package, so
a worker started with the environment's Python runs the same worker code against that
runtime. ``runtimes/<name>/env.json`` is its manifest, written last: a directory without
one is an installation that did not finish and is removed by the next ``add``.

Only the device's owner installs (``edgequal-agent runtime add`` on the board's own shell,
or ``edgequal agent runtime add ssh://…`` from the host, which runs the former over SSH):
installing runs code. A plan only names an installed environment (:func:`resolve`); no
RPC adds, upgrades or removes one. ``default`` names the agent's own environment.
How one is installed (pip, the venv, the link, the trial import) is ``installer.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from edgequal.contract.errors import AgentError, BadInput, RuntimeUnavailable
from edgequal.contract.plan import Plan
from edgequal.contract.runtimes import (
    DEFAULT_RUNTIME,
    Requirement,
    check_env_name,
    unknown_env_message,
)

ENVS_DIR = "runtimes"
MANIFEST = "env.json"
DEFAULT_ENV = "default"
PROBE_TIMEOUT_S = 20.0
"""How long the serving agent's trial import of one environment may take by default
(``agent.toml`` ``[runtimes] probe_timeout_s``); past it the environment is
``broken: importing … hung > 20 s`` (the probe's process group killed)."""
INSTALL_PROBE_TIMEOUT_S = 60.0
"""How long ``runtime add``'s trial import may take (the first import after pip is cold)."""
REFRESH_S = 600.0
"""How old a probe's result may be before Info starts another in the background."""
PROBING = "probing"
"""An environment's ``reason`` until its first probe has ended."""

# Variables of the agent's own process that would let another Python's packages shadow
# the environment's (a PYTHONPATH naming the agent's site-packages, a user site).
_SHADOWING_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")

_PROBE = """
import importlib, importlib.metadata as md, json, platform, sys
for module in sys.argv[2:]:
    importlib.import_module(module)
import edgequal.agent.worker.main
print(json.dumps({"python": platform.python_version(), "version": md.version(sys.argv[1])}))
"""


# What a runtime built for NumPy 1.x prints when it is imported beside NumPy 2.
_NUMPY_ABI_SIGNS = (
    "compiled using NumPy 1.x",
    "_ARRAY_API not found",
    "numpy.core.multiarray failed to import",
    "numpy.core._multiarray_umath failed to import",
)


def import_failure(
    name: str, req: Requirement, problem: str, numpy_version: str | None
) -> AgentError:
    """The error for a new environment whose runtime did not import, naming the real cause:
    a runtime built for NumPy 1.x beside NumPy 2 is a packaging conflict (BadInput, with
    the requirement that fixes it); a crash at import is the runtime on this board; any
    other failure is the import's own error."""
    if any(sign in problem for sign in _NUMPY_ABI_SIGNS):
        got = f"numpy {numpy_version}" if numpy_version else "NumPy 2"
        return BadInput(
            f"runtime environment {name}: {req} was built for NumPy 1.x and the environment "
            f"got {got}: a packaging conflict, not the board",
            hint=f"install it with a NumPy 1.x: edgequal-agent runtime add {req} 'numpy<2'",
        )
    if "SIG" in problem:
        return RuntimeUnavailable(
            f"runtime environment {name}: {problem}",
            hint="the runtime crashed at import on this board; the environment was not kept",
        )
    return RuntimeUnavailable(
        f"runtime environment {name}: {problem}",
        hint="importing the runtime failed in the new environment; it was not kept",
    )


@dataclass
class RuntimeEnv:
    """One runtime environment: its runtime and version, its Python, and the wheels it holds.

    ``python_executable`` is the interpreter a worker for it is started with; the agent's
    own environment (``default``) has the agent's interpreter and no ``path``.
    """

    name: str
    runtime: str
    distribution: str
    version: str
    python: str
    python_executable: str
    path: str | None = None
    wheels: list[dict] = field(default_factory=list)
    created_unix: float | None = None

    def to_json(self) -> dict:
        """The manifest as JSON."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> RuntimeEnv:
        """The inverse of :meth:`to_json`."""
        return cls(
            name=str(data["name"]),
            runtime=str(data["runtime"]),
            distribution=str(data.get("distribution") or ""),
            version=str(data.get("version") or ""),
            python=str(data.get("python") or ""),
            python_executable=str(data["python_executable"]),
            path=data.get("path"),
            wheels=[
                {"file": str(w["file"]), "sha256": str(w["sha256"])}
                for w in data.get("wheels") or []
            ],
            created_unix=data.get("created_unix"),
        )

    @property
    def requirement(self) -> str:
        """``distribution==version`` (empty for an agent without that runtime)."""
        return f"{self.distribution}=={self.version}" if self.distribution else ""

    def fingerprint_entry(self) -> dict:
        """What a report's fingerprint names of this environment."""
        return {
            "name": self.name,
            "runtime": self.runtime,
            "distribution": self.distribution,
            "version": self.version,
            "python": self.python,
            "wheels": [dict(w) for w in self.wheels],
        }

    def worker_python(self) -> str | None:
        """The interpreter a worker runs in; None for the agent's own."""
        return None if self.path is None else self.python_executable

    def worker_env(self) -> dict | None:
        """The worker's environment variables; None (inherit) for the agent's own."""
        if self.path is None:
            return None
        env = {k: v for k, v in os.environ.items() if k not in _SHADOWING_ENV}
        env["PYTHONNOUSERSITE"] = "1"
        return env


def default_env(runtime: str) -> RuntimeEnv:
    """The agent's own environment for ``runtime``: its interpreter and installed version."""
    import platform

    from . import detect_runtimes

    status = next((s for s in detect_runtimes() if s.name == runtime), None)
    return RuntimeEnv(
        name=DEFAULT_ENV,
        runtime=runtime,
        distribution=status.distribution if status else "",
        version=status.version if status else "",
        python=platform.python_version(),
        python_executable=sys.executable,
    )


class RuntimeEnvs:
    """The runtime environments under one agent state directory.

    ``python`` creates the environments' venvs and runs pip (the agent's own
    interpreter by default, so environments share the agent's Python version);
    ``on_step`` receives one line per step of an installation; ``probe_timeout_s`` bounds
    each trial import of :meth:`statuses` (default :data:`PROBE_TIMEOUT_S`).
    """

    def __init__(
        self,
        state_dir: Path,
        python: str = sys.executable,
        on_step: Callable[[str], None] | None = None,
        probe_timeout_s: float | None = None,
    ):
        self.root = Path(state_dir) / ENVS_DIR
        self.python = python
        self.step = on_step or (lambda _line: None)
        self.probe_timeout_s = probe_timeout_s or PROBE_TIMEOUT_S
        self._probes: dict[tuple, _EnvProbe] = {}
        self._probe_lock = threading.Lock()

    def list(self) -> list[RuntimeEnv]:
        """Every installed environment, by name (no import is tried; see :meth:`statuses`)."""
        envs = []
        if not self.root.is_dir():
            return envs
        for d in sorted(self.root.iterdir()):
            manifest = d / MANIFEST
            if not manifest.is_file():
                continue
            try:
                envs.append(RuntimeEnv.from_json(json.loads(manifest.read_text())))
            except (OSError, ValueError, KeyError, TypeError):
                continue  # a damaged manifest: the environment is not offered
        return envs

    def names(self) -> list[str]:
        """The installed environments' names."""
        return [e.name for e in self.list()]

    def get(self, name: str) -> RuntimeEnv | None:
        """The environment called ``name``, or None."""
        return next((e for e in self.list() if e.name == name), None)

    def statuses(self, wait: bool = True, start: bool = True) -> list[dict]:
        """Each environment's manifest plus ``available`` and ``reason``, its runtime
        imported in a child process (one per environment, side by side, each bounded by
        ``probe_timeout_s``), so a crashing import is ``broken: … SIGSEGV`` and a
        hanging one ``broken: … hung > 20 s``.

        ``wait`` (a one-shot command): wait for the probes. Without it (a serving agent's
        Info) answer at once with the last known state (``probing`` before the first probe
        ends), starting in the background a probe of any environment installed since and
        of any whose result is older than :data:`REFRESH_S`; ``start=False`` (a run holds
        the device) starts none. A re-installed environment is probed again.
        """
        envs = self.list()
        if not envs:
            return []
        if start:
            self._start_probes(envs, refresh_after_s=None if wait else REFRESH_S)
        with self._probe_lock:
            probes = [self._probes.get(_probe_key(e)) for e in envs]
        if wait:
            for p in probes:
                if p is not None:
                    p.done.wait(self.probe_timeout_s + 30)  # the probe's own kill ends it before
        out = []
        with self._probe_lock:
            for e, p in zip(envs, probes):
                problem = p.problem if p is not None and p.problem is not None else PROBING
                out.append({**e.to_json(), "available": problem == "", "reason": problem})
        return out

    def start_probing(self) -> None:
        """Probe every installed environment not probed yet, in the background (at start)."""
        self._start_probes(self.list(), refresh_after_s=None)

    def settle(self) -> None:
        """Wait for the probes in flight (a run starts after them: an import loads the CPU),
        at most the probe's own bound and 30 s (its kill ends a hung probe before that)."""
        with self._probe_lock:
            running = [p for p in self._probes.values() if p.running]
        deadline = time.monotonic() + self.probe_timeout_s + 30
        for p in running:
            p.done.wait(max(0.0, deadline - time.monotonic()))

    def _start_probes(self, envs: list[RuntimeEnv], refresh_after_s: float | None) -> None:
        now = time.monotonic()
        todo = []
        with self._probe_lock:
            for e in envs:
                p = self._probes.setdefault(_probe_key(e), _EnvProbe())
                if p.running:
                    continue
                if p.ended_at is not None and (
                    refresh_after_s is None or now - p.ended_at < refresh_after_s
                ):
                    continue
                p.running = True
                p.done.clear()
                todo.append((e, p))
        for e, p in todo:
            # A thread of its own: PR_SET_PDEATHSIG ties the child to the thread that
            # started it, which waits for it, so it lives exactly as long as the probe.
            threading.Thread(
                target=self._probe_one, args=(e, p), name=f"env-probe-{e.name}", daemon=True
            ).start()

    def _probe_one(self, env: RuntimeEnv, p: _EnvProbe) -> None:
        try:
            problem = probe(env, self.probe_timeout_s)[1]
        except Exception as e:  # a probe that cannot run is a broken environment, not a crash
            problem = f"broken: the probe failed: {type(e).__name__}: {e}"
        with self._probe_lock:
            p.problem, p.ended_at, p.running = problem, time.monotonic(), False
        p.done.set()

    def remove(self, name: str) -> RuntimeEnv:
        """Delete the environment called ``name``; returns what it was."""
        check_env_name(name)
        env = self.get(name)
        if env is None:
            raise BadInput(
                f"no runtime environment called {name}",
                hint=_installed_hint(self.names()),
            )
        # The manifest goes first: a removal cut short leaves no environment offered.
        (self.root / name / MANIFEST).unlink()
        shutil.rmtree(self.root / name, ignore_errors=True)
        return env

    def resolve(self, names: Sequence[str], runtime: str | None = None) -> list[RuntimeEnv]:
        """The environments a plan names, in its order (``default``: the agent's own).

        An unknown name is a BadInput listing the installed ones; with ``runtime`` (the
        model's), an environment of another runtime is refused too.
        """
        installed = {e.name: e for e in self.list()}
        out = []
        for name in names:
            if name == DEFAULT_ENV:
                out.append(default_env(runtime or DEFAULT_RUNTIME))
                continue
            env = installed.get(name)
            if env is None:
                raise BadInput(*unknown_env_message(name, list(installed)))
            if runtime is not None and env.runtime != runtime:
                raise BadInput(
                    f"runtime environment '{name}' holds {env.runtime}; this model needs {runtime}"
                )
            out.append(env)
        return out


@dataclass
class _EnvProbe:
    """One environment's trial import: the last result ('' works; None before the first
    ended), when it ended (monotonic), and whether one is running now."""

    problem: str | None = None
    ended_at: float | None = None
    running: bool = False
    done: threading.Event = field(default_factory=threading.Event)


def _probe_key(env: RuntimeEnv) -> tuple:
    return (env.name, env.created_unix)


def plan_env_names(plan: Plan | None) -> list[str]:
    """The environment names a plan asks for (``runtime_envs``), [] for none."""
    return list(plan.runtime_envs or ()) if plan is not None else []


def resolve_plan_envs(plan: Plan | None, envs: RuntimeEnvs | None) -> list[RuntimeEnv] | None:
    """The plan's environments on this device (BadInput for an unknown name), None without any.

    Called before the device is taken; the runtime of each is checked against the
    model's when the run starts.
    """
    names = plan_env_names(plan)
    if not names:
        return None
    if envs is None:
        raise BadInput("this agent offers no runtime environments to a plan")
    for name in names:
        if not isinstance(name, str):
            raise BadInput("plan field 'runtime_envs' must list environment names")
    return envs.resolve(names)


def probe(env: RuntimeEnv, timeout_s: float = PROBE_TIMEOUT_S) -> tuple[dict, str]:
    """Import the environment's runtime and the worker in its own Python, in a child process.

    Returns ``({python, version}, '')``, or ``({}, why)`` naming how it broke (a signal,
    an exception, a hang).
    """
    from . import child_import

    req = Requirement(env.distribution, env.version)
    if not Path(env.python_executable).exists():
        return {}, f"broken: {env.python_executable} is missing"
    problem, out = child_import(
        (_PROBE, req.distribution, *req.modules),
        what=f"importing {req.distribution}",
        timeout_s=timeout_s,
        python=env.python_executable,
        env=env.worker_env(),
    )
    if problem:
        return {}, problem
    try:
        return json.loads(out.strip().splitlines()[-1]), ""
    except (ValueError, IndexError):
        return {}, "broken: the environment's Python printed no version"


def _installed_hint(names: list[str]) -> str:
    return f"installed: {', '.join(names)}" if names else "no runtime environment is installed"
