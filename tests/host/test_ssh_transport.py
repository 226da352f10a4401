"""The ssh:// transport against a real OpenSSH sshd on 127.0.0.1 (fixture in tests/conftest.py).

The "device" is this machine: agent commands run as the console script of the
interpreter running the tests, with a per-test state directory.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from edgequal.host.errors import TransportError, UsageError
from edgequal.host.examples import build_example
from edgequal.host.transport.base import QualifyRequest
from edgequal.host.transport.ssh import SSHTransport, parse_ssh_url, resolve_target
from edgequal.host.trust import KnownDevices
from edgequal.host.verify import verify_envelope


def ssh_fingerprint(public_key_line: str) -> str:
    """SHA256 fingerprint of an OpenSSH public key line, as ssh-keygen -l prints it."""
    blob = base64.b64decode(public_key_line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


@pytest.fixture
def state_dir(tmp_path) -> Path:
    return tmp_path / "agent-state"


@pytest.fixture
def ssh(sshd_server, agent_cmd, state_dir):
    transport = SSHTransport(
        sshd_server.url,
        known_hosts=sshd_server.known_hosts,
        key_file=sshd_server.client_key,
        agent_cmd=agent_cmd,
        state_dir=str(state_dir),
        step_timeout_s=20,
        allow_agent=False,
        look_for_keys=False,
    )
    with transport:
        yield transport


# ----- addresses -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("ssh://pi@bench-pi5", ("pi", "bench-pi5", None)),
        ("ssh://pi@10.0.0.7:2222", ("pi", "10.0.0.7", 2222)),
        ("ssh://board", (None, "board", None)),
        ("ssh://me@[fe80::1]:22", ("me", "fe80::1", 22)),
        ("ssh://a@b@host:1", ("a@b", "host", 1)),
    ],
)
def test_parse_ssh_url(url, expected):
    assert parse_ssh_url(url) == expected


@pytest.mark.parametrize(
    "url", ["grpc://h:1", "ssh://", "ssh://h:0", "ssh://h:99999", "ssh://h/x", "ssh://h:p"]
)
def test_parse_ssh_url_rejects(url):
    with pytest.raises(UsageError):
        parse_ssh_url(url)


def test_resolve_target_applies_ssh_config_and_url_wins(tmp_path):
    config = tmp_path / "config"
    config.write_text(
        "Host bench\n  HostName 10.1.2.3\n  User lab\n  Port 2200\n  IdentityFile ~/.ssh/lab_key\n"
        "Host *\n  User fallback\n"
    )
    t = resolve_target("ssh://bench", config)
    assert (t.alias, t.host, t.user, t.port) == ("bench", "10.1.2.3", "lab", 2200)
    assert t.key_files == (os.path.expanduser("~/.ssh/lab_key"),)
    assert t.known_hosts_name == "[10.1.2.3]:2200"
    t = resolve_target("ssh://pi@bench:22", config)
    assert (t.host, t.user, t.port, t.known_hosts_name) == ("10.1.2.3", "pi", 22, "10.1.2.3")
    t = resolve_target("ssh://other", config)
    assert (t.host, t.user, t.port) == ("other", "fallback", 22)


# ----- host keys and authentication ---------------------------------------------


def test_unknown_host_key_is_refused_with_how_to_trust(sshd_server, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    t = SSHTransport(
        sshd_server.url, known_hosts=empty, key_file=sshd_server.client_key, allow_agent=False
    )
    logins_before = sshd_server.log().count("Accepted publickey")
    with pytest.raises(TransportError) as info:
        t.run_remote("true")
    message, hint = str(info.value), info.value.hint
    assert f"[127.0.0.1]:{sshd_server.port}" in message
    assert "is not in" in message and str(empty) in message
    assert ssh_fingerprint(sshd_server.host_public_key) in message
    assert f"ssh-keyscan -p {sshd_server.port} -t ed25519 127.0.0.1 >> {empty}" in hint
    # Refusing never means remembering: the file is left as it was, and no login happened.
    assert empty.read_text() == ""
    time.sleep(0.2)  # let sshd log whatever it would have
    assert sshd_server.log().count("Accepted publickey") == logins_before


def test_changed_host_key_is_refused(sshd_server, tmp_path):
    wrong = sshd_server.other_host_key_known_hosts(tmp_path / "known_hosts")
    pinned = wrong.read_text()
    pinned_fp = ssh_fingerprint(pinned.split(None, 1)[1])
    t = SSHTransport(
        sshd_server.url, known_hosts=wrong, key_file=sshd_server.client_key, allow_agent=False
    )
    with pytest.raises(TransportError) as info:
        t.run_remote("true")
    message = str(info.value)
    assert "CHANGED" in message
    assert pinned_fp in message
    assert ssh_fingerprint(sshd_server.host_public_key) in message
    assert f"ssh-keygen -R '[127.0.0.1]:{sshd_server.port}'" in info.value.hint
    assert wrong.read_text() == pinned


def test_ssh_config_alias_and_identity_file(sshd_server, tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host testboard\n  HostName 127.0.0.1\n  Port {sshd_server.port}\n"
        f"  User {sshd_server.user}\n  IdentityFile {sshd_server.client_key}\n"
    )
    with SSHTransport(
        "ssh://testboard",
        known_hosts=sshd_server.known_hosts,
        ssh_config=config,
        allow_agent=False,
        look_for_keys=False,
    ) as t:
        assert t.run_remote("echo $((6 * 7))").stdout == "42\n"


def test_authenticates_with_a_key_held_by_ssh_agent(sshd_server, tmp_path, monkeypatch):
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        env = {**os.environ, "SSH_AUTH_SOCK": str(sock)}
        subprocess.run(
            ["ssh-add", str(sshd_server.client_key)], env=env, check=True, capture_output=True
        )
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        with SSHTransport(
            sshd_server.url, known_hosts=sshd_server.known_hosts, look_for_keys=False
        ) as t:
            assert t.run_remote("echo via-agent").stdout == "via-agent\n"
    finally:
        agent.terminate()
        agent.wait(timeout=10)


def test_authentication_failure_is_one_error_without_prompting(sshd_server, sshd_helpers, tmp_path):
    stranger = tmp_path / "stranger"
    sshd_helpers.make_ed25519_key(stranger, "not-authorized")
    t = SSHTransport(
        sshd_server.url,
        known_hosts=sshd_server.known_hosts,
        key_file=stranger,
        allow_agent=False,
        look_for_keys=False,
    )
    # stdin is not a terminal under pytest, so no password prompt may appear.
    with pytest.raises(TransportError, match=rf"authentication as {sshd_server.user} .* failed"):
        t.run_remote("true")


# ----- remote commands and the watchdog ----------------------------------------------


def test_failing_remote_command_surfaces_its_stderr(ssh):
    result = ssh.run_remote("echo out; echo 'first' >&2; echo 'disk on fire' >&2; exit 7")
    assert result == (7, "out\n", "first\ndisk on fire\n")
    with pytest.raises(TransportError) as info:
        ssh.check_remote("echo 'disk on fire' >&2; exit 7", "check the disk")
    assert str(info.value) == (
        f"check the disk failed on [127.0.0.1]:{ssh.target.port} (exit 7): disk on fire"
    )


def test_failing_agent_command_surfaces_the_agent_error(ssh):
    digest = "ab" * 32
    with pytest.raises(TransportError) as info:
        ssh.agent_json(["store", "commit", digest], "commit")
    assert f"no upload of sha256:{digest} to commit" in str(info.value)
    assert "(exit 2)" in str(info.value)


def test_watchdog_closes_a_hung_step_and_names_it(ssh):
    start = time.monotonic()
    with pytest.raises(TransportError) as info:
        ssh.run_remote("sleep 30", timeout_s=1)
    assert time.monotonic() - start < 5
    assert "remote command `sleep 30`" in str(info.value)
    assert "did not finish within 1 s" in str(info.value)
    # The next step reconnects.
    assert ssh.run_remote("echo again").stdout == "again\n"


def test_watchdog_allows_slow_commands_that_keep_talking(ssh):
    result = ssh.run_remote(
        "for i in 1 2 3 4; do echo $i; sleep 0.4; done", timeout_s=20, idle_timeout_s=1
    )
    assert result.stdout.split() == ["1", "2", "3", "4"]
    with pytest.raises(TransportError, match=r"sleep 5` on .* made no progress for 1 s"):
        ssh.run_remote("echo start; sleep 5", timeout_s=20, idle_timeout_s=1)


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

    url, known_hosts, key, agent, state, blob, digest = sys.argv[1:]

    def progress(done, total):
        print(done, flush=True)
        if done >= total // 2:
            time.sleep(3600)  # hold here until the test kills this process

    t = SSHTransport(url, known_hosts=known_hosts, key_file=key, agent_cmd=agent,
                     state_dir=state, allow_agent=False, look_for_keys=False)
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


def test_qualify_over_ssh_end_to_end_and_verify(ssh, tmp_path, fast_plan):
    model = build_example("micro", tmp_path / "models")
    digest = hashlib.sha256(model.read_bytes()).hexdigest()
    assert ssh.push(model, digest).bytes_sent == model.stat().st_size

    info = ssh.info()
    key = info["key"]
    assert info["public_key_b64"] == key["public_key_b64"]
    assert info["key_fingerprint"] == key["fingerprint"].strip()
    assert info["agent_version"]
    assert {r["name"] for r in info["runtimes"]} >= {"onnxruntime"}
    known = KnownDevices(tmp_path / "known_devices")
    known.trust("sshboard", ssh.address, base64.b64decode(key["public_key_b64"]))

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
    assert report.fingerprint == key["fingerprint"]
    assert report.status in ("passed", "degraded"), report.predicate.get("findings")
    assert report.run_id == ssh.last_run_id
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


def test_cancel_without_a_run_on_this_connection_is_refused(ssh):
    with pytest.raises(TransportError, match="no run in progress"):
        ssh.cancel("20260101T000000Z-abcdef01")
