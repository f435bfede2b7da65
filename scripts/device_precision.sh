#!/usr/bin/env bash
# One device call: issue 25's drift study (benchmarks/precision.py) on the GPU kernels, one
# process a preset model, all at once (a run is host-bound: ~130 steps a second without
# simulated formats, ~20 with them; five processes share the GPU and 16 cores). Each model's
# log, JSON and PNG go to $OUT/<model>/ (the device tool returns 8 files: tar them).
#   bash scripts/device_precision.sh       # bf16 records, L 8 16 32 64, every checkpoint dtype, seed 0
#   ARGS="--L 16 64 --dtypes fp32 bf16 --record-dtype fp32" bash scripts/device_precision.sh
# ARGS replaces the default study arguments after --steps/--models/--batch; PART_TIMEOUT
# (seconds, default 540) bounds each process; DEVICE (default cuda) and STEPS (default 4096)
# for a quick check elsewhere: DEVICE=cpu STEPS=4 MODELS=qwen3.5-4b bash scripts/device_precision.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT="${OUT:-benchmarks/results}"
MODELS="${MODELS:-nemotron-3-nano-4b nemotron-3-super-120b qwen3.5-4b qwen3.5-122b-a10b kimi-linear-48b}"
ARGS="${ARGS:---L 8 16 32 64 --dtypes fp32 bf16 fp16 fp8 bf16-sr fp16-sr fp8-sr --markdown}"
STEPS="${STEPS:-4096}"
mkdir -p "$OUT"
for m in $MODELS; do
  mkdir -p "$OUT/$m"
  # shellcheck disable=SC2086  # ARGS is a list of arguments
  timeout "${PART_TIMEOUT:-540}" python3 benchmarks/precision.py --device "${DEVICE:-cuda}" --steps "$STEPS" --models "$m" \
    --batch 1 $ARGS --out-dir "$OUT/$m" > "$OUT/$m/precision.log" 2>&1 &
done
status=0
for job in $(jobs -p); do wait "$job" || status=1; done
for m in $MODELS; do
  echo "== $m"
  tr '\r' '\n' < "$OUT/$m/precision.log" | grep -v "it/s\]\|s/it\]" | grep -E "^$m|^# wrote|Error" || tail -3 "$OUT/$m/precision.log"
done
exit $status
