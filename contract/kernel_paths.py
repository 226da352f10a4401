"""Kernel paths: the ways one runtime can run one model, named for ``qualify --paths``
(docs/divergence.md). Pure: the host checks the names before a run, the agent expands
them against what the board offers and runs each.

- ``opt:LEVEL``: onnxruntime's graph optimisation (``disabled``, ``basic``, ``extended``,
  ``all``) on the CPU execution provider;
- ``ep:NAME``: an onnxruntime execution provider (``CPU``, ``XNNPACK``, ``OpenVINO``,
  ``CUDA``, ``TensorRT``, ... or the full ``...ExecutionProvider`` name) ahead of the CPU
  one, at the plan's graph optimisation level;
- ``resolver:NAME``: LiteRT's op resolver (``auto``: builtin kernels and XNNPACK;
  ``builtin``; ``builtin-ref``: the reference kernels; ``builtin-no-delegates``);
- ``all``: every path of the model's runtime, the reference-like one first
  (:data:`ALL_PATHS`).

The first path is the reference the others' intermediate tensors are compared with.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import BadInput
from .runtimes import runtime_kind

OPT_LEVELS = ("disabled", "basic", "extended", "all")
RESOLVERS = ("auto", "builtin", "builtin-ref", "builtin-no-delegates")
CPU_PROVIDER = "CPUExecutionProvider"
# The execution providers ``all`` asks for beside the CPU paths; an absent one is named so.
KNOWN_PROVIDERS = (
    "XNNPACKExecutionProvider",
    "OpenVINOExecutionProvider",
    "CUDAExecutionProvider",
    "TensorrtExecutionProvider",
)
# The short names a path may use for a provider (``ep:TensorRT``), and the names shown.
SHORT_NAMES = {
    "CPU": CPU_PROVIDER,
    "XNNPACK": "XNNPACKExecutionProvider",
    "OpenVINO": "OpenVINOExecutionProvider",
    "CUDA": "CUDAExecutionProvider",
    "TensorRT": "TensorrtExecutionProvider",
}
ALL_PATHS = {
    "onnxruntime": (
        "opt:disabled",
        "opt:basic",
        "opt:extended",
        "opt:all",
        "ep:XNNPACK",
        "ep:OpenVINO",
        "ep:CUDA",
        "ep:TensorRT",
    ),
    "litert": ("resolver:builtin-ref", "resolver:auto", "resolver:builtin-no-delegates"),
}
MAX_PATHS = 12
# How a board gets a provider it lacks (named beside an absent path).
PROVIDER_HINTS = {
    "OpenVINOExecutionProvider": "onnxruntime-openvino (x86), in a runtime environment of its "
    "own: edgequal agent runtime add ssh://U@H onnxruntime-openvino==VERSION --name openvino",
    "CUDAExecutionProvider": "onnxruntime-gpu (JetPack's onnxruntime on a Jetson)",
    "TensorrtExecutionProvider": "onnxruntime-gpu built with TensorRT (a Jetson's)",
    "XNNPACKExecutionProvider": "an onnxruntime built with --use_xnnpack",
}


@dataclass(frozen=True)
class KernelPath:
    """One path: its name, its runtime, and the runtime options it sets."""

    name: str
    runtime: str
    graph_optimization: str | None = None
    provider: str | None = None
    op_resolver: str | None = None

    def options(self, plan_level: str = "all") -> dict:
        """The runtime options it runs with (``graph_optimization``, ``providers``,
        ``op_resolver``); ``plan_level`` is the graph optimisation of an ``ep:`` path."""
        if not runtime_kind(self.runtime).execution_providers:  # LiteRT: op resolvers
            return {
                "graph_optimization": plan_level,
                "providers": None,
                "op_resolver": self.op_resolver,
            }
        providers = [CPU_PROVIDER]
        if self.provider is not None and self.provider != CPU_PROVIDER:
            providers = [self.provider, CPU_PROVIDER]
        return {
            "graph_optimization": self.graph_optimization or plan_level,
            "providers": providers,
            "op_resolver": None,
        }


def provider_name(short: str) -> str:
    """``CUDA`` -> ``CUDAExecutionProvider``; a full name stays; ``TensorRT`` -> ``Tensorrt...``."""
    if short.endswith("ExecutionProvider"):
        return short
    known = {k.lower(): v for k, v in SHORT_NAMES.items()}
    return known.get(short.lower(), f"{short}ExecutionProvider")


def short_name(provider: str) -> str:
    """The name a path shows for a provider: ``TensorrtExecutionProvider`` -> ``TensorRT``."""
    known = {v: k for k, v in SHORT_NAMES.items()}
    return known.get(provider, provider.removesuffix("ExecutionProvider"))


def parse_path(text: str) -> KernelPath:
    """One path name (``opt:all``, ``ep:CUDA``, ``resolver:builtin-ref``); BadInput otherwise."""
    kind, sep, value = text.strip().partition(":")
    hint = "paths: opt:LEVEL, ep:PROVIDER, resolver:NAME or all (docs/divergence.md)"
    if not sep or not value:
        raise BadInput(f"unknown kernel path '{text[:60]}'", hint=hint)
    if kind == "opt":
        if value not in OPT_LEVELS:
            raise BadInput(
                f"unknown graph optimisation level in path '{text[:60]}'",
                hint=", ".join(OPT_LEVELS),
            )
        return KernelPath(f"opt:{value}", "onnxruntime", graph_optimization=value)
    if kind == "ep":
        full = provider_name(value)
        if not full.replace("ExecutionProvider", "").isidentifier():
            raise BadInput(f"bad execution provider name in path '{text[:60]}'", hint=hint)
        return KernelPath(f"ep:{short_name(full)}", "onnxruntime", provider=full)
    if kind == "resolver":
        if value not in RESOLVERS:
            raise BadInput(
                f"unknown LiteRT op resolver in path '{text[:60]}'", hint=", ".join(RESOLVERS)
            )
        return KernelPath(f"resolver:{value}", "litert", op_resolver=value)
    raise BadInput(f"unknown kernel path '{text[:60]}'", hint=hint)


def check_path_names(names) -> list[str]:
    """The plan's ``kernel_paths``: 1..MAX_PATHS distinct names, each ``all`` or a path."""
    if (
        not isinstance(names, (list, tuple))
        or not names
        or not all(isinstance(n, str) for n in names)
    ):
        raise BadInput("plan field 'kernel_paths' must be a non-empty list of path names")
    if len(names) > MAX_PATHS:
        raise BadInput(f"plan field 'kernel_paths' names {len(names)} paths; at most {MAX_PATHS}")
    out = []
    for name in names:
        canonical = "all" if name == "all" else parse_path(name).name
        if canonical in out:
            raise BadInput(f"plan field 'kernel_paths' names the path {canonical} twice")
        out.append(canonical)
    return out


def expand_paths(names, runtime: str) -> list[KernelPath]:
    """The paths the names ask of ``runtime`` (``all`` expanded in place, duplicates once);
    BadInput for a path of another runtime."""
    paths: list[KernelPath] = []
    for name in names:
        for one in ALL_PATHS.get(runtime, ()) if name == "all" else (name,):
            path = parse_path(one)
            if path.runtime != runtime:
                raise BadInput(
                    f"kernel path {path.name} is a {path.runtime} path; this model runs on {runtime}",
                    hint=", ".join(ALL_PATHS.get(runtime, ())),
                )
            if path.name not in [p.name for p in paths]:
                paths.append(path)
    return paths


def absent_reason(path: KernelPath, available_providers, runtime_version: str) -> str | None:
    """Why the board lacks ``path`` (None when it has it): a provider its onnxruntime does not offer."""
    if path.provider is None or path.provider in (available_providers or ()):
        return None
    reason = f"onnxruntime {runtime_version} here offers {', '.join(available_providers or ()) or 'none'}"
    hint = PROVIDER_HINTS.get(path.provider)
    return reason + (f"; {path.provider} comes with {hint}" if hint else "")
