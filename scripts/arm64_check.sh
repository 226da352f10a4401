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
# A qualification passes this check when it ends in a verified signed report
# (passed or failed: a runtime that cannot run under emulation must end in a
# signed failed report naming it) or in a one-line error (exit 3) naming the
# runtime; a transport error, a traceback or a report from another machine fails it.
#
# Everything runs in a scratch HOME (ssh config with the alias arm64-board,
# known_hosts, known_devices, reports), so the user's own files are untouched.
# The board is stopped at the end when this script started it
# (EDGEQUAL_ARM64_KEEP=1 keeps it running).
#
# Settings: EDGEQUAL_ARM64_WORK (scratch dir, default a new /tmp/edgequal-arm64-check.*),
# EDGEQUAL_ARM64_WHEELHOUSE=1 (always install from a wheelhouse built here),
# EDGEQUAL_ARM64_PLAN (qualify plan, default quick), EDGEQUAL_ARM64_SUSTAIN (default 0),
# and those of scripts/arm64_board.sh.
# Exit: 0 every step held, 1 a step failed, 2 no board can run here (no root, no binfmt_misc).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BOARD=$ROOT/scripts/arm64_board.sh
WORK=${EDGEQUAL_ARM64_WORK:-$(mktemp -d /tmp/edgequal-arm64-check.XXXXXX)}
PLAN=${EDGEQUAL_ARM64_PLAN:-quick}
SUSTAIN=${EDGEQUAL_ARM64_SUSTAIN:-0}
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

# run_step NAME CMD...: run, time, keep the output; sets STEP_RC and STEP_OUT.
run_step() {
    local name=$1 start end
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
    SUMMARY+=("$(printf '%-28s %6s s  %-4s %s' "$1" "$STEP_S" "$2" "$3")")
    [ "$2" = ok ] || FAILED=1
}

# ----- 1. the board ----------------------------------------------------------------
STARTED_BOARD=0
if ! "$BOARD" status >/dev/null 2>&1; then
    run_step "board up" "$BOARD" up
    if [ "$STEP_RC" = 2 ]; then
        say "arm64-check: no emulated arm64 board can run on this machine (see above); nothing checked"
        exit 2
    fi
    if [ "$STEP_RC" != 0 ]; then
        record "board up" FAIL "arm64_board.sh up exited $STEP_RC"
        printf '%s\n' "${SUMMARY[@]}"
        exit 1
    fi
    STARTED_BOARD=1
    record "board up" ok "$(sed -n 's/^build_seconds=/rootfs built in /p' "${EDGEQUAL_ARM64_DIR:-/var/cache/edgequal-arm64}/rootfs/.edgequal-board" | head -n1)"
fi
cleanup() {
    if [ "$STARTED_BOARD" = 1 ] && [ "${EDGEQUAL_ARM64_KEEP:-0}" != 1 ]; then
        "$BOARD" down >>"$LOG" 2>&1 || true
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
eval "$("$BOARD" env)"
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

# ----- 2. install --------------------------------------------------------------------
# The agent's gRPC service listens on loopback only: the board shares this machine's network.
AGENT_PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
INSTALL=(edgequal agent install "$URL" --service background --listen "127.0.0.1:$AGENT_PORT")

build_wheelhouse() { # an aarch64 wheelhouse for the board's Python, from this machine's registry
    local wh=$WORK/wheelhouse pyver
    pyver=$(ssh -F "$HOME/.ssh/config" -o BatchMode=yes arm64-board \
        "python3 -c 'import sys; print(\"%d%d\" % sys.version_info[:2])'") || return 1
    mkdir -p "$wh"
    (cd "$ROOT" && "$PY" -m pip wheel --no-deps --no-build-isolation -q -w "$wh" .) || return 1
    # Only this machine's network registry: its local find-links hold x86 wheels.
    env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null "$PY" -m pip download -q -d "$wh" \
        --only-binary=:all: --implementation cp --python-version "$pyver" \
        --platform manylinux2014_aarch64 --platform manylinux_2_17_aarch64 \
        --platform manylinux_2_28_aarch64 \
        "$(ls "$wh"/edgequal-*.whl)[onnx,litert]" || return 1
    echo "$wh"
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
    record "agent install" FAIL "exit $STEP_RC: $(printf '%s' "$STEP_OUT" | grep -m1 -E '^error' || true)"
    printf '\n%s\n' "${SUMMARY[@]}" | tee -a "$LOG"
    exit 1
fi

# ----- 3. what the board says about itself ---------------------------------------------
run_step status edgequal agent status "$URL"
if [ "$STEP_RC" = 0 ]; then
    record "agent status" ok "$(printf '%s' "$STEP_OUT" | "$PY" -c '
import json, sys
try:
    s = json.loads(sys.stdin.read())
    print("runtimes:", "; ".join(f"{k} {v}" for k, v in sorted(s.get("runtimes", {}).items())))
except ValueError:
    print("(not JSON)")')"
else
    record "agent status" FAIL "exit $STEP_RC: $(printf '%s' "$STEP_OUT" | tail -n1)"
fi

# ----- 4 and 5. qualify the example models over ssh://, verify the reports -------------
run_step "example models" "$PY" -c '
import sys
from pathlib import Path
from edgequal.host.demo import prepare
for model, golden in prepare(Path(sys.argv[1])):
    print(model, golden)' "$WORK/examples"
record "example models" "$([ "$STEP_RC" = 0 ] && echo ok || echo FAIL)" "edgequal.host.demo.prepare"

check_report() { # check_report REPORT MODEL: the report's claims, after `edgequal verify`
    "$PY" - "$1" "$2" <<'EOF'
import json, sys
from pathlib import Path
from edgequal.host.trust import KnownDevices
from edgequal.host.verify import verify_envelope
report = verify_envelope(Path(sys.argv[1]).read_bytes(), known=KnownDevices(), artifacts=[Path(sys.argv[2])])
p = report.predicate
fp = p.get("fingerprint") or {}
results = p.get("results") or {}
rt = results.get("runtime") or {}
cold = (results.get("cold_load") or {}).get("total_ms") or {}
lat = (results.get("latency") or {}).get("per_shape") or [{}]
print(json.dumps({
    "device": report.device_name,
    "architecture": fp.get("architecture"),
    "os": (fp.get("os_release") or {}).get("PRETTY_NAME") if isinstance(fp.get("os_release"), dict) else fp.get("os_release"),
    "python": fp.get("python"),
    "runtime": f"{rt.get('runtime')} {rt.get('version')}" if rt else None,
    "status": p.get("status"),
    "reason": p.get("reason"),
    "cold_total_ms_median": cold.get("median"),
    "latency_p50_ms": ((lat[0] or {}).get("stats") or {}).get("p50_ms"),
    "findings": [
        {k: f.get(k) for k in ("kind", "runtime", "signal", "message") if f.get(k)}
        for f in (p.get("findings") or [])
    ][:3],
}))
sys.exit(0 if fp.get("architecture") == "aarch64" else 1)
EOF
}

qualify_one() { # qualify_one LABEL MODEL GOLDEN RUNTIME_NAME
    local label=$1 model=$2 golden=$3 runtime=$4
    local report=$WORK/reports/$label.report.json
    mkdir -p "$WORK/reports"
    local args=(edgequal qualify "$model" --golden "$golden" --device "$URL" --plan "$PLAN" -o "$report")
    [ "$SUSTAIN" != 0 ] && args+=(--sustain "$SUSTAIN")
    run_step "qualify $label" "${args[@]}"
    local rc=$STEP_RC out=$STEP_OUT
    if [ -s "$report" ]; then
        record "qualify $label" ok "exit $rc, signed report $(basename "$report")"
        run_step "verify $label" edgequal verify "$report" --artifact "$model"
        if [ "$STEP_RC" = 0 ]; then
            record "verify $label" ok "$(printf '%s' "$STEP_OUT" | tail -n1 | cut -c1-110)"
        else
            record "verify $label" FAIL "exit $STEP_RC: $(printf '%s' "$STEP_OUT" | tail -n1)"
        fi
        run_step "report $label" check_report "$report" "$model"
        if [ "$STEP_RC" = 0 ]; then
            record "report names aarch64" ok "$(printf '%s' "$STEP_OUT" | tail -n1 | cut -c1-160)"
        else
            record "report names aarch64" FAIL "$(printf '%s' "$STEP_OUT" | tail -n1 | cut -c1-160)"
        fi
    elif [ "$rc" = 3 ] && printf '%s' "$out" | grep -qi "$runtime" &&
        ! printf '%s' "$out" | grep -qiE 'traceback|transport|failed on|connection'; then
        STEP_S=$STEP_S record "qualify $label" ok "no report; one-line error naming $runtime: $(printf '%s' "$out" | grep -m1 -i error | cut -c1-120)"
    else
        record "qualify $label" FAIL "exit $rc, no report: $(printf '%s' "$out" | grep -m1 -iE '^error|traceback' | cut -c1-140)"
    fi
}

# prepare() prints "MODEL GOLDEN" per example: the float TFLite and the ONNX classifier.
TFLITE=$WORK/examples/models/classifier.tflite
ONNX=$WORK/examples/models/classifier.onnx
for m in "$TFLITE" "$ONNX"; do
    if [ ! -s "$m" ]; then
        STEP_S=0 record "example $(basename "$m")" FAIL "prepare() made no $m"
    fi
done
[ -s "$TFLITE" ] && qualify_one tflite "$TFLITE" "$WORK/examples/golden/classifier_tflite.golden.npz" litert
[ -s "$ONNX" ] && qualify_one onnx "$ONNX" "$WORK/examples/golden/classifier.golden.npz" onnxruntime

say ""
say "summary (board $URL, plan $PLAN, work dir $WORK):"
printf '%s\n' "${SUMMARY[@]}" | tee -a "$LOG"
if [ "$FAILED" = 0 ]; then say "arm64-check: every step held"; else say "arm64-check: FAILED"; fi
exit "$FAILED"
