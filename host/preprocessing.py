"""The declared preprocessing of a golden set's inputs (layout, colour order, resize, mean and
std, quantization; with ``stages``, a pipeline's stages): read from a TOML by the input
contract's one parser, and layered per input. Golden sets made from tensors and from raw
files both read it here."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from edgequal.contract.errors import AgentError

from .errors import UsageError


def read_preprocessing_toml(path: Path, *, stages: bool = False) -> dict:
    """``{"*": defaults, NAME: keys}`` from a preprocessing (or, ``stages``, a pipeline) TOML;
    UsageError naming a bad key (``agent.input_contract.parse_declared``, the one parser)."""
    from edgequal.contract.input_contract import parse_declared

    from .toml_text import BadToml, parse_toml

    try:
        data = parse_toml(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, BadToml) as e:
        raise UsageError(f"{path}: not a readable TOML file ({e})") from e
    try:
        return parse_declared(data, str(path), stages=stages)
    except AgentError as e:
        raise UsageError(str(e), hint=e.hint) from e


def resolve_declared(names: list[str], *layers: Mapping | None) -> dict[str, dict]:
    """Per-input declared keys: each layer's ``"*"`` then its ``NAME`` entries, later layers win."""
    out: dict[str, dict] = {n: {} for n in names}
    for layer in layers:
        if not layer:
            continue
        for n in names:
            out[n].update({k: v for k, v in layer.get("*", {}).items() if v is not None})
            out[n].update({k: v for k, v in layer.get(n, {}).items() if v is not None})
        unknown = sorted(set(layer) - {"*", *names})
        if unknown:
            raise UsageError(
                f"the preprocessing names input '{unknown[0]}', which the model does not have",
                hint=f"inputs: {', '.join(names)}",
            )
    return out
