"""``edgequal agent runtime add|list|remove``: runtime environments on a board, over SSH.

The board needs no package index: the host collects the wheels for the board's Python
and CPU (``pip download`` with the tags the board's agent reports, ``runtime tags``),
from its own index or a ``wheelhouse``, uploads them over the checked SSH link, and runs
``edgequal-agent runtime add REQ --find-links DIR --no-index`` there, as ``agent install``
does for the agent itself. Installing runs code, so it happens only over SSH (never
over the gRPC API), and only on a device that first proved its pinned key.

``from_approved`` restores the environment an approval recorded (``lab/requalify.py``):
the same wheel files, each sha256 checked on the host before upload and again on the
board before install.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from edgequal.contract.artifacts import file_sha256
from edgequal.contract.runtimes import pip_error

from ..devices.trust import KnownDevices
from ..errors import HostError, TransportError, UsageError
from ..transport.schemes import SSH, is_scheme
from ..transport.ssh import SSHTransport
from ..transport.ssh_options import SSHOptions
from ..transport.ssh_session import SSHSession

PIP_TIMEOUT_S = 1800.0
AGENT_ADD_TIMEOUT_S = 1800.0


def download_wheels(
    requirements: list[str],
    tags: dict,
    into: Path,
    *,
    wheelhouse: Path | None = None,
    no_deps: bool = False,
) -> list[Path]:
    """``pip download`` ``requirements`` as wheels for the board whose ``tags`` are given
    (``edgequal-agent runtime tags``), into ``into``; from ``wheelhouse`` only when given.

    pip's own cache keeps what it fetched, so a second board (or a second run) costs no
    download.
    """
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--disable-pip-version-check",
        "--no-input",
        "--only-binary=:all:",
        "--python-version",
        str(tags["python"]),
        "--implementation",
        str(tags.get("implementation") or "cp"),
        "-d",
        str(into),
    ]
    for abi in tags.get("abis") or []:
        cmd += ["--abi", abi]
    for platform in tags.get("platforms") or []:
        cmd += ["--platform", platform]
    if no_deps:
        cmd.append("--no-deps")
    if wheelhouse is not None:
        cmd += ["--no-index", "--find-links", str(wheelhouse)]
    cmd += requirements
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise HostError(f"collecting wheels took more than {PIP_TIMEOUT_S:g} s") from e
    if proc.returncode != 0:
        raise UsageError(
            f"cannot collect wheels of {' '.join(requirements)} for the board: "
            f"{pip_error(proc.stderr, proc.returncode)}",
            hint="check the version exists for the board's Python and CPU, or give --wheelhouse",
        )
    return sorted(p for p in Path(into).iterdir() if p.name.endswith(".whl"))


def wheel_requirement(file_name: str) -> str:
    """``name==version`` of a wheel file name (``onnxruntime-1.20.1-cp311-…whl``)."""
    m = re.match(r"^([A-Za-z0-9_.]+)-([A-Za-z0-9_.!+]+)-", file_name)
    if m is None or not file_name.endswith(".whl"):
        raise UsageError(f"{file_name} is not a wheel file name")
    return f"{m.group(1).replace('_', '-')}=={m.group(2)}"


def _agent_transport(ssh: SSHSession, known: KnownDevices, state_dir: str | None):
    """The SSH agent of ``ssh``'s board, after it proved the key pinned for its address."""
    entry = known.find_by_address(ssh.url) or known.find_by_address(ssh.target.url)
    if entry is None:
        raise UsageError(
            f"{ssh.target.url} is not a trusted device",
            hint=f"edgequal agent install {ssh.target.url} pins it (or devices trust)",
        )
    agent = SSHTransport(ssh.url, session=ssh, state_dir=state_dir, pinned_key=entry.public_key_raw)
    agent.ensure_identity()  # nothing is sent to a board that has not proven its key
    return agent, entry


def _known(known_devices: KnownDevices | Path | None) -> KnownDevices:
    return known_devices if isinstance(known_devices, KnownDevices) else KnownDevices(known_devices)


def _open(url: str, ssh_options: SSHOptions) -> SSHSession:
    if not is_scheme(url, SSH):
        raise UsageError(f"{url}: runtime environments are installed over SSH only", hint=(
            "give the board's ssh://USER@HOST: installing runs code, which no RPC may do"
        ))  # fmt: skip
    return SSHSession(url, ssh_options)


def add_runtime_env(
    url: str,
    requirement: str | None,
    *,
    name: str | None = None,
    extra: list[str] | None = None,
    from_approved: Path | None = None,
    wheelhouse: Path | None = None,
    known_devices: KnownDevices | Path | None = None,
    state_dir: str | None = None,
    ssh_options: SSHOptions | None = None,
    on_step: Callable[[str], None] | None = None,
) -> dict:
    """Install ``requirement`` (``onnxruntime==1.20.1``) in a runtime environment on the
    board at ``url``; returns the environment's manifest as the board recorded it.

    ``from_approved`` (an approved model's directory, ``approved/MODEL``) installs the
    environment that approval recorded for this device instead: its requirement, its
    name and exactly its wheels (by sha256). ``extra`` requirements (``numpy<2``) are
    collected and installed beside the runtime; without one naming numpy, the numpy the
    runtime was built for is (``contract.runtimes.companion_requirements``).
    """
    from edgequal.contract.runtimes import Requirement, companion_requirements

    step = on_step or (lambda _line: None)
    known = _known(known_devices)
    if wheelhouse is not None and not Path(wheelhouse).is_dir():
        raise UsageError(f"wheelhouse {wheelhouse} is not a directory")
    with _open(url, ssh_options or SSHOptions()) as ssh:
        agent, entry = _agent_transport(ssh, known, state_dir)
        exact = None
        if from_approved is not None:
            record = approved_runtime_env(Path(from_approved), entry.name)
            requirement = requirement or f"{record['distribution']}=={record['version']}"
            name = name or (record["name"] if record["name"] != "default" else None)
            exact = record.get("wheels") or None
            if Requirement.parse(requirement) != Requirement(
                record["distribution"], record["version"]
            ):
                raise UsageError(
                    f"{from_approved} was approved with {record['distribution']}=={record['version']}, "
                    f"not {requirement}"
                )
            if not exact:
                step(
                    "the approval names the agent's own runtime; no wheel digests were "
                    f"recorded for it, so {requirement} is installed by version"
                )
        if requirement is None:
            raise UsageError("give a requirement (onnxruntime==1.20.1) or --from-approved")
        req = Requirement.parse(requirement)
        companions = companion_requirements(req, extra or [])
        tags = agent.agent_json(["runtime", "tags"], "read the board's wheel tags")
        with tempfile.TemporaryDirectory(prefix="edgequal-runtime-") as tmp:
            local = Path(tmp)
            if exact:
                step(f"collecting the {len(exact)} approved wheels")
                download_wheels(
                    [wheel_requirement(w["file"]) for w in exact],
                    tags,
                    local,
                    wheelhouse=wheelhouse,
                    no_deps=True,
                )
                _check_exact(exact, local)
                (local / "exact.json").write_text(json.dumps(exact))
            else:
                step(
                    f"collecting wheels of {req} and {' '.join(companions)} for Python {tags['python']}"
                )
                download_wheels([str(req), *companions], tags, local, wheelhouse=wheelhouse)
            remote = ssh.check_remote("mktemp -d", "make a directory for the wheels").strip()
            try:
                files = sorted(local.iterdir())
                step(f"uploading {len(files)} files")
                for f in files:
                    ssh.put_file(f, f"{remote}/{f.name}")
                args = ["runtime", "add", str(req), *(extra or [])]
                args += ["--find-links", remote, "--no-index", "--json"]
                if name:
                    args += ["--name", name]
                if exact:
                    args += ["--exact-wheels", f"{remote}/exact.json"]
                step(f"installing {req} on the board")
                return agent.agent_json(args, f"install {req}", AGENT_ADD_TIMEOUT_S)
            finally:
                ssh.run_remote(f"rm -rf {shlex.quote(remote)}")


def add_local_runtime_env(
    state_dir: Path,
    requirement: str,
    *,
    wheelhouse: Path | None = None,
    agent: Sequence[str] | None = None,
) -> dict:
    """Install ``requirement`` in a runtime environment of the local agent (``--device
    local``, whose state directory is ``state_dir``): the device owner's own ``edgequal-agent
    runtime add``, run here, from ``wheelhouse`` alone when given (``--no-index``), else from
    the package index pip is configured with. The manifest the agent recorded."""
    if wheelhouse is not None and not Path(wheelhouse).is_dir():
        raise UsageError(f"wheelhouse {wheelhouse} is not a directory")
    cmd = [*(agent or [sys.executable, "-m", "edgequal.agent.cli"]), "--state-dir", str(state_dir)]
    cmd += ["runtime", "add", requirement, "--json"]
    if wheelhouse is not None:
        cmd += ["--find-links", str(wheelhouse), "--no-index"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=AGENT_ADD_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise HostError(f"installing {requirement} took more than {AGENT_ADD_TIMEOUT_S:g} s") from e
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        error = next((line for line in reversed(lines) if "error" in line), None)
        raise HostError(
            f"installing {requirement} failed: {error or (lines[-1] if lines else proc.returncode)}"
        )
    try:
        return json.loads(proc.stdout)
    except ValueError as e:
        raise HostError(f"the agent's runtime add printed no manifest: {proc.stdout[:80]!r}") from e


def _check_exact(exact: list[dict], local: Path) -> None:
    for w in exact:
        path = local / Path(w["file"]).name
        if not path.is_file():
            raise UsageError(f"the approved wheel {w['file']} could not be collected")
        digest = file_sha256(path)
        if digest != w["sha256"]:
            raise UsageError(
                f"wheel {w['file']} now has sha256 {digest[:16]}…, the approved one "
                f"{w['sha256'][:16]}…",
                hint="the index serves other bytes under that name: restore from a wheelhouse "
                "holding the approved files (--wheelhouse)",
            )


def approved_runtime_env(model_dir: Path, device: str) -> dict:
    """The runtime environment an approval recorded for ``device`` (``approved/MODEL``)."""
    from ..lab.requalify import load_approved

    models = load_approved(model_dir.parent)
    entry = models.get(model_dir.name)
    if entry is None:
        raise UsageError(f"{model_dir} is not an approved model", hint="edgequal approve …")
    approved = entry.devices.get(device)
    if approved is None and len(entry.devices) == 1:
        approved = next(iter(entry.devices.values()))
    if approved is None or not approved.runtime_env:
        raise UsageError(
            f"{model_dir.name} has no runtime environment recorded for {device}",
            hint="approve a report of that device first",
        )
    return approved.runtime_env


def list_runtime_envs(
    url: str,
    *,
    known_devices: KnownDevices | Path | None = None,
    state_dir: str | None = None,
    ssh_options: SSHOptions | None = None,
) -> list[dict]:
    """The board's runtime environments (``runtime list --json``), each import-checked there."""
    known = _known(known_devices)
    with _open(url, ssh_options or SSHOptions()) as ssh:
        agent, _ = _agent_transport(ssh, known, state_dir)
        out = ssh.check_remote(agent.agent_command(["runtime", "list", "--json"]), "list")
    try:
        return json.loads(out)
    except ValueError as e:
        raise TransportError(f"the board's runtime list is not JSON: {out[:80]!r}") from e


def remove_runtime_env(
    url: str,
    name: str,
    *,
    known_devices: KnownDevices | Path | None = None,
    state_dir: str | None = None,
    ssh_options: SSHOptions | None = None,
) -> str:
    """Remove the board's environment ``name``; the agent's one-line answer."""
    known = _known(known_devices)
    with _open(url, ssh_options or SSHOptions()) as ssh:
        agent, _ = _agent_transport(ssh, known, state_dir)
        return ssh.check_remote(
            agent.agent_command(["runtime", "remove", name]), f"remove {name}"
        ).strip()


__all__ = [
    "add_local_runtime_env",
    "add_runtime_env",
    "approved_runtime_env",
    "download_wheels",
    "list_runtime_envs",
    "remove_runtime_env",
]
