"""``history changes --attest FILE``: the change points found, as an in-toto Statement v1 in
a DSSE envelope signed by this host's key (the key of signed gate decisions,
``host/judge/attestation.py``), so a finding can be checked later.

The subjects are every device report (its signed envelope, by sha256) either side of
every change; the predicate (``https://edgequal.dev/history-changes/v1``) lists each change
with its series, figure, first run after it, medians, ratio and interval, p-value, boards,
culprit and cause (with the machine's readings either side), and the SHA-256 of the reports before and after it; plus the sensitivity it
was found with. Anyone holding the reports (the history keeps each envelope) can recompute
the medians and the split from exactly those reports.
"""

from __future__ import annotations

from pathlib import Path

from edgequal.contract.signing import STATEMENT_TYPE, canonical_json, sign_payload

from ..judge.attestation import load_host_key
from .changes import ChangeReport

CHANGES_PREDICATE_TYPE = "https://edgequal.dev/history-changes/v1"

_CHANGE_FIELDS = (
    "device",
    "model",
    "preset",
    "figure",
    "unit",
    "first_after",
    "last_before",
    "median_before",
    "median_after",
    "ratio",
    "ratio_ci",
    "p_value",
    "n_before",
    "n_after",
    "min_effect",
    "boards",
    "worse",
    "too_noisy",
    "culprit",
    "cause",
    "machine",
    "reports_before",
    "reports_after",
)


def changes_statement(found: ChangeReport) -> dict:
    """The in-toto Statement of the changes found (see the module doc)."""
    digests: dict[str, str] = {}
    for c in found.changes:
        for sha in c.reports_before + c.reports_after:
            digests.setdefault(sha, f"report-{sha[:16]}.dsse.json")
    changes = []
    for c in found.changes:
        data = c.to_json()
        changes.append({k: data[k] for k in _CHANGE_FIELDS})
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {"sha256": sha}} for sha, name in digests.items()],
        "predicateType": CHANGES_PREDICATE_TYPE,
        "predicate": {
            "settings": found.settings.to_json(),
            "series": [s.to_json() for s in found.series],
            "changes": changes,
        },
    }


def write_changes_attestation(found: ChangeReport, out: Path, key=None) -> Path:
    """Sign :func:`changes_statement` with ``key`` (default: this host's) into ``out``."""
    envelope = sign_payload(key or load_host_key(), canonical_json(changes_statement(found)))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(envelope)
    return out
