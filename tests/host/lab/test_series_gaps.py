"""Failed, inconclusive, incomplete and not run: never a point, never a 0, each shown as
what it is in the series, ``history list``, ``history trend`` (table, JSON, the page's
lines) and the exports, on signed reports recorded into a real SQLite history."""

from __future__ import annotations

import json
import math

import pytest
from edgequal.cli.main import main as edgequal_main


@pytest.fixture
def gappy(tmp_path, test_helper):
    """Ten nights of det on pi-a (passed at 1.0–1.09 ms) but: night 2 failed (its p50 0.0,
    as a crashed loop might write it), night 4 inconclusive (9 ms: the interference's),
    night 6 incomplete (no figure), night 8 not run on pi-a (pi-b ran it)."""
    nights = test_helper("signed_nights")
    boards = [nights.Board("pi-a", "raspberry-pi/5"), nights.Board("pi-b", "raspberry-pi/5")]
    table = {}
    for n in range(10):
        table[(n, "pi-b")] = nights.Night(p50_ms=2.0 + 0.01 * n)
        if n == 8:
            continue
        status, p50 = {2: ("failed", 0.0), 4: ("inconclusive", 9.0), 6: ("incomplete", None)}.get(
            n, ("passed", 1.0 + 0.01 * n)
        )
        table[(n, "pi-a")] = nights.Night(p50_ms=p50, status=status)
    db = f"sqlite:///{tmp_path / 'history.sqlite'}"
    paths = nights.record_nights(db, tmp_path / "reports", boards, table)
    return {"db": db, "paths": paths, "nights": nights}


def _json(capsys, argv) -> object:
    capsys.readouterr()
    assert edgequal_main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_a_failed_inconclusive_or_incomplete_run_is_a_gap_of_its_status(gappy, capsys):
    found = _json(capsys, ["history", "changes", "--db", gappy["db"], "--device", "pi-a", "--json"])
    (series,) = found["series"]
    assert series["points"] == 6  # 10 nights, 3 gaps, 1 not run
    assert [(g["status"], g["fleet_run"]) for g in series["gaps"]] == [
        ("failed", gappy["nights"].fleet_run(2)),
        ("inconclusive", gappy["nights"].fleet_run(4)),
        ("incomplete", gappy["nights"].fleet_run(6)),
    ]
    assert found["gaps"] == 3
    assert found["gaps_by_status"] == {"failed": 1, "inconclusive": 1, "incomplete": 1}
    # No point of the series is a gap's figure: the points are the passed nights' p50s.
    from edgequal.host.lab.history import History
    from edgequal.host.lab.series import build_series, figures_of

    history = History.open(gappy["db"])
    (s,) = build_series(history.runs(device="pi-a"))
    history.close()
    p50 = [
        v
        for p in s.points
        for f, v in figures_of(p.report.predicate).items()
        if f.kind == "latency"
    ]
    assert p50 == [1.0, 1.01, 1.03, 1.05, 1.07, 1.09]
    # The terminal names each gap's status.
    capsys.readouterr()
    assert edgequal_main(["history", "changes", "--db", gappy["db"], "--device", "pi-a"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "1 failed, 1 inconclusive, 1 incomplete" in out


def test_history_list_shows_the_status_in_place_of_a_gaps_figures(gappy, capsys):
    capsys.readouterr()
    assert edgequal_main(["history", "list", "--db", gappy["db"], "--device", "pi-a"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # The status beside a dash: not 0.000 ms, not the interference's 9 ms.
    for status in ("failed", "inconclusive", "incomplete"):
        line = next(line for line in lines if f" {status} " in line)
        assert line.split(f" {status} ")[1].split()[:4] == ["│", "—", "│", "—"], line
    assert not [line for line in lines if "0.000" in line or "9.000" in line]
    assert any("1.090" in line and " passed " in line for line in lines)
    rows = _json(capsys, ["history", "list", "--db", gappy["db"], "--device", "pi-a", "--json"])
    gaps = {r["status"]: r["series_gap"] for r in rows}
    assert gaps == {"passed": None, "failed": "failed", "inconclusive": "inconclusive",
                    "incomplete": "incomplete"}  # fmt: skip
    trend = _json(capsys, ["history", "trend", "--db", gappy["db"], "--device", "pi-a", "--json"])
    assert {r["status"]: r["series_gap"] for r in trend[0]["runs"]} == gaps


def test_a_night_with_no_run_is_a_gap_of_the_trend(gappy):
    from edgequal.host.lab.history import History, nights_not_run

    history = History.open(gappy["db"])
    trends = history.trends()
    missing = nights_not_run(trends, history.list(limit=None))
    history.close()
    # pi-a missed night 8, at the time the night's first run (pi-b's) was measured;
    # pi-b missed none.
    ((pair, times),) = missing.items()
    assert pair == ("pi-a", "det")
    (night8,) = [r for r in trends[("pi-b", "det")] if r["cell"].endswith("/det/pi-b")][8:9]
    assert times == [night8["measured_at"]]


@pytest.mark.slow  # draws the figure (matplotlib, about a CPU-second)
def test_the_trend_page_breaks_its_lines_at_every_gap(gappy, tmp_path):
    from edgequal.host.lab.history import History, nights_not_run
    from edgequal.host.present.html.trend import render_trend_page, trend_plot

    history = History.open(gappy["db"])
    rows = history.trend("pi-a", "det")
    not_run = nights_not_run(history.trends(), history.list(limit=None))[("pi-a", "det")]
    history.close()
    fig = trend_plot("pi-a", "det", rows, not_run=not_run)
    p50_ax = fig.axes[0]
    (line,) = [ln for ln in p50_ax.get_lines() if not str(ln.get_gid()).startswith(("gap", "not"))]
    y = [None if math.isnan(v) else round(v, 3) for v in line.get_ydata()]
    # Nights 0..9: the failed night, the inconclusive one, the incomplete one and the night
    # not run are gaps (NaN breaks the line), never 0 and never the interference's 9 ms.
    assert y == [1.0, 1.01, None, 1.03, None, 1.05, None, 1.07, None, 1.09]
    gids = sorted(str(ln.get_gid()) for ln in p50_ax.get_lines() if ln.get_gid())
    assert gids == ["gap-failed", "gap-incomplete", "gap-inconclusive", "not-run"]
    page = render_trend_page({("pi-a", "det"): rows}, not_run={("pi-a", "det"): not_run})
    assert (
        "1 failed run, 1 inconclusive run (other processes took the CPU), 1 incomplete run, "
        "1 night not run: gaps in the lines" in page
    )
    # The table of runs: a gap's row shows its status and a dash for each figure (the failed
    # night's 0.0 ms and the inconclusive night's 9 ms are not shown), a point's its figures.
    import re

    table = {}
    for row in re.findall(r"<tr>(.*?)</tr>", page.split("<tbody>", 1)[1]):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
        table.setdefault(re.sub(r"<[^>]+>", "", cells[1]), []).append(cells[2:7])
    for status in ("failed", "inconclusive", "incomplete"):
        assert table[status] == [["—", "—", "—", "—", "—"]], table[status]
    assert ["1.09 ms", "—", "—", "40.00 ms", "64.0"] in table["passed"]


def test_exports_chart_no_figure_of_a_failed_or_incomplete_run(gappy, capsys):
    paths = [str(p) for p in gappy["paths"] if "-pi-a." in p.name]
    entries = _json(capsys, ["export", *paths, "--format", "github-benchmark"])
    runs = {e["extra"].split(",")[0] for e in entries}
    statuses = {e["extra"].split("status ")[1].split(";")[0] for e in entries}
    assert statuses == {"passed"} and len(runs) == 6
    assert all(e["value"] != 0.0 for e in entries)
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    # Prometheus, one report at a time (its gauges are per device × model): the failed and
    # the incomplete night export their status only; a passed night its figures.
    for night, status in ((2, "failed"), (6, "incomplete"), (4, "inconclusive"), (3, "passed")):
        capsys.readouterr()
        path = next(p for p in paths if f"night-{night:02d}-pi-a." in p)
        assert edgequal_main(["export", path, "--format", "prometheus"]) == 0
        families = {f.name: f for f in text_string_to_metric_families(capsys.readouterr().out)}
        (own,) = [s for s in families["edgequal_status"].samples if s.value == 1.0]
        assert own.labels["status"] == status
        figures = sorted(set(families) - {"edgequal_status"})
        if status == "passed":
            (p50,) = families["edgequal_latency_p50_seconds"].samples
            assert p50.value == pytest.approx(1.03e-3)
        else:
            assert figures == [], (status, figures)
