"""A device emulator: a sysfs tree whose temperature (and power rails) follow a process tree's CPU use.

It lets the agent's real thermal and throttling code run on a machine with no board.
The emulator writes, under ``root``:

- ``sys/class/thermal/thermal_zone0`` (type ``cpu-thermal``): ``temp`` in millidegrees,
  ``trip_point_0`` passive at ``trip_c``, ``trip_point_1`` critical;
- ``sys/class/thermal/cooling_device0`` (type ``cpufreq-cpu0``): ``cur_state`` 1 while throttling;
- ``sys/devices/system/cpu/cpufreq/policy0``: ``scaling_cur_freq`` (the requested clock,
  which stays at the maximum, as on a Raspberry Pi whose firmware throttles),
  ``cpuinfo_cur_freq`` (the effective clock, lowered while throttling), min/max, governor;
- ``sys/devices/system/cpu/{online,present}``, ``proc/device-tree/model``;
- with ``rails="hwmon"``, ``sys/class/hwmon/hwmon0`` (``name`` ina226): ``power1_input``
  in µW; with ``rails="ina3221"``, a Jetson-style INA3221 under
  ``sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon1``: labelled channels ``VDD_IN``
  (the board total), ``VDD_CPU_GPU_CV`` (the CPU's share) and ``VDD_SOC`` (the rest),
  each as ``in<K>_input`` (mV) and ``curr<K>_input`` (mA), as ``agent/probes/power.py``
  reads them. The board draws ``idle_w + w_per_cpu × CPUs in use`` by the watched
  processes over the last period; every tick logs ``power_w`` and its CLOCK_MONOTONIC
  time ``t_monotonic``, so a test can integrate what the emulator drew.

Every ``period_s`` a thread measures the CPU time used by all descendants of
``watch_pid`` (the agent's workers; one that ended between two ticks through the time
``watch_pid`` gained when it reaped it), heats the zone by ``heat_c_per_cpu_s`` per CPU
second and cools it toward ``ambient_c`` by Newton's law (rate ``cool_rate`` per
second). At or above ``trip_c`` it throttles every descendant from outside with a
SIGSTOP/SIGCONT duty cycle (stopped for ``throttle_duty`` of each period) until the
temperature falls ``hysteresis_c`` below the trip. The heat follows the CPU work done,
not the time passed: a worker that other processes starve heats its board less. The
duty cycle holds on a busy machine too: the stop comes first and the tick's work is
done while the processes are stopped, and each running part is measured against the
stop actually held (``stopped_s`` adds those up). The agent is simply pointed at
``root`` (``--root`` / ``EDGEQUAL_ROOT``); it has no code for the emulator.

It is part of the installed package because ``edgequal demo`` runs its sustained phase on
it (``demo.py``). Use from tests or code::

    from edgequal.host.examples.device_emulator import DeviceEmulator
    with DeviceEmulator(tmp_path / "root", os.getpid(), trip_c=55.0) as emu: ...

or from a shell, next to an agent (``scripts/device_emulator.py`` runs this module)::

    python scripts/device_emulator.py --root /tmp/board --watch-pid $(pgrep -n edgequal-agent)
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path

import psutil


def newton_step(
    temp_c: float, ambient_c: float, cool_rate: float, dt_s: float, heat_c: float
) -> float:
    """One step of the thermal model: exact Newton cooling over ``dt_s``, plus ``heat_c`` of heating."""
    return ambient_c + (temp_c - ambient_c) * math.exp(-cool_rate * dt_s) + heat_c


# INA3221 channels the emulator wires, with each one's bus voltage in mV.
INA3221_RAILS = {"VDD_IN": 5000, "VDD_CPU_GPU_CV": 1000, "VDD_SOC": 1000}


class DeviceEmulator:
    """A sysfs tree that heats with a process tree's CPU use and throttles it past the trip point.

    ``trip_time_s`` is the time (``time.monotonic()`` seconds since :meth:`start`) the
    trip point was first reached, ``None`` until then; ``stopped_s`` the wall seconds
    the watched processes were held stopped in all; ``log`` holds one dict per tick
    (``t_s``, ``temp_c``, ``cpu_s``, ``throttling``, ``clock_khz``, ``t_monotonic``,
    ``power_w``: what the rails read from this tick to the next).
    """

    def __init__(
        self,
        root: str | os.PathLike,
        watch_pid: int,
        ambient_c: float = 40.0,
        trip_c: float = 60.0,
        heat_c_per_cpu_s: float = 8.0,
        cool_rate: float = 0.1,
        throttle_duty: float = 0.5,
        period_s: float = 0.1,
        *,
        hysteresis_c: float = 2.0,
        critical_c: float | None = None,
        start_c: float | None = None,
        max_khz: int = 1_500_000,
        min_khz: int = 600_000,
        rails: str | None = None,
        idle_w: float = 2.0,
        w_per_cpu: float = 3.0,
    ):
        if not 0.0 <= throttle_duty < 1.0:
            raise ValueError("throttle_duty must be in [0, 1)")
        if period_s <= 0:
            raise ValueError("period_s must be > 0")
        if rails not in (None, "hwmon", "ina3221"):
            raise ValueError("rails must be None, 'hwmon' or 'ina3221'")
        if idle_w < 0 or w_per_cpu < 0:
            raise ValueError("idle_w and w_per_cpu must be >= 0")
        self.rails = rails
        self.idle_w = idle_w
        self.w_per_cpu = w_per_cpu
        self.cpus_in_use = 0.0
        self.root = Path(root)
        self.watch_pid = watch_pid
        self.ambient_c = ambient_c
        self.trip_c = trip_c
        self.critical_c = critical_c if critical_c is not None else trip_c + 25.0
        self.heat_c_per_cpu_s = heat_c_per_cpu_s
        self.cool_rate = cool_rate
        self.throttle_duty = throttle_duty
        self.period_s = period_s
        self.hysteresis_c = hysteresis_c
        self.max_khz = max_khz
        self.min_khz = min_khz
        self.temp_c = start_c if start_c is not None else ambient_c
        self.throttling = False
        self.trip_time_s: float | None = None
        self.start_monotonic: float | None = None
        self.log: list[dict] = []
        self.stopped_s = 0.0
        self._cpu_prev: dict[int, float] = {}
        self._reaped_prev = 0.0  # watch_pid's reaped children's CPU seconds at the last tick
        self._unreaped = 0.0  # counted CPU of descendants gone but not yet reaped
        self._stopped: set[int] = set()
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self._zone = self.root / "sys/class/thermal/thermal_zone0"
        self._cooling = self.root / "sys/class/thermal/cooling_device0"
        self._policy = self.root / "sys/devices/system/cpu/cpufreq/policy0"
        self._hwmon = (
            self.root / "sys/class/hwmon/hwmon0"
            if rails == "hwmon"
            else self.root / "sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon1"
        )
        self._create_tree()

    # --- the tree -------------------------------------------------------------

    @staticmethod
    def _write(path: Path, text: str) -> None:
        # Replace atomically so a reader never sees a half-written or empty value.
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)

    def _create_tree(self) -> None:
        ncpu = os.cpu_count() or 1
        cpus = f"0-{ncpu - 1}" if ncpu > 1 else "0"
        for d in (self._zone, self._cooling, self._policy, self.root / "proc/device-tree"):
            d.mkdir(parents=True, exist_ok=True)
        files = {
            self._zone / "type": "cpu-thermal\n",
            self._zone / "mode": "enabled\n",
            self._zone / "policy": "step_wise\n",
            self._zone / "trip_point_0_temp": f"{round(self.trip_c * 1000)}\n",
            self._zone / "trip_point_0_type": "passive\n",
            self._zone / "trip_point_0_hyst": f"{round(self.hysteresis_c * 1000)}\n",
            self._zone / "trip_point_1_temp": f"{round(self.critical_c * 1000)}\n",
            self._zone / "trip_point_1_type": "critical\n",
            self._zone / "trip_point_1_hyst": "0\n",
            self._cooling / "type": "cpufreq-cpu0\n",
            self._cooling / "max_state": "1\n",
            self._policy / "scaling_governor": "performance\n",
            self._policy / "scaling_min_freq": f"{self.min_khz}\n",
            self._policy / "scaling_max_freq": f"{self.max_khz}\n",
            self._policy / "cpuinfo_min_freq": f"{self.min_khz}\n",
            self._policy / "cpuinfo_max_freq": f"{self.max_khz}\n",
            self._policy / "related_cpus": " ".join(str(i) for i in range(ncpu)) + "\n",
            self._policy / "affected_cpus": " ".join(str(i) for i in range(ncpu)) + "\n",
            self.root / "sys/devices/system/cpu/online": f"{cpus}\n",
            self.root / "sys/devices/system/cpu/present": f"{cpus}\n",
            self.root / "proc/device-tree/model": "edgequal emulated board\0",
        }
        if self.rails == "hwmon":
            self._hwmon.mkdir(parents=True, exist_ok=True)
            files[self._hwmon / "name"] = "ina226\n"
        elif self.rails == "ina3221":
            self._hwmon.mkdir(parents=True, exist_ok=True)
            files[self._hwmon / "name"] = "ina3221\n"
            for k, label in enumerate(INA3221_RAILS, start=1):
                files[self._hwmon / f"in{k}_label"] = f"{label}\n"
                files[self._hwmon / f"in{k}_enable"] = "1\n"
        for path, text in files.items():
            self._write(path, text)
        self._write_state()

    @property
    def clock_khz(self) -> int:
        """The effective clock: the maximum scaled by the share of each period the workers run."""
        if self.throttling:
            return int(self.max_khz * (1.0 - self.throttle_duty))
        return self.max_khz

    @property
    def power_w(self) -> float:
        """The board's draw now: idle plus ``w_per_cpu`` per CPU the watched processes use."""
        return self.idle_w + self.w_per_cpu * self.cpus_in_use

    def rail_watts(self) -> dict[str, float]:
        """Watts per INA3221 channel: ``VDD_IN`` is the total, the CPU rail and SoC rail inside it."""
        cpu_w = self.w_per_cpu * self.cpus_in_use
        return {
            "VDD_IN": self.power_w,
            "VDD_CPU_GPU_CV": cpu_w + 0.25 * self.idle_w,
            "VDD_SOC": 0.25 * self.idle_w,
        }

    def _write_rails(self) -> None:
        if self.rails == "hwmon":
            self._write(self._hwmon / "power1_input", f"{round(self.power_w * 1e6)}\n")
        elif self.rails == "ina3221":
            # Bus voltage fixed per rail; the current carries the power (mA × mV = µW).
            for k, (label, watts) in enumerate(self.rail_watts().items(), start=1):
                mv = INA3221_RAILS[label]
                self._write(self._hwmon / f"in{k}_input", f"{mv}\n")
                self._write(self._hwmon / f"curr{k}_input", f"{watts * 1e6 / mv:.3f}\n")

    def _write_state(self) -> None:
        self._write_rails()
        self._write(self._zone / "temp", f"{round(self.temp_c * 1000)}\n")
        self._write(self._cooling / "cur_state", "1\n" if self.throttling else "0\n")
        self._write(self._policy / "scaling_cur_freq", f"{self.max_khz}\n")
        self._write(self._policy / "cpuinfo_cur_freq", f"{self.clock_khz}\n")

    # --- the watched processes ------------------------------------------------

    def descendants(self) -> list[psutil.Process]:
        """Every live descendant of ``watch_pid`` (the processes heated and throttled)."""
        try:
            procs = psutil.Process(self.watch_pid).children(recursive=True)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return []
        # Never heat with, or stop, the emulator itself (a CLI emulator run under the agent).
        return [p for p in procs if p.pid != os.getpid()]

    def _cpu_times(self) -> dict[int, float]:
        out = {}
        for proc in self.descendants():
            try:
                t = proc.cpu_times()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            out[proc.pid] = t.user + t.system + t.children_user + t.children_system
        return out

    def _reaped_s(self) -> float:
        """CPU seconds of the descendants ``watch_pid`` has waited for (its ``children_*``
        times): a child's whole time lands there when it is reaped."""
        try:
            t = psutil.Process(self.watch_pid).cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return self._reaped_prev
        return t.children_user + t.children_system

    def _cpu_delta_s(self) -> float:
        """CPU seconds the process tree used since the last tick: each live descendant's
        (its own and its reaped children's), and the part of an exited one's the ticks did
        not see, from ``watch_pid``'s reaped time. A worker that starts and ends between two
        ticks (a cold load, when a busy machine runs this thread late) still heats the
        board: before, it did not, and a lowered trip point slowed no cold load at all in
        a run beside two other suites."""
        now = self._cpu_times()
        total = 0.0
        for pid, cpu_s in now.items():
            # A process first seen after start is new: all of its CPU time is recent.
            delta = cpu_s - self._cpu_prev.get(pid, 0.0)
            total += delta if delta >= 0 else cpu_s  # a reused pid
        # Gone since the last tick: counted up to it; the rest comes with its reaping.
        self._unreaped += sum(cpu for pid, cpu in self._cpu_prev.items() if pid not in now)
        reaped = self._reaped_s()
        arrived = max(0.0, reaped - self._reaped_prev)
        total += max(0.0, arrived - self._unreaped)
        self._unreaped = max(0.0, self._unreaped - arrived)
        self._cpu_prev, self._reaped_prev = now, reaped
        return total

    def _signal_all(self, sig: int, pids=None) -> None:
        """SIGSTOP ``pids`` (default: every descendant), or SIGCONT every process stopped."""
        if sig == signal.SIGSTOP:
            for pid in pids if pids is not None else [p.pid for p in self.descendants()]:
                try:
                    os.kill(pid, signal.SIGSTOP)
                except ProcessLookupError:
                    continue
                self._stopped.add(pid)
        else:
            for pid in list(self._stopped):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
                self._stopped.discard(pid)

    def release(self) -> None:
        """SIGCONT every process the emulator stopped, and every current descendant."""
        with self._lock:
            self._signal_all(signal.SIGCONT)
            for proc in self.descendants():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGCONT)

    # --- the loop -------------------------------------------------------------

    def tick(self, now: float, dt_s: float) -> None:
        """Advance the model by ``dt_s``: measure CPU, update temperature and throttle state, write."""
        cpu_s = self._cpu_delta_s()
        self.cpus_in_use = cpu_s / dt_s if dt_s > 0 else 0.0
        self.temp_c = newton_step(
            self.temp_c, self.ambient_c, self.cool_rate, dt_s, self.heat_c_per_cpu_s * cpu_s
        )
        t_s = now - self.start_monotonic
        tripped = False
        if not self.throttling and self.temp_c >= self.trip_c:
            self.throttling = True
            tripped = self.trip_time_s is None
        elif self.throttling and self.temp_c < self.trip_c - self.hysteresis_c:
            self.throttling = False
        self._write_state()
        self.log.append(
            {
                "t_s": round(t_s, 3),
                "temp_c": round(self.temp_c, 3),
                "cpu_s": round(cpu_s, 4),
                "throttling": self.throttling,
                "clock_khz": self.clock_khz,
                "t_monotonic": now,
                "power_w": round(self.power_w, 6),
            }
        )
        if tripped:  # published last, so a reader that sees it also sees the tree and log
            self.trip_time_s = t_s

    def _run(self) -> None:
        last = self.start_monotonic
        try:
            while not self._halt.is_set():
                if self.throttling and self.throttle_duty > 0:
                    last = self._throttled_cycle(last)
                    continue
                now = time.monotonic()
                self.tick(now, now - last)
                last = now
                # Sleep to the next period boundary.
                self._halt.wait(max(0.0, last + self.period_s - time.monotonic()))
        finally:
            self.release()

    def _throttled_cycle(self, last: float) -> float:
        """One duty cycle: stop the processes, tick while they are stopped, let them run.

        On a busy machine this thread is itself late to run and its tick (a scan of
        /proc, the tree's files) takes long: ticking while the processes run would
        lengthen their running share, and a fixed running time after a late SIGCONT would
        shorten it. So the processes are stopped first (those known at the last tick;
        a newer one from this tick on), the tick runs while they are stopped, and the
        running part lasts as long, against the stop actually held, as the duty asks.
        ``stopped_s`` adds up the stops actually held. Returns the tick's time.
        """
        stop_at = time.monotonic()
        with self._lock:
            self._signal_all(signal.SIGSTOP, list(self._cpu_prev))
        now = time.monotonic()
        self.tick(now, now - last)
        if self.throttling:
            with self._lock:
                self._signal_all(
                    signal.SIGSTOP, [p for p in self._cpu_prev if p not in self._stopped]
                )
            self._halt.wait(
                max(0.0, stop_at + self.throttle_duty * self.period_s - time.monotonic())
            )
        with self._lock:
            self._signal_all(signal.SIGCONT)
        held_s = time.monotonic() - stop_at
        self.stopped_s += held_s
        if self.throttling:
            self._halt.wait(held_s * (1.0 - self.throttle_duty) / self.throttle_duty)
        return now

    def start(self) -> DeviceEmulator:
        """Start the emulation thread (the tree already exists from construction)."""
        if self._thread is not None:
            raise RuntimeError("DeviceEmulator already started")
        self.start_monotonic = time.monotonic()
        self._cpu_prev = self._cpu_times()  # CPU used before start does not heat the board
        self._reaped_prev, self._unreaped = self._reaped_s(), 0.0
        # The board as it starts: one that starts past its trip point throttles from t = 0,
        # however late the thread first runs on a busy machine.
        self.tick(self.start_monotonic, 0.0)
        atexit.register(self.release)
        self._thread = threading.Thread(
            target=self._run, name="edgequal-device-emulator", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread and SIGCONT every process it may have stopped."""
        self._halt.set()
        if self._thread is not None:
            self._thread.join(timeout=5 * self.period_s + 2.0)
        self.release()
        atexit.unregister(self.release)

    def __enter__(self) -> DeviceEmulator:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Emulate a board's sysfs thermal tree heated by a process tree's CPU use."
    )
    p.add_argument(
        "--root", required=True, help="directory to write the tree into (the agent's --root)"
    )
    p.add_argument(
        "--watch-pid",
        type=int,
        required=True,
        help="heat with, and throttle, this process's descendants",
    )
    p.add_argument("--ambient-c", type=float, default=40.0)
    p.add_argument("--trip-c", type=float, default=60.0)
    p.add_argument("--heat-c-per-cpu-s", type=float, default=8.0)
    p.add_argument("--cool-rate", type=float, default=0.1, help="Newton cooling rate, per second")
    p.add_argument(
        "--throttle-duty",
        type=float,
        default=0.5,
        help="share of each period the processes are stopped",
    )
    p.add_argument("--period-s", type=float, default=0.1)
    p.add_argument(
        "--rails",
        choices=("hwmon", "ina3221"),
        default=None,
        help="also write power rails that follow the processes' CPU use",
    )
    p.add_argument("--idle-w", type=float, default=2.0, help="board watts at rest")
    p.add_argument("--w-per-cpu", type=float, default=3.0, help="watts added per CPU in use")
    p.add_argument(
        "--duration-s",
        type=float,
        default=None,
        help="stop after this long (default: until the watched process exits)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the emulator until interrupted, the duration ends, or the watched process exits."""
    args = _parse_args(argv)
    if not psutil.pid_exists(args.watch_pid):
        print(f"device_emulator: no process {args.watch_pid}", file=sys.stderr)
        return 2
    emu = DeviceEmulator(
        args.root,
        args.watch_pid,
        ambient_c=args.ambient_c,
        trip_c=args.trip_c,
        heat_c_per_cpu_s=args.heat_c_per_cpu_s,
        cool_rate=args.cool_rate,
        throttle_duty=args.throttle_duty,
        period_s=args.period_s,
        rails=args.rails,
        idle_w=args.idle_w,
        w_per_cpu=args.w_per_cpu,
    )
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    print(f"device_emulator: tree at {emu.root}; point the agent there with --root", flush=True)
    with emu:
        t0 = time.monotonic()
        while not done.wait(1.0):
            print(
                f"t={time.monotonic() - t0:6.1f}s temp={emu.temp_c:5.1f}C "
                f"clock={emu.clock_khz}kHz power={emu.power_w:.2f}W "
                f"{'THROTTLING' if emu.throttling else ''}",
                flush=True,
            )
            if args.duration_s is not None and time.monotonic() - t0 >= args.duration_s:
                break
            if not psutil.pid_exists(args.watch_pid):
                break
    if emu.trip_time_s is not None:
        print(f"device_emulator: trip point reached at {emu.trip_time_s:.1f}s", flush=True)
    return 0
