"""What reproduces a report, recorded beside it by the host that wrote it.

The signed report names its plan and its artifacts by digest; what it cannot name is
the command line that made it, nor where this host keeps the artifacts. Beside every
report file the host writes (``qualify``, ``fleet run``, the library's ``qualify``) goes
a sidecar, the report's file name with ``.reproduce`` added (``pi5.report.json`` →
``pi5.report.json.reproduce``: JSON, named so that no ``*.json`` glob of reports, as
``edgequal export reports/*.json`` takes them, picks it up), holding:

- ``command``: the command line as typed (``edgequal qualify m.onnx --golden g.npz …``;
  None for a library call), and ``cwd``, the directory its relative paths start from;
- ``rerun``: ``edgequal rerun REPORT``, which repeats the signed plan with the same
  artifacts on the same device and compares the two runs (host/judge/rerun.py);
- ``artifacts``: each artifact the run pushed (role, name, sha256, absolute path): where
  ``rerun`` looks for them first, each checked against the report's digest;
- ``report_sha256``: the envelope's digest, so a sidecar left beside another report (the
  file overwritten by a later run) is known stale and ignored.

The sidecar is not signed: it says where to look and what was typed, and every artifact
it names is checked by digest against the signed report before use.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Sequence
from pathlib import Path

from edgequal.contract.files import write_atomic

from ..errors import printable, redact

SUFFIX = ".reproduce"


def sidecar_path(report: str | Path) -> Path:
    """``NAME.reproduce`` beside the report ``NAME``."""
    report = Path(report)
    return report.with_name(report.name + SUFFIX)


def command_text(argv: Sequence[str]) -> str:
    """``edgequal ARGS…`` as a shell would take it back (quoted, passwords in URLs hidden)."""
    return redact(shlex.join(["edgequal", *(printable(a) for a in argv)]))


def rerun_command(report: str | Path) -> str:
    """The command that repeats a report's run and compares the two."""
    return shlex.join(["edgequal", "rerun", printable(report)])


def write_sidecar(
    report: Path,
    envelope: bytes,
    device: str,
    artifacts: Sequence[dict],
    argv: Sequence[str] | None = None,
) -> Path:
    """Write the sidecar of ``report`` (whose bytes are ``envelope``): the command line
    ``argv`` (without the program name; None: not run from the command line), where each
    artifact is (``{"role", "name", "sha256", "path"}``) and the rerun command."""
    data = {
        "command": command_text(argv) if argv is not None else None,
        "cwd": printable(Path.cwd()) if argv is not None else None,
        "rerun": rerun_command(report),
        "device": device,
        "report_sha256": hashlib.sha256(envelope).hexdigest(),
        "artifacts": [
            {**a, "path": printable(Path(a["path"]).absolute())} for a in artifacts if a.get("path")
        ],
    }
    path = sidecar_path(report)
    write_atomic(path, (json.dumps(data, indent=1) + "\n").encode())
    return path


def read_sidecar(report: str | Path, envelope: bytes | None = None) -> dict | None:
    """The sidecar of ``report``, or None when there is none, it is unreadable, or it was
    written for other bytes than ``envelope`` (default: the report file's)."""
    path = sidecar_path(report)
    try:
        data = json.loads(path.read_text())
        if envelope is None:
            envelope = Path(report).read_bytes()
    except (OSError, ValueError):
        return None
    if (
        not isinstance(data, dict)
        or data.get("report_sha256") != hashlib.sha256(envelope).hexdigest()
    ):
        return None
    return data


def recorded_command(report: str | Path, envelope: bytes | None = None) -> str | None:
    """The command line that made ``report`` (its sidecar's), else None."""
    data = read_sidecar(report, envelope)
    command = data.get("command") if data else None
    return command if isinstance(command, str) else None


__all__ = [
    "SUFFIX",
    "command_text",
    "read_sidecar",
    "recorded_command",
    "rerun_command",
    "sidecar_path",
    "write_sidecar",
]
