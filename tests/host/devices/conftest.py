"""Fixtures for the device tests: real ``edgequal-agent serve`` processes with a token."""

from __future__ import annotations

from pathlib import Path

import pytest

TOKEN = "host-tests-token-" + "d" * 24


@pytest.fixture
def token_file(tmp_path) -> Path:
    """A private file holding :data:`TOKEN`."""
    path = tmp_path / "agent.token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def start_agent(tmp_path, local_agents):
    """``start_agent(name, *serve_args)``: a real agent (tests/local_agents.py, ``--debug``:
    it logs every authorized call) with state ``tmp_path/name``, stopped at the end of the
    test. It has ``address``, ``state``, ``proc``, ``log()``, ``public_key_raw()`` and
    ``stored_files()``."""
    started = []

    def start(name: str, *serve_args: str):
        agent = local_agents.serve(tmp_path / name, args=serve_args, debug=True)
        started.append(agent)
        return agent

    yield start
    for agent in started:
        agent.stop()


@pytest.fixture
def serve_servicer():
    """``serve_servicer(servicer, workers=4)``: an impostor's gRPC server (the attacker in a
    test) for ``servicer`` on 127.0.0.1; returns its ``grpc://`` address. Stopped after."""
    from concurrent import futures

    import grpc
    from edgequal.protos import edgequal_v1_pb2_grpc as pb_grpc

    servers = []

    def start(servicer, workers: int = 4) -> str:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers))
        pb_grpc.add_AgentServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return f"grpc://127.0.0.1:{port}"

    yield start
    for server in servers:
        server.stop(0)
