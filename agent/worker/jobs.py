"""The job a worker process runs: a typed message from the agent to ``agent/worker/main.py``.

One JSON line on the worker's stdin. One kind per measurement phase: ``cold_load``
(import, load, first inference in a fresh process), ``warm`` (warm-up, latency per
input shape, drift over the golden set, memory), ``sustained`` (closed-loop windows
while the board heats), the optional service scenarios ``batch_sweep``,
``thread_scaling``, ``server`` and ``operators``, ``pipeline`` (a golden set of raw
files through its declared pipeline, stage by stage), ``providers`` (which execution
providers the runtime offers, asked before anything runs), and ``env_segments`` (one
runtime environment's warm latency in segments the agent asks for one at a time,
interleaved with other environments' workers, then drift; ``phases/runtime_envs.py``), and
``drift`` (drift over the golden set alone: the optimisation check's second measure),
``kernel_path`` (one kernel path's drift, short latency and operator placement:
``phases/kernel_paths.py``) and ``divergence`` (one case with every intermediate tensor
kept on two paths, or on one against the golden set's: the first divergent node).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path

from edgequal.contract.plan import Plan

from ..config import output_fault_setting
from ..measure.latency import LatencySettings
from ..runtimes.base import RuntimeOptions

JOB_KINDS = (
    "cold_load",
    "warm",
    "sustained",
    "batch_sweep",
    "thread_scaling",
    "server",
    "operators",
    "providers",
    "edge_shape",
    "coload",
    "env_segments",
    "pipeline",
    "drift",
    "kernel_path",
    "divergence",
)
# Profiled inferences for the operator profile (after one that allocates).
OPERATOR_PROFILE_RUNS = 20


@dataclass(frozen=True)
class SustainSettings:
    """How long the closed loop runs and how long each window is."""

    duration_s: float
    window_s: float


@dataclass(frozen=True)
class EdgeSettings:
    """One edge of the input range: its label, the shapes it sets, how long to time it."""

    label: str
    shapes: dict
    seconds: float
    min_runs: int


@dataclass(frozen=True)
class ColoadSettings:
    """One co-load process: a model in a loop (closed, or at ``rate_per_s``), or a synthetic
    CPU or memory-bandwidth load busy ``share`` (0..1] of its time on one core."""

    load: str  # "model", "cpu" or "membw"
    rate_per_s: float | None = None
    share: float = 1.0
    buffer_mb: int = 64
    report_every_s: float = 0.05


@dataclass(frozen=True)
class DivergenceSettings:
    """Which case to re-run with every intermediate tensor kept, against what: the
    ``reference`` path's runtime options (``graph_optimization``, ``providers``,
    ``op_resolver``), or None for the golden set's recorded intermediates; and how many
    bytes the kept tensors of both sides may take at once (more: range by range)."""

    case: str
    reference: dict | None = None
    reference_label: str = "the golden set's intermediate tensors"
    budget_bytes: int = 256 * 2**20
    atol: float = 1e-6
    rtol: float = 1e-3


@dataclass(frozen=True)
class ScenarioSettings:
    """The service scenarios' settings: seconds per point, batch sizes, the server's load."""

    seconds: float
    batch_sizes: tuple[int, ...] | None = None
    server_rate_per_s: float | None = None
    server_p99_ms: float | None = None
    server_callers: int = 4
    server_search_steps: int = 5
    profile_runs: int = OPERATOR_PROFILE_RUNS

    @classmethod
    def from_plan(cls, plan: Plan) -> ScenarioSettings:
        """The plan's ``scenario_s``, ``batch_sizes`` and ``server_*`` fields."""
        return cls(
            seconds=plan.scenario_s,
            batch_sizes=plan.batch_sizes,
            server_rate_per_s=plan.server_rate_per_s,
            server_p99_ms=plan.server_p99_ms,
            server_callers=plan.server_callers,
            server_search_steps=plan.server_search_steps,
        )

    def to_json(self) -> dict:
        """As JSON for the worker job."""
        out = asdict(self)
        out["batch_sizes"] = list(self.batch_sizes) if self.batch_sizes else None
        return out

    @classmethod
    def from_json(cls, obj: dict) -> ScenarioSettings:
        """From the worker job's JSON."""
        sizes = obj.get("batch_sizes")
        return cls(**{**obj, "batch_sizes": tuple(sizes) if sizes else None})


def latency_settings(plan: Plan) -> LatencySettings:
    """The warm phase's settings from the plan's ``warmup_*`` and ``latency_*`` fields."""
    return LatencySettings(
        warmup_min_runs=plan.warmup_min_runs,
        warmup_min_s=plan.warmup_min_s,
        warmup_max_s=plan.warmup_max_s,
        min_runs=plan.latency_min_runs,
        min_s=plan.latency_min_s,
        max_runs=plan.latency_max_runs,
        max_s=plan.latency_max_s,
        preemption_tags=plan.preemption_tags,
        max_extension=plan.latency_max_extension,
    )


@dataclass(frozen=True)
class WorkerJob:
    """Everything one worker needs: the phase, the files, the runtime and its options."""

    kind: str
    model: str
    golden: str | None
    runtime: str
    threads: int | None = None
    providers: tuple[str, ...] | None = None
    graph_optimization: str = "all"
    xnnpack: bool = True
    op_resolver: str | None = None
    shapes: dict | None = None
    seed: int = 0
    evict_page_cache: bool = True  # cold_load
    latency: LatencySettings | None = None  # warm
    sustain: SustainSettings | None = None  # sustained
    scenario: ScenarioSettings | None = None  # batch_sweep, thread_scaling, server, operators
    edge: EdgeSettings | None = None  # edge_shape
    coload: ColoadSettings | None = None  # coload
    divergence: DivergenceSettings | None = None  # divergence
    # warm with a declared co-load: the process groups the worker pauses and resumes
    # between its plain and co-load segments, and how many rounds of each.
    coload_pgids: tuple[int, ...] | None = None
    coload_rounds: int = 0
    # The output fault injector (runtimes/faults.py), set only from the agent's
    # $EDGEQUAL_OUTPUT_FAULT, and the probe root its temperature condition reads.
    output_fault: str | None = None
    probe_root: str | None = None
    # cold_load: after its result the process stays for one more job (the warm phase), the
    # loaded model kept for it: one process start less a qualification (worker/io.py).
    keep: bool = False

    @classmethod
    def for_phase(
        cls, kind: str, model: Path, golden: Path | None, plan: Plan, runtime: str, **settings
    ) -> WorkerJob:
        """The job for one phase of ``plan``; ``settings`` are the phase's own (latency, sustain)."""
        if kind not in JOB_KINDS:
            raise ValueError(f"unknown worker job kind {kind!r}")
        return cls(
            kind=kind,
            model=str(model),
            golden=str(golden) if golden else None,
            runtime=runtime,
            threads=plan.threads,
            providers=plan.providers,
            graph_optimization=plan.graph_optimization,
            xnnpack=plan.xnnpack,
            shapes=dict(plan.shapes),
            seed=plan.seed,
            evict_page_cache=plan.evict_page_cache,
            output_fault=output_fault_setting(),
            **settings,
        )

    def runtime_options(self) -> RuntimeOptions:
        """What the runtime adapter is asked for."""
        return RuntimeOptions(
            threads=self.threads,
            providers=list(self.providers) if self.providers is not None else None,
            graph_optimization=self.graph_optimization,
            xnnpack=self.xnnpack,
            op_resolver=self.op_resolver,
        )

    def to_json(self) -> dict:
        """The JSON line the worker reads."""
        out = {
            "kind": self.kind,
            "model": self.model,
            "golden": self.golden,
            "runtime": self.runtime,
            "threads": self.threads,
            "providers": list(self.providers) if self.providers is not None else None,
            "graph_optimization": self.graph_optimization,
            "xnnpack": self.xnnpack,
            "op_resolver": self.op_resolver,
            "shapes": self.shapes or {},
            "seed": self.seed,
            "evict_page_cache": self.evict_page_cache,
            "latency": self.latency.to_json() if self.latency else None,
            "sustain": (
                {"duration_s": self.sustain.duration_s, "window_s": self.sustain.window_s}
                if self.sustain
                else None
            ),
            "scenario": self.scenario.to_json() if self.scenario else None,
            "edge": asdict(self.edge) if self.edge else None,
            "coload": asdict(self.coload) if self.coload else None,
            "divergence": asdict(self.divergence) if self.divergence else None,
            "coload_pgids": list(self.coload_pgids) if self.coload_pgids else None,
            "coload_rounds": self.coload_rounds,
            "output_fault": self.output_fault,
            "probe_root": self.probe_root,
            "keep": self.keep,
        }
        return out

    @classmethod
    def from_json(cls, obj: dict) -> WorkerJob:
        """Read the worker's JSON line back."""
        nested = ("latency", "sustain", "scenario", "edge", "coload", "divergence")
        job = cls(**{k: v for k, v in obj.items() if k not in nested})
        return replace(
            job,
            providers=tuple(obj["providers"]) if obj.get("providers") is not None else None,
            latency=LatencySettings.from_json(obj["latency"]) if obj.get("latency") else None,
            sustain=SustainSettings(**obj["sustain"]) if obj.get("sustain") else None,
            scenario=ScenarioSettings.from_json(obj["scenario"]) if obj.get("scenario") else None,
            edge=EdgeSettings(**obj["edge"]) if obj.get("edge") else None,
            coload=ColoadSettings(**obj["coload"]) if obj.get("coload") else None,
            divergence=(DivergenceSettings(**obj["divergence"]) if obj.get("divergence") else None),
            coload_pgids=tuple(obj["coload_pgids"]) if obj.get("coload_pgids") else None,
        )
