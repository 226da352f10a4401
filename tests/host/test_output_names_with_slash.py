"""Tensor names that hold ``/``: PP-OCR's real output is ``save_infer_model/scale_0.tmp_1``.
A ``CASE/NAME`` array splits at its first ``/`` (case names hold none), so such a name goes
through ``golden make --raw --pipeline --outputs --reference-inputs``, ``qualify``, the
pipeline's reference tensors, ``export`` and ``history`` whole."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from edgequal.cli.main import main
from edgequal.contract.golden import read_golden, split_case_arrays

OUT = "save_infer_model/scale_0.tmp_1"


def build_cls_model(path: Path) -> Path:
    """PP-OCR's direction classifier in miniature: ``x`` float32 [1,3,8,8] → the channel
    means, softmax → ``save_infer_model/scale_0.tmp_1`` float32 [1,3]."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("ReduceMean", ["x"], ["m"], axes=[2, 3], keepdims=0),
        helper.make_node("Softmax", ["m"], [OUT], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "ocr_cls",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info(OUT, TensorProto.FLOAT, [1, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    path.write_bytes(model.SerializeToString())
    return path


def test_case_arrays_split_at_the_first_slash():
    a = np.zeros(1)
    assert split_case_arrays({f"case00/{OUT}": a, "case00/x": a}) == {"case00": {OUT: a, "x": a}}
    # A plain NAME that is one of the model's names stays whole, in the default case.
    assert split_case_arrays({OUT: a}, names=[OUT]) == {"case0": {OUT: a}}
    assert split_case_arrays({"x": a}) == {"case0": {"x": a}}


@pytest.fixture(scope="module")
def cls_golden(test_helper, tmp_path_factory):
    """``cls.onnx``, its raw images and pipeline, the training side's tensors and outputs
    (``CASE/x``, ``CASE/save_infer_model/scale_0.tmp_1``), and the golden set made from them
    through the CLI."""
    raw = test_helper("raw_files")
    d = tmp_path_factory.mktemp("cls")
    model = build_cls_model(d / "cls.onnx")
    (d / "imgs").mkdir()
    for i in range(3):
        (d / "imgs" / f"case0{i}.png").write_bytes(raw.encode_image(raw.gradient(8, 8, i)))
    (d / "p.toml").write_text('[inputs.x]\ndecode = "image"\nscale = 0.00392156862745098\n')
    import onnxruntime as ort

    session = ort.InferenceSession(str(model))
    rng = np.random.default_rng(0)
    ref_in, ref_out = {}, {}
    for i in range(3):
        x = rng.random((1, 3, 8, 8), dtype=np.float32)
        ref_in[f"case0{i}/x"] = x
        ref_out[f"case0{i}/{OUT}"] = session.run(None, {"x": x})[0]
    np.savez(d / "ref_in.npz", **ref_in)
    np.savez(d / "ref_out.npz", **ref_out)
    argv = ["golden", "make", str(model), "--raw", str(d / "imgs"), "--pipeline", str(d / "p.toml"),
            "--outputs", str(d / "ref_out.npz"), "--reference-inputs", str(d / "ref_in.npz"),
            "--decision", "argmax", "-o", str(d / "g.npz")]  # fmt: skip
    assert main(argv) == 0
    return d, ref_in, ref_out


def test_golden_make_keeps_an_output_name_with_slashes(cls_golden):
    d, ref_in, ref_out = cls_golden
    g = read_golden(d / "g.npz")
    assert [c.name for c in g.cases] == ["case00", "case01", "case02"]
    assert [o["name"] for o in g.manifest["outputs"]] == [OUT]
    for case in g.cases:
        assert list(case.outputs) == [OUT]
        np.testing.assert_array_equal(case.outputs[OUT], ref_out[f"{case.name}/{OUT}"])
        np.testing.assert_array_equal(case.reference_inputs["x"], ref_in[f"{case.name}/x"])
    assert g.manifest["reference"] == {"runtime": "given", "source": "ref_out.npz"}


def test_inputs_and_outputs_of_one_case_named_plainly_keep_their_slashes(cls_golden, capsys):
    """``--inputs`` and ``--outputs`` files of one case name the arrays by tensor alone; a
    name that holds ``/`` is the model's name, not a case."""
    d, ref_in, ref_out = cls_golden
    np.savez(d / "one_in.npz", x=ref_in["case00/x"])
    np.savez(d / "one_out.npz", **{OUT: ref_out[f"case00/{OUT}"]})
    argv = ["golden", "make", str(d / "cls.onnx"), "--inputs", str(d / "one_in.npz"),
            "--outputs", str(d / "one_out.npz"), "-o", str(d / "one.npz")]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    (case,) = read_golden(d / "one.npz").cases
    assert case.name == "case0" and list(case.outputs) == [OUT]


@pytest.mark.slow  # a qualification on the local agent
def test_qualify_export_and_history_keep_the_name(cls_golden, tmp_path, short_plan, capsys):
    d, _, _ = cls_golden
    report = tmp_path / "r.json"
    argv = ["qualify", str(d / "cls.onnx"), "--golden", str(d / "g.npz"), "--device", "local",
            *short_plan, "-o", str(report)]  # fmt: skip
    assert main(argv) in (0, 1), capsys.readouterr().err
    from edgequal.host.devices.trust import KnownDevices
    from edgequal.host.judge.report_file import load_report

    p = load_report(report, known=KnownDevices(), require=True).predicate
    drift = p["results"]["drift"]
    assert list(drift["outputs"]) == [OUT]
    assert {row["output"] for row in drift["cases"]} == {OUT}
    # The decision rule reads that output on every case (the references came from other
    # tensors than the pipeline makes here, so decisions may flip: evidence, not an error).
    assert drift["decisions"]["output"] == OUT and drift["decisions"]["total_cases"] == 3
    # The pipeline's reference tensors were compared with the device's, per case.
    assert p["results"]["pipeline"]["reference_inputs"]["x"]["cases"] == 3
    # The exports chart a passed or degraded run only (a failed one exports its status); the
    # references here may flip decisions, so the names are read from this run's predicate
    # as a passed run's.
    import dataclasses

    from edgequal.host.present.exports import github_benchmark, prometheus

    loaded = load_report(report, known=KnownDevices(), require=True)
    charted = dataclasses.replace(loaded, predicate={**p, "status": "passed"})
    names = [e["name"] for e in github_benchmark([charted])]
    assert any(n.endswith(f": drift max abs error [{OUT}]") for n in names), names
    assert f'output="{OUT}"' in prometheus([charted])
    capsys.readouterr()
    assert main(["export", str(report), "--format", "github-benchmark"]) == 0
    exported = [e["name"] for e in json.loads(capsys.readouterr().out)]
    assert exported == (names if p["status"] in ("passed", "degraded") else []), exported
    db = f"sqlite:///{tmp_path / 'h.sqlite'}"
    assert main(["history", "record", str(report), "--db", db]) == 0
    from edgequal.host.lab.series import Figure, figures_of

    assert Figure(f"drift {OUT}", "", "drift") in figures_of(p)
