"""The agent's plain-text summary lines, on literal results."""

from __future__ import annotations

import pytest
from edgequal.contract.summary import decisions_text


def _decisions(flips, near, near_flips, total=12):
    return {
        "rule": "threshold:score>0.5",
        "total_cases": total,
        "flips": flips,
        "flip_count": len(flips),
        "near_threshold_count": near,
        "flips_near_threshold": near_flips,
        "flips_near_threshold_count": len(near_flips),
    }


@pytest.mark.parametrize(
    ("decisions", "text"),
    [
        (
            _decisions(["case04"], 1, []),
            "1 of 12 cases flipped (threshold:score>0.5): case04; "
            "the case near the threshold did not flip",
        ),
        (
            _decisions(["case04", "case09"], 3, ["case09"]),
            "2 of 12 cases flipped (threshold:score>0.5): case04, case09; "
            "1 of the 3 cases near the threshold flipped: case09",
        ),
        (
            _decisions([], 3, []),
            "no decision flipped in 12 cases (threshold:score>0.5); "
            "none of the 3 cases near the threshold flipped",
        ),
        (
            _decisions([], 0, [], total=1),
            "no decision flipped in 1 case (threshold:score>0.5); no case was near the threshold",
        ),
        (
            _decisions([f"c{i}" for i in range(10)], 0, []),
            "10 of 12 cases flipped (threshold:score>0.5): c0, c1, c2, c3, c4, c5, c6, c7 and 2 "
            "more; no case was near the threshold",
        ),
    ],
)
def test_decision_flips_name_the_cases_that_flipped(decisions, text):
    assert decisions_text(decisions) == text


def test_a_shape_decided_on_every_call_reads_figures_over_every_call():
    """The agent says "figures over every call", never "over the every call"."""
    from edgequal.contract.summary import format_summary

    figures = dict(count=400, min_ms=1.0, max_ms=3.0, mean_ms=1.2, sd_ms=0.1, cv=0.08)
    figures.update(p50_ms=1.1, p90_ms=1.4, p95_ms=1.5, p99_ms=2.5, p99_9_ms=None)
    entry = {
        "shape": "x=1x4",
        "summary": figures,
        "warmup": {"runs": 20, "seconds": 0.1, "steady": True},
        "preemption": {"calls": 400, "excluded": 100, "clean_enough": False, "needed": 368},
    }
    text = format_summary({"status": "passed", "results": {"latency": {"per_shape": [entry]}}})
    assert "  figures over every call: 100 of 400 calls excluded (preempted); 300 clean" in text
    assert "over the every" not in text


def test_optimization_check_in_one_line():
    from edgequal.contract.summary import optimization_check_text

    check = {
        "compared_with": "all",
        "cause": "optimized_kernels",
        "max_abs": 0.41834,
        "max_abs_unoptimized": 0.017501,
        "flips": ["case01", "case07", "case09"],
        "flips_unoptimized": ["case01"],
    }
    assert optimization_check_text(check) == (
        "optimisation check: max abs 0.418 at all, 3 flips, 0.0175 with graph optimisation "
        "off, 1 flip: the optimised kernels cause the drift"
    )
    assert optimization_check_text({"skipped": "why"}) == "optimisation check not run: why"
