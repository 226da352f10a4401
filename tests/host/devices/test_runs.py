"""Ctrl-C cancels the host's run; ``edgequal runs`` finds, cancels and fetches runs a host left.

Real agents: ``edgequal-agent serve`` with a token (tests/host/conftest.py) and
``run-plan`` over the real sshd. The host is a real ``edgequal`` process that
the test interrupts (SIGINT) or kills (SIGKILL) while its run is measuring.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from edgequal.agent.service.state_lock import peek
from edgequal.cli.main import main as edgequal_main
from edgequal.host.devices.runs import RunLedger
from edgequal.host.devices.trust import KnownDevices
from edgequal.host.devices.verify import verify_envelope
from edgequal.host.paths import reports_dir
from edgequal.host.transport.grpc import GrpcTransport

LONG_RUN = ["--sustain", "120s"]
"""Long enough that the test always interrupts it while it measures."""


# Ctrl-C does in the host what it does in a terminal, even when the tests run with SIGINT
# ignored (started in the background by a non-interactive shell, or under nohup), which
# a child inherits; the host would then measure its full 120 s. The child restores it
# itself: a preexec_fn would make the fork run Python beside this process's gRPC threads,
# and gRPC's fork handlers then crash the child before it execs (its poller's epoll fd
# closed by close_fds: grpc/grpc#43055).
_HOST = (
    "import signal, sys\n"
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "from edgequal.cli.main import main\n"
    "sys.exit(main(sys.argv[1:]))"
)


def _host(model: Path, device_args: list[str], report: Path) -> subprocess.Popen:
    """``edgequal qualify`` in its own process, as a user would run it."""
    return subprocess.Popen(
        [sys.executable, "-c", _HOST, "qualify", str(model), *device_args]
        + [*LONG_RUN, "-o", str(report)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _wait_for_lease(state: Path, host: subprocess.Popen, timeout_s: float = 120) -> str:
    """The run id once the device's run is measuring and the host knows it (its ledger has
    it: the device took the lease a moment before the host heard of the run)."""
    deadline = time.monotonic() + timeout_s
    while True:
        lease = (peek(state) or {}).get("lease")
        if lease and RunLedger().get(lease["run_id"]) is not None:
            return lease["run_id"]
        assert host.poll() is None, host.communicate()
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.1)


def _wait_idle(state: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while (peek(state) or {}).get("lease"):
        assert time.monotonic() < deadline, "the device stayed busy"
        time.sleep(0.1)


def _cancelled(report: Path, device: str, run_id: str) -> dict:
    verified = verify_envelope(
        report.read_bytes(), known=KnownDevices(), device=device, expected_run_id=run_id
    )
    assert (verified.status, verified.predicate.get("reason")) == ("incomplete", "cancelled")
    return verified.predicate


@pytest.fixture
def bench(start_agent, token_file):
    """A token-protected agent, trusted as ``bench``."""
    agent = start_agent("bench", "--token-file", str(token_file))
    argv = ["devices", "trust", "bench", agent.address, "--token-file", str(token_file)]
    assert edgequal_main(argv) == 0
    return agent


def _info(agent, token_file) -> dict:
    with GrpcTransport(agent.address, token=token_file.read_text().strip()) as t:
        return t.info()


@pytest.mark.slow
def test_ctrl_c_cancels_the_run_and_keeps_its_signed_report(
    bench, token_file, example_models, tmp_path
):
    report = tmp_path / "r.json"
    host = _host(example_models["micro"], ["--device", "bench"], report)
    run_id = _wait_for_lease(bench.state, host)
    host.send_signal(signal.SIGINT)
    out, err = host.communicate(timeout=180)
    err = err.decode()
    assert host.returncode == 130, err
    assert f"interrupted: cancelling run {run_id} on bench" in err
    assert f"run {run_id} was cancelled" in err
    assert "Traceback" not in err
    # A cancellation, said as one: no worker failure, no "fix the cause above".
    out = " ".join(out.decode().split())
    assert "INCOMPLETE" in out and "reason: cancelled" in out
    # The header names the device as it is trusted, not its address.
    assert f"INCOMPLETE device bench run {run_id}" in out and bench.address not in out
    assert "the run was cancelled (Ctrl-C or runs cancel), nothing failed" in out
    assert "worker_failure" not in out and "fix the cause" not in out
    predicate = _cancelled(report, "bench", run_id)
    assert all(f["kind"] == "cancelled" for f in predicate["findings"]), predicate["findings"]
    # The device is free and still answers; the run is in this host's ledger.
    info = _info(bench, token_file)
    assert info["busy"] is False and info["lease"] is None
    assert [r.run_id for r in RunLedger().runs("bench")] == [run_id]
    assert (bench.state / "reports" / f"{run_id}.dsse.json").read_bytes() == report.read_bytes()


@pytest.mark.slow
def test_runs_list_cancel_fetch_a_run_whose_host_went_away(
    bench, token_file, example_models, tmp_path, capsys
):
    host = _host(example_models["micro"], ["--device", "bench"], tmp_path / "never.json")
    run_id = _wait_for_lease(bench.state, host)
    # The host records the run once the device has said its id; a busy machine may take a
    # moment between the two.
    deadline = time.monotonic() + 60
    while RunLedger().get(run_id) is None:
        assert time.monotonic() < deadline, "the host never recorded the run"
        time.sleep(0.05)
    host.kill()  # the host is gone without a word: over gRPC the run goes on
    host.wait()
    assert _info(bench, token_file)["lease"]["run_id"] == run_id

    assert edgequal_main(["runs", "list", "--device", "bench"]) == 0
    listed = capsys.readouterr().out
    assert run_id in listed and "in progress" in listed
    assert edgequal_main(["runs", "list", "--device", "bench", "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)
    assert runs["device"] == "bench" and runs["runs"][0]["run_id"] == run_id
    assert runs["runs"][0]["state"] == "in progress"
    assert "likely free in about" in runs["runs"][0]["detail"]  # from the run's plan
    assert edgequal_main(["runs", "show", run_id, "--device", "bench"]) == 0
    assert "in progress for" in capsys.readouterr().out
    assert edgequal_main(["runs", "fetch", run_id, "--device", "bench"]) == 3
    assert "still in progress" in capsys.readouterr().err

    cancelled = tmp_path / "cancelled.json"
    rc = edgequal_main(
        ["runs", "cancel", run_id, "--device", "bench", "--wait", "-o", str(cancelled)]
    )
    assert rc == 0, capsys.readouterr().err
    assert "incomplete (cancelled)" in capsys.readouterr().out
    predicate = _cancelled(cancelled, "bench", run_id)
    assert predicate["nonce"] == RunLedger().get(run_id).nonce  # the nonce this host issued
    _wait_idle(bench.state)
    assert _info(bench, token_file)["busy"] is False

    # Fetched again without -o: into the host's reports dir, the same bytes.
    assert edgequal_main(["runs", "fetch", run_id, "--device", "bench"]) == 0
    assert (reports_dir() / f"{run_id}.report.json").read_bytes() == cancelled.read_bytes()
    capsys.readouterr()
    assert edgequal_main(["runs", "cancel", run_id, "--device", "bench"]) == 2
    assert f"run {run_id} is not in progress" in capsys.readouterr().err
    assert edgequal_main(["runs", "fetch", "20260101T000000Z-00000000", "--device", "bench"]) == 2
    assert "no report for run" in capsys.readouterr().err


@pytest.fixture
def ssh_board(sshd_server, tmp_path):
    """The ssh:// device: this machine through the real sshd, with its own state dir."""
    state = tmp_path / "ssh-state"
    options = [
        "--known-hosts", str(sshd_server.known_hosts),
        "--ssh-key", str(sshd_server.client_key),
        "--agent-cmd", f"{sys.executable} -m edgequal.agent.cli --state-dir {state}",
    ]  # fmt: skip
    return state, ["--device", sshd_server.url, *options]


@pytest.mark.slow
def test_over_ssh_ctrl_c_and_runs_cancel_sign_the_run_cancelled(
    ssh_board, example_models, tmp_path, capsys
):
    state, device_args = ssh_board
    # Ctrl-C: the host closes the run's channel, the agent signs it cancelled, the host fetches it.
    report = tmp_path / "ssh.json"
    host = _host(example_models["micro"], device_args, report)
    run_id = _wait_for_lease(state, host)
    host.send_signal(signal.SIGINT)
    _, err = host.communicate(timeout=180)
    assert host.returncode == 130, err.decode()
    name = KnownDevices().list()[0].name
    first_run = run_id
    _cancelled(report, name, first_run)
    _wait_idle(state)

    # A run another host is streaming is cancelled from here with `runs cancel`.
    other = _host(example_models["micro"], device_args, tmp_path / "other.json")
    run_id = _wait_for_lease(state, other)
    assert edgequal_main(["runs", "cancel", run_id, *device_args]) == 0
    _, err = other.communicate(timeout=180)
    assert other.returncode == 3, err.decode()  # the run it streamed ended incomplete
    _cancelled(tmp_path / "other.json", name, run_id)

    # A host killed mid-run: the closed connection cancels the run; the report is fetched later.
    gone = _host(example_models["micro"], device_args, tmp_path / "never.json")
    run_id = _wait_for_lease(state, gone)
    os.kill(gone.pid, signal.SIGKILL)
    gone.wait()
    fetched = tmp_path / "fetched.json"
    rc = edgequal_main(["runs", "fetch", run_id, *device_args, "--wait", "-o", str(fetched)])
    assert rc == 0, capsys.readouterr().err
    _cancelled(fetched, name, run_id)
    _wait_idle(state)
    # The agent still answers, and the earlier reports still verify.
    assert edgequal_main(["runs", "list", *device_args]) == 0
    _cancelled(report, name, first_run)


class _StopsOnSecondCtrlC:
    """Transport plumbing stand-in: cancel is accepted, the wait for the report is interrupted."""

    address = "grpc://127.0.0.1:1"

    def __init__(self):
        self.cancelled = []

    def cancel(self, run_id):
        self.cancelled.append(run_id)

    def get_report(self, run_id):
        raise KeyboardInterrupt  # the second Ctrl-C, while the host waits


def test_a_second_ctrl_c_stops_waiting_and_says_how_to_fetch_the_run():
    from edgequal.host.devices.runs import Interrupted, cancel_and_fetch

    transport, notices = _StopsOnSecondCtrlC(), []
    with pytest.raises(Interrupted) as err:
        cancel_and_fetch(transport, "20260101T000000Z-0000abcd", "bench", notices.append)
    assert transport.cancelled == ["20260101T000000Z-0000abcd"]
    assert notices == [
        "interrupted: cancelling run 20260101T000000Z-0000abcd on bench (Ctrl-C again: stop waiting)"
    ]
    assert err.value.exit_code == 130
    assert "left to the device, which keeps its signed report" in str(err.value)
    assert err.value.hint == (
        "fetch it with `edgequal runs fetch 20260101T000000Z-0000abcd --device bench`"
    )


def test_a_default_report_name_is_claimed_once_by_concurrent_writers(tmp_path):
    """``write_report(fresh=True)`` from eight threads at once, one name: eight files, each
    with its own bytes; a name the user chose (``fresh=False``) is replaced."""
    from concurrent.futures import ThreadPoolExecutor

    from edgequal.host.devices.runs import write_report

    name = tmp_path / "chain-20261202T120000.report.json"
    with ThreadPoolExecutor(8) as pool:
        written = list(pool.map(lambda k: write_report(name, b"%d" % k, fresh=True), range(8)))
    assert sorted(p.name for p in written) == sorted(
        [name.name] + [f"chain-20261202T120000-{k}.report.json" for k in range(2, 9)]
    )
    assert sorted(p.read_bytes() for p in written) == [b"%d" % k for k in range(8)]
    assert set(tmp_path.iterdir()) == set(written)  # no temporary file left
    assert write_report(name, b"chosen") == name and name.read_bytes() == b"chosen"
