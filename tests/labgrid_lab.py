"""A real labgrid lab on loopback: ``labgrid-coordinator`` and ``labgrid-exporter`` from the
labgrid package, started in a temporary directory, with places made by ``labgrid-client``.

Loaded with ``load_test_helper("labgrid_lab")``. Each exported group is a place of the
same name holding one ``NetworkService`` whose ``address`` is an agent's URL (edgequal's
convention), or whatever resources the test gives.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def client(address: str, *args: str, user: str = "ci", host: str = "runner", check=True):
    """``labgrid-client -x ADDRESS ARGS`` as ``host/user``; the completed process."""
    env = {**os.environ, "LG_USERNAME": user, "LG_HOSTNAME": host}
    proc = subprocess.run(
        [str(BIN / "labgrid-client"), "-x", address, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"labgrid-client {' '.join(args)}: {proc.stderr.strip()}")
    return proc


@dataclass
class LabgridLab:
    """A running coordinator and exporter; ``address`` is the coordinator's HOST:PORT."""

    address: str
    directory: Path
    procs: list[subprocess.Popen] = field(default_factory=list)

    def client(self, *args: str, **kwargs):
        return client(self.address, *args, **kwargs)

    def _ask(self, method: str):
        """One unary call of the coordinator's gRPC service (what ``labgrid-client`` reads,
        without its seconds of start-up per call)."""
        import grpc
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb
        from labgrid.remote.generated import labgrid_coordinator_pb2_grpc as rpc

        with grpc.insecure_channel(self.address) as channel:
            stub = rpc.CoordinatorStub(channel)
            return getattr(stub, method)(getattr(pb, f"{method}Request")(), timeout=30)

    def holders(self) -> dict[str, str | None]:
        """Each place's holder as labgrid names it (``host/user``), None when free."""
        return {p.name: p.acquired or None for p in self._ask("GetPlaces").places}

    def reservations(self) -> list[dict]:
        """The coordinator's reservations: owner, state (labgrid's name) and token."""
        from labgrid.remote.common import ReservationState

        return [
            {"owner": r.owner, "state": ReservationState(r.state).name, "token": r.token}
            for r in self._ask("GetReservations").reservations
        ]

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)


def _yaml(groups: dict[str, dict]) -> str:
    lines = []
    for group, resources in groups.items():
        lines.append(f"{group}:")
        for cls, params in resources.items():
            lines.append(f"  {cls}:")
            for key, value in params.items():
                shown = f'"{value}"' if isinstance(value, str) else value
                lines.append(f"    {key}: {shown}")
    return "\n".join(lines) + "\n"


def _places_yaml(groups: dict[str, dict], tags: dict[str, dict]) -> str:
    """The coordinator's ``places.yaml``: a place per group matching its resources, with its
    tags (what ``labgrid-client create``, ``add-match`` and ``set-tags`` would store, read
    at start-up instead of nine client processes)."""
    lines = []
    for group in groups:
        lines.append(f"{group}:")
        shown = ", ".join(f"{k}: {v}" for k, v in (tags.get(group) or {}).items())
        lines.append(f"  tags: {{{shown}}}")
        lines.append("  matches:")
        lines.append(f"  - {{exporter: exp, group: {group}, cls: '*'}}")
    return "\n".join(lines) + "\n"


# labgrid's coordinator with its clock shortened: a reservation expires ``lease`` seconds
# after its last refresh (labgrid: 60) and the coordinator's passes (expiry, scheduling,
# saving) run every ``pass`` seconds (labgrid: 15). Everything else is labgrid's own code.
_SHORT_CLOCK_COORDINATOR = """
import asyncio, sys, time, traceback
from labgrid.remote import common, coordinator

lease, step = float(sys.argv[1]), float(sys.argv[2])
# A reservation's timeout is labgrid's lease (refresh's default delta, 60 s) past its last
# refresh; it expires ``lease`` s past that refresh instead.
delta = common.Reservation.refresh.__defaults__[0]
common.Reservation.expired = property(lambda self: self.timeout - delta + lease < time.time())


async def poll(self, step_func):  # labgrid's Coordinator.poll, every ``step`` s
    while not self.loop.is_closed():
        try:
            await asyncio.sleep(step)
            await step_func()
        except asyncio.CancelledError:
            break
        except Exception:
            traceback.print_exc()


coordinator.Coordinator.poll = poll
sys.argv = ["labgrid-coordinator", *sys.argv[3:]]
sys.exit(coordinator.main())
"""


def start_lab(
    directory: Path,
    groups: dict[str, dict],
    tags: dict[str, dict],
    clock: tuple[float, float] | None = None,
) -> LabgridLab:
    """Coordinator, one exporter ``exp`` exporting ``groups`` (group -> class -> params; each
    group holds a ``NetworkService``), and a place per group matching its resources, tagged
    with ``tags[group]``.

    ``clock`` (lease, pass) shortens the coordinator's clock: a reservation not refreshed
    for ``lease`` seconds expires (labgrid: 60), checked every ``pass`` seconds (labgrid: 15).
    """
    if shutil.which("labgrid-coordinator", path=str(BIN)) is None:
        raise RuntimeError("labgrid is not installed (pip install 'edgequal[labgrid]')")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "places.yaml").write_text(_places_yaml(groups, tags))
    port = _free_port()
    lab = LabgridLab(f"127.0.0.1:{port}", directory)
    log = open(directory / "coordinator.log", "wb")
    lab.procs.append(
        subprocess.Popen(
            [str(BIN / "labgrid-coordinator"), "-l", lab.address]
            if clock is None
            else [sys.executable, "-c", _SHORT_CLOCK_COORDINATOR, *map(str, clock)]
            + ["-l", lab.address],
            cwd=directory,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    )
    _wait_for_port(port, lab)
    (directory / "exporter.yaml").write_text(_yaml(groups))
    elog = open(directory / "exporter.log", "wb")
    lab.procs.append(
        subprocess.Popen(
            [
                str(BIN / "labgrid-exporter"),
                "-c",
                lab.address,
                "-n",
                "exp",
                "--hostname",
                "127.0.0.1",
                str(directory / "exporter.yaml"),
            ],
            cwd=directory,
            stdout=elog,
            stderr=subprocess.STDOUT,
        )
    )
    from edgequal.host.lab.labgrid_places import Coordinator

    deadline = time.monotonic() + 60
    session = Coordinator(lab.address)  # one session polled here, not a client process a try
    try:
        while True:  # the exporter's resources reach the coordinator, every place matched
            places = session.places()
            if len(places) == len(groups) and not any(
                (p.why or "").startswith("no agent resource") for p in places
            ):
                break
            if time.monotonic() > deadline:
                lab.stop()
                raise RuntimeError(
                    f"exporter did not register: {(directory / 'exporter.log').read_text()}"
                )
            time.sleep(0.1)
    finally:
        session.close()
    return lab


class CountingRelay:
    """A TCP relay on 127.0.0.1 in front of an agent that counts the connections made to it:
    what reached the agent's port, whatever was said on them."""

    def __init__(self, port: int):
        import threading

        self.target = port
        self.connections = 0
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import threading

        while True:
            try:
                client, _ = self._server.accept()
            except OSError:  # closed
                return
            self.connections += 1
            upstream = socket.create_connection(("127.0.0.1", self.target))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source, sink) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._server.close()


def _wait_for_port(port: int, lab: LabgridLab) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        if lab.procs[0].poll() is not None:
            break
        time.sleep(0.1)
    lab.stop()
    raise RuntimeError(
        f"labgrid-coordinator did not listen: {(lab.directory / 'coordinator.log').read_text()}"
    )
