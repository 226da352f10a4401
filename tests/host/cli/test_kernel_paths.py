"""``edgequal qualify --paths`` through the CLI and the local agent: a classifier whose Conv
weights changed by 1 % since its golden set (made with ``--intermediates``) was recorded is
run through two graph optimisation levels and an execution provider this machine lacks;
each path's drift, the absent one's reason and the first divergent node come back in the
signed report, the summary, ``--json`` and the page."""

from __future__ import annotations

import json

import numpy as np
import pytest
from edgequal.cli.main import main as edgequal_main
from edgequal.host.examples.catalog import build_example, example_inputs


@pytest.fixture
def planted(tmp_path):
    import onnx
    from onnx import numpy_helper

    model = build_example("classifier", tmp_path)
    inputs = tmp_path / "inputs.npz"
    cases = example_inputs("classifier", 3)
    np.savez(inputs, **{f"c{i}/image": c["image"] for i, c in enumerate(cases)})
    golden = tmp_path / "g.npz"
    argv = ["golden", "make", str(model), "--inputs", str(inputs), "--intermediates"]
    assert edgequal_main([*argv, "-o", str(golden)]) == 0
    m = onnx.load(model)
    for init in m.graph.initializer:
        if init.name == "conv.weight":
            w = numpy_helper.to_array(init) * np.float32(1.01)
            init.CopyFrom(numpy_helper.from_array(w.astype(np.float32), init.name))
    changed = tmp_path / "classifier_v2.onnx"
    onnx.save(m, changed)
    return changed, golden


def test_a_path_of_another_runtime_is_bad_usage(tmp_path, capsys):
    model = build_example("classifier", tmp_path)
    golden = tmp_path / "g.npz"
    golden.write_bytes(b"checked on the device")  # refused before it is read
    argv = ["qualify", str(model), "--golden", str(golden), "--paths", "resolver:auto"]
    assert edgequal_main(argv) == 2
    err = capsys.readouterr().err
    assert "kernel path resolver:auto is a litert path; this model runs on onnxruntime" in err
    assert edgequal_main(["qualify", str(model), "--paths", "opt:fast"]) == 2


@pytest.mark.slow
def test_paths_side_by_side_and_the_first_divergent_node(planted, tmp_path, capsys, short_plan):
    model, golden = planted
    report = tmp_path / "r.json"
    # onnxruntime's PyPI wheels carry the Azure provider, which takes none of these nodes:
    # a real accelerator path whose every node falls back to the CPU.
    import onnxruntime

    azure = "AzureExecutionProvider" in onnxruntime.get_available_providers()
    paths = "opt:disabled,opt:all,ep:CUDA,ep:Azure"
    argv = ["qualify", str(model), "--golden", str(golden), "-o", str(report), *short_plan]
    argv.append("--allow-golden-mismatch")  # the model changed since its golden set
    assert edgequal_main([*argv, "--paths", paths]) == 1  # the model's own drift fails
    out = capsys.readouterr().out
    assert "Kernel paths (reference: opt:disabled)" in out
    assert "first divergent node: conv (Conv)" in out
    assert "ep:CUDA" in out and "onnxruntime-gpu" in out

    from edgequal.host.devices.trust import KnownDevices
    from edgequal.host.judge.report_file import load_report

    p = load_report(report, known=KnownDevices()).predicate
    assert p["plan"]["kernel_paths"] == ["opt:disabled", "opt:all", "ep:CUDA", "ep:Azure"]
    section = p["results"]["kernel_paths"]
    by_name = {e["name"]: e for e in section["paths"]}
    assert by_name["ep:CUDA"]["status"] == "absent"
    assert "CUDAExecutionProvider" in by_name["ep:CUDA"]["reason"]
    assert by_name["ep:Azure"]["status"] == ("ok" if azure else "absent")
    if azure:
        fallback = by_name["ep:Azure"]["placement"]["cpu_fallback"]
        assert by_name["ep:Azure"]["placement"]["off_cpu_nodes"] == 0
        assert len(fallback["cpu_nodes"]) == by_name["ep:Azure"]["placement"]["nodes"] > 0
        assert "fell back to the CPU" in out
    for name in ("opt:disabled", "opt:all"):
        entry = by_name[name]
        assert entry["status"] == "ok" and entry["drift"]["passed"] is False
        assert entry["latency"]["count"] > 0
        loc = entry["divergence"]["localization"]
        assert loc["node"] == "conv" and loc["op_type"] == "Conv" and loc["curve"]
    own = p["results"]["divergence"]["localization"]
    assert own["node"] == "conv"
    assert any(f["kind"] == "divergence" and f["node"] == "conv" for f in p["findings"])

    assert edgequal_main(["verify", str(report), "--json"]) == 0
    capsys.readouterr()
    page = tmp_path / "page.html"
    assert edgequal_main(["report", "html", str(report), "-o", str(page)]) == 0
    html = page.read_text()
    assert "Kernel paths" in html and "first divergent node: conv (Conv)" in html
    assert "per-node error over tolerance" in html  # the curves' plot
    capsys.readouterr()
    assert edgequal_main(["compare", str(report), str(report), "--json"]) in (0, 1)
    compared = json.loads(capsys.readouterr().out)
    assert "conv (Conv)" in json.dumps(compared)
