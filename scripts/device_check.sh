#!/usr/bin/env bash
# One device call: GPU tests, then the decode benchmarks of every family (README figures).
#   bash scripts/device_check.sh            tests + benchmark tables
#   bash scripts/device_check.sh --sweep    also the launch-configuration sweeps
# The whole run takes longer than one 10-minute device call; pass pytest arguments through
# TESTS (e.g. TESTS="tests/gpu/test_gated_delta_gpu.py") and pick benchmarks with BENCH
# (default: "mamba2 gdn kda") to split it.
# Logs and benchmark results go to $OUT (the device tool's return folder) or benchmarks/results.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT="${OUT:-benchmarks/results}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/gpu.txt"
status=0
# Logs go straight to files (a pipe would hold them back if the device call times out).
python3 -m pytest -q ${TESTS:-tests} -p no:cacheprovider -s -rs > "$OUT/pytest.log" 2>&1 || status=1
tail -5 "$OUT/pytest.log"
for b in ${BENCH:-mamba2 gdn kda}; do
  case $b in
    mamba2) cmd=(benchmarks/mamba2_decode.py) ;;
    gdn|kda) cmd=(benchmarks/gated_delta_decode.py --family "$b") ;;
    *) echo "unknown benchmark $b"; status=1; continue ;;
  esac
  if [[ "${1:-}" == "--sweep" ]]; then
    python3 "${cmd[@]}" --sweep --batch 1 16 64 256 --L 16 > "$OUT/sweep_$b.log" 2>&1 || status=1
  fi
  python3 "${cmd[@]}" --out-dir "$OUT" > "$OUT/bench_$b.log" 2>&1 || status=1
  grep -v "^#" "$OUT/bench_$b.log" | tail -40
done
exit $status
