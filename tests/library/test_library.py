"""The library (library/, ``import edgequal``): connect, Device.qualify, the Report's typed
figures, verify and gate; and the CLI as a layer over it (the same report either way)."""

from __future__ import annotations

import json
import subprocess
import sys

import edgequal
import numpy as np
import pytest
from edgequal.cli.main import main as edgequal_main

PLAN_FLAGS = ["--plan", "quick", "--cold-runs", "1", "--latency", "0.1s", "--threads", "1"]
PLAN_FIELDS = {"cold_runs": 1, "latency": "0.1s", "threads": 1}


def test_import_edgequal_loads_nothing_until_a_name_is_used():
    code = (
        "import sys, edgequal, edgequal.agent.cli\n"
        "before = sorted(m for m in sys.modules if m.startswith('edgequal.host'))\n"
        "edgequal.Report\n"
        "print(before, 'edgequal.host.devices.verify' in sys.modules, edgequal.Error.__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]", "True", "HostError"]
    assert {"connect", "verify", "gate", "attest", "export", "Report"} <= set(dir(edgequal))
    with pytest.raises(AttributeError, match="no attribute 'qualifyy'"):
        edgequal.qualifyy  # noqa: B018


@pytest.fixture(scope="module")
def bench(tmp_path_factory, local_agents):
    """A real agent on 127.0.0.1 (edgequal-agent serve), for this module's runs."""
    agent = local_agents.serve(tmp_path_factory.mktemp("bench") / "state")
    yield agent
    agent.stop()


@pytest.fixture
def trusted(bench):
    """The bench agent pinned as device 'bench' in this test's config."""
    from edgequal.host.devices.trust import KnownDevices

    KnownDevices().trust("bench", bench.address, bench.public_key_raw())
    return bench


@pytest.mark.slow  # starts the module's real agent (about 0.7 CPU-s)
def test_errors_are_the_package_exceptions(trusted, tmp_path):
    # A name no device has is bad usage, naming the known ones; nothing was sent.
    with pytest.raises(edgequal.UsageError, match=r"unknown device 'nope' \(known: local, bench\)"):
        edgequal.connect("nope")
    with edgequal.connect("bench") as dev:
        with pytest.raises(edgequal.UsageError, match="model file not found"):
            dev.qualify(tmp_path / "missing.onnx")
        with pytest.raises(edgequal.UsageError, match="cannot read duration 'soon'"):
            dev.plan("quick", sustain="soon")
        assert dev.plan("quick", sustain="2m", threads=1).sustain_s == 120.0
    with pytest.raises(edgequal.Error) as caught:
        edgequal.verify(b"{}")
    assert caught.value.exit_code == 1


@pytest.mark.slow
def test_cli_and_library_give_the_same_report(
    trusted, example_models, golden_sets, tmp_path, capsys
):
    model, golden = example_models["classifier"], golden_sets["classifier"]
    events = []
    with edgequal.connect(trusted.address) as dev:
        assert dev.name == "bench"
        lib = dev.qualify(
            model, golden, out=tmp_path / "lib.json", on_progress=events.append, **PLAN_FIELDS
        )
    assert {("phase", "upload"), ("phase", "signing")} <= {
        (e.get("type"), e.get("phase")) for e in events
    }
    assert capsys.readouterr().out == ""  # the library prints nothing
    assert lib.path.read_bytes() == lib.envelope

    cli_path = tmp_path / "cli.json"
    argv = ["qualify", str(model), "--golden", str(golden), "--device", "bench", *PLAN_FLAGS]
    assert edgequal_main([*argv, "-o", str(cli_path), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    cli = edgequal.verify(cli_path, device="bench", artifacts=[model, golden])
    # The CLI printed exactly the predicate of the report it wrote, and this host issued it.
    assert printed == cli.predicate and cli.issued_here
    # The flags and the library's fields made the same plan; the same device signed both.
    assert cli.run_id != lib.run_id
    assert cli.predicate["plan"] == lib.predicate["plan"]
    assert cli.subjects == lib.subjects and cli.device == lib.device == "bench"
    assert cli.key_fingerprint == lib.key_fingerprint
    assert [e.shape for e in cli.latency.values()] == [e.shape for e in lib.latency.values()]

    # verify and gate: the CLI's verdict is the library's.
    policy = tmp_path / "p.toml"
    policy.write_text('name = "loose"\n[latency]\nmax_p50_ms = 10000\n')
    for report in (lib, cli):
        assert edgequal_main(["gate", str(report.path), "--policy", str(policy), "--json"]) == 0
        from_cli = json.loads(capsys.readouterr().out)
        result = edgequal.gate(report, policy=policy)
        assert result and from_cli == result.to_json()
        assert [c.name for c in result.checks][:1] == ["verify"]
        assert edgequal_main(["verify", str(report.path), "--device", "bench"]) == 0
        assert f"run {report.run_id} signed by device 'bench'" in capsys.readouterr().out


@pytest.mark.slow
def test_two_runs_given_no_path_each_keep_their_report(
    trusted, example_models, tmp_path, monkeypatch
):
    """A report given no path goes to MODEL-TIME.report.json, a name to the second: two
    runs of one model in the same second (here, the name fixed) must not share it."""
    import edgequal.device as device_module

    taken = tmp_path / "reports" / "classifier-20261202T120000.report.json"
    monkeypatch.setattr(device_module, "default_report_path", lambda model: taken)
    with edgequal.connect("bench") as dev:
        first = dev.qualify(example_models["classifier"], **PLAN_FIELDS)
        second = dev.qualify(example_models["classifier"], **PLAN_FIELDS)
    assert first.path == taken
    assert second.path == taken.with_name("classifier-20261202T120000-2.report.json")
    assert first.run_id != second.run_id
    for report in (first, second):
        assert edgequal.verify(report.path, device="bench").run_id == report.run_id
    # Each sidecar sits beside its own report; no temporary file is left behind.
    from edgequal.host.devices.reproduce import sidecar_path

    files = {p for r in (first, second) for p in (r.path, sidecar_path(r.path))}
    assert set(taken.parent.iterdir()) == files


@pytest.mark.slow  # the session's signed reports: several real runs
def test_report_figures_are_the_signed_ones(reports, test_helper):
    from edgequal.contract.preemption import decisive_summary

    known = test_helper("gate_reports").trust_local(reports)
    report = edgequal.verify(reports.classifier, known=known)
    entry = report.predicate["results"]["latency"]["per_shape"][0]
    lat = report.latency[0]
    assert report.latency[entry["shape"]] is not None and len(report.latency) == 1
    assert lat.p50_ms == decisive_summary(entry)["p50_ms"] and lat.count >= 368
    assert lat.p99_ms is not None and lat.p50_ci_ms[0] <= lat.p50_ms <= lat.p50_ci_ms[1]
    samples = lat.samples_ns()
    assert len(samples) == lat.count and np.median(samples) > 0
    with pytest.raises(KeyError, match="no latency for shape 'x=9'"):
        report.latency["x=9"]
    # The classifier's golden score was shifted: real drift and flips (tests/gate_reports.py).
    assert report.flips == report.results["drift"]["decisions"]["flip_count"] > 0
    assert report.drift["score"]["max_abs"] == pytest.approx(0.003, abs=1e-4)
    assert report.cold_load["total_ms"]["median"] > 0
    assert report.status == report.predicate["status"] and report.sustained["verdict"]
    assert report.cause == report.predicate.get("reason")
    assert report.model["name"] == "classifier.onnx" and report.exit_code in (0, 1)

    failing = edgequal.gate(report, policy=_policy(reports, "[drift]\nmax_flip_count = 0\n"))
    assert not failing and bool(failing) is failing.passed is False
    flips = [c for c in failing.failed_checks if c.name == "drift.max_flip_count"]
    assert len(flips) == 1 and flips[0].measured == str(report.flips)
    assert isinstance(failing.checks[0], edgequal.Check)


def _policy(reports, body: str):
    path = reports.classifier.parent / f"policy-{abs(hash(body))}.toml"
    path.write_text(f'name = "t"\n{body}')
    return path


def test_the_flags_of_benchmark_tools_have_edgequal_names():
    """docs/cli.md's table of benchmark tools' flags: --num_threads → --threads, --warmup_runs →
    --warmup-runs, --min_secs → --latency, --enable_op_profiling → --operator-profile, --shapes → --shape."""
    from edgequal.cli.parser import build_parser
    from edgequal.cli.qualify import _plan_from_args

    flags = ["--threads", "2", "--warmup-runs", "7", "--latency", "2s", "--operator-profile"]
    args = build_parser().parse_args(["qualify", "m.onnx", *flags, "--shape", "x=1x3"])
    plan = _plan_from_args(args)
    assert (plan.threads, plan.warmup_min_runs, plan.latency_min_s) == (2, 7, 2.0)
    assert plan.operator_profile is True and plan.shapes == {"x": [1, 3]}
    assert plan.sources["warmup_min_runs"] == "flag"
