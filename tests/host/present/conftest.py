"""Fixtures of the rendering tests."""

from __future__ import annotations

import numpy as np
import pytest
from edgequal.agent.measure.latency import encode_samples
from edgequal.contract.preemption import encode_tags
from edgequal.contract.stats import summarize_latency


@pytest.fixture
def tagged_latency_entry() -> dict:
    """A latency entry as the agent writes it, its summaries computed from raw samples:
    1,024 calls of 1..1024 µs, every fourth (the values divisible by 4) preempted."""
    n, preempted_every = 1024, 4
    samples = (np.arange(1, n + 1, dtype=np.int64) * 1000)[::-1].copy()
    tags = np.zeros(n, dtype=bool)
    tags[::preempted_every] = True
    clean = summarize_latency(samples[~tags])
    return {
        "shape": "x=1x4",
        "summary": summarize_latency(samples),
        "clean": clean,
        "samples_ns_b64": encode_samples(samples),
        "preempted_b64": encode_tags(tags),
        "preemption": {
            "calls": n,
            "excluded": int(tags.sum()),
            "share": 0.25,
            "needed": 200,
            "clean_enough": True,
            "extended_s": 0.0,
        },  # fmt: skip
        "decided_on": "clean",
        "warmup": {"runs": 12, "seconds": 1.5, "steady": True},
        "cause": "none",
    }
