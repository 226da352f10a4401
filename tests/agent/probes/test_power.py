"""Power rails on recorded trees of real boards: Jetson INA3221 (hwmon and iio), Pi 5 PMIC, INA219."""

from __future__ import annotations

import pytest
from edgequal.agent.probes.power import (
    PMIC_INTERVAL_S,
    PowerProbe,
    PowerSampler,
    board_total_w,
    find_sysfs_rails,
)
from edgequal.agent.probes.raspberry_pi import parse_pmic_read_adc

from .conftest import COMMANDS, SYSFS


def test_orin_nano_ina3221_rails_are_read_once_with_vdd_in_as_the_total(board_tools):
    probe = PowerProbe.open(SYSFS / "jetson-orin-nano")
    # hwmon1 is reached both through /sys/class/hwmon and the driver's directory: once.
    assert [r.name for r in probe.rails] == ["VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"]
    reading = probe.read()
    assert reading["rails_w"] == {
        "VDD_IN": pytest.approx(5.048 * 0.968),
        "VDD_CPU_GPU_CV": pytest.approx(5.040 * 0.160),
        "VDD_SOC": pytest.approx(5.040 * 0.296),
    }
    # VDD_IN is the module's input: the other rails are inside it, never added to it.
    assert reading["total_w"] == pytest.approx(5.048 * 0.968)
    assert reading["total_from"] == "VDD_IN"
    assert probe.describe()["sources"] == ["ina3221"]


def test_jetson_nano_iio_rails_in_milliwatts(board_tools):
    rails = find_sysfs_rails(SYSFS / "jetson-nano")
    assert [(r.name, r.source) for r in rails] == [
        ("POM_5V_IN", "iio"),
        ("POM_5V_GPU", "iio"),
        ("POM_5V_CPU", "iio"),
    ]
    reading = PowerProbe(rails).read()
    assert reading["total_w"] == pytest.approx(2.480) and reading["total_from"] == "POM_5V_IN"


def test_an_ina219_power_channel_is_read_in_microwatts_and_not_doubled(board_tools):
    probe = PowerProbe.open(SYSFS / "pi4-ina219")
    # power1_input exists, so curr1 x in1 of the same channel is not a second rail.
    assert [r.name for r in probe.rails] == ["ina219/power1"]
    assert probe.read()["total_w"] == pytest.approx(3.48)


def test_pmic_reply_gives_watts_per_rail_and_leaves_voltage_only_rails_out():
    text = (COMMANDS / "pi5" / "vcgencmd_pmic_read_adc.txt").read_text()
    watts = parse_pmic_read_adc(text)
    assert len(watts) == 12  # 12 rails with current; EXT5V and BATT report voltage only
    assert "EXT5V" not in watts and "BATT" not in watts
    assert watts["VDD_CORE"] == pytest.approx(0.73204 * 0.88242, abs=1e-6)
    total, how = board_total_w(watts)
    assert how == "sum of rails" and total == pytest.approx(sum(watts.values()))
    with pytest.raises(ValueError):
        parse_pmic_read_adc('error=1 error_msg="Command not registered"')


def test_pi5_reads_the_pmic_through_vcgencmd_at_most_every_few_seconds(board_tools):
    board_tools("pi5")
    probe = PowerProbe.open(SYSFS / "pi5")
    assert probe.present and probe.describe()["sources"] == ["pmic"]
    first = probe.read(now=100.0)
    again = probe.read(now=100.0 + PMIC_INTERVAL_S / 2)
    assert first["total_w"] == again["total_w"] > 1.0
    assert first["rails_w"]["pmic/VDD_CORE"] == pytest.approx(0.73204 * 0.88242, abs=1e-6)
    assert probe.pmic_reads == 1  # the second read reused the last reply
    probe.read(now=100.0 + PMIC_INTERVAL_S)
    assert probe.pmic_reads == 2


@pytest.mark.parametrize("board", ["pi4", "pi5"])
def test_a_board_without_rails_reports_them_absent_with_the_reason(board, board_tools):
    board_tools(None)  # the Pi 5 without vcgencmd on PATH has no readable rail
    probe = PowerProbe.open(SYSFS / board)
    assert not probe.present
    described = probe.describe()
    assert described["present"] is False and "no readable power rail" in described["reason"]


def test_sampler_keeps_a_last_reading_at_stop(board_tools):
    sampler = PowerSampler(PowerProbe.open(SYSFS / "jetson-orin-nano"), interval_s=10.0)
    sampler.start()
    samples = sampler.stop()
    assert len(samples) == 2 and samples[0]["t"] <= samples[1]["t"]
    assert all(s["total_w"] == pytest.approx(5.048 * 0.968) for s in samples)
