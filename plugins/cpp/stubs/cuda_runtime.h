// STAND-IN, NOT CUDA: declarations only, for compile checks without a CUDA toolkit (README.md).
// A real build uses the CUDA toolkit's cuda_runtime.h.
#ifndef REPLAYSSM_STUB_CUDA_RUNTIME_H
#define REPLAYSSM_STUB_CUDA_RUNTIME_H

#include "cuda_runtime_api.h"

#endif // REPLAYSSM_STUB_CUDA_RUNTIME_H
