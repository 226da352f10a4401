"""Verified reports as a CycloneDX 1.6 ML-BOM (``edgequal export --format cyclonedx``).

What was qualified, in the bill-of-materials format a release pipeline's other tools
read: one ``machine-learning-model`` component per model digest, one ``data`` component
per golden set, one ``framework`` component per runtime and version (each runtime
environment's wheels by digest), one ``device`` component per signing device, and for
each model a model card whose ``quantitativeAnalysis.performanceMetrics`` carries every
headline figure the reports measured, sliced by board, runtime and shape, with its
interval where the report has one.

The document is built with ``cyclonedx-python-lib`` (components, hashes, properties,
dependencies, serialization). The library has no model for ``modelCard`` yet, so the
model cards are added to the serialized model components, and the whole document is
then checked against the CycloneDX 1.6 JSON schema with the library's own strict
validator before it is returned: a BOM that does not validate is never written.

Figures are the decisive ones (the calls that kept the CPU where the run tagged them).
An ``inconclusive`` or ``incomplete`` run contributes its report reference and status,
never a figure: interference spoiled what it measured. An absent figure is left out,
never written as zero.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

from edgequal.contract.preemption import decisive_summary

from ..errors import HostError
from ..judge.report_file import ReportFile

# Status of a run whose figures a BOM may carry; the others spoil what they measured.
_FIGURES_FROM = ("passed", "degraded", "failed")
_PROP = "edgequal:"


def _text(value: float) -> str:
    """A figure as the schema's string, to 6 significant digits."""
    return f"{float(value):.6g}"


def _metric(kind: str, value, slice_: str, interval=None) -> dict | None:
    if value is None:
        return None
    out = {"type": kind, "value": _text(value), "slice": slice_}
    if interval and interval[0] is not None and interval[1] is not None:
        out["confidenceInterval"] = {
            "lowerBound": _text(interval[0]),
            "upperBound": _text(interval[1]),
        }
    return out


def _runtime(results: dict) -> tuple[str, str]:
    rt = results.get("runtime") or {}
    return str(rt.get("runtime") or "unknown"), str(rt.get("version") or "unknown")


def performance_metrics(report: ReportFile) -> list[dict]:
    """The model card's metrics of one verified report (none for an interfered run)."""
    pred = report.predicate
    if pred.get("status") not in _FIGURES_FROM:
        return []
    results = pred.get("results") or {}
    runtime, version = _runtime(results)
    board = f"board={report.device_name};runtime={runtime} {version}"
    run = f";run={pred.get('run_id')}"
    rows = []
    for entry in (results.get("latency") or {}).get("per_shape") or []:
        s = decisive_summary(entry)
        where = f"{board};shape={entry.get('shape')}{run}"
        rows.append(_metric("latency p50 (ms)", s.get("p50_ms"), where, s.get("p50_ci_ms")))
        rows.append(_metric("latency p99 (ms)", s.get("p99_ms"), where, s.get("p99_ci_ms")))
    cold = results.get("cold_load") or {}
    rows.append(
        _metric(
            "cold load to first result, median (ms)",
            (cold.get("total_ms") or {}).get("median"),
            board + run,
        )
    )
    rows.append(
        _metric(
            "first inference, median (ms)",
            (cold.get("first_inference_ms") or {}).get("median"),
            board + run,
        )
    )
    sustained = results.get("sustained") or {}
    rows.append(
        _metric(
            "sustained throughput (inferences/s)", sustained.get("sustained_per_s"), board + run
        )
    )
    rows.append(
        _metric("sustained stability (worst/best window)", sustained.get("stability"), board + run)
    )
    power = (sustained.get("power") or {}).get("summary") or {}
    rows.append(
        _metric(
            "energy per inference, median (mJ)", power.get("mj_per_inference_median"), board + run
        )
    )
    memory = results.get("memory") or {}
    rows.append(_metric("peak worker RSS (bytes)", memory.get("peak_rss_bytes"), board + run))
    drift = results.get("drift") or {}
    for output, d in (drift.get("outputs") or {}).items():
        where = f"{board};output={output}{run}"
        rows.append(_metric("drift max abs error", d.get("max_abs"), where))
        rows.append(_metric("drift PSNR (dB)", d.get("psnr_db"), where))
    decisions = drift.get("decisions") or {}
    rows.append(_metric("decision flips", decisions.get("flip_count"), board + run))
    rows += _accuracy_metrics(results, board + run)
    return [r for r in rows if r is not None]


def _accuracy_metrics(results: dict, where: str) -> list[dict | None]:
    """On-device accuracy on labelled cases (docs/accuracy.md): top-1 and top-k with their
    Wilson intervals, the paired drop against the reference with its interval."""
    from ..judge.accuracy import accuracy_of

    score = accuracy_of(results)
    if not score or "error" in score:
        return []
    where = f"{where};labelled_cases={score['cases']}"
    dev, paired = score["device"], score["paired"]
    if score.get("task", "classification") != "classification":
        from ..task_scores import NAMES

        head = NAMES[score["headline"]]
        return [
            _metric(f"accuracy {NAMES[k]} (fraction)", v["value"], where, v["ci"])
            for k, v in dev.items()
        ] + [
            _metric(
                f"accuracy {head} drop against the reference (points)",
                paired["drop_points"],
                where,
                paired["drop_ci_points"],
            )
        ]
    return [
        _metric("accuracy top-1 (fraction)", dev["top1"]["value"], where, dev["top1"]["ci"]),
        _metric(
            f"accuracy top-{score['k']} (fraction)", dev["topk"]["value"], where, dev["topk"]["ci"]
        ),
        _metric(
            "accuracy top-1 drop against the reference (points)",
            paired["drop_points"],
            where,
            paired["drop_ci_points"],
        ),
    ]


def _io_formats(results: dict, side: str) -> list[dict]:
    """``modelParameters.inputs/outputs``: each tensor as ``NAME dtype[shape]``."""
    out = []
    for t in (results.get("model_io") or {}).get(side) or []:
        dims = ",".join("?" if d is None else str(d) for d in t.get("shape") or [])
        out.append({"format": f"{t.get('name')} {t.get('dtype')}[{dims}]"})
    return out


def _subject(report: ReportFile, role: str) -> dict | None:
    roles = [s for s in report.subjects if s.get("role") == role]
    if roles:
        return roles[0]
    return report.subjects[0] if role == "model" and report.subjects else None


def cyclonedx(reports: Iterable[ReportFile]) -> dict:
    """A validated CycloneDX 1.6 ML-BOM of verified reports, as a JSON object."""
    from cyclonedx.model import HashAlgorithm, HashType, Property
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.output.json import JsonV1Dot6
    from edgequal.contract import __version__

    bom = Bom()
    bom.metadata.tools.components.add(
        Component(type=ComponentType.APPLICATION, name="edgequal", version=__version__)
    )
    components: dict[str, Component] = {}
    cards: dict[str, dict] = {}
    uses: dict[str, set[str]] = {}

    def component(ref: str, **kwargs) -> Component:
        if ref not in components:
            components[ref] = Component(bom_ref=ref, **kwargs)
            bom.components.add(components[ref])
        return components[ref]

    def sha256(hex_digest: str):
        return [HashType(alg=HashAlgorithm.SHA_256, content=hex_digest)]

    for report in reports:
        if not report.verified:
            raise HostError(f"{report.path}: not verified; a BOM lists verified reports only")
        pred = report.predicate
        results = pred.get("results") or {}
        model = _subject(report, "model")
        if model is None:
            raise HostError(f"{report.path}: the report names no model")
        model_ref = f"model:{model['sha256']}"
        card = cards.setdefault(
            model_ref,
            {
                "modelParameters": {
                    "inputs": _io_formats(results, "inputs"),
                    "outputs": _io_formats(results, "outputs"),
                    "datasets": [],
                },
                "quantitativeAnalysis": {"performanceMetrics": []},
            },
        )
        mc = component(
            model_ref,
            type=ComponentType.MACHINE_LEARNING_MODEL,
            name=model["name"],
            hashes=sha256(model["sha256"]),
        )
        envelope_digest = hashlib.sha256(report.path.read_bytes()).hexdigest()
        mc.properties.add(
            Property(
                name=f"{_PROP}report",
                value=f"run {pred.get('run_id')} status {pred.get('status')} "
                f"device {report.device_name} sha256:{envelope_digest}",
            )
        )
        signature = results.get("model_signature") or {}
        if signature.get("status") == "verified":
            verified = f"verified by {signature.get('key')} on {report.device_name}"
            if signature.get("manifest_sha256"):
                verified += f"; OMS manifest sha256:{signature['manifest_sha256']}"
            mc.properties.add(Property(name=f"{_PROP}model_signature", value=verified))
        golden = _subject(report, "golden")
        if golden is not None:
            golden_ref = f"golden:{golden['sha256']}"
            component(
                golden_ref,
                type=ComponentType.DATA,
                name=golden["name"],
                hashes=sha256(golden["sha256"]),
                description="edgequal golden set: representative inputs and reference outputs",
            )
            if {"ref": golden_ref} not in card["modelParameters"]["datasets"]:
                card["modelParameters"]["datasets"].append({"ref": golden_ref})
        for s in report.subjects:
            if s.get("role") == "external_data":
                component(
                    f"external-data:{s['sha256']}",
                    type=ComponentType.DATA,
                    name=s["name"],
                    hashes=sha256(s["sha256"]),
                    description=f"external data of {model['name']}",
                )
                uses.setdefault(model_ref, set()).add(f"external-data:{s['sha256']}")
        runtime, version = _runtime(results)
        runtime_ref = f"runtime:{runtime}@{version}"
        component(runtime_ref, type=ComponentType.FRAMEWORK, name=runtime, version=version)
        uses.setdefault(model_ref, set()).add(runtime_ref)
        fp = pred.get("fingerprint") or {}
        for env in fp.get("runtime_envs") or []:
            env_ref = f"runtime:{env.get('runtime')}@{env.get('version')}"
            ec = component(
                env_ref,
                type=ComponentType.FRAMEWORK,
                name=str(env.get("runtime")),
                version=str(env.get("version")),
            )
            ec.properties.add(Property(name=f"{_PROP}runtime_env", value=str(env.get("name"))))
            for wheel in env.get("wheels") or []:
                if wheel.get("sha256"):
                    ec.properties.add(
                        Property(
                            name=f"{_PROP}wheel",
                            value=f"{wheel.get('file')} sha256:{wheel['sha256']}",
                        )
                    )
            uses.setdefault(model_ref, set()).add(env_ref)
        device_ref = f"device:{report.key_fingerprint}"
        dc = component(device_ref, type=ComponentType.DEVICE, name=str(report.device_name))
        for key in (
            "board_model",
            "soc",
            "kernel",
            "os_release",
            "architecture",
            "python",
            "agent_version",
        ):
            if fp.get(key) is not None:
                dc.properties.add(Property(name=f"{_PROP}{key}", value=str(fp[key])))
        dc.properties.add(Property(name=f"{_PROP}device_key", value=str(report.key_fingerprint)))
        card["quantitativeAnalysis"]["performanceMetrics"].extend(performance_metrics(report))

    for ref, deps in uses.items():
        bom.register_dependency(components[ref], [components[d] for d in sorted(deps)])
    document = json.loads(JsonV1Dot6(bom).output_as_string())
    for c in document.get("components", []):
        if c.get("bom-ref") in cards:
            card = cards[c["bom-ref"]]
            if not card["modelParameters"]["datasets"]:
                del card["modelParameters"]["datasets"]
            c["modelCard"] = card
    _validate(document)
    return document


def _validate(document: dict) -> None:
    """Refuse to hand out a BOM the CycloneDX 1.6 schema rejects."""
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(document))
    if error is not None:
        raise HostError(f"the CycloneDX BOM does not validate: {error}")
