"""The labels of a labelled golden set: what each case truly is, recorded in the manifest.

A golden set made with ``golden make --labels FILE`` carries, in its manifest's
``labels`` (so the set's sha256, a subject of every report, covers them)::

    {"task": "classification", "output": "probs" | null, "k": 5,
     "classes": ["zero", ...] | null, "cases": {"case0": 3, ...},
     "reference": {"cases": 797, "top1_correct": 770, "topk_correct": 795}}

``task`` is ``classification`` (a class index per case); ``output`` the output whose
scores rank the classes (null: the decision rule's output, else the model's first);
``k`` the top-k the device's predictions keep; ``reference`` the reference outputs' own
score on the labelled cases, counted when the set was made.

The agent reads them (hostile input: every field is checked here) and reports, per
labelled case, the device's top-k and the reference's top-k beside the label
(``agent/measure/labelled.py``); the host scores them with their intervals
(``host/judge/accuracy.py``, docs/accuracy.md). Pure: json-ready data in and out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .errors import BadInput

TASKS = ("classification",)
"""The labelled tasks a golden set may declare."""
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

    def to_json(self) -> dict:
        """The manifest's ``labels`` object."""
        return {
            "task": self.task,
            "output": self.output,
            "k": self.k,
            "classes": list(self.classes) if self.classes is not None else None,
            "cases": dict(self.cases),
            "reference": dict(self.reference),
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
        unknown = sorted(set(value) - {"task", "output", "k", "classes", "cases", "reference"})
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
            raise bad("cases", "an object of case name -> class index, with at least one case")
        for name, label in cases.items():
            if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label <= MAX_CLASS:
                raise bad(f"cases.{str(name)[:80]}", "a class index >= 0")
            if classes is not None and label >= len(classes):
                raise bad(f"cases.{str(name)[:80]}", f"below the {len(classes)} classes named")
        reference = value.get("reference") or {}
        if not isinstance(reference, Mapping) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in reference.values()
        ):
            raise bad("reference", "an object of counts")
        return cls(
            task,
            dict(cases),
            k,
            output,
            tuple(classes) if classes is not None else None,
            dict(reference),
        )

    def class_name(self, index: int) -> str:
        """The class's name where the labels name them, else its index as text."""
        if self.classes is not None and 0 <= index < len(self.classes):
            return self.classes[index]
        return str(index)


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


__all__ = ["DEFAULT_K", "TASKS", "Labels", "label_value"]
