"""``edgequal history``: verified reports over time (host/lab/history.py, host/present/html/trend.py)."""

from __future__ import annotations

from pathlib import Path

from edgequal.contract.cli_args import examples


def cmd_history(args) -> int:
    import json

    from ..lab.history import History
    from ..present.terminal.summary import print_note, print_table, write_json

    history = History.open(args.db)
    if args.history_command == "record":
        from ..devices.trust import KnownDevices
        from ..lab.history import model_labels
        from ..lab.inventory import load_models

        known = KnownDevices()
        labels = model_labels(load_models(args.models)) if args.models else None
        added = sum(
            1
            for p in args.reports
            if history.record_file(p, device=args.device, known=known, labels=labels)
        )
        print_table("recorded", ["reports", "new"], [[str(len(args.reports)), str(added)]])
        return 0
    history.check_model(args.model)
    if args.history_command == "show":
        return _history_show(history, args)
    if args.history_command == "list":
        rows = history.list(device=args.device, model=args.model, limit=args.limit)
        if args.json:
            write_json(json.dumps(rows, indent=1, default=str))
            return 0
        print_table(
            f"history ({history.url_for_display})",
            _HISTORY_COLUMNS,
            _history_rows(rows),
            whole=_WHOLE_COLUMNS,
        )
        return 0
    trends = history.trends(device=args.device, model=args.model, limit=args.limit)
    if args.html:
        from ..present.html.trend import write_trend_page

        write_trend_page(args.html, trends, source=history.url_for_display)
    if args.json:
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
            )
    if args.html:
        print_note(f"trend page: {args.html}")
    return 0


_HISTORY_COLUMNS = ["measured", "device", "model", "status", "p50 ms", "p99 ms", "runtime", "run"]
_WHOLE_COLUMNS = ("device", "model")  # names read whole; a file name split in two reads as two


def _history_rows(rows: list[dict], changes: bool = False) -> list[list[str]]:
    table = []
    for r in rows:
        line = [
            str(r["measured_at"])[:19],
            r["device"],
            r["model_name"]
            if not r.get("model_label")
            else f"{r['model_label']} ({r['model_name']})",
            r["status"],
            "" if r["p50_ms"] is None else f"{r['p50_ms']:.3f}",
            "" if r["p99_ms"] is None else f"{r['p99_ms']:.3f}",
            f"{r['runtime'] or ''} {r['runtime_version'] or ''}".strip(),
            r["run_id"],
        ]
        if changes:
            line.append(", ".join(r.get("changes", [])))
        table.append(line)
    return table


def _history_show(history, args) -> int:
    """``history show``: one run's row, and its stored envelope verified again here."""
    import json

    from ..devices.trust import KnownDevices
    from ..devices.verify import verify_envelope
    from ..errors import HostError, UsageError
    from ..present.terminal.summary import print_table, write_json

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


def add_parsers(sub) -> None:
    """``history list``, ``show``, ``trend`` and ``record``: their flags."""
    h = sub.add_parser("history", help="verified reports over time (docs/fleet.md)")
    examples(h, "edgequal history list", "edgequal history trend --device pi5-a --model classifier")
    hsub = h.add_subparsers(dest="history_command", required=True)
    hl = hsub.add_parser("list", help="recorded runs, newest first")
    examples(
        hl, "edgequal history list --device pi5", "edgequal history list --model ocr-cls --json"
    )
    hs = hsub.add_parser(
        "show", help="one recorded run (RUN_ID, or the newest for --device/--model), verified"
    )
    hs.add_argument("run_id", nargs="?", metavar="RUN_ID", help="a run id or its prefix")
    examples(hs, "edgequal history show 3f2a", "edgequal history show --device pi5 --model ocr-cls")
    ht = hsub.add_parser(
        "trend",
        help="figures over time per board × model, firmware and runtime changes marked",
    )
    ht.add_argument(
        "--html", type=Path, metavar="PAGE", help="also write the trend page (plots) to PAGE"
    )
    examples(
        ht,
        "edgequal history trend --device pi5-a --model classifier --html trend.html",
        "edgequal history trend --model ocr-cls --db postgresql://lab-db/edgequal",
    )
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
    for q in (hl, hs, ht, hr):
        q.add_argument(
            "--db", metavar="URL", help="database URL (default: SQLite in the state dir)"
        )
    for q in (hl, hs, ht):
        q.add_argument("--device", help="only this device")
        q.add_argument("--model", help="only this model (name, name without extension, SHA-256)")
        q.add_argument("--json", action="store_true")
    for q in (hl, ht):
        q.add_argument("--limit", type=int, default=50, help="rows (per board × model for trend)")
