#!/usr/bin/env bash
# One device call: Nsight Compute profiles of the GDN / KDA replay launches
# (benchmarks/profile_delta.py), one text report per case in $OUT (at most 8 files come back).
#   CASES="gdn:64:f32 gdn:16:bf16 kda:256:f32" bash scripts/device_profile_delta.sh
# A case is FAMILY:BATCH:STATE[:CURSORS[:CONFIG]] (CURSORS pins every replay cursor: 0 non-flush,
# L-1 flush, empty: spread; CONFIG a CUDA launch rows,stages,min_ctas or small,ROWS,mN). Seven
# steps run; the 7th and 8th launches are profiled: the fourth step's two launches, or the seventh
# step's small kernel and nothing else. With SOURCE=1, a second profile of the same step's
# delta_replay_step alone writes warp-stall samples per SASS instruction (ncu_src_*.csv;
# summarised by benchmarks/ncu_stalls.py).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-benchmarks/results}"
mkdir -p "$OUT"
SECTIONS=(--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats
          --section MemoryWorkloadAnalysis --section SchedulerStats)
for c in ${CASES:-gdn:64:f32}; do
  IFS=: read -r family batch state cursors config <<< "$c"
  args=(--family "$family" --batch "$batch" --state "$state" --steps 4 ${L:+--L $L})
  [[ -n "${cursors:-}" ]] && args+=(--cursors "$cursors")
  [[ -n "${config:-}" ]] && args+=(--config "$config")
  log="$OUT/ncu_delta_${family}_${batch}_${state}${cursors:+_c$cursors}${config:+_${config//,/-}}.txt"
  LD_PRELOAD=libcuda.so.1 ncu --clock-control none --launch-skip 6 --launch-count 2 -k "regex:delta_replay" "${SECTIONS[@]}" \
      python3 benchmarks/profile_delta.py "${args[@]}" > "$log" 2>&1
  if [[ "${SOURCE:-0}" == 1 ]]; then
    LD_PRELOAD=libcuda.so.1 ncu --clock-control none --launch-skip 3 --launch-count 1 -k "regex:delta_replay_step" \
        --section WarpStateStats --section SourceCounters --page source --print-source sass --csv \
        python3 benchmarks/profile_delta.py "${args[@]}" > "$(dirname "$log")/$(basename "${log/ncu_delta_/ncu_src_}" .txt).csv" 2>&1
  fi
  echo "== $c"; grep -E "delta_replay_|Duration|SM Frequency|Elapsed Cycles|DRAM Throughput|Achieved Occupancy|Registers Per|Issue Slots Busy|Mem Busy|Max Bandwidth" "$log" | head -28
done
