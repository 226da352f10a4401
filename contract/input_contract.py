"""The input contract: what a model expects of its inputs and what a golden set's inputs are.

``edgequal golden make`` records it in the golden manifest's ``preprocessing`` field,
one entry per input: what the data are (dtype, layout, the value range seen over every
case) and what the model was trained on, from flags or a TOML file (layout, value
range, normalization as mean/std or scale, colour order, resize). The qualification
checks the model it runs against it (:func:`contract_mismatches`) and names the input
of each classic mismatch:

- ``range``: values far outside what a float model was trained on (0–255 pixels into
  a model trained on 0–1: the missing ``/255``);
- ``layout``: NHWC data into an NCHW model, or the reverse (read from the declared
  shape: a rank-4 input whose channel axis, of 1, 3 or 4, is on one side only);
- ``dtype``: golden inputs of one dtype into a model that takes another (a float golden
  set against a model quantized with integer inputs).

Pure: numpy and the tensor specs, no runtime.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .errors import BadInput
from .tensors import TensorSpec

FORMAT = "edgequal.input-contract/v1"
LAYOUTS = ("NCHW", "NHWC")
COLOR_ORDERS = ("RGB", "BGR", "GRAY")
DECLARED_KEYS = ("layout", "range", "mean", "std", "scale", "color_order", "resize")
"""What a user may declare per input (flags or TOML); the rest is read from the data."""
STAGE_KEYS = (
    "decode",
    "interpolation",
    "crop",
    "dtype",
    "quant_scale",
    "quant_zero_point",
    "sample_rate",
    "channels",
    "frame",
    "tokenizer",
    "max_length",
    "truncation",
    "padding",
    "field",
)
"""What only a pipeline (``golden make --raw DIR --pipeline P``) declares: the stages the
device executes from raw files (``agent/pipeline/``). Its other keys are
:data:`DECLARED_KEYS`, the same names with the same meaning, now executed."""
# A key users reach for that the vocabulary spells otherwise.
_SPELLED_OTHERWISE = {"height": "resize", "width": "resize", "size": "resize"}
_CHANNELS = (1, 3, 4)
# A value this far outside the trained range, in widths of that range, is a mismatch:
# 0–255 against 0–1 is 254 widths out; a slightly wider augmentation range is not.
RANGE_SLACK = 0.5


def parse_declared(data: Mapping, source: str, *, stages: bool) -> dict[str, dict]:
    """``{"*": top-level keys, NAME: keys}`` from a parsed preprocessing or pipeline TOML.

    The one parser of both files: top-level keys apply to every input, ``[inputs.NAME]``
    tables to one. Every key is checked against :data:`DECLARED_KEYS` (and
    :data:`STAGE_KEYS` when ``stages``, a pipeline); an unknown key is refused naming the
    closest valid one. Values are checked where they are used (:func:`describe_inputs`,
    ``pipeline.spec.resolve_pipeline``), against the model's declared inputs.
    """
    import difflib

    data = dict(data)
    per_input = data.pop("inputs", {})
    if not isinstance(per_input, Mapping) or not all(
        isinstance(v, Mapping) for v in per_input.values()
    ):
        raise BadInput(f"{source}: [inputs.NAME] must be tables of preprocessing keys")
    known = DECLARED_KEYS + (STAGE_KEYS if stages else ())
    declared = {"*": data, **{n: dict(v) for n, v in per_input.items()}}
    for where, keys in declared.items():
        for key in keys:
            if key in known:
                continue
            shown = "top level" if where == "*" else f"[inputs.{where}]"
            if key in STAGE_KEYS:
                raise BadInput(
                    f"{source}: '{key}' at {shown} is a pipeline stage, not a declaration",
                    hint="stages run from raw files: edgequal golden make MODEL --raw DIR "
                    "--pipeline pipeline.toml",
                )
            close = [_SPELLED_OTHERWISE[key]] if key in _SPELLED_OTHERWISE else None
            close = close or difflib.get_close_matches(key, known, 1, 0.5)
            raise BadInput(
                f"{source}: unknown key '{key}' at {shown}"
                + (f"; did you mean '{close[0]}'?" if close else ""),
                hint=f"known keys: {', '.join(known)}"
                + ("; resize = [height, width]" if key in _SPELLED_OTHERWISE else ""),
            )
    return declared


def infer_layout(shape: Sequence) -> str | None:
    """``NCHW`` or ``NHWC`` from a rank-4 shape whose channel axis (1, 3 or 4) is on one side only."""
    if len(shape) != 4:
        return None
    first = isinstance(shape[1], int) and shape[1] in _CHANNELS
    last = isinstance(shape[3], int) and shape[3] in _CHANNELS
    if first and not last:
        return "NCHW"
    if last and not first:
        return "NHWC"
    return None


@dataclass(frozen=True)
class InputContract:
    """One input: what the golden data are and, where declared, what the model was trained on."""

    name: str
    dtype: str
    range_seen: tuple[float, float]
    layout: str | None = None
    model_range: tuple[float, float] | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    scale: float | None = None
    color_order: str | None = None
    resize: tuple[int, int] | None = None

    def expected_range(self) -> tuple[float, float] | None:
        """The values the model was trained on: declared, else implied by the normalization.

        ``scale`` maps 8-bit pixels: [0, 255 × scale]. ``mean``/``std`` in 0–1 units (every
        mean ≤ 1) map [0, 1]; otherwise they map [0, 255]; after a ``scale``, they map
        what it made (the order a pipeline executes them in). None when nothing says.
        """
        if self.model_range is not None:
            return self.model_range
        if self.scale is not None and self.mean is None:
            return (0.0, 255.0 * self.scale)
        if self.mean is not None and self.std is not None:
            if self.scale is not None:
                top = 255.0 * self.scale
            else:
                top = 1.0 if max(self.mean) <= 1.0 else 255.0
            lows = [(0.0 - m) / s for m, s in zip(self.mean, self.std)]
            highs = [(top - m) / s for m, s in zip(self.mean, self.std)]
            return (min(lows), max(highs))
        return None

    def to_json(self) -> dict:
        """JSON-ready form, as stored in the golden manifest."""
        return {
            "dtype": self.dtype,
            "range_seen": list(self.range_seen),
            "layout": self.layout,
            "model_range": list(self.model_range) if self.model_range is not None else None,
            "mean": list(self.mean) if self.mean is not None else None,
            "std": list(self.std) if self.std is not None else None,
            "scale": self.scale,
            "color_order": self.color_order,
            "resize": list(self.resize) if self.resize is not None else None,
        }

    @classmethod
    def from_json(cls, name: str, d: Mapping) -> InputContract:
        """Inverse of :meth:`to_json`; BadInput naming the field for anything else."""
        if not isinstance(d, Mapping):
            raise BadInput(f"input contract for '{name}' must be an object")
        try:
            return cls(
                name=name,
                dtype=_str(d["dtype"], "dtype"),
                range_seen=_pair(d["range_seen"], "range_seen", strict=False),
                layout=parse_choice(d.get("layout"), LAYOUTS, "layout"),
                model_range=_pair(d.get("model_range"), "model_range"),
                mean=parse_floats(d.get("mean"), "mean"),
                std=parse_floats(d.get("std"), "std"),
                scale=parse_float(d.get("scale"), "scale"),
                color_order=parse_choice(d.get("color_order"), COLOR_ORDERS, "color_order"),
                resize=parse_size(d.get("resize")),
            )
        except KeyError as e:
            raise BadInput(f"input contract for '{name}' has no '{e.args[0]}'") from None
        except BadInput as e:
            raise BadInput(f"input contract for '{name}': {e}") from None


@dataclass(frozen=True)
class Preprocessing:
    """The golden manifest's ``preprocessing``: one :class:`InputContract` per input."""

    inputs: dict[str, InputContract]

    def to_json(self) -> dict:
        """JSON-ready form."""
        return {"format": FORMAT, "inputs": {n: c.to_json() for n, c in self.inputs.items()}}

    @classmethod
    def from_json(cls, d: Mapping | None) -> Preprocessing | None:
        """Inverse of :meth:`to_json`; None for a golden set that records none (made before it)."""
        if d is None:
            return None
        if not isinstance(d, Mapping) or d.get("format") != FORMAT:
            raise BadInput(f"preprocessing must be an {FORMAT} object")
        inputs = d.get("inputs")
        if not isinstance(inputs, Mapping):
            raise BadInput("preprocessing.inputs must be an object")
        return cls({n: InputContract.from_json(n, c) for n, c in inputs.items()})


def describe_inputs(
    cases: Sequence[Mapping[str, np.ndarray]],
    declared: Mapping[str, Mapping] | None = None,
) -> Preprocessing:
    """The contract of golden inputs: dtype, range seen and layout from the data, the rest declared.

    ``declared`` maps an input name to its :data:`DECLARED_KEYS`; a layout not declared
    is inferred from the data's shape where it can be. BadInput names a bad value.
    """
    declared = declared or {}
    names = list(cases[0]) if cases else []
    unknown = sorted(set(declared) - set(names))
    if unknown:
        raise BadInput(
            f"the preprocessing names input '{unknown[0]}', which the golden inputs do not have",
            hint=f"inputs: {', '.join(names)}",
        )
    out = {}
    for name in names:
        arrays = [np.asarray(c[name]) for c in cases]
        finite = [a[np.isfinite(a)] if a.dtype.kind in "fc" else a for a in arrays]
        lows = [float(a.min()) for a in finite if a.size]
        highs = [float(a.max()) for a in finite if a.size]
        seen = (min(lows), max(highs)) if lows else (0.0, 0.0)
        d = dict(declared.get(name, {}))
        extra = sorted(set(d) - set(DECLARED_KEYS))
        if extra:
            raise BadInput(
                f"unknown preprocessing key '{extra[0]}' for input '{name}'",
                hint=f"known keys: {', '.join(DECLARED_KEYS)}",
            )
        try:
            layout = parse_choice(d.get("layout"), LAYOUTS, "layout")
            contract = InputContract(
                name=name,
                dtype=str(arrays[0].dtype),
                range_seen=seen,
                layout=layout or infer_layout(arrays[0].shape),
                model_range=_pair(d.get("range"), "range"),
                mean=parse_floats(d.get("mean"), "mean"),
                std=parse_floats(d.get("std"), "std"),
                scale=parse_float(d.get("scale"), "scale"),
                color_order=parse_choice(d.get("color_order"), COLOR_ORDERS, "color_order"),
                resize=parse_size(d.get("resize")),
            )
        except BadInput as e:
            raise BadInput(f"preprocessing for input '{name}': {e}") from None
        if (contract.mean is None) != (contract.std is None):
            raise BadInput(f"preprocessing for input '{name}': give mean and std together")
        if contract.std is not None and any(s == 0 for s in contract.std):
            raise BadInput(f"preprocessing for input '{name}': a std of 0")
        out[name] = contract
    return Preprocessing(out)


def contract_mismatches(pre: Preprocessing, model_inputs: Sequence[TensorSpec]) -> list[dict]:
    """Each classic mismatch between the golden inputs' contract and a model's declared inputs.

    A mismatch is ``{"input", "mismatch": dtype|layout|range, "message", "hint"}``; [] when
    the model takes what the golden inputs are.
    """
    found = []
    for spec in model_inputs:
        c = pre.inputs.get(spec.name)
        if c is None:
            continue
        if c.dtype != spec.dtype:
            quantized = ""
            if spec.quantization:
                q = spec.quantization
                quantized = (
                    f" (quantized: scale {q.get('scale')}, zero point {q.get('zero_point')})"
                )
            found.append(
                {
                    "input": spec.name,
                    "mismatch": "dtype",
                    "message": f"input '{spec.name}': the golden inputs are {c.dtype}, the model "
                    f"takes {spec.dtype}{quantized}: a golden set made before quantization or conversion",
                    "hint": "make the golden set for this model, its inputs converted as the "
                    "quantized model expects",
                }
            )
            continue
        model_layout = infer_layout(spec.shape)
        if c.layout and model_layout and c.layout != model_layout:
            found.append(
                {
                    "input": spec.name,
                    "mismatch": "layout",
                    "message": f"input '{spec.name}': the golden inputs are {c.layout}, the model "
                    f"takes {model_layout} ({spec.describe()})",
                    "hint": "transpose the inputs to the model's layout "
                    + ("(0, 3, 1, 2)" if model_layout == "NCHW" else "(0, 2, 3, 1)"),
                }
            )
            continue
        expected = c.expected_range()
        if spec.dtype.startswith("float") and expected is not None:
            lo, hi = expected
            slack = RANGE_SLACK * max(hi - lo, 1e-12)
            seen_lo, seen_hi = c.range_seen
            if seen_hi > hi + slack or seen_lo < lo - slack:
                hint = "normalize the inputs as in training"
                if seen_hi > 2.0 * max(abs(hi), 1.0) and seen_hi <= 255.0 and seen_lo >= 0.0:
                    hint = "scale 8-bit pixels to the trained range (÷255, then mean/std if any)"
                found.append(
                    {
                        "input": spec.name,
                        "mismatch": "range",
                        "message": f"input '{spec.name}': the golden inputs span "
                        f"{_num(seen_lo)}–{_num(seen_hi)}, the {spec.dtype} model was trained on "
                        f"{_num(lo)}–{_num(hi)}",
                        "hint": hint,
                    }
                )
    return found


def _num(x: float) -> str:
    return f"{x:.4g}"


def _str(v, what: str) -> str:
    if not isinstance(v, str):
        raise BadInput(f"'{what}' must be a string")
    return v


def parse_choice(v, choices: Sequence[str], what: str) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str) or v.upper() not in choices:
        raise BadInput(f"'{what}' must be one of {', '.join(choices)}, not {v!r}")
    return v.upper()


def parse_float(v, what: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
        raise BadInput(f"'{what}' must be a finite number, not {v!r}")
    return float(v)


def parse_floats(v, what: str) -> tuple[float, ...] | None:
    if v is None:
        return None
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        v = [v]
    if not isinstance(v, (list, tuple)) or not v:
        raise BadInput(f"'{what}' must be a number or a list of numbers")
    return tuple(parse_float(x, what) for x in v)


def _pair(v, what: str, strict: bool = True) -> tuple[float, float] | None:
    if v is None:
        return None
    values = parse_floats(v, what)
    if len(values) != 2 or values[0] > values[1] or (strict and values[0] == values[1]):
        raise BadInput(f"'{what}' must be [low, high] with low {'<' if strict else '≤'} high")
    return values


def parse_size(v) -> tuple[int, int] | None:
    if v is None:
        return None
    if (
        not isinstance(v, (list, tuple))
        or len(v) != 2
        or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v)
    ):
        raise BadInput("'resize' must be [height, width] in pixels")
    return (v[0], v[1])
