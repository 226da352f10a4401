"""The wheel ``edgequal agent install`` puts on a board: built from this source checkout."""

from __future__ import annotations

import importlib.util
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ..errors import HostError, UsageError

# Files and folders never copied into the wheel build.
_BUILD_IGNORE = (
    ".git",
    "__pycache__",
    "*.pyc",
    "*.egg-info",
    "build",
    "dist",
    ".pytest_cache",
    ".ruff_cache",
    ".venv",
    "venv",
    "tests",
)


def repo_root() -> Path:
    """The source checkout this package runs from (where pyproject.toml names ``edgequal``)."""
    import edgequal.host

    root = Path(edgequal.host.__file__).resolve().parent.parent
    pyproject = root / "pyproject.toml"
    try:
        text = pyproject.read_text(encoding="utf-8")
    except OSError:
        text = ""
    if not re.search(r'^name\s*=\s*"edgequal"', text, re.MULTILINE):
        raise UsageError(
            "cannot build the agent: edgequal is not running from a source checkout",
            hint="run from a checkout of edgequal, or pass a built wheel (wheel=...)",
        )
    return root


def build_wheel(out_dir: Path, source: Path | None = None) -> Path:
    """Build a wheel of the project at ``source`` (default :func:`repo_root`) into ``out_dir``.

    The tree is copied first, so a build never leaves ``build/`` or egg-info in
    the checkout. Uses the installed setuptools when there is one (no network),
    else pip's isolated build.
    """
    source = Path(source) if source else repo_root()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="edgequal-wheel-") as tmp:
        copy = Path(tmp) / "src"
        shutil.copytree(source, copy, ignore=shutil.ignore_patterns(*_BUILD_IGNORE))
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check"]
        if importlib.util.find_spec("setuptools") is not None:
            cmd.append("--no-build-isolation")
        cmd += ["-q", "-w", str(out_dir), str(copy)]
        before = set(out_dir.glob("edgequal-*.whl"))
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired as e:
            raise HostError("building the edgequal wheel took more than 10 minutes") from e
        if proc.returncode != 0:
            last = [line for line in proc.stderr.splitlines() if line.strip()]
            raise HostError(
                f"building the edgequal wheel failed: {last[-1] if last else 'no message'}",
                hint=f"run `{' '.join(shlex.quote(c) for c in cmd)}` to see the whole output",
            )
    wheels = sorted(out_dir.glob("edgequal-*.whl"), key=lambda p: p.stat().st_mtime)
    new = [w for w in wheels if w not in before] or wheels
    if not new:
        raise HostError(f"pip wheel wrote no edgequal wheel into {out_dir}")
    return new[-1]
