"""The report page's parts on hand-built reports: the latency figure (per-model axes and
units, labels that never overlap), the model cards, the trend figure. Pure rendering, no
runs: the page tests in test_report_html.py open real reports in Chromium."""

from __future__ import annotations

import base64
import datetime as dt
from pathlib import Path

import numpy as np
import pytest
from edgequal.host.judge.report_file import ReportFile
from edgequal.host.present.html.cards import model_cards
from edgequal.host.present.html.plots import PERCENTILE_LABEL, latency_plot
from edgequal.host.present.html.trend import change_list, trend_plot


def _entry(samples_ms: np.ndarray) -> dict:
    ordered = np.sort(samples_ms)

    def q(p: float) -> float:
        return float(ordered[int(np.ceil(p * len(ordered))) - 1])

    ns = np.rint(samples_ms * 1e6).astype("<i8")
    return {
        "shape": "image=1x3x32x32",
        "warmup": {"steady": True},
        "summary": {"count": len(ns), "p50_ms": q(0.5), "p90_ms": q(0.9), "p99_ms": q(0.99)},
        "samples_ns_b64": base64.b64encode(ns.tobytes()).decode("ascii"),
    }


def _report(name: str, samples_ms: np.ndarray | None, **results) -> ReportFile:
    if samples_ms is not None:
        results["latency"] = {"per_shape": [_entry(samples_ms)]}
    predicate = {"run_id": f"run-{name}", "status": "passed", "results": results}
    return ReportFile(
        Path(f"{name}.report.json"),
        predicate,
        [{"name": name, "sha256": "ab" * 32}],
        verified=True,
        device_name="local",
    )


@pytest.mark.slow  # the layout pass that places the labels takes seconds on a busy machine
def test_latency_histograms_get_their_own_axis_and_unit_and_labels_never_overlap():
    rng = np.random.default_rng(0)
    # A microsecond model whose percentiles nearly coincide, beside a millisecond model.
    micro = 0.020 + rng.exponential(0.0004, 2000)
    slow = 12.0 + rng.exponential(1.5, 2000)
    fig = latency_plot([_report("micro.onnx", micro), _report("mid.onnx", slow)])
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    # The layout engine places the axes (as saving the PNG does), then the labels' extents.
    canvas = FigureCanvasAgg(fig)
    fig.get_layout_engine().execute(fig)
    renderer = canvas.get_renderer()
    hist_axes = [ax for ax in fig.axes if ax.get_ylabel() == "runs"]
    assert [ax.get_title(loc="left") for ax in hist_axes] == [
        "A micro.onnx · image=1x3x32x32",
        "B mid.onnx · image=1x3x32x32",
    ]
    assert "(µs)" in hist_axes[0].get_xlabel() and "(ms)" in hist_axes[1].get_xlabel()
    # Each histogram's axis spans its own samples: the µs model is not squashed at zero.
    low, high = hist_axes[0].get_xlim()
    assert low > 15 and high < 30, (low, high)
    for ax in hist_axes:
        labels = [t for t in ax.texts if t.get_gid() == PERCENTILE_LABEL]
        assert [t.get_text().split()[0] for t in labels] == ["p50", "p90", "p99"]
        boxes = [t.get_window_extent(renderer) for t in labels]
        for i in range(len(boxes)):
            for j in range(i + 1, len(boxes)):
                assert not boxes[i].overlaps(boxes[j]), (labels[i].get_text(), labels[j].get_text())
    cdf = next(ax for ax in fig.axes if ax not in hist_axes)
    assert cdf.get_xscale() == "log"  # 20 µs and 12 ms on one axis
    assert cdf.get_xlabel() == "latency (ms)"
    legend = [t.get_text() for t in cdf.get_legend().get_texts()]
    assert legend[:2] == ["A micro.onnx · image=1x3x32x32", "B mid.onnx · image=1x3x32x32"]


def test_a_card_per_model_with_the_figures_a_model_card_shows(tmp_path):
    rng = np.random.default_rng(1)
    flipping = _report(
        "classifier_qdq.onnx",
        0.07 + rng.exponential(0.01, 500),
        cold_load={"total_ms": {"median": 365.2}, "first_inference_ms": {"median": 12.5}},
        memory={"peak_rss_bytes": 70 << 20},
        drift={
            "outputs": {"score": {"max_abs": 0.0175, "psnr_db": 26.7, "passed": False}},
            "decisions": {"flips": ["case01", "case09", "case17"], "total_cases": 24},
        },
    )
    flipping.predicate.update(status="failed", reason="outputs drifted beyond tolerance")
    rejected = _report("unsupported_op.onnx", None)
    rejected.predicate.update(
        status="failed",
        findings=[
            {"kind": "model_rejected", "operator": "com.example:Frobnicate", "phase": "cold_load"}
        ],
    )
    html = model_cards([flipping, rejected])
    assert html.count('class="card"') == 2
    assert "A classifier_qdq.onnx" in html and "B unsupported_op.onnx" in html
    p = flipping.predicate["results"]["latency"]["per_shape"][0]["summary"]
    expected = (
        f"{p['p50_ms'] * 1000:.1f} µs / {p['p90_ms'] * 1000:.1f} µs / {p['p99_ms'] * 1000:.1f} µs"
    )
    assert expected in html
    # The terminal's words: the total to the first result, and the first inference alone.
    assert "<dt>Total to first result</dt><dd>365 ms</dd>" in html
    assert "<dt>First inference</dt><dd>12.50 ms</dd>" in html and "70.0 MB" in html
    assert "score: max abs 0.0175, PSNR 26.7 dB; out of tolerance: score" in html
    assert "3 of 24 decisions flipped (case01, case09, case17)" in html
    assert "model_rejected: com.example:Frobnicate (cold_load)" in html
    assert "no golden set: not measured" in html


def test_the_trend_keeps_p50_readable_numbers_its_changes_and_labels_throughput():
    t0 = dt.datetime(2026, 11, 20, 2, 0)
    rows = [
        {
            "measured_at": t0 + dt.timedelta(days=i),
            "status": "passed",
            "p50_ms": 0.025 + 0.001 * i,
            "p99_ms": 0.4 + 0.05 * (i % 3),
            "sustained_per_s": 30000 - 500 * i,
            "firmware": "2025-01-10" if i < 4 else "2025-03-02",
            "changes": ["firmware"] if i == 4 else [],
        }
        for i in range(8)
    ]
    fig = trend_plot("pi5-a", "classifier.onnx", rows)
    p50_ax, p99_ax, thr = fig.axes
    assert p50_ax.get_ylabel() == "p50 (µs)" and p99_ax.get_ylabel() == "p99 (µs)"
    low, high = p50_ax.get_ylim()
    assert low > 20 and high < 40, (low, high)  # p50 on its own scale, not under the p99's
    assert thr.get_legend() is not None
    assert [t.get_text() for t in thr.get_legend().get_texts()] == ["sustained throughput"]
    assert [t.get_text() for t in p50_ax.texts] == ["1"]
    assert "2026-11-24 02:00:00: firmware → 2025-03-02" in change_list(rows)
