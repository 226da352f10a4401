"""``edgequal export`` and ``fleet run --prometheus``: github-action-benchmark entries and
OpenMetrics text of verified reports, read back with prometheus_client's own parser."""

from __future__ import annotations

import base64
import json

import pytest
from edgequal.contract.openmetrics import Gauge, render, write_textfile
from edgequal.contract.preemption import decisive_summary
from edgequal.host.cli.main import main as edgequal_main
from prometheus_client.openmetrics.parser import text_string_to_metric_families


def _families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_openmetrics_text_escapes_labels_and_leaves_out_what_was_not_measured(tmp_path):
    g = Gauge("edgequal_x_seconds", 'help with "quotes"', "seconds")
    g.add({"model": 'a"b\\c\nd', "device": "pi5"}, 0.25)
    g.add({"model": "absent"}, None)
    empty = Gauge("edgequal_never", "no samples")
    text = render([g, empty])
    families = _families(text)
    assert (
        list(families) == ["edgequal_x_seconds"]
        and families["edgequal_x_seconds"].unit == "seconds"
    )
    [sample] = families["edgequal_x_seconds"].samples
    assert sample.labels == {"model": 'a"b\\c\nd', "device": "pi5"} and sample.value == 0.25
    with pytest.raises(ValueError, match="bad metric name"):
        render([Gauge("x_total", "unit not a suffix", "seconds", [({}, 1.0)])])
    path = tmp_path / "m.prom"
    write_textfile(path, text)
    assert path.read_text() == text and [p.name for p in tmp_path.iterdir()] == ["m.prom"]


def _latency(report_path) -> tuple[str, dict, dict]:
    envelope = json.loads(report_path.read_bytes())
    predicate = json.loads(base64.b64decode(envelope["payload"]))["predicate"]
    entry = predicate["results"]["latency"]["per_shape"][0]
    return entry["shape"], decisive_summary(entry), predicate


@pytest.mark.slow  # the session's signed reports
def test_export_prometheus_and_github_benchmark(reports, known, tmp_path, capsys):
    paths = [str(reports.classifier), str(reports.chain_a)]
    out = tmp_path / "edgequal.prom"
    assert edgequal_main(["export", *paths, "--format", "prometheus", "-o", str(out)]) == 0
    families = _families(out.read_text())
    shape, s, predicate = _latency(reports.classifier)
    p50 = {
        (x.labels["model"], x.labels["shape"]): x.value
        for x in families["edgequal_latency_p50_seconds"].samples
    }
    assert p50[("classifier.onnx", shape)] == pytest.approx(s["p50_ms"] / 1e3)
    assert {x.labels["device"] for x in families["edgequal_latency_p50_seconds"].samples} == {
        "local"
    }
    status = {
        (x.labels["model"], x.labels["status"]): x.value
        for x in families["edgequal_status"].samples
    }
    assert status[("classifier.onnx", predicate["status"])] == 1.0
    assert sum(v for (m, _), v in status.items() if m == "classifier.onnx") == 1.0
    drift = {x.labels["output"]: x.value for x in families["edgequal_drift_max_abs_error"].samples}
    assert drift["score"] == pytest.approx(
        predicate["results"]["drift"]["outputs"]["score"]["max_abs"]
    )
    [flips] = families["edgequal_decision_flips"].samples
    assert flips.value == predicate["results"]["drift"]["decisions"]["flip_count"]
    sustained = predicate["results"]["sustained"]
    [stability] = families["edgequal_sustained_stability_ratio"].samples
    assert stability.value == pytest.approx(sustained["stability"])
    # No rail on this machine: no energy figure at all, not a zero.
    assert "edgequal_energy_per_inference_joules" not in families

    assert edgequal_main(["export", *paths, "--format", "github-benchmark"]) == 0
    entries = json.loads(capsys.readouterr().out)
    # github-action-benchmark's customSmallerIsBetter: name, unit, value; range, extra optional.
    for e in entries:
        assert set(e) <= {"name", "unit", "value", "range", "extra"} and {
            "name",
            "unit",
            "value",
        } <= set(e)
        assert isinstance(e["name"], str) and isinstance(e["unit"], str)
        assert isinstance(e["value"], int | float) and isinstance(e.get("extra", ""), str)
        assert isinstance(e.get("range", ""), str)
    by_name = {e["name"]: e for e in entries}
    assert len(by_name) == len(entries)  # each figure once
    p50_entry = by_name[f"classifier.onnx on local: latency p50 [{shape}]"]
    assert p50_entry["value"] == pytest.approx(s["p50_ms"], rel=1e-6) and p50_entry["unit"] == "ms"
    lo, hi = s["p50_ci_ms"]
    assert p50_entry["range"] == f"± {max(hi - s['p50_ms'], s['p50_ms'] - lo):.4g}"
    assert predicate["run_id"] in p50_entry["extra"]
    rate = sustained["sustained_per_s"]
    per = by_name["classifier.onnx on local: sustained time per inference"]["value"]
    assert per == pytest.approx(1e3 / rate, rel=1e-5)


@pytest.mark.slow  # the session's signed reports
def test_export_refuses_a_report_that_does_not_verify(reports, known, tmp_path, capsys):
    envelope = json.loads(reports.chain_a.read_bytes())
    envelope["payload"] = base64.b64encode(b'{"a": 1}').decode()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(envelope))
    out = tmp_path / "x.prom"
    assert edgequal_main(["export", str(bad), "--format", "prometheus", "-o", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert "signature does not verify" in err[0] and not out.exists()
    assert edgequal_main(["export", str(tmp_path / "none.json"), "--format", "prometheus"]) == 2


@pytest.mark.slow  # the session's signed reports
def test_fleet_prometheus_directory_has_one_file_per_device(reports, known, tmp_path):
    from edgequal.host.lab.results import RunRecord
    from edgequal.host.present.exports import PrometheusDirectory

    out_dir = reports.classifier.parent
    prom = tmp_path / "textfiles"
    exporter = PrometheusDirectory(prom, known, out_dir)
    exporter.on_change(RunRecord("classifier", "local", state="running"))
    assert not prom.exists()  # nothing before a cell has its report
    for model, path in (("classifier", reports.classifier), ("chain", reports.chain_a)):
        exporter.on_change(
            RunRecord(model, "local", state="passed", status="passed", report=path.name)
        )
        families = _families((prom / "local.prom").read_text())
        models = {x.labels["model"] for x in families["edgequal_latency_p50_seconds"].samples}
        assert len(models) == (1 if model == "classifier" else 2)
    assert [p.name for p in prom.iterdir()] == ["local.prom"]
