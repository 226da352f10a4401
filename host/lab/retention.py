"""Retention: a lab's raw samples past its window are dropped, each run's figures kept.

A run's signed report holds every timed call (``samples_ns_b64``, and ``preempted_b64``
marking the preempted ones): at a thousand calls a shape that is most of a report's bytes,
and a lab of 50 boards × 40 models writes 730,000 runs a year. What the history analyses
(trends, change points, noise scores, ``change_state.py``) reads the per-run figures
(percentiles, medians, throughput) and never a raw sample, so past ``[lab]
keep_samples_days`` a row keeps its figures and its report without the raw samples: the
envelope is rewritten with those arrays left out and its signatures removed (the payload
is no longer what the board signed, and says so: ``edgequal_samples_dropped`` holds when,
and ``envelope_sha256`` still names the envelope as recorded and verified). The detector's
results do not change (tests/host/lab/test_retention.py).
"""

from __future__ import annotations

import base64
import datetime as dt
import json

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from .history import History, HistoryError, reports

RAW_KEYS = ("samples_ns_b64", "preempted_b64")
"""The per-call arrays of a report: what retention drops."""


def _without_raw(value):
    if isinstance(value, dict):
        return {k: _without_raw(v) for k, v in value.items() if k not in RAW_KEYS}
    if isinstance(value, list):
        return [_without_raw(v) for v in value]
    return value


def thinned(envelope: bytes, when: dt.datetime) -> bytes | None:
    """``envelope`` without raw samples (and without signatures), or None when it has no raw
    samples or was thinned already (nothing to drop)."""
    try:
        outer = json.loads(envelope)
        payload = outer["payload"]
        statement = json.loads(base64.b64decode(payload + "=" * (-len(payload) % 4)))
    except (ValueError, KeyError, TypeError):
        return None
    if "edgequal_samples_dropped" in outer:
        return None
    lean = _without_raw(statement)
    if lean == statement:
        return None
    encoded = base64.b64encode(json.dumps(lean, separators=(",", ":")).encode()).decode()
    out = {
        "payloadType": outer.get("payloadType"),
        "payload": encoded,
        "signatures": [],
        "edgequal_samples_dropped": when.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    return json.dumps(out, separators=(",", ":")).encode()


def drop_samples(history: History, keep_days: float, now: dt.datetime | None = None) -> dict:
    """Drop the raw samples of every run measured more than ``keep_days`` before ``now``:
    ``{"runs": rows rewritten, "bytes_before": ..., "bytes_after": ...}``."""
    if keep_days < 0:
        raise ValueError("keep_days must be at least 0")
    now = now or dt.datetime.now(dt.timezone.utc)
    cutoff = now - dt.timedelta(days=keep_days)
    q = select(reports.c.id, reports.c.envelope).where(reports.c.measured_at < cutoff)
    done = before = after = 0
    try:
        with history.engine.begin() as conn:
            for row in conn.execute(q).all():
                lean = thinned(bytes(row.envelope), now)
                if lean is None:
                    continue
                conn.execute(reports.update().where(reports.c.id == row.id).values(envelope=lean))
                done += 1
                before += len(row.envelope)
                after += len(lean)
    except SQLAlchemyError as e:  # the transaction is rolled back: every row or none
        raise HistoryError(f"cannot drop raw samples: {e}") from e
    return {"runs": done, "bytes_before": before, "bytes_after": after}
