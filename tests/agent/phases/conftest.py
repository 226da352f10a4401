"""Fixtures for the phase tests: the sustained phase on onnxruntime, and one shared run of it
on the device emulator's power rails."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def sustain():
    """``sustain(model, plan, root, on_event=None)``: the sustained phase on onnxruntime
    (``measure_sustained``) with the board tree ``root``; asserts it raised no finding."""
    import threading

    from edgequal.agent.phases.sustained import measure_sustained

    def run(model, plan, root, on_event=None):
        findings: list = []
        result = measure_sustained(
            model, None, plan, "onnxruntime", root, on_event or (lambda e: None),
            threading.Event(), findings,
        )  # fmt: skip
        assert not findings, findings
        return result

    return run


@pytest.fixture(scope="session")
def emulated_rail_run(device_emulator, example_models, tmp_path_factory, sustain):
    """One real sustained run (``measure_sustained``, the production path) on the device
    emulator, shared by the tests that only read it: ``(result, emulator)``.

    The mid model, one thread, 6 s in 1.5 s windows after 2 s of idle power. The emulated
    board has INA3221 rails that read 1.5 W at rest and 4 W more per CPU the worker uses,
    and heats 4 °C per CPU second from 40 °C (cool rate 0.05) towards a trip point at
    150 °C that it cannot reach: with one CPU it levels off at 40 + 4 / 0.05 = 120 °C.
    The emulator's log (``emulator.log``) holds every tick's watts.
    """

    from edgequal.contract.plan import make_plan

    root = tmp_path_factory.mktemp("emulated-board")
    emu = device_emulator.DeviceEmulator(
        root,
        os.getpid(),
        ambient_c=40.0,
        trip_c=150.0,
        heat_c_per_cpu_s=4.0,
        cool_rate=0.05,
        throttle_duty=0.5,
        period_s=0.25,
        rails="ina3221",
        idle_w=1.5,
        w_per_cpu=4.0,
    )
    plan = make_plan(
        "quick", threads=1, sustain_s=6.0, window_s=1.5, cooldown=False, idle_power_s=2.0
    )
    with emu:
        result = sustain(example_models["mid"], plan, root)
    return result, emu
