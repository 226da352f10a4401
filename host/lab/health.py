"""Board health: a small known model on every board of a lab, and the state that keeps an
unhealthy board out of later fleet runs until it passes again.

``fleet health`` runs the ``micro`` example model (host/examples/catalog.py) on every board as
a short fleet run (leases, retries and verification as any fleet run), then reads
from each board's Info and signed report: the fingerprint, the agent version, the
clock check (the report's ``clock`` section), the disk limits the agent declares
(Info limits: quota, largest artifact; free bytes when the agent reports them) and a
temperature at rest (a ``*temp_c`` reading in the fingerprint, when the board has a
sensor the fingerprint reads; ``absent`` otherwise).

A board is **unhealthy** when its check run did not end with a measured status
(``MEASURED_STATUSES``: passed, degraded, or inconclusive, which a busy board may
honestly be), its clock is unsynced, or it **drifted**: its firmware, kernel, OS,
board or runtime version differ from its last healthy check (the same comparison
``requalify`` makes, ``requalify.update_changes``). A drift stays unhealthy until the
change is accepted (``--accept``: the new fingerprint becomes the healthy one).

The state is one small JSON file per lab (``<state dir>/health/LAB.json``, or
``--health-file``): per board its last check and its last healthy fingerprint.
``fleet run`` skips the boards it marks unhealthy.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from edgequal.contract.json_tree import leaves
from edgequal.contract.signing import MEASURED_STATUSES

from ..errors import HostError, UsageError
from .inventory import FleetModel, Lab

HEALTH_MODEL = "micro"
"""The example model every board runs: y = x + constant, float32 [1, 4]."""
HEALTH_PLAN = {
    "cold_runs": 1,
    "latency_min_runs": 100,
    "latency_min_s": 0.3,
    "warmup_min_s": 0.2,
    "sustain_s": 0.0,
}
"""A short run: one cold load, a few hundred warm calls, no sustained phase."""
DRIFTED = "drifted since the last healthy check"


@dataclass
class BoardHealth:
    """One board's health check: the verdict, why, and what was read from the board."""

    device: str
    healthy: bool
    checked_unix: float
    reasons: list[str] = field(default_factory=list)
    status: str | None = None
    """The check run's state: the report's status, or error/skipped when no report came."""
    run_id: str | None = None
    agent_version: str | None = None
    key_fingerprint: str | None = None
    clock: dict | None = None
    disk: dict = field(default_factory=dict)
    temp_at_rest_c: float | str = "absent"
    fingerprint: dict = field(default_factory=dict)
    """The fingerprint of the check's report (what a later check compares with)."""
    runtime: dict = field(default_factory=dict)
    drift: list[dict] = field(default_factory=list)

    def to_json(self) -> dict:
        """The check as JSON."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> BoardHealth:
        """The inverse of :meth:`to_json`."""
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass
class HealthState:
    """Per board: the last check, and the last healthy one (the drift reference)."""

    last: dict[str, BoardHealth] = field(default_factory=dict)
    healthy: dict[str, BoardHealth] = field(default_factory=dict)

    def unhealthy(self, *, drift: bool = True) -> dict[str, str]:
        """Boards whose last check failed, with the reasons in one line. ``drift=False``
        leaves out boards unhealthy only because they drifted (what ``requalify`` is for)."""
        out = {}
        for name, h in self.last.items():
            reasons = h.reasons if drift else [r for r in h.reasons if not r.startswith(DRIFTED)]
            if not h.healthy and (reasons or drift):
                out[name] = "; ".join(reasons) or "unhealthy"
        return out

    def to_json(self) -> dict:
        """The state file's contents."""
        return {
            "last": {n: h.to_json() for n, h in self.last.items()},
            "healthy": {n: h.to_json() for n, h in self.healthy.items()},
        }

    @classmethod
    def from_json(cls, data: dict) -> HealthState:
        """The inverse of :meth:`to_json`."""
        return cls(
            {n: BoardHealth.from_json(h) for n, h in (data.get("last") or {}).items()},
            {n: BoardHealth.from_json(h) for n, h in (data.get("healthy") or {}).items()},
        )

    @classmethod
    def load(cls, path: Path) -> HealthState:
        """The state in ``path``; empty when there is none yet."""
        path = Path(path)
        if not path.exists():
            return cls()
        try:
            return cls.from_json(json.loads(path.read_text()))
        except (OSError, ValueError, TypeError, AttributeError) as e:
            raise UsageError(f"cannot read the health state {path}: {e}") from e

    def save(self, path: Path) -> None:
        """Write the state atomically."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1, sort_keys=True))
        tmp.replace(path)


def default_health_path(lab: Lab) -> Path:
    """``<state dir>/health/LAB.json``: one state file per lab on this host."""
    from ..paths import state_dir

    return state_dir() / "health" / f"{lab.name}.json"


def temp_at_rest_c(fingerprint: dict) -> float | str:
    """The highest ``*temp_c`` reading in a fingerprint (°C), or ``absent``."""
    found = [
        float(v)
        for _, k, v in leaves(fingerprint)
        if isinstance(k, str)
        and k.endswith("temp_c")
        and isinstance(v, (int, float))
        and not isinstance(v, bool)
    ]
    return max(found) if found else "absent"


def judge(
    device: str,
    *,
    state: str,
    error: str | None,
    predicate: dict | None,
    info: dict | None,
    last_healthy: BoardHealth | None,
    accept: bool = False,
    now: float | None = None,
) -> BoardHealth:
    """One board's verdict from its check run (``state``, the report's ``predicate``), its
    Info, and its last healthy check (the drift reference)."""
    from .requalify import update_changes

    health = BoardHealth(device, True, time.time() if now is None else now, status=state)
    reasons = health.reasons
    if info is not None:
        health.agent_version = info.get("agent_version")
        health.key_fingerprint = info.get("key_fingerprint")
        limits = info.get("limits") or {}
        health.disk = {
            "quota_bytes": limits.get("quota_bytes"),
            "max_artifact_bytes": limits.get("max_artifact_bytes"),
            "free_bytes": limits.get("free_bytes"),
        }
    if predicate is None:
        reasons.append(f"check run: {state}" + (f": {error}" if error else ""))
    else:
        health.run_id = predicate.get("run_id")
        fp = predicate.get("fingerprint") or {}
        health.fingerprint = fp
        health.runtime = dict((predicate.get("results") or {}).get("runtime") or {})
        health.clock = predicate.get("clock")
        health.temp_at_rest_c = temp_at_rest_c(fp)
        health.agent_version = health.agent_version or fp.get("agent_version")
        if predicate.get("status") not in MEASURED_STATUSES:
            reasons.append(f"check run {predicate.get('status')}: the micro model did not run")
        if health.clock is not None and health.clock.get("synced") is False:
            reasons.append(f"clock unsynced (offset {health.clock.get('offset_s')} s)")
        if last_healthy is not None and info is not None:
            drift = update_changes(
                {
                    "fingerprint": last_healthy.fingerprint,
                    "results": {"runtime": last_healthy.runtime},
                },
                {**info, "fingerprint": fp},
            )
            health.drift = drift
            if drift and not accept:
                what = ", ".join(f"{c['field']}: {c['approved']} → {c['now']}" for c in drift)
                reasons.append(f"{DRIFTED}: {what}")
    health.healthy = not reasons
    return health


def check_health(
    lab: Lab,
    state_path: Path,
    out_dir: Path,
    *,
    tags: frozenset[str] = frozenset(),
    accept: bool = False,
    wait_s: float | None = 0.0,
    retries: int = 1,
    known=None,
    open_device=None,
) -> list[BoardHealth]:
    """Run the micro model on every board carrying ``tags``, judge each, update the state
    file (a board that passes again becomes healthy); returns the checks in lab order."""
    from ..devices.trust import KnownDevices
    from ..devices.verify import verify_envelope
    from ..examples.catalog import build_example
    from .fleet import FleetOptions, FleetRunner, open_lab_device

    known = known or KnownDevices()
    open_device = open_device or open_lab_device
    out_dir = Path(out_dir)
    model = FleetModel(HEALTH_MODEL, build_example(HEALTH_MODEL, out_dir / "model"))
    options = FleetOptions(
        out_dir=out_dir,
        tags=tags,
        plan_overrides=dict(HEALTH_PLAN),
        wait_s=wait_s,
        retries=retries,
        lease_ttl_s=lab.lease_ttl_s,
        html_pages=False,
    )
    runner = FleetRunner(lab, [model], options, known=known, open_device=open_device)
    result = runner.run()
    state = HealthState.load(state_path)
    checks = []
    devices = {d.name: d for d in runner.devices}
    for record in result.runs:
        predicate = None
        if record.report:  # verified by the fleet run; read back through the same check
            envelope = (out_dir / record.report).read_bytes()
            predicate = verify_envelope(envelope, known=known, device=record.device).predicate
        # On labgrid, the Info read inside the place (nothing reaches a board outside it).
        info = (
            runner.infos.get(record.device)
            if lab.labgrid is not None
            else _info(open_device, devices[record.device])
        )
        health = judge(
            record.device,
            state=record.state,
            error=record.error,
            predicate=predicate,
            info=info,
            last_healthy=state.healthy.get(record.device),
            accept=accept,
        )
        state.last[record.device] = health
        if health.healthy:
            state.healthy[record.device] = health
        checks.append(health)
    state.save(state_path)
    return checks


def _info(open_device, device) -> dict | None:
    try:
        with open_device(device) as transport:
            return transport.info()
    except HostError:
        return None
