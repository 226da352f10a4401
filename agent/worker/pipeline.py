"""The whole path in the worker: every golden case's raw files through the declared
pipeline (``agent/pipeline/``), the model and the decision, then the path timed stage by
stage (``measure/pipeline.py``) and the preprocessed tensors compared with the reference
tensors (``measure/preprocessing.py``). Used only inside a worker process."""

from __future__ import annotations

import time

from edgequal.contract.errors import BadRawInput, GoldenMismatch

from .io import load_runtime, phase, read_golden_for
from .jobs import WorkerJob


def _stages(golden):
    from ..pipeline.stages import PipelineStages

    return PipelineStages(golden.pipeline, golden.assets)


def cold_path(job: WorkerJob, rt) -> tuple[dict, dict] | None:
    """The cold start's first decode and preprocess (case 0's raw files; the libraries'
    imports included): ``(feeds, {first_decode_ms, first_preprocess_ms})``, or with a raw
    file the pipeline refuses ``(None, {"error": message})``; None without a pipeline."""
    golden = read_golden_for(job, rt)
    if golden is None or golden.pipeline is None:
        return None
    stages = _stages(golden)
    phase("first_decode")
    try:
        t0 = time.perf_counter_ns()
        decoded = stages.decode(golden.cases[0].raw)
        t1 = time.perf_counter_ns()
        feeds = stages.preprocess(decoded)
        t2 = time.perf_counter_ns()
    except BadRawInput as e:
        return None, {"case": golden.cases[0].name, "error": str(e)}
    return feeds, {"first_decode_ms": (t1 - t0) / 1e6, "first_preprocess_ms": (t2 - t1) / 1e6}


def run_pipeline(job: WorkerJob) -> dict:
    """Every case through the whole path (drift of its outputs, the preprocessed tensors
    against any reference tensors), then the path timed after a warm-up.

    A case whose raw files a stage refuses is a failure naming the case, the input and
    the stage; the other cases go on. The result: ``inputs`` (the pipeline as run),
    ``libraries``, ``failures``, and with any case through: ``drift``,
    ``reference_inputs``, ``stages``, ``end_to_end``, ``share``, ``warmup``, ``runs``.
    """
    from edgequal.contract.drift_rules import parse_decision_rule
    from edgequal.contract.tensors import check_feeds

    from ..measure.drift import drift_of_cases
    from ..measure.pipeline import measure_path

    rt, _, _ = load_runtime(job)
    golden = read_golden_for(job, rt)
    stages = _stages(golden)
    libraries = stages.libraries()  # a missing library is one error, not one per case
    phase("pipeline_cases")
    done, failures = [], []
    for case in golden.cases:
        try:
            decoded = stages.decode(case.raw)
            feeds = stages.preprocess(decoded)
            check_feeds(rt.inputs(), feeds, where=f"case '{case.name}' preprocessed input")
        except BadRawInput as e:
            failures.append({"case": case.name, "stage": e.stage, "message": str(e)})
            continue
        except GoldenMismatch as e:
            failures.append({"case": case.name, "stage": "preprocess", "message": str(e)})
            continue
        done.append((case, decoded, feeds, rt.run(feeds)))
    result = {
        "inputs": {n: p.to_json() for n, p in golden.pipeline.inputs.items()},
        "libraries": libraries,
        "failures": failures,
        "cases": len(golden.cases),
    }
    if not done:
        return result
    result["drift"] = drift_of_cases(
        [(c.name, out, c.outputs) for c, _, _, out in done], rt, golden
    )
    if golden.labels is not None:  # the device's own decoding and preprocessing, scored
        from ..measure.labelled import labelled_of_golden

        outputs = {c.name: out for c, _, _, out in done}
        result["drift"]["labelled"] = labelled_of_golden(golden, outputs)
    result["reference_inputs"] = reference_divergence(stages, done)
    rule = parse_decision_rule(golden.decision) if golden.decision else None
    path = {"decode": stages.decode, "preprocess": stages.preprocess, "inference": rt.run}
    if rule is not None:
        path["decision"] = rule.decide
    result.update(measure_path([c.raw for c, _, _, _ in done], path, job.latency, on_phase=phase))
    return result


def reference_divergence(stages, done) -> dict:
    """Per input with reference tensors: the device's tensors against them
    (``compare_inputs``) and, when over the tolerance, the likely cause from the worst case
    re-preprocessed with each one-setting change (``pipeline.variants``)."""
    from ..measure.preprocessing import compare_inputs, divergence_message, likely_cause
    from ..pipeline.variants import variants

    out = {}
    for name, p in stages.pipeline.inputs.items():
        rows = [(c, d, f) for c, d, f, _ in done if name in c.reference_inputs]
        if not rows:
            continue
        figures = compare_inputs(
            [(c.name, f[name], c.reference_inputs[name]) for c, _, f in rows],
            p.reference_tolerance(),
        )
        figures["cause"] = None
        if figures["cases_over"]:
            case, decoded, feeds = next(
                (c, d, f) for c, d, f in rows if c.name == figures["worst_case"]
            )
            tried = []
            for label, key, variant in variants(p):
                try:
                    tried.append((label, key, stages.preprocess_one(decoded[name], variant)))
                except BadRawInput:
                    continue
            figures["cause"] = likely_cause(
                feeds[name], case.reference_inputs[name], tried, p.reference_tolerance()
            )
            figures["message"] = divergence_message(name, figures, figures["cause"])
        out[name] = figures
    return out
