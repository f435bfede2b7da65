// The g records of the gated delta-rule kernels (GDN / KDA step and verify): KDA's per-channel
// log-decays in fp16 (the caches' g_record_dtype beside bf16 d and k records; the launcher refuses
// others), GDN's scalar ones in fp32; and the bytes of a step's g element (G_SIZE). Needs
// PER_CHANNEL and G_CODE (the -D constants).

#pragma once

#include "replay_common.cuh"

#define G_SIZE (G_CODE == 0 ? 4 : 2)  // bytes of an element of the step's g (G_CODE: fp32, else 16-bit)

#if PER_CHANNEL
typedef u16 grec_t;
__device__ __forceinline__ float grec_to_f32(grec_t v) { return f16_to_f32(v); }
__device__ __forceinline__ float grec_load(const grec_t* p) { return grec_to_f32(*p); }
__device__ __forceinline__ grec_t grec_value(float g) { return f32_to_f16(g); }  // rounded to nearest
#else
typedef float grec_t;
__device__ __forceinline__ float grec_load(const grec_t* p) { return *p; }
__device__ __forceinline__ grec_t grec_value(float g) { return g; }
#endif
