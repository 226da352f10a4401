"""The examples on the oldest runtimes the pyproject allows (marker ``compat``; part of the
README's test command).

For onnxruntime and ai-edge-litert, the lower bound is read from pyproject.toml and that
exact version installed into a runtime environment (``agent/runtimes/envs.py``) from cached
wheels, beside the numpy this suite runs with (what pip resolves today). There the real
worker measures drift against golden sets made on the host with today's runtime (the
golden round trip of every runnable example), and the int8 example flips exactly its three
cases with graph optimisation on and off.

The bounds are where they are because of this test: onnxruntime 1.16 to 1.18 and
ai-edge-litert 1.0 were built against NumPy 1.x and fail to import beside NumPy 2,
which pip installs with them (their metadata does not cap numpy); ai-edge-litert 1.1.0
cannot open a model file with a thread count (``Interpreter(model_path=…, num_threads=1)``
raises AttributeError), which 1.1.2 can.
"""

from __future__ import annotations

import importlib.metadata
import re
import threading
from pathlib import Path

import pytest
import tomllib
from edgequal.agent.runtimes.envs import RuntimeEnvs
from edgequal.agent.runtimes.installer import add_env
from edgequal.agent.worker.jobs import WorkerJob
from edgequal.agent.worker.supervisor import run_job
from edgequal.host.examples.catalog import EXAMPLES, build_example, example_inputs
from edgequal.host.golden import make_golden

# Installs two runtimes into environments and starts their workers: slow, and the compat set.
pytestmark = [pytest.mark.slow, pytest.mark.compat]

ROOT = Path(__file__).resolve().parents[1]
NUMPY = importlib.metadata.version("numpy")


def oldest_allowed(distribution: str) -> str:
    """The lower bound of ``distribution`` in pyproject.toml's extras, as X.Y.Z."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    bounds = {
        m.group(1)
        for reqs in extras.values()
        for req in reqs
        if (m := re.fullmatch(rf"{re.escape(distribution)}>=([0-9.]+)", req.strip()))
    }
    assert len(bounds) == 1, f"one lower bound of {distribution} in every extra: {bounds}"
    parts = bounds.pop().split(".")
    return ".".join((parts + ["0", "0"])[:3])


ORT = oldest_allowed("onnxruntime")
LITERT = oldest_allowed("ai-edge-litert")
RUNTIMES = {"onnxruntime": f"onnxruntime=={ORT}", "litert": f"ai-edge-litert=={LITERT}"}
EXAMPLES_OF = {
    "onnxruntime": ["classifier", "dynamic", "multi_input", "classifier_fp16", "classifier_qdq"],
    "litert": ["classifier_tflite", "classifier_int8"],
}


@pytest.fixture(scope="module")
def old_envs(tmp_path_factory, test_helper) -> dict[str, object]:
    """``{runtime: RuntimeEnv}`` of the oldest allowed versions, built from the tests'
    wheelhouse (tests/wheel_cache.py)."""
    wh = test_helper("wheel_cache").download_wheels(f"compat-{ORT}-{LITERT}", RUNTIMES.values())
    envs = RuntimeEnvs(tmp_path_factory.mktemp("board") / "state")
    return {
        runtime: add_env(envs, requirement, find_links=[wh], no_index=True)
        for runtime, requirement in RUNTIMES.items()
    }


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """The example models, built here with today's onnx and flatbuffers."""
    out = tmp_path_factory.mktemp("models")
    for names in EXAMPLES_OF.values():
        for name in names:
            build_example(name, out)
    build_example("classifier", out)
    return out


def drift_in(env, model: Path, golden: Path, runtime: str, optimization: str = "all") -> dict:
    """The drift worker job run by the environment's Python: ``{runtime, drift}``."""
    job = WorkerJob(
        kind="drift",
        model=str(model),
        golden=str(golden),
        runtime=runtime,
        threads=1,
        graph_optimization=optimization,
    )
    ended = run_job(
        job.to_json(),
        phase_timeout_s=300,
        cancel=threading.Event(),
        python=env.worker_python(),
        env=env.worker_env(),
    )
    assert ended.ok, ended.describe()
    return ended.result


def test_the_environments_hold_the_oldest_allowed_versions_beside_todays_numpy(old_envs):
    assert (old_envs["onnxruntime"].version, old_envs["litert"].version) == (ORT, LITERT)
    for env in old_envs.values():
        assert any(w["file"].startswith(f"numpy-{NUMPY}-") for w in env.wheels)


@pytest.mark.parametrize("runtime", list(EXAMPLES_OF))
def test_golden_round_trips_of_the_examples_on_the_oldest_runtime(
    runtime, old_envs, made, tmp_path
):
    """Golden sets made with today's runtime on the host hold on the oldest allowed one."""
    for name in EXAMPLES_OF[runtime]:
        model = made / EXAMPLES[name].filename
        cases = {f"case{i:02d}": feeds for i, feeds in enumerate(example_inputs(name, 6))}
        golden = tmp_path / f"{name}.golden.npz"
        make_golden(model, cases, golden, decision=EXAMPLES[name].decision_rule)
        result = drift_in(old_envs[runtime], model, golden, runtime)
        assert result["runtime"]["version"] == old_envs[runtime].version
        drift = result["drift"]
        assert drift["passed"], (name, drift["outputs"])
        for output, o in drift["outputs"].items():
            assert o["cases"] == 6 and o["nan_count"] == 0, (name, output)
            # Float outputs agree to float rounding; int8 ones exactly.
            assert o["max_abs"] <= (1e-3 if name == "classifier_fp16" else 1e-5), (name, output)


def test_the_int8_example_flips_its_three_cases_on_the_oldest_onnxruntime(
    old_envs, made, tmp_path, reference_outputs
):
    """As the demo checks it (the float model's outputs, int8 tolerance class), with graph
    optimisation on (int8 kernels) and off: case01, case09, case17, the same drift."""
    cases = {f"case{i:02d}": c for i, c in enumerate(example_inputs("classifier_qdq", 24))}
    outputs = tmp_path / "reference.npz"
    names = reference_outputs(made / "classifier.onnx", cases, outputs)
    golden = tmp_path / "qdq.golden.npz"
    int8 = {"class": "int8"}
    make_golden(
        made / "classifier_qdq.onnx",
        cases,
        golden,
        outputs=outputs,
        decision="threshold:score>0.5",
        tolerances={n: int8 for n in names},
    )
    scores = {}
    for optimization in ("all", "disabled"):
        drift = drift_in(
            old_envs["onnxruntime"], made / "classifier_qdq.onnx", golden, "onnxruntime",
            optimization,
        )["drift"]  # fmt: skip
        assert drift["decisions"]["flips"] == ["case01", "case09", "case17"], optimization
        assert drift["decisions"]["flips_near_threshold"] == ["case01", "case09", "case17"]
        scores[optimization] = drift["outputs"]["score"]["max_abs"]
        assert 0.01 < scores[optimization] < 0.1
    assert abs(scores["all"] - scores["disabled"]) < 1e-5
