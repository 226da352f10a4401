"""The labels of a labelled golden set: what each case truly is, recorded in the manifest.

A golden set made with ``golden make --labels FILE`` carries, in its manifest's
``labels`` (so the set's sha256, a subject of every report, covers them)::

    {"task": "classification", "output": "probs" | null, "k": 5,
     "classes": ["zero", ...] | null, "cases": {"case0": 3, ...},
     "reference": {"cases": 797, "top1_correct": 770, "topk_correct": 795}}

``task`` is ``classification`` (a class index per case), ``detection`` (per case a list
of boxes ``[x, y, w, h, class]``, COCO-style, pixels), ``segmentation`` (per case a class
mask, run-length coded: ``{"shape": [H, W], "rle": [class, run, class, run, ...]}`` row
major) or ``vad`` (per case the speech intervals ``[[start_s, end_s], ...]``); ``layout``
what the task needs to read the model's outputs (:data:`LAYOUTS`); ``output`` the output
whose scores rank the classes, hold the mask or the frames' speech scores (null: the
decision rule's output, else the model's first); ``k`` the top-k the device's predictions
keep (classification); ``reference`` the reference outputs' own score on the labelled
cases, counted when the set was made.

The agent reads them (hostile input: every field is checked here) and reports, per
labelled case, the device's top-k and the reference's top-k beside the label
(``agent/measure/labelled.py``); the host scores them with their intervals
(``host/judge/accuracy.py``, docs/accuracy.md). Pure: json-ready data in and out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from .errors import BadInput

TASKS = ("classification", "detection", "segmentation", "vad")
"""The labelled tasks a golden set may declare."""
LAYOUTS = {
    "classification": {},
    "detection": {
        "boxes": "boxes",
        "scores": "scores",
        "classes": "classes",
        "box_format": "xyxy",
        "floor": 0.05,
        "max_detections": 100,
    },
    "segmentation": {},
    "vad": {"hop_s": 0.01, "threshold": 0.5},
}
"""Per task, the layout's fields and their defaults. Detection: the outputs holding the
boxes ([N, 4], ``xyxy`` corners or ``xywh``), their scores [N] and classes [N]; the device
keeps the ``max_detections`` best above ``floor``. VAD: the frames' hop in seconds and the
speech score at or above which a frame is speech."""
BOX_FORMATS = ("xyxy", "xywh")
MAX_MASK_PIXELS = 1 << 24
MAX_ITEMS = 100_000
DEFAULT_K = 5
MAX_K = 1000
MAX_CLASS = 2**31 - 1


@dataclass(frozen=True)
class Labels:
    """A golden set's labels: the task, the class per case, the reference's own score."""

    task: str
    cases: dict[str, int]
    k: int = DEFAULT_K
    output: str | None = None
    classes: tuple[str, ...] | None = None
    reference: dict = field(default_factory=dict)
    layout: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        """The manifest's ``labels`` object."""
        return {
            "task": self.task,
            "output": self.output,
            "k": self.k,
            "classes": list(self.classes) if self.classes is not None else None,
            "cases": dict(self.cases),
            "reference": dict(self.reference),
            **({"layout": dict(self.layout)} if self.layout else {}),
        }

    @classmethod
    def from_json(cls, value, where: str = "labels") -> Labels | None:
        """Labels from a manifest's ``labels`` (None when absent); BadInput naming the field."""
        if value is None:
            return None

        def bad(name: str, what: str) -> BadInput:
            return BadInput(f"{where}: '{name}' must be {what}")

        if not isinstance(value, Mapping):
            raise bad("labels", "an object")
        unknown = sorted(
            set(value) - {"task", "output", "k", "classes", "cases", "reference", "layout"}
        )
        if unknown:
            raise BadInput(f"{where}: unknown field {unknown[0][:80]!r}")
        task = value.get("task")
        if task not in TASKS:
            raise bad("task", "one of " + ", ".join(TASKS))
        k = value.get("k", DEFAULT_K)
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
            raise bad("k", f"a whole number from 1 to {MAX_K}")
        output = value.get("output")
        if output is not None and not isinstance(output, str):
            raise bad("output", "an output name or null")
        classes = value.get("classes")
        if classes is not None and (
            not isinstance(classes, list) or not all(isinstance(c, str) for c in classes)
        ):
            raise bad("classes", "a list of class names or null")
        cases = value.get("cases")
        if not isinstance(cases, Mapping) or not cases:
            raise bad("cases", "an object of case name -> label, with at least one case")
        n_classes = len(classes) if classes is not None else MAX_CLASS + 1
        for name, label in cases.items():
            _check_case(task, label, n_classes, f"{where}: 'cases.{str(name)[:80]}'")
        reference = value.get("reference") or {}
        if not isinstance(reference, Mapping) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and v >= 0
            for v in reference.values()
        ):
            raise bad("reference", "an object of counts and scores")
        layout = _layout(task, value.get("layout"), where)
        return cls(
            task,
            dict(cases),
            k,
            output,
            tuple(classes) if classes is not None else None,
            dict(reference),
            layout,
        )

    def class_name(self, index: int) -> str:
        """The class's name where the labels name them, else its index as text."""
        if self.classes is not None and 0 <= index < len(self.classes):
            return self.classes[index]
        return str(index)


def _whole(value, low: int = 0, high: int = MAX_CLASS) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_case(task: str, label, n_classes: int, where: str) -> None:
    """One case's label for ``task``; BadInput naming the case."""
    if task == "classification":
        if not _whole(label):
            raise BadInput(f"{where} must be a class index >= 0")
        if label >= n_classes:
            raise BadInput(f"{where} must be below the {n_classes} classes named")
    elif task == "detection":
        if not isinstance(label, list) or len(label) > MAX_ITEMS:
            raise BadInput(f"{where} must be a list of boxes [x, y, w, h, class]")
        for box in label:
            if not (
                isinstance(box, list)
                and len(box) == 5
                and all(_number(v) for v in box[:4])
                and box[2] > 0
                and box[3] > 0
                and _whole(box[4], 0, n_classes - 1)
            ):
                raise BadInput(f"{where}: a box must be [x, y, w, h, class], w and h > 0")
    elif task == "segmentation":
        _check_mask(label, n_classes, where)
    elif not isinstance(label, list) or not all(
        isinstance(iv, list) and len(iv) == 2 and all(_number(t) for t in iv) and iv[0] < iv[1]
        for iv in label
    ):
        raise BadInput(f"{where} must be a list of intervals [start_s, end_s], start < end")


def _check_mask(label, n_classes: int, where: str) -> None:
    shape = label.get("shape") if isinstance(label, Mapping) else None
    rle = label.get("rle") if isinstance(label, Mapping) else None
    if not (
        isinstance(shape, list)
        and len(shape) == 2
        and all(_whole(d, 1, MAX_MASK_PIXELS) for d in shape)
        and isinstance(rle, list)
        and len(rle) % 2 == 0
        and all(_whole(v) for v in rle)
    ):
        raise BadInput(f"{where} must be a mask {{'shape': [H, W], 'rle': [class, run, ...]}}")
    if shape[0] * shape[1] > MAX_MASK_PIXELS or sum(rle[1::2]) != shape[0] * shape[1]:
        raise BadInput(f"{where}: the mask's runs must cover its {shape[0]}x{shape[1]} pixels")
    if any(c >= n_classes for c in rle[0::2]):
        raise BadInput(f"{where}: a mask class must be below the {n_classes} classes named")


def _layout(task: str, value, where: str) -> dict:
    """The task's layout, its defaults filled in; BadInput naming a bad field."""
    defaults = LAYOUTS[task]
    value = {} if value is None else value
    if not isinstance(value, Mapping):
        raise BadInput(f"{where}: 'layout' must be an object")
    unknown = sorted(set(value) - set(defaults))
    if unknown:
        known = ", ".join(defaults) or "none"
        raise BadInput(f"{where}: unknown layout field {unknown[0][:80]!r} ({task}: {known})")
    layout = {**defaults, **value}
    for name, default in defaults.items():
        v = layout[name]
        if isinstance(default, str) and not isinstance(v, str):
            raise BadInput(f"{where}: layout '{name}' must be text")
        if isinstance(default, float) and not (_number(v) and v >= 0):
            raise BadInput(f"{where}: layout '{name}' must be a number >= 0")
        if isinstance(default, int) and not _whole(v, 1, MAX_ITEMS):
            raise BadInput(f"{where}: layout '{name}' must be a whole number from 1")
    if task == "detection" and layout["box_format"] not in BOX_FORMATS:
        raise BadInput(f"{where}: layout 'box_format' must be one of {', '.join(BOX_FORMATS)}")
    if task == "vad" and layout["hop_s"] <= 0:
        raise BadInput(f"{where}: layout 'hop_s' must be above 0")
    return layout


def mask_rle(mask) -> dict:
    """A 2-D class mask (integers, numpy) as the manifest's ``{"shape", "rle"}``."""
    import numpy as np

    flat = np.asarray(mask).astype(np.int64).ravel()
    starts = np.flatnonzero(np.r_[True, flat[1:] != flat[:-1]])
    runs = np.diff(np.r_[starts, flat.size])
    rle = np.column_stack([flat[starts], runs]).ravel()
    return {"shape": [int(d) for d in np.asarray(mask).shape], "rle": [int(v) for v in rle]}


def mask_of(label: dict):
    """The 2-D class mask (numpy int64) of a manifest's ``{"shape", "rle"}``."""
    import numpy as np

    rle = np.asarray(label["rle"], dtype=np.int64).reshape(-1, 2)
    return np.repeat(rle[:, 0], rle[:, 1]).reshape(label["shape"])


def label_value(text, classes: tuple[str, ...] | None, where: str) -> int:
    """A class given as an index (``3``, ``"3"``) or, where ``classes`` are named, a name."""
    if isinstance(text, int) and not isinstance(text, bool):
        index = text
    elif isinstance(text, str) and text.strip().isdigit():
        index = int(text.strip())
    elif isinstance(text, str) and classes is not None and text.strip() in classes:
        index = classes.index(text.strip())
    else:
        named = "a class index" + (" or one of the class names" if classes else "")
        raise BadInput(f"{where}: class {str(text)[:80]!r} is not {named}")
    if not 0 <= index <= MAX_CLASS or (classes is not None and index >= len(classes)):
        raise BadInput(f"{where}: class {index} is out of range")
    return index


__all__ = ["DEFAULT_K", "LAYOUTS", "TASKS", "Labels", "label_value", "mask_of", "mask_rle"]
