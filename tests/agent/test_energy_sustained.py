"""Energy per inference end to end: a real sustained run on a tree whose rail draws a known power.

A thread plays the board's power monitor: its hwmon ``power1_input`` reads 1.5 W while
no worker runs and 4.5 W while one does, so every figure the run reports has an
exact expected value. The agent code is the production path (``measure_sustained``).
"""

from __future__ import annotations

import os
import threading

import psutil
import pytest
from edgequal.agent.plan import make_plan
from edgequal.agent.qualification import measure_sustained

IDLE_W, BUSY_W = 1.5, 4.5


class RailPlayer:
    """Writes the rail's microwatts every 20 ms: busy while this process has a child."""

    def __init__(self, root):
        self.hwmon = root / "sys/class/hwmon/hwmon0"
        self.hwmon.mkdir(parents=True)
        (self.hwmon / "name").write_text("ina226\n")
        self._write(IDLE_W)
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _write(self, watts: float) -> None:
        tmp = self.hwmon / ".power1_input"
        tmp.write_text(f"{round(watts * 1e6)}\n")
        os.replace(tmp, self.hwmon / "power1_input")

    def _run(self) -> None:
        me = psutil.Process()
        while not self._halt.wait(0.02):
            self._write(BUSY_W if me.children() else IDLE_W)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._halt.set()
        self._thread.join()


@pytest.mark.slow
def test_energy_per_inference_matches_the_power_drawn(example_models, tmp_path):
    root = tmp_path / "board"
    with RailPlayer(root):
        plan = make_plan(
            "quick", threads=1, sustain_s=6.0, window_s=1.0, cooldown=False, idle_power_s=2.0
        )
        findings: list = []
        result = measure_sustained(
            example_models["classifier"],
            None,
            plan,
            "onnxruntime",
            root,
            lambda e: None,
            threading.Event(),
            findings,
        )
    assert not findings, findings
    power = result["power"]
    assert (
        power["present"]
        and power["sources"] == ["hwmon"]
        and power["total_from"] == "ina226/power1"
    )
    assert power["idle"]["watts"] == pytest.approx(IDLE_W)
    inner = [w for w in result["windows_detail"] if not w["partial"]][1:-1]
    assert len(inner) >= 2
    for w in inner:
        e = w["energy"]
        span = w["t1"] - w["t0"]
        assert e["power_w"] == pytest.approx(BUSY_W, rel=1e-6)
        assert e["mj_per_inference"] == pytest.approx(BUSY_W * span / w["count"] * 1e3, rel=1e-5)
        assert e["mj_per_inference_above_idle"] == pytest.approx(
            (BUSY_W - IDLE_W) * span / w["count"] * 1e3, rel=1e-5
        )
    assert power["summary"]["power_w_median"] == pytest.approx(BUSY_W, rel=1e-3)


@pytest.mark.slow
def test_a_board_without_rails_reports_power_absent(example_models, tmp_path):
    plan = make_plan("quick", threads=1, sustain_s=1.0, window_s=1.0, cooldown=False)
    findings: list = []
    result = measure_sustained(
        example_models["micro"],
        None,
        plan,
        "onnxruntime",
        tmp_path,
        lambda e: None,
        threading.Event(),
        findings,
    )
    assert not findings
    assert result["power"]["present"] is False
    assert "no readable power rail" in result["power"]["reason"]
    assert all("energy" not in w for w in result["windows_detail"])
