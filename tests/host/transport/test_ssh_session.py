"""SSHSession against a real OpenSSH sshd on 127.0.0.1 (fixture in tests/conftest.py):
addresses, host keys, authentication, remote commands and the watchdog.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import time

import pytest
from edgequal.host.errors import TransportError, UsageError
from edgequal.host.transport.ssh_options import SSHOptions
from edgequal.host.transport.ssh_session import SSHSession
from edgequal.host.transport.ssh_target import parse_ssh_url, resolve_target

# Starts real processes (agents, sshd, the emulator) for seconds each: the fast loop skips it.
pytestmark = pytest.mark.slow


def ssh_fingerprint(public_key_line: str) -> str:
    """SHA256 fingerprint of an OpenSSH public key line, as ssh-keygen -l prints it."""
    blob = base64.b64decode(public_key_line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


@pytest.fixture
def ssh(sshd_server):
    with SSHSession(sshd_server.url, sshd_server.options(step_timeout_s=20)) as session:
        yield session


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
    t = SSHSession(
        sshd_server.url,
        SSHOptions(known_hosts=empty, key_file=sshd_server.client_key, allow_agent=False),
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
    t = SSHSession(
        sshd_server.url,
        SSHOptions(known_hosts=wrong, key_file=sshd_server.client_key, allow_agent=False),
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
    with SSHSession(
        "ssh://testboard",
        SSHOptions(
            known_hosts=sshd_server.known_hosts,
            ssh_config=config,
            allow_agent=False,
            look_for_keys=False,
        ),
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
        with SSHSession(
            sshd_server.url, SSHOptions(known_hosts=sshd_server.known_hosts, look_for_keys=False)
        ) as t:
            assert t.run_remote("echo via-agent").stdout == "via-agent\n"
    finally:
        agent.terminate()
        agent.wait(timeout=10)


def test_authentication_failure_is_one_error_without_prompting(sshd_server, sshd_helpers, tmp_path):
    stranger = tmp_path / "stranger"
    sshd_helpers.make_ed25519_key(stranger, "not-authorized")
    t = SSHSession(sshd_server.url, sshd_server.options(key_file=stranger))
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
    # A line every 0.6 s for 3 s, longer than its 2.5 s idle limit: with three copies of the
    # suite at once (load about 10) a 1 s limit saw one 0.4 s gap stretch past it, so each
    # gap keeps four times its length in hand.
    result = ssh.run_remote(
        "for i in 1 2 3 4 5; do echo $i; sleep 0.6; done", timeout_s=20, idle_timeout_s=2.5
    )
    assert result.stdout.split() == ["1", "2", "3", "4", "5"]
    with pytest.raises(TransportError, match=r"sleep 8` on .* made no progress for 2.5 s"):
        ssh.run_remote("echo start; sleep 8", timeout_s=20, idle_timeout_s=2.5)
