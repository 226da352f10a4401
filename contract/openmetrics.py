"""OpenMetrics text of labelled gauges, written atomically for node_exporter's textfile
collector. Standard library only: the agent keeps its own state file with it
(``serve --metrics-textfile``), the host writes its exports (``edgequal export --format
prometheus``, ``fleet run --prometheus``) with it.

Only gauges are written: the textfile collector reads the Prometheus text format, in
which ``# UNIT`` and ``# EOF`` are comments, so one file serves both readers. A file is
written to a temporary name beside it (not ending in ``.prom``, so the collector never
lists it) and renamed over the old one: a reader sees the old file or the new, never half.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


@dataclass
class Gauge:
    """One gauge family: a name (ending in ``_UNIT`` when it has a unit), a help line,
    and its samples as ``(labels, value)``."""

    name: str
    help: str
    unit: str = ""
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)

    def add(self, labels: Mapping[str, object], value: float | int | bool | None) -> None:
        """One sample; a None value (a figure not measured) is left out, never made up."""
        if value is None:
            return
        self.samples.append(({k: str(v) for k, v in labels.items()}, float(value)))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if value != int(value) or abs(value) >= 1e15 else f"{int(value)}"


def render(gauges: Iterable[Gauge]) -> str:
    """The families as OpenMetrics text, ending in ``# EOF``. A family without samples is
    left out (nothing is shown for what was not measured)."""
    lines = []
    for g in gauges:
        if not g.samples:
            continue
        if not _NAME.fullmatch(g.name) or (g.unit and not g.name.endswith(f"_{g.unit}")):
            raise ValueError(f"bad metric name {g.name!r}")
        lines.append(f"# HELP {g.name} {_escape(g.help)}")
        lines.append(f"# TYPE {g.name} gauge")
        if g.unit:
            lines.append(f"# UNIT {g.name} {g.unit}")
        for labels, value in g.samples:
            if any(not _LABEL.fullmatch(k) for k in labels):
                raise ValueError(f"bad label name in {sorted(labels)}")
            text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            lines.append(
                f"{g.name}{{{text}}} {_number(value)}" if text else f"{g.name} {_number(value)}"
            )
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def write_textfile(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` by a rename (see the module doc)."""
    from .files import write_atomic

    write_atomic(Path(path), text.encode("utf-8"))
