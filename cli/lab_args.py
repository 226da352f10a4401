"""Options the lab's commands share, each declared once beside the rule that reads it back
(as Polygraphy's ``tools/args`` groups do): ``--wait`` for a board another host holds, the
history database a run records into, ``--repeat-until-decided`` and ``--p-value``. Used by
``fleet run``, ``fleet health``, ``fleet requalify`` and ``history``; argparse only at import.
"""

from __future__ import annotations

import argparse


def add_wait_option(parser, help: str | None = None) -> None:
    """``--wait [TIMEOUT]``: wait for a device another host holds; read by :func:`wait_s`."""
    parser.add_argument("--wait", nargs="?", const="forever", metavar="TIMEOUT", help=help)


def wait_s(args) -> float | None:
    """``--wait``: absent 0 (fail fast), bare None (no limit), else the duration."""
    from edgequal.contract.cli_args import parse_duration_s

    text = args.wait
    if text == "forever":
        return None
    return 0.0 if text is None else parse_duration_s(text)


def add_history_option(parser, help: str | None = None) -> None:
    """``--history URL``: the history database; read by :func:`history_url`."""
    parser.add_argument("--history", metavar="URL", help=help)


def history_url(args, lab) -> str | None:
    """``--history``, else the lab file's ``history_url``, else None (the default database)."""
    if args.history:
        return args.history
    return lab.history_url.read("lab history_url") if lab.history_url else None


def add_repeat_option(parser) -> None:
    """``--repeat-until-decided N`` of ``fleet run`` and ``fleet requalify``."""
    parser.add_argument(
        "--repeat-until-decided",
        type=int,
        metavar="N",
        help="a run whose verdict against its baseline is UNKNOWN, or a regression to "
        "confirm, runs again with the baseline's own model and golden set (by digest), "
        "interleaved on its board, until SAME or DIFFERENT, at most N pairs (docs/gating.md)",
    )


def _p_value(text: str) -> float:
    """``--p-value``: a number strictly between 0 and 1 (refused before anything runs)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def add_p_value_option(parser) -> None:
    """``--p-value P``: the change points' significance, over the lab's ``[changes] p_value``
    (default 0.01); the same flag on ``history changes``, ``history trend`` and ``fleet run``."""
    parser.add_argument(
        "--p-value",
        type=_p_value,
        metavar="P",
        help="a change point is significant at or below this permutation p-value (default: "
        "the lab's [changes] p_value, else 0.01; docs/history.md)",
    )
