"""qualify's flags for providers, limits and scenarios; the summary's scenario and energy lines."""

from __future__ import annotations

import pytest
from edgequal.cli.parser import build_parser
from edgequal.cli.qualify import _plan_from_args
from edgequal.contract.errors import BadInput
from edgequal.host.present.terminal import summary


def _qualify_args(*flags):
    return build_parser().parse_args(["qualify", "m.onnx", *flags])


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
def test_summary_shows_every_scenario_and_energy(scenario_measurement, capsys):
    """The shared measurement (tests/host/conftest.py): the dynamic example with every
    scenario on a board tree whose rail reads 3 W."""
    out = scenario_measurement
    summary.print_summary({**out, "run_id": "x"}, "local")
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
