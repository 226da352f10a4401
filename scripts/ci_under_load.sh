#!/usr/bin/env bash
# Run the README's test command as on a shared CI machine: next to N busy processes
# (default 2), or as K copies of the suite at once (a CI host shared by K jobs).
#
#   scripts/ci_under_load.sh [N] [pytest args...]
#   scripts/ci_under_load.sh --copies K [pytest args...]
#
# The busy loops are started here, each bounded by its own deadline (2 h), and stopped
# when the tests end, however they end. With --copies each copy's output goes to its own
# log (named at the end) and the script fails when any copy failed. Run inside the
# project's virtualenv.
set -euo pipefail
cd "$(dirname "$0")/.."
pids=()
stop() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap stop EXIT INT TERM
start=$(date +%s)

if [ "${1:-}" = "--copies" ]; then
  k=${2:?"--copies needs a number"}
  shift 2
  logs=$(mktemp -d "${TMPDIR:-/tmp}/edgequal-copies.XXXXXX")
  echo "ci_under_load: $k copies of the suite at once on $(nproc) CPUs; logs in $logs" >&2
  for i in $(seq "$k"); do
    # -p no:cacheprovider: the copies share this checkout and must not race on .pytest_cache.
    python -m pytest -q -p no:cacheprovider "$@" >"$logs/copy$i.log" 2>&1 &
    pids+=("$!")
  done
  rc=0
  for i in $(seq "$k"); do
    copy_rc=0
    wait "${pids[$((i - 1))]}" || copy_rc=$?
    echo "ci_under_load: copy $i exited $copy_rc: $(tail -n 1 "$logs/copy$i.log")" >&2
    [ "$copy_rc" = 0 ] || rc=1
  done
  pids=()
  echo "ci_under_load: $k copies done after $(( $(date +%s) - start )) s" >&2
  exit "$rc"
fi

n=${1:-2}
shift || true
for _ in $(seq "$n"); do
  python3 -c 'import time
end = time.monotonic() + 7200
while time.monotonic() < end: pass' &
  pids+=("$!")
done
echo "ci_under_load: $n busy processes (${pids[*]}) on $(nproc) CPUs" >&2
rc=0
python -m pytest -q "$@" || rc=$?
echo "ci_under_load: tests exited $rc after $(( $(date +%s) - start )) s beside $n busy processes" >&2
exit "$rc"
