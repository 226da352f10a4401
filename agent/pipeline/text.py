"""Text: decode UTF-8, then tokenize with Hugging Face ``tokenizers``, truncate, pad, pick
the field the model's input takes (ids, attention mask, type ids).

The tokenizer is data (a ``tokenizer.json`` the golden set holds by sha256), never code;
``tokenizers`` is imported when a tokenizer is first loaded (the ``pipeline`` extra).
Its own truncation and padding settings are switched off: the pipeline declares them.
"""

from __future__ import annotations

import numpy as np
from edgequal.contract.errors import BadRawInput
from edgequal.contract.pipeline_spec import InputPipeline

_PAD_TOKENS = ("[PAD]", "<pad>", "<PAD>")
# tokenizers turns a Rust panic (a Split pattern like "(a+)+$" exhausting Oniguruma's retry
# limit) into pyo3_runtime.PanicException, a BaseException that `except Exception` misses and
# that no module exports to name. Everything else BaseException is caught as that; these not.
_NEVER_CAUGHT = (KeyboardInterrupt, SystemExit, GeneratorExit)


def tokenizers_module():
    """The tokenizers module; BadRawInput naming the extra when it is not installed."""
    try:
        import tokenizers
    except ImportError:
        raise BadRawInput(
            "tokenizing text needs tokenizers, which this device does not have",
            hint="pip install 'edgequal[pipeline]' on the device",
        ) from None
    return tokenizers


def load_tokenizer(data: bytes):
    """A ``tokenizers.Tokenizer`` from a tokenizer.json's bytes; BadRawInput when it is not one."""
    Tokenizer = tokenizers_module().Tokenizer
    try:
        tok = Tokenizer.from_str(data.decode("utf-8"))
    except _NEVER_CAUGHT:
        raise
    except BaseException as e:  # its own Exception for a bad file, or a Rust panic
        raise BadRawInput(f"the tokenizer.json cannot be loaded ({_first_line(e)})") from None
    tok.no_truncation()
    tok.no_padding()
    return tok


def decode_text(data: bytes) -> str:
    """The text of a UTF-8 file (a leading BOM dropped); BadRawInput naming the first bad byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise BadRawInput(
            f"the text is not UTF-8 (byte 0x{data[e.start]:02x} at offset {e.start})"
        ) from None


def preprocess_text(text: str, tokenizer, p: InputPipeline) -> np.ndarray:
    """Tokenize, truncate to ``max_length`` (or refuse a longer text without truncation),
    pad to it, take the declared field; shaped as the model's input."""
    try:
        enc = tokenizer.encode(text)
    except _NEVER_CAUGHT:
        raise
    except BaseException as e:  # a regex the engine gives up on: "retry-limit-in-match over"
        raise BadRawInput(
            f"the tokenizer failed on the text ({_first_line(e)})", stage="preprocess"
        ) from None
    if len(enc.ids) > p.max_length:
        if not p.truncation:
            raise BadRawInput(
                f"the text is {len(enc.ids)} tokens, max_length {p.max_length} and truncation "
                "is off",
                stage="preprocess",
            )
        enc.truncate(p.max_length)
    if p.padding:
        pad_id = next(
            (i for i in (tokenizer.token_to_id(t) for t in _PAD_TOKENS) if i is not None), 0
        )
        enc.pad(p.max_length, pad_id=pad_id)
    values = getattr(enc, p.field)
    shape = [d if isinstance(d, int) and d >= 0 else 1 for d in p.shape[:-1]] + [len(values)]
    return np.asarray(values, dtype=p.dtype).reshape(shape)


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
