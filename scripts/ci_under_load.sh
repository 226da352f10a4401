#!/usr/bin/env bash
# Run the README's test command next to N busy processes (default 2), as on a shared CI machine.
#
#   scripts/ci_under_load.sh [N] [pytest args...]
#
# The busy loops are started here, each bounded by its own deadline (2 h), and stopped
# when the tests end, however they end. Run inside the project's virtualenv.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-2}
shift || true
pids=()
stop() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap stop EXIT INT TERM
for _ in $(seq "$n"); do
  python3 -c 'import time
end = time.monotonic() + 7200
while time.monotonic() < end: pass' &
  pids+=("$!")
done
echo "ci_under_load: $n busy processes (${pids[*]}) on $(nproc) CPUs" >&2
start=$(date +%s)
rc=0
python -m pytest -q "$@" || rc=$?
echo "ci_under_load: tests exited $rc after $(( $(date +%s) - start )) s beside $n busy processes" >&2
exit "$rc"
