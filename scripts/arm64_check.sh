#!/usr/bin/env bash
# Install the agent on the emulated arm64 board and qualify the example models on it.
#
#   scripts/arm64_check.sh            (as root; not part of the default test suite)
#
# Steps, each timed, as a user would run them (README's commands):
#   1. scripts/arm64_board.sh up (the first build of the board takes several minutes)
#   2. edgequal agent install ssh://edge@arm64-board     (from the package registry,
#      or from an aarch64 wheelhouse built here when the board cannot reach it)
#   3. edgequal agent status ssh://edge@arm64-board      (runtimes as the board sees them)
#   4. edgequal qualify MODEL --golden G --device ssh://edge@arm64-board -o REPORT
#      for the TFLite and the ONNX example model
#   5. edgequal verify REPORT --artifact MODEL, and the report's fingerprint must
#      name an aarch64 board
#
# Steps 3 to 5 run once per /proc/cpuinfo the board shows (EDGEQUAL_ARM64_ROUNDS,
# default "host aarch64"; the board is restarted between rounds when this script
# started it):
#   host     qemu-user passes this machine's x86 /proc/cpuinfo through; onnxruntime and
#            LiteRT's XNNPACK crash (SIGSEGV) in their CPU detection. Passes when each
#            qualification ends in a verified, signed failed report that names the
#            runtime and the signal, or a one-line error (exit 3) naming the runtime.
#   aarch64  the board sees an aarch64 /proc/cpuinfo. Passes when both runtimes ran
#            (a verified report with the runtime's name and version and cold loads),
#            and the int8 example (classifier_qdq.onnx against the float model's
#            outputs, as the demo runs it) flipped exactly case01, case09, case17, as
#            on x86: its int8 kernels are exact on arm64 too.
# A transport error, a traceback or a report from another machine fails either round.
#
# Everything runs in a scratch HOME (ssh config with the alias arm64-board,
# known_hosts, known_devices, reports), so the user's own files are untouched.
# The board is stopped at the end when this script started it
# (EDGEQUAL_ARM64_KEEP=1 keeps it running).
#
# Settings: EDGEQUAL_ARM64_WORK (scratch dir, default a new /tmp/edgequal-arm64-check.*),
# EDGEQUAL_ARM64_FRESH=0 (keep the board's venv and agent state from an earlier run;
# default: remove them first, so the install is a new user's first one),
# EDGEQUAL_ARM64_WHEELHOUSE=1 (always install from a wheelhouse built here),
# EDGEQUAL_ARM64_SERVICE=background (install with a running agent service on loopback;
# default: the README's plain install, which starts nothing on a board without systemd),
# EDGEQUAL_ARM64_ROUNDS (default "host aarch64"), EDGEQUAL_ARM64_PLAN (default quick),
# EDGEQUAL_ARM64_SUSTAIN (default 0), and those of scripts/arm64_board.sh.
# Exit: 0 every step held, 1 a step failed, 2 no board can run here (no root, no binfmt_misc).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BOARD=$ROOT/scripts/arm64_board.sh
WORK=${EDGEQUAL_ARM64_WORK:-$(mktemp -d /tmp/edgequal-arm64-check.XXXXXX)}
PLAN=${EDGEQUAL_ARM64_PLAN:-quick}
SUSTAIN=${EDGEQUAL_ARM64_SUSTAIN:-0}
ROUNDS=${EDGEQUAL_ARM64_ROUNDS:-host aarch64}
LOG=$WORK/check.log
mkdir -p "$WORK"
: >"$LOG"

if [ -x "$ROOT/.venv/bin/edgequal" ]; then
    PATH=$ROOT/.venv/bin:$PATH
fi
command -v edgequal >/dev/null || { echo "arm64-check: edgequal is not installed (pip install -e '.[all]')" >&2; exit 2; }
PY=$(dirname "$(command -v edgequal)")/python
[ -x "$PY" ] || PY=python3

say() { printf '%s\n' "$*" | tee -a "$LOG"; }
FAILED=0
SUMMARY=()
CHECK_START=$SECONDS

# run_step NAME CMD...: run, time, keep the output; sets STEP_RC, STEP_OUT and STEP_S.
run_step() {
    local start end
    shift
    say ""
    say "\$ $*"
    start=$(date +%s.%N)
    STEP_OUT=$("$@" 2>&1)
    STEP_RC=$?
    end=$(date +%s.%N)
    STEP_S=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
    printf '%s\n' "$STEP_OUT" | sed 's/^/  /' | tee -a "$LOG"
    say "  [exit $STEP_RC, ${STEP_S} s]"
}

record() { # record NAME VERDICT DETAIL
    SUMMARY+=("$(printf '%-30s %6s s  %-4s %s' "$1" "$STEP_S" "$2" "$3")")
    [ "$2" = ok ] || FAILED=1
}

finish() {
    say ""
    say "summary (board ${URL:-?}, plan $PLAN, rounds: $ROUNDS, $((SECONDS - CHECK_START)) s in all, work dir $WORK):"
    printf '%s\n' "${SUMMARY[@]}" | tee -a "$LOG"
    if [ "$FAILED" = 0 ]; then say "arm64-check: every step held"; else say "arm64-check: FAILED"; fi
    exit "$FAILED"
}

# ----- 1. the board ----------------------------------------------------------------
STARTED_BOARD=0
board_up() { # board_up CPUINFO_MODE
    run_step "board up" env EDGEQUAL_ARM64_CPUINFO="$1" "$BOARD" up
    if [ "$STEP_RC" = 2 ]; then
        say "arm64-check: no emulated arm64 board can run on this machine (see above); nothing checked"
        exit 2
    fi
    if [ "$STEP_RC" != 0 ]; then
        record "board up ($1 cpuinfo)" FAIL "arm64_board.sh up exited $STEP_RC"
        finish
    fi
    STARTED_BOARD=1
    record "board up ($1 cpuinfo)" ok "$(sed -n 's/^build_seconds=/root file system built in (s): /p' \
        "${EDGEQUAL_ARM64_DIR:-/var/cache/edgequal-arm64}/rootfs/.edgequal-board" | head -n1)"
    eval "$("$BOARD" env)"
    # Later rounds keep the port, so the ssh alias and known_hosts stay valid.
    export EDGEQUAL_ARM64_PORT
}
cleanup() {
    if [ "$STARTED_BOARD" = 1 ] && [ "${EDGEQUAL_ARM64_KEEP:-0}" != 1 ]; then
        "$BOARD" down >>"$LOG" 2>&1 || true
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

FIRST_ROUND=${ROUNDS%% *}
if "$BOARD" status >/dev/null 2>&1; then
    say "using the board that is already running (it is not restarted between rounds)"
    eval "$("$BOARD" env)"
    ROUNDS=current
else
    board_up "$FIRST_ROUND"
fi
"$BOARD" status 2>&1 | grep -E '^(rootfs|binfmt|board|cpuinfo):' | tee -a "$LOG"

# ----- a scratch HOME: the ssh alias, known_hosts, known_devices, reports --------------
export HOME=$WORK/home
export XDG_CONFIG_HOME=$HOME/.config XDG_STATE_HOME=$HOME/.local/state XDG_CACHE_HOME=$HOME/.cache
unset EDGEQUAL_CONFIG_DIR EDGEQUAL_TOKEN SSH_AUTH_SOCK
mkdir -p "$HOME/.ssh"
chmod 700 "$HOME/.ssh"
cp "$EDGEQUAL_ARM64_KEY" "$HOME/.ssh/id_ed25519"
cp "$EDGEQUAL_ARM64_KEY.pub" "$HOME/.ssh/id_ed25519.pub"
cp "$EDGEQUAL_ARM64_KNOWN_HOSTS" "$HOME/.ssh/known_hosts"
chmod 600 "$HOME/.ssh/id_ed25519"
cat >"$HOME/.ssh/config" <<EOF
Host arm64-board
    HostName $EDGEQUAL_ARM64_HOST
    Port $EDGEQUAL_ARM64_PORT
EOF
URL=ssh://$EDGEQUAL_ARM64_USER@arm64-board
say "board: $URL (= $EDGEQUAL_ARM64_SSH), scratch HOME $HOME"
# OpenSSH's client finds ~ from the password database, not $HOME: give it the board's files.
board_ssh() { ssh -F "$EDGEQUAL_ARM64_SSH_CONFIG" -o BatchMode=yes arm64-board "$@"; }

# ----- 2. install --------------------------------------------------------------------
# The README's command as it is. The board has no systemd, so the default service is
# not started (and its 0.0.0.0:50051 never opened on this machine, whose network the
# board shares); the ssh:// transport needs no service. A running service would hold
# the agent's state directory, and `run-plan` over ssh:// would then refuse to run
# (see docs/device-reach.md).
INSTALL=(edgequal agent install "$URL")
if [ -n "${EDGEQUAL_ARM64_SERVICE:-}" ]; then
    # e.g. background: shows what a board with a running agent service does to ssh://
    AGENT_PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    INSTALL+=(--service "$EDGEQUAL_ARM64_SERVICE" --listen "127.0.0.1:$AGENT_PORT")
fi
if [ "${EDGEQUAL_ARM64_FRESH:-1}" = 1 ]; then
    # A new user's first install: no venv, no agent state (device key), no pip cache.
    board_ssh 'rm -rf ~/.local/share/edgequal ~/.local/state/edgequal-agent ~/.cache/pip' >>"$LOG" 2>&1 ||
        say "warning: could not clear the board's earlier install"
fi

build_wheelhouse() { # an aarch64 wheelhouse for the board's Python and glibc, from this machine's registry
    local wh=$WORK/wheelhouse pyver glibc i plats=()
    pyver=$(board_ssh "python3 -c 'import sys; print(\"%d%d\" % sys.version_info[:2])'") || return 1
    glibc=$(board_ssh "python3 -c 'import platform; print(platform.libc_ver()[1].split(\".\")[1])'") || return 1
    # Every manylinux tag the board's glibc accepts: with manylinux2014 alone pip quietly
    # takes the newest release that still has such a wheel (ai-edge-litert 1.4.0, not 2.x).
    plats=(--platform manylinux2014_aarch64)
    for ((i = 17; i <= glibc; i++)); do plats+=(--platform "manylinux_2_${i}_aarch64"); done
    mkdir -p "$wh"
    (cd "$ROOT" && "$PY" -m pip wheel --no-deps --no-build-isolation -q -w "$wh" .) || return 1
    # Only this machine's network registry: its local find-links hold x86 wheels.
    env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null "$PY" -m pip download -q -d "$wh" \
        --only-binary=:all: --implementation cp --python-version "$pyver" "${plats[@]}" \
        "$(ls "$wh"/edgequal-*.whl)[onnx,litert]" || return 1
    echo "wheelhouse $wh for cp$pyver, glibc 2.$glibc:"
    ls "$wh"
}

if [ "${EDGEQUAL_ARM64_WHEELHOUSE:-0}" = 1 ]; then
    run_step "wheelhouse" build_wheelhouse
    record "aarch64 wheelhouse" "$([ "$STEP_RC" = 0 ] && echo ok || echo FAIL)" "pip download --platform manylinux*_aarch64"
    INSTALL+=(--wheelhouse "$WORK/wheelhouse")
fi
run_step install "${INSTALL[@]}"
if [ "$STEP_RC" != 0 ] && [ "${EDGEQUAL_ARM64_WHEELHOUSE:-0}" != 1 ] &&
    printf '%s' "$STEP_OUT" | grep -q 'pip install'; then
    record "install (registry)" FAIL "$(printf '%s' "$STEP_OUT" | grep -m1 error)"
    say "the board could not install from the registry; retrying from an aarch64 wheelhouse built here"
    run_step "wheelhouse" build_wheelhouse
    record "aarch64 wheelhouse" "$([ "$STEP_RC" = 0 ] && echo ok || echo FAIL)" ""
    INSTALL+=(--wheelhouse "$WORK/wheelhouse")
    run_step install "${INSTALL[@]}"
fi
if [ "$STEP_RC" = 0 ]; then
    record "agent install" ok "$(printf '%s' "$STEP_OUT" | grep -m1 -E 'installed|upgraded')"
else
    record "agent install" FAIL "exit $STEP_RC: $(printf '%s' "$STEP_OUT" | grep -m1 -E '^error|error:' || true)"
    finish
fi
# shellcheck disable=SC2088 # ~ is expanded on the board
run_step "board packages" board_ssh '~/.local/share/edgequal/venv/bin/python -m pip list --format=freeze 2>/dev/null'
record "installed packages" "$([ "$STEP_RC" = 0 ] && echo ok || echo FAIL)" \
    "$(printf '%s' "$STEP_OUT" | grep -iE '^(onnxruntime|ai-edge-litert|numpy|grpcio|protobuf|cryptography)==' | tr '\n' ' ')"

run_step "example models" "$PY" -c '
import sys
from pathlib import Path
from edgequal.cli.demo import prepare
for model, golden in prepare(Path(sys.argv[1])).values():
    print(model, golden)' "$WORK/examples"
record "example models" "$([ "$STEP_RC" = 0 ] && echo ok || echo FAIL)" "edgequal.cli.demo.prepare"
TFLITE=$WORK/examples/models/classifier.tflite
ONNX=$WORK/examples/models/classifier.onnx
QDQ=$WORK/examples/models/classifier_qdq.onnx
for m in "$TFLITE" "$ONNX" "$QDQ"; do
    [ -s "$m" ] || { STEP_S=0 record "example $(basename "$m")" FAIL "prepare() made no $m"; finish; }
done

# ----- 3 to 5, per round -----------------------------------------------------------
check_report() { # check_report REPORT MODEL EXPECT: the report's claims, after `edgequal verify`
    "$PY" - "$1" "$2" "$3" <<'EOF'
import json, sys
from pathlib import Path
from edgequal.host.devices.trust import KnownDevices
from edgequal.host.devices.verify import verify_envelope
report = verify_envelope(Path(sys.argv[1]).read_bytes(), known=KnownDevices(), artifacts=[Path(sys.argv[2])])
expect = sys.argv[3]
p = report.predicate
fp = p.get("fingerprint") or {}
results = p.get("results") or {}
rt = results.get("runtime") or {}
cold = results.get("cold_load") or {}
lat = ((results.get("latency") or {}).get("per_shape") or [{}])[0] or {}
os_release = fp.get("os_release")
findings = [
    {k: f.get(k) for k in ("kind", "runtime", "signal", "message") if f.get(k)}
    for f in (p.get("findings") or [])
]
summary = {
    "device": report.device_name,
    "architecture": fp.get("architecture"),
    "os": os_release.get("PRETTY_NAME") if isinstance(os_release, dict) else os_release,
    "python": fp.get("python"),
    "runtime": f"{rt.get('runtime')} {rt.get('version')}" if rt else None,
    "status": p.get("status"),
    "reason": p.get("reason"),
    "cold_total_ms": round((cold.get("total_ms") or {}).get("median") or 0, 1) or None,
    "profile": (p.get("plan") or {}).get("profile"),
    "latency_ms": {k: round(v, 2) if isinstance(v, float) else v
                   for k, v in (lat.get("summary") or {}).items()
                   if k in ("count", "p50_ms", "p90_ms", "cv")},
    "sustained": {k: (lambda v: round(v, 1) if isinstance(v, float) else v)((results.get("sustained") or {}).get(k))
                  for k in ("verdict", "cause", "peak_per_s", "sustained_per_s")}
                 if results.get("sustained") else None,
    "findings": findings[:3],
}
print(json.dumps(summary))
problems = []
if fp.get("architecture") != "aarch64":
    problems.append(f"architecture {fp.get('architecture')!r}, not aarch64")
if expect == "ran" and not rt:
    problems.append("the runtime did not run (no results.runtime)")
if expect == "named" and not rt and not any(f.get("runtime") for f in findings):
    problems.append("a failed report that names no runtime")
if expect == "flips":  # the int8 example: its three near-threshold cases, as on x86
    flips = ((results.get("drift") or {}).get("decisions") or {}).get("flips")
    print(f"int8 flips {', '.join(flips or []) or 'none'}")
    if not rt:
        problems.append("the runtime did not run (no results.runtime)")
    if flips != ["case01", "case09", "case17"]:
        problems.append(f"the int8 example flipped {flips}, not case01, case09, case17")
for problem in problems:
    print("problem:", problem)
sys.exit(1 if problems else 0)
EOF
}

FORGOT_PIN=0
qualify_one() { # qualify_one ROUND LABEL MODEL GOLDEN RUNTIME EXPECT
    local round=$1 label=$2 model=$3 golden=$4 runtime=$5 expect=$6
    local report=$WORK/reports/$round-$label.report.json
    mkdir -p "$WORK/reports"
    local args=(edgequal qualify "$model" --golden "$golden" --device "$URL" --plan "$PLAN" -o "$report")
    [ "$SUSTAIN" != 0 ] && args+=(--sustain "$SUSTAIN")
    run_step "qualify $label" "${args[@]}"
    if [ "$STEP_RC" = 2 ] && [ "$FORGOT_PIN" = 0 ] &&
        printf '%s' "$STEP_OUT" | grep -q 'is already pinned for device'; then
        # `agent install` pinned the key as NAME at grpc://; `qualify --device ssh://...`
        # does not find that pin by the ssh:// address and refuses to pin the same key
        # under a second name (host/devices/resolve.py open_device). Recorded, then worked around.
        record "qualify $label: README order" FAIL "$(printf '%s' "$STEP_OUT" | grep -m1 error | cut -c1-150)"
        FORGOT_PIN=1
        run_step "forget the pin" edgequal devices forget arm64-board
        run_step "qualify $label" "${args[@]}"
    fi
    local rc=$STEP_RC out=$STEP_OUT
    if [ -s "$report" ]; then
        record "[$round] qualify $label" ok "exit $rc, $(printf '%s' "$out" | grep -m1 -oE 'edgequal [A-Z]+' || true), signed report"
        run_step "verify $label" edgequal verify "$report" --artifact "$model"
        if [ "$STEP_RC" = 0 ]; then
            record "[$round] verify $label" ok "$(printf '%s' "$STEP_OUT" | tail -n1 | cut -c1-100)"
        else
            record "[$round] verify $label" FAIL "exit $STEP_RC: $(printf '%s' "$STEP_OUT" | tail -n1)"
        fi
        run_step "report $label" check_report "$report" "$model" "$expect"
        record "[$round] report $label" "$([ "$STEP_RC" = 0 ] && echo ok || echo FAIL)" \
            "$(printf '%s' "$STEP_OUT" | grep -v '^problem' | tail -n1)$(printf '%s' "$STEP_OUT" | grep '^problem' | tr '\n' ' ')"
    elif [ "$expect" != ran ] && [ "$rc" = 3 ] && printf '%s' "$out" | grep -qi "$runtime" &&
        ! printf '%s' "$out" | grep -qiE 'traceback|transport|failed on|connection'; then
        record "[$round] qualify $label" ok "no report; one-line error naming $runtime: $(printf '%s' "$out" | grep -m1 -i error | cut -c1-120)"
    else
        record "[$round] qualify $label" FAIL "exit $rc, no report: $(printf '%s' "$out" | grep -m1 -iE 'error|traceback' | cut -c1-140)"
    fi
}

round() { # round MODE
    local mode=$1 expect=named
    [ "$mode" = aarch64 ] && expect=ran
    say ""
    say "===== round: $mode /proc/cpuinfo ====="
    run_step status edgequal agent status "$URL"
    if [ "$STEP_RC" = 0 ]; then
        record "[$mode] agent status" ok "$(printf '%s' "$STEP_OUT" | "$PY" -c '
import json, sys
try:
    s = json.loads(sys.stdin.read())
    print("runtimes:", "; ".join(f"{k} {v}" for k, v in sorted(s.get("runtimes", {}).items())))
except ValueError:
    print("(not JSON)")')"
    else
        record "[$mode] agent status" FAIL "exit $STEP_RC: $(printf '%s' "$STEP_OUT" | tail -n1)"
    fi
    qualify_one "$mode" tflite "$TFLITE" "$WORK/examples/golden/classifier_tflite.golden.npz" litert "$expect"
    qualify_one "$mode" onnx "$ONNX" "$WORK/examples/golden/classifier.golden.npz" onnxruntime "$expect"
    if [ "$mode" = aarch64 ]; then
        qualify_one "$mode" int8 "$QDQ" "$WORK/examples/golden/classifier_qdq.golden.npz" onnxruntime flips
    fi
}

for mode in $ROUNDS; do
    if [ "$mode" != "$FIRST_ROUND" ] && [ "$mode" != current ]; then
        "$BOARD" down >>"$LOG" 2>&1
        board_up "$mode"
    fi
    [ "$mode" = current ] && mode=$(cat "${EDGEQUAL_ARM64_DIR:-/var/cache/edgequal-arm64}/run/cpuinfo-mode" 2>/dev/null | grep -q aarch64 && echo aarch64 || echo host)
    round "$mode"
done
finish
