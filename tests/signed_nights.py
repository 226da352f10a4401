"""Nightly reports of a lab's boards, signed by each board's own device key and recorded
into a real SQLite history as a fleet run records them (one cell per model × board × night),
for the tests of what the history shows: gaps, causes, groups and pages.

The figures are given, not measured (each night is a measurement dict signed as the
agent signs one, ``agent/runs.sign_report``): the tests of the detector on measured runs
are tests/host/lab/test_changes.py's and test_change_series.py's. Loaded through
``load_test_helper("signed_nights")``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

START_S = 1_793_500_000
"""Night 0 is measured at 2026-11-01 04:26 UTC (START_S + 2 h), night n n days later."""


@dataclass
class Night:
    """One run of one model on one board: its status and the figures it measured."""

    p50_ms: float | None = 1.0
    status: str = "passed"
    other_cpus: float | None = 0.2
    clean_share: float | None = 0.97
    import_ms: float | None = 300.0
    kernel: str = "6.6.31"
    cold_ms: float | None = 40.0
    extra: dict = field(default_factory=dict)


@dataclass
class Board:
    """A board of the lab: its name, device profile (its kind) and signing key."""

    name: str
    profile: str
    key: object = None


def measurement(night: Night, board: Board) -> dict:
    """The measurement dict the agent signs, with the machine's readings of the night."""
    shape: dict = {
        "shape": "x=1x16",
        "summary": {"p50_ms": night.p50_ms, "p99_ms": None, "count": 200},
        "warmup": {"runs": 10, "seconds": 0.1, "steady": True},
        "interference": {"other_cpus": night.other_cpus, "runq_wait_share": 0.01},
    }
    if night.clean_share is not None:
        shape["preemption"] = {
            "calls": 200,
            "excluded": round(200 * (1 - night.clean_share)),
            "share": round(1 - night.clean_share, 4),
            "needed": 100,
            "clean_enough": True,
        }
        shape["clean"] = dict(shape["summary"])  # the calls that kept the CPU decide
    results = {
        "runtime": {"runtime": "onnxruntime", "version": "1.20.0"},
        "latency": {"per_shape": [shape]} if night.p50_ms is not None else {},
        "cold_load": {
            "total_ms": {"median": night.cold_ms},
            "import_ms": {"median": night.import_ms},
        },
        "memory": {"peak_rss_bytes": 64 * 2**20},
        **night.extra,
    }
    return {
        "status": night.status,
        "reason": None if night.status == "passed" else f"{night.status} (test)",
        "plan": {"preset": "quick", "profile": board.profile},
        "fingerprint": {"kernel": night.kernel, "os_release": "Debian 12"},
        "results": results,
    }


def fleet_run(night: int) -> str:
    """The fleet run of night ``night`` (its cell prefix): ``lab/20261101T0226Z-n00``."""
    import time

    stamp = time.strftime("%Y%m%dT%H%MZ", time.gmtime(START_S + night * 86400))
    return f"lab/{stamp}-n{night:02d}"


def record_nights(
    db_url: str,
    out: Path,
    boards: list[Board],
    nights: dict[tuple[int, str], Night],
    model: str = "det",
) -> list[Path]:
    """Sign and record each ``(night, board name) → Night`` as that board's report of
    ``model`` in that night's fleet run (a pair absent from ``nights`` did not run);
    returns the report files, in night order."""
    from edgequal.agent.run_request import RunRequest, new_run_id
    from edgequal.agent.runs import sign_report
    from edgequal.contract.keys import DeviceKey
    from edgequal.contract.plan import Plan
    from edgequal.host.devices.trust import KnownDevices
    from edgequal.host.lab.history import FleetCell, History

    known = KnownDevices()
    for b in boards:
        if b.key is None:
            b.key = DeviceKey.generate()
            known.trust(b.name, "grpc://127.0.0.1:1", b.key.public_key_raw())
    history = History.open(db_url)
    by_name = {b.name: b for b in boards}
    paths = []
    out.mkdir(parents=True, exist_ok=True)
    for (n, name), night in sorted(nights.items()):
        board = by_name[name]
        request = RunRequest(
            run_id=new_run_id(),
            model_digest=hashlib.sha256(model.encode()).hexdigest(),
            golden_digest=None,
            plan=Plan.from_json({"preset": "quick", "profile": board.profile}),
            nonce="n",
            model_name=f"{model}.onnx",
        )
        envelope = sign_report(
            board.key, request, measurement(night, board), now_s=START_S + n * 86400 + 7200
        )
        path = out / f"night-{n:02d}-{name}.report.json"
        path.write_bytes(envelope)
        cell = FleetCell(model, f"{fleet_run(n)}/{model}/{name}", 1)
        assert history.record_file(path, device=name, known=known, cell=cell)
        paths.append(path)
    history.close()
    return paths
