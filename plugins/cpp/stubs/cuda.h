// STAND-IN, NOT CUDA: declarations only, for compile checks without a CUDA toolkit (README.md).
// The driver API types and calls replayssm_engine_plugins.cpp uses, with the toolkit's
// signatures. A real build uses the CUDA toolkit's cuda.h and links libcuda.
#ifndef REPLAYSSM_STUB_CUDA_H
#define REPLAYSSM_STUB_CUDA_H

#define REPLAYSSM_CUDA_STAND_IN 1

typedef struct CUstream_st* CUstream; // the runtime's cudaStream_t is the same pointer type
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;

typedef enum cudaError_enum
{
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_NOT_FOUND = 500
} CUresult;

#ifdef __cplusplus
extern "C" {
#endif

CUresult cuModuleLoadData(CUmodule* module, void const* image);
CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, char const* name);
CUresult cuModuleUnload(CUmodule hmod);
CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
    unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes,
    CUstream hStream, void** kernelParams, void** extra);

#ifdef __cplusplus
}
#endif

#endif // REPLAYSSM_STUB_CUDA_H
