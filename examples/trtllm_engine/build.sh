#!/usr/bin/env bash
# NOT RUN HERE (no GPU, TensorRT or TensorRT-LLM where this was written): the exact steps to build
# a mamba2-2.7b engine whose generation steps run ReplaySSM, for TensorRT-LLM 1.2.1's C++ runtime
# and Triton's tensorrtllm backend (examples/trtllm_engine/README.md, docs/engine_flow.md).
#
#   bash examples/trtllm_engine/build.sh            # from the repository root
#
# Variables (defaults in brackets): TRTLLM_SRC [./TensorRT-LLM, a v1.2.1 checkout, for the
# checkpoint converter], WORK [./mamba_model], TENSORRT_ROOT [/usr/local/tensorrt], L [16],
# MAX_BATCH [64].
set -euo pipefail

TRTLLM_SRC=${TRTLLM_SRC:-./TensorRT-LLM}
WORK=${WORK:-./mamba_model}
TENSORRT_ROOT=${TENSORRT_ROOT:-/usr/local/tensorrt}
L=${L:-16}
MAX_BATCH=${MAX_BATCH:-64}   # the runtime's slots: keep Triton's max_batch_size equal to it

# 1. TensorRT-LLM 1.2.1 (the last release that builds engines) and this package's engine extra.
pip install "tensorrt_llm==1.2.1"
pip install -e ".[trtllm-engine]"

# 2. The engine plugin library (plugins/cpp: replayssm::Mamba2Route, replayssm::Mamba2ReplayBlock).
cmake -S plugins/cpp -B build/engine_plugins -DTENSORRT_ROOT="${TENSORRT_ROOT}" -DCMAKE_BUILD_TYPE=Release
cmake --build build/engine_plugins -j
export TRTLLM_REPLAYSSM_PLUGIN_LIB="${PWD}/build/engine_plugins/libreplayssm_engine_plugins.so"

# 3. The TensorRT-LLM checkpoint of mamba2-2.7b (bf16), with TensorRT-LLM's own converter.
git clone https://huggingface.co/state-spaces/mamba2-2.7b "${WORK}/mamba2-2.7b"
python "${TRTLLM_SRC}/examples/models/core/mamba/convert_checkpoint.py" \
    --model_dir "${WORK}/mamba2-2.7b" --dtype bfloat16 --output_dir "${WORK}/ckpt/mamba2-2.7b-bf16"

# 4. trtllm-build with the ReplaySSM hook: every flag after the two --replayssm-* ones is
#    trtllm-build's own. Paged state, packed input and the conv1d plugin are trtllm-build's
#    defaults for Mamba; they are spelled out because the engine flow needs them.
trtllm-replayssm build --replayssm-buffer-len "${L}" \
    --replayssm-plugin-lib "${TRTLLM_REPLAYSSM_PLUGIN_LIB}" \
    --checkpoint_dir "${WORK}/ckpt/mamba2-2.7b-bf16" \
    --output_dir "${WORK}/engines/mamba2-2.7b-replayssm" \
    --paged_kv_cache disable \
    --paged_state enable \
    --remove_input_padding enable \
    --mamba_conv1d_plugin auto \
    --gemm_plugin auto \
    --max_batch_size "${MAX_BATCH}" \
    --max_input_len 2048 \
    --max_seq_len 4096 \
    --max_beam_width 1 \
    --workers 1

# 5. What the runtime will allocate: pretrained_config.state_size and the replayssm_engine record.
python - "${WORK}/engines/mamba2-2.7b-replayssm/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
print("state_size", c["pretrained_config"]["state_size"], c["pretrained_config"]["replayssm_engine"])
PY
