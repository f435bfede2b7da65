// Device pieces shared by the CUDA C++ speculative verify kernels (mamba2_verify_step.cu,
// gated_delta_verify_step.cu): the flush rule and a row's window tokens. Needs the -D constants
// LREC (L), VT (window tokens) and HAS_NUM_TOKENS (0: every row has VT tokens). sm_90.

#pragma once

// Cursor flag of a GDN/KDA row whose verify flushed, until its commit (cursor = w + VERIFY_FLUSHED;
// kernels.common.VERIFY_FLUSHED has the same value).
#define VERIFY_FLUSHED (1 << 30)

// Whether a row of w committed records and n window tokens folds its history this step.
__device__ __forceinline__ bool verify_flushes(int w, int n) { return w + n > LREC - 1; }

// Row b's window tokens: num_tokens[b], or VT.
__device__ __forceinline__ int window_tokens(const int* num_tokens, int b) {
#if HAS_NUM_TOKENS
  return num_tokens[b];
#else
  return VT;
#endif
}
