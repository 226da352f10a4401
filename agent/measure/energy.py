"""Energy per inference from power samples: pure, tested on known samples.

The agent samples the board's power (``probes/power.py``) at 1 Hz beside the
telemetry; a window's energy is the integral of the piecewise-linear power through
the samples that bracket it (trapezoid rule, interpolated at the window's edges), as
Zeus integrates. jetson-stats' "avg" (an exponential moving average) is not used:
it is not a time-weighted mean. Watts are board watts: the model's own share is
what the window draws above the idle power measured before the run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def _points(samples: Sequence[Mapping], key: str = "total_w") -> tuple[np.ndarray, np.ndarray]:
    pts = sorted((s["t"], s[key]) for s in samples if s.get(key) is not None)
    if not pts:
        return np.empty(0), np.empty(0)
    t, p = zip(*pts)
    return np.asarray(t, dtype=np.float64), np.asarray(p, dtype=np.float64)


def energy_j(
    samples: Sequence[Mapping], t0: float, t1: float, key: str = "total_w"
) -> float | None:
    """Joules drawn over ``[t0, t1]`` (monotonic s): None unless samples bracket the span."""
    t, p = _points(samples, key)
    if t.size == 0 or t[0] > t0 or t[-1] < t1 or t1 <= t0:
        return None
    inside = (t > t0) & (t < t1)
    ts = np.concatenate(([t0], t[inside], [t1]))
    ps = np.concatenate(([np.interp(t0, t, p)], p[inside], [np.interp(t1, t, p)]))
    return float(np.sum((ps[1:] + ps[:-1]) / 2 * np.diff(ts)))


def idle_power(samples: Sequence[Mapping], key: str = "total_w") -> dict | None:
    """The board at rest before the run: time-weighted mean watts over the samples' span."""
    t, p = _points(samples, key)
    if t.size == 0:
        return None
    if t.size == 1:
        return {"watts": round(float(p[0]), 6), "samples": 1, "span_s": 0.0}
    joules = energy_j(samples, float(t[0]), float(t[-1]), key)
    span = float(t[-1] - t[0])
    return {"watts": round(joules / span, 6), "samples": int(t.size), "span_s": round(span, 3)}


def window_energy(window: Mapping, samples: Sequence[Mapping], idle_w: float | None) -> dict:
    """A sustained window's mean watts, joules and millijoules per inference (total and above idle).

    ``window`` has ``t0``, ``t1`` (monotonic s) and ``count`` (inferences). Without
    bracketing samples every figure is None: never estimated.
    """
    t0, t1, count = window["t0"], window["t1"], window["count"]
    joules = energy_j(samples, t0, t1)
    n = sum(1 for s in samples if s.get("total_w") is not None and t0 <= s["t"] <= t1)
    if joules is None:
        return {
            "power_w": None,
            "energy_j": None,
            "mj_per_inference": None,
            "mj_per_inference_above_idle": None,
            "power_samples": n,
        }
    span = t1 - t0
    watts = joules / span
    above = None
    if idle_w is not None and count:
        above = round((watts - idle_w) * span / count * 1e3, 6)
    return {
        "power_w": round(watts, 6),
        "energy_j": round(joules, 6),
        "mj_per_inference": round(joules / count * 1e3, 6) if count else None,
        "mj_per_inference_above_idle": above,
        "power_samples": n,
    }


def energy_summary(windows: Sequence[Mapping]) -> dict | None:
    """Median over full windows of watts and mJ per inference (total and above idle)."""
    full = [w for w in windows if not w.get("partial") and w.get("power_w") is not None]
    if not full:
        return None

    def median(key: str) -> float | None:
        values = [w[key] for w in full if w.get(key) is not None]
        return round(float(np.median(values)), 6) if values else None

    return {
        "windows": len(full),
        "power_w_median": median("power_w"),
        "mj_per_inference_median": median("mj_per_inference"),
        "mj_per_inference_above_idle_median": median("mj_per_inference_above_idle"),
    }
