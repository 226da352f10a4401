"""The host's rendering: every section of a real measurement prints, absent sensors say so."""

from __future__ import annotations

import pytest
from edgequal.agent.phases.qualification import run_measurement
from edgequal.contract.plan import make_plan
from edgequal.host.present.terminal import summary


def test_sparkline_maps_lowest_to_highest():
    assert summary.sparkline([1, 2, 3, 4, 5, 6, 7, 8]) == "▁▂▃▄▅▆▇█"
    assert summary.sparkline([5, 5, 5]) == "███"
    assert summary.sparkline([10, 0]) == "█▁"


@pytest.mark.slow
def test_summary_of_a_real_measurement_with_sustained_and_drift(
    example_models, golden_sets, tmp_path, capsys
):
    plan = make_plan(
        "quick",
        cold_runs=1,
        warmup_min_s=0.05,
        warmup_max_s=0.5,
        latency_min_runs=50,
        latency_min_s=0.1,
        sustain_s=2.0,
        window_s=1.0,
    )
    out = run_measurement(
        example_models["classifier"], golden_sets["classifier"], plan, root=tmp_path
    )
    predicate = {**out, "run_id": "20261130T000000Z-00000000"}
    summary.print_summary(predicate, "local", "r.json")
    text = capsys.readouterr().out
    for expected in (
        "Cold load",
        "Inference (warm,",
        "Output drift",
        "decisions no decision flipped in 12 cases (threshold:score>0.5); none of the",
        "Sustained (2 s, 1 s windows)",
        "throughput per window:",
        "temperatures are absent, not estimated",
        "signed report: r.json",
    ):
        assert expected in text, expected


def test_summary_of_a_rejected_model_names_the_operator(example_models, capsys):
    plan = make_plan("quick", cold_runs=1)
    out = run_measurement(example_models["unsupported_op"], None, plan)
    summary.print_summary({**out, "run_id": "x"}, "local")
    text = capsys.readouterr().out
    assert "FAILED" in text
    assert "operator com.example:Frobnicate" in " ".join(text.split())


def test_text_from_elsewhere_is_not_markup(capsys):
    summary.print_error("cannot read models[v2]/m.onnx", "pip install 'edgequal[litert]'")
    summary.print_line("models[v2]/m.onnx and a[/b]")
    summary.print_table("devices [/x]", ["name"], [["a[/b]"]])
    out, err = capsys.readouterr()
    assert "cannot read models[v2]/m.onnx" in err
    assert "(hint: pip install 'edgequal[litert]')" in err
    assert "models[v2]/m.onnx and a[/b]" in out
    assert "[/x]" in out and "│ a[/b] │" in out


def test_summary_prints_names_and_findings_as_they_are(capsys):
    predicate = {
        "status": "failed",
        "run_id": "r-1",
        "reason": "input [batch?, 3] of models[v2]",
        "results": {},
        "findings": [{"kind": "model_rejected", "message": "op [/x] unsupported"}],
    }
    summary.print_summary(predicate, "grpc://[::1]:7441", "reports/m[v2].report.json")
    text = capsys.readouterr().out
    assert "reason: input [batch?, 3] of models[v2]" in text
    assert "finding [model_rejected] op [/x] unsupported" in text
    assert "signed report: reports/m[v2].report.json" in text


def _latency(steady: bool) -> dict:
    return {"per_shape": [{"shape": "x=1x4", "warmup": {"steady": steady}}]}


@pytest.mark.parametrize(
    ("predicate", "expected"),
    [
        ({"status": "passed"}, None),
        (
            {"status": "degraded", "results": {"latency": _latency(False)}},
            "re-run on a quiet machine",
        ),
        (
            {"status": "degraded", "results": {"sustained": {"verdict": "degraded"}}},
            "improve cooling or power",
        ),
        (
            {"status": "failed", "results": {"drift": {"passed": False}}},
            "edgequal golden make ... --tolerance OUTPUT=ATOL,RTOL",
        ),
        (
            {"status": "failed", "findings": [{"kind": "model_rejected", "message": "m"}]},
            "export it with operators this runtime supports",
        ),
        (
            {"status": "failed", "findings": [{"kind": "x", "message": "m", "hint": "do this"}]},
            "do this",
        ),
        ({"status": "inconclusive"}, "re-run on a quiet board"),
        ({"status": "incomplete", "reason": "cancelled"}, "the run was cancelled (Ctrl-C or"),
        (
            {
                "status": "incomplete",
                "reason": "cancelled",
                "findings": [{"kind": "cancelled", "message": "run cancelled"}],
            },
            "nothing failed",
        ),
        ({"status": "incomplete", "reason": "agent restarted"}, "fetched by its run id"),
    ],
)
def test_status_hint_says_what_would_change_the_status(predicate, expected):
    hint = summary.status_hint(predicate)
    assert hint is None if expected is None else expected in hint


def test_a_non_passing_summary_ends_with_what_would_change_it(capsys):
    summary.print_summary({"status": "inconclusive", "run_id": "r-2", "results": {}}, "local")
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("edgequal INCONCLUSIVE")
    assert lines[-1].strip() == (
        "to change this: other processes interfered with the measurement: "
        "re-run on a quiet board (nothing else running)"
    )


def test_window_causes_are_marked_under_the_sparkline_and_named():
    from edgequal.host.present.terminal.summary import describe_cause, window_marks

    windows = [
        {"cause": "none"},
        {"cause": "throttling"},
        {"cause": "interference"},
        {"cause": "unexplained"},
    ]
    assert window_marks(windows) == " ti?"
    evidence = {
        "runq_wait_share": 0.42,
        "other_cpus": 1.9,
        "steal_share": 0.0,
        "top_processes": [{"name": "stress[/x]", "cpu_share": 0.97}],
    }
    text = describe_cause("interference", evidence)
    assert text == (
        "interference: run-queue wait 42%; other processes 1.90 CPUs (busiest: stress[/x] 0.97)"
    )
    assert describe_cause("unexplained", None).startswith("unexplained")


def test_latency_and_cold_load_use_the_words_of_benchmark_tools(capsys):
    """Init / First inference / Warmup / Inference; count, min, max, avg, std; P50…P99.9
    (benchmark_model, onnxruntime_perf_test, trtexec), with the figures in their columns."""
    from edgequal.host.present.terminal.sections import print_cold_load, print_latency

    summary_ms = {
        "count": 4000, "min_ms": 1.0, "mean_ms": 2.5, "sd_ms": 0.25, "cv": 0.1,
        "p50_ms": 2.4, "p90_ms": 3.1, "p95_ms": 3.3, "p99_ms": 4.2, "p99_9_ms": 6.75,
        "max_ms": 9.5, "p50_ci_ms": [2.35, 2.45], "p99_ci_ms": [4.0, 4.5],
    }  # fmt: skip
    entry = {
        "shape": "x=1x4",
        "summary": summary_ms,
        "warmup": {"runs": 12, "seconds": 1.5, "steady": True},
        "cause": "none",
    }
    cold = {"median": 3.0, "min": 2.0, "max": 4.0}
    results = {
        "latency": {"per_shape": [entry]},
        "cold_load": {
            "runs": [{}, {}],
            "page_cache_evicted": True,
            **{k: cold for k in ("import_ms", "load_ms", "first_inference_ms", "total_ms")},
        },
    }
    print_cold_load(results)
    print_latency(results)
    text = capsys.readouterr().out
    for word in ("Init: runtime import", "Init: session create", "First inference"):
        assert word in text
    header = next(line for line in text.splitlines() if "count" in line)
    columns = [c.strip() for c in header.strip("┃│ ").replace("┃", "│").split("│")]
    assert columns == [
        "shape",
        "count",
        "min",
        "max",
        "avg",
        "std",
        "P50",
        "P90",
        "P95",
        "P99",
        "P99.9",
    ]
    row = next(line for line in text.splitlines() if "1x4" in line and "4000" in line)
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells == [
        "1x4",
        "4000",
        "1.00",
        "9.50",
        "2.50",
        "0.25",
        "2.40",
        "3.10",
        "3.30",
        "4.20",
        "6.75",
    ]
    assert "Inference (warm, ms)" in text
    assert "x=1x4: Warmup 12 runs in 1.50 s (steady)" in " ".join(text.split())
    assert "CI P50 2.35–2.45, P99 4.00–4.50 ms" in " ".join(text.split())


def test_a_crashed_worker_names_its_runtime_version_and_where_it_stopped(capsys):
    crash = {
        "phase": "cold_load",
        "cause": "signal",
        "kind": "worker_failure",
        "message": "worker killed by SIGSEGV",
        "worker_phase": "import",
        "runtime": "onnxruntime",
        "runtime_version": "1.32.0",
        "signal": "SIGSEGV",
    }
    predicate = {
        "status": "failed",
        "reason": "worker killed by SIGSEGV",
        "run_id": "r",
        "results": {},
        "findings": [crash],
    }
    summary.print_summary(predicate, "arm64-board")
    text = " ".join(capsys.readouterr().out.split())
    assert "runtime onnxruntime 1.32.0 · stopped in cold_load (import)" in text
    assert (
        "finding [worker_failure] worker killed by SIGSEGV · onnxruntime 1.32.0 · "
        "in cold_load (import)"
    ) in text


def test_a_cancelled_run_is_a_cancellation_not_a_failure(capsys):
    cancelled = {"phase": "latency", "kind": "cancelled", "message": "run cancelled"}
    predicate = {
        "status": "incomplete",
        "reason": "cancelled",
        "run_id": "r",
        "results": {},
        "findings": [cancelled],
    }
    summary.print_summary(predicate, "local")
    text = " ".join(capsys.readouterr().out.split())
    assert "[cancelled] run cancelled" in text and "worker_failure" not in text
    assert "the run was cancelled (Ctrl-C or runs cancel), nothing failed" in text
    assert "fix the cause" not in text


def test_a_table_folds_a_wide_cell_instead_of_cutting_it(capsys):
    from edgequal.host.present.terminal.sections import print_table

    columns = ["measured", "device", "model", "status", "p50 ms", "p99 ms", "runtime_version"]
    columns += ["run", "changed"]
    row = ["2026-11-30T00:00:00", "pi5-a-long-name", "classifier_int8.onnx", "inconclusive"]
    row += ["0.123", "0.456", "onnxruntime 1.32.0", "20261130T000000Z-00000000", "firmware"]
    print_table("history", columns, [row])
    out = capsys.readouterr().out
    assert "…" not in out
    # Every cell is there whole, read down its column.
    lines = [line.split("│")[1:-1] for line in out.splitlines() if line.startswith("│")]
    cells = ["".join(part.strip() for part in col) for col in zip(*lines)]
    assert cells == [value.replace(" ", "") for value in row]


def test_a_shape_with_too_few_clean_calls_reads_over_every_call(capsys):
    """The line under the latency table: "latency x=1x4 over every call: …" (never "on the
    every call"), and "over the calls that kept the CPU" when they decide."""
    figures = dict(count=400, min_ms=1.0, max_ms=3.0, mean_ms=1.2, sd_ms=0.1, cv=0.08)
    figures.update(p50_ms=1.1, p90_ms=1.4, p95_ms=1.5, p99_ms=2.5, p99_9_ms=None)
    entry = {
        "shape": "x=1x4",
        "summary": figures,
        "warmup": {"runs": 20, "seconds": 0.1, "steady": True},
        "preemption": {"calls": 400, "excluded": 100, "clean_enough": False, "needed": 368},
    }
    predicate = {
        "status": "passed",
        "run_id": "r-3",
        "results": {"latency": {"per_shape": [entry]}},
    }
    summary.print_summary(predicate, "bench")
    text = " ".join(capsys.readouterr().out.split())
    assert text.startswith("edgequal PASSED device bench run r-3")
    assert (
        "latency x=1x4 over every call: 100 of 400 calls excluded (preempted); 300 clean, "
        "368 needed"
    ) in text
    assert "on the" not in text


def test_percentile_claims_are_printed_for_clean_and_all_calls(tagged_latency_entry, capsys):
    """Beside P90…P99.9: the 99 % claim over the clean calls and over every call, and
    "needs N samples" where the claim would be the maximum."""
    from edgequal.contract.summary import format_summary
    from edgequal.host.present.terminal.sections import print_latency

    entry = tagged_latency_entry
    print_latency({"latency": {"per_shape": [entry]}})
    text = " ".join(capsys.readouterr().out.split())
    # All 1,024 calls: p90 claims x(945) = 945 µs; the 768 clean calls: t = 57, x(712).
    assert entry["summary"]["claims"]["p90"]["rank"] == 945
    assert entry["clean"]["claims"]["p90"]["rank"] == 712
    assert (
        "x=1x4: 99 % claims over all calls: P90 <= 945 µs (holds to p92.3; "
        "p91.1 from 4,033 samples)" in text
    )
    assert "x=1x4: 99 % claims over clean calls: P90 <= 949 µs (holds to p92.7;" in text
    assert "clean calls: P90 <= 949 µs (holds to p92.7; p91.4 from 2,906 samples), " in text
    assert "P99 needs 838 samples" in text  # 768 clean calls: the claim would be the maximum
    assert "P99.9 needs 8,403 samples" in text

    plain = format_summary({"status": "passed", "results": {"latency": {"per_shape": [entry]}}})
    assert "99 % claims over clean calls: P90 <= " in plain
    assert "99 % claims over all calls: P90 <= 0.945 ms (holds to p92.3;" in plain


def _env_results() -> dict:
    """Two runtime environments as the agent writes them, the second interfered with."""

    def entry(name, version, p50):
        return {
            "name": name, "runtime": "onnxruntime", "version": version, "status": "ok",
            "latency": {"per_shape": [{"summary": {"p50_ms": p50, "p99_ms": p50 * 2.5}}]},
            "cold_load": {"total_ms": {"median": 312.4}, "first_inference_ms": {"median": 7.78}},
            "memory": {"peak_rss_bytes": 71 << 20},
            "drift": {"passed": True},
        }  # fmt: skip

    pair = {
        "baseline": "onnxruntime-1.17.3", "candidate": "default", "measured": True,
        "p50_ratio": 0.7812, "p50_ratio_ci": [0.4012, 1.0634], "p99_ratio": 0.8123,
        "p99_ratio_ci": None, "cold_load_ratio": 1.1042, "flips_between": 1,
        "flipped_cases": ["case07"],
        "interference": {"segments": 8, "interfered": 2, "max_runq_wait_share": 0.31,
                         "decisive": False},
        "drift_between": {"outputs": {"probs": {"max_abs": 3.1e-6, "psnr_db": 96.24}}},
    }  # fmt: skip
    return {
        "runtime_envs": {
            "rounds": 4, "order": "ABBA", "baseline": "onnxruntime-1.17.3",
            "environments": [entry("onnxruntime-1.17.3", "1.17.3", 7.78),
                             entry("default", "1.20.1", 6.08)],
            "pairs": [pair],
        }
    }  # fmt: skip


@pytest.mark.parametrize("width", [200, 120, 72])
def test_the_runtime_environments_table_never_cuts_a_figure(width, monkeypatch, capsys):
    """At any width every figure is whole: the table when it fits, else one block per
    environment; the interfered comparison and the between-version drift are shown."""
    from edgequal.host.present.terminal import sections
    from edgequal.host.present.terminal.runtime_envs import print_runtime_envs

    monkeypatch.setattr(sections.console, "width", width)
    print_runtime_envs(_env_results())
    out = capsys.readouterr().out
    assert "…" not in out
    flat = " ".join(out.split())
    for figure in ("0.781× [0.401–1.06] (interfered)", "max abs 3.1e-06, PSNR 96.2 dB", "7.78"):
        assert figure in flat, figure
    assert (
        "default: 2 of 8 segments waited for a CPU (up to 31% of their runnable time): "
        "not decisive, re-run on a quiet board" in flat
    )
    stacked = "p50 [95 % CI]: 0.781×" in flat
    assert stacked == (width < 150)
