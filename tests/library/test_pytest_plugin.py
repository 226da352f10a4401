"""The pytest plugin (library/pytest_plugin.py), run by pytest's own ``pytester`` against
real local agents: one test per chosen device, the marker's plan, JUnit properties, and
the one-line skip without a device."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

pytest_plugins = ["pytester"]

BOARD_TEST = """
import pytest

MODEL = {model!r}
GOLDEN = {golden!r}


@pytest.mark.edgequal(
    plan="quick", cold_runs=1, latency="0.1s", threads=1,
    warmup_min_runs=5, warmup_min_s=0.05, warmup_max_s=0.5, latency_min_runs=50,
)  # fmt: skip
def test_classifier(eq_qualify, eq_device):
    report = eq_qualify(MODEL, golden=GOLDEN)
    assert report.device == eq_device.name
    assert report.predicate["plan"]["cold_runs"] == 1 and report.predicate["plan"]["threads"] == 1
    assert report.latency[0].p50_ms < 1000
    assert eq_device.transport.info()["lease"]["holder"]  # held for the test


def test_not_a_board_test():
    assert True
"""


@pytest.mark.slow  # a pytest session of its own
def test_without_a_device_the_board_tests_are_skipped_with_one_line(pytester):
    pytester.makepyfile(BOARD_TEST.format(model="m.onnx", golden="g.npz"))
    result = pytester.runpytest("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*edgequal: no device chosen; run with --eq-device NAME*"])


@pytest.mark.slow
def test_each_board_test_runs_once_per_device(
    pytester, tmp_path, local_agents, example_models, golden_sets
):
    from edgequal.host.devices.trust import KnownDevices

    agents = local_agents.start_agents(tmp_path, ["pi-a", "pi-b"])
    try:
        for name, agent in zip(["pi-a", "pi-b"], agents):
            KnownDevices().trust(name, agent.address, agent.public_key_raw())
        pytester.makepyfile(
            BOARD_TEST.format(
                model=str(example_models["classifier"]), golden=str(golden_sets["classifier"])
            )
        )
        junit = tmp_path / "junit.xml"
        result = pytester.runpytest(
            "--eq-device", "pi-a", "--eq-device", agents[1].address,
            f"--junitxml={junit}", "-p", "no:cacheprovider", "-v",
        )  # fmt: skip
        result.assert_outcomes(passed=3)
        result.stdout.fnmatch_lines(
            ["*test_classifier?pi-a? PASSED*", "*test_classifier?grpc*PASSED*"]
        )
    finally:
        for agent in agents:
            agent.stop()
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    for label, device in (("pi-a", "pi-a"), (agents[1].address, "pi-b")):
        props = {
            p.get("name"): p.get("value")
            for p in cases[f"test_classifier[{label}]"].iter("property")
        }
        assert props["edgequal_device"] == device and props["edgequal_status"]
        shape_p50 = [k for k in props if k.startswith("edgequal_p50_ms[")]
        assert len(shape_p50) == 1 and float(props[shape_p50[0]]) > 0
        assert props["edgequal_report"].endswith(".report.json")
        assert int(props["edgequal_flips"]) >= 0
    # Each device signed its own run: one report stored on each agent.
    assert [len(a.run_records()) for a in agents] == [1, 1]
