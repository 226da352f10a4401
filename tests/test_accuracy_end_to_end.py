"""Accuracy on the device, end to end, on real labelled data no one here wrote.

scikit-learn's digits and patches of scikit-image's photographs (tests/labelled_data.py),
small classifiers trained here and exported to ONNX, golden sets made with
``golden make --labels``, each model qualified by a real local agent, and the signed
reports gated with ``[accuracy] max_drop = 0.5``. A planted int8 saturation (digits) and
a planted BGR swap (photos), qualified against the clean model's golden set, show as an
accuracy drop beyond its interval and fail the gate, in its JUnit and its signed
attestation; so does a BGR swap in the device's own preprocessing (a ``--raw --pipeline``
golden set of PNG files); the unchanged models pass. One module-scoped agent, five short
runs.
"""

from __future__ import annotations

import base64
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

POLICY = 'name = "accuracy"\n[accuracy]\nmax_drop = 0.5\n'


@pytest.fixture(scope="module")
def runs(tmp_path_factory, test_helper):
    """``{name: report path}`` for digits/photos, clean/planted; the agent's public key."""
    from edgequal.cli.main import main as edgequal_main

    data = test_helper("labelled_data")
    base = tmp_path_factory.mktemp("accuracy")
    digits, photos = data.digits(), data.photos()
    models = {
        "digits": data.classifier_model(base / "digits.onnx", digits),
        "digits_int8": data.classifier_model(base / "digits_int8.onnx", digits, saturate_at=8.0),
        "photos": data.classifier_model(base / "photos.onnx", photos),
        "photos_bgr": data.classifier_model(base / "photos_bgr.onnx", photos, swap_channels=True),
    }
    with pytest.MonkeyPatch.context() as mp:
        for var, sub in (
            ("EDGEQUAL_CONFIG_DIR", "config"),
            ("EDGEQUAL_AGENT_STATE", "agent-state"),
            ("EDGEQUAL_LOCAL_STATE", "local-agent"),
            ("XDG_STATE_HOME", "state"),
        ):
            mp.setenv(var, str(base / sub))
        # Golden sets through the CLI: the digits' labels as CSV, the photos' as JSON
        # naming the classes.
        import numpy as np

        np.savez(base / "digits_in.npz", **{f"{c}/x": f["x"] for c, f in digits.inputs.items()})
        np.savez(
            base / "photos_in.npz",
            **{f"{c}/image": f["image"] for c, f in photos.inputs.items()},
        )
        data.write_labels_csv(base / "digits.csv", digits.classes)
        (base / "photos.json").write_text(
            json.dumps(
                {
                    "classes": list(photos.class_names),
                    "k": 2,
                    "cases": {c: photos.class_names[k] for c, k in photos.classes.items()},
                }
            )  # fmt: skip
        )
        goldens = {"photos_raw": _raw_photos_golden(base, models["photos"], photos, test_helper)}
        for name, labels in (("digits", "digits.csv"), ("photos", "photos.json")):
            goldens[name] = base / f"{name}.golden.npz"
            argv = ["golden", "make", str(models[name]), "--inputs", str(base / f"{name}_in.npz")]
            argv += ["--decision", "argmax", "--labels", str(base / labels)]
            assert edgequal_main([*argv, "-o", str(goldens[name])]) == 0
        short = dict(
            cold_runs=1,
            warmup_min_runs=5,
            warmup_min_s=0.05,
            warmup_max_s=0.3,
            latency_min_runs=50,
            latency_min_s=0.1,
            sustain_s=0.0,
        )
        runs = [(name, model, goldens[name.split("_")[0]]) for name, model in models.items()]
        runs.append(("photos_raw", models["photos"], goldens["photos_raw"]))
        reports, raw = data.qualify_locally(runs, base, short)
    return {"reports": reports, "goldens": goldens, "public_key": raw, "data": (digits, photos)}


def _raw_photos_golden(base: Path, model: Path, photos, test_helper) -> Path:
    """120 photo patches as PNG files, labelled, in a ``--raw --pipeline`` golden set whose
    references are the training side's outputs (RGB) and whose pipeline, the one the device
    runs, declares ``color_order = "BGR"``: the planted swap in the device's preprocessing."""
    import numpy as np
    import onnxruntime as ort
    from edgequal.cli.main import main as edgequal_main

    encode_image = test_helper("raw_files").encode_image
    files = base / "photo_files"
    files.mkdir()
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    outputs, labels = {}, ["case,class"]
    for case, feeds in list(photos.inputs.items())[:120]:
        pixels = np.round(feeds["image"][0] * 255).astype(np.uint8)
        (files / f"{case}.png").write_bytes(encode_image(pixels))
        rgb = (pixels / 255.0).astype(np.float32)[None]
        outputs[f"{case}/probs"] = session.run(None, {"image": rgb})[0]
        labels.append(f"{case},{photos.classes[case]}")
    np.savez(base / "photo_outputs.npz", **outputs)
    (base / "photo_labels.csv").write_text("\n".join(labels) + "\n")
    pipeline = base / "pipeline.toml"
    pipeline.write_text(
        '[inputs.image]\ndecode = "image"\nscale = 0.00392156862745098\ncolor_order = "BGR"\n'
    )
    golden = base / "photos_raw.golden.npz"
    argv = ["golden", "make", str(model), "--raw", str(files), "--pipeline", str(pipeline)]
    argv += ["--outputs", str(base / "photo_outputs.npz"), "--decision", "argmax"]
    argv += ["--labels", str(base / "photo_labels.csv"), "-o", str(golden)]
    assert edgequal_main(argv) == 0
    return golden


@pytest.fixture
def local(runs):
    """The agent's key pinned as device 'local' in this test's own config."""
    from edgequal.host.devices.trust import KnownDevices

    known = KnownDevices()
    known.trust("local", "local", runs["public_key"])
    return known


def _predicate(path: Path) -> dict:
    envelope = json.loads(path.read_bytes())
    return json.loads(base64.b64decode(envelope["payload"]))["predicate"]


def test_the_golden_set_records_labels_and_the_reference_score(runs):
    from edgequal.contract.golden import read_golden

    digits, photos = runs["data"]
    g = read_golden(runs["goldens"]["digits"])
    assert g.labels.cases == digits.classes and len(g.labels.cases) == 797
    assert g.labels.output == "probs" and g.labels.k == 5
    ref = g.labels.reference
    assert ref["cases"] == 797 and 0.85 < ref["top1_correct"] / 797 < 0.99
    assert ref["top1_correct"] <= ref["topk_correct"] <= 797
    p = read_golden(runs["goldens"]["photos"])
    assert p.labels.classes == photos.class_names and p.labels.k == 2


def test_the_report_scores_the_device_against_the_labels(runs, local):
    from edgequal.host.judge.accuracy import accuracy_of

    clean = accuracy_of(_predicate(runs["reports"]["digits"])["results"])
    assert clean["cases"] == 797 and clean["unlabelled"] == 0
    # The same model on the device: every case decided as the reference did.
    assert clean["device"]["top1"] == clean["reference"]["top1"]
    assert clean["paired"]["reference_only"] == clean["paired"]["device_only"] == 0
    lo, hi = clean["device"]["top1"]["ci"]
    assert lo < clean["device"]["top1"]["value"] < hi and hi - lo < 0.05
    assert len(clean["per_class"]) == 10 and sum(c["support"] for c in clean["per_class"]) == 797
    assert 0.85 < clean["macro_f1"] < 0.99

    saturated = accuracy_of(_predicate(runs["reports"]["digits_int8"])["results"])
    paired = saturated["paired"]
    assert paired["reference_only"] > paired["device_only"]
    assert paired["drop_ci_points"][0] > 0.5 and paired["mcnemar_p"] < 1e-3
    assert saturated["reference"]["top1"] == clean["reference"]["top1"]

    swapped = accuracy_of(_predicate(runs["reports"]["photos_bgr"])["results"])
    assert swapped["paired"]["drop_ci_points"][0] > 20  # colour is what tells photos apart
    assert swapped["device"]["top1"]["value"] < swapped["reference"]["top1"]["value"] - 0.2


def test_the_gate_fails_the_planted_faults_and_passes_the_unchanged_models(
    runs, local, tmp_path, capsys
):
    from edgequal.cli.main import main as edgequal_main

    policy = tmp_path / "accuracy.toml"
    policy.write_text(POLICY)
    codes, junits = {}, {}
    for name, report in runs["reports"].items():
        junits[name] = tmp_path / f"{name}.xml"
        attest = tmp_path / f"{name}.intoto.json"
        argv = ["gate", str(report), "--policy", str(policy), "--device", "local"]
        codes[name] = edgequal_main([*argv, "--junit", str(junits[name]), "--attest", str(attest)])
        out = capsys.readouterr().out
        statement = json.loads(base64.b64decode(json.loads(attest.read_bytes())["payload"]))
        predicate = statement["predicate"]
        if codes[name] == 0:
            assert "accuracy.max_drop" in predicate["passedTests"], name
        else:
            assert "accuracy.max_drop" in predicate["failedTests"], name
            assert "with 95 % confidence" in out, out
    assert codes == {
        "digits": 0,
        "digits_int8": 1,
        "photos": 0,
        "photos_bgr": 1,
        "photos_raw": 1,  # the device's own preprocessing fed BGR
    }
    case = ET.parse(junits["digits_int8"]).find(".//testcase[@name='accuracy.max_drop']")
    failure = case.find("failure")
    assert failure is not None and "top-1 drop" in failure.get("message")
    passed = ET.parse(junits["digits"]).find(".//testcase[@name='accuracy.max_drop']")
    assert passed is not None and passed.find("failure") is None


def test_an_undecided_drop_passes_and_says_how_many_cases_would_decide(runs, local):
    from edgequal.host.judge.accuracy import accuracy_of
    from edgequal.host.judge.gate import run_gate
    from edgequal.host.judge.policy import parse_policy

    # The saturated digits' drop is about 3 points: a limit inside its interval.

    paired = accuracy_of(_predicate(runs["reports"]["digits_int8"])["results"])["paired"]
    lo, hi = paired["drop_ci_points"]
    limit = round((paired["drop_points"] + hi) / 2, 2)
    policy = parse_policy({"accuracy": {"max_drop": limit}})
    result = run_gate(runs["reports"]["digits_int8"].read_bytes(), policy, known=local)
    check = next(c for c in result.checks if c.name == "accuracy.max_drop")
    assert check.passed and "not decided" in check.message
    more = int(check.message.split("about ")[1].split(" more")[0])
    assert more > 0
    claim = next(c for c in result.claims if c["metric"] == "accuracy.max_drop")
    assert claim["sampleSize"] == 797


def test_summary_page_and_ml_bom_carry_accuracy_with_its_interval(runs, local, tmp_path, capsys):
    from edgequal.cli.main import main as edgequal_main
    from edgequal.host.present.terminal.summary import print_summary

    report = runs["reports"]["digits_int8"]
    print_summary(_predicate(report), "local")
    screen = " ".join(capsys.readouterr().out.split())
    assert "accuracy on 797 labelled cases: top-1" in screen and "McNemar p" in screen

    page = tmp_path / "page.html"
    assert edgequal_main(["report", "html", str(report), "-o", str(page), "--device", "local"]) == 0
    html = page.read_text()
    assert '<p class="accuracy">accuracy on 797 labelled cases' in html

    bom = tmp_path / "bom.json"
    argv = ["export", str(report), str(runs["reports"]["photos"]), "--format", "cyclonedx"]
    assert edgequal_main([*argv, "-o", str(bom)]) == 0
    metrics = [
        m
        for c in json.loads(bom.read_text())["components"]
        for m in (c.get("modelCard") or {})
        .get("quantitativeAnalysis", {})
        .get("performanceMetrics", [])
        if m["type"].startswith("accuracy")
    ]
    top1 = [m for m in metrics if m["type"] == "accuracy top-1 (fraction)"]
    assert len(top1) == 2  # one per report: board, runtime and labelled cases in its slice
    assert all("board=local;runtime=onnxruntime" in m["slice"] for m in top1)
    assert {m["slice"].split("labelled_cases=")[1].split(";")[0] for m in top1} == {"797", "403"}
    drop = next(m for m in metrics if m["type"].endswith("(points)") and "=797" in m["slice"])
    assert float(drop["confidenceInterval"]["lowerBound"]) > 0.5


def test_history_follows_the_device_s_top_1(runs):
    from edgequal.host.lab.series import figures_of

    def top1(name: str) -> float:
        figures = figures_of(_predicate(runs["reports"][name]))
        (figure,) = [f for f in figures if f.kind == "accuracy"]
        assert figure.name == "accuracy top-1" and figure.better == "higher"
        return figures[figure]

    from edgequal.contract.golden import read_manifest

    correct = read_manifest(runs["goldens"]["digits"])["labels"]["reference"]["top1_correct"]
    assert top1("digits") == pytest.approx(100 * correct / 797)
    assert top1("digits_int8") < top1("digits") - 1


def test_labels_go_through_the_device_s_own_decoding_and_preprocessing(runs):
    from edgequal.host.judge.accuracy import accuracy_of

    results = _predicate(runs["reports"]["photos_raw"])["results"]
    assert "pipeline" in results  # the whole path from the PNG files ran on the device
    score = accuracy_of(results)
    assert score["cases"] == 120
    assert score["paired"]["drop_ci_points"][0] > 20
    assert score["reference"]["top1"]["value"] > score["device"]["top1"]["value"] + 0.2
