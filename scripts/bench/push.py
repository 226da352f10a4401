#!/usr/bin/env python3
"""Benchmark: pushing an artifact to a real agent over loopback gRPC vs a bare gRPC stream.

Both servers run as separate processes on 127.0.0.1 (as an agent would) and
receive the same 1 MiB PushChunk messages from this process:

- agent: ``GrpcTransport.push`` to ``edgequal.agent.service.server`` — Stat, stream,
  hash, write, fsync, verify, atomic rename (the artifact is stored);
- bare: a minimal generic-handler server that only feeds each chunk to sha256.

Then the same artifact is pushed again, which must send 0 bytes. Prints one
JSON object: MB/s for each (median of --repeat runs), the ratio agent/bare,
local read+hash speed for scale, and the re-push figures.

    python scripts/bench/push.py [--size-mb 200] [--repeat 3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
from edgequal.host.transport.grpc import CHUNK_BYTES, GrpcTransport
from edgequal.protos import edgequal_v1_pb2 as pb

AGENT_SERVER = r"""
import sys
from pathlib import Path
from edgequal.agent.service.server import build_server
state = Path(sys.argv[1])
agent = build_server("127.0.0.1:0", state, state, max_artifact_bytes=int(sys.argv[2])).start()
print(agent.port, flush=True)
sys.stdin.read()
agent.stop(0)
"""

# The baseline, written plainly: receive the same chunks, hash them, nothing else.
BARE_SERVER = r"""
import hashlib, sys
from concurrent import futures
import grpc
from edgequal.protos import edgequal_v1_pb2 as pb

def push(chunks, context):
    sha = hashlib.sha256()
    received = 0
    for chunk in chunks:
        sha.update(chunk.data)
        received += len(chunk.data)
    return pb.PushResponse(digest=sha.hexdigest(), committed_size=received,
                           bytes_received=received, complete=True)

server = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                     options=[("grpc.max_receive_message_length", 4 * 1024 * 1024 + 65536)])
handler = grpc.stream_unary_rpc_method_handler(
    push, request_deserializer=pb.PushChunk.FromString,
    response_serializer=pb.PushResponse.SerializeToString)
server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench.Bare", {"Push": handler}),))
port = server.add_insecure_port("127.0.0.1:0")
server.start()
print(port, flush=True)
sys.stdin.read()
server.stop(0)
"""


def _start(code: str, *args: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    if not line.strip().isdigit():
        proc.kill()
        raise SystemExit(f"benchmark server did not start: {line!r}")
    return proc, int(line)


def _stop(proc: subprocess.Popen) -> None:
    proc.stdin.close()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def _make_artifact(path: Path, size_bytes: int) -> str:
    sha = hashlib.sha256()
    with open(path, "wb") as f:
        left = size_bytes
        while left:
            block = os.urandom(min(CHUNK_BYTES, left))
            sha.update(block)
            f.write(block)
            left -= len(block)
    return sha.hexdigest()


def _read_and_hash_s(path: Path) -> float:
    t0 = time.perf_counter()
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK_BYTES):
            sha.update(block)
    return time.perf_counter() - t0


def _bare_chunks(path: Path, digest: str, size: int):
    with open(path, "rb") as f:
        offset = 0
        while offset < size:
            data = f.read(CHUNK_BYTES)
            first = offset == 0
            yield pb.PushChunk(
                digest=digest if first else "",
                offset=offset,
                data=data,
                total_size=size if first else 0,
            )
            offset += len(data)


def _bare_push_s(port: int, path: Path, digest: str, size: int) -> float:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.stream_unary(
            "/bench.Bare/Push",
            request_serializer=pb.PushChunk.SerializeToString,
            response_deserializer=pb.PushResponse.FromString,
        )
        grpc.channel_ready_future(channel).result(timeout=10)
        t0 = time.perf_counter()
        response = call(_bare_chunks(path, digest, size), timeout=600)
        elapsed = time.perf_counter() - t0
    if response.digest != digest or response.bytes_received != size:
        raise SystemExit("bare stream received other bytes than were sent")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its JSON figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=200, help="artifact size in MB (10^6 bytes)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; medians are reported")
    args = parser.parse_args(argv)
    size = args.size_mb * 1_000_000
    mb = size / 1e6

    with tempfile.TemporaryDirectory(prefix="edgequal-bench-push-") as tmp:
        tmp_path = Path(tmp)
        artifact = tmp_path / "artifact.bin"
        digest = _make_artifact(artifact, size)
        state = tmp_path / "agent-state"
        agent_proc, agent_port = _start(AGENT_SERVER, str(state), str(size + 1))
        bare_proc, bare_port = _start(BARE_SERVER)
        stored = state / "artifacts" / "sha256" / digest
        agent_s, bare_s, hash_s = [], [], []
        try:
            with GrpcTransport(f"127.0.0.1:{agent_port}", timeout_s=10) as transport:
                transport.info()  # connect before timing
                for _ in range(args.repeat):
                    # Alternate the two so drift in machine load hits both alike.
                    hash_s.append(_read_and_hash_s(artifact))
                    bare_s.append(_bare_push_s(bare_port, artifact, digest, size))
                    if stored.exists():
                        os.unlink(stored)
                    t0 = time.perf_counter()
                    result = transport.push(artifact, digest)
                    agent_s.append(time.perf_counter() - t0)
                    if result.bytes_sent != size:
                        raise SystemExit(f"push sent {result.bytes_sent} of {size} bytes")
                stored_ok = hashlib.sha256(stored.read_bytes()).hexdigest() == digest
                t0 = time.perf_counter()
                again = transport.push(artifact, digest)
                repush_s = time.perf_counter() - t0
        finally:
            _stop(agent_proc)
            _stop(bare_proc)

    agent_mb_s = mb / statistics.median(agent_s)
    bare_mb_s = mb / statistics.median(bare_s)
    figures = {
        "size_mb": args.size_mb,
        "chunk_bytes": CHUNK_BYTES,
        "repeat": args.repeat,
        "cpu_count": os.cpu_count(),
        "agent_push_mb_s": round(agent_mb_s, 1),
        "bare_stream_mb_s": round(bare_mb_s, 1),
        "ratio_agent_to_bare": round(agent_mb_s / bare_mb_s, 3),
        "read_and_hash_mb_s": round(mb / statistics.median(hash_s), 1),
        "agent_push_s": [round(s, 3) for s in agent_s],
        "bare_stream_s": [round(s, 3) for s in bare_s],
        "stored_and_verified": stored_ok,
        "repush_bytes_sent": again.bytes_sent,
        "repush_ms": round(repush_s * 1000, 1),
    }
    print(json.dumps(figures))
    return 0 if stored_ok and again.bytes_sent == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
