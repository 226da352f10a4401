"""``edgequal fleet run``, ``fleet health``, ``fleet requalify`` and ``approve``: many models
on a lab's boards (host/lab/fleet.py, host/lab/health.py, host/lab/requalify.py; docs/fleet.md)."""

from __future__ import annotations

from pathlib import Path

from edgequal.contract.cli_args import examples

from .judge import check_plan_for_policy, load_gate_policy
from .lab_args import (
    add_history_option,
    add_p_value_option,
    add_repeat_option,
    add_wait_option,
    history_url,
    wait_s,
)
from .plan_args import add_length_options, length_flags


def _history_recorder(args, lab):
    from ..host.lab.history import History

    if args.no_record:
        return None
    url = history_url(args, lab)
    history = History.open(url)

    def recorder(path, device, cell):
        return history.record_file(path, device=device, cell=cell)

    recorder.history = history  # read again after the run for its change points
    return recorder


def _change_settings(args, lab, always: bool = False):
    """The one change sensitivity (``lab/changes.py`` ``change_settings``: the lab's
    ``[changes]``, the gate policy's, ``--p-value``); None when none of them is given and
    not ``always`` (a fleet run then looks for no change points)."""
    from ..host.lab.changes import change_settings

    gate = getattr(args, "gate", None)
    policy = load_gate_policy(gate) if gate else None
    p_value = getattr(args, "p_value", None)
    if not (always or lab.changes or (policy and policy.changes) or p_value is not None):
        return None
    return change_settings(lab, policy, gate, p_value)


def _report_changes(args, lab, runner, recorder, options) -> int:
    """New change points of this fleet run: the JUnit suite, changes.prom, the notes;
    returns how many made a figure worse (docs/history.md)."""
    from ..host.lab.fleet_changes import report_fleet_changes
    from ..host.present.terminal.summary import print_note

    settings = _change_settings(args, lab)
    if settings is None or recorder is None:
        return 0
    new = report_fleet_changes(
        recorder.history,
        lab,
        runner.cell_prefix,
        settings,
        options.out_dir,
        getattr(args, "prometheus", None),
    )
    for c in new:
        if c.fails(settings):
            print_note("new change: " + c.headline())
        elif c.worse:
            print_note("new machine change (not failed): " + c.headline())
        else:
            print_note("new change (better): " + c.headline())
    return sum(1 for c in new if c.fails(settings))


def _run_fleet(lab, models, options, args, title: str, **kwargs) -> int:
    from ..host.lab.fleet import FleetRunner
    from ..host.present.terminal.summary import FleetMatrix, print_note, print_table

    notes = kwargs.pop("notes", None)
    recorder = _history_recorder(args, lab)
    runner = FleetRunner(lab, models, options, record_report=recorder, **kwargs)
    matrix = FleetMatrix(
        title, [m.name for m in models], list(dict.fromkeys(r.device for r in runner.result.runs))
    )
    runner.on_change = matrix.on_change
    if getattr(args, "prometheus", None):
        from ..host.present.exports import PrometheusDirectory

        exporter = PrometheusDirectory(args.prometheus, runner.known, options.out_dir)
        runner.on_change = lambda record: (matrix.on_change(record), exporter.on_change(record))
    runner.result.notes = notes or {}
    with matrix:
        result = runner.run()
    rows = [
        [
            r.model,
            r.device,
            r.state,
            str(r.attempts),
            r.gate_summary or "",
            r.why,
        ]
        for r in result.runs
    ]
    print_table(title, ["model", "device", "state", "attempts", "gate", "why"], rows)
    worse = _report_changes(args, lab, runner, recorder, options)
    print_note(f"reports, index.json, junit.xml and index.html in {options.out_dir}")
    code = result.exit_code()
    return 1 if worse and code == 0 else code


def load_fleet_lab(path):
    """The lab file, its devices read from the labgrid coordinator's places when it names
    one (a place without an agent resource is named and skipped)."""
    from ..host.lab.inventory import load_lab
    from ..host.lab.labgrid_places import resolve_lab
    from ..host.present.terminal.summary import print_note

    lab, skipped = resolve_lab(load_lab(path))
    for place, why in skipped.items():
        print_note(f"labgrid place {place} skipped: {why}")
    if lab.labgrid is not None and not lab.devices:
        from ..host.errors import UsageError

        raise UsageError(
            f"labgrid coordinator {lab.labgrid.coordinator} has no place with an agent for lab {lab.name}",
            hint="edgequal fleet list --lab " + str(path),
        )
    return lab


def _cmd_fleet_list(args) -> int:
    """``fleet list --lab LAB``: the boards, with where their agents are."""
    import json

    from ..host.lab.inventory import load_lab
    from ..host.present.terminal.summary import print_table, write_json

    lab = load_lab(args.lab)
    if lab.labgrid is None:
        rows = [
            {"name": d.name, "tags": list(d.tags), "agent": d.address, "held_by": None, "why": None}
            for d in lab.devices
        ]
    else:
        from ..host.lab.labgrid_places import Coordinator

        coordinator = Coordinator(lab.labgrid.coordinator)
        try:
            places = [p for p in coordinator.places() if lab.labgrid.selects(p.name, p.tags)]
        finally:
            coordinator.close()
        rows = [
            {
                "name": p.name,
                "tags": sorted(f"{k}={v}" for k, v in p.tags.items()),
                "agent": p.agent,
                "held_by": p.acquired,
                "why": p.why,
            }
            for p in places
        ]
    if args.json:
        write_json(json.dumps(rows, indent=1))
        return 0
    title = f"lab {lab.name}" + (f" on labgrid {lab.labgrid.coordinator}" if lab.labgrid else "")
    table = [
        [
            r["name"],
            ", ".join(r["tags"]),
            r["agent"] or "—",
            r["held_by"] or "",
            f"skipped: {r['why']}" if r["why"] else "",
        ]
        for r in rows
    ]
    print_table(title, ["board", "tags", "agent", "held by", "note"], table)
    return 0


def cmd_fleet(args) -> int:
    if args.fleet_command == "list":
        return _cmd_fleet_list(args)
    if args.fleet_command == "health":
        return _cmd_fleet_health(args)
    if args.fleet_command == "requalify":
        return _cmd_fleet_requalify(args)
    from edgequal.contract.cli_args import parse_duration_s

    from ..host.lab.fleet import FleetOptions
    from ..host.lab.health import HealthState, default_health_path
    from ..host.lab.inventory import load_models, parse_tags

    _check_baseline_flags(args)  # flags first, then the files they name
    lab = load_fleet_lab(args.lab)
    models = load_models(args.models)
    wait_limit_s = wait_s(args)
    unhealthy = HealthState.load(args.health_file or default_health_path(lab)).unhealthy()
    if args.skip_noisy:
        unhealthy = {**_noisy(args, lab, models), **unhealthy}
    overrides = {"sustain_s": parse_duration_s(args.sustain)} if args.sustain else {}
    overrides.update(length_flags(args))
    _print_fleet_plans(models, args.plan, overrides, args.gate)
    options = FleetOptions(
        out_dir=args.out,
        tags=parse_tags(args.tags),
        plan=args.plan,
        plan_overrides=overrides,
        resume=args.resume,
        policy_path=args.gate,
        wait_s=wait_limit_s,
        retries=max(0, args.retries),
        lease_ttl_s=lab.lease_ttl_s,
        unhealthy=unhealthy,
        command=tuple(getattr(args, "argv", ())) or None,
        baseline_dir=args.baseline,
        repeat_pairs=args.repeat_until_decided or 0,
        html_pages=not args.no_pages,
    )
    return _run_fleet(lab, models, options, args, f"fleet {lab.name}")


def _check_baseline_flags(args) -> None:
    """``--baseline DIR`` needs ``--gate`` (the gate judges against it) and a folder;
    ``--repeat-until-decided N`` needs a baseline and N ≥ 1."""
    from ..host.errors import UsageError

    baseline = getattr(args, "baseline", None)
    pairs = args.repeat_until_decided
    if baseline is not None:
        if not args.gate:
            raise UsageError("--baseline needs --gate POLICY: the gate judges each run against it")
        if not baseline.is_dir():
            raise UsageError(
                f"--baseline {baseline}: not a folder",
                hint="give an earlier fleet run's --out folder (its reports/MODEL@DEVICE.json)",
            )
    if pairs is not None:
        if pairs < 1:
            raise UsageError(f"--repeat-until-decided needs at least 1 pair, got {pairs}")
        if args.fleet_command == "run" and baseline is None:
            raise UsageError("--repeat-until-decided needs --baseline DIR (and --gate POLICY)")


def _noisy(args, lab, models) -> dict[str, str]:
    """``--skip-noisy``: the lab's boards too noisy (history) for a model of this run."""
    from ..host.lab.board_noise import noisy_boards
    from ..host.lab.history import History
    from ..host.lab.noise import NOISY_PREFIX
    from ..host.present.terminal.summary import print_note

    settings = _change_settings(args, lab, always=True)
    url = history_url(args, lab)
    history = History.open(url)
    try:
        noisy = noisy_boards(
            history.runs(), {d.name for d in lab.devices}, {m.name for m in models}, settings
        )
    finally:
        history.close()
    for why in noisy.values():
        print_note(f"left out (--skip-noisy): {why.removeprefix(NOISY_PREFIX)}")
    return noisy


def _print_fleet_plans(models, preset: str, overrides: dict, policy_path) -> None:
    """One line per plan the models run, before any board is contacted; a plan the
    ``--gate`` policy would fail for lacking a phase is refused here."""
    from ..host.lab.fleet_cells import fleet_plan
    from ..host.present.terminal.summary import print_plan

    policy = load_gate_policy(policy_path) if policy_path else None
    for name in dict.fromkeys(m.plan or preset for m in models):
        plan = fleet_plan(name, None, overrides)
        check_plan_for_policy(plan, policy)
        print_plan(plan, boards=True)


def _cmd_fleet_health(args) -> int:
    """``fleet health``: 0 every board healthy, 1 any unhealthy."""
    import json

    from ..host.lab.health import check_health, default_health_path
    from ..host.lab.inventory import parse_tags
    from ..host.present.terminal.summary import print_note, print_table, write_json

    lab = load_fleet_lab(args.lab)
    state_path = args.health_file or default_health_path(lab)
    checks = check_health(
        lab,
        state_path,
        args.out,
        tags=parse_tags(args.tags),
        accept=args.accept,
        wait_s=wait_s(args),
        retries=max(0, args.retries),
    )
    noise = _health_noise(args, lab)
    if args.json:
        out = [c.to_json() for c in checks]
        for entry in out:
            entry["noise"] = [n.to_json() for n in noise if n.device == entry.get("device")]
        write_json(json.dumps(out, indent=1, default=str))
    else:
        rows = []
        for c in checks:
            clock = c.clock or {}
            offset = clock.get("offset_s")
            rows.append(
                [
                    c.device,
                    "healthy" if c.healthy else "UNHEALTHY",
                    c.status or "",
                    c.agent_version or "",
                    ""
                    if not clock
                    else ("synced" if clock.get("synced") else "UNSYNCED")
                    + ("" if offset is None else f" ({offset:+.1f} s)"),
                    _disk_text(c.disk),
                    c.temp_at_rest_c
                    if isinstance(c.temp_at_rest_c, str)
                    else f"{c.temp_at_rest_c:.1f} °C",
                    (c.key_fingerprint or "")[:23],
                    "; ".join(c.reasons),
                ]
            )
        columns = [
            "device",
            "health",
            "check",
            "agent",
            "clock",
            "disk",
            "temp at rest",
            "key",
            "why",
        ]
        # The verdict and the board's name never fold; the reasons fold instead.
        print_table(f"health {lab.name}", columns, rows, whole=("device", "health", "check"))
        print_note(f"health state: {state_path}")
    for n in noise:
        if n.too_noisy:
            print_note(n.message())
    return 0 if all(c.healthy for c in checks) else 1


def _health_noise(args, lab) -> list:
    """``fleet health``: each board × model's noise score from the history (``--history``,
    else the lab's database when it names one; none otherwise). A mark, not a failure."""
    from ..host.lab.changes import change_settings, find_changes
    from ..host.lab.history import History

    url = history_url(args, lab)
    if url is None:
        return []
    history = History.open(url)
    try:
        devices = {d.name for d in lab.devices}
        rows = [r for r in history.runs() if r["device"] in devices]
    finally:
        history.close()
    return find_changes(rows, change_settings(lab)).noise


def _disk_text(disk: dict) -> str:
    parts = []
    if disk.get("free_bytes"):
        parts.append(f"{disk['free_bytes'] / 2**30:.1f} GiB free")
    quota = disk.get("quota_bytes")
    parts.append(f"quota {quota / 2**30:.1f} GiB" if quota else "no quota")
    if disk.get("max_artifact_bytes"):
        parts.append(f"artifacts ≤ {disk['max_artifact_bytes'] / 2**20:.0f} MiB")
    return ", ".join(parts)


def cmd_approve(args) -> int:
    from ..host.lab.requalify import approve
    from ..host.present.terminal.summary import print_note

    name, device = approve(
        args.report,
        args.model,
        args.golden,
        args.into,
        name=args.name,
        runtime_env=args.runtime_env,
        model_signature=args.model_signature,
    )
    print_note(f"approved {name} on {device} in {args.into}")
    return 0


def _cmd_fleet_requalify(args) -> int:
    from ..host.lab.fleet import FleetOptions
    from ..host.lab.requalify import plan_requalification
    from ..host.present.terminal.summary import print_note

    _check_baseline_flags(args)
    lab = load_fleet_lab(args.lab)
    load_gate_policy(args.policy)  # a bad policy is refused even when nothing runs
    plan = plan_requalification(args.approved, lab, every=args.all, runtime_env=args.runtime_env)
    for key, why in plan.missing_env.items():
        print_note(f"{key}: not re-qualified under {args.runtime_env}: {why}")
    for u in plan.unchanged:
        print_note(f"{u['model']} on {u['device']}: firmware and runtime unchanged; not re-run")
    for key, changes in plan.changes.items():
        what = ", ".join(f"{c['field']}: {c['approved']} → {c['now']}" for c in changes)
        print_note(f"{key}: {what or 're-run'}")
    if not plan.runs:
        if plan.missing_env:
            return 1  # the candidate could be measured nowhere: nothing is qualified
        print_note("nothing changed since the approvals: nothing to re-qualify")
        return 0
    from ..host.lab.health import HealthState, default_health_path

    options = FleetOptions(
        out_dir=args.out,
        policy_path=args.policy,
        repeat_pairs=args.repeat_until_decided or 0,
        wait_s=wait_s(args),
        retries=max(0, args.retries),
        lease_ttl_s=lab.lease_ttl_s,
        # A drifted board is what a re-qualification is for; one that fails its check is not.
        unhealthy=HealthState.load(args.health_file or default_health_path(lab)).unhealthy(
            drift=False
        ),
        command=tuple(getattr(args, "argv", ())) or None,
    )
    notes = {"changes": plan.changes, "unchanged": plan.unchanged}
    if args.runtime_env:
        notes["missing_runtime_env"] = plan.missing_env
    code = _run_fleet(
        lab, plan.models, options, args, f"requalify {lab.name}", pairs=plan.runs, notes=notes
    )
    # A board that could not measure the candidate has not qualified the upgrade.
    return max(code, 1) if plan.missing_env else code


def add_parsers(sub) -> None:
    """``fleet run``, ``fleet health``, ``fleet requalify`` and ``approve``: their flags."""
    f = sub.add_parser("fleet", help="qualify many models on a lab's boards (docs/fleet.md)")
    examples(
        f, "edgequal fleet run lab.toml --models models.toml", "edgequal fleet health lab.toml"
    )
    fsub = f.add_subparsers(dest="fleet_command", required=True)
    _add_fleet_list_parser(fsub)
    _add_fleet_run_parser(fsub)
    _add_fleet_health_parser(fsub)
    _add_approve_parser(sub)
    _add_fleet_requalify_parser(fsub)


def _add_fleet_list_parser(fsub) -> None:
    """``fleet list``: the lab's boards."""
    fl = fsub.add_parser(
        "list",
        help="the lab's boards: its devices, or a labgrid coordinator's places and agents",
    )
    examples(fl, "edgequal fleet list --lab lab.toml", "edgequal fleet list --lab lab.toml --json")
    fl.add_argument("--lab", type=Path, required=True, help="the lab file")
    fl.add_argument("--json", action="store_true", help="print the boards as JSON")


def _add_fleet_run_parser(fsub) -> None:
    """``fleet run``: models × devices, the plan, where outputs go, gate and baseline, waiting,
    retries, history and exports."""
    fr = fsub.add_parser(
        "run",
        help="every model on every matching device, devices in parallel",
        description="Run every model of MODELS.toml on every device of LAB.toml that carries "
        "the tags, one run at a time per device under its lease; write the signed reports, "
        "index.json, junit.xml and a matrix page to --out.",
    )
    examples(
        fr,
        "edgequal fleet run lab.toml --models models.toml",
        "edgequal fleet run lab.toml --models models.toml --tags pi --wait 30m --out nightly/",
        "edgequal fleet run lab.toml --models models.toml --gate docs/policies/nightly.toml",
    )
    fr.add_argument("lab", type=Path, help="the lab file (docs/lab.example.toml)")
    fr.add_argument("--models", type=Path, required=True, help="the models file")
    fr.add_argument("--tags", help="only devices with all these tags, e.g. pi,arm64")
    fr.add_argument("--plan", choices=["quick", "standard", "soak"], default="quick")
    fr.add_argument("--sustain", help="sustained phase duration for every run (0 to skip)")
    add_length_options(fr)
    fr.add_argument("--out", type=Path, default=Path("fleet-out"), help="output directory")
    fr.add_argument(
        "--resume", action="store_true", help="keep runs whose report in --out verifies"
    )
    fr.add_argument(
        "--no-pages",
        action="store_true",
        help="write no report page per run (pages/; the matrix page still lists every run)",
    )
    fr.add_argument("--gate", type=Path, metavar="POLICY", help="gate every report on POLICY")
    fr.add_argument(
        "--baseline",
        type=Path,
        metavar="DIR",
        help="with --gate: gate each run against its cell's report in an earlier fleet run's "
        "output folder (DIR/reports/MODEL@DEVICE.json); docs/fleet.md",
    )
    add_repeat_option(fr)
    fr.add_argument(
        "--skip-noisy",
        action="store_true",
        help="leave out boards whose history is too noisy for the minimum effect "
        "(CV of the clean p50 × 3 > it; docs/history.md)",
    )
    add_wait_option(
        fr,
        help="wait for a device another host holds (in order of arrival), up to TIMEOUT "
        "(e.g. 30m) or without limit; default: fail fast naming the holder",
    )
    fr.add_argument("--retries", type=int, default=2, help="retries per run (default 2)")
    add_history_option(fr, help="history database URL (default: the lab's)")
    add_p_value_option(fr)
    fr.add_argument(
        "--no-record", action="store_true", help="do not record the reports in the history"
    )
    fr.add_argument(
        "--prometheus",
        type=Path,
        metavar="DIR",
        help="after each cell, write DIR/DEVICE.prom (OpenMetrics, by rename) for "
        "node_exporter's textfile collector",
    )
    fr.add_argument(
        "--health-file",
        type=Path,
        metavar="FILE",
        help="boards marked unhealthy here are skipped (default: the lab's, see fleet health)",
    )


def _add_fleet_health_parser(fsub) -> None:
    """``fleet health``: the micro model on every board, the health state, noise."""
    fh = fsub.add_parser(
        "health",
        help="a small known model on every board; unhealthy boards are skipped by fleet run",
        description="Run the micro example model on every board; report fingerprint, agent "
        "version, clock sync, disk limits and temperature at rest; mark a board that fails or "
        "drifted (firmware, kernel, OS, runtime changed since its last healthy check) "
        "unhealthy until it passes again.",
    )
    examples(fh, "edgequal fleet health lab.toml", "edgequal fleet health lab.toml --accept --json")
    fh.add_argument("lab", type=Path)
    fh.add_argument("--tags", help="only devices with all these tags")
    fh.add_argument("--out", type=Path, default=Path("health-out"), help="the check runs' outputs")
    fh.add_argument("--health-file", type=Path, metavar="FILE", help="the health state file")
    fh.add_argument(
        "--accept",
        action="store_true",
        help="accept fingerprint changes (a deliberate update) as the new healthy state",
    )
    add_wait_option(fh)
    add_history_option(
        fh,
        help="also score each board's noise from this history database (default: the lab's, "
        "when it names one): too noisy when CV of the clean p50 × 3 > the minimum effect",
    )
    fh.add_argument("--retries", type=int, default=1)
    fh.add_argument("--json", action="store_true")


def _add_approve_parser(sub) -> None:
    """``approve``: a verified report and its artifacts kept in an approved set."""
    # One command, ``edgequal approve`` (docs/fleet.md): approving is about one report.
    fa = sub.add_parser(
        "approve",
        help="keep a verified report, its model, golden set, plan and runtime "
        "configuration in DIR (what fleet requalify re-runs)",
    )
    examples(
        fa,
        "edgequal approve pi5.report.json --model model.onnx --golden g.npz --into approved/",
    )
    fa.add_argument("report", type=Path)
    fa.add_argument("--model", type=Path, required=True, help="the model the report measured")
    fa.add_argument("--golden", type=Path, help="the golden set it used")
    fa.add_argument("--into", type=Path, required=True, metavar="DIR", help="the approved set")
    fa.add_argument(
        "--model-signature",
        type=Path,
        metavar="SIG",
        help="the model's signature the device verified (kept in the set; sent on re-runs)",
    )
    fa.add_argument(
        "--name", help="the model's name in the set, one path component (default: the file's stem)"
    )
    fa.add_argument(
        "--runtime-env",
        metavar="NAME",
        help="the runtime environment of the report it was qualified with (default: the "
        "agent's own)",
    )


def _add_fleet_requalify_parser(fsub) -> None:
    """``fleet requalify``: approved models re-run where firmware or runtime changed."""
    fq = fsub.add_parser(
        "requalify",
        help="re-run approved models where firmware or runtime changed; gate each against "
        "its approved report",
    )
    examples(
        fq,
        "edgequal fleet requalify approved/ lab.toml --policy docs/policies/firmware-release.toml",
        "edgequal fleet requalify approved/ lab.toml --policy gate.toml --all",
    )
    fq.add_argument("approved", type=Path, metavar="DIR", help="the approved set")
    fq.add_argument("lab", type=Path)
    fq.add_argument("--policy", type=Path, required=True, help="gate policy with [baseline]")
    fq.add_argument("--all", action="store_true", help="re-run every approved pair")
    fq.add_argument(
        "--runtime-env",
        metavar="CANDIDATE",
        help="re-qualify every approved pair under this runtime environment beside the approved "
        "one, on every board that has both",
    )
    add_repeat_option(fq)
    fq.add_argument("--out", type=Path, default=Path("requalify-out"))
    add_wait_option(fq)
    fq.add_argument("--retries", type=int, default=2)
    add_history_option(fq)
    fq.add_argument("--no-record", action="store_true")
    fq.add_argument(
        "--health-file", type=Path, metavar="FILE", help="boards marked unhealthy are skipped"
    )
