"""Installing a runtime environment (``add_env``): the wheels collected, a venv
created, the wheels installed from there alone, the agent linked in, the import tried,
the manifest written last. Also the wheel tags this Python takes (``runtime tags``), which
a host collects wheels for.

Everything here runs pip, and so code from a package index or a wheelhouse: only the
device owner's ``edgequal-agent runtime add`` calls it (docs/security.md).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from edgequal.contract.artifacts import file_sha256
from edgequal.contract.errors import AgentError, BadInput, RuntimeUnavailable
from edgequal.contract.files import write_atomic
from edgequal.contract.runtimes import (
    Requirement,
    check_env_name,
    companion_requirements,
    pip_error,
)

from .envs import (
    DEFAULT_ENV,
    INSTALL_PROBE_TIMEOUT_S,
    MANIFEST,
    RuntimeEnv,
    RuntimeEnvs,
    import_failure,
    probe,
)

PIP_TIMEOUT_S = 1800.0


def agent_package_dir() -> Path:
    """The directory of this agent's ``edgequal.agent`` package (what environments link to)."""
    return Path(__file__).resolve().parent.parent


def contract_package_dir() -> Path:
    """The directory of ``edgequal.contract``, which the agent's workers import (linked too)."""
    import edgequal.contract

    return Path(edgequal.contract.__file__).resolve().parent


def build_env(
    req: Requirement,
    name: str,
    target: Path,
    python: str,
    step: Callable[[str], None],
    find_links: Sequence[Path],
    no_index: bool,
    exact_wheels: Sequence[dict] | None,
    companions: Sequence[str] = ("numpy",),
) -> RuntimeEnv:
    """Collect the wheels into ``target/wheels``, create ``target/venv`` with ``python``,
    install them there alone, link the agent, try the import, write the manifest
    (``add_env`` explains the steps; it removes ``target`` when this raises)."""
    wheels = target / "wheels"
    wheels.mkdir()
    links = [a for d in find_links for a in ("--find-links", str(d))]
    if exact_wheels is not None:
        step(f"checking {len(exact_wheels)} approved wheels")
        files = _copy_exact(exact_wheels, find_links, wheels)
        install_args = ["--no-deps", *[str(f) for f in files]]
    else:
        step(f"collecting wheels for {req} and {' '.join(companions)}")
        _pip(
            python,
            [
                "download",
                "--only-binary=:all:",
                "-d",
                str(wheels),
                *(["--no-index"] if no_index else []),
                *links,
                str(req),
                *companions,
            ],
            "collect the wheels",
        )
        install_args = [str(req), *companions]
    step(f"creating {target / 'venv'}")
    _run(
        [python, "-m", "venv", "--without-pip", str(target / "venv")],
        "create the venv",
        300.0,
    )
    venv_python = target / "venv" / "bin" / "python"
    step(f"installing {req}")
    _pip(
        python,
        [
            "--python",
            str(venv_python),
            "install",
            "--no-compile",
            "--no-index",
            "--find-links",
            str(wheels),
            *install_args,
        ],
        "install the runtime",
    )
    link_agent(venv_python)
    digests = [{"file": f.name, "sha256": file_sha256(f)} for f in sorted(wheels.iterdir())]
    env = RuntimeEnv(
        name=name,
        runtime=req.runtime,
        distribution=req.distribution,
        version="",
        python="",
        python_executable=str(venv_python),
        path=str(target),
        wheels=digests,
        created_unix=round(time.time(), 3),
    )
    step(f"importing {req.distribution} in the new environment")
    probed, problem = probe(env, INSTALL_PROBE_TIMEOUT_S)
    if problem:
        raise import_failure(name, req, problem, _wheel_version(wheels, "numpy"))
    env.python, env.version = probed["python"], probed["version"]
    if env.version != req.version:
        raise RuntimeUnavailable(
            f"runtime environment {name}: pip installed {req.distribution} {env.version}, "
            f"not {req.version}"
        )
    shutil.rmtree(wheels)  # the digests are kept; the files would only take the board's disk
    write_atomic(target / MANIFEST, json.dumps(env.to_json(), indent=1).encode())
    return env


def _wheel_version(wheels: Path, distribution: str) -> str | None:
    """The version of ``distribution`` among the collected wheel files, or None."""
    for f in wheels.glob("*.whl"):
        name, _, rest = f.name.partition("-")
        if name.lower().replace("_", "-") == distribution:
            return rest.split("-", 1)[0]
    return None


def link_agent(venv_python: Path) -> None:
    """Make this agent's ``edgequal.agent`` (and the ``edgequal.contract`` it stands on)
    importable in the venv of ``venv_python``.

    Links (not copies) in its site-packages: the worker code an environment runs is
    always the installed agent's, so an agent upgrade upgrades the workers with it.
    """
    out = _run(
        [str(venv_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        "find the venv's site-packages",
        60.0,
    )
    package = Path(out.strip()) / "edgequal"
    package.mkdir(parents=True, exist_ok=True)
    for name, target in (("agent", agent_package_dir()), ("contract", contract_package_dir())):
        link = package / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target, target_is_directory=True)


def _copy_exact(wheels: Sequence[dict], find_links: Sequence[Path], into: Path) -> list[Path]:
    """Copy each approved wheel from ``find_links`` into ``into``, its sha256 checked."""
    out = []
    for w in wheels:
        name = Path(str(w.get("file", ""))).name
        source = next((Path(d) / name for d in find_links if (Path(d) / name).is_file()), None)
        if source is None:
            raise BadInput(
                f"approved wheel {name} is not in {', '.join(map(str, find_links)) or 'any --find-links'}"
            )
        digest = file_sha256(source)
        if digest != w.get("sha256"):
            raise BadInput(
                f"wheel {name} has sha256 {digest[:16]}…, the approved one {str(w.get('sha256'))[:16]}…",
                hint="restore from the approved wheels themselves",
            )
        shutil.copyfile(source, into / name)
        out.append(into / name)
    return out


def _pip(python: str, args: list[str], what: str) -> str:
    base = [python, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    return _run(base + args, what, PIP_TIMEOUT_S)


def _run(cmd: list[str], what: str, timeout_s: float) -> str:
    try:
        proc = subprocess.run(
            cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired as e:
        raise AgentError(f"could not {what}: no result within {timeout_s:g} s") from e
    except OSError as e:
        raise AgentError(f"could not {what}: {e}") from e
    if proc.returncode != 0:
        raise RuntimeUnavailable(
            f"could not {what}: {pip_error(proc.stderr, proc.returncode)}",
            hint="without a package index, give --find-links DIR --no-index with the wheels",
        )
    return proc.stdout


def wheel_tags() -> dict:
    """This interpreter's wheel tags: ``{python, implementation, abis, platforms}``, most
    specific first, as pip (which the board needs for ``runtime add``) computes them."""
    try:
        from pip._vendor.packaging import tags  # the board's pip decides what it installs
    except ImportError:
        try:
            from packaging import tags
        except ImportError:
            raise BadInput(
                "this agent's Python has no pip", hint="install pip into the agent's venv"
            ) from None
    found = list(tags.sys_tags())
    return {
        "python": f"{sys.version_info[0]}{sys.version_info[1]}",
        "implementation": tags.interpreter_name(),
        "abis": list(dict.fromkeys(t.abi for t in found if t.abi != "none")),
        "platforms": list(dict.fromkeys(t.platform for t in found if t.platform != "any")),
    }


def add_env(
    envs: RuntimeEnvs,
    requirement: str,
    name: str | None = None,
    *,
    find_links: Sequence[Path] = (),
    no_index: bool = False,
    exact_wheels: Sequence[dict] | None = None,
    extra: Sequence[str] = (),
) -> RuntimeEnv:
    """Create the environment for ``requirement`` among ``envs`` and return its manifest.

    Beside the runtime go ``extra`` requirements (``numpy<2``) and, unless they name
    numpy, the numpy the runtime was built for (:func:`companion_requirements`).

    The wheels are first collected into the environment's ``wheels/`` (``pip
    download``, from ``find_links`` and, unless ``no_index``, the package index),
    then installed from there alone, so their sha256 digests are those recorded.
    ``exact_wheels`` (``[{file, sha256}]``, an approval's record) installs exactly
    those files, found in ``find_links``, each digest checked first. The runtime is
    then imported in a child process; an environment whose runtime cannot be
    imported is removed again and refused.
    """
    req = Requirement.parse(requirement)
    companions = companion_requirements(req, extra)
    name = check_env_name(name or req.default_name)
    if name == DEFAULT_ENV:
        raise BadInput("'default' names the agent's own environment", hint="choose another name")
    if envs.get(name) is not None:
        raise BadInput(
            f"runtime environment {name} is already installed",
            hint=f"edgequal-agent runtime remove {name} first, or choose another --name",
        )
    target = envs.root / name
    if target.exists():  # an installation that did not finish
        shutil.rmtree(target)
    target.mkdir(parents=True)
    try:
        return build_env(
            req,
            name,
            target,
            envs.python,
            envs.step,
            list(find_links),
            no_index,
            exact_wheels,
            companions,
        )
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
