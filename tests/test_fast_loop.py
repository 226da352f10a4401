"""The fast loop's own rules (tests/conftest.py): which mark expressions leave out every slow
test, that the fast loop then runs in one process, and which modules it does not import."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def conftest():
    """tests/conftest.py as pytest imported it (its module name depends on the import mode)."""
    path = str(TESTS / "conftest.py")
    return next(m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == path)


class Options:
    """A stand-in for pytest's config: only the options the hooks read."""

    def __init__(self, markexpr: str = "", **others):
        self.values = {"markexpr": markexpr, **others}

    def getoption(self, name, default=None):
        return self.values.get(name, default)


@pytest.mark.parametrize(
    "markexpr, fast",
    [
        ("not slow", True),
        ("  not   slow ", True),
        ("not slow and not compat", True),
        ("compat and not slow", True),
        ("", False),
        ("slow", False),
        ("not slow or compat", False),  # a slow test marked compat too would run
        ("not (slow)", False),  # not read: the rule stays on the safe side
        ("not slowish", False),
    ],
)
def test_which_mark_expressions_are_the_fast_loop(conftest, markexpr, fast):
    assert conftest.leaves_out_slow(Options(markexpr)) is fast


def test_the_fast_loop_runs_in_one_process_and_the_full_suite_on_one_worker_per_cpu(conftest):
    assert conftest.pytest_xdist_auto_num_workers(Options("not slow")) == 0
    cpus = len(os.sched_getaffinity(0))
    workers = conftest.pytest_xdist_auto_num_workers(Options(""))
    assert workers == min(cpus, conftest.MAX_WORKERS)
    assert conftest.pytest_xdist_auto_num_workers(Options("", eq_device="pi5")) == 0


def test_the_fast_loop_does_not_import_a_module_marked_slow_as_a_whole(conftest, tmp_path):
    whole = tmp_path / "test_whole.py"
    whole.write_text("import pytest\n\npytestmark = pytest.mark.slow\n\ndef test_a():\n    pass\n")
    one = tmp_path / "test_one.py"
    one.write_text(
        "import pytest\n\n@pytest.mark.slow\ndef test_a():\n    pass\n\ndef test_b():\n    pass\n"
    )
    listed = tmp_path / "test_listed.py"
    listed.write_text("import pytest\n\npytestmark = [pytest.mark.slow, pytest.mark.compat]\n")
    fast, full = Options("not slow"), Options("")
    assert conftest.pytest_ignore_collect(whole, fast) is True
    assert conftest.pytest_ignore_collect(whole, full) is None
    assert conftest.pytest_ignore_collect(one, fast) is None
    assert conftest.pytest_ignore_collect(listed, fast) is None  # collected, then deselected
    # The suite's own whole-module marks are the line the rule reads.
    marked = [p.name for p in TESTS.rglob("test_*.py") if conftest.pytest_ignore_collect(p, fast)]
    assert {"test_fuzz.py", "test_end_to_end.py", "test_user_errors.py"} <= set(marked)
