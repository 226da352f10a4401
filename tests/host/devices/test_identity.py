"""The device proves its pinned key before the host sends a token, model or golden set.

Real agents (``edgequal-agent serve``, tests/host/conftest.py) on 127.0.0.1; the impostors are a re-keyed
real agent and a recording stand-in servicer that answers ``Prove`` wrongly.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import grpc
import pytest
from edgequal.cli.main import main as edgequal_main
from edgequal.contract.exit_codes import exit_code_for
from edgequal.contract.identity import prove_identity
from edgequal.contract.keys import DeviceKey
from edgequal.contract.signing import MEASURED_STATUSES
from edgequal.host.devices.trust import KnownDevices
from edgequal.host.errors import UntrustedDevice
from edgequal.host.transport.grpc import GrpcTransport
from edgequal.protos import edgequal_v1_pb2 as pb
from edgequal.protos import edgequal_v1_pb2_grpc as pb_grpc


def _answers_info(address: str, token: str | None, **kwargs) -> dict:
    with GrpcTransport(address, token=token, timeout_s=10, **kwargs) as t:
        return t.info()


@pytest.mark.slow
def test_a_rekeyed_agent_gets_no_token_model_or_golden_set(
    start_agent, token_file, example_models, golden_sets, capsys
):
    real = start_agent("real", "--token-file", str(token_file))
    assert (
        edgequal_main(["devices", "trust", "bench", real.address, "--token-file", str(token_file)])
        == 0
    )
    capsys.readouterr()
    # The board is re-keyed (or another machine answers at its address with the same token).
    rekeyed = start_agent("rekeyed", "--token-file", str(token_file))
    known = KnownDevices()
    entry = known.get("bench")
    known.forget("bench")
    known.trust("bench", rekeyed.address, entry.public_key_raw, token_file=entry.token_file)

    rc = edgequal_main(
        ["qualify", str(example_models["classifier"]), "--golden", str(golden_sets["classifier"])]
        + ["--device", "bench", "--sustain", "0"]
    )
    err = capsys.readouterr().err
    assert rc == UntrustedDevice.exit_code == 1
    assert "device identity changed" in err and "nothing was sent" in err
    assert entry.fingerprint in err
    # Nothing reached it: no artifact, no run, no call that carried the token.
    assert rekeyed.stored_files() == []
    assert "authorized /edgequal.v1.Agent/" not in rekeyed.log()
    assert "rejected" not in rekeyed.log()
    # It still answers, and the pin is unchanged.
    assert _answers_info(rekeyed.address, token_file.read_text().strip())["busy"] is False
    assert KnownDevices().get("bench").public_key_raw == real.public_key_raw()


class RecordingAgent(pb_grpc.AgentServicer):
    """A stand-in agent that records every call and answers Prove as told."""

    def __init__(self, prove):
        self.prove = prove
        self.calls: list[tuple[str, dict]] = []
        self.lock = threading.Lock()

    def _record(self, name, context):
        with self.lock:
            self.calls.append((name, dict(context.invocation_metadata())))

    def Prove(self, request, context):
        self._record("Prove", context)
        return self.prove(bytes(request.challenge))

    def __getattribute__(self, name):
        if name in ("Info", "Stat", "Push", "Qualify", "GetReport", "Cancel"):

            def handler(request, context):
                self._record(name, context)
                context.abort(grpc.StatusCode.UNIMPLEMENTED, "stand-in")

            return handler
        return super().__getattribute__(name)


@pytest.fixture
def fake_agent(serve_servicer):
    def start(prove) -> tuple[str, RecordingAgent]:
        servicer = RecordingAgent(prove)
        return serve_servicer(servicer), servicer

    return start


def test_a_fake_agent_never_sees_the_token(fake_agent, token_file, example_models, capsys):
    device_key, own_key = DeviceKey.generate(), DeviceKey.generate()

    def replays_the_pinned_key(challenge):  # claims the device's key, cannot sign with it
        return pb.ProveResponse(
            public_key_raw=device_key.public_key_raw(), signature=prove_identity(own_key, challenge)
        )

    def shows_its_own_key(challenge):  # a real proof, of another key
        return pb.ProveResponse(
            public_key_raw=own_key.public_key_raw(), signature=prove_identity(own_key, challenge)
        )

    for prove, message in (
        (replays_the_pinned_key, "did not prove it holds a device key"),
        (shows_its_own_key, "device identity changed"),
    ):
        address, servicer = fake_agent(prove)
        known = KnownDevices()
        if known.get("pi5"):
            known.forget("pi5")
        known.trust("pi5", address, device_key.public_key_raw(), token_file=str(token_file))
        rc = edgequal_main(["qualify", str(example_models["micro"]), "--device", "pi5"])
        assert rc == 1
        assert message in capsys.readouterr().err
        assert [name for name, _ in servicer.calls] == ["Prove"]
        assert all("authorization" not in md for _, md in servicer.calls)

    # An address no device is pinned at: the token given on the command line stays here too.
    address, servicer = fake_agent(shows_its_own_key)
    rc = edgequal_main(
        [
            "qualify",
            str(example_models["micro"]),
            "--device",
            address,
            "--token-file",
            str(token_file),
        ]
    )
    assert rc == 1
    assert "is not trusted" in capsys.readouterr().err
    assert [name for name, _ in servicer.calls] == ["Prove"]
    assert all("authorization" not in md for _, md in servicer.calls)
    # Enrolment pins the key that signed the challenge, and only then sends the token.
    assert (
        edgequal_main(["devices", "trust", "fake", address, "--token-file", str(token_file)]) == 3
    )
    assert [name for name, _ in servicer.calls] == ["Prove", "Prove", "Info"]
    token = token_file.read_text().strip()
    assert dict(servicer.calls[-1][1])["authorization"] == f"Bearer {token}"
    assert KnownDevices().get("fake") is None  # Info failed: nothing pinned


@pytest.mark.slow
def test_mutual_tls_end_to_end(start_agent, make_pki, tmp_path, example_models, short_plan, capsys):
    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")
    agent = start_agent(
        "tls",
        "--tls-cert", str(pki["server_cert"]),
        "--tls-key", str(pki["server_key"]),
        "--client-ca", str(pki["ca"]),
    )  # fmt: skip
    address = agent.address
    tls_args = ["--tls-ca", str(pki["ca"]), "--tls-cert", str(pki["client_cert"])]
    tls_args += ["--tls-key", str(pki["client_key"])]

    # Without a client certificate, or without TLS, the handshake is refused: nothing pinned.
    assert edgequal_main(["devices", "trust", "tlsdev", address, "--tls-ca", str(pki["ca"])]) == 3
    assert "does not answer" in capsys.readouterr().err
    assert edgequal_main(["devices", "trust", "tlsdev", address]) == 3
    capsys.readouterr()
    rc = edgequal_main(
        ["devices", "trust", "tlsdev", address, "--tls-cert", str(pki["client_cert"])]
    )
    assert rc == 2
    assert "needs both --tls-cert and --tls-key" in capsys.readouterr().err
    assert KnownDevices().get("tlsdev") is None

    assert edgequal_main(["devices", "trust", "tlsdev", address, *tls_args]) == 0
    entry = KnownDevices().get("tlsdev")
    assert entry.public_key_raw == agent.public_key_raw()
    assert entry.tls == {
        "tls_ca": str(pki["ca"].resolve()),
        "tls_cert": str(pki["client_cert"].resolve()),
        "tls_key": str(pki["client_key"].resolve()),
    }
    assert edgequal_main(["devices", "show", "tlsdev"]) == 0
    assert f"tls ca {pki['ca'].resolve()}" in capsys.readouterr().out

    # qualify by name: TLS files from the entry, no token at all (mutual TLS authenticates).
    report = tmp_path / "tls.report.json"
    rc = edgequal_main(
        ["qualify", str(example_models["micro"]), "--device", "tlsdev", "--sustain", "0"]
        + [*short_plan, "-o", str(report), "--json"]
    )
    predicate = json.loads(capsys.readouterr().out)
    assert predicate["status"] in MEASURED_STATUSES
    assert rc == exit_code_for(predicate["status"], predicate["findings"])
    assert edgequal_main(["verify", str(report), "--device", "tlsdev"]) == 0
    assert "authorized" not in agent.log()  # no token interceptor: TLS did it
    # TLS options on an ssh:// or local device are refused in one line.
    assert (
        edgequal_main(["qualify", str(example_models["micro"]), "--device", "local", *tls_args])
        == 2
    )
    assert "TLS options apply to grpc:// addresses" in capsys.readouterr().err


@pytest.mark.slow
def test_a_rekeyed_board_over_ssh_gets_no_model_or_golden_set(
    sshd_server, example_models, golden_sets, short_plan, tmp_path, capsys
):
    def device_args(state: Path) -> list[str]:
        return [
            "--device", sshd_server.url,
            "--known-hosts", str(sshd_server.known_hosts),
            "--ssh-key", str(sshd_server.client_key),
            "--agent-cmd", f"{sys.executable} -m edgequal.agent.cli --state-dir {state}",
        ]  # fmt: skip

    # multi_input: its warm-up settles in about a second (the classifier's microsecond calls
    # run out the quick preset's 10 s cap on a busy machine); any model and golden set will do.
    model, golden = example_models["multi_input"], golden_sets["multi_input"]
    first = tmp_path / "first-state"
    report = tmp_path / "r.json"
    rc = edgequal_main(
        ["qualify", str(model), "--golden", str(golden), *device_args(first), "--sustain", "0"]
        + [*short_plan, "-o", str(report)]
    )
    assert rc in (0, 1), capsys.readouterr().err  # measured; enrolled on first use
    capsys.readouterr()
    pinned = KnownDevices().list()[0]
    # The same SSH host (its host key unchanged) now runs an agent with another device key.
    rekeyed = tmp_path / "rekeyed-state"
    rc = edgequal_main(["qualify", str(model), "--golden", str(golden), *device_args(rekeyed)])
    err = capsys.readouterr().err
    assert rc == 1
    assert "device identity changed" in err and pinned.fingerprint in err
    assert not (rekeyed / "artifacts").exists() or not any((rekeyed / "artifacts").rglob("*.*"))
    assert not (rekeyed / "runs").exists() and not (rekeyed / "reports").exists()
    # Nothing lost: the pin, the first board's artifacts and its report.
    assert KnownDevices().list() == [pinned]
    assert edgequal_main(["verify", str(report), "--device", pinned.name]) == 0
    assert len(list((first / "artifacts" / "sha256").iterdir())) == 2
