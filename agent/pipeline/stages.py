"""The stages of a declared pipeline, run: raw files in, the model's feeds out.

:class:`PipelineStages` holds a :class:`~.spec.Pipeline` and the golden set's assets
(tokenizers by sha256) and runs, per case, ``decode`` (bytes → image, clip or text)
and ``preprocess`` (that → the tensor the model takes), the two stages the device times
apart. The host runs the same code when it makes a golden set (``host/pipeline.py``),
so a raw file either side refuses is refused with the same message.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import numpy as np
from edgequal.contract.errors import BadRawInput
from edgequal.contract.pipeline_spec import InputPipeline, Pipeline


class PipelineStages:
    """Decode and preprocess a case's raw files as ``pipeline`` declares; tokenizers loaded
    once, from ``assets`` (sha256 → bytes), checked against their digest."""

    def __init__(self, pipeline: Pipeline, assets: Mapping[str, bytes] | None = None):
        self.pipeline = pipeline
        self._assets = dict(assets or {})
        self._tokenizers: dict[str, object] = {}

    def decode(self, raw: Mapping[str, bytes]) -> dict[str, object]:
        """Each input's raw file decoded; BadRawInput naming the input otherwise."""
        out = {}
        for name, p in self.pipeline.inputs.items():
            if name not in raw:
                raise BadRawInput(f"input '{name}': the case has no raw file")
            out[name] = _named(name, self._decode_one, raw[name], p)
        return out

    def preprocess(self, decoded: Mapping[str, object]) -> dict[str, np.ndarray]:
        """Each decoded input turned into the model's tensor."""
        return {
            name: _named(name, self.preprocess_one, decoded[name], p)
            for name, p in self.pipeline.inputs.items()
        }

    def preprocess_one(self, decoded, p: InputPipeline) -> np.ndarray:
        """One input's preprocessing, by ``p`` (the declared stage, or a variant of it)."""
        if p.decode == "image":
            from .image import preprocess_image

            return preprocess_image(decoded, p)
        if p.decode == "audio":
            from .audio import preprocess_audio

            return preprocess_audio(decoded, p)
        from .text import preprocess_text

        return preprocess_text(decoded, self._tokenizer(p.tokenizer), p)

    def _decode_one(self, data: bytes, p: InputPipeline):
        if p.decode == "image":
            from .image import decode_image

            return decode_image(data)
        if p.decode == "audio":
            from .audio import decode_wav

            return decode_wav(data)
        from .text import decode_text

        self._tokenizer(p.tokenizer)  # a bad tokenizer is refused before the first text
        return decode_text(data)

    def _tokenizer(self, digest: str):
        tok = self._tokenizers.get(digest)
        if tok is None:
            from .text import load_tokenizer

            data = self._assets.get(digest)
            if data is None or hashlib.sha256(data).hexdigest() != digest:
                raise BadRawInput(f"the golden set does not hold the tokenizer sha256:{digest}")
            tok = self._tokenizers[digest] = load_tokenizer(data)
        return tok

    def libraries(self) -> dict[str, str]:
        """The name and version of each library the stages ran with (resize results change
        between Pillow versions): numpy always, Pillow for images, tokenizers for text."""
        kinds = {p.decode for p in self.pipeline.inputs.values()}
        out = {"numpy": np.__version__}
        if "image" in kinds:
            from .image import pillow

            out["pillow"] = pillow().__version__
        if "text" in kinds:
            from .text import tokenizers_module

            out["tokenizers"] = tokenizers_module().__version__
        return out


def _named(name: str, stage, value, p: InputPipeline):
    try:
        return stage(value, p)
    except BadRawInput as e:
        if str(e).startswith("input '"):
            raise
        raise BadRawInput(f"input '{name}': {e}", hint=e.hint, stage=e.stage) from None
