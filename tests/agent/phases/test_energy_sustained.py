"""Energy per inference end to end: a real sustained run on a tree whose rail draws a known power.

A thread plays the board's power monitor: its hwmon ``power1_input`` reads 1.5 W while
no worker runs and 4.5 W while one does, so every figure the run reports has an
exact expected value. The agent code is the production path (``measure_sustained``).
"""

from __future__ import annotations

import os
import threading

import numpy as np
import psutil
import pytest
from edgequal.contract.plan import make_plan

IDLE_W, BUSY_W = 1.5, 4.5


class RailPlayer:
    """Writes the rail's microwatts every 20 ms: busy while a measurement worker of this
    process runs (other children, such as a session's sshd, draw nothing)."""

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
            self._write(BUSY_W if self._worker_runs(me) else IDLE_W)

    @staticmethod
    def _worker_runs(me: psutil.Process) -> bool:
        for child in me.children():
            try:
                if "edgequal.agent.worker" in child.cmdline():
                    return True
            except psutil.Error:  # gone meanwhile
                pass
        return False

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._halt.set()
        self._thread.join()


@pytest.mark.slow
def test_energy_per_inference_matches_the_power_drawn(example_models, tmp_path, sustain):
    root = tmp_path / "board"
    with RailPlayer(root):
        plan = make_plan(
            "quick", threads=1, sustain_s=4.0, window_s=1.0, cooldown=False, idle_power_s=1.0
        )
        result = sustain(example_models["classifier"], plan, root)
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
    # The summary is the median over the full windows, the first and last among them: on a
    # busy machine those hold idle samples too (the worker starting, the loop ending), so
    # the median is asked of the windows themselves, not of the busy rail.
    full = [w["energy"]["power_w"] for w in result["windows_detail"] if not w["partial"]]
    assert power["summary"]["power_w_median"] == pytest.approx(float(np.median(full)), rel=1e-6)
    assert IDLE_W < power["summary"]["power_w_median"] <= BUSY_W


@pytest.mark.slow
def test_a_board_without_rails_reports_power_absent(example_models, tmp_path, sustain):
    plan = make_plan("quick", threads=1, sustain_s=1.0, window_s=1.0, cooldown=False)
    result = sustain(example_models["micro"], plan, tmp_path)
    assert result["power"]["present"] is False
    assert "no readable power rail" in result["power"]["reason"]
    assert all("energy" not in w for w in result["windows_detail"])


@pytest.mark.parametrize(
    ("rails", "total_from", "sources"),
    [("hwmon", "ina226/power1", ["hwmon"]), ("ina3221", "VDD_IN", ["ina3221"])],
)
def test_the_emulator_rails_read_as_the_power_it_draws(
    device_emulator, tmp_path, rails, total_from, sources
):
    from edgequal.agent.probes.power import PowerProbe

    emu = device_emulator.DeviceEmulator(
        tmp_path, os.getpid(), rails=rails, idle_w=2.0, w_per_cpu=3.0
    )
    probe = PowerProbe.open(tmp_path)
    assert probe.describe()["sources"] == sources
    assert probe.read()["total_w"] == pytest.approx(2.0, abs=1e-5)
    emu.cpus_in_use = 1.5  # what a tick sets from the watched processes' CPU time
    emu._write_state()
    reading = probe.read()
    assert reading["total_w"] == pytest.approx(2.0 + 3.0 * 1.5, abs=1e-5)
    assert reading["total_from"] == total_from
    if rails == "ina3221":  # the CPU and SoC rails are inside VDD_IN, never added to it
        assert reading["rails_w"]["VDD_CPU_GPU_CV"] == pytest.approx(4.5 + 0.5, abs=1e-5)
        assert reading["rails_w"]["VDD_SOC"] == pytest.approx(0.5, abs=1e-5)


def _drawn_j(log: list[dict], t0: float, t1: float) -> float:
    """Joules the emulator drew over [t0, t1]: its rails hold each tick's watts until the next."""
    joules = 0.0
    for tick, after in zip(log, log[1:]):
        a, b = max(t0, tick["t_monotonic"]), min(t1, after["t_monotonic"])
        if b > a:
            joules += tick["power_w"] * (b - a)
    return joules


@pytest.mark.slow
def test_energy_on_the_emulator_follows_the_workers_cpu(emulated_rail_run):
    """A real sustained run on the emulator (the shared run of tests/conftest.py), whose
    INA3221 rails draw 1.5 W at rest and 4 W more per CPU the worker uses. Each window's
    reported watts and mJ per inference agree with what the emulator's log says it drew,
    within the sampling error: the agent reads the rails once a second, so its figure lies
    within the range of watts the emulator drew over the samples that bracket the window,
    whatever else the machine runs."""
    result, emu = emulated_rail_run
    idle_w, w_per_cpu, interval_s = emu.idle_w, emu.w_per_cpu, 1.0
    assert (emu.rails, idle_w, w_per_cpu) == ("ina3221", 1.5, 4.0)
    power = result["power"]
    assert power["present"] and power["total_from"] == "VDD_IN"
    log = emu.log
    # Idle was measured before the worker loaded: within what the emulator drew then
    # (idle_w plus whatever else this process's children used; nothing, in a lone run).
    before = [t["power_w"] for t in log if t["t_monotonic"] <= result["loop_started_monotonic_s"]]
    assert min(before) - 1e-6 <= power["idle"]["watts"] <= max(before) + 1e-6
    assert min(before) == pytest.approx(idle_w, abs=0.05 * w_per_cpu)
    inner = [w for w in result["windows_detail"] if not w["partial"]][1:-1]
    assert len(inner) >= 2
    drawn_w = []
    for w in inner:
        e, span = w["energy"], w["t1"] - w["t0"]
        drawn = _drawn_j(log, w["t0"], w["t1"]) / span
        drawn_w.append(drawn)
        # Every sample the agent integrated read some tick's watts within the bracket.
        around = [
            t["power_w"]
            for t in log
            if w["t0"] - interval_s - emu.period_s <= t["t_monotonic"] <= w["t1"] + interval_s
        ]
        lo, hi = min(around), max(around)
        assert lo - 1e-6 <= e["power_w"] <= hi + 1e-6, (e["power_w"], lo, hi)
        assert lo - 1e-6 <= drawn <= hi + 1e-6
        # mJ per inference is the window's joules over its inferences, as the emulator drew
        # them, within that same error.
        error_mj = (hi - lo) * span / w["count"] * 1e3
        assert abs(e["mj_per_inference"] - drawn * span / w["count"] * 1e3) <= error_mj + 1e-6
        above = e["mj_per_inference_above_idle"]
        expect_above = (drawn - power["idle"]["watts"]) * span / w["count"] * 1e3
        assert abs(above - expect_above) <= error_mj + 1e-6
    # The worker drew power: the emulator saw it use CPU in these windows.
    assert sum(drawn_w) / len(drawn_w) > idle_w + 0.2 * w_per_cpu
    assert sum(drawn_w) / len(drawn_w) > power["idle"]["watts"]
