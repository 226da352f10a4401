"""The declared pipeline: per model input, the stages from a raw file to the tensor it feeds.

A pipeline is data, never code: ``golden make --raw DIR --pipeline pipeline.toml`` turns
the TOML (parsed by ``input_contract.parse_declared``, the input contract's vocabulary
plus :data:`~..input_contract.STAGE_KEYS`) into a :class:`Pipeline` checked against the
model's declared inputs (:func:`resolve_pipeline`), and records it in the golden
manifest's ``pipeline`` field. The agent reads it back with :meth:`Pipeline.from_json`
(a golden set is hostile input: every field is checked again) and runs each stage with
its own pinned library (``image.py``, ``audio.py``, ``text.py``).

Pure: numpy and the tensor specs; no Pillow, no tokenizers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields

from .errors import BadInput
from .input_contract import (
    COLOR_ORDERS,
    LAYOUTS,
    infer_layout,
    parse_choice,
    parse_float,
    parse_floats,
    parse_size,
)
from .tensors import TensorSpec

FORMAT = "edgequal.pipeline/v1"
DECODERS = ("image", "audio", "text")
INTERPOLATIONS = ("bilinear", "nearest", "bicubic", "area")
CROPS = ("center", "none")
TEXT_FIELDS = ("ids", "attention_mask", "type_ids")
# Keys that apply to one decoder only (the rest: every decoder, or the contract's own).
_ONLY = {
    "image": ("interpolation", "crop", "color_order", "resize", "layout"),
    "audio": ("sample_rate", "channels", "frame"),
    "text": ("tokenizer", "max_length", "truncation", "padding", "field"),
}
_INTEGER_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")
# Keys the contract declares without a stage executing them.
_DECLARATIONS = ("range",)
# The sizes a pipeline may declare, or take from the model's fixed dims. One definition: the
# host checks them when it makes a golden set (resolve_pipeline) and the device when it reads
# one back (Pipeline.from_json), before either allocates a tensor of that size; image.py
# bounds a raw image and a crop's intermediate resize by the same MAX_PIXELS.
MAX_PIXELS = 50_000_000
"""The most pixels an image stage holds: a raw image's header, ``resize`` height × width and
the resize ``crop = "center"`` makes before it crops (a 50-megapixel photo; RGB float32
600 MB)."""
MAX_AUDIO_SAMPLES = 1 << 25
"""The most samples of one audio tensor, ``frame`` × ``channels`` (35 minutes of 16 kHz mono;
float32 128 MiB)."""
MAX_TOKENS = 1 << 17
"""The longest ``max_length`` (131072 tokens: the longest context a model on a board takes;
the tokenizer pads every text to it)."""

# 16-bit PCM full scale: float audio is samples / 32768 unless a scale says otherwise.
PCM16_SCALE = 1.0 / 32768.0


@dataclass(frozen=True)
class InputPipeline:
    """One model input's stages: decode a raw file, then preprocess it into the model's tensor."""

    name: str
    decode: str
    dtype: str
    shape: tuple  # the model's declared shape (None or a name for a dynamic dim)
    # image
    height: int | None = None
    width: int | None = None
    interpolation: str | None = None
    crop: str | None = None
    color_order: str | None = None
    layout: str | None = None
    # every decoder but text
    scale: float | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    quant_scale: float | None = None
    quant_zero_point: int | None = None
    # audio
    sample_rate: int | None = None
    channels: int | None = None
    frame: int | None = None
    # text
    tokenizer: str | None = None  # sha256 of the tokenizer.json the golden set holds
    max_length: int | None = None
    truncation: bool | None = None
    padding: bool | None = None
    field: str | None = None

    def effective_scale(self) -> float:
        """The factor applied to decoded values before mean/std.

        Declared, else: audio 1/32768 into a float model; an image whose mean is in 0–1
        units (every mean ≤ 1) 1/255, as the input contract reads such a mean; else 1.
        """
        if self.scale is not None:
            return self.scale
        if self.decode == "audio" and not self.dtype.startswith("int"):
            return PCM16_SCALE if self.dtype.startswith("float") else 1.0
        if self.decode == "image" and self.mean is not None and max(self.mean) <= 1.0:
            return 1.0 / 255.0
        return 1.0

    def level_step(self) -> float:
        """One decoded level (an 8-bit pixel step, a 16-bit sample step) in the tensor's units:
        1 for integer tensors, 0 for text (token ids match exactly or not at all)."""
        if self.decode == "text":
            return 0.0
        if self.quant_scale is not None or self.dtype in _INTEGER_DTYPES:
            return 1.0
        std = min(abs(s) for s in self.std) if self.std else 1.0
        return self.effective_scale() / std

    def reference_tolerance(self) -> float:
        """How far the device's tensor may be from a reference tensor and still match it: two
        decoded levels for float tensors (resize implementations round differently), one
        for integer tensors, none for token ids."""
        step = self.level_step()
        integer = (
            self.decode == "text" or self.quant_scale is not None or self.dtype in _INTEGER_DTYPES
        )
        return step if integer else 2.0 * step

    def with_changes(self, **changes) -> InputPipeline:
        """A variant of this pipeline (divergence attribution re-runs the stage with one)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return InputPipeline(**values)

    def to_json(self) -> dict:
        """JSON-ready form: every key that is set."""
        out = {k: v for k, v in asdict(self).items() if v is not None}
        out["shape"] = list(self.shape)
        for k in ("mean", "std"):
            if k in out:
                out[k] = list(out[k])
        return out

    @classmethod
    def from_json(cls, name: str, d: Mapping) -> InputPipeline:
        """Inverse of :meth:`to_json`, every field checked (a golden set is hostile input)."""
        if not isinstance(d, Mapping):
            raise BadInput(f"pipeline for input '{name}' must be an object")
        known = {f.name for f in fields(cls)}
        extra = sorted(set(d) - known)
        if extra:
            raise BadInput(f"pipeline for input '{name}': unknown field '{extra[0]}'")
        shape = d.get("shape")
        if not isinstance(shape, list) or not all(
            d_ is None or isinstance(d_, (int, str)) for d_ in shape
        ):
            raise BadInput(f"pipeline for input '{name}': 'shape' must be a list of dims")
        spec = TensorSpec(name, str(d.get("dtype")), list(shape))
        keys = {k: v for k, v in d.items() if k not in ("name", "dtype", "shape")}
        if "height" in keys or "width" in keys:
            keys["resize"] = [keys.pop("height", None), keys.pop("width", None)]
        if keys.get("tokenizer") is not None and not _is_sha256(keys["tokenizer"]):
            raise BadInput(f"pipeline for input '{name}': 'tokenizer' must be a sha256")
        return _resolve_one(spec, keys, lambda digest: digest, f"pipeline for input '{name}'")


@dataclass(frozen=True)
class Pipeline:
    """The golden manifest's ``pipeline``: one :class:`InputPipeline` per model input, and the
    libraries (name → version) the host ran it with."""

    inputs: dict[str, InputPipeline]
    libraries: dict[str, str | None] = field(default_factory=dict)

    def to_json(self) -> dict:
        """JSON-ready form."""
        return {
            "format": FORMAT,
            "inputs": {n: p.to_json() for n, p in self.inputs.items()},
            "libraries": dict(self.libraries or {}),
        }

    @classmethod
    def from_json(cls, d: Mapping | None) -> Pipeline | None:
        """Inverse of :meth:`to_json`; None for a golden set of prepared tensors."""
        if d is None:
            return None
        if not isinstance(d, Mapping) or d.get("format") != FORMAT:
            raise BadInput(f"pipeline must be an {FORMAT} object")
        inputs = d.get("inputs")
        if not isinstance(inputs, Mapping) or not inputs:
            raise BadInput("pipeline.inputs must be a non-empty object")
        libraries = d.get("libraries") or {}
        if not isinstance(libraries, Mapping):
            raise BadInput("pipeline.libraries must be an object")
        return cls(
            {n: InputPipeline.from_json(n, p) for n, p in inputs.items()},
            {str(k): (str(v) if v is not None else None) for k, v in libraries.items()},
        )

    @property
    def tokenizers(self) -> list[str]:
        """The sha256 of every tokenizer the pipeline names."""
        return sorted({p.tokenizer for p in self.inputs.values() if p.tokenizer})


def resolve_pipeline(
    declared: Mapping[str, Mapping],
    specs: Sequence[TensorSpec],
    tokenizer_digest: Callable[[str], str],
    source: str = "the pipeline",
) -> Pipeline:
    """The pipeline ``declared`` (``{"*": keys, NAME: keys}``) checked against the model.

    Every model input needs a ``decode``; a value the model's declared input contradicts
    (layout, channels, size, dtype, quantization, frame, max_length) is refused naming the
    input and both values. ``tokenizer_digest`` turns a ``tokenizer`` path into the sha256
    of the file the golden set will hold. BadInput for anything wrong.
    """
    names = [s.name for s in specs]
    unknown = sorted(set(declared) - {"*", *names})
    if unknown:
        raise BadInput(
            f"{source} names input '{unknown[0]}', which the model does not have",
            hint=f"inputs: {', '.join(names)}",
        )
    out = {}
    for spec in specs:
        keys = {**declared.get("*", {}), **declared.get(spec.name, {})}
        out[spec.name] = _resolve_one(
            spec, keys, tokenizer_digest, f"{source}: input '{spec.name}'"
        )
    return Pipeline(out)


def _resolve_one(spec: TensorSpec, keys: Mapping, tokenizer_digest, where: str) -> InputPipeline:
    keys = dict(keys)
    for k in _DECLARATIONS:
        keys.pop(k, None)

    def bad(message: str, hint: str | None = None) -> BadInput:
        return BadInput(f"{where}: {message}", hint=hint)

    decode = keys.pop("decode", None)
    if decode is None:
        raise bad("no 'decode' stage", hint=f"add decode = one of {', '.join(DECODERS)}")
    if decode not in DECODERS:
        raise bad(f"'decode' must be one of {', '.join(DECODERS)}, not {decode!r}")
    for key in keys:
        owners = [kind for kind, only in _ONLY.items() if key in only]
        if owners and decode not in owners:
            raise bad(f'\'{key}\' applies to decode = "{owners[0]}", not "{decode}"')
    dtype = keys.pop("dtype", None)
    if dtype is not None and dtype != spec.dtype:
        raise bad(f"'dtype' is {dtype!r}, the model takes {spec.dtype}")
    try:
        common = _numbers(keys, spec, decode)
        if decode == "image":
            specific = _image(keys, spec)
        elif decode == "audio":
            specific = _audio(keys, spec)
        else:
            specific = _text(keys, spec, tokenizer_digest)
    except BadInput as e:
        raise bad(str(e), hint=e.hint) from None
    return InputPipeline(
        name=spec.name,
        decode=decode,
        dtype=spec.dtype,
        shape=tuple(spec.shape),
        **common,
        **specific,
    )


def _numbers(keys: dict, spec: TensorSpec, decode: str) -> dict:
    """scale, mean/std and quantization: checked, and quantization read from the model."""
    scale = parse_float(keys.pop("scale", None), "scale")
    mean = parse_floats(keys.pop("mean", None), "mean")
    std = parse_floats(keys.pop("std", None), "std")
    qs = parse_float(keys.pop("quant_scale", None), "quant_scale")
    zp = keys.pop("quant_zero_point", None)
    if decode == "text":
        given = [k for k, v in (("scale", scale), ("mean", mean), ("std", std)) if v is not None]
        if given or qs is not None or zp is not None:
            raise BadInput(f"'{(given or ['quant_scale'])[0]}' does not apply to text (token ids)")
        return {}
    if scale is not None and scale <= 0:
        raise BadInput(f"'scale' must be above 0, not {scale}")
    if (mean is None) != (std is None):
        raise BadInput("give mean and std together")
    if std is not None and any(s == 0 for s in std):
        raise BadInput("a std of 0")
    if zp is not None and (isinstance(zp, bool) or not isinstance(zp, int)):
        raise BadInput(f"'quant_zero_point' must be a whole number, not {zp!r}")
    model_q = spec.quantization or None
    if model_q:
        m_scale, m_zp = float(model_q.get("scale")), int(model_q.get("zero_point", 0))
        if qs is not None and not math.isclose(qs, m_scale, rel_tol=1e-6):
            raise BadInput(f"'quant_scale' is {qs}, the model declares {m_scale}")
        if zp is not None and zp != m_zp:
            raise BadInput(f"'quant_zero_point' is {zp}, the model declares {m_zp}")
        qs, zp = m_scale, m_zp
    elif qs is not None or zp is not None:
        if spec.dtype not in _INTEGER_DTYPES:
            raise BadInput(f"quantization applies to integer inputs; the model takes {spec.dtype}")
        if qs is None:
            raise BadInput("give quant_scale with quant_zero_point")
        if qs <= 0:
            raise BadInput(f"'quant_scale' must be above 0, not {qs}")
        zp = zp or 0
    return {"scale": scale, "mean": mean, "std": std, "quant_scale": qs, "quant_zero_point": zp}


def _fixed(d) -> int | None:
    return d if isinstance(d, int) and d >= 0 else None


def _image(keys: dict, spec: TensorSpec) -> dict:
    if len(spec.shape) != 4:
        raise BadInput(
            f'decode = "image" feeds a rank-4 input (N,C,H,W or N,H,W,C); the model takes {spec.describe()}'
        )
    declared_layout = parse_choice(keys.pop("layout", None), LAYOUTS, "layout")
    model_layout = infer_layout(spec.shape)
    if declared_layout and model_layout and declared_layout != model_layout:
        raise BadInput(
            f"'layout' is {declared_layout}, the model takes {model_layout} ({spec.describe()})"
        )
    layout = declared_layout or model_layout
    if layout is None:
        raise BadInput(
            f"the model's layout cannot be read from {spec.describe()}",
            hint='declare layout = "NCHW" or "NHWC"',
        )
    c_axis, h_axis, w_axis = (1, 2, 3) if layout == "NCHW" else (3, 1, 2)
    channels = _fixed(spec.shape[c_axis])
    color = parse_choice(keys.pop("color_order", None), COLOR_ORDERS, "color_order")
    if channels not in (None, 1, 3):
        raise BadInput(
            f"the model takes {channels} channels; images decode to 1 (GRAY) or 3 (RGB, BGR)"
        )
    if color is None:
        color = "GRAY" if channels == 1 else "RGB"
    if channels is not None and (channels == 1) != (color == "GRAY"):
        raise BadInput(f"'color_order' is {color}, the model takes {channels} channel(s)")
    size = parse_size(keys.pop("resize", None))
    model_hw = (_fixed(spec.shape[h_axis]), _fixed(spec.shape[w_axis]))
    if size is not None:
        for what, got, want in (("height", size[0], model_hw[0]), ("width", size[1], model_hw[1])):
            if want is not None and got != want:
                raise BadInput(
                    f"'resize' {what} is {got}, the model takes {want} ({spec.describe()})"
                )
    else:
        if None in model_hw:
            raise BadInput(
                f"the model's image size is dynamic ({spec.describe()})",
                hint="declare resize = [height, width]",
            )
        size = model_hw
    if size[0] * size[1] > MAX_PIXELS:
        raise BadInput(
            f"'resize' [{size[0]}, {size[1]}] is {size[0] * size[1]} pixels, more than the "
            f"limit of {MAX_PIXELS}"
        )
    interpolation = keys.pop("interpolation", None) or "bilinear"
    if interpolation not in INTERPOLATIONS:
        raise BadInput(
            f"'interpolation' must be one of {', '.join(INTERPOLATIONS)}, not {interpolation!r}"
        )
    crop = keys.pop("crop", None) or "none"
    if crop not in CROPS:
        raise BadInput(f"'crop' must be one of {', '.join(CROPS)}, not {crop!r}")
    return {
        "height": size[0],
        "width": size[1],
        "interpolation": interpolation,
        "crop": crop,
        "color_order": color,
        "layout": layout,
    }


def _positive_int(v, what: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise BadInput(f"'{what}' must be a whole number above 0, not {v!r}")
    return v


def _audio(keys: dict, spec: TensorSpec) -> dict:
    rate = _positive_int(keys.pop("sample_rate", None), "sample_rate")
    channels = _positive_int(keys.pop("channels", None), "channels") or 1
    frame = _positive_int(keys.pop("frame", None), "frame")
    if not spec.shape:
        raise BadInput(
            f'decode = "audio" feeds an input of rank 1 or more; the model takes {spec.describe()}'
        )
    last = _fixed(spec.shape[-1])
    if frame is not None and last is not None and frame != last:
        raise BadInput(
            f"'frame' is {frame} samples, the model's last axis is {last} ({spec.describe()})"
        )
    frame = frame or last
    if frame is None:
        raise BadInput(
            f"the model's frame length is dynamic ({spec.describe()})",
            hint="declare frame = SAMPLES",
        )
    fixed = [_fixed(d) or 1 for d in spec.shape[:-1]]
    if math.prod(fixed) != channels:
        raise BadInput(
            f"{channels} channel(s) of {frame} samples do not fill {spec.describe()}",
            hint="declare channels to match the model",
        )
    if frame * channels > MAX_AUDIO_SAMPLES:
        raise BadInput(
            f"'frame' of {frame} samples × {channels} channel(s) is more than the limit of "
            f"{MAX_AUDIO_SAMPLES} samples"
        )
    return {"sample_rate": rate, "channels": channels, "frame": frame}


def _text(keys: dict, spec: TensorSpec, tokenizer_digest) -> dict:
    path = keys.pop("tokenizer", None)
    if not isinstance(path, str) or not path:
        raise BadInput('decode = "text" needs tokenizer = "tokenizer.json"')
    if spec.dtype not in _INTEGER_DTYPES:
        raise BadInput(f'decode = "text" feeds token ids; the model takes {spec.dtype}')
    max_length = _positive_int(keys.pop("max_length", None), "max_length")
    last = _fixed(spec.shape[-1]) if spec.shape else None
    if max_length is not None and last is not None and max_length != last:
        raise BadInput(
            f"'max_length' is {max_length}, the model's last axis is {last} ({spec.describe()})"
        )
    max_length = max_length or last
    if max_length is None:
        raise BadInput(
            f"the model's sequence length is dynamic ({spec.describe()})",
            hint="declare max_length = TOKENS",
        )
    if max_length > MAX_TOKENS:
        raise BadInput(f"'max_length' {max_length} is more than the limit of {MAX_TOKENS} tokens")
    flags = {}
    for k in ("truncation", "padding"):
        v = keys.pop(k, None)
        if v is not None and not isinstance(v, bool):
            raise BadInput(f"'{k}' must be true or false, not {v!r}")
        flags[k] = True if v is None else v
    fld = keys.pop("field", None)
    if fld is None:
        lowered = spec.name.lower()
        fld = "attention_mask" if "mask" in lowered else "type_ids" if "type" in lowered else "ids"
    if fld not in TEXT_FIELDS:
        raise BadInput(f"'field' must be one of {', '.join(TEXT_FIELDS)}, not {fld!r}")
    return {"tokenizer": tokenizer_digest(path), "max_length": max_length, "field": fld, **flags}


def _is_sha256(v) -> bool:
    return isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v)
