"""Durable file writes the agent's state relies on: atomic replace, directory fsync, full disk."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path


def is_no_space(error: BaseException) -> bool:
    """True for a full disk or an exhausted disk quota."""
    return isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT)


def fsync_dir(path: Path) -> None:
    """Make a rename or link in the directory ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename; no temporary is left behind.

    The temporary is a fresh, unpredictable name in the target's directory, created with
    ``O_CREAT|O_EXCL|O_NOFOLLOW``: a file or symlink someone planted there is never opened
    or written through (the metrics textfile is rewritten every interval in a directory
    node_exporter's users may share). Its mode is 0666 less the umask, as ``open`` gives.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{os.urandom(6).hex()}")
        try:
            fd = os.open(tmp, flags, 0o666)
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover - 100 collisions of 48 random bits
        raise FileExistsError(errno.EEXIST, "no free temporary name", str(path.parent))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
