"""The ssh:// transport against a real OpenSSH sshd on 127.0.0.1 (fixture in tests/conftest.py).

The "device" is this machine: agent commands run as the console script of the
interpreter running the tests, with a per-test state directory.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from edgequal.contract.signing import MEASURED_STATUSES
from edgequal.host.devices.trust import KnownDevices
from edgequal.host.devices.verify import verify_envelope
from edgequal.host.errors import TransportError, UsageError
from edgequal.host.examples.catalog import build_example
from edgequal.host.transport.base import QualifyRequest

# Starts real processes (agents, sshd, the emulator) for seconds each: the fast loop skips it.
pytestmark = pytest.mark.slow


@pytest.fixture
def state_dir(tmp_path) -> Path:
    return tmp_path / "agent-state"


@pytest.fixture
def ssh(sshd_server, agent_cmd, state_dir):
    transport = sshd_server.transport(agent_cmd, state_dir, step_timeout_s=20)
    with transport:
        yield transport


# ----- agent commands ------------------------------------------------------------


def test_failing_agent_command_surfaces_the_agent_error(ssh):
    digest = "ab" * 32
    with pytest.raises(TransportError) as info:
        ssh.agent_json(["store", "commit", digest], "commit")
    assert f"no upload of sha256:{digest} to commit" in str(info.value)
    assert "(exit 2)" in str(info.value)


# ----- push over SFTP --------------------------------------------------------------


def _write_random(path: Path, size: int) -> str:
    data = secrets.token_bytes(size)
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def test_push_commits_verified_artifact_and_skips_what_the_device_holds(ssh, state_dir, tmp_path):
    blob = tmp_path / "model.bin"
    digest = _write_random(blob, 300_000)
    seen = []
    result = ssh.push(blob, digest, on_progress=lambda done, total: seen.append((done, total)))
    assert (result.digest, result.size, result.bytes_sent) == (digest, 300_000, 300_000)
    assert seen[-1] == (300_000, 300_000)
    stored = state_dir / "artifacts" / "sha256" / digest
    assert stored.read_bytes() == blob.read_bytes()
    assert not (state_dir / "artifacts" / "partial" / f"{digest}.part").exists()
    assert ssh.push(blob, digest).bytes_sent == 0


def test_push_of_corrupted_partial_is_refused_then_redone(ssh, state_dir, tmp_path):
    blob = tmp_path / "model.bin"
    digest = _write_random(blob, 100_000)
    partial = state_dir / "artifacts" / "partial" / f"{digest}.part"
    ssh.store_stat(digest)  # lets the agent create its store
    partial.parent.mkdir(parents=True, exist_ok=True)
    # The device holds 40,000 bytes of which the first ones are wrong: resuming
    # appends the rest, the device's sha256 check refuses, nothing is stored.
    partial.write_bytes(b"X" * 10 + blob.read_bytes()[10:40_000])
    with pytest.raises(TransportError, match="do not match"):
        ssh.push(blob, digest)
    assert not (state_dir / "artifacts" / "sha256" / digest).exists()
    assert not partial.exists()
    assert ssh.push(blob, digest).bytes_sent == 100_000
    assert (state_dir / "artifacts" / "sha256" / digest).read_bytes() == blob.read_bytes()


KILLED_PUSH = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from edgequal.host.transport.ssh import SSHTransport
    from edgequal.host.transport.ssh_options import SSHOptions

    url, known_hosts, key, agent, state, blob, digest = sys.argv[1:]

    def progress(done, total):
        print(done, flush=True)
        if done >= total // 2:
            time.sleep(3600)  # hold here until the test kills this process

    options = SSHOptions(known_hosts=known_hosts, key_file=key, agent_cmd=agent,
                         allow_agent=False, look_for_keys=False)
    t = SSHTransport(url, options=options, state_dir=state)
    t.push(Path(blob), digest, on_progress=progress)
    """
)


def _wait_stable_size(path: Path, at_least: int, timeout_s: float = 20) -> int:
    """Wait until ``path`` holds ``at_least`` bytes and stops growing; return its size."""
    deadline = time.monotonic() + timeout_s
    last = -1
    while time.monotonic() < deadline:
        size = path.stat().st_size if path.exists() else -1
        if size >= at_least and size == last:
            return size
        last = size
        time.sleep(0.2)
    raise AssertionError(f"{path} did not settle at >= {at_least} bytes (last {last})")


def test_push_killed_half_way_resumes_with_only_the_rest(
    ssh, sshd_server, agent_cmd, state_dir, tmp_path
):
    size = 8 * 1024 * 1024
    blob = tmp_path / "big.bin"
    digest = _write_random(blob, size)
    partial = state_dir / "artifacts" / "partial" / f"{digest}.part"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            KILLED_PUSH,
            sshd_server.url,
            str(sshd_server.known_hosts),
            str(sshd_server.client_key),
            agent_cmd,
            str(state_dir),
            str(blob),
            digest,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for line in child.stdout:
            if int(line) >= size // 2:
                break
        else:
            raise AssertionError(f"the uploader ended early: {child.stderr.read()}")
        _wait_stable_size(partial, size // 4)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait(timeout=10)
    assert child.returncode == -signal.SIGKILL
    held = _wait_stable_size(partial, size // 4)
    assert held < size
    assert ssh.store_stat(digest)["committed_offset"] == held

    result = ssh.push(blob, digest)
    assert result.bytes_sent == size - held
    assert (state_dir / "artifacts" / "sha256" / digest).read_bytes() == blob.read_bytes()


# ----- qualify over SSH end to end ---------------------------------------------------


def test_qualify_over_ssh_end_to_end_and_verify(ssh, state_dir, tmp_path, fast_plan):
    model = build_example("micro", tmp_path / "models")
    digest = hashlib.sha256(model.read_bytes()).hexdigest()
    assert ssh.push(model, digest).bytes_sent == model.stat().st_size

    info = ssh.info()
    # The same typed Info as over gRPC: the key the agent proved, limits, lease, protocol.
    assert base64.b64decode(info["public_key_b64"]) == ssh.proven_key
    assert ssh.proven_key == base64.b64decode((state_dir / "device_key.pub").read_text())
    assert info["protocol"] == "edgequal.v1"
    assert info["busy"] is False and info["lease"] is None
    assert info["limits"]["chunk_bytes"] == 1024 * 1024
    assert info["key_fingerprint"].startswith("SHA256:")
    assert info["agent_version"]
    assert {r["name"] for r in info["runtimes"]} >= {"onnxruntime"}
    known = KnownDevices(tmp_path / "known_devices")
    known.trust("sshboard", ssh.address, base64.b64decode(info["public_key_b64"]))

    nonce = secrets.token_hex(16)
    events = []
    envelope = ssh.qualify(
        QualifyRequest(model_digest=digest, plan=fast_plan, nonce=nonce, model_name="micro.onnx"),
        events.append,
    )
    report = verify_envelope(
        envelope, known=known, device="sshboard", expected_nonce=nonce, artifacts=[model]
    )
    assert report.device_name == "sshboard"
    assert report.fingerprint == info["key_fingerprint"]
    assert report.status in MEASURED_STATUSES, report.predicate.get("findings")
    assert report.run_id == ssh.last_run_id
    # The run id comes first, as soon as the agent accepted the run.
    assert events[0] == {"type": "run", "run_id": report.run_id}
    phases = {e.get("phase") for e in events if e.get("type") == "phase"}
    assert {"cold_load", "latency"} <= phases, phases
    # The stored report is the same bytes, fetched by run id.
    assert ssh.get_report(report.run_id) == envelope


def test_qualify_with_unknown_artifact_is_one_clear_error(ssh, fast_plan):
    missing = "cd" * 32
    with pytest.raises(TransportError) as info:
        ssh.qualify(QualifyRequest(model_digest=missing, plan=fast_plan, nonce="n1"), print)
    assert "qualification (run-plan) failed" in str(info.value)
    assert missing in str(info.value)


def test_cancel_of_a_run_not_in_progress_is_refused(ssh):
    with pytest.raises(UsageError, match="run 20260101T000000Z-abcdef01 is not in progress"):
        ssh.cancel("20260101T000000Z-abcdef01")
