// STAND-IN, NOT CUDA: declarations only, for compile checks without a CUDA toolkit (README.md).
// Only what TensorRT 10's headers and replayssm_engine_plugins.cpp use, with the toolkit's
// signatures. A real build uses the CUDA toolkit's cuda_runtime_api.h.
#ifndef REPLAYSSM_STUB_CUDA_RUNTIME_API_H
#define REPLAYSSM_STUB_CUDA_RUNTIME_API_H

#include <stddef.h>

#define REPLAYSSM_CUDA_STAND_IN 1

typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;

enum cudaError
{
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind
{
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};

#ifdef __cplusplus
extern "C" {
#endif

cudaError_t cudaMemcpyAsync(void* dst, void const* src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaMallocHost(void** ptr, size_t size);
cudaError_t cudaFreeHost(void* ptr);

#ifdef __cplusplus
}
#endif

#endif // REPLAYSSM_STUB_CUDA_RUNTIME_API_H
