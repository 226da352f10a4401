"""``edgequal rerun REPORT``: the report's signed plan again, with the same artifacts (by
digest), on the same device, compared with the report figure by figure
(host/judge/rerun.py; exit 0 reproduced, 1 a figure DIFFERENT, 2 bad input, 3 device)."""

from __future__ import annotations

from pathlib import Path

from edgequal.contract.cli_args import examples

from .device_args import add_connection_options, open_device_from_args


def cmd_rerun(args) -> int:
    """``edgequal rerun``: find the artifacts, run the plan, compare, print the verdicts."""
    import json

    from ..host.devices.trust import KnownDevices
    from ..host.errors import printable
    from ..host.judge.policy import BASELINE_DEFAULTS
    from ..host.judge.report_file import load_report
    from ..host.judge.rerun import judge_rerun, rerun_inputs
    from ..host.present.terminal.summary import (
        ProgressDisplay,
        print_comparison,
        print_line,
        print_note,
        print_plan,
        write_json,
    )
    from .qualify import reproduce_lines

    known = KnownDevices()
    # Everything the host can check first: the report verifies, every artifact is found by
    # its digest (a file given of another digest is refused), the policy reads.
    inputs = rerun_inputs(args.report, known=known, model=args.model, golden=args.golden)
    settings = dict(BASELINE_DEFAULTS)
    if args.policy is not None:
        from .judge import load_gate_policy

        settings.update(load_gate_policy(args.policy).baseline)
    prior = None
    if args.history:
        from ..host.lab.board_noise import history_spread

        _, prior = history_spread(args.history, inputs.report, settings["min_effect"])
    args.device = args.device or inputs.device
    with open_device_from_args(args) as device:
        print_plan(inputs.plan, stderr=args.json)
        with ProgressDisplay(
            f"rerunning {printable(args.report.name)} on {device.address}", enabled=not args.json
        ) as display:
            report = device.qualify(
                inputs.model,
                inputs.golden,
                plan=inputs.plan,
                out=args.output,
                on_progress=display.on_event,
                on_notice=print_note,
                coload_models=inputs.coload_models,
                model_signature=inputs.model_signature,
                command=getattr(args, "argv", None),
            )
    rerun = load_report(report.path, known=known, device=report.device)
    result = judge_rerun(inputs.report, rerun, settings, prior=prior)
    if args.json:
        write_json(json.dumps({"report": str(args.report), "rerun": str(report.path),
                               **result.to_json()}, indent=1))  # fmt: skip
        return result.exit_code
    print_comparison(result.comparison.to_json())
    for figure, verdict in result.details.items():  # each with the runs and spread it used
        print_line(f"{verdict['verdict']:9} {figure}: {verdict['basis']}")
    if not result.same_plan:  # the agent signs the plan it ran: a difference is news
        print_note("the rerun's signed plan differs from the report's")
    if not result.same_artifacts:
        print_note("the rerun's signed artifacts differ from the report's")
    print_line(result.headline())
    print_line(f"signed report of the rerun: {printable(report.path)}")
    for line in reproduce_lines(report.path):
        print_line(line)
    return result.exit_code


def add_parsers(sub) -> None:
    """``rerun``: its flags."""
    r = sub.add_parser(
        "rerun",
        help="repeat a report's signed plan with the same artifacts and compare the two",
        description="Run REPORT's signed plan again, with the same model and golden set (found "
        "by their digests: beside the report, where the host recorded them, or --model/"
        "--golden) on the device that signed it (or --device), then compare the two runs "
        "figure by figure: SAME, DIFFERENT or UNKNOWN. Exit 0 reproduced (no figure "
        "DIFFERENT), 1 a figure DIFFERENT, 2 bad input, 3 device.",
    )
    examples(
        r,
        "edgequal rerun pi5.report.json",
        "edgequal rerun pi5.report.json --device pi5-b --model model.onnx --golden g.npz",
        "edgequal rerun pi5.report.json --policy gate.toml --json",
    )
    r.add_argument("report", type=Path, metavar="REPORT", help="the signed report to reproduce")
    r.add_argument(
        "--device",
        help="where to run it (default: the device that signed REPORT, by its trusted name)",
    )
    r.add_argument(
        "--model",
        type=Path,
        metavar="FILE",
        help="the report's model file (its sha256 must be the report's; default: found by "
        "its digest where the host recorded it, or beside REPORT)",
    )
    r.add_argument(
        "--golden",
        type=Path,
        metavar="FILE",
        help="the report's golden set (its sha256 must be the report's; default: as --model)",
    )
    r.add_argument(
        "--policy",
        type=Path,
        metavar="POLICY",
        help="judge with this policy's [baseline] settings (minimum effect, test levels; "
        "default: docs/gating.md's)",
    )
    r.add_argument(
        "--history",
        metavar="URL",
        help="history database: the board's noise score is the run-to-run spread the p50 "
        "verdict assumes (docs/gating.md); without it or --repeat runs, one run a side is UNKNOWN",
    )
    add_connection_options(r)
    r.add_argument(
        "-o",
        "--output",
        type=Path,
        help="write the rerun's signed report here (default: as qualify's)",
    )
    r.add_argument("--json", action="store_true", help="print the verdicts as JSON")
