"""Network faults between host and agent, in a network namespace the test creates.

Each test builds its own namespace and veth pair (``ip netns add``, ``ip link add
… type veth``), starts a real ``edgequal-agent serve`` inside the namespace on
the pair's address (with a token, as off loopback it must), and drives it from
the host side with the real gRPC transport. Faults are real: packet loss on both
ends of the pair (``tc qdisc … netem loss 30%``) and the link taken down
(``ip link set … down``) in the middle of an upload and of a run's stream.

- An upload cut off resumes from the agent's last committed offset: only the
  rest crosses the wire, and the stored artifact has the right digest.
- A run whose stream the network cut goes on on the device; its signed report
  is fetched by run id afterwards and verifies.

Everything is bounded in time, and the namespace, the veth pair and the agent
are removed in a ``finally``. The tests skip only where the kernel refuses
network namespaces (``ip netns add`` fails), saying so. Where the kernel has no
netem qdisc, loss comes from a token-bucket qdisc with a queue too short for
the sender (it drops what overflows), and a warning says so.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import subprocess
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from edgequal.contract.keys import load_or_create_device_key
from edgequal.contract.nonce import new_nonce
from edgequal.contract.signing import MEASURED_STATUSES
from edgequal.host.devices.trust import KnownDevices
from edgequal.host.devices.verify import verify_envelope
from edgequal.host.errors import HostError, TransportError
from edgequal.host.transport import QualifyRequest
from edgequal.host.transport import grpc as grpc_transport
from edgequal.host.transport.grpc import GrpcTransport

pytestmark = pytest.mark.slow

LOSS = "30%"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc


def _tc(*args: str, netns: str | None = None) -> subprocess.CompletedProcess:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    return subprocess.run([*prefix, "tc", *args], capture_output=True, text=True, timeout=30)


@dataclass
class Link:
    """A veth pair from the host to a namespace: the agent's side is ``agent_if`` in ``ns``."""

    ns: str
    host_if: str
    agent_if: str
    host_ip: str
    agent_ip: str
    impairment: str = ""
    _impaired: list = field(default_factory=list)

    def impair(self) -> str:
        """Packet loss on both ends; returns what was applied (netem, or the fallback)."""
        applied = []
        for dev, ns in ((self.host_if, None), (self.agent_if, self.ns)):
            proc = _tc("qdisc", "replace", "dev", dev, "root", "netem", "loss", LOSS, netns=ns)
            if proc.returncode == 0:
                applied.append(f"netem loss {LOSS}")
            else:
                # No netem in this kernel: a token bucket whose queue overflows drops packets.
                fallback = ["tbf", "rate", "8mbit", "burst", "8kb", "limit", "12kb"]
                proc2 = _tc("qdisc", "replace", "dev", dev, "root", *fallback, netns=ns)
                if proc2.returncode != 0:
                    raise RuntimeError(f"tc refused both netem and tbf: {proc2.stderr.strip()}")
                applied.append(f"tbf {' '.join(fallback[1:])} ({proc.stderr.strip()})")
            self._impaired.append((dev, ns))
        self.impairment = "; ".join(sorted(set(applied)))
        if "netem" not in self.impairment:
            warnings.warn(
                f"this kernel has no netem qdisc: packet loss comes from {self.impairment}",
                stacklevel=2,
            )
        return self.impairment

    def drops(self) -> int:
        """Packets the impairment dropped so far, on both ends."""
        total = 0
        for dev, ns in self._impaired:
            out = _tc("-s", "qdisc", "show", "dev", dev, netns=ns).stdout
            total += sum(int(n) for n in re.findall(r"dropped (\d+)", out))
        return total

    def clear(self) -> None:
        """Remove the loss."""
        for dev, ns in self._impaired:
            _tc("qdisc", "del", "dev", dev, "root", netns=ns)
        self._impaired.clear()

    def open_connections(self, port: int) -> int:
        """TCP connections the agent still holds on ``port`` (established or half-closed)."""
        out = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                self.ns,
                "ss",
                "-Htn",
                "state",
                "connected",
                "sport",
                "=",
                f":{port}",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        return len([line for line in out.splitlines() if line.strip()])

    def down(self) -> None:
        """Take the link down on the host's side: nothing crosses until :meth:`up`."""
        _ip("link", "set", self.host_if, "down")

    def up(self) -> None:
        """Bring the link back, with its address and route."""
        _ip("link", "set", self.host_if, "up")


@pytest.fixture
def link():
    """A fresh namespace and veth pair; skipped only where the kernel refuses namespaces."""
    if shutil.which("ip") is None:
        reason = "ip (iproute2) not found: install iproute2 to run the network-fault tests"
        if os.environ.get("CI"):
            pytest.fail(reason + " ($CI is set, and .ci/run installs it)")
        pytest.skip(reason)
    tag = secrets.token_hex(3)
    ns, host_if, agent_if = f"eqnf-{tag}", f"eqh{tag}", f"eqa{tag}"
    proc = _ip("netns", "add", ns, check=False)
    if proc.returncode != 0:
        pytest.skip(
            f"the kernel refuses network namespaces here (ip netns add: {proc.stderr.strip()})"
        )
    subnet = f"10.{200 + secrets.randbelow(50)}.{secrets.randbelow(250)}"
    lk = Link(ns, host_if, agent_if, f"{subnet}.1", f"{subnet}.2")
    try:
        veth = _ip("link", "add", host_if, "type", "veth", "peer", "name", agent_if, check=False)
        if veth.returncode != 0:
            pytest.skip(
                "the kernel refuses a veth pair into a namespace here "
                f"(ip link add … type veth: {veth.stderr.strip()})"
            )
        _ip("link", "set", agent_if, "netns", ns)
        _ip("addr", "add", f"{lk.host_ip}/30", "dev", host_if)
        _ip("link", "set", host_if, "up")
        _ip("-n", ns, "addr", "add", f"{lk.agent_ip}/30", "dev", agent_if)
        _ip("-n", ns, "link", "set", agent_if, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        yield lk
    finally:
        lk.clear()
        _ip("netns", "del", ns, check=False)  # takes the namespace's end of the pair with it
        _ip("link", "del", host_if, check=False)


@dataclass
class Agent:
    """A real agent serving inside the link's namespace."""

    proc: subprocess.Popen
    address: str
    port: int
    token: str
    state: Path
    known: KnownDevices


@pytest.fixture
def agent(link, tmp_path, local_agents):
    state = tmp_path / "agent-state"
    key = load_or_create_device_key(state)
    token = secrets.token_urlsafe(24)
    token_file = tmp_path / "token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    # In the namespace, on its end of the link; its own session, so stopping it (SIGTERM,
    # then SIGKILL after 10 s) takes its workers too.
    served = local_agents.serve(
        state,
        token_file=token_file,
        host=link.agent_ip,
        wrapper=("ip", "netns", "exec", link.ns),
        new_session=True,
    )
    try:
        address = f"{link.agent_ip}:{served.port}"
        known = KnownDevices(tmp_path / "known_devices")
        known.trust("board", f"grpc://{address}", key.public_key_raw())
        yield Agent(served.proc, address, served.port, token, state, known)
    finally:
        served.stop()


def _wait_until(predicate, timeout_s: float, what: str, interval_s: float = 0.05):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"gave up after {timeout_s:g} s waiting for {what}"
        time.sleep(interval_s)


def _settled_size(path: Path, quiet_s: float = 1.0, timeout_s: float = 30) -> int:
    """The file's size once it has not changed for ``quiet_s`` (a cut stream may still drain)."""
    deadline = time.monotonic() + timeout_s
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        size = path.stat().st_size if path.exists() else 0
        if size != last:
            last, since = size, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return size
        time.sleep(0.05)
    return last


def test_an_upload_cut_by_loss_and_a_dead_link_resumes_from_the_committed_offset(
    link, agent, tmp_path, monkeypatch
):
    size = 8 * 1024 * 1024
    artifact = tmp_path / "model.onnx"
    artifact.write_bytes(os.urandom(size))
    digest = hashlib.sha256(artifact.read_bytes()).hexdigest()
    partial = agent.state / "artifacts" / "partial" / f"{digest}.part"
    # A push's deadline is timeout + size / rate: a fast floor makes a dead link end it soon
    # (5 + 2 s; the first 512 KiB cross the lossy link in under a second).
    monkeypatch.setattr(grpc_transport, "MIN_PUSH_RATE_BYTES_PER_S", 4 * 1024 * 1024)
    first = GrpcTransport(agent.address, token=agent.token, timeout_s=5, chunk_bytes=256 * 1024)
    applied = link.impair()
    outcome: dict = {}

    def push() -> None:
        try:
            outcome["result"] = first.push(artifact, digest)
        except HostError as e:
            outcome["error"] = e

    pusher = threading.Thread(target=push, daemon=True)
    try:
        pusher.start()
        _wait_until(
            lambda: (
                (partial.exists() and partial.stat().st_size >= 512 * 1024) or not pusher.is_alive()
            ),
            60,
            "the first 512 KiB to arrive through the lossy link",
        )
        link.down()
        pusher.join(60)
        assert not pusher.is_alive(), "the push did not end after the link went down"
        assert "result" not in outcome, f"the push finished before the link went down ({applied})"
        assert isinstance(outcome["error"], TransportError), outcome
    finally:
        link.up()
        first.close()
    assert link.drops() > 0, f"the lossy link dropped nothing ({applied})"
    link.clear()
    # What the cut connection still had in flight drains in once the link is back (TCP
    # retransmits it); when the agent has let that connection go, its offset stands.
    _wait_until(lambda: link.open_connections(agent.port) == 0, 120, "the cut connection to end")
    held = _settled_size(partial)
    assert 0 < held < size
    monkeypatch.undo()
    with GrpcTransport(agent.address, token=agent.token, timeout_s=30) as again:
        committed, complete = again.stat(digest)
        assert (committed, complete) == (held, False)
        result = again.push(artifact, digest)
        assert result.bytes_sent == size - committed, "only the rest crosses the wire"
        assert again.stat(digest) == (size, True)
        assert again.info()["busy"] is False
    stored = agent.state / "artifacts" / "sha256" / digest
    assert hashlib.sha256(stored.read_bytes()).hexdigest() == digest
    assert not partial.exists()


def test_a_run_whose_stream_the_network_cut_is_fetched_by_run_id(
    link, agent, example_models, golden_sets, quick_plan
):
    model, golden = example_models["classifier"], golden_sets["classifier"]
    # The stream ends at this deadline when nothing else ends it (it often ends sooner: a
    # connection timeout once the host has data in flight on the dead link). With the link
    # up the run would end in about 4 s (2 s of latency; under 6 s at a load of 6 on two
    # cores), inside it, so a stream that ends without the report shows the cut, not the
    # deadline.
    transport = GrpcTransport(agent.address, token=agent.token, timeout_s=10, qualify_timeout_s=11)
    digests = {}
    for path in (model, golden):
        digests[path] = hashlib.sha256(path.read_bytes()).hexdigest()
        transport.push(path, digests[path])
    applied = link.impair()
    nonce = new_nonce()
    request = QualifyRequest(
        model_digest=digests[model],
        golden_digest=digests[golden],
        plan=quick_plan(latency_min_s=2.0),
        nonce=nonce,
        model_name=model.name,
        golden_name=golden.name,
    )
    measuring = threading.Event()
    outcome: dict = {}

    def on_event(event: dict) -> None:
        if event.get("type") == "phase" and event.get("phase") == "latency":
            measuring.set()

    def run() -> None:
        try:
            outcome["envelope"] = transport.qualify(request, on_event)
        except HostError as e:
            outcome["error"] = e
        measuring.set()

    runner = threading.Thread(target=run, daemon=True)
    try:
        runner.start()
        assert measuring.wait(120), "the run did not start measuring"
        link.down()
        runner.join(90)
        assert not runner.is_alive(), "the host's stream did not end after the link went down"
    finally:
        link.up()
    link.clear()
    run_id = transport.last_run_id
    assert run_id, f"the agent never accepted the run ({outcome}, {applied})"
    assert "envelope" not in outcome, "the stream survived a link that was down"
    assert isinstance(outcome["error"], TransportError)

    def report():
        try:
            return transport.get_report(run_id)
        except HostError as e:  # still in progress, or the link still coming back
            if "still in progress" in str(e) or isinstance(e, TransportError):
                return None
            raise

    envelope = _wait_until(report, 120, f"the report of run {run_id}", interval_s=0.5)
    assert transport.info()["busy"] is False  # the device is free again and answering
    transport.close()
    verified = verify_envelope(
        envelope,
        known=agent.known,
        device="board",
        expected_nonce=nonce,
        expected_run_id=run_id,
        artifacts=[model, golden],
    )
    assert verified.status in MEASURED_STATUSES
    assert verified.predicate["results"]["latency"]["per_shape"][0]["summary"]["count"] >= 50
