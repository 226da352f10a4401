"""Outputs checked during the timed phases: every k-th timed call's outputs, kept within a
fixed memory bound and compared with the golden outputs of the same input afterwards.

MLPerf's audit test TEST01 checks that outputs logged during the timed run equal the
accuracy run's; this is the same idea for edgequal's latency and sustained loops. A
runtime that caches results, a board whose arithmetic fails when hot or an undervolted
board shows here and nowhere else: the drift phase runs the golden set at rest.

What the loop pays (docs/measurement.md "Outputs checked while timed"): nothing inside
a call's timed span. Between two calls it compares an integer with the next due index;
on a due call it keeps a reference to what the call returned (onnxruntime returns fresh
arrays) or, for a runtime whose outputs live in its own buffers (LiteRT), a copy. The
comparison runs after the loop, with the drift phase's tolerance rules
(``drift.drift_of_cases``: one implementation).

Memory is bounded: at most ``max_cases`` outputs and ``max_bytes`` bytes are kept.
Every call is kept at first (k = 1); when the store is full, every other kept output is
dropped and k doubles, so the kept calls are always the indices 0, k, 2k, ... and the
count checked is ceil(calls / k). Dropping half of a list of references takes
microseconds and happens log2(calls / max_cases) times in a loop.

Pure: no processes, no sleeping, no sysfs; the time of a kept call is CLOCK_MONOTONIC
(``time.monotonic``), the clock the agent's telemetry shares, so the agent can name the
temperature at that moment.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import numpy as np

# The bound on what one loop keeps: cases and bytes (whichever comes first).
MAX_CASES = 256
MAX_BYTES = 16 * 1024 * 1024
# Mismatched calls described one by one in the result (the count covers them all).
MAX_MISMATCH_RECORDS = 10
FINDING_KIND = "timed_outputs_changed"


class OutputSampler:
    """Keeps every k-th timed call's outputs, within ``max_cases`` and ``max_bytes``.

    ``read(returned)`` turns what the bound call returned into ``{name: array}``
    (``Runtime.bound_outputs``). The loop compares its call index with ``next_due`` and
    calls :meth:`take` only on a due call, after the call's second clock read.
    """

    def __init__(
        self,
        read: Callable[[object], Mapping[str, np.ndarray]],
        max_cases: int = MAX_CASES,
        max_bytes: int = MAX_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._read = read
        self.max_cases = max(1, int(max_cases))
        self.max_bytes = int(max_bytes)
        self._clock = clock
        self.every = 1
        self.next_due = 0
        self.kept: list[tuple[int, float, dict[str, np.ndarray]]] = []
        self._bytes = 0

    def take(self, index: int, returned: object) -> int:
        """Keep call ``index``'s outputs (a due call); returns the next due index."""
        outputs = dict(self._read(returned))
        self.kept.append((index, self._clock(), outputs))
        self._bytes += sum(np.asarray(a).nbytes for a in outputs.values())
        while len(self.kept) > 1 and (
            len(self.kept) > self.max_cases or self._bytes > self.max_bytes
        ):
            self._thin()
        self.next_due = index + self.every
        return self.next_due

    def _thin(self) -> None:
        """Double k: drop the kept calls whose index is not a multiple of the new k."""
        self.every *= 2
        self.kept = [entry for entry in self.kept if entry[0] % self.every == 0]
        self._bytes = sum(np.asarray(a).nbytes for _, _, out in self.kept for a in out.values())


def checked_count(calls: int, every: int) -> int:
    """Calls a loop of ``calls`` timed calls checks when it keeps every ``every``-th: ceil(calls / k)."""
    return -(-int(calls) // max(1, int(every))) if calls > 0 else 0


def compare_timed_outputs(
    sampler: OutputSampler,
    calls: int,
    golden: Mapping[str, np.ndarray],
    at_rest: Mapping[str, np.ndarray],
    compare: Callable[[list], dict],
    started_at: float,
) -> dict:
    """The kept outputs against the golden outputs of the fed input.

    ``at_rest`` is the outputs of one untimed call on the same input before the loop.
    When they match ``golden`` the kept outputs are compared with ``golden``; when they do
    not (the drift phase reports that), with ``at_rest`` itself, so a mismatch here always
    means the outputs changed while timed. ``compare(cases)`` is the drift phase's
    comparison of ``(name, actual, reference)`` cases (``drift.drift_of_cases`` with the
    golden set's tolerances and decision rule); each kept call is compared alone, so one
    bad call is never averaged away.

    Returns ``{calls, checked, every, reference, mismatches, mismatched}``: ``reference``
    is ``golden`` or ``at_rest``; ``mismatched`` describes the first
    :data:`MAX_MISMATCH_RECORDS` mismatched calls, each with its ``call`` index, ``t_s``
    (seconds since ``started_at``), ``t_monotonic`` and the outputs out of tolerance
    (``{output, reason, max_abs}``).
    """
    reference, source = golden, "golden"
    if not compare([("at rest", at_rest, golden)])["passed"]:
        reference, source = at_rest, "at_rest"
    mismatched: list[dict] = []
    count = 0
    for index, t, outputs in sampler.kept:
        # The comparison is a function of the outputs: a call whose outputs are bit for bit
        # the outputs at rest (which passed against ``reference``, or are it) passes too,
        # without the drift rules' cost. On a healthy board that is nearly every call.
        if _same_arrays(outputs, at_rest):
            continue
        report = compare([(f"call {index}", outputs, reference)])
        if report["passed"]:
            continue
        count += 1
        if len(mismatched) < MAX_MISMATCH_RECORDS:
            mismatched.append(
                {
                    "call": index,
                    "t_s": round(t - started_at, 3),
                    "t_monotonic": t,
                    "outputs": _failing_outputs(report),
                }
            )
    return {
        "calls": int(calls),
        "checked": len(sampler.kept),
        "every": sampler.every,
        "reference": source,
        "mismatches": count,
        "mismatched": mismatched,
    }


def _same_arrays(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> bool:
    """Whether two sets of outputs hold the same names, shapes, dtypes and bytes."""
    if a.keys() != b.keys():
        return False
    for name, x in a.items():
        y = b[name]
        x, y = np.asarray(x), np.asarray(y)
        if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
            return False
    return True


def _failing_outputs(report: dict) -> list[dict]:
    """The outputs a one-case drift report failed, each with its case's reason (a pooled
    reason such as top-1 where the case itself passed), and a flipped decision."""
    failing = [
        {"output": row["output"], "reason": row["reason"], "max_abs": row["metrics"]["max_abs"]}
        for row in report["cases"]
        if not row["passed"]
    ]
    named = {f["output"] for f in failing}
    failing += [
        {"output": name, "reason": o.get("reason"), "max_abs": o.get("max_abs")}
        for name, o in report["outputs"].items()
        if not o["passed"] and name not in named
    ]
    decisions = report.get("decisions")
    if decisions is not None and not decisions["passed"]:
        failing.append(
            {
                "output": decisions["output"],
                "reason": f"decision flipped ({decisions['rule']})",
                "max_abs": None,
            }
        )
    return failing


def nearest_temp_c(samples, t: float) -> float | None:
    """The temperature of the telemetry sample nearest ``t`` (CLOCK_MONOTONIC), None when
    no sample holds one (a board without a sensor: absent, never made up)."""
    temps = [(abs(s["t"] - t), s["temp_c"]) for s in samples if s.get("temp_c") is not None]
    return min(temps)[1] if temps else None


def place_mismatches(
    checked: dict, samples, windows: list[dict] | None = None, sensor: bool = True
) -> dict:
    """Each mismatched call of ``checked`` (:func:`compare_timed_outputs`) with the temperature
    at that moment (``temp_c``, nearest 1 Hz sample; None with ``temp_sensor`` False on a
    board without a sensor) and, for the sustained phase, the ``window`` it fell in."""
    for m in checked["mismatched"]:
        t = m.pop("t_monotonic")
        m["temp_c"] = nearest_temp_c(samples, t) if sensor else None
        m["temp_sensor"] = bool(sensor)
        if windows is not None:
            inside = [w["index"] for w in windows if w["t0"] <= t <= w["t1"]]
            m["window"] = inside[0] if inside else None
    return checked


def phase_timed_outputs(entries: list[dict]) -> dict:
    """One phase's checks from its loops' (one per input shape, or the one sustained loop):
    ``{calls, checked, every, reference, mismatches, mismatched, loops}``. ``every`` is k
    when all loops kept the same, else the largest; ``loops`` keeps each loop's own."""
    return {
        "calls": sum(e["calls"] for e in entries),
        "checked": sum(e["checked"] for e in entries),
        "every": max(e["every"] for e in entries),
        "reference": "golden" if all(e["reference"] == "golden" for e in entries) else "at_rest",
        "mismatches": sum(e["mismatches"] for e in entries),
        "mismatched": [m for e in entries for m in e["mismatched"]][:MAX_MISMATCH_RECORDS],
        "loops": [
            {k: e[k] for k in ("shape", "calls", "checked", "every", "mismatches") if k in e}
            for e in entries
        ],
    }


def timed_outputs_finding(phase: str, checked: dict, runtime: str) -> dict | None:
    """The finding for a phase whose outputs changed while timed (None when all matched):
    the phase, the first mismatched call (index, seconds into the phase, sustained window),
    the temperature then (or that the board has no sensor) and the output."""
    if not checked["mismatches"]:
        return None
    first = checked["mismatched"][0]
    output = first["outputs"][0] if first["outputs"] else {"output": None, "reason": None}
    where = f"call {first['call']:,}, {first['t_s']:g} s into the phase"
    if first.get("window") is not None:
        where += f", window {first['window']}"
    if first["temp_c"] is not None:
        where += f", {first['temp_c']:.1f} °C"
    elif not first["temp_sensor"]:
        where += ", no temperature sensor"
    message = (
        f"outputs changed while timed ({phase}): {checked['mismatches']} of "
        f"{checked['checked']:,} checked calls out of tolerance, first at {where}: "
        f"output {output['output']} ({output['reason']})"
    )
    return {
        "phase": phase,
        "cause": "outputs",
        "kind": FINDING_KIND,
        "message": message,
        "call": first["call"],
        "t_s": first["t_s"],
        "window": first.get("window"),
        "temp_c": first["temp_c"],
        "temp_sensor": first["temp_sensor"],
        "output": output["output"],
        "mismatches": checked["mismatches"],
        "checked": checked["checked"],
        "runtime": runtime,
    }
