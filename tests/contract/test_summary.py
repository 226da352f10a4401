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
