"""Device profiles: one TOML file per board, ``device_profiles/<vendor>/<board>.toml``.

A profile names a board (tag ``"raspberry-pi/5"``), what to expect of it
(architecture, cores, memory, runtimes, execution providers, thermal zones, trip and
maximum temperatures, throttle indicators, default threads) and the window length of
each plan that runs a sustained phase. It sets no phase's length: the preset and the
flags decide which phases run and for how long (``edgequal.contract.plan.PROFILE_FIELDS``
lists what a profile may set). Files are validated strictly when loaded: a missing
field, a wrong type or an unknown key is refused with the file's path and the field's name.

The host picks the profile whose ``match`` strings best fit the device's fingerprint
(the longest one found in the board model), falling back to the generic profile of the
device's architecture.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from edgequal.contract.plan import PRESETS, THROTTLE_INDICATORS
from edgequal.contract.runtimes import RUNTIME_NAMES
from edgequal.host.errors import UsageError

from ..toml_text import BadToml, parse_toml

PACKAGE = "edgequal.device_profiles"
PLAN_NAMES = tuple(PRESETS)
# The plans whose preset runs a sustained phase: the only ones a profile gives a window.
SUSTAINED_PLANS = tuple(name for name, table in PRESETS.items() if table["sustain_s"])
KNOWN_ARCHITECTURES = ("aarch64", "x86_64", "armv7l")
_ARCH_ALIASES = {"arm64": "aarch64", "amd64": "x86_64", "x64": "x86_64"}
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*/[a-z0-9][a-z0-9._-]*$")


class ProfileError(UsageError):
    """A device profile is missing, unreadable or invalid; the message names the file and field."""


@dataclass(frozen=True)
class DeviceProfile:
    """One board's expectations, and the sustained window of each plan that runs one
    (``windows``: plan name -> window_s), as loaded from its TOML file."""

    name: str
    description: str
    architecture: str
    cores: int
    memory_mb: int
    match: tuple[str, ...]
    runtimes: tuple[str, ...]
    trip_c: float
    max_c: float
    throttle_indicators: tuple[str, ...]
    default_threads: int
    windows: dict[str, float] = field(hash=False)
    source: str = field(default="", compare=False)

    @property
    def vendor(self) -> str:
        """``"raspberry-pi"`` for ``"raspberry-pi/5"``."""
        return self.name.split("/", 1)[0]

    @property
    def is_generic(self) -> bool:
        """True for an architecture fallback (no board ``match`` strings)."""
        return not self.match

    def plan_fields(self, preset: str) -> dict[str, Any]:
        """What this board sets in a plan of ``preset`` (``make_plan``'s ``from_profile``):
        its thread count, throttle temperature and indicators, the temperature that stops a
        sustained run, and the window of the preset's sustained phase. No phase length."""
        if preset not in PLAN_NAMES:
            raise ProfileError(
                f"{self.name}: no plan {preset!r}", hint=f"plans are {', '.join(PLAN_NAMES)}"
            )
        return {
            "profile": self.name,
            "threads": self.default_threads,
            "trip_c": self.trip_c,
            "max_temp_c": self.max_c,
            "throttle_indicators": list(self.throttle_indicators),
            "window_s": self.windows.get(preset),
        }

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (lists for tuples), e.g. for a report's plan section."""
        d = asdict(self)
        for key, value in d.items():
            if isinstance(value, tuple):
                d[key] = list(value)
        return d


# Field name -> expected kind. "float" accepts integers; "int" refuses booleans.
_FIELDS: dict[str, str] = {
    "name": "str",
    "description": "str",
    "architecture": "str",
    "cores": "int",
    "memory_mb": "int",
    "match": "list[str]",
    "runtimes": "list[str]",
    "trip_c": "float",
    "max_c": "float",
    "throttle_indicators": "list[str]",
    "default_threads": "int",
    "plans": "table",
}
# Fields that may be left out of a profile.
_OPTIONAL = ("plans",)
_PLAN_FIELDS: dict[str, str] = {"window_s": "float"}
# What the earlier profile format set per plan: refused with the reason, not as a typo.
_PHASE_LENGTHS = ("cold_runs", "latency_min_runs", "latency_min_s", "sustain_s")
_KIND_WORDS = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "list[str]": "a list of strings",
    "table": "a table",
}


def _type_name(value: Any) -> str:
    return {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        list: "list",
        dict: "table",
    }.get(type(value), type(value).__name__)


def _check(source: str, key: str, value: Any, kind: str) -> Any:
    ok = (
        (kind == "str" and isinstance(value, str))
        or (kind == "int" and isinstance(value, int) and not isinstance(value, bool))
        or (kind == "float" and isinstance(value, (int, float)) and not isinstance(value, bool))
        or (
            kind == "list[str]"
            and isinstance(value, list)
            and all(isinstance(v, str) for v in value)
        )
        or (kind == "table" and isinstance(value, dict))
    )
    if not ok:
        raise ProfileError(
            f"{source}: field '{key}' must be {_KIND_WORDS[kind]}, got {_type_name(value)} {value!r}"
        )
    if kind == "float":
        return float(value)
    if kind == "list[str]":
        return tuple(value)
    return value


def _fields(source: str, table: dict, spec: dict[str, str], prefix: str = "") -> dict[str, Any]:
    unknown = sorted(set(table) - set(spec))
    if unknown:
        raise ProfileError(
            f"{source}: unknown key '{prefix}{unknown[0]}'",
            hint=f"allowed keys: {', '.join(prefix + k for k in spec)}",
        )
    missing = [k for k in spec if k not in table and k not in _OPTIONAL]
    if missing:
        raise ProfileError(f"{source}: missing field '{prefix}{missing[0]}'")
    return {k: _check(source, prefix + k, table[k], kind) for k, kind in spec.items() if k in table}


def _positive(source: str, key: str, value: float) -> None:
    if value <= 0:
        raise ProfileError(f"{source}: field '{key}' must be > 0, got {value!r}")


def profile_from_dict(data: dict, source: str = "<profile>") -> DeviceProfile:
    """Validate a parsed TOML table and build the profile; ``source`` names it in errors."""
    values = _fields(source, data, _FIELDS)
    if not _NAME.match(values["name"]):
        raise ProfileError(
            f"{source}: field 'name' must look like 'vendor/board' (lowercase), got {values['name']!r}"
        )
    arch = values["architecture"]
    if arch not in KNOWN_ARCHITECTURES:
        raise ProfileError(
            f"{source}: field 'architecture' must be one of {', '.join(KNOWN_ARCHITECTURES)}, got {arch!r}"
        )
    for key in ("cores", "memory_mb", "default_threads", "trip_c", "max_c"):
        _positive(source, key, values[key])
    if values["trip_c"] >= values["max_c"]:
        raise ProfileError(
            f"{source}: field 'trip_c' ({values['trip_c']:g}) must be below 'max_c' ({values['max_c']:g})"
        )
    for key, known in (
        ("runtimes", RUNTIME_NAMES),
        ("throttle_indicators", THROTTLE_INDICATORS),
    ):
        for item in values[key]:
            if item not in known:
                raise ProfileError(
                    f"{source}: field '{key}' has unknown value {item!r}",
                    hint=f"known: {', '.join(known)}",
                )
    values["windows"] = _windows(source, values.pop("plans", {}))
    return DeviceProfile(**values, source=source)


def _windows(source: str, plans_table: dict) -> dict[str, float]:
    """``[plans.standard]`` / ``[plans.soak]``: each the window_s of that plan's sustained phase."""
    windows = {}
    for plan, table in plans_table.items():
        where = f"plans.{plan}"
        if plan not in PLAN_NAMES:
            raise ProfileError(
                f"{source}: unknown key '{where}'", hint=f"plans are {', '.join(PLAN_NAMES)}"
            )
        table = _check(source, where, table, "table")
        lengths = [k for k in table if k in _PHASE_LENGTHS]
        if lengths:
            raise ProfileError(
                f"{source}: '{where}.{lengths[0]}': a profile sets no phase length "
                "(the plan's own are the ones --help lists; --sustain sets the sustained one)",
                hint=f"keep only window_s, under [plans.{'] and [plans.'.join(SUSTAINED_PLANS)}]; "
                "see docs/probes.md",
            )
        if plan not in SUSTAINED_PLANS:
            raise ProfileError(
                f"{source}: plan {plan} runs no sustained phase, so '{where}' has nothing to set",
                hint=f"a profile sets only the sustained window of {', '.join(SUSTAINED_PLANS)}; "
                "phase lengths come from --plan and --sustain",
            )
        window = _fields(source, table, _PLAN_FIELDS, where + ".")["window_s"]
        sustain_s = PRESETS[plan]["sustain_s"]
        if not 1.0 <= window <= sustain_s:
            raise ProfileError(
                f"{source}: field '{where}.window_s' must be 1 s to plan {plan}'s "
                f"sustained {sustain_s:g} s, got {window:g}"
            )
        windows[plan] = window
    return windows


def _parse(text: str, source: str) -> DeviceProfile:
    try:
        data = parse_toml(text)
    except BadToml as e:
        raise ProfileError(f"{source}: not valid TOML: {e}") from e
    return profile_from_dict(data, source)


def _package_root():
    return resources.files(PACKAGE)


def _packaged_files() -> list:
    root = _package_root()
    found = []
    for vendor in sorted(root.iterdir(), key=lambda p: p.name):
        if not vendor.is_dir() or vendor.name.startswith(("_", ".")):
            continue
        for entry in sorted(vendor.iterdir(), key=lambda p: p.name):
            if entry.name.endswith(".toml"):
                found.append((f"{vendor.name}/{entry.name[: -len('.toml')]}", entry))
    return found


def profile_names() -> list[str]:
    """Tags of every packaged profile, sorted (``"generic/linux-aarch64"``, ...)."""
    return [name for name, _ in _packaged_files()]


def _load_packaged(name: str, entry) -> DeviceProfile:
    source = str(entry)
    profile = _parse(entry.read_text(encoding="utf-8"), source)
    if profile.name != name:
        raise ProfileError(
            f"{source}: field 'name' is {profile.name!r} but the file is {name}.toml"
        )
    return profile


def load_profile(path_or_name: str | Path) -> DeviceProfile:
    """A profile by tag (``"raspberry-pi/5"``) or from a TOML file path (``"lab/pi.toml"``).

    Raises ProfileError for an unknown tag, an unreadable file or an invalid profile.
    """
    text = str(path_or_name)
    if isinstance(path_or_name, Path) or text.endswith(".toml"):
        path = Path(path_or_name)
        try:
            content = path.read_text(encoding="utf-8")
        except OSError as e:
            raise ProfileError(f"{path}: cannot read profile: {e.strerror or e}") from e
        except UnicodeDecodeError as e:
            raise ProfileError(f"{path}: cannot read profile: not UTF-8 text ({e.reason})") from e
        return _parse(content, str(path))
    for name, entry in _packaged_files():
        if name == text:
            return _load_packaged(name, entry)
    raise ProfileError(
        f"unknown device profile {text!r}",
        hint=f"known profiles: {', '.join(profile_names())}; or give a path to a .toml file",
    )


def all_profiles() -> list[DeviceProfile]:
    """Every packaged profile, sorted by tag."""
    return [_load_packaged(name, entry) for name, entry in _packaged_files()]


def normalize_architecture(arch: str | None) -> str | None:
    """``"arm64"`` -> ``"aarch64"``, ``"AMD64"`` -> ``"x86_64"``; other names lowercased."""
    if not arch:
        return None
    a = arch.strip().lower()
    return _ARCH_ALIASES.get(a, a)


def match_profile(fingerprint: dict, profiles: list[DeviceProfile] | None = None) -> DeviceProfile:
    """The profile for a device fingerprint.

    The board profile whose longest ``match`` string occurs (case-insensitively) in the
    fingerprint's ``board_model`` wins; else the generic profile of its
    ``architecture``. Raises ProfileError when neither fits.
    """
    candidates = all_profiles() if profiles is None else profiles
    model = (fingerprint.get("board_model") or "").lower()
    best: tuple[int, DeviceProfile] | None = None
    if model:
        for profile in candidates:
            for needle in profile.match:
                if needle.lower() in model and (best is None or len(needle) > best[0]):
                    best = (len(needle), profile)
    if best is not None:
        return best[1]
    arch = normalize_architecture(fingerprint.get("architecture"))
    for profile in candidates:
        if profile.is_generic and profile.architecture == arch:
            return profile
    raise ProfileError(
        f"no device profile matches board {fingerprint.get('board_model')!r} "
        f"on architecture {fingerprint.get('architecture')!r}",
        hint="choose one with --profile",
    )
