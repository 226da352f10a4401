"""History of verified reports in a database: SQLite by default, PostgreSQL when a lab shares one.

One table row per verified report (device × run id is unique, so recording the same
report twice, from two CI runners at once, keeps one row), holding the figures a
trend needs (status, latency percentiles, sustained throughput, cold load, memory),
what may explain a change (board, kernel, OS, firmware, runtime and version), and
the signed envelope itself, so any row can be verified again later.

The database is reached through SQLAlchemy Core (psycopg 3 for PostgreSQL). The
schema is versioned: :func:`migrate` creates it or upgrades it step by step, under
an advisory lock on PostgreSQL so several runners starting at once do not race.
The default URL is ``sqlite:///<state dir>/history.sqlite``.

A fleet run records each cell (one model on one board in one fleet run) as one row:
every attempt's report is kept, but a retry marks the attempts before it
``replaced_by`` its run id, and list and trend show only the last attempt of a cell
(its ``attempt`` number says how many there were). A row also keeps the model's
name in the lab's models file (``model_label``), which ``--model`` matches.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from edgequal.contract.board_families import BOARD_FAMILIES
from edgequal.contract.preemption import decisive_summary
from edgequal.contract.signing import RolesUnmarked, subject_with_role
from sqlalchemy import (
    Column,
    DateTime,
    Float,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    UniqueConstraint,
    create_engine,
    event,
    inspect,
    select,
    text,
)
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, OperationalError, SQLAlchemyError

from ..errors import HostError, UsageError
from .history_sqlite import sqlite_pragmas
from .series import repeated_spread

SCHEMA_VERSION = 3
_MIGRATION_LOCK_KEY = 0x6564_6765_7175_616C  # "edgequal", a PostgreSQL advisory lock key


class HistoryError(HostError):
    """The history database cannot be reached or written (exit 3)."""


metadata = MetaData()

schema_version = Table(
    "edgequal_schema",
    metadata,
    Column("version", Integer, nullable=False),
)

reports = Table(
    "edgequal_reports",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("device", String(64), nullable=False),
    Column("key_fingerprint", String(80), nullable=False),
    Column("run_id", String(64), nullable=False),
    Column("measured_at", DateTime(timezone=True), nullable=False),
    Column("recorded_at", DateTime(timezone=True), nullable=False),
    Column("model_name", String(255), nullable=False),
    Column("model_sha256", String(64), nullable=False),
    Column("golden_sha256", String(64)),
    Column("status", String(16), nullable=False),
    Column("preset", String(16)),
    Column("profile", String(80)),
    Column("p50_ms", Float),
    Column("p99_ms", Float),
    Column("cv", Float),
    Column("cold_total_ms", Float),
    Column("sustained_per_s", Float),
    Column("peak_rss_mb", Float),
    Column("board", String(255)),
    Column("kernel", String(255)),
    Column("os_release", String(255)),
    Column("firmware", String(255)),
    Column("runtime", String(32)),
    Column("runtime_version", String(64)),
    Column("envelope_sha256", String(64), nullable=False),
    Column("envelope", LargeBinary, nullable=False),
    # v2: a fleet cell's attempts (the last one shown), the model's name in models.toml.
    Column("model_label", String(255)),
    Column("cell", String(160)),
    Column("attempt", Integer),
    Column("replaced_by", String(64)),
    # v3: a report of repeated runs is one point: p50/p99/sustained are the runs' medians,
    # beside how many runs and their CV; the command line that reproduces the report.
    Column("repeats", Integer),
    Column("p50_repeat_cv", Float),
    Column("p99_repeat_cv", Float),
    Column("sustained_repeat_cv", Float),
    Column("command", String(2000)),
    UniqueConstraint("device", "run_id", name="edgequal_reports_device_run"),
)

_V2_COLUMNS = (
    ("model_label", "VARCHAR(255)"),
    ("cell", "VARCHAR(160)"),
    ("attempt", "INTEGER"),
    ("replaced_by", "VARCHAR(64)"),
)

_V3_COLUMNS = (
    ("repeats", "INTEGER"),
    ("p50_repeat_cv", "FLOAT"),
    ("p99_repeat_cv", "FLOAT"),
    ("sustained_repeat_cv", "FLOAT"),
    ("command", "VARCHAR(2000)"),
)

TREND_FIELDS = ("board", "kernel", "os_release", "firmware", "runtime", "runtime_version")
"""Fields whose change a trend marks beside the figures (firmware and runtime updates)."""


def _create_v1(conn: Connection) -> None:
    reports.create(conn, checkfirst=True)


def _add_columns(conn: Connection, columns: tuple[tuple[str, str], ...]) -> None:
    """Add the columns a table created by an earlier step lacks."""
    have = {c["name"] for c in inspect(conn).get_columns(reports.name)}
    for name, sql_type in columns:
        if name not in have:
            conn.execute(text(f"ALTER TABLE {reports.name} ADD COLUMN {name} {sql_type}"))


def _add_v2_columns(conn: Connection) -> None:
    """Fleet cells and model labels."""
    _add_columns(conn, _V2_COLUMNS)


def _add_v3_columns(conn: Connection) -> None:
    """Repeated runs as one point with its spread; the reproducing command line."""
    _add_columns(conn, _V3_COLUMNS)


MIGRATIONS: list[tuple[int, Callable[[Connection], None]]] = [
    (1, _create_v1),
    (2, _add_v2_columns),
    (3, _add_v3_columns),
]
"""(version, step): each step upgrades the schema from version - 1."""


def default_url() -> str:
    """``sqlite:///`` of ``history.sqlite`` in the host's state directory."""
    from ..paths import state_dir

    path = state_dir() / "history.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def migrate(engine: Engine) -> int:
    """Create or upgrade the schema to SCHEMA_VERSION; returns the version found before.

    Safe when several processes use a new database for the first time at once (two fleet
    runs started together): each takes the database's write lock before it looks at the
    schema, so the second finds what the first created instead of creating it again
    ("table edgequal_schema already exists"). PostgreSQL: a transaction-scoped advisory
    lock. SQLite: ``BEGIN IMMEDIATE`` (the driver would otherwise begin only at the first
    insert, after the tables were checked and created outside any lock); the other waits
    for it up to the connection's busy timeout.
    """
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK_KEY})
        elif engine.dialect.name == "sqlite":
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        schema_version.create(conn, checkfirst=True)
        found = conn.execute(select(schema_version.c.version)).scalar()
        before = found or 0
        if before > SCHEMA_VERSION:
            raise HistoryError(
                f"history database schema is version {before}, newer than this edgequal's "
                f"{SCHEMA_VERSION}",
                hint="upgrade edgequal on this host",
            )
        for version, step in MIGRATIONS:
            if version > before:
                step(conn)
        if found is None:
            conn.execute(schema_version.insert().values(version=SCHEMA_VERSION))
        elif before < SCHEMA_VERSION:
            conn.execute(schema_version.update().values(version=SCHEMA_VERSION))
        return before


def _float(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _text(value, limit: int = 255) -> str | None:
    if value is None or value == "":
        return None
    return str(value)[:limit]


def _firmware(fp: dict) -> str | None:
    """The firmware version the fingerprint names, if any: ``firmware``, ``firmware_version``
    or a board family's firmware field (the Jetson's ``l4t``), at the top or in its section."""
    family_keys = tuple(k for f in BOARD_FAMILIES for k, c in f.fields.items() if c == "firmware")
    for key in ("firmware", "firmware_version", *family_keys):
        if fp.get(key):
            return str(fp[key])
    for family in BOARD_FAMILIES:
        part = fp.get(family.name) or {}
        for key in ("firmware", "firmware_version", *family_keys):
            if isinstance(part, dict) and part.get(key):
                return str(part[key])
    return None


RECORDED_NEW = "new"
RECORDED_LABELLED = "labelled"
RECORDED_ALREADY = "already recorded"
"""What recording one report came to (:meth:`History.record_file_outcome`)."""


@dataclass(frozen=True)
class FleetCell:
    """Where a fleet run's report belongs: the model's name in models.toml, the cell (one
    model on one board in one fleet run) and which attempt at it the report is. A report
    recorded by hand (``history record --models``) has the name only, no cell."""

    model_label: str
    cell: str | None = None
    attempt: int = 1


def row_of(
    envelope: bytes,
    report,
    device: str,
    key_fingerprint: str,
    cell: FleetCell | None = None,
    command: str | None = None,
) -> dict:
    """The table row of a verified report (``verify.VerifiedReport``); ``command``: the
    command line that reproduces it (the report's sidecar, ``devices/reproduce.py``)."""
    p = report.predicate
    results = p.get("results") or {}
    fp = p.get("fingerprint") or {}
    shapes = (results.get("latency") or {}).get("per_shape") or []
    summary = decisive_summary(shapes[0]) if shapes else {}
    runtime = results.get("runtime") or (results.get("cold_load") or {}).get("runtime") or {}
    cold = (results.get("cold_load") or {}).get("total_ms") or {}
    sustained = results.get("sustained") or {}
    peak_rss = (results.get("memory") or {}).get("peak_rss_bytes")
    plan = p.get("plan") or {}
    model = subject_with_role(report.subjects, "model")
    try:
        golden = subject_with_role(report.subjects, "golden")
    except RolesUnmarked:
        golden = None  # an older agent's report: which subject is the golden set is unknown
    try:
        measured = dt.datetime.strptime(p.get("finished_at", ""), "%Y-%m-%dT%H:%M:%SZ")
        measured = measured.replace(tzinfo=dt.timezone.utc)
    except ValueError:
        measured = dt.datetime.now(dt.timezone.utc)
    figures = {
        "p50_ms": _float(summary.get("p50_ms")),
        "p99_ms": _float(summary.get("p99_ms")),
        "sustained_per_s": _float(sustained.get("sustained_per_s")),
    }
    repeated = repeated_spread(results)
    spread_cv: dict[str, float | None] = {}
    if repeated is not None:  # one point: the runs' median, with their spread beside it
        for key, spread in repeated[1].items():
            figures[key] = _float(spread["median"])
            spread_cv[key] = _float(spread.get("cv"))
    return {
        "device": device,
        "key_fingerprint": key_fingerprint,
        "run_id": report.run_id,
        "measured_at": measured,
        "recorded_at": dt.datetime.now(dt.timezone.utc),
        "model_name": model["name"] if model else "model",
        "model_sha256": model["sha256"] if model else "",
        "golden_sha256": golden["sha256"] if golden else None,
        "status": p["status"],
        "preset": _text(plan.get("preset"), 16),
        "profile": _text(plan.get("profile"), 80),
        "p50_ms": figures["p50_ms"],
        "p99_ms": figures["p99_ms"],
        "cv": _float(summary.get("cv")),
        "cold_total_ms": _float(cold.get("median") if isinstance(cold, dict) else None),
        "sustained_per_s": figures["sustained_per_s"],
        "peak_rss_mb": _float(peak_rss / 2**20) if _float(peak_rss) is not None else None,
        "board": _text(fp.get("board_model") or fp.get("architecture")),
        "kernel": _text(fp.get("kernel")),
        "os_release": _text(fp.get("os_release")),
        "firmware": _text(_firmware(fp)),
        "runtime": _text(runtime.get("runtime"), 32),
        "runtime_version": _text(runtime.get("version"), 64),
        "envelope_sha256": hashlib.sha256(envelope).hexdigest(),
        "envelope": envelope,
        "model_label": _text(cell.model_label) if cell else None,
        "cell": _text(cell.cell, 160) if cell else None,
        "attempt": cell.attempt if cell and cell.cell else None,
        "replaced_by": None,
        "repeats": repeated[0] if repeated else None,
        "p50_repeat_cv": spread_cv.get("p50_ms"),
        "p99_repeat_cv": spread_cv.get("p99_ms"),
        "sustained_repeat_cv": spread_cv.get("sustained_per_s"),
        "command": _text(command, 2000),
    }


def _marked(rows: list[dict]) -> list[dict]:
    """``rows`` (oldest first), each with the fields that changed since the row before."""
    before = None
    for row in rows:
        row["changes"] = (
            []
            if before is None
            else [f for f in TREND_FIELDS if row[f] != before[f]]
            + (["model"] if row["model_sha256"] != before["model_sha256"] else [])
        )
        before = row
    return rows


class History:
    """The history database: record verified reports, list them, follow one model on one board."""

    def __init__(self, engine: Engine):
        self.engine = engine
        migrate(engine)

    @classmethod
    def open(cls, url: str | None = None) -> History:
        """Connect to ``url`` (default: SQLite in the state directory) and migrate the schema."""
        url = url or default_url()
        try:
            parsed = make_url(url)
        except ArgumentError as e:
            raise UsageError(
                f"not a database URL: {e}", hint="e.g. postgresql+psycopg://..."
            ) from e
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")  # psycopg 3, not psycopg2
        kwargs: dict = {"pool_pre_ping": True}
        if parsed.get_backend_name() == "sqlite":
            # Several writers: wait for the lock rather than fail at once.
            kwargs["connect_args"] = {"timeout": 60}
        try:
            engine = create_engine(parsed, **kwargs)
        except (ArgumentError, ImportError) as e:
            raise UsageError(f"cannot use database {parsed.render_as_string()}: {e}") from e
        if parsed.get_backend_name() == "sqlite":
            event.listen(engine, "connect", sqlite_pragmas)
        try:
            return cls(engine)
        except OperationalError as e:
            raise HistoryError(
                f"cannot reach the history database {parsed.render_as_string()}: {e.orig}",
                hint="check the URL, that the server runs and the credentials",
            ) from e

    @property
    def url_for_display(self) -> str:
        """The URL with any password hidden."""
        return self.engine.url.render_as_string(hide_password=True)

    def close(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()

    # -- writing -----------------------------------------------------------------

    def record(
        self,
        envelope: bytes,
        report,
        device: str,
        key_fingerprint: str,
        cell: FleetCell | None = None,
        command: str | None = None,
    ) -> bool:
        """Insert one verified report; False when that device's run was recorded already.
        ``command``: the command line that made it (its sidecar's), kept in the row.

        A report of a fleet ``cell`` replaces the cell's earlier attempts in list and trend
        (they stay in the table, ``replaced_by`` this run).
        """
        row = row_of(envelope, report, device, key_fingerprint, cell, command)
        if self.engine.dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert
        stmt = (
            insert(reports)
            .values(**row)
            .on_conflict_do_nothing(index_elements=["device", "run_id"])
            .returning(reports.c.id)
        )
        try:
            with self.engine.begin() as conn:
                # A row comes back only when it was inserted (rowcount is -1 under psycopg).
                inserted = conn.execute(stmt).first() is not None
                if inserted and cell is not None and cell.cell:
                    conn.execute(
                        reports.update()
                        .where(
                            (reports.c.cell == row["cell"])
                            & (reports.c.device == device)
                            & (reports.c.run_id != report.run_id)
                            & reports.c.replaced_by.is_(None)
                        )
                        .values(replaced_by=report.run_id)
                    )
                return inserted
        except SQLAlchemyError as e:
            raise HistoryError(f"cannot record run {report.run_id}: {e}") from e

    def record_file(
        self,
        path: str | Path,
        device: str | None = None,
        known=None,
        cell: FleetCell | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> bool:
        """Verify a report file against the pinned keys, then record it. ``labels`` (model
        SHA-256 → the name in models.toml, :func:`model_labels`) names a report's model.
        The command line in the report's sidecar (``devices/reproduce.py``) goes in the row.
        True when a row was inserted (:meth:`record_file_outcome` says more)."""
        return self.record_file_outcome(path, device, known, cell, labels) == RECORDED_NEW

    def record_file_outcome(
        self,
        path: str | Path,
        device: str | None = None,
        known=None,
        cell: FleetCell | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> str:
        """:meth:`record_file`, saying what came of it: :data:`RECORDED_NEW` (a row was
        inserted), :data:`RECORDED_LABELLED` (the run was recorded already and ``labels``
        named its model: the name is attached to its row now, so labels can be given after
        the reports were recorded) or :data:`RECORDED_ALREADY` (recorded before, nothing to
        change)."""
        from ..devices.reproduce import recorded_command
        from ..devices.trust import KnownDevices
        from ..devices.verify import verify_envelope

        envelope = Path(path).read_bytes()
        known = known or KnownDevices()
        report = verify_envelope(envelope, known=known, device=device)
        if cell is None and labels:
            model = subject_with_role(report.subjects, "model")
            label = labels.get(model["sha256"]) if model else None
            cell = FleetCell(label) if label else None
        entry = known.get(report.device_name)
        command = recorded_command(path, envelope)
        if self.record(
            envelope, report, report.device_name, entry.fingerprint, cell, command=command
        ):
            return RECORDED_NEW
        if (
            labels
            and cell is not None
            and cell.cell is None
            and self.attach_label(report.device_name, report.run_id, cell.model_label)
        ):
            return RECORDED_LABELLED
        return RECORDED_ALREADY

    def attach_label(self, device: str, run_id: str, label: str) -> bool:
        """Name the model of a run recorded by hand (``model_label``), as ``history record
        --models`` does for a new one; True when the row changed. A fleet cell's row keeps
        the name its fleet run gave it."""
        try:
            with self.engine.begin() as conn:
                done = conn.execute(
                    reports.update()
                    .where(
                        (reports.c.device == device)
                        & (reports.c.run_id == run_id)
                        & reports.c.cell.is_(None)
                        & (reports.c.model_label.is_(None) | (reports.c.model_label != label))
                    )
                    .values(model_label=_text(label))
                    .returning(reports.c.id)
                )
                return done.first() is not None
        except SQLAlchemyError as e:
            raise HistoryError(f"cannot name the model of run {run_id}: {e}") from e

    # -- reading -----------------------------------------------------------------

    def _query(self, device, model, limit, newest_first=True, since=None, envelopes=False):
        cols = [c for c in reports.c if envelopes or c.name != "envelope"]
        q = select(*cols).where(reports.c.replaced_by.is_(None))  # a cell's last attempt
        if device:
            q = q.where(reports.c.device == device)
        if since is not None:
            q = q.where(reports.c.measured_at >= since)
        if model:
            q = q.where(_model_matches(model))
        order = reports.c.measured_at.desc() if newest_first else reports.c.measured_at.asc()
        q = q.order_by(order, reports.c.id.desc() if newest_first else reports.c.id.asc())
        with self.engine.connect() as conn:
            rows = conn.execute(q if limit is None else q.limit(limit))
            return [dict(r._mapping) for r in rows]

    def list(self, device: str | None = None, model: str | None = None, limit: int | None = 50):
        """Recorded runs, newest first (rows without the envelope; of a fleet cell, the last
        attempt)."""
        return self._query(device, model, limit)

    def runs(
        self,
        device: str | None = None,
        model: str | None = None,
        since: dt.datetime | None = None,
    ) -> list[dict]:
        """Every recorded run matching ``device``/``model`` measured at or after ``since``,
        oldest first, with its envelope (of a fleet cell, the last attempt): what the
        change-point analysis (``lab/series.py``, ``lab/changes.py``) reads."""
        rows = self._query(device, model, None, newest_first=False, since=since, envelopes=True)
        for row in rows:
            row["envelope"] = bytes(row["envelope"])
        return rows

    def trend(self, device: str, model: str, limit: int = 200) -> list[dict]:
        """One model on one device, oldest first; each row lists the fields that changed
        since the row before (``changes``: firmware, runtime, kernel...)."""
        return _marked(self._query(device, model, limit, newest_first=False))

    def trends(
        self, device: str | None = None, model: str | None = None, limit: int = 200
    ) -> dict[tuple[str, str], list[dict]]:
        """Every series matching ``device``/``model`` (both optional), keyed ``(device,
        series name)``, in name order: the series ``history changes`` follows, named as it
        names them (``lab/series.py``: the models.toml name, else the file name), each
        oldest first, its last ``limit`` runs, changes marked as :meth:`trend` marks them."""
        series: dict[tuple[str, str], list[dict]] = {}
        for r in self._query(device, model, None, newest_first=False):
            series.setdefault((r["device"], r["model_label"] or r["model_name"]), []).append(r)
        return {key: _marked(series[key][-limit:]) for key in sorted(series)}

    def show(
        self, run_id: str | None = None, device: str | None = None, model: str | None = None
    ) -> dict | None:
        """One recorded run with its envelope: ``run_id`` (a prefix is enough), else the
        newest run matching ``device``/``model``; None when nothing matches."""
        q = select(reports)
        if run_id:
            q = q.where(reports.c.run_id.like(f"{run_id}%"))
        if device:
            q = q.where(reports.c.device == device)
        if model:
            q = q.where(_model_matches(model))
        q = q.order_by(reports.c.measured_at.desc(), reports.c.id.desc()).limit(2)
        with self.engine.connect() as conn:
            rows = [dict(r._mapping) for r in conn.execute(q)]
        if run_id and len(rows) > 1 and rows[0]["run_id"] != rows[1]["run_id"]:
            raise UsageError(
                f"run id {run_id} is ambiguous ({rows[0]['run_id']}, {rows[1]['run_id']}, …)",
                hint="give more of it, or --device",
            )
        if not rows:
            return None
        row = rows[0]
        row["envelope"] = bytes(row["envelope"])
        return row

    def model_names(self) -> list[str]:
        """Every name ``--model`` knows in this database: the models.toml names recorded,
        then the file names, sorted."""
        with self.engine.connect() as conn:
            labels = conn.execute(select(reports.c.model_label).distinct()).scalars()
            labels = sorted(x for x in labels if x)
            files = sorted(conn.execute(select(reports.c.model_name).distinct()).scalars())
        return labels + [f for f in files if f not in labels]

    def check_model(self, model: str | None) -> None:
        """UsageError when ``--model`` matches no recorded run at all, naming the known ones
        (a filter that matches nothing would otherwise list nothing and say nothing)."""
        if not model:
            return
        with self.engine.connect() as conn:
            q = select(reports.c.id).where(_model_matches(model)).limit(1)
            if conn.execute(q).first() is not None:
                return
        known = self.model_names()
        raise UsageError(
            f"no recorded run of model '{model}' in {self.url_for_display}",
            hint="known models: " + ", ".join(known)
            if known
            else "nothing is recorded yet: edgequal history record REPORT...",
        )

    def envelope(self, device: str, run_id: str) -> bytes | None:
        """The stored signed envelope of one run (to verify it again)."""
        q = select(reports.c.envelope).where(
            (reports.c.device == device) & (reports.c.run_id == run_id)
        )
        with self.engine.connect() as conn:
            value = conn.execute(q).scalar()
        return bytes(value) if value is not None else None


def series_gap(row: Mapping) -> str | None:
    """The status of a run that is not a point of its series (failed, inconclusive,
    incomplete: ``series.GAP_STATUSES``), or None for a point: what ``history list``,
    ``trend`` and their JSON show in place of its figures."""
    from .series import GAP_STATUSES

    return row["status"] if row.get("status") in GAP_STATUSES else None


def nights_not_run(
    trends: Mapping[tuple[str, str], list[dict]], rows: list[Mapping]
) -> dict[tuple[str, str], list[dt.datetime]]:
    """Per board × model of ``trends`` (``History.trends``), the lab's nights it has no run
    in: the fleet runs among ``rows`` (``History.list``), each at its first run's time,
    from the pair's first run on, in which the pair's model ran on another board (a model
    the lab stopped running leaves no gap; a board left out of a night does)."""
    from .series import fleet_run_of

    night_at: dict[str, dt.datetime] = {}
    models_in: dict[str, set[str]] = {}
    for r in rows:
        night = fleet_run_of(r.get("cell"))
        if night is None or r.get("measured_at") is None:
            continue
        if night not in night_at or _naive(r["measured_at"]) < _naive(night_at[night]):
            night_at[night] = r["measured_at"]
        models_in.setdefault(night, set()).add(r.get("model_label") or r["model_name"])
    out: dict[tuple[str, str], list[dt.datetime]] = {}
    for pair, runs in trends.items():
        timed = [r for r in runs if r.get("measured_at") is not None]
        if not timed:
            continue
        own = {fleet_run_of(r.get("cell")) for r in timed}
        names = {r.get("model_label") or r["model_name"] for r in timed}
        start = min(_naive(r["measured_at"]) for r in timed)
        missing = [
            at
            for night, at in night_at.items()
            if night not in own and _naive(at) > start and models_in[night] & names
        ]
        if missing:
            out[pair] = sorted(missing, key=_naive)
    return out


def _naive(when: dt.datetime) -> dt.datetime:
    """A time as naive UTC (SQLite gives naive datetimes, PostgreSQL aware ones)."""
    if when.tzinfo is not None:
        return when.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return when


def model_labels(models) -> dict[str, str]:
    """Model SHA-256 → its name, for the models of a models file (``load_models``): how a
    report recorded by hand gets the lab's name for its model."""
    from edgequal.contract.artifacts import file_sha256

    return {file_sha256(m.path): m.name for m in models}


def _model_matches(model: str):
    """A model named by its name, its name without the extension, or its SHA-256."""
    return (
        (reports.c.model_name == model)
        | (reports.c.model_label == model)
        | (reports.c.model_name.like(f"{model}.%"))
        | (reports.c.model_sha256 == model)
    )
