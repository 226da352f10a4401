"""The device's report-signing key: Ed25519, generated on first start, kept 0600.

The key lives in ``<state_dir>/device_key.pem`` (PKCS#8 PEM, unencrypted, because
the agent must sign unattended). It is readable only by the agent's user; a key
file that group or others can read, or that another user owns, is refused rather
than silently used, because anyone who can read it can forge this device's
reports. ``device_key.pub`` next to it holds the raw public key in base64 for
enrolment (``edgequal devices trust``) and is not secret.

Identifiers:

- fingerprint: ``SHA256:`` + unpadded base64 of sha256(raw 32-byte public key),
  the style ``ssh-keygen -l`` prints (but over the raw key, not the SSH blob);
  meant for humans comparing keys out of band.
- keyid: lowercase hex sha256(raw public key); the DSSE ``keyid`` hint.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import stat
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from .errors import AgentError
from .files import fsync_dir

KEY_FILE_NAME = "device_key.pem"
PUBLIC_KEY_FILE_NAME = "device_key.pub"
PUBLIC_KEY_SIZE = 32


class UnsafeKeyFile(AgentError):
    """The device key file is exposed to other users, or cannot be used as a key."""


def fingerprint_of(public_key_raw: bytes) -> str:
    """Return ``SHA256:<unpadded base64>`` of a raw 32-byte Ed25519 public key."""
    _check_public_key_raw(public_key_raw)
    digest = hashlib.sha256(public_key_raw).digest()
    return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")


def keyid_of(public_key_raw: bytes) -> str:
    """Return the DSSE key id (hex sha256) of a raw 32-byte Ed25519 public key."""
    _check_public_key_raw(public_key_raw)
    return hashlib.sha256(public_key_raw).hexdigest()


def _check_public_key_raw(public_key_raw: bytes) -> None:
    if not isinstance(public_key_raw, bytes) or len(public_key_raw) != PUBLIC_KEY_SIZE:
        raise ValueError(f"an Ed25519 public key is {PUBLIC_KEY_SIZE} raw bytes")


class DeviceKey:
    """An Ed25519 private key that signs this device's reports."""

    def __init__(self, private_key: Ed25519PrivateKey, path: Path | None = None):
        self._private_key = private_key
        self.path = path
        self._public_raw = private_key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )

    @classmethod
    def generate(cls) -> DeviceKey:
        """Make a fresh in-memory key (not written anywhere)."""
        return cls(Ed25519PrivateKey.generate())

    def sign(self, data: bytes) -> bytes:
        """Return the 64-byte Ed25519 signature of ``data``."""
        return self._private_key.sign(data)

    def public_key_raw(self) -> bytes:
        """Return the 32-byte raw public key."""
        return self._public_raw

    def public_key_b64(self) -> str:
        """Return the raw public key in standard base64 (what ``device_key.pub`` holds)."""
        return base64.b64encode(self._public_raw).decode("ascii")

    def fingerprint(self) -> str:
        """Return the ``SHA256:...`` fingerprint operators compare at enrolment."""
        return fingerprint_of(self._public_raw)

    def keyid(self) -> str:
        """Return the hex sha256 of the public key, used as the DSSE keyid."""
        return keyid_of(self._public_raw)

    def private_pem(self) -> bytes:
        """Return the key as unencrypted PKCS#8 PEM."""
        return self._private_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def __repr__(self) -> str:
        # Never show key material; the fingerprint is enough to tell keys apart.
        return f"DeviceKey({self.fingerprint()})"


def load_device_key(state_dir: Path) -> DeviceKey | None:
    """The key in ``state_dir/device_key.pem`` (checked as below), or None: never creates one."""
    try:
        return _load_key_file(Path(state_dir) / KEY_FILE_NAME)
    except FileNotFoundError:
        return None


def load_or_create_device_key(state_dir: Path) -> DeviceKey:
    """Load ``state_dir/device_key.pem``, creating it (mode 0600) on first call.

    The state directory is created with mode 0700 if missing. An existing key file
    that is group/world accessible, not owned by the current user, a symlink, or
    not an Ed25519 PKCS#8 PEM key raises :class:`UnsafeKeyFile`.
    """
    state_dir = Path(state_dir)
    if not state_dir.exists():
        os.makedirs(state_dir, mode=0o700, exist_ok=True)
        # makedirs' mode is filtered by the umask; make it exact.
        os.chmod(state_dir, 0o700)
    key_path = state_dir / KEY_FILE_NAME
    try:
        key = _load_key_file(key_path)
    except FileNotFoundError:
        key = _create_key_file(key_path)
    _write_public_key_file(state_dir / PUBLIC_KEY_FILE_NAME, key)
    return key


def _load_key_file(key_path: Path) -> DeviceKey:
    """Read and check the key file; FileNotFoundError when there is none."""
    try:
        fd = os.open(key_path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as e:
        if isinstance(e, FileNotFoundError):
            raise
        if os.path.islink(key_path):
            raise UnsafeKeyFile(
                f"device key {key_path} is a symbolic link; refusing to follow it",
                hint=f"replace the link with the key file itself (mode 600) at {key_path}",
            ) from e
        raise UnsafeKeyFile(
            f"cannot open device key {key_path}: {e.strerror}",
            hint="run the agent as the user that owns its state directory",
        ) from e
    with os.fdopen(fd, "rb") as f:
        # Check the open file itself, so the file checked is the file read.
        st = os.fstat(f.fileno())
        _check_key_file_stat(key_path, st)
        data = f.read()
    try:
        private_key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as e:
        raise UnsafeKeyFile(
            f"device key {key_path} is not an unencrypted PEM private key ({e})",
            hint=f"move {key_path} away to generate a new key, then re-enrol the device",
        ) from e
    if not isinstance(private_key, Ed25519PrivateKey):
        raise UnsafeKeyFile(
            f"device key {key_path} is a {type(private_key).__name__}, not Ed25519",
            hint=f"move {key_path} away to generate a new key, then re-enrol the device",
        )
    return DeviceKey(private_key, path=key_path)


def _check_key_file_stat(key_path: Path, st: os.stat_result) -> None:
    """Refuse a key file other users could read or replace."""
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeKeyFile(
            f"device key {key_path} is not a regular file",
            hint=f"remove {key_path} so the agent can generate a new key",
        )
    uid = os.geteuid()
    if st.st_uid != uid:
        raise UnsafeKeyFile(
            f"device key {key_path} is owned by uid {st.st_uid}, not by the agent's user "
            f"(uid {uid})",
            hint=f"chown {uid} {key_path}, or run the agent as the key's owner",
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise UnsafeKeyFile(
            f"device key {key_path} is accessible by group or others (mode {mode:04o}); "
            "anyone who can read it can forge this device's reports",
            hint=f"chmod 600 {key_path} (and re-enrol the device if others may have read it)",
        )


def _create_key_file(key_path: Path) -> DeviceKey:
    """Generate a key and publish it at ``key_path`` without ever exposing it."""
    key = DeviceKey.generate()
    tmp = key_path.with_name(f".{key_path.name}.tmp-{os.getpid()}-{os.urandom(4).hex()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        # The umask can only remove bits; set the mode exactly in case it removed ours.
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key.private_pem())
            f.flush()
            os.fsync(f.fileno())
        try:
            # link() fails if the name exists, so two agents starting at once cannot
            # replace each other's key; the loser uses the winner's key.
            os.link(tmp, key_path)
        except FileExistsError:
            return _load_key_file(key_path)
        except OSError:
            # File systems without hard links: rename is still atomic.
            os.rename(tmp, key_path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    fsync_dir(key_path.parent)
    key.path = key_path
    return key


def _write_public_key_file(pub_path: Path, key: DeviceKey) -> None:
    """Write ``device_key.pub`` (raw public key, base64) if missing or stale."""
    text = key.public_key_b64() + "\n"
    try:
        if pub_path.read_text(encoding="ascii") == text:
            return
    except (OSError, UnicodeDecodeError):
        pass
    tmp = pub_path.with_name(f".{pub_path.name}.tmp-{os.getpid()}-{os.urandom(4).hex()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, pub_path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
