"""The device's predictions on a labelled golden set, beside the labels: what the host scores.

Pure (numpy only). For a classification set (``contract/labels.py``) each labelled case
gets the device's top-k classes and the reference outputs' top-k, both ranked from the
labels' output, best first; NaN scores rank last (a NaN output loses its class, as the
decision rule's ``argmax`` does). The agent reports them in ``drift.labelled``; accuracy,
its intervals and the paired change are the host's (``host/judge/accuracy.py``), so the
agent carries no statistics library. The host's ``golden make`` ranks the reference the
same way for the score the set records.

The other tasks, each small and numpy-only:

- detection: the device's and the reference's detections per case, decoded from the
  layout's outputs (boxes [N, 4], scores [N], classes [N]), the ``max_detections`` best at
  or above ``floor``, as ``[x, y, w, h, score, class]`` (COCO's box); mAP is the host's
  (pycocotools);
- segmentation: per case and class, the pixels where the label and the prediction agree
  (intersection) and where either has the class (union), the prediction the output's
  argmax over its class axis ([1, C, H, W]) or the output itself ([1, H, W], classes);
- vad: per case the speech frames' true positives, false positives and false negatives, a
  frame of ``hop_s`` speech in the label when its centre lies in an interval and on the
  device when its score is at or above ``threshold``.
"""

from __future__ import annotations

import numpy as np
from edgequal.contract.errors import BadInput


def scores_output(labels, golden_decision: str | None, outputs: dict) -> str:
    """The output whose scores rank the classes: the labels' own, else the decision rule's,
    else the first; BadInput when the outputs lack it."""
    name = labels.output
    if name is None and golden_decision:
        from .drift import parse_decision_rule

        name = parse_decision_rule(golden_decision).output
    if name is None:
        if not outputs:
            raise BadInput("labelled cases: the model has no output to rank classes by")
        return next(iter(outputs))
    if name not in outputs:
        raise BadInput(f"labels name output {name!r}, outputs are {list(outputs)}")
    return name


def top_classes(scores, k: int) -> list[int]:
    """The ``k`` best class indices of one case's scores (one row; leading axes of size 1
    dropped), best first; NaN ranks last. BadInput for a case holding several rows."""
    values = np.asarray(scores, dtype=np.float64)
    row = values.reshape(-1, values.shape[-1]) if values.ndim else values.reshape(1, 1)
    if row.shape[0] != 1:
        raise BadInput(
            f"labelled cases need one row of class scores per case, got shape {values.shape}"
        )
    ranked = np.where(np.isnan(row[0]), -np.inf, row[0])
    order = np.argsort(-ranked, kind="stable")
    return [int(i) for i in order[: min(k, order.size)]]


def labelled_predictions(labels, golden_decision: str | None, cases) -> dict:
    """``cases`` are ``(name, device_outputs, reference_outputs)``; the labelled ones become
    ``{"task", "output", "k", "classes", "cases": [{case, label, device, reference}],
    "unlabelled": [names]}``; cases without a label are named, not scored."""
    rows, unlabelled = [], []
    output = None
    for name, actual, reference in cases:
        if name not in labels.cases:
            unlabelled.append(name)
            continue
        if labels.task != "classification":
            output = output or _task_output(labels, golden_decision, reference)
            rows.append(_task_row(labels, name, output, actual, reference))
            continue
        output = output or scores_output(labels, golden_decision, reference)
        if output not in actual:
            raise BadInput(f"case {name!r}: output {output!r} is missing from the device's outputs")
        rows.append(
            {
                "case": name,
                "label": labels.cases[name],
                "device": top_classes(actual[output], labels.k),
                "reference": top_classes(reference[output], labels.k),
            }
        )
    return {
        "task": labels.task,
        "output": output,
        "k": labels.k,
        "classes": list(labels.classes) if labels.classes is not None else None,
        "cases": rows,
        "unlabelled": unlabelled,
        **({"layout": dict(labels.layout)} if labels.task != "classification" else {}),
    }


def _task_output(labels, golden_decision: str | None, outputs: dict) -> str:
    """Detection reads the layout's outputs (its boxes output names it); the others one."""
    if labels.task == "detection":
        for key in ("boxes", "scores", "classes"):
            if labels.layout[key] not in outputs:
                raise BadInput(
                    f"labels' layout names output {labels.layout[key]!r} ({key}), "
                    f"outputs are {list(outputs)}"
                )
        return labels.layout["boxes"]
    return scores_output(labels, golden_decision, outputs)


def _task_row(labels, name: str, output: str, actual: dict, reference: dict) -> dict:
    """One labelled case of a detection, segmentation or vad set: the device's and the
    reference's results beside the label, as the host scores them."""
    for outputs in (actual, reference):
        keys = (
            [labels.layout[k] for k in ("boxes", "scores", "classes")]
            if (labels.task == "detection")
            else [output]
        )
        missing = [k for k in keys if k not in outputs]
        if missing:
            raise BadInput(f"case {name!r}: output {missing[0]!r} is missing")
    label = labels.cases[name]
    if labels.task == "detection":
        return {
            "case": name,
            "label": label,
            "device": detections(actual, labels.layout),
            "reference": detections(reference, labels.layout),
        }
    if labels.task == "segmentation":
        from edgequal.contract.labels import mask_of

        truth = mask_of(label)
        return {
            "case": name,
            "device": mask_counts(truth, predicted_mask(actual[output], truth.shape)),
            "reference": mask_counts(truth, predicted_mask(reference[output], truth.shape)),
        }
    return {
        "case": name,
        "device": frame_counts(label, actual[output], labels.layout),
        "reference": frame_counts(label, reference[output], labels.layout),
    }


def detections(outputs: dict, layout: dict) -> list[list[float]]:
    """A case's detections ``[x, y, w, h, score, class]``, best first: the layout's
    outputs, the ``max_detections`` best at or above ``floor``; NaN scores dropped."""
    boxes = np.asarray(outputs[layout["boxes"]], dtype=np.float64)
    scores = np.asarray(outputs[layout["scores"]], dtype=np.float64).reshape(-1)
    classes = np.asarray(outputs[layout["classes"]]).reshape(-1)
    if boxes.size != 4 * scores.size or classes.size != scores.size:
        raise BadInput(
            f"detection outputs disagree: boxes {boxes.shape}, scores {scores.shape}, "
            f"classes {classes.shape} (boxes [N, 4], scores [N], classes [N])"
        )
    boxes = boxes.reshape(-1, 4)
    if layout["box_format"] == "xyxy":
        boxes = np.column_stack([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]])
    keep = np.flatnonzero(np.nan_to_num(scores, nan=-np.inf) >= layout["floor"])
    keep = keep[np.argsort(-scores[keep], kind="stable")][: layout["max_detections"]]
    return [
        [*(round(float(v), 3) for v in boxes[i]), round(float(scores[i]), 5), int(classes[i])]
        for i in keep
        if np.isfinite(boxes[i]).all()
    ]


def predicted_mask(values, shape: tuple) -> np.ndarray:
    """The predicted class mask of a segmentation output: [.., C, H, W] scores by their
    argmax over C (NaN last), or [.., H, W] classes; BadInput when it is not ``shape``."""
    array = np.asarray(values)
    squeezed = array
    while squeezed.ndim > 3 and squeezed.shape[0] == 1:
        squeezed = squeezed[0]
    if squeezed.ndim == 3 and squeezed.shape[0] == 1:  # [1, H, W]: a class mask
        squeezed = squeezed[0]
    if squeezed.shape == tuple(shape):
        return np.rint(squeezed).astype(np.int64)
    if squeezed.ndim == 3 and squeezed.shape[1:] == tuple(shape):
        scores = np.where(np.isnan(squeezed), -np.inf, squeezed.astype(np.float64))
        return np.argmax(scores, axis=0)
    raise BadInput(
        f"segmentation output of shape {array.shape} is neither [C, {shape[0]}, {shape[1]}] "
        f"scores nor a [{shape[0]}, {shape[1]}] class mask"
    )


def mask_counts(truth: np.ndarray, predicted: np.ndarray) -> list[list[int]]:
    """Per class present in either mask: ``[class, intersection, union]`` pixel counts."""
    rows = []
    for cls in np.union1d(np.unique(truth), np.unique(predicted)):
        t, p = truth == cls, predicted == cls
        rows.append([int(cls), int(np.count_nonzero(t & p)), int(np.count_nonzero(t | p))])
    return rows


def frame_counts(intervals: list, scores, layout: dict) -> dict:
    """A case's speech frames: ``{"tp", "fp", "fn", "frames"}`` of the scores (one per
    frame) against the labelled intervals, frames of ``hop_s`` judged at their centre."""
    values = np.asarray(scores, dtype=np.float64).reshape(-1)
    centres = (np.arange(values.size) + 0.5) * layout["hop_s"]
    truth = np.zeros(values.size, dtype=bool)
    for start, end in intervals:
        truth |= (centres >= start) & (centres < end)
    speech = np.nan_to_num(values, nan=-np.inf) >= layout["threshold"]
    return {
        "tp": int(np.count_nonzero(truth & speech)),
        "fp": int(np.count_nonzero(~truth & speech)),
        "fn": int(np.count_nonzero(truth & ~speech)),
        "frames": int(values.size),
    }


def labelled_of_golden(golden, device_outputs: dict) -> dict:
    """:func:`labelled_predictions` of a golden set's cases the device ran (``device_outputs``
    by case name), or ``{"error"}`` saying why they could not be ranked: the drift stands
    without them, and the host's accuracy check says so."""
    cases = [
        (c.name, device_outputs[c.name], c.outputs)
        for c in golden.cases
        if c.name in device_outputs
    ]
    try:
        return labelled_predictions(golden.labels, golden.decision, cases)
    except BadInput as e:
        return {"error": str(e)}
