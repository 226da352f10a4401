"""``edgequal history update`` and ``history drop-samples``: the history's upkeep at lab scale
(host/lab/change_state.py, host/lab/retention.py; docs/history.md)."""

from __future__ import annotations

from pathlib import Path

from edgequal.contract.cli_args import examples

COMMANDS = ("update", "drop-samples")


def cmd_upkeep(args) -> int:
    """Run ``history update`` or ``history drop-samples``."""
    import json

    from ..host.errors import UsageError
    from ..host.lab.history import History
    from ..host.present.terminal.summary import print_note, write_json
    from .history_scope import lab_scope

    args.p_value = None
    _, url, settings = lab_scope(args)
    if args.history_command == "drop-samples":
        keep = args.keep_days
        if keep is None and args.lab:
            from ..host.lab.inventory import load_lab

            keep = load_lab(args.lab).keep_samples_days
        if keep is None:
            raise UsageError(
                "history drop-samples needs --keep-days N or a lab with [lab] keep_samples_days",
                hint="e.g. edgequal history drop-samples --lab lab.toml",
            )
        if keep < 1:
            raise UsageError(f"--keep-days must be at least 1, got {keep:g}")
    history = History.open(url)
    try:
        if args.history_command == "drop-samples":
            from ..host.lab.retention import drop_samples

            out = drop_samples(history, keep)
            text = (
                f"raw samples dropped from {out['runs']} runs older than {keep:g} days "
                f"({out['bytes_before']} → {out['bytes_after']} bytes); their figures kept"
            )
        else:
            from ..host.lab.change_state import rebuild, update

            found = (rebuild if args.rebuild else update)(history, settings)
            out = found.to_json()
            text = f"{found.points} new points in {found.series} series × figures; " + (
                f"{len(found.changes)} changes" if args.rebuild else "new changes:"
            )
    finally:
        history.close()
    if args.json:
        write_json(json.dumps(out, indent=1))
        return 0
    print_note(text)
    if args.history_command == "update" and not args.rebuild:
        for c in out["changes"] or [{"none": True}]:
            print("  none" if "none" in c else _line(c))
    return 0


def _line(c: dict) -> str:
    ratio = c["median_after"] / c["median_before"] if c["median_before"] else None
    size = f"{(ratio - 1) * 100:+.0f} %" if ratio is not None else "from 0"
    return (
        f"  {c['device']} {c['model']} ({c['preset'] or 'no preset'}) {c['figure']} {size} "
        f"from point {c['index']} (p {c['p_value']:.3f})"
    )


def add_parsers(hsub) -> list:
    """``history update`` and ``history drop-samples`` with their flags; returns them."""
    hu = hsub.add_parser(
        "update",
        help="take the runs recorded since into the change-point state kept in the database; "
        "print the changes new tonight",
    )
    hu.add_argument(
        "--rebuild",
        action="store_true",
        help="the full recompute: every series from its first run, the state replaced",
    )
    examples(hu, "edgequal history update --lab lab.toml", "edgequal history update --rebuild")
    hd = hsub.add_parser(
        "drop-samples",
        help="drop the raw samples of runs older than the lab's window; their figures stay",
    )
    hd.add_argument(
        "--keep-days",
        type=float,
        metavar="N",
        help="keep raw samples of the last N days (default: the lab's [lab] keep_samples_days)",
    )
    examples(
        hd,
        "edgequal history drop-samples --lab lab.toml",
        "edgequal history drop-samples --keep-days 90",
    )
    for q in (hu, hd):
        q.add_argument(
            "--lab", type=Path, metavar="LAB_TOML", help="the lab's database (and [changes])"
        )
        q.add_argument(
            "--db", metavar="URL", help="database URL (default: SQLite in the state dir)"
        )
        q.add_argument("--json", action="store_true")
    return [hu, hd]
