"""ONNX models whose weights live in external files: pushed as a bundle, every file a subject.

Models are built here with onnx.helper and written out with
``onnx.external_data_helper.convert_model_to_external_data``; forged locations
are set on the tensor's ``external_data`` entries as a hostile exporter would.
Good bundles run on a real agent on 127.0.0.1 and verify on the host with each
file as an artifact; every unsafe location is refused before any data file is
opened, with one line, on the host before a push and on the agent before a load.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import os
from pathlib import Path

import grpc
import numpy as np
import onnx
import pytest
from edgequal.agent.service.server import build_server
from edgequal.contract.errors import ModelRejected
from edgequal.contract.keys import load_or_create_device_key
from edgequal.contract.nonce import new_nonce
from edgequal.contract.onnx_external_data import (
    check_external_data,
    external_data_refs,
)
from edgequal.contract.signing import MEASURED_STATUSES
from edgequal.host.devices.qualify import external_data_files, qualify
from edgequal.host.devices.trust import KnownDevices
from edgequal.host.devices.verify import verify_envelope
from edgequal.host.errors import UsageError
from edgequal.host.golden import make_golden
from edgequal.host.transport.base import QualifyRequest
from edgequal.host.transport.grpc import GrpcTransport
from edgequal.protos import edgequal_v1_pb2 as pb
from edgequal.protos import edgequal_v1_pb2_grpc as pb_grpc
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import convert_model_to_external_data, set_external_data

W = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
B = np.array([0.5, -1.0, 2.0], dtype=np.float32)


def build_model(directory: Path, name: str = "net.onnx", location: str = "weights.bin") -> Path:
    """y = x @ W + b with W and b in ``location`` beside the model (real external data)."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])],
        "external",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        initializer=[numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    convert_model_to_external_data(
        model, all_tensors_to_one_file=True, location=location, size_threshold=0
    )
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    onnx.save_model(model, str(path))
    return path


def forge(model_path: Path, tensor: str = "W", **entries) -> Path:
    """Rewrite one tensor's external_data entries (location, offset, length) in place."""
    model = onnx.load(str(model_path), load_external_data=False)
    t = next(i for i in model.graph.initializer if i.name == tensor)
    for key, value in entries.items():
        entry = next((e for e in t.external_data if e.key == key), None)
        if entry is None:
            entry = t.external_data.add()
            entry.key = key
        entry.value = str(value)
    model_path.write_bytes(model.SerializeToString())
    return model_path


class Opens:
    """Records every path opened while active (builtins.open and os.open)."""

    def __init__(self, monkeypatch):
        self.paths: list[str] = []
        real_open, real_os_open = builtins.open, os.open

        def spy_open(file, *a, **k):
            self.paths.append(os.fspath(file) if not isinstance(file, int) else str(file))
            return real_open(file, *a, **k)

        def spy_os_open(path, *a, **k):
            self.paths.append(os.fspath(path))
            return real_os_open(path, *a, **k)

        monkeypatch.setattr(builtins, "open", spy_open)
        monkeypatch.setattr(os, "open", spy_os_open)


# -- finding and checking references ---------------------------------------------


def test_references_are_found_with_offsets_and_lengths(tmp_path):
    model = build_model(tmp_path / "m")
    refs = check_external_data(model)
    assert [(r.tensor, r.location) for r in refs] == [("W", "weights.bin"), ("b", "weights.bin")]
    w, b = refs
    assert (w.length, w.nbytes, b.nbytes) == (48, 48, 12)
    assert w.offset + w.length <= (model.parent / "weights.bin").stat().st_size
    # The walker agrees with onnx's own reading of the file.
    loaded = onnx.load(str(model), load_external_data=False)
    expected = [
        {e.key: e.value for e in t.external_data}["location"] for t in loaded.graph.initializer
    ]
    assert [r.location for r in external_data_refs(model.read_bytes())] == expected


def test_references_inside_subgraphs_are_found(tmp_path):
    """An external tensor inside an If branch (a node attribute's graph) is checked too."""
    inner_const = numpy_helper.from_array(W, "Wc")
    branch = helper.make_graph(
        [helper.make_node("Constant", [], ["out"], value=inner_const)],
        "branch",
        [],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [4, 3])],
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)],
        "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    # onnx's converter leaves subgraph tensors inline; a hostile exporter need not.
    for attr in model.graph.node[0].attribute:
        t = attr.g.node[0].attribute[0].t
        set_external_data(t, location="../escape.bin", offset=0, length=48)
        t.ClearField("raw_data")
    path = tmp_path / "m" / "if.onnx"
    path.parent.mkdir()
    path.write_bytes(model.SerializeToString())
    assert [r.tensor for r in external_data_refs(path.read_bytes())] == ["Wc", "Wc"]
    with pytest.raises(ModelRejected, match="outside the model's directory"):
        check_external_data(path)


@pytest.mark.parametrize(
    "entries, message",
    [
        ({"location": "../secret.bin"}, r"'\.\./secret\.bin', outside the model's directory"),
        ({"location": "/etc/hostname"}, "is an absolute path"),
        ({"location": "sub/../../secret.bin"}, "outside the model's directory"),
        ({"location": "*/_ORT_MEM_ADDR_/*"}, "in-memory location"),
        ({"location": "other.bin"}, "'other.bin', which is not in the model's bundle"),
        ({"offset": 10_000}, r"asks for 48 bytes at offset 10000 of 'weights\.bin', which holds"),
        ({"length": 4096}, r"asks for 4096 bytes at offset 0 of 'weights\.bin'"),
        ({"offset": 40}, r"asks for 48 bytes at offset 40"),
        ({"offset": "-1"}, "has offset '-1'"),
    ],
)
def test_unsafe_locations_are_refused_before_any_read(tmp_path, monkeypatch, entries, message):
    model = build_model(tmp_path / "bundle")
    (tmp_path / "secret.bin").write_bytes(b"s" * 4096)
    forge(model, **entries)
    opens = Opens(monkeypatch)
    with pytest.raises(ModelRejected, match=message) as e:
        check_external_data(model)
    assert "\n" not in str(e.value)
    assert opens.paths == [str(model)], "only the model file itself may be opened"


def test_a_location_through_a_symlink_is_refused(tmp_path, monkeypatch):
    model = build_model(tmp_path / "bundle")
    (tmp_path / "secret.bin").write_bytes((model.parent / "weights.bin").read_bytes())
    (model.parent / "weights.bin").unlink()
    (model.parent / "weights.bin").symlink_to(tmp_path / "secret.bin")
    opens = Opens(monkeypatch)
    with pytest.raises(ModelRejected, match="'weights.bin', through a symlink"):
        check_external_data(model)
    assert opens.paths == [str(model)]
    # A symlinked directory on the way is refused the same way.
    forge(model, location="d/weights.bin")
    (model.parent / "d").symlink_to(tmp_path)
    with pytest.raises(ModelRejected, match="through a symlink"):
        check_external_data(model)


def test_a_model_that_names_external_data_but_cannot_be_read_is_refused(tmp_path):
    model = build_model(tmp_path / "b")
    data = model.read_bytes()
    model.write_bytes(data[: data.index(b"location") + 12])  # cut inside the entry
    with pytest.raises(ModelRejected, match="structure cannot be read"):
        check_external_data(model)


def test_models_without_external_data_and_tflite_pass(example_models):
    for name in ("classifier", "classifier_tflite", "micro"):
        assert check_external_data(example_models[name]) == []


def test_the_host_refuses_before_it_pushes(tmp_path):
    model = forge(build_model(tmp_path / "b"), location="../secret.bin")
    (tmp_path / "secret.bin").write_bytes(b"s" * 4096)
    with pytest.raises(UsageError, match="outside the model's directory") as e:
        external_data_files(model)
    assert e.value.exit_code == 2


# -- end to end: a real agent on 127.0.0.1 -----------------------------------------


@pytest.fixture
def agent(tmp_path):
    state = tmp_path / "agent-state"
    key = load_or_create_device_key(state)
    server = build_server("127.0.0.1:0", state, Path("/"), key=key).start()
    known = KnownDevices(tmp_path / "known_devices")
    known.trust("board", f"grpc://127.0.0.1:{server.port}", key.public_key_raw())
    try:
        yield server, known
    finally:
        server.stop(0)


@pytest.mark.slow
def test_a_bundle_is_pushed_measured_and_every_file_is_a_subject(agent, tmp_path, quick_plan):
    server, known = agent
    model = build_model(tmp_path / "host")
    weights = model.parent / "weights.bin"
    golden = tmp_path / "g.npz"
    x = np.array([[1.0, 2.0, 3.0, 4.0]], dtype=np.float32)
    make_golden(model, {"c0": {"x": x}, "c1": {"x": -x}}, golden)
    with GrpcTransport(f"127.0.0.1:{server.port}") as transport:
        outcome = qualify(transport, model, golden, quick_plan(), known=known, device_name="board")
    p = outcome.report.predicate
    assert p["status"] in MEASURED_STATUSES
    assert p["results"]["drift"]["passed"] is True
    subjects = {s["name"]: s["sha256"] for s in outcome.report.subjects}
    assert subjects == {
        "net.onnx": hashlib.sha256(model.read_bytes()).hexdigest(),
        "weights.bin": hashlib.sha256(weights.read_bytes()).hexdigest(),
        "g.npz": hashlib.sha256(golden.read_bytes()).hexdigest(),
    }
    assert outcome.bytes_sent == sum(f.stat().st_size for f in (model, weights, golden))
    # Each file verifies as an artifact of the report; a changed weights file does not.
    verify_envelope(outcome.envelope, known=known, artifacts=[model, weights, golden])
    weights.write_bytes(weights.read_bytes()[:-1] + b"\x00")
    with pytest.raises(Exception, match="weights.bin: sha256 .* does not match subject"):
        verify_envelope(outcome.envelope, known=known, artifacts=[weights])
    # Nothing of the run's bundle is left on the device.
    assert not any((server.service.runs.state_dir / "bundles").glob("*"))


def _push(stub, path: Path) -> str:
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    stub.Push(
        iter([pb.PushChunk(digest=digest, offset=0, data=data, total_size=len(data))]), timeout=30
    )
    return digest


def _qualify_raw(stub, model_digest, model_name, extra, quick_plan) -> tuple[list, bytes]:
    nonce = new_nonce()
    request = pb.QualifyRequest(
        model_digest=model_digest,
        plan_json=json.dumps(quick_plan()),
        nonce=nonce,
        model_name=model_name,
        extra_subjects_json=json.dumps(
            [{"name": n, "digest": {"sha256": d}} for n, d in extra.items()]
        )
        if extra
        else "",
    )
    messages = list(stub.Qualify(request, timeout=120))
    events = [json.loads(m.event_json) for m in messages if m.event_json]
    return events, messages[-1].envelope


@pytest.mark.parametrize(
    "location, extra, message",
    [
        ("../device_key.pem", {}, "outside the model's directory"),
        ("weights.bin", {}, "'weights.bin', which is not in the model's bundle"),
        # Another artifact of the store, named by its digest: not in this model's bundle.
        ("STORE", {}, "which is not in the model's bundle"),
        ("weights.bin", {"weights.bin": "SHORT"}, "asks for 48 bytes at offset"),
    ],
)
def test_the_agent_refuses_a_hostile_bundle_with_a_signed_failed_report(
    agent, tmp_path, quick_plan, location, extra, message
):
    server, known = agent
    model = build_model(tmp_path / "host")
    weights = model.parent / "weights.bin"
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = pb_grpc.AgentStub(channel)
        weights_digest = _push(stub, weights)
        if location == "STORE":
            location = weights_digest
        forge(model, location=location)
        for name, value in list(extra.items()):
            if value == "SHORT":
                short = tmp_path / "short.bin"
                short.write_bytes(weights.read_bytes()[:20])
                extra[name] = _push(stub, short)
        events, envelope = _qualify_raw(stub, _push(stub, model), "net.onnx", extra, quick_plan)
        assert not stub.Info(pb.InfoRequest(), timeout=10).busy
    report = verify_envelope(envelope, known=known, device="board")
    assert report.status == "failed"
    (finding,) = [f for f in report.predicate["findings"] if f["kind"] == "model_rejected"]
    assert finding["phase"] == "preflight"
    assert message in finding["message"] and "\n" not in finding["message"]
    # Refused before the runtime saw the model: no measurement phase started.
    assert not [e for e in events if e.get("type") == "phase"]
    assert {s["name"] for s in report.subjects} == {"net.onnx", *extra}


@pytest.mark.slow
def test_a_bundle_over_ssh_gives_the_same_subjects(sshd_server, agent_cmd, tmp_path, quick_plan):
    """Over SSH (real sshd on 127.0.0.1, run-plan): the same bundle, the same subjects and checks."""
    model = build_model(tmp_path / "host")
    weights = model.parent / "weights.bin"
    transport = sshd_server.transport(agent_cmd, tmp_path / "agent-state")
    with transport:
        key = load_or_create_device_key(tmp_path / "agent-state")
        known = KnownDevices(tmp_path / "known_devices")
        known.trust("sshboard", transport.address, key.public_key_raw())
        outcome = qualify(transport, model, None, quick_plan(), known=known, device_name="sshboard")
        assert outcome.report.status in MEASURED_STATUSES
        assert {s["name"] for s in outcome.report.subjects} == {"net.onnx", "weights.bin"}
        verify_envelope(outcome.envelope, known=known, artifacts=[model, weights])
        # A hostile location is refused on the device too, signed, over SSH.
        forge(model, location="../device_key.pem")
        digest = hashlib.sha256(model.read_bytes()).hexdigest()
        transport.push(model, digest)
        envelope = transport.qualify(
            QualifyRequest(
                model_digest=digest,
                plan=quick_plan(),
                nonce=new_nonce(),
                model_name="net.onnx",
                extra_files=[
                    {
                        "name": "weights.bin",
                        "sha256": hashlib.sha256(weights.read_bytes()).hexdigest(),
                    }
                ],
            ),
            lambda e: None,
        )
    refused = verify_envelope(envelope, known=known, device="sshboard")
    assert refused.status == "failed"
    assert "outside the model's directory" in refused.predicate["reason"]


def test_bundle_names_and_subjects_are_distinct(tmp_path):
    """The model, its files and the golden set are distinct subjects; clashing names are refused."""
    from edgequal.agent.run_request import RunRequest, check_extra_files, subjects_for
    from edgequal.contract.errors import BadInput
    from edgequal.contract.plan import Plan

    a, b, c = "a" * 64, "b" * 64, "c" * 64
    files = check_extra_files("net.onnx", [{"name": "w/x.bin", "sha256": b}], None)
    request = RunRequest(
        "run-1", a, c, Plan.from_json({}), "n", "net.onnx", "w/x.bin", extra_files=files
    )
    assert subjects_for(request) == [
        {"name": "net.onnx", "sha256": a, "role": "model"},
        {"name": "w/x.bin", "sha256": b, "role": "external_data"},
        {"name": "golden/w/x.bin", "sha256": c, "role": "golden"},
    ]
    for extra, message in (
        ([{"name": "net.onnx", "sha256": b}], "clashes"),
        ([{"name": "net.onnx/x", "sha256": b}], "clashes"),
        ([{"name": "x", "sha256": b}, {"name": "x/y", "sha256": b}], "clashes"),
        ([{"name": "x", "sha256": b}, {"name": "x", "sha256": c}], "clashes"),
        ([{"name": "a\nb", "sha256": b}], "not a plain relative file name"),
        ([{"name": "", "sha256": b}], "not a file name"),
        ("x", "must be a list"),
    ):
        with pytest.raises(BadInput, match=message):
            check_extra_files("net.onnx", extra, None)
