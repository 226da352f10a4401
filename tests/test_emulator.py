"""The device emulator: heats with a real child's CPU use, throttles it from outside, cools at rest."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from edgequal.agent.measure.throttle import throttle_reasons
from edgequal.agent.probes.cpufreq import read_cpufreq
from edgequal.agent.probes.fingerprint import fingerprint
from edgequal.agent.probes.telemetry import TelemetrySampler
from edgequal.agent.probes.thermal import read_thermal
from edgequal.host.examples import device_emulator as emulator

# Starts real processes (agents, sshd, the emulator) for seconds each: the fast loop skips it.
pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "device_emulator.py"

# Busy until the flag file exists, then idle: a worker under load, then at rest.
CHILD = (
    "import os, sys, time\n"
    "flag = sys.argv[1]\n"
    "while not os.path.exists(flag):\n"
    "    pass\n"
    "while True:\n"
    "    time.sleep(0.05)\n"
)


def _cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def _wait_for(pred, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def test_newton_step_hand_computed():
    # 40 + 20 * e^-1 = 47.3576
    assert emulator.newton_step(60.0, 40.0, 0.1, 10.0, 0.0) == pytest.approx(47.35759, abs=1e-4)
    assert emulator.newton_step(60.0, 40.0, 0.1, 10.0, 2.0) == pytest.approx(49.35759, abs=1e-4)
    assert emulator.newton_step(40.0, 40.0, 0.1, 1.0, 0.8) == pytest.approx(40.8)


def _runnable_s(pid: int) -> float:
    """Seconds the process ran or waited to run (``/proc/PID/schedstat``): not stopped, not asleep."""
    run_ns, wait_ns, _ = Path(f"/proc/{pid}/schedstat").read_text().split()
    return (int(run_ns) + int(wait_ns)) / 1e9


def _runnable_share(pid: int, seconds: float) -> float:
    """The share of ``seconds`` of wall time the process was runnable (it never sleeps)."""
    r0, t0 = _runnable_s(pid), time.monotonic()
    time.sleep(seconds)
    return (_runnable_s(pid) - r0) / (time.monotonic() - t0)


def test_heats_trips_throttles_cools_and_releases(tmp_path):
    root = tmp_path / "board"
    flag = tmp_path / "rest"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(flag)])
    proc = psutil.Process(child.pid)
    # 50 °C per CPU second against Newton cooling at 0.1/s: the trip (12 °C up) comes
    # after about a quarter of a CPU second of the child's work however busy the machine
    # is, as long as the child gets more than 2.4 % of a CPU (the level it tends to is
    # 40 + 500 × its share of a CPU).
    emu = emulator.DeviceEmulator(
        root,
        os.getpid(),
        ambient_c=40.0,
        trip_c=52.0,
        heat_c_per_cpu_s=50.0,
        cool_rate=0.1,
        throttle_duty=0.5,
        period_s=0.1,
    )
    try:
        # The tree exists before start and the agent's probes read it as a board.
        t = read_thermal(root)
        assert t["authoritative_temp_c"] == 40.0
        assert (t["trip_c"], t["critical_c"]) == (52.0, 77.0)
        assert fingerprint(root)["board_model"] == "edgequal emulated board"
        assert read_cpufreq(root)["policies"]["policy0"]["cur_khz"] == 1_500_000

        # Free, the busy child is runnable all the time (running or waiting for a CPU).
        assert _runnable_share(child.pid, 0.5) > 0.9
        emu.start()
        c0 = _cpu_s(proc)
        # The trip is awaited in the child's CPU time, not in wall time: a starved child
        # heats its board later, not less per unit of work. The wall bound only catches a hang.
        deadline = time.monotonic() + 120.0
        while emu.trip_time_s is None and time.monotonic() < deadline:
            assert _cpu_s(proc) - c0 < 1.0, ("no trip after a CPU second", emu.log[-1])
            time.sleep(0.02)
        assert emu.trip_time_s is not None, emu.log[-1]
        temps = [e["temp_c"] for e in emu.log]
        first_hot = next(e["t_s"] for e in emu.log if e["temp_c"] >= 52.0)
        assert emu.trip_time_s == pytest.approx(first_hot, abs=0.001)
        # The board starts at ambient: its first entry (t = 0, written by start()) holds
        # only the heat of what the child ran between start()'s two reads of its CPU
        # (20 ms of it, 1 °C, where a busy machine preempted this process in between).
        first = emu.log[0]
        assert first["t_s"] == 0.0 and first["temp_c"] < 52.0
        assert first["temp_c"] == pytest.approx(40.0 + 50.0 * first["cpu_s"], abs=0.01)
        assert temps[-1] >= 52.0
        # The heat came from the child's work: 50 °C per CPU second it used.
        assert sum(e["cpu_s"] for e in emu.log) * 50.0 >= 12.0

        # Throttled: the child is stopped from outside for about half of each period, so
        # it is found stopped about half the time and is runnable about half the time
        # (its own schedstat: whatever else the machine runs, a stopped process neither
        # runs nor waits for a CPU). The emulator held the stops for half the time.
        s1, t1 = emu.stopped_s, time.monotonic()
        r1 = _runnable_s(child.pid)
        states = []
        while time.monotonic() - t1 < 1.5:
            states.append(proc.status() == psutil.STATUS_STOPPED)
            time.sleep(0.007)
        span = time.monotonic() - t1
        runnable_share = (_runnable_s(child.pid) - r1) / span
        held_share = (emu.stopped_s - s1) / span
        stopped_share = sum(states) / len(states)
        assert 0.2 < stopped_share < 0.8, stopped_share
        assert 0.3 < held_share <= 0.6, held_share
        # A stopped process that waited for a CPU stops only once it runs again, so on a
        # busy machine it stays runnable a little longer than the emulator's stop.
        assert 0.2 < runnable_share < 0.8, (runnable_share, held_share)

        # What the agent's probes see: temperature past the trip, the effective clock
        # lowered while the requested one is not, the cpufreq cooling device engaged.
        assert emu.throttling
        assert read_thermal(root)["authoritative_temp_c"] >= 50.0
        policy = read_cpufreq(root)["policies"]["policy0"]
        assert policy["cur_khz"] == 750_000 and policy["scaling_cur_khz"] == 1_500_000
        sample = TelemetrySampler(root).sample_once()
        assert sample["clocks_khz"] == {"policy0": 750_000}
        assert sample["cooling_states"] == {"cooling_device0": 1}
        reasons = throttle_reasons(sample, trip_c=52.0, nominal_khz=1_500_000)
        assert {"clock_drop", "cooling_device"} <= set(reasons)

        # At rest it cools toward ambient (Newton).
        flag.touch()
        time.sleep(0.3)
        peak_c, c2, ticks = emu.temp_c, _cpu_s(proc), len(emu.log)
        time.sleep(1.5)
        # The child is idle (its CPU time counts in 10 ms clock ticks).
        assert _cpu_s(proc) - c2 < 0.05
        # From about 12 °C above ambient or more, 1.5 s at 0.1/s cool it by 1.6 °C or more,
        # less what the CPU the emulator measured at rest heated it.
        rest_heat_c = 50.0 * sum(e["cpu_s"] for e in emu.log[ticks:])
        assert emu.temp_c < peak_c - 1.5 + rest_heat_c, (peak_c, rest_heat_c, emu.log[-3:])

        # stop() leaves nothing stopped, even mid duty cycle.
        emu.stop()
        assert not emu._stopped
        time.sleep(0.05)
        assert all(proc.status() != psutil.STATUS_STOPPED for _ in range(5))
    finally:
        emu.stop()
        child.kill()
        child.wait(timeout=5)


def test_cools_from_a_hot_start_without_load(tmp_path):
    with emulator.DeviceEmulator(
        tmp_path,
        os.getpid(),
        ambient_c=30.0,
        trip_c=60.0,
        start_c=61.0,
        cool_rate=1.0,
        period_s=0.05,
    ) as emu:
        assert _wait_for(lambda: emu.trip_time_s is not None, 2.0)
        assert emu.trip_time_s < 0.2
        # Cools below trip - hysteresis (58 °C) within a second at rate 1/s, then stops throttling.
        assert _wait_for(lambda: not emu.throttling, 2.0)
    assert emu.temp_c < 58.0
    assert read_thermal(tmp_path)["authoritative_temp_c"] == pytest.approx(emu.temp_c, abs=0.001)
    assert read_cpufreq(tmp_path)["policies"]["policy0"]["cur_khz"] == 1_500_000


def test_cli_runs_for_a_duration(tmp_path):
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        out = subprocess.run(
            [
                sys.executable,
                str(SCRIPT),
                "--root",
                str(tmp_path / "b"),
                "--watch-pid",
                str(idle.pid),
                "--duration-s",
                "1",
            ],
            capture_output=True,
            text=True,
            timeout=20,
        )
    finally:
        idle.kill()
        idle.wait(timeout=5)
    assert out.returncode == 0, out.stderr
    assert "temp= 40.0C" in out.stdout
    assert (tmp_path / "b/sys/class/thermal/thermal_zone0/temp").read_text() == "40000\n"
    bad = subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(tmp_path / "c"), "--watch-pid", "999999999"],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert bad.returncode == 2 and "no process" in bad.stderr
