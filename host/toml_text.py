"""TOML text as data: the one parser call behind every TOML file the host reads (gate
policies, lab and models files, device profiles, preprocessing declarations).

A file nested deeper than the parser can follow is bad input like any other syntax
error (exit 2, one line naming the file), never an internal ``RecursionError``.
"""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


class BadToml(ValueError):
    """The text is not TOML the host can read; the message says why (and where, when the
    parser knows)."""


def parse_toml(text: str) -> dict:
    """``tomllib.loads(text)``; BadToml for a syntax error or nesting too deep to parse."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BadToml(str(e)) from None
    except RecursionError:
        raise BadToml(
            "arrays or tables are nested too deeply to read (Python's recursion limit)"
        ) from None
