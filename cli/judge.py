"""``edgequal verify``, ``gate``, ``compare`` and ``report html``: reading signed reports
(host/devices/verify.py, host/judge/gate.py, host/judge/compare.py, host/present/html/report.py); also the gate and page
``qualify --gate``/``--html`` run after a qualification."""

from __future__ import annotations

from pathlib import Path

from edgequal.contract.cli_args import examples

from ..host.present.exports import EXPORTS


def cmd_verify(args) -> int:
    """``edgequal verify``: the library's ``edgequal.verify``, in one line."""
    from edgequal.judging import verify

    from ..host.present.terminal.summary import print_line

    report = verify(args.report, device=args.device, artifacts=args.artifact)
    if args.json:
        import json

        from ..host.present.terminal.summary import write_json

        verified = {
            "verified": True,
            "run_id": report.run_id,
            "device": report.device,
            "key_fingerprint": report.key_fingerprint,
            "status": report.status,
            "reason": report.predicate.get("reason"),
            "subjects": report.subjects,
            "artifacts_checked": [str(a) for a in args.artifact],
            "nonce_issued_by_this_host": report.issued_here,
        }
        write_json(json.dumps(verified, indent=1))
        return 0
    print_line(
        f"verified: run {report.run_id} signed by device '{report.device}' ({report.key_fingerprint}), "
        f"status {report.status}, {len(report.subjects)} subjects"
        + (
            ", nonce issued by this host"
            if report.issued_here
            else ", nonce not issued by this host"
        )
    )
    return 0


def load_gate_policy(path: Path):
    from ..host.judge.policy import load_policy

    return load_policy(path)


def check_plan_for_policy(plan, policy) -> None:
    """Refuse a run whose plan (a :class:`Plan`) ``--gate``'s policy would fail for lacking
    a phase: a profile adds none, so the plan's phases are known before connecting."""
    if policy is None or policy.requires_plan is None:
        return
    from ..host.errors import UsageError
    from ..host.judge.checks import plan_shortfall

    short = plan_shortfall(plan.to_json(), policy.requires_plan)
    if short is not None:
        needed, ran = short
        raise UsageError(
            f"policy {policy.name} needs plan {policy.requires_plan} ({needed}); "
            f"this run would be {ran}",
            hint=f"use --plan {policy.requires_plan}",
        )


def cmd_gate_compare_report(args) -> int:
    """``gate``: exit 0 passed, 1 failed; ``compare``/``report html``: 1 if a report did not verify."""
    import json

    from ..host.devices.trust import KnownDevices
    from ..host.judge.report_file import load_report
    from ..host.present.terminal.summary import print_line, write_json

    if args.command == "gate":
        from edgequal.judging import gate

        policy = load_gate_policy(args.policy)
        noise, prior = (
            _board_noise(args, policy.baseline["min_effect"]) if args.history else (None, None)
        )
        result = gate(
            args.report, policy=policy, device=args.device, baseline=args.baseline, prior=prior
        )
        if args.attest:
            _attest(args, result, policy)
        return _finish_gate(args, result, noise)
    known = KnownDevices()
    reports = [
        load_report(p, known=known, device=getattr(args, "device", None)) for p in args.reports
    ]
    if args.command == "compare":
        from ..host.judge.compare import compare_reports
        from ..host.judge.policy import BASELINE_DEFAULTS
        from ..host.present.terminal.summary import print_comparison

        prior = None
        if getattr(args, "history", None):
            _, prior = _board_noise(args, BASELINE_DEFAULTS["min_effect"], args.reports[0])
        comparison = compare_reports(reports, prior=prior).to_json()
        if args.json:
            write_json(json.dumps(comparison, indent=1))
        else:
            print_comparison(comparison)
    else:
        from ..host.present.html.report import write_report_html

        write_report_html(args.output, reports)
        print_line(f"report page {args.output}")
    return 0 if all(r.verified for r in reports) else 1


def _attest(args, result, policy) -> None:
    """``gate --attest FILE``: the decision signed by this host's key (a verified report only)."""
    from edgequal.judging import attest

    from ..host.present.terminal.summary import print_note

    if not result.verified:
        print_note(f"no gate decision signed into {args.attest}: the report did not verify")
        return
    attest(result, policy=policy, out=args.attest)
    print_note(f"signed gate decision ({'PASSED' if result else 'FAILED'}): {args.attest}")


def cmd_export(args) -> int:
    """``edgequal export REPORT... --format github-benchmark|prometheus|cyclonedx [-o FILE]``."""

    from edgequal.judging import export

    from ..host.present.terminal.summary import print_note, write_json

    exported = export(args.reports, args.format, device=args.device)
    text = EXPORTS[args.format].text(exported)
    if args.output is None:
        write_json(text.rstrip("\n"))
        return 0
    from edgequal.contract.openmetrics import write_textfile

    write_textfile(args.output, text)  # atomically: a collector never reads half a file
    print_note(f"{args.format} export of {len(args.reports)} reports: {args.output}")
    return 0


def cmd_key(args) -> int:
    """``edgequal key show``: this host's gate-decision key (created on first use)."""
    from ..host.judge.attestation import host_key_dir, load_host_key
    from ..host.present.terminal.summary import print_line

    key = load_host_key()
    print_line(f"host key {key.fingerprint()} (keyid {key.keyid()})")
    print_line(f"public key (raw, base64): {key.public_key_b64()}")
    print_line(f"stored in {host_key_dir()}")
    return 0


def _board_noise(args, min_effect: float, report_path=None):
    """``--history URL``: the noise score of the report's board × model × preset and the
    spread it gives the verdicts (host/lab/board_noise.py)."""
    from ..host.devices.trust import KnownDevices
    from ..host.judge.report_file import load_report
    from ..host.lab.board_noise import history_spread

    path = report_path if report_path is not None else args.report
    report = load_report(path, known=KnownDevices(), device=getattr(args, "device", None))
    return history_spread(args.history, report, min_effect)


def _finish_gate(args, result, noise=None) -> int:
    """JUnit, page, and the verdict on the screen or as JSON; the gate's exit code.
    ``noise``: the board's noise score (``gate --history``), shown beside the verdict."""
    import json

    from ..host.present.terminal.summary import print_gate_result, print_note, write_json

    if getattr(args, "junit", None):
        from ..host.judge.junit import write_junit

        write_junit(args.junit, [result])
    if getattr(args, "html", None):
        from ..host.devices.trust import KnownDevices
        from ..host.judge.report_file import load_report
        from ..host.present.html.report import write_report_html

        write_report_html(
            args.html, [load_report(result.report, known=KnownDevices())], gate=[result]
        )
    if args.command == "gate" and args.json:
        out = result.to_json()
        if noise is not None:
            out["board_noise"] = noise.to_json()
        write_json(json.dumps(out, indent=1))
    elif args.command == "gate" or not args.json:  # qualify --json keeps stdout one JSON document
        print_gate_result(result.to_json())
    if noise is not None and noise.too_noisy:
        print_note(noise.message())
    return 0 if result.passed else 1


def gate_after_qualify(args, policy, report_path: Path, device_name: str, predicate) -> int:
    """``qualify --gate POLICY`` / ``--html PAGE``: the gate decides the exit code when asked."""
    if policy is None:
        from edgequal.contract.exit_codes import exit_code_for

        from ..host.devices.trust import KnownDevices
        from ..host.judge.report_file import load_report
        from ..host.present.html.report import write_report_html

        write_report_html(args.html, [load_report(report_path, known=KnownDevices())])
        return exit_code_for(predicate["status"], predicate.get("findings", []))
    from ..host.judge.gate import run_gate
    from ..host.judge.report_file import read_report_bytes

    result = run_gate(
        read_report_bytes(report_path), policy, name=str(report_path), device=device_name
    )
    return _finish_gate(args, result)


def add_parsers(sub) -> None:
    """``verify``, ``gate``, ``compare``, ``report html``, ``export`` and ``key``: their flags."""
    _add_verify_parser(sub)
    _add_gate_parser(sub)
    _add_compare_parser(sub)
    _add_render_parsers(sub)


def _add_verify_parser(sub) -> None:
    """``verify``: a report, the device that signed it, the artifacts it names."""
    v = sub.add_parser("verify", help="verify a signed report")
    examples(
        v,
        "edgequal verify pi5.report.json",
        "edgequal verify pi5.report.json --device pi5 --artifact model.onnx --json",
    )
    v.add_argument("report", type=Path)
    v.add_argument("--device", help="the device that must have signed it")
    v.add_argument(
        "--artifact",
        type=Path,
        action="append",
        default=[],
        help="a file whose sha256 must be a subject",
    )
    v.add_argument("--json", action="store_true", help="print what was verified as JSON")


def _add_gate_parser(sub) -> None:
    """``gate``: a report against a policy and a baseline; JUnit, page, attestation."""

    gt = sub.add_parser("gate", help="judge a signed report against a policy (and a baseline)")
    examples(
        gt,
        "edgequal gate pi5.report.json --policy docs/policies/nightly.toml",
        "edgequal gate pi5.report.json --policy gate.toml --baseline last.json --junit gate.xml",
        "edgequal gate pi5.report.json --policy gate.toml --attest gate.intoto.json",
    )
    gt.add_argument("report", type=Path)
    gt.add_argument("--policy", type=Path, required=True, help="policy TOML (docs/gating.md)")
    gt.add_argument("--baseline", type=Path, help="the last approved report to compare with")
    gt.add_argument(
        "--history",
        metavar="URL",
        help="history database: the board's noise score is the run-to-run spread the baseline "
        "verdict assumes, and marks it too noisy for the policy's minimum effect (CV of its "
        "recorded clean p50 × 3 > it; docs/history.md, docs/gating.md)",
    )
    gt.add_argument("--junit", type=Path, metavar="FILE", help="write JUnit XML here")
    gt.add_argument("--json", action="store_true", help="print the verdict as JSON")
    gt.add_argument("--device", help="the device that must have signed the report")
    gt.add_argument("--html", type=Path, metavar="PAGE", help="also write the report page here")
    gt.add_argument(
        "--attest",
        type=Path,
        metavar="FILE",
        help="write the decision as an in-toto Test Result attestation signed by this host's "
        "key (edgequal key show)",
    )


def _add_compare_parser(sub) -> None:
    """``compare``: reports side by side, the first the reference."""
    c = sub.add_parser("compare", help="compare reports side by side (the first is the reference)")
    examples(
        c, "edgequal compare last.json pi5.report.json", "edgequal compare a.json b.json --json"
    )
    c.add_argument("reports", type=Path, nargs="+", metavar="REPORT")
    c.add_argument("--json", action="store_true", help="print the comparison as JSON")
    c.add_argument(
        "--history",
        metavar="URL",
        help="history database: the first report's board noise is the run-to-run spread the "
        "p50 verdicts assume (docs/gating.md)",
    )


def _add_render_parsers(sub) -> None:
    """``report html``, ``export`` and ``key show``: verified reports rendered, exported,
    and the host key that signs gate decisions."""
    r = sub.add_parser("report", help="render reports")
    examples(r, "edgequal report html pi5.report.json -o pi5.html")
    rsub = r.add_subparsers(dest="report_command", required=True)
    rh = rsub.add_parser("html", help="one self-contained HTML page with plots")
    examples(
        rh,
        "edgequal report html pi5.report.json -o pi5.html",
        "edgequal report html last.json pi5.report.json -o both.html --device pi5",
    )
    rh.add_argument("reports", type=Path, nargs="+", metavar="REPORT")
    rh.add_argument("-o", "--output", type=Path, required=True, metavar="PAGE")
    rh.add_argument("--device", help="the device that must have signed the reports")
    ex = sub.add_parser("export", help="verified reports for dashboards (docs/api.md)")
    examples(
        ex,
        "edgequal export nightly/reports/*.json --format github-benchmark -o bench.json",
        "edgequal export pi5.report.json --format prometheus -o /var/lib/node_exporter/eq.prom",
        "edgequal export pi5.report.json jetson.report.json --format cyclonedx -o bom.json",
    )
    ex.add_argument("reports", type=Path, nargs="+", metavar="REPORT")
    ex.add_argument(
        "--format",
        required=True,
        choices=list(EXPORTS),
        help="; ".join(f"{f.name}: {f.help}" for f in EXPORTS.values()),
    )
    ex.add_argument(
        "-o", "--output", type=Path, metavar="FILE", help="write here atomically (default stdout)"
    )
    ex.add_argument("--device", help="the device that must have signed the reports")
    k = sub.add_parser("key", help="this host's key that signs gate decisions")
    examples(k, "edgequal key show")
    ksub = k.add_subparsers(dest="key_command", required=True)
    examples(
        ksub.add_parser("show", help="the key's fingerprint and public key (created on first use)"),
        "edgequal key show   # what consumers of gate --attest pin",
    )
