"""Kernel path names: parsed, expanded per runtime, checked as a plan field, and an absent
provider's reason."""

from __future__ import annotations

import pytest
from edgequal.contract.errors import BadInput
from edgequal.contract.kernel_paths import (
    absent_reason,
    expand_paths,
    parse_path,
)
from edgequal.contract.plan import Plan, make_plan


def test_names_parse_to_runtime_options():
    assert parse_path("opt:basic").options() == {
        "graph_optimization": "basic",
        "providers": ["CPUExecutionProvider"],
        "op_resolver": None,
    }
    cuda = parse_path("ep:cuda")
    assert cuda.name == "ep:CUDA" and cuda.provider == "CUDAExecutionProvider"
    assert cuda.options("extended")["providers"] == [
        "CUDAExecutionProvider",
        "CPUExecutionProvider",
    ]
    assert cuda.options("extended")["graph_optimization"] == "extended"
    assert parse_path("ep:TensorrtExecutionProvider").name == "ep:TensorRT"
    assert parse_path("ep:CPU").options()["providers"] == ["CPUExecutionProvider"]
    assert parse_path("resolver:builtin-ref").options()["op_resolver"] == "builtin-ref"


@pytest.mark.parametrize(
    "text, message",
    [
        ("opt:fast", "unknown graph optimisation level"),
        ("resolver:xnnpack", "unknown LiteRT op resolver"),
        ("cuda", "unknown kernel path"),
        ("ep:", "unknown kernel path"),
        ("ep:a b", "bad execution provider name"),
    ],
)
def test_bad_names_are_bad_input(text, message):
    with pytest.raises(BadInput, match=message):
        parse_path(text)


def test_all_expands_per_runtime_reference_first_and_once():
    ort = [p.name for p in expand_paths(["all", "opt:all"], "onnxruntime")]
    assert ort[0] == "opt:disabled" and ort.count("opt:all") == 1
    assert {"ep:XNNPACK", "ep:OpenVINO", "ep:CUDA", "ep:TensorRT"} <= set(ort)
    assert [p.name for p in expand_paths(["all"], "litert")][0] == "resolver:builtin-ref"
    with pytest.raises(BadInput, match="is a litert path; this model runs on onnxruntime"):
        expand_paths(["resolver:auto"], "onnxruntime")


def test_the_plan_field_is_checked_and_round_trips():
    plan = make_plan("quick", kernel_paths=["ep:cuda", "opt:all"], divergence_memory_mb=8)
    assert plan.kernel_paths == ("ep:CUDA", "opt:all")
    assert Plan.from_json(plan.to_json()) == plan
    with pytest.raises(BadInput, match="names the path opt:all twice"):
        make_plan("quick", kernel_paths=["opt:all", "opt:all"])
    with pytest.raises(BadInput, match="non-empty list"):
        make_plan("quick", kernel_paths=[])
    with pytest.raises(BadInput, match="'divergence_memory_mb' must be positive"):
        make_plan("quick", divergence_memory_mb=0)


def test_an_absent_provider_says_what_the_board_offers_and_where_it_comes_from():
    reason = absent_reason(parse_path("ep:OpenVINO"), ["CPUExecutionProvider"], "1.20.1")
    assert reason.startswith("onnxruntime 1.20.1 here offers CPUExecutionProvider")
    assert "onnxruntime-openvino" in reason and "agent runtime add" in reason
    assert absent_reason(parse_path("ep:CPU"), ["CPUExecutionProvider"], "1.20.1") is None
    assert absent_reason(parse_path("opt:all"), ["CPUExecutionProvider"], "1.20.1") is None
