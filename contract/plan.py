"""Measurement plans: the presets (quick, standard, soak) and the typed, validated :class:`Plan`.

On the wire and in the signed report a plan is plain JSON (``Plan.to_json``); inside
the agent it is a :class:`Plan`, built once by ``Plan.from_json``.

A plan is built from three layers (:func:`make_plan`): the preset, then the device
profile the host applied, then the caller's flags. The preset alone decides which
phases run and how long; a profile sets only :data:`PROFILE_FIELDS` (board facts and
the window of the preset's own sustained phase), so it never adds or lengthens a phase.
The plan keeps where each field came from in ``sources``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from .board_families import BOARD_FAMILIES
from .declarations import check_coload, check_runtime_envs, parse_edge_shapes
from .errors import BadInput

# Throttle indicator names (measurement.md §6.4); device profiles list the ones that apply.
# A board family's firmware flags bring their own (contract/board_families.py).
INDICATOR_CLOCK_DROP = "clock_drop"

INDICATOR_COOLING = "cooling_device"

INDICATOR_PASSIVE_TRIP = "passive_trip"

THROTTLE_INDICATORS = (
    *(f.throttle_indicator for f in BOARD_FAMILIES if f.throttle_indicator),
    INDICATOR_CLOCK_DROP,
    INDICATOR_COOLING,
    INDICATOR_PASSIVE_TRIP,
)

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
    "profile": None,  # the device profile whose board fields (PROFILE_FIELDS) the host applied
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
    # Declared co-load (docs/measurement.md "Co-load"): background work the agent starts
    # beside the latency and sustained phases; the latency phase then alternates plain and
    # co-load segments, coload_rounds of each, so the difference is measured in one run.
    "coload": None,
    "coload_rounds": 4,
    # Edges of the input range: shapes measured one per worker (latency, peak memory,
    # a successful run), each for edge_latency_s seconds and at least edge_min_runs runs.
    "edge_shapes": None,
    "edge_latency_s": 1.0,
    "edge_min_runs": 10,
    # Runtime environments installed on the device (docs/measurement.md "Runtime
    # environments"): the model is also measured under each named one ("default" is the
    # agent's own), cold load per environment and warm latency in interleaved segments,
    # runtime_env_rounds of each environment in ABBA order.
    "runtime_envs": None,
    "runtime_env_rounds": 4,
    # Tag every timed call the worker was switched out during and decide on the calls
    # that kept the CPU (docs/measurement.md "Measuring through interference"); false
    # times every call alike and decides on all of them, as edgequal did before.
    "preemption_tags": True,
    # The sha256 of the gate policy the host committed to before the run (qualify --gate or
    # --policy, fleet run --gate): signed inside the plan, so a gate can show its limits
    # were fixed before the figures were known (docs/gating.md "A policy committed before
    # the run"). The device only checks its form.
    "policy_sha256": None,
    # The sha256 of the model's OMS signature file, pushed like the model (qualify
    # --model-signature): the agent verifies it before loading (agent/model_signature.py).
    "model_signature_sha256": None,
    # Measure the drift once more with onnxruntime's graph optimisation off, in the same
    # run (docs/measurement.md "int8 on x86 without VNNI"): whether the optimised kernels
    # cause a drift.
    "check_optimization": False,
    # Kernel paths side by side (qualify --paths, docs/divergence.md): the golden set run
    # through each named path (contract/kernel_paths.py), the first the reference; a path
    # whose drift fails is localised to its first divergent node.
    "kernel_paths": None,
    # The memory the kept intermediate tensors of a localisation may take (None: a quarter
    # of what the board has available, at most 256 MB); beyond it, range by range.
    "divergence_memory_mb": None,
    # A tagged latency loop short of clean calls runs on to this many times its planned
    # seconds (docs/measurement.md "Measuring through interference"); latency_max_s wins.
    "latency_max_extension": 3.0,
    # The measurement (warm latency, and the sustained phase where planned) this many
    # times, with the cool-down between (docs/measurement.md "Repeated runs").
    "repeat": 1,
    # Where fields came from: {field: "preset" | "profile" | "flag"}; a field not named
    # here has the plan's default (DEFAULTS).
    "sources": {},
}

# The origins a plan's ``sources`` names: the preset's table, the device profile the host
# applied, or the caller (a command-line flag, a library or lab-file argument).
SOURCES = ("preset", "profile", "flag")

# What a device profile may set: the board's thread count, throttle temperature and
# indicators, the temperature that stops a sustained run, its own name, and the window
# length of the preset's own sustained phase. No phase length is among them.
PROFILE_FIELDS = ("profile", "threads", "trip_c", "max_temp_c", "throttle_indicators", "window_s")

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
    "coload_rounds": int,
    "edge_latency_s": float,
    "edge_min_runs": int,
    "runtime_env_rounds": int,
    "latency_max_extension": float,
    "repeat": int,
    "divergence_memory_mb": float,
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
    coload: tuple[dict, ...] | None = None
    coload_rounds: int = 4
    edge_shapes: tuple[dict, ...] | None = None
    edge_latency_s: float = 1.0
    edge_min_runs: int = 10
    runtime_envs: tuple[str, ...] | None = None
    runtime_env_rounds: int = 4
    preemption_tags: bool = True
    policy_sha256: str | None = None
    model_signature_sha256: str | None = None
    check_optimization: bool = False
    kernel_paths: tuple[str, ...] | None = None
    divergence_memory_mb: float | None = None
    latency_max_extension: float = 3.0
    repeat: int = 1
    sources: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: Mapping) -> Plan:
        """Check types and ranges (BadInput names the field); missing keys come from the preset."""
        if not isinstance(obj, Mapping):
            raise BadInput("a plan must be a JSON object")
        full = _validated(obj)
        for key in (
            "providers",
            "throttle_indicators",
            "batch_sizes",
            "coload",
            "edge_shapes",
            "runtime_envs",
            "kernel_paths",
        ):
            if full[key] is not None:
                full[key] = tuple(full[key])
        return cls(**full)

    def to_json(self) -> dict:
        """The plan as documented JSON (docs/report-schema.md), the form the wire and report carry."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        for key in (
            "providers",
            "throttle_indicators",
            "batch_sizes",
            "runtime_envs",
            "kernel_paths",
        ):
            if out[key] is not None:
                out[key] = list(out[key])
        for key in ("coload", "edge_shapes"):
            if out[key] is not None:
                out[key] = [_copy_json(item) for item in out[key]]
        out["shapes"] = {k: list(v) for k, v in self.shapes.items()}
        out["sources"] = dict(self.sources)
        return out

    def timed_s(self) -> float:
        """The least time the plan's timed phases take, in seconds: warm-up and latency per
        input shape (and per edge shape), the sustained phase, the scenario points. Process
        starts, cool-down and uploads come on top; an estimate of when a run is done, never
        a measurement."""
        shapes = max(1, len(self.shapes))
        # Repeated runs time the warm latency and the sustained phase again (cool-downs on top).
        total = self.repeat * (shapes * (self.warmup_min_s + self.latency_min_s) + self.sustain_s)
        total += len(self.edge_shapes or ()) * self.edge_latency_s
        points = len(self.batch_sizes or ()) + (self.server_search_steps if self.server else 0)
        if self.thread_scaling:
            points += self.threads or 1
        return total + points * self.scenario_s

    @property
    def sustain_window_s(self) -> float:
        """Window length: ``window_s`` if set, else 30 s, or a tenth of runs shorter than 5 minutes (>= 1 s)."""
        if self.window_s:
            return float(self.window_s)
        if self.sustain_s < 300:
            return max(1.0, self.sustain_s / 10)
        return 30.0


# Without the plan's latency_max_s, a loop short of clean samples runs on to
# MAX_EXTENSION times latency_min_s (the plan's latency_max_extension), and at least
# CLEAN_EXTENSION_MIN_S past it (docs/measurement.md "Measuring through interference").
MAX_EXTENSION = 3.0
CLEAN_EXTENSION_MIN_S = 0.5


def loop_limit_s(min_s: float, max_s: float | None, max_extension: float = MAX_EXTENSION) -> float:
    """How long a tagged timed loop may run at most: the plan's max seconds, else
    ``max_extension`` times its minimum seconds (at least CLEAN_EXTENSION_MIN_S more)."""
    if max_s:
        return max_s
    return max(min_s * max_extension, min_s + CLEAN_EXTENSION_MIN_S)


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
    "coload_rounds": 100,
    "edge_latency_s": 600.0,
    "edge_min_runs": 1_000_000,
    "runtime_env_rounds": 100,
    "latency_max_extension": 100.0,
    "repeat": 20,
    "divergence_memory_mb": float(1 << 20),
}
# A batch sweep lists at most this many sizes, each at most MAX_BATCH.
MAX_BATCH_SIZES = 16
MAX_BATCH = 4096


def make_plan(preset: str = "quick", from_profile: Mapping | None = None, **overrides) -> Plan:
    """A full plan: the preset, then a device profile's fields, then ``overrides`` (the
    caller's flags); None values are ignored, and ``sources`` records each field's origin.

    ``from_profile`` may hold only :data:`PROFILE_FIELDS`; its ``window_s`` applies only
    to the preset's own sustained phase (not when the preset has none, nor when an
    override sets ``sustain_s``): a profile never adds a phase nor changes its length.
    """
    if preset not in PRESETS:
        raise BadInput(f"unknown plan '{preset}'", hint=f"use one of: {', '.join(PRESETS)}")
    table = PRESETS[preset]
    flags = {k: v for k, v in overrides.items() if v is not None}
    if "sources" in flags:
        raise BadInput("plan field 'sources' is recorded by make_plan, not given")
    board = {k: v for k, v in (from_profile or {}).items() if v is not None}
    extra = sorted(set(board) - set(PROFILE_FIELDS))
    if extra:
        raise BadInput(
            f"a device profile may not set plan field '{extra[0]}'",
            hint=f"a profile sets only {', '.join(PROFILE_FIELDS)}; phase lengths are the preset's",
        )
    if not table["sustain_s"] or "sustain_s" in flags:
        board.pop("window_s", None)  # a window for a phase this plan does not run as the preset's
    plan = {**DEFAULTS, **table, "preset": preset}
    sources = dict.fromkeys(table, "preset")
    for origin, values in (("profile", board), ("flag", flags)):
        plan.update(values)
        sources.update(dict.fromkeys(values, origin))
    sources.pop("preset", None)
    plan["sources"] = sources
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
    "divergence_memory_mb",
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
        "preemption_tags",
        "check_optimization",
    ):
        if not isinstance(full[key], bool):
            raise BadInput(f"plan field '{key}' must be true or false, got {full[key]!r}")
    for key in ("preset", "runtime", "graph_optimization"):
        if not isinstance(full[key], str):
            raise BadInput(f"plan field '{key}' must be a string, got {full[key]!r}")
    if full["profile"] is not None and not isinstance(full["profile"], str):
        raise BadInput(f"plan field 'profile' must be a string, got {full['profile']!r}")
    for key in ("policy_sha256", "model_signature_sha256"):
        digest = full[key]
        if digest is not None and not (
            isinstance(digest, str) and len(digest) == 64 and set(digest) <= set("0123456789abcdef")
        ):
            raise BadInput(f"plan field '{key}' must be 64 lowercase hex digits or null")
    providers = full["providers"]
    if providers is not None and (
        not isinstance(providers, (list, tuple)) or not all(isinstance(p, str) for p in providers)
    ):
        raise BadInput("plan field 'providers' must be a list of provider names")
    indicators = full["throttle_indicators"]
    if indicators is not None and (
        not isinstance(indicators, (list, tuple))
        or not all(i in THROTTLE_INDICATORS for i in indicators)
    ):
        raise BadInput(
            f"plan field 'throttle_indicators' must list some of {', '.join(THROTTLE_INDICATORS)}"
        )
    if full["runtime"] != "auto":
        from .runtimes import check_runtime_name

        check_runtime_name(full["runtime"])  # BadInput naming the accepted names
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
    if full["coload_rounds"] < 1:
        raise BadInput("plan field 'coload_rounds' must be at least 1")
    if full["edge_min_runs"] < 1:
        raise BadInput("plan field 'edge_min_runs' must be at least 1")
    if full["repeat"] < 1:
        raise BadInput("plan field 'repeat' must be at least 1")
    if full["latency_max_extension"] < 1:
        raise BadInput(
            "plan field 'latency_max_extension' must be at least 1 (times the plan's latency "
            f"seconds), got {full['latency_max_extension']:g}"
        )
    if full["runtime_env_rounds"] < 1:
        raise BadInput("plan field 'runtime_env_rounds' must be at least 1")
    full["runtime_envs"] = check_runtime_envs(full["runtime_envs"])
    if full["divergence_memory_mb"] is not None and full["divergence_memory_mb"] <= 0:
        raise BadInput("plan field 'divergence_memory_mb' must be positive")
    if full["kernel_paths"] is not None:
        from .kernel_paths import check_path_names

        full["kernel_paths"] = check_path_names(full["kernel_paths"])
    full["batch_sizes"] = _batch_sizes(full["batch_sizes"])
    full["coload"] = check_coload(full["coload"])
    full["edge_shapes"] = parse_edge_shapes(full["edge_shapes"])
    shapes = full.get("shapes") or {}
    if not isinstance(shapes, Mapping) or not all(
        isinstance(v, list) and all(isinstance(d, int) and d > 0 for d in v)
        for v in shapes.values()
    ):
        raise BadInput("plan field 'shapes' must map input names to lists of positive ints")
    full["shapes"] = {str(k): list(v) for k, v in shapes.items()}
    full["sources"] = _sources(full["sources"])
    return full


# Fields a plan's ``sources`` may name: every plan field but the preset's name and itself.
_SOURCE_FIELDS = (frozenset(DEFAULTS) | frozenset(PRESETS["soak"])) - {"preset", "sources"}


def _sources(value) -> dict[str, str]:
    """``sources``: plan field names, each mapped to "preset", "profile" or "flag"."""
    if not isinstance(value, Mapping):
        raise BadInput("plan field 'sources' must map plan fields to preset, profile or flag")
    for key, origin in value.items():
        if key not in _SOURCE_FIELDS:
            raise BadInput(f"plan field 'sources' names '{str(key)[:40]}', which is no plan field")
        if origin not in SOURCES:
            raise BadInput(
                f"plan field 'sources.{key}' is {str(origin)[:40]!r}; use one of: {', '.join(SOURCES)}"
            )
    return {str(k): v for k, v in value.items()}


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


def _copy_json(value):
    if isinstance(value, Mapping):
        return {k: _copy_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_copy_json(v) for v in value]
    return value


def duration_text(seconds: float) -> str:
    """``3 s``, ``90 s``, ``10 min``: whole minutes from two minutes up, else seconds."""
    if seconds >= 120 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"
