"""The output fault injector: a real runtime whose outputs go wrong on a condition.

Off unless the agent is started with ``EDGEQUAL_OUTPUT_FAULT`` set (``config.output_fault``);
never part of a normal run, and a report made with it says so in its fingerprint
(``output_fault``). It exists so the check of outputs during the timed phases
(``measure/timed_outputs.py``) can be shown to catch what it is for on a machine with
no failing board: a runtime that starts returning wrong results after a number of
calls (a cache gone stale), or a board whose arithmetic fails when hot (with the
device emulator's heating sysfs tree as the probe root).

Settings (one string):

- ``after_calls:N``: every call after the first N (counted in the worker process from
  its first call of the model, warm-up included) returns wrong outputs;
- ``above_c:T``: every call while the board's authoritative temperature (read from the
  probe root's thermal zones at most every ``TEMP_READ_INTERVAL_S``) is at or above
  T °C returns wrong outputs.

The model really runs: the runtime's result is then corrupted (floating-point outputs
negated and shifted by 1, integer and boolean outputs bit-inverted), so every tolerance
class and decision rule sees the change. The corruption and the temperature read sit
inside the call, so a faulty run's timings are not a board's: it is for tests and
demonstrations of the check only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from edgequal.contract.errors import BadInput

TEMP_READ_INTERVAL_S = 0.25


@dataclass(frozen=True)
class OutputFault:
    """When outputs go wrong: after ``after_calls`` calls, or at or above ``above_c`` °C."""

    after_calls: int | None = None
    above_c: float | None = None

    @classmethod
    def parse(cls, text: str) -> OutputFault:
        """``after_calls:N`` or ``above_c:T``; anything else is a BadInput naming the forms."""
        kind, _, value = str(text).strip().partition(":")
        try:
            if kind == "after_calls" and int(value) >= 0:
                return cls(after_calls=int(value))
            if kind == "above_c":
                return cls(above_c=float(value))
        except ValueError:
            pass
        raise BadInput(
            f"output fault {text!r} is not one the injector knows",
            hint="EDGEQUAL_OUTPUT_FAULT=after_calls:N or above_c:T (°C)",
        )

    def __str__(self) -> str:
        if self.after_calls is not None:
            return f"after_calls:{self.after_calls}"
        return f"above_c:{self.above_c:g}"


def corrupt(outputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Wrong outputs of the same names, shapes and dtypes: floats ``1 - a``, integers and
    booleans bit-inverted."""
    out = {}
    for name, value in outputs.items():
        a = np.asarray(value)
        out[name] = (1 - a).astype(a.dtype) if a.dtype.kind in "fc" else ~a
    return out


class FaultyRuntime:
    """A loaded runtime (``base.Runtime``) whose outputs go wrong on ``fault``'s condition.

    Every attribute but ``run``, ``bind`` and ``bound_outputs`` is the wrapped runtime's.
    ``temp_c`` reads the board's temperature (°C, or None without a sensor).
    """

    def __init__(
        self, runtime, fault: OutputFault, temp_c: Callable[[], float | None] = lambda: None
    ):
        self._inner = runtime
        self.fault = fault
        self._temp_c = temp_c
        self.calls = 0
        self._temp: float | None = None
        self._temp_read_at = -float("inf")

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def _faulty_now(self) -> bool:
        self.calls += 1
        if self.fault.after_calls is not None:
            return self.calls > self.fault.after_calls
        now = time.monotonic()
        if now - self._temp_read_at >= TEMP_READ_INTERVAL_S:
            self._temp, self._temp_read_at = self._temp_c(), now
        return self._temp is not None and self._temp >= self.fault.above_c

    def run(self, feeds):
        """The wrapped runtime's run; its outputs corrupted while the fault holds."""
        outputs = self._inner.run(feeds)
        return corrupt(outputs) if self._faulty_now() else outputs

    def bind(self, feeds):
        """The wrapped runtime's bound call; each call returns ``(returned, faulty)``."""
        call = self._inner.bind(feeds)
        faulty_now = self._faulty_now

        def faulty_call():
            return call(), faulty_now()

        return faulty_call

    def bound_outputs(self, returned):
        """The outputs of a bound call of this wrapper, corrupted when it ran under the fault."""
        inner, faulty = returned
        outputs = self._inner.bound_outputs(inner)
        return corrupt(outputs) if faulty else outputs


def with_fault(runtime, fault: OutputFault | None, root: Path | None):
    """``runtime`` itself without a fault; else wrapped, reading temperatures under ``root``."""
    if fault is None:
        return runtime

    def temp_c() -> float | None:
        from ..probes.thermal import read_thermal

        return read_thermal(root or Path("/"))["authoritative_temp_c"]

    return FaultyRuntime(runtime, fault, temp_c)
