"""The host's nonce: 128 random bits and the host's clock, which the agent signs into the report."""

from __future__ import annotations

import re
import secrets
import time

_NONCE_TIME = re.compile(r"[0-9a-f]{32}\.([0-9]{1,15})")


def new_nonce(now_s: float | None = None) -> str:
    """A fresh host nonce: 128 random bits, then the host's wall clock in unix ms."""
    now_s = time.time() if now_s is None else now_s
    return f"{secrets.token_hex(16)}.{int(now_s * 1000)}"


def nonce_time_unix_ms(nonce: str) -> int | None:
    """The host time written into a :func:`new_nonce` nonce, or None for any other nonce."""
    m = _NONCE_TIME.fullmatch(nonce) if isinstance(nonce, str) else None
    return int(m.group(1)) if m else None
