"""The host and agent CLIs: one-line errors, exit codes, golden make input forms, profiles."""

from __future__ import annotations

import json

import numpy as np
import pytest
from edgequal.agent.cli import main as agent_main
from edgequal.cli.main import main as edgequal_main
from edgequal.contract.exit_codes import exit_code_for
from edgequal.contract.golden import read_golden
from edgequal.contract.signing import MEASURED_STATUSES
from edgequal.host.examples.catalog import example_inputs

FAST_FLAGS = ["--plan", "quick"]


def test_golden_make_from_one_case_npz(example_models, tmp_path, capsys):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, **example_inputs("classifier", 1)[0])
    out = tmp_path / "g.npz"
    assert (
        edgequal_main(
            [
                "golden",
                "make",
                str(example_models["classifier"]),
                "--inputs",
                str(inputs),
                "--decision",
                "threshold:score>0.5",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    g = read_golden(out)
    assert [c.name for c in g.cases] == ["case0"]
    assert set(g.cases[0].outputs) == {"probs", "score"}
    assert g.decision == "threshold:score>0.5"
    import onnxruntime

    assert g.manifest["reference"]["runtime"] == "onnxruntime"
    assert g.manifest["reference"]["version"] == onnxruntime.__version__
    assert np.isclose(g.cases[0].outputs["probs"].sum(), 1.0, atol=1e-5)
    assert "sha256" in capsys.readouterr().out


def test_golden_make_from_case_slash_input_names_and_a_dir(example_models, tmp_path):
    cases = example_inputs("multi_input", 3)
    many = tmp_path / "many.npz"
    np.savez(many, **{f"c{i}/{k}": v for i, feeds in enumerate(cases) for k, v in feeds.items()})
    out = tmp_path / "g1.npz"
    assert (
        edgequal_main(
            [
                "golden",
                "make",
                str(example_models["multi_input"]),
                "--inputs",
                str(many),
                "-o",
                str(out),
            ]
        )
        == 0
    )
    assert [c.name for c in read_golden(out).cases] == ["c0", "c1", "c2"]
    d = tmp_path / "cases"
    d.mkdir()
    for i, feeds in enumerate(cases):
        np.savez(d / f"sample{i}.npz", **feeds)
    out2 = tmp_path / "g2.npz"
    assert (
        edgequal_main(
            [
                "golden",
                "make",
                str(example_models["multi_input"]),
                "--inputs",
                str(d),
                "-o",
                str(out2),
            ]
        )
        == 0
    )
    g2 = read_golden(out2)
    assert [c.name for c in g2.cases] == ["sample0", "sample1", "sample2"]
    # Same inputs, same reference outputs, whichever form they came in.
    np.testing.assert_array_equal(
        g2.cases[1].outputs["out"], read_golden(out).cases[1].outputs["out"]
    )


def test_golden_make_with_given_outputs(example_models, tmp_path):
    feeds = example_inputs("micro", 1)[0]
    inputs, outputs = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(inputs, **feeds)
    np.savez(outputs, y=np.ones((1, 4), np.float32))
    out = tmp_path / "g.npz"
    assert (
        edgequal_main(
            [
                "golden",
                "make",
                str(example_models["micro"]),
                "--inputs",
                str(inputs),
                "--outputs",
                str(outputs),
                "-o",
                str(out),
            ]
        )
        == 0
    )
    g = read_golden(out)
    assert g.manifest["reference"]["runtime"] == "given"
    np.testing.assert_array_equal(g.cases[0].outputs["y"], np.ones((1, 4), np.float32))


def test_golden_make_mismatch_is_one_line_exit_2(example_models, tmp_path, capsys):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, image=np.zeros((1, 3, 30, 32), np.float32))
    rc = edgequal_main(
        [
            "golden",
            "make",
            str(example_models["classifier"]),
            "--inputs",
            str(inputs),
            "-o",
            str(tmp_path / "g.npz"),
        ]
    )
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert (
        "input 'image': model expects float32 [1,3,32,32], file holds float32 [1,3,30,32]"
        in " ".join(err.split())
    )
    assert "Traceback" not in err
    assert not (tmp_path / "g.npz").exists()


def test_golden_make_bad_decision_rule(example_models, tmp_path, capsys):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, **example_inputs("classifier", 1)[0])
    rc = edgequal_main(
        [
            "golden",
            "make",
            str(example_models["classifier"]),
            "--inputs",
            str(inputs),
            "--decision",
            "threshold:score",
            "-o",
            str(tmp_path / "g.npz"),
        ]
    )
    assert rc == 2
    assert "decision rule" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["empty", "truncated", "random"])
def test_agent_measure_broken_model_exit_2_and_a_finding(
    kind, example_models, tmp_path, capsys, corrupt_model_bytes
):
    bad = corrupt_model_bytes(kind, example_models["classifier"], tmp_path / "bad.onnx")
    rc = agent_main(["measure", str(bad), "--json"])
    assert rc == 2
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "failed"
    assert out["findings"][0]["kind"] == "model_rejected"


def test_agent_measure_unknown_runtime_and_negative_duration(example_models, capsys):
    assert agent_main(["measure", str(example_models["micro"]), "--runtime", "tensorrt"]) == 2
    assert "unknown runtime 'tensorrt'" in capsys.readouterr().err
    assert agent_main(["measure", str(example_models["micro"]), "--sustain=-3s"]) == 2
    assert "must not be negative" in capsys.readouterr().err


def test_agent_measure_missing_model_file(tmp_path, capsys):
    assert agent_main(["measure", str(tmp_path / "nope.onnx")]) == 2
    assert "model file not found" in capsys.readouterr().err


@pytest.mark.slow
def test_qualify_applies_the_named_profile(example_models, tmp_path, capsys, short_plan):
    rc = edgequal_main(
        [
            "qualify",
            str(example_models["micro"]),
            "--profile",
            "raspberry-pi/5",
            "-o",
            str(tmp_path / "r.json"),
            "--json",
            *short_plan,
        ]
    )
    predicate = json.loads(capsys.readouterr().out)
    assert predicate["status"] in MEASURED_STATUSES
    assert rc == exit_code_for(predicate["status"], predicate["findings"])
    assert predicate["plan"]["profile"] == "raspberry-pi/5"
    assert predicate["plan"]["max_temp_c"] == 85.0
    # The profile's throttle temperature, indicators and thread count are part of the plan.
    assert predicate["plan"]["trip_c"] == 80.0 and predicate["plan"]["threads"] == 4
    assert predicate["plan"]["throttle_indicators"] == [
        "get_throttled",
        "clock_drop",
        "passive_trip",
    ]
    # quick runs no sustained phase: the profile adds none.
    assert predicate["plan"]["sustain_s"] == 0.0 and "sustained" not in predicate["results"]
    assert predicate["plan"]["sources"]["max_temp_c"] == "profile"
    assert (tmp_path / "r.json").exists()


@pytest.mark.slow
def test_qualify_prints_the_effective_plan_before_it_starts(
    example_models, tmp_path, capsys, short_plan
):
    from edgequal.contract.plan import Plan
    from edgequal.host.present.terminal.summary import plan_line

    report = tmp_path / "r.json"
    args = ["qualify", str(example_models["micro"]), *FAST_FLAGS, "-o", str(report)]
    args += [*short_plan, "--profile", "generic/linux-x86_64", "--threads", "1"]
    rc = edgequal_main(args)
    out = capsys.readouterr().out
    line = (
        "plan: quick (cold load ×1 [flag], warm-up 0.2 s [flag], latency 0.2 s [flag] "
        "(to 0.7 s for clean calls), "
        "no sustained phase) · threads 1 [flag] · profile generic/linux-x86_64"
    )
    # The line comes first, before the summary; the signed plan is the one it describes.
    assert out.splitlines()[0] == line
    assert out.index(line) < out.index("edgequal ")
    predicate = _report_predicate(report)
    assert rc == exit_code_for(predicate["status"], predicate["findings"])
    plan = predicate["plan"]
    assert plan_line(Plan.from_json(plan)) == line
    assert plan["sustain_s"] == 0.0 and plan["trip_c"] == 85.0 and plan["threads"] == 1
    assert plan["sources"]["threads"] == "flag" and plan["sources"]["trip_c"] == "profile"
    assert plan["sources"]["cold_runs"] == "flag" and plan["sources"]["sustain_s"] == "preset"
    assert plan["sources"]["latency_min_runs"] == "preset"


def _report_predicate(path) -> dict:
    import base64

    envelope = json.loads(path.read_bytes())
    return json.loads(base64.b64decode(envelope["payload"]))["predicate"]


def test_qualify_refuses_a_plan_its_gate_policy_would_fail(example_models, tmp_path, capsys):
    from pathlib import Path

    nightly = Path(__file__).resolve().parents[3] / "docs" / "policies" / "nightly.toml"
    report = tmp_path / "r.json"
    args = ["qualify", str(example_models["micro"]), "--gate", str(nightly), "-o", str(report)]
    assert edgequal_main(args) == 2
    err = capsys.readouterr().err
    assert "policy nightly needs plan standard (sustained phase); this run would be quick" in err
    assert "--plan standard" in err and not report.exists()


def test_qualify_unknown_device_is_bad_usage_naming_the_known_ones(example_models, capsys):
    assert edgequal_main(["qualify", str(example_models["micro"]), "--device", "nosuchboard"]) == 2
    assert "unknown device 'nosuchboard' (known: local)" in capsys.readouterr().err


@pytest.mark.slow
def test_qualify_over_ssh_from_the_cli_pins_on_first_use(
    sshd_server, agent_cmd, example_models, short_plan, tmp_path, capsys
):
    args = [
        "qualify",
        str(example_models["micro"]),
        "--device",
        sshd_server.url,
        "--known-hosts",
        str(sshd_server.known_hosts),
        "--ssh-key",
        str(sshd_server.client_key),
        "--agent-cmd",
        # The board's state in this test's own directory, not the user's: another run of
        # this suite beside it would hold ~/.local/state/edgequal-agent.
        f"{agent_cmd} --state-dir {tmp_path / 'board-state'}",
        *short_plan,
        "--sustain",
        "0",
        "-o",
        str(tmp_path / "r.json"),
        "--json",
    ]
    rc = edgequal_main(args)
    out, err = capsys.readouterr()
    predicate = json.loads(out)
    assert predicate["status"] in MEASURED_STATUSES, err
    assert rc == exit_code_for(predicate["status"], predicate["findings"])
    # Same envelope format as over gRPC: it verifies by device name through the CLI.
    from edgequal.host.devices.trust import KnownDevices, default_device_name

    name = default_device_name(sshd_server.url.removeprefix("ssh://"))
    assert KnownDevices().get(name).address == sshd_server.url
    assert edgequal_main(["verify", str(tmp_path / "r.json"), "--device", name]) == 0
    # Second use finds the pinned entry by its address.
    capsys.readouterr()
    rc = edgequal_main(args)
    out, err = capsys.readouterr()
    assert out, (rc, err)
    predicate = json.loads(out)
    assert predicate["status"] in MEASURED_STATUSES
    assert rc == exit_code_for(predicate["status"], predicate["findings"])
    assert [e.name for e in KnownDevices().list()] == [name]


@pytest.mark.slow
def test_qualify_without_output_writes_into_the_state_dir_and_shows_the_run_id_first(
    example_models, short_plan, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    model_dir = tmp_path / "models[v2]"
    model_dir.mkdir()
    model = model_dir / "micro.onnx"
    model.write_bytes(example_models["micro"].read_bytes())
    # --debug after the subcommand is the global option.
    rc = edgequal_main(["qualify", str(model), *short_plan, "--sustain", "0", "--debug"])
    out, err = capsys.readouterr()
    reports = list((tmp_path / "state" / "edgequal" / "reports").glob("micro-*.report.json"))
    assert len(reports) == 1
    status = "inconclusive" if "INCONCLUSIVE" in out else "passed"  # a busy machine's doing
    assert rc == exit_code_for(status, [])
    assert not list(tmp_path.glob("*.report.json"))
    assert f"signed report: {reports[0]}" in out
    run_id = out.split(" run ", 1)[1].split()[0]
    # In a log (not a terminal) the run id comes as soon as the agent accepts the run:
    # after the upload, before any phase of the run.
    lines = err.splitlines()
    accepted = lines.index(f"run {run_id} accepted by the device")
    assert lines[accepted - 1] == "upload: done"
    assert accepted < lines.index("cold load: running")


def test_names_with_brackets_reach_the_screen_intact(tmp_path, capsys):
    missing = tmp_path / "models[v2]" / "m.onnx"
    assert edgequal_main(["qualify", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"model file not found: {missing}" in err
    assert edgequal_main(["devices", "trust", "a[/b]", "grpc://[/x]:1"]) in (2, 3)
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("edgequal: error:") and "Traceback" not in err
    assert "[/x]" in err


@pytest.mark.slow
def test_dynamic_input_without_shape_names_the_shape_and_an_example(example_models, capsys):
    rc = edgequal_main(["qualify", str(example_models["dynamic"]), "--sustain", "0"])
    assert rc == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "input 'image' has dynamic dimensions: float32 [batch?, 3, height?, width?]" in err
    assert "--shape image=1x3x224x224" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["--debug", "qualify", "m.onnx"],
        ["qualify", "m.onnx", "--debug"],
        ["golden", "make", "m.onnx", "--inputs", "i.npz", "-o", "g.npz", "--debug"],
        ["devices", "list", "--debug"],
        ["--debug", "agent", "status", "pi5"],
    ],
)
def test_global_options_stand_before_or_after_the_subcommand(argv):
    from edgequal.cli.parser import build_parser

    assert build_parser().parse_args(argv).debug is True
    assert build_parser().parse_args([a for a in argv if a != "--debug"]).debug is False


def test_the_command_tree_is_built_once_and_parsing_leaves_it_as_it_was():
    """``main`` parses every call against one parser (``cli/main.py`` ``_parser``): a flag
    given in one call, repeatable or not, is absent from the next."""
    from edgequal.cli.main import _parser

    first = _parser().parse_args(["qualify", "m.onnx", "--shape", "x=1x3", "--shape", "y=2"])
    assert first.shape == ["x=1x3", "y=2"]
    again = _parser().parse_args(["qualify", "m.onnx", "--debug"])
    assert _parser() is _parser()
    assert again.shape == [] and again.debug is True and not hasattr(again, "argv")
    assert _parser().parse_args(["qualify", "m.onnx"]).debug is False


def test_qualify_help_explains_every_option_and_ends_with_examples():
    from edgequal.cli.parser import build_parser

    parser = build_parser()
    qualify = next(a for a in parser._actions if a.dest == "command").choices["qualify"]
    for action in qualify._actions:
        assert action.help, f"{action.option_strings or action.dest} has no help"
    text = qualify.format_help()
    assert "quick (default, CI)" in text and "standard:" in text and "soak:" in text
    lines = text.rstrip().splitlines()
    assert lines[-4] == "examples:"
    assert all(line.startswith("  edgequal qualify ") for line in lines[-3:])


def test_agent_install_passes_every_option_on(monkeypatch, tmp_path, capsys):
    from edgequal.host.install import agent

    seen = {}

    def fake_install(url, **kwargs):
        seen.update(url=url, **kwargs)
        return "installed"

    monkeypatch.setattr(agent, "install_agent", fake_install)
    argv = ["agent", "install", "ssh://pi@bench", "--ssh-key", str(tmp_path / "k")]
    argv += ["--prefix", "/opt/eq", "--python", "python3.11", "--system-site-packages"]
    assert edgequal_main(argv) == 0
    assert seen["url"] == "ssh://pi@bench"
    assert seen["ssh_options"].key_file == tmp_path / "k"
    assert seen["ssh_options"].known_hosts is None  # not given: ~/.ssh/known_hosts
    assert (seen["prefix"], seen["python"], seen["system_site_packages"]) == (
        "/opt/eq",
        "python3.11",
        True,
    )
    assert "installed" in capsys.readouterr().out


def test_cold_runs_warmup_and_latency_flags_change_the_presets_lengths_and_say_so():
    from edgequal.cli.parser import build_parser
    from edgequal.cli.qualify import _plan_from_args

    args = build_parser().parse_args(
        ["qualify", "m.onnx", "--cold-runs", "1", "--warmup", "0.2s", "--latency", "0.2s"]
    )
    plan = _plan_from_args(args)
    assert (plan.cold_runs, plan.latency_min_s, plan.latency_min_runs) == (1, 0.2, 200)
    assert (plan.warmup_min_s, plan.warmup_min_runs) == (0.2, 10)
    assert plan.sources["cold_runs"] == "flag" and plan.sources["latency_min_s"] == "flag"
    assert plan.sources["warmup_min_s"] == "flag"
    assert plan.sources["latency_min_runs"] == "preset"
    default = _plan_from_args(build_parser().parse_args(["qualify", "m.onnx"]))
    assert (default.cold_runs, default.warmup_min_s, default.latency_min_s) == (3, 1.0, 3.0)
    fleet = build_parser().parse_args(
        ["fleet", "run", "lab.toml", "--models", "m.toml"] + ["--latency", "1s"]
    )
    assert fleet.latency == "1s" and fleet.cold_runs is None


@pytest.mark.slow
def test_qualify_repeat_writes_one_report_holding_every_run_and_their_spread(
    example_models, tmp_path, capsys, short_plan
):
    """``--repeat 3``: one signed report with three runs' figures, their median, CV and
    0.2-trimmed mean (recomputed here from the runs), shown in the summary and gated."""
    from edgequal.contract.preemption import decisive_summary
    from edgequal.contract.stats import repeat_spread

    report = tmp_path / "r.json"
    args = ["qualify", str(example_models["micro"]), *FAST_FLAGS, *short_plan, "--repeat", "3"]
    rc = edgequal_main([*args, "-o", str(report)])
    out = " ".join(capsys.readouterr().out.split())
    predicate = _report_predicate(report)
    assert rc == exit_code_for(predicate["status"], predicate["findings"])
    assert predicate["plan"]["repeat"] == 3 and predicate["plan"]["sources"]["repeat"] == "flag"
    repeats = predicate["results"]["repeats"]
    assert repeats["n"] == 3 and [r["run"] for r in repeats["runs"]] == [1, 2, 3]
    p50s = [r["figures"]["p50_ms"] for r in repeats["runs"]]
    assert repeats["spread"]["p50_ms"] == repeat_spread(p50s)
    # Run 1's figures are the report's own.
    first = decisive_summary(predicate["results"]["latency"]["per_shape"][0])
    assert repeats["runs"][0]["figures"]["p50_ms"] == first["p50_ms"]
    assert "repeated runs (3, cool-down between):" in out
    assert f"p50: median {repeats['spread']['p50_ms']['median']:.4g}, CV" in out
    policy = tmp_path / "gate.toml"
    policy.write_text("[repeat]\nmin_runs = 3\nmax_cv = 100.0\n")
    assert edgequal_main(["gate", str(report), "--policy", str(policy)]) in (0, 1)
    gate_out = capsys.readouterr().out
    assert "repeat.max_cv[p50_ms]" in gate_out or "CV of p50 over 3 runs" in gate_out
