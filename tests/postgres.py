"""A real PostgreSQL server for tests: ``initdb`` + ``pg_ctl`` in a temporary directory,
listening on a free 127.0.0.1 port, run as an unprivileged user when the tests run as
root (postgres refuses root). Debian's ``postgresql`` package provides the binaries
(.ci/run installs it)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path


def find_bin_dir() -> Path | None:
    """The directory holding initdb and pg_ctl (newest installed version), or None."""
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    dirs = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0,
    )
    return Path(dirs[-1]).parent if dirs else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PostgresServer:
    """A started server: its URL (trust authentication, loopback only) and how to stop it."""

    url: str
    base: Path
    bin_dir: Path
    run_as: list[str]

    def stop(self) -> None:
        """Stop the server and remove its directory."""
        subprocess.run(
            [
                *self.run_as,
                str(self.bin_dir / "pg_ctl"),
                "-D",
                str(self.base / "data"),
                "-m",
                "immediate",
                "stop",
            ],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(self.base, ignore_errors=True)


def start_postgres(bin_dir: Path) -> PostgresServer:
    """initdb and start a server in a fresh temporary directory."""
    base = Path(tempfile.mkdtemp(prefix="edgequal-pg-"))  # not under root's 0700 pytest dir
    run_as: list[str] = []
    if os.geteuid() == 0:
        user = "postgres"
        try:
            pwd.getpwnam(user)
        except KeyError:
            user = "nobody"
        uid = pwd.getpwnam(user).pw_uid
        gid = pwd.getpwnam(user).pw_gid
        os.chown(base, uid, gid)
        run_as = ["runuser", "-u", user, "--"]
    port = _free_port()
    subprocess.run(
        [
            *run_as,
            str(bin_dir / "initdb"),
            "-D",
            str(base / "data"),
            "-U",
            "edgequal",
            "-A",
            "trust",
            "--no-sync",
            "-E",
            "UTF8",
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    options = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off"
    proc = subprocess.run(
        [
            *run_as,
            str(bin_dir / "pg_ctl"),
            "-D",
            str(base / "data"),
            "-o",
            options,
            "-l",
            str(base / "server.log"),
            "-w",
            "-t",
            "60",
            "start",
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    if proc.returncode != 0:
        log = (base / "server.log").read_text() if (base / "server.log").exists() else ""
        shutil.rmtree(base, ignore_errors=True)
        raise RuntimeError(f"pg_ctl start failed: {proc.stderr}\n{log}")
    return PostgresServer(
        f"postgresql+psycopg://edgequal@127.0.0.1:{port}/postgres", base, bin_dir, run_as
    )
