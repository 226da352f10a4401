"""The checked-in gRPC stubs are exactly what scripts/gen_protos.sh generates."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gen_protos.sh"
GENERATED = ["edgequal_v1_pb2.py", "edgequal_v1_pb2.pyi", "edgequal_v1_pb2_grpc.py"]


def _pinned_version() -> str:
    match = re.search(r'^GRPCIO_TOOLS_VERSION="([^"]+)"', SCRIPT.read_text(), re.MULTILINE)
    assert match, "scripts/gen_protos.sh must pin GRPCIO_TOOLS_VERSION"
    return match.group(1)


def _installed_version() -> str | None:
    try:
        return importlib.metadata.version("grpcio-tools")
    except importlib.metadata.PackageNotFoundError:
        return None


def test_regenerating_changes_nothing(tmp_path):
    pinned, installed = _pinned_version(), _installed_version()
    if installed != pinned:
        pytest.skip(
            f"stubs are generated with grpcio-tools=={pinned}, but {installed or 'none'} is "
            f"installed (pip install grpcio-tools=={pinned})"
        )
    env = dict(os.environ, PYTHON=sys.executable)
    subprocess.run(["bash", str(SCRIPT), str(tmp_path)], check=True, env=env, timeout=60)
    for name in GENERATED:
        fresh = (tmp_path / name).read_bytes()
        checked_in = (REPO / "protos" / name).read_bytes()
        assert fresh == checked_in, f"protos/{name} is stale: run scripts/gen_protos.sh"


def test_generator_version_mismatch_fails_clearly(tmp_path):
    # An interpreter that reports a different grpcio-tools version.
    fake = tmp_path / "fake-python"
    fake.write_text("#!/bin/sh\necho 0.0.1\n")
    fake.chmod(0o755)
    env = dict(os.environ, PYTHON=str(fake))
    out = tmp_path / "out"
    proc = subprocess.run(
        ["bash", str(SCRIPT), str(out)], env=env, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 2
    assert f"needs grpcio-tools=={_pinned_version()}" in proc.stderr
    assert "found 0.0.1" in proc.stderr
    assert not out.exists()


def test_stubs_import_as_package_and_round_trip():
    from edgequal.protos import edgequal_v1_pb2 as pb
    from edgequal.protos import edgequal_v1_pb2_grpc as pb_grpc

    service = pb.DESCRIPTOR.services_by_name["Agent"]
    assert service.full_name == "edgequal.v1.Agent"
    assert [m.name for m in service.methods] == [
        "Info",
        "Stat",
        "Push",
        "Qualify",
        "GetReport",
        "Cancel",
        "Prove",
        "AcquireLease",
        "RenewLease",
        "ReleaseLease",
    ]
    assert service.methods_by_name["Push"].client_streaming
    assert service.methods_by_name["Qualify"].server_streaming
    assert hasattr(pb_grpc, "AgentStub") and hasattr(pb_grpc, "add_AgentServicer_to_server")

    chunk = pb.PushChunk(digest="ab" * 32, offset=1048576, data=b"\x00\xff", total_size=3145728)
    again = pb.PushChunk.FromString(chunk.SerializeToString())
    assert (again.digest, again.offset, again.data, again.total_size) == (
        "ab" * 32,
        1048576,
        b"\x00\xff",
        3145728,
    )
    last = pb.QualifyMessage(run_id="r1", envelope=b"{}")
    assert last.WhichOneof("body") == "envelope"
    assert pb.QualifyMessage(run_id="r1").WhichOneof("body") is None
