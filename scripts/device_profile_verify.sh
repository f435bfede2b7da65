#!/usr/bin/env bash
# One device call: Nsight Compute profiles of the speculative verify launches
# (benchmarks/profile_verify.py), one text report per case in $OUT (at most 8 files come back).
#   CASES="kda:16:4 gdn:16:4 mamba2:16:4 kda:256:4" bash scripts/device_profile_verify.sh
# A case is FAMILY:BATCH:T[:ROUTE[:KERNEL]] (ROUTE replay, the default, snapshot or serial; KERNEL
# the replay verify's, auto (the op's route), triton or cuda); fp32 checkpoint, history B = 16 as
# benchmarks/spec_verify.py. ROOT (default .) runs the copy of the benchmarks there, e.g. an exported
# variant (ROOT=variants/main; logs then named after it too, so that tree and variant can share $OUT).
source "$(dirname "$0")/ncu_setup.sh"
for c in ${CASES:-kda:16:4}; do
  IFS=: read -r family batch T route kernel <<< "$c"
  route=${route:-replay}
  kernel=${kernel:-auto}
  log="$OUT/ncu_verify_${family}_${batch}_T${T}_${route}_${kernel}${ROOT:+_$(basename "$ROOT")}.txt"
  # The warm-up (every slot set visited until the replay cursors are in their steady spread, so
  # flush rows are as frequent as when timed) runs unprofiled; then two steps between
  # cudaProfilerStart/Stop, every launch of them profiled (ncu serialises launches; the report
  # names each kernel).
  filter=$([[ $route == serial ]] && echo "regex:decode_step" || echo "regex:verify|commit|records")
  LD_PRELOAD=libcuda.so.1 ncu --profile-from-start off --clock-control none --launch-count 40 -k "$filter" "${SECTIONS[@]}" \
      python3 "${ROOT:-.}/benchmarks/profile_verify.py" --family "$family" --batch "$batch" --T "$T" --route "$route" --kernel "$kernel" \
      --steps 2 > "$log" 2>&1
  echo "== $c"; grep -E "  [_a-z0-9]+(verify|commit|records|decode_step)[_a-z0-9]*|Duration|SM Frequency|Elapsed Cycles|DRAM Throughput|Achieved Occupancy|Registers Per|Issue Slots Busy" "$log" | tail -32
done
