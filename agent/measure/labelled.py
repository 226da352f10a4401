"""The device's predictions on a labelled golden set, beside the labels: what the host scores.

Pure (numpy only). For a classification set (``contract/labels.py``) each labelled case
gets the device's top-k classes and the reference outputs' top-k, both ranked from the
labels' output, best first; NaN scores rank last (a NaN output loses its class, as the
decision rule's ``argmax`` does). The agent reports them in ``drift.labelled``; accuracy,
its intervals and the paired change are the host's (``host/judge/accuracy.py``), so the
agent carries no statistics library. The host's ``golden make`` ranks the reference the
same way for the score the set records.
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
