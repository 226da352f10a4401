"""A lab's nightly series, recorded from real fleet runs, for tests/host/lab/test_changes.py.

The recording (:func:`record`, ``python tests/nightly_series.py tests/fixtures/nightly``):
two real agents on 127.0.0.1 (dev-0, dev-1), 20 "nights", each a real fleet run
(``FleetRunner``) with short plans, every signed report it records kept with its cell:

- ``vision``: a MatMul chain; from night 14 the lab's models file points at a copy that
  does the same work four times (three more branches, scaled and sign-flipped, combined
  back so the outputs are bit-identical and the golden set still holds): about 4× slower,
  a new digest, the same series. Both boards run it, so the change appears on both.
- ``steady``: the same base model, unchanged on dev-0 for all 20 nights: the noise-only
  series whose false-positive rate is measured.
- Cancelled runs, as a board's operator or a dropped link would leave them: the first
  attempt of steady on dev-0 on night 5 (its retry is the cell's point) and both attempts
  of vision on dev-1 on night 8 (the cell ends incomplete: a gap).

What each test session does (:func:`replay`): the recorded reports, night by night, into a
real SQLite history as the fleet run recorded them (each verified against the agents'
pinned keys), and after each night from the change on, what ``fleet run`` does with a lab
``[changes]`` table (``report_fleet_changes``): the changes new that night into the night's
``junit.xml`` (recorded as the fleet run wrote it) and ``changes.prom``.

Recorded, not run per session: the 60 qualifications cost about 65 CPU-s a run of the
suite, and a live series on a shared machine is a different series every time (the tests
were written for any real recording; the load-dependent windows they allow say so).
"""

from __future__ import annotations

import functools
import json
import shutil
import sys
from pathlib import Path

import numpy as np

NIGHTS = 20
CHANGE_NIGHT = 14

# Short runs: one cold load, a short loop; an operator profile (for the per-operator diff)
# only from PROFILED_FROM on: the diff takes the profiles either side of the change, and a
# profile is one more worker process per cell.
PROFILED_FROM = CHANGE_NIGHT - 4
PLAN = {
    "threads": 1,
    "cold_runs": 1,
    "latency_min_runs": 30,
    "latency_min_s": 0.2,
    "warmup_min_s": 0.05,
    "warmup_max_s": 0.2,
    "sustain_s": 0.0,
    # The timed loop may run to 2 s (ten times its 0.2 s) where too few calls kept the CPU:
    # on a loaded machine (load 10-13 on 2 cores) the slower copy's calls, four times
    # longer, were preempted so often that every night after the change was inconclusive
    # at the default bound (0.6 s), a gap, and no change could be found.
    "latency_max_extension": 10.0,
}
LAB_NAME = "nightly"
DEVICE_TAGS = {"dev-0": ["x86", "steady"], "dev-1": ["x86"]}
# (night, model, device, attempt) cancelled as soon as it starts.
CANCELLED = {(5, "steady", "dev-0", 1), (8, "vision", "dev-1", 1), (8, "vision", "dev-1", 2)}
DATA = Path(__file__).parent / "fixtures" / "nightly"
"""The recording the tests replay."""


def chain_model(path: Path, slower: bool) -> None:
    """[32, 384] × four 384×384 MatMuls (about 19 M multiply-adds: the compute, not the
    call's fixed overhead, sets the p50); ``slower`` adds three more branches, their first
    weights −w0, 2·w0 and −2·w0 (distinct, so no graph optimisation merges them with the
    first), and returns ((c − d) − (a − b)) · 0.5 = (4a − 2a) · 0.5 = a exactly (each step
    exact in float32): the same outputs, four times the work. Four, not two: on a shared
    machine a neighbour's burst can make one night's unchanged model nearly twice as slow,
    which a doubling could not be told from on the night before the change."""
    from onnx import TensorProto, checker, helper, numpy_helper, save

    rng = np.random.default_rng(34)
    weights = [rng.normal(0, 0.05, (384, 384)).astype(np.float32) for _ in range(4)]
    inits = [numpy_helper.from_array(w, f"w{i}") for i, w in enumerate(weights)]
    nodes = []

    def branch(name: str, first: str) -> str:
        prev = "x"
        for i in range(4):
            nodes.append(
                helper.make_node("MatMul", [prev, first if i == 0 else f"w{i}"], [f"{name}{i}"])
            )
            prev = f"{name}{i}"
        return prev

    a = branch("a", "w0")
    if slower:
        for name, scale in (("b", -1.0), ("c", 2.0), ("d", -2.0)):
            inits.append(numpy_helper.from_array(weights[0] * np.float32(scale), f"w0{name}"))
        b, c, d = branch("b", "w0b"), branch("c", "w0c"), branch("d", "w0d")
        inits.append(numpy_helper.from_array(np.array(0.5, np.float32), "half"))
        nodes.append(helper.make_node("Sub", [a, b], ["ab"]))  # 2a
        nodes.append(helper.make_node("Sub", [c, d], ["cd"]))  # 4a
        nodes.append(helper.make_node("Sub", ["cd", "ab"], ["e"]))  # 2a
        nodes.append(helper.make_node("Mul", ["e", "half"], ["y"]))
    else:
        nodes.append(helper.make_node("Identity", [a], ["y"]))
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 384])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 384])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    checker.check_model(model)
    save(model, str(path))


def _models(base: Path) -> dict[str, tuple[Path, Path]]:
    """The base model and its slower copy, each with its golden set (a golden set belongs
    to one model file: the slower copy brings its own, the same reference outputs under a
    new digest, as a lab's new export would)."""
    from edgequal.host.golden import make_golden

    inputs = base / "inputs.npz"
    np.savez(inputs, x=np.random.default_rng(7).normal(0, 1, (32, 384)).astype(np.float32))
    out = {}
    for name, slower in (("chain", False), ("chain-slow", True)):
        model = base / f"{name}.onnx"
        golden = base / ("golden-slow.npz" if slower else "golden.npz")
        chain_model(model, slower)
        make_golden(model, inputs, out=golden)
        out[name] = (model, golden)
    return out


def write_models(path: Path, models: dict, night: int) -> Path:
    """The models file of ``night``: vision is the slower copy from the change on."""
    vision = models["chain-slow" if night >= CHANGE_NIGHT else "chain"]
    steady = models["chain"]
    path.write_text(
        f'[models.vision]\npath = "{vision[0]}"\ngolden = "{vision[1]}"\n\n'
        f'[models.steady]\npath = "{steady[0]}"\ngolden = "{steady[1]}"\ntags = ["steady"]\n'
    )
    return path


def write_lab(path: Path, addresses: dict[str, str]) -> Path:
    """The lab file: its two agents at ``addresses``, with their tags."""
    path.write_text(
        f'[lab]\nname = "{LAB_NAME}"\n'
        + "".join(
            f'\n[devices.{name}]\naddress = "{addresses[name]}"\ntags = {json.dumps(tags)}\n'
            for name, tags in DEVICE_TAGS.items()
        )
    )
    return path


def record(out: Path, base: Path, local_agents) -> None:
    """Run the 20 nights (module docstring) in ``base`` and write what :func:`replay` needs
    to ``out``: every report the fleet runs recorded (with its sidecar), in the order they
    were recorded, with its cell; each night's fleet run id; each night's ``junit.xml``
    from the change on; the agents' pinned keys (``known_devices``) and addresses.
    ``local_agents`` is tests/local_agents.py. Needs $EDGEQUAL_CONFIG_DIR and
    $XDG_STATE_HOME pointing into ``base``."""
    from edgequal.host.devices.resolve import trust_device
    from edgequal.host.devices.trust import KNOWN_DEVICES_FILE_NAME, KnownDevices
    from edgequal.host.lab.fleet import FleetOptions, FleetRunner, open_lab_device
    from edgequal.host.lab.inventory import load_lab, load_models

    models = _models(base)
    out.mkdir(parents=True)
    entries: list[dict] = []
    nights: dict[int, str] = {}
    agents = local_agents.start_agents(base / "agents", list(DEVICE_TAGS))
    try:
        known = KnownDevices()
        for name, agent in zip(DEVICE_TAGS, agents):
            trust_device(known, name, agent.address)
        addresses = {name: agent.address for name, agent in zip(DEVICE_TAGS, agents)}
        lab = load_lab(write_lab(base / "lab.toml", addresses))
        started: dict = {}

        def cancel_some(night, record, event):
            if event.get("type") != "run":
                return
            cell = (night, record.model, record.device)
            started[cell] = started.get(cell, 0) + 1
            if (*cell, started[cell]) not in CANCELLED:
                return
            device = next(d for d in lab.devices if d.name == record.device)
            transport = open_lab_device(device, known=known)
            try:
                transport.cancel(event["run_id"])
            finally:
                transport.close()

        def keep(night, path, device, cell):
            # A retry writes its report where the cancelled attempt's was: copied now.
            name = f"night-{night:02d}/{cell.model_label}@{device}-{cell.attempt}.json"
            (out / name).parent.mkdir(exist_ok=True)
            shutil.copyfile(path, out / name)
            shutil.copyfile(f"{path}.reproduce", out / f"{name}.reproduce")
            entries.append(
                {"night": night, "file": name, "device": device, "model_label": cell.model_label,
                 "cell": cell.cell, "attempt": cell.attempt}
            )  # fmt: skip

        for night in range(NIGHTS):
            options = FleetOptions(
                out_dir=base / f"night-{night:02d}",
                plan_overrides={**PLAN, "operator_profile": night >= PROFILED_FROM},
                retries=1,
                backoff_s=0.0,
                html_pages=False,
            )
            runner = FleetRunner(
                lab,
                load_models(write_models(base / f"models-{night}.toml", models, night)),
                options,
                known=known,
                record_report=functools.partial(keep, night),
                on_event=functools.partial(cancel_some, night),
            )
            runner.run()
            nights[night] = runner.cell_prefix
            if night >= CHANGE_NIGHT:
                shutil.copyfile(options.out_dir / "junit.xml", out / f"night-{night:02d}/junit.xml")
        shutil.copyfile(known.path, out / KNOWN_DEVICES_FILE_NAME)
    finally:
        for agent in agents:
            agent.stop()
    manifest = {"addresses": addresses, "fleet_runs": nights, "reports": entries}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


def replay(base: Path, data: Path = DATA) -> dict:
    """The recording in ``data`` replayed into ``base`` (module docstring): the SQLite
    history's URL, the config dir whose known_devices pins the agents that signed the
    reports, the lab file, the last night's models file, every report (path, device, cell)
    in the order recorded, and the changes new each night from the change on. Needs
    $EDGEQUAL_CONFIG_DIR set to ``base / "config"``."""
    from edgequal.host.devices.trust import KNOWN_DEVICES_FILE_NAME, KnownDevices
    from edgequal.host.lab.changes import ChangeSettings
    from edgequal.host.lab.fleet_changes import report_fleet_changes
    from edgequal.host.lab.history import FleetCell, History
    from edgequal.host.lab.inventory import load_lab

    manifest = json.loads((data / "manifest.json").read_text())
    (base / "config").mkdir(parents=True)
    shutil.copyfile(data / KNOWN_DEVICES_FILE_NAME, base / "config" / KNOWN_DEVICES_FILE_NAME)
    known = KnownDevices()
    lab_path = write_lab(base / "lab.toml", manifest["addresses"])
    lab = load_lab(lab_path)
    models = _models(base)
    url = f"sqlite:///{base / 'history.sqlite'}"
    history = History.open(url)
    reports: list[tuple[Path, str, FleetCell]] = []
    new_changes: dict[int, list[dict]] = {}
    try:
        for night in range(NIGHTS):
            for e in (e for e in manifest["reports"] if e["night"] == night):
                path = base / e["file"]
                path.parent.mkdir(exist_ok=True)
                shutil.copyfile(data / e["file"], path)
                shutil.copyfile(data / f"{e['file']}.reproduce", f"{path}.reproduce")
                cell = FleetCell(e["model_label"], e["cell"], e["attempt"])
                reports.append((path, e["device"], cell))
                history.record_file(path, e["device"], known=known, cell=cell)
            if night >= CHANGE_NIGHT:
                out_dir = base / f"night-{night:02d}"
                out_dir.mkdir(exist_ok=True)
                shutil.copyfile(data / f"night-{night:02d}/junit.xml", out_dir / "junit.xml")
                new = report_fleet_changes(
                    history, lab, manifest["fleet_runs"][str(night)], ChangeSettings(), out_dir,
                    base / f"prom-{night:02d}",
                )  # fmt: skip
                new_changes[night] = [c.to_json() for c in new]
    finally:
        history.close()
    return {
        "url": url,
        "config": base / "config",
        "lab": lab_path,
        "models": write_models(base / "models.toml", models, NIGHTS - 1),
        "reports": reports,
        "base": base,
        "new_changes": new_changes,
        "fleet_runs": sorted({cell.cell.rsplit("/", 2)[0] for _, _, cell in reports}),
    }


def main(argv: list[str]) -> int:
    """``python tests/nightly_series.py OUT``: record the series into the new folder OUT."""
    import os
    import tempfile

    out = Path(argv[0]).resolve()
    base = Path(tempfile.mkdtemp(prefix="edgequal-nightly-"))
    os.environ["EDGEQUAL_CONFIG_DIR"] = str(base / "config")
    os.environ["XDG_STATE_HOME"] = str(base / "state")
    os.environ.pop("EDGEQUAL_TOKEN", None)
    sys.path.insert(0, str(Path(__file__).parent))
    import local_agents

    record(out, base, local_agents)
    print(
        f"recorded {len(json.loads((out / 'manifest.json').read_text())['reports'])} reports in {out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
