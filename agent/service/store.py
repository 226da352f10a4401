"""The device's artifact store: models and golden sets, addressed by sha256 only.

Layout under ``root`` (normally ``<state>/artifacts``)::

    sha256/<hex>          committed artifacts, verified against their name, read-only
    partial/<hex>.part    uploads in progress; a resumed upload continues at its size

A client never chooses a path: every name is derived from a validated digest
(64 lowercase hex characters). An upload is appended at exactly the committed
offset, hashed, fsync'ed, and only then renamed to its final name, so a reader
never sees a partial or wrong file under a digest name. Bytes that do not match
their digest are deleted, never stored.

The same store serves gRPC ``Push`` (chunks over the wire) and the SSH transport
(SFTP writes ``partial/<hex>.part``, then ``edgequal-agent store commit``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import mmap
import os
import sys
import threading
import time
from pathlib import Path

from edgequal.contract.artifacts import check_bundle_name, validate_digest
from edgequal.contract.errors import (
    AgentError,
    ArtifactCorrupt,
    BadInput,
    DigestMismatch,
    QuotaExceeded,
)
from edgequal.contract.files import fsync_dir, is_no_space

DEFAULT_MAX_ARTIFACT_BYTES = 2 * 1024**3
"""Largest artifact accepted by default: 2 GiB (ONNX's protobuf limit, TFLite's unverified range)."""

DEFAULT_RESERVE_BYTES = 256 * 1024**2
"""Free disk kept back from uploads so reports and run state can always be written."""

DEFAULT_PARTIAL_MAX_AGE_S = 7 * 24 * 3600.0
"""Partial uploads untouched this long are removed by ``remove_stale_partials``."""

SYNC_INTERVAL_BYTES = 32 * 1024 * 1024
"""An upload is fdatasync'ed every this many bytes: dirty memory stays bounded on a small
board, the final fsync has little left to do, and a crash loses at most this much."""

DIRECT_IO_ALIGN = 4096
"""Offset and length alignment for O_DIRECT writes (covers 512- and 4096-byte logical blocks)."""

_READ_BYTES = 1024 * 1024
_LOCK_STRIPES = 64


class Upload:
    """One upload session for one digest: appends chunks and hashes them as they arrive.

    Opened by :meth:`ArtifactStore.open_upload`, which reserves the declared size
    (quota and free disk) until the session is closed or committed. The running sha256 covers the
    whole partial file (an existing prefix is hashed when the session opens), so
    :meth:`commit` does not read the file again. Each write first checks that the
    file still ends exactly where this session expects, so a second writer of the
    same digest makes this session fail instead of corrupting it.

    Whole aligned chunks are written with O_DIRECT where the file system allows
    it: an upload then neither fills the page cache of a small board (the
    bytes are already hashed; nothing reads them back until a worker loads the
    model, cold) nor pays for copying into it. Other writes, such as the last
    chunk, go through the page cache and are fdatasync'ed every
    SYNC_INTERVAL_BYTES.
    """

    def __init__(self, store: ArtifactStore, digest: str, total_size: int):
        self.store = store
        self.digest = digest
        self.total_size = total_size
        self.bytes_received = 0
        self._fd: int | None = None
        self._sha = hashlib.sha256()
        self.offset = 0
        self.complete = False
        self._unsynced_bytes = 0
        self._direct_fd: int | None = None
        self._direct_buf: mmap.mmap | None = None
        self._reserved = False

    def _open(self) -> None:
        store, digest = self.store, self.digest
        with store._lock(digest):
            if store.has(digest):
                self.complete = True
                self.offset = store.path(digest).stat().st_size
                return
            part = store.partial_path(digest)
            try:
                have = os.stat(part, follow_symlinks=False).st_size
            except FileNotFoundError:
                have = 0
            # A prefix of this artifact cannot be longer than the artifact: such a
            # partial came from a wrong declaration and starts over.
            # Reserved before the partial is created: a refusal leaves no file behind.
            store._reserve(digest, self.total_size, have if have <= self.total_size else 0)
            self._reserved = True
            fd = None
            try:
                fd = os.open(part, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                size = os.fstat(fd).st_size
                if size > self.total_size:
                    os.ftruncate(fd, 0)
                    size = 0
                self.offset = _hash_fd(fd, self._sha, size)
            except BaseException:
                if fd is not None:
                    os.close(fd)
                self._release()
                raise
            self._fd = fd
            self._direct_fd = _open_direct(part, fd)

    def _release(self) -> None:
        """Give back the space this session reserved (once)."""
        if self._reserved:
            self._reserved = False
            self.store._unreserve(self.digest)

    def hash_ahead(self, data: bytes) -> None:
        """Hash the next chunk before it is written (a writer in another thread then calls
        :meth:`write` with ``hashed=True`` for the chunks in the same order)."""
        self._sha.update(data)

    def write(self, offset: int, data: bytes, *, hashed: bool = False) -> int:
        """Append ``data`` at ``offset`` (which must be the committed offset); return the new offset.

        ``hashed``: :meth:`hash_ahead` already took this chunk.
        """
        if self.complete:
            raise BadInput(f"artifact sha256:{self.digest} is already stored; nothing to upload")
        assert self._fd is not None
        if offset != self.offset:
            raise BadInput(
                f"chunk at offset {offset}, expected {self.offset} for sha256:{self.digest}",
                hint="ask Stat for the committed offset and resume from there",
            )
        end = offset + len(data)
        if end > self.total_size:
            raise BadInput(
                f"chunk ends at {end}, past the declared total size {self.total_size} "
                f"of sha256:{self.digest}"
            )
        with self.store._lock(self.digest):
            size = os.fstat(self._fd).st_size
            if size != offset:
                raise BadInput(
                    f"chunk at offset {offset}, expected {size} for sha256:{self.digest} "
                    "(another upload of the same artifact is writing it)",
                    hint="ask Stat for the committed offset and resume from there",
                )
            if not self._write_direct(offset, data):
                _pwrite_all(self._fd, data, offset, self.digest)
                self._unsynced_bytes += len(data)
        if not hashed:
            self._sha.update(data)
        self.offset = end
        self.bytes_received += len(data)
        if self._unsynced_bytes >= SYNC_INTERVAL_BYTES:
            os.fdatasync(self._fd)
            self._unsynced_bytes = 0
        return end

    def _write_direct(self, offset: int, data: bytes) -> bool:
        """Write an aligned chunk with O_DIRECT; False when it must go through the page cache."""
        n = len(data)
        if self._direct_fd is None or not n or offset % DIRECT_IO_ALIGN or n % DIRECT_IO_ALIGN:
            return False
        if self._direct_buf is None or len(self._direct_buf) < n:
            if self._direct_buf is not None:
                self._direct_buf.close()
            # An anonymous mapping is page-aligned, as O_DIRECT requires of the buffer.
            self._direct_buf = mmap.mmap(-1, n)
        self._direct_buf[:n] = data
        try:
            with memoryview(self._direct_buf) as view:
                _pwrite_all(self._direct_fd, view[:n], offset, self.digest)
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise
            # The file system accepted O_DIRECT at open but not for this write.
            self._close_direct()
            return False
        return True

    def _close_direct(self) -> None:
        if self._direct_fd is not None:
            os.close(self._direct_fd)
            self._direct_fd = None
        if self._direct_buf is not None:
            self._direct_buf.close()
            self._direct_buf = None

    def commit(self) -> Path:
        """Verify the digest, fsync and rename into place; return the stored path.

        On a mismatch the partial is deleted and DigestMismatch raised: nothing is stored.
        """
        store, digest = self.store, self.digest
        if self.complete:
            return store.path(digest)
        if self.offset != self.total_size:
            raise BadInput(
                f"upload of sha256:{digest} is incomplete: {self.offset} of {self.total_size} bytes"
            )
        assert self._fd is not None
        with store._lock(digest):
            got = self._sha.hexdigest()
            part = store.partial_path(digest)
            if got != digest:
                self.close()
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(part)
                raise DigestMismatch(
                    f"bytes received do not match sha256:{digest} (they hash to sha256:{got}); "
                    "nothing stored",
                    hint="the file changed during the upload or its digest was computed from "
                    "other bytes; push it again",
                )
            os.fsync(self._fd)
            self.close()
            path = store._publish(part, digest)
        self.complete = True
        return path

    def close(self) -> None:
        """Release the file and the space reserved for it; the partial stays for a later
        resume unless committed."""
        self._close_direct()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._release()

    def __enter__(self) -> Upload:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _hash_fd(fd: int, sha, length: int | None = None) -> int:
    """Feed ``length`` bytes of ``fd`` from offset 0 (all of it when None) to ``sha``; the count."""
    pos = 0
    while length is None or pos < length:
        want = _READ_BYTES if length is None else min(_READ_BYTES, length - pos)
        block = os.pread(fd, want, pos)
        if not block:
            break
        sha.update(block)
        pos += len(block)
    return pos


def _open_direct(path: Path, fd: int) -> int | None:
    """A second, O_DIRECT descriptor of the file open as ``fd``; None where unsupported."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return None
    try:
        dfd = os.open(path, os.O_WRONLY | flag | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None  # e.g. tmpfs on older kernels
    a, b = os.fstat(fd), os.fstat(dfd)
    if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino):
        os.close(dfd)  # the name now points elsewhere; write only through ``fd``
        return None
    return dfd


def _pwrite_all(fd: int, data, offset: int, digest: str) -> None:
    """Write all of ``data`` at ``offset``; on a full disk, cut the file back and raise QuotaExceeded."""
    view = memoryview(data)
    pos = 0
    try:
        while pos < len(view):
            pos += os.pwrite(fd, view[pos:], offset + pos)
    except OSError as e:
        if is_no_space(e):
            # Keep the committed offset meaningful: drop the half-written chunk.
            os.ftruncate(fd, offset)
            raise QuotaExceeded(
                f"device disk is full while storing sha256:{digest}",
                hint="free space on the device, then push again (the upload resumes)",
            ) from e
        raise


class ArtifactStore:
    """Artifacts stored by sha256 digest under ``root`` (``<state>/artifacts``).

    ``max_artifact_bytes`` caps one artifact; ``quota_bytes`` (None: no quota)
    caps everything stored, committed and partial, plus what open uploads declared;
    ``reserve_bytes`` of free disk (the free-space floor) are always kept back.
    Uploads reserve their declared size when they open (:meth:`open_upload`), so
    uploads at once cannot together break either limit.
    """

    def __init__(
        self,
        root: Path,
        max_artifact_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES,
        quota_bytes: int | None = None,
        reserve_bytes: int = DEFAULT_RESERVE_BYTES,
    ):
        self.root = Path(root)
        self.max_artifact_bytes = int(max_artifact_bytes)
        self.quota_bytes = None if quota_bytes is None else int(quota_bytes)
        self.reserve_bytes = int(reserve_bytes)
        self.committed_dir = self.root / "sha256"
        self.partial_dir = self.root / "partial"
        for d in (self.root, self.committed_dir, self.partial_dir):
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Striped locks: bounded memory however many digests pass through.
        self._locks = [threading.Lock() for _ in range(_LOCK_STRIPES)]
        # Space reserved by open uploads: {digest: [declared total, sessions]}.
        self._space_lock = threading.Lock()
        self._reservations: dict[str, list[int]] = {}

    def _lock(self, digest: str) -> threading.Lock:
        return self._locks[int(digest[:4], 16) % _LOCK_STRIPES]

    # -- names ---------------------------------------------------------------

    def committed_path(self, digest: str) -> Path:
        """Where the artifact ``digest`` lives once committed (it may not exist)."""
        return self.committed_dir / validate_digest(digest)

    def partial_path(self, digest: str) -> Path:
        """Where an upload of ``digest`` in progress is written."""
        return self.partial_dir / f"{validate_digest(digest)}.part"

    # -- queries -------------------------------------------------------------

    def has(self, digest: str) -> bool:
        """True when the artifact is committed (verified and stored)."""
        return self.committed_path(digest).is_file()

    def path(self, digest: str) -> Path:
        """The committed artifact's path; BadInput naming the digest when it is absent."""
        p = self.committed_path(digest)
        if not p.is_file():
            raise BadInput(
                f"artifact sha256:{digest} is not on this device; push it first",
                hint="the host pushes artifacts before it qualifies them",
            )
        return p

    def link_bundle(self, dest: Path, files: dict[str, str]) -> None:
        """Lay out committed artifacts under ``dest`` by name (``{name: digest}``).

        ``dest`` must not exist; each name must pass :func:`check_bundle_name`. Files
        are hard links to the store (copies where the file system refuses links),
        never symlinks, so nothing in the bundle leads outside it.
        """
        dest = Path(dest)
        dest.mkdir(mode=0o700, parents=True)
        for name, digest in files.items():
            target = dest / check_bundle_name(name)
            source = self.path(digest)
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            try:
                os.link(source, target)
            except FileExistsError:
                raise BadInput(f"bundle file name {name!r} appears twice") from None
            except OSError:
                import shutil

                shutil.copyfile(source, target)

    def check_intact(self, path: Path, digest: str, name: str) -> None:
        """Hash ``path`` (an artifact as a run uses it, named ``name``) against ``digest``.

        A mismatch means the stored artifact changed at rest (a flipped bit, a hand
        edit): it is removed from the store, so the host's next push sends it again, and
        ArtifactCorrupt names it. The run's report is then ``failed``, never measured.
        """
        sha = hashlib.sha256()
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            size = _hash_fd(fd, sha)
        finally:
            os.close(fd)
        got = sha.hexdigest()
        if got == digest:
            return
        with self._lock(digest), contextlib.suppress(FileNotFoundError):
            os.unlink(self.committed_path(digest))
        raise ArtifactCorrupt(
            f"artifact {name} (sha256:{digest}) is corrupted on the device: its {size} bytes "
            f"hash to sha256:{got}; it was removed from the store and nothing was measured",
            name=name,
            digest=digest,
            actual=got,
            hint="push it again (qualify pushes it) and check the device's storage",
        )

    def committed_offset(self, digest: str) -> int:
        """Bytes held for ``digest``: the full size if committed, else the partial's size (0 if none)."""
        p = self.committed_path(digest)
        try:
            return p.stat().st_size
        except FileNotFoundError:
            pass
        try:
            return self.partial_path(digest).stat().st_size
        except FileNotFoundError:
            return 0

    def stat(self, digest: str) -> dict:
        """``{"digest", "committed_offset", "complete", "partial_path"}`` for one digest."""
        complete = self.has(digest)
        return {
            "digest": digest,
            "committed_offset": self.committed_offset(digest),
            "complete": complete,
            "partial_path": str(self.partial_path(digest)),
        }

    def used_bytes(self) -> int:
        """Bytes held by committed artifacts and partial uploads together."""
        total = 0
        for d in (self.committed_dir, self.partial_dir):
            with os.scandir(d) as it:
                for entry in it:
                    with contextlib.suppress(FileNotFoundError):
                        if entry.is_file(follow_symlinks=False):
                            total += entry.stat(follow_symlinks=False).st_size
        return total

    # -- limits --------------------------------------------------------------

    def _check_size(self, label: str, total_size: int) -> None:
        """Refuse a negative size or one over the per-artifact limit; ``label`` names the artifact."""
        if total_size < 0:
            raise BadInput(f"negative total size {total_size} for {label}")
        if total_size > self.max_artifact_bytes:
            raise QuotaExceeded(
                f"artifact {label} is {total_size} bytes, over this device's limit of "
                f"{self.max_artifact_bytes} bytes",
                hint="raise the agent's artifact size limit, or qualify a smaller model",
            )

    def _reserve(self, digest: str, total_size: int, have_bytes: int) -> None:
        """Reserve room for the rest of an upload, or refuse it (QuotaExceeded); atomic.

        Every open upload holds its declared size until it is committed or closed, so
        uploads opened at once are counted together: against the quota, everything
        stored plus what open uploads declared; against the free disk, what they have
        still to write, with ``reserve_bytes`` kept back. Uploads of one digest share
        one reservation.
        """
        self._check_size(f"sha256:{digest}", total_size)
        with self._space_lock:
            held = self._reservations.get(digest)
            if held is not None:
                held[1] += 1  # the same bytes: a second session of one digest needs no more
                return
            sizes = self._partial_sizes()
            others_declared = sum(
                max(total - sizes.get(d, 0), 0) for d, (total, _) in self._reservations.items()
            )
            need = total_size - have_bytes
            if self.quota_bytes is not None:
                used = self.used_bytes()
                if used + others_declared + need > self.quota_bytes:
                    in_flight = f", {others_declared} more reserved by uploads in progress"
                    raise QuotaExceeded(
                        f"storing sha256:{digest} ({total_size} bytes) would exceed the artifact "
                        f"quota: {used} of {self.quota_bytes} bytes used"
                        + (in_flight if others_declared else ""),
                        hint="remove old artifacts from the device's store or raise its quota",
                    )
            st = os.statvfs(self.root)
            room = st.f_bavail * st.f_frsize - self.reserve_bytes - others_declared
            if need > room:
                raise QuotaExceeded(
                    f"not enough disk on the device for sha256:{digest}: {need} bytes needed, "
                    f"{max(room, 0)} available (keeping {self.reserve_bytes} free"
                    + (
                        f", {others_declared} reserved by uploads in progress"
                        if others_declared
                        else ""
                    )
                    + ")",
                    hint="free space on the device",
                )
            self._reservations[digest] = [total_size, 1]

    def _unreserve(self, digest: str) -> None:
        with self._space_lock:
            held = self._reservations.get(digest)
            if held is not None:
                held[1] -= 1
                if held[1] <= 0:
                    del self._reservations[digest]

    def reserved_bytes(self) -> int:
        """Bytes open uploads declared and have not written yet."""
        with self._space_lock:
            sizes = self._partial_sizes()
            return sum(
                max(total - sizes.get(d, 0), 0) for d, (total, _) in self._reservations.items()
            )

    def _partial_sizes(self) -> dict[str, int]:
        """Size of each reserved digest's partial file (0 when it has none yet)."""
        sizes = {}
        for d in self._reservations:
            try:
                sizes[d] = os.stat(self.partial_dir / f"{d}.part", follow_symlinks=False).st_size
            except FileNotFoundError:
                sizes[d] = 0
        return sizes

    # -- writing -------------------------------------------------------------

    def open_upload(self, digest: str, total_size: int) -> Upload:
        """Start (or resume) an upload session, reserving its declared size against the size
        limit, the quota and the free disk (QuotaExceeded, and no partial file, when refused)."""
        validate_digest(digest)
        self._check_size(f"sha256:{digest}", total_size)
        upload = Upload(self, digest, int(total_size))
        upload._open()
        return upload

    def commit(self, digest: str) -> Path:
        """Hash the partial upload; store it under its digest if it matches.

        A mismatch deletes the partial and raises DigestMismatch (nothing stored);
        a missing partial raises BadInput. Committing an artifact already stored
        returns its path.
        """
        validate_digest(digest)
        with self._lock(digest):
            if self.has(digest):
                return self.committed_path(digest)
            part = self.partial_path(digest)
            try:
                fd = os.open(part, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except FileNotFoundError:
                raise BadInput(
                    f"no upload of sha256:{digest} to commit",
                    hint=f"upload the artifact to {part} first",
                ) from None
            try:
                size = os.fstat(fd).st_size
                if size > self.max_artifact_bytes:
                    os.unlink(part)
                    self._check_size(f"sha256:{digest}", size)
                sha = hashlib.sha256()
                _hash_fd(fd, sha)
                got = sha.hexdigest()
                if got != digest:
                    os.unlink(part)
                    raise DigestMismatch(
                        f"uploaded bytes do not match sha256:{digest} (they hash to "
                        f"sha256:{got}, {size} bytes); nothing stored",
                        hint="upload the artifact again",
                    )
                # Another process (SFTP) may have written the partial: make it durable first.
                os.fsync(fd)
            finally:
                os.close(fd)
            return self._publish(part, digest)

    def _publish(self, part: Path, digest: str) -> Path:
        """Rename a verified partial to its digest name, durably. Caller holds the digest lock."""
        final = self.committed_path(digest)
        os.chmod(part, 0o444)
        os.rename(part, final)
        fsync_dir(self.committed_dir)
        return final

    def remove_stale_partials(
        self, max_age_s: float = DEFAULT_PARTIAL_MAX_AGE_S, now_s: float | None = None
    ) -> list[str]:
        """Delete partial uploads untouched for ``max_age_s``; return their names.

        Ages come from the device clock, which may have been wrong (a board without
        RTC boots in 1970): a partial stamped before ``clock.CLOCK_FLOOR_UNIX`` or in
        the future has no known age, so its age starts now; while the clock itself
        reads before the floor, nothing is removed.
        """
        from ..clock import CLOCK_FLOOR_UNIX

        now = time.time() if now_s is None else now_s
        if now < CLOCK_FLOOR_UNIX:
            return []
        cutoff = now - max_age_s
        removed = []
        with os.scandir(self.partial_dir) as it:
            for entry in it:
                with contextlib.suppress(FileNotFoundError):
                    mtime = entry.stat(follow_symlinks=False).st_mtime
                    if mtime < CLOCK_FLOOR_UNIX or mtime > now + 86_400:
                        os.utime(entry.path, (now, now))
                    elif mtime < cutoff:
                        os.unlink(entry.path)
                        removed.append(entry.name)
        return removed


def store_main(argv: list[str], state_dir: Path) -> int:
    """``edgequal-agent store stat DIGEST`` / ``store commit DIGEST``: one JSON line on stdout.

    Used by the SSH transport around an SFTP upload into the ``partial_path``
    that ``stat`` prints. Returns the exit code: 0, or 2 with one line on stderr.
    """
    usage = "usage: edgequal-agent store {stat|commit} DIGEST"
    if len(argv) != 2 or argv[0] not in ("stat", "commit"):
        print(usage, file=sys.stderr)
        return 2
    command, digest = argv
    try:
        validate_digest(digest)
        from ..config import read_settings

        limits = read_settings(Path(state_dir)).store_options()
        store = ArtifactStore(Path(state_dir) / "artifacts", **limits)
        if command == "stat":
            result = store.stat(digest)
        else:
            path = store.commit(digest)
            result = {"digest": digest, "size": path.stat().st_size, "complete": True}
    except AgentError as e:
        line = str(e) + (f" ({e.hint})" if e.hint else "")
        print(f"edgequal-agent store {command}: {line}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"edgequal-agent store {command}: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result, sort_keys=True))
    return 0
