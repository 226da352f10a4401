"""Approved sets and re-qualification after a firmware or runtime update.

``approve`` keeps what a release was qualified with, per model: the model file, its
golden set, and per device the signed report and the plan it ran (runtime, threads,
providers, durations), in a directory with an index (``approved.json``).

``requalify`` compares each approved device's current state (Info: fingerprint and
runtime versions) with the approved report's; where the firmware, kernel, OS or the
runtime's version changed (or always, with ``every``), it runs the approved model
with the approved plan again, as a fleet run, and gates each new report against the
approved one (the policy's ``[baseline]`` section decides what a regression is).

An approval also records the runtime environment the model was qualified with (name,
runtime, version, wheel digests; ``runtime_env``). With a candidate environment
(``runtime_env``), every approved pair is re-run on each board that has both the
approved and the candidate environment, measuring the model under both in one run
(the approved one the baseline of the ratios the policy's ``[runtime_envs]`` limits);
a board lacking either is listed in ``missing_env``, not skipped silently.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from edgequal.contract.artifacts import file_sha256
from edgequal.contract.runtimes import RUNTIMES

from ..devices.trust import KnownDevices
from ..errors import HostError, UsageError
from .inventory import FleetModel, Lab

INDEX_NAME = "approved.json"
WATCHED_CATEGORIES = ("firmware", "kernel", "os", "runtime", "board")
"""Fingerprint categories (``gate.change_category``) whose change calls for a re-run."""


@dataclass
class ApprovedDevice:
    """One device's approval of a model: its signed report, the plan it ran, and the
    runtime configuration the report names (runtime, version, threads, providers)."""

    report: str
    plan: dict
    approved_unix: float
    runtime: dict = field(default_factory=dict)
    runtime_env: dict = field(default_factory=dict)
    """The runtime environment it was qualified with: name, runtime, distribution,
    version, python and wheels ([{file, sha256}]; none for the agent's own)."""
    committed_policy_sha256: str | None = None
    """The gate policy the run committed to before it ran (``plan.policy_sha256``)."""
    model_signature: dict = field(default_factory=dict)
    """What the device said of the model's signature (``results.model_signature``)."""


@dataclass
class ApprovedModel:
    """An approved model: its file and golden set (paths in the set), and its devices."""

    name: str
    model: str
    model_sha256: str
    golden: str | None = None
    devices: dict[str, ApprovedDevice] = field(default_factory=dict)
    signature: str | None = None
    """The model's OMS signature file in the set, verified by each device before loading."""
    signature_sha256: str | None = None
    oms_manifest_sha256: str | None = None

    def to_json(self) -> dict:
        """The entry as JSON."""
        return {
            "model": self.model,
            "model_sha256": self.model_sha256,
            "golden": self.golden,
            "signature": self.signature,
            "signature_sha256": self.signature_sha256,
            "oms_manifest_sha256": self.oms_manifest_sha256,
            "devices": {d: vars(a) for d, a in self.devices.items()},
        }

    @classmethod
    def from_json(cls, name: str, data: dict) -> ApprovedModel:
        """The inverse of :meth:`to_json`."""
        return cls(
            name,
            data["model"],
            data["model_sha256"],
            data.get("golden"),
            {d: ApprovedDevice(**a) for d, a in data.get("devices", {}).items()},
            data.get("signature"),
            data.get("signature_sha256"),
            data.get("oms_manifest_sha256"),
        )

    def check_files(self, directory: Path) -> None:
        """The set's model and signature still have the digests they were approved with;
        UsageError (exit 2) naming the file otherwise, before anything is sent."""
        files = [(self.model, self.model_sha256)]
        files += [(self.signature, self.signature_sha256)] if self.signature else []
        for rel, digest in files:
            path = Path(directory) / rel
            try:
                actual = file_sha256(path)
            except OSError as e:
                raise UsageError(f"approved {self.name}: cannot read {path} ({e.strerror})") from e
            if actual != digest:
                raise UsageError(
                    f"approved {self.name}: {path} changed since it was approved "
                    f"(sha256 {actual[:16]}…, approved {digest[:16]}…)",
                    hint="approve it again from a signed report, or restore the file",
                )


def load_approved(directory: Path) -> dict[str, ApprovedModel]:
    """The approved set in ``directory`` (empty when there is none yet)."""
    path = Path(directory) / INDEX_NAME
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        return {n: ApprovedModel.from_json(n, e) for n, e in data["models"].items()}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UsageError(f"cannot read approved set {path}: {e}") from e


def _save(directory: Path, models: dict[str, ApprovedModel]) -> None:
    path = Path(directory) / INDEX_NAME
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"models": {n: m.to_json() for n, m in models.items()}}, indent=1))
    tmp.replace(path)


def check_approved_name(name: str) -> str:
    """``name`` when it is one path component (the entry's directory inside ``--into``);
    a path (``../../x``, ``/abs``, ``a/b``), ``.``, ``..`` or an empty name is a UsageError."""
    if (
        not name
        or name in (".", "..")
        or "/" in name
        or "\\" in name
        or "\0" in name
        or any(not c.isprintable() for c in name)
    ):
        raise UsageError(
            f"--name {name!r} is not a name: one path component, no '/', not '.' or '..'",
            hint="the approved set keeps each model in a directory of that name inside --into",
        )
    return name


def approve(
    report_path: Path,
    model: Path,
    golden: Path | None,
    directory: Path,
    *,
    name: str | None = None,
    known: KnownDevices | None = None,
    runtime_env: str | None = None,
    model_signature: Path | None = None,
) -> tuple[str, str]:
    """Verify ``report_path`` against its device's pinned key and ``model``/``golden`` (and
    the model's signature file, when the report names one), then keep model, golden set,
    signature, report, plan, runtime environment (``runtime_env``, one the report measured;
    default the agent's own) and the policy the run committed to in ``directory``; returns
    (name, device)."""
    from ..devices.verify import verify_envelope

    name = check_approved_name(name if name is not None else Path(model).stem)
    known = known or KnownDevices()
    envelope = Path(report_path).read_bytes()
    artifacts = [Path(model)] + ([Path(golden)] if golden else [])
    artifacts += [Path(model_signature)] if model_signature else []
    report = verify_envelope(envelope, known=known, artifacts=artifacts)
    signed = [s for s in report.subjects if s.get("role") == "model_signature"]
    if signed and model_signature is None:
        raise UsageError(
            f"{report_path} was measured with a model signature; give it with --model-signature"
        )
    env_record = approved_env_record(report.predicate, runtime_env)
    if len(report.subjects) != len(artifacts):
        raise UsageError(
            f"{report_path} was measured with{'' if len(report.subjects) > 1 else 'out'} a "
            "golden set; give the same files it names",
        )
    directory = Path(directory)
    entry_dir = directory / name
    entry_dir.mkdir(parents=True, exist_ok=True)
    models = load_approved(directory)
    digest = file_sha256(Path(model))
    entry = models.get(name)
    if entry is not None and entry.model_sha256 != digest:
        raise UsageError(
            f"the approved set already holds another model called {name}",
            hint="give this one another --name",
        )
    if entry is None:
        model_copy = entry_dir / Path(model).name
        shutil.copyfile(model, model_copy)
        golden_rel = None
        if golden:
            shutil.copyfile(golden, entry_dir / Path(golden).name)
            golden_rel = f"{name}/{Path(golden).name}"
        entry = ApprovedModel(name, f"{name}/{model_copy.name}", digest, golden_rel)
        models[name] = entry
    if model_signature is not None:
        signature = (report.predicate.get("results") or {}).get("model_signature") or {}
        shutil.copyfile(model_signature, entry_dir / Path(model_signature).name)
        entry.signature = f"{name}/{Path(model_signature).name}"
        entry.signature_sha256 = file_sha256(Path(model_signature))
        entry.oms_manifest_sha256 = signature.get("manifest_sha256")
    device = report.device_name
    (entry_dir / f"{device}.report.json").write_bytes(envelope)
    runtime = dict((report.predicate.get("results") or {}).get("runtime") or {})
    entry.devices[device] = ApprovedDevice(
        f"{name}/{device}.report.json",
        report.predicate.get("plan") or {},
        time.time(),
        runtime,
        env_record,
        (report.predicate.get("plan") or {}).get("policy_sha256"),
        dict((report.predicate.get("results") or {}).get("model_signature") or {}),
    )
    _save(directory, models)
    return name, device


# The distribution an agent's own runtime most likely came from, when the report names none.
_DEFAULT_DISTRIBUTION = {kind.name: kind.distributions[0] for kind in RUNTIMES}


def approved_env_record(predicate: dict, name: str | None = None) -> dict:
    """The runtime environment a report's model was qualified with: ``name`` (one the report
    measured side by side), else the agent's own (``default``)."""
    fingerprint = predicate.get("fingerprint") or {}
    measured = {e.get("name"): e for e in fingerprint.get("runtime_envs") or []}
    if name is not None and name != "default":
        if name not in measured:
            raise UsageError(
                f"the report measured no runtime environment called {name}",
                hint=f"it measured: {', '.join(measured) or 'only the agent own runtime'}",
            )
        results = (predicate.get("results") or {}).get("runtime_envs") or {}
        entry = next((e for e in results.get("environments") or [] if e.get("name") == name), {})
        if entry.get("status", "ok") != "ok":
            raise UsageError(
                f"runtime environment {name} failed in that run: {entry.get('reason')}"
            )
        return dict(measured[name])
    if "default" in measured:
        return dict(measured["default"])
    runtime = (predicate.get("results") or {}).get("runtime") or {}
    return {
        "name": "default",
        "runtime": runtime.get("runtime", ""),
        "distribution": _DEFAULT_DISTRIBUTION.get(runtime.get("runtime"), ""),
        "version": runtime.get("version", ""),
        "python": fingerprint.get("python", ""),
        "wheels": [],
    }


def update_changes(approved_predicate: dict, info: dict) -> list[dict]:
    """What changed on the device since the approved report: firmware, kernel, OS, board,
    and the version of the runtime the approved run used. ``info`` is the device's Info."""
    from ..judge.baseline import change_category, fingerprint_fields

    runtime = dict((approved_predicate.get("results") or {}).get("runtime") or {})
    approved = fingerprint_fields(
        {"fingerprint": approved_predicate.get("fingerprint"), "results": {"runtime": runtime}}
    )
    now_runtime = dict(runtime)
    for rt in info.get("runtimes") or []:
        if rt.get("name") == runtime.get("runtime"):
            now_runtime["version"] = rt.get("version") if rt.get("available") else None
    current = fingerprint_fields(
        {"fingerprint": info.get("fingerprint"), "results": {"runtime": now_runtime}}
    )
    changes = []
    for key in sorted(set(approved) | set(current)):
        category = change_category(key)
        if category not in WATCHED_CATEGORIES:
            continue
        if category == "runtime" and key not in ("runtime.runtime", "runtime.version"):
            continue  # threads, providers: the plan's, not the device's
        if key in ("agent_version", "memory_mb", "online_cpus", "python"):
            continue  # not what a board update is about
        if approved.get(key) != current.get(key):
            changes.append(
                {
                    "field": key,
                    "category": category,
                    "approved": approved.get(key),
                    "now": current.get(key),
                }
            )
    return changes


@dataclass
class RequalifyPlan:
    """What a re-qualification will do: the runs, why each, and what it leaves alone."""

    models: list[FleetModel]
    runs: dict
    changes: dict[str, list[dict]]
    unchanged: list[dict]
    unreachable: dict[str, str]
    missing_env: dict[str, str] = field(default_factory=dict)
    """``MODEL@DEVICE`` -> why it was not re-qualified under the candidate environment."""


def plan_requalification(
    directory: Path,
    lab: Lab,
    *,
    every: bool = False,
    open_device=None,
    known: KnownDevices | None = None,
    runtime_env: str | None = None,
) -> RequalifyPlan:
    """Which approved (model, device) pairs of the lab to run again, and why; with
    ``runtime_env`` (a candidate environment) every pair, under it beside the approved one."""
    from ..devices.verify import verify_envelope
    from .fleet import RunPlan, open_lab_device

    directory = Path(directory)
    known = known or KnownDevices()
    open_device = open_device or open_lab_device
    approved = load_approved(directory)
    if not approved:
        raise UsageError(
            f"no approved set in {directory}", hint="edgequal approve REPORT --model M --into DIR"
        )
    lab_devices = {d.name: d for d in lab.devices}
    infos: dict[str, dict] = {}
    unreachable: dict[str, str] = {}
    coordinator = None
    if lab.labgrid is not None:  # Info is read inside the place: the lab's arbiter first
        from .labgrid_places import Coordinator

        coordinator = Coordinator(lab.labgrid.coordinator)
    try:
        for name in sorted({d for m in approved.values() for d in m.devices if d in lab_devices}):
            try:
                # A place held by someone else: its pairs run again, waiting in the place.
                held = coordinator.hold(name) if coordinator else contextlib.nullcontext()
                with held, open_device(lab_devices[name]) as transport:
                    infos[name] = transport.info()
            except HostError as e:
                unreachable[name] = str(e)
    finally:
        if coordinator is not None:
            coordinator.close()
    runs, changes, unchanged, models, missing = {}, {}, [], [], {}
    for m in approved.values():
        wanted = False
        if any(device in lab_devices for device in m.devices):
            m.check_files(directory)
        for device, a in m.devices.items():
            if device not in lab_devices:
                continue
            key = f"{m.name}@{device}"
            if device in unreachable:
                changes[key] = []
                runs[(m.name, device)] = RunPlan(a.plan, directory / a.report)
                wanted = True
                continue
            envelope = (directory / a.report).read_bytes()
            predicate = verify_envelope(envelope, known=known, device=device).predicate
            found = update_changes(predicate, infos[device])
            if runtime_env is not None:
                why = _candidate_missing(a, runtime_env, infos[device], device)
                if why:
                    missing[key] = why
                    continue
                baseline_env = (a.runtime_env or {}).get("name") or "default"
                plan = {**a.plan, "runtime_envs": [baseline_env, runtime_env]}
                changes[key] = found
                runs[(m.name, device)] = RunPlan(plan, directory / a.report)
                wanted = True
            elif found or every:
                changes[key] = found
                runs[(m.name, device)] = RunPlan(a.plan, directory / a.report)
                wanted = True
            else:
                unchanged.append({"model": m.name, "device": device})
        if wanted:
            models.append(
                FleetModel(
                    m.name,
                    directory / m.model,
                    directory / m.golden if m.golden else None,
                    signature=directory / m.signature if m.signature else None,
                )
            )
    return RequalifyPlan(models, runs, changes, unchanged, unreachable, missing)


def _candidate_missing(a: ApprovedDevice, candidate: str, info: dict, device: str) -> str:
    """Why ``device`` cannot measure ``candidate`` beside the approved environment ('' if it can)."""
    approved = (a.runtime_env or {}).get("name") or "default"
    if approved == candidate:
        return f"the candidate {candidate} is the environment it was approved with"
    envs = {e.get("name"): e for e in (info.get("fingerprint") or {}).get("runtime_envs") or []}
    for name in (candidate, approved):
        if name == "default":
            continue
        env = envs.get(name)
        if env is None:
            how = (
                "edgequal agent runtime add ssh://… --from-approved DIR/MODEL"
                if name == approved
                else f"edgequal agent runtime add ssh://… {name}"
            )
            return f"{device} has no runtime environment {name} (install it: {how})"
        # "probing": an agent that just started has not finished its trial import; the
        # run itself refuses an environment that turns out broken.
        if not env.get("available", True) and env.get("reason") != "probing":
            return f"{device}: runtime environment {name} is broken: {env.get('reason')}"
    return ""
