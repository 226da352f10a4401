"""Measurement plans: the presets (quick, standard, soak) and the typed, validated :class:`Plan`.

On the wire and in the signed report a plan is plain JSON (``Plan.to_json``); inside
the agent it is a :class:`Plan`, built once by ``Plan.from_json``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields

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
        **{
            "batch_sizes": [1, 2, 4, 8, 16],
            "server": True,
            "thread_scaling": True,
            "operator_profile": True,
            "scenario_s": 5.0,
        },
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
        **{
            "batch_sizes": [1, 2, 4, 8, 16],
            "server": True,
            "thread_scaling": True,
            "operator_profile": True,
            "scenario_s": 5.0,
        },
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
    # From the profile: the temperature at which the board throttles, used when its
    # thermal zones expose no passive trip, and the throttle indicators that apply.
    "trip_c": None,
    "throttle_indicators": None,
    # Optional phases (docs/measurement.md "Service scenarios"): off in quick.
    "batch_sizes": None,  # batch sweep over these sizes (models with a dynamic batch dim)
    "thread_scaling": False,  # latency and throughput for 1..N intra-op threads
    "server": False,  # MLPerf-style server scenario: Poisson arrivals, p99 under a bound
    "server_rate_per_s": None,  # target rate; None: half the measured capacity
    "server_p99_ms": None,  # the p99 bound; None: 4 x the single-stream median
    "server_callers": 4,  # requests in flight at most (threads in the worker)
    "server_search_steps": 5,  # bisection steps for the highest rate that holds the bound
    "operator_profile": False,  # per-operator time (onnxruntime), delegate coverage (LiteRT)
    "scenario_s": 1.0,  # seconds per point of the batch sweep, thread scaling and server steps
    "idle_power_s": 5.0,  # idle power sampled before the sustained loop where rails exist
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
    "trip_c": float,
    "seed": int,
    "server_rate_per_s": float,
    "server_p99_ms": float,
    "server_callers": int,
    "server_search_steps": int,
    "scenario_s": float,
    "idle_power_s": float,
}


@dataclass(frozen=True)
class Plan:
    """A validated measurement plan: what each phase runs, for how long, and its limits.

    Built from JSON with :meth:`from_json` (which fills defaults from the preset and
    refuses bad values by name) and turned back into the documented JSON with
    :meth:`to_json` for the wire and the report.
    """

    preset: str
    runtime: str
    threads: int | None
    providers: tuple[str, ...] | None
    graph_optimization: str
    xnnpack: bool
    shapes: dict[str, list[int]]
    cold_runs: int
    warmup_min_runs: int
    warmup_min_s: float
    warmup_max_s: float
    latency_min_runs: int
    latency_min_s: float
    latency_max_runs: int
    latency_max_s: float | None
    sustain_s: float
    sustain_extend_to_s: float | None
    window_s: float | None
    cooldown: bool
    cooldown_timeout_s: float
    max_temp_c: float | None
    phase_timeout_s: float
    memory_limit_mb: int | None
    evict_page_cache: bool
    seed: int
    profile: str | None
    trip_c: float | None
    throttle_indicators: tuple[str, ...] | None
    batch_sizes: tuple[int, ...] | None = None
    thread_scaling: bool = False
    server: bool = False
    server_rate_per_s: float | None = None
    server_p99_ms: float | None = None
    server_callers: int = 4
    server_search_steps: int = 5
    operator_profile: bool = False
    scenario_s: float = 1.0
    idle_power_s: float = 5.0

    @classmethod
    def from_json(cls, obj: Mapping) -> Plan:
        """Check types and ranges (BadInput names the field); missing keys come from the preset."""
        if not isinstance(obj, Mapping):
            raise BadInput("a plan must be a JSON object")
        full = _validated(obj)
        for key in ("providers", "throttle_indicators", "batch_sizes"):
            if full[key] is not None:
                full[key] = tuple(full[key])
        return cls(**full)

    def to_json(self) -> dict:
        """The plan as documented JSON (docs/report-schema.md), the form the wire and report carry."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        for key in ("providers", "throttle_indicators", "batch_sizes"):
            if out[key] is not None:
                out[key] = list(out[key])
        out["shapes"] = {k: list(v) for k, v in self.shapes.items()}
        return out

    @property
    def sustain_window_s(self) -> float:
        """Window length: ``window_s`` if set, else 30 s, or a tenth of runs shorter than 5 minutes (>= 1 s)."""
        if self.window_s:
            return float(self.window_s)
        if self.sustain_s < 300:
            return max(1.0, self.sustain_s / 10)
        return 30.0


# The most a plan may ask for: a report must stay retrievable (raw samples travel in
# it) and a phase timeout must still detect a hang.
_LIMITS = {
    "cold_runs": 100,
    "warmup_min_runs": 1_000_000,
    "latency_min_runs": 1_000_000,
    "latency_max_runs": 1_000_000,
    "warmup_min_s": 3600.0,
    "warmup_max_s": 3600.0,
    "latency_min_s": 3600.0,
    "latency_max_s": 3600.0,
    "sustain_s": 4 * 3600.0,
    "sustain_extend_to_s": 4 * 3600.0,
    "window_s": 3600.0,
    "cooldown_timeout_s": 3600.0,
    "phase_timeout_s": 24 * 3600.0,
    "memory_limit_mb": 1 << 20,
    "threads": 1024,
    "max_temp_c": 150.0,
    "trip_c": 150.0,
    "seed": 2**32 - 1,
    "server_rate_per_s": 1e6,
    "server_p99_ms": 3.6e6,
    "server_callers": 64,
    "server_search_steps": 20,
    "scenario_s": 60.0,
    "idle_power_s": 600.0,
}
# A batch sweep lists at most this many sizes, each at most MAX_BATCH.
MAX_BATCH_SIZES = 16
MAX_BATCH = 4096


def make_plan(preset: str = "quick", **overrides) -> Plan:
    """A full plan from a preset name plus overrides (None overrides are ignored)."""
    if preset not in PRESETS:
        raise BadInput(f"unknown plan '{preset}'", hint=f"use one of: {', '.join(PRESETS)}")
    plan = {**DEFAULTS, **PRESETS[preset], "preset": preset}
    plan.update({k: v for k, v in overrides.items() if v is not None})
    return Plan.from_json(plan)


# Numbers a plan may leave null (meaning: the runtime's or the board's own); every
# other number must be given or come from the preset.
_OPTIONAL_NUMBERS = {
    "threads",
    "latency_max_s",
    "sustain_extend_to_s",
    "window_s",
    "max_temp_c",
    "memory_limit_mb",
    "trip_c",
    "server_rate_per_s",
    "server_p99_ms",
}


def _validated(plan: Mapping) -> dict:
    preset = plan.get("preset", "quick")
    if not isinstance(preset, str):
        raise BadInput(f"plan field 'preset' must be a string, got {str(preset)[:40]}")
    if preset not in PRESETS:
        raise BadInput(f"unknown plan '{preset}'", hint=f"use one of: {', '.join(PRESETS)}")
    full = {**DEFAULTS, **PRESETS[preset], **plan}
    unknown = sorted(set(full) - set(DEFAULTS) - set(PRESETS["soak"]))
    if unknown:
        raise BadInput(f"unknown plan field '{unknown[0]}'")
    for key, kind in _NUMBERS.items():
        value = full.get(key)
        if value is None:
            if key in _OPTIONAL_NUMBERS or key not in full:
                continue
            raise BadInput(f"plan field '{key}' must be a number, got null")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadInput(f"plan field '{key}' must be a number, got {value!r}")
        try:
            finite = math.isfinite(value)
        except OverflowError:  # a JSON integer beyond any float
            finite = False
        if not finite:
            raise BadInput(f"plan field '{key}' must be a finite number, got {str(value)[:20]}")
        if value < 0:
            raise BadInput(f"plan field '{key}' must not be negative, got {value:g}")
        if value > _LIMITS[key]:
            raise BadInput(
                f"plan field '{key}' is {value:g}; the most a plan may ask for is {_LIMITS[key]:g}"
            )
        full[key] = kind(value)
    for key in (
        "xnnpack",
        "cooldown",
        "evict_page_cache",
        "thread_scaling",
        "server",
        "operator_profile",
    ):
        if not isinstance(full[key], bool):
            raise BadInput(f"plan field '{key}' must be true or false, got {full[key]!r}")
    for key in ("preset", "runtime", "graph_optimization"):
        if not isinstance(full[key], str):
            raise BadInput(f"plan field '{key}' must be a string, got {full[key]!r}")
    if full["profile"] is not None and not isinstance(full["profile"], str):
        raise BadInput(f"plan field 'profile' must be a string, got {full['profile']!r}")
    providers = full["providers"]
    if providers is not None and (
        not isinstance(providers, (list, tuple)) or not all(isinstance(p, str) for p in providers)
    ):
        raise BadInput("plan field 'providers' must be a list of provider names")
    indicators = full["throttle_indicators"]
    if indicators is not None:
        from .probes.telemetry import THROTTLE_INDICATORS

        if not isinstance(indicators, (list, tuple)) or not all(
            i in THROTTLE_INDICATORS for i in indicators
        ):
            raise BadInput(
                f"plan field 'throttle_indicators' must list some of {', '.join(THROTTLE_INDICATORS)}"
            )
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
    for key in ("server_callers", "server_search_steps"):
        if full[key] < 1:
            raise BadInput(f"plan field '{key}' must be at least 1")
    for key in ("server_rate_per_s", "server_p99_ms", "scenario_s"):
        if full[key] is not None and full[key] <= 0:
            raise BadInput(f"plan field '{key}' must be positive")
    full["batch_sizes"] = _batch_sizes(full["batch_sizes"])
    shapes = full.get("shapes") or {}
    if not isinstance(shapes, Mapping) or not all(
        isinstance(v, list) and all(isinstance(d, int) and d > 0 for d in v)
        for v in shapes.values()
    ):
        raise BadInput("plan field 'shapes' must map input names to lists of positive ints")
    full["shapes"] = {str(k): list(v) for k, v in shapes.items()}
    return full


def _batch_sizes(value) -> list[int] | None:
    """``batch_sizes``: None, or 1..16 distinct sizes 1..4096, kept sorted."""
    if value is None:
        return None
    if (
        not isinstance(value, (list, tuple))
        or not value
        or not all(isinstance(b, int) and not isinstance(b, bool) for b in value)
    ):
        raise BadInput("plan field 'batch_sizes' must be a non-empty list of batch sizes")
    if len(value) > MAX_BATCH_SIZES:
        raise BadInput(
            f"plan field 'batch_sizes' lists {len(value)} sizes; at most {MAX_BATCH_SIZES}"
        )
    for b in value:
        if not 1 <= b <= MAX_BATCH:
            raise BadInput(f"plan field 'batch_sizes' holds {b}; sizes must be 1..{MAX_BATCH}")
    return sorted(set(value))


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
