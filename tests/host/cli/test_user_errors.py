"""What a new user meets first, through the real console scripts in a fresh HOME: every
bad input is one line, the README's exit code, and nothing reaches a device.

The commands run as subprocesses, all at once (module fixture), so the file costs about
one interpreter start on the wall clock, but a dozen in CPU time: it is marked slow.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from edgequal.cli.main import main as edgequal_main

BIN = Path(sys.executable).parent

# Twelve interpreters, several of which import the host's qualify path: 3 to 5 CPU-s in all.
pytestmark = pytest.mark.slow


@dataclass
class Ran:
    argv: list[str]
    rc: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return self.err.strip().splitlines()


def fresh_env(home: Path) -> dict:
    """The environment of a user who just installed edgequal: no edgequal or XDG settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EDGEQUAL_", "XDG_", "PYTEST"))}
    env.update(HOME=str(home), COLUMNS="100")
    return env


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fresh-home")


@pytest.fixture(scope="module")
def ran(home, tmp_path_factory, example_models) -> dict[str, Ran]:
    """Each case's command, run at once in the same fresh HOME, by name."""
    work = tmp_path_factory.mktemp("work")
    text_model = work / "notes.onnx"
    text_model.write_text("these are my notes, not a model\n")
    micro, dynamic = str(example_models["micro"]), str(example_models["dynamic"])
    cases = {
        "golden_missing": ["edgequal", "qualify", micro, "--golden", str(work / "missing.npz")],
        "unknown_device": ["edgequal", "qualify", micro, "--device", "nosuchboard"],
        "text_model": ["edgequal", "qualify", str(text_model)],
        "shape_rank": ["edgequal", "qualify", dynamic, "--shape", "image=1x3x48"],
        "typo_command": ["edgequal", "qualfy", micro],
        "typo_choice": ["edgequal", "qualify", micro, "--plan", "stanard"],
        "bad_choice": ["edgequal", "qualify", micro, "--plan", "nonsense"],
        "agent_typo": ["edgequal-agent", "srve"],
        "version": ["edgequal", "--version"],
        "agent_version": ["edgequal-agent", "--version"],
        "key_show": ["edgequal-agent", "key", "show"],
        "key_show_dir": ["edgequal-agent", "key", "show", "--state-dir", str(work / "agent")],
    }
    procs = {
        name: subprocess.Popen(
            [str(BIN / argv[0]), *argv[1:]],
            cwd=work,
            env=fresh_env(home),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, argv in cases.items()
    }
    results = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        results[name] = Ran(cases[name], proc.returncode, out, err)
    results["work"] = work
    return results


def _one_line(r: Ran, rc: int = 2) -> str:
    assert r.rc == rc, (r.argv, r.rc, r.err)
    assert len(r.lines) == 1 and "Traceback" not in r.err, r.err
    return r.lines[0]


def _nothing_started(home: Path) -> None:
    """No local agent was started and no device pinned: nothing was sent anywhere."""
    assert not (home / ".local" / "state" / "edgequal" / "local-agent").exists()
    assert not (home / ".config" / "edgequal" / "known_devices").exists()


def test_a_missing_golden_set_is_bad_input_in_one_line(ran, home):
    line = _one_line(ran["golden_missing"])
    assert "golden set not found:" in line and "missing.npz" in line
    assert "edgequal golden make" in line  # the hint says how to make one
    _nothing_started(home)


def test_an_unknown_device_is_bad_usage_naming_the_known_ones(ran, home):
    line = _one_line(ran["unknown_device"])
    assert "unknown device 'nosuchboard' (known: local); nothing was sent" in line
    assert "edgequal devices trust nosuchboard grpc://HOST:PORT" in line


def test_a_text_file_named_onnx_is_refused_before_anything_is_sent(ran, home):
    line = _one_line(ran["text_model"])
    assert "notes.onnx is not an ONNX model" in line and "nothing was sent" in line
    _nothing_started(home)


def test_a_shape_flag_is_checked_on_the_host_and_named(ran, home):
    line = _one_line(ran["shape_rank"])
    assert (
        "--shape image=1x3x48: the model's input 'image' is float32 [batch,3,height,width]: "
        "4 dimensions, the flag gives 3"
    ) in line
    assert "file holds" not in line  # the shape came from the flag, not from a file
    _nothing_started(home)


@pytest.mark.parametrize(
    "shapes, expected",
    [
        ({"image": [1, 4, 48, 48]}, "dimension 1 is fixed at 3, the flag gives 4"),
        ({"img": [1, 3, 48, 48]}, "--shape img=1x3x48x48: the model has no input 'img' (its"),
    ],
)
def test_shape_flags_against_the_declared_inputs(example_models, shapes, expected):
    from edgequal.host.errors import UsageError
    from edgequal.host.model_file import check_shapes, declared_inputs

    model = example_models["dynamic"]
    assert [(s.name, s.shape) for s in declared_inputs(model, "onnxruntime")] == [
        ("image", ["batch", 3, "height", "width"])
    ]
    check_shapes(model, "onnxruntime", {"image": [2, 3, 64, 48]})  # dynamic dims take any size
    with pytest.raises(UsageError) as e:
        check_shapes(model, "onnxruntime", shapes)
    assert expected in str(e.value)
    tflite = example_models["classifier_tflite"]
    (spec,) = declared_inputs(tflite, "litert")
    assert spec.shape == [1, 32, 32, 3]  # NHWC, read by LiteRT's interpreter on the host
    with pytest.raises(UsageError, match="dimension 2 is fixed at 32, the flag gives 48"):
        check_shapes(tflite, "litert", {spec.name: [1, 32, 48, 3]})


def test_a_mistyped_command_or_choice_is_one_line_with_a_suggestion(ran):
    assert _one_line(ran["typo_command"]) == (
        "edgequal: error: argument COMMAND: invalid choice: 'qualfy' "
        "(hint: did you mean 'qualify'?)"
    )
    assert "(hint: did you mean 'standard'?)" in _one_line(ran["typo_choice"])
    line = _one_line(ran["bad_choice"])
    assert "invalid choice: 'nonsense' (choose from" in line and "quick" in line
    assert line.endswith("(hint: edgequal qualify --help)")
    assert "did you mean 'serve'?" in _one_line(ran["agent_typo"])


def test_both_commands_say_their_version(ran):
    from edgequal.contract import __version__

    assert (ran["version"].rc, ran["version"].out) == (0, f"edgequal {__version__}\n")
    assert ran["agent_version"].out == f"edgequal-agent {__version__}\n"


def test_key_show_never_creates_a_key_and_names_the_directory(ran, home):
    line = _one_line(ran["key_show"])
    default = home / ".local" / "state" / "edgequal-agent"
    assert f"no device key in {default} (nothing was created)" in line
    assert not default.exists()
    assert not (ran["work"] / "agent").exists()  # --state-dir after the subcommand, honoured
    assert f"no device key in {ran['work'] / 'agent'}" in _one_line(ran["key_show_dir"])


def test_key_show_points_at_the_local_agents_key_and_shows_it(tmp_path):
    """The key that signs local reports lives in edgequal's state dir; key show says where."""
    from edgequal.contract.keys import load_or_create_device_key

    local_home = tmp_path / "home"
    local = local_home / ".local" / "state" / "edgequal" / "local-agent"
    key = load_or_create_device_key(local)
    env = fresh_env(local_home)
    agent = str(BIN / "edgequal-agent")
    missing = subprocess.run([agent, "key", "show"], env=env, capture_output=True, text=True)
    assert missing.returncode == 2
    assert f"edgequal-agent --state-dir {local} key show" in missing.stderr
    shown = subprocess.run(
        [agent, "--state-dir", str(local), "key", "show"], env=env, capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [
        f"ed25519 {key.public_key_b64()}",
        f"fingerprint {key.fingerprint()}",
        f"state dir {local}",
    ]


def _error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_an_unrelated_device_name_gets_no_suggestion_a_typo_does(example_models, capsys):
    from edgequal.contract.keys import DeviceKey
    from edgequal.host.devices.trust import KnownDevices

    KnownDevices().trust("board-3", "grpc://127.0.0.1:9", DeviceKey.generate().public_key_raw())
    micro = str(example_models["micro"])
    assert edgequal_main(["qualify", micro, "--device", "nosuchboard"]) == 2
    line = _error_line(capsys)
    assert "unknown device 'nosuchboard' (known: local, board-3)" in line
    assert "did you mean" not in line
    assert "(hint: trust it first: edgequal devices trust nosuchboard grpc://HOST:PORT)" in line
    assert edgequal_main(["qualify", micro, "--device", "board3"]) == 2
    assert _error_line(capsys).endswith("(hint: did you mean 'board-3'?)")


def test_a_tflite_file_named_onnx_is_called_a_tflite_file(example_models, tmp_path, capsys):
    renamed = tmp_path / "detector.onnx"
    renamed.write_bytes(example_models["classifier_tflite"].read_bytes())
    assert edgequal_main(["qualify", str(renamed)]) == 2
    line = _error_line(capsys)
    assert "detector.onnx is not an ONNX model: it is a TFLite file" in line
    assert "name it .tflite" in line
    onnx_renamed = tmp_path / "classifier.tflite"
    onnx_renamed.write_bytes(example_models["classifier"].read_bytes())
    assert edgequal_main(["qualify", str(onnx_renamed)]) == 2
    assert "classifier.tflite is not a TFLite model: it is an ONNX model" in _error_line(capsys)


def test_golden_make_on_a_non_model_says_what_qualify_says(tmp_path, capsys):
    import numpy as np

    text_model = tmp_path / "notes.onnx"
    text_model.write_text("these are my notes, not a model\n")
    inputs = tmp_path / "in.npz"
    np.savez(inputs, image=np.zeros((1, 3, 32, 32), np.float32))
    assert edgequal_main(["qualify", str(text_model)]) == 2
    qualify_line = _error_line(capsys)
    argv = ["golden", "make", str(text_model), "--inputs", str(inputs), "-o", str(tmp_path / "g")]
    assert edgequal_main(argv) == 2
    assert _error_line(capsys) == qualify_line
    assert "notes.onnx is not an ONNX model" in qualify_line and "(hint: " in qualify_line


def test_a_shape_error_ends_with_the_hint_the_docs_promise(ran):
    line = _one_line(ran["shape_rank"])
    assert line.endswith("(hint: give one size per dimension: --shape image=BATCHx3xHEIGHTxWIDTH)")


@pytest.mark.parametrize(
    "shapes, hint",
    [
        ({"image": [1, 4, 48, 48]}, "only the named dimensions may change: --shape image=BATCHx3x"),
        ({"img": [1, 3, 48, 48]}, "name one of the model's inputs: --shape image=BATCHx3x"),
    ],
)
def test_every_shape_error_has_a_hint(example_models, shapes, hint):
    from edgequal.host.errors import UsageError
    from edgequal.host.model_file import check_shapes

    with pytest.raises(UsageError) as e:
        check_shapes(example_models["dynamic"], "onnxruntime", shapes)
    assert e.value.hint.startswith(hint)
