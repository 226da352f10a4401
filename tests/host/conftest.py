"""Fixtures of the host tests: signed reports from real runs for gate, compare and the report page."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest


def _gate_reports():
    """tests/gate_reports.py, imported once under a private name (tests/ is not a package)."""
    name = "_edgequal_tests_gate_reports"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "gate_reports.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="module")
def reports(tmp_path_factory, example_models):
    """The signed reports of tests/gate_reports.py (produced once per session)."""
    return _gate_reports().produce(tmp_path_factory, example_models)


@pytest.fixture
def known(reports):
    """The local agent's key pinned as device 'local' in this test's own config."""
    return _gate_reports().trust_local(reports)
