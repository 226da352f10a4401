"""Images: decode a PNG or JPEG with Pillow, then resize, crop, order channels and normalize.

Pillow is imported when an image is first decoded (the ``pipeline`` extra), so an agent
that never decodes an image never loads it. A raw file is hostile input: only PNG and
JPEG are opened, the pixel count is read from the header and refused above
:data:`~.spec.MAX_PIXELS` before anything is decompressed (a decompression bomb), and a file
that ends early is refused rather than padded (Pillow's ``LOAD_TRUNCATED_IMAGES`` stays
off).
"""

from __future__ import annotations

import io

import numpy as np
from edgequal.contract.errors import BadRawInput
from edgequal.contract.pipeline_spec import MAX_PIXELS, InputPipeline

FORMATS = ("PNG", "JPEG")
_RESAMPLE = {"nearest": "NEAREST", "bilinear": "BILINEAR", "bicubic": "BICUBIC", "area": "BOX"}


def pillow():
    """The PIL.Image module; BadRawInput naming the extra when Pillow is not installed."""
    try:
        from PIL import Image
    except ImportError:
        raise BadRawInput(
            "decoding images needs Pillow, which this device does not have",
            hint="pip install 'edgequal[pipeline]' on the device",
        ) from None
    return Image


def decode_image(data: bytes):
    """The decoded image (a loaded ``PIL.Image``); BadRawInput for anything but a whole,
    reasonably sized PNG or JPEG."""
    Image = pillow()
    try:
        img = Image.open(io.BytesIO(data), formats=FORMATS)
    except Image.DecompressionBombError as e:  # Pillow's own limit, above ours
        raise BadRawInput(
            f"the image declares more than {MAX_PIXELS} pixels (a decompression bomb: {_why(e)})"
        ) from None
    except Exception as e:  # Pillow's UnidentifiedImageError, or a header it cannot parse
        raise BadRawInput(f"not a PNG or JPEG image ({_why(e)})") from None
    width, height = img.size
    if width * height > MAX_PIXELS:
        raise BadRawInput(
            f"the {img.format} declares {width}x{height} pixels, more than {MAX_PIXELS} "
            "(a decompression bomb?)"
        )
    try:
        img.load()
    except Exception as e:  # OSError "image file is truncated", zlib or JPEG errors
        raise BadRawInput(f"the {img.format} cannot be decoded ({_why(e)})") from None
    return img


def preprocess_image(img, p: InputPipeline) -> np.ndarray:
    """Convert, resize (and crop), order channels, scale, normalize, lay out, cast: the tensor."""
    Image = pillow()
    mode = "L" if p.color_order == "GRAY" else "RGB"
    if img.mode != mode:
        img = img.convert(mode)
    resample = getattr(Image.Resampling, _RESAMPLE[p.interpolation])
    if p.crop == "center":
        w0, h0 = img.size
        factor = max(p.width / w0, p.height / h0)
        size = (max(p.width, round(w0 * factor)), max(p.height, round(h0 * factor)))
        if size[0] * size[1] > MAX_PIXELS:  # a 100000x1 strip scaled to cover 224x224
            raise BadRawInput(
                f'crop = "center" would resize the {w0}x{h0} image to {size[0]}x{size[1]} '
                f"({size[0] * size[1]} pixels) before cropping, more than the limit of {MAX_PIXELS}",
                stage="preprocess",
            )
        img = img.resize(size, resample)
        left, top = (size[0] - p.width) // 2, (size[1] - p.height) // 2
        img = img.crop((left, top, left + p.width, top + p.height))
    elif img.size != (p.width, p.height):
        img = img.resize((p.width, p.height), resample)
    x = np.asarray(img, dtype=np.float32)
    x = x[:, :, None] if x.ndim == 2 else x
    if p.color_order == "BGR":
        x = x[:, :, ::-1]
    x = normalize(x, p)
    x = np.transpose(x, (2, 0, 1)) if p.layout == "NCHW" else x
    return cast(x[None, ...], p)


def normalize(x: np.ndarray, p: InputPipeline) -> np.ndarray:
    """``x × scale``, then ``(x − mean) / std`` per channel (the last axis), as float32."""
    x = x * np.float32(p.effective_scale())
    if p.mean is not None:
        x = (x - np.asarray(p.mean, np.float32)) / np.asarray(p.std, np.float32)
    return x.astype(np.float32, copy=False)


def cast(x: np.ndarray, p: InputPipeline) -> np.ndarray:
    """To the model's dtype: quantized (``round(x / scale) + zero point``, clipped) when the
    input is, rounded and clipped for other integer types, else a plain cast."""
    dtype = np.dtype(p.dtype)
    if p.quant_scale is not None:
        x = np.round(x / np.float32(p.quant_scale)) + p.quant_zero_point
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.clip(np.round(x), info.min, info.max).astype(dtype)
    return np.ascontiguousarray(x, dtype=dtype)


def _why(e: Exception) -> str:
    text = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return text[:200]
