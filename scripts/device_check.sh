#!/usr/bin/env bash
# One device call: GPU tests, then the Mamba-2 decode benchmark (README figures).
#   bash scripts/device_check.sh            tests + benchmark table
#   bash scripts/device_check.sh --sweep    also the launch-configuration sweep
# Logs and benchmark results go to $OUT (the device tool's return folder) or benchmarks/results.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT="${OUT:-benchmarks/results}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/gpu.txt"
status=0
python3 -m pytest -q tests -p no:cacheprovider -s 2>&1 | tee "$OUT/pytest.log" || status=1
if [[ "${1:-}" == "--sweep" ]]; then
  python3 benchmarks/mamba2_decode.py --sweep --batch 1 16 64 256 --L 16 2>&1 | tee "$OUT/sweep.log" || status=1
fi
python3 benchmarks/mamba2_decode.py --out-dir "$OUT" 2>&1 | tee "$OUT/bench.log" || status=1
exit $status
