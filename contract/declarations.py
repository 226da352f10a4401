"""What a plan declares beyond its numbers, each list checked where the plan is validated
(``plan.py``, on the host and again on the agent): the co-load beside the measurement (its
kinds and limits; docs/measurement.md "Co-load"), the runtime environments measured side
by side, and the edge shapes of the input range. BadInput names the plan field."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from .errors import BadInput

# Co-load (docs/measurement.md "Co-load"): what each kind of declaration holds.
COLOAD_KINDS = ("model", "cpu", "membw", "command")
MAX_COLOAD = 8
MAX_COLOAD_CORES = 1024.0
MAX_COLOAD_BUFFER_MB = 4096
_COLOAD_FIELDS = {
    "model": {"kind", "sha256", "name", "rate_per_s", "threads", "shapes"},
    "cpu": {"kind", "cores"},
    "membw": {"kind", "cores", "buffer_mb"},
    "command": {"kind", "name"},
}
COMMAND_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def check_coload(value) -> list[dict] | None:
    """``coload``: None, or 1..8 declarations, each checked by kind (BadInput names the field).

    ``model``: ``sha256`` of a model in the agent's store, ``name`` (for the report),
    ``rate_per_s`` (None: a closed loop), ``threads``, ``shapes`` (its dynamic dims);
    ``cpu``: ``cores`` (a share of cores, e.g. 1.5); ``membw``: ``cores`` and
    ``buffer_mb`` (default 64, past the caches); ``command``: ``name`` of an entry in
    the agent's own configuration file (the host never sends a command line).
    """
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not value:
        raise BadInput("plan field 'coload' must be a non-empty list of co-load declarations")
    if len(value) > MAX_COLOAD:
        raise BadInput(f"plan field 'coload' declares {len(value)} loads; at most {MAX_COLOAD}")
    out = []
    for i, item in enumerate(value):
        where = f"coload[{i}]"
        if not isinstance(item, Mapping):
            raise BadInput(f"plan field '{where}' must be an object with a 'kind'")
        kind = item.get("kind")
        if kind not in COLOAD_KINDS:
            raise BadInput(
                f"plan field '{where}.kind' is {str(kind)[:40]!r}; use one of: {', '.join(COLOAD_KINDS)}"
            )
        extra = sorted(set(item) - _COLOAD_FIELDS[kind])
        if extra:
            raise BadInput(f"plan field '{where}' has unknown key '{extra[0]}' for a {kind} load")
        entry = {"kind": kind}
        if kind == "model":
            digest = item.get("sha256")
            if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
                raise BadInput(f"plan field '{where}.sha256' must be 64 lowercase hex digits")
            name = item.get("name", "coload-model")
            if not isinstance(name, str) or not name or len(name) > 200:
                raise BadInput(f"plan field '{where}.name' must be a short string")
            entry.update(sha256=digest, name=name)
            entry["rate_per_s"] = _positive(item.get("rate_per_s"), f"{where}.rate_per_s", 1e5)
            threads = item.get("threads")
            if threads is not None and (
                isinstance(threads, bool)
                or not isinstance(threads, int)
                or not 1 <= threads <= 1024
            ):
                raise BadInput(f"plan field '{where}.threads' must be 1..1024 or null")
            entry["threads"] = threads
            shapes = item.get("shapes") or {}
            if not isinstance(shapes, Mapping) or not all(
                isinstance(v, list) and all(_dim(d) and d > 0 for d in v) for v in shapes.values()
            ):
                raise BadInput(
                    f"plan field '{where}.shapes' must map input names to lists of positive ints"
                )
            entry["shapes"] = {str(k): list(v) for k, v in shapes.items()}
        elif kind in ("cpu", "membw"):
            cores = _positive(item.get("cores"), f"{where}.cores", MAX_COLOAD_CORES)
            if cores is None:
                raise BadInput(
                    f"plan field '{where}.cores' is required: a share of cores, e.g. 1.5"
                )
            entry["cores"] = cores
            if kind == "membw":
                mb = item.get("buffer_mb", 64)
                if not _dim(mb) or not 1 <= mb <= MAX_COLOAD_BUFFER_MB:
                    raise BadInput(
                        f"plan field '{where}.buffer_mb' must be 1..{MAX_COLOAD_BUFFER_MB}"
                    )
                entry["buffer_mb"] = mb
        else:
            name = item.get("name")
            if not isinstance(name, str) or not COMMAND_NAME.fullmatch(name):
                raise BadInput(
                    f"plan field '{where}.name' must name a command of the agent's configuration "
                    "(letters, digits, '.', '_', '-')"
                )
            entry["name"] = name
        out.append(entry)
    return out


MAX_EDGE_SHAPES = 16
EDGE_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$")


def check_runtime_envs(value) -> list[str] | None:
    """``runtime_envs``: None, or 1..8 distinct environment names (``default``: the agent's own)."""
    if value is None:
        return None
    from .runtimes import MAX_ENVS_PER_PLAN, check_env_name

    if not isinstance(value, (list, tuple)) or not value:
        raise BadInput("plan field 'runtime_envs' must be a non-empty list of environment names")
    if len(value) > MAX_ENVS_PER_PLAN:
        raise BadInput(
            f"plan field 'runtime_envs' names {len(value)} environments; at most {MAX_ENVS_PER_PLAN}"
        )
    names = [check_env_name(v) for v in value]
    if len(set(names)) != len(names):
        raise BadInput("plan field 'runtime_envs' names an environment twice")
    return names


def parse_edge_shapes(value) -> list[dict] | None:
    """``edge_shapes``: None, or 1..16 ``{"label", "shapes": {input: [dims]}}``.

    Dimensions may be 0 (an empty sequence); a label names the shape in the report
    (``largest``, ``smallest``, ``empty``...) and is unique.
    """
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not value:
        raise BadInput("plan field 'edge_shapes' must be a non-empty list of {label, shapes}")
    if len(value) > MAX_EDGE_SHAPES:
        raise BadInput(
            f"plan field 'edge_shapes' lists {len(value)} shapes; at most {MAX_EDGE_SHAPES}"
        )
    out, labels = [], set()
    for i, item in enumerate(value):
        where = f"edge_shapes[{i}]"
        if not isinstance(item, Mapping) or set(item) - {"label", "shapes"}:
            raise BadInput(f"plan field '{where}' must be an object {{label, shapes}}")
        label = item.get("label")
        if not isinstance(label, str) or not EDGE_LABEL.fullmatch(label):
            raise BadInput(
                f"plan field '{where}.label' must be a short name (letters, digits, '.', '_', '-')"
            )
        if label in labels:
            raise BadInput(f"plan field 'edge_shapes' names '{label}' twice")
        labels.add(label)
        shapes = item.get("shapes")
        if (
            not isinstance(shapes, Mapping)
            or not shapes
            or not all(
                isinstance(v, list) and v and all(_dim(d) for d in v) and len(v) <= 16
                for v in shapes.values()
            )
        ):
            raise BadInput(
                f"plan field '{where}.shapes' must map input names to lists of sizes (0 or more)"
            )
        if any(math.prod(v) > MAX_EDGE_ELEMENTS for v in shapes.values()):
            raise BadInput(
                f"plan field '{where}.shapes' asks for an input of over {MAX_EDGE_ELEMENTS:,} elements"
            )
        out.append({"label": label, "shapes": {str(k): list(v) for k, v in shapes.items()}})
    return out


# An edge shape's input is synthesized on the device: bounded, so a typo cannot ask for terabytes.
MAX_EDGE_ELEMENTS = 1 << 30


def _dim(d) -> bool:
    return isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= 1 << 31


def _positive(value, where: str, limit: float) -> float | None:
    """None, or a finite positive number up to ``limit`` (BadInput naming ``where``)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadInput(f"plan field '{where}' must be a number, got {str(value)[:20]}")
    if not (math.isfinite(value) and 0 < value <= limit):
        raise BadInput(f"plan field '{where}' must be above 0 and at most {limit:g}")
    return float(value)
