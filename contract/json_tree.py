"""The one walk over a JSON-like tree (mappings, lists, leaves) that the report's signing, a
baseline's fingerprint fields and a board's temperature at rest all read: every leaf with
its path. Pure; no imports beyond the standard library."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any


def leaves(
    value: Any, root: str = "", *, into_lists: bool = True
) -> Iterator[tuple[str, Any, Any]]:
    """Every leaf of ``value``, depth first in order: ``(path, key, leaf)``.

    ``path`` joins mapping keys with ``.`` after ``root`` (``"$"`` gives ``$.a.b``, ``""``
    gives ``a.b``) and list places as ``[i]``; ``key`` is the leaf's own mapping key or
    list index (None for ``value`` itself). Mappings are walked; lists and tuples too,
    unless ``into_lists`` is False, which makes each one a leaf of its own.
    """
    yield from _walk(value, root, None, into_lists)


def _walk(value: Any, path: str, key: Any, into_lists: bool) -> Iterator[tuple[str, Any, Any]]:
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _walk(v, f"{path}.{k}" if path else str(k), k, into_lists)
    elif into_lists and isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _walk(v, f"{path}[{i}]", i, into_lists)
    else:
        yield path, key, value
