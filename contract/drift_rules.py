"""What counts as drift, as a golden set declares it: the per-output tolerance (the
precision classes fp32, fp16, int8 and explicit atol/rtol, PSNR and top-1 gates) and the
decision rule (argmax, top-k, threshold) whose flips matter to the product.

Shared by the host, which writes them into a golden set (``golden make --tolerance``,
``--decision``), and the agent, whose drift measurement (``agent/measure/drift.py``) applies
them; numpy only. Classes and gates follow DESIGN.md "Drift" and docs/measurement.md.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .errors import BadInput

_TOLERANCE_CLASSES: dict[str, dict[str, Any]] = {
    # Same math on another runtime, EP or thread count: elementwise gate.
    "fp32": {"atol": 1e-4, "rtol": 1e-3, "elementwise": True},
    # Reduced precision: gated on PSNR; atol/rtol (measurement.md §6.5 FP16 row) only
    # fill within_fraction for the report.
    "fp16": {"atol": 1e-2, "rtol": 1e-2, "elementwise": False, "min_psnr_db": 40.0},
    "int8": {
        "atol": 1e-2,
        "rtol": 1e-2,
        "elementwise": False,
        "min_psnr_db": 30.0,
        "min_top1": 0.95,
    },
}


def real_float64(values, what: str) -> np.ndarray:
    """``values`` as a float64 array; BadInput naming ``what`` when they are not real numbers."""
    try:
        array = np.asarray(values)
    except (TypeError, ValueError) as e:
        raise BadInput(f"{what} is not an array: {e}") from e
    if not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_) or np.issubdtype(
        array.dtype, np.complexfloating
    ):
        raise BadInput(f"{what} must hold real numbers, got dtype {array.dtype}")
    return array.astype(np.float64, copy=False)


def finite_or_none(value: float) -> float | None:
    """``value`` as a float, None when it is NaN or infinite (JSON has neither)."""
    return float(value) if math.isfinite(value) else None


def score_rows(array: np.ndarray, what: str) -> np.ndarray:
    """View an output as (rows, classes) over its last axis; a 0-d value is one class."""
    if array.ndim == 0:
        return array.reshape(1, 1)
    if array.shape[-1] == 0:
        raise BadInput(f"{what} has an empty last axis, shape {list(array.shape)}")
    return array.reshape(-1, array.shape[-1])


@dataclass(frozen=True)
class Tolerance:
    """What counts as acceptable drift for one output.

    ``elementwise`` gates on every element being within atol + rtol*|ref|; otherwise
    atol/rtol only fill the within_fraction metric. ``min_psnr_db`` gates the worst
    case's PSNR, ``min_top1`` the pooled top-1 agreement over all cases. NaN or Inf in
    an actual output always fails.
    """

    atol: float
    rtol: float
    min_psnr_db: float | None = None
    min_top1: float | None = None
    cls: str = "custom"
    elementwise: bool = True

    @classmethod
    def for_class(cls, name: str) -> Tolerance:
        """The default tolerance of a precision class: fp32, fp16 or int8."""
        try:
            values = _TOLERANCE_CLASSES[name]
        except KeyError:
            raise BadInput(
                f"unknown tolerance class {name!r}",
                hint=f"use one of {', '.join(_TOLERANCE_CLASSES)}",
            ) from None
        return cls(cls=name, **values)

    @classmethod
    def from_dict(cls, d: dict) -> Tolerance:
        """Tolerance from a golden manifest entry: {"class": "fp16"}, {"atol": .., "rtol": ..}
        or both (explicit numbers override the class; naming atol or rtol turns on the
        elementwise gate unless "elementwise" says otherwise; min_psnr_db or min_top1 set
        to null switch that gate off). Missing numbers come from fp32.
        """
        if not isinstance(d, dict):
            raise BadInput(f"a tolerance must be a mapping, got {type(d).__name__}")
        allowed = {"class", "atol", "rtol", "min_psnr_db", "min_top1", "elementwise"}
        unknown = sorted(set(d) - allowed)
        if unknown:
            raise BadInput(
                f"unknown tolerance keys {unknown}",
                hint=f"accepted keys: {', '.join(sorted(allowed))}",
            )
        name = d.get("class", "fp32")
        if not isinstance(name, str):
            raise BadInput(f"tolerance class must be a string, got {name!r}")
        values = asdict(cls.for_class(name))
        for key in ("atol", "rtol", "min_psnr_db", "min_top1"):
            if key not in d:
                continue
            value = d[key]
            if value is None and key in ("min_psnr_db", "min_top1"):
                values[key] = None  # null switches a class's gate off
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise BadInput(f"tolerance {key} must be a number, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise BadInput(f"tolerance {key} must be finite and >= 0, got {value!r}")
            if key == "min_top1" and value > 1:
                raise BadInput(f"tolerance min_top1 is a fraction within 0..1, got {value!r}")
            values[key] = float(value)
        if "atol" in d or "rtol" in d:
            values["elementwise"] = True
            if "class" not in d:
                values["cls"] = "custom"
        if "elementwise" in d:
            if not isinstance(d["elementwise"], bool):
                raise BadInput(
                    f"tolerance elementwise must be true or false, got {d['elementwise']!r}"
                )
            values["elementwise"] = d["elementwise"]
        return cls(**values)

    def to_dict(self) -> dict:
        """JSON-ready form, with the class under "class"."""
        values = asdict(self)
        values["class"] = values.pop("cls")
        return values


_DECISION_FORMS = (
    "argmax, argmax:OUTPUT, topk:K, topk:K:OUTPUT, threshold:OUTPUT>VALUE (or >=, <, <=)"
)
_THRESHOLD_RE = re.compile(r"^(?P<output>.*?)\s*(?P<op>>=|<=|>|<)\s*(?P<value>[^<>=]+)$")
_COMPARE = {
    ">": np.greater,
    ">=": np.greater_equal,
    "<": np.less,
    "<=": np.less_equal,
}


@dataclass(frozen=True)
class DecisionRule:
    """The product decision taken from a model's outputs (golden manifest "decision").

    kind is "argmax", "topk" or "threshold"; output None means the first output.
    """

    kind: str
    output: str | None = None
    k: int | None = None
    op: str | None = None
    threshold: float | None = None

    def __str__(self) -> str:
        if self.kind == "threshold":
            return f"threshold:{self.output or ''}{self.op}{self.threshold}"
        parts = [self.kind]
        if self.kind == "topk":
            parts.append(str(self.k))
        if self.output is not None:
            parts.append(self.output)
        return ":".join(parts)

    def output_name(self, outputs: dict) -> str:
        """The output this rule reads: its own, or the first of ``outputs``."""
        if self.output is not None:
            if self.output not in outputs:
                raise BadInput(
                    f"decision rule {self} names output {self.output!r}, "
                    f"outputs are {list(outputs)}"
                )
            return self.output
        if not outputs:
            raise BadInput(f"decision rule {self} has no output to read")
        return next(iter(outputs))

    def decide(self, outputs: dict) -> dict:
        """The decision on one case's outputs, per row (leading axes flattened).

        argmax: per row, the winning index; margin = top-1 minus top-2 score.
        topk: per row, the k indices, best first; margin = k-th minus (k+1)-th score.
        threshold: per element, true/false; margin = |value - threshold|.
        Margins are None where undefined (one class, k >= classes, NaN).
        """
        name = self.output_name(outputs)
        values = real_float64(outputs[name], f"output {name!r}")
        if self.kind == "threshold":
            decisions = _COMPARE[self.op](values, self.threshold)
            margins = np.abs(values - self.threshold)
            return {
                "rule": str(self),
                "output": name,
                "decisions": np.asarray(decisions).tolist(),
                "margins": _nested_margins(margins),
            }
        rows = score_rows(values, f"output {name!r}")
        # NaN scores sort last: a NaN output loses its class instead of winning it.
        ranked_scores = np.where(np.isnan(rows), -np.inf, rows)
        k = 1 if self.kind == "argmax" else self.k
        order = np.argsort(-ranked_scores, axis=1, kind="stable")
        classes = rows.shape[1]
        if k < classes:
            picked = np.take_along_axis(ranked_scores, order[:, k - 1 : k + 1], axis=1)
            margins = picked[:, 0] - picked[:, 1]
            margin_list = [finite_or_none(float(m)) for m in margins]
        else:
            margin_list = [None] * rows.shape[0]
        decisions = order[:, 0].tolist() if self.kind == "argmax" else order[:, :k].tolist()
        return {"rule": str(self), "output": name, "decisions": decisions, "margins": margin_list}


def _nested_margins(margins: np.ndarray):
    """Margins as nested lists with NaN turned into None."""
    if margins.ndim == 0:
        return finite_or_none(float(margins))
    return [_nested_margins(m) for m in margins]


def parse_decision_rule(text: str) -> DecisionRule:
    """Parse a decision rule: argmax, argmax:OUTPUT, topk:K, topk:K:OUTPUT,
    threshold:OUTPUT>VALUE (also >=, <, <=; OUTPUT may be empty for the first output).

    Output names may contain ':' (TensorFlow-style "logits:0").
    """
    if not isinstance(text, str):
        raise BadInput(
            f"decision rule must be text, got {text!r}", hint=f"accepted: {_DECISION_FORMS}"
        )
    rule = text.strip()
    kind, _, rest = rule.partition(":")

    def bad(why: str) -> BadInput:
        return BadInput(f"bad decision rule {text!r}: {why}", hint=f"accepted: {_DECISION_FORMS}")

    if kind == "argmax":
        if ":" in rule and not rest:
            raise bad("empty output name")
        return DecisionRule("argmax", output=rest or None)
    if kind == "topk":
        k_text, _, output = rest.partition(":")
        if not re.fullmatch(r"[0-9]+", k_text) or int(k_text) < 1:
            raise bad("K must be a positive integer")
        if rest.endswith(":") and not output:
            raise bad("empty output name")
        return DecisionRule("topk", output=output or None, k=int(k_text))
    if kind == "threshold":
        match = _THRESHOLD_RE.match(rest)
        if match is None:
            raise bad("expected OUTPUT followed by >, >=, < or <= and a number")
        try:
            value = float(match["value"])
        except ValueError:
            raise bad(f"{match['value'].strip()!r} is not a number") from None
        if not math.isfinite(value):
            raise bad("the threshold must be a finite number")
        return DecisionRule(
            "threshold", output=match["output"].strip() or None, op=match["op"], threshold=value
        )
    raise bad(f"unknown kind {kind!r}")
