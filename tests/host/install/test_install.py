"""``install_agent`` / ``agent_status`` against a real sshd on 127.0.0.1.

The "board" is this machine. Its Python already holds the agent's dependencies
(as a Jetson's system onnxruntime would): the board's venv is prepared with a
``.pth`` line that puts the test interpreter's site-packages behind the venv's
own, and install_agent reuses that venv and installs the freshly built wheel
with ``--no-index`` from an (empty) wheelhouse, so nothing is downloaded. One
test lets install_agent create the venv itself, where pip then finds nothing.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import signal
import site
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from edgequal.contract.keys import load_or_create_device_key
from edgequal.contract.signing import MEASURED_STATUSES
from edgequal.host.devices.trust import KnownDevices, default_device_name
from edgequal.host.devices.verify import verify_envelope
from edgequal.host.errors import HostError, TransportError, UsageError
from edgequal.host.examples.catalog import build_example
from edgequal.host.install.agent import agent_status, install_agent
from edgequal.host.install.commands import (
    grpc_address_for,
    listen_address,
    pip_install_command,
    serve_argv,
    systemd_unit,
)
from edgequal.host.install.wheel import build_wheel, repo_root
from edgequal.host.transport.base import QualifyRequest
from edgequal.host.transport.grpc import GrpcTransport

# Starts real processes (agents, sshd, the emulator) for seconds each: the fast loop skips it.
pytestmark = pytest.mark.slow

# ----- pure helpers ------------------------------------------------------------------


def test_listen_address_and_grpc_address():
    assert listen_address("0.0.0.0:50051") == ("0.0.0.0", 50051)
    assert listen_address("[::]:7441") == ("::", 7441)
    assert grpc_address_for("0.0.0.0:50051", "bench-pi5") == "grpc://bench-pi5:50051"
    assert grpc_address_for("[::]:7441", "fe80::2") == "grpc://[fe80::2]:7441"
    assert grpc_address_for("10.0.0.7:9000", "bench-pi5") == "grpc://10.0.0.7:9000"
    for bad in ("50051", "host:", "host:0", "host:70000"):
        with pytest.raises(UsageError):
            listen_address(bad)


def test_default_device_name():
    assert default_device_name("bench-pi5") == "bench-pi5"
    assert default_device_name("127.0.0.1") == "127.0.0.1"
    assert default_device_name("fe80::1") == "fe80--1"
    assert default_device_name("_odd") == "odd"


def test_serve_argv_and_systemd_unit():
    argv = serve_argv("/opt/eq/venv", "0.0.0.0:50051", "/opt/eq/token", "/var/lib/eq state")
    assert argv == [
        "/opt/eq/venv/bin/edgequal-agent",
        "--state-dir",
        "/var/lib/eq state",
        "serve",
        "--listen",
        "0.0.0.0:50051",
        "--token-file",
        "/opt/eq/token",
    ]
    unit = systemd_unit(argv, user_unit=False)
    assert (
        'ExecStart=/opt/eq/venv/bin/edgequal-agent --state-dir "/var/lib/eq state" serve '
        "--listen 0.0.0.0:50051 --token-file /opt/eq/token\n"
    ) in unit
    assert "WantedBy=multi-user.target\n" in unit
    assert "OOMScoreAdjust=-500\n" in unit
    user = systemd_unit(argv[:1] + argv[3:], user_unit=True)
    assert "WantedBy=default.target\n" in user
    assert "OOMScoreAdjust" not in user


def test_pip_install_commands():
    first, second = pip_install_command(
        "/p/venv", "/p/wheels/edgequal-0.1.0-py3-none-any.whl", ("onnx", "litert"), "/p/wh"
    )
    assert first == (
        "PIP_CONFIG_FILE=/dev/null /p/venv/bin/python -m pip install --disable-pip-version-check --no-input --no-index "
        "--find-links /p/wh --upgrade '/p/wheels/edgequal-0.1.0-py3-none-any.whl[onnx,litert]'"
    )
    assert second.endswith("--no-deps --force-reinstall /p/wheels/edgequal-0.1.0-py3-none-any.whl")
    first, _ = pip_install_command("/p/venv", "/w.whl", (), None)
    assert first.startswith("/p/venv/bin/python -m pip install")
    assert "--no-index" not in first and first.endswith("--upgrade /w.whl")


def test_install_rejects_bad_arguments(tmp_path):
    with pytest.raises(UsageError, match="unknown service"):
        install_agent("ssh://x@127.0.0.1", service="upstart")
    with pytest.raises(UsageError, match="unknown extra"):
        install_agent("ssh://x@127.0.0.1", extras=("cuda",))
    with pytest.raises(UsageError, match="not a directory"):
        install_agent("ssh://x@127.0.0.1", wheelhouse=tmp_path / "missing")


# ----- the wheel ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def test_build_wheel_holds_agent_and_host_and_leaves_checkout_clean(wheel):
    root = repo_root()
    assert (root / "pyproject.toml").is_file()
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "edgequal/agent/cli.py" in names
    assert "edgequal/agent/service/store.py" in names
    assert "edgequal/host/transport/ssh.py" in names
    assert not any(n.startswith("tests/") for n in names)
    assert not (root / "build").exists()
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert (
        "edgequal-agent = edgequal.agent.cli:main"
        in zipfile.ZipFile(wheel).read(entry_points).decode()
    )
    # The library package (library/ in the checkout) and its pytest plugin travel too.
    assert {"edgequal/__init__.py", "edgequal/pytest_plugin.py", "edgequal/device.py"} <= names
    assert "edgequal = edgequal.pytest_plugin" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_installed_wheel_imports_the_agent_without_host_modules(wheel, tmp_path):
    """As installed on a board (not the editable checkout): ``edgequal`` is a plain package
    whose names load lazily, so the agent's imports pull in no host module."""
    site_dir = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site_dir)
    code = (
        "import sys, edgequal, edgequal.agent.cli, edgequal.agent.service.server\n"
        "host = [m for m in sys.modules if m.startswith('edgequal.host')]\n"
        "print(edgequal.__file__, edgequal.agent.__file__, len(host), edgequal.connect.__module__)"
    )
    env = {**os.environ, "PYTHONPATH": str(site_dir)}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    ).stdout.split()
    assert out[0] == str(site_dir / "edgequal" / "__init__.py")
    assert out[1] == str(site_dir / "edgequal" / "agent" / "__init__.py")
    assert out[2:] == ["0", "edgequal.device"]


# ----- install on the board ----------------------------------------------------------------


def _prepare_board_venv(venv: Path) -> None:
    """A venv whose interpreter already sees the agent's dependencies (behind its own packages).

    pip, too, comes from those packages (as Debian's python3-pip does for a venv
    with system site packages), which saves the slow ensurepip step.
    """
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60
    )
    purelib = next((venv / "lib").glob("python3*/site-packages"))
    (purelib / "board-system-packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")


def _stop_agent(prefix: Path) -> None:
    pid_file = prefix / "agent.pid"
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text())
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def board(tmp_path, sshd_helpers):
    prefix = tmp_path / "board" / "edgequal"
    prefix.mkdir(parents=True)
    yield {
        "prefix": prefix,
        "state": tmp_path / "board" / "state",
        "wheelhouse": (tmp_path / "wheelhouse"),
        "known": KnownDevices(tmp_path / "host-config" / "known_devices"),
        "port": sshd_helpers.free_port(),
    }
    _stop_agent(prefix)


def _install(sshd_server, board, wheel, **overrides):
    board["wheelhouse"].mkdir(exist_ok=True)
    kwargs = dict(
        wheelhouse=board["wheelhouse"],
        service="background",
        listen=f"127.0.0.1:{board['port']}",
        prefix=str(board["prefix"]),
        python=sys.executable,
        known_devices=board["known"],
        device_name="bench",
        ssh_options=sshd_server.options(),
        state_dir=str(board["state"]),
        wheel=wheel,
    )
    kwargs.update(overrides)
    return install_agent(sshd_server.url, **kwargs)


def test_install_start_qualify_over_grpc_and_reinstall_keeps_key(
    sshd_server, board, wheel, tmp_path, fast_plan
):
    prefix, state, known = board["prefix"], board["state"], board["known"]
    _prepare_board_venv(prefix / "venv")
    steps = []
    first = _install(sshd_server, board, wheel, on_step=steps.append)

    # Installed from the wheel into the board's venv, not run from this checkout.
    installed = next((prefix / "venv" / "lib").glob("python3*/site-packages/edgequal/agent/cli.py"))
    assert installed.is_file()
    assert first.agent_version == "0.1.0"
    assert (first.service, first.running, first.upgraded) == ("background", True, True)
    assert first.grpc_address == f"grpc://127.0.0.1:{board['port']}"
    assert first.venv == str(prefix / "venv")
    assert any("pinned" in s for s in steps)

    # The token: random, 0600 on the board and here, the same on both sides.
    remote_token = prefix / "token"
    host_token = Path(first.token_file)
    assert _mode(remote_token) == 0o600 and _mode(host_token) == 0o600
    token = remote_token.read_text().strip()
    assert len(token) >= 40 and host_token.read_text().strip() == token

    # The pinned key is the device key in the agent's state dir.
    device_key = load_or_create_device_key(state)
    entry = known.get("bench")
    assert entry.public_key_raw == device_key.public_key_raw()
    assert entry.address == first.grpc_address
    assert entry.token_file == str(host_token)
    assert first.fingerprint == device_key.fingerprint()
    assert "pinned as 'bench'" in str(first)

    # Qualify over gRPC with that token, and verify against the pinned key.
    model = build_example("micro", tmp_path / "models")
    digest = hashlib.sha256(model.read_bytes()).hexdigest()
    nonce = secrets.token_hex(16)
    grpc = GrpcTransport(first.grpc_address, token=token)
    try:
        assert grpc.push(model, digest).bytes_sent == model.stat().st_size
        envelope = grpc.qualify(
            QualifyRequest(
                model_digest=digest, plan=fast_plan, nonce=nonce, model_name="micro.onnx"
            ),
            lambda event: None,
        )
    finally:
        grpc.close()
    report = verify_envelope(
        envelope, known=known, device="bench", expected_nonce=nonce, artifacts=[model]
    )
    assert report.fingerprint == first.fingerprint
    assert report.status in MEASURED_STATUSES, report.predicate.get("findings")
    stranger = GrpcTransport(first.grpc_address, token="wrong-" + token)
    try:
        with pytest.raises(HostError):
            stranger.info()
    finally:
        stranger.close()

    # Status over SSH, and by name (over gRPC with the pinned token).
    status = agent_status(
        sshd_server.url,
        ssh_options=sshd_server.options(),
        known_devices=known,
        prefix=str(prefix),
        state_dir=str(state),
    )
    assert status["agent_version"] == "0.1.0"
    assert status["key_fingerprint"] == first.fingerprint
    assert status["pinned_as"] == "bench"
    assert status["service"]["kind"] == "background" and status["service"]["running"] is True
    old_pid = status["service"]["pid"]
    assert old_pid == int((prefix / "agent.pid").read_text())
    assert status["runtimes"]["onnxruntime"][0].isdigit()
    by_name = agent_status("bench", known_devices=known)
    assert by_name["service"]["running"] is True
    assert by_name["key_fingerprint"] == first.fingerprint
    assert by_name["key_matches_pin"] is True

    # A second install upgrades in place: same venv, key, token and pin; a new process.
    second = _install(sshd_server, board, wheel)
    assert second.upgraded and second.running
    assert second.fingerprint == first.fingerprint
    assert remote_token.read_text().strip() == token
    assert known.get("bench").public_key_raw == device_key.public_key_raw()
    new_pid = int((prefix / "agent.pid").read_text())
    assert new_pid != old_pid
    with pytest.raises(ProcessLookupError):
        os.kill(old_pid, 0)
    grpc = GrpcTransport(second.grpc_address, token=token)
    try:
        assert grpc.info()["key_fingerprint"] == first.fingerprint
    finally:
        grpc.close()


def test_install_without_dependencies_surfaces_pips_error(sshd_server, board, wheel):
    # A fresh venv and an empty wheelhouse: pip has nothing to install numpy & co. from.
    with pytest.raises(TransportError) as info:
        _install(sshd_server, board, wheel)
    message = str(info.value)
    assert message.startswith("pip install failed on [127.0.0.1]:")
    assert "No matching distribution found for" in message
    assert "wheelhouse" in info.value.hint
    assert (board["prefix"] / "venv" / "bin" / "python").exists()
    assert board["known"].get("bench") is None


def test_install_refuses_unknown_host_key(sshd_server, board, wheel, tmp_path):
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    with pytest.raises(TransportError, match="is not in"):
        _install(sshd_server, board, wheel, ssh_options=sshd_server.options(known_hosts=empty))
    assert not (board["prefix"] / "wheels").exists()


def test_status_of_unknown_name_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="unknown device 'nope'"):
        agent_status("nope", known_devices=KnownDevices(tmp_path / "known_devices"))


def test_status_reports_a_stopped_background_agent(sshd_server, board, wheel):
    _prepare_board_venv(board["prefix"] / "venv")
    result = _install(sshd_server, board, wheel, service="none")
    assert (result.service, result.running) == ("not started", False)
    assert result.start_command.endswith(
        f"serve --listen 127.0.0.1:{board['port']} --token-file {board['prefix']}/token"
    )
    assert "start it on the board with" in str(result)
    status = agent_status(
        sshd_server.url,
        ssh_options=sshd_server.options(),
        known_devices=board["known"],
        prefix=str(board["prefix"]),
        state_dir=str(board["state"]),
    )
    assert status["service"] == {"kind": "none", "running": False}
    assert status["key_fingerprint"] == result.fingerprint
    key_b64 = base64.b64encode(load_or_create_device_key(board["state"]).public_key_raw()).decode()
    assert status["public_key_b64"] == key_b64
