"""The argparse tree of ``edgequal``: every command, its options and its help.

Exit codes: 0 pass, 1 gate or verification failed (or a failed qualification),
2 bad usage or input file, 3 device, transport or runtime failure. Errors print
one line with a hint; tracebacks only with --debug. Only argparse is imported at
start, so ``edgequal --help`` is fast.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from edgequal.agent.cli_args import OneLineParser, examples, global_default, spread_global_options

from .device_args import add_connection_options, add_tls_options
from .plan_args import add_length_options

RUNS_EXAMPLES = {
    "list": ("edgequal runs list --device pi5 --json",),
    "show": (),
    "fetch": ("edgequal runs fetch RUN_ID --device pi5 --wait -o run.report.json",),
    "cancel": ("edgequal runs cancel RUN_ID --device pi5 --wait",),
}


def _add_global_options(parser: argparse.ArgumentParser, top: bool) -> None:
    """Options that may stand before or after the subcommand (``--debug``); see
    :func:`~edgequal.agent.cli_args.spread_global_options`."""
    parser.add_argument(
        "--debug", action="store_true", default=global_default(top, False), help="show tracebacks"
    )


def build_parser() -> argparse.ArgumentParser:
    from edgequal.agent import __version__

    p = OneLineParser(
        prog="edgequal", description="Qualify an exported model on the device that will run it."
    )
    p.add_argument("--version", action="version", version=f"edgequal {__version__}")
    _add_global_options(p, top=True)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    d = sub.add_parser("demo", help="qualify example models on a local agent (no device needed)")
    d.add_argument(
        "-o",
        "--out",
        type=Path,
        default=None,
        help="where models, reports and the page go (default: the demo folder of the state "
        "directory, ~/.local/state/edgequal/demo)",
    )
    d.add_argument(
        "--sustain",
        default=None,
        help="length of the sustained phase on the emulated board, e.g. 30s (default 12s, 6s with --quick)",
    )
    d.add_argument(
        "--quick", action="store_true", help="shorter phases: the whole demo in about 20 s"
    )
    examples(d, "edgequal demo", "edgequal demo --out /tmp/eq-demo --sustain 30s")

    q = sub.add_parser(
        "qualify",
        help="qualify MODEL on a device",
        description="Measure MODEL on a device (load, latency, sustained throughput, drift) "
        "and write the report it signs.",
    )
    examples(
        q,
        "edgequal qualify model.onnx --golden golden.npz",
        "edgequal qualify model.onnx --golden golden.npz --device pi5 --plan standard -o pi5.report.json",
        "edgequal qualify dynamic.onnx --device ssh://pi@bench-pi5 --shape image=1x3x224x224",
    )
    q.add_argument("model", type=Path, help="the model file (.onnx or .tflite)")
    q.add_argument(
        "--golden",
        type=Path,
        help="golden set (.npz from 'edgequal golden make'); without it, no drift check",
    )
    q.add_argument(
        "--device",
        default="local",
        help="local (default), a trusted NAME, grpc://HOST:PORT or ssh://USER@HOST[:PORT]",
    )
    q.add_argument(
        "--profile",
        help="device profile, e.g. raspberry-pi/5 (default: matched from the fingerprint); "
        "it sets threads, trip temperature and throttle indicators, never a phase",
    )
    q.add_argument(
        "--plan",
        default="quick",
        choices=["quick", "standard", "soak"],
        help="quick (default, CI): 3 cold loads, 200 runs/3 s warm, no sustained phase; "
        "standard: 7 cold loads, 1000 runs/60 s warm, 10 min sustained; "
        "soak: as standard with 30 min sustained (up to 60 while still heating)",
    )
    q.add_argument(
        "--sustain", help="sustained phase duration, e.g. 90s, 10m (0 to skip); overrides --plan"
    )
    add_length_options(q)
    q.add_argument(
        "--window", help="sustained window length (default 30 s, or a tenth of runs under 5 min)"
    )
    q.add_argument(
        "--runtime",
        default="auto",
        help="auto (default: from the model file), onnxruntime or litert",
    )
    q.add_argument(
        "--threads",
        type=int,
        help="intra-op threads for the runtime (default: the device profile's, else the runtime's)",
    )
    q.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=1x3x224x224",
        help="sizes for an input with dynamic dimensions (repeat for each input)",
    )
    _add_edge_shape_flag(q)
    q.add_argument(
        "--baseline",
        type=Path,
        metavar="REPORT",
        help="with --repeat-until-decided: the report whose model and golden set (by digest) "
        "run interleaved with MODEL",
    )
    q.add_argument(
        "--repeat-until-decided",
        type=int,
        metavar="N",
        help="run MODEL and the baseline's artifacts in pairs on this device until their "
        "p50s are SAME or DIFFERENT, at most N pairs (docs/gating.md)",
    )
    q.add_argument(
        "--baseline-model",
        type=Path,
        metavar="FILE",
        help="the baseline's model file (default: found by its digest beside REPORT or MODEL)",
    )
    q.add_argument(
        "--baseline-golden",
        type=Path,
        metavar="FILE",
        help="the baseline's golden set (default: found by its digest beside REPORT or MODEL)",
    )
    _add_measurement_flags(q)
    add_connection_options(q)
    q.add_argument(
        "--allow-golden-mismatch",
        action="store_true",
        help="qualify with a golden set made for another model file (its recorded sha256 differs)",
    )
    q.add_argument(
        "-o",
        "--output",
        type=Path,
        help="write the signed report here (default: MODEL-TIME.report.json in "
        "$XDG_STATE_HOME/edgequal/reports, ~/.local/state/edgequal/reports)",
    )
    q.add_argument("--json", action="store_true", help="print the verified predicate as JSON")
    q.add_argument(
        "--gate", type=Path, metavar="POLICY", help="then gate the report on POLICY.toml"
    )
    q.add_argument("--html", type=Path, metavar="PAGE", help="also write the report page here")
    q.add_argument("--junit", type=Path, metavar="FILE", help="with --gate: write JUnit XML here")

    g = sub.add_parser("golden", help="golden sets")
    examples(g, "edgequal golden make model.onnx --inputs inputs.npz -o golden.npz")
    gsub = g.add_subparsers(dest="golden_command", required=True)
    gm = gsub.add_parser("make", help="make a golden set: inputs plus reference outputs")
    examples(
        gm,
        "edgequal golden make model.onnx --inputs inputs.npz -o golden.npz",
        "edgequal golden make model.onnx --inputs cases/ --decision 'threshold:score>0.5' -o g.npz",
        "edgequal golden make model.onnx --inputs in.npz --tolerance probs=1e-3,1e-2 -o g.npz",
        "edgequal golden make model.onnx --inputs in.npz --range 0,1 --color-order RGB -o g.npz",
    )
    gm.add_argument("model", type=Path)
    source = gm.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--inputs",
        type=Path,
        help="NPZ (NAME or CASE/NAME arrays) or a DIR of NPZ files: prepared tensors",
    )
    source.add_argument(
        "--raw",
        type=Path,
        metavar="DIR",
        help="raw files (PNG, JPEG, 16-bit WAV, UTF-8 text): one case per file stem, or a "
        "cases.csv (case,INPUT..) for several inputs; needs --pipeline",
    )
    gm.add_argument(
        "--pipeline",
        type=Path,
        metavar="TOML",
        help="with --raw: the stages per input ([inputs.NAME] decode = image|audio|text, ...; "
        "docs/measurement.md)",
    )
    gm.add_argument(
        "--outputs",
        type=Path,
        help="reference outputs, same naming (with --raw: the training framework's, from the "
        "same files); default: run the model here",
    )
    gm.add_argument(
        "--reference-inputs",
        type=Path,
        metavar="NPZ",
        help="with --raw: the tensors the training pipeline fed the model (CASE/INPUT), "
        "compared with the device's preprocessing",
    )
    gm.add_argument("--decision", help="argmax | topk:K | threshold:OUTPUT>VALUE")
    gm.add_argument(
        "--tolerance",
        action="append",
        default=[],
        metavar="OUTPUT=ATOL,RTOL|CLASS",
        help="per-output tolerance the drift check applies: absolute and relative "
        "(e.g. probs=1e-3,1e-2), or a class fp32, fp16, int8 (e.g. probs=int8); "
        "OUTPUT may be * for every output; repeatable (default: the model's dtype class)",
    )
    _add_edge_shape_flag(gm, recorded=True)
    pre = gm.add_argument_group(
        "input contract",
        "what the model was trained on (every input; per input in a TOML, see docs/measurement.md)",
    )
    pre.add_argument(
        "--preprocessing", type=Path, metavar="TOML", help="default: a TOML beside --inputs"
    )
    pre.add_argument("--layout", choices=("NCHW", "NHWC"), type=str.upper)
    pre.add_argument("--range", metavar="LO,HI", help="values the model was trained on, e.g. 0,1")
    pre.add_argument("--mean", metavar="M[,M..]", help="normalization mean per channel")
    pre.add_argument("--std", metavar="S[,S..]", help="normalization std per channel")
    pre.add_argument("--scale", type=float, help="scale applied to 8-bit pixels, e.g. 0.00392")
    pre.add_argument("--color-order", choices=("RGB", "BGR", "GRAY"), type=str.upper)
    pre.add_argument("--resize", metavar="HxW", help="the size inputs were resized to")
    gm.add_argument("-o", "--output", type=Path, required=True, help="the golden set to write")
    gm.add_argument("--json", action="store_true", help="print the golden set's summary as JSON")

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

    dv = sub.add_parser("devices", help="trusted devices")
    examples(dv, "edgequal devices list", "edgequal devices trust pi5 grpc://pi5.lab:50051")
    dsub = dv.add_subparsers(dest="devices_command", required=True)
    dl = dsub.add_parser("list", help="list trusted devices")
    dl.add_argument("--json", action="store_true", help="print the devices as JSON")
    examples(dl, "edgequal devices list", "edgequal devices list --json")
    ds = dsub.add_parser("show", help="show one device")
    ds.add_argument("name")
    examples(ds, "edgequal devices show pi5")
    dt = dsub.add_parser("trust", help="pin a device's key (shows its fingerprint)")
    examples(
        dt,
        "edgequal devices trust pi5 grpc://pi5.lab:50051 --token-file pi5.token",
        "edgequal devices trust pi5 grpc://pi5.lab:50051 --fingerprint SHA256:...",
        "edgequal devices trust lab3 grpc://lab3:50051 --tls-ca ca.pem --tls-cert me.pem "
        "--tls-key me.key",
    )
    dt.add_argument("name")
    dt.add_argument("address", help="grpc://HOST:PORT")
    dt.add_argument("--token-file", type=Path)
    add_tls_options(dt)
    dt.add_argument(
        "--fingerprint", help="expected key fingerprint (SHA256:...); refuse if different"
    )
    dt.add_argument(
        "--replace-key",
        action="store_true",
        help="pin a new key for a device already trusted (needs --fingerprint of the new key)",
    )
    df = dsub.add_parser("forget", help="forget a device")
    df.add_argument("name")
    examples(df, "edgequal devices forget pi5")
    examples(dsub.add_parser("profiles", help="list device profiles"), "edgequal devices profiles")

    rn = sub.add_parser(
        "runs",
        help="runs on a device: list, show, fetch or cancel (also one a host left behind)",
    )
    examples(rn, "edgequal runs list --device pi5", "edgequal runs fetch RUN_ID --device pi5")
    rsub = rn.add_subparsers(dest="runs_command", required=True)
    for command, text in (
        ("list", "the run in progress and the runs this host started there"),
        ("show", "one run: in progress, or its signed report's status"),
        ("fetch", "verify a run's signed report and write it"),
        ("cancel", "cancel the run in progress (it is still signed: incomplete, cancelled)"),
    ):
        rp = rsub.add_parser(command, help=text)
        examples(
            rp,
            f"edgequal runs {command}" + (" RUN_ID" if command != "list" else "") + " --device pi5",
            *RUNS_EXAMPLES[command],
        )
        if command != "list":
            rp.add_argument("run_id")
        else:
            rp.add_argument("--json", action="store_true", help="print the runs as JSON")
        rp.add_argument("--device", default="local", help="local (default), NAME or address")
        add_connection_options(rp)
        if command in ("fetch", "cancel"):
            rp.add_argument(
                "--wait", action="store_true", help="wait for the run to end and fetch its report"
            )
            rp.add_argument(
                "-o",
                "--output",
                type=Path,
                help="write the report here (default: RUN_ID.report.json in the reports dir "
                "of qualify)",
            )

    a = sub.add_parser("agent", help="install or inspect the agent on a board")
    examples(a, "edgequal agent install ssh://pi@bench-pi5", "edgequal agent status pi5")
    asub = a.add_subparsers(dest="agent_command", required=True)
    ai = asub.add_parser("install", help="install the agent over SSH")
    examples(
        ai,
        "edgequal agent install ssh://pi@bench-pi5 --extras litert",
        "edgequal agent install ssh://pi@bench-pi5 --wheelhouse wheels/ --service background",
    )
    ai.add_argument("url", help="ssh://USER@HOST[:PORT]")
    ai.add_argument("--extras", default="onnx,litert")
    ai.add_argument(
        "--wheelhouse", type=Path, help="install only from this directory (labs without internet)"
    )
    ai.add_argument(
        "--service",
        default="systemd",
        choices=["systemd", "background", "none"],
        help="systemd unit (default), a background process, or install only",
    )
    ai.add_argument("--ssh-key", type=Path, help="private key file for SSH")
    ai.add_argument(
        "--prefix", default="~/.local/share/edgequal", help="install prefix on the board"
    )
    ai.add_argument("--python", default="python3", help="the board's Python 3.10+")
    ai.add_argument(
        "--system-site-packages",
        action="store_true",
        help="let the venv see the board's system packages (e.g. a vendor onnxruntime-gpu)",
    )
    ai.add_argument("--listen", default="0.0.0.0:50051")
    ai.add_argument("--name", help="device name to pin (default: the host name)")
    ai.add_argument("--known-hosts", type=Path)
    art = asub.add_parser(
        "runtime", help="runtime environments on a board (installed over SSH only)"
    )
    examples(
        art,
        "edgequal agent runtime add ssh://pi@bench-pi5 onnxruntime==1.20.1",
        "edgequal agent runtime list ssh://pi@bench-pi5",
    )
    artsub = art.add_subparsers(dest="runtime_command", required=True)
    ara = artsub.add_parser(
        "add", help="collect a runtime's wheels here, push them over SSH, install them there"
    )
    examples(
        ara,
        "edgequal agent runtime add ssh://pi@bench-pi5 onnxruntime==1.20.1",
        "edgequal agent runtime add ssh://pi@bench-pi5 --from-approved approved/classifier",
    )
    ara.add_argument("target", help="ssh://USER@HOST of a trusted device")
    ara.add_argument("requirement", nargs="?", help="an exact pin, e.g. onnxruntime==1.20.1")
    ara.add_argument("--name", help="the environment's name (default DIST-VERSION)")
    ara.add_argument(
        "--from-approved",
        type=Path,
        metavar="DIR/MODEL",
        help="restore the environment this approved model was qualified with (same wheel digests)",
    )
    ara.add_argument("--wheelhouse", type=Path, help="collect wheels only from this directory")
    arl = artsub.add_parser("list", help="the board's runtime environments")
    examples(arl, "edgequal agent runtime list ssh://pi@bench-pi5")
    arl.add_argument("target", help="ssh://USER@HOST of a trusted device")
    arr = artsub.add_parser("remove", help="delete a runtime environment on the board")
    examples(arr, "edgequal agent runtime remove ssh://pi@bench-pi5 onnxruntime-1.20.1")
    arr.add_argument("target", help="ssh://USER@HOST of a trusted device")
    arr.add_argument("name")
    for sp in (ara, arl, arr):
        sp.add_argument("--known-hosts", type=Path)
        sp.add_argument("--ssh-key", type=Path, help="private key file for SSH")
        sp.add_argument("--agent-cmd", help="edgequal-agent command on the board")
    ast = asub.add_parser("status", help="agent version, runtimes, key, service")
    examples(ast, "edgequal agent status pi5", "edgequal agent status ssh://pi@bench-pi5")
    ast.add_argument("target", help="ssh://USER@HOST or a device name")
    ast.add_argument("--known-hosts", type=Path)
    _add_gate_parsers(sub)
    _add_fleet_parsers(sub)
    _add_completion_parser(sub)
    spread_global_options(p, _add_global_options)
    return p


def _add_completion_parser(sub) -> None:
    """``edgequal completion SHELL``: the shell's completion script, generated by shtab."""
    c = sub.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh or tcsh)",
        description="Print the completion script of SHELL for every command and option; "
        "source it from your shell's startup file.",
    )
    c.add_argument("shell", choices=("bash", "zsh", "tcsh"))
    examples(
        c,
        'eval "$(edgequal completion bash)"   # in ~/.bashrc',
        "edgequal completion zsh > ~/.zfunc/_edgequal   # with fpath+=~/.zfunc in ~/.zshrc",
    )


def _add_measurement_flags(q) -> None:
    """qualify's flags for providers, limits and the service scenarios (docs/measurement.md)."""
    m = q.add_argument_group("providers, limits and service scenarios")
    m.add_argument(
        "--providers",
        help="onnxruntime execution providers in priority order, e.g. "
        "CUDAExecutionProvider,CPUExecutionProvider (refused if the device lacks one)",
    )
    m.add_argument("--memory-limit", type=int, metavar="MB", help="kill a worker above this RSS")
    m.add_argument("--phase-timeout", metavar="DURATION", help="a worker silent this long hangs")
    m.add_argument(
        "--batch-sizes", metavar="1,2,4,8", help="batch sweep over these sizes (dynamic batch)"
    )
    m.add_argument(
        "--thread-scaling", action="store_true", default=None, help="latency for 1..N threads"
    )
    m.add_argument(
        "--server", action="store_true", default=None, help="server scenario (Poisson arrivals)"
    )
    m.add_argument("--server-rate", type=float, metavar="PER_S", help="server target rate")
    m.add_argument("--p99-bound", metavar="DURATION", help="server p99 bound, e.g. 15ms")
    m.add_argument(
        "--operators",
        "--operator-profile",
        dest="operators",
        action="store_true",
        default=None,
        help="per-operator time, delegate use",
    )
    m.add_argument("--scenario-time", metavar="DURATION", help="time per scenario point")
    c = q.add_argument_group("declared co-load (docs/measurement.md)")
    c.add_argument(
        "--coload",
        action="append",
        metavar="KIND:VALUE",
        help="background work beside the latency and sustained phases: model:PATH[@RATE], "
        "cpu:CORES, membw:CORES or command:NAME (a name in the agent's configuration); repeatable",
    )
    c.add_argument(
        "--coload-rounds", type=int, metavar="N", help="plain/co-load alternations (default 4)"
    )
    e = q.add_argument_group("runtime environments side by side (docs/measurement.md)")
    e.add_argument(
        "--runtime-env",
        action="append",
        metavar="NAME",
        help="also measure under this runtime environment installed on the device (repeatable; "
        "'default' is the agent's own; the first is the baseline of the ratios)",
    )
    e.add_argument(
        "--runtime-env-rounds", type=int, metavar="N", help="segments per environment (default 4)"
    )


def _add_edge_shape_flag(parser, recorded: bool = False) -> None:
    """``--edge-shape``, repeatable (docs/measurement.md "Edges of the input range")."""
    parser.add_argument(
        "--edge-shape",
        action="append",
        default=[],
        metavar="LABEL:INPUT=DIMS[,INPUT=DIMS]",
        help=(
            "record an edge of the input range every qualification with this set measures"
            if recorded
            else "also measure this edge of the input range (latency, peak memory, a run)"
        )
        + ", e.g. largest:image=1x3x1024x1024 or empty:tokens=1x0 (repeat for each)",
    )


# --- gate, compare, report html (host/cli/judge.py) ---


def _add_gate_parsers(sub) -> None:
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
    gt.add_argument("--junit", type=Path, metavar="FILE", help="write JUnit XML here")
    gt.add_argument("--json", action="store_true", help="print the verdict as JSON")
    gt.add_argument("--device", help="the device that must have signed the report")
    gt.add_argument(
        "--history",
        metavar="URL",
        help="history database: mark the board too noisy for the policy's minimum effect "
        "(CV of its recorded clean p50 × 3 > it; docs/history.md)",
    )
    gt.add_argument("--html", type=Path, metavar="PAGE", help="also write the report page here")
    gt.add_argument(
        "--attest",
        type=Path,
        metavar="FILE",
        help="write the decision as an in-toto Test Result attestation signed by this host's "
        "key (edgequal key show)",
    )
    c = sub.add_parser("compare", help="compare reports side by side (the first is the reference)")
    examples(
        c, "edgequal compare last.json pi5.report.json", "edgequal compare a.json b.json --json"
    )
    c.add_argument("reports", type=Path, nargs="+", metavar="REPORT")
    c.add_argument("--json", action="store_true", help="print the comparison as JSON")
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
    )
    ex.add_argument("reports", type=Path, nargs="+", metavar="REPORT")
    ex.add_argument(
        "--format",
        required=True,
        choices=["github-benchmark", "prometheus"],
        help="github-benchmark: customSmallerIsBetter JSON for github-action-benchmark; "
        "prometheus: OpenMetrics text for node_exporter's textfile collector",
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


# -- fleet and history (host/cli/fleet.py, host/cli/history.py) ------------------


def _add_fleet_parsers(sub) -> None:
    f = sub.add_parser("fleet", help="qualify many models on a lab's boards (docs/fleet.md)")
    examples(
        f, "edgequal fleet run lab.toml --models models.toml", "edgequal fleet health lab.toml"
    )
    fsub = f.add_subparsers(dest="fleet_command", required=True)
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
    fr.add_argument("--gate", type=Path, metavar="POLICY", help="gate every report on POLICY")
    fr.add_argument(
        "--wait",
        nargs="?",
        const="forever",
        metavar="TIMEOUT",
        help="wait for a device another host holds (in order of arrival), up to TIMEOUT "
        "(e.g. 30m) or without limit; default: fail fast naming the holder",
    )
    fr.add_argument("--retries", type=int, default=2, help="retries per run (default 2)")
    fr.add_argument("--history", metavar="URL", help="history database URL (default: the lab's)")
    fr.add_argument(
        "--no-record", action="store_true", help="do not record the reports in the history"
    )
    fr.add_argument(
        "--skip-noisy",
        action="store_true",
        help="leave out boards whose history is too noisy for the minimum effect "
        "(CV of the clean p50 × 3 > it; docs/history.md)",
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
    fh.add_argument("--wait", nargs="?", const="forever", metavar="TIMEOUT")
    fh.add_argument("--retries", type=int, default=1)
    fh.add_argument("--json", action="store_true")
    fh.add_argument(
        "--history",
        metavar="URL",
        help="also score each board's noise from this history database (default: the lab's, "
        "when it names one): too noisy when CV of the clean p50 × 3 > the minimum effect",
    )

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
    fa.add_argument("--name", help="the model's name in the set (default: the file's stem)")
    fa.add_argument(
        "--runtime-env",
        metavar="NAME",
        help="the runtime environment of the report it was qualified with (default: the "
        "agent's own)",
    )
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
    fq.add_argument("--out", type=Path, default=Path("requalify-out"))
    fq.add_argument("--wait", nargs="?", const="forever", metavar="TIMEOUT")
    fq.add_argument("--retries", type=int, default=2)
    fq.add_argument("--history", metavar="URL")
    fq.add_argument("--no-record", action="store_true")
    fq.add_argument(
        "--health-file", type=Path, metavar="FILE", help="boards marked unhealthy are skipped"
    )

    h = sub.add_parser("history", help="verified reports over time (docs/fleet.md)")
    examples(h, "edgequal history list", "edgequal history trend --device pi5-a --model classifier")
    hsub = h.add_subparsers(dest="history_command", required=True)
    hl = hsub.add_parser("list", help="recorded runs, newest first")
    examples(
        hl, "edgequal history list --device pi5", "edgequal history list --model ocr-cls --json"
    )
    hs = hsub.add_parser(
        "show", help="one recorded run (RUN_ID, or the newest for --device/--model), verified"
    )
    hs.add_argument("run_id", nargs="?", metavar="RUN_ID", help="a run id or its prefix")
    examples(hs, "edgequal history show 3f2a", "edgequal history show --device pi5 --model ocr-cls")
    ht = hsub.add_parser(
        "trend",
        help="figures over time per board × model, firmware and runtime changes marked",
    )
    ht.add_argument(
        "--html", type=Path, metavar="PAGE", help="also write the trend page (plots) to PAGE"
    )
    examples(
        ht,
        "edgequal history trend --device pi5-a --model classifier --html trend.html",
        "edgequal history trend --model ocr-cls --db postgresql://lab-db/edgequal",
    )
    hc = hsub.add_parser(
        "changes",
        help="change points per board × model × figure, beyond noise, with what changed there",
    )
    hc.add_argument(
        "--lab",
        type=Path,
        metavar="LAB_TOML",
        help="only this lab's boards; its history database and [changes] sensitivity",
    )
    hc.add_argument(
        "--policy",
        type=Path,
        metavar="POLICY",
        help="a policy whose [changes] section sets the sensitivity (over the lab's)",
    )
    hc.add_argument(
        "--since", metavar="DATE", help="only runs measured on or after DATE (YYYY-MM-DD)"
    )
    hc.add_argument(
        "--attest",
        type=Path,
        metavar="FILE",
        help="also write the changes as an in-toto statement signed by this host's key, "
        "listing the reports (by digest) either side of each",
    )
    examples(
        hc,
        "edgequal history changes --lab lab.toml",
        "edgequal history changes --device pi5-a --model classifier --since 2026-11-01 --json",
    )
    hr = hsub.add_parser("record", help="verify reports and record them")
    hr.add_argument("reports", type=Path, nargs="+")
    examples(hr, "edgequal history record nightly/*.report.json --device pi5")
    hr.add_argument("--device", help="the device that must have signed them")
    for q in (hl, hs, ht, hr, hc):
        q.add_argument(
            "--db", metavar="URL", help="database URL (default: SQLite in the state dir)"
        )
    for q in (hl, hs, ht, hc):
        q.add_argument("--device", help="only this device")
        q.add_argument("--model", help="only this model (name, name without extension, SHA-256)")
        q.add_argument("--json", action="store_true")
    for q in (hl, ht):
        q.add_argument("--limit", type=int, default=50, help="rows (per board × model for trend)")
