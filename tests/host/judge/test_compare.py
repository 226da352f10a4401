"""``edgequal compare`` on signed reports from real runs."""

from __future__ import annotations

import json

import pytest
from edgequal.host.cli.main import main as edgequal_main
from edgequal.host.present.terminal import summary


@pytest.mark.slow
def test_compare_json_deltas_significance_and_fingerprint_changes(reports, known, capsys):
    paths = [reports.chain_a, reports.chain_b, reports.chain_heavy]
    assert edgequal_main(["compare", *map(str, paths), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["path"] for r in out["reports"]] == list(map(str, paths))
    assert all(r["verified"] for r in out["reports"])
    rows = {row["figure"]: row for row in out["rows"]}
    p50 = rows["latency p50 x=1x256"]
    assert p50["deltas"][0] is None and len(p50["values"]) == 3
    # Four times the layers: slower, and significantly so. How much slower depends on what else
    # ran beside each of the three runs (on a shared machine it was +33 % once), so the
    # size of the delta is not asked, only its sign and the rank test's verdict.
    assert p50["deltas"][2] > 0
    assert p50["significance"][0] is None
    assert p50["significance"][2].startswith("slower: ×")
    assert "U p=" in p50["significance"][2]
    assert p50["significance"][1].split(":")[0] in ("same", "unresolved", "slower", "faster")
    assert "cold load total (median)" in rows and "peak RSS" in rows
    assert out["fingerprint_changes"][0] == [] and out["fingerprint_changes"][1] == []
    assert [c["field"] for c in out["fingerprint_changes"][2]] == ["model"]


@pytest.mark.slow
def test_compare_table_and_an_unverified_report(reports, known, tmp_path, capsys):
    assert edgequal_main(["compare", str(reports.classifier), str(reports.chain_a)]) == 0
    text = capsys.readouterr().out
    assert "Comparison" in text and "classifier.onnx" in text and "chain8.onnx" in text
    assert "drift PSNR score" in text and "changed" in text
    data = bytearray(reports.chain_b.read_bytes())
    # One character of the signature itself (the keyid beside it is only a lookup hint,
    # read without regard to case).
    i = data.index(b'"sig":"') + len(b'"sig":"') + 10
    data[i] = ord("A") if data[i] != ord("A") else ord("B")
    bad = tmp_path / "bad.json"
    bad.write_bytes(bytes(data))
    assert edgequal_main(["compare", str(reports.chain_a), str(bad)]) == 1
    assert "NOT VERIFIED" in capsys.readouterr().out
    assert edgequal_main(["compare", str(reports.chain_a), str(tmp_path / "missing.json")]) == 2


def test_report_text_is_printed_as_itself_not_as_markup(capsys):
    comparison = {
        "reports": [
            {"label": "[red]a.onnx · r1", "verified": True},
            {"label": "b.onnx · r2", "verified": True},
        ],
        "rows": [
            {
                "figure": "latency p50 [bold]x",
                "unit": "ms",
                "better": "lower",
                "values": [1.0, 1.2],
                "deltas": [None, 0.2],
                "significance": [None, "slower: ×1.200 [1.1, 1.3]"],
            }
        ],
        "fingerprint_changes": [
            [],
            [{"field": "kernel", "category": "kernel", "baseline": "[x]", "candidate": "6.6"}],
        ],
    }
    summary.print_comparison(comparison)
    text = capsys.readouterr().out
    assert (
        "[red]a.onnx" in text and "[bold]x" in text and "[1.1, 1.3]" in text and "[x] → 6.6" in text
    )


@pytest.mark.slow
def test_compare_json_gives_a_three_way_verdict_per_figure(reports, known, capsys):
    # The same report twice, and a model with four times the layers.
    paths = [reports.chain_a, reports.chain_a, reports.chain_heavy]
    assert edgequal_main(["compare", *map(str, paths), "--json"]) == 0
    rows = {row["figure"]: row for row in json.loads(capsys.readouterr().out)["rows"]}
    p50 = rows["latency p50 x=1x256"]
    assert p50["verdicts"][0] is None
    same, heavy = p50["verdicts"][1], p50["verdicts"][2]
    assert same["verdict"] == "SAME" and same["p_value"] == 1.0  # the same samples
    # On the raw samples (hundreds a side): four times the work is DIFFERENT by both tests.
    assert heavy["verdict"] == "DIFFERENT" and p50["verdict"] == "DIFFERENT"
    assert heavy["n_baseline"] >= 100 and heavy["p_value"] <= 0.01
    assert heavy["p_value"] == min(heavy["ks_p"], heavy["mann_whitney_p"])
    assert heavy["ratio"] > 1.0  # four times the layers; how much slower depends on the load
    # One value a side and different: UNKNOWN (one run says nothing of its spread).
    rss = rows["peak RSS"]["verdicts"][2]
    assert rss["verdict"] in ("UNKNOWN", "SAME") and rss["n_baseline"] == 1
    assert rss["verdict"] == (
        "SAME" if rows["peak RSS"]["values"][0] == rows["peak RSS"]["values"][2] else "UNKNOWN"
    )
    for row in rows.values():
        assert row["verdict"] in ("SAME", "DIFFERENT", "UNKNOWN", None)
