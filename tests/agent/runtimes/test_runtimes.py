"""Runtime adapters: descriptions of real models, provider reporting, tflite-runtime/numpy 2 message."""

from __future__ import annotations

import numpy as np
import pytest
from edgequal.agent.runtimes import runtime_class
from edgequal.agent.runtimes.base import RuntimeOptions
from edgequal.agent.runtimes.litert import LiteRtRuntime, tflite_runtime_numpy_problem
from edgequal.agent.runtimes.onnxruntime import OnnxRuntime, clean_ort_message, unsupported_operator
from edgequal.contract.errors import BadInput, ModelRejected
from edgequal.contract.runtimes import runtime_for
from edgequal.contract.tensors import TensorSpec, shape_fits


def test_onnx_description_with_dynamic_dims_and_int64_scalar(example_models):
    rt = OnnxRuntime(RuntimeOptions(threads=1))
    rt.load(example_models["dynamic"])
    (image,) = rt.inputs()
    assert (
        image.dtype == "float32"
        and image.shape == ["batch", 3, "height", "width"]
        and image.is_dynamic
    )
    rt.load(example_models["multi_input"])
    specs = {s.name: s for s in rt.inputs()}
    assert specs["scale"].dtype == "int64" and specs["scale"].shape == []
    assert specs["features"].shape == [1, 16]
    out = rt.run({"features": np.ones((1, 16), np.float32), "scale": np.array(2, np.int64)})
    half = rt.run({"features": np.ones((1, 16), np.float32), "scale": np.array(1, np.int64)})
    np.testing.assert_allclose(out["out"], 2 * half["out"], rtol=1e-6)


def test_onnx_reports_providers_in_use_and_threads(example_models):
    rt = OnnxRuntime(RuntimeOptions(threads=2, graph_optimization="basic"))
    rt.load(example_models["micro"])
    d = rt.describe()
    assert d["runtime"] == "onnxruntime"
    assert d["providers"] == ["CPUExecutionProvider"]
    assert d["threads"] == 2 and d["graph_optimization"] == "basic"


def test_onnx_missing_provider_is_rejected_with_the_available_ones(example_models):
    rt = OnnxRuntime(RuntimeOptions(providers=["TensorrtExecutionProvider"]))
    with pytest.raises(ModelRejected, match="TensorrtExecutionProvider is not available") as e:
        rt.load(example_models["micro"])
    assert "CPUExecutionProvider" in e.value.hint


def test_fp16_model_is_described_as_float16(example_models):
    rt = OnnxRuntime()
    rt.load(example_models["classifier_fp16"])
    assert [s.dtype for s in rt.outputs()] == ["float16", "float16"]


def test_litert_int8_description_carries_quantization(example_models):
    rt = LiteRtRuntime(RuntimeOptions(threads=1))
    rt.load(example_models["classifier_int8"])
    (inp,) = rt.inputs()
    (out,) = rt.outputs()
    assert inp.dtype == "int8" and inp.shape == [1, 64]
    assert inp.quantization == {"scale": pytest.approx(6 / 255), "zero_point": -128}
    assert out.dtype == "int8" and out.quantization == {
        "scale": pytest.approx(1 / 256),
        "zero_point": -128,
    }
    d = rt.describe()
    assert d["delegates"] == ["XNNPACK"] and d["module"] in ("ai_edge_litert", "tflite_runtime")


def test_litert_without_xnnpack(example_models):
    rt = LiteRtRuntime(RuntimeOptions(xnnpack=False))
    rt.load(example_models["classifier_tflite"])
    assert rt.describe()["delegates"] == []
    out = rt.run({"image": np.zeros((1, 32, 32, 3), np.float32)})
    assert out["probs"].shape == (1, 10) and np.isclose(out["probs"].sum(), 1.0, atol=1e-5)


def test_bind_gives_the_same_outputs_as_run(example_models):
    rt = LiteRtRuntime()
    rt.load(example_models["classifier_tflite"])
    feeds = {"image": np.full((1, 32, 32, 3), 0.25, np.float32)}
    expected = rt.run(feeds)
    call = rt.bind(feeds)
    call()
    np.testing.assert_array_equal(
        rt._interp.get_tensor(rt._output_index["probs"]), expected["probs"]
    )


@pytest.mark.parametrize(
    ("tflite", "numpy", "problem"),
    [
        ("2.14.0", "2.1.0", True),
        ("2.13.0", "2.0.0", True),
        ("2.14.0", "1.26.4", False),
        ("2.16.1", "2.1.0", False),
    ],
)
def test_tflite_runtime_numpy2_message(tflite, numpy, problem):
    text = tflite_runtime_numpy_problem(tflite, numpy)
    if problem:
        assert (
            text
            == f"tflite-runtime {tflite} was built for numpy 1.x and cannot load models with numpy {numpy}"
        )
    else:
        assert text is None


def test_runtime_choice_by_name_then_content(example_models, tmp_path):
    assert runtime_for(example_models["classifier"]) == "onnxruntime"
    assert runtime_for(example_models["classifier_tflite"]) == "litert"
    # Stored by digest, without an extension: the name hint, else the bytes decide.
    blob = tmp_path / ("ab" * 32)
    blob.write_bytes(example_models["classifier_tflite"].read_bytes())
    assert runtime_for(blob) == "litert"
    assert runtime_for(blob, name_hint="m.onnx") == "onnxruntime"
    blob.write_bytes(example_models["micro"].read_bytes())
    assert runtime_for(blob) == "onnxruntime"
    blob.write_bytes(b"\xff" * 16)
    with pytest.raises(BadInput, match="cannot tell the runtime"):
        runtime_for(blob)
    with pytest.raises(BadInput, match="unknown runtime 'tvm'"):
        runtime_class("tvm")


def test_operator_names_from_onnxruntime_errors():
    msg = "[ONNXRuntimeError] : 1 : FAIL : Load model from /x/m.onnx failed:Fatal error: com.example:Frobnicate(-1) is not a registered function/op"
    assert unsupported_operator(msg) == "com.example:Frobnicate"
    assert (
        clean_ort_message(RuntimeError(msg))
        == "com.example:Frobnicate(-1) is not a registered function/op"
    )
    assert (
        unsupported_operator(
            "Could not find an implementation for ConvInteger(10) node with name ''"
        )
        == "ConvInteger"
    )


def test_shape_fits_dynamic_dims():
    spec = TensorSpec("x", "float32", ["batch", 3, None])
    assert shape_fits(spec, (4, 3, 7))
    assert not shape_fits(spec, (4, 2, 7))
    assert not shape_fits(spec, (4, 3))


# Each OpenBLAS library numpy loaded, with its thread count (threadpoolctl, which
# scikit-learn brings to the tests).
_BLAS_THREADS = (
    "import json, numpy, threadpoolctl; print(json.dumps([i['num_threads'] for i in "
    "threadpoolctl.threadpool_info() if i['internal_api'] == 'openblas']))"
)


def test_the_agents_child_pythons_run_numpys_blas_on_one_thread(monkeypatch):
    """A trial import's child (as every worker, ``runtimes.child_env``) runs numpy's BLAS on
    one thread, where numpy alone would start one per core; an operator's setting is kept."""
    import json
    import os
    import subprocess
    import sys

    from edgequal.agent.runtimes import child_import

    # OpenBLAS also reads these where its own variable is unset.
    for name in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    problem, out = child_import((_BLAS_THREADS,), what="numpy")
    assert problem == "" and json.loads(out) == [1]
    bare = subprocess.run([sys.executable, "-c", _BLAS_THREADS], capture_output=True, check=True)
    # numpy alone: a thread per core it may use (OpenBLAS counts the online CPUs or the
    # affinity mask, up to its 64).
    (threads,) = json.loads(bare.stdout)
    assert threads in {min(os.cpu_count(), 64), min(len(os.sched_getaffinity(0)), 64)}
    problem, out = child_import(
        (_BLAS_THREADS,), what="numpy", env={**os.environ, "OPENBLAS_NUM_THREADS": "2"}
    )
    assert problem == "" and json.loads(out) == [2]
