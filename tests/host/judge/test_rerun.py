"""``edgequal rerun REPORT``: a real local agent qualifies a small model, the report's sidecar
names the command that made it, and ``rerun`` repeats the signed plan with the same
artifacts (found by digest) and compares the two runs figure by figure."""

from __future__ import annotations

import json
import shutil

import pytest
from edgequal.cli.main import main as edgequal_main
from edgequal.host.devices.reproduce import read_sidecar, sidecar_path
from edgequal.host.devices.trust import KnownDevices
from edgequal.host.judge.report_file import load_report


@pytest.fixture
def micro_golden(tmp_path, example_models):
    """A golden set of three cases for the micro model (reference outputs from onnxruntime)."""
    from edgequal.host.examples.catalog import example_inputs
    from edgequal.host.golden import make_golden

    path = tmp_path / "g.npz"
    cases = {f"c{i}": feeds for i, feeds in enumerate(example_inputs("micro", 3))}
    make_golden(example_models["micro"], cases, path)
    return path


@pytest.mark.slow  # starts a local agent and its workers
def test_rerun_repeats_the_signed_plan_with_the_same_artifacts(
    tmp_path, example_models, micro_golden, short_plan, capsys
):
    model = tmp_path / "models" / "micro.onnx"  # a folder of its own: found only by the sidecar
    model.parent.mkdir()
    shutil.copy(example_models["micro"], model)
    report = tmp_path / "reports" / "micro.report.json"
    argv = ["qualify", str(model), "--golden", str(micro_golden), *short_plan]
    argv += ["--shape", "x=1x4", "-o", str(report)]
    assert edgequal_main(argv) in (0, 1)
    out = " ".join(capsys.readouterr().out.split())
    # The host recorded, beside the report, the command that made it; the summary shows it.
    sidecar = read_sidecar(report)
    assert sidecar_path(report).name == "micro.report.json.reproduce"
    assert sidecar["command"].startswith(f"edgequal qualify {model} --golden {micro_golden}")
    assert sidecar["rerun"] == f"edgequal rerun {report}"
    assert {a["role"]: a["path"] for a in sidecar["artifacts"]} == {
        "model": str(model),
        "golden": str(micro_golden),
    }
    assert f"command: {sidecar['command']}" in out and f"reproduce: edgequal rerun {report}" in out

    # What is tested is that the run repeats, not how steady a shared test machine is (the
    # micro model's 10 µs calls came out 1.66 times slower beside other suites): the
    # lenient policy's minimum effect keeps a run-level DIFFERENT out of it.
    policy = tmp_path / "lenient.toml"
    policy.write_text("[baseline]\nmin_effect = 9.0\n")
    again = tmp_path / "again.report.json"
    rc = edgequal_main(["rerun", str(report), "--policy", str(policy), "-o", str(again), "--json"])
    result = json.loads(capsys.readouterr().out)
    assert rc == 0 and result["exit_code"] == 0 and result["reproduced"] is True
    assert result["different"] == [] and "DIFFERENT" not in result["verdicts"].values()
    # One run a side, no history: however many calls each run made, nothing says how far
    # apart two runs fall, so the p50 is UNKNOWN (never DIFFERENT at p 1e-153, as when its
    # calls were taken for runs), and the verdict says so and what would decide it.
    p50 = next(
        r["verdicts"][1] for r in result["comparison"]["rows"] if r["figure"] == "latency p50 x=1x4"
    )
    assert p50["verdict"] == "UNKNOWN" and p50["spread_source"] == "none"
    assert (p50["n_baseline"], p50["n_candidate"], p50["runs_needed"]) == (1, 1, None)
    assert "--history" in p50["why"] and "--repeat-until-decided" in p50["why"]
    assert p50["baseline_runs"] == [_run_id(report)]
    assert result["same_plan"] is True and result["same_artifacts"] is True
    # Both signed reports hold the same plan and the same artifacts, from the same device.
    first, second = (load_report(p, known=KnownDevices(), require=True) for p in (report, again))
    assert second.predicate["plan"] == first.predicate["plan"]
    assert second.predicate["plan"]["shapes"] == {"x": [1, 4]}
    assert sorted(s["sha256"] for s in second.subjects) == sorted(
        s["sha256"] for s in first.subjects
    )
    assert second.device_name == first.device_name == "local"
    assert second.predicate["run_id"] != first.predicate["run_id"]
    assert read_sidecar(again)["command"].startswith(f"edgequal rerun {report}")


@pytest.mark.slow  # starts a local agent and its workers
def test_rerun_refuses_a_model_of_another_digest(
    tmp_path, example_models, micro_golden, short_plan, capsys
):
    report = tmp_path / "micro.report.json"
    argv = ["qualify", str(example_models["micro"]), "--golden", str(micro_golden)]
    assert edgequal_main([*argv, *short_plan, "-o", str(report)]) in (0, 1)
    capsys.readouterr()
    other = example_models["classifier"]
    rc = edgequal_main(["rerun", str(report), "--model", str(other)])
    err = capsys.readouterr().err
    assert rc == 2
    assert len(err.strip().splitlines()) == 1
    assert f"--model {other} is sha256" in err and "not the report's micro.onnx" in err
    # An approved set keeps the model and golden set beside the device's report: a rerun of
    # that report finds them there by digest, wherever the originals went.
    from edgequal.host.judge.rerun import rerun_inputs

    assert edgequal_main(
        ["approve", str(report), "--model", str(example_models["micro"]), "--golden",
         str(micro_golden), "--into", str(tmp_path / "approved")]
    ) == 0  # fmt: skip
    capsys.readouterr()
    approved = tmp_path / "approved" / "micro"
    inputs = rerun_inputs(approved / "local.report.json", known=KnownDevices())
    assert (inputs.model, inputs.golden) == (approved / "micro.onnx", approved / "g.npz")
    assert (inputs.device, inputs.plan.to_json()) == ("local", first_plan(report))
    # Found nowhere: the sidecar gone and the model not beside the report.
    sidecar_path(report).unlink()
    rc = edgequal_main(["rerun", str(report)])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "the report's micro.onnx" in err and "is not found by its digest" in err


def first_plan(report) -> dict:
    """The plan a report signed."""
    return load_report(report, known=KnownDevices(), require=True).predicate["plan"]


def _row(figure: str, verdict: str | None):
    from edgequal.host.judge.compare import Row

    return Row(figure, "ms", [1.0, 1.0], verdicts=[None, {"verdict": verdict} if verdict else None])


def _run_id(path) -> str:
    return load_report(path, known=KnownDevices(), require=True).predicate["run_id"]


def _runs_report(name: str, p50s: list[float], fastest: float | None = None):
    """A verified report file whose latency shape ran ``len(p50s)`` times (``--repeat``);
    ``fastest``: run 1's fastest call (ms)."""
    from pathlib import Path

    from edgequal.host.judge.report_file import ReportFile

    entry = {"shape": "x=1x4", "summary": {"p50_ms": p50s[0], "count": 1000}}
    if fastest is not None:
        entry["summary"]["min_ms"] = fastest
    results = {"latency": {"per_shape": [entry]}}
    if len(p50s) > 1:
        runs = [{"run": i + 1, "figures": {"p50_ms": v}} for i, v in enumerate(p50s)]
        results["repeats"] = {"n": len(p50s), "runs": runs}
    return ReportFile(Path(f"{name}.json"), {"run_id": name, "results": results}, [], True, "ok")


def test_a_rerun_is_judged_by_every_run_and_the_history_spread():
    from edgequal.host.judge.rerun import judge_rerun
    from edgequal.host.judge.verdict import Spread

    # The case: run 1 of a --repeat 3 report is its fastest (0.982 ms), a plain run
    # a minute later 1.03 ms. By run 1 alone: +4.9 %; by its three runs, inside their spread.
    original = _runs_report("orig", [0.982, 1.011, 1.03])
    result = judge_rerun(original, _runs_report("again", [1.03]))
    v = result.details["latency p50 x=1x4"]
    assert v["verdict"] == "UNKNOWN" and result.exit_code == 0
    assert v["baseline_runs"] == ["orig/1", "orig/2", "orig/3"] and v["candidate_runs"] == ["again"]
    assert v["ratio"] == pytest.approx(1.03 / (0.982 * 1.011 * 1.03) ** (1 / 3))
    # The same three runs again: a rerun that reproduced, 3 vs 3, not DIFFERENT.
    same = judge_rerun(original, _runs_report("again", [1.0, 0.99, 1.02]))
    assert same.details["latency p50 x=1x4"]["n_candidate"] == 3 and same.exit_code == 0
    # One run a side with the board's history (1 % CV over 30 runs): 20 % is beyond it.
    prior = Spread.from_cv(0.01, 30)
    slow = judge_rerun(_runs_report("a", [1.0]), _runs_report("b", [1.2]), prior=prior)
    assert slow.details["latency p50 x=1x4"]["spread_source"] == "history"
    assert slow.different == ["latency p50 x=1x4"] and slow.exit_code == 1
    # The same 20 %, but the rerun's fastest call kept the original's pace (×1.02): one slow
    # session, not the model. Its fastest call 20 % slower too: DIFFERENT.
    a, b = _runs_report("a", [1.0], fastest=0.9), _runs_report("b", [1.2], fastest=0.918)
    session = judge_rerun(a, b, prior=prior)
    v = session.details["latency p50 x=1x4"]
    assert v["verdict"] == "UNKNOWN" and session.exit_code == 0
    assert "×1.200 at the median but ×1.020 at the fastest call" in v["why"]
    slower = judge_rerun(a, _runs_report("b", [1.2], fastest=1.08), prior=prior)
    assert slower.different == ["latency p50 x=1x4"] and slower.exit_code == 1


def test_the_exit_code_is_1_only_when_a_figure_is_different():
    """Reproduced (exit 0) means no figure DIFFERENT: UNKNOWN says the runs cannot tell."""
    from edgequal.host.judge.compare import Comparison
    from edgequal.host.judge.rerun import RerunResult

    def result(*verdicts):
        rows = [_row(f"f{i}", v) for i, v in enumerate(verdicts)]
        return RerunResult(Comparison([], rows, []), same_plan=True, same_artifacts=True)

    assert result("SAME", "UNKNOWN", None).exit_code == 0
    assert result("SAME", "UNKNOWN").headline() == (
        "reproduced: no figure DIFFERENT (1 SAME, 0 DIFFERENT, 1 UNKNOWN)"
    )
    different = result("SAME", "DIFFERENT", "UNKNOWN")
    assert different.exit_code == 1 and different.different == ["f1"]
    assert different.headline() == "not reproduced: f1 DIFFERENT (1 SAME, 1 DIFFERENT, 1 UNKNOWN)"
    assert different.to_json()["verdicts"] == {"f0": "SAME", "f1": "DIFFERENT", "f2": "UNKNOWN"}
