"""The whole path on the device, end to end: raw files through the declared pipeline in the
real worker, over gRPC (a local agent on 127.0.0.1) and over SSH (a real sshd), signed,
verified, shown and gated. Hostile raw files are findings naming case, input and stage,
and the agent keeps serving."""

from __future__ import annotations

import base64
import json
import re

import pytest
from edgequal.cli.main import main as edgequal_main
from edgequal.contract.golden import read_golden, write_golden
from edgequal.host.devices.qualify import pin_device_key, qualify
from edgequal.host.devices.trust import KnownDevices
from edgequal.host.examples.pipeline import build_pipeline_example, make_pipeline_golden
from edgequal.host.golden import make_golden
from edgequal.host.judge.gate import evaluate
from edgequal.host.judge.policy import parse_policy
from edgequal.host.transport.local import LocalTransport

pytestmark = pytest.mark.slow


def test_a_colour_order_mismatch_is_named_at_its_stage_and_flips_decisions(
    tmp_path, quick_plan, capsys
):
    example = build_pipeline_example(tmp_path / "example")
    golden = tmp_path / "colour.golden.npz"
    make_pipeline_golden(example, golden)
    known = KnownDevices()
    with LocalTransport() as transport:
        pin_device_key(transport, known, "local", "local")
        result = qualify(
            transport, example.model, golden, quick_plan(), known=known, device_name="local",
            out=tmp_path / "r.json",
        )  # fmt: skip
    p = result.report.predicate
    assert p["status"] == "failed"
    (finding,) = [f for f in p["findings"] if f["kind"] == "preprocessing_mismatch"]
    assert finding["input"] == "image" and finding["likely"] == "color_order"
    assert "matches the reference with channels swapped: color_order?" in finding["message"]
    path = p["results"]["pipeline"]
    # Every case ran the whole path; red and blue swapped, so their decisions flipped.
    assert path["failures"] == [] and path["cases"] == 6
    assert sorted(p["results"]["drift"]["decisions"]["flips"]) == [
        "blue_square", "blue_tall", "red_small", "red_wide"
    ]  # fmt: skip
    for stage in ("decode", "preprocess", "inference", "decision"):
        assert path["stages"][stage]["count"] == path["runs"] >= 50
        assert 0 < path["share"][stage] < 1
    assert abs(sum(path["share"].values()) - 1) < 1e-3
    # The stages add up to the end-to-end time (one clock read ends one and starts the next).
    means = sum(path["stages"][s]["mean_ms"] for s in path["stages"])
    assert means == pytest.approx(path["end_to_end"]["mean_ms"], rel=1e-4)
    assert path["libraries"]["pillow"] == p["fingerprint"]["pipeline_libraries"]["pillow"]
    cold = p["results"]["cold_load"]
    assert cold["first_decode_ms"]["median"] > 0 and cold["first_preprocess_ms"]["median"] > 0
    assert cold["total_ms"]["median"] > cold["first_decode_ms"]["median"]
    # The gate judges it; a report without a pipeline fails the same limits as not measured.
    policy = parse_policy(
        {"pipeline": {"max_preprocessing_abs": 0.05, "max_end_to_end_p50_ms": 1000}}
    )
    checks = {c.name: c for c in evaluate(p, policy)}
    assert not checks["pipeline.max_preprocessing_abs"].passed
    assert (
        checks["pipeline.max_preprocessing_abs"].measured
        == f"{path['reference_inputs']['image']['max_abs']:.4g}"
    )
    assert checks["pipeline.max_end_to_end_p50_ms"].passed
    bare = {**p, "results": {k: v for k, v in p["results"].items() if k != "pipeline"}}
    (absent,) = [c for c in evaluate(bare, policy) if c.section == "pipeline"]
    assert not absent.passed and "no whole path measured" in absent.message
    # The page draws the stage breakdown bar, one box per stage as wide as its share, and
    # compare carries each stage's p50 and the end-to-end p50 and p99 of the signed report.
    page = tmp_path / "r.html"
    assert edgequal_main(["report", "html", str(tmp_path / "r.json"), "-o", str(page)]) == 0
    html = page.read_text()
    assert html.count('class="stagebar"') == 1
    widths = [
        float(w) for w in re.findall(r'class="stage" title="[^"]*" style="width:([0-9.]+)%', html)
    ]
    assert len(widths) == 4 and sum(widths) == pytest.approx(100.0, abs=0.1)
    assert widths[0] == pytest.approx(path["share"]["decode"] * 100, abs=0.01)
    capsys.readouterr()
    report = str(tmp_path / "r.json")
    assert edgequal_main(["compare", report, report, "--json"]) == 0
    rows = {row["figure"]: row for row in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["path end to end p50"]["values"][0] == pytest.approx(
        path["end_to_end"]["p50_ms"], rel=1e-3
    )
    # p99 needs more runs than a quick plan times: a row only where it was measured.
    assert ("path end to end p99" in rows) == (path["end_to_end"]["p99_ms"] is not None)
    assert rows["path decode p50"]["values"][0] == pytest.approx(
        path["stages"]["decode"]["p50_ms"], rel=1e-3
    )


def test_hostile_raw_files_over_ssh_are_findings_and_the_agent_keeps_serving(
    sshd_server, agent_cmd, tmp_path, test_helper, quick_plan
):
    raw = test_helper("raw_files")
    d = raw.write_four_input_cases(tmp_path / "four")
    good = tmp_path / "good.npz"
    make_golden(d / "four.onnx", None, good, raw=d / "raw", pipeline=d / "pipeline.toml")
    g = read_golden(good)
    cases = [_copy(g.cases[0], "ok")]
    for name, field, data in (
        ("truncated_jpeg", "image", raw.truncated_jpeg()),
        ("bomb", "image", raw.bomb_png()),
        ("lying_wav", "audio", raw.lying_wav()),
        ("bad_text", "input_ids", raw.invalid_utf8()),
    ):
        case = _copy(g.cases[1], name)
        case.raw[field] = data
        if field == "input_ids":
            case.raw["attention_mask"] = data
        cases.append(case)
    manifest = {k: v for k, v in g.manifest.items() if k not in ("format", "cases")}
    golden = tmp_path / "hostile.npz"
    write_golden(golden, manifest, cases, g.assets)

    transport = sshd_server.transport(agent_cmd, tmp_path / "agent-state", step_timeout_s=30)
    with transport:
        known = KnownDevices(tmp_path / "known_devices")
        info = transport.info()
        known.trust("board", transport.address, base64.b64decode(info["public_key_b64"]))
        result = qualify(
            transport, d / "four.onnx", golden, quick_plan(), known=known, device_name="board"
        )
        p = result.report.predicate
        raw_findings = {f["case"]: f for f in p["findings"] if f["kind"] == "raw_input"}
        assert set(raw_findings) == {"truncated_jpeg", "bomb", "lying_wav", "bad_text"}
        assert (
            "input 'image': the JPEG cannot be decoded" in raw_findings["truncated_jpeg"]["message"]
        )
        assert "a decompression bomb" in raw_findings["bomb"]["message"]
        assert "input 'audio': the WAV header says" in raw_findings["lying_wav"]["message"]
        assert "the text is not UTF-8" in raw_findings["bad_text"]["message"]
        assert all(
            f["stage"] == "decode" and "\n" not in f["message"] for f in raw_findings.values()
        )
        # The good case still ran the whole path, every stage timed.
        path = p["results"]["pipeline"]
        assert path["stages"]["decode"]["count"] == path["runs"] > 0
        assert p["status"] == "failed"
        # The agent is up and serves the next call.
        assert transport.info()["public_key_b64"] == info["public_key_b64"]


def _copy(case, name):
    from edgequal.contract.golden import GoldenCase

    return GoldenCase(name, dict(case.inputs), dict(case.outputs), dict(case.raw))


def test_a_tokenizer_panic_on_the_device_is_a_finding_and_the_agent_keeps_serving(
    tmp_path, quick_plan, test_helper
):
    """A golden set whose tokenizer panics (``Split`` on ``(a+)+$``) on one case's text: the
    device reports that case as a ``raw_input`` finding at the preprocess stage, runs the
    other cases, and keeps serving."""
    raw = test_helper("raw_files")
    d = raw.write_four_input_cases(tmp_path / "four")
    (d / "tokenizer.json").write_text(raw.backtracking_tokenizer_json())
    good = tmp_path / "good.npz"
    make_golden(d / "four.onnx", None, good, raw=d / "raw", pipeline=d / "pipeline.toml")
    g = read_golden(good)
    hostile = _copy(g.cases[1], "backtracking")
    text = raw.BACKTRACKING_TEXT.encode()
    hostile.raw["input_ids"] = hostile.raw["attention_mask"] = text
    manifest = {k: v for k, v in g.manifest.items() if k not in ("format", "cases")}
    golden = tmp_path / "hostile.npz"
    write_golden(golden, manifest, [_copy(g.cases[0], "ok"), hostile], g.assets)
    known = KnownDevices()
    with LocalTransport() as transport:
        pin_device_key(transport, known, "local", "local")
        result = qualify(
            transport, d / "four.onnx", golden, quick_plan(), known=known, device_name="local"
        )
        p = result.report.predicate
        (finding,) = [f for f in p["findings"] if f["kind"] == "raw_input"]
        assert finding["case"] == "backtracking" and finding["stage"] == "preprocess"
        assert "the tokenizer failed on the text (" in finding["message"]
        assert "\n" not in finding["message"]
        assert p["results"]["pipeline"]["stages"]["preprocess"]["count"] > 0
        assert transport.info()["public_key_b64"]
