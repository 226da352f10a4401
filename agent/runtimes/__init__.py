"""Runtime adapters behind one interface; heavy runtimes are imported only when used."""

from __future__ import annotations

from pathlib import Path

from ..errors import BadInput, RuntimeUnavailable
from .base import Runtime, RuntimeOptions, TensorSpec

RUNTIME_NAMES = ("onnxruntime", "litert")


def runtime_class(name: str) -> type[Runtime]:
    """The adapter class for a runtime name (no runtime module is imported here)."""
    if name == "onnxruntime":
        from .onnxruntime import OnnxRuntime

        return OnnxRuntime
    if name == "litert":
        from .litert import LiteRtRuntime

        return LiteRtRuntime
    raise BadInput(
        f"unknown runtime '{name}'", hint=f"use one of: auto, {', '.join(RUNTIME_NAMES)}"
    )


def runtime_for(model_path: Path, requested: str = "auto", name_hint: str | None = None) -> str:
    """The runtime name to use for a model: when ``auto``, by extension, else by content.

    Artifacts on the device are stored by digest, without an extension, so the
    host's file name (``name_hint``) is tried first and then the bytes themselves:
    a TFLite flatbuffer carries ``TFL3`` at offset 4; an ONNX ModelProto starts
    with field 1 (``ir_version``, tag 0x08).
    """
    if requested != "auto":
        runtime_class(requested)  # validates the name
        return requested
    for name in (name_hint, str(model_path)):
        suffix = Path(name).suffix.lower() if name else ""
        if suffix == ".onnx":
            return "onnxruntime"
        if suffix in (".tflite", ".lite"):
            return "litert"
    try:
        with open(model_path, "rb") as f:
            head = f.read(8)
    except OSError as e:
        raise BadInput(f"cannot read model {model_path}: {e.strerror}") from e
    if head[4:8] == b"TFL3":
        return "litert"
    if head[:1] == b"\x08":
        return "onnxruntime"
    raise BadInput(
        f"cannot tell the runtime of '{name_hint or Path(model_path).name}' from its name or content",
        hint="use a .onnx or .tflite file, or pass --runtime onnxruntime|litert",
    )


def available_runtimes() -> dict[str, dict]:
    """Each runtime's version, or the reason it is missing. Imports the runtimes: call it in a worker or CLI."""
    found = {}
    for name in RUNTIME_NAMES:
        cls = runtime_class(name)
        try:
            found[name] = {"available": True, "version": cls.version()}
        except RuntimeUnavailable as e:
            found[name] = {"available": False, "reason": str(e), "hint": e.hint}
        except Exception as e:  # a broken install must not take the agent down
            found[name] = {"available": False, "reason": f"{type(e).__name__}: {e}"}
    return found


__all__ = [
    "RUNTIME_NAMES",
    "Runtime",
    "RuntimeOptions",
    "TensorSpec",
    "available_runtimes",
    "runtime_class",
    "runtime_for",
]
