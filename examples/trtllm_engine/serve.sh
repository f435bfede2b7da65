#!/usr/bin/env bash
# NOT RUN HERE: serves the engine of build.sh with Triton Inference Server's tensorrtllm backend,
# inside the Triton TensorRT-LLM container whose TensorRT-LLM is 1.2.1, then sends one request.
#
#   bash examples/trtllm_engine/serve.sh            # from the repository root, after build.sh
#
# The engine holds replayssm:: plugin layers, so the plugin library must be in the server
# process before the engine is deserialized: LD_PRELOAD it (its creators register on load).
set -euo pipefail

WORK=${WORK:-./mamba_model}
REPO=${REPO:-./triton_model_repo}
LIB=${TRTLLM_REPLAYSSM_PLUGIN_LIB:-${PWD}/build/engine_plugins/libreplayssm_engine_plugins.so}

mkdir -p "${REPO}/tensorrt_llm/1"
sed "s#@ENGINE_DIR@#$(realpath "${WORK}/engines/mamba2-2.7b-replayssm")#" \
    examples/trtllm_engine/triton/tensorrt_llm/config.pbtxt > "${REPO}/tensorrt_llm/config.pbtxt"

LD_PRELOAD="${LIB}" tritonserver --model-repository="${REPO}" --http-port 8000 &
SERVER=$!
trap 'kill ${SERVER}' EXIT
until curl -sf localhost:8000/v2/health/ready > /dev/null; do sleep 2; done

# Token ids of the gpt-neox-20b tokenizer (mamba2-2.7b's); end_id 0, pad_id 1.
curl -s localhost:8000/v2/models/tensorrt_llm/generate -d \
    '{"input_ids": [510, 3158, 8516, 30013, 27287, 689], "input_lengths": [6], "request_output_len": [64], "end_id": [0], "pad_id": [1]}'
echo
