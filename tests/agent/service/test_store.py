"""ArtifactStore: digest-only names, exact-offset appends, verify-then-rename, limits."""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import time
from pathlib import Path

import pytest
from edgequal.agent.service.store import ArtifactStore, store_main
from edgequal.contract.artifacts import validate_digest
from edgequal.contract.errors import BadInput, DigestMismatch, QuotaExceeded

DATA = bytes(range(256)) * 40  # 10,240 bytes
DIGEST = hashlib.sha256(DATA).hexdigest()
EMPTY_DIGEST = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


@pytest.fixture
def store(tmp_path):
    return ArtifactStore(tmp_path / "artifacts")


def _append(store: ArtifactStore, digest: str, offset: int, data: bytes, total: int) -> int:
    """One chunk through an upload session, as a Push or a resumed Push writes it."""
    with store.open_upload(digest, total) as upload:
        return upload.write(offset, data)


def _files(store: ArtifactStore) -> tuple[list[str], list[str]]:
    return sorted(os.listdir(store.committed_dir)), sorted(os.listdir(store.partial_dir))


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "sha256:" + DIGEST,
        DIGEST.upper(),
        DIGEST[:-1],
        DIGEST + "0",
        "../" + DIGEST[3:],
        "g" * 64,
        None,
        64,
    ],
)
def test_digest_format_is_enforced(store, bad):
    with pytest.raises(BadInput, match="not a sha256 digest"):
        validate_digest(bad)
    with pytest.raises(BadInput):
        store.committed_offset(bad)
    assert _files(store) == ([], [])


def test_empty_digest_constant_is_sha256_of_nothing():
    assert hashlib.sha256(b"").hexdigest() == EMPTY_DIGEST


def test_chunked_write_commit_stores_by_digest(store):
    assert store.committed_offset(DIGEST) == 0
    assert _append(store, DIGEST, 0, DATA[:4096], len(DATA)) == 4096
    assert store.committed_offset(DIGEST) == 4096
    assert not store.has(DIGEST)
    assert _append(store, DIGEST, 4096, DATA[4096:], len(DATA)) == len(DATA)
    path = store.commit(DIGEST)
    assert path == store.committed_dir / DIGEST
    assert path.read_bytes() == DATA
    assert store.has(DIGEST) and store.path(DIGEST) == path
    assert store.committed_offset(DIGEST) == len(DATA)
    # Read-only once committed; the partial is gone.
    assert stat.S_IMODE(path.stat().st_mode) == 0o444
    assert _files(store) == ([DIGEST], [])


def test_chunk_at_wrong_offset_is_rejected_and_changes_nothing(store):
    _append(store, DIGEST, 0, DATA[:1000], len(DATA))
    with pytest.raises(BadInput, match="chunk at offset 2000, expected 1000"):
        _append(store, DIGEST, 2000, DATA[2000:3000], len(DATA))
    with pytest.raises(BadInput, match="chunk at offset 0, expected 1000"):
        _append(store, DIGEST, 0, DATA[:1000], len(DATA))
    assert store.committed_offset(DIGEST) == 1000


def test_chunk_past_declared_total_is_rejected(store):
    with pytest.raises(BadInput, match="past the declared total size 100"):
        _append(store, DIGEST, 0, DATA[:200], 100)
    assert store.committed_offset(DIGEST) == 0


def test_mismatching_bytes_are_deleted_nothing_stored(store):
    wrong = bytearray(DATA)
    wrong[5000] ^= 0x01
    _append(store, DIGEST, 0, bytes(wrong), len(DATA))
    with pytest.raises(DigestMismatch, match=f"do not match sha256:{DIGEST}"):
        store.commit(DIGEST)
    assert not store.has(DIGEST)
    assert _files(store) == ([], [])
    assert store.committed_offset(DIGEST) == 0


def test_path_of_absent_artifact_names_digest_and_says_push(store):
    with pytest.raises(BadInput, match=f"sha256:{DIGEST} is not on this device; push it first"):
        store.path(DIGEST)


def test_commit_without_upload_is_bad_input(store):
    with pytest.raises(BadInput, match="no upload"):
        store.commit(DIGEST)


def test_size_limit(tmp_path):
    store = ArtifactStore(tmp_path / "a", max_artifact_bytes=1000)
    with pytest.raises(QuotaExceeded, match="over this device's limit of 1000 bytes"):
        _append(store, DIGEST, 0, DATA[:10], len(DATA))
    with pytest.raises(QuotaExceeded):
        store.open_upload(DIGEST, len(DATA))
    assert _files(store) == ([], [])


def test_quota_counts_committed_and_partial(tmp_path):
    store = ArtifactStore(tmp_path / "a", quota_bytes=15000)
    _append(store, DIGEST, 0, DATA, len(DATA))
    store.commit(DIGEST)  # 10,240 of 15,000 used
    other = os.urandom(6000)
    other_digest = hashlib.sha256(other).hexdigest()
    with pytest.raises(QuotaExceeded, match="10240 of 15000 bytes used"):
        _append(store, other_digest, 0, other[:100], len(other))
    small = os.urandom(4000)
    small_digest = hashlib.sha256(small).hexdigest()
    _append(store, small_digest, 0, small, len(small))
    assert store.used_bytes() == len(DATA) + len(small)


def test_free_disk_reserve_is_kept(tmp_path):
    st = os.statvfs(tmp_path)
    free = st.f_bavail * st.f_frsize
    store = ArtifactStore(
        tmp_path / "a", reserve_bytes=free + 2**30
    )  # other processes free disk too
    with pytest.raises(QuotaExceeded, match="not enough disk on the device"):
        _append(store, DIGEST, 0, DATA[:10], len(DATA))


def test_upload_session_hashes_as_it_goes_and_resumes(store):
    with store.open_upload(DIGEST, len(DATA)) as up:
        assert up.offset == 0
        up.write(0, DATA[:3000])
        assert up.bytes_received == 3000
    # A later session picks up at the committed offset (prefix hashed from disk).
    with store.open_upload(DIGEST, len(DATA)) as up:
        assert up.offset == 3000
        with pytest.raises(BadInput, match="chunk at offset 0, expected 3000"):
            up.write(0, DATA[:3000])
        up.write(3000, DATA[3000:])
        assert up.bytes_received == len(DATA) - 3000
        path = up.commit()
    assert path.read_bytes() == DATA
    with store.open_upload(DIGEST, len(DATA)) as up:
        assert up.complete and up.offset == len(DATA)


def test_upload_session_detects_a_second_writer(store):
    a = store.open_upload(DIGEST, len(DATA))
    b = store.open_upload(DIGEST, len(DATA))
    a.write(0, DATA[:100])
    with pytest.raises(BadInput, match="another upload of the same artifact"):
        b.write(0, DATA[:100])
    a.write(100, DATA[100:])
    a.commit()
    b.close()
    assert store.path(DIGEST).read_bytes() == DATA


def test_upload_session_mismatch_stores_nothing(store):
    up = store.open_upload(DIGEST, len(DATA))
    up.write(0, DATA[::-1])
    with pytest.raises(DigestMismatch, match="nothing stored"):
        up.commit()
    assert _files(store) == ([], [])


def test_oversized_stale_partial_is_restarted(store):
    store.partial_path(DIGEST).write_bytes(b"x" * (len(DATA) + 5))
    with store.open_upload(DIGEST, len(DATA)) as up:
        assert up.offset == 0
        up.write(0, DATA)
        up.commit()
    assert store.path(DIGEST).read_bytes() == DATA


def test_zero_byte_artifact(store):
    with store.open_upload(EMPTY_DIGEST, 0) as up:
        assert up.commit().read_bytes() == b""


def test_partial_symlink_is_not_followed(store, tmp_path):
    target = tmp_path / "elsewhere"
    target.write_bytes(b"")
    os.symlink(target, store.partial_path(DIGEST))
    with pytest.raises(OSError):
        _append(store, DIGEST, 0, DATA[:10], len(DATA))
    assert target.read_bytes() == b""


def test_remove_stale_partials(store):
    _append(store, DIGEST, 0, DATA[:10], len(DATA))
    old = store.partial_path(DIGEST)
    two_hours_ago = time.time() - 7200  # a real date: one stamped in 1970 has no known age
    os.utime(old, (two_hours_ago, two_hours_ago))
    assert store.remove_stale_partials(max_age_s=3600) == [old.name]
    assert store.committed_offset(DIGEST) == 0


def test_store_main_stat_then_sftp_style_upload_then_commit(tmp_path, capsys):
    state = tmp_path / "state"
    assert store_main(["stat", DIGEST], state) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["committed_offset"] == 0 and out["complete"] is False
    # What the SSH transport does over SFTP: write the partial path it was told.
    with open(out["partial_path"], "wb") as f:
        f.write(DATA)
    assert store_main(["commit", DIGEST], state) == 0
    assert json.loads(capsys.readouterr().out) == {
        "digest": DIGEST,
        "size": len(DATA),
        "complete": True,
    }
    assert store_main(["stat", DIGEST], state) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["committed_offset"], out["complete"]) == (len(DATA), True)
    assert (state / "artifacts" / "sha256" / DIGEST).read_bytes() == DATA


def test_store_main_errors_are_one_line_exit_2(tmp_path, capsys):
    state = tmp_path / "state"
    assert store_main(["commit", "nothex"], state) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a sha256 digest" in err
    ArtifactStore(state / "artifacts").partial_path(DIGEST).write_bytes(b"tampered")
    assert store_main(["commit", DIGEST], state) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"do not match sha256:{DIGEST}" in err
    assert store_main(["frobnicate", DIGEST], state) == 2
    assert "usage" in capsys.readouterr().err


def test_aligned_chunks_and_unaligned_tail_are_stored_exactly(store):
    # Whole 64 KiB chunks take the O_DIRECT path where the file system has it;
    # the 1,000-byte tail and a resumed session go through the page cache.
    data = os.urandom(5 * 65536 + 1000)
    digest = hashlib.sha256(data).hexdigest()
    with store.open_upload(digest, len(data)) as up:
        for off in range(0, 3 * 65536, 65536):
            up.write(off, data[off : off + 65536])
    assert store.committed_offset(digest) == 3 * 65536
    with store.open_upload(digest, len(data)) as up:
        assert up.offset == 3 * 65536
        off = up.offset
        while off < len(data):
            off = up.write(off, data[off : off + 65536])
        path = up.commit()
    assert path.read_bytes() == data
    assert _files(store) == ([digest], [])


def test_periodic_sync_keeps_unsynced_bytes_bounded(store, monkeypatch):
    import edgequal.agent.service.store as store_mod

    monkeypatch.setattr(store_mod, "SYNC_INTERVAL_BYTES", 4096)
    synced = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (synced.append(fd), real(fd)))
    data = os.urandom(12_004)  # 3,001-byte pieces are unaligned: all through the page cache
    digest = hashlib.sha256(data).hexdigest()
    with store.open_upload(digest, len(data)) as up:
        for off in range(0, len(data), 3001):
            up.write(off, data[off : off + 3001])
        up.commit()
    assert len(synced) == 2  # after the 2nd and the 4th piece (6,002 unsynced bytes each)
    assert store.path(digest).read_bytes() == data


# -- space reserved at open: concurrent uploads over gRPC ----------------------------

MIB = 1024 * 1024


def _push_together(port: int, partial_dir: Path, blobs: list[bytes]) -> list:
    """Push ``blobs`` to the agent at once: every upload opens (its first 1 MiB chunk)
    before any sends the rest, as seen in the agent's ``partial_dir``. Returns each
    PushResponse or the RpcError it ended with."""
    import threading

    import grpc
    from edgequal.protos import edgequal_v1_pb2 as pb
    from edgequal.protos import edgequal_v1_pb2_grpc as pb_grpc

    go = threading.Event()

    def chunks(data: bytes):
        digest = hashlib.sha256(data).hexdigest()
        for offset in range(0, len(data), MIB):
            if offset:
                go.wait(30)  # the rest only once every upload was opened or refused
            yield pb.PushChunk(
                digest=digest if not offset else "",
                offset=offset,
                data=data[offset : offset + MIB],
                total_size=len(data) if not offset else 0,
            )

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.AgentStub(channel)
        calls = [stub.Push.future(chunks(b), timeout=60) for b in blobs]
        digests = [hashlib.sha256(b).hexdigest() for b in blobs]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            parts = set(os.listdir(partial_dir))
            if all(c.done() or f"{d}.part" in parts for c, d in zip(calls, digests)):
                break
            time.sleep(0.01)
        go.set()
        results = []
        for call in calls:
            try:
                results.append(call.result())
            except grpc.RpcError as e:
                results.append(e)
    return results


def _refusals(results) -> list[str]:
    import grpc

    out = []
    for r in results:
        if isinstance(r, grpc.RpcError):
            assert r.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, r.details()
            assert dict(r.trailing_metadata())["edgequal-error"] == "QuotaExceeded"
            out.append(r.details())
    return out


@pytest.mark.slow
def test_concurrent_uploads_cannot_exceed_the_quota_set_in_agent_toml(tmp_path, local_agents):
    """Three 3 MiB pushes at once under a 4 MiB quota (agent.toml), the floor off by flag:
    one is stored, two are refused at open and leave no partial file."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "agent.toml").write_text('[store]\nquota = "4MiB"\nmax_artifact = "3MiB"\n')
    agent = local_agents.serve(state, args=["--min-free", "0"])
    try:
        blobs = [os.urandom(3 * MIB) for _ in range(3)]
        results = _push_together(agent.port, state / "artifacts" / "partial", blobs)
        refused = _refusals(results)
        stored = os.listdir(state / "artifacts" / "sha256")
        assert len(stored) == 1 and len(refused) == 2, (stored, refused)
        assert all("would exceed the artifact quota" in r for r in refused)
        assert all("reserved by uploads in progress" in r for r in refused)
        assert os.listdir(state / "artifacts" / "partial") == []
        # The limits are the operator's, and Info says so.
        import grpc
        from edgequal.contract.info import AgentInfo
        from edgequal.protos import edgequal_v1_pb2 as pb
        from edgequal.protos import edgequal_v1_pb2_grpc as pb_grpc

        with grpc.insecure_channel(f"127.0.0.1:{agent.port}") as channel:
            info = pb_grpc.AgentStub(channel).Info(pb.InfoRequest(), timeout=10)
        limits = AgentInfo.from_pb2(info).limits
        assert (limits.quota_bytes, limits.max_artifact_bytes) == (4 * MIB, 3 * MIB)
    finally:
        agent.stop()


def test_concurrent_uploads_keep_the_free_space_floor_of_a_small_disk(tmp_path, mount_tmpfs):
    """A real 16 MiB file system, 4 MiB floor: of three 5 MiB pushes at once two fit."""
    from edgequal.agent.service.server import build_server
    from edgequal.contract.keys import DeviceKey

    disk = mount_tmpfs("16m")
    agent = build_server(
        "127.0.0.1:0",
        tmp_path / "state",
        tmp_path,
        key=DeviceKey.generate(),
        store=ArtifactStore(disk / "artifacts", reserve_bytes=4 * MIB),
    ).start()
    try:
        blobs = [os.urandom(5 * MIB) for _ in range(3)]
        results = _push_together(agent.port, disk / "artifacts" / "partial", blobs)
        refused = _refusals(results)
        assert len(refused) == 1 and "not enough disk on the device" in refused[0]
        assert re.search(
            r"keeping 4194304 free, [0-9]+ reserved by uploads in progress", refused[0]
        )
        assert len(os.listdir(disk / "artifacts" / "sha256")) == 2
        assert os.listdir(disk / "artifacts" / "partial") == []
        st = os.statvfs(disk)
        assert st.f_bavail * st.f_frsize >= 4 * MIB  # the floor held
    finally:
        agent.stop(0)


def test_a_reservation_is_released_on_abort_and_on_commit(tmp_path):
    store = ArtifactStore(tmp_path / "artifacts", quota_bytes=len(DATA) + 100, reserve_bytes=0)
    other = bytes(reversed(DATA))
    other_digest = hashlib.sha256(other).hexdigest()
    upload = store.open_upload(DIGEST, len(DATA))
    upload.write(0, DATA[:1000])
    assert store.reserved_bytes() == len(DATA) - 1000
    with pytest.raises(QuotaExceeded, match="reserved by uploads in progress"):
        store.open_upload(other_digest, len(other))
    assert not store.partial_path(other_digest).exists()
    upload.close()  # an abort: the partial stays for a resume, the reservation goes
    assert store.reserved_bytes() == 0
    # The partial's 1000 bytes still count: another artifact of the same size does not fit.
    with pytest.raises(QuotaExceeded, match="1000 of 10340 bytes used"):
        store.open_upload(other_digest, len(other))
    with store.open_upload(DIGEST, len(DATA)) as resumed:
        resumed.write(1000, DATA[1000:])
        resumed.commit()
    assert store.reserved_bytes() == 0 and store.used_bytes() == len(DATA)
