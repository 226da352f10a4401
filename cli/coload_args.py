"""``qualify --coload``: declared co-load from the command line (docs/measurement.md "Co-load").

``model:PATH`` (a closed loop) or ``model:PATH@RATE`` (``30``, ``30/s`` or ``30hz``):
another model, pushed to the device by digest like the main one; ``cpu:CORES`` and
``membw:CORES`` (a share of cores, e.g. ``1.5``): synthetic CPU or memory-bandwidth
load; ``command:NAME``: an entry of the agent's own configuration file on the device
(the host never sends a command line).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from edgequal.contract.artifacts import file_sha256
from edgequal.contract.errors import BadInput

_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(/s|hz)?\s*$", re.IGNORECASE)
_HINT = "write model:PATH[@RATE], cpu:CORES, membw:CORES or command:NAME"


def parse_coload(items: list[str] | None) -> tuple[list[dict] | None, dict[str, Path]]:
    """The plan's ``coload`` declarations and the co-load model files to push (``{sha256: path}``)."""
    if not items:
        return None, {}
    decls, models = _parse(tuple(items))
    return [dict(d) for d in decls], dict(models)


@functools.lru_cache(maxsize=8)
def _parse(items: tuple[str, ...]) -> tuple[list[dict], dict[str, Path]]:
    # Cached: the flags are read before connecting and again for the plan; a model is hashed once.
    decls, models = [], {}
    for item in items:
        kind, sep, value = item.partition(":")
        if not sep or not value:
            raise BadInput(f"cannot read --coload '{item}'", hint=_HINT)
        if kind == "model":
            path_text, at, rate_text = value.rpartition("@") if "@" in value else (value, "", "")
            rate = None
            if at:
                m = _RATE.match(rate_text)
                if not m or float(m.group(1)) <= 0:
                    raise BadInput(f"cannot read the rate in --coload '{item}'", hint="e.g. @30/s")
                rate = float(m.group(1))
            path = Path(path_text)
            if not path.is_file():
                raise BadInput(f"--coload model file not found: {path}")
            digest = file_sha256(path)
            models[digest] = path
            decls.append({"kind": "model", "sha256": digest, "name": path.name, "rate_per_s": rate})
        elif kind in ("cpu", "membw"):
            try:
                cores = float(value)
            except ValueError:
                raise BadInput(f"cannot read the cores in --coload '{item}'", hint=_HINT) from None
            decls.append({"kind": kind, "cores": cores})
        elif kind == "command":
            decls.append({"kind": "command", "name": value})
        else:
            raise BadInput(f"unknown co-load kind '{kind}' in --coload '{item}'", hint=_HINT)
    return decls, models
