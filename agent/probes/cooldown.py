"""Waiting for the board to cool before a sustained run (DESIGN.md: within 5 °C of idle, slope < 0.5 °C/min)."""

from __future__ import annotations

import time
from collections.abc import Callable

from .telemetry import idle_cooldown_ok


def wait_for_cooldown(
    read_temp_c: Callable[[], float | None],
    idle_c: float | None,
    timeout_s: float,
    interval_s: float = 1.0,
    cancel=None,
    min_span_s: float = 10.0,
) -> dict:
    """Wait until the temperature is within 5 °C of idle and its slope is < 0.5 °C/min.

    ``idle_c`` is the temperature before the run loaded the board (None: the first
    reading here). The slope is judged over the last 30 s, after at least ``min_span_s``
    of readings (``idle_cooldown_ok``). With no sensor there is nothing to wait for, and
    that is recorded; at ``timeout_s`` it gives up and records that it did.
    """
    first = read_temp_c()
    if first is None:
        return {"waited_s": 0.0, "reached": None, "reason": "no temperature sensor"}
    idle = idle_c if idle_c is not None else first
    start = time.monotonic()
    samples = [{"t_s": 0.0, "temp_c": first}]
    while True:
        time.sleep(interval_s)
        elapsed = time.monotonic() - start
        samples.append({"t_s": elapsed, "temp_c": read_temp_c()})
        recent = [x for x in samples if elapsed - x["t_s"] <= 30.0]
        if elapsed >= min(min_span_s, timeout_s) and idle_cooldown_ok(recent, idle):
            return {
                "waited_s": round(elapsed, 1),
                "reached": True,
                "temp_c": samples[-1]["temp_c"],
                "idle_c": idle,
            }
        if elapsed >= timeout_s or (cancel is not None and cancel.is_set()):
            return {
                "waited_s": round(elapsed, 1),
                "reached": False,
                "temp_c": samples[-1]["temp_c"],
                "idle_c": idle,
                "reason": f"cooldown timeout after {timeout_s:g} s",
            }
