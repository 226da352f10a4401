"""Measurement plans: the presets (quick, standard, soak) and validation of a plan dict.

A plan is plain JSON so it crosses gRPC, SSH and the worker pipe unchanged, and
lands in the signed report as it was run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from .errors import BadInput

PRESETS: dict[str, dict] = {
    # CI: a few cold starts, 200 runs and 3 s of warm latency, no sustained phase.
    "quick": {
        "cold_runs": 3,
        "warmup_min_runs": 10,
        "warmup_min_s": 1.0,
        "warmup_max_s": 10.0,
        "latency_min_runs": 200,
        "latency_min_s": 3.0,
        "sustain_s": 0.0,
    },
    # DESIGN.md defaults: 7 cold starts, >= 1,000 runs and 60 s, 10 minutes sustained.
    "standard": {
        "cold_runs": 7,
        "warmup_min_runs": 10,
        "warmup_min_s": 2.0,
        "warmup_max_s": 30.0,
        "latency_min_runs": 1000,
        "latency_min_s": 60.0,
        "sustain_s": 600.0,
    },
    # 30 minutes sustained, extended to 60 while the temperature still rises > 0.5 °C/min.
    "soak": {
        "cold_runs": 7,
        "warmup_min_runs": 10,
        "warmup_min_s": 2.0,
        "warmup_max_s": 30.0,
        "latency_min_runs": 1000,
        "latency_min_s": 60.0,
        "sustain_s": 1800.0,
        "sustain_extend_to_s": 3600.0,
    },
}

DEFAULTS = {
    "preset": "quick",
    "runtime": "auto",
    "threads": None,
    "providers": None,
    "graph_optimization": "all",
    "xnnpack": True,
    "shapes": {},
    # Raw samples go into the report: 100,000 int64 samples are 1.1 MB of base64.
    "latency_max_runs": 100_000,
    "latency_max_s": None,
    "window_s": None,
    "sustain_extend_to_s": None,
    "cooldown_timeout_s": 120.0,
    "cooldown": True,
    "max_temp_c": None,
    "phase_timeout_s": 300.0,
    "memory_limit_mb": None,
    "evict_page_cache": True,
    "seed": 0,
    "profile": None,  # the device profile whose durations and limits the host applied
}

_NUMBERS = {
    "cold_runs": int,
    "warmup_min_runs": int,
    "latency_min_runs": int,
    "latency_max_runs": int,
    "warmup_min_s": float,
    "warmup_max_s": float,
    "latency_min_s": float,
    "latency_max_s": float,
    "sustain_s": float,
    "sustain_extend_to_s": float,
    "window_s": float,
    "cooldown_timeout_s": float,
    "phase_timeout_s": float,
    "memory_limit_mb": int,
    "threads": int,
    "max_temp_c": float,
    "seed": int,
}


def make_plan(preset: str = "quick", **overrides) -> dict:
    """A full plan from a preset name plus overrides (None overrides are ignored)."""
    if preset not in PRESETS:
        raise BadInput(f"unknown plan '{preset}'", hint=f"use one of: {', '.join(PRESETS)}")
    plan = {**DEFAULTS, **PRESETS[preset], "preset": preset}
    plan.update({k: v for k, v in overrides.items() if v is not None})
    return validate_plan(plan)


def validate_plan(plan: Mapping) -> dict:
    """Check types and ranges; BadInput names the field. Fills defaults for missing keys."""
    preset = plan.get("preset", "quick")
    if preset not in PRESETS:
        raise BadInput(f"unknown plan '{preset}'", hint=f"use one of: {', '.join(PRESETS)}")
    full = {**DEFAULTS, **PRESETS[preset], **plan}
    unknown = sorted(set(full) - set(DEFAULTS) - set(PRESETS["soak"]))
    if unknown:
        raise BadInput(f"unknown plan field '{unknown[0]}'")
    for key, kind in _NUMBERS.items():
        value = full.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadInput(f"plan field '{key}' must be a number, got {value!r}")
        if value < 0:
            raise BadInput(f"plan field '{key}' must not be negative, got {value:g}")
        full[key] = kind(value)
    if full["runtime"] != "auto":
        from .runtimes import runtime_class

        runtime_class(full["runtime"])  # BadInput naming the accepted names
    if full["threads"] == 0:
        full["threads"] = None
    if full["cold_runs"] < 1:
        raise BadInput("plan field 'cold_runs' must be at least 1")
    if full["window_s"] is not None and full["window_s"] < 1:
        raise BadInput(f"plan field 'window_s' must be at least 1 s, got {full['window_s']:g}")
    if full["phase_timeout_s"] <= 0:
        raise BadInput("plan field 'phase_timeout_s' must be positive")
    shapes = full.get("shapes") or {}
    if not isinstance(shapes, Mapping) or not all(
        isinstance(v, list) and all(isinstance(d, int) and d > 0 for d in v)
        for v in shapes.values()
    ):
        raise BadInput("plan field 'shapes' must map input names to lists of positive ints")
    return full


def sustain_window_s(plan: Mapping) -> float:
    """Window length: ``window_s`` if set, else 30 s, or a tenth of runs shorter than 5 minutes (>= 1 s)."""
    if plan.get("window_s"):
        return float(plan["window_s"])
    duration = float(plan["sustain_s"])
    if duration < 300:
        return max(1.0, duration / 10)
    return 30.0


_DURATION = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*$")


def parse_duration_s(text: str) -> float:
    """``90s``, ``10m``, ``1.5h``, ``500ms`` or a bare number of seconds; negative is refused."""
    m = _DURATION.match(str(text))
    if not m:
        raise BadInput(f"cannot read duration '{text}'", hint="write e.g. 30s, 10m or 1h")
    value = float(m.group(1))
    if value < 0:
        raise BadInput(f"duration must not be negative: '{text}'")
    unit = m.group(2) or "s"
    return value * {"ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}[unit]


def parse_shape_args(items: list[str]) -> dict[str, list[int]]:
    """``NAME=1x3x224x224`` arguments into a shapes mapping."""
    shapes = {}
    for item in items or []:
        name, sep, dims = item.partition("=")
        try:
            values = [int(d) for d in dims.lower().split("x")] if dims else []
        except ValueError:
            values = []
        if not sep or not name or not values or any(v <= 0 for v in values):
            raise BadInput(f"cannot read --shape '{item}'", hint="write NAME=1x3x224x224")
        shapes[name] = values
    return shapes
