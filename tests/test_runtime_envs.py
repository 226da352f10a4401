"""Runtime environments side by side, end to end: real onnxruntime versions from the package
index installed into environments on one "board" (this machine), one of them pushed from
the host over a real sshd, a real model measured under two of them in one run over gRPC
and over SSH, an unknown name refused, a runtime that crashes at import reported as
broken, the gate failing a slower environment, an approval restoring its exact wheels.

The wheels are collected once (kept in tests/wheel_cache.py's wheelhouse between sessions) and the
environments built once per module from them, with ``--no-index``.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from edgequal.cli.main import main as edgequal_main
from edgequal.contract.keys import load_or_create_device_key
from edgequal.host.devices.qualify import pin_device_key, qualify
from edgequal.host.devices.resolve import trust_device
from edgequal.host.devices.trust import KnownDevices
from edgequal.host.errors import HostError, UsageError
from edgequal.host.install.runtime_envs import (
    add_runtime_env,
    list_runtime_envs,
    remove_runtime_env,
)
from edgequal.host.judge.compare import compare_reports
from edgequal.host.judge.gate import run_gate
from edgequal.host.judge.policy import parse_policy
from edgequal.host.judge.report_file import load_report, read_report_bytes
from edgequal.host.lab.inventory import load_lab
from edgequal.host.lab.requalify import approve, load_approved, plan_requalification
from edgequal.host.present.html.report import render_report_html
from edgequal.host.transport.local import LocalTransport

# Installs runtimes and starts agents and sshd for seconds each: the fast loop skips it.
pytestmark = pytest.mark.slow

OLD = "1.20.1"
CURRENT = importlib.metadata.version("onnxruntime")
NUMPY = importlib.metadata.version("numpy")
OLD_ENV = f"onnxruntime-{OLD}"
CURRENT_ENV = f"onnxruntime-{CURRENT}"
BROKEN_ENV = "onnxruntime-0.0.1"
AGENT = [sys.executable, "-m", "edgequal.agent.cli"]
# Host-only packages that must never enter an environment on the board.
HOST_ONLY = {"rich", "paramiko", "matplotlib", "sqlalchemy", "psycopg", "onnx", "hypothesis"}


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def crashing_runtime_wheel(directory: Path, version: str, always: bool) -> Path:
    """A wheel named onnxruntime whose import dies of SIGSEGV: always, or once a ``CRASH``
    file lies beside it (a runtime that broke after it was installed, as a library update
    can break one on a board)."""
    crash = "ctypes.string_at(0)\n"
    init = "import ctypes, os\n" + (
        crash
        if always
        else f"if os.path.exists(os.path.join(os.path.dirname(__file__), 'CRASH')):\n    {crash}"
    )
    info = f"onnxruntime-{version}.dist-info"
    files = {
        "onnxruntime/__init__.py": init.encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: onnxruntime\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{n},{_record_hash(d)},{len(d)}\n" for n, d in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    path = directory / f"onnxruntime-{version}-py3-none-any.whl"
    # The same bytes every time (fixed timestamps), written by rename: copies of this suite
    # running at once share the wheel cache, and one must never read another's half-written
    # or differently dated stand-in.
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    with zipfile.ZipFile(tmp, "w") as z:
        for name, data in files.items():
            z.writestr(zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0)), data)
    os.replace(tmp, path)
    return path


def _agent(state: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*AGENT, "--state-dir", str(state), *args], capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def wheelhouse(test_helper) -> Path:
    """The wheels of two onnxruntime versions, numpy (tests/wheel_cache.py) and two
    crashing stand-ins."""
    wh = test_helper("wheel_cache").download_wheels(
        f"{OLD}-{CURRENT}", [f"onnxruntime=={v}" for v in (OLD, CURRENT)]
    )
    crashing_runtime_wheel(wh, "0.0.1", always=False)
    crashing_runtime_wheel(wh, "0.0.2", always=True)
    return wh


@pytest.fixture(scope="module")
def board(tmp_path_factory, wheelhouse, sshd_server):
    """One board's state, as its owner's shell makes it: the old and the current version,
    and one whose runtime now crashes at import (the approval test pushes a real runtime
    from the host over SSH)."""
    state = tmp_path_factory.mktemp("board") / "state"
    key = load_or_create_device_key(state)
    known = KnownDevices(tmp_path_factory.mktemp("host") / "known_devices")
    known.trust("bench", sshd_server.url, key.public_key_raw())
    ssh_options = {
        "known_devices": known,
        "state_dir": str(state),
        "ssh_options": sshd_server.options(str(Path(sys.executable).parent / "edgequal-agent")),
    }
    # All at once, as several shells could: each environment is a directory of its own.
    adds = [
        subprocess.Popen(
            [*AGENT, "--state-dir", str(state), "runtime", "add", f"onnxruntime=={version}"]
            # The wheelhouse's numpy for every one: the stand-in 0.0.1 would otherwise get
            # the numpy<2 an onnxruntime before 1.19 was built for.
            + [f"numpy=={NUMPY}", "--find-links", str(wheelhouse), "--no-index"],
            stderr=subprocess.PIPE,
            text=True,
        )
        for version in (OLD, CURRENT, "0.0.1")
    ]
    for add in adds:
        _, err = add.communicate(timeout=600)
        assert add.returncode == 0, err
    site = next((state / "runtimes" / BROKEN_ENV / "venv" / "lib").glob("python*/site-packages"))
    (site / "onnxruntime" / "CRASH").touch()
    return {"state": state, "known": known, "ssh": ssh_options}


def _wheel_digest(wheelhouse: Path, name: str) -> str:
    return hashlib.sha256((wheelhouse / name).read_bytes()).hexdigest()


def test_environments_listed_with_runtime_version_python_and_broken_one(board, wheelhouse):
    listed = _agent(board["state"], "runtime", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    envs = {e["name"]: e for e in json.loads(listed.stdout)}
    assert sorted(envs) == sorted([OLD_ENV, CURRENT_ENV, BROKEN_ENV])
    python = f"{sys.version_info[0]}.{sys.version_info[1]}.{sys.version_info[2]}"
    for name, version in ((OLD_ENV, OLD), (CURRENT_ENV, CURRENT)):
        assert envs[name]["version"] == version and envs[name]["python"] == python
        assert envs[name]["runtime"] == "onnxruntime" and envs[name]["available"] is True
    broken = envs[BROKEN_ENV]
    assert broken["available"] is False
    assert broken["reason"] == "broken: importing onnxruntime kills the process with SIGSEGV"
    # The wheels each environment holds are the wheelhouse's files, byte for byte.
    names = sorted(w["file"] for w in envs[BROKEN_ENV]["wheels"])
    assert (
        names[0].startswith(f"numpy-{NUMPY}-") and names[1] == "onnxruntime-0.0.1-py3-none-any.whl"
    )
    assert any(w["file"].startswith(f"onnxruntime-{OLD}-") for w in envs[OLD_ENV]["wheels"])
    for w in envs[BROKEN_ENV]["wheels"] + envs[OLD_ENV]["wheels"]:
        assert w["sha256"] == _wheel_digest(wheelhouse, w["file"])
    # The agent stays small: the environment holds the runtime and what it needs, no host package.
    site = next(Path(envs[OLD_ENV]["path"], "venv", "lib").glob("python*/site-packages"))
    dists = {p.name.split("-")[0].lower() for p in site.glob("*.dist-info")}
    assert {"onnxruntime", "numpy"} <= dists and not dists & HOST_ONLY, dists
    assert (site / "edgequal" / "agent").resolve() == Path(
        importlib.import_module("edgequal.agent").__file__
    ).parent.resolve()
    # Info lists them too, each probed in a child process.
    info = _agent(board["state"], "info", "--json")
    assert info.returncode == 0, info.stderr
    probed = {e["name"]: e for e in json.loads(info.stdout)["fingerprint"]["runtime_envs"]}
    assert probed[BROKEN_ENV]["available"] is False and probed[OLD_ENV]["available"] is True


def test_a_runtime_that_crashes_at_import_is_not_kept(board, wheelhouse):
    done = _agent(
        board["state"],
        "runtime",
        "add",
        "onnxruntime==0.0.2",
        f"numpy=={NUMPY}",
        "--find-links",
        str(wheelhouse),
        "--no-index",
    )
    assert done.returncode == 3
    error = [line for line in done.stderr.splitlines() if line.startswith("edgequal-agent: error")]
    assert error == [
        "edgequal-agent: error: runtime environment onnxruntime-0.0.2: broken: importing "
        "onnxruntime kills the process with SIGSEGV (hint: the runtime crashed at import on "
        "this board; the environment was not kept)"
    ]
    assert not (board["state"] / "runtimes" / "onnxruntime-0.0.2").exists()
    # A second add of an installed one is refused with the way out.
    again = _agent(board["state"], "runtime", "add", f"onnxruntime=={OLD}")
    assert again.returncode == 2 and "runtime remove onnxruntime-1.20.1 first" in again.stderr


def _plan(quick_plan, envs, **overrides):
    return quick_plan(runtime_envs=envs, runtime_env_rounds=2, latency_min_runs=100, **overrides)


@pytest.fixture(scope="module")
def grpc_run(board, example_models, golden_sets, tmp_path_factory):
    """The classifier measured under the old and the current environment in one run over gRPC."""
    from edgequal.contract.plan import make_plan

    out = tmp_path_factory.mktemp("grpc") / "both.report.json"
    known = KnownDevices(out.parent / "known_devices")
    transport = LocalTransport(state_dir=board["state"])
    try:
        pin_device_key(transport, known, "local", "local")
        info = transport.info()
        with pytest.raises(HostError) as refused:
            qualify(
                transport,
                example_models["classifier"],
                golden_sets["classifier"],
                make_plan("quick", cold_runs=1, runtime_envs=["onnxruntime-9.9.9"]).to_json(),
                known=known,
                device_name="local",
            )
        assert transport.info()["agent_version"]  # the agent is still serving
        plan = make_plan(
            "quick",
            cold_runs=1,
            warmup_min_s=0.05,
            warmup_max_s=0.5,
            latency_min_runs=400,
            latency_min_s=0.4,
            runtime_envs=[OLD_ENV, CURRENT_ENV],
            runtime_env_rounds=2,
        ).to_json()
        events = []
        result = qualify(
            transport,
            example_models["classifier"],
            golden_sets["classifier"],
            plan,
            known=known,
            device_name="local",
            on_event=events.append,
            out=out,
        )
    finally:
        transport.close()
    return {"info": info, "refused": refused.value, "result": result, "out": out, "events": events}


def test_grpc_info_lists_environments_and_refuses_an_unknown_one(grpc_run):
    envs = {e["name"]: e for e in grpc_run["info"]["fingerprint"]["runtime_envs"]}
    assert envs[OLD_ENV]["version"] == OLD and envs[BROKEN_ENV]["available"] is False
    refused = grpc_run["refused"]
    assert refused.exit_code == 2
    assert str(refused).startswith(
        "unknown runtime environment 'onnxruntime-9.9.9' on this device; installed: default, "
        f"{BROKEN_ENV}, {OLD_ENV}, {CURRENT_ENV}"
    )


def _check_side_by_side(predicate: dict, names: list[str]) -> dict:
    fingerprint_envs = predicate["fingerprint"]["runtime_envs"]
    assert [e["name"] for e in fingerprint_envs] == names
    section = predicate["results"]["runtime_envs"]
    assert section["baseline"] == names[0] and section["order"] == "ABBA"
    by_name = {e["name"]: e for e in section["environments"]}
    return by_name


def test_one_run_over_grpc_measures_both_versions_side_by_side(grpc_run):
    predicate = grpc_run["result"].report.predicate
    envs = _check_side_by_side(predicate, [OLD_ENV, CURRENT_ENV])
    versions = {e["name"]: e["version"] for e in predicate["fingerprint"]["runtime_envs"]}
    assert versions == {OLD_ENV: OLD, CURRENT_ENV: CURRENT}
    for name, version in ((OLD_ENV, OLD), (CURRENT_ENV, CURRENT)):
        env = envs[name]
        assert env["status"] == "ok", env
        # Each measured by its own runtime version, in today's result shapes.
        assert env["runtime_info"]["version"] == version
        assert env["cold_load"]["runtime"]["version"] == version
        assert len(env["cold_load"]["runs"]) == 1
        shape = env["latency"]["per_shape"][0]
        assert shape["summary"]["count"] >= 400 and shape["samples_ns_b64"]
        assert [s["round"] for s in shape["segments"]] == [0, 1]
        assert env["drift"]["passed"] is True and env["memory"]["peak_rss_bytes"] > 0
    # ABBA: old, current, current, old.
    old, cur = (envs[n]["latency"]["per_shape"][0]["segments"] for n in (OLD_ENV, CURRENT_ENV))
    assert old[0]["t1"] <= cur[0]["t0"] and cur[0]["t1"] <= cur[1]["t0"] <= old[1]["t0"]
    (pair,) = predicate["results"]["runtime_envs"]["pairs"]
    p50 = {n: envs[n]["latency"]["per_shape"][0]["summary"]["p50_ms"] for n in envs}
    assert pair["p50_ratio"] == pytest.approx(p50[CURRENT_ENV] / p50[OLD_ENV], rel=1e-3)
    lo, hi = pair["p50_ratio_ci"]
    assert lo <= pair["p50_ratio"] <= hi
    assert pair["p99_ratio"] is not None  # 400 samples each: p99 is reported
    # The two versions' outputs compared directly: no decision differs on the golden set.
    assert pair["flips_between"] == 0 and pair["drift_between"]["passed"] is True
    assert pair["drift_between"]["decisions"]["total_cases"] == 12


def test_gate_fails_an_environment_slower_than_its_limit(grpc_run, tmp_path, capsys):
    """The [runtime_envs] checks on the run's own ratio. On a busy machine the segments
    wait for a CPU: then the comparison is not decisive and its latency limits fail as
    not measured, naming the interference (the run's status is the summary's concern)."""
    out = grpc_run["out"]
    known = KnownDevices(out.parent / "known_devices")
    pair = grpc_run["result"].report.predicate["results"]["runtime_envs"]["pairs"][0]
    ratio, decisive = pair["p50_ratio"], pair["interference"]["decisive"]
    name = f"runtime_envs.max_p50_ratio[{CURRENT_ENV}]"

    def env_checks(policy):
        return {
            c.name: c
            for c in run_gate(read_report_bytes(out), policy, known=known).checks
            if c.section == "runtime_envs"
        }

    loose = env_checks(
        parse_policy({"runtime_envs": {"max_p50_ratio": 50.0, "required": [OLD_ENV, CURRENT_ENV]}})
    )
    assert loose[f"runtime_envs.required[{OLD_ENV}]"].passed
    assert loose[f"runtime_envs.required[{CURRENT_ENV}]"].passed
    assert loose[name].passed == decisive
    # The current version may be no slower than a thousandth of the old one: it is slower.
    strict = env_checks(
        parse_policy({"runtime_envs": {"max_p50_ratio": 0.001, "max_flips_between": 0}})
    )
    failed = [c for c in strict.values() if not c.passed]
    assert [c.name for c in failed] == [name]
    if decisive:
        assert failed[0].message.startswith(
            f"{CURRENT_ENV}: p50 / baseline p50 ({OLD_ENV}) {ratio:.4g} is above the limit ≤ 0.001"
        )
    else:
        assert failed[0].message.startswith(
            f"{CURRENT_ENV}: p50 / baseline p50 ({OLD_ENV}): {pair['interference']['interfered']} "
            f"of {pair['interference']['segments']} segments waited for a CPU"
        )
        assert failed[0].message.endswith("not decisive, re-run on a quiet board")
    # Side by side in the summary, on the page and in compare.
    from edgequal.host.present.terminal.summary import print_summary

    print_summary(grpc_run["result"].report.predicate, "local")
    text = capsys.readouterr().out
    assert "runtime environments (2 segments each, ABBA" in text and CURRENT_ENV in text
    report = load_report(out, known=known)
    page = render_report_html([report])
    assert "<h2>Runtime environments</h2>" in page and f"{OLD_ENV} (baseline)" in page
    rows = {r.figure: r for r in compare_reports([report, report]).rows}
    assert rows[f"env {CURRENT_ENV} p50 / its run's baseline p50"].values == [ratio, ratio]


def test_ssh_run_measures_both_and_reports_the_broken_one(
    board, example_models, golden_sets, sshd_server, agent_cmd, quick_plan, tmp_path, capsys
):
    transport = sshd_server.transport(agent_cmd, board["state"], step_timeout_s=60)
    known = KnownDevices(tmp_path / "known_devices")
    with transport:
        known.trust("bench", sshd_server.url, transport.prove_identity(None))
        result = qualify(
            transport,
            example_models["classifier"],
            golden_sets["classifier"],
            _plan(quick_plan, [OLD_ENV, "default", BROKEN_ENV]),
            known=known,
            device_name="bench",
        )
    predicate = result.report.predicate
    envs = _check_side_by_side(predicate, [OLD_ENV, "default", BROKEN_ENV])
    assert envs["default"]["version"] == CURRENT and envs["default"]["status"] == "ok"
    assert envs[OLD_ENV]["status"] == "ok" and envs[OLD_ENV]["runtime_info"]["version"] == OLD
    # The broken environment is a finding naming it; the run is signed, the others measured.
    assert envs[BROKEN_ENV]["status"] == "failed"
    finding = next(f for f in predicate["findings"] if f.get("runtime_env") == BROKEN_ENV)
    assert finding["phase"] == "runtime_envs" and "SIGSEGV" in finding["message"]
    assert predicate["status"] == "failed"
    pairs = {p["candidate"]: p for p in predicate["results"]["runtime_envs"]["pairs"]}
    assert pairs["default"]["measured"] and pairs["default"]["p50_ratio"] > 0
    assert pairs[BROKEN_ENV]["measured"] is False
    from edgequal.host.present.terminal.summary import print_summary

    print_summary(predicate, "bench")
    text = capsys.readouterr().out
    assert f"  {BROKEN_ENV}: runtime environment {BROKEN_ENV}: " in text and "SIGSEGV" in text


def test_approval_records_the_environment_and_restores_its_exact_wheels(
    grpc_run, board, sshd_server, example_models, golden_sets, tmp_path, wheelhouse
):
    known = KnownDevices(grpc_run["out"].parent / "known_devices")
    approved = tmp_path / "approved"
    name, device = approve(
        grpc_run["out"],
        example_models["classifier"],
        golden_sets["classifier"],
        approved,
        known=known,
        runtime_env=OLD_ENV,
    )
    record = load_approved(approved)[name].devices[device].runtime_env
    assert record["name"] == OLD_ENV and record["version"] == OLD
    installed = json.loads((board["state"] / "runtimes" / OLD_ENV / "env.json").read_text())
    assert record["wheels"] == installed["wheels"] and len(record["wheels"]) >= 2
    with pytest.raises(UsageError, match="measured no runtime environment called nope"):
        approve(grpc_run["out"], example_models["classifier"], golden_sets["classifier"],
                approved, known=known, runtime_env="nope")  # fmt: skip

    # Another board gets the approved environment back: the same wheels, by sha256.
    state2 = tmp_path / "board2"
    known2 = KnownDevices(tmp_path / "known2")
    known2.trust(device, sshd_server.url, load_or_create_device_key(state2).public_key_raw())
    options = {**board["ssh"], "known_devices": known2, "state_dir": str(state2)}
    restored = add_runtime_env(
        sshd_server.url, None, from_approved=approved / name, wheelhouse=wheelhouse, **options
    )
    assert restored["name"] == OLD_ENV and restored["version"] == OLD
    assert restored["wheels"] == record["wheels"]

    # Other bytes under an approved wheel's name are refused before anything is installed.
    index = json.loads((approved / "approved.json").read_text())
    wheels = index["models"][name]["devices"][device]["runtime_env"]["wheels"]
    wheels[0]["sha256"] = "0" * 64
    (approved / "approved.json").write_text(json.dumps(index))
    # The owner removes it again from the host (and lists what is left).
    assert remove_runtime_env(sshd_server.url, OLD_ENV, **options) == (
        f"removed {OLD_ENV} (onnxruntime=={OLD})"
    )
    assert list_runtime_envs(sshd_server.url, **options) == []
    with pytest.raises(UsageError, match="now has sha256"):
        add_runtime_env(
            sshd_server.url, None, from_approved=approved / name, wheelhouse=wheelhouse, **options
        )
    assert not (state2 / "runtimes" / OLD_ENV / "env.json").exists()


def test_requalify_under_a_candidate_on_boards_that_have_it(
    grpc_run, board, example_models, golden_sets, local_agents, tmp_path, capsys
):
    agent = local_agents.serve(board["state"])
    try:
        trust_device(KnownDevices(), "local", agent.address)
        lab_path = tmp_path / "lab.toml"
        lab_path.write_text(f'[devices.local]\naddress = "{agent.address}"\n')
        approved = tmp_path / "approved"
        approve(
            grpc_run["out"],
            example_models["classifier"],
            golden_sets["classifier"],
            approved,
            known=KnownDevices(grpc_run["out"].parent / "known_devices"),
            runtime_env=OLD_ENV,
        )
        lab = load_lab(lab_path)
        plan = plan_requalification(approved, lab, runtime_env=CURRENT_ENV)
        (run,) = plan.runs.values()
        assert run.plan["runtime_envs"] == [OLD_ENV, CURRENT_ENV] and plan.missing_env == {}
        missing = plan_requalification(approved, lab, runtime_env="onnxruntime-9.9.9")
        assert missing.runs == {}
        assert missing.missing_env == {
            "classifier@local": "local has no runtime environment onnxruntime-9.9.9 (install it: "
            "edgequal agent runtime add ssh://… onnxruntime-9.9.9)"
        }
        # Through the command: the board without the candidate is reported and fails the run.
        policy = tmp_path / "p.toml"
        policy.write_text(f'[runtime_envs]\nrequired = ["{OLD_ENV}", "{CURRENT_ENV}"]\n')
        args = ["fleet", "requalify", str(approved), str(lab_path), "--policy", str(policy)]
        args += ["--out", str(tmp_path / "out"), "--no-record"]
        assert edgequal_main(args + ["--runtime-env", "onnxruntime-9.9.9"]) == 1
        assert "classifier@local: not re-qualified under onnxruntime-9.9.9: local has no " in (
            capsys.readouterr().err
        )
    finally:
        agent.stop()
