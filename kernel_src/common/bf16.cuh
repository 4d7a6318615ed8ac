// bfloat16 helpers: conversion with round-to-nearest-even, packing of bf16 pairs into 32-bit words
// and of 8 values into a 16-byte vector.
//
// A bf16x2 word holds element 2i in its low half and element 2i + 1 in its high half (memory
// order on a little-endian machine). cvt.rn.bf16x2.f32 puts its FIRST source in the HIGH half.
#pragma once

#include <cuda_bf16.h>

namespace mla {

// Packs (lo, hi) into a bf16x2 word, each rounded to nearest even (cvt.rn.bf16x2.f32).
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// The two values of a bf16x2 word (exact).
__device__ __forceinline__ float bf16_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }

// x rounded to the nearest bf16 (ties to even), returned as a float.
__device__ __forceinline__ float round_bf16(float x) { return bf16_lo(pack_bf16x2(x, 0.0f)); }

__device__ __forceinline__ float bf16_to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

// 8 bf16 (one 16-byte vector) to floats and back.
__device__ __forceinline__ void unpack_bf16x8(uint4 v, float f[8]) {
    const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        f[2 * i] = bf16_lo(w[i]);
        f[2 * i + 1] = bf16_hi(w[i]);
    }
}
__device__ __forceinline__ uint4 pack_bf16x8(const float f[8]) {
    return make_uint4(pack_bf16x2(f[0], f[1]), pack_bf16x2(f[2], f[3]),
                      pack_bf16x2(f[4], f[5]), pack_bf16x2(f[6], f[7]));
}

// n (a multiple of 8) bf16 at a 16-byte aligned address to floats, and back.
template <int n>
__device__ __forceinline__ void load_bf16(const void *src, float f[n]) {
    static_assert(n % 8 == 0, "whole 16-byte vectors");
    const uint4 *s = static_cast<const uint4 *>(src);
#pragma unroll
    for (int i = 0; i < n / 8; ++i) unpack_bf16x8(s[i], f + 8 * i);
}
template <int n>
__device__ __forceinline__ void store_bf16(void *dst, const float f[n]) {
    static_assert(n % 8 == 0, "whole 16-byte vectors");
    uint4 *d = static_cast<uint4 *>(dst);
#pragma unroll
    for (int i = 0; i < n / 8; ++i) d[i] = pack_bf16x8(f + 8 * i);
}

}  // namespace mla
