"""qualify's flags for providers, limits and scenarios; the summary's scenario and energy lines."""

from __future__ import annotations

import pytest
from edgequal.agent.errors import BadInput
from edgequal.agent.plan import make_plan
from edgequal.agent.qualification import run_measurement
from edgequal.host import render
from edgequal.host.cli import _parser
from edgequal.host.cli_qualify import _plan_from_args


def _qualify_args(*flags):
    return _parser().parse_args(["qualify", "m.onnx", *flags])


def test_flags_become_plan_fields():
    plan = _plan_from_args(
        _qualify_args(
            "--providers",
            "AzureExecutionProvider, CPUExecutionProvider",
            "--memory-limit",
            "512",
            "--phase-timeout",
            "2m",
            "--batch-sizes",
            "8,1,4",
            "--thread-scaling",
            "--server",
            "--server-rate",
            "250",
            "--p99-bound",
            "15ms",
            "--operators",
            "--scenario-time",
            "3s",
        )
    )
    assert plan.providers == ("AzureExecutionProvider", "CPUExecutionProvider")
    assert plan.memory_limit_mb == 512 and plan.phase_timeout_s == 120.0
    assert plan.batch_sizes == (1, 4, 8) and plan.thread_scaling and plan.server
    assert plan.server_rate_per_s == 250.0 and plan.server_p99_ms == pytest.approx(15.0)
    assert plan.operator_profile and plan.scenario_s == 3.0


def test_without_flags_quick_runs_no_scenario():
    plan = _plan_from_args(_qualify_args())
    assert plan.batch_sizes is None and not plan.server and not plan.thread_scaling
    assert not plan.operator_profile and plan.providers is None


def test_a_bad_batch_list_is_one_line():
    with pytest.raises(BadInput, match="cannot read --batch-sizes 'a,b'"):
        _plan_from_args(_qualify_args("--batch-sizes", "a,b"))


@pytest.mark.slow
def test_summary_shows_every_scenario_and_energy(example_models, golden_sets, tmp_path, capsys):
    hwmon = tmp_path / "sys/class/hwmon/hwmon0"
    hwmon.mkdir(parents=True)
    (hwmon / "name").write_text("ina226\n")
    (hwmon / "power1_input").write_text("3000000\n")
    plan = make_plan(
        "quick",
        cold_runs=1,
        warmup_min_s=0.05,
        warmup_max_s=0.5,
        latency_min_runs=50,
        latency_min_s=0.1,
        sustain_s=2.0,
        window_s=1.0,
        idle_power_s=1.0,
        cooldown=False,
        batch_sizes=[1, 2],
        thread_scaling=True,
        server=True,
        server_search_steps=2,
        operator_profile=True,
        scenario_s=0.2,
    )
    out = run_measurement(example_models["dynamic"], golden_sets["dynamic"], plan, root=tmp_path)
    render.print_summary({**out, "run_id": "x"}, "local")
    text = capsys.readouterr().out
    for expected in (
        "Batch sweep (",
        "best batch",
        "Thread scaling (",
        "Server scenario (",
        "highest rate with p99 under the bound",
        "operators by time: ",
        "energy: 3 W (ina226/power1), idle 3 W",
        "mJ/inference",
    ):
        assert expected in text, expected
