"""Trusting a real token-protected agent on 127.0.0.1, qualifying it by name, tokens, replays."""

from __future__ import annotations

import base64
import json

import pytest
from edgequal.cli.main import main as edgequal_main
from edgequal.contract.exit_codes import exit_code_for
from edgequal.contract.signing import MEASURED_STATUSES
from edgequal.host.devices.resolve import resolve_token
from edgequal.host.devices.trust import KnownDevices
from edgequal.host.errors import UsageError

# Starts real processes (agents, sshd, the emulator) for seconds each: the fast loop skips it.
pytestmark = pytest.mark.slow


@pytest.fixture
def token_agent(tmp_path, local_agents):
    """``edgequal-agent serve`` with a bearer token, on an ephemeral loopback port."""
    token_file = tmp_path / "agent.token"
    token_file.write_text("s3cret-token\n")
    token_file.chmod(0o600)  # the agent refuses a token file others can read
    agent = local_agents.serve(tmp_path / "state", token_file=token_file)
    yield agent.address, token_file, agent.state
    agent.stop()


def test_trust_list_show_qualify_by_name_forget(
    token_agent, example_models, tmp_path, capsys, short_plan
):
    address, token_file, state = token_agent
    assert (
        edgequal_main(["devices", "trust", "bench1", address, "--token-file", str(token_file)]) == 0
    )
    out = capsys.readouterr().out
    pub = (state / "device_key.pub").read_text().strip()
    entry = KnownDevices().get("bench1")
    assert entry.public_key_raw == base64.b64decode(pub)
    assert entry.fingerprint in out
    assert edgequal_main(["devices", "list"]) == 0
    assert "bench1" in capsys.readouterr().out
    assert edgequal_main(["devices", "show", "bench1"]) == 0
    assert entry.fingerprint in capsys.readouterr().out
    # The token comes from the device entry: no flag needed.
    report = tmp_path / "r.json"
    rc = edgequal_main(
        [
            "qualify",
            str(example_models["micro"]),
            "--device",
            "bench1",
            "--sustain",
            "0",
            "-o",
            str(report),
            "--json",
            *short_plan,
        ]
    )
    predicate = json.loads(capsys.readouterr().out)
    assert predicate["status"] in MEASURED_STATUSES
    assert rc == exit_code_for(predicate["status"], predicate["findings"])
    assert predicate["plan"]["profile"].startswith("generic/")  # matched from the fingerprint
    assert edgequal_main(["verify", str(report), "--device", "bench1"]) == 0
    assert edgequal_main(["devices", "forget", "bench1"]) == 0
    assert KnownDevices().get("bench1") is None
    assert edgequal_main(["verify", str(report)]) == 1  # unknown device now


def test_wrong_token_and_no_token_are_refused(token_agent, tmp_path, capsys):
    address, _, _ = token_agent
    wrong = tmp_path / "wrong.token"
    wrong.write_text("nope")
    wrong.chmod(0o600)
    assert edgequal_main(["devices", "trust", "bench2", address, "--token-file", str(wrong)]) == 3
    assert "token" in capsys.readouterr().err
    assert edgequal_main(["devices", "trust", "bench2", address]) == 3
    assert KnownDevices().get("bench2") is None


def test_trust_refuses_an_unexpected_fingerprint(token_agent, capsys):
    address, token_file, _ = token_agent
    rc = edgequal_main(
        [
            "devices",
            "trust",
            "bench3",
            address,
            "--token-file",
            str(token_file),
            "--fingerprint",
            "SHA256:AAAA",
        ]
    )
    assert rc == 2
    assert "not the expected SHA256:AAAA" in capsys.readouterr().err
    assert KnownDevices().get("bench3") is None


def test_a_report_replayed_for_another_run_is_refused(
    token_agent, example_models, short_plan, tmp_path, capsys
):
    address, token_file, _ = token_agent
    assert (
        edgequal_main(["devices", "trust", "bench4", address, "--token-file", str(token_file)]) == 0
    )
    report = tmp_path / "r.json"
    rc = edgequal_main(
        ["qualify", str(example_models["micro"]), "--device", "bench4", "--sustain", "0"]
        + [*short_plan, "-o", str(report)]
    )
    capsys.readouterr()
    from edgequal.host.devices.nonces import NonceLedger
    from edgequal.host.devices.verify import verify_envelope

    verified = verify_envelope(report.read_bytes(), known=KnownDevices(), device="bench4")
    assert verified.status in MEASURED_STATUSES
    assert rc == exit_code_for(verified.status, verified.predicate["findings"])
    # The ledger says this host's nonce was answered by another run: presenting this report again is a replay.
    ledger = NonceLedger()
    ledger.path.write_text(f"{verified.nonce} 20260101T000000Z-00000000 {'0' * 64}\n")
    assert edgequal_main(["verify", str(report), "--device", "bench4"]) == 1
    assert "replayed nonce" in capsys.readouterr().err


def test_token_precedence(tmp_path, monkeypatch):
    flag, entry = tmp_path / "flag", tmp_path / "entry"
    flag.write_text("from-flag\n")
    entry.write_text("from-entry\n")
    for f in (flag, entry):
        f.chmod(0o600)
    monkeypatch.setenv("EDGEQUAL_TOKEN", "from-env")
    assert resolve_token(flag, str(entry)) == "from-flag"
    assert resolve_token(None, str(entry)) == "from-env"
    monkeypatch.delenv("EDGEQUAL_TOKEN")
    assert resolve_token(None, str(entry)) == "from-entry"
    assert resolve_token(None, None) is None
    (tmp_path / "empty").write_text("")
    (tmp_path / "empty").chmod(0o600)
    with pytest.raises(UsageError, match="must hold one token"):
        resolve_token(tmp_path / "empty", None)
