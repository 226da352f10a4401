"""agent/files.py: atomic writes never follow a link planted at their temporary."""

from __future__ import annotations

import os

import pytest
from edgequal.contract.files import write_atomic
from edgequal.contract.openmetrics import write_textfile


@pytest.mark.parametrize("writer", ["write_atomic", "write_textfile"])
def test_a_symlink_planted_at_the_old_temporary_name_is_not_followed(tmp_path, writer):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    target = tmp_path / "out" / "eq.prom"
    target.parent.mkdir()
    # The name the temporary had before: PATH.tmp<pid>, predictable by anyone who can write the directory.
    (target.parent / f"{target.name}.tmp{os.getpid()}").symlink_to(victim)
    for _ in range(3):  # the metrics textfile is rewritten every interval
        if writer == "write_atomic":
            write_atomic(target, b"# EOF\n")
        else:
            write_textfile(target, "# EOF\n")
    assert victim.read_bytes() == b"precious\n"
    assert target.read_bytes() == b"# EOF\n"
    assert not target.is_symlink()
    leftovers = sorted(p.name for p in target.parent.iterdir())
    assert leftovers == ["eq.prom", f"eq.prom.tmp{os.getpid()}"]  # only the planted link remains


def test_the_temporary_is_created_exclusively_and_the_file_keeps_the_umask_mode(
    tmp_path, monkeypatch
):
    opened = []
    real_open = os.open

    def recording_open(path, flags, *args, **kwargs):
        opened.append((os.fspath(path), flags))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", recording_open)
    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "report.json", b"{}")
    finally:
        os.umask(old)
    monkeypatch.undo()
    temporaries = [(p, f) for p, f in opened if p.startswith(str(tmp_path / ".report.json"))]
    assert temporaries, opened
    for _, flags in temporaries:
        assert flags & os.O_EXCL and flags & os.O_CREAT and flags & os.O_NOFOLLOW
    # node_exporter runs as another user: the textfile stays world-readable, as open() made it
    assert (tmp_path / "report.json").stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]
