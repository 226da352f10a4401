"""The pytest plugin (library/pytest_plugin.py), run by pytest's own ``pytester`` against
real local agents: one test per chosen device, the marker's plan, JUnit properties, and
the one-line skip without a device."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import edgequal
import pytest

pytest_plugins = ["pytester"]

JUNIT_XSD = Path(__file__).resolve().parents[1] / "fixtures" / "junit" / "junit-10.xsd"


def validate_junit(path: Path) -> None:
    """``path`` is valid against Jenkins' junit-10.xsd (tests/fixtures/junit, vendored)."""
    import xmlschema

    xmlschema.XMLSchema(JUNIT_XSD).validate(str(path))


NOT_MEASURED_TEST = """
import edgequal

REPORT = {report!r}


def test_p99_as_the_docs_write_it():
    r = edgequal.verify(REPORT)
    assert r.latency[0].p99_ms < 50


def test_a_check_first_reads_as_the_docs_say():
    lat = edgequal.verify(REPORT).latency[0]
    assert not lat.p99_ms and isinstance(lat.p99_ms, edgequal.NotMeasured)
    assert lat.p50_ms < 1000  # measured: a number
    assert f"{{lat.p99_ms:.2f}}".startswith("not measured (p99 not measured: 309 samples")
"""

BOARD_TEST = """
import edgequal
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
    # Valid against Jenkins' junit-10.xsd: the figures are properties of the suite, named
    # after the test (the schema allows none on a test case).
    validate_junit(junit)
    root = ET.parse(junit).getroot()
    assert not [c for c in root.iter("testcase") if c.find("properties") is not None]
    suite_props = {p.get("name"): p.get("value") for p in root.iter("property")}
    for label, device in (("pi-a", "pi-a"), (agents[1].address, "pi-b")):
        prefix = f"test_each_board_test_runs_once_per_device.py::test_classifier[{label}]::"
        props = {k.removeprefix(prefix): v for k, v in suite_props.items() if k.startswith(prefix)}
        assert props["edgequal_device"] == device and props["edgequal_status"]
        shape_p50 = [k for k in props if k.startswith("edgequal_p50_ms[")]
        assert len(shape_p50) == 1 and float(props[shape_p50[0]]) > 0
        assert props["edgequal_report"].endswith(".report.json")
        assert int(props["edgequal_flips"]) >= 0
    # Each device signed its own run: one report stored on each agent.
    assert [len(a.run_records()) for a in agents] == [1, 1]


@pytest.mark.slow
def test_a_lab_selects_boards_by_tag_with_the_token_its_file_names(
    pytester, tmp_path, local_agents, example_models, golden_sets, monkeypatch
):
    """``--eq-lab lab.toml --eq-tags pi``: only the boards tagged pi, each reached with the
    token the lab file names (a token file for one, an environment variable for the other);
    a board whose variable is unset fails its test in one line."""
    from edgequal.host.devices.trust import KnownDevices

    tokens = {}
    for name in ("pi-a", "pi-b"):
        tokens[name] = tmp_path / f"{name}.token"
        tokens[name].write_text(f"secret-{name}-0123456789abcdef\n")
        tokens[name].chmod(0o600)
    # A token is required: a call without the right one is refused.
    args = {n: ["--token-file", str(tokens[n])] for n in tokens}
    agents = local_agents.start_agents(tmp_path, ["pi-a", "pi-b", "x86"], args=args)
    try:
        lab = tmp_path / "lab.toml"
        lab.write_text(
            '[lab]\nname = "bench"\n'
            f'[devices.pi-a]\naddress = "{agents[0].address}"\ntags = ["pi"]\n'
            f'token_file = "{tokens["pi-a"]}"\n'
            f'[devices.pi-b]\naddress = "{agents[1].address}"\ntags = ["pi"]\n'
            'token_env = "EQ_PI_B_TOKEN"\n'
            f'[devices.x86]\naddress = "{agents[2].address}"\ntags = ["x86"]\n'
        )
        for name, agent in zip(["pi-a", "pi-b", "x86"], agents):
            KnownDevices().trust(name, agent.address, agent.public_key_raw())
        pytester.makepyfile(
            BOARD_TEST.format(
                model=str(example_models["classifier"]), golden=str(golden_sets["classifier"])
            )
        )
        run = ["--eq-lab", str(lab), "--eq-tags", "pi", "-p", "no:cacheprovider", "-v"]
        monkeypatch.delenv("EQ_PI_B_TOKEN", raising=False)
        unset = pytester.runpytest(*run)
        unset.assert_outcomes(passed=2, errors=1)
        unset.stdout.fnmatch_lines(["*environment variable EQ_PI_B_TOKEN is not set*"])
        monkeypatch.setenv("EQ_PI_B_TOKEN", tokens["pi-b"].read_text().strip())
        result = pytester.runpytest(*run)
        result.assert_outcomes(passed=3)
        result.stdout.fnmatch_lines(
            ["*test_classifier?pi-a? PASSED*", "*test_classifier?pi-b? PASSED*"]
        )
        assert os.environ.get("EDGEQUAL_TOKEN") is None  # put back as it was
    finally:
        for agent in agents:
            agent.stop()
    # The x86 board was not selected: it ran nothing; each pi board ran its one test.
    assert [len(a.run_records()) for a in agents] == [2, 1, 0]


@pytest.mark.slow  # the session's signed reports: several real runs
def test_a_p99_an_inconclusive_run_did_not_measure_fails_the_test_saying_why(
    pytester, reports, test_helper, tmp_path
):
    """The docs' ``assert r.latency[0].p99_ms < 50`` on a run interference cut short fails
    with edgequal's own error and its reason, never ``TypeError: '<' not supported``."""
    from edgequal.contract.keys import DeviceKey
    from edgequal.contract.signing import build_statement, sign_envelope
    from edgequal.host.devices.trust import KnownDevices

    helpers = test_helper("gate_reports")
    known = helpers.trust_local(reports)
    base = edgequal.verify(reports.classifier, known=known)
    pred = helpers.cut_short_by_interference(base.predicate)
    key = DeviceKey.generate()
    KnownDevices().trust("board", "local", key.public_key_raw())
    report = tmp_path / "cut-short.report.json"
    report.write_bytes(sign_envelope(key, build_statement(base.subjects, pred)))
    pytester.makepyfile(NOT_MEASURED_TEST.format(report=str(report)))
    junit = tmp_path / "junit.xml"
    result = pytester.runpytest("-p", "no:cacheprovider", f"--junitxml={junit}")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*NotMeasuredError: p99 not measured: 309 samples, 368 needed; the run was "
            "inconclusive: other processes took the CPU; re-run on a quiet board"
        ]
    )
    assert "TypeError" not in result.stdout.str()
    validate_junit(junit)


@pytest.mark.slow
def test_a_lab_token_goes_only_to_the_device_it_belongs_to(
    pytester, tmp_path, local_agents, example_models, golden_sets, monkeypatch
):
    """A lab file names ``labz`` (not trusted here, or pinned to another key) at the address
    where the trusted ``libB`` answers, with labz's token: ``--eq-lab`` refuses it in one
    line naming the device, and libB never receives labz's token (no rejected call in its
    log), as ``fleet run`` refuses the same lab; ``connect(address, name=...)`` binds the
    same way."""
    import edgequal
    from edgequal.host.devices.trust import KnownDevices
    from edgequal.host.errors import UntrustedDevice
    from edgequal.host.lab.fleet import open_lab_device
    from edgequal.host.lab.inventory import load_lab

    tok = tmp_path / "libB.token"
    tok.write_text("secret-libB-0123456789abcdef\n")
    tok.chmod(0o600)
    lib_b, other = local_agents.start_agents(
        tmp_path, ["libB", "other"], args={"libB": ["--token-file", str(tok)]}
    )
    try:
        KnownDevices().trust("libB", lib_b.address, lib_b.public_key_raw(), token_file=str(tok))
        monkeypatch.setenv("EQ_LABZ_TOKEN", "secret-labz-not-libB-0123456789")
        lab = tmp_path / "lab.toml"
        lab.write_text(
            f'[devices.labz]\naddress = "{lib_b.address}"\ntoken_env = "EQ_LABZ_TOKEN"\n'
        )
        pytester.makepyfile(
            BOARD_TEST.format(
                model=str(example_models["classifier"]), golden=str(golden_sets["classifier"])
            )
        )
        run = ["--eq-lab", str(lab), "-p", "no:cacheprovider", "-v"]
        result = pytester.runpytest(*run)
        result.assert_outcomes(passed=1, errors=1)
        result.stdout.fnmatch_lines(["*device labz is not trusted*nothing was sent*"])
        # fleet run, health and requalify open lab devices through open_lab_device.
        (labz,) = load_lab(lab).devices
        with pytest.raises(UntrustedDevice, match="device labz is not trusted"):
            open_lab_device(labz).info()
        # Pinned, but to another device's key: libB proves its own key at that address.
        KnownDevices().trust("labz", other.address, other.public_key_raw())
        result = pytester.runpytest(*run)
        result.assert_outcomes(passed=1, errors=1)
        result.stdout.fnmatch_lines(["*not the pinned*nothing was sent*"])
        with pytest.raises(edgequal.Error, match="not the pinned"):
            edgequal.connect(lib_b.address, name="labz", token="secret-labz-not-libB-0123456789")
        assert "wrong bearer token" not in lib_b.log()
        assert other.run_records() == [] and lib_b.run_records() == []
        # The device's own name and token still work at that address.
        with edgequal.connect(lib_b.address, name="libB") as device:
            assert device.name == "libB" and device.info()["key_fingerprint"]
    finally:
        for agent in (lib_b, other):
            agent.stop()
