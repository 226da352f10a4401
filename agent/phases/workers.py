"""What every measuring phase shares: one worker run beside the contention sampler, and
the finding a failed worker becomes."""

from __future__ import annotations

from collections.abc import Callable

from edgequal.contract.errors import BadInput, GoldenMismatch

from ..config import proc_root
from ..probes.contention import ContentionSampler
from ..worker.jobs import WorkerJob
from ..worker.supervisor import Worker, WorkerOutcome

EventSink = Callable[[dict], None]

_BAD_INPUT_ERRORS = {"BadInput": BadInput, "GoldenMismatch": GoldenMismatch}


def finding_from(ended: WorkerOutcome, phase: str, runtime: str) -> dict:
    """A finding for a worker that failed; a bad request (golden mismatch, missing --shape) raises instead."""
    error = ended.error or {}
    if error.get("type") in _BAD_INPUT_ERRORS:
        raise _BAD_INPUT_ERRORS[error["type"]](error["message"], hint=error.get("hint"))
    finding = {
        "phase": phase,
        "cause": ended.cause,
        "kind": {
            "ModelRejected": "model_rejected",
            "GoldenMismatch": "golden_mismatch",
            "RuntimeUnavailable": "runtime_unavailable",
            "Cancelled": "cancelled",  # the host, Ctrl-C or runs cancel: not a failure
        }.get(error.get("type"), "worker_failure"),
        "message": error.get("message", ended.describe()),
        "worker_phase": ended.phase,
        "runtime": runtime,
        "runtime_version": _installed_version(runtime),
    }
    for key in ("operator", "hint", "signal"):
        if error.get(key):
            finding[key] = error[key]
    if ended.stderr_tail and ended.cause in ("signal", "exit"):
        finding["stderr_tail"] = ended.stderr_tail[-5:]
    return finding


def _installed_version(runtime: str) -> str | None:
    """The installed version of ``runtime`` from package metadata (never imported here: a
    runtime that crashed its worker may crash the agent too)."""
    from ..runtimes import detect_runtimes

    return next((r.version for r in detect_runtimes() if r.name == runtime), None)


def run_sampled(
    job: WorkerJob, on_worker_started=None, declared_pgids=(), kept=None, **worker_args
):
    """Run one worker job while sampling who else used the CPU; ``(ended, samples, sampler)``.

    ``declared_pgids``: the declared co-load's process groups, counted apart from the others;
    ``kept``: a worker kept after its cold load (``Worker.resume``) to run the job in.
    """
    worker = kept
    if worker is None or not worker.resume(
        job.to_json(), worker_args["phase_timeout_s"], worker_args.get("on_event")
    ):
        if worker is not None:
            worker.end()
        worker = Worker(job.to_json(), **worker_args)
        worker.start()
    sampler = ContentionSampler(worker.pid, proc_root=proc_root(), declared_pgids=declared_pgids)
    sampler.start()
    if on_worker_started:
        on_worker_started(worker, sampler)
    try:
        ended = worker.wait()
    finally:
        samples = sampler.stop()
    return ended, samples, sampler
