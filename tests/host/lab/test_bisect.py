"""The search of ``edgequal bisect runtime`` (host/lab/bisect.py) on recorded figures: which
versions it measures in which order, what it calls bad, what it names.

Each run the search asks for is answered from a table of figures per version (a clean p50
in ms, an operator profile, or outputs that moved): the run's ``results.runtime_envs`` in
the shape the agent writes it (docs/report-schema.md), the latency samples drawn around
the recorded p50 with a 2 % spread, and its four ABBA segments' p50s (the units the verdict
weighs) with a 1 % spread. The real run, install and report of two and three
real onnxruntime versions is tests/host/cli/test_bisect.py's.
"""

from __future__ import annotations

import base64

import numpy as np
import pytest
from edgequal.host.errors import HostError, UsageError
from edgequal.host.judge.policy import BASELINE_DEFAULTS
from edgequal.host.judge.verdict import VERDICT_DEFAULTS
from edgequal.host.lab.bisect import (
    bisect_versions,
    judge_trial,
    parse_pins,
    parse_version_list,
    versions_between,
    wheelhouse_versions,
)

SETTINGS = {**VERDICT_DEFAULTS, **BASELINE_DEFAULTS}
VERSIONS = ["1.19.0", "1.20.1", "1.21.0", "1.22.0", "1.23.0", "1.24.1", "1.25.0"]


def _samples_b64(p50_ms: float, seed: int, n: int = 400) -> str:
    rng = np.random.default_rng(seed)
    ns = rng.normal(p50_ms, p50_ms * 0.02, n) * 1e6
    return base64.b64encode(ns.astype("<i8").tobytes()).decode()


def _segments(p50_ms: float, seed: int, rounds: int = 4) -> list[dict]:
    rng = np.random.default_rng(seed + 1000)
    return [
        {"round": r, "runs": 100, "p50_ms": float(p50_ms * rng.lognormal(0.0, 0.01))}
        for r in range(rounds)
    ]


def _entry(name: str, figures: dict, seed: int) -> dict:
    if figures.get("failed"):
        return {"name": name, "status": "failed", "reason": figures["failed"]}
    return {
        "name": name,
        "status": "ok",
        "latency": {
            "per_shape": [
                {
                    "summary": {"p50_ms": figures["p50"], "count": 400},
                    "samples_ns_b64": _samples_b64(figures["p50"], seed),
                    "segments": _segments(figures["p50"], seed),
                }
            ]
        },
        "operators": {"profile": {"operators": figures.get("ops", [])}},
    }


def _run(good: dict, cand: dict, seed: int, interfered: bool = False) -> dict:
    """One run's predicate: ``g`` (the good version) and ``c`` side by side."""
    max_abs = cand.get("moved", 0.0)
    pair = {
        "baseline": "g",
        "candidate": "c",
        "measured": True,
        "interference": {
            "segments": 8,
            "interfered": 2 if interfered else 0,
            "decisive": not interfered,
        },  # fmt: skip
        "drift_between": {
            "passed": max_abs <= 1e-4,
            "outputs": {"y": {"max_abs": max_abs, "exact": max_abs == 0, "psnr_db": 90.0}},
        },
        "flips_between": cand.get("flips", 0),
    }
    return {
        "run_id": f"run-{seed}",
        "status": "passed",
        "results": {
            "runtime_envs": {
                "baseline": "g",
                "environments": [_entry("g", good, seed), _entry("c", cand, seed + 1)],
                "pairs": [pair],
            }
        },
    }


class Board:
    """Answers each run from recorded figures per version; keeps the order of the runs."""

    def __init__(self, figures: dict[str, dict], interfered: set[str] = frozenset()):
        self.figures = figures
        self.interfered = set(interfered)
        self.runs: list[tuple[str, str]] = []

    def __call__(self, good: str, candidate: str) -> dict:
        self.runs.append((good, candidate))
        seed = 10 * len(self.runs)
        predicate = _run(
            self.figures[good], self.figures[candidate], seed, candidate in self.interfered
        )
        return {
            "predicate": predicate,
            "path": f"{candidate}.report.json",
            "baseline_env": "g",
            "candidate_env": "c",
        }


def _ops(conv_us: float, resize_us: float) -> list[dict]:
    return [
        {"op_type": "Conv", "us_per_run": conv_us},
        {"op_type": "Resize", "us_per_run": resize_us},
        {"op_type": "Relu", "us_per_run": 5.0},
    ]


def test_versions_run_from_good_to_bad_without_prereleases():
    listed = ["1.22.0", "1.19.0", "1.20.0rc1", "1.21.1", "1.18.0", "1.23.0.dev5", "1.25.0"]
    assert versions_between(listed, "1.19.0", "1.22.0") == ["1.19.0", "1.21.1", "1.22.0"]
    # The endpoints stand whether the index lists them or not; a newer good one runs backwards.
    assert versions_between(listed, "1.25.0", "1.20.1") == ["1.25.0", "1.22.0", "1.21.1", "1.20.1"]
    assert parse_version_list(" 1.20.1, 1.21.0 ,") == ["1.20.1", "1.21.0"]
    with pytest.raises(UsageError) as bad:
        parse_version_list("1.20.1,latest")
    assert bad.value.exit_code == 2 and "'latest' is not a version number" in str(bad.value)


def test_a_wheelhouse_lists_the_versions_it_holds_from_its_file_names(tmp_path):
    for name in (
        "onnxruntime-1.19.0-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
        "onnxruntime-1.20.1-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
        "onnxruntime-1.20.1-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
        "onnxruntime_gpu-1.21.0-cp311-cp311-manylinux_2_28_x86_64.whl",
        "numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.whl",
        "ai_edge_litert-1.1.2-cp311-cp311-manylinux_2_17_x86_64.whl",
    ):
        (tmp_path / name).write_bytes(b"")
    assert wheelhouse_versions(tmp_path, "onnxruntime") == ["1.19.0", "1.20.1"]
    assert wheelhouse_versions(tmp_path, "ai-edge-litert") == ["1.1.2"]
    with pytest.raises(UsageError):
        wheelhouse_versions(tmp_path / "missing", "onnxruntime")


@pytest.mark.parametrize(
    ("good", "bad", "message"),
    [
        ("onnxruntime==1.19.0", "ai-edge-litert==1.1.2", "--good names onnxruntime and --bad ai-edge-litert"),
        ("onnxruntime==1.19.0", "onnxruntime==1.19", "--good and --bad name the same version 1.19.0"),
        ("onnxruntime>=1.19", "onnxruntime==1.20.1", "cannot read runtime requirement"),
        ("torch==2.0.0", "torch==2.1.0", "torch is not a runtime edgequal measures"),
    ],
)  # fmt: skip
def test_pins_name_one_runtime_and_two_versions(good, bad, message):
    with pytest.raises(Exception) as refused:
        parse_pins(good, bad)
    assert refused.value.exit_code == 2 and message in str(refused.value)


def test_binary_search_names_the_first_slower_version_and_the_operators_that_moved():
    # 10 ms up to 1.22.0, 13 ms from 1.23.0 on: Conv +44 %, Resize +210 %.
    figures = {
        v: {"p50": 10.0, "ops": _ops(100.0, 10.0)} if i < 4 else {"p50": 13.0, "ops": _ops(144.0, 31.0)}
        for i, v in enumerate(VERSIONS)
    }  # fmt: skip
    board = Board(figures)
    seen = []
    result = bisect_versions("onnxruntime", VERSIONS, board, "p50", SETTINGS, seen.append)
    # The bad one first (is it reproducible?), then the middle of what is still in question.
    assert board.runs == [("1.19.0", "1.25.0"), ("1.19.0", "1.22.0"), ("1.19.0", "1.23.0")]
    assert [(t.version, t.verdict, t.bad) for t in seen] == [
        ("1.25.0", "DIFFERENT", True),
        ("1.22.0", "SAME", False),
        ("1.23.0", "DIFFERENT", True),
    ]
    assert (result.status, result.last_good, result.first_bad, result.exit_code) == (
        "found",
        "1.22.0",
        "1.23.0",
        0,
    )
    assert result.ratio == pytest.approx(1.3, abs=0.02)
    conv, resize = result.operators[0], result.operators[1]
    assert (conv["op_type"], conv["us_before"], conv["us_after"]) == ("Conv", 100.0, 144.0)
    assert resize["ratio"] == pytest.approx(3.1)
    assert (
        result.headline()
        == "first bad among the versions tried: onnxruntime 1.23.0 (p50 +30 % vs 1.22.0; "
        "Conv +44 %, Resize +210 %); tried against 1.19.0: 1.22.0 good, 1.23.0 bad, 1.25.0 bad"
    )
    data = result.to_json()
    assert data["exit_code"] == 0 and [t["version"] for t in data["trials"]] == [
        "1.25.0",
        "1.22.0",
        "1.23.0",
    ]
    assert data["trials"][0]["report"] == "1.25.0.report.json"


def test_a_bad_version_the_same_as_the_good_one_is_not_reproducible():
    board = Board({v: {"p50": 10.0} for v in VERSIONS})
    result = bisect_versions("onnxruntime", VERSIONS, board, "p50", SETTINGS)
    assert board.runs == [("1.19.0", "1.25.0")]  # nothing bisected
    assert (result.status, result.exit_code, result.first_bad) == ("not_reproducible", 1, None)
    assert result.headline().startswith(
        "not reproducible: onnxruntime 1.25.0 is not DIFFERENT from 1.19.0 on p50 (SAME: "
    )


def test_a_faster_version_between_is_not_the_regression():
    # 1.21.0 to 1.22.0 got faster (DIFFERENT, the other way); the slowdown came at 1.24.1.
    p50 = {
        "1.19.0": 10,
        "1.20.1": 10,
        "1.21.0": 7,
        "1.22.0": 7,
        "1.23.0": 7,
        "1.24.1": 14,
        "1.25.0": 14,
    }
    board = Board({v: {"p50": float(ms)} for v, ms in p50.items()})
    result = bisect_versions("onnxruntime", VERSIONS, board, "p50", SETTINGS)
    assert [c for _, c in board.runs] == ["1.25.0", "1.22.0", "1.23.0", "1.24.1"]
    assert result.trials[1].verdict == "DIFFERENT" and result.trials[1].bad is False
    assert (result.last_good, result.first_bad) == ("1.23.0", "1.24.1")
    assert result.ratio == pytest.approx(2.0, abs=0.05)


def test_a_run_with_interference_is_measured_again_then_left_undecided():
    figures = {v: {"p50": 10.0 if i < 4 else 13.0} for i, v in enumerate(VERSIONS)}
    board = Board(figures, interfered={"1.22.0"})
    result = bisect_versions("onnxruntime", VERSIONS, board, "p50", SETTINGS, retries=1)
    assert [c for _, c in board.runs] == ["1.25.0", "1.22.0", "1.22.0"]
    assert result.trials[-1].verdict == "UNKNOWN"
    assert result.trials[-1].why == "2 of 8 segments waited for a CPU: not decisive"
    assert (result.status, result.exit_code, result.last_good, result.first_bad) == (
        "undecided",
        1,
        "1.19.0",
        "1.25.0",
    )
    assert result.headline().startswith(
        "undecided: the first bad onnxruntime version is after 1.19.0"
    )


def test_drift_moved_outputs_and_flipped_decisions_are_bad_identical_ones_good():
    figures = {v: {"p50": 10.0} for v in VERSIONS}
    figures["1.24.1"] = {"p50": 10.0, "moved": 3e-6}  # within the tolerance: not bad
    figures["1.25.0"] = {"p50": 10.0, "moved": 2e-3, "flips": 2}
    board = Board(figures)
    result = bisect_versions("onnxruntime", VERSIONS, board, "drift", SETTINGS)
    assert [c for _, c in board.runs] == ["1.25.0", "1.22.0", "1.23.0", "1.24.1"]
    assert [(t.verdict, t.why) for t in result.trials] == [
        ("DIFFERENT", "2 decisions flip"),
        ("SAME", "identical outputs"),
        ("SAME", "identical outputs"),
        ("SAME", "within the golden set's tolerances (max abs 3e-06)"),
    ]
    assert result.trials[0].figure == 2e-3
    assert (result.last_good, result.first_bad) == ("1.24.1", "1.25.0")
    assert result.headline() == (
        "first bad among the versions tried: onnxruntime 1.25.0 (outputs moved by 0.002 vs "
        "1.19.0; 2 decisions flip); tried against 1.19.0: 1.22.0 good, 1.23.0 good, 1.24.1 good, "
        "1.25.0 bad"
    )


def test_with_one_version_between_the_first_bad_is_among_those_tried():
    """Only 1.22.0 lay between 1.19.0 and 1.32.0: 1.32.0 is the first bad of the versions
    tried, not of every release, and the line says so and names them."""
    versions = ["1.19.0", "1.22.0", "1.32.0"]
    board = Board({"1.19.0": {"p50": 10.0}, "1.22.0": {"p50": 10.0}, "1.32.0": {"p50": 13.0}})
    result = bisect_versions("onnxruntime", versions, board, "p50", SETTINGS)
    assert (result.status, result.last_good, result.first_bad) == ("found", "1.22.0", "1.32.0")
    line = result.headline()
    assert line.startswith("first bad among the versions tried: onnxruntime 1.32.0 (p50 +30 %")
    assert line.endswith("; tried against 1.19.0: 1.22.0 good, 1.32.0 bad")
    assert not line.startswith("first bad: ")


def test_a_version_that_fails_is_bad_and_a_failed_good_one_stops_the_search():
    good = {"p50": 10.0}
    failed = {"failed": "broken: importing onnxruntime kills the process with SIGSEGV"}
    judged = judge_trial(_run(good, failed, 1), "g", "c", "p50", SETTINGS)
    assert judged["verdict"] == "DIFFERENT" and judged["why"].startswith(
        "failed: broken: importing"
    )
    with pytest.raises(HostError) as stopped:
        judge_trial(_run(failed, good, 1), "g", "c", "p50", SETTINGS)
    assert stopped.value.exit_code == 3 and "the good version's environment g failed" in str(
        stopped.value
    )
    incomplete = {
        "run_id": "r1",
        "status": "incomplete",
        "reason": "agent restarted",
        "results": {},
    }
    with pytest.raises(
        HostError, match=r"run r1 measured no runtime environments \(incomplete: agent restarted\)"
    ):
        judge_trial(incomplete, "g", "c", "drift", SETTINGS)
