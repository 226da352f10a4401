"""A lab's inventory (``lab.toml``) and the models a fleet run qualifies (``models.toml``).

A lab file names its devices: each has an address (``grpc://HOST:PORT`` or
``ssh://USER@HOST[:PORT]``), optionally a device profile and tags. Credentials are
never written in the file: a device names its token by reference, an environment
variable (``token_env``) or a file (``token_file``), read only when the device is
used. The history database URL, which may hold a password, is referenced the same
way (``[lab] history_url_env`` / ``history_url_file``).

Both files are validated strictly when loaded: an unknown key is refused with the
closest valid one, a wrong type or value names the file, the key and the line it is
on (tomllib gives no positions, so the line is found in the text).

    [lab]
    name = "bench"

    [devices.pi5-a]
    address = "grpc://10.0.0.21:7441"
    profile = "raspberry-pi/5"
    tags = ["pi", "arm64"]
    token_env = "PI5A_TOKEN"
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..toml_text import BadToml, parse_toml
from ..transport.schemes import GRPC, SSH, is_scheme, scheme_of
from ..transport.ssh_options import SSHOptions

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,63}$")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_GRPC = re.compile(r"^grpc://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})$")
_SSH = re.compile(r"^ssh://[A-Za-z0-9._-]+@(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(:\d{1,5})?$")
# Keys that would put a secret in the file; refused with where the secret goes instead.
_INLINE_SECRETS = {
    "token": "token_env or token_file",
    "password": "an SSH key (ssh_key_file) or a token_file",
    "history_url": "history_url_env or history_url_file",
}
PLAN_NAMES = ("quick", "standard", "soak")


class InventoryError(UsageError):
    """A lab or models file is unreadable or invalid; the message names file, key and line."""


@dataclass(frozen=True)
class SecretRef:
    """Where a secret is: an environment variable or a file, never the value itself."""

    env: str | None = None
    file: Path | None = None

    def describe(self) -> str:
        """``$NAME`` or the file's path."""
        return f"${self.env}" if self.env else str(self.file)

    def read(self, what: str) -> str:
        """The secret's value; InventoryError when the variable is unset or the file unreadable."""
        if self.env:
            value = os.environ.get(self.env, "").strip()
            if not value:
                raise InventoryError(
                    f"{what}: environment variable {self.env} is not set",
                    hint=f"export {self.env}=... in the runner's environment",
                )
            return value
        assert self.file is not None
        from edgequal.contract.auth import read_token_file
        from edgequal.contract.errors import BadInput

        try:
            return read_token_file(self.file)
        except BadInput as e:
            raise InventoryError(f"{what}: {e}", hint=e.hint) from e


@dataclass(frozen=True)
class LabDevice:
    """One board of the lab: how to reach it, which profile it is, its tags, its credentials."""

    name: str
    address: str
    profile: str | None = None
    tags: tuple[str, ...] = ()
    token: SecretRef | None = None
    ssh: SSHOptions | None = None
    """An ``ssh://`` device's ``ssh_key_file``, ``known_hosts_file`` and ``agent_cmd``."""

    @property
    def transport_kind(self) -> str:
        """``grpc`` or ``ssh``."""
        return self.address.split("://", 1)[0]

    def matches(self, tags: set[str] | frozenset[str]) -> bool:
        """Whether the device carries every one of ``tags`` (no tags: every device matches)."""
        return set(tags) <= set(self.tags)


@dataclass(frozen=True)
class LabgridSettings:
    """A lab file's ``[labgrid]`` table: where the coordinator is, which places, which token."""

    coordinator: str
    places: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    token: SecretRef | None = None

    def selects(self, place: str, tags: dict[str, str]) -> bool:
        """Whether the lab file selects this place (by name, else by every tag)."""
        if self.places:
            return place in self.places
        return all(f"{k}={v}" in self.tags_of(tags) for k, v in _pairs(self.tags))

    @staticmethod
    def tags_of(tags: dict[str, str]) -> set[str]:
        return {f"{k}={v}" for k, v in tags.items()}


def _pairs(tags) -> list[tuple[str, str]]:
    return [tuple(t.split("=", 1)) for t in tags]


@dataclass(frozen=True)
class Lab:
    """A lab file: its name, its devices (in file order), and where its history database is.

    A ``[labgrid]`` lab lists no devices: they are the coordinator's places
    (host/lab/labgrid_places.py ``resolve_lab``)."""

    path: Path
    name: str
    devices: tuple[LabDevice, ...]
    history_url: SecretRef | None = None
    lease_ttl_s: float = 120.0
    keep_samples_days: float | None = None
    """``[lab] keep_samples_days``: raw samples of runs older than this are dropped from the
    history, their figures kept (``history drop-samples``, host/lab/retention.py)."""
    labgrid: LabgridSettings | None = None
    changes: dict = field(default_factory=dict)
    """The ``[changes]`` table: change-point sensitivity (``host/lab/changes.py`` checks it)."""

    def select(self, tags: set[str] | frozenset[str] = frozenset()) -> list[LabDevice]:
        """The devices carrying all ``tags``."""
        return [d for d in self.devices if d.matches(tags)]

    def device(self, name: str) -> LabDevice:
        """The device called ``name``; InventoryError naming the lab otherwise."""
        for d in self.devices:
            if d.name == name:
                return d
        raise InventoryError(f"{self.path}: no device '{name}'")


@dataclass(frozen=True)
class FleetModel:
    """One model of a fleet run: its file, golden set, plan, and the tags a device must have."""

    name: str
    path: Path
    golden: Path | None = None
    plan: str | None = None
    tags: tuple[str, ...] = ()
    signature: Path | None = None
    """The model's OpenSSF Model Signing signature, verified on each device before loading."""

    def to_json(self) -> dict:
        """The model as JSON (paths as strings)."""
        return {
            "name": self.name,
            "path": str(self.path),
            "golden": str(self.golden) if self.golden else None,
            "plan": self.plan,
            "tags": list(self.tags),
            "signature": str(self.signature) if self.signature else None,
        }


# -- locating keys in the text -------------------------------------------------


class _Source:
    """A TOML file's path and text, to say on which line a table or key is."""

    def __init__(self, path: Path, text: str):
        self.path = path
        self.lines = text.splitlines()

    def line_of(self, table: tuple[str, ...], key: str | None = None) -> int | None:
        """The 1-based line of ``[a.b]`` (or of ``key = ...`` inside it); None when not found."""
        header = re.compile(
            r"^\s*\[\s*" + r"\s*\.\s*".join(_key_pattern(p) for p in table) + r"\s*\]\s*(#.*)?$"
        )
        if not table and key is None:
            return None
        start = None
        if not table:
            start = 0
        else:
            for i, line in enumerate(self.lines):
                if header.match(line):
                    start = i
                    break
        if start is None:
            return None
        if key is None:
            return start + 1
        key_re = re.compile(r"^\s*" + _key_pattern(key) + r"\s*=")
        for i in range(start + (1 if table else 0), len(self.lines)):
            line = self.lines[i]
            if table and i > start and re.match(r"^\s*\[", line):
                break
            if not table and re.match(r"^\s*\[", line):
                break
            if key_re.match(line):
                return i + 1
        return start + 1 if table else None

    def error(self, table: tuple[str, ...], key: str | None, message: str, hint=None):
        """An InventoryError saying ``FILE:LINE: dotted.key: message``."""
        line = self.line_of(table, key)
        dotted = ".".join([*table, key] if key else table)
        where = f"{self.path}:{line}" if line else str(self.path)
        return InventoryError(
            f"{where}: {dotted}: {message}" if dotted else f"{where}: {message}", hint=hint
        )


def _key_pattern(part: str) -> str:
    """A TOML key as written bare or quoted."""
    e = re.escape(part)
    return rf"(?:{e}|\"{e}\"|'{e}')"


def _read_toml(path: Path) -> tuple[dict, _Source]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) else "not UTF-8 text"
        raise InventoryError(f"cannot read {path}: {reason}") from e
    try:
        data = parse_toml(text)
    except BadToml as e:
        # tomllib's message ends with "(at line L, column C)".
        raise InventoryError(f"{path}: not valid TOML: {e}") from e
    return data, _Source(path, text)


def _unknown_keys(src: _Source, table: tuple[str, ...], data: dict, allowed: list[str]) -> None:
    for key in data:
        if key in allowed:
            continue
        if key in _INLINE_SECRETS:
            raise src.error(
                table,
                key,
                "credentials are never written in the lab file",
                hint=f"use {_INLINE_SECRETS[key]}",
            )
        close = difflib.get_close_matches(key, allowed, n=1)
        raise src.error(
            table,
            key,
            "unknown key" + (f" (did you mean '{close[0]}'?)" if close else ""),
            hint="valid keys: " + ", ".join(allowed),
        )


def _string(src, table, data, key, pattern=None, what="") -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise src.error(table, key, f"must be a string, not {type(value).__name__}")
    if pattern is not None and not pattern.match(value):
        raise src.error(table, key, f"{value!r} is not {what}")
    return value


def _tags(src, table, data, key="tags") -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise src.error(table, key, "must be a list of strings")
    for t in value:
        if not _TAG.match(t):
            raise src.error(table, key, f"{t!r} is not a tag (letters, digits, . _ : / -)")
    return tuple(value)


def _path(src, table, data, key) -> Path | None:
    value = _string(src, table, data, key)
    if value is None:
        return None
    if not value:
        raise src.error(table, key, "must not be empty")
    p = Path(value).expanduser()
    # Relative paths are relative to the file that names them, not to the working directory.
    return p if p.is_absolute() else (src.path.parent / p)


def _secret(src, table, data, env_key, file_key) -> SecretRef | None:
    env = _string(src, table, data, env_key, _ENV, "an environment variable name")
    file = _path(src, table, data, file_key)
    if env and file:
        raise src.error(table, file_key, f"give either {env_key} or {file_key}, not both")
    if env:
        return SecretRef(env=env)
    if file:
        return SecretRef(file=file)
    return None


# -- the lab file ----------------------------------------------------------------

_LAB_KEYS = ["name", "history_url_env", "history_url_file", "lease_ttl_s", "keep_samples_days"]
_DEVICE_KEYS = [
    "address",
    "profile",
    "tags",
    "token_env",
    "token_file",
    "ssh_key_file",
    "known_hosts_file",
    "agent_cmd",
]


def _device(src: _Source, name: str, data: Any) -> LabDevice:
    table = ("devices", name)
    if not isinstance(data, dict):
        raise src.error(("devices",), name, "must be a table ([devices.NAME])")
    if not _NAME.match(name):
        raise src.error(table, None, f"{name!r} is not a device name (letters, digits, . _ -)")
    _unknown_keys(src, table, data, _DEVICE_KEYS)
    address = _string(src, table, data, "address")
    if address is None:
        raise src.error(table, None, "needs an address (grpc://HOST:PORT or ssh://USER@HOST)")
    if is_scheme(address, GRPC):
        m = _GRPC.match(address)
        if not m or not 0 < int(m.group(2)) < 65536:
            raise src.error(table, "address", f"{address!r} is not grpc://HOST:PORT")
    elif is_scheme(address, SSH):
        if not _SSH.match(address):
            raise src.error(table, "address", f"{address!r} is not ssh://USER@HOST[:PORT]")
    else:
        raise src.error(
            table, "address", f"{address!r}: use grpc://HOST:PORT or ssh://USER@HOST[:PORT]"
        )
    profile = _string(src, table, data, "profile")
    if profile is not None:
        from ..devices.profiles import ProfileError, load_profile

        try:
            load_profile(profile)
        except ProfileError as e:
            raise src.error(table, "profile", str(e), hint=e.hint) from e
    token = _secret(src, table, data, "token_env", "token_file")
    if token is not None and not scheme_of(address).token:
        raise src.error(
            table,
            "token_env" if token.env else "token_file",
            "an ssh:// device is reached with an SSH key, not a token",
            hint="use ssh_key_file",
        )
    ssh_only = [k for k in ("ssh_key_file", "known_hosts_file", "agent_cmd") if k in data]
    if ssh_only and not is_scheme(address, SSH):
        raise src.error(table, ssh_only[0], "only an ssh:// device takes this key")
    return LabDevice(
        name=name,
        address=address,
        profile=profile,
        tags=_tags(src, table, data),
        token=token,
        ssh=SSHOptions(
            known_hosts=_path(src, table, data, "known_hosts_file"),
            key_file=_path(src, table, data, "ssh_key_file"),
            agent_cmd=_string(src, table, data, "agent_cmd"),
        )
        if is_scheme(address, SSH)
        else None,
    )


def load_lab(path: str | Path) -> Lab:
    """Read and validate a lab file; InventoryError (exit 2) names file, key and line."""
    data, src = _read_toml(Path(path))
    _unknown_keys(src, (), data, ["lab", "devices", "labgrid", "changes"])
    lab = data.get("lab", {})
    if not isinstance(lab, dict):
        raise src.error((), "lab", "must be a table ([lab])")
    _unknown_keys(src, ("lab",), lab, _LAB_KEYS)
    name = _string(src, ("lab",), lab, "name", _NAME, "a lab name") or Path(path).stem
    ttl = lab.get("lease_ttl_s", 120.0)
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 5 <= ttl <= 4 * 3600:
        raise src.error(("lab",), "lease_ttl_s", "must be a number of seconds from 5 to 14400")
    labgrid = _labgrid(src, data["labgrid"]) if "labgrid" in data else None
    devices = data.get("devices")
    if labgrid is not None and devices is not None:
        raise src.error(
            (), "devices", "a [labgrid] lab takes its devices from the coordinator's places"
        )
    if labgrid is None and (not isinstance(devices, dict) or not devices):
        raise src.error(
            (),
            None,
            "has no devices",
            hint="add a [devices.NAME] table per board, or a [labgrid] coordinator",
        )
    return Lab(
        path=Path(path),
        name=name,
        devices=tuple(_device(src, n, d) for n, d in (devices or {}).items()),
        history_url=_secret(src, ("lab",), lab, "history_url_env", "history_url_file"),
        lease_ttl_s=float(ttl),
        keep_samples_days=_keep_days(src, lab.get("keep_samples_days")),
        labgrid=labgrid,
        changes=_changes_table(src, data.get("changes", {})),
    )


_LABGRID_KEYS = ["coordinator", "places", "tags", "token_env", "token_file"]
_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})$")
_LABGRID_TAG = re.compile(r"^[a-z0-9_]+=[a-z0-9_]+$")


def _labgrid(src: _Source, data: Any) -> LabgridSettings:
    """``[labgrid]``: the coordinator, the places (by name or labgrid tags), the token."""
    table = ("labgrid",)
    if not isinstance(data, dict):
        raise src.error((), "labgrid", "must be a table ([labgrid])")
    _unknown_keys(src, table, data, _LABGRID_KEYS)
    coordinator = _string(src, table, data, "coordinator")
    m = _HOST_PORT.match(coordinator or "")
    if m is None or not 0 < int(m.group(2)) < 65536:
        raise src.error(table, "coordinator", 'needs coordinator = "HOST:PORT" (labgrid\'s gRPC)')
    places = data.get("places", [])
    if not isinstance(places, list) or not all(
        isinstance(p, str) and _NAME.match(p) for p in places
    ):
        raise src.error(table, "places", "must be a list of place names")
    tags = data.get("tags", [])
    if not isinstance(tags, list) or not all(
        isinstance(t, str) and _LABGRID_TAG.match(t) for t in tags
    ):
        raise src.error(table, "tags", "must be a list of labgrid tags, key=value")
    if places and tags:
        raise src.error(table, "tags", "select places by name or by tags, not both")
    return LabgridSettings(
        coordinator=coordinator,
        places=tuple(places),
        tags=tuple(tags),
        token=_secret(src, table, data, "token_env", "token_file"),
    )


def _keep_days(src: _Source, value: Any) -> float | None:
    """``[lab] keep_samples_days``: a number of days, at least 1 (absent: keep every sample)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 1:
        raise src.error(("lab",), "keep_samples_days", "must be a number of days, at least 1")
    return float(value)


def _changes_table(src: _Source, table: Any) -> dict:
    """The lab's ``[changes]`` table, checked by the settings it feeds."""
    from .changes import ChangeSettings

    if not isinstance(table, dict):
        raise src.error((), "changes", "must be a table ([changes])")
    unknown = [k for k in table if k not in ChangeSettings.KEYS]
    if unknown:
        _unknown_keys(src, ("changes",), table, list(ChangeSettings.KEYS))
    try:
        ChangeSettings().updated(table, str(src.path))
    except UsageError as e:
        raise src.error(("changes",), None, str(e).split(": ", 1)[-1]) from e
    return dict(table)


# -- the models file ---------------------------------------------------------------

_MODEL_KEYS = ["path", "golden", "plan", "tags", "signature"]


def load_models(path: str | Path) -> list[FleetModel]:
    """Read and validate a models file (``[models.NAME]`` with path, golden, plan, tags,
    signature)."""
    data, src = _read_toml(Path(path))
    _unknown_keys(src, (), data, ["models"])
    models = data.get("models")
    if not isinstance(models, dict) or not models:
        raise src.error((), None, "has no models", hint="add a [models.NAME] table per model")
    out = []
    for name, entry in models.items():
        table = ("models", name)
        if not isinstance(entry, dict):
            raise src.error(("models",), name, "must be a table ([models.NAME])")
        if not _NAME.match(name):
            raise src.error(table, None, f"{name!r} is not a model name (letters, digits, . _ -)")
        _unknown_keys(src, table, entry, _MODEL_KEYS)
        model_path = _path(src, table, entry, "path")
        if model_path is None:
            raise src.error(table, None, "needs a path (the .onnx or .tflite file)")
        if not model_path.is_file():
            raise src.error(table, "path", f"model file not found: {model_path}")
        golden = _path(src, table, entry, "golden")
        if golden is not None and not golden.is_file():
            raise src.error(table, "golden", f"golden set not found: {golden}")
        plan = _string(src, table, entry, "plan")
        if plan is not None and plan not in PLAN_NAMES:
            raise src.error(table, "plan", f"{plan!r} is not one of {', '.join(PLAN_NAMES)}")
        signature = _path(src, table, entry, "signature")
        if signature is not None and not signature.is_file():
            raise src.error(table, "signature", f"model signature not found: {signature}")
        out.append(FleetModel(name, model_path, golden, plan, _tags(src, table, entry), signature))
    return out


def parse_tags(text: str | None) -> frozenset[str]:
    """``--tags a,b`` as a set (empty for None)."""
    return frozenset(t.strip() for t in (text or "").split(",") if t.strip())


__all__ = [
    "FleetModel",
    "InventoryError",
    "Lab",
    "LabDevice",
    "SecretRef",
    "load_lab",
    "load_models",
    "parse_tags",
]
