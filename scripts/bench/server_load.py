#!/usr/bin/env python3
"""Benchmark: the server scenario's load generator against a bare loop, in the same run.

The server scenario (``agent/measure/server.py``) serves Poisson arrivals with
``callers`` threads; each request costs the generator a lock, an index, a wait check,
two clock reads and two array stores on top of the model's call. This measures that
overhead where it is largest, at saturation (every request already due, so the
generator runs back to back like a bare loop would):

- ``bare``: ``callers`` threads each calling the bound model in a plain ``for`` loop;
- ``generator``: ``run_open_loop`` with every arrival at 0 (the same calls and threads).

Arms alternate per round (who goes first rotates) and the figure is the median of the
per-round ratios, so a busy machine moves both arms of a round alike. It also runs the
generator at half the bare capacity with Poisson arrivals and reports how late it
issues requests (``issue_lag``: issued minus scheduled, the generator's own timing
error, counted in the scenario's latency).

Target (issue 13): the generator's overhead stays under 5 % of the achieved rate.
Prints one JSON object.

    python scripts/bench/server_load.py [--model mid|classifier] [--callers 4] [--rounds 5] [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

TARGET_PCT = 5.0


def bare_rate(calls, per_caller: int) -> float:
    """Requests per second of ``len(calls)`` threads each calling ``per_caller`` times back to back."""

    def loop(call):
        for _ in range(per_caller):
            call()

    threads = [threading.Thread(target=loop, args=(c,)) for c in calls]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(calls) * per_caller / (time.perf_counter() - t0)


def generator_rate(calls, queries: int) -> float:
    """The same requests through the server scenario's generator, all due at once."""
    from edgequal.agent.measure.server import capacity_per_s

    return capacity_per_s(calls, queries)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mid", help="example model (default mid)")
    parser.add_argument("--callers", type=int, default=4, help="in-flight callers (default 4)")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (default 1)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of both arms (default 5)")
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds per arm (default 2)")
    parser.add_argument("--quick", action="store_true", help="1 s arms, 3 rounds")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.rounds = 1.0, 3

    sys.setswitchinterval(0.0002)  # as the server worker sets it
    from edgequal.agent.measure.server import poisson_arrivals_s, run_open_loop, score_run
    from edgequal.agent.runtimes.base import RuntimeOptions
    from edgequal.agent.runtimes.onnxruntime import OnnxRuntime
    from edgequal.agent.worker.io import synthesize_inputs
    from edgequal.agent.worker.scenarios import wait_until as _wait_until
    from edgequal.host.examples.catalog import build_example

    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="edgequal-server-bench-") as tmp:
        rt = OnnxRuntime(RuntimeOptions(threads=args.threads))
        rt.load(build_example(args.model, Path(tmp)))
        call = rt.bind(synthesize_inputs(rt.inputs(), {}, 0))
        for _ in range(20):
            call()
        calls = [call] * args.callers
        pace = bare_rate(calls, 20)
        per_caller = max(20, int(pace * args.seconds / args.callers))
        rounds = []
        for r in range(args.rounds):
            arms = {}
            order = ["bare", "generator"] if r % 2 == 0 else ["generator", "bare"]
            for name in order:
                if name == "bare":
                    arms[name] = bare_rate(calls, per_caller)
                else:
                    arms[name] = generator_rate(calls, per_caller * args.callers)
            overhead = 100.0 * (1.0 - arms["generator"] / arms["bare"])
            rounds.append(
                {
                    "round": r + 1,
                    "bare_per_s": round(arms["bare"], 2),
                    "generator_per_s": round(arms["generator"], 2),
                    "overhead_pct": round(overhead, 3),
                }
            )
            print(json.dumps(rounds[-1]), file=sys.stderr, flush=True)
        capacity = statistics.median(x["bare_per_s"] for x in rounds)
        rate = capacity / 2
        arrivals = poisson_arrivals_s(rate, max(64, int(rate * args.seconds)), seed=1)
        run = run_open_loop(calls, arrivals, _wait_until)
        lag_ms = sorted((run["issued"] - (run["start"] + arrivals)) * 1e3)
        half = score_run(arrivals, run["start"], run["issued"], run["done"], None, rate)
    overheads = [x["overhead_pct"] for x in rounds]
    figures = {
        "benchmark": "server_load",
        "model": f"{args.model}.onnx",
        "callers": args.callers,
        "threads": args.threads,
        "rounds": rounds,
        "target": f"generator overhead < {TARGET_PCT:g} % of the achieved rate",
        "overhead_pct_median": round(statistics.median(overheads), 3),
        "overhead_pct_spread": [min(overheads), max(overheads)],
        "within_target": statistics.median(overheads) < TARGET_PCT,
        "half_capacity_run": {
            "offered_per_s": half["offered_rate_per_s"],
            "achieved_per_s": half["achieved_rate_per_s"],
            "p50_ms": half["p50_ms"],
            "p99_ms": half["p99_ms"],
            "issue_lag_p50_ms": round(lag_ms[len(lag_ms) // 2], 4),
            "issue_lag_p99_ms": round(lag_ms[int(len(lag_ms) * 0.99) - 1], 4),
        },
        "elapsed_s": round(time.monotonic() - t_start, 1),
    }
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
