#!/usr/bin/env bash
# One benchmark, timed for the working tree and for each exported variant (scripts/export_variant.sh)
# in the same device call, one after the other; logs to $OUT/compare_<label>_<variant>.log (the
# device tool returns at most 8 files: JSON/PNG results go to $RESULTS/<variant>, default /tmp).
#   VARIANTS="main" bash scripts/device_compare.sh spec benchmarks/spec_verify.py --family gdn kda --T 4 --batch 256
# Each run imports its own copy of the package (a benchmark puts its folder's parent first on
# sys.path). Ratios inside one log (replay vs the conventional kernel) are side by side; compare
# absolute times across variants only within one call.
set -uo pipefail
cd "$(dirname "$0")/.."
if [[ $# -lt 2 ]]; then
  echo "usage: VARIANTS=\"a b\" scripts/device_compare.sh LABEL BENCHMARK [ARGS...]" >&2
  exit 2
fi
label=$1 bench=$2
shift 2
OUT="${OUT:-benchmarks/results}"
LIMIT="${PART_TIMEOUT:-300}"
mkdir -p "$OUT"
status=0
for v in tree ${VARIANTS:-}; do
  root=.
  [[ $v != tree ]] && root="variants/$v"
  log="$OUT/compare_${label}_${v}.log"
  timeout "$LIMIT" python3 "$root/$bench" "$@" --out-dir "${RESULTS:-/tmp/compare}/$v" > "$log" 2>&1 || status=1
  echo "== $v ($root)"
  grep -v "^#" "$log" | grep -E "replay|Error" || tail -3 "$log"
done
exit $status
