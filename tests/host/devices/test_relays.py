"""An attacker between the host and a real device: relays, impostors, re-encoded reports.

Real agents (``edgequal-agent serve`` on 127.0.0.1: one with a token, one with server TLS
and a token, one with mutual TLS) are shared by the module; the attackers are a relay
that forwards every call to a real agent (and may change a request on its way), and a
stand-in that answers ``Prove`` with a key of its own.
"""

from __future__ import annotations

import base64
import json
import threading
from concurrent import futures

import grpc
import pytest
from edgequal.cli.main import main as edgequal_main
from edgequal.contract.identity import prove_identity
from edgequal.contract.keys import DeviceKey
from edgequal.contract.signing import MEASURED_STATUSES, build_statement, sign_envelope
from edgequal.host.devices.nonces import NonceLedger
from edgequal.host.devices.trust import KnownDevices
from edgequal.host.devices.verify import check_answers_request, verify_envelope
from edgequal.host.errors import VerificationFailed
from edgequal.protos import edgequal_v1_pb2 as pb
from edgequal.protos import edgequal_v1_pb2_grpc as pb_grpc

TOKEN = "relay-tests-token-" + "e" * 24
UNARY = ("Prove", "Info", "Stat", "GetReport", "Cancel", "AcquireLease", "RenewLease")
UNARY += ("ReleaseLease",)


class Relay(pb_grpc.AgentServicer):
    """Forwards every call to ``upstream`` (a channel to a real agent) and records each
    call's name and metadata; ``tamper_qualify`` may change a Qualify request on its way."""

    def __init__(self, upstream: grpc.Channel):
        self.stub = pb_grpc.AgentStub(upstream)
        self.calls: list[tuple[str, dict]] = []
        self.lock = threading.Lock()
        self.tamper_qualify = None

    def _forward_metadata(self, name, context):
        metadata = tuple(context.invocation_metadata())
        with self.lock:
            self.calls.append((name, dict(metadata)))
        return tuple((k, v) for k, v in metadata if k == "authorization")

    def __getattribute__(self, name):
        if name in UNARY:

            def unary(request, context):
                metadata = self._forward_metadata(name, context)
                try:
                    return getattr(self.stub, name)(request, metadata=metadata, timeout=30)
                except grpc.RpcError as e:
                    context.abort(e.code(), e.details())

            return unary
        return super().__getattribute__(name)

    def Push(self, request_iterator, context):
        metadata = self._forward_metadata("Push", context)
        try:
            return self.stub.Push(request_iterator, metadata=metadata, timeout=60)
        except grpc.RpcError as e:
            context.abort(e.code(), e.details())

    def Qualify(self, request, context):
        metadata = self._forward_metadata("Qualify", context)
        if self.tamper_qualify is not None:
            request = self.tamper_qualify(request)
        try:
            yield from self.stub.Qualify(request, metadata=metadata, timeout=120)
        except grpc.RpcError as e:
            context.abort(e.code(), e.details())

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


@pytest.fixture(scope="module")
def pki(make_pki, tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def agents(local_agents, pki, tmp_path_factory):
    """``plain`` (token), ``tls`` (server TLS and token), ``mtls`` (mutual TLS): real agents."""
    base = tmp_path_factory.mktemp("relay-agents")
    token_file = base / "agent.token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    cert = ["--tls-cert", str(pki["server_cert"]), "--tls-key", str(pki["server_key"])]
    args = {
        "plain": ["--token-file", str(token_file)],
        "tls": [*cert, "--token-file", str(token_file)],
        "mtls": [*cert, "--client-ca", str(pki["ca"])],
    }
    started = local_agents.start_agents(base, list(args), args=args, debug=True)
    try:
        yield {**dict(zip(args, started)), "token_file": token_file}
    finally:
        for agent in started:
            agent.stop()


@pytest.fixture
def relay(serve_servicer):
    """``relay(upstream_address, credentials=None)``: a plain-gRPC relay on 127.0.0.1 in
    front of a real agent (over TLS with ``credentials``); returns (address, Relay)."""
    channels = []

    def start(upstream: str, credentials=None):
        target = upstream.removeprefix("grpc://")
        if credentials is None:
            channel = grpc.insecure_channel(target)
        else:
            channel = grpc.secure_channel(target, credentials)
        channels.append(channel)
        servicer = Relay(channel)
        return serve_servicer(servicer, workers=8), servicer

    yield start
    for channel in channels:
        channel.close()


def _tls_args(pki, mutual: bool = False) -> list[str]:
    args = ["--tls-ca", str(pki["ca"])]
    if mutual:
        args += ["--tls-cert", str(pki["client_cert"]), "--tls-key", str(pki["client_key"])]
    return args


def _impostor(calls: list):
    """A stand-in agent on 127.0.0.1 that proves a key of its own and records every call."""
    own = DeviceKey.generate()

    class Impostor(pb_grpc.AgentServicer):
        def Prove(self, request, context):
            calls.append(("Prove", dict(context.invocation_metadata())))
            return pb.ProveResponse(
                public_key_raw=own.public_key_raw(),
                signature=prove_identity(own, bytes(request.challenge)),
            )

        def Info(self, request, context):
            calls.append(("Info", dict(context.invocation_metadata())))
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "impostor")

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_AgentServicer_to_server(Impostor(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"grpc://127.0.0.1:{port}", own


@pytest.mark.slow  # the module's three real agents (about 2 CPU-s)
def test_trusting_a_pinned_name_again_proves_the_pinned_key_before_the_token_leaves(agents, capsys):
    plain, token_file = agents["plain"], agents["token_file"]
    argv = ["devices", "trust", "bench", plain.address, "--token-file", str(token_file)]
    assert edgequal_main(argv) == 0
    pinned = KnownDevices().get("bench")
    calls: list = []
    server, address, own = _impostor(calls)
    try:
        # The same name, an impostor answering (a new address, or the old one taken over).
        rc = edgequal_main(["devices", "trust", "bench", address, "--token-file", str(token_file)])
        err = capsys.readouterr().err
        assert rc == 1
        assert "device identity changed" in err and pinned.fingerprint in err
        assert [name for name, _ in calls] == ["Prove"]
        assert all("authorization" not in md for _, md in calls)
        assert KnownDevices().get("bench") == pinned
        # --replace-key needs the new key's fingerprint, confirmed out of band ...
        rc = edgequal_main(["devices", "trust", "bench", address, "--replace-key"])
        assert rc == 2 and "--replace-key needs --fingerprint" in capsys.readouterr().err
        assert [name for name, _ in calls] == ["Prove"]  # refused before connecting
        rc = edgequal_main(
            ["devices", "trust", "bench", address, "--replace-key"]
            + ["--fingerprint", pinned.fingerprint]  # the old key's: not what this agent holds
        )
        assert rc == 2 and "not the expected" in capsys.readouterr().err
        assert [name for name, _ in calls] == ["Prove", "Prove"]
        assert all("authorization" not in md for _, md in calls)
        assert KnownDevices().get("bench") == pinned
        # ... and with it, the new key is pinned once the token is accepted.
        rc = edgequal_main(
            ["devices", "trust", "bench", address, "--replace-key", "--token-file"]
            + [str(token_file), "--fingerprint", own.fingerprint()]
        )
        assert rc == 3  # the impostor's Info refuses: nothing pinned
        capsys.readouterr()
        assert calls[-1] == ("Info", calls[-1][1])
        assert calls[-1][1]["authorization"] == f"Bearer {TOKEN}"
        assert KnownDevices().get("bench") == pinned
    finally:
        server.stop(0)
    # The device itself, trusted again at its address: the pinned key proved, then the token.
    assert edgequal_main(["devices", "trust", "bench", plain.address]) == 0
    assert KnownDevices().get("bench") == pinned  # its token file kept


@pytest.mark.slow  # the module's three real agents (about 2 CPU-s)
def test_an_unpinned_address_relaying_a_tls_device_gets_no_token_and_is_not_recorded(
    agents, relay, pki, example_models, capsys
):
    agent, token_file = agents["tls"], agents["token_file"]
    argv = ["devices", "trust", "lab-tls", agent.address, "--token-file", str(token_file)]
    assert edgequal_main([*argv, *_tls_args(pki)]) == 0
    pinned = KnownDevices().get("lab-tls")
    assert pinned.tls == {"tls_ca": str(pki["ca"].resolve())}
    trusted_log = len(agent.log())
    upstream = grpc.ssl_channel_credentials(root_certificates=pki["ca"].read_bytes())
    address, servicer = relay(agent.address, upstream)

    # The relay forwards Prove to the device over TLS, so it proves the device's key.
    for argv in (
        ["qualify", str(example_models["micro"]), "--device", address],
        ["runs", "list", "--device", address],
        ["agent", "status", address],
    ):
        rc = edgequal_main(argv)
        err = capsys.readouterr().err
        assert rc == 1, err
        assert "pinned with TLS" in err and "nothing was sent" in err
    assert set(servicer.names()) == {"Prove"}
    assert all("authorization" not in md for _, md in servicer.calls)
    assert KnownDevices().get("lab-tls") == pinned  # no relay address in also_at
    assert "authorized" not in agent.log()[trusted_log:]  # no call carried the token

    # The device's own address without TLS flags: its TLS applies (not plaintext, not refused).
    assert edgequal_main(["runs", "list", "--device", agent.address]) == 0
    assert "Runs on lab-tls" in capsys.readouterr().out
    # Trusting it again at an address that proves its key over its TLS records that address.
    localhost = agent.address.replace("127.0.0.1", "localhost")
    assert edgequal_main(["devices", "trust", "lab-tls", localhost]) == 0
    entry = KnownDevices().get("lab-tls")
    assert entry.addresses == [localhost, agent.address] and entry.tls == pinned.tls


@pytest.mark.slow  # the module's three real agents (about 2 CPU-s)
def test_agent_status_of_a_mutual_tls_device_by_name(agents, pki, capsys):
    agent = agents["mtls"]
    argv = ["devices", "trust", "lab-mtls", agent.address, *_tls_args(pki, mutual=True)]
    assert edgequal_main(argv) == 0
    capsys.readouterr()
    assert edgequal_main(["agent", "status", "lab-mtls"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["service"]["running"] is True and status["service"]["busy"] is False
    assert status["pinned_as"] == "lab-mtls" and status["key_matches_pin"] is True
    assert status["key_fingerprint"] == KnownDevices().get("lab-mtls").fingerprint
    assert status["address"] == agent.address


@pytest.fixture(scope="module")
def honest_report(agents, tmp_path_factory, example_models):
    """One qualification through the CLI on the plain agent (trusted as ``bench-r``): its
    report file and the config dir whose nonce ledger holds it."""
    import os

    base = tmp_path_factory.mktemp("honest")
    old = os.environ.get("EDGEQUAL_CONFIG_DIR")
    os.environ["EDGEQUAL_CONFIG_DIR"] = str(base / "config")
    try:
        plain, token_file = agents["plain"], agents["token_file"]
        argv = ["devices", "trust", "bench-r", plain.address, "--token-file", str(token_file)]
        assert edgequal_main(argv) == 0
        report = base / "honest.report.json"
        rc = edgequal_main(
            ["qualify", str(example_models["micro"]), "--device", "bench-r", "--sustain", "0"]
            + ["--cold-runs", "1", "--latency", "0.2s", "-o", str(report)]
        )
        assert rc in (0, 1)
    finally:
        if old is None:
            os.environ.pop("EDGEQUAL_CONFIG_DIR")
        else:
            os.environ["EDGEQUAL_CONFIG_DIR"] = old
    return {"path": report, "config": base / "config"}


def _reencoded(envelope: bytes) -> list[bytes]:
    """The same signed report, encoded three other ways DSSE verifiers accept."""
    env = json.loads(envelope)
    payload = base64.b64decode(env["payload"])
    urlsafe = {**env, "payload": base64.urlsafe_b64encode(payload).decode().rstrip("=")}
    other_hint = {**env, "signatures": [{**env["signatures"][0], "keyid": "0" * 64}]}
    stray = {"keyid": "ab" * 32, "sig": base64.b64encode(b"\x01" * 64).decode()}
    extra_sig = {**env, "signatures": [stray, *env["signatures"]]}
    return [json.dumps(e).encode() for e in (urlsafe, other_hint, extra_sig)]


@pytest.mark.slow
def test_a_reencoded_envelope_of_an_accepted_report_is_not_a_replay(
    honest_report, monkeypatch, tmp_path, capsys
):
    monkeypatch.setenv("EDGEQUAL_CONFIG_DIR", str(honest_report["config"]))
    envelope = honest_report["path"].read_bytes()
    verified = verify_envelope(envelope, known=KnownDevices(), device="bench-r")
    assert verified.status in MEASURED_STATUSES
    assert NonceLedger().check(verified.nonce, verified.run_id, envelope) is True
    for i, other in enumerate(_reencoded(envelope)):
        assert other != envelope
        path = tmp_path / f"re{i}.json"
        path.write_bytes(other)
        rc = edgequal_main(["verify", str(path), "--device", "bench-r"])
        out, err = capsys.readouterr()
        assert rc == 0, err
        assert f"run {verified.run_id}" in out and "nonce issued by this host" in out
    # Another statement under this nonce is still a replay, however it is encoded.
    changed = {**verified.predicate, "status": "failed", "reason": "another report"}
    forged = sign_envelope(DeviceKey.generate(), build_statement(verified.subjects, changed))
    with pytest.raises(VerificationFailed, match="replayed nonce"):
        NonceLedger().check(verified.nonce, verified.run_id, forged)


@pytest.mark.slow
def test_a_relay_that_drops_the_sustained_phase_gets_its_report_refused(
    agents, relay, example_models, tmp_path, capsys
):
    plain, token_file = agents["plain"], agents["token_file"]
    address, servicer = relay(plain.address)
    KnownDevices().trust("bench-m", address, plain.public_key_raw(), token_file=str(token_file))

    def drop_sustained(request):
        plan = json.loads(request.plan_json)
        plan["sustain_s"] = 0.0
        request.plan_json = json.dumps(plan)
        return request

    servicer.tamper_qualify = drop_sustained
    report = tmp_path / "relayed.report.json"
    rc = edgequal_main(
        ["qualify", str(example_models["micro"]), "--device", "bench-m", "--sustain", "3s"]
        + ["--cold-runs", "1", "--latency", "0.2s", "-o", str(report)]
    )
    err = capsys.readouterr().err
    assert rc == VerificationFailed.exit_code == 1, err
    assert "the signed plan's sustain_s is 0.0, the host asked for 3.0" in err
    assert not report.exists()
    assert "Qualify" in servicer.names()
    # The device signed what it ran, under this host's nonce: the report is genuine.
    stored = max(plain.run_records(), key=lambda p: p.stat().st_mtime_ns)
    signed = verify_envelope(stored.read_bytes(), known=KnownDevices(), device="bench-m")
    assert signed.predicate["plan"]["sustain_s"] == 0.0
    assert not NonceLedger().check(signed.nonce, signed.run_id, stored.read_bytes())


def test_the_subjects_must_be_exactly_the_artifacts_pushed(sign, tmp_path):
    model, golden, other = "a" * 64, "b" * 64, "c" * 64
    from edgequal.contract.plan import make_plan

    plan = make_plan("quick").to_json()
    predicate = {"nonce": "n", "run_id": "r", "status": "passed", "plan": plan}
    pushed = [{"sha256": model, "role": "model"}, {"sha256": golden, "role": "golden"}]
    known = KnownDevices()

    def report(subjects):
        path = sign("r", predicate, subjects)
        return verify_envelope(path.read_bytes(), known=known, device="board")

    exact = [{"name": "m.onnx", "sha256": model, "role": "model"}]
    exact += [{"name": "g.golden", "sha256": golden, "role": "golden"}]
    check_answers_request(report(exact), plan, pushed)
    cases = (
        (exact[:1], "missing: golden " + golden),
        ([*exact, {"name": "coload/x", "sha256": other, "role": "coload"}], "not pushed: coload"),
        ([exact[0], {**exact[1], "role": "external_data"}], "not pushed: external_data " + golden),
        ([exact[0], {**exact[1], "sha256": other}], "not pushed: golden " + other),
    )
    for subjects, message in cases:
        with pytest.raises(VerificationFailed, match=message):
            check_answers_request(report(subjects), plan, pushed)
    # The agent may not add what the host did not send, nor leave out what it did.
    added = sign("added", {**predicate, "plan": {**plan, "turbo": True}}, exact)
    with pytest.raises(VerificationFailed, match="'turbo' = True, a field this host neither"):
        check_answers_request(verify_envelope(added.read_bytes(), known=known), plan, pushed)
    short = {k: v for k, v in plan.items() if k != "window_s"}
    dropped = sign("dropped", {**predicate, "plan": short}, exact)
    with pytest.raises(VerificationFailed, match="the signed plan has no 'window_s'"):
        check_answers_request(verify_envelope(dropped.read_bytes(), known=known), plan, pushed)


@pytest.mark.slow
def test_a_fleet_run_sends_an_impostor_at_a_lab_address_nothing(
    agents, example_models, tmp_path, capsys
):
    token_file = agents["token_file"]
    KnownDevices().trust("bench-f", "grpc://10.0.0.9:7441", agents["plain"].public_key_raw())
    calls: list = []
    server, address, _ = _impostor(calls)
    try:
        lab = tmp_path / "lab.toml"
        lab.write_text(f'[devices.bench-f]\naddress = "{address}"\ntoken_file = "{token_file}"\n')
        models = tmp_path / "models.toml"
        models.write_text(f'[models.micro]\npath = "{example_models["micro"]}"\n')
        out = tmp_path / "fleet"
        rc = edgequal_main(["fleet", "run", str(lab), "--models", str(models), "--out", str(out)])
        assert rc != 0
        capsys.readouterr()
    finally:
        server.stop(0)
    assert [name for name, _ in calls] == ["Prove"]
    assert all("authorization" not in md for _, md in calls)
    (record,) = json.loads((out / "index.json").read_text())["runs"]
    assert record["state"] == "error" and "device identity changed" in record["error"]


def test_the_device_may_fill_only_the_fields_left_to_it(sign):
    from edgequal.contract.plan import make_plan

    plan = make_plan("quick").to_json()
    assert plan["memory_limit_mb"] is None
    subjects = [{"name": "m.onnx", "sha256": "a" * 64, "role": "model"}]
    pushed = [{"sha256": "a" * 64, "role": "model"}]
    known = KnownDevices()

    def signed(name, **fields):
        predicate = {"nonce": "n", "run_id": "r", "status": "passed", "plan": {**plan, **fields}}
        return verify_envelope(sign(name, predicate, subjects).read_bytes(), known=known)

    check_answers_request(signed("filled", memory_limit_mb=2048), plan, pushed)
    for name, fields, message in (
        ("bad", {"memory_limit_mb": "lots"}, "memory_limit_mb is 'lots', the host asked for None"),
        ("asked", {"memory_limit_mb": 4096}, "memory_limit_mb is 4096, the host asked for 512"),
    ):
        sent = {**plan, "memory_limit_mb": 512} if name == "asked" else plan
        with pytest.raises(VerificationFailed, match=message):
            check_answers_request(signed(name, **fields), sent, pushed)
