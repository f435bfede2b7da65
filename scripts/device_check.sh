#!/usr/bin/env bash
# One device call: GPU tests, then benchmarks (README figures).
#   bash scripts/device_check.sh            tests + the decode benchmarks of every family
#   bash scripts/device_check.sh --sweep    also the decode launch-configuration sweeps
# The whole run takes longer than one 10-minute device call; split it:
#   TESTS   test paths, each run as its own pytest with its own log and time limit
#           (default: tests; e.g. TESTS="tests/gpu/test_spec_gpu.py tests/spec"; TESTS=none runs none)
#   BENCH   benchmarks to run (default: "mamba2 gdn kda"; also "spec" = spec_verify.py,
#           "model" = model_decode.py, "ckpt" = checkpoint_speed.py, "cuda" = mamba2_cuda_probe.py
#           with CUDA_PROBE_ARGS, default "--batch 1 4 8 16 64 256 --configs 2,3,pdl,c16 2,3,pdl,c4";
#           BENCH=none runs none)
#           "delta" = delta_cuda_probe.py with DELTA_PROBE_ARGS, default "--family kda --state bf16
#           fp8 --batch 16 64 256 --configs table"
#   ARGS_<benchmark>  more arguments for that benchmark, e.g. ARGS_kda="--L 16 8 32"
#   PEERS   folder of the peer kernels (../shared/peers copied into the checkout and carried):
#           FlashInfer is unpacked from it into /tmp/fi (where peers_mamba2.py imports it from),
#           and mamba2 and gdn get --peers PEERS
#   BENCH_GPU  run the benchmarks only where the GPU's name contains this (e.g. H200: the speed
#           targets are H200 figures, and a call may get an H100); the tests run on any GPU
#   PART_TIMEOUT  seconds for each test path and each benchmark (default 540)
#   JOBS    test paths run at once (default 1; the tests' own times are not measurements, so
#           several can share the GPU: 4 ran the GDN/KDA and spec GPU tests in 330 s instead of
#           ~15 min, 2026-11-30); benchmarks always run alone, after the tests
# Logs and benchmark results go to $OUT (the device tool's return folder) or benchmarks/results,
# written straight to files: a part killed at its limit still leaves its log.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT="${OUT:-benchmarks/results}"
LIMIT="${PART_TIMEOUT:-540}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/gpu.txt"
status=0
run_tests() {  # one test path, its log in $OUT; prints its summary line
  local t=$1 log="$OUT/pytest_$(basename "$1" .py).log" rc=0
  # Two CPU threads a test process: several processes (JOBS, or pytest -n) sharing the machine's
  # 16 cores with torch's default thread count each: the float64 oracles run on the CPU.
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} timeout "$LIMIT" python3 -m pytest -q "$t" -p no:cacheprovider -rs --durations=10 > "$log" 2>&1 || rc=1
  echo "$t: $(grep -E '(passed|failed|error)' "$log" | tail -1)"
  return $rc
}
for t in ${TESTS:-tests}; do
  [[ "$t" == none ]] && continue
  while (( $(jobs -rp | wc -l) >= ${JOBS:-1} )); do wait -n || status=1; done
  run_tests "$t" &
done
while (( $(jobs -rp | wc -l) > 0 )); do wait -n || status=1; done
if [[ -n "${BENCH_GPU:-}" ]] && ! grep -q -- "$BENCH_GPU" "$OUT/gpu.txt"; then
  echo "benchmarks skipped: the GPU is not an $BENCH_GPU"
  exit $status
fi
if [[ -n "${PEERS:-}" ]]; then  # FlashInfer's prebuilt modules, where peers_mamba2.py looks for them
  # (its FI_DIR; it puts the folder on sys.path and turns FlashInfer's JIT off itself)
  mkdir -p /tmp/fi && tar xJf "$PEERS"/flashinfer/flashinfer-*.tar.xz -C /tmp/fi \
    && python3 -m pip install -q --no-deps --target /tmp/fi "$PEERS"/flashinfer/apache_tvm_ffi-*.whl \
    || { echo "PEERS=$PEERS: FlashInfer could not be unpacked"; exit 1; }
  export LD_PRELOAD=libcuda.so.1
fi
for b in ${BENCH:-mamba2 gdn kda}; do
  case $b in
    none) continue ;;
    mamba2) cmd=(benchmarks/mamba2_decode.py) ;;
    gdn|kda) cmd=(benchmarks/gated_delta_decode.py --family "$b") ;;
    spec) cmd=(benchmarks/spec_verify.py) ;;
    model) cmd=(benchmarks/model_decode.py) ;;
    ckpt) cmd=(benchmarks/checkpoint_speed.py) ;;
    cuda) read -ra probe <<< "${CUDA_PROBE_ARGS:---batch 1 4 8 16 64 256 --configs 2,3,pdl,c16 2,3,pdl,c4}"
          cmd=(benchmarks/mamba2_cuda_probe.py "${probe[@]}") ;;
    delta) read -ra probe <<< "${DELTA_PROBE_ARGS:---family kda --state bf16 fp8 --batch 16 64 256 --configs table}"
           cmd=(benchmarks/delta_cuda_probe.py "${probe[@]}") ;;
    *) echo "unknown benchmark $b"; status=1; continue ;;
  esac
  if [[ "${1:-}" == "--sweep" && "$b" != "model" && "$b" != "ckpt" && "$b" != "cuda" && "$b" != "delta" ]]; then
    sweep=(--sweep --batch 1 16 64 256 --L 16)
    [[ "$b" == "spec" ]] && sweep=(--sweep --T 4 --batch 16 256)
    timeout "$LIMIT" python3 "${cmd[@]}" "${sweep[@]}" > "$OUT/sweep_$b.log" 2>&1 || status=1
  fi
  extra_name="ARGS_$b"
  read -ra extra <<< "${!extra_name:-}"
  [[ -n "${PEERS:-}" && ( "$b" == mamba2 || "$b" == gdn ) ]] && extra+=(--peers "$PEERS")
  out=(--out-dir "$OUT")
  [[ "$b" == "cuda" || "$b" == "delta" ]] && out=()  # the probes print only
  timeout "$LIMIT" python3 "${cmd[@]}" "${extra[@]}" "${out[@]}" > "$OUT/bench_$b.log" 2>&1 || status=1
  grep -v "^#" "$OUT/bench_$b.log" | tail -40
done
exit $status
