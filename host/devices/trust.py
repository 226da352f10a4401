"""The host's pinned device keys (``known_devices``), like SSH's known_hosts.

A device's report-signing key is trusted once, at enrolment, after its
fingerprint has been compared out of band; from then on a different key for the
same name is a hard failure ("device identity changed"), never a warning.

File: ``<config dir>/known_devices``, where the config dir is
``$EDGEQUAL_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/edgequal``, else
``~/.config/edgequal``. UTF-8 text, one device per line, fields separated by
spaces::

    # NAME    ADDRESS                KEYTYPE  PUBLIC KEY (raw 32 bytes, base64)      [OPTIONS]
    pi5       grpc://10.0.0.7:50051  ed25519  2sdqUhEPp5ZGz7mFSwS0kyuGEmXm9kPe5P8kEkqbD+I=
    orin      ssh://lab@orin.local   ed25519  8b1f...=  token_file=/home/me/.orin.token

- NAME: letters, digits, ``.``, ``_``, ``-``; unique in the file.
- ADDRESS: how to reach the device (``grpc://H:P``, ``ssh://U@H``, ``local``); no spaces.
- KEYTYPE: ``ed25519`` (the only one so far).
- OPTIONS: ``key=value`` words; ``token_file`` is the file holding the device's
  access token; ``also_at`` lists, comma-separated, the device's other addresses
  (one device, one name, one key, reached over grpc and ssh); ``tls_ca``,
  ``tls_cert`` and ``tls_key`` are the PEM files for TLS to a ``grpc://``
  address (the CA that signed the agent's certificate; this host's certificate
  and key for mutual TLS). Unknown options are kept as they are, so newer files
  survive older tools.
- Blank lines and lines starting with ``#`` are comments (kept on rewrite).

One key belongs to one name: trusting a key already pinned under another name
is refused, so a report's signing key identifies exactly one device. The same
device reached at another address is found by its key (after it proved holding
it), with its own security settings; that address is added to ``also_at`` only on
the user's word (``devices trust NAME ADDRESS``, ``agent install``).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from edgequal.contract.keys import PUBLIC_KEY_SIZE, fingerprint_of, keyid_of

from ..errors import UntrustedDevice, UsageError
from ..paths import config_dir

KNOWN_DEVICES_FILE_NAME = "known_devices"
KEY_TYPE = "ed25519"

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def check_device_name(name: str | None) -> None:
    """UsageError unless ``name`` can name a device in ``known_devices``."""
    if not _NAME.fullmatch(name or ""):
        raise UsageError(
            f"bad device name {name!r}",
            hint="use letters, digits, '.', '_' and '-' (e.g. pi5 or lab-orin-1)",
        )


def default_device_name(alias: str) -> str:
    """A ``known_devices`` name from an SSH host alias: disallowed characters become '-'."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", alias).strip("-._") or "device"


_OPTION_KEY = re.compile(r"[a-z][a-z0-9_]*")
ALSO_AT = "also_at"
TLS_OPTIONS = ("tls_ca", "tls_cert", "tls_key")


def known_devices_path() -> Path:
    """Return the default ``known_devices`` path inside :func:`config_dir`."""
    return config_dir() / KNOWN_DEVICES_FILE_NAME


def decode_public_key(text: str) -> bytes:
    """Decode a base64 (standard or URL-safe) raw Ed25519 public key; ValueError if it is not one."""
    text = text.strip()
    try:
        raw = base64.b64decode(
            text.replace("-", "+").replace("_", "/") + "=" * (-len(text) % 4), validate=True
        )
    except (binascii.Error, ValueError) as e:
        raise ValueError(f"public key is not base64: {text!r}") from e
    if len(raw) != PUBLIC_KEY_SIZE:
        raise ValueError(f"public key is {len(raw)} bytes, an Ed25519 key is {PUBLIC_KEY_SIZE}")
    return raw


@dataclass(frozen=True)
class DeviceEntry:
    """One pinned device: its name, address and report-signing public key."""

    name: str
    address: str
    public_key_raw: bytes
    fingerprint: str = ""
    token_file: str | None = None
    options: dict[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        # The fingerprint is always derived from the key, so the two cannot disagree.
        object.__setattr__(self, "fingerprint", fingerprint_of(self.public_key_raw))

    @property
    def keyid(self) -> str:
        """Return the DSSE key id (hex sha256 of the public key)."""
        return keyid_of(self.public_key_raw)

    @property
    def addresses(self) -> list[str]:
        """Every address of this device: the main one first, then ``also_at``."""
        extra = [a for a in self.options.get(ALSO_AT, "").split(",") if a]
        return [self.address] + [a for a in extra if a != self.address]

    @property
    def tls(self) -> dict[str, str]:
        """The TLS files for a ``grpc://`` address (``tls_ca``, ``tls_cert``, ``tls_key``), as given."""
        return {k: self.options[k] for k in TLS_OPTIONS if self.options.get(k)}

    def public_key_b64(self) -> str:
        """Return the raw public key in standard base64, as stored in the file."""
        return base64.b64encode(self.public_key_raw).decode("ascii")

    def to_line(self) -> str:
        """Return this entry as one ``known_devices`` line (no newline)."""
        words = [self.name, self.address, KEY_TYPE, self.public_key_b64()]
        if self.token_file:
            words.append(f"token_file={self.token_file}")
        words.extend(f"{k}={v}" for k, v in self.options.items())
        return " ".join(words)


def parse_line(line: str, *, where: str = "known_devices") -> DeviceEntry | None:
    """Parse one ``known_devices`` line; None for blanks and comments, UsageError if malformed."""
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return None
    words = stripped.split()
    if len(words) < 4:
        raise UsageError(
            f"{where}: expected 'NAME ADDRESS ed25519 PUBLICKEY', got {stripped!r}",
            hint="fix or delete the line, then run `edgequal devices trust` again",
        )
    name, address, key_type, key_text = words[:4]
    if not _NAME.fullmatch(name):
        raise UsageError(f"{where}: bad device name {name!r}")
    if key_type != KEY_TYPE:
        raise UsageError(f"{where}: key type {key_type!r} is not supported (only {KEY_TYPE})")
    try:
        raw = decode_public_key(key_text)
    except ValueError as e:
        raise UsageError(f"{where}: device {name}: {e}") from e
    token_file = None
    options: dict[str, str] = {}
    for word in words[4:]:
        key, sep, value = word.partition("=")
        if not sep or not _OPTION_KEY.fullmatch(key):
            raise UsageError(f"{where}: device {name}: option {word!r} is not key=value")
        if key == "token_file":
            token_file = value
        else:
            options[key] = value
    return DeviceEntry(name, address, raw, token_file=token_file, options=options)


class KnownDevices:
    """The ``known_devices`` file: read on every call, rewritten atomically on change."""

    def __init__(self, path: Path | None = None):
        self.path = Path(path) if path is not None else known_devices_path()

    def _read_lines(self) -> list[str]:
        try:
            return self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        except UnicodeDecodeError as e:
            raise UsageError(
                f"{self.path}: known_devices is not UTF-8 text (byte {e.start})",
                hint="restore it from a backup, or forget and re-trust the devices",
            ) from None

    def _parse(self, lines: list[str]) -> list[tuple[int, DeviceEntry]]:
        """Return (line index, entry) pairs; UsageError on malformed or duplicate entries."""
        out: list[tuple[int, DeviceEntry]] = []
        names: set[str] = set()
        for i, line in enumerate(lines):
            entry = parse_line(line, where=f"{self.path}:{i + 1}")
            if entry is None:
                continue
            if entry.name in names:
                raise UsageError(
                    f"{self.path}:{i + 1}: device {entry.name} is listed twice",
                    hint="delete one of the lines",
                )
            names.add(entry.name)
            out.append((i, entry))
        return out

    def list(self) -> list[DeviceEntry]:
        """Return every pinned device, in file order."""
        return [e for _, e in self._parse(self._read_lines())]

    def get(self, name: str) -> DeviceEntry | None:
        """Return the device called ``name``, or None."""
        return next((e for e in self.list() if e.name == name), None)

    def find_by_key(self, public_key_raw: bytes) -> DeviceEntry | None:
        """Return the device pinned to this raw public key, or None."""
        return next((e for e in self.list() if e.public_key_raw == public_key_raw), None)

    def find_by_address(self, address: str) -> DeviceEntry | None:
        """Return the device reached at ``address`` (its main address or one in ``also_at``)."""
        return next((e for e in self.list() if address in e.addresses), None)

    def find_by_keyid(self, keyid: str) -> DeviceEntry | None:
        """Return the device whose key has this DSSE key id (hex sha256), or None."""
        keyid = keyid.lower()
        return next((e for e in self.list() if e.keyid == keyid), None)

    def trust(
        self,
        name: str,
        address: str,
        public_key_raw: bytes,
        *,
        replace: bool = False,
        token_file: str | None = None,
        tls: dict[str, str] | None = None,
    ) -> DeviceEntry:
        """Pin ``public_key_raw`` for device ``name`` and return the entry.

        Re-trusting the same key updates the address (and token file and TLS files
        when given; the old address stays in ``also_at``).
        A different key for a known name raises UntrustedDevice unless
        ``replace=True``; a key pinned under another name raises UsageError.
        """
        check_device_name(name)
        if not address or any(c.isspace() for c in address):
            raise UsageError(f"bad address {address!r} for device {name}: it must be one word")
        if token_file is not None and (not token_file or any(c.isspace() for c in token_file)):
            raise UsageError(f"bad token file {token_file!r}: the path must not contain spaces")
        for k, v in (tls or {}).items():
            if k not in TLS_OPTIONS or not v or any(c.isspace() for c in v):
                raise UsageError(f"bad TLS file {v!r} ({k}): the path must not contain spaces")
        new_fp = fingerprint_of(public_key_raw)
        lines = self._read_lines()
        parsed = self._parse(lines)
        for _, other in parsed:
            if other.name != name and other.public_key_raw == public_key_raw:
                raise UsageError(
                    f"key {new_fp} is already pinned for device {other.name}",
                    hint=f"run `edgequal devices forget {other.name}` first to rename it",
                )
        current = next(((i, e) for i, e in parsed if e.name == name), None)
        if current is not None:
            index, old = current
            if old.public_key_raw != public_key_raw and not replace:
                raise UntrustedDevice(
                    f"device {name} is pinned to key {old.fingerprint} but presented "
                    f"{new_fp}: device identity changed (re-keyed or impersonated)",
                    hint=(
                        f"if {name} was re-keyed on purpose, confirm the new fingerprint on the "
                        f"device, then `edgequal devices forget {name}` and trust it again"
                    ),
                )
            options = {**old.options, **(tls or {})}
            others = [a for a in old.addresses if a != address]
            if others:
                options[ALSO_AT] = ",".join(others)
            else:
                options.pop(ALSO_AT, None)
            entry = DeviceEntry(
                name,
                address,
                public_key_raw,
                token_file=token_file if token_file is not None else old.token_file,
                options=options,
            )
            lines[index] = entry.to_line()
        else:
            entry = DeviceEntry(
                name, address, public_key_raw, token_file=token_file, options=dict(tls or {})
            )
            lines.append(entry.to_line())
        self._write_lines(lines)
        return entry

    def add_address(self, name: str, address: str) -> DeviceEntry:
        """Record ``address`` as another address of device ``name`` (in ``also_at``).

        The caller has checked that the device at ``address`` proved it holds this
        device's key. An address another device already has is refused.
        """
        if not address or any(c.isspace() or c == "," for c in address):
            raise UsageError(f"bad address {address!r} for device {name}: it must be one word")
        lines = self._read_lines()
        parsed = self._parse(lines)
        current = next(((i, e) for i, e in parsed if e.name == name), None)
        if current is None:
            raise UsageError(f"no device named {name} in {self.path}")
        for _, other in parsed:
            if other.name != name and address in other.addresses:
                raise UsageError(
                    f"address {address} already belongs to device {other.name}",
                    hint=f"`edgequal devices forget {other.name}` if that device is gone",
                )
        index, entry = current
        if address in entry.addresses:
            return entry
        options = dict(entry.options)
        options[ALSO_AT] = ",".join(entry.addresses[1:] + [address])
        entry = DeviceEntry(
            entry.name, entry.address, entry.public_key_raw, token_file=entry.token_file,
            options=options,
        )  # fmt: skip
        lines[index] = entry.to_line()
        self._write_lines(lines)
        return entry

    def forget(self, name: str) -> DeviceEntry:
        """Remove device ``name`` and return its entry; UsageError if it is not known."""
        lines = self._read_lines()
        current = next(((i, e) for i, e in self._parse(lines) if e.name == name), None)
        if current is None:
            raise UsageError(
                f"no device named {name} in {self.path}", hint="`edgequal devices list` shows them"
            )
        index, entry = current
        del lines[index]
        self._write_lines(lines)
        return entry

    def _write_lines(self, lines: list[str]) -> None:
        """Replace the file atomically (temp file, fsync, rename) so a crash leaves old or new."""
        parent = self.path.parent
        if not parent.exists():
            os.makedirs(parent, mode=0o700, exist_ok=True)
        tmp = parent / f".{self.path.name}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
        text = "".join(line + "\n" for line in lines)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        dir_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
