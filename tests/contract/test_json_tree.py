"""contract/json_tree.py: the one walk over a report's nested mappings and lists."""

from __future__ import annotations

import math

import pytest
from edgequal.contract.json_tree import leaves
from edgequal.contract.signing import canonical_json

TREE = {"a": {"b": 1, "c": [2, {"d": 3.5}]}, "e": "x"}


def test_leaves_carry_their_path_and_key():
    assert list(leaves(TREE, "$")) == [
        ("$.a.b", "b", 1),
        ("$.a.c[0]", 0, 2),
        ("$.a.c[1].d", "d", 3.5),
        ("$.e", "e", "x"),
    ]
    assert [p for p, _, _ in leaves(TREE)] == ["a.b", "a.c[0]", "a.c[1].d", "e"]
    assert list(leaves(5)) == [("", None, 5)]


def test_a_list_may_be_one_leaf():
    assert list(leaves(TREE, into_lists=False)) == [
        ("a.b", "b", 1),
        ("a.c", "c", [2, {"d": 3.5}]),
        ("e", "e", "x"),
    ]


def test_signing_names_the_path_of_a_nan():
    with pytest.raises(ValueError, match=r"\$\.a\.c\[1\]\.d is NaN"):
        canonical_json({"a": {"c": [0.5, {"d": math.nan}]}})
