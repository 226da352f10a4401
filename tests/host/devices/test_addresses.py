"""One device, one name, one key, several addresses (grpc, ssh, local).

One agent state directory (one device key) is reached through a real
``edgequal-agent serve`` on 127.0.0.1, through the real sshd (tests/sshd.py) and
as the ``local`` device; pinned over one, reached over another, it is the same
device: found by the key it proves, with the new address recorded.
"""

from __future__ import annotations

import itertools
import json
import sys

import pytest
from edgequal.cli.main import main as edgequal_main
from edgequal.contract.exit_codes import exit_code_for
from edgequal.contract.signing import MEASURED_STATUSES
from edgequal.host.devices.resolve import open_device
from edgequal.host.devices.trust import KnownDevices
from edgequal.host.errors import UsageError
from edgequal.host.transport import SSHOptions


@pytest.fixture
def device(start_agent, token_file, sshd_server, monkeypatch):
    """The three addresses of one device (one state dir), and how to reach each."""
    agent = start_agent("board", "--token-file", str(token_file))
    monkeypatch.setenv("EDGEQUAL_LOCAL_STATE", str(agent.state))  # `local` is this board too
    agent_cmd = f"{sys.executable} -m edgequal.agent.cli --state-dir {agent.state}"
    ssh_options = {
        "known_hosts": sshd_server.known_hosts,
        "ssh_key": sshd_server.client_key,
        "agent_cmd": agent_cmd,
    }
    return {
        "agent": agent,
        "token_file": token_file,
        "addresses": {"grpc": agent.address, "ssh": sshd_server.url, "local": "local"},
        "ssh_options": ssh_options,
    }


def _open(device, address: str):
    options = device["ssh_options"] if address.startswith("ssh://") else {}
    return open_device(
        address,
        token_file=None if address.startswith("ssh://") else device["token_file"],
        ssh=SSHOptions(
            known_hosts=options.get("known_hosts"),
            key_file=options.get("ssh_key"),
            agent_cmd=options.get("agent_cmd"),
        ),
    )


# A real agent, sshd and local agent for each pair: seconds, so the fast loop skips them.
@pytest.mark.slow
@pytest.mark.parametrize("first,then", list(itertools.permutations(["grpc", "ssh", "local"], 2)))
def test_a_pinned_key_reached_at_another_address_is_the_same_device(device, first, then):
    addresses = device["addresses"]
    known = KnownDevices()
    if first == "grpc":
        known.trust(
            "bench-pi5", addresses["grpc"], device["agent"].public_key_raw(),
            token_file=str(device["token_file"]),
        )  # fmt: skip
    else:
        _open(device, addresses[first]).transport.close()  # enrolled on first use
    name = KnownDevices().list()[0].name
    assert KnownDevices().get(name).address == addresses[first]

    opened = _open(device, addresses[then])
    with opened.transport as transport:
        assert opened.name == name  # found by the key it proved, not enrolled again
        assert transport.proven_key == device["agent"].public_key_raw()
        info = transport.info()  # the token (grpc) goes only after the proof, and is accepted
        assert info["key_fingerprint"] == KnownDevices().get(name).fingerprint
    # An address is recorded only on the user's word, never because something there proved a key.
    assert opened.unrecorded is (then != "local")
    entries = KnownDevices().list()
    assert [e.name for e in entries] == [name]
    assert entries[0].addresses == [addresses[first]]
    KnownDevices().add_address(name, addresses[then])
    # The recorded address now names the device directly, and so does its name.
    again = _open(device, addresses[then])
    again.transport.close()
    assert not again.unrecorded
    assert KnownDevices().get(name).addresses == [addresses[first], addresses[then]]


@pytest.mark.slow
def test_qualify_over_ssh_a_device_pinned_over_grpc(
    device, example_models, tmp_path, capsys, short_plan
):
    """The README flow: pinned as bench-pi5 at grpc://, qualified with --device ssh://..."""
    agent, addresses = device["agent"], device["addresses"]
    rc = edgequal_main(
        [
            "devices",
            "trust",
            "bench-pi5",
            addresses["grpc"],
            "--token-file",
            str(device["token_file"]),
        ]
    )
    assert rc == 0
    capsys.readouterr()
    # Over gRPC: the quick plan as asked, though the fingerprint matches a profile whose
    # board fields (threads, trip) apply; the agent takes the plan and its provenance.
    rc = edgequal_main(
        ["qualify", str(example_models["micro"]), "--device", "bench-pi5"]
        + ["-o", str(tmp_path / "grpc.report.json"), "--json", *short_plan]
    )
    out, err = capsys.readouterr()
    _assert_quick_as_asked(json.loads(out), rc, err)
    # run-plan over SSH takes the state directory the serving agent holds: stop the service.
    agent.stop()
    options = device["ssh_options"]
    report = tmp_path / "ssh.report.json"
    rc = edgequal_main(
        ["qualify", str(example_models["micro"]), "--device", addresses["ssh"]]
        + ["--known-hosts", str(options["known_hosts"]), "--ssh-key", str(options["ssh_key"])]
        + ["--agent-cmd", options["agent_cmd"], "-o", str(report), "--json", *short_plan]
    )
    out, err = capsys.readouterr()
    predicate = json.loads(out)
    _assert_quick_as_asked(predicate, rc, err)
    assert [e.name for e in KnownDevices().list()] == ["bench-pi5"]
    assert KnownDevices().get("bench-pi5").addresses == [addresses["grpc"]]  # not recorded
    assert "is not one of its addresses (not recorded" in err
    assert edgequal_main(["verify", str(report), "--device", "bench-pi5"]) == 0
    assert "signed by device 'bench-pi5'" in capsys.readouterr().out


def _assert_quick_as_asked(predicate: dict, rc: int, err: str) -> None:
    """A quick run on a profiled device (its lengths shortened by flags): no sustained
    phase, the profile's board fields, and where each came from, in the signed plan and
    the line printed before the run."""
    from edgequal.host.devices.profiles import load_profile

    assert predicate["status"] in MEASURED_STATUSES, err
    assert rc == exit_code_for(predicate["status"], predicate["findings"])
    plan = predicate["plan"]
    board = load_profile(plan["profile"])  # matched from the fingerprint
    assert plan["sustain_s"] == 0.0 and "sustained" not in predicate["results"]
    assert plan["threads"] == board.default_threads and plan["trip_c"] == board.trip_c
    assert plan["sources"]["sustain_s"] == "preset" and plan["sources"]["threads"] == "profile"
    assert plan["sources"]["cold_runs"] == "flag" and plan["cold_runs"] == 1
    assert (
        "plan: quick (cold load ×1 [flag], warm-up 0.2 s [flag], latency 0.2 s [flag] "
        "(to 0.7 s for clean calls), "
        f"no sustained phase) · threads {board.default_threads} [profile] · profile {board.name}"
    ) in err


def test_an_address_of_one_device_is_not_given_to_another(tmp_path):
    from edgequal.contract.keys import DeviceKey

    known = KnownDevices(tmp_path / "known_devices")
    known.trust("a", "grpc://10.0.0.1:50051", DeviceKey.generate().public_key_raw())
    known.trust("b", "grpc://10.0.0.2:50051", DeviceKey.generate().public_key_raw())
    known.add_address("a", "ssh://pi@10.0.0.1")
    assert known.find_by_address("ssh://pi@10.0.0.1").name == "a"
    with pytest.raises(UsageError, match="already belongs to device a"):
        known.add_address("b", "ssh://pi@10.0.0.1")
    # Re-trusting the same key at a new address keeps the old one among its addresses.
    entry = known.trust("b", "grpc://10.0.0.3:50051", known.get("b").public_key_raw)
    assert entry.addresses == ["grpc://10.0.0.3:50051", "grpc://10.0.0.2:50051"]
    line = (tmp_path / "known_devices").read_text().splitlines()[0]
    assert line.endswith("also_at=ssh://pi@10.0.0.1")


@pytest.mark.slow
def test_info_is_the_same_over_every_transport(device):
    """One typed AgentInfo: the same fields, key, limits and lease over grpc, ssh and local."""
    infos = {}
    for kind in ("ssh", "grpc", "local"):  # enrolled over ssh, then found by its key
        opened = _open(device, device["addresses"][kind])
        with opened.transport as transport:
            infos[kind] = transport.info()
    wire = {
        "agent_version", "protocol", "fingerprint", "runtimes", "public_key_b64",
        "key_fingerprint", "busy", "lease", "limits",
    }  # fmt: skip
    for kind, info in infos.items():
        assert wire | {"address"} <= set(info), kind
    for field in ("agent_version", "protocol", "public_key_b64", "key_fingerprint", "limits"):
        assert infos["grpc"][field] == infos["ssh"][field] == infos["local"][field], field
    for info in infos.values():
        assert info["busy"] is False and info["lease"] is None
        assert {r["name"] for r in info["runtimes"]} == {"onnxruntime", "litert"}
        assert info["fingerprint"]["architecture"] == infos["grpc"]["fingerprint"]["architecture"]
    # Over SSH, info --json also carries every probe reading.
    assert "probes" in infos["ssh"]
