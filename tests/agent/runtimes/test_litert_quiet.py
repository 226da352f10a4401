"""LiteRT's C++ logging at interpreter creation: its ``INFO:`` lines stay off the user's
stderr (``golden make`` of a .tflite model prints its one line and nothing else), and every
other line it or anything else writes to fd 2 meanwhile still reaches the user."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from edgequal.agent.runtimes.litert import _runtime_info_silenced


def _cli(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "edgequal.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_only_the_info_lines_are_held_back(capfd):
    with _runtime_info_silenced():
        os.write(2, b"INFO: Created TensorFlow Lite XNNPACK delegate for CPU.\n")
        os.write(2, b"ERROR: a real failure\nWARNING: INFO: is not at the start here\n")
        os.write(2, b"INFO: the last line, unterminated")
    captured = capfd.readouterr()
    assert captured.err == "ERROR: a real failure\nWARNING: INFO: is not at the start here\n"
    # fd 2 is itself again after the block.
    os.write(2, b"INFO: after the block\n")
    assert capfd.readouterr().err == "INFO: after the block\n"


def test_an_error_inside_the_block_still_restores_fd_2(capfd):
    with pytest.raises(RuntimeError), _runtime_info_silenced():
        os.write(2, b"ERROR: written before the raise\n")
        raise RuntimeError("interpreter creation failed")
    assert capfd.readouterr().err == "ERROR: written before the raise\n"


def test_threads_inside_at_once_leave_fd_2_as_it_was(capfd):
    def create(i: int) -> None:
        with _runtime_info_silenced():
            os.write(2, b"INFO: created\n")
            os.write(2, f"WARNING: thread {i}\n".encode())

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    held = capfd.readouterr().err.splitlines()
    assert sorted(held) == sorted(f"WARNING: thread {i}" for i in range(8))
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"


@pytest.mark.slow
def test_golden_make_of_a_tflite_model_writes_nothing_to_stderr(example_models, tmp_path):
    rng = np.random.default_rng(0)
    cases = {f"case{i}/image": rng.random((1, 32, 32, 3), dtype=np.float32) for i in range(3)}
    np.savez(tmp_path / "inputs.npz", **cases)
    proc = _cli(
        "golden",
        "make",
        str(example_models["classifier_tflite"]),
        "--inputs",
        "inputs.npz",
        "-o",
        "g.npz",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.startswith("golden set g.npz: 3 cases, sha256 ")


@pytest.mark.slow
def test_a_model_litert_rejects_is_still_one_line_naming_its_operator(tmp_path):
    from edgequal.host.examples.tflite_models import TfliteGraph

    g = TfliteGraph()
    s = g.schema
    x = g.tensor("x", [1, 4], s.TensorType.FLOAT32)
    y = g.tensor("y", [1, 4], s.TensorType.FLOAT32)
    g.op(s.BuiltinOperator.CUSTOM, [x], [y])
    g.opcodes[-1].customCode = "Frobnicate"
    (tmp_path / "custom.tflite").write_bytes(g.finish([x], [y], "a custom operator"))
    np.savez(tmp_path / "in.npz", x=np.ones((1, 4), np.float32))
    proc = _cli(
        "golden", "make", "custom.tflite", "--inputs", "in.npz", "-o", "g.npz", cwd=tmp_path
    )
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "INFO:" not in proc.stderr, proc.stderr
    assert "rejected the model: Encountered unresolved custom op: Frobnicate" in lines[0]
