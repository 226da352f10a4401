"""Declared co-load and edge shapes in the summary, ``gate``, ``compare`` and the report page.

The reports are built here following the results schema (docs/report-schema.md: the
co-load and edge-shape sections) with latency summaries computed by the agent's own
statistics from generated samples, then signed with a device key by the agent's own
signing code and verified against that key pinned in the test's config, as real
reports are.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from edgequal.agent.measure.latency import encode_samples
from edgequal.cli.main import main as edgequal_main
from edgequal.contract.stats import summarize_latency
from edgequal.host.devices.trust import KnownDevices
from edgequal.host.errors import UsageError
from edgequal.host.judge.compare import compare_reports
from edgequal.host.judge.gate import run_gate
from edgequal.host.judge.policy import parse_policy
from edgequal.host.judge.report_file import load_report, read_report_bytes
from edgequal.host.present.html.report import render_report_html
from edgequal.host.present.terminal import summary
from edgequal.host.present.units import duration_text

MB = 1 << 20
POLICIES = Path(__file__).resolve().parents[3] / "docs" / "policies"
SHAPE = "x=1x3x224x224"


def _samples_ns(median_ms: float, sd_ms: float, n: int = 2000, seed: int = 0) -> np.ndarray:
    """n latency samples around ``median_ms`` (normal, clipped above 0), as int64 ns."""
    rng = np.random.default_rng(seed)
    ms = np.clip(rng.normal(median_ms, sd_ms, n), median_ms / 4, None)
    return np.round(ms * 1e6).astype(np.int64)


def _latency_entry(plain_ms: float, coload_ms: float | None, *, seed: int = 0) -> dict:
    """One ``results.latency.per_shape`` entry; with ``coload`` when ``coload_ms`` is given."""
    plain = _samples_ns(plain_ms, plain_ms * 0.04, seed=seed)
    entry = {
        "shape": SHAPE,
        "warmup": {"runs": 20, "seconds": 0.2, "steady": True, "reason": "steady"},
        "loop_s": 2.0,
        "interference": None,
        "heavy_tail": False,
        "cause": "none",
        "summary": summarize_latency(plain),
        "samples_ns_b64": encode_samples(plain),
    }
    if coload_ms is not None:
        loaded = _samples_ns(coload_ms, coload_ms * 0.04, seed=seed + 1)
        s_plain, s_co = entry["summary"], summarize_latency(loaded)
        entry["coload"] = {
            "summary": s_co,
            "samples_ns_b64": encode_samples(loaded),
            "segments": [
                {"round": r, "coload": c, "runs": 250, "p50_ms": coload_ms if c else plain_ms}
                for r in range(4)
                for c in (False, True)
            ],
            "interference": None,
            "cause": "none",
            "p50_ratio": s_co["p50_ms"] / s_plain["p50_ms"],
            "p99_ratio": s_co["p99_ms"] / s_plain["p99_ms"],
            "rounds_slower": 4,
        }
    return entry


def _coload_results(rate: float = 24.5) -> dict:
    declared = [
        {
            "label": "model:detector.onnx",
            "kind": "model",
            "sha256": "ab" * 32,
            "name": "detector.onnx",
            "rate_per_s": 30.0,
            "threads": 1,
            "shapes": {},
        },
        {"label": "cpu:1.5", "kind": "cpu", "cores": 1.5},
    ]
    latency = [
        {
            "label": "model:detector.onnx",
            "kind": "model",
            "achieved": {"value": rate, "unit": "inferences/s", "target": 30.0},
            "cpus": 0.9,
        },
        {
            "label": "cpu:1.5",
            "kind": "cpu",
            "achieved": {"value": 1.48, "unit": "CPUs", "target": 1.5},
            "cpus": 1.48,
        },
    ]
    return {"declared": declared, "rounds": 4, "latency": latency, "sustained": None}


def _edge_ok(label: str, dims: list[int], p50_ms: float, peak_mb: float, seed: int) -> dict:
    samples = _samples_ns(p50_ms, p50_ms * 0.05, n=40, seed=seed)
    return {
        "label": label,
        "shapes": {"x": dims},
        "source": "plan",
        "ok": True,
        "runs": int(samples.size),
        "summary": summarize_latency(samples),
        "peak_rss_bytes": int(peak_mb * MB),
        "rss_added_by_inference_bytes": int(peak_mb * MB * 0.6),
        "outputs": {"y": [dims[0], 1000]},
    }


def _edge_failed(label: str, dims: list[int]) -> dict:
    return {
        "label": label,
        "shapes": {"x": dims},
        "source": "golden",
        "ok": False,
        "cause": "memory",
        "message": "the worker was killed at the memory limit (512 MB)",
    }


def _predicate(
    *,
    coload_ms: float | None = None,
    plain_ms: float = 20.0,
    edges: list[dict] | None = None,
    run_id: str = "20261130T120000Z-0000000a",
    seed: int = 0,
) -> dict:
    results: dict = {
        "schema": "edgequal.results/v1",
        "runtime": {"runtime": "onnxruntime", "version": "1.20.0", "threads": 2},
        "latency": {"per_shape": [_latency_entry(plain_ms, coload_ms, seed=seed)]},
        "memory": {
            "rss_before_load_bytes": 40 * MB,
            "rss_added_by_load_bytes": 30 * MB,
            "peak_rss_bytes": 90 * MB,
        },
    }
    findings = []
    status = "passed"
    if coload_ms is not None:
        results["coload"] = _coload_results()
    if edges is not None:
        results["edge_shapes"] = edges
        for e in edges:
            if not e["ok"]:
                status = "failed"
                findings.append(
                    {
                        "phase": "edge_shapes",
                        "kind": "edge_shape_failed",
                        "label": e["label"],
                        "input": "x",
                        "shape": e["shapes"]["x"],
                        "cause": e["cause"],
                        "message": e["message"],
                        "runtime": "onnxruntime",
                    }
                )
    return {
        "run_id": run_id,
        "nonce": "0" * 32,
        "status": status,
        "reason": None if status == "passed" else "an edge shape did not run",
        "plan": {"profile": "quick"},
        "fingerprint": {"board_model": "test board", "cpu_count": 4},
        "results": results,
        "findings": findings,
    }


def _check(result, name):
    matches = [c for c in result.checks if c.name == name]
    assert len(matches) == 1, [c.name for c in result.checks]
    return matches[0]


# ---------------------------------------------------------------------------
# gate


def test_coload_p99_limit_fails_at_55_ms_and_passes_at_30_ms(sign):
    policy = parse_policy({"coload": {"max_p99_ms": 40, "max_p50_ratio": 2.0}})
    slow = sign("slow", _predicate(coload_ms=50.0))
    result = run_gate(read_report_bytes(slow), policy, known=KnownDevices())
    assert result.verified and not result.passed
    check = _check(result, f"coload.max_p99_ms[{SHAPE}]")
    co = json.loads(json.dumps(_predicate(coload_ms=50.0)))["results"]["latency"]["per_shape"][0]
    p99 = co["coload"]["summary"]["p99_ms"]
    upper = co["coload"]["summary"]["p99_ci_ms"][1]
    assert 53 < p99 < 57 and upper >= p99
    assert not check.passed and not check.retry
    assert check.limit == "≤ 40 ms" and check.measured == f"{upper:.4g} ms"
    assert f"p99 {p99:.4g} ms" in check.message and "above the limit ≤ 40 ms" in check.message
    assert "beside model:detector.onnx, cpu:1.5" in check.message
    ratio = _check(result, f"coload.max_p50_ratio[{SHAPE}]")
    assert not ratio.passed and ratio.measured == f"{co['coload']['p50_ratio']:.4g}"

    fast = sign("fast", _predicate(coload_ms=27.0))
    result = run_gate(read_report_bytes(fast), policy, known=KnownDevices())
    check = _check(result, f"coload.max_p99_ms[{SHAPE}]")
    assert check.passed and result.passed, result.summary
    assert float(check.measured.split()[0]) < 40 and "within the limit" in check.message


def test_coload_interference_marks_retry_and_required_names_the_loads(sign):
    pred = _predicate(coload_ms=50.0)
    pred["results"]["latency"]["per_shape"][0]["coload"]["cause"] = "interference"
    result = run_gate(
        read_report_bytes(sign("r", pred)),
        parse_policy({"coload": {"required": True, "max_p99_ms": 40}}),
        known=KnownDevices(),
    )
    assert _check(result, "coload.required").measured == "model:detector.onnx, cpu:1.5"
    check = _check(result, f"coload.max_p99_ms[{SHAPE}]")
    assert not check.passed and check.retry and result.retry

    # A second shape measured without the co-load: its limit cannot pass.
    pred = _predicate(coload_ms=27.0)
    other = _latency_entry(5.0, None, seed=7)
    other["shape"] = "x=1x3x64x64"
    pred["results"]["latency"]["per_shape"].append(other)
    result = run_gate(
        read_report_bytes(sign("two", pred)),
        parse_policy({"coload": {"max_p99_ms": 40}}),
        known=KnownDevices(),
    )
    assert _check(result, f"coload.max_p99_ms[{SHAPE}]").passed
    missing = _check(result, "coload.measured[x=1x3x64x64]")
    assert not missing.passed and "not measured beside the co-load" in missing.message


def test_a_limit_on_a_feature_the_report_lacks_fails_as_not_measured(sign):
    plain = sign("plain", _predicate())
    policy = parse_policy(
        {
            "coload": {"max_p99_ms": 40},
            "edge_shapes": {"require_all_ran": True},
        }
    )
    result = run_gate(read_report_bytes(plain), policy, known=KnownDevices())
    assert not result.passed
    co = _check(result, "coload.measured")
    assert not co.passed and "no declared co-load in the report" in co.message
    assert "--coload" in co.message
    edge = _check(result, "edge_shapes.measured")
    assert not edge.passed and "no edge shapes in the report" in edge.message
    # A section without limits is not checked at all.
    assert not [
        c
        for c in run_gate(read_report_bytes(plain), parse_policy({}), known=KnownDevices()).checks
        if c.section in ("coload", "edge_shapes")
    ]


def test_edge_shapes_all_ran_memory_and_per_label_limits(sign):
    edges = [
        _edge_ok("largest", [1, 3, 1024, 1024], 180.0, 280.0, seed=3),
        _edge_ok("smallest", [1, 3, 1, 1], 2.0, 60.0, seed=4),
    ]
    ok = sign("ok", _predicate(edges=edges))
    policy = parse_policy(
        {
            "edge_shapes": {
                "require_all_ran": True,
                "max_peak_rss_mb": 100,
                "labels": {"largest": {"max_peak_rss_mb": 300, "max_p50_ms": 200}},
            }
        }
    )
    result = run_gate(read_report_bytes(ok), policy, known=KnownDevices())
    assert result.passed, result.summary
    assert _check(result, "edge_shapes.require_all_ran").measured == "2 of 2 ran"
    largest = _check(result, "edge_shapes.max_peak_rss_mb[largest]")
    assert largest.limit == "≤ 300 MB" and largest.measured == "280 MB"
    assert "largest (x=1x3x1024x1024): peak RSS 280 MB is within" in largest.message
    assert _check(result, "edge_shapes.max_peak_rss_mb[smallest]").measured == "60 MB"
    p50 = _check(result, "edge_shapes.max_p50_ms[largest]")
    upper = edges[0]["summary"]["p50_ci_ms"][1]
    assert p50.measured == f"{upper:.4g} ms"

    # The largest input does not fit in 250 MB.
    tight = parse_policy({"edge_shapes": {"labels": {"largest": {"max_peak_rss_mb": 250}}}})
    check = _check(
        run_gate(read_report_bytes(ok), tight, known=KnownDevices()),
        "edge_shapes.max_peak_rss_mb[largest]",
    )
    assert not check.passed and "peak RSS 280 MB is above the limit ≤ 250 MB" in check.message

    # One edge shape ran out of memory: all_ran fails, and so does every limit on it.
    failed = sign("failed", _predicate(edges=[edges[0], _edge_failed("smallest", [0, 3, 1, 1])]))
    allowed = {"status": {"allowed": ["passed", "failed"]}}
    result = run_gate(
        read_report_bytes(failed),
        parse_policy({**allowed, "edge_shapes": {"require_all_ran": True, "max_peak_rss_mb": 300}}),
        known=KnownDevices(),
    )
    all_ran = _check(result, "edge_shapes.require_all_ran")
    assert not all_ran.passed and all_ran.measured == "1 of 2 ran"
    assert "smallest (x=0x3x1x1): memory: the worker was killed" in all_ran.message
    small = _check(result, "edge_shapes.max_peak_rss_mb[smallest]")
    assert not small.passed and small.measured == "did not run"
    assert _check(result, "edge_shapes.max_peak_rss_mb[largest]").passed

    # p99 needs 368 runs: an edge shape timed for 40 runs has none, and says so.
    p99 = run_gate(
        read_report_bytes(ok),
        parse_policy({"edge_shapes": {"max_p99_ms": 500}}),
        known=KnownDevices(),
    )
    check = _check(p99, "edge_shapes.max_p99_ms[largest]")
    assert not check.passed and "p99 not measured: 40 samples, 368 needed" in check.message

    # A label the report does not have fails, naming the labels it has.
    missing = parse_policy({"edge_shapes": {"labels": {"largets": {"max_peak_rss_mb": 300}}}})
    check = _check(
        run_gate(read_report_bytes(ok), missing, known=KnownDevices()), "edge_shapes.labels.largets"
    )
    assert not check.passed and "(edge shapes: largest, smallest)" in check.message


def test_the_example_product_conditions_policy(sign):
    """docs/policies/product-conditions.toml: passes a fitting report, fails a slow one."""
    from edgequal.host.judge.policy import load_policy

    policy = load_policy(POLICIES / "product-conditions.toml")
    edges = [
        _edge_ok("largest", [1, 3, 1024, 1024], 100.0, 280.0, seed=3),
        _edge_ok("smallest", [1, 3, 1, 1], 2.0, 60.0, seed=4),
    ]
    good = sign("good", _predicate(plain_ms=18.0, coload_ms=26.0, edges=edges))
    result = run_gate(read_report_bytes(good), policy, known=KnownDevices())
    assert result.passed, [c.message for c in result.failed_checks]
    assert {c.section for c in result.checks} >= {"latency", "coload", "edge_shapes"}
    slow = sign("slow", _predicate(plain_ms=18.0, coload_ms=50.0, edges=edges))
    failed = {
        c.name
        for c in run_gate(read_report_bytes(slow), policy, known=KnownDevices()).failed_checks
    }
    assert failed == {f"coload.max_p99_ms[{SHAPE}]", f"coload.max_p50_ratio[{SHAPE}]"}


@pytest.mark.parametrize(
    "data, message",
    [
        ({"coload": {"max_p99": 40}}, "did you mean 'coload.max_p99_ms'?"),
        ({"coload": {"p50_ratio_max": 1.5}}, "did you mean 'coload.max_p50_ratio'?"),
        ({"edge_shapes": {"all_ran": True}}, "did you mean 'edge_shapes.require_all_ran'?"),
        (
            {"edge_shapes": {"labels": {"largest": {"max_peak_rss": 300}}}},
            "unknown key 'edge_shapes.labels.largest.max_peak_rss' "
            "(did you mean 'edge_shapes.labels.largest.max_peak_rss_mb'?)",
        ),
        ({"edge_shape": {}}, "did you mean 'edge_shapes'?"),
        ({"edge_shapes": {"labels": {"largest": 300}}}, "must be a table of limits"),
    ],
)
def test_unknown_condition_keys_are_refused_with_the_closest_valid_one(data, message):
    with pytest.raises(UsageError) as e:
        parse_policy(data)
    assert message in str(e.value)


# ---------------------------------------------------------------------------
# The summary


def _edges() -> list[dict]:
    return [
        _edge_ok("largest", [1, 3, 1024, 1024], 180.0, 280.0, seed=3),
        _edge_failed("empty", [0, 3, 1, 1]),
    ]


def test_summary_shows_the_coload_line_and_one_row_per_edge_shape(capsys):
    pred = _predicate(coload_ms=50.0, edges=_edges())
    summary.print_summary(pred, "board", "r.json")
    text = " ".join(capsys.readouterr().out.split())
    co = pred["results"]["latency"]["per_shape"][0]
    plain, loaded = co["summary"], co["coload"]["summary"]
    assert (
        "co-load (4 rounds, plain and co-load interleaved): "
        "model:detector.onnx 24.5/30 inferences/s, cpu:1.5 1.48/1.5 CPUs" in text
    )
    assert (
        f"co-load {SHAPE}: p50 {loaded['p50_ms']:.2f} ms "
        f"(×{co['coload']['p50_ratio']:.2f} of plain {plain['p50_ms']:.2f} ms)" in text
    )
    assert f"p99 {loaded['p99_ms']:.2f} ms" in text and "slower in 4 of 4 rounds" in text
    largest = pred["results"]["edge_shapes"][0]
    assert "Edge shapes" in text
    assert (
        f"largest │ x=1x3x1024x1024 │ plan │ 40 │ {largest['summary']['p50_ms']:.0f} ms │ — "
        "│ 280.0 MB │ 168.0 MB │ ran" in text
    )
    assert "empty │ x=0x3x1x1 │ golden │ — │ — │ — │ — │ — │ FAILED" in text
    assert "edge shape empty (x=0x3x1x1) did not run: memory: the worker was killed" in text
    assert "to change this: an input at the edge of its range crashed" in text


def test_coload_interference_names_only_undeclared_evidence(capsys):
    """The co-load segments were judged on undeclared processes and steal: waiting behind
    the declared co-load is not named as the cause."""
    pred = _predicate(coload_ms=50.0)
    loaded = pred["results"]["latency"]["per_shape"][0]["coload"]
    loaded["cause"] = "interference"
    loaded["interference"] = {
        "runq_wait_share": 0.62,
        "other_cpus": 0.9,
        "steal_share": 0.0,
        "coload_cpus": 1.4,
        "top_processes": [{"name": "stress-ng", "cpu_share": 0.85}],
    }
    summary.print_summary(pred, "board")
    text = " ".join(capsys.readouterr().out.split())
    assert "interference: undeclared processes 0.90 CPUs (busiest: stress-ng 0.85)" in text
    assert "run-queue wait 62%" not in text


def test_summary_without_conditions_prints_neither(capsys):
    summary.print_summary(_predicate(), "board")
    text = capsys.readouterr().out
    assert "co-load" not in text and "Edge shapes" not in text


# ---------------------------------------------------------------------------
# compare


def test_compare_rows_for_coload_and_edge_shapes_with_deltas(sign, capsys):
    a = sign("a", _predicate(coload_ms=30.0, edges=_edges()[:1], run_id="r-a"))
    heavier = [_edge_ok("largest", [1, 3, 1024, 1024], 200.0, 330.0, seed=5), _edges()[1]]
    b = sign("b", _predicate(coload_ms=45.0, edges=heavier, run_id="r-b", seed=10))
    known = KnownDevices()
    comparison = compare_reports([load_report(a, known=known), load_report(b, known=known)])
    rows = {row.figure: row for row in comparison.rows}
    p50 = rows[f"co-load p50 {SHAPE}"]
    assert p50.values[1] / p50.values[0] == pytest.approx(1.5, rel=0.03)
    assert p50.deltas[0] is None and p50.deltas[1] == pytest.approx(0.5, rel=0.06)
    # One co-load run a report: UNKNOWN run against run, the two runs' calls ×1.5 beside it.
    assert p50.significance[1].startswith("UNKNOWN ×1.5")
    assert "1 vs 1 runs, no known spread" in p50.significance[1]
    assert "the runs' calls ×1.5" in p50.significance[1]
    ratio = rows[f"co-load p50 / plain p50 {SHAPE}"]
    assert ratio.values[0] == pytest.approx(1.5, rel=0.03)
    assert ratio.values[1] == pytest.approx(2.25, rel=0.03)
    assert rows[f"co-load p99 {SHAPE}"].deltas[1] > 0.4
    assert f"co-load p99 / plain p99 {SHAPE}" in rows
    rss = rows["edge largest peak RSS"]
    assert rss.values == [280.0, 330.0] and rss.deltas[1] == pytest.approx(50 / 280)
    assert rows["edge largest p50"].deltas[1] == pytest.approx(
        rows["edge largest p50"].values[1] / rows["edge largest p50"].values[0] - 1
    )
    assert rows["edge shapes that ran"].values == [1, 1]
    assert "edge largest p99" not in rows  # 40 runs: no p99 in either report
    assert "edge empty p50" not in rows  # it never ran

    assert edgequal_main(["compare", str(a), str(b)]) == 0
    text = capsys.readouterr().out
    assert f"co-load p50 {SHAPE}" in text and "edge largest peak RSS" in text
    assert "330 MB (+17.9%)" in text


# ---------------------------------------------------------------------------
# The report page


class _Tables(HTMLParser):
    """Every table on the page: (the h3 above it, its rows of cell texts); and the images."""

    def __init__(self):
        super().__init__()
        self.tables: list[tuple[str, list[list[str]]]] = []
        self.images: list[dict] = []
        self.scripts = 0
        self._h3 = ""
        self._in: str | None = None
        self._text = ""

    def handle_starttag(self, tag, attrs):
        if tag == "h3":
            self._in, self._text = "h3", ""
        elif tag == "table":
            self.tables.append((self._h3, []))
        elif tag == "tr":
            self.tables[-1][1].append([])
        elif tag in ("td", "th"):
            self._in, self._text = "cell", ""
        elif tag == "img":
            self.images.append(dict(attrs))
        elif tag == "script":
            self.scripts += 1

    def handle_endtag(self, tag):
        if tag == "h3" and self._in == "h3":
            self._h3, self._in = self._text, None
        elif tag in ("td", "th") and self._in == "cell":
            self.tables[-1][1][-1].append(self._text)
            self._in = None

    def handle_data(self, data):
        if self._in:
            self._text += data

    def table(self, title: str) -> list[list[str]]:
        return next(rows for h3, rows in self.tables if h3.startswith(title))


@pytest.mark.slow  # the whole page with its matplotlib figures: about 1 CPU-s
def test_the_page_has_the_coload_and_edge_tables_with_real_numbers(sign, tmp_path):
    pred = _predicate(coload_ms=50.0, edges=_edges())
    path = sign("p", pred)
    out = tmp_path / "page.html"
    assert edgequal_main(["report", "html", str(path), "-o", str(out)]) == 0
    text = out.read_text()
    assert "did not verify" not in text
    page = _Tables()
    page.feed(text)
    overview = page.tables[0][1]
    assert overview[1][5].startswith("verified: signed by device 'board'")
    assert page.scripts == 0
    assert all(img["src"].startswith("data:image/png;base64,") for img in page.images)
    assert any("co-load" in img["alt"] for img in page.images)

    declared = page.table("Declared co-load")
    assert declared[0][:4] == ["", "load", "kind", "achieved"]
    assert declared[1] == [
        "A",
        "model:detector.onnx",
        "model",
        "24.5",
        "30",
        "inferences/s",
        "0.9",
        "not run",
    ]
    assert declared[2][:6] == ["A", "cpu:1.5", "cpu", "1.48", "1.5", "CPUs"]

    entry = pred["results"]["latency"]["per_shape"][0]
    co = entry["coload"]
    latency = page.table("Latency beside the co-load")
    assert latency[1] == [
        "A",
        SHAPE,
        duration_text(entry["summary"]["p50_ms"]),
        duration_text(co["summary"]["p50_ms"]),
        f"{co['p50_ratio']:.3f}",
        duration_text(entry["summary"]["p99_ms"]),
        duration_text(co["summary"]["p99_ms"]),
        f"{co['p99_ratio']:.3f}",
        "4 of 4",
        "—",
    ]

    edges = page.table("Edge shapes")
    largest = pred["results"]["edge_shapes"][0]
    assert edges[1] == [
        "A",
        "largest",
        "x=1x3x1024x1024",
        "plan",
        "ran",
        "40",
        duration_text(largest["summary"]["p50_ms"]),
        "—",
        "280.0",
        "168.0",
        "y=1x1000",
    ]
    assert edges[2][:5] == [
        "A",
        "empty",
        "x=0x3x1x1",
        "golden",
        "did not run: memory: the worker was killed at the memory limit (512 MB)",
    ]


def test_the_page_without_conditions_says_so(sign):
    report = load_report(sign("plain", _predicate()), known=KnownDevices())
    html = render_report_html([report])
    assert "No declared co-load and no edge shapes." in html
