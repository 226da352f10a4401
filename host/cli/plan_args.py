"""Plan options shared by ``qualify`` and ``fleet run``: the preset's lengths, changed.

Flags are the last layer of a plan (preset, then the device profile's board fields, then
flags; ``plan.sources`` records ``flag``). Imported by the parser and the command
modules; argparse only at import.
"""

from __future__ import annotations

import argparse


def add_length_options(parser: argparse.ArgumentParser) -> None:
    """``--cold-runs``, ``--warmup``, ``--warmup-runs`` and ``--latency``: the preset's
    cold loads, warm-up and timed latency, changed."""
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


def length_flags(args) -> dict:
    """``--cold-runs``, ``--warmup``, ``--warmup-runs`` and ``--latency`` as plan fields
    (only those given)."""
    from edgequal.contract.plan import parse_duration_s

    out = {}
    if args.cold_runs is not None:
        out["cold_runs"] = args.cold_runs
    if getattr(args, "warmup", None):
        out["warmup_min_s"] = parse_duration_s(args.warmup)
    if getattr(args, "warmup_runs", None) is not None:
        out["warmup_min_runs"] = args.warmup_runs
    if args.latency:
        out["latency_min_s"] = parse_duration_s(args.latency)
    return out
