"""Fleet runs over real agents on 127.0.0.1: the matrix, its outputs, resume, two fleet runs
sharing the agents, and a device that goes away mid-run."""

from __future__ import annotations

import json
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from edgequal.cli.main import main as edgequal_main
from edgequal.contract.signing import MEASURED_STATUSES
from edgequal.host.devices.resolve import trust_device
from edgequal.host.devices.trust import KnownDevices
from edgequal.host.devices.verify import verify_envelope
from edgequal.host.lab.fleet import FleetOptions, FleetRunner, load_index
from edgequal.host.lab.inventory import load_lab, load_models
from edgequal.host.present.html.matrix import matrix_html

# Small enough for a busy 2-core machine; every phase but the sustained one still runs.
# The warm-up is capped too: on a loaded machine a model may never reach the steady state,
# and the quick preset's 10 s cap then makes every run (and its retry) last that long. One
# thread: the boards measure at once, and thread pools spinning against each other make
# runs inconclusive (and retried) for no reason these tests are about.
SMALL_PLAN = {
    "threads": 1,
    "cold_runs": 1,
    "latency_min_runs": 20,
    "latency_min_s": 0.2,
    "warmup_min_s": 0.2,
    "warmup_max_s": 0.5,
    "sustain_s": 0.0,
}


@pytest.fixture
def agents(tmp_path, local_agents, request):
    """``n`` real agents (default 3), trusted under the names dev-0, dev-1, ..."""
    started = []

    def start(n: int = 3):
        known = KnownDevices()
        started.extend(
            local_agents.start_agents(tmp_path / "agents", [f"dev-{i}" for i in range(n)])
        )
        for i, agent in enumerate(started):
            trust_device(known, f"dev-{i}", agent.address)
        return started

    yield start
    for agent in started:
        agent.stop()


def write_lab(tmp_path: Path, agents, tags=None) -> Path:
    lines = ['[lab]\nname = "test-lab"\n']
    for i, agent in enumerate(agents):
        t = (tags or {}).get(i, ["x86"])
        lines.append(f'[devices.dev-{i}]\naddress = "{agent.address}"\ntags = {json.dumps(t)}\n')
    path = tmp_path / "lab.toml"
    path.write_text("\n".join(lines))
    return path


def write_models(tmp_path: Path, example_models, golden_sets, names=("micro", "classifier")):
    lines = []
    for name in names:
        lines.append(f'[models.{name}]\npath = "{example_models[name]}"')
        if name in golden_sets:
            lines.append(f'golden = "{golden_sets[name]}"')
        lines.append("")
    path = tmp_path / "models.toml"
    path.write_text("\n".join(lines))
    return path


@pytest.mark.slow
def test_fleet_run_matrix_outputs_and_resume(tmp_path, agents, example_models, golden_sets):
    from edgequal.host.devices.nonces import NonceLedger
    from edgequal.host.lab.history import History

    # Four agents, two models (micro, and classifier with its golden set): eight runs.
    started = agents(4)
    lab = load_lab(write_lab(tmp_path, started))
    models = load_models(write_models(tmp_path, example_models, golden_sets))
    out = tmp_path / "out"
    changes = []
    history = History.open(f"sqlite:///{tmp_path / 'history.sqlite'}")
    # No retries: four agents measuring at once on a small machine make many runs
    # inconclusive, which is a result here; test_retries_with_backoff covers retries and
    # the history's record of every attempt's report.
    options = FleetOptions(out_dir=out, plan_overrides=SMALL_PLAN, retries=0)
    result = FleetRunner(
        lab,
        models,
        options,
        on_change=lambda r: changes.append(r.state),
        record_report=lambda path, device, cell: history.record_file(path, device, cell=cell),
    ).run()

    assert len(result.runs) == 8
    assert {(r.model, r.device) for r in result.runs} == {
        (m, f"dev-{i}") for m in ("micro", "classifier") for i in range(4)
    }
    # Every final report is in the history (and any report a retry replaced), once each.
    rows = history.list(limit=None)
    recorded = {(r["device"], r["run_id"]) for r in rows}
    assert {(r.device, r.run_id) for r in result.runs} <= recorded
    assert len(recorded) == len(rows) <= sum(r.attempts for r in result.runs)
    for r in result.runs:
        assert r.state in MEASURED_STATUSES, r
        assert r.attempts >= 1
        envelope = (out / r.report).read_bytes()
        model = next(m for m in models if m.name == r.model)
        artifacts = [model.path] + ([model.golden] if model.golden else [])
        report = verify_envelope(
            envelope, known=KnownDevices(), device=r.device, artifacts=artifacts
        )
        assert report.run_id == r.run_id
        # This host issued the nonce (verify says so), as for a run of its own qualify.
        assert NonceLedger().check(report.nonce, report.run_id, envelope)
        assert (out / r.page).is_file()
    # No other host holds these boards, and a device's runs go one after another: nothing
    # waits for a lease (a free board's "waiting for the lease" was logged naming nobody).
    assert "running" in changes and "waiting" not in changes
    # Each agent ran exactly the runs of its column (and retries), never two at once.
    for i, agent in enumerate(started):
        attempts = sum(r.attempts for r in result.runs if r.device == f"dev-{i}")
        assert len(agent.run_records()) == attempts
    index = json.loads((out / "index.json").read_text())
    assert index["lab"] == "test-lab" and len(index["runs"]) == 8
    assert load_index(out).runs[0].model == result.runs[0].model
    suites = ET.parse(out / "junit.xml").getroot().findall("testsuite")
    assert sorted(s.get("name") for s in suites) == [
        f"edgequal fleet test-lab dev-{i}" for i in range(4)
    ]
    assert all(s.get("tests") == "2" and s.get("errors") == "0" for s in suites)
    page = (out / "index.html").read_text()
    for r in result.runs:
        assert f'href="{r.page}"' in page

    # Resume after an interrupted run: only the missing report is measured again.
    missing = result.runs[0]
    (out / missing.report).unlink()
    counts = [len(a.run_records()) for a in started]
    # Without report pages: the first run's are checked above, and a resumed run's page
    # is only its report's drawn again.
    options = FleetOptions(
        out_dir=out, plan_overrides=SMALL_PLAN, resume=True, retries=0, html_pages=False
    )
    again = FleetRunner(lab, models, options).run()
    resumed = [r for r in again.runs if r.resumed]
    assert len(resumed) == 7
    rerun = next(r for r in again.runs if not r.resumed)
    assert (rerun.model, rerun.device) == (missing.model, missing.device)
    assert rerun.state in MEASURED_STATUSES
    for i, agent in enumerate(started):
        extra = rerun.attempts if f"dev-{i}" == missing.device else 0
        assert len(agent.run_records()) == counts[i] + extra


@pytest.mark.slow
def test_two_fleet_runs_at_once_never_measure_together_on_one_agent(
    tmp_path, agents, example_models, golden_sets
):
    started = agents(2)
    lab = load_lab(write_lab(tmp_path, started))
    models = load_models(write_models(tmp_path, example_models, golden_sets))
    results = {}

    def fleet(name: str):
        # No report pages (the matrix test checks those): this test is about the leases.
        options = FleetOptions(
            out_dir=tmp_path / name,
            plan_overrides=SMALL_PLAN,
            wait_s=None,
            retries=0,
            html_pages=False,
        )
        results[name] = FleetRunner(lab, models, options).run()

    threads = [threading.Thread(target=fleet, args=(n,)) for n in ("first", "second")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    for name in ("first", "second"):
        assert all(r.state in MEASURED_STATUSES for r in results[name].runs), results[name]
    for agent in started:
        intervals = agent.run_intervals()
        assert len(intervals) >= 4  # 2 models x 2 fleet runs
        for (_, end), (start, _) in zip(intervals, intervals[1:]):
            assert end <= start, f"two runs overlapped on {agent.address}: {intervals}"


@pytest.mark.slow
def test_a_device_that_goes_away_is_marked_and_the_others_finish(
    tmp_path, agents, example_models, golden_sets
):
    started = agents(3)
    lab = load_lab(write_lab(tmp_path, started))
    models = load_models(write_models(tmp_path, example_models, golden_sets))
    killed = threading.Event()

    def on_event(record, event):
        # Kill dev-2's agent as soon as it accepted its first run.
        if record.device == "dev-2" and event.get("type") == "run" and not killed.is_set():
            killed.set()
            started[2].proc.kill()

    # No report pages (the matrix test checks those); the matrix page below is always written.
    options = FleetOptions(
        out_dir=tmp_path / "out",
        plan_overrides=SMALL_PLAN,
        backoff_s=0.1,
        retries=1,
        html_pages=False,
    )
    result = FleetRunner(lab, models, options, on_event=on_event).run()
    assert killed.is_set()
    gone = [r for r in result.runs if r.device == "dev-2"]
    assert gone[0].state == "error" and gone[0].attempts == 2  # retried with backoff
    assert gone[1].state == "skipped" and "device unreachable" in gone[1].error
    assert "dev-2" in result.unreachable
    others = [r for r in result.runs if r.device != "dev-2"]
    assert all(r.state in MEASURED_STATUSES for r in others)
    assert result.exit_code() == 3
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    assert "dev-2" in index["unreachable"]
    page = (tmp_path / "out" / "index.html").read_text()
    assert "Devices that went away" in page and "dev-2" in page


def test_matrix_page_escapes_names(tmp_path):
    from edgequal.host.lab.results import FleetResult, RunRecord

    result = FleetResult("<lab>", [RunRecord("m<1>", "d&2", state="error", error='"quoted" <b>')])
    page = matrix_html(result)
    assert "<lab>" not in page and "&lt;lab&gt;" in page
    assert "m&lt;1&gt;" in page and "d&amp;2" in page and "<b>" not in page


def test_an_untrusted_device_runs_nothing(tmp_path, example_models, golden_sets):
    lab_path = tmp_path / "lab.toml"
    lab_path.write_text('[devices.nobody]\naddress = "grpc://127.0.0.1:9"\n')
    models = load_models(write_models(tmp_path, example_models, golden_sets, names=("micro",)))
    result = FleetRunner(load_lab(lab_path), models, FleetOptions(out_dir=tmp_path / "out")).run()
    (record,) = result.runs
    assert record.state == "error" and "not trusted" in record.error
    assert result.exit_code() == 3


def test_fleet_run_refuses_a_plan_its_gate_policy_would_fail(
    tmp_path, example_models, golden_sets, capsys
):
    lab = tmp_path / "lab.toml"
    lab.write_text('[devices.nobody]\naddress = "grpc://127.0.0.1:9"\n')
    models = write_models(tmp_path, example_models, golden_sets, names=("micro",))
    nightly = Path(__file__).resolve().parents[3] / "docs" / "policies" / "nightly.toml"
    args = ["fleet", "run", str(lab), "--models", str(models), "--out", str(tmp_path / "out")]
    assert edgequal_main([*args, "--gate", str(nightly)]) == 2
    err = capsys.readouterr().err
    assert "policy nightly needs plan standard (sustained phase); this run would be quick" in err
    assert not (tmp_path / "out").exists()


def _predicate(report: Path) -> dict:
    import base64

    return json.loads(base64.b64decode(json.loads(report.read_bytes())["payload"]))["predicate"]


@pytest.mark.slow
def test_fleet_run_cli(
    tmp_path, agents, example_models, golden_sets, capsys, monkeypatch, short_plan
):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state-home"))
    started = agents(2)
    tags = {0: ["x86", "nightly"], 1: ["x86"]}
    lab = write_lab(tmp_path, started, tags=tags)
    models = write_models(tmp_path, example_models, golden_sets, names=("micro",))
    out = tmp_path / "out"
    rc = edgequal_main(
        ["fleet", "run", str(lab), "--models", str(models), "--tags", "nightly"]
        + ["--out", str(out), "--wait", "60", "--retries", "0", *short_plan]
        + ["--prometheus", str(tmp_path / "textfiles")]
    )
    index = json.loads((out / "index.json").read_text())
    (run,) = index["runs"]
    assert run["device"] == "dev-0"
    # One OpenMetrics file per device that ran a cell, with that cell's figures.
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    assert [p.name for p in (tmp_path / "textfiles").iterdir()] == ["dev-0.prom"]
    text = (tmp_path / "textfiles" / "dev-0.prom").read_text()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    entry = _predicate(out / "reports" / "micro@dev-0.json")["results"]["latency"]["per_shape"][0]
    from edgequal.contract.preemption import decisive_summary

    [p50] = families["edgequal_latency_p50_seconds"].samples
    assert p50.labels["device"] == "dev-0"
    assert p50.value == pytest.approx(decisive_summary(entry)["p50_ms"] / 1e3)
    assert run["status"] in MEASURED_STATUSES
    assert rc == (0 if run["ok"] else 1)
    captured = capsys.readouterr()
    assert "fleet: micro on dev-0:" in captured.err  # plain lines in a log
    # The plan as asked, printed before the run: the board's profile adds no phase.
    assert (
        "plan: quick (cold load ×1 [flag], warm-up 0.2 s [flag], latency 0.2 s [flag] "
        "(to 0.7 s for clean calls), "
        "no sustained phase) · threads and trip from each board's profile"
    ) in captured.out
    plan = _predicate(out / "reports" / "micro@dev-0.json")["plan"]
    assert plan["sustain_s"] == 0.0 and plan["sources"]["threads"] == "profile"
    # Recorded in the default history database (SQLite in the state directory).
    from edgequal.host.lab.history import History

    (row,) = History.open().list()
    assert (row["device"], row["run_id"]) == ("dev-0", run["run_id"])
    # Beside the report, the command that made it (its sidecar), kept in its history row.
    from edgequal.host.devices.reproduce import read_sidecar

    report = out / "reports" / "micro@dev-0.json"
    sidecar = read_sidecar(report)
    assert sidecar["command"].startswith(f"edgequal fleet run {lab} --models {models}")
    assert sidecar["rerun"] == f"edgequal rerun {report}" and sidecar["device"] == "dev-0"
    assert row["command"] == sidecar["command"]
    assert edgequal_main(["fleet", "run", str(lab), "--models", str(tmp_path / "nope")]) == 2


class ScriptedTransport:
    """A plumbing stand-in for one device: each qualify answers the next scripted outcome,
    a report signed by a real device key with that status, or an exception to raise."""

    address = "grpc://127.0.0.1:1"
    lease_id = None

    def __init__(self, key, outcomes):
        self.key = key
        self.outcomes = list(outcomes)
        self.calls = 0
        self.leases = 0

    def info(self):
        import base64

        pub = base64.b64encode(self.key.public_key_raw()).decode()
        return {"public_key_b64": pub, "fingerprint": {"architecture": "x86_64"}}

    def push(self, path, digest, on_progress=None):
        from edgequal.host.transport import PushResult

        return PushResult(digest, Path(path).stat().st_size, 0)

    def qualify(self, request, on_event):
        from edgequal.agent.run_request import RunRequest, new_run_id
        from edgequal.agent.runs import sign_report
        from edgequal.contract.plan import Plan

        self.calls += 1
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        run = RunRequest(
            new_run_id(),
            request.model_digest,
            request.golden_digest,
            Plan.from_json(request.plan),
            request.nonce,
            request.model_name,
            request.golden_name,
        )
        on_event({"type": "run", "run_id": run.run_id})
        return sign_report(self.key, run, {"status": outcome, "reason": f"scripted {outcome}"})

    def acquire_lease(self, purpose, ttl_s, wait_s=0.0, on_wait=None):
        self.leases += 1
        self.lease_id = "lease"
        return {}

    def renew_lease(self, ttl_s):
        return {}

    def release_lease(self):
        self.lease_id = None
        return True

    def close(self):
        pass


@pytest.mark.parametrize(
    ("outcomes", "state", "attempts"),
    [
        (["inconclusive", "passed"], "passed", 2),
        (["inconclusive", "inconclusive", "inconclusive"], "inconclusive", 3),
        (["incomplete", "degraded"], "degraded", 2),
        (["failed"], "failed", 1),  # a failed measurement is a result: never retried
        (["TransportError", "passed"], "passed", 2),
        (["TransportError"] * 3, "error", 3),
        (["UsageError"], "error", 1),  # a bad model: no retry makes it good
        (["DeviceBusy"], "error", 1),  # failing fast was asked for
    ],
)
def test_retries_with_backoff(tmp_path, example_models, outcomes, state, attempts):
    from edgequal.contract.keys import load_or_create_device_key
    from edgequal.host import errors
    from edgequal.host.devices.verify import verify_envelope

    key = load_or_create_device_key(tmp_path / "key")
    KnownDevices().trust("dev", "grpc://127.0.0.1:1", key.public_key_raw())
    scripted = [getattr(errors, o)(f"{o} on purpose") if o[0].isupper() else o for o in outcomes]
    transport = ScriptedTransport(key, scripted)
    lab_path = tmp_path / "lab.toml"
    lab_path.write_text('[devices.dev]\naddress = "grpc://127.0.0.1:1"\n')
    models = load_models(write_models(tmp_path, example_models, {}, names=("micro",)))
    slept = []
    recorded = []
    cells = []

    def record_report(path, device, cell):
        # One cell: every report is an attempt of it, in order.
        assert cell.model_label == "micro" and cell.attempt > (cells[-1][1] if cells else 0)
        cells.append((cell.cell, cell.attempt))
        recorded.append(
            verify_envelope(path.read_bytes(), known=KnownDevices(), device=device).run_id
        )

    runner = FleetRunner(
        load_lab(lab_path),
        models,
        FleetOptions(out_dir=tmp_path / "out", retries=2, backoff_s=1.5, html_pages=False),
        open_device=lambda d: transport,
        sleep=slept.append,
        record_report=record_report,
    )
    (record,) = runner.run().runs
    assert (record.state, record.attempts) == (state, attempts)
    assert transport.calls == attempts and transport.leases == attempts
    assert slept == [1.5, 3.0][: attempts - 1]  # exponential backoff
    # Every attempt that came back with a report is in the history, the replaced ones too.
    measured = [o for o in outcomes[:attempts] if o[0].islower()]
    assert len(recorded) == len(set(recorded)) == len(measured)
    assert len({c for c, _ in cells}) == (1 if measured else 0)
    assert recorded[-1:] == ([record.run_id] if measured else [])
    if record.status:
        assert (tmp_path / "out" / record.report).is_file()
        # The report's reason travels with the record: the table, the log and the JUnit say why.
        assert record.reason == f"scripted {record.status}"
        # This host issued its nonce: verify says so of a fleet run's report too.
        from edgequal.host.devices.nonces import NonceLedger

        envelope = (tmp_path / "out" / record.report).read_bytes()
        report = verify_envelope(envelope, known=KnownDevices(), device="dev")
        assert NonceLedger().check(report.nonce, report.run_id, envelope)
        import xmlschema

        xsd = Path(__file__).resolve().parents[2] / "fixtures" / "junit" / "junit-10.xsd"
        xmlschema.XMLSchema(xsd).validate(str(tmp_path / "out" / "junit.xml"))
        suite = ET.parse(tmp_path / "out" / "junit.xml").getroot().find("testsuite")
        failure = suite.find("testcase").find("failure")
        if record.ok:
            assert failure is None
        else:
            message = f"status {record.status}: scripted {record.status}"
            assert failure.get("message") == message
        from edgequal.host.present.terminal.summary import fleet_log_line

        assert fleet_log_line(record).endswith("" if record.ok else f": scripted {record.status}")
    # The page's cell gives the reason, as the terminal's why column does.
    page = (tmp_path / "out" / "index.html").read_text()
    if not record.ok:
        why = record.reason or record.error
        assert why and f'<small class="why">{why}</small>' in page
        if attempts > 1:
            assert f'{attempts} attempts</small><br><small class="why">{why}' in page
    else:
        assert 'class="why"' not in page


def test_a_waiting_run_says_what_it_waits_for_and_when_the_device_is_likely_free():
    import time

    from edgequal.host.lab.leases import waiting_text
    from edgequal.host.lab.results import RunRecord
    from edgequal.host.present.terminal.summary import fleet_log_line

    now_ms = int(time.time() * 1000)
    lease = {
        "run_id": "20261201T000000Z-00000000",
        "holder": "alice@ci",
        "started_unix_ms": now_ms - 30_000,
        "expires_unix_ms": now_ms + 4 * 3600_000,
        "purpose": "",
        "expected_end_unix_ms": now_ms + 90_000,
    }
    record = RunRecord("micro", "pi5", state="waiting")
    record.waiting_for = waiting_text("pi5", {"position": 2, "lease": lease})
    line = fleet_log_line(record)
    import re

    # The numbers come from the clock (a busy machine may take a second to get here).
    assert re.fullmatch(
        r"fleet: micro on pi5: waiting for the lease of pi5, place 2 in line: run "
        r"20261201T000000Z-00000000 for alice@ci is in progress \(started (30|31) s ago; its "
        r"plan times 120 s: likely free in about (8[89]|90) s\)",
        line,
    ), line
    assert "14399" not in line and "lease expires" not in line


def test_the_first_wait_for_a_lease_names_its_holder(tmp_path, example_models):
    """Before the device's first answer in line, "waiting for the lease of board-2" already
    names who holds it (the device's Info); on a board no one holds nothing is waited for,
    and no "waiting for the lease" is logged (it was, naming nobody)."""
    import time

    from edgequal.contract.keys import load_or_create_device_key
    from edgequal.host.present.terminal.summary import fleet_log_line

    key = load_or_create_device_key(tmp_path / "key")
    KnownDevices().trust("board-2", "grpc://127.0.0.1:1", key.public_key_raw())
    now_ms = int(time.time() * 1000)
    held = {
        "run_id": "",
        "holder": "alice@ci",
        "purpose": "bench session",
        "started_unix_ms": now_ms - 5_000,
        "expires_unix_ms": now_ms + 60_000,
    }

    class HeldTransport(ScriptedTransport):
        lease = held

        def info(self):
            return {**super().info(), "lease": self.lease}

    lab_path = tmp_path / "lab.toml"
    lab_path.write_text('[devices.board-2]\naddress = "grpc://127.0.0.1:1"\n')
    models = load_models(write_models(tmp_path, example_models, {}, names=("micro",)))
    for lease, expected in (
        (held, "the lease of board-2: leased to alice@ci for bench session"),
        (None, None),
    ):
        transport = HeldTransport(key, ["passed"])
        transport.lease = lease
        seen = []
        runner = FleetRunner(
            load_lab(lab_path),
            models,
            FleetOptions(out_dir=tmp_path / f"out-{bool(lease)}", retries=0, html_pages=False),
            open_device=lambda d, t=transport: t,
            sleep=lambda s: None,
        )
        logged = []

        def on_change(r, seen=seen, logged=logged):
            logged.append(fleet_log_line(r))
            if r.state == "waiting":
                seen.append(r.waiting_for)

        runner.on_change = on_change
        runner.run()
        if lease is None:
            assert seen == [] and not any("waiting" in line for line in logged), logged
            assert any(line.endswith(": passed") for line in logged), logged
        else:
            assert seen and seen[0].startswith(expected), seen
            waited = f"fleet: micro on board-2: waiting for {expected}"
            assert any(line.startswith(waited) for line in logged), logged


def _chain_models(tmp_path, test_helper) -> tuple[Path, Path]:
    """A lab's exports folder: chain8 (last night's model) and chain16 (tonight's: twice
    the layers, a new digest)."""
    chain_model = test_helper("gate_reports").chain_model
    exports = tmp_path / "exports"
    exports.mkdir()
    return (
        chain_model(exports / "chain8.onnx", 8, rows=8),
        chain_model(exports / "chain16.onnx", 16, rows=8),
    )


def _chain_night(tmp_path, lab, model: Path, out: str, **options):
    """One fleet run of ``model`` as the lab's ``chain`` on every board."""
    models = tmp_path / f"models-{out}.toml"
    models.write_text(f'[models.chain]\npath = "{model}"\n')
    # At most 30 timed calls a run: the p-values of 30 against 30 values stay above 1e-17.
    # Warm-up 0.05-0.2 s, not SMALL_PLAN's 0.2-0.5 s (up to 15 runs here): a MatMul chain
    # is warm after its first calls, and the pairs' verdict compares runs warmed alike,
    # interleaved.
    plan = {**SMALL_PLAN, "latency_max_runs": 30, "warmup_min_s": 0.05, "warmup_max_s": 0.2}
    opts = FleetOptions(
        out_dir=tmp_path / out, plan_overrides=plan, retries=0, html_pages=False, **options
    )
    return FleetRunner(load_lab(lab), load_models(models), opts).run()


@pytest.mark.slow
def test_fleet_run_against_a_baseline_repeats_an_unknown_verdict_in_pairs(
    tmp_path, agents, test_helper
):
    from edgequal.host.judge.report_file import load_report

    lab = write_lab(tmp_path, agents(1))
    chain8, chain16 = _chain_models(tmp_path, test_helper)
    assert _chain_night(tmp_path, lab, chain8, "night-1").runs[0].report
    # One run a side: the first verdict is UNKNOWN (no spread known). A policy that can
    # decide nothing (a DIFFERENT test at 1e-12, and twice the layers far outside a 20 %
    # SAME band) keeps every verdict of the pairs UNKNOWN too.
    undecidable = tmp_path / "undecidable.toml"
    undecidable.write_text(
        '[status]\nallowed = ["passed", "degraded", "failed", "inconclusive", "incomplete"]\n'
        "[baseline]\nmin_effect = 0.2\nalpha_different = 1e-12\n"
    )
    result = _chain_night(
        tmp_path,
        lab,
        chain16,
        "night-2",
        policy_path=undecidable,
        baseline_dir=tmp_path / "night-1",
        repeat_pairs=2,
    )
    (run,) = result.runs
    assert run.baseline_verdict == "UNKNOWN" and run.repeat_pairs == 2
    assert run.gate_passed is False and run.attempts == 1  # run again in pairs, not re-run
    assert "still not decided" in run.gate_summary and "2 pairs run interleaved on dev-0" in (
        run.gate_summary
    )
    # The pairs: the baseline's own model (chain8, found by its digest in the exports
    # folder) and the candidate, interleaved on the same board, each signed by it.
    repeats = sorted((tmp_path / "night-2" / "repeats" / "chain@dev-0").iterdir())
    assert [p.name for p in repeats] == [
        "01-baseline.json",
        "02-candidate.json",
        "03-candidate.json",
        "04-baseline.json",
    ]
    known = KnownDevices()
    for path in repeats:
        report = load_report(path, known=known, device="dev-0", require=True)
        want = chain8 if "baseline" in path.name else chain16
        assert report.subjects[0]["name"] == want.name
    index = json.loads((tmp_path / "night-2" / "index.json").read_text())
    assert index["runs"][0]["baseline_verdict"] == "UNKNOWN"
    # The default test levels: the one-run verdict is still UNKNOWN (one run a side proves
    # nothing), so pairs run, and their own spread decides twice the layers: DIFFERENT and
    # slower, a failed gate, from the sixth pair (the first whose runs' split can reach it;
    # the seventh when a neighbour's burst made one pair overlap, as on a busy CI machine).
    decisive = tmp_path / "decisive.toml"
    decisive.write_text(
        undecidable.read_text().split("[baseline]")[0] + "[baseline]\nmin_effect = 0.2\n"
    )
    (run,) = _chain_night(
        tmp_path,
        lab,
        chain16,
        "night-3",
        policy_path=decisive,
        baseline_dir=tmp_path / "night-1",
        repeat_pairs=7,
    ).runs
    assert (run.baseline_verdict, run.gate_passed) == ("DIFFERENT", False), run.gate_summary
    assert run.repeat_pairs in (6, 7) and "a regression" in run.gate_summary
    assert (tmp_path / "night-3" / "repeats").is_dir()


def test_fleet_run_baseline_flags_are_checked_before_any_board(tmp_path, capsys):
    lab = tmp_path / "lab.toml"
    lab.write_text('[lab]\nname = "x"\n[devices.a]\naddress = "grpc://127.0.0.1:1"\n')
    models = tmp_path / "models.toml"
    models.write_text(f'[models.m]\npath = "{tmp_path / "m.onnx"}"\n')
    policy = tmp_path / "p.toml"
    policy.write_text('name = "p"\n')
    run = ["fleet", "run", str(lab), "--models", str(models)]
    assert edgequal_main([*run, "--baseline", str(tmp_path)]) == 2
    assert "--baseline needs --gate POLICY" in capsys.readouterr().err
    assert edgequal_main([*run, "--gate", str(policy), "--baseline", str(tmp_path / "no")]) == 2
    assert "not a folder" in capsys.readouterr().err
    assert edgequal_main([*run, "--repeat-until-decided", "3"]) == 2
    assert "--repeat-until-decided needs --baseline DIR" in capsys.readouterr().err
    argv = [*run, "--gate", str(policy), "--baseline", str(tmp_path), "--repeat-until-decided"]
    assert edgequal_main([*argv, "0"]) == 2
    assert "at least 1 pair" in capsys.readouterr().err
