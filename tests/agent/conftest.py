"""Fixtures of the agent's tests: a real small file system (tmpfs) a test mounts itself."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest


@pytest.fixture
def mount_tmpfs(tmp_path):
    """``mount_tmpfs(size)``: a real tmpfs of ``size`` (``"4m"``) mounted under tmp_path, so a
    full disk is a real ENOSPC; unmounted after the test. Skips, saying so, where mounting
    is refused (it needs root)."""
    mounted = []

    def mount(size: str) -> Path:
        mnt = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
        mnt.mkdir()
        proc = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mnt)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a small tmpfs here ({proc.stderr.strip()}): needs root")
        mounted.append(mnt)
        return mnt

    yield mount
    for mnt in mounted:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
