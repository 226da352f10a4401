"""A real labgrid lab on loopback: ``labgrid-coordinator`` and ``labgrid-exporter`` from the
labgrid package, started in a temporary directory, with places made by ``labgrid-client``.

Loaded with ``load_test_helper("labgrid_lab")``. Each exported group is a place of the
same name holding one ``NetworkService`` whose ``address`` is an agent's URL (edgequal's
convention), or whatever resources the test gives.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def client(address: str, *args: str, user: str = "ci", host: str = "runner", check=True):
    """``labgrid-client -x ADDRESS ARGS`` as ``host/user``; the completed process."""
    env = {**os.environ, "LG_USERNAME": user, "LG_HOSTNAME": host}
    proc = subprocess.run(
        [str(BIN / "labgrid-client"), "-x", address, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"labgrid-client {' '.join(args)}: {proc.stderr.strip()}")
    return proc


@dataclass
class LabgridLab:
    """A running coordinator and exporter; ``address`` is the coordinator's HOST:PORT."""

    address: str
    directory: Path
    procs: list[subprocess.Popen] = field(default_factory=list)

    def client(self, *args: str, **kwargs):
        return client(self.address, *args, **kwargs)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)


def _yaml(groups: dict[str, dict]) -> str:
    lines = []
    for group, resources in groups.items():
        lines.append(f"{group}:")
        for cls, params in resources.items():
            lines.append(f"  {cls}:")
            for key, value in params.items():
                shown = f'"{value}"' if isinstance(value, str) else value
                lines.append(f"    {key}: {shown}")
    return "\n".join(lines) + "\n"


def start_lab(directory: Path, groups: dict[str, dict], tags: dict[str, dict]) -> LabgridLab:
    """Coordinator, one exporter ``exp`` exporting ``groups`` (group -> class -> params),
    and a place per group matching its resources, tagged with ``tags[group]``."""
    if shutil.which("labgrid-coordinator", path=str(BIN)) is None:
        raise RuntimeError("labgrid is not installed (pip install 'edgequal[labgrid]')")
    directory.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    lab = LabgridLab(f"127.0.0.1:{port}", directory)
    log = open(directory / "coordinator.log", "wb")
    lab.procs.append(
        subprocess.Popen(
            [str(BIN / "labgrid-coordinator"), "-l", lab.address],
            cwd=directory,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    )
    _wait_for_port(port, lab)
    (directory / "exporter.yaml").write_text(_yaml(groups))
    elog = open(directory / "exporter.log", "wb")
    lab.procs.append(
        subprocess.Popen(
            [
                str(BIN / "labgrid-exporter"),
                "-c",
                lab.address,
                "-n",
                "exp",
                "--hostname",
                "127.0.0.1",
                str(directory / "exporter.yaml"),
            ],
            cwd=directory,
            stdout=elog,
            stderr=subprocess.STDOUT,
        )
    )
    deadline = time.monotonic() + 60
    while True:  # the exporter's resources reach the coordinator
        out = lab.client("resources", check=False).stdout
        if all(f"exp/{g}/" in out for g in groups):
            break
        if time.monotonic() > deadline:
            lab.stop()
            raise RuntimeError(
                f"exporter did not register: {(directory / 'exporter.log').read_text()}"
            )
        time.sleep(0.3)
    for group in groups:
        lab.client("-p", group, "create")
        lab.client("-p", group, "add-match", f"exp/{group}/*")
        if tags.get(group):
            lab.client("-p", group, "set-tags", *(f"{k}={v}" for k, v in tags[group].items()))
    return lab


def _wait_for_port(port: int, lab: LabgridLab) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        if lab.procs[0].poll() is not None:
            break
        time.sleep(0.1)
    lab.stop()
    raise RuntimeError(
        f"labgrid-coordinator did not listen: {(lab.directory / 'coordinator.log').read_text()}"
    )
