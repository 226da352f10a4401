"""``edgequal history``: verified reports over time (host/lab/history.py, host/present/html/trend.py)."""

from __future__ import annotations

from pathlib import Path

from edgequal.contract.cli_args import examples

from .history_scope import lab_scope as _lab_scope
from .lab_args import add_p_value_option


def cmd_history(args) -> int:
    import json

    from ..host.lab.history import History
    from ..host.present.terminal.summary import print_table, write_json

    if args.history_command == "changes":
        return _history_changes(args)
    if args.history_command in ("update", "drop-samples"):
        from .history_upkeep import cmd_upkeep

        return cmd_upkeep(args)
    if args.history_command == "trend":
        return _history_trend(args)
    history = History.open(args.db)
    if args.history_command == "record":
        from ..host.devices.trust import KnownDevices
        from ..host.lab.history import model_labels
        from ..host.lab.inventory import load_models

        known = KnownDevices()
        labels = model_labels(load_models(args.models)) if args.models else None
        outcomes = [
            history.record_file_outcome(p, device=args.device, known=known, labels=labels)
            for p in args.reports
        ]
        return _print_recorded(outcomes, labelled=bool(args.models))
    history.check_model(args.model)
    if args.history_command == "show":
        return _history_show(history, args)
    if args.history_command == "list":
        from ..host.lab.history import series_gap

        rows = history.list(device=args.device, model=args.model, limit=args.limit)
        if args.json:
            for r in rows:  # a failed, inconclusive or incomplete run: its status, no point
                r["series_gap"] = series_gap(r)
            write_json(json.dumps(rows, indent=1, default=str))
            return 0
        print_table(
            f"history ({history.url_for_display})",
            _HISTORY_COLUMNS,
            _history_rows(rows),
            whole=_WHOLE_COLUMNS,
            stack=True,
        )
        return 0
    return 0


def _history_trend(args) -> int:
    """``history trend``: each board × model over time; with ``--html``, the trend page with
    the change points of the same sensitivity as ``history changes`` and ``fleet run``."""
    import json

    from ..host.lab.history import History, nights_not_run, series_gap
    from ..host.present.terminal.summary import print_note, print_table, write_json

    devices, url, settings = _lab_scope(args)
    history = History.open(url)
    history.check_model(args.model)
    trends = history.trends(device=args.device, model=args.model, limit=args.limit)
    if devices is not None:
        trends = {pair: rows for pair, rows in trends.items() if pair[0] in devices}
    if args.html:
        from ..host.lab.changes import find_changes
        from ..host.present.html.trend import write_trend_page

        runs = history.runs(device=args.device, model=args.model)
        if devices is not None:
            runs = [r for r in runs if r["device"] in devices]
        found = find_changes(runs, settings)
        listed = [r for r in history.list(limit=None) if devices is None or r["device"] in devices]
        write_trend_page(
            args.html,
            trends,
            source=history.url_for_display,
            changes=found.changes,
            not_run=nights_not_run(trends, listed),
        )
    if args.json:
        for rows in trends.values():
            for r in rows:
                r["series_gap"] = series_gap(r)
        payload = [{"device": d, "model": m, "runs": rows} for (d, m), rows in trends.items()]
        write_json(json.dumps(payload, indent=1, default=str))
    else:
        if not trends:
            print_note("no recorded runs match")
        for (device, model), rows in trends.items():
            print_table(
                f"{model} on {device}",
                _HISTORY_COLUMNS + ["changed"],
                _history_rows(rows, True),
                whole=_WHOLE_COLUMNS,
                stack=True,
            )
    if args.html:
        print_note(f"trend page: {args.html} (p ≤ {settings.p_value:g})")
    return 0


def _print_recorded(outcomes: list[str], labelled: bool) -> int:
    """``history record``'s table, and what to do about reports recorded before: their
    model names can be attached afterwards by recording them again with ``--models``."""
    from ..host.lab.history import RECORDED_ALREADY, RECORDED_LABELLED, RECORDED_NEW
    from ..host.present.terminal.summary import print_note, print_table

    new, named, already = (
        outcomes.count(k) for k in (RECORDED_NEW, RECORDED_LABELLED, RECORDED_ALREADY)
    )
    columns, row = ["reports", "new"], [str(len(outcomes)), str(new)]
    if labelled:
        columns.append("model named")
        row.append(str(named))
    print_table("recorded", columns, [row])
    if named:
        print_note(f"{named} already recorded: their model names from --models are attached now")
    if already and not labelled:
        print_note(
            f"{already} already recorded, left as they were: recording them again with "
            "--models models.toml attaches the lab's model names to them"
        )
    elif already:
        print_note(
            f"{already} already recorded, left as they were: a model of none of --models' "
            "files, the name it has already, or a fleet cell's (its fleet run named it)"
        )
    return 0


_HISTORY_COLUMNS = ["measured", "device", "model", "status", "p50 ms", "p99 ms", "runtime", "run"]
_WHOLE_COLUMNS = ("device", "model")  # names read whole; a file name split in two reads as two


def _history_rows(rows: list[dict], changes: bool = False) -> list[list[str]]:
    from ..host.lab.history import series_gap

    table = []
    for r in rows:
        gap = series_gap(r)
        if gap:  # its status, never its figures: a failed run is not a slow or a 0 ms one
            r = {**r, "p50_ms": None, "p99_ms": None}
        line = [
            str(r["measured_at"])[:19],
            r["device"],
            r["model_name"]
            if not r.get("model_label")
            else f"{r['model_label']} ({r['model_name']})",
            r["status"],
            _figure(r, "p50_ms", "p50_repeat_cv") or ("—" if gap else ""),
            _figure(r, "p99_ms", "p99_repeat_cv") or ("—" if gap else ""),
            f"{r['runtime'] or ''} {r['runtime_version'] or ''}".strip(),
            r["run_id"],
        ]
        if changes:
            line.append(", ".join(r.get("changes", [])))
        table.append(line)
    return table


def _figure(row: dict, key: str, cv_key: str) -> str:
    """A row's figure; of repeated runs (``qualify --repeat N``), the runs' median with
    how many runs and their CV: ``1.234 (5 runs, CV 2.1%)``."""
    from ..host.present.units import spread_text

    value = row.get(key)
    if value is None:
        return ""
    return f"{value:.3f} {spread_text(row.get('repeats'), row.get(cv_key))}".rstrip()


def _history_show(history, args) -> int:
    """``history show``: one run's row, and its stored envelope verified again here."""
    import json

    from ..host.devices.trust import KnownDevices
    from ..host.devices.verify import verify_envelope
    from ..host.errors import HostError, UsageError
    from ..host.present.terminal.summary import print_table, write_json

    row = history.show(args.run_id, device=args.device, model=args.model)
    if row is None:
        raise UsageError("no recorded run matches", hint="edgequal history list")
    envelope = row.pop("envelope")
    try:
        verify_envelope(envelope, known=KnownDevices(), device=row["device"])
        row["signature"] = "verified against the pinned key"
    except HostError as e:
        row["signature"] = f"not verified here: {e}"
    if args.json:
        write_json(json.dumps(row, indent=1, default=str))
        return 0
    fields = [[k, "" if v is None else str(v)] for k, v in row.items() if k != "id"]
    print_table(f"run {row['run_id']} on {row['device']}", ["field", "value"], fields)
    return 0


def _since(text: str | None):
    """``--since DATE`` as the UTC midnight starting that day (or the given time)."""
    import datetime as dt

    from ..host.errors import UsageError

    if not text:
        return None
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError as e:
        raise UsageError(f"--since {text!r} is not a date", hint="e.g. --since 2026-11-01") from e
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


def _history_changes(args) -> int:
    """``history changes``: change points of every series (host/lab/changes.py)."""
    import json

    from ..host.lab.changes import find_changes
    from ..host.lab.history import History
    from ..host.present.terminal.summary import print_note, print_table, write_json

    devices, url, settings = _lab_scope(args)
    history = History.open(url)
    rows = history.runs(device=args.device, model=args.model, since=_since(args.since))
    if devices is not None:
        rows = [r for r in rows if r["device"] in devices]
    found = find_changes(rows, settings)
    if args.attest:
        from ..host.lab.change_attestation import write_changes_attestation

        write_changes_attestation(found, args.attest)
    if args.html:
        _write_changes_pages(history, found, settings, args.html)
    if args.json:
        from ..host.lab.change_groups import group_changes

        payload = {**found.to_json(), "groups": [g.to_json() for g in group_changes(found)]}
        write_json(json.dumps(payload, indent=1, default=str))
        return 0
    noise = {(n.device, n.model, n.preset): n for n in found.noise}

    def cv(s) -> str:
        n = noise.get((s.device, s.model, s.preset))
        return "" if n is None else f"{n.cv:.1%}" + (" too noisy" if n.too_noisy else "")

    def gaps(s) -> str:
        counts: dict[str, int] = {}
        for g in s.gaps:
            counts[g["status"]] = counts.get(g["status"], 0) + 1
        return ", ".join(f"{n} {status}" for status, n in counts.items())

    print_table(
        f"series ({history.url_for_display})",
        ["device", "model", "preset", "runs", "gaps", "CV of p50"],
        [
            [s.device, s.model, s.preset or "", str(len(s.points)), gaps(s), cv(s)]
            for s in found.series
        ],
        stack=True,
    )
    for why in found.too_noisy().values():
        print_note(why)
    if not found.changes:
        print_note(
            f"no change beyond noise in {len(found.series)} series "
            f"(p ≤ {settings.p_value:g}, {_gaps_note(found)})"
        )
        if args.attest:
            print_note(f"signed change points: {args.attest}")
        if args.html:
            print_note(f"changes page: {args.html}")
        return 0
    print_table(
        "changes",
        ["first run after", "device", "model", "figure", "before", "after", "ratio [95 % CI]",
         "p", "boards", "cause", "changed there"],
        [_change_row(c) for c in found.changes],
        stack=True,
    )  # fmt: skip
    from ..host.lab.change_groups import group_changes

    for g in group_changes(found):
        print_note(g.headline())
    for c in found.changes:
        print_note(c.headline())
    print_note(f"p ≤ {settings.p_value:g}; {_gaps_note(found)}")
    if args.attest:
        print_note(f"signed change points: {args.attest}")
    if args.html:
        print_note(f"changes page: {args.html}")
    return 0


def _gaps_note(found) -> str:
    """'3 runs left out (1 failed, 2 inconclusive)', or that none were."""
    counts = found.gaps_by_status()
    if not counts:
        return "no failed, inconclusive or incomplete run left out"
    parts = ", ".join(f"{n} {status}" for status, n in counts.items())
    return f"{found.gap_count} run{'s' if found.gap_count != 1 else ''} left out ({parts})"


def _write_changes_pages(history, found, settings, page: Path) -> None:
    """``history changes --html PAGE``: the lab's changes page, and the trend page of its
    series beside it (``PAGE``'s name with ``-trend``), which each change links."""
    from ..host.lab.change_groups import group_changes
    from ..host.lab.history import nights_not_run
    from ..host.present.html.change_groups import write_changes_page
    from ..host.present.html.trend import write_trend_page

    page = Path(page)
    trend_page = page.with_name(f"{page.stem}-trend{page.suffix or '.html'}")
    pairs = sorted({(s.device, s.model) for s in found.series})
    trends = {(d, m): history.trend(d, m) for d, m in pairs}
    listed = [r for r in history.list(limit=None) if r["device"] in {d for d, _ in pairs}]
    write_trend_page(
        trend_page,
        trends,
        source=history.url_for_display,
        changes=found.changes,
        not_run=nights_not_run(trends, listed),
    )
    write_changes_page(
        page,
        group_changes(found),
        trend_href=trend_page.name,
        settings=settings,
        source=history.url_for_display,
        series=len(found.series),
    )


def _change_row(c) -> list[str]:
    """A change's row: its culprit by field name only (the model first); the line under the
    table (its headline) names each field with its values, so one culprit never fills a
    column over many lines."""
    from ..host.lab.change_causes import machine_text
    from ..host.lab.culprit import culprit_fields

    ratio = "" if c.ratio is None else f"×{c.ratio:.3f}"
    if c.ratio_ci:
        ratio += f" [{c.ratio_ci[0]:.3f}, {c.ratio_ci[1]:.3f}]"
    why = ", ".join(x["field"] for x in culprit_fields(c.culprit))
    if not c.culprit:
        # The cause column says machine or unexplained; here, only what moved with it.
        moved = [m for m in c.machine if m["moved_with"]]
        why = "nothing recorded" + (machine_text(moved) if moved else "")
    return [
        f"{(c.first_after['measured_at'] or '')[:19]} {c.first_after['run_id']}",
        c.device,
        c.model,
        c.figure,
        f"{c.median_before:.4g} {c.unit}".strip(),
        f"{c.median_after:.4g} {c.unit}".strip(),
        ratio,
        f"{c.p_value:.3g}",
        ", ".join(c.boards),
        c.cause,
        why,
    ]


def add_parsers(sub) -> None:
    """``history list``, ``show``, ``trend``, ``record`` and ``changes``: their flags."""
    h = sub.add_parser("history", help="verified reports over time (docs/fleet.md)")
    examples(h, "edgequal history list", "edgequal history trend --device pi5-a --model classifier")
    hsub = h.add_subparsers(dest="history_command", required=True)
    hl = hsub.add_parser("list", help="recorded runs, newest first")
    examples(
        hl, "edgequal history list --device pi5", "edgequal history list --model ocr-cls --json"
    )
    add_series_options(hl, limit=True)
    hs = hsub.add_parser(
        "show", help="one recorded run (RUN_ID, or the newest for --device/--model), verified"
    )
    hs.add_argument("run_id", nargs="?", metavar="RUN_ID", help="a run id or its prefix")
    examples(hs, "edgequal history show 3f2a", "edgequal history show --device pi5 --model ocr-cls")
    add_series_options(hs)
    _add_trend_parser(hsub)
    _add_record_parser(hsub)
    _add_changes_parser(hsub)
    from .history_upkeep import add_parsers as add_upkeep_parsers

    add_upkeep_parsers(hsub)


def add_series_options(parser, limit: bool = False, p_value: bool = False) -> None:
    """The options that pick recorded runs, declared once for ``history list``, ``show``,
    ``trend`` and ``changes``: ``--db``, ``--device``, ``--model``, ``--json``, optionally
    ``--limit`` and ``--p-value``."""
    add_db_option(parser)
    parser.add_argument("--device", help="only this device")
    parser.add_argument("--model", help="only this model (name, name without extension, SHA-256)")
    parser.add_argument("--json", action="store_true")
    if limit:
        parser.add_argument(
            "--limit", type=int, default=50, help="rows (per board × model for trend)"
        )
    if p_value:
        add_p_value_option(parser)


def add_db_option(parser) -> None:
    """``--db URL``: the history database (default: SQLite in the state directory)."""
    parser.add_argument(
        "--db", metavar="URL", help="database URL (default: SQLite in the state dir)"
    )


def _add_trend_parser(hsub) -> None:
    """``history trend``: figures over time, the page, a lab's boards."""
    ht = hsub.add_parser(
        "trend",
        help="figures over time per board × model, firmware and runtime changes marked",
    )
    ht.add_argument(
        "--html", type=Path, metavar="PAGE", help="also write the trend page (plots) to PAGE"
    )
    ht.add_argument(
        "--lab",
        type=Path,
        metavar="LAB_TOML",
        help="only this lab's boards; its history database and [changes] sensitivity (the "
        "change points on the page are those history changes and fleet run find)",
    )
    examples(
        ht,
        "edgequal history trend --device pi5-a --model classifier --html trend.html",
        "edgequal history trend --model ocr-cls --db postgresql://lab-db/edgequal",
    )
    add_series_options(ht, limit=True, p_value=True)


def _add_record_parser(hsub) -> None:
    """``history record``: reports verified and recorded."""
    hr = hsub.add_parser("record", help="verify reports and record them")
    hr.add_argument("reports", type=Path, nargs="+")
    examples(
        hr,
        "edgequal history record nightly/*.report.json --device pi5",
        "edgequal history record nightly/*.report.json --models models.toml",
    )
    hr.add_argument(
        "--models",
        type=Path,
        metavar="TOML",
        help="the lab's models file: a report of one of its models (same SHA-256) is recorded "
        "under the model's name there, as fleet run records it (--model finds it by that name)",
    )
    hr.add_argument("--device", help="the device that must have signed them")
    add_db_option(hr)


def _add_changes_parser(hsub) -> None:
    """``history changes``: change points beyond noise, their page and attestation."""
    hc = hsub.add_parser(
        "changes",
        help="change points per board × model × figure, beyond noise, with what changed there",
    )
    hc.add_argument(
        "--lab",
        type=Path,
        metavar="LAB_TOML",
        help="only this lab's boards; its history database and [changes] sensitivity",
    )
    hc.add_argument(
        "--policy",
        type=Path,
        metavar="POLICY",
        help="a policy whose [changes] section sets the sensitivity (over the lab's)",
    )
    hc.add_argument(
        "--since", metavar="DATE", help="only runs measured on or after DATE (YYYY-MM-DD)"
    )
    hc.add_argument(
        "--html",
        type=Path,
        metavar="PAGE",
        help="also write the lab's changes page: each night's changes grouped by what they "
        "share, the latest first, each linking its series on PAGE-trend.html beside it",
    )
    hc.add_argument(
        "--attest",
        type=Path,
        metavar="FILE",
        help="also write the changes as an in-toto statement signed by this host's key, "
        "listing the reports (by digest) either side of each",
    )
    examples(
        hc,
        "edgequal history changes --lab lab.toml",
        "edgequal history changes --device pi5-a --model classifier --since 2026-11-01 --json",
    )
    add_series_options(hc, p_value=True)
