"""The verdict on real runs (host/judge/verdict.py): a real local agent qualifies a MatMul
chain, the same chain again, and a copy with a quarter more layers, interleaved in rounds,
beside a busy process. A quarter more work is DIFFERENT within MAX_ROUNDS runs a side,
from the runs' own spread and split (rounds are added until it is, as
--repeat-until-decided adds pairs: interleaved runs on this shared machine spread 7-11 %;
no fewer than five a side can split at 0.01); the same model against itself, over the same rounds, is not DIFFERENT.
What is asserted is read from the runs this test made; the rates over many such
comparisons are scripts/bench/false_alarms.py's (BENCHMARKS.md)."""

from __future__ import annotations

import subprocess
import sys

import edgequal
import pytest
from edgequal.host.judge.run_figures import run_figures
from edgequal.host.judge.verdict import DIFFERENT, REPEATS, decide

SPIN = "import time\nwhile True:\n    time.perf_counter()\n"
# DIFFERENT from runs alone needs five a side (their split). Up to 16: beside two other
# copies of the suite the runs spread 13.5 % and eight a side left ×1.149 UNKNOWN ("about
# 15 runs a side would decide it"); on a quiet machine it is decided at five or six.
MIN_ROUNDS, MAX_ROUNDS = 5, 16
PLAN = dict(
    threads=1,
    cold_runs=1,
    warmup_min_runs=5,
    warmup_min_s=0.05,
    warmup_max_s=0.5,
    latency_min_runs=100,
    latency_min_s=0.3,
    cooldown=False,
)


@pytest.mark.slow  # 15-48 real qualifications on a local agent, beside a spinning process
def test_real_runs_the_same_model_is_not_different_and_a_quarter_more_work_is(
    tmp_path, test_helper
):
    chain = test_helper("gate_reports").chain_model
    # 32 rows: about 0.5 ms a call here, so the two extra layers cost their quarter, not
    # the runtime's fixed per-call overhead.
    a = chain(tmp_path / "chain8.onnx", 8, rows=32)
    # "again" is the same model qualified as often as "a", in the same rounds: the A/A pair.
    models = {"a": a, "again": a, "slower": chain(tmp_path / "chain10.onnx", 10, rows=32)}
    p50s: dict[str, list[float]] = {k: [] for k in models}
    ids: dict[str, list[str]] = {k: [] for k in models}
    busy = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        with edgequal.connect("local") as device:
            for r in range(MAX_ROUNDS):
                order = list(models) if r % 2 == 0 else list(reversed(models))
                for name in order:
                    report = device.qualify(models[name], plan="quick", **PLAN)
                    runs = run_figures(report.predicate, "p50_ms")
                    assert len(runs) == 1, runs  # one run a qualification
                    p50s[name] += runs.values
                    ids[name] += runs.run_ids
                ab = decide(p50s["a"], p50s["slower"], 0.03, interleaved=True)
                if r + 1 >= MIN_ROUNDS and ab.verdict == DIFFERENT:
                    break
    finally:
        busy.kill()
        busy.wait(10)
    # One run a side with no history: UNKNOWN, whatever the two runs' calls say.
    first = decide(p50s["a"][:1], p50s["slower"][:1], 0.03)
    assert first.verdict == "UNKNOWN" and first.spread_source == "none"
    assert ab.verdict == DIFFERENT and ab.ratio > 1.1 and ab.ci_low > 1.0, ab.text()
    rounds = len(p50s["a"])
    aa = decide(p50s["a"], p50s["again"], 0.03, baseline_runs=ids["a"], candidate_runs=ids["again"])
    assert aa.verdict != DIFFERENT, aa.text()
    assert (aa.n_baseline, aa.n_candidate, aa.spread_source) == (rounds, rounds, REPEATS)
    assert aa.baseline_runs == ids["a"] and len(set(ids["a"])) == rounds
