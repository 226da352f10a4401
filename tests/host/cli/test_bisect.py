"""``edgequal bisect runtime`` end to end: a real local agent, real onnxruntime versions
installed by the command itself into runtime environments (the agent's own ``runtime
add``, from the tests' wheelhouse of cached wheels, ``--wheelhouse``: no network), real
runs of each version beside the good one, signed reports.

The versions: the oldest the pyproject allows (1.19.0), 1.20.1 and the suite's own
(bad). ``--metric drift`` with a golden set whose tolerance is exact (atol 0, rtol 0): a
version is bad when any output bit differs from the good version's. Whether a model's
outputs differ between two onnxruntime versions depends on the CPU's kernels, so what the
command must find is decided here independently: each environment's own Python runs the
model on the golden inputs with plain onnxruntime and the output bytes are compared. On
x86-64 (AVX2 and AVX-512) LayerNormalization's outputs moved by about 1e-6 between 1.20.1
and 1.32.0 while 1.19.0 and 1.20.1 agree, and the MatMul model is bit-exact in all three;
the test asserts whatever the oracle finds on the machine it runs on.

``--metric p50`` on the same real versions: the figures of the signed report, and whatever
verdict this machine gives, followed through. The search's order and verdicts on chosen
figures (p50 slowdowns, interference, flips) are tests/host/lab/test_bisect.py's.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from edgequal.cli.main import main as edgequal_main
from edgequal.host.golden import make_golden

GOOD, MID, BAD = "1.19.0", "1.20.1", importlib.metadata.version("onnxruntime")

PLAN = ["--cold-runs", "1", "--warmup", "0.05s", "--warmup-runs", "5", "--latency", "0.1s"]
PLAN += ["--rounds", "2"]
HALF = 4
"""Nights a side of the nightly series' change of environment."""


@pytest.fixture(scope="module")
def wheelhouse(test_helper) -> Path:
    """onnxruntime 1.19.0, 1.20.1 and the suite's own, with the suite's numpy
    (tests/wheel_cache.py: shared with the runtime-environment tests)."""
    return test_helper("wheel_cache").download_wheels(
        f"bisect-{GOOD}-{MID}-{BAD}", [f"onnxruntime=={v}" for v in (GOOD, MID, BAD)]
    )


@pytest.fixture(scope="module")
def board(tmp_path_factory, local_agents) -> Path:
    """The local agent's state directory, shared by this module's runs: what one run
    installs, the next finds there. One agent serves it for the module, as a board's agent
    keeps serving: ``--device local`` finds it there rather than starting an agent per
    command (each start imports the runtimes and every installed environment's runtime
    again: about 2 CPU-s, twelve times)."""
    state = tmp_path_factory.mktemp("board") / "local-agent"
    agent = local_agents.serve(state)
    yield state
    agent.stop()


@pytest.fixture
def on_board(board, monkeypatch) -> Path:
    """``--device local`` is the module's board."""
    monkeypatch.setenv("EDGEQUAL_LOCAL_STATE", str(board))
    return board


def _model(path: Path, op: str) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    if op == "LayerNormalization":
        node = helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y"], axis=-1)
        inits = {"scale": np.ones(256, np.float32), "bias": np.zeros(256, np.float32)}
    else:
        node = helper.make_node("MatMul", ["x", "w"], ["y"])
        inits = {"w": rng.standard_normal((256, 256)).astype(np.float32)}
    graph = helper.make_graph(
        [node],
        op.lower(),
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 256])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, tuple[Path, Path, np.ndarray]]:
    """``{name: (model, exact golden set, its input)}`` for a LayerNormalization and a MatMul."""
    out = tmp_path_factory.mktemp("models")
    x = (np.random.default_rng(1).standard_normal((8, 256)) * 3).astype(np.float32)
    made = {}
    for name, op in (("layernorm", "LayerNormalization"), ("matmul", "MatMul")):
        model = _model(out / f"{name}.onnx", op)
        golden = out / f"{name}.golden.npz"
        make_golden(model, {"c0": {"x": x}}, golden, tolerances={"*": {"atol": 0.0, "rtol": 0.0}})
        made[name] = (model, golden, x)
    return made


ORACLE = """
import hashlib, sys, numpy as np, onnxruntime as ort
x = np.load(sys.argv[2])
s = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
print(hashlib.sha256(s.run(None, {"x": x})[0].tobytes()).hexdigest())
"""


def oracle_digests(board: Path, model: Path, x: np.ndarray, versions, tmp_path: Path) -> dict:
    """``{version: sha256 of the output bytes}`` from plain onnxruntime in each installed
    environment's own Python, on the golden set's input."""
    np.save(tmp_path / "x.npy", x)
    digest = {}
    for version in versions:
        python = board / "runtimes" / f"onnxruntime-{version}" / "venv" / "bin" / "python"
        done = subprocess.run(
            [str(python), "-c", ORACLE, str(model), str(tmp_path / "x.npy")],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        digest[version] = done.stdout.strip()
    return digest


def oracle_first_bad(digest: dict) -> str | None:
    """The first bad version as the command must name it: the bad one's outputs against
    the good one's (None: not reproducible), then 1.20.1's, the one version between."""
    if digest[BAD] == digest[GOOD]:
        return None
    return MID if digest[MID] != digest[GOOD] else BAD


def _bisect(model, golden, wheelhouse, *extra, metric: str = "drift") -> list[str]:
    return [
        "bisect", "runtime", str(model), "--golden", str(golden), "--metric", metric,
        "--good", f"onnxruntime=={GOOD}", "--bad", f"onnxruntime=={BAD}",
        "--versions", f"{MID}", "--wheelhouse", str(wheelhouse), *PLAN, *extra,
    ]  # fmt: skip


@pytest.mark.slow  # installs three runtimes and runs the agent
def test_bisect_installs_each_version_it_tries_and_names_the_first_whose_outputs_moved(
    on_board, wheelhouse, models, tmp_path, capsys
):
    """Three versions installed by the command (good and bad, then the one between), one
    run each beside the good one, signed reports written, the table and the verdict."""
    model, golden, x = models["layernorm"]
    reports = tmp_path / "reports"
    code = edgequal_main(_bisect(model, golden, wheelhouse, "--reports", str(reports)))
    out = capsys.readouterr()
    digest = oracle_digests(on_board, model, x, (GOOD, BAD), tmp_path)
    if digest[GOOD] != digest[BAD]:  # reproducible here: the command bisected, so 1.20.1 is there
        digest |= oracle_digests(on_board, model, x, (MID,), tmp_path)
    expected = oracle_first_bad(digest)
    # Every version tried was installed into its own environment, with the wheelhouse's files.
    for version in (GOOD, MID, BAD) if expected is not None else (GOOD, BAD):
        manifest = json.loads(
            (on_board / "runtimes" / f"onnxruntime-{version}" / "env.json").read_text()
        )
        assert manifest["version"] == version
        wheel = next(w for w in manifest["wheels"] if w["file"].startswith("onnxruntime-"))
        assert (
            wheel["sha256"] == hashlib.sha256((wheelhouse / wheel["file"]).read_bytes()).hexdigest()
        )
        assert f"installing onnxruntime=={version} on local" in out.err
    assert f"bisecting 3 versions of onnxruntime: {GOOD}, {MID}, {BAD}" in out.err
    # One signed report per run (each with the sidecar naming the command that reproduces
    # it): the bad version first, then the one between.
    written = sorted(p.name for p in reports.glob("*.report.json"))
    assert sorted(p.name for p in reports.glob("*.reproduce")) == [
        f"{n}.reproduce" for n in written
    ]
    tried = [BAD] if expected is None else [BAD, MID]
    assert written == sorted(f"layernorm-{v}-vs-{GOOD}.report.json" for v in tried)
    if expected is None:
        assert code == 1
        assert (
            f"not reproducible: onnxruntime {BAD} is not DIFFERENT from {GOOD} on drift" in out.err
        )
        return
    assert code == 0, out.err
    rows = {
        line.split("│")[1].strip(): line for line in out.out.splitlines() if line.count("│") > 5
    }
    assert sorted(rows) == sorted(tried), out.out
    assert "DIFFERENT: outputs beyond the golden set's tolerances" in rows[BAD]
    assert ("bad" if expected == MID else "SAME: identical outputs") in rows[MID]
    first = "first bad among the versions tried:"
    headline = next(line for line in out.err.splitlines() if line.startswith(first))
    assert headline.startswith(f"{first} onnxruntime {expected} (outputs moved by ")
    # The operator diff between the last good and the first bad version: the one operator.
    assert f"vs {GOOD}; outputs beyond the golden set's tolerances; LayerNormalization " in headline
    assert re.search(r"LayerNormalization [+-]?\d+ %\); tried against ", headline), headline


@pytest.mark.slow
def test_a_version_whose_outputs_match_the_good_ones_is_not_reproducible(
    on_board, wheelhouse, models, tmp_path, capsys
):
    """The MatMul model under the good and the bad version (found installed when the test
    above ran first), one run: ``--json`` says not reproducible, exit 1, nothing bisected."""
    model, golden, x = models["matmul"]
    code = edgequal_main(_bisect(model, golden, wheelhouse, "--json"))
    out = capsys.readouterr()
    data = json.loads(out.out)
    first = data["trials"][0]
    assert (first["version"], first["baseline"], first["metric"]) == (BAD, GOOD, "drift")
    # Each version's operator profile, from the same run.
    assert first["operators"][0]["op_type"] == "MatMul"
    assert first["baseline_operators"][0]["op_type"] == "MatMul"
    digest = oracle_digests(on_board, model, x, (GOOD, BAD), tmp_path)
    if digest[GOOD] != digest[BAD]:  # the MatMul kernels differ on this CPU: it bisects
        digest |= oracle_digests(on_board, model, x, (MID,), tmp_path)
        assert code == 0 and data["first_bad"] == oracle_first_bad(digest)
        return
    assert code == 1 and data["status"] == "not_reproducible" and data["exit_code"] == 1
    assert [t["version"] for t in data["trials"]] == [BAD]
    assert (first["verdict"], first["why"], first["figure"]) == ("SAME", "identical outputs", 0.0)
    assert data["headline"] == (
        f"not reproducible: onnxruntime {BAD} is not DIFFERENT from {GOOD} on drift "
        "(SAME: identical outputs)"
    )


@pytest.mark.slow
def test_bisect_on_p50_reads_each_versions_latency_from_the_signed_report(
    on_board, wheelhouse, models, tmp_path, capsys
):
    """``--metric p50`` on real versions: whether 1.19.0 and the suite's onnxruntime differ
    in speed on this machine is not known in advance, so what is asserted holds for any
    verdict: the table's figures are each environment's p50 in the signed report of the same
    run (verified against the pinned local device), the verdict is one of the three, and the
    search, the status and the exit code follow from it."""
    from edgequal.host.devices.trust import KnownDevices
    from edgequal.host.judge.report_file import load_report

    model, golden, _ = models["matmul"]
    reports = tmp_path / "reports"
    code = edgequal_main(
        _bisect(model, golden, wheelhouse, "--json", "--reports", str(reports), metric="p50")
    )
    data = json.loads(capsys.readouterr().out)
    assert data["metric"] == "p50" and data["exit_code"] == code
    first = data["trials"][0]
    assert (first["version"], first["baseline"], first["metric"]) == (BAD, GOOD, "p50")
    for trial in data["trials"]:
        report = load_report(trial["report"], known=KnownDevices(), require=True)
        p50 = {
            e["version"]: e["latency"]["per_shape"][0]["summary"]["p50_ms"]
            for e in report.predicate["results"]["runtime_envs"]["environments"]
        }
        assert (trial["figure"], trial["baseline_figure"]) == (
            p50[trial["version"]],
            p50[GOOD],
        ), (trial, p50)
        assert trial["verdict"] in ("SAME", "DIFFERENT", "UNKNOWN")
        # The units weighed are the ABBA segments of the run, one p50 each, never the calls.
        segments = {
            e["version"]: e["latency"]["per_shape"][0]["segments"]
            for e in report.predicate["results"]["runtime_envs"]["environments"]
        }
        three = trial["three_way"]
        assert (three["n_baseline"], three["n_candidate"]) == (
            len(segments[GOOD]),
            len(segments[trial["version"]]),
        )
        assert three["spread_source"] == "repeats"
        if "not decisive" not in trial["why"]:  # else the segments' interference is the why
            assert three["basis"] in trial["why"]
    # A trial left UNKNOWN (its run not decisive: other processes took the CPU) is measured
    # once more; the last trial of the bad version decides whether there is anything to bisect.
    versions = [t["version"] for t in data["trials"]]
    tried_bad = versions.count(BAD)
    assert versions[:tried_bad] == [BAD] * tried_bad and tried_bad in (1, 2)
    assert all(t["verdict"] == "UNKNOWN" for t in data["trials"][: tried_bad - 1])
    last = data["trials"][tried_bad - 1]
    if last["verdict"] != "DIFFERENT":  # not slower, or not decided: nothing to bisect
        assert (data["status"], code) == ("not_reproducible", 1)
        assert versions == [BAD] * tried_bad
        assert data["headline"] == (
            f"not reproducible: onnxruntime {BAD} is not DIFFERENT from {GOOD} on p50 "
            f"({last['verdict']}: {last['why']})"
        )
    else:  # the one version between is tried next (twice where the first was UNKNOWN)
        assert set(versions[tried_bad:]) == {MID} and len(versions) - tried_bad in (1, 2)
        assert (data["status"], code) in (("found", 0), ("undecided", 1))


@pytest.mark.slow  # eight real runs, each in a runtime environment
def test_a_nightly_series_whose_environment_is_replaced_names_the_environment(
    on_board, wheelhouse, models, tmp_path, capsys
):
    """Eight "nights" of the LayerNormalization model, each run in a runtime environment
    beside the agent's own (``--runtime-env``), recorded into a history: four in the
    suite's own onnxruntime, then four in 1.19.0 (another environment name, the same
    series). Where the two versions' outputs differ on this CPU (the oracle: each
    environment's own Python), the environment's drift changes at night 4 and the culprit
    is the environment: its name, version and wheel digests by place in the plan."""
    from edgequal.host.install.runtime_envs import add_local_runtime_env

    model, golden, x = models["layernorm"]
    for version in (BAD, GOOD):  # installed by the bisect above when it ran first
        if not (on_board / "runtimes" / f"onnxruntime-{version}").is_dir():
            add_local_runtime_env(on_board, f"onnxruntime=={version}", wheelhouse=wheelhouse)
    db = f"sqlite:///{tmp_path / 'history.sqlite'}"
    plan = ["--cold-runs", "1", "--warmup", "0.05s", "--latency", "0.1s", "--sustain", "0"]
    for night in range(2 * HALF):
        env = f"onnxruntime-{BAD if night < HALF else GOOD}"
        report = tmp_path / f"night-{night}.json"
        argv = ["qualify", str(model), "--golden", str(golden), "--device", "local"]
        argv += ["--runtime-env", env, "--runtime-env-rounds", "1", *plan, "-o", str(report)]
        assert edgequal_main(argv) in (0, 1), capsys.readouterr().err
        assert edgequal_main(["history", "record", str(report), "--db", db]) == 0
    capsys.readouterr()
    # 4 runs against 4 reach p 0.029 at best: 0.05 (the p-value is the lab's or the flag's).
    assert edgequal_main(["history", "changes", "--db", db, "--p-value", "0.05", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    [series] = found["series"]
    assert series["points"] == 2 * HALF and series["figures"] >= 8  # its own and the environment's
    drift = [c for c in found["changes"] if c["figure"] == "drift y (runtime env 1)"]
    digest = oracle_digests(on_board, model, x, (GOOD, BAD), tmp_path)
    if digest[GOOD] == digest[BAD]:  # the same outputs on this CPU: nothing to find
        assert drift == []
        return
    [change] = drift
    assert change["index"] == HALF and change["worse"]
    assert change["median_before"] == 0.0 and change["median_after"] > 0.0
    assert change["p_value"] <= 0.05
    fields = {c["field"]: c for c in change["culprit"]}
    assert fields["runtime_envs[1].version"]["before"] == BAD
    assert fields["runtime_envs[1].version"]["after"] == GOOD
    assert fields["runtime_envs[1].name"]["after"] == f"onnxruntime-{GOOD}"
    wheels = fields["runtime_envs[1].wheels"]
    for side, version in (("before", BAD), ("after", GOOD)):
        manifest = json.loads(
            (on_board / "runtimes" / f"onnxruntime-{version}" / "env.json").read_text()
        )
        ort = next(w for w in manifest["wheels"] if w["file"].startswith("onnxruntime-"))
        assert f"{ort['file']} sha256 {ort['sha256'][:12]}" in wheels[side]
    top = {c["field"] for c in change["culprit"] if c["separation"] == 1.0}
    assert {"runtime_envs[1].name", "runtime_envs[1].version", "runtime_envs[1].wheels"} <= top
    assert all(c["category"] == "runtime environments" for c in change["culprit"])
    # The agent's own runtime did not change: its drift has no change.
    assert not [c for c in found["changes"] if c["figure"] == "drift y"]
    assert (
        f"changed there: runtime_envs[1].name onnxruntime-{BAD} → onnxruntime-{GOOD}"
        in (change["headline"])
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--bad", "ai-edge-litert==1.1.2"], "--good names onnxruntime and --bad ai-edge-litert"),
        (["--bad", "onnxruntime==1.19"], "--good and --bad name the same version 1.19.0"),
        (["--bad", "onnxruntime==1.32.0", "--versions", "1.20.1,next"], "'next' is not a version number"),
        (["--bad", "onnxruntime==1.32.0", "--wheelhouse", "no-such-dir"], "wheelhouse no-such-dir is not a directory"),
        (["--bad", "onnxruntime==1.32.0", "--golden", "no-such.npz"], "golden set not found: no-such.npz"),
        (["--bad", "onnxruntime==1.32.0", "--metric", "p90"], "invalid choice: 'p90'"),
        (["--bad", "onnxruntime==1.32.0", "--repeat", "3"], "bisect runtime takes no --repeat"),
        (["--bad", "onnxruntime==1.32.0", "--rounds", "0"], "--rounds must be at least 1, got 0"),
    ],
)  # fmt: skip
def test_bad_usage_is_one_line_and_exit_2_before_any_device(
    flags, message, tmp_path, capsys, isolated_config
):
    """Checked before a device is contacted: no local agent was started."""
    model = _model(tmp_path / "m.onnx", "MatMul")
    argv = ["bisect", "runtime", str(model), "--good", "onnxruntime==1.19.0", *flags]
    try:
        code = edgequal_main(argv)
    except SystemExit as e:  # argparse's own refusal (a choice), one line too
        code = e.code
    err = capsys.readouterr().err
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], err
    assert not (isolated_config / "local-agent").exists()


@pytest.mark.slow  # runs pip against the configured package index
def test_the_package_index_lists_the_released_versions_between():
    from edgequal.host.lab.bisect import registry_versions, versions_between

    listed = registry_versions("onnxruntime")
    assert {GOOD, MID, BAD} <= set(listed)
    between = versions_between(listed, GOOD, BAD)
    assert between[0] == GOOD and between[-1] == BAD and MID in between
    assert all("rc" not in v and "dev" not in v for v in between)
