#!/usr/bin/env bash
# ReplaySSM behind trtllm-serve (OpenAI-compatible server), any tensor-parallel size.
#   bash examples/trtllm/serve.sh nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16 4
# The server process and the MPI workers it starts inherit TRTLLM_REPLAYSSM and PYTHONPATH; the
# startup sitecustomize enables ReplaySSM in each as soon as it imports tensorrt_llm.
# Not executed here: TensorRT-LLM cannot be installed in the development environment.
set -euo pipefail
MODEL=${1:?usage: serve.sh MODEL [TP]}
TP=${2:-1}
HERE=$(cd "$(dirname "$0")" && pwd)
STARTUP=$(python3 -c "import trtllm_replayssm_builders.trtllm as t; print(t.STARTUP_DIR)")
export TRTLLM_REPLAYSSM=1 TRTLLM_REPLAYSSM_BUFFER_LEN=${TRTLLM_REPLAYSSM_BUFFER_LEN:-16}
export PYTHONPATH="$STARTUP${PYTHONPATH:+:$PYTHONPATH}"
exec trtllm-serve "$MODEL" --backend pytorch --tp_size "$TP" \
    --extra_llm_api_options "$HERE/extra_llm_api_options.yaml"
