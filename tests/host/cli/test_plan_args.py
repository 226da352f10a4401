"""Plan flags shared by qualify and fleet run: parsed into plan fields, shown in the plan line."""

from __future__ import annotations

import pytest
from edgequal.cli.parser import build_parser
from edgequal.cli.plan_args import length_flags
from edgequal.contract.plan import make_plan
from edgequal.host.errors import UsageError
from edgequal.host.present.terminal.summary import plan_line


@pytest.mark.parametrize("value, factor", [("5", 5.0), ("5x", 5.0), ("2.5×", 2.5), ("1", 1.0)])
def test_max_extension_is_a_factor_of_the_plans_latency_time(value, factor):
    args = build_parser().parse_args(["qualify", "m.onnx", "--max-extension", value])
    assert length_flags(args) == {"latency_max_extension": factor}


@pytest.mark.parametrize("value", ["0.5", "three", "-2", "inf", "nan"])
def test_a_bad_max_extension_is_a_usage_error_naming_the_flag(value):
    args = build_parser().parse_args(["qualify", "m.onnx", "--max-extension", value])
    with pytest.raises(UsageError, match="--max-extension must be a factor of at least 1"):
        length_flags(args)


def test_fleet_run_takes_max_extension_too():
    args = build_parser().parse_args(
        ["fleet", "run", "lab.toml", "--models", "m.onnx", "--max-extension", "4"]
    )
    assert length_flags(args)["latency_max_extension"] == 4.0


def test_the_plan_line_states_the_bound_a_latency_loop_may_extend_to():
    assert "latency 3 s (to 9 s for clean calls)," in plan_line(make_plan("quick"))
    flagged = make_plan("quick", latency_min_s=2.0, latency_max_extension=5.0)
    assert "latency 2 s [flag] (to 10 s for clean calls [flag])" in plan_line(flagged)
    untagged = make_plan("quick", preemption_tags=False)
    assert "latency 3 s, no sustained" in plan_line(untagged)


@pytest.mark.parametrize(
    "command", [["qualify", "m.onnx"], ["fleet", "run", "lab.toml", "--models", "m.onnx"]]
)
def test_repeat_is_a_plan_field_of_qualify_and_fleet_run(command):
    args = build_parser().parse_args([*command, "--repeat", "3"])
    assert length_flags(args) == {"repeat": 3}
    with pytest.raises(UsageError, match="--repeat must be at least 1"):
        length_flags(build_parser().parse_args([*command, "--repeat", "0"]))


def test_max_extensions_help_says_what_it_bounds_its_unit_and_default(capsys):
    """Its help said "runs on to FACTOR times its planned time": now which loop it bounds,
    in what unit, its default and what wins over it."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(["qualify", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert (
        "--max-extension FACTOR the longest each input shape's timed latency loop may run "
        "when too few of its calls kept the CPU: FACTOR times its planned seconds (--latency; "
        "at least 0.5 s past them), a number of times such as 3 or 5x (default: 3, at most "
        "100; a plan's latency_max_s, in seconds, wins)"
    ) in text
