"""Detection mAP, segmentation mean IoU and voice-activity frame F1 on the device, end to
end: labelled golden sets made with ``golden make --labels`` (JSON: boxes, masks as PNG and
.npy files, speech intervals), small ONNX models built here (tests/task_data.py) qualified
by one real local agent, and a text-direction classifier (upright against 180° strips
of scikit-image's scanned text, a logistic regression trained here) on its top-1, the signed reports scored on the host (pycocotools for mAP) with
paired bootstrap intervals and gated with ``[accuracy] max_drop = 1``. Each planted fault
(boxes shifted 2 pixels, a segmentation threshold too high, speech read 8 frames late)
drops its headline metric beyond its interval and fails the gate; the unchanged models pass.
"""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

pytestmark = pytest.mark.slow

CASES = 40
POLICY = 'name = "task accuracy"\n[accuracy]\nmax_drop = 1\n'


def _labels(base, task, cases, layout=None):
    path = base / f"{task}.json"
    doc = {"task": task, "cases": cases} | ({"layout": layout} if layout else {})
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory, test_helper):
    from edgequal.cli.main import main as edgequal_main
    from PIL import Image

    data = test_helper("task_data")
    base = tmp_path_factory.mktemp("tasks")
    images, boxes, masks = data.squares(CASES)
    energy, intervals = data.speech(CASES)
    names = [f"c{i:02d}" for i in range(CASES)]
    np.savez(base / "images.npz", **{f"{c}/image": images[i : i + 1] for i, c in enumerate(names)})
    np.savez(base / "energy.npz", **{f"{c}/energy": energy[i : i + 1] for i, c in enumerate(names)})
    (base / "masks").mkdir()
    mask_files = {}
    for i, c in enumerate(names):  # half PNG, half .npy
        if i % 2:
            Image.fromarray(masks[i].astype(np.uint8)).save(base / "masks" / f"{c}.png")
            mask_files[c] = f"masks/{c}.png"
        else:
            np.save(base / "masks" / f"{c}.npy", masks[i])
            mask_files[c] = f"masks/{c}.npy"
    models = {
        "detection": data.detector(base / "det.onnx"),
        "detection_shifted": data.detector(base / "det_shifted.onnx", shift=2.0),
        "segmentation": data.segmenter(base / "seg.onnx"),
        "segmentation_dim": data.segmenter(base / "seg_dim.onnx", threshold=0.85),
        "vad": data.vad(base / "vad.onnx"),
        "vad_late": data.vad(base / "vad_late.onnx", late=8),
    }
    labels = {
        "detection": _labels(base, "detection", dict(zip(names, boxes))),
        "segmentation": _labels(base, "segmentation", mask_files),
        "vad": _labels(base, "vad", dict(zip(names, intervals)), {"hop_s": data.HOP}),
    }
    w, b, strips, directions = data.text_lines()
    np.savez(base / "strips.npz", **{f"{c}/x": f["x"] for c, f in strips.items()})
    models["direction"] = data.direction_model(base / "direction.onnx", w, b)
    models["direction_rotated"] = data.direction_model(base / "rot.onnx", w, b, rotated=True)
    labels["direction"] = base / "direction.csv"
    labels["direction"].write_text(
        "case,class\n" + "".join(f"{c},{k}\n" for c, k in directions.items())
    )
    inputs = {"detection": "images", "segmentation": "images", "vad": "energy"}
    inputs["direction"] = "strips"
    with pytest.MonkeyPatch.context() as mp:
        for var, sub in (
            ("EDGEQUAL_CONFIG_DIR", "config"),
            ("EDGEQUAL_AGENT_STATE", "agent-state"),
            ("EDGEQUAL_LOCAL_STATE", "local-agent"),
            ("XDG_STATE_HOME", "state"),
        ):
            mp.setenv(var, str(base / sub))
        goldens = {}
        for task in labels:
            goldens[task] = base / f"{task}.golden.npz"
            argv = ["golden", "make", str(models[task]), "--inputs"]
            argv += [str(base / f"{inputs[task]}.npz"), "--labels", str(labels[task])]
            assert edgequal_main([*argv, "-o", str(goldens[task])]) == 0
        short = dict(
            cold_runs=1,
            warmup_min_runs=2,
            warmup_min_s=0.01,
            warmup_max_s=0.1,
            latency_min_runs=10,
            latency_min_s=0.05,
            sustain_s=0.0,
        )
        runs = [(name, model, goldens[name.split("_")[0]]) for name, model in models.items()]
        reports, raw = test_helper("labelled_data").qualify_locally(runs, base, short)
    return {"reports": reports, "goldens": goldens, "public_key": raw, "boxes": boxes}


def _predicate(path) -> dict:
    envelope = json.loads(path.read_bytes())
    return json.loads(base64.b64decode(envelope["payload"]))["predicate"]


def _results(path) -> dict:
    return _predicate(path)["results"]


def test_the_golden_sets_record_the_labels_and_the_reference_score(runs):
    from edgequal.contract.golden import read_golden
    from edgequal.contract.labels import mask_of

    det = read_golden(runs["goldens"]["detection"]).labels
    assert det.task == "detection" and det.cases["c00"] == runs["boxes"][0]
    assert det.reference == {"cases": CASES, "map": 100.0, "map50": 100.0}
    seg = read_golden(runs["goldens"]["segmentation"]).labels
    assert mask_of(seg.cases["c01"]).shape == (32, 32) and seg.reference["mean_iou"] == 100.0
    vad = read_golden(runs["goldens"]["vad"]).labels
    assert vad.layout["hop_s"] == 0.01 and vad.reference["f1"] > 99


def test_the_headline_metrics_and_their_paired_intervals(runs):
    from edgequal.host.judge.accuracy import accuracy_of

    scores = {name: accuracy_of(_results(path)) for name, path in runs["reports"].items()}
    clean = scores["detection"]
    assert clean["device"]["map"]["value"] == 1.0 and clean["paired"]["drop_ci_points"] == [0, 0]
    shifted = scores["detection_shifted"]
    assert shifted["device"]["map50"]["value"] < shifted["reference"]["map50"]["value"]
    lo, hi = shifted["device"]["map"]["ci"]
    assert lo <= shifted["device"]["map"]["value"] <= hi < 0.9
    for name in ("detection_shifted", "segmentation_dim", "vad_late"):
        paired = scores[name]["paired"]
        assert paired["drop_ci_points"][0] > 1, (name, paired)
        assert paired["drop_ci_points"][0] <= paired["drop_points"] <= paired["drop_ci_points"][1]
    assert scores["segmentation"]["device"]["mean_iou"]["value"] == 1.0
    assert scores["vad"]["paired"]["drop_points"] == 0
    # History follows each task's headline on the device, the figure the gate judges.
    from edgequal.host.lab.series import figures_of

    for name, figure in (
        ("detection_shifted", "accuracy mAP@0.5:0.95"),
        ("segmentation_dim", "accuracy mean IoU"),
        ("vad_late", "accuracy VAD frame F1"),
    ):
        headline = {
            f.name: (f, v) for f, v in figures_of(_predicate(runs["reports"][name])).items()
        }
        f, value = headline[figure]
        metric = scores[name]["headline"]
        assert (f.kind, f.better) == ("accuracy", "higher")
        assert value == pytest.approx(100 * scores[name]["device"][metric]["value"])


def test_the_gate_fails_the_planted_faults_and_passes_the_unchanged_models(runs, tmp_path, capsys):
    from edgequal.cli.main import main as edgequal_main
    from edgequal.host.devices.trust import KnownDevices

    KnownDevices().trust("local", "local", runs["public_key"])
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    codes, screens = {}, {}
    for name, report in runs["reports"].items():
        codes[name] = edgequal_main(
            ["gate", str(report), "--policy", str(policy), "--device", "local"]
        )
        screens[name] = " ".join(capsys.readouterr().out.split())
    assert codes == {
        "detection": 0,
        "detection_shifted": 1,
        "segmentation": 0,
        "segmentation_dim": 1,
        "vad": 0,
        "vad_late": 1,
        "direction": 0,
        "direction_rotated": 1,  # every strip read upside down
    }
    assert "mAP@0.5:0.95 drop" in screens["detection_shifted"]
    assert "with 95 % confidence" in screens["vad_late"]


def test_the_text_direction_classifier_on_the_device(runs):
    from edgequal.host.judge.accuracy import accuracy_of

    clean = accuracy_of(_results(runs["reports"]["direction"]))
    top1 = clean["device"]["top1"]
    assert clean["task"] == "classification" and clean["cases"] == 200
    assert 0.6 < top1["value"] < 0.95 and top1["ci"][0] > 0.5  # better than a coin
    assert clean["paired"]["drop_points"] == 0
    turned = accuracy_of(_results(runs["reports"]["direction_rotated"]))
    # Read upside down, a strip's direction is decided backwards: top-1 falls below half.
    assert turned["device"]["top1"]["value"] < 0.5 < top1["value"]
    assert turned["paired"]["drop_ci_points"][0] > 10
