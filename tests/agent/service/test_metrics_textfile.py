"""``edgequal-agent serve --metrics-textfile``: the agent's state for node_exporter's textfile
collector, on a real agent; read back with prometheus_client's own parser."""

from __future__ import annotations

import time

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families


def _read_when(path, predicate, timeout_s=20.0) -> dict:
    """The file's families once ``predicate(families)`` holds (the agent rewrites it)."""
    deadline = time.monotonic() + timeout_s
    while True:
        families = {}
        if path.exists():
            families = {f.name: f for f in text_string_to_metric_families(path.read_text())}
        if families and predicate(families):
            return families
        assert time.monotonic() < deadline, f"{path} never showed the state: {families}"
        time.sleep(0.05)


def _value(families, name, **labels):
    [sample] = [s for s in families[name].samples if labels.items() <= s.labels.items()]
    return sample.value


@pytest.mark.slow
def test_agent_textfile_shows_busy_last_status_and_temperatures_at_rest(tmp_path, local_agents):
    import edgequal

    root = tmp_path / "board"
    zone = root / "sys/class/thermal/thermal_zone0"
    zone.mkdir(parents=True)
    (zone / "type").write_text("cpu-thermal\n")
    (zone / "temp").write_text("45000\n")
    state = tmp_path / "state"
    (state / "reports").mkdir(parents=True)
    # A report stored before (the last status of det.onnx), signed as the agent signs.
    from edgequal.contract.keys import DeviceKey
    from edgequal.contract.signing import build_statement, sign_envelope

    predicate = {"nonce": "ab" * 16, "run_id": "20260101T000000Z-aaaaaaaa", "status": "degraded"}
    statement = build_statement(
        [{"name": "det.onnx", "sha256": "cd" * 32}], {**predicate, "reason": "x"}
    )
    stored = state / "reports" / "20260101T000000Z-aaaaaaaa.dsse.json"
    stored.write_bytes(sign_envelope(DeviceKey.generate(), statement))
    textfile = tmp_path / "textfile" / "edgequal.prom"
    args = ["--metrics-textfile", str(textfile), "--metrics-interval", "0.1s"]
    agent = local_agents.serve(state, root=root, args=args)
    try:
        idle = _read_when(textfile, lambda f: "edgequal_agent_temperature_at_rest_celsius" in f)
        assert _value(idle, "edgequal_agent_busy") == 0
        assert (
            _value(idle, "edgequal_agent_temperature_at_rest_celsius", zone="thermal_zone0") == 45.0
        )
        statuses = {
            s.labels["status"]: s.value
            for s in idle["edgequal_agent_last_status"].samples
            if s.labels["model"] == "det.onnx"
        }
        assert statuses == {
            "passed": 0.0, "degraded": 1.0, "failed": 0.0, "inconclusive": 0.0, "incomplete": 0.0
        }  # fmt: skip
        assert "edgequal_agent_run" not in idle

        from edgequal.host.devices.trust import KnownDevices

        KnownDevices().trust("board", agent.address, agent.public_key_raw())
        with edgequal.connect("board") as dev, dev.lease("textfile test", ttl_s=30):
            (zone / "temp").write_text("80000\n")  # heat under load: not a temperature at rest
            busy = _read_when(textfile, lambda f: _value(f, "edgequal_agent_busy") == 1)
            assert (
                _value(busy, "edgequal_agent_temperature_at_rest_celsius", zone="thermal_zone0")
                == 45.0
            )
        rest = _read_when(
            textfile,
            lambda f: (
                _value(f, "edgequal_agent_busy") == 0
                and _value(f, "edgequal_agent_temperature_at_rest_celsius") == 80.0
            ),
        )
        assert _value(rest, "edgequal_agent_info", version=edgequal.contract.__version__) == 1
    finally:
        agent.stop()
    assert [p.name for p in textfile.parent.iterdir()] == ["edgequal.prom"]
