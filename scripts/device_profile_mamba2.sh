#!/usr/bin/env bash
# One device call: Nsight Compute profiles of the Mamba-2 decode kernels (benchmarks/profile_mamba2.py),
# one text report per case in $OUT (at most 8 files come back from a device call).
#   CASES="replay_step:256:f32 replay_step:16:f32:0 decode_step:256:f32" bash scripts/device_profile_mamba2.sh
# A case is ROUTE:BATCH:STATE[:CURSORS] (CURSORS pins every replay cursor: 0 non-flush, L-1 flush).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-benchmarks/results}"
mkdir -p "$OUT"
SECTIONS=(--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats
          --section MemoryWorkloadAnalysis --section SchedulerStats)
for c in ${CASES:-replay_step:256:f32}; do
  IFS=: read -r route batch state cursors <<< "$c"
  args=(--route "$route" --batch "$batch" --state "$state" ${L:+--L $L})
  [[ -n "${cursors:-}" ]] && args+=(--cursors "$cursors")
  kernel=$([[ $route == replay_step ]] && echo replay || echo decode_step)
  log="$OUT/ncu_${route}_${batch}_${state}${cursors:+_c$cursors}.txt"
  ncu --clock-control none --launch-skip 3 --launch-count 1 -k "regex:$kernel" "${SECTIONS[@]}" \
      python3 benchmarks/profile_mamba2.py "${args[@]}" > "$log" 2>&1
  echo "== $c"; grep -E "Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Theoretical Occ|Block Limit" "$log" | head -12
done
