"""The settings of every connection to an SQLite history (host/lab/history.py): WAL, so
readers never block the writer, and waiting for another process's lock rather than failing
(several fleet runs on one host may write, two may create a new database at once)."""

from __future__ import annotations

import sqlite3
import time

SQLITE_WAIT_S = 60.0
"""How long a connection waits for another's lock on an SQLite history."""


def sqlite_pragmas(dbapi_conn, _record) -> None:
    """Each new connection to an SQLite history: WAL, and waiting for other writers' locks."""
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout={int(SQLITE_WAIT_S * 1000)}")
    # WAL: readers never block the writer; several runners on one host may write. Turning
    # a new database to WAL takes its exclusive lock, and SQLite answers "database is
    # locked" at once, without its busy handler, while another connection turns it too
    # (two first fleet runs at once): wait for it here, as long as for any other lock.
    deadline = time.monotonic() + SQLITE_WAIT_S
    while True:
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            break
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)
    cur.close()
