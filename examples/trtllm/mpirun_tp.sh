#!/usr/bin/env bash
# ReplaySSM with tensor parallelism under mpirun (one rank per GPU), e.g. on one 4-GPU node:
#   bash examples/trtllm/mpirun_tp.sh nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16 4
# trtllm-llmapi-launch runs the script on rank 0 and TensorRT-LLM workers on the others; -x
# exports the variables to every rank, so each enables ReplaySSM when it imports tensorrt_llm.
# Per-rank geometry follows TensorRT-LLM's split (heads and groups divided by the TP size).
# Not executed here: TensorRT-LLM cannot be installed in the development environment.
set -euo pipefail
MODEL=${1:?usage: mpirun_tp.sh MODEL TP}
TP=${2:?usage: mpirun_tp.sh MODEL TP}
HERE=$(cd "$(dirname "$0")" && pwd)
STARTUP=$(python3 -c "import trtllm_replayssm_builders.trtllm as t; print(t.STARTUP_DIR)")
export TRTLLM_REPLAYSSM=1 TRTLLM_REPLAYSSM_BUFFER_LEN=${TRTLLM_REPLAYSSM_BUFFER_LEN:-16}
export PYTHONPATH="$STARTUP${PYTHONPATH:+:$PYTHONPATH}"
exec mpirun -n "$TP" -x TRTLLM_REPLAYSSM -x TRTLLM_REPLAYSSM_BUFFER_LEN -x PYTHONPATH \
    trtllm-llmapi-launch python3 "$HERE/llm_api.py" --model "$MODEL" --tp "$TP"
