"""Runtime environment names, requirements, manifests and plan validation (no install here;
tests/test_runtime_envs.py installs real ones)."""

from __future__ import annotations

import pytest
from edgequal.agent.runtimes.envs import RuntimeEnv, RuntimeEnvs, resolve_plan_envs
from edgequal.contract.errors import BadInput
from edgequal.contract.plan import Plan, make_plan
from edgequal.contract.runtimes import Requirement, check_env_name


def test_requirement_is_one_exact_pin_of_a_known_runtime():
    req = Requirement.parse(" onnxruntime == 1.20.1 ")
    assert (req.distribution, req.version, req.runtime) == ("onnxruntime", "1.20.1", "onnxruntime")
    assert req.default_name == "onnxruntime-1.20.1" and str(req) == "onnxruntime==1.20.1"
    assert Requirement.parse("ai_edge_litert==2.1.0").runtime == "litert"
    assert Requirement.parse("tflite-runtime==2.14.0").modules == ("tflite_runtime",)
    for bad, why in (
        ("onnxruntime>=1.20", "pin one exact version"),
        ("onnxruntime", "pin one exact version"),
        ("torch==2.1.0", "is not a runtime edgequal measures"),
    ):
        with pytest.raises(BadInput) as info:
            Requirement.parse(bad)
        assert why in f"{info.value} {info.value.hint}"


def test_environment_names():
    assert check_env_name("onnxruntime-1.20.1") == "onnxruntime-1.20.1"
    for bad in ("", "Upper", "../x", "a/b", "-lead", "x" * 65, 3):
        with pytest.raises(BadInput, match="bad runtime environment name"):
            check_env_name(bad)


def test_manifest_round_trip():
    env = RuntimeEnv(
        name="onnxruntime-1.20.1",
        runtime="onnxruntime",
        distribution="onnxruntime",
        version="1.20.1",
        python="3.11.7",
        python_executable="/s/runtimes/onnxruntime-1.20.1/venv/bin/python",
        path="/s/runtimes/onnxruntime-1.20.1",
        wheels=[{"file": "onnxruntime-1.20.1-cp311.whl", "sha256": "ab" * 32}],
        created_unix=1.5,
    )
    assert RuntimeEnv.from_json(env.to_json()) == env
    assert env.fingerprint_entry() == {
        "name": "onnxruntime-1.20.1",
        "runtime": "onnxruntime",
        "distribution": "onnxruntime",
        "version": "1.20.1",
        "python": "3.11.7",
        "wheels": [{"file": "onnxruntime-1.20.1-cp311.whl", "sha256": "ab" * 32}],
    }
    # An environment's worker never sees the agent's PYTHONPATH (it would shadow its runtime).
    assert env.worker_python() == env.python_executable
    assert "PYTHONPATH" not in env.worker_env() and env.worker_env()["PYTHONNOUSERSITE"] == "1"


def test_plan_names_environments_once_each():
    plan = make_plan("quick", runtime_envs=["onnxruntime-1.20.1", "default"], runtime_env_rounds=2)
    assert plan.runtime_envs == ("onnxruntime-1.20.1", "default")
    assert Plan.from_json(plan.to_json()) == plan
    assert plan.to_json()["runtime_envs"] == ["onnxruntime-1.20.1", "default"]
    for value, message in (
        (["default", "default"], "names an environment twice"),
        ([], "non-empty list"),
        (["../etc"], "bad runtime environment name"),
        ([f"e{i}" for i in range(9)], "at most 8"),
    ):
        with pytest.raises(BadInput, match=message):
            make_plan("quick", runtime_envs=value)
    with pytest.raises(BadInput, match="runtime_env_rounds"):
        make_plan("quick", runtime_env_rounds=0)


def test_unknown_environment_is_refused_listing_the_installed_ones(tmp_path):
    envs = RuntimeEnvs(tmp_path)
    assert envs.list() == [] and envs.statuses() == []
    assert resolve_plan_envs(Plan.from_json({"runtime_envs": None}), envs) is None
    with pytest.raises(BadInput) as info:
        resolve_plan_envs(Plan.from_json({"runtime_envs": ["onnxruntime-1.20.1"]}), envs)
    assert str(info.value) == (
        "unknown runtime environment 'onnxruntime-1.20.1' on this device; installed: default"
    )
    assert "edgequal-agent runtime add" in info.value.hint
    # The agent's own environment is always there.
    (default,) = resolve_plan_envs(Plan.from_json({"runtime_envs": ["default"]}), envs)
    assert default.name == "default" and default.worker_python() is None
    # A directory without a manifest is an installation that did not finish: not offered.
    (tmp_path / "runtimes" / "half").mkdir(parents=True)
    assert envs.names() == []
    with pytest.raises(BadInput, match="no runtime environment called half"):
        envs.remove("half")


def test_pip_error_is_the_line_that_says_why():
    from edgequal.contract.runtimes import pip_error

    stderr = (
        "WARNING: Location 'file:///opt/x/' is ignored: it is neither a file nor a directory.\n"
        "ERROR: Could not find a version that satisfies the requirement onnxruntime==9.9.9\n"
        "ERROR: No matching distribution found for onnxruntime==9.9.9\n"
        "WARNING: there is a newer pip\n"
    )
    assert pip_error(stderr, 1) == "ERROR: No matching distribution found for onnxruntime==9.9.9"
    assert pip_error("Error: venv failed\nWARNING: x\n", 1) == "Error: venv failed"
    assert pip_error("", 2) == "exit 2"


@pytest.mark.parametrize(
    "pin, numpy",
    [
        ("onnxruntime==1.17.3", "numpy<2"),
        ("onnxruntime==1.18.1", "numpy<2"),
        ("onnxruntime==1.19.0", "numpy"),
        ("onnxruntime==1.20.1", "numpy"),
        ("onnxruntime-gpu==1.16.3", "numpy<2"),
        ("tflite-runtime==2.14.0", "numpy<2"),
        ("ai-edge-litert==1.2.0", "numpy"),
    ],
)
def test_the_numpy_a_runtime_was_built_for(pin, numpy):
    from edgequal.contract.runtimes import companion_requirements, numpy_requirement

    req = Requirement.parse(pin)
    assert numpy_requirement(req) == numpy
    assert companion_requirements(req) == [numpy]


def test_extra_requirements_go_beside_the_runtime_and_may_choose_its_numpy():
    from edgequal.contract.runtimes import companion_requirements

    req = Requirement.parse("onnxruntime==1.17.3")
    assert companion_requirements(req, ["numpy<2"]) == ["numpy<2"]
    assert companion_requirements(req, ["numpy>=1.24,<2", "protobuf"]) == [
        "numpy>=1.24,<2",
        "protobuf",
    ]
    assert companion_requirements(req, ["protobuf==4.25.3"]) == ["protobuf==4.25.3", "numpy<2"]
    for bad in ("numpy<2; rm -rf /", "--index-url=http://x", "", "numpy @ file:///x"):
        with pytest.raises(BadInput, match="cannot read extra requirement"):
            companion_requirements(req, [bad])


# What `edgequal-agent runtime add onnxruntime==1.17.3` met when pip gave it numpy 2:
# the child import's last line (probe's "broken: ... fails: LINE").
NUMPY_2_IMPORT = (
    "broken: importing onnxruntime fails: ImportError: numpy.core.multiarray failed to import"
)


def test_a_numpy_conflict_is_named_as_packaging_never_the_board():
    from edgequal.agent.runtimes.envs import import_failure
    from edgequal.contract.errors import RuntimeUnavailable

    req = Requirement.parse("onnxruntime==1.17.3")
    err = import_failure("onnxruntime-1.17.3", req, NUMPY_2_IMPORT, "2.4.6")
    assert isinstance(err, BadInput) and err.exit_code == 2
    assert str(err) == (
        "runtime environment onnxruntime-1.17.3: onnxruntime==1.17.3 was built for NumPy 1.x "
        "and the environment got numpy 2.4.6: a packaging conflict, not the board"
    )
    assert (
        err.hint
        == "install it with a NumPy 1.x: edgequal-agent runtime add onnxruntime==1.17.3 'numpy<2'"
    )
    crash = import_failure(
        "x", req, "broken: importing onnxruntime kills the process with SIGILL", None
    )
    assert isinstance(crash, RuntimeUnavailable) and "crashed at import on this board" in crash.hint
    other = import_failure(
        "x", req, "broken: importing onnxruntime fails: ImportError: libgomp.so.1", None
    )
    assert "board" not in other.hint and "importing the runtime failed" in other.hint


def test_a_bare_exception_line_is_told_by_the_message_before_it():
    """onnxruntime 1.17.3 imported beside numpy 2.4.6 ends its stderr with a bare
    ``ImportError`` (recorded output); the line that says why comes before it."""
    from pathlib import Path

    from edgequal.agent.runtimes import error_line

    recorded = Path(__file__).parents[2] / "fixtures/runtime_imports"
    stderr = (recorded / "onnxruntime-1.17.3-numpy-2.4.6.stderr").read_text()
    assert stderr.rstrip().endswith("ImportError")
    assert error_line(stderr) == "ImportError (AttributeError: _ARRAY_API not found)"
    assert error_line("Traceback\nModuleNotFoundError: No module named 'x'\n") == (
        "ModuleNotFoundError: No module named 'x'"
    )
    assert error_line("") == ""
