"""The command-line text both CLIs read into plan fields (``contract/cli_args.py``)."""

from __future__ import annotations

import pytest
from edgequal.contract.cli_args import parse_duration_s, parse_shape_args
from edgequal.contract.errors import BadInput


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90.0),
        ("10m", 600.0),
        ("10 min", 600.0),
        ("1.5h", 5400.0),
        ("500ms", 0.5),
        ("7", 7.0),
    ],
)
def test_durations_in_their_units(text, seconds):
    assert parse_duration_s(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["-5s", "ten minutes", "5d", ""])
def test_durations_refused(text):
    with pytest.raises(BadInput):
        parse_duration_s(text)


def test_shapes_by_input_name():
    assert parse_shape_args(["x=1x3x224x224", "mask=1X8"]) == {
        "x": [1, 3, 224, 224],
        "mask": [1, 8],
    }
    assert parse_shape_args([]) == {}


@pytest.mark.parametrize("item", ["x", "=1x3", "x=", "x=1x0", "x=1xa"])
def test_shapes_refused_with_the_form_to_write(item):
    with pytest.raises(BadInput, match="cannot read --shape") as info:
        parse_shape_args([item])
    assert info.value.hint == "write NAME=1x3x224x224"
