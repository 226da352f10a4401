"""Plan options shared by ``qualify`` and ``fleet run``: the preset's lengths, changed.

Flags are the last layer of a plan (preset, then the device profile's board fields, then
flags; ``plan.sources`` records ``flag``). Imported by the parser and the command
modules; argparse only at import.
"""

from __future__ import annotations

import argparse


def add_length_options(parser: argparse.ArgumentParser) -> None:
    """``--cold-runs``, ``--warmup``, ``--warmup-runs``, ``--latency`` and
    ``--max-extension``: the preset's cold loads, warm-up and timed latency, changed."""
    parser.add_argument(
        "--cold-runs",
        type=int,
        help="fresh processes timed for the cold load (default: the plan's)",
    )
    parser.add_argument(
        "--warmup",
        help="least warm-up time per input shape before latency is timed, e.g. 0.2s "
        "(default: the plan's); the plan's minimum warm-up runs still apply",
    )
    parser.add_argument(
        "--warmup-runs",
        type=int,
        metavar="N",
        help="at least N warm-up runs before timing (default: the plan's)",
    )
    parser.add_argument(
        "--latency",
        help="timed latency per input shape, e.g. 0.5s, 2m (default: the plan's); "
        "the plan's minimum runs still apply",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        metavar="N",
        help="measure N times with the cool-down between; the report holds each run's "
        "figures, their median, CV and 0.2-trimmed mean (default: 1)",
    )
    parser.add_argument(
        "--max-extension",
        metavar="FACTOR",
        help="the longest each input shape's timed latency loop may run when too few of "
        "its calls kept the CPU: FACTOR times its planned seconds (--latency; at least 0.5 s "
        "past them), a number of times such as 3 or 5x (default: 3, at most 100; a "
        "plan's latency_max_s, in seconds, wins); short of clean calls at that bound, "
        "the run is inconclusive",
    )


def length_flags(args) -> dict:
    """``--cold-runs``, ``--warmup``, ``--warmup-runs``, ``--latency`` and
    ``--max-extension`` as plan fields (only those given)."""
    from edgequal.contract.cli_args import parse_duration_s

    out = {}
    if args.cold_runs is not None:
        out["cold_runs"] = args.cold_runs
    if getattr(args, "warmup", None):
        out["warmup_min_s"] = parse_duration_s(args.warmup)
    if getattr(args, "warmup_runs", None) is not None:
        out["warmup_min_runs"] = args.warmup_runs
    if args.latency:
        out["latency_min_s"] = parse_duration_s(args.latency)
    if getattr(args, "repeat", None) is not None:
        if args.repeat < 1:
            from edgequal.host.errors import UsageError

            raise UsageError(f"--repeat must be at least 1, got {args.repeat}")
        out["repeat"] = args.repeat
    if getattr(args, "max_extension", None):
        out["latency_max_extension"] = parse_factor(args.max_extension, "--max-extension")
    return out


def parse_factor(text: str, flag: str) -> float:
    """``3``, ``3x`` or ``3×`` as 3.0; UsageError (exit 2) naming ``flag`` otherwise."""
    from edgequal.host.errors import UsageError

    try:
        value = float(text.strip().rstrip("x×"))
    except ValueError:
        value = float("nan")
    if not value >= 1 or value == float("inf"):
        raise UsageError(f"{flag} must be a factor of at least 1, e.g. 3 or 5x; got {text!r}")
    return value
