"""Detection, segmentation and voice-activity scores of a labelled report, each with its
95 % bootstrap interval over cases, and the change against the reference paired on the
same resampled cases (docs/accuracy.md).

- detection: mAP@0.5 and mAP@0.5:0.95 (COCO's 101-point interpolated AP, averaged over
  the classes with ground truth) by pycocotools, the well-kept implementation; each case's
  matches are evaluated once (``COCOeval.evaluate``) and the bootstrap only re-accumulates
  the resampled cases' matches (``COCOeval.accumulate``), so no box is matched twice;
- segmentation: mean IoU over the classes present, each class's IoU its intersection
  over its union pooled over the cases;
- vad: frame-level F1 of speech, 2 TP / (2 TP + FP + FN) pooled over the cases.

The interval is the percentile bootstrap over cases (seeded: the same report gives the
same interval): the device's and the reference's scores are resampled on the same cases,
so the drop's interval is paired. Pure but for pycocotools (host only).
"""

from __future__ import annotations

import contextlib
import copy
import io

import numpy as np

SEED = 20260
RESAMPLES = {"detection": 200, "segmentation": 1000, "vad": 1000}
"""Bootstrap resamples per task: detection re-accumulates per resample (pycocotools, about
ms each); the others are sums of counts, vectorised."""
HEADLINE = {"detection": "map", "segmentation": "mean_iou", "vad": "f1"}
NAMES = {"map": "mAP@0.5:0.95", "map50": "mAP@0.5", "mean_iou": "mean IoU", "f1": "VAD frame F1"}


def _resamples(n: int, count: int) -> np.ndarray:
    """``count`` resamples of ``n`` case positions, seeded."""
    return np.random.default_rng(SEED).integers(0, n, size=(count, n))


def _weights(picks: np.ndarray, n: int) -> np.ndarray:
    """How often each case is drawn in each resample: [resamples, n]."""
    rows = np.arange(picks.shape[0])[:, None]
    w = np.zeros((picks.shape[0], n))
    np.add.at(w, (rows, picks), 1)
    return w


class _Coco:
    """One side's (device or reference) detections against the labels, evaluated once."""

    def __init__(self, truth: list[list], found: list[list], max_detections: int):
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval

        classes = sorted({int(b[4]) for boxes in truth for b in boxes})
        classes += sorted({int(d[5]) for ds in found for d in ds} - set(classes))
        images = [{"id": i + 1} for i in range(len(truth))]
        cats = [{"id": c + 1} for c in classes]
        gt_anns = [
            {"image_id": i + 1, "category_id": int(b[4]) + 1, "bbox": list(b[:4])}
            for i, boxes in enumerate(truth)
            for b in boxes
        ]
        dt_anns = [
            {
                "image_id": i + 1,
                "category_id": int(d[5]) + 1,
                "bbox": list(d[:4]),
                "score": d[4],
            }
            for i, ds in enumerate(found)
            for d in ds
        ]
        with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its progress
            gt, dt = COCO(), COCO()
            for coco, anns in ((gt, gt_anns), (dt, dt_anns)):
                for k, a in enumerate(anns):
                    a.update(id=k + 1, area=a["bbox"][2] * a["bbox"][3], iscrowd=0)
                coco.dataset = {"images": images, "categories": cats, "annotations": anns}
                coco.createIndex()
            self.eval = COCOeval(gt, dt, "bbox")
            p = self.eval.params
            p.imgIds = [im["id"] for im in images]
            p.catIds = [c["id"] for c in cats]
            p.areaRng, p.areaRngLbl, p.maxDets = [[0, 1e12]], ["all"], [max_detections]
            self.eval.evaluate()
        self.matches = list(self.eval.evalImgs)
        self.n, self.classes = len(images), len(cats)

    def score(self, picks=None) -> dict:
        """mAP@0.5:0.95 and mAP@0.5 of the cases at ``picks`` (all when None)."""
        e = self.eval
        picks = np.arange(self.n) if picks is None else picks
        e.evalImgs = [self.matches[k * self.n + int(i)] for k in range(self.classes) for i in picks]
        e.params = copy.copy(e.params)
        e.params.imgIds = list(range(len(picks)))
        e._paramsEval = copy.copy(e.params)
        with contextlib.redirect_stdout(io.StringIO()):
            e.accumulate()
        precision = e.eval["precision"][:, :, :, 0, -1]  # [IoU, recall, class]

        def mean(p):
            valid = p[p > -1]
            return float(valid.mean()) if valid.size else 0.0

        return {"map": mean(precision), "map50": mean(precision[0])}


def _side_scores(task: str, rows: list[dict], side: str, layout: dict):
    """A scorer of one side: ``score(picks)`` -> {metric: value} for resampled positions."""
    if task == "detection":
        coco = _Coco(
            [r["label"] for r in rows], [r[side] for r in rows], layout.get("max_detections", 100)
        )
        return coco.score, False
    if task == "segmentation":
        classes = 1 + max((c for r in rows for c, _, _ in r[side]), default=0)
        counts = np.zeros((len(rows), classes, 2))
        for i, r in enumerate(rows):
            for c, inter, union in r[side]:
                counts[i, c] = inter, union

        def mean_iou(w: np.ndarray) -> np.ndarray:
            inter, union = w @ counts[:, :, 0], w @ counts[:, :, 1]
            iou = np.where(union > 0, inter / np.maximum(union, 1), np.nan)
            return np.nanmean(iou, axis=-1)

        return mean_iou, True
    counts = np.array([[r[side][k] for k in ("tp", "fp", "fn")] for r in rows], dtype=float)

    def f1(w: np.ndarray) -> np.ndarray:
        tp, fp, fn = (w @ counts).T
        denom = 2 * tp + fp + fn
        return np.where(denom > 0, 2 * tp / np.maximum(denom, 1), 1.0)

    return f1, True


def score_task(labelled: dict) -> dict:
    """The scores of a detection, segmentation or vad ``drift.labelled``: ``{"task", "cases",
    "headline", "device": {metric: {value, ci}}, "reference": {...}, "paired": {"drop_points",
    "drop_ci_points", "resamples"}}`` (drop: reference minus device on the headline, points)."""
    task, rows = labelled["task"], labelled.get("cases") or []
    n, count = len(rows), RESAMPLES[task]
    headline = HEADLINE[task]
    out = {
        "task": task,
        "output": labelled.get("output"),
        "cases": n,
        "unlabelled": len(labelled.get("unlabelled") or []),
        "headline": headline,
        "device": {},
        "reference": {},
        "paired": {"drop_points": None, "drop_ci_points": None, "resamples": count},
    }
    if not n:
        return out
    picks = _resamples(n, count)
    draws = {}
    for side in ("device", "reference"):
        scorer, vectorised = _side_scores(task, rows, side, labelled.get("layout") or {})
        if vectorised:
            value = {headline: float(scorer(np.ones(n)))}
            boot = {headline: scorer(_weights(picks, n))}
        else:
            value = scorer()
            each = [scorer(p) for p in picks]
            boot = {k: np.array([e[k] for e in each]) for k in value}
        draws[side] = boot[headline]
        out[side] = {
            k: {"value": v, "ci": [float(x) for x in np.percentile(boot[k], [2.5, 97.5])]}
            for k, v in value.items()
        }
    drop = 100 * (draws["reference"] - draws["device"])
    out["paired"]["drop_points"] = 100 * (
        out["reference"][headline]["value"] - out["device"][headline]["value"]
    )
    out["paired"]["drop_ci_points"] = [float(x) for x in np.percentile(drop, [2.5, 97.5])]
    return out


def device_headline(labelled: dict) -> tuple[str, float] | None:
    """The device's headline figure of a detection, segmentation or vad ``drift.labelled``,
    without its interval: (metric, value in 0–1), the figure a history series follows; None
    without cases."""
    task, rows = labelled.get("task"), labelled.get("cases") or []
    if task not in HEADLINE or not rows:
        return None
    headline = HEADLINE[task]
    scorer, vectorised = _side_scores(task, rows, "device", labelled.get("layout") or {})
    value = scorer(np.ones(len(rows))) if vectorised else scorer()[headline]
    return headline, float(value)


def reference_score(labelled: dict) -> dict:
    """The reference's own scores (no interval) for the golden set's manifest: ``cases`` and
    each metric in percent, rounded to 0.01 (``labels.reference``)."""
    score = score_task(labelled)
    return {"cases": score["cases"]} | {
        k: round(100 * v["value"], 2) for k, v in score["reference"].items()
    }


def task_text(score: dict) -> str:
    """One line: the device's headline (and mAP@0.5) with intervals, the reference's, the
    paired drop with its interval."""
    task, dev, ref = score["task"], score["device"], score["reference"]
    if not dev:
        return f"{task} accuracy: no labelled cases"

    def pct(v: dict) -> str:
        return f"{100 * v['value']:.2f} % (95 % CI {100 * v['ci'][0]:.2f}–{100 * v['ci'][1]:.2f})"

    parts = [f"{NAMES[k]} {pct(v)}" for k, v in dev.items()]
    head = score["headline"]
    line = (
        f"{task} accuracy on {score['cases']} labelled cases: {', '.join(parts)}; reference "
        f"{NAMES[head]} {100 * ref[head]['value']:.2f} %"
    )
    lo, hi = score["paired"]["drop_ci_points"]
    return line + (
        f"; drop {score['paired']['drop_points']:.2f} points (95 % CI {lo:.2f}–{hi:.2f}, "
        f"paired bootstrap over cases, {score['paired']['resamples']} resamples)"
    )
