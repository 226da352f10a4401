"""``edgequal demo``: example models qualified on a local agent, each showing one thing
edgequal finds.

Needs no device: the agent runs on 127.0.0.1 and the reports are signed and verified
exactly as they would be from a board. The models (:data:`SHOWCASES`):

- ``classifier.onnx`` on an emulated board (``device_emulator.py``: a sysfs tree that
  heats with the workers' CPU time and throttles them past its trip point), with a
  sustained phase: the throttling is detected and attributed;
- ``classifier_qdq.onnx``, its int8 variant, against the float model's outputs: the
  drift, and the decisions near the threshold that flip;
- ``unsupported_op.onnx``, an operator onnxruntime cannot run: a finding naming it;
- ``colour.onnx`` from raw images through the device's declared pipeline, against a
  reference made in BGR (``pipeline.py``): the device names the swapped channels;
- ``classifier.tflite`` on LiteRT: the control, which passes.

Everything goes under ``out`` (default ``<state dir>/demo``, never the current
directory): models, golden sets, signed reports and the page. ``quick`` shortens every
phase (one cold load, a warm-up of 0.2 s at least and until steady, half a second of
latency, a 6 s sustained phase; the pipeline model's warm-up 1 s at most) for CI and tests.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from edgequal.contract.cli_args import parse_duration_s
from edgequal.contract.plan import make_plan

from ..host.devices.nonces import NonceLedger
from ..host.devices.qualify import pin_device_key, qualify
from ..host.devices.trust import KnownDevices
from ..host.examples.catalog import EXAMPLES, build_example, example_inputs
from ..host.golden import make_golden
from ..host.paths import state_dir
from ..host.present.terminal.summary import ProgressDisplay, console, print_line, print_summary
from ..host.present.units import duration_text
from ..host.transport.local import LocalTransport

GOLDEN_CASES = 24
BOARD_TRIP_C = 60.0
PIPELINE_QUICK_WARMUP_MAX_S = 1.0
"""The longest warm-up of the pipeline model (D) under ``--quick``."""


@dataclass(frozen=True)
class Showcase:
    """One demo model and what it is there to show (``shows``: board, flips, operator,
    pipeline, pass)."""

    name: str
    shows: str
    golden: bool = True
    reference: str | None = None
    """The catalogue model whose outputs are this one's reference (the float model)."""


SHOWCASES = (
    Showcase("classifier", "board"),
    Showcase("classifier_qdq", "flips", reference="classifier"),
    Showcase("unsupported_op", "operator", golden=False),
    Showcase("colour", "pipeline"),
    Showcase("classifier_tflite", "pass"),
)


def default_out() -> Path:
    """Where the demo writes without ``-o``: ``<state dir>/demo``."""
    return state_dir() / "demo"


def prepare(out: Path) -> dict[str, tuple[Path, Path | None]]:
    """Build the demo models and their golden sets: ``{name: (model, golden or None)}``.

    A variant's golden set holds its reference model's outputs (the float classifier's
    for the int8 one) under the int8 tolerance class, as a user checks a quantized export.
    """
    from edgequal.contract.golden import read_golden

    models = out / "models"
    made: dict[str, tuple[Path, Path | None]] = {}
    for show in SHOWCASES:
        if show.shows == "pipeline":
            made[show.name] = _prepare_pipeline(out)
            continue
        model = build_example(show.name, models)
        if not show.golden:
            made[show.name] = (model, None)
            continue
        cases = {
            f"case{i:02d}": feeds for i, feeds in enumerate(example_inputs(show.name, GOLDEN_CASES))
        }
        golden = out / "golden" / f"{show.name}.golden.npz"
        golden.parent.mkdir(parents=True, exist_ok=True)
        rule = EXAMPLES[show.name].decision_rule
        if show.reference is None:
            make_golden(model, cases, golden, decision=rule)
        else:
            reference = read_golden(made[show.reference][1])
            outputs = out / "golden" / f"{show.name}.reference-outputs.npz"
            np.savez(
                outputs,
                **{f"{c.name}/{k}": v for c in reference.cases for k, v in c.outputs.items()},
            )
            int8 = {"class": "int8"}
            make_golden(
                model,
                cases,
                golden,
                outputs=outputs,
                decision=rule,
                tolerances={name: int8 for name in reference.cases[0].outputs},
            )
        made[show.name] = (model, golden)
    return made


def _prepare_pipeline(out: Path) -> tuple[Path, Path]:
    """The pipeline example (``pipeline.py``): raw images, the device's declared pipeline,
    and a golden set whose reference was made in BGR, so decisions flip and the device
    names the swapped channels."""
    from ..host.examples.pipeline import build_pipeline_example, make_pipeline_golden

    example = build_pipeline_example(out / "pipeline")
    golden = out / "golden" / "colour.golden.npz"
    golden.parent.mkdir(parents=True, exist_ok=True)
    make_pipeline_golden(example, golden)
    return example.model, golden


def demo_plan(show: Showcase, quick: bool, sustain_s: float | None):
    """The plan of one demo model: the quick preset on one thread (shorter still with
    ``quick``), and a sustained phase in 1 s windows for the board model (the emulated board
    starts cold, so there is no cooldown to wait for)."""
    # One thread: an intra-op pool spinning against other processes on a small, busy
    # machine would make the figures (and the demo's length) a matter of luck.
    short = {"cold_runs": 1, "warmup_min_s": 0.2, "latency_min_s": 0.5} if quick else {}
    if quick and show.shows == "pipeline":
        # Its warm-up runs the whole path (decode, preprocess, run, decide), whose spread
        # stays above the steadiness limit on a busy machine: it would warm up for the
        # plan's whole 10 s, while what the model shows is the channel swap, not a figure.
        short["warmup_max_s"] = PIPELINE_QUICK_WARMUP_MAX_S
    if show.shows != "board":
        return make_plan("quick", threads=1, **short)
    sustain = sustain_s if sustain_s else (6.0 if quick else 12.0)
    return make_plan("quick", sustain_s=sustain, window_s=1.0, cooldown=False, threads=1, **short)


NEXT_STEP = (
    "Next: your own model here, on a Pi over SSH, in a nightly lab, as a release gate in CI: "
    "docs/getting-started.md"
)
"""The demo's last line: where a new user goes from here."""


def run_demo(
    out: Path | None = None,
    sustain: str | None = None,
    quick: bool = False,
    summaries: bool = False,
) -> int:
    """Qualify the showcase models; print one line per model with what it showed, where the
    page and the signed reports are, and the next step (:data:`NEXT_STEP`).

    The terminal gets a live view of each run's phases (on a terminal only, and gone when the
    run ends) and one line per model; the page holds every model's summary and plots.
    ``summaries`` also prints each model's terminal summary, as ``qualify`` does.
    Exit code 0 when every model showed what it is there to show, else 1 (its line says why).
    """
    out = Path(out) if out is not None else default_out()
    t0 = time.monotonic()
    print_line(f"building example models and golden sets in {out}/ ...")
    made = prepare(out)
    sustain_s = parse_duration_s(sustain) if sustain else None
    known = KnownDevices()
    ledger = NonceLedger()
    reports: list[tuple[Showcase, Path, dict]] = []
    ok = True

    def run(transport, show: Showcase, on_event=None, where="the local agent") -> None:
        nonlocal ok
        model, golden = made[show.name]
        path = out / "reports" / f"{model.name}.report.json"
        if not reports:
            print_line(f"qualifying {len(SHOWCASES)} example models; what each model showed:")
        # The live view only (on a terminal, cleared when the run ends): a log gets no line
        # per phase, and the run id is in the report.
        title = f"qualifying {model.name} on {where}"
        with ProgressDisplay(title, enabled=console.is_terminal) as display:

            def events(event: dict) -> None:
                if event.get("type") != "run":
                    display.on_event(event)
                if on_event:
                    on_event(event)

            q = qualify(
                transport,
                model,
                golden,
                demo_plan(show, quick, sustain_s),
                known=known,
                device_name="local",
                on_event=events,
                out=path,
            )
        ledger.record(q.report.nonce, q.report.run_id, q.envelope)
        if summaries:
            print_summary(q.report.predicate, "local", str(path))
            print_line("")
        shown, text = showed(show, q.report.predicate)
        ok = ok and shown
        status = str(q.report.predicate.get("status")).upper()
        letter = chr(65 + len(reports))
        print_line(f"  {letter} {path.name.removesuffix('.report.json')}: {status}. {text}")
        reports.append((show, path, q.report.predicate))

    board = [s for s in SHOWCASES if s.shows == "board"]
    others = [s for s in SHOWCASES if s.shows != "board"]
    for show in board:
        run_on_emulated_board(out, known, lambda t, cb, s=show: run(t, s, cb, "an emulated board"))
    with LocalTransport() as transport:
        pin_device_key(transport, known, "local", "local")
        for show in others:
            run(transport, show)

    from ..host.judge.report_file import load_report
    from ..host.present.html.report import write_report_html

    page = write_report_html(
        out / "report.html", [load_report(p, known=known, device="local") for _, p, _ in reports]
    )
    first = reports[0][1]
    print_line(
        f"signed reports in {first.parent}/ (check one: edgequal verify {first} --device local)"
    )
    print_line(f"demo done in {time.monotonic() - t0:.0f} s. Open the page: {page}")
    print_line("  (every model's summary, plots, findings and the comparison of the five)")
    print_line(NEXT_STEP)
    return 0 if ok else 1


def run_on_emulated_board(out: Path, known: KnownDevices, run) -> None:
    """Start the local agent on an emulated board's tree and ``run(transport, on_event)``.

    The emulator heats from the sustained phase on (the board is cold until then) by the
    CPU time of the agent's workers, and throttles them from outside past
    :data:`BOARD_TRIP_C`. When a local agent already runs (another host process started
    it), the board cannot be given to it: the model runs there without the emulator.
    """
    from ..host.examples.device_emulator import DeviceEmulator

    tree = out / "emulated-board"
    with LocalTransport(root=str(tree)) as transport:
        pin_device_key(transport, known, "local", "local")
        if transport.agent_pid is None:
            print_line("the local agent was already running: no emulated board for this model")
            run(transport, None)
            return
        emulator = DeviceEmulator(
            tree,
            transport.agent_pid,
            ambient_c=40.0,
            trip_c=BOARD_TRIP_C,
            # It heats by the workers' CPU seconds (12 °C each, slow cooling), so it trips
            # after about 1.8 CPU seconds of the sustained phase however busy the machine
            # is, and throttled to half it still heats: it stays throttled to the end.
            heat_c_per_cpu_s=12.0,
            cool_rate=0.05,
            throttle_duty=0.5,
        )

        def on_event(event: dict) -> None:
            starting = event.get("phase") == "sustained" and event.get("state") == "started"
            if starting and emulator.start_monotonic is None:
                emulator.start()

        try:
            run(transport, on_event)
        finally:
            if emulator.start_monotonic is not None:
                emulator.stop()


def showed(show: Showcase, predicate: dict) -> tuple[bool, str]:
    """Whether a demo model showed what it is there to show, and what it showed, in words."""
    results = predicate.get("results") or {}
    findings = predicate.get("findings") or []
    if predicate.get("status") == "inconclusive":
        return False, f"{predicate.get('reason')} (other processes took the CPU)"
    if show.shows == "board":
        s = results.get("sustained") or {}
        if not s.get("throttled"):
            return False, "no throttling was measured: " + str(
                s.get("reason") or "no sustained phase"
            )
        reasons = sorted(
            {r for w in s.get("windows_detail") or [] for r in w.get("throttle_reasons") or []}
        )
        first = s["time_to_first_throttle_s"]
        return s.get("cause") == "throttling", (
            f"the emulated board passed its {s.get('trip_c'):g} °C trip point and throttled "
            f"{first:.0f} s into the sustained phase (peak {s.get('peak_temp_c') or 0:.0f} °C): "
            f"throughput fell to {s.get('stability', 0):.0%} of its peak, cause {s.get('cause')} "
            f"({', '.join(reasons)})"
        )
    if show.shows == "flips":
        drift = results.get("drift") or {}
        d = drift.get("decisions") or {}
        worst = max(
            ((o.get("max_abs") or 0.0) for o in (drift.get("outputs") or {}).values()), default=0.0
        )
        flipped = d.get("flips_near_threshold") or []
        text = (
            f"int8 drift against the float model up to {worst:.3g}; {len(flipped)} of "
            f"{d.get('near_threshold_count')} cases near the threshold flipped"
            + (f": {', '.join(flipped)}" if flipped else "")
        )
        return bool(flipped), text
    if show.shows == "pipeline":
        mismatch = [f for f in findings if f.get("kind") == "preprocessing_mismatch"]
        d = (results.get("drift") or {}).get("decisions") or {}
        if not mismatch:
            return False, "the device's preprocessing matched the reference"
        f = mismatch[0]
        return True, (
            f"raw images through the device's pipeline: {f['message']}: "
            f"{d.get('flip_count', 0)} of {d.get('total_cases', 0)} decisions flipped"
        )
    if show.shows == "operator":
        rejected = [f for f in findings if f.get("kind") == "model_rejected" and f.get("operator")]
        if not rejected:
            return False, "the runtime did not reject it for an operator"
        f = rejected[0]
        return True, (
            f"rejected by {f.get('runtime')} {f.get('runtime_version') or ''}".rstrip()
            + f": operator {f['operator']} is not registered (a finding in a signed report; "
            "the agent kept serving)"
        )
    shapes = (results.get("latency") or {}).get("per_shape") or []
    p50 = shapes[0]["summary"].get("p50_ms") if shapes else None
    passed = predicate.get("status") in ("passed", "degraded")
    return passed, f"the control: p50 {duration_text(p50)}, no decision flipped" if passed else (
        str(predicate.get("reason"))
    )
