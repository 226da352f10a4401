"""Labs on labgrid: the coordinator's places and reservations arbitrate the boards;
edgequal measures.

A lab file with a ``[labgrid]`` table names a labgrid coordinator (labgrid 26's gRPC
coordinator) instead of listing devices::

    [labgrid]
    coordinator = "labgrid.lab:20408"
    places = ["pi5-a", "pi5-b"]        # or tags = ["board=pi5"] (labgrid's key=value tags)
    token_env = "LAB_AGENT_TOKEN"       # the agents' token, as for [devices.NAME]

Each selected place is one device of the lab, named as the place (pin it as that name with
``edgequal devices trust PLACE ADDRESS``). Its agent is found through a resource the place
holds: a ``NetworkService`` whose ``address`` is the agent's URL (``grpc://HOST:PORT`` or
``ssh://USER@HOST``; ``port`` and ``username`` as labgrid requires). A place without one
is named and skipped.

Around each cell of ``fleet run``, ``fleet health`` and ``fleet requalify`` the place is
reserved (a labgrid reservation filtered on its name), the allocation awaited while
labgrid says who holds it, then acquired; it is released when the cell ends, on error and
on Ctrl-C. Nothing reaches the board before its place is held (host/lab/fleet.py opens the
device inside it). A reservation no longer polled (its host died) expires by labgrid's rule
(60 s); a place that host had acquired stays acquired by it until the lab releases it
(``labgrid-client -p PLACE release --kick``, docs/fleet.md). The agent's own lease is still
taken inside the place (defence in depth), and the device still proves its pinned key
before anything is sent.

labgrid's client session is asynchronous: it runs on an event loop of its own, in one
thread, and each call here waits for its result.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ..errors import DeviceBusy, TransportError
from .inventory import LabDevice, LabgridSettings, SecretRef

AGENT_RESOURCE_CLASSES = ("NetworkService",)
"""Resource classes whose ``address`` is an agent's URL."""
_CALL_TIMEOUT_S = 30.0
_POLL_S = 0.5


@dataclass(frozen=True)
class PlaceInfo:
    """A place as the coordinator lists it, and the agent found on it."""

    name: str
    tags: dict[str, str] = field(default_factory=dict)
    acquired: str | None = None
    agent: str | None = None
    why: str | None = None
    """Why the place is skipped (no agent resource), else None."""

    def device(self, token: SecretRef | None) -> LabDevice:
        """The lab device this place is: named as the place, reached at its agent."""
        return LabDevice(
            name=self.name,
            address=self.agent or "",
            tags=tuple(sorted(LabgridSettings.tags_of(self.tags))),
            token=token if (self.agent or "").startswith("grpc://") else None,
        )


class Coordinator:
    """A client session with a labgrid coordinator, usable from any thread."""

    def __init__(self, address: str):
        try:
            from labgrid.remote.client import ClientSession
        except ImportError as e:
            raise TransportError(
                "a [labgrid] lab needs the labgrid package on this host",
                hint="pip install 'edgequal[labgrid]'",
            ) from e
        self.address = address
        self._held: dict[str, str] = {}  # place -> reservation token, while held here
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="labgrid", daemon=True)
        self._thread.start()
        self._session = None

        async def started():
            # grpc.aio binds a channel to the loop it is made on: make it on ours.
            self._session = ClientSession(address, self._loop)
            await self._session.start()

        try:
            self._call(started())
        except Exception as e:
            self.close()
            raise TransportError(
                f"labgrid coordinator {address} does not answer: {_first_line(e)}",
                hint="check [labgrid] coordinator in the lab file",
            ) from e

    def _call(self, coro, timeout_s: float = _CALL_TIMEOUT_S):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    async def _stub(self, name: str, request):
        import grpc

        try:
            return await getattr(self._session.stub, name)(request)
        except grpc.aio.AioRpcError as e:
            raise TransportError(f"labgrid coordinator {self.address}: {e.details()}") from e

    def close(self) -> None:
        """Release every place still held here (Ctrl-C, an error in another thread), then
        end the session and its loop."""
        with self._lock:
            held = dict(self._held)
        for place, token in held.items():
            self._give_back(place, token, acquired=True)
        with contextlib.suppress(Exception):
            if getattr(self, "_session", None) is not None and self._session.pump_task:
                self._call(self._session.stop(), 10)
                self._call(self._session.close(), 10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    # -- inventory ------------------------------------------------------------------

    def places(self) -> list[PlaceInfo]:
        """Every place, its tags and holder, and the agent address its resources name."""
        self._call(self._session.sync_with_coordinator())
        out = []
        for name, place in sorted(self._session.places.items()):
            agents = []
            for exporter, groups in self._session.resources.items():
                for group, resources in groups.items():
                    for rname, entry in resources.items():
                        if entry.cls not in AGENT_RESOURCE_CLASSES:
                            continue
                        if place.hasmatch((exporter, group, entry.cls, rname)):
                            agents.append(str(entry.params.get("address") or ""))
            agent = next((a for a in agents if a.startswith(("grpc://", "ssh://"))), None)
            why = None
            if agent is None:
                why = (
                    "no agent resource (a NetworkService whose address is grpc://… or ssh://…)"
                    if not agents
                    else f"its NetworkService address {agents[0]!r} is no agent URL"
                )
            out.append(PlaceInfo(name, dict(place.tags), place.acquired, agent, why))
        return out

    # -- holding a place ------------------------------------------------------------

    @contextlib.contextmanager
    def hold(
        self,
        place: str,
        *,
        wait_s: float | None = 0.0,
        on_wait: Callable[[dict], None] = lambda w: None,
    ) -> Iterator[None]:
        """Reserve ``place``, wait for its allocation (up to ``wait_s``; None: no limit),
        acquire it, and release it (and cancel the reservation) when the block ends."""
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb

        token = self._call(self._reserve(place))
        with self._lock:
            self._held[place] = token
        acquired = False
        try:
            self._await_allocation(place, token, wait_s, on_wait)
            self._call(self._stub("AcquirePlace", pb.AcquirePlaceRequest(placename=place)))
            acquired = True
            yield
        finally:
            self._give_back(place, token, acquired)

    def _give_back(self, place: str, token: str, acquired: bool) -> None:
        """Release the place (when acquired here) and cancel its reservation, once."""
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb

        with self._lock:
            if self._held.pop(place, None) is None:
                return
        if acquired:
            with contextlib.suppress(Exception):
                request = pb.ReleasePlaceRequest(placename=place, fromuser=self._user())
                self._call(self._stub("ReleasePlace", request), 10)
        with contextlib.suppress(Exception):
            request = pb.CancelReservationRequest(token=token)
            self._call(self._stub("CancelReservation", request), 10)

    def _user(self) -> str:
        """This session's name at the coordinator, ``host/user`` (labgrid's rule)."""
        return f"{self._session.gethostname()}/{self._session.getuser()}"

    async def _reserve(self, place: str) -> str:
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb

        request = pb.CreateReservationRequest(
            filters={"main": pb.Reservation.Filter(filter={"name": place})}, prio=0.0
        )
        return (await self._stub("CreateReservation", request)).reservation.token

    def holder(self, place: str) -> str | None:
        """Who holds ``place`` now (labgrid's ``host/user``), or None."""
        self._call(self._session.sync_with_coordinator())
        found = self._session.places.get(place)
        return found.acquired if found is not None else None

    def reserved_for(self, place: str, token: str) -> str | None:
        """The owner (``host/user``) of another reservation ``place`` is allocated to (a host
        that died keeps one until labgrid expires it), or None."""
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb

        response = self._call(self._stub("GetReservations", pb.GetReservationsRequest()))
        for reservation in response.reservations:
            if reservation.token == token or reservation.state not in (1, 2):
                continue  # ours, or neither allocated nor acquired
            if place in reservation.allocations.values():  # filter group -> place name
                return reservation.owner
        return None

    def _await_allocation(self, place, token, wait_s, on_wait) -> None:
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb

        started = time.monotonic()
        while True:
            response = self._call(
                self._stub("PollReservation", pb.PollReservationRequest(token=token))
            )
            state = response.reservation.state
            if state == 1:  # allocated: ours to acquire
                return
            if state != 0:  # expired or invalid (the place was deleted)
                raise TransportError(f"labgrid reservation for place {place} ended (state {state})")
            holder = self.holder(place)
            reserved = None if holder else self.reserved_for(place, token)
            waited = time.monotonic() - started
            if wait_s is not None and waited >= wait_s:
                who = (
                    f"locked by {holder}"
                    if holder
                    else f"reserved for {reserved}"
                    if reserved
                    else "reserved by another reservation"
                )
                raise DeviceBusy(
                    f"labgrid place {place} is {who}",
                    hint="wait for it with --wait [TIMEOUT]",
                )
            on_wait(
                {"holder": holder, "reserved_for": reserved, "waited_s": waited, "place": place}
            )
            time.sleep(_POLL_S)


def _first_line(error: Exception) -> str:
    return (str(error).splitlines() or [type(error).__name__])[0][:200]


def resolve_lab(lab):
    """A ``[labgrid]`` lab with its devices read from the coordinator's places; the lab
    itself otherwise. Returns (lab, skipped: {place: why})."""
    import dataclasses

    settings = getattr(lab, "labgrid", None)
    if settings is None:
        return lab, {}
    coordinator = Coordinator(settings.coordinator)
    try:
        places = [p for p in coordinator.places() if settings.selects(p.name, p.tags)]
    finally:
        coordinator.close()
    skipped = {p.name: p.why for p in places if p.agent is None}
    devices = tuple(p.device(settings.token) for p in places if p.agent is not None)
    return dataclasses.replace(lab, devices=devices), skipped
