"""Fixtures of the library's tests: the signed reports of real runs the host tests share."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def reports(tmp_path_factory, example_models, test_helper):
    """tests/gate_reports.py's signed reports (produced once per session, shared)."""
    return test_helper("gate_reports").produce(tmp_path_factory, example_models)
