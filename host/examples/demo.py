"""``edgequal demo``: example models and golden sets, qualified on a local agent.

Needs no device: the agent runs on 127.0.0.1 and the reports are signed and
verified exactly as they would be from a board.
"""

from __future__ import annotations

from pathlib import Path

from edgequal.agent.plan import make_plan, parse_duration_s

from ..devices.nonces import NonceLedger
from ..devices.qualify import pin_device_key, qualify
from ..devices.trust import KnownDevices
from ..golden import make_golden
from ..present.terminal.summary import ProgressDisplay, print_line, print_summary
from ..transport.local import LocalTransport
from .catalog import EXAMPLES, build_example, example_inputs

DEMO_MODELS = ("classifier", "classifier_tflite", "classifier_int8")
GOLDEN_CASES = 24


def prepare(out: Path) -> list[tuple[Path, Path]]:
    """Build the demo models and a golden set for each; returns (model, golden) pairs."""
    models = out / "models"
    pairs = []
    for name in DEMO_MODELS:
        model = build_example(name, models)
        cases = {
            f"case{i:02d}": feeds for i, feeds in enumerate(example_inputs(name, GOLDEN_CASES))
        }
        golden = out / "golden" / f"{name}.golden.npz"
        golden.parent.mkdir(parents=True, exist_ok=True)
        make_golden(model, cases, golden, decision=EXAMPLES[name].decision_rule)
        pairs.append((model, golden))
    return pairs


def run_demo(out: Path, sustain: str = "6s") -> int:
    """Qualify the example models on a local agent; print summaries and where the reports are."""
    out = Path(out)
    print_line(f"building example models and golden sets in {out}/ ...")
    pairs = prepare(out)
    known = KnownDevices()
    reports = []
    statuses = []
    sustain_s = parse_duration_s(sustain)
    with LocalTransport() as transport:
        pin_device_key(transport, known, "local", "local")
        for i, (model, golden) in enumerate(pairs):
            plan = make_plan(
                "quick",
                sustain_s=sustain_s if i == 0 else 0.0,
                window_s=max(1.0, sustain_s / 6) if sustain_s else None,
            )
            path = out / "reports" / f"{model.name}.report.json"
            with ProgressDisplay(f"qualifying {model.name} on the local agent") as display:
                qualification = qualify(
                    transport,
                    model,
                    golden,
                    plan,
                    known=known,
                    device_name="local",
                    on_event=display.on_event,
                    out=path,
                )
            NonceLedger().record(
                qualification.report.nonce, qualification.report.run_id, qualification.envelope
            )
            print_summary(qualification.report.predicate, "local", str(path))
            print_line("")
            reports.append(path)
            statuses.append(
                (qualification.report.status, excluded_note(qualification.report.predicate))
            )
        from .pipeline import demo_pipeline

        with ProgressDisplay("qualifying colour.onnx from raw images") as display:
            qualification, path = demo_pipeline(transport, known, out, display.on_event)
        print_summary(qualification.report.predicate, "local", str(path))
        print_line("  (expected: its reference was made in BGR, so decisions flip)\n")
        reports.append(path)
    from ..judge.report_file import load_report
    from ..present.html.report import write_report_html

    page = write_report_html(
        out / "report.html", [load_report(p, known=known, device="local") for p in reports]
    )
    print_line("signed reports (verify with: edgequal verify REPORT --device local):")
    for path, (status, note) in zip(reports, statuses):
        print_line(f"  {path}  ({status}{'; ' + note if note else ''})")
    print_line(f"the page with plots: {page}")
    return 0 if all(s in ("passed", "degraded") for s, _ in statuses) else 1


def excluded_note(predicate: dict) -> str | None:
    """How many timed calls were left out of the figures that decide, and why, or None."""
    shapes = ((predicate.get("results") or {}).get("latency") or {}).get("per_shape") or []
    pre = [e["preemption"] for e in shapes if e.get("preemption")]
    if not pre:
        return None
    excluded, calls = sum(p["excluded"] for p in pre), sum(p["calls"] for p in pre)
    waits = [(p.get("evidence") or {}).get("runq_wait_share") for p in pre]
    waited = max((w for w in waits if w is not None), default=None)
    note = f"{excluded} of {calls} timed calls excluded: the worker was preempted"
    if excluded and waited is not None:
        note += f", it waited {waited:.0%} of its runnable time"
    return note
