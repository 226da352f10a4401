"""The history database, against SQLite and a real PostgreSQL server: migrations, recording
verified reports (once, from two writers at once), list and trend with changes marked."""

from __future__ import annotations

import hashlib
import json
import threading

import pytest
from edgequal.agent.run_request import RunRequest, new_run_id
from edgequal.agent.runs import sign_report
from edgequal.cli.main import main as edgequal_main
from edgequal.contract.keys import load_or_create_device_key
from edgequal.contract.plan import Plan
from edgequal.host.devices.trust import KnownDevices
from edgequal.host.errors import VerificationFailed
from edgequal.host.lab.history import SCHEMA_VERSION, History, migrate


# PostgreSQL starts a server of its own for each test: seconds, so the fast loop has SQLite.
@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def db_url(request, tmp_path):
    """A fresh database of each kind: an SQLite file, or a new database on the server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'history.sqlite'}"
    server_url = request.getfixturevalue("postgres_url")
    from sqlalchemy import create_engine, text

    name = f"h_{tmp_path.name.lower().replace('-', '_')[-40:]}"
    engine = create_engine(server_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return server_url.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture
def signer(tmp_path):
    """A device key trusted as 'bench', and a function signing a report as that device."""
    key = load_or_create_device_key(tmp_path / "device-state")
    KnownDevices().trust("bench", "grpc://127.0.0.1:1", key.public_key_raw())

    def sign(
        p50_ms: float,
        runtime_version: str = "1.20.0",
        status: str = "passed",
        model_name: str = "micro.onnx",
        model_bytes: bytes = b"model",
    ) -> bytes:
        request = RunRequest(
            run_id=new_run_id(),
            model_digest=hashlib.sha256(model_bytes).hexdigest(),
            golden_digest=None,
            plan=Plan.from_json({"preset": "quick", "profile": "generic/linux-x86_64"}),
            nonce="n",
            model_name=model_name,
        )
        measurement = {
            "status": status,
            "fingerprint": {"kernel": "6.1.0", "os_release": "Debian 12", "architecture": "x86_64"},
            "results": {
                "runtime": {"runtime": "onnxruntime", "version": runtime_version},
                "latency": {"per_shape": [{"summary": {"p50_ms": p50_ms, "p99_ms": None}}]},
                "cold_load": {"total_ms": {"median": 40.0}},
                "memory": {"peak_rss_bytes": 64 * 2**20},
            },
        }
        return sign_report(key, request, measurement)

    return sign


def test_records_lists_and_trends(db_url, signer, tmp_path):
    history = History.open(db_url)
    paths = []
    for i, (p50, version) in enumerate([(1.0, "1.20.0"), (1.1, "1.20.0"), (1.6, "1.21.0")]):
        path = tmp_path / f"r{i}.json"
        path.write_bytes(signer(p50, version))
        paths.append(path)
        assert history.record_file(path, device="bench")
    assert not history.record_file(paths[0], device="bench")  # the same run: kept once
    rows = history.list(device="bench")
    assert len(rows) == 3
    assert {r["p50_ms"] for r in rows} == {1.0, 1.1, 1.6}
    assert rows[0]["model_name"] == "micro.onnx" and rows[0]["peak_rss_mb"] == 64.0
    trend = history.trend("bench", "micro")
    assert [r["p50_ms"] for r in trend] == [1.0, 1.1, 1.6]
    assert [r["changes"] for r in trend] == [[], [], ["runtime_version"]]
    # The stored envelope is the signed bytes, so a row can be verified again.
    assert history.envelope("bench", trend[0]["run_id"]) == paths[0].read_bytes()
    assert history.list(device="other") == []
    history.close()


def test_an_unverified_report_is_not_recorded(db_url, signer, tmp_path):
    path = tmp_path / "r.json"
    envelope = json.loads(signer(1.0))
    payload = envelope["payload"]
    middle = len(payload) // 2
    flipped = "A" if payload[middle] != "A" else "B"
    envelope["payload"] = payload[:middle] + flipped + payload[middle + 1 :]  # tampered
    path.write_text(json.dumps(envelope))
    history = History.open(db_url)
    with pytest.raises(VerificationFailed):
        history.record_file(path, device="bench")
    assert history.list() == []


def test_migrate_is_idempotent_and_versioned(db_url):
    history = History.open(db_url)
    assert migrate(history.engine) == SCHEMA_VERSION  # already current: nothing to do
    from sqlalchemy import text

    with history.engine.begin() as conn:
        conn.execute(text("UPDATE edgequal_schema SET version = 99"))
    from edgequal.host.lab.history import HistoryError

    with pytest.raises(HistoryError, match="newer than this edgequal's"):
        History.open(db_url)


@pytest.mark.slow
def test_two_writers_at_once_lose_nothing(db_url, signer, tmp_path):
    envelopes = [signer(1.0 + i / 100) for i in range(40)]
    paths = []
    for i, e in enumerate(envelopes):
        path = tmp_path / f"w{i}.json"
        path.write_bytes(e)
        paths.append(path)
    History.open(db_url).close()  # both writers find the schema; first-time creation is separate
    errors = []

    def writer(order):
        try:
            h = History.open(db_url)
            for p in order:
                h.record_file(p, device="bench")
            h.close()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    # Both record every report, in opposite orders: each row once, none lost.
    threads = [
        threading.Thread(target=writer, args=(paths,)),
        threading.Thread(target=writer, args=(paths[::-1],)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    rows = History.open(db_url).list(limit=1000)
    assert len(rows) == 40
    assert len({r["run_id"] for r in rows}) == 40


def test_history_cli(db_url, signer, tmp_path, capsys):
    path = tmp_path / "r.json"
    path.write_bytes(signer(2.5))
    assert edgequal_main(["history", "record", str(path), "--db", db_url]) == 0
    assert edgequal_main(["history", "list", "--db", db_url]) == 0
    out = capsys.readouterr().out
    assert "micro.onnx" in out and "2.500" in out
    rc = edgequal_main(
        ["history", "trend", "--device", "bench", "--model", "micro", "--db", db_url, "--json"]
    )
    assert rc == 0
    assert '"p50_ms": 2.5' in capsys.readouterr().out


def test_a_bad_url_is_a_usage_error(capsys):
    assert edgequal_main(["history", "list", "--db", "not a url"]) == 2
    assert "not a database URL" in capsys.readouterr().err


@pytest.mark.slow  # draws the trend page with matplotlib: about 1.5 CPU-s
def test_show_trend_per_pair_and_the_trend_page(db_url, signer, tmp_path, capsys):
    paths = []
    for i, (p50, version) in enumerate([(1.0, "1.20.0"), (1.2, "1.20.0"), (1.9, "1.21.0")]):
        path = tmp_path / f"r{i}.json"
        path.write_bytes(signer(p50, version))
        paths.append(path)
    assert edgequal_main(["history", "record", *map(str, paths), "--db", db_url]) == 0
    history = History.open(db_url)
    newest = history.show(device="bench", model="micro")
    assert newest["p50_ms"] == 1.9 and newest["envelope"] == paths[2].read_bytes()
    first = history.trend("bench", "micro")[0]["run_id"]
    assert history.show(first[:20])["p50_ms"] == 1.0  # a run id prefix is enough
    assert history.show(device="other") is None
    assert list(history.trends()) == [("bench", "micro.onnx")]
    capsys.readouterr()

    base = ["--device", "bench", "--model", "micro", "--db", db_url]
    assert edgequal_main(["history", "show", *base, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["p50_ms"] == 1.9 and shown["signature"] == "verified against the pinned key"
    assert edgequal_main(["history", "show", first, "--db", db_url]) == 0
    assert first in capsys.readouterr().out
    assert edgequal_main(["history", "show", "no-such-run", "--db", db_url]) == 2
    assert edgequal_main(["history", "list", *base]) == 0
    assert capsys.readouterr().out.count("micro.onnx") == 3

    page = tmp_path / "trend.html"
    assert edgequal_main(["history", "trend", *base, "--html", str(page), "--json"]) == 0
    (pair,) = json.loads(capsys.readouterr().out)
    assert (pair["device"], pair["model"]) == ("bench", "micro.onnx")
    assert [r["changes"] for r in pair["runs"]] == [[], [], ["runtime_version"]]
    text = page.read_text()
    assert text.count('src="data:image/png;base64,') == 1  # one board × model, one figure
    assert "runtime version → 1.21.0" in text
    assert "<script" not in text and "http://" not in text and "https://" not in text


def test_the_trend_page_escapes_database_text(tmp_path):
    from edgequal.host.present.html.trend import render_trend_page

    row = {
        "measured_at": None,
        "status": "passed",
        "p50_ms": 1.0,
        "firmware": "<script>alert(1)</script>",
        "run_id": "r&1",
        "changes": ["firmware"],
    }
    page = render_trend_page({("<b>dev</b>", 'm"odel'): [row]})
    assert "<script>alert" not in page and "&lt;script&gt;" in page
    assert "<b>dev</b>" not in page and "&lt;b&gt;dev&lt;/b&gt;" in page
    assert "r&amp;1" in page


def test_a_fleet_cells_retries_are_one_row_found_by_its_lab_name(db_url, signer, tmp_path):
    from edgequal.host.lab.history import FleetCell

    history = History.open(db_url)
    cell = "lab/20261201T000000Z-abcdef/ocr-cls/bench"
    paths = []
    for attempt, status in enumerate(["inconclusive", "inconclusive", "passed"], start=1):
        path = tmp_path / f"attempt{attempt}.json"
        path.write_bytes(signer(1.0 + attempt, status=status))
        paths.append(path)
        assert history.record_file(path, "bench", cell=FleetCell("ocr-cls", cell, attempt))
    other = tmp_path / "qualify.json"  # a report of the same model outside any fleet run
    other.write_bytes(signer(9.0))
    assert history.record_file(other, "bench")
    # One row for the cell (its last attempt, which says it was the third), one for the other.
    rows = history.list(device="bench", limit=None)
    assert [(r["status"], r["attempt"], r["p50_ms"]) for r in rows] == [
        ("passed", None, 9.0),
        ("passed", 3, 4.0),
    ]
    # The models.toml name finds the fleet's row; the file name finds both.
    assert [r["p50_ms"] for r in history.list(model="ocr-cls")] == [4.0]
    assert [r["p50_ms"] for r in history.trend("bench", "micro")] == [4.0, 9.0]
    # A trend is a series as history changes names it: the lab's name, else the file's.
    assert list(history.trends(model="ocr-cls")) == [("bench", "ocr-cls")]
    assert list(history.trends(device="bench")) == [("bench", "micro.onnx"), ("bench", "ocr-cls")]
    # The replaced attempts are kept, each with the attempt that replaced it.
    from edgequal.host.devices.verify import verify_envelope

    run_ids = [verify_envelope(p.read_bytes(), known=KnownDevices()).run_id for p in paths]
    assert run_ids[2] == rows[1]["run_id"]
    for i, path in enumerate(paths[:2]):
        row = history.show(run_ids[i])
        assert (row["replaced_by"], row["status"]) == (run_ids[i + 1], "inconclusive")
        assert history.envelope("bench", run_ids[i]) == path.read_bytes()


def test_a_version_1_database_is_upgraded_in_place(tmp_path, signer):
    from sqlalchemy import create_engine, inspect, text

    url = f"sqlite:///{tmp_path / 'v1.sqlite'}"
    engine = create_engine(url)
    with engine.begin() as conn:  # the table as schema version 1 made it
        conn.execute(text("CREATE TABLE edgequal_schema (version INTEGER NOT NULL)"))
        conn.execute(text("INSERT INTO edgequal_schema VALUES (1)"))
        conn.execute(
            text(
                "CREATE TABLE edgequal_reports (id INTEGER PRIMARY KEY, device VARCHAR(64), "
                "key_fingerprint VARCHAR(80), run_id VARCHAR(64), measured_at DATETIME, "
                "recorded_at DATETIME, model_name VARCHAR(255), model_sha256 VARCHAR(64), "
                "golden_sha256 VARCHAR(64), status VARCHAR(16), preset VARCHAR(16), "
                "profile VARCHAR(80), p50_ms FLOAT, p99_ms FLOAT, cv FLOAT, cold_total_ms FLOAT, "
                "sustained_per_s FLOAT, peak_rss_mb FLOAT, board VARCHAR(255), "
                "kernel VARCHAR(255), os_release VARCHAR(255), firmware VARCHAR(255), "
                "runtime VARCHAR(32), runtime_version VARCHAR(64), envelope_sha256 VARCHAR(64), "
                "envelope BLOB, UNIQUE (device, run_id))"
            )
        )
    engine.dispose()
    history = History.open(url)
    columns = {c["name"] for c in inspect(history.engine).get_columns("edgequal_reports")}
    assert {"model_label", "cell", "attempt", "replaced_by"} <= columns
    assert {"repeats", "p50_repeat_cv", "p99_repeat_cv", "sustained_repeat_cv"} <= columns
    assert "command" in columns
    assert migrate(history.engine) == SCHEMA_VERSION == 3
    path = tmp_path / "r.json"
    path.write_bytes(signer(1.5))
    assert history.record_file(path, "bench")
    assert [r["p50_ms"] for r in history.list()] == [1.5]


def test_record_with_the_models_file_keeps_the_labs_names(signer, tmp_path, capsys):
    """``history record --models models.toml`` records a report under the model's name there
    (matched by SHA-256), as fleet run does; an unknown ``--model`` says so, naming the known."""
    db = f"sqlite:///{tmp_path / 'history.sqlite'}"
    long_name = "face_detector_mobilenet_v2_int8_320x320.onnx"
    model = tmp_path / long_name
    model.write_bytes(b"face detector weights")
    models = tmp_path / "models.toml"
    models.write_text(f'[models.face-det]\npath = "{model}"\n')
    face = tmp_path / "face.json"
    face.write_bytes(signer(3.25, model_name=long_name, model_bytes=model.read_bytes()))
    other = tmp_path / "micro.json"
    other.write_bytes(signer(1.5))  # not a model of the file: recorded without a name
    argv = ["history", "record", str(face), str(other), "--models", str(models), "--db", db]
    assert edgequal_main(argv) == 0
    capsys.readouterr()
    assert edgequal_main(["history", "list", "--model", "face-det", "--db", db, "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["model_label"], row["model_name"], row["p50_ms"]) == ("face-det", long_name, 3.25)
    assert row["cell"] is None and row["attempt"] is None
    # The table keeps file names whole on a 120-column screen (the run id folds instead).
    assert edgequal_main(["history", "trend", "--model", "face-det", "--db", db]) == 0
    out = capsys.readouterr().out
    assert f"face-det ({long_name})" in out
    assert edgequal_main(["history", "list", "--model", "face-dt", "--db", db]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("edgequal: error: no recorded run of model 'face-dt' in sqlite:///")
    assert err.endswith(
        "(hint: known models: face-det, face_detector_mobilenet_v2_int8_320x320.onnx, micro.onnx)"
    )
    assert edgequal_main(["history", "show", "--model", "face-dt", "--db", db]) == 2


def test_recording_again_with_the_models_file_attaches_the_names(signer, tmp_path, capsys):
    """Reports recorded without ``--models`` get the lab's names afterwards: recording them
    again with ``--models`` names their model (it used to add nothing, "new 0"), and the
    output says so; without ``--models`` it says how."""
    db = f"sqlite:///{tmp_path / 'history.sqlite'}"
    model = tmp_path / "ocr_cls.onnx"
    model.write_bytes(b"ocr cls weights")
    models = tmp_path / "models.toml"
    models.write_text(f'[models.ocr-cls]\npath = "{model}"\n')
    report = tmp_path / "r.json"
    report.write_bytes(signer(2.0, model_name="ocr_cls.onnx", model_bytes=model.read_bytes()))
    record = ["history", "record", str(report), "--db", db]
    assert edgequal_main(record) == 0
    capsys.readouterr()
    assert edgequal_main(record) == 0
    out = " ".join("".join(capsys.readouterr()).split())
    assert (
        "1 already recorded, left as they were: recording them again with --models "
        "models.toml attaches the lab's model names to them"
    ) in out
    assert edgequal_main([*record, "--models", str(models)]) == 0
    out = " ".join("".join(capsys.readouterr()).split())
    assert "model named" in out
    assert "1 already recorded: their model names from --models are attached now" in out
    assert edgequal_main(["history", "list", "--model", "ocr-cls", "--db", db, "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["model_label"], row["model_name"]) == ("ocr-cls", "ocr_cls.onnx")
    # Once named, a third time changes nothing, and says why.
    assert edgequal_main([*record, "--models", str(models)]) == 0
    out = " ".join("".join(capsys.readouterr()).split())
    assert "attached now" not in out and "the name it has already" in out
    assert len(History.open(db).list()) == 1


@pytest.mark.slow  # draws the trend page's figure (about 0.8 CPU-seconds)
def test_the_trend_page_names_a_series_as_the_cli_does(signer, tmp_path, capsys):
    """A model of the lab's models file is ``ocr-cls`` in ``history changes`` and on the trend
    page alike (the page said ``ocr_cls.onnx on bench``)."""
    db = f"sqlite:///{tmp_path / 'history.sqlite'}"
    model = tmp_path / "ocr_cls.onnx"
    model.write_bytes(b"ocr cls weights")
    models = tmp_path / "models.toml"
    models.write_text(f'[models.ocr-cls]\npath = "{model}"\n')
    report = tmp_path / "r.json"
    report.write_bytes(signer(2.0, model_name="ocr_cls.onnx", model_bytes=model.read_bytes()))
    assert (
        edgequal_main(["history", "record", str(report), "--models", str(models), "--db", db]) == 0
    )
    capsys.readouterr()
    assert edgequal_main(["history", "changes", "--db", db, "--json"]) == 0
    (series,) = json.loads(capsys.readouterr().out)["series"]
    assert (series["device"], series["model"]) == ("bench", "ocr-cls")
    page = tmp_path / "trend.html"
    assert edgequal_main(["history", "trend", "--db", db, "--html", str(page)]) == 0
    html = page.read_text()
    from edgequal.host.present.html.trend import series_anchor

    assert f'<h2 id="{series_anchor("bench", "ocr-cls")}">ocr-cls on bench</h2>' in html
    assert "ocr_cls.onnx on bench" not in html
    assert "ocr-cls on bench" in capsys.readouterr().out  # the terminal's table title


@pytest.mark.slow  # renders the page's figure twice (about 1.5 CPU-seconds)
def test_the_trend_page_draws_an_inconclusive_run_as_a_marked_gap(signer, tmp_path, capsys):
    """A run interference spoiled is a gap in each line with a dotted line at its time, not
    a point; a p99 panel without a point says "not measured"."""
    import math

    from edgequal.host.present.html.trend import trend_plot

    db = f"sqlite:///{tmp_path / 'history.sqlite'}"
    paths = []
    for i, (p50, status) in enumerate([(1.0, "passed"), (9.0, "inconclusive"), (1.1, "passed")]):
        paths.append(tmp_path / f"r{i}.json")
        paths[-1].write_bytes(signer(p50, status=status))
    assert edgequal_main(["history", "record", *map(str, paths), "--db", db]) == 0
    page = tmp_path / "trend.html"
    assert edgequal_main(["history", "trend", "--db", db, "--html", str(page)]) == 0
    assert "1 inconclusive run (other processes took the CPU): gaps in the lines" in (
        page.read_text()
    )
    rows = History.open(db).trend("bench", "micro")
    fig = trend_plot("bench", "micro.onnx", rows)
    p50_ax, p99_ax, thr = fig.axes
    (line,) = [ln for ln in p50_ax.get_lines() if ln.get_gid() != "gap-inconclusive"]
    y = list(line.get_ydata())
    assert y[0] == pytest.approx(1.0) and math.isnan(y[1]) and y[2] == pytest.approx(1.1)
    for ax in (p50_ax, p99_ax, thr):
        assert sum(ln.get_gid() == "gap-inconclusive" for ln in ax.get_lines()) == 1
    assert [t.get_text() for t in p99_ax.texts] == [
        "not measured: a p99 needs 368 calls in a run (a longer plan)"
    ]


_OPEN_AT_ONCE = """
import sys, time
from pathlib import Path
from edgequal.host.lab.history import History

go = Path(sys.argv[2])
Path(sys.argv[3]).touch()  # imported: ready
while not go.exists():  # both processes are started and have imported everything
    time.sleep(0.002)
History.open(sys.argv[1]).close()
"""


@pytest.mark.slow  # two Python processes importing SQLAlchemy: about 2 CPU-s
def test_two_first_uses_at_once_both_create_the_schema(db_url, tmp_path):
    """Two processes opening a history that does not exist yet, released at one moment,
    both succeed and leave one schema row (two first fleet runs at once on a new history)."""
    import subprocess
    import sys

    from sqlalchemy import create_engine, text

    go = tmp_path / "go"
    ready = [tmp_path / f"ready-{i}" for i in range(2)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _OPEN_AT_ONCE, db_url, str(go), str(flag)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for flag in ready
    ]
    # Release both at one moment, once each has imported everything it needs.
    import time

    while not all(f.exists() for f in ready) and all(p.poll() is None for p in procs):
        time.sleep(0.01)
    go.touch()
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    engine = create_engine(db_url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version FROM edgequal_schema")).scalars().all() == [
            SCHEMA_VERSION
        ]
    engine.dispose()


@pytest.mark.slow  # a real qualification with three runs on the local agent
def test_repeated_runs_are_one_point_with_their_spread(
    tmp_path, example_models, short_plan, capsys, monkeypatch
):
    """A report of ``qualify --repeat 3`` is one row whose p50, p99 (and the figures the
    change detection follows) are the three runs' medians, beside how many runs and their
    CV; ``history list`` and ``trend`` show the spread next to the figure."""
    from edgequal.host.judge.report_file import load_report
    from edgequal.host.lab.series import Figure, figures_of

    report = tmp_path / "r.report.json"
    argv = ["qualify", str(example_models["micro"]), *short_plan, "--repeat", "3"]
    assert edgequal_main([*argv, "-o", str(report), "--json"]) in (0, 1)
    predicate = load_report(report, known=KnownDevices(), require=True).predicate
    spread = predicate["results"]["repeats"]["spread"]
    db = f"sqlite:///{tmp_path / 'history.sqlite'}"
    assert edgequal_main(["history", "record", str(report), "--db", db]) == 0
    history = History.open(db)
    (row,) = history.list()
    assert row["repeats"] == 3
    assert row["p50_ms"] == spread["p50_ms"]["median"]
    assert row["p99_ms"] == (spread.get("p99_ms") or {}).get("median")
    assert row["p50_repeat_cv"] == spread["p50_ms"]["cv"]
    # The command that made it, from the report's sidecar.
    assert row["command"].startswith("edgequal qualify ") and "--repeat 3" in row["command"]
    shape = predicate["results"]["latency"]["per_shape"][0].get("shape") or "default"
    figures = figures_of(predicate)
    assert figures[Figure(f"p50 {shape}", "ms", "latency")] == spread["p50_ms"]["median"]
    history.close()
    capsys.readouterr()
    from edgequal.host.present.terminal import sections

    # Wide enough that no cell wraps (where a cell wraps at 80 or 120 columns depends on the
    # run's other cells: tests/host/lab/test_history_screens.py tests the wrapping).
    monkeypatch.setattr(sections.console, "width", 250)
    assert edgequal_main(["history", "list", "--db", db]) == 0
    out = " ".join(capsys.readouterr().out.split())
    cv = spread["p50_ms"]["cv"]
    if row["status"] in ("passed", "degraded"):
        assert f"{spread['p50_ms']['median']:.3f} (3 runs, CV {cv:.1%})" in out, out
    else:  # a run a busy machine spoiled is a gap: its status, never its figures
        assert f" {row['status']} │ — │" in out and f"{spread['p50_ms']['median']:.3f}" not in out
    page = tmp_path / "trend.html"
    trend = ["history", "trend", "--device", "local", "--db", db, "--json", "--html", str(page)]
    assert edgequal_main(trend) == 0
    (pair,) = json.loads(capsys.readouterr().out)
    assert pair["runs"][0]["repeats"] == 3 and pair["runs"][0]["p50_repeat_cv"] == cv
    if row["status"] in ("passed", "degraded"):
        assert f"(3 runs, CV {cv:.1%})" in page.read_text()  # the page's table of runs
