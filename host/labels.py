"""A labels file read for ``golden make --labels FILE``: the true class of each case.

CSV, one row a case, with a header naming ``case`` and ``class``::

    case,class
    d0000,7
    d0001,cat          # a name, where a JSON file names the classes

or JSON: ``{"task": "classification", "classes": [names] (optional), "k": 5 (optional),
"output": "probs" (optional), "cases": {"d0000": 7, ...}}`` (``cases`` may also be a list of
``{"case", "class"}`` rows). Every case of the golden set needs a label and every label a
case, so a typo cannot silently shrink the scored set. The reference's own score on them
is counted here (``reference``: cases, top-1 and top-k correct) and recorded with them.

The other tasks are JSON with ``"task"`` and, where the outputs are not the defaults, a
``"layout"`` (``contract/labels.py``): detection ``{"c0": [[x, y, w, h, class], ...]}``
(or ``{"box": [x, y, w, h], "class": c}`` rows; a class a name where ``classes`` names
them), segmentation ``{"c0": "masks/c0.png"}`` (a PNG of class indices, or ``.npy``,
relative to the labels file; or the mask inline as rows), vad ``{"c0": [[0.5, 1.25]]}``
(speech intervals in seconds). Their reference score is ``host/task_scores.py``'s.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from edgequal.contract.errors import BadInput
from edgequal.contract.labels import DEFAULT_K, TASKS, Labels, label_value

from .errors import UsageError

MAX_LABELS_BYTES = 64 << 20
HINT = "one row a case: a CSV with a 'case,class' header, or JSON {\"cases\": {CASE: CLASS}}"


def read_labels_file(
    path: Path, case_names: list[str], *, k: int | None = None, output: str | None = None
) -> Labels:
    """The labels of ``case_names`` from a CSV or JSON file; UsageError (exit 2) naming the
    first problem: an unreadable file, a bad class, a case without a label or a label
    without a case."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_LABELS_BYTES:
            raise UsageError(f"labels file {path} is over {MAX_LABELS_BYTES >> 20} MiB")
        text = path.read_bytes().decode("utf-8-sig")
    except FileNotFoundError:
        raise UsageError(f"labels file not found: {path}", hint=HINT) from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read labels file {path}: {e}", hint=HINT) from None
    try:
        if path.suffix.lower() == ".json" or text.lstrip().startswith(("{", "[")):
            doc = _json_labels(text)
        else:
            doc = {"cases": _csv_rows(text)}
        return _labels(path, doc, case_names, k, output)
    except BadInput as e:
        raise UsageError(f"labels file {path}: {e}", hint=HINT) from None


def _json_labels(text: str) -> dict:
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise BadInput(f"not valid JSON ({type(e).__name__})") from None
    if isinstance(doc, list):
        doc = {"cases": doc}
    if not isinstance(doc, dict):
        raise BadInput("the JSON must be an object with 'cases'")
    unknown = sorted(set(doc) - {"task", "classes", "k", "output", "cases", "layout"})
    if unknown:
        raise BadInput(
            f"unknown field {unknown[0][:80]!r} (fields: task, classes, k, output, cases, layout)"
        )
    rows = doc.get("cases")
    if isinstance(rows, list):
        if not all(isinstance(r, dict) and "case" in r and "class" in r for r in rows):
            raise BadInput("each row of 'cases' needs 'case' and 'class'")
        doc["cases"] = [(str(r["case"]), r["class"]) for r in rows]
    elif isinstance(rows, dict):
        doc["cases"] = list(rows.items())
    else:
        raise BadInput("'cases' must be an object CASE -> CLASS or a list of rows")
    return doc


def _csv_rows(text: str) -> list[tuple[str, str]]:
    reader = csv.reader(io.StringIO(text))
    try:
        header = [h.strip().lower() for h in next(reader)]
    except StopIteration:
        raise BadInput("the file is empty") from None
    except csv.Error as e:
        raise BadInput(f"not CSV ({e})") from None
    if "case" not in header or "class" not in header:
        raise BadInput(
            f"the CSV header must name 'case' and 'class', got {','.join(header)[:120]!r}"
        )
    ci, li = header.index("case"), header.index("class")
    rows = []
    try:
        for line, row in enumerate(reader, start=2):
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                raise BadInput(f"line {line} has {len(row)} fields, the header {len(header)}")
            rows.append((row[ci].strip(), row[li].strip()))
    except csv.Error as e:
        raise BadInput(f"not CSV ({e})") from None
    return rows


def _labels(path: Path, doc: dict, case_names: list[str], k, output) -> Labels:
    task = doc.get("task", "classification")
    if task not in TASKS:
        raise BadInput(f"task {str(task)[:40]!r} is not one of {', '.join(TASKS)}")
    classes = doc.get("classes")
    if classes is not None and (
        not isinstance(classes, list) or not all(isinstance(c, str) for c in classes)
    ):
        raise BadInput("'classes' must be a list of class names")
    classes = tuple(classes) if classes is not None else None
    cases: dict = {}
    for name, value in doc["cases"]:
        if name in cases:
            raise BadInput(f"case {name[:80]!r} is labelled twice")
        where = f"case {name[:80]!r}"
        if task == "classification":
            cases[name] = label_value(value, classes, where)
        elif task == "detection":
            cases[name] = _boxes(value, classes, where)
        elif task == "segmentation":
            cases[name] = _mask(path.parent, value, where)
        else:
            cases[name] = value
    known = set(case_names)
    stray = [c for c in cases if c not in known]
    if stray:
        raise BadInput(
            f"{len(stray)} labels name no case of the golden set (first {stray[0][:80]!r})"
        )
    missing = [c for c in case_names if c not in cases]
    if missing:
        raise BadInput(f"{len(missing)} cases have no label (first {missing[0][:80]!r})")
    k = k if k is not None else doc.get("k", DEFAULT_K)
    data = {
        "task": task,
        "k": k,
        "output": output if output is not None else doc.get("output"),
        "classes": list(classes) if classes is not None else None,
        "cases": cases,
        "layout": doc.get("layout"),
    }
    return Labels.from_json(data, f"labels file {path.name}")


def _boxes(value, classes, where: str) -> list:
    """A case's boxes as ``[x, y, w, h, class]`` rows, a class name made its index."""
    if not isinstance(value, list):
        raise BadInput(f"{where}: boxes must be a list of [x, y, w, h, class]")
    rows = []
    for box in value:
        if isinstance(box, dict) and isinstance(box.get("box"), list):
            box = [*box["box"], box.get("class")]
        if not isinstance(box, list) or len(box) != 5:
            raise BadInput(f"{where}: a box must be [x, y, w, h, class]")
        rows.append([*box[:4], label_value(box[4], classes, where)])
    return rows


def _mask(folder: Path, value, where: str) -> dict:
    """A case's class mask, from a PNG or ``.npy`` file (relative to the labels file) or
    inline rows, run-length coded for the manifest."""
    import numpy as np
    from edgequal.contract.labels import mask_rle

    if isinstance(value, list):
        try:
            mask = np.asarray(value, dtype=np.int64)
        except (ValueError, TypeError, OverflowError):
            raise BadInput(f"{where}: an inline mask must be rows of class indices") from None
    elif isinstance(value, str):
        file = folder / value
        try:
            if file.suffix.lower() == ".npy":
                mask = np.load(file, allow_pickle=False)
            else:
                from edgequal.agent.pipeline.image import decode_image

                mask = np.asarray(decode_image(file.read_bytes()))
        except (OSError, ValueError) as e:
            raise BadInput(f"{where}: cannot read mask {value[:80]!r} ({e})") from None
        except BadInput as e:
            raise BadInput(f"{where}: mask {value[:80]!r}: {e}") from None
    else:
        raise BadInput(f"{where}: a mask is a PNG or .npy file name, or rows of class indices")
    if mask.ndim != 2 or mask.dtype.kind not in "iub" or mask.size == 0 or mask.min() < 0:
        raise BadInput(f"{where}: a mask must be 2-D class indices >= 0, got {mask.shape}")
    return mask_rle(mask)


def with_reference_score(labels: Labels, golden_decision: str | None, cases) -> Labels:
    """``labels`` with the reference outputs' own score on them (``reference``: cases,
    ``top1_correct``, ``topk_correct``), ranked as the agent ranks the device's
    (``agent/measure/labelled.py``); ``cases`` are :class:`GoldenCase`."""
    from dataclasses import replace

    from edgequal.agent.measure.labelled import labelled_predictions

    if labels.task != "classification":
        from .task_scores import reference_score

        try:
            done = labelled_predictions(
                labels, golden_decision, [(c.name, c.outputs, c.outputs) for c in cases]
            )
        except BadInput as e:
            raise UsageError(f"--labels: {e}", hint="the labels' layout names the outputs") from e
        return replace(labels, output=done["output"], reference=reference_score(done))

    try:
        ranked = labelled_predictions(
            labels, golden_decision, [(c.name, c.outputs, c.outputs) for c in cases]
        )
    except BadInput as e:
        raise UsageError(f"--labels: {e}", hint="--labels-output names the class scores") from e
    rows = ranked["cases"]
    reference = {
        "cases": len(rows),
        "top1_correct": sum(1 for r in rows if r["reference"][:1] == [r["label"]]),
        "topk_correct": sum(1 for r in rows if r["label"] in r["reference"]),
    }
    return replace(labels, output=ranked["output"], reference=reference)
