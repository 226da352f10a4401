"""What users expect of any CLI: examples in every command's help, global options on
either side of the subcommand, shell completion, one name per command, --json where a
script reads the answer."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
from edgequal.agent.cli import _parser as agent_parser
from edgequal.cli.main import main as edgequal_main
from edgequal.cli.parser import build_parser
from edgequal.contract.cli_args import subparsers_of


@pytest.mark.parametrize("parser", [build_parser(), agent_parser()], ids=["edgequal", "agent"])
def test_every_commands_help_ends_with_examples_of_that_command(parser):
    commands = dict(subparsers_of(parser))
    assert len(commands) >= (30 if parser.prog == "edgequal" else 8)
    for prog, sub in commands.items():
        lines = sub.format_help().rstrip().splitlines()
        start = max(i for i, line in enumerate(lines) if line == "examples:")
        examples = lines[start + 1 :]
        assert examples, prog
        for line in examples:
            # Each example runs this command: its words, in order, with options between.
            words = iter(line.split())
            assert all(any(w.endswith(part) for w in words) for part in prog.split()), (
                prog,
                line,
            )


@pytest.mark.parametrize(
    "argv",
    [
        ["--state-dir", "/tmp/s", "serve"],
        ["serve", "--state-dir", "/tmp/s"],
        ["key", "show", "--state-dir", "/tmp/s", "--debug"],
        ["--debug", "info", "--state-dir", "/tmp/s"],
    ],
)
def test_the_agents_global_options_stand_before_or_after_the_subcommand(argv):
    args = agent_parser().parse_args(argv)
    assert str(args.state_dir) == "/tmp/s"
    assert args.debug is ("--debug" in argv)
    bare = agent_parser().parse_args([a for a in argv if a not in ("--state-dir", "/tmp/s")])
    assert bare.state_dir is None and bare.debug is ("--debug" in argv)


def test_shell_completion_is_generated_from_the_parser(capsys):
    assert edgequal_main(["completion", "bash"]) == 0
    script = capsys.readouterr().out
    for word in ("qualify", "golden", "--golden", "--plan", "requalify", "--tolerance"):
        assert word in script, word
    # bash accepts it and registers the completion of edgequal.
    done = subprocess.run(
        ["bash", "-c", "source /dev/stdin && complete -p edgequal"],
        input=script,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith(" edgequal") and "-F _shtab_edgequal" in done.stdout
    assert edgequal_main(["completion", "zsh"]) == 0
    assert capsys.readouterr().out.startswith("#compdef edgequal")


def test_approve_is_one_command(capsys):
    top = next(a for a in build_parser()._actions if a.dest == "command").choices
    fleet = next(a for a in top["fleet"]._actions if a.dest == "fleet_command").choices
    assert "approve" in top and "approve" not in fleet
    with pytest.raises(SystemExit) as e:
        edgequal_main(["fleet", "approve", "r.json", "--model", "m", "--into", "d"])
    assert e.value.code == 2
    assert "invalid choice: 'approve'" in capsys.readouterr().err


def _signed_report(tmp_path):
    import hashlib

    from edgequal.agent.run_request import RunRequest, new_run_id
    from edgequal.agent.runs import sign_report
    from edgequal.contract.keys import load_or_create_device_key
    from edgequal.contract.plan import Plan
    from edgequal.host.devices.trust import KnownDevices

    key = load_or_create_device_key(tmp_path / "device")
    KnownDevices().trust("bench", "grpc://127.0.0.1:1", key.public_key_raw())
    model = tmp_path / "m.onnx"
    model.write_bytes(b"model")
    request = RunRequest(
        new_run_id(), hashlib.sha256(b"model").hexdigest(), None, Plan.from_json({}), "n", "m.onnx"
    )
    report = tmp_path / "r.json"
    report.write_bytes(sign_report(key, request, {"status": "passed", "results": {}}))
    return key, report, model, request.run_id


def test_devices_list_and_verify_as_json(tmp_path, capsys):
    key, report, model, run_id = _signed_report(tmp_path)
    assert edgequal_main(["devices", "list", "--json"]) == 0
    (device,) = json.loads(capsys.readouterr().out)
    assert device["name"] == "bench" and device["addresses"] == ["grpc://127.0.0.1:1"]
    assert device["fingerprint"] == key.fingerprint()
    assert edgequal_main(["verify", str(report), "--artifact", str(model), "--json"]) == 0
    verified = json.loads(capsys.readouterr().out)
    assert verified["verified"] is True and verified["run_id"] == run_id
    assert (verified["device"], verified["status"]) == ("bench", "passed")
    assert verified["nonce_issued_by_this_host"] is False  # signed elsewhere, not asked here
    assert verified["subjects"][0]["name"] == "m.onnx"


def test_golden_make_takes_tolerances_and_answers_in_json(example_models, tmp_path, capsys):
    from edgequal.contract.golden import read_golden
    from edgequal.host.examples.catalog import example_inputs

    inputs = tmp_path / "in.npz"
    np.savez(inputs, **example_inputs("classifier", 1)[0])
    out = tmp_path / "g.npz"
    argv = ["golden", "make", str(example_models["classifier"]), "--inputs", str(inputs)]
    argv += ["--tolerance", "probs=1e-3,1e-2", "--tolerance", "*=fp16", "-o", str(out), "--json"]
    assert edgequal_main(argv) == 0
    made = json.loads(capsys.readouterr().out)
    assert made["tolerances"] == {"probs": {"atol": 1e-3, "rtol": 1e-2}, "score": {"class": "fp16"}}
    assert made["cases"] == ["case0"] and made["golden"] == str(out)
    assert read_golden(out).tolerances == made["tolerances"]
    for bad, message in (
        ("logits=1e-3,1e-2", "--tolerance names 'logits', not an output of the model"),
        ("probs=1e-3", "unknown tolerance class '1e-3'"),
        ("probs=a,b", "cannot read --tolerance 'probs=a,b'"),
    ):
        argv[argv.index("--tolerance") + 1] = bad
        assert edgequal_main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
