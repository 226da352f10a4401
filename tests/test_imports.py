"""Import boundaries: the agent stays small (no host, rich, paramiko, runtimes at import),
and ``edgequal --help`` imports no third-party package."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import edgequal.agent

AGENT_DIR = Path(edgequal.agent.__file__).parent
HEAVY = [
    "onnxruntime",
    "ai_edge_litert",
    "tflite_runtime",
    "rich",
    "paramiko",
    "onnx",
    "scipy",
    "ruptures",
]


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_every_agent_module_imports_without_host_or_heavy_packages():
    names = [m.name for m in pkgutil.walk_packages([str(AGENT_DIR)], prefix="edgequal.agent.")]
    names = [n for n in names if not n.endswith(".__main__")]  # those run a process
    assert "edgequal.agent.worker.main" in names and "edgequal.agent.service.server" in names
    loaded = _modules_after("\n".join(f"import {n}" for n in names))
    assert not [m for m in loaded if m.startswith("edgequal.host")]
    for heavy in HEAVY:
        assert heavy not in loaded, f"importing the agent pulled in {heavy}"


def test_help_imports_no_third_party_package():
    loaded = _modules_after("import edgequal.cli.main")
    for name in ["numpy", "grpc", *HEAVY]:
        assert name not in loaded, f"edgequal --help would import {name}"
    out = subprocess.run(
        [sys.executable, "-m", "edgequal.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and "qualify" in out.stdout


def test_scripts_import_only_names_that_exist():
    """The benchmarks and scripts import edgequal names that still exist (a moved
    function breaks a benchmark nobody runs in the suite)."""
    import ast
    import importlib

    root = Path(__file__).resolve().parents[1] / "scripts"
    missing = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("edgequal"):
                module = importlib.import_module(node.module)
                missing += [
                    f"{path.name}: {node.module}.{a.name}"
                    for a in node.names
                    if not hasattr(module, a.name)
                ]
    assert not missing
    assert len(list(root.rglob("*.py"))) >= 5
