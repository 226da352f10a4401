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
    unknown = sorted(set(doc) - {"task", "classes", "k", "output", "cases"})
    if unknown:
        raise BadInput(
            f"unknown field {unknown[0][:80]!r} (fields: task, classes, k, output, cases)"
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
    cases: dict[str, int] = {}
    for name, value in doc["cases"]:
        if name in cases:
            raise BadInput(f"case {name[:80]!r} is labelled twice")
        cases[name] = label_value(value, classes, f"case {name[:80]!r}")
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
    }
    return Labels.from_json(data, f"labels file {path.name}")


def with_reference_score(labels: Labels, golden_decision: str | None, cases) -> Labels:
    """``labels`` with the reference outputs' own score on them (``reference``: cases,
    ``top1_correct``, ``topk_correct``), ranked as the agent ranks the device's
    (``agent/measure/labelled.py``); ``cases`` are :class:`GoldenCase`."""
    from dataclasses import replace

    from edgequal.agent.measure.labelled import labelled_predictions

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
