"""``edgequal export`` and ``fleet run --prometheus``: github-action-benchmark entries and
OpenMetrics text of verified reports, read back with prometheus_client's own parser."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from edgequal.cli.main import main as edgequal_main
from edgequal.contract.openmetrics import Gauge, render, write_textfile
from edgequal.contract.preemption import decisive_summary
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
def test_export_prometheus_and_github_benchmark(reports, known, sign, tmp_path, capsys):
    shape, s, measured = _latency(reports.classifier)
    # The session's classifier run is failed or inconclusive (its golden set is shifted, so
    # decisions flip; a busy machine may spoil it): its status only, no figure.
    assert measured["status"] in ("failed", "inconclusive")
    capsys.readouterr()
    assert edgequal_main(["export", str(reports.classifier), "--format", "prometheus"]) == 0
    spoiled = _families(capsys.readouterr().out)
    assert sorted(spoiled) == ["edgequal_status"]
    # Its figures as a passed run's (the same predicate, signed as passed by board 'board'
    # beside the local agent's chain run).
    predicate = {**json.loads(json.dumps(measured)), "status": "passed", "reason": None}
    if measured["status"] == "inconclusive":
        return  # its figures are the interference's: nothing to check them against
    classifier = sign("classifier", predicate, [{"name": "classifier.onnx", "sha256": "ab" * 32}])
    paths = [str(classifier), str(reports.chain_a)]
    out = tmp_path / "edgequal.prom"
    assert edgequal_main(["export", *paths, "--format", "prometheus", "-o", str(out)]) == 0
    families = _families(out.read_text())
    p50 = {
        (x.labels["model"], x.labels["shape"]): x.value
        for x in families["edgequal_latency_p50_seconds"].samples
    }
    assert p50[("classifier.onnx", shape)] == pytest.approx(s["p50_ms"] / 1e3)
    assert {x.labels["device"] for x in families["edgequal_latency_p50_seconds"].samples} == {
        "board",
        "local",
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
    p50_entry = by_name[f"classifier.onnx on board: latency p50 [{shape}]"]
    assert p50_entry["value"] == pytest.approx(s["p50_ms"], rel=1e-6) and p50_entry["unit"] == "ms"
    lo, hi = s["p50_ci_ms"]
    assert p50_entry["range"] == f"± {max(hi - s['p50_ms'], s['p50_ms'] - lo):.4g}"
    assert predicate["run_id"] in p50_entry["extra"]
    rate = sustained["sustained_per_s"]
    per = by_name["classifier.onnx on board: sustained time per inference"]["value"]
    assert per == pytest.approx(1e3 / rate, abs=5e-7)  # the export keeps six decimals


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
        # The classifier run is failed (its golden set is shifted): its status only.
        p50 = families.get("edgequal_latency_p50_seconds")
        models = {x.labels["model"] for x in p50.samples} if p50 else set()
        assert models == (set() if model == "classifier" else {"chain8.onnx"})
        assert len({x.labels["model"] for x in families["edgequal_status"].samples}) == (
            1 if model == "classifier" else 2
        )
    assert [p.name for p in prom.iterdir()] == ["local.prom"]


@pytest.mark.slow  # the session's signed reports
def test_an_inconclusive_run_is_never_charted(reports, known, sign, tmp_path, capsys):
    """github-benchmark leaves an inconclusive run's entries out; Prometheus has its status
    only (its figures are the interference's, not the board's)."""
    _, _, predicate = _latency(reports.classifier)
    good = json.loads(json.dumps(predicate))
    good["status"], good["reason"] = "passed", None
    spoiled = json.loads(json.dumps(predicate))
    spoiled["status"] = "inconclusive"
    spoiled["reason"] = "other processes took the CPU; re-run on a quiet board"
    paths = [
        str(sign("good", good, [{"name": "good.onnx", "sha256": "ab" * 32}])),
        str(sign("spoiled", spoiled, [{"name": "spoiled.onnx", "sha256": "cd" * 32}])),
    ]
    capsys.readouterr()
    assert edgequal_main(["export", *paths, "--format", "github-benchmark"]) == 0
    names = [e["name"] for e in json.loads(capsys.readouterr().out)]
    assert any(n.startswith("good.onnx on board: latency p50") for n in names)
    assert not [n for n in names if n.startswith("spoiled.onnx")]
    assert edgequal_main(["export", *paths, "--format", "prometheus"]) == 0
    families = _families(capsys.readouterr().out)
    models = {name: {x.labels["model"] for x in f.samples} for name, f in families.items()}
    assert models["edgequal_status"] == {"good.onnx", "spoiled.onnx"}
    status = {
        x.labels["status"]: x.value
        for x in families["edgequal_status"].samples
        if x.labels["model"] == "spoiled.onnx"
    }
    assert status["inconclusive"] == 1.0 and sum(status.values()) == 1.0
    for name, seen in models.items():
        if name != "edgequal_status":
            assert "spoiled.onnx" not in seen, name
    assert "good.onnx" in models["edgequal_latency_p50_seconds"]


def _statement(report_path) -> dict:
    envelope = json.loads(report_path.read_bytes())
    return json.loads(base64.b64decode(envelope["payload"]))


@pytest.mark.slow  # the session's signed reports
def test_export_cyclonedx_is_a_valid_ml_bom_of_what_was_qualified(reports, known, tmp_path):
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    out = tmp_path / "bom.json"
    paths = [str(reports.classifier), str(reports.chain_a)]
    assert edgequal_main(["export", *paths, "--format", "cyclonedx", "-o", str(out)]) == 0
    text = out.read_text()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    bom = json.loads(text)
    assert bom["bomFormat"] == "CycloneDX" and bom["specVersion"] == "1.6"
    by_ref = {c["bom-ref"]: c for c in bom["components"]}

    statement = _statement(reports.classifier)
    predicate = statement["predicate"]
    [model] = [s for s in statement["subject"] if s["annotations"]["role"] == "model"]
    [golden] = [s for s in statement["subject"] if s["annotations"]["role"] == "golden"]
    component = by_ref[f"model:{model['digest']['sha256']}"]
    assert component["type"] == "machine-learning-model" and component["name"] == model["name"]
    assert component["hashes"] == [{"alg": "SHA-256", "content": model["digest"]["sha256"]}]
    data = by_ref[f"golden:{golden['digest']['sha256']}"]
    assert data["type"] == "data" and data["hashes"][0]["content"] == golden["digest"]["sha256"]
    card = component["modelCard"]
    assert card["modelParameters"]["datasets"] == [{"ref": data["bom-ref"]}]
    inputs = predicate["results"]["model_io"]["inputs"]
    assert [i["format"].split()[0] for i in card["modelParameters"]["inputs"]] == [
        i["name"] for i in inputs
    ]
    runtime = predicate["results"]["runtime"]
    rt = by_ref[f"runtime:{runtime['runtime']}@{runtime['version']}"]
    assert rt["type"] == "framework" and rt["version"] == runtime["version"]
    deps = {d["ref"]: set(d.get("dependsOn", [])) for d in bom["dependencies"]}
    assert rt["bom-ref"] in deps[component["bom-ref"]]
    [device] = [c for c in bom["components"] if c["type"] == "device"]
    props = {p["name"]: p["value"] for p in device["properties"]}
    assert (
        device["name"] == "local" and props["edgequal:python"] == predicate["fingerprint"]["python"]
    )

    # The card's p50 is the report's decisive p50, with its interval, sliced by board/shape.
    shape, s, _ = _latency(reports.classifier)
    metrics = card["quantitativeAnalysis"]["performanceMetrics"]
    [p50] = [
        m for m in metrics if m["type"] == "latency p50 (ms)" and f"shape={shape};" in m["slice"]
    ]
    assert float(p50["value"]) == pytest.approx(s["p50_ms"], rel=1e-5)
    assert [float(p50["confidenceInterval"][k]) for k in ("lowerBound", "upperBound")] == (
        pytest.approx(s["p50_ci_ms"], rel=1e-5)
    )
    assert p50["slice"].startswith(f"board=local;runtime={runtime['runtime']} {runtime['version']}")
    flips = [m for m in metrics if m["type"] == "decision flips"]
    assert [float(m["value"]) for m in flips] == [
        predicate["results"]["drift"]["decisions"]["flip_count"]
    ]
    # No rail on this machine: no energy figure at all, not a zero.
    assert not [m for m in metrics if m["type"].startswith("energy")]
    [ref] = [p["value"] for p in component["properties"] if p["name"] == "edgequal:report"]
    assert (
        predicate["run_id"] in ref
        and hashlib.sha256(reports.classifier.read_bytes()).hexdigest() in ref
    )


@pytest.mark.slow  # the session's signed reports
def test_export_cyclonedx_carries_no_figure_of_an_inconclusive_run(reports, sign, tmp_path):
    statement = _statement(reports.classifier)
    predicate = {**statement["predicate"], "status": "inconclusive"}
    subjects = [
        {"name": s["name"], "sha256": s["digest"]["sha256"], "role": s["annotations"]["role"]}
        for s in statement["subject"]
    ]
    path = sign("interfered", predicate, subjects)
    out = tmp_path / "bom.json"
    assert (
        edgequal_main(
            ["export", str(path), "--device", "board", "--format", "cyclonedx", "-o", str(out)]
        )
        == 0
    )
    [model] = [
        c
        for c in json.loads(out.read_text())["components"]
        if c["type"] == "machine-learning-model"
    ]
    assert model["modelCard"]["quantitativeAnalysis"]["performanceMetrics"] == []
    assert "status inconclusive" in model["properties"][0]["value"]
