"""Runtime adapters behind one interface, and runtime detection.

Nothing heavy is imported here: the adapters' base (numpy) is loaded on first
use of ``Runtime`` or ``RuntimeOptions``, and a runtime only in a
worker, so the agent process can detect runtimes and answer Info without them.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import signal
import subprocess
import sys
import threading
from typing import TYPE_CHECKING

from edgequal.contract.runtimes import RUNTIMES, RuntimeStatus, runtime_kind

if TYPE_CHECKING:
    from .base import Runtime, RuntimeOptions

_FROM_BASE = ("Runtime", "RuntimeOptions")


def __getattr__(name: str):
    # The adapters' base imports numpy: load it only when an adapter is wanted.
    if name in _FROM_BASE:
        from . import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def runtime_class(name: str) -> type[Runtime]:
    """The adapter class for a runtime name (its module is imported now, not before)."""
    module, cls = runtime_kind(name).adapter.split(":")  # BadInput naming the accepted names
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)


# (report name, importable modules, distributions, how to install)
_KNOWN_RUNTIMES = tuple((k.name, k.modules, k.distributions, k.install) for k in RUNTIMES)

IMPORT_PROBE_TIMEOUT_S = 60.0
"""How long a runtime's trial import in a child process may take (a cold SD card is slow)."""

# numpy's OpenBLAS starts a thread per core when numpy is imported, and each spins for a
# while before it sleeps (about 0.1 CPU-s a process, measured on 2 cores): in a worker
# that is CPU taken from the runtime's import, load and first inference that the cold
# load times. No child of the agent multiplies matrices with numpy (the runtime does the
# model's work; drift's norms and dot products are one vector each), and one thread also
# keeps their summation order the same on boards with different core counts.
CHILD_BLAS_THREADS = {"OPENBLAS_NUM_THREADS": "1"}


def child_env(env: dict | None = None) -> dict:
    """The environment of a Python the agent starts to import or run a runtime (a worker, a
    trial import): ``env`` (default: the agent's own) with numpy's BLAS held to one thread
    (:data:`CHILD_BLAS_THREADS`), unless the operator set it there."""
    out = dict(os.environ if env is None else env)
    for name, value in CHILD_BLAS_THREADS.items():
        out.setdefault(name, value)
    return out


def detect_runtimes(*, probe_import: bool = False) -> list[RuntimeStatus]:
    """Which inference runtimes are installed, with versions; never imports one in this process.

    Found from package metadata and ``importlib.util.find_spec``. With
    ``probe_import`` each runtime found is also imported in a child process, so
    one whose import crashes (SIGSEGV, SIGILL on some boards and CPUs) is
    reported as broken, with the signal, instead of taking the caller down.
    """
    # Here, not at the top: every worker and every run's external-data check imports this
    # package, and importlib.metadata (email parsing, zipfile...) costs them 50 ms or more.
    from importlib import metadata

    result = []
    probes: list[tuple[RuntimeStatus, str]] = []
    for name, modules, dists, install in _KNOWN_RUNTIMES:
        status = RuntimeStatus(name=name, available=False)
        module = None
        for dist in dists:
            try:
                version = metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
            status.version, status.distribution = version, dist
            module = next((m for m in modules if importlib.util.find_spec(m) is not None), None)
            if module is None:
                status.reason = (
                    f"distribution {dist} {version} is installed but none of the modules "
                    f"{', '.join(modules)} can be found; reinstall it"
                )
            else:
                status.available = True
            break
        if not status.distribution:
            status.reason = f"not installed: {install}"
        if status.available and probe_import:
            probes.append((status, module))
        result.append(status)
    if probes:
        # The trial imports run side by side: a run waits for them (see ProbedRuntimes).
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=len(probes)) as pool:
            problems = list(pool.map(import_problem, [module for _, module in probes]))
        for (status, _), broken in zip(probes, problems):
            if broken:
                status.available, status.reason = False, broken
    return result


def import_problem(module: str, timeout_s: float = IMPORT_PROBE_TIMEOUT_S) -> str:
    """Import ``module`` in a child Python; '' when that works, else one line saying how it broke."""
    return child_import(
        ("import importlib, sys; importlib.import_module(sys.argv[1])", module),
        what=f"importing {module}",
        timeout_s=timeout_s,
    )[0]


def child_import(
    script: tuple[str, ...],
    what: str,
    timeout_s: float = IMPORT_PROBE_TIMEOUT_S,
    python: str | None = None,
    env: dict | None = None,
) -> tuple[str, str]:
    """Run ``python -c script[0] script[1:]...`` (default: this interpreter) in its own session.

    Returns ``('', stdout)`` when it exits 0, else ``(problem, stdout)``: one line saying
    how ``what`` broke (the signal that killed it, its last error line, a hang).

    The child dies with the thread that started it (PR_SET_PDEATHSIG, set before its
    script runs) and its whole process group is killed after ``timeout_s``: an import
    that hangs never outlives the agent, re-parented to init, nor its timeout.
    """
    code = _DIE_WITH_PARENT.format(parent=os.getpid()) + script[0]
    try:
        proc = subprocess.Popen(
            [python or sys.executable, "-c", code, *script[1:]],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env=child_env(env),
        )
    except OSError as e:
        return f"broken: {what} cannot start: {e.strerror or e}", ""
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return f"broken: {what} hung > {timeout_s:g} s", ""
    except BaseException:
        _kill_group(proc)
        raise
    out = stdout.decode("utf-8", "replace")
    if proc.returncode < 0:
        try:
            sig = signal.Signals(-proc.returncode).name
        except ValueError:
            sig = f"signal {-proc.returncode}"
        return f"broken: {what} kills the process with {sig}", out
    if proc.returncode != 0:
        why = error_line(stderr.decode("utf-8", "replace")) or f"exit {proc.returncode}"
        return f"broken: {what} fails: {why}", out
    return "", out


def error_line(stderr: str) -> str:
    """The line of a failed Python's stderr that says why: its last line, and where that is
    a bare exception name (``ImportError``, as a module built for NumPy 1.x ends beside
    NumPy 2), the last line before it that carries a message, in brackets."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    last = lines[-1]
    if ":" not in last:
        told = [
            line for line in lines[:-1] if re.match(r"[A-Za-z_][\w.]*(Error|Exception): ", line)
        ]
        if told:
            return f"{last} ({told[-1]})"[:300]
    return last[:300]


# Run first in every trial import's child: SIGKILL when the agent's probing thread ends
# (PR_SET_PDEATHSIG is 1), and exit at once if the agent died before it took effect.
_DIE_WITH_PARENT = """\
try:
    import ctypes as _c, os as _o
    _c.CDLL(None).prctl(1, 9, 0, 0, 0)
    if _o.getppid() != {parent}:
        _o._exit(1)
    del _c, _o
except (OSError, AttributeError):
    pass
"""


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the child's process group (its own session), then reap the child."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


__all__ = [
    "Runtime",
    "RuntimeOptions",
    "ProbedRuntimes",
    "RuntimeStatus",
    "detect_runtimes",
    "child_env",
    "child_import",
    "import_problem",
    "runtime_class",
    "runtime_for",
]


class ProbedRuntimes:
    """Runtime detection for a long-lived agent: quick answers at once, the import probe once.

    Calling it returns the last result: package metadata only until the trial
    imports (started in a background thread at construction) have finished,
    then theirs, which name a runtime whose import crashes. :meth:`settle`
    waits for the trial imports, so none runs beside a measurement.
    """

    def __init__(self):
        self._probed: list[RuntimeStatus] | None = None
        self._thread = threading.Thread(target=self._probe, name="runtime-probe", daemon=True)
        self._thread.start()

    def _probe(self) -> None:
        self._probed = detect_runtimes(probe_import=True)

    def settle(self, timeout_s: float | None = None) -> None:
        """Wait until the trial imports are done (or ``timeout_s`` passes)."""
        self._thread.join(timeout_s)

    def __call__(self) -> list[RuntimeStatus]:
        """The runtimes as known now."""
        return self._probed if self._probed is not None else detect_runtimes()
