"""What a host asks a run for, checked before the device is taken: the request (artifacts
by digest, the plan, the nonce), its run id, the plan's bounds, the model's external-data
files, and the subjects its signed statement will name (each in its role).
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass, field, fields

from edgequal.contract.errors import BadInput
from edgequal.contract.plan import Plan

RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""A run id: a safe file name (no separator, no leading dot), at most 64 characters."""

MAX_LATENCY_RUNS = 2_000_000
"""Most latency samples a plan may ask for per shape (raw samples go into the report)."""


@dataclass
class RunRequest:
    """What the host asked for: artifacts by digest, the plan, and its fresh nonce.

    The plan is parsed once, where the request enters the agent (gRPC ``Qualify``,
    ``run-plan``, a recovered run's record): a :class:`Plan` from there on."""

    run_id: str
    model_digest: str
    golden_digest: str | None
    plan: Plan
    nonce: str
    model_name: str = "model"
    golden_name: str | None = None
    extra_files: list[dict] = field(default_factory=list)
    """Files the model needs beside it (ONNX external data): ``{"name", "sha256"}`` each,
    ``name`` relative to the model's directory (``store.check_bundle_name``)."""

    def to_json(self) -> dict:
        """The request as JSON (the plan as :meth:`Plan.to_json`), as a run's record keeps it."""
        return {
            **{f.name: getattr(self, f.name) for f in fields(self)},
            "plan": self.plan.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict) -> RunRequest:
        """The inverse of :meth:`to_json`; BadInput for a plan that is no plan."""
        return cls(**{**data, "plan": Plan.from_json(data.get("plan") or {})})


def new_run_id() -> str:
    """A sortable, unique run id: UTC time plus 8 random hex characters."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(4)


def check_run_id(run_id: object) -> str:
    """Return ``run_id`` if it is a run id (it names files), else raise BadInput."""
    if not isinstance(run_id, str) or not RUN_ID_RE.fullmatch(run_id):
        shown = repr(run_id[:80]) if isinstance(run_id, str) else repr(run_id)
        raise BadInput(
            f"not a run id: {shown}",
            hint="a run id is up to 64 letters, digits, '.', '_' or '-', as the agent printed it",
        )
    return run_id


def check_plan_bounds(plan: dict, max_run_s: float) -> None:
    """Refuse, by name, a plan whose report could not be carried or whose time outlasts the lease."""
    runs = plan.get("latency_max_runs")
    if isinstance(runs, (int, float)) and not isinstance(runs, bool) and runs > MAX_LATENCY_RUNS:
        raise BadInput(
            f"plan latency_max_runs {runs:g} is over this agent's limit of {MAX_LATENCY_RUNS} "
            "(raw samples go into the report)",
            hint=f"ask for at most {MAX_LATENCY_RUNS} latency runs",
        )
    for name in ("latency_min_s", "latency_max_s", "sustain_s", "sustain_extend_to_s"):
        value = plan.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > max_run_s:
            raise BadInput(
                f"plan {name} {value:g} s is longer than a run may last on this agent "
                f"({max_run_s:g} s)",
                hint="shorten the plan, or raise the agent's run time limit",
            )


def subjects_for(request: RunRequest) -> list[dict]:
    """The statement's subjects: the model, its external-data files, co-load models, the
    golden set, the model's signature file.

    Each carries its ``role`` (contract/signing.py ``SUBJECT_ROLES``), which readers
    go by, never the file name. A golden set whose file name equals another subject's is
    named ``golden/<name>``, so two inputs with one file name never make a report that
    cannot be signed.
    """
    subjects = [
        {"name": request.model_name or "model", "sha256": request.model_digest, "role": "model"}
    ]
    subjects += [
        {"name": f["name"], "sha256": f["sha256"], "role": "external_data"}
        for f in request.extra_files
    ]
    for i, decl in enumerate(request.plan.coload or ()):
        if isinstance(decl, dict) and decl.get("kind") == "model" and decl.get("sha256"):
            name = f"coload/{decl.get('name') or 'model'}"
            if name in {s["name"] for s in subjects}:
                name = f"coload/{i}/{decl.get('name') or 'model'}"
            subjects.append({"name": name, "sha256": decl["sha256"], "role": "coload"})
    if request.golden_digest:
        name = request.golden_name or "golden.npz"
        if name in {s["name"] for s in subjects}:
            name = f"golden/{name}"
        subjects.append({"name": name, "sha256": request.golden_digest, "role": "golden"})
    signature = request.plan.model_signature_sha256 if request.plan is not None else None
    if isinstance(signature, str):
        name = f"signature/{request.model_name or 'model'}.sig"
        subjects.append({"name": name, "sha256": signature, "role": "model_signature"})
    return subjects


def check_extra_files(model_name: str, extra: object, store) -> list[dict]:
    """Validate a request's external-data files (``[{"name", "sha256"}]``); BadInput naming the first bad one.

    Names must be bundle names (relative, no ``..``), unique, not the model's own
    name; every digest must be in the store. Checked before the device is taken.
    """
    from edgequal.contract.artifacts import MAX_BUNDLE_FILES, check_bundle_name, validate_digest

    if not isinstance(extra, list) or len(extra) > MAX_BUNDLE_FILES:
        raise BadInput(f"extra files must be a list of at most {MAX_BUNDLE_FILES} files")
    seen = {bundle_model_name(model_name)}
    files = []
    for item in extra:
        if not isinstance(item, dict):
            raise BadInput("each extra file must be an object {name, sha256}")
        name = check_bundle_name(item.get("name"))
        digest = validate_digest(item.get("sha256"))
        if name in seen or any(name.startswith(s + "/") or s.startswith(name + "/") for s in seen):
            raise BadInput(f"extra file {name!r} clashes with another file of the bundle")
        seen.add(name)
        if store is not None:
            store.path(digest)
        files.append({"name": name, "sha256": digest})
    return files


def subjects_as_files(subjects: list) -> list:
    """In-toto subjects (``{"name", "digest": {"sha256"}}``, the wire form) as ``{"name", "sha256"}``."""
    return [
        {"name": s.get("name"), "sha256": (s.get("digest") or {}).get("sha256")}
        if isinstance(s, dict) and isinstance(s.get("digest") or {}, dict)
        else s
        for s in subjects
    ]


def bundle_model_name(model_name: str | None) -> str:
    """The model's file name inside its bundle: the host's name when it is one plain file name."""
    from edgequal.contract.artifacts import check_bundle_name

    try:
        if model_name and "/" not in model_name:
            return check_bundle_name(model_name)
    except BadInput:
        pass
    return "model"
