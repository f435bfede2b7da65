#!/usr/bin/env bash
# TensorRT 10's public headers (NVIDIA/TensorRT include/, Apache-2.0) into an ignored folder, for
# the C++ engine plugins' compile check (tests/builders_trtllm_engine/test_engine_plugins_cpp.py
# runs it when TRT_HEADERS_DIR names the folder; skipped otherwise). Headers are not committed.
#
#   scripts/trt_headers.sh [DEST] [TAG] [REPO]
#     DEST  default build/trt_headers (build/ is git-ignored)
#     TAG   default v10.13.3, the TensorRT of TensorRT-LLM 1.2.x (its requirements: tensorrt~=10.13.3)
#     REPO  a local clone or git dir of NVIDIA/TensorRT, or a URL (default GitHub; needs network)
#   then: TRT_HEADERS_DIR=$PWD/build/trt_headers python3 -m pytest -q tests/builders_trtllm_engine
set -euo pipefail
dest=${1:-build/trt_headers}
tag=${2:-v10.13.3}
repo=${3:-https://github.com/NVIDIA/TensorRT.git}
mkdir -p "${dest}"
if [ -d "${repo}" ]; then
    git -C "${repo}" archive "${tag}" include | tar -x -C "${dest}" --strip-components=1
else
    tmp=$(mktemp -d)
    trap 'rm -rf "${tmp}"' EXIT
    git clone -q --depth 1 --branch "${tag}" --filter=blob:none --sparse "${repo}" "${tmp}"
    git -C "${tmp}" sparse-checkout set include
    cp -R "${tmp}/include/." "${dest}/"
fi
grep -E "#define TRT_(MAJOR|MINOR|PATCH)_ENTERPRISE" "${dest}/NvInferVersion.h"
echo "TRT_HEADERS_DIR=$(cd "${dest}" && pwd)"
