"""Measuring through interference, checked independently: beside a competitor pinned to the
worker's CPU, the qualification's clean figures agree with a bare loop in this test that
tags its own calls the same way, and the as-measured tail is reported apart and is larger.

The test process, and so the agent code and the worker it starts, and the competitor are
pinned to one CPU: the competitor takes about half of it, whatever else the machine runs.
The bare loop runs before and after the qualification, under the same competitor, and
the clean figures must fall inside what those two saw (within 25 % for p50, 50 % for p99)
in one of :data:`ATTEMPTS` tries, the machine's own speed moving between loops.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time

import numpy as np
import pytest
from edgequal.agent.phases.qualification import run_measurement
from edgequal.agent.runtimes.base import RuntimeOptions
from edgequal.agent.runtimes.onnxruntime import OnnxRuntime
from edgequal.contract.plan import make_plan
from edgequal.contract.stats import summarize_latency

pytestmark = pytest.mark.slow

SPIN = "import time\nwhile True:\n    time.perf_counter()\n"


CLEAN_CALLS = 400
"""Clean calls the bare loop keeps timing for (a p99 needs 368), within its time limit."""


def bare_loop(model, seconds: float, limit_s: float = 30.0) -> dict:
    """Time at least ``seconds`` of calls with perf_counter_ns, and on until
    :data:`CLEAN_CALLS` of them kept the CPU (at most ``limit_s``; a machine shared with
    other jobs leaves this process a sliver of its CPU), tagging each call by the
    process's involuntary context switches read after it: ``{all, clean, excluded}``."""
    rt = OnnxRuntime(RuntimeOptions(threads=1))
    rt.load(model)
    feeds = {"x": np.ones((1, 256), dtype=np.float32)}
    call = rt.bind(feeds)
    for _ in range(50):
        call()
    times, tags = [], []
    seen = resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw
    start = time.monotonic()
    clean = 0
    while (now_s := time.monotonic() - start) < seconds or (
        clean < CLEAN_CALLS and now_s < limit_s
    ):
        t0 = time.perf_counter_ns()
        call()
        t1 = time.perf_counter_ns()
        now = resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw
        times.append(t1 - t0)
        tags.append(now != seen)
        clean += now == seen
        seen = now
    samples, hit = np.array(times, dtype=np.int64), np.array(tags)
    return {
        "all": summarize_latency(samples),
        "clean": summarize_latency(samples[~hit]),
        "excluded": int(hit.sum()),
    }


@pytest.fixture
def one_cpu_with_a_competitor():
    """This process pinned to one CPU, and a spinning competitor pinned to the same one."""
    cpus = sorted(os.sched_getaffinity(0))
    cpu = cpus[-1]
    competitor = subprocess.Popen([sys.executable, "-c", SPIN])
    os.sched_setaffinity(competitor.pid, {cpu})
    os.sched_setaffinity(0, {cpu})
    try:
        time.sleep(0.2)
        yield cpu
    finally:
        os.sched_setaffinity(0, set(cpus))
        competitor.kill()
        competitor.wait(10)


ATTEMPTS = 3
"""Qualifications, each between two bare loops, of which one must agree with its loops.

This shared VM's speed moves by up to ×1.6 over seconds, unseen from inside it (16
successive half-second loops of one model, one CPU, nothing else pinned there: p50 0.083
to 0.134 ms; steal 0.2 %). One qualification fell in such a slow spell between two fast
loops in about one try in eight (4 of 29). Slow spells come in runs (up to five of those
half-second loops in a row), and one attempt takes about 10 s, so three span half a
minute. An error in the clean figures themselves (a preempted call counted clean, the
agent's own threads in the timed loop) shows in every attempt."""


def _qualify_between_bare_loops(model) -> tuple[dict, dict, dict]:
    """The latency entry of a quick qualification, and the bare loops before and after."""
    before = bare_loop(model, 2.0)
    plan = make_plan(
        "quick",
        threads=1,
        cold_runs=1,
        warmup_min_s=0.3,
        warmup_max_s=3.0,
        latency_min_runs=400,
        latency_min_s=2.0,
        sustain_s=0.0,
    )
    out = run_measurement(model, None, plan)
    after = bare_loop(model, 2.0)
    assert out["status"] in ("passed", "degraded"), out["reason"]
    return out["results"]["latency"]["per_shape"][0], before, after


def _disagreements(entry, before, after) -> list:
    """Clean p50 and p99 against the bare loops' clean figures (same tag rule): what lies
    outside what the two loops saw (within 25 % for p50, 50 % for p99). The competitor
    takes one CPU at most; where other processes took more than that (this machine
    shared with other jobs, which come and go between the three loops), calls that kept
    the CPU still share caches with whatever ran before them, and only the p50 is
    compared."""
    pre, clean = entry["preemption"], entry["clean"]
    others = (pre["evidence"]["other_cpus"] or 0.0) > 1.2
    checks = (("p50_ms", 0.25),) if others else (("p50_ms", 0.25), ("p99_ms", 0.50))
    missed = []
    for key, tolerance in checks:
        seen = [before["clean"][key], after["clean"][key]]
        low, high = min(seen) * (1 - tolerance), max(seen) * (1 + tolerance)
        if not low <= clean[key] <= high:
            missed.append((key, clean[key], seen, pre["evidence"]))
    return missed


def test_clean_figures_agree_with_a_bare_loop_beside_a_pinned_competitor(
    tmp_path, chain_model, one_cpu_with_a_competitor
):
    model = chain_model(tmp_path / "chain.onnx", 12)  # about 0.1-0.3 ms a call on one thread
    missed = []
    for _ in range(ATTEMPTS):
        entry, before, after = _qualify_between_bare_loops(model)
        pre, clean, measured = entry["preemption"], entry["clean"], entry["summary"]
        # Every attempt: the competitor preempted the worker, calls were excluded, and
        # the figures say why.
        assert pre["excluded"] > 0 and pre["clean_enough"], pre
        assert entry["decided_on"] == "clean" and entry["cause"] == "interference"
        assert pre["evidence"]["runq_wait_share"] > 0.05, pre["evidence"]
        # The as-measured tail is reported apart, and the preemptions make it larger.
        assert measured["p99_ms"] > clean["p99_ms"]
        assert measured["count"] == pre["calls"]
        assert clean["count"] == pre["calls"] - pre["excluded"]
        # And the bare loop saw the same kind of difference between its own two figures.
        assert max(before["all"]["p99_ms"], after["all"]["p99_ms"]) > min(
            before["clean"]["p99_ms"], after["clean"]["p99_ms"]
        )
        attempt = _disagreements(entry, before, after)
        if not attempt:
            return
        missed.append(attempt)
    pytest.fail(f"the clean figures disagreed with the bare loops {ATTEMPTS} times: {missed}")
