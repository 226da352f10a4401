"""The runtime registry: every list of runtimes derives from ``RUNTIMES``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from edgequal.contract.errors import BadInput
from edgequal.contract.runtimes import (
    DISTRIBUTIONS,
    RUNTIME_EXTRAS,
    RUNTIME_NAMES,
    RUNTIMES,
    runtime_for,
    runtime_kind,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def test_the_docs_table_of_runtimes_is_the_registry():
    rows = re.findall(r"^\| `([a-z0-9_-]+)` \| (.+) \|$", DOC.read_text(), re.M)
    documented = {name: line for name, line in rows if name in RUNTIME_NAMES}
    assert documented == {kind.name: kind.docs for kind in RUNTIMES}


def test_lists_derive_from_the_registry():
    assert RUNTIME_NAMES == ("onnxruntime", "litert")
    assert RUNTIME_EXTRAS == ("onnx", "litert")
    assert DISTRIBUTIONS["tflite-runtime"] == ("litert", ("tflite_runtime",))
    assert "onnxruntime-directml" not in DISTRIBUTIONS  # detected, never pinned
    assert runtime_kind("litert").distributions[0] == "ai-edge-litert"
    with pytest.raises(BadInput, match="unknown runtime 'openvino'"):
        runtime_kind("openvino")


def test_a_file_without_a_name_is_told_by_its_magic(tmp_path):
    tflite = tmp_path / "a"
    tflite.write_bytes(b"\x08\x00\x00\x00TFL3")  # both magics: the longer identifier wins
    onnx = tmp_path / "b"
    onnx.write_bytes(b"\x08\x07\x12\x00\x00\x00\x00\x00")
    assert runtime_for(tflite) == "litert" and runtime_for(onnx) == "onnxruntime"
    assert runtime_for(onnx, name_hint="m.lite") == "litert"
    other = tmp_path / "c"
    other.write_bytes(b"\x00" * 8)
    with pytest.raises(BadInput) as e:
        runtime_for(other)
    assert e.value.hint == "use a .onnx or .tflite file, or pass --runtime onnxruntime|litert"


def test_each_runtimes_extra_in_pyproject_installs_its_first_distribution():
    """The registry's ``extra`` of each runtime is a pyproject extra that installs the
    distribution an agent most likely has, and ``all`` takes every runtime's extra."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    pyproject = tomllib.loads((DOC.parents[1] / "pyproject.toml").read_text())
    extras = pyproject["project"]["optional-dependencies"]
    for kind in RUNTIMES:
        assert kind.extra in extras, f"{kind.name}: no [{kind.extra}] extra in pyproject"
        names = {re.split(r"[<>=!~; \[]", req, maxsplit=1)[0].lower() for req in extras[kind.extra]}
        assert kind.distributions[0] in names, (kind.name, extras[kind.extra])
        everything = re.fullmatch(r"edgequal\[([a-z0-9_,-]+)\]", extras["all"][0]).group(1)
        assert kind.extra in everything.split(","), extras["all"]


def test_only_the_registrys_extras_install_a_runtime():
    """Every pyproject extra that installs a runtime's distribution is that runtime's
    ``extra`` in the registry (``host`` also takes onnxruntime: the host's reference
    outputs), so a runtime added to pyproject without its ``RuntimeKind`` fails here."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    pyproject = tomllib.loads((DOC.parents[1] / "pyproject.toml").read_text())
    by_distribution = {d: kind.extra for kind in RUNTIMES for d in kind.distributions}
    for extra, requirements in pyproject["project"]["optional-dependencies"].items():
        for req in requirements:
            name = re.split(r"[<>=!~; \[]", req, maxsplit=1)[0].lower()
            if name in by_distribution and extra != "host":
                assert by_distribution[name] == extra, (extra, req)


def test_each_runtimes_capabilities_are_declared_where_they_are_read():
    """The registry's capabilities stand in for every runtime-name test: the host reads each
    runtime's declared inputs, a declared operator-type lister exists in agent/runtimes/, and
    the capabilities name the runtimes the docs say have them."""
    import importlib

    from edgequal.contract.runtimes import runtimes_with
    from edgequal.host.model_file import INPUT_READERS

    assert set(INPUT_READERS) == set(RUNTIME_NAMES)
    for kind in RUNTIMES:
        if kind.operator_types is not None:
            module, function = kind.operator_types.split(":")
            assert callable(
                getattr(importlib.import_module(f"edgequal.agent.runtimes.{module}"), function)
            )
    assert runtimes_with("execution_providers") == ("onnxruntime",)
    assert runtimes_with("graph_optimization") == ("onnxruntime",)
