"""``history list`` and ``history changes`` on 80- and 120-column screens: no word, run id
or figure broken across lines (a table that cannot hold them prints a block per row), and a
change's culprit named field by field, the model first, under the table."""

from __future__ import annotations

import hashlib
import re

import pytest
from edgequal.agent.run_request import RunRequest, new_run_id
from edgequal.agent.runs import sign_report
from edgequal.cli.main import main as edgequal_main
from edgequal.contract.keys import load_or_create_device_key
from edgequal.contract.plan import Plan
from edgequal.host.devices.trust import KnownDevices
from edgequal.host.present.terminal import sections


@pytest.fixture
def sign(tmp_path):
    """Sign a report as the trusted device 'bench1': p50, status, model file and bytes, the
    golden set's bytes."""
    key = load_or_create_device_key(tmp_path / "device-state")
    KnownDevices().trust("bench1", "grpc://127.0.0.1:1", key.public_key_raw())

    def sign(
        p50_ms,
        status="passed",
        model=("ocr_cls.onnx", b"cls"),
        golden=b"g",
    ):
        request = RunRequest(
            run_id=new_run_id(),
            model_digest=hashlib.sha256(model[1]).hexdigest(),
            golden_digest=hashlib.sha256(golden).hexdigest(),
            plan=Plan.from_json({"preset": "quick", "profile": "generic/linux-x86_64"}),
            nonce="n",
            model_name=model[0],
            golden_name="ocr_cls.golden.npz",
        )
        reason = "other processes took the CPU; re-run on a quiet board"
        measurement = {
            "status": status,
            "reason": reason if status == "inconclusive" else None,
            "fingerprint": {"kernel": "6.1.0", "os_release": "Debian 12", "architecture": "x86_64"},
            "results": {
                "runtime": {"runtime": "onnxruntime", "version": "1.20.0"},
                "latency": {"per_shape": [{"summary": {"p50_ms": p50_ms, "p99_ms": None}}]},
            },
        }
        return sign_report(key, request, measurement)

    return sign


@pytest.fixture(params=[80, 120])
def columns(request, monkeypatch):
    monkeypatch.setattr(sections.console, "width", request.param)
    return request.param


def _record(tmp_path, envelopes) -> str:
    db = f"sqlite:///{tmp_path / 'h.sqlite'}"
    paths = []
    for i, e in enumerate(envelopes):
        paths.append(tmp_path / f"r{i}.json")
        paths[-1].write_bytes(e)
    assert edgequal_main(["history", "record", *map(str, paths), "--db", db]) == 0
    return db


def _whole(out: str, *words: str) -> None:
    """Each of ``words`` is on one line of ``out``, whole."""
    for w in words:
        assert any(w in line for line in out.splitlines()), (w, out)


def test_history_list_breaks_no_word(sign, tmp_path, capsys, columns):
    db = _record(
        tmp_path,
        [
            sign(
                1.25,
            ),
            sign(
                1.5,
                "inconclusive",
            ),
        ],
    )
    capsys.readouterr()
    assert edgequal_main(["history", "list", "--db", db]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= columns, out
    run_ids = re.findall(r"\d{8}T\d{6}Z-[0-9a-f]{8}", out)
    assert len(run_ids) == 2  # each whole on its line
    # The inconclusive run's figures are a dash beside its status (a gap, never a figure).
    _whole(out, "inconclusive", "ocr_cls.onnx", "1.250", "onnxruntime", "1.20.0")
    assert "1.500" not in out
    assert "inconclusiv\n" not in out


def test_history_changes_names_every_culprit_field_and_fits(sign, tmp_path, capsys, columns):
    """A new export of the model with a new golden set, 1 ms → 2 ms: the table names the
    fields (model first), the line under it each with its values; nothing is broken."""
    old, new = ("ocr_cls.onnx", b"cls v1"), ("ocr_cls.onnx", b"cls v2")
    runs = [
        sign(
            1.0 + 0.01 * (i % 3),
            model=old,
            golden=b"g1",
        )
        for i in range(8)
    ]
    runs += [
        sign(
            2.0 + 0.01 * (i % 3),
            model=new,
            golden=b"g2",
        )
        for i in range(8)
    ]
    db = _record(tmp_path, runs)
    capsys.readouterr()
    assert edgequal_main(["history", "changes", "--db", db]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert max(len(line) for line in out.splitlines()) <= columns, out
    digest = {v: hashlib.sha256(v).hexdigest()[:12] for v in (b"cls v1", b"cls v2", b"g1", b"g2")}
    # The table names the culprit's fields, the model first; no value fills the column.
    lines = out.splitlines()
    (at,) = [i for i, line in enumerate(lines) if re.search(r"\bmodel,", line)]
    assert "golden" in lines[at].split("model,")[1] or "golden" in lines[at + 1], out
    assert digest[b"cls v1"] not in out
    # The headline under it names every field with its values, the model first.
    (headline,) = [line for line in captured.err.splitlines() if "changed there:" in line]
    assert headline.split("changed there: ")[1].startswith(
        f"model ocr_cls.onnx sha256 {digest[b'cls v1']} → {digest[b'cls v2']}, "
        f"golden ocr_cls.golden.npz sha256 {digest[b'g1']} → {digest[b'g2']}"
    )
    run_ids = re.findall(r"\d{8}T\d{6}Z-[0-9a-f]{8}", out)
    assert len(run_ids) == 1  # the first run after the change, whole
