"""``edgequal report html``: one self-contained page, opened in a real headless Chromium
with the network blocked; the plots and tables must be there and rendered."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from edgequal.cli.main import main as edgequal_main
from edgequal.host.judge.report_file import load_report
from edgequal.host.present.html.plots import window_cause
from edgequal.host.present.html.report import render_report_html


def distinct_colours(pixels: np.ndarray) -> np.ndarray:
    """The distinct colours of an image (H x W x channels, floats in [0, 1]), each packed into
    one integer: sorting 3 million scalars takes a fraction of a second, where
    ``np.unique(axis=0)`` on the rows takes seconds."""
    channels = np.rint(pixels.reshape(-1, pixels.shape[-1]) * 255).astype(np.uint32)
    packed = np.zeros(len(channels), np.uint32)
    for i in range(channels.shape[1]):
        packed |= channels[:, i] << (8 * i)
    return np.unique(packed)


def test_distinct_colours_counts_each_colour_once():
    red, blue = [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]
    image = np.array([[red, blue, red], [blue, [0.0, 1 / 255, 0.0], red]], np.float32)
    assert len(distinct_colours(image)) == 3
    assert len(distinct_colours(np.ones((4, 4, 4), np.float32))) == 1


@pytest.mark.slow
def test_the_page_renders_in_headless_chromium_with_the_network_blocked(
    reports, known, tmp_path, chromium
):
    binary = chromium.find_chromium()
    page = tmp_path / "report.html"
    policy = tmp_path / "p.toml"
    policy.write_text(
        '[status]\nallowed = ["passed", "degraded", "failed"]\n[latency]\nmax_p50_ms = 1e-6\n'
    )
    # Through gate --html, so the gate's results are on the page too.
    assert (
        edgequal_main(
            ["gate", str(reports.classifier), "--policy", str(policy), "--html", str(page)]
        )
        == 1
    )
    html = page.read_text()
    # Self-contained: no URL to fetch anywhere, images inline.
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html)
    assert "<script" not in html
    assert html.count('src="data:image/png;base64,') == 2

    dom = chromium.headless(binary, tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    text = dom.stdout
    assert text.count("<img") == 2
    assert 'alt="latency histogram and cumulative distribution"' in text
    assert 'alt="sustained throughput, temperature and clock over time"' in text
    for heading in (
        "Gate",
        "Warm latency",
        "Sustained",
        "Output drift and decision flips",
        "Fingerprint",
    ):
        assert f"<h2>{heading}" in text
    assert text.count("<table") >= 6
    assert "threshold:score&gt;0.5" in text  # the decision rule, escaped
    assert "latency.max_p50_ms" in text  # the failed gate check

    shot = tmp_path / "report.png"
    run = chromium.headless(
        binary, tmp_path, f"--screenshot={shot}", "--window-size=1280,2400", page.as_uri()
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert shot.is_file() and shot.stat().st_size > 10_000
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)  # floats k/255 of the PNG's 8-bit channels
    assert len(distinct_colours(pixels)) > 50, (
        "the screenshot is (nearly) one colour: the page did not render"
    )
    print(f"screenshot: {shot}")


@pytest.mark.slow
def test_several_reports_overlay_and_an_unverified_one_is_marked(reports, known, tmp_path, capsys):
    page = tmp_path / "three.html"
    paths = [reports.chain_a, reports.chain_b, reports.chain_heavy]
    assert edgequal_main(["report", "html", *map(str, paths), "-o", str(page)]) == 0
    html = page.read_text()
    assert html.count("<img") == 1  # one latency figure, three curves; no sustained phase
    # The cards use the terminal's words: the total to the first result is not the first
    # inference, and each is given as itself.
    assert html.count("<dt>Total to first result</dt>") == html.count("<dt>First inference</dt>")
    assert html.count("<dt>First inference</dt>") == 3 and " cold</dd>" not in html
    # Each series names its letter and model; the same model twice on one device also
    # names its run.
    runs = [load_report(p, known=known).predicate["run_id"] for p in paths]
    for label in (
        f"A chain8.onnx · {runs[0]} · x=1x256",
        f"B chain8.onnx · {runs[1]} · x=1x256",
        "C chain32.onnx · x=1x256",
    ):
        assert label in html
    # The comparison compare prints, on the page: each run-level verdict with its ratio and
    # interval, the runs a side, the spread and where it came from.
    assert "<h2>Comparison</h2>" in html
    assert re.search(r"DIFFERENT ×\d\.\d{3} \[\d\.\d{3}, \d+\.\d{3}\]; 5 vs 5 runs, spread", html)
    assert "(repeats, df 8)" in html and "5 vs 1 runs" in html
    assert html.count("verified: signed by device &#x27;local&#x27;") == 3

    data = bytearray(reports.chain_a.read_bytes())
    i = data.index(b'"sig":"') + 12
    data[i] = ord("A") if data[i] != ord("A") else ord("B")
    bad = tmp_path / "bad.json"
    bad.write_bytes(bytes(data))
    assert edgequal_main(["report", "html", str(bad), "-o", str(page)]) == 1
    assert "the signature did not verify" in page.read_text()
    assert edgequal_main(["report", "html", str(tmp_path / "none.json"), "-o", str(page)]) == 2


@pytest.mark.slow
def test_text_is_escaped_and_interference_windows_are_shown(reports, known, sign):
    base = load_report(reports.classifier, known=known)
    pred = json.loads(json.dumps(base.predicate))
    pred["reason"] = "<script>alert(1)</script>"
    pred["status"] = "inconclusive"
    windows = pred["results"]["sustained"]["windows_detail"]
    windows[1]["cause"] = "interference"
    windows[1]["cause_detail"] = ["other processes +0.60 CPUs"]
    windows[1]["interference"] = {
        "cpu_share": 0.4,
        "runq_wait_share": 0.5,
        "other_cpu_share": 0.6,
        "steal_share": 0.0,
        "top_processes": [{"name": "<b>stress-ng</b>", "cpu_share": 0.55}],
    }
    windows[2]["cause"] = "throttling"
    pred["results"]["sustained"]["cause"] = "interference"
    path = sign("escaped", pred, [{"name": "m<i>.onnx", "sha256": "ab" * 32}])
    html = render_report_html([load_report(path, known=known, require=True)])
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<b>stress-ng" not in html and "&lt;b&gt;stress-ng&lt;/b&gt; 0.55 CPU" in html
    assert "m&lt;i&gt;.onnx" in html
    assert "Windows with a cause" in html and "interference" in html and "throttling" in html
    assert "other processes +0.60 CPUs" in html
    assert html.count("<img") == 2


def test_window_cause_uses_the_report_cause_else_the_throttle_rule():
    assert window_cause({"cause": "interference"}, None) == "interference"
    assert window_cause({"throttle_flags": True}, None) == "throttling"
    assert window_cause({"over_trip": True}, None) == "throttling"
    assert window_cause({"min_clock_khz": 1_450_000}, 1_500_000) == "none"
    assert window_cause({"min_clock_khz": 1_000_000}, 1_500_000) == "throttling"
    assert window_cause({}, None) == "none"


def test_the_page_gives_percentile_claims_for_clean_and_all_calls(tagged_latency_entry, tmp_path):
    """The page's claims table: the 99 % bound per percentile over the clean calls and
    over every call, "needs N samples" where the claim would be the maximum."""
    from edgequal.host.judge.report_file import ReportFile

    predicate = {
        "status": "passed",
        "run_id": "20261202T000000Z-00000000",
        "results": {"latency": {"per_shape": [tagged_latency_entry]}},
    }
    page = render_report_html([ReportFile(tmp_path / "r.json", predicate)])
    assert "Percentile claims at 99 % confidence" in page
    rows = re.findall(r"<tr><td>A r.json · x=1x4</td><td>(clean|all) calls</td>(.*?)</tr>", page)
    cells = {basis: re.findall(r"<td[^>]*>(.*?)</td>", rest) for basis, rest in rows}
    assert cells["all"][0] == "&lt;= 945 µs (holds to p92.3; p91.1 from 4,033 samples)"
    assert cells["all"][3] == "needs 8,403 samples"
    assert cells["clean"][0].startswith("&lt;= 949 µs (holds to p92.7;")
    assert cells["clean"][2] == "needs 838 samples"
