#!/usr/bin/env bash
# One device call: Nsight Compute profiles of the Mamba-2 decode kernels (benchmarks/profile_mamba2.py),
# one text report per case in $OUT (at most 8 files come back from a device call).
#   CASES="replay_step:256:f32 replay_step:16:f32:0 decode_step:256:f32" bash scripts/device_profile_mamba2.sh
# A case is ROUTE:BATCH:STATE[:CURSORS[:CONFIG]] (CURSORS pins every replay cursor: 0 non-flush, L-1
# flush, empty: spread; CONFIG a launch configuration block_head_dim,num_warps,chunks,num_stages).
# ROOT (default .) runs the copy of the benchmarks there, e.g. an exported variant.
source "$(dirname "$0")/ncu_setup.sh"
for c in ${CASES:-replay_step:256:f32}; do
  IFS=: read -r route batch state cursors config <<< "$c"
  args=(--route "$route" --batch "$batch" --state "$state" ${L:+--L $L})
  [[ -n "${cursors:-}" ]] && args+=(--cursors "$cursors")
  [[ -n "${config:-}" ]] && args+=(--config "$config")
  kernel=$([[ $route == replay_step ]] && echo replay_step_kernel || echo decode_step)
  log="$OUT/ncu_${LABEL:-}${route}_${batch}_${state}${cursors:+_c$cursors}${config:+_${config//,/-}}.txt"
  ncu --clock-control none --launch-skip 3 --launch-count 1 -k "regex:$kernel" "${SECTIONS[@]}" \
      python3 "${ROOT:-.}/benchmarks/profile_mamba2.py" "${args[@]}" > "$log" 2>&1
  echo "== $c"; grep -E "Duration|SM Frequency|Elapsed Cycles|DRAM Throughput|Achieved Occupancy|Registers Per|Theoretical Occ|Executed Instructions |Issue Slots Busy|L2 Hit|Mem Busy|Max Bandwidth" "$log" | head -18
done
