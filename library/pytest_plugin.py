"""The pytest plugin (entry point ``pytest11``: ``edgequal``): board tests written in pytest.

    pytest --eq-device pi5 --eq-device jetson        # repeatable
    pytest --eq-lab lab.toml --eq-tags pi             # the lab's devices with every tag

    @pytest.mark.edgequal(plan="quick", sustain="2m")
    def test_detector(eq_qualify):
        report = eq_qualify("det.onnx", golden="g.npz")
        assert report.latency[0].p99_ms < 20

``eq_device`` is parametrized over the chosen devices (each test runs once per device,
the device's lease held for the test); ``eq_qualify(model, golden=None, **plan_fields)``
qualifies on it and returns the verified :class:`edgequal.Report`, and records the report
path and headline figures as JUnit properties of the test suite (``NODEID::NAME``: the
Jenkins schema has none on a test case). A figure the run did not measure raises
:class:`edgequal.NotMeasuredError` with why when compared, never a TypeError. The ``edgequal`` marker's
keywords are the plan (``plan=`` the preset, the rest plan fields) and a call's own
keywords win over them. Without an ``--eq-…`` option these tests are skipped with one
line saying how to choose a device.

Imported by every pytest run where edgequal is installed, so it imports only pytest until
a device is used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from edgequal.host.transport.ssh_options import SSHOptions

FIXTURES = ("eq_device", "eq_qualify")
SKIP_REASON = (
    "edgequal: no device chosen; run with --eq-device NAME (repeatable) "
    "or --eq-lab LAB.toml [--eq-tags TAGS]"
)


@dataclass(frozen=True)
class DeviceChoice:
    """One device a run chose: what to connect to, and how (from a lab file or a name)."""

    label: str
    device: str
    name: str | None = None  # a lab device: ``device`` is its address, proved by this name's key
    token_file: Path | None = None
    token_env: str | None = None  # a lab file's token_env: the variable holding the token
    ssh: SSHOptions | None = None  # a lab device's SSH settings


def pytest_addoption(parser) -> None:
    group = parser.getgroup("edgequal", "edgequal: qualify models on boards (docs/api.md)")
    group.addoption(
        "--eq-device",
        action="append",
        default=[],
        metavar="DEVICE",
        help="run edgequal tests on DEVICE (a trusted name, grpc://, ssh:// or local); repeatable",
    )
    group.addoption("--eq-lab", metavar="LAB.toml", help="run edgequal tests on a lab's devices")
    group.addoption("--eq-tags", metavar="TAGS", help="with --eq-lab: only devices with these tags")
    group.addoption(
        "--eq-token-file", metavar="FILE", help="bearer token for --eq-device grpc:// devices"
    )
    group.addoption(
        "--eq-reports", metavar="DIR", help="keep the signed reports here (default: tmp dirs)"
    )


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers",
        "edgequal(plan='quick', **plan_fields): the plan eq_qualify runs (e.g. sustain='2m')",
    )


def chosen_devices(config) -> list[DeviceChoice]:
    """The devices ``--eq-device`` names, then those of ``--eq-lab`` with ``--eq-tags``."""
    token = config.getoption("--eq-token-file")
    out = [
        DeviceChoice(d, d, token_file=Path(token) if token else None)
        for d in config.getoption("--eq-device")
    ]
    lab_path = config.getoption("--eq-lab")
    if lab_path:
        from edgequal.host.lab.inventory import load_lab

        tags = {t.strip() for t in (config.getoption("--eq-tags") or "").split(",") if t.strip()}
        for d in load_lab(lab_path).select(tags):
            # The lab's address, bound to the lab's name: the agent there must prove the key
            # pinned for that name before the lab's token for it is sent (as fleet run does).
            out.append(
                DeviceChoice(
                    d.name,
                    d.address,
                    name=d.name,
                    token_file=d.token.file if d.token and d.token.file else None,
                    token_env=d.token.env if d.token and d.token.env else None,
                    ssh=d.ssh,
                )
            )
    return out


def _choices(config) -> list[DeviceChoice]:
    if not hasattr(config, "_edgequal_choices"):
        config._edgequal_choices = chosen_devices(config)
    return config._edgequal_choices


def pytest_generate_tests(metafunc) -> None:
    if not any(f in metafunc.fixturenames for f in FIXTURES):
        return
    choices = _choices(metafunc.config)
    if choices:
        metafunc.parametrize("eq_device", choices, ids=[c.label for c in choices], indirect=True)


def pytest_collection_modifyitems(config, items) -> None:
    if _choices(config):
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if any(f in getattr(item, "fixturenames", ()) for f in FIXTURES):
            item.add_marker(skip)


class _Connections:
    """One connection per chosen device for the whole session (identity proved once)."""

    def __init__(self):
        self.open: dict[DeviceChoice, object] = {}

    def get(self, choice: DeviceChoice):
        if choice not in self.open:
            from edgequal import connect

            token = None
            if choice.token_env:  # the lab file names a variable; unset is a one-line error
                from edgequal.host.lab.inventory import SecretRef

                token = SecretRef(env=choice.token_env).read(f"lab device {choice.label}")
            self.open[choice] = connect(
                choice.device,
                token_file=choice.token_file,
                token=token,
                ssh=choice.ssh,
                name=choice.name,
            )
        return self.open[choice]

    def close(self) -> None:
        for device in self.open.values():
            device.close()


@pytest.fixture(scope="session")
def _eq_connections():
    connections = _Connections()
    yield connections
    connections.close()


@pytest.fixture
def eq_device(request, _eq_connections):
    """The :class:`edgequal.Device` this test runs on, its lease held for the test."""
    choice = getattr(request, "param", None)
    if choice is None:
        pytest.skip(SKIP_REASON)
    device = _eq_connections.get(choice)
    with device.lease(f"pytest {request.node.nodeid}"):
        yield device


def _properties(report) -> list[tuple[str, str]]:
    """The report's headline figures as JUnit properties."""
    props = [
        ("edgequal_report", str(report.path)),
        ("edgequal_device", report.device),
        ("edgequal_run_id", report.run_id),
        ("edgequal_status", report.status),
    ]
    for shape, lat in report.latency.items():
        for key in ("p50_ms", "p99_ms"):
            value = getattr(lat, key)
            if value:  # a NotMeasured is false: a figure the run lacks is left out
                props.append((f"edgequal_{key}[{shape}]", f"{value:.6g}"))
    if report.flips is not None:
        props.append(("edgequal_flips", str(report.flips)))
    sustained = report.sustained or {}
    if sustained.get("stability") is not None:
        props.append(("edgequal_stability", f"{sustained['stability']:.4g}"))
    return props


@pytest.fixture
def eq_qualify(request, eq_device, tmp_path):
    """``eq_qualify(model, golden=None, **plan_fields)``: qualify on ``eq_device`` and return
    the verified Report; the marker's plan, then the call's keywords."""
    marker = request.node.get_closest_marker("edgequal")
    defaults = dict(marker.kwargs) if marker else {}
    keep = request.config.getoption("--eq-reports")
    out_dir = Path(keep) if keep else tmp_path
    count = [0]

    def run(model, golden=None, **fields):
        options = {**defaults, **fields}
        plan = options.pop("plan", "quick")
        count[0] += 1
        test = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
        out = out_dir / f"{test}-{Path(model).stem}-{count[0]}.report.json"
        report = eq_device.qualify(model, golden, plan=plan, out=out, **options)
        # Jenkins' junit-10.xsd allows properties on the test suite only, not on a test
        # case: each is named after the test that qualified.
        record = request.getfixturevalue("record_testsuite_property")
        for name, value in _properties(report):
            record(f"{request.node.nodeid}::{name}", value)
        return report

    return run
