#!/usr/bin/env python3
"""Benchmark: the verdict's error rates (host/judge/verdict.py) measured on real runs.

Real qualifications through the library (``edgequal.connect("local")``: the local agent,
its workers, signing and verification; a short ``quick`` plan, one thread) of an example
model (``mid`` by default, host/examples/catalog.py), one signed report per run, the
figure each verdict compares being a run's clean p50 (host/judge/run_figures.py):

- **A/A**: the same model run after run, quiet and beside 1 and 3 busy processes (this
  script's spinners, unpinned, as busy_machine.py starts them). The first ``--history``
  runs of each load are the board's history (their CV is the noise score a one-run
  comparison assumes, as ``gate --history`` does); the runs after them are cut into
  consecutive blocks of k runs, and each block is compared with the next (k runs a side,
  minutes apart). With k = 1 the spread is the history's; with k ≥ 2 the blocks' own.
  A DIFFERENT is a false alarm.
- **A/B**: copies of the model slowed by an extra op chain (a MatMul/Relu branch on the
  input, added to the logits times zero, so outputs are unchanged), sized here to cost
  about 5, 10 and 25 % of the model's time on this machine (calibrated by onnxruntime
  before the runs; the slowdown each copy really had is measured from the runs
  themselves), run in rotation with the original (A, B5, B10, B25, A, …), quiet. Blocks
  of k rounds compare A's runs with each copy's: SAME is a miss (false SAME), DIFFERENT
  the power.

Targets (docs/gating.md): false DIFFERENT ≤ 1 % of ≥ 100 A/A comparisons at each load;
false SAME ≤ 5 % for a 10 % slowdown with ≤ 10 runs a side. Prints one JSON object: per
load and per k, the counts of each verdict and the rates with 95 % Wilson intervals.
Progress goes to stderr. A small run (minutes) answers with wide intervals; the full
scale (hours on a quiet board) is

    python scripts/bench/false_alarms.py --aa-runs 230 --ab-rounds 60 --history 20

    python scripts/bench/false_alarms.py [--aa-runs 40] [--aa-runs-busy N] [--ab-rounds 12] [--history 8]
        [--loads 0,1,3] [--ks 1,3,5,10] [--slowdowns 0.05,0.10,0.25] [--seconds 0.5]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SPIN = "import time\nwhile True:\n    time.perf_counter()\n"
TARGET_FALSE_DIFFERENT = 0.01
TARGET_FALSE_SAME_10 = 0.05


def wilson(k: int, n: int, z: float = 1.959964) -> list[float] | None:
    """The 95 % Wilson score interval of k successes in n trials."""
    if n == 0:
        return None
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)]


def slowed_copy(model: Path, out: Path, units: int, width: int = 256) -> Path:
    """``model`` with ``units`` extra MatMul+Relu layers on a branch from its input, the
    branch summed, times zero, added to its logits: same outputs, more work."""
    import onnx
    from onnx import helper, numpy_helper

    m = onnx.load(str(model))
    g = m.graph
    if units == 0:
        onnx.save(m, str(out))
        return out
    rng = np.random.default_rng(units)
    image = g.input[0].name
    channels = g.input[0].type.tensor_type.shape.dim[1].dim_value or 3
    logits = next(n for n in g.node if n.op_type == "Gemm").output[0]
    nodes = [
        helper.make_node("GlobalAveragePool", [image], ["slow.pool"]),
        helper.make_node("Flatten", ["slow.pool"], ["slow.x0"], axis=1),
    ]
    inits = [
        numpy_helper.from_array(
            rng.normal(0, 1 / np.sqrt(channels), (channels, width)).astype(np.float32), "slow.w0"
        )
    ]
    nodes.append(helper.make_node("MatMul", ["slow.x0", "slow.w0"], ["slow.h0"]))
    prev = "slow.h0"
    for i in range(1, units + 1):
        w = rng.normal(0, 1 / np.sqrt(width), (width, width)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"slow.w{i}"))
        nodes += [
            helper.make_node("MatMul", [prev, f"slow.w{i}"], [f"slow.m{i}"]),
            helper.make_node("Relu", [f"slow.m{i}"], [f"slow.h{i}"]),
        ]
        prev = f"slow.h{i}"
    zero = numpy_helper.from_array(np.zeros((1,), np.float32), "slow.zero")
    inits.append(zero)
    nodes += [
        helper.make_node("ReduceSum", [prev], ["slow.sum"], keepdims=1),
        helper.make_node("Mul", ["slow.sum", "slow.zero"], ["slow.nothing"]),
        helper.make_node("Add", [logits, "slow.nothing"], ["slow.logits"]),
    ]
    for n in g.node:  # the rest of the graph reads the new logits
        for j, name in enumerate(n.input):
            if name == logits:
                n.input[j] = "slow.logits"
    # The branch must run before the nodes that read it: insert before the first reader.
    first = next(i for i, n in enumerate(g.node) if "slow.logits" in n.input)
    for k, node in enumerate(nodes):
        g.node.insert(first + k, node)
    g.initializer.extend(inits)
    onnx.save(m, str(out))
    return out


def bare_p50_ms(model: Path, calls: int = 300) -> float:
    """The median of ``calls`` timed onnxruntime calls, one thread (calibration only)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    s = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
    inp = s.get_inputs()[0]
    shape = [d if isinstance(d, int) else 1 for d in inp.shape]
    feed = {inp.name: np.random.default_rng(0).random(shape, dtype=np.float32)}
    for _ in range(30):
        s.run(None, feed)
    t = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        s.run(None, feed)
        t.append(time.perf_counter_ns() - t0)
    return float(np.median(t)) / 1e6


def calibrate(model: Path, folder: Path, slowdowns: list[float]) -> dict[float, Path]:
    """A copy per slowdown, its extra layers chosen so onnxruntime's bare p50 rises by
    about that much (each unit's cost measured on this machine)."""
    base = bare_p50_ms(model)
    probe = slowed_copy(model, folder / "probe.onnx", 16)
    unit = max((bare_p50_ms(probe) - base) / 16, 1e-6)
    out = {}
    for s in slowdowns:
        units = max(1, round(s * base / unit))
        out[s] = slowed_copy(model, folder / f"slowed-{round(s * 100)}.onnx", units)
        print(f"slowdown {s:.0%}: {units} extra layers", file=sys.stderr, flush=True)
    return out


class Spinners:
    """``n`` busy processes for the duration of a with-block."""

    def __init__(self, n: int):
        self.n, self.procs = n, []

    def __enter__(self):
        self.procs = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(self.n)]
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.wait(10)


def qualify_p50(device, model: Path, plan_fields: dict) -> tuple[float | None, str, dict]:
    """One real qualification: the run's clean p50 (ms), its status and its predicate."""
    from edgequal.host.judge.run_figures import run_figures

    report = device.qualify(model, plan="quick", **plan_fields)
    runs = run_figures(report.predicate, "p50_ms")
    return (runs.values[0] if runs.values else None), report.status, report.predicate


def confirm(baseline: list[dict], candidate: list[dict], prior, pairs: int) -> str | None:
    """A DIFFERENT between two reports made apart, confirmed as ``fleet run
    --repeat-until-decided`` confirms a regression: up to ``pairs`` interleaved pairs
    (host/judge/repeat.py's own loop) of the real runs that came next, each side's from its
    list in order (the same list for A/A). Their verdict, or None when no pair is left."""
    from edgequal.host.judge.repeat import repeat_until_decided

    one = baseline is candidate
    n = min(pairs, len(baseline) // 2) if one else min(pairs, len(baseline), len(candidate))
    if n < 1:
        return None
    queues = {"baseline": iter(baseline)}
    queues["candidate"] = queues["baseline"] if one else iter(candidate)
    result = repeat_until_decided(
        lambda side: {"predicate": next(queues[side]), "path": None}, n, 0.03, prior=prior
    )
    return result.verdict["verdict"]


def verdicts(base_blocks, cand_blocks, prior, interleaved: bool, floors=None) -> list[str]:
    """Each block against its partner: ``prior`` a Spread, or a function of the pair's
    index giving one (the history held out of that pair), or None (no history);
    ``floors``: per run, its fastest call (one run a side: verdict.py ``FLOOR_SHARE``)."""
    from edgequal.host.judge.verdict import decide

    return [
        decide(
            a,
            b,
            0.03,
            prior=prior(i) if callable(prior) else prior,
            interleaved=interleaved,
            floors=(floors[i], floors[i + 1]) if floors else None,
        ).verdict
        for i, (a, b) in enumerate(zip(base_blocks, cand_blocks))
    ]


def fastest_calls(predicates: list[dict] | None) -> list[float | None] | None:
    """Each run's fastest call (ms) of its first input shape, in run order."""
    from edgequal.host.judge.run_figures import fastest_call_ms

    if not predicates:
        return None
    shapes = [((p.get("results") or {}).get("latency") or {}).get("per_shape") for p in predicates]
    return [fastest_call_ms(s[0] if s else None) for s in shapes]


def tally(found: list[str], bad: str) -> dict:
    n = len(found)
    counts = {v: found.count(v) for v in ("SAME", "DIFFERENT", "UNKNOWN")}
    return {
        "comparisons": n,
        **counts,
        f"{bad.lower()}_rate": round(counts[bad] / n, 4) if n else None,
        f"{bad.lower()}_ci95": wilson(counts[bad], n),
    }


def history_prior(p50s: list[float]):
    """The spread a comparison of two reports assumes: the history runs' CV (the noise
    score) and their session-to-session tail (``noise.pair_tail``), as ``gate --history``."""
    from edgequal.host.judge.verdict import HISTORY, Spread
    from edgequal.host.lab.noise import pair_tail

    v = np.asarray(p50s)
    cv = float(v.std(ddof=1) / v.mean())
    return Spread.from_cv(cv, len(v) - 1, HISTORY, tail=pair_tail([v]))


def blocks(values: list[float], k: int) -> list[list[float]]:
    return [values[i : i + k] for i in range(0, len(values) - k + 1, k)]


def aa_rates(
    p50s: list[float],
    k: int,
    interfered: list[bool] | None = None,
    predicates: list[dict] | None = None,
    pairs: int = 4,
) -> dict:
    """A/A at k runs a side: consecutive blocks, each against the next, as two reports made
    apart. With history: the CV of the load's other runs (those outside the pair, spread
    over the whole session as a lab's nights are); without: the session_shift rule.
    ``interfered``: per run, whether its report was ``inconclusive`` (the agent saw other
    processes take the CPU); a DIFFERENT with such a run on either side is counted apart
    (``different_interfered``): the gate retries it, naming other processes as the cause.
    ``predicates``: the runs' reports, for ``confirmed``: each DIFFERENT with history run
    again as ``fleet run --repeat-until-decided`` confirms a regression, by up to ``pairs``
    pairs of the runs that came next (:func:`confirm`)."""
    bs = blocks(p50s, k)
    flags = blocks(interfered or [False] * len(p50s), k)

    def held_out(i: int):
        rest = p50s[: i * k] + p50s[(i + 2) * k :]
        return history_prior(rest) if len(rest) >= 3 else None

    def counted(found: list[str]) -> dict:
        blamed = sum(v == "DIFFERENT" and any(flags[i] + flags[i + 1]) for i, v in enumerate(found))
        alarms = found.count("DIFFERENT") - blamed
        return {
            **tally(found, "DIFFERENT"),
            "different_interfered": blamed,
            "unexplained_different": alarms,
            "unexplained_different_ci95": wilson(alarms, len(found)),
        }

    floors = fastest_calls(predicates) if k == 1 else None
    with_history = verdicts(bs[:-1], bs[1:], held_out, interleaved=False, floors=floors)
    alone = verdicts(bs[:-1], bs[1:], None, interleaved=False)
    out = {**counted(with_history), "without_history": counted(alone)}
    if floors:  # what the fastest calls took back (verdict.py FLOOR_SHARE)
        tail_only = verdicts(bs[:-1], bs[1:], held_out, interleaved=False)
        out["different_without_fastest_call_rule"] = tail_only.count("DIFFERENT")
    if predicates is not None:
        after = {"DIFFERENT": 0, "SAME": 0, "UNKNOWN": 0, "no pairs left": 0}
        for i, v in enumerate(with_history):
            if v != "DIFFERENT":
                continue
            start = (i + 2) * k
            rest = p50s[: i * k] + p50s[start + 2 * pairs :]
            prior = history_prior(rest) if len(rest) >= 3 else None
            found = confirm(predicates[start:], predicates[start:], prior, pairs)
            after["no pairs left" if found is None else found] += 1
        n = len(with_history)
        out["confirmed"] = {
            "pairs_at_most": pairs,
            "after_pairs": after,
            "different_rate": round(after["DIFFERENT"] / n, 4) if n else None,
            "different_ci95": wilson(after["DIFFERENT"], n),
        }
    return out


def analyse(
    aa: dict[int, list[float]],
    ab: dict[str, list[float]],
    ks: list[int],
    interfered: dict[int, list[bool]] | None = None,
    predicates: dict | None = None,
    pairs: int = 4,
) -> dict:
    """The rates from the runs' clean p50s: ``aa`` per load in run order; ``ab`` the
    rotation's series (``A`` and one per copy, round by round); ``interfered`` per load,
    whether each A/A run's report was inconclusive."""
    out: dict = {"aa": {}}
    for load, p50s in aa.items():
        flags = (interfered or {}).get(load)
        out["aa"][str(load)] = {
            "runs": len(p50s),
            "p50_ms_median": round(float(np.median(p50s)), 4),
            "p50_cv": round(float(np.std(p50s, ddof=1) / np.mean(p50s)), 4),
            "inconclusive_runs": sum(flags or []),
            "by_runs_a_side": {
                str(k): aa_rates(p50s, k, flags, (predicates or {}).get(f"aa-load{load}"), pairs)
                for k in ks
            },
        }
    if ab:
        from edgequal.host.judge.verdict import decide

        a = ab["A"]
        quiet = history_prior(aa[0]) if len(aa.get(0, [])) >= 3 else None
        out["ab"] = {}
        for name, b in ab.items():
            if name == "A":
                continue
            per_k = {}
            for k in ks:
                # The rotation interleaves A and the copies in one session; one run a side
                # takes the quiet A/A runs' CV as its history.
                found = verdicts(
                    blocks(a, k), blocks(b, k), quiet if k == 1 else None, interleaved=True
                )
                per_k[str(k)] = {
                    **tally(found, "SAME"),
                    "different_rate": round(found.count("DIFFERENT") / len(found), 4)
                    if found
                    else None,
                }
                pa, pb = (predicates or {}).get("ab-A"), (predicates or {}).get(f"ab-{name}")
                if k == 1 and pa and pb and quiet is not None:
                    # The same rounds as two reports made apart, as compare and gate
                    # --baseline judge two files: with the quiet history, by the fastest
                    # calls as well, and by the tail alone.
                    fa, fb = fastest_calls(pa), fastest_calls(pb)
                    apart = [
                        decide([x], [y], 0.03, prior=quiet, floors=(fa[j], fb[j])).verdict
                        for j, (x, y) in enumerate(zip(a, b))
                    ]
                    tail_only = [decide([x], [y], 0.03, prior=quiet).verdict for x, y in zip(a, b)]
                    per_k[str(k)]["apart"] = {
                        "DIFFERENT": apart.count("DIFFERENT"),
                        "DIFFERENT_without_fastest_call_rule": tail_only.count("DIFFERENT"),
                        "SAME": apart.count("SAME"),
                    }
                if k == 1 and pa and pb:
                    # A DIFFERENT confirmed by the rounds after it, as pairs.
                    after = [
                        confirm(pa[j + 1 :], pb[j + 1 :], quiet, pairs)
                        for j, v in enumerate(found)
                        if v == "DIFFERENT"
                    ]
                    per_k[str(k)]["confirmed_different"] = after.count("DIFFERENT")
            out["ab"][f"{float(name):.0%}"] = {
                "measured_slowdown": round(float(np.median(b) / np.median(a)) - 1, 4),
                "rounds": len(b),
                "by_runs_a_side": per_k,
            }
    return out


def read_reports(folder: Path) -> tuple:
    """The clean p50s of a past run's reports (``reports/`` of its work folder), in run
    order: ``aa-load{L}-{i}.json`` and ``ab-{A|slowdown}-{i}.json``; whether each A/A run
    was interfered; and each label's predicates in run order."""
    import base64

    from edgequal.host.judge.run_figures import run_figures

    found: dict[str, dict[int, tuple[float, bool, dict]]] = {}
    for path in folder.glob("*.json"):
        label, _, index = path.stem.rpartition("-")
        envelope = json.loads(path.read_bytes())
        predicate = json.loads(base64.b64decode(envelope["payload"]))["predicate"]
        runs = run_figures(predicate, "p50_ms")
        if runs.values:
            interfered = predicate.get("status") == "inconclusive"
            found.setdefault(label, {})[int(index)] = (runs.values[0], interfered, predicate)
    ordered = {label: [v[i] for i in sorted(v)] for label, v in found.items()}
    predicates = {label: [p for _, _, p in v] for label, v in ordered.items()}
    aa = {int(k.removeprefix("aa-load")): v for k, v in ordered.items() if k.startswith("aa-load")}
    ab = {
        k.removeprefix("ab-"): [p for p, *_ in v] for k, v in ordered.items() if k.startswith("ab-")
    }
    n = min((len(v) for v in ab.values()), default=0)
    flags = {load: [f for _, f, _ in v] for load, v in sorted(aa.items())}
    return (
        {load: [p for p, *_ in v] for load, v in sorted(aa.items())},
        {k: v[:n] for k, v in ab.items()},
        flags,
        predicates,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mid")
    parser.add_argument("--aa-runs", type=int, default=40, help="A/A runs per load, after history")
    parser.add_argument(
        "--aa-runs-busy", type=int, help="A/A runs per busy load (default: --aa-runs)"
    )
    parser.add_argument("--history", type=int, default=8, help="runs per load taken as history")
    parser.add_argument("--ab-rounds", type=int, default=12, help="A/B rounds (one run of each)")
    parser.add_argument("--loads", default="0,1,3", help="busy processes beside the A/A runs")
    parser.add_argument("--ks", default="1,3,5,10", help="runs a side compared")
    parser.add_argument("--slowdowns", default="0.05,0.10,0.25")
    parser.add_argument("--seconds", type=float, default=0.5, help="each run's timed seconds")
    parser.add_argument(
        "--confirm-pairs",
        type=int,
        default=4,
        help="pairs that confirm a DIFFERENT between reports made apart (fleet run "
        "--repeat-until-decided N)",
    )
    parser.add_argument(
        "--from-reports",
        metavar="DIR",
        type=Path,
        help="judge a past run's reports (its work folder's reports/) again, running nothing",
    )
    args = parser.parse_args(argv)
    loads = [int(x) for x in args.loads.split(",") if x != ""]
    ks = [int(x) for x in args.ks.split(",")]
    slowdowns = [float(x) for x in args.slowdowns.split(",") if x != ""]
    if args.from_reports:
        aa, ab, flags, predicates = read_reports(args.from_reports)
        out = {
            "from_reports": str(args.from_reports),
            **analyse(aa, ab, ks, flags, predicates, args.confirm_pairs),
        }
        print(json.dumps(out, indent=1))
        return 0

    work = Path(tempfile.mkdtemp(prefix="edgequal-false-alarms-"))
    os.environ.update(
        XDG_STATE_HOME=str(work / "state"),
        XDG_CONFIG_HOME=str(work / "config"),
        EDGEQUAL_AGENT_STATE=str(work / "agent"),
    )
    import edgequal
    from edgequal.host.examples.catalog import build_example

    model = build_example(args.model, work)
    plan_fields = {
        "threads": 1,
        "cold_runs": 1,
        "latency_min_s": args.seconds,
        "latency_min_runs": 100,
        "warmup_min_s": 0.2,
        "warmup_max_s": 1.0,
        "cooldown": False,
        "out": None,
    }
    copies = calibrate(model, work, slowdowns) if slowdowns and args.ab_rounds else {}
    out: dict = {"model": args.model, "plan": {"preset": "quick", **plan_fields}, "aa": {}}
    out["plan"].pop("out")
    t_start = time.monotonic()
    with edgequal.connect("local") as device:
        statuses: dict[str, list[bool]] = {}
        predicates: dict[str, list[dict]] = {}

        def run(path: Path, label: str, i: int, n: int) -> float | None:
            report_out = work / "reports" / f"{label}-{i}.json"
            report_out.parent.mkdir(exist_ok=True)
            p50, status, predicate = qualify_p50(device, path, {**plan_fields, "out": report_out})
            if p50 is not None:
                statuses.setdefault(label, []).append(status == "inconclusive")
                predicates.setdefault(label, []).append(predicate)
            print(f"{label} {i + 1}/{n}: p50 {p50} ms ({status})", file=sys.stderr, flush=True)
            return p50

        aa_runs: dict[int, list[float]] = {}
        for load in loads:
            with Spinners(load):
                aa = args.aa_runs if load == 0 or args.aa_runs_busy is None else args.aa_runs_busy
                n = args.history + aa
                p50s = [run(model, f"aa-load{load}", i, n) for i in range(n)]
            aa_runs[load] = [p for p in p50s if p is not None]
        series: dict[str, list[float]] = {}
        if copies:
            series = {"A": [], **{str(s): [] for s in copies}}
            for i in range(args.ab_rounds):
                series["A"].append(run(model, "ab-A", i, args.ab_rounds))
                for s, path in copies.items():
                    series[str(s)].append(run(path, f"ab-{s:.2f}", i, args.ab_rounds))
            ok = [
                i
                for i in range(args.ab_rounds)
                if all(series[key][i] is not None for key in series)
            ]
            series = {key: [v[i] for i in ok] for key, v in series.items()}
    flags = {load: statuses.get(f"aa-load{load}", []) for load in aa_runs}
    for s in copies:  # the rotation's reports under the names analyse() gives the series
        predicates[f"ab-{s}"] = predicates.pop(f"ab-{s:.2f}", [])
    out.update(analyse(aa_runs, series, ks, flags, predicates, args.confirm_pairs))
    out["wall_s"] = round(time.monotonic() - t_start, 1)
    out["targets"] = {
        "false_different_max": TARGET_FALSE_DIFFERENT,
        "false_same_10pct_max": TARGET_FALSE_SAME_10,
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
