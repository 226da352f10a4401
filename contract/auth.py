"""What host and agent read alike before a connection: a listen address, and a bearer token file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import BadInput


def parse_listen(listen: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` or ``[V6]:PORT`` into host and port; BadInput when malformed."""
    text = listen.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise BadInput(f"cannot parse listen address {listen!r}", hint="use [::1]:PORT")
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise BadInput(
                f"listen address {listen!r} has no port", hint="use HOST:PORT, e.g. 127.0.0.1:7441"
            )
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise BadInput(f"bad port in listen address {listen!r}")
    return host, int(port_text)


def read_token_file(path: Path) -> str:
    """Read a bearer token (surrounding whitespace stripped).

    BadInput, one line, when the file is unreadable, not UTF-8, empty, holds more
    than one token, or can be read by group or others (anyone who can read it
    can run models on the device).
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
        mode = stat.S_IMODE(os.stat(p).st_mode)
    except OSError as e:
        raise BadInput(f"cannot read token file {p}: {e.strerror or e}") from e
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(
            f"token file {p} is not UTF-8 text",
            hint="e.g. python -c 'import secrets; print(secrets.token_hex(32))' > FILE",
        ) from None
    if mode & 0o077:
        raise BadInput(
            f"token file {p} is readable by other users (mode {mode:04o})",
            hint=f"chmod 600 {p}",
        )
    token = text.strip()
    if not token or any(c.isspace() for c in token):
        raise BadInput(
            f"token file {p} must hold one token on one line",
            hint="e.g. python -c 'import secrets; print(secrets.token_hex(32))' > FILE",
        )
    return token
