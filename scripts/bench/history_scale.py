#!/usr/bin/env python3
"""Benchmark: the history at lab scale (issue 47 items 1 and 2).

Builds ``--series`` series × ``--nights`` nights of one figure (clean p50) in the history's
own table (``edgequal_reports``), in SQLite and in a real PostgreSQL server started here
(tests/postgres.py, stopped and removed at the end). Half the series have a run-to-run CV
of 5 %, half 18 % (this machine's steady series); ``--steps`` of them carry one planted
step of ×1.05 to ×1.5 at a random night. Then it measures:

- ingest: runs/s of batched inserts (PostgreSQL: COPY), against row-by-row inserts of
  ``--baseline-rows`` runs measured in the same run;
- the state catching up (``change_state.update`` over blocks of ``--block`` nights), then
  ``--new-nights`` single new nights, each recorded and taken in by ``update``: p50/p95/max
  seconds for one night across all series (the state kept in the database);
- the full recompute (``FigureState.full``, every night of a series searched at once) on
  ``--full-sample`` series, and what it would take for all series at that rate (stated as
  an extrapolation), with how often it agrees with the incremental state on those series;
- the detector's quality on the incremental state: precision and recall per CV and step
  size (a change counts where it lies within ±1 night of a planted step);
- peak memory (this process's maximum RSS).

Prints one JSON object.

    python scripts/bench/history_scale.py [--quick] [--series 1000] [--nights 1000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
FACTORS = (1.05, 1.10, 1.20, 1.30, 1.50)
CVS = (0.05, 0.18)
START = dt.datetime(2025, 1, 1, 2, 0, tzinfo=dt.timezone.utc)


def plant(series: int, nights: int, steps: int, seed: int) -> dict:
    """The values: per series its CV, base level and (for ``steps`` of them) a step."""
    rng = np.random.default_rng(seed)
    cv = np.array([CVS[i % 2] for i in range(series)])
    base = rng.uniform(1.0, 20.0, series)
    stepped = rng.choice(series, size=steps, replace=False)
    step_at = np.full(series, -1)
    factor = np.ones(series)
    step_at[stepped] = rng.integers(nights // 5, nights - max(20, nights // 10), steps)
    factor[stepped] = np.array([FACTORS[i % len(FACTORS)] for i in range(steps)])
    level = np.where(np.arange(nights)[None, :] >= step_at[:, None], factor[:, None], 1.0)
    level[step_at < 0] = 1.0
    noise = 1.0 + cv[:, None] * rng.standard_normal((series, nights))
    values = base[:, None] * level * np.maximum(noise, 0.05)
    return {"values": values, "cv": cv, "step_at": step_at, "factor": factor}


def _rows(values: np.ndarray, nights: range, series: range, run_base: int = 0):
    envelope = b'{"payloadType":"application/vnd.in-toto+json","payload":"","signatures":[]}'
    for n in nights:
        when = START + dt.timedelta(days=n)
        for s in series:
            yield {
                "device": f"board-{s // 40:03d}",
                "key_fingerprint": "SHA256:bench",
                "run_id": f"r{run_base}-{n:05d}-{s:05d}",
                "measured_at": when,
                "recorded_at": when,
                "model_name": f"model-{s % 40:02d}.onnx",
                "model_sha256": "0" * 64,
                "status": "passed",
                "preset": "quick",
                "p50_ms": float(values[s, n]),
                "envelope_sha256": "0" * 64,
                "envelope": envelope,
            }


def ingest(history, values, nights: range, series: int) -> float:
    """Batched (PostgreSQL: COPY) insert of every series' runs of ``nights``; seconds."""
    from edgequal.host.lab.history import reports

    rows = _rows(values, nights, range(series))
    t = time.perf_counter()
    if history.engine.dialect.name == "postgresql":
        cols = list(next(iter(_rows(values, range(1), range(1)))).keys())
        raw = history.engine.raw_connection()
        try:
            sql = f"COPY {reports.name} ({', '.join(cols)}) FROM STDIN"
            with raw.cursor() as cur, cur.copy(sql) as copy:
                for r in rows:
                    copy.write_row([r[c] for c in cols])
            raw.commit()
        finally:
            raw.close()
    else:
        batch: list[dict] = []
        with history.engine.begin() as conn:
            for r in rows:
                batch.append(r)
                if len(batch) == 20_000:
                    conn.execute(reports.insert(), batch)
                    batch = []
            if batch:
                conn.execute(reports.insert(), batch)
    return time.perf_counter() - t


def ingest_row_by_row(history, values, rows: int) -> float:
    """The baseline: ``rows`` runs, one insert and commit each (a fleet run's record); runs/s."""
    from edgequal.host.lab.history import reports

    gen = _rows(values, range(values.shape[1]), range(values.shape[0]), run_base=1)
    taken = [next(gen) for _ in range(rows)]
    t = time.perf_counter()
    for r in taken:
        with history.engine.begin() as conn:
            conn.execute(reports.insert(), r)
    rate = rows / (time.perf_counter() - t)
    with history.engine.begin() as conn:
        conn.execute(reports.delete().where(reports.c.run_id.like("r1-%")))
    return rate


def quality(state: dict, planted: dict, series: int) -> dict:
    """Precision and recall of the state's p50 changes (settled and provisional) against the
    planted steps. A change is true where a step of any size was planted within ±1 night
    of it, else false (a change 2 nights from its step is false, and that step missed);
    recall counts the steps found within ±1 night. Beside them, for the reader: precision
    were ±2 nights allowed, and where the false changes lie."""
    found: dict[int, list[int]] = {}
    for (device, model, _, figure), changes in state.items():
        if figure == "p50_ms":
            s = int(device.split("-")[1]) * 40 + int(model.split("-")[1].split(".")[0])
            found[s] = [c["index"] for c in changes]
    out = {}
    for cv in CVS:
        mine = [s for s in range(series) if planted["cv"][s] == cv]
        hits = {f: [0, 0] for f in FACTORS}
        true_pos = within_2 = 0
        false = {"no_step_planted": 0, "2_to_5_nights_off": 0, "further_off": 0}
        for s in mine:
            at = planted["step_at"][s]
            for i in found.get(s, []):
                if at >= 0 and abs(i - at) <= 1:
                    true_pos += 1
                elif at < 0:
                    false["no_step_planted"] += 1
                else:
                    false["2_to_5_nights_off" if abs(i - at) <= 5 else "further_off"] += 1
                within_2 += at >= 0 and abs(i - at) <= 2
            if at >= 0:
                f = float(planted["factor"][s])
                hits[f][1] += 1
                hits[f][0] += any(abs(i - at) <= 1 for i in found.get(s, []))
        big = [hits[f] for f in FACTORS if f >= 1.10]
        total = true_pos + sum(false.values())
        out[f"cv_{cv:g}"] = {
            "changes_found": total,
            "precision": round(true_pos / total, 4) if total else None,
            "recall_steps_ge_1.10": round(
                sum(h[0] for h in big) / max(sum(h[1] for h in big), 1), 4
            ),
            "recall_by_factor": {f"{f:g}": f"{h[0]}/{h[1]}" for f, h in hits.items()},
            "false_changes": false,
            "precision_within_2_nights": round(within_2 / total, 4) if total else None,
        }
    return out


def run_backend(url: str, planted: dict, args) -> dict:
    """Every measurement on one database."""
    from edgequal.host.lab.change_state import FigureState, nightly, state_changes, update
    from edgequal.host.lab.changes import ChangeSettings
    from edgequal.host.lab.history import History

    values = planted["values"]
    series, nights = values.shape
    settings = ChangeSettings()
    history = History.open(url)
    try:
        base_nights = nights - args.new_nights
        baseline = ingest_row_by_row(history, values, args.baseline_rows)
        ingest_s = catch_up_s = 0.0
        for lo in range(0, base_nights, args.block):
            ingest_s += ingest(
                history, values, range(lo, min(lo + args.block, base_nights)), series
            )
            t = time.perf_counter()
            update(history, settings)
            catch_up_s += time.perf_counter() - t
        per_night = []
        for n in range(base_nights, nights):
            ingest(history, values, range(n, n + 1), series)
            t = time.perf_counter()
            done = update(history, settings)
            per_night.append(time.perf_counter() - t)
            assert done.points == series
        state = state_changes(history)
        sample = range(0, series, max(series // max(args.full_sample, 1), 1))[: args.full_sample]
        t = time.perf_counter()
        agree = 0
        for s in sample:
            key = (f"board-{s // 40:03d}", f"model-{s % 40:02d}.onnx", "quick", "p50_ms")
            full = FigureState.full(key, list(values[s]), nightly(settings))
            agree += [c["index"] for c in full.all_changes()] == [c["index"] for c in state[key]]
        full_s = (time.perf_counter() - t) / max(len(sample), 1)
    finally:
        history.close()
    p = np.percentile(per_night, [50, 95])
    return {
        "ingest_runs_per_s": round(base_nights * series / ingest_s),
        "ingest_row_by_row_runs_per_s": round(baseline),
        "catch_up_s": round(catch_up_s, 2),
        "catch_up_blocks_of_nights": args.block,
        "one_night_update_s": {
            "nights": len(per_night),
            "p50": round(float(p[0]), 4),
            "p95": round(float(p[1]), 4),
            "max": round(max(per_night), 4),
        },
        "full_recompute": {
            "series_measured": len(sample),
            "s_per_series": round(full_s, 4),
            "all_series_s_extrapolated": round(full_s * series, 1),
            "agrees_with_incremental": f"{agree}/{len(sample)}",
        }
        if sample
        else "measured on the first backend only (the same computation)",
        "quality": quality(state, planted, series),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--series", type=int, default=1000)
    ap.add_argument("--nights", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--new-nights", type=int, default=20)
    ap.add_argument("--block", type=int, default=30)
    ap.add_argument("--full-sample", type=int, default=10)
    ap.add_argument("--baseline-rows", type=int, default=2000)
    ap.add_argument("--backends", default="sqlite,postgresql")
    ap.add_argument("--seed", type=int, default=47)
    ap.add_argument("--quick", action="store_true", help="40 series × 80 nights, 10 steps")
    args = ap.parse_args(argv)
    if args.quick:
        args.series, args.nights, args.steps, args.new_nights = 40, 80, 10, 3
        args.full_sample, args.baseline_rows, args.block = 4, 50, 20
    from edgequal.host.lab.change_state import DEFAULT_STRIDE

    planted = plant(args.series, args.nights, args.steps, args.seed)
    out: dict = {
        "series": args.series,
        "nights": args.nights,
        "runs": args.series * args.nights,
        "planted_steps": args.steps,
        "detector": "E-Divisive (host/judge/change_points.py), default settings; nightly "
        "search p 0.001 (change_state.nightly), effect beyond 5 % by its one-sided 99 % "
        "interval (change_state.NIGHTLY_CONFIDENCE), a quiet full window searched every "
        f"{DEFAULT_STRIDE} nights (change_state.DEFAULT_STRIDE)",
    }
    with tempfile.TemporaryDirectory(prefix="edgequal-scale-") as tmp:
        for backend in args.backends.split(","):
            if backend == "sqlite":
                out["sqlite"] = run_backend(f"sqlite:///{tmp}/history.sqlite", planted, args)
            elif backend == "postgresql":
                out["postgresql"] = _with_postgres(planted, args)
            args.full_sample = 0  # the full recompute reads no database: measured once
            print(json.dumps({backend: out.get(backend)}), file=sys.stderr, flush=True)
    out["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(out, indent=1))
    return 0


def peak_rss_mb() -> float:
    """This process's peak resident memory: its VmHWM (Linux), which starts afresh at exec.
    ``ru_maxrss`` does not: a process forked from a large one (a pytest worker) carries the
    parent's size into it."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _with_postgres(planted, args) -> dict:
    sys.path.insert(0, str(ROOT / "tests"))
    import postgres

    bin_dir = postgres.find_bin_dir()
    if bin_dir is None:
        return {"skipped": "no initdb on this machine"}
    server = postgres.start_postgres(bin_dir)
    try:
        return run_backend(server.url, planted, args)
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
