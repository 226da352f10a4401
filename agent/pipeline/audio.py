"""Audio: parse a 16-bit PCM WAV with numpy, then mix, frame, scale and shape the tensor.

The RIFF parser is ours, about forty lines, because a raw file is hostile input: every
chunk size is checked against the bytes the file holds (a header that says more than
the file has is refused, not read short), and only uncompressed 16-bit PCM is taken.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
from edgequal.contract.errors import BadRawInput
from edgequal.contract.pipeline_spec import InputPipeline

from .image import cast, normalize

_PCM, _EXTENSIBLE = 1, 0xFFFE


@dataclass(frozen=True)
class Clip:
    """A decoded clip: sample rate in Hz and int16 samples, one column per channel."""

    sample_rate: int
    samples: np.ndarray  # (frames, channels) int16


def decode_wav(data: bytes) -> Clip:
    """The PCM samples of a WAV file; BadRawInput naming what its header gets wrong."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise BadRawInput("not a WAV file (no RIFF/WAVE header)")
    riff_size = struct.unpack_from("<I", data, 4)[0]
    if riff_size + 8 > len(data):
        raise BadRawInput(f"the WAV header says {riff_size + 8} bytes, the file holds {len(data)}")
    fmt, pcm, pos = None, None, 12
    while pos + 8 <= len(data):
        chunk, size = data[pos : pos + 4], struct.unpack_from("<I", data, pos + 4)[0]
        body = pos + 8
        if body + size > len(data):
            raise BadRawInput(
                f"the WAV's {chunk.decode('latin1')!r} chunk says {size} bytes, "
                f"{len(data) - body} follow"
            )
        if chunk == b"fmt " and size >= 16:
            fmt = struct.unpack_from("<HHIIHH", data, body)
        elif chunk == b"data":
            pcm = data[body : body + size]
        pos = body + size + (size & 1)
    if fmt is None or pcm is None:
        raise BadRawInput("the WAV has no " + ("'fmt ' chunk" if fmt is None else "'data' chunk"))
    tag, channels, rate, byte_rate, block_align, bits = fmt
    if tag not in (_PCM, _EXTENSIBLE) or bits != 16:
        raise BadRawInput(f"the WAV is format {tag} with {bits}-bit samples; 16-bit PCM is taken")
    if channels < 1 or rate < 1 or block_align != 2 * channels or byte_rate != rate * block_align:
        raise BadRawInput(
            f"the WAV header contradicts itself ({channels} channels, {rate} Hz, "
            f"{block_align}-byte frames, {byte_rate} bytes/s)"
        )
    if len(pcm) % block_align:
        raise BadRawInput(
            f"the WAV's data ({len(pcm)} bytes) is not whole {block_align}-byte frames"
        )
    samples = np.frombuffer(pcm, dtype="<i2").reshape(-1, channels)
    return Clip(rate, samples.astype(np.int16))


def preprocess_audio(clip: Clip, p: InputPipeline) -> np.ndarray:
    """Check the rate, mix down to the declared channels, take one frame (zero-padded),
    scale, normalize, shape as the model's input, cast."""
    if p.sample_rate is not None and clip.sample_rate != p.sample_rate:
        raise BadRawInput(
            f"the clip is {clip.sample_rate} Hz, the pipeline takes {p.sample_rate} Hz",
            stage="preprocess",
        )
    x = clip.samples.astype(np.float32)
    have = x.shape[1]
    if have != p.channels:
        if p.channels != 1:
            raise BadRawInput(
                f"the clip has {have} channel(s), the pipeline takes {p.channels}",
                stage="preprocess",
            )
        x = x.mean(axis=1, keepdims=True)
    framed = np.zeros((p.frame, p.channels), np.float32)
    n = min(p.frame, len(x))
    framed[:n] = x[:n]
    y = normalize(framed, p).T  # (channels, frame)
    shape = [d if isinstance(d, int) and d >= 0 else 1 for d in p.shape[:-1]] + [p.frame]
    return cast(y.reshape(shape), p)
