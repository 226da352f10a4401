"""Labels files (host/labels.py), the manifest's labels (contract/labels.py) and the
device's ranking of labelled cases (agent/measure/labelled.py): every bad input is one
line and exit 2."""

from __future__ import annotations

import json

import numpy as np
import pytest
from edgequal.agent.measure.labelled import labelled_predictions, top_classes
from edgequal.contract.errors import BadInput
from edgequal.contract.labels import Labels
from edgequal.host.errors import UsageError
from edgequal.host.labels import read_labels_file

CASES = ["a", "b", "c"]


def test_csv_and_json_labels(tmp_path):
    csv = tmp_path / "l.csv"
    csv.write_text("case,class\na,2\nb,0\n\nc,1\n")
    labels = read_labels_file(csv, CASES)
    assert labels.cases == {"a": 2, "b": 0, "c": 1} and labels.k == 5
    doc = {"classes": ["cat", "dog", "owl"], "k": 2, "cases": {"a": "owl", "b": "cat", "c": 1}}
    js = tmp_path / "l.json"
    js.write_text(json.dumps(doc))
    labels = read_labels_file(js, CASES)
    assert labels.cases == {"a": 2, "b": 0, "c": 1} and labels.classes == ("cat", "dog", "owl")
    assert labels.k == 2 and labels.class_name(2) == "owl"
    assert Labels.from_json(labels.to_json()) == labels


@pytest.mark.parametrize(
    "text, message",
    [
        ("case,label\na,1\n", "header must name 'case' and 'class'"),
        ("case,class\na,1\nb,2\n", "1 cases have no label (first 'c')"),
        ("case,class\na,1\nb,2\nc,0\nd,1\n", "1 labels name no case"),
        ("case,class\na,1\na,2\nb,0\nc,0\n", "case 'a' is labelled twice"),
        ("case,class\na,cat\nb,1\nc,1\n", "class 'cat' is not a class index"),
        ("case,class\na,1,3\n", "line 2 has 3 fields"),
        ('{"cases": {"a": 1, "b": 1, "c": 1}, "k": 0}', "'k' must be a whole number"),
        ('{"cases": {"a": 3, "b": 1, "c": 1}, "classes": ["x", "y"]}', "out of range"),
        ('{"cases": 3}', "'cases' must be an object"),
        ('{"task": "keypoints", "cases": {}}', "task 'keypoints' is not one of"),
        (
            '{"task": "detection", "cases": {"a": [[0, 0, 0, 1, 0]], "b": [], "c": []}}',
            "w and h > 0",
        ),
        ('{"task": "vad", "cases": {"a": [[2, 1]], "b": [], "c": []}}', "start < end"),
        (
            '{"task": "vad", "layout": {"hop": 1}, "cases": {"a": [], "b": [], "c": []}}',
            "unknown layout field 'hop'",
        ),
        (
            '{"task": "segmentation", "cases": {"a": "no.png", "b": [[0]], "c": [[1]]}}',
            "cannot read mask 'no.png'",
        ),
        ("{", "not valid JSON"),
    ],
)
def test_a_bad_labels_file_is_one_line_and_exit_2(tmp_path, text, message):
    path = tmp_path / ("l.json" if text.startswith("{") else "l.csv")
    path.write_text(text)
    with pytest.raises(UsageError) as e:
        read_labels_file(path, CASES)
    assert message in str(e.value) and "\n" not in str(e.value)
    assert e.value.exit_code == 2


def test_a_missing_labels_file(tmp_path):
    with pytest.raises(UsageError, match="labels file not found"):
        read_labels_file(tmp_path / "none.csv", CASES)


@pytest.mark.parametrize(
    "value, message",
    [
        ({"task": "classification", "cases": {"a": -1}}, "class index >= 0"),
        ({"task": "classification", "cases": {}}, "at least one case"),
        ({"task": "classification", "cases": {"a": 1}, "extra": 1}, "unknown field 'extra'"),
        ({"task": "classification", "cases": {"a": True}}, "class index"),
        ({"task": "classification", "cases": {"a": 1}, "reference": {"x": -1}}, "counts"),
        ([1], "must be an object"),
    ],
)
def test_a_manifest_s_labels_are_checked_before_use(value, message):
    with pytest.raises(BadInput, match=message):
        Labels.from_json(value)


def test_the_device_ranks_each_labelled_case():
    labels = Labels("classification", {"a": 2, "b": 0}, k=2)
    probs = {"a": np.array([[0.1, 0.3, 0.6]]), "b": np.array([[np.nan, 0.5, 0.2]])}
    ref = {"a": np.array([[0.2, 0.5, 0.3]]), "b": np.array([[0.9, 0.05, 0.05]])}
    probs["z"] = ref["z"] = np.array([[1.0, 0.0, 0.0]])
    cases = [(c, {"probs": probs[c]}, {"probs": ref[c]}) for c in ("a", "b", "z")]
    out = labelled_predictions(labels, "argmax", cases)
    assert out["output"] == "probs" and out["unlabelled"] == ["z"]
    assert out["cases"] == [
        {"case": "a", "label": 2, "device": [2, 1], "reference": [1, 2]},
        {"case": "b", "label": 0, "device": [1, 2], "reference": [0, 1]},  # NaN ranks last
    ]
    with pytest.raises(BadInput, match="one row of class scores"):
        top_classes(np.zeros((2, 3)), 1)
