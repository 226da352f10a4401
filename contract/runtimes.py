"""The runtime names a plan, a golden set or a CLI may give, and the rule for a runtime
environment's name: checked on the host before anything is sent and again on the agent."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import BadInput
from .model_file import onnx_problem, tflite_problem


@dataclass(frozen=True)
class RuntimeKind:
    """One runtime edgequal qualifies on, everything that names it declared once: the plan's
    and report's name, its adapter (imported only by a worker), the model files it takes
    and how they are told apart, where it comes from, and its line in the docs. Every list
    of runtimes (plan validation, ``--runtime``, detection, environments, install extras,
    approvals) is derived from :data:`RUNTIMES`."""

    name: str
    adapter: str
    """``module:Class`` in ``edgequal.agent.runtimes``."""
    model_kind: str
    """What its model file is, in messages: ``an ONNX model``."""
    suffixes: tuple[str, ...]
    """Model file suffixes, the first the usual one."""
    magic: tuple[int, bytes]
    """``(offset, bytes)`` its model files carry, to tell a file stored without a name."""
    framing_problem: Callable[[Path], str | None]
    """Why a file is not one of its models, from its framing (``contract/model_file.py``)."""
    framing: str
    """What tells its model files, in messages: ``the TFL3 identifier at byte 4``."""
    file_word: str
    """What its model file is called when named as what it is: ``model`` or ``file``."""
    modules: tuple[str, ...]
    """Importable modules that provide it, the first found wins."""
    distributions: tuple[str, ...]
    """pip distributions that provide it, the first the one an agent most likely has."""
    environments: dict[str, tuple[str, ...]]
    """Distributions a runtime environment may pin, with the modules each provides."""
    extra: str
    """edgequal's pip extra that installs it."""
    install: str
    """How to install it, in messages."""
    docs: str
    """Its line in the docs' table of runtimes."""
    execution_providers: bool = False
    """It runs on execution providers a plan may ask for (``--providers``, ``ep:`` paths)."""
    graph_optimization: bool = False
    """Its graph optimisation can be turned off (``--check-optimization``, ``opt:`` paths)."""
    operator_types: str | None = None
    """``module:function`` in ``edgequal.agent.runtimes`` listing a model file's operator types
    without a session (its int8 form, ``measure/quantization.py``), or None."""


RUNTIMES: tuple[RuntimeKind, ...] = (
    RuntimeKind(
        name="onnxruntime",
        adapter="onnxruntime:OnnxRuntime",
        model_kind="an ONNX model",
        suffixes=(".onnx",),
        magic=(0, b"\x08"),  # an ONNX ModelProto starts with field 1 (ir_version, tag 0x08)
        framing_problem=onnx_problem,
        framing="a ModelProto with a graph",
        file_word="model",
        modules=("onnxruntime",),
        distributions=(
            "onnxruntime",
            "onnxruntime-gpu",
            "onnxruntime-openvino",
            "onnxruntime-directml",
        ),
        environments={
            "onnxruntime": ("onnxruntime",),
            "onnxruntime-gpu": ("onnxruntime",),
            "onnxruntime-openvino": ("onnxruntime",),
        },
        extra="onnx",
        install="pip install 'edgequal[onnx]' (onnxruntime)",
        docs="ONNX Runtime: `.onnx` models, execution providers from what is installed",
        execution_providers=True,
        graph_optimization=True,
        operator_types="onnx_graph:model_op_types",
    ),
    RuntimeKind(
        name="litert",
        adapter="litert:LiteRtRuntime",
        model_kind="a TFLite model",
        suffixes=(".tflite", ".lite"),
        magic=(4, b"TFL3"),  # a TFLite flatbuffer's file identifier
        framing_problem=tflite_problem,
        framing="the TFL3 identifier at byte 4",
        file_word="file",
        modules=("ai_edge_litert", "tflite_runtime"),
        distributions=("ai-edge-litert", "tflite-runtime"),
        environments={"ai-edge-litert": ("ai_edge_litert",), "tflite-runtime": ("tflite_runtime",)},
        extra="litert",
        install="pip install 'edgequal[litert]' (ai-edge-litert), or tflite-runtime where no "
        "ai-edge-litert wheel exists for this platform",
        docs="LiteRT (ai-edge-litert, or tflite-runtime): `.tflite` models, XNNPACK by default",
    ),
)

RUNTIME_NAMES = tuple(kind.name for kind in RUNTIMES)
RUNTIME_EXTRAS = tuple(kind.extra for kind in RUNTIMES)
DEFAULT_RUNTIME = RUNTIMES[0].name
"""The runtime of a model whose runtime nothing names (an environment's default)."""


def runtimes_with(capability: str) -> tuple[str, ...]:
    """The names of the runtimes with ``capability`` (a boolean field of :class:`RuntimeKind`)."""
    return tuple(kind.name for kind in RUNTIMES if getattr(kind, capability))


def runtime_kind(name: str) -> RuntimeKind:
    """The registry entry of a runtime name; BadInput naming the accepted names."""
    check_runtime_name(name)
    return next(kind for kind in RUNTIMES if kind.name == name)


def model_file_problem(path: Path, runtime: str) -> str | None:
    """Why ``path`` is not a model ``runtime`` could load, judged from its framing; None
    when it looks like one (the runtime still decides). A model of another runtime's kind
    (a TFLite file renamed ``.onnx``) is named as what it is."""
    kind = next((k for k in RUNTIMES if k.name == runtime), None)
    problem = kind.framing_problem(Path(path)) if kind is not None else None
    if problem is None:
        return None
    for other in RUNTIMES:
        if other is not kind and other.framing_problem(Path(path)) is None:
            what = other.model_kind.replace(" model", f" {other.file_word}")
            return f"it is {what} ({other.framing}); name it {other.suffixes[0]}"
    return problem


def check_runtime_name(name: str) -> str:
    """``name`` if it names a runtime adapter, else BadInput naming the accepted names."""
    if name not in RUNTIME_NAMES:
        raise BadInput(
            f"unknown runtime '{name}'", hint=f"use one of: auto, {', '.join(RUNTIME_NAMES)}"
        )
    return name


MAX_ENVS_PER_PLAN = 8

_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


def check_env_name(name: object) -> str:
    """A valid environment name (lowercase letters, digits, ``.``, ``_``, ``-``; at most 64)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise BadInput(
            f"bad runtime environment name {str(name)[:70]!r}",
            hint="use lowercase letters, digits, '.', '_' and '-' (at most 64), e.g. onnxruntime-1.20.1",
        )
    return name


@dataclass
class RuntimeStatus:
    """Whether one runtime can be used here: its version, or why not."""

    name: str
    available: bool
    version: str = ""
    reason: str = ""
    distribution: str = ""

    def to_json(self) -> dict:
        """The status as a JSON object (the keys of the protobuf ``RuntimeStatus``)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> RuntimeStatus:
        """The inverse of :meth:`to_json`; missing keys take their defaults."""
        return cls(
            name=str(data.get("name", "")),
            available=bool(data.get("available", False)),
            version=str(data.get("version") or ""),
            reason=str(data.get("reason") or ""),
            distribution=str(data.get("distribution") or ""),
        )


def runtime_for(model_path: Path, requested: str = "auto", name_hint: str | None = None) -> str:
    """The runtime name to use for a model: when ``auto``, by extension, else by content.

    Artifacts on the device are stored by digest, without an extension, so the
    host's file name (``name_hint``) is tried first and then the bytes themselves:
    a TFLite flatbuffer carries ``TFL3`` at offset 4; an ONNX ModelProto starts
    with field 1 (``ir_version``, tag 0x08).
    """
    if requested != "auto":
        check_runtime_name(requested)
        return requested
    for name in (name_hint, str(model_path)):
        suffix = Path(name).suffix.lower() if name else ""
        for kind in RUNTIMES:
            if suffix in kind.suffixes:
                return kind.name
    try:
        with open(model_path, "rb") as f:
            head = f.read(8)
    except OSError as e:
        raise BadInput(f"cannot read model {model_path}: {e.strerror}") from e
    # The longest identifier first: TFL3 at byte 4 says more than one tag byte.
    for kind in sorted(RUNTIMES, key=lambda k: -len(k.magic[1])):
        offset, magic = kind.magic
        if head[offset : offset + len(magic)] == magic:
            return kind.name
    suffixes = " or ".join(kind.suffixes[0] for kind in RUNTIMES)
    raise BadInput(
        f"cannot tell the runtime of '{name_hint or Path(model_path).name}' from its name or content",
        hint=f"use a {suffixes} file, or pass --runtime {'|'.join(RUNTIME_NAMES)}",
    )


# distribution -> (runtime name the adapters know, modules to import)
DISTRIBUTIONS = {
    dist: (kind.name, modules) for kind in RUNTIMES for dist, modules in kind.environments.items()
}


@dataclass(frozen=True)
class Requirement:
    """An exact runtime pin: ``distribution==version``."""

    distribution: str
    version: str

    @classmethod
    def parse(cls, text: str) -> Requirement:
        """``onnxruntime==1.20.1``; only ``==`` pins of a known runtime distribution."""
        m = re.fullmatch(r"\s*([A-Za-z0-9._-]+)\s*==\s*([A-Za-z0-9.+!_-]+)\s*", text or "")
        if m is None:
            raise BadInput(
                f"cannot read runtime requirement {str(text)[:80]!r}",
                hint="pin one exact version, e.g. onnxruntime==1.20.1 (a qualified runtime is one version)",
            )
        dist = m.group(1).lower().replace("_", "-")
        if dist not in DISTRIBUTIONS:
            raise BadInput(
                f"{dist} is not a runtime edgequal measures",
                hint=f"use one of: {', '.join(DISTRIBUTIONS)}",
            )
        return cls(dist, m.group(2))

    def __str__(self) -> str:
        return f"{self.distribution}=={self.version}"

    @property
    def runtime(self) -> str:
        """The adapter's runtime name (``onnxruntime`` or ``litert``)."""
        return DISTRIBUTIONS[self.distribution][0]

    @property
    def modules(self) -> tuple[str, ...]:
        """The modules a working installation can import."""
        return DISTRIBUTIONS[self.distribution][1]

    @property
    def default_name(self) -> str:
        """The environment's name unless one is given: ``onnxruntime-1.20.1``."""
        return f"{self.distribution}-{self.version}".lower()


def pip_error(stderr: str, returncode: int) -> str:
    """The line of a failed pip (or venv) run that says why: its last ``ERROR:`` line, else
    its last line that is not a warning, else the exit status (at most 300 characters)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")]
    others = [line for line in lines if not line.startswith("WARNING:")]
    return ((errors or others or [f"exit {returncode}"])[-1])[:300]


# Runtimes built against NumPy 1.x's C API: importing them beside NumPy 2 fails
# ("_ARRAY_API not found"). onnxruntime supports NumPy 2 from 1.19.0; tflite-runtime never
# released a build for it.
_NUMPY_1_BEFORE = {
    "onnxruntime": (1, 19),
    "onnxruntime-gpu": (1, 19),
    "onnxruntime-openvino": (1, 19),
}
_NUMPY_1_ALWAYS = {"tflite-runtime"}
_EXTRA_REQUIREMENT = re.compile(
    r"\s*[A-Za-z0-9][A-Za-z0-9._-]*\s*"
    r"((==|!=|<=|>=|~=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*(,\s*(==|!=|<=|>=|~=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*)*)?"
)


def _release(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("."):
        digits = re.match(r"\d+", piece)
        if digits is None:
            break
        parts.append(int(digits.group()))
    return tuple(parts)


def numpy_requirement(req: Requirement) -> str:
    """The numpy a runtime version was built for: ``numpy<2`` for onnxruntime before 1.19
    and tflite-runtime, else ``numpy``."""
    before = _NUMPY_1_BEFORE.get(req.distribution)
    if req.distribution in _NUMPY_1_ALWAYS or (before and _release(req.version) < before):
        return "numpy<2"
    return "numpy"


def companion_requirements(req: Requirement, extra: Sequence[str] = ()) -> list[str]:
    """What is installed beside the runtime: the caller's ``extra`` requirements (``numpy<2``)
    and, unless they name numpy, the numpy the runtime was built for. BadInput for an
    extra requirement that is not ``name`` with optional version clauses."""
    for text in extra:
        if not isinstance(text, str) or not _EXTRA_REQUIREMENT.fullmatch(text):
            raise BadInput(
                f"cannot read extra requirement {str(text)[:80]!r}",
                hint="give a name with optional version clauses, e.g. 'numpy<2'",
            )
    names = {re.match(r"\s*([A-Za-z0-9._-]+)", t).group(1).lower() for t in extra}
    return [t.strip() for t in extra] + ([] if "numpy" in names else [numpy_requirement(req)])


def unknown_env_message(name: str, installed: list[str]) -> tuple[str, str]:
    """(message, hint) refusing environment ``name`` on a device holding ``installed``
    (besides ``default``): the one wording of agent and host."""
    return (
        f"unknown runtime environment '{name}' on this device; "
        f"installed: {', '.join(['default', *installed])}",
        "the device owner installs one: edgequal-agent runtime add onnxruntime==1.20.1",
    )
