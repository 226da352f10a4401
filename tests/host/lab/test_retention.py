"""Retention (host/lab/retention.py): raw samples past the window are dropped from a real
history of signed nights, the figures kept, and the detector's results are the same."""

from __future__ import annotations

import base64
import datetime as dt
import json

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # 14 signed reports and three full analyses: about 2 CPU-s

NIGHTS = 14


def _night(nights, n: int):
    p50 = (1.25 if n >= 7 else 1.0) * (1.0 + 0.01 * ((n * 7) % 5 - 2))
    samples = np.full(200, int(p50 * 1e6), dtype="<i8")
    shape = {
        "shape": "x=1x16",
        "summary": {"p50_ms": p50, "p99_ms": None, "count": 200},
        "samples_ns_b64": base64.b64encode(samples.tobytes()).decode(),
        "preempted_b64": base64.b64encode(bytes(25)).decode(),
    }
    return nights.Night(p50_ms=p50, extra={"latency": {"per_shape": [shape]}})


@pytest.fixture(scope="module")
def history_url(tmp_path_factory, test_helper):
    tmp = tmp_path_factory.mktemp("retention")
    nights = test_helper("signed_nights")
    url = f"sqlite:///{tmp / 'history.sqlite'}"
    board = nights.Board("pi-a", "raspberry-pi/5")
    with pytest.MonkeyPatch.context() as mp:  # the board's key pinned in this module's config
        mp.setenv("EDGEQUAL_CONFIG_DIR", str(tmp / "config"))
        nights.record_nights(
            url, tmp / "reports", [board], {(n, "pi-a"): _night(nights, n) for n in range(NIGHTS)}
        )
    return url, nights.START_S


def _has_raw(envelope: bytes) -> bool:
    payload = json.loads(envelope)["payload"]
    return "samples_ns_b64" in base64.b64decode(payload).decode()


def _analysis(url):
    from edgequal.host.lab.change_state import rebuild
    from edgequal.host.lab.changes import find_changes
    from edgequal.host.lab.history import History

    history = History.open(url)
    try:
        found = find_changes(history.runs()).to_json()
        state = rebuild(history).to_json()
        envelopes = [r["envelope"] for r in history.runs()]
    finally:
        history.close()
    return found, state, envelopes


def test_dropping_raw_samples_keeps_figures_and_every_change(history_url, capsys):
    from edgequal.cli.main import main
    from edgequal.host.lab.history import History
    from edgequal.host.lab.retention import drop_samples

    url, start_s = history_url
    before, state_before, envelopes_before = _analysis(url)
    assert [c["figure"] for c in before["changes"]] == ["p50 x=1x16"]
    assert all(_has_raw(e) for e in envelopes_before)

    # Night 13 is "now" plus a day; keeping 5 days drops nights 0..8 (measured > 5 days ago).
    now = dt.datetime.fromtimestamp(start_s + 14 * 86400, dt.timezone.utc)
    history = History.open(url)
    try:
        done = drop_samples(history, keep_days=5, now=now)
        again = drop_samples(history, keep_days=5, now=now)
    finally:
        history.close()
    assert done["runs"] == 9 and done["bytes_after"] < done["bytes_before"] / 2
    assert again["runs"] == 0  # nothing left to drop

    after, state_after, envelopes_after = _analysis(url)
    assert after == before  # every change, culprit, p-value and noise score the same
    assert state_after == state_before
    thinned = [json.loads(e) for e in envelopes_after if not _has_raw(e)]
    assert len(thinned) == 9
    assert all(t["signatures"] == [] and t["edgequal_samples_dropped"] for t in thinned)

    # The command: nothing more to drop, one line; without a window, exit 2.
    assert main(["history", "drop-samples", "--db", url, "--keep-days", "5"]) == 0
    assert "raw samples dropped from" in capsys.readouterr().err
    assert main(["history", "drop-samples", "--db", url]) == 2
