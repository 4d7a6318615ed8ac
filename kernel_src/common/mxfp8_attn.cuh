// MXFP8 pieces of the DSV4 attention kernel (spec/dsv4.md §2.0, §2.2, §3.1, §3.3, A3):
// float8_e4m3fn encode/decode, ue8m0 block scales, group-32 activation quantization and the
// SfAtom offset of a weight scale. (The output projection has its own common/fp8.cuh; the two
// are to be unified.)
//
// ue8m0_for(amax) = 2^e with e = ceil(log2(max(amax, 1e-4) / 448)) clamped to [-127, 127]; the
// stored byte is e + 127. The fp32 quotient is exact enough: amax / 448 rounds onto a power of two
// only when it is one (amax = 7 * 2^k), so its exponent and mantissa give the exact ceil.
// e4m3 values times 2^e are exact in bf16 (4 significant bits, |e| <= 127 stays in range), so a
// dequantized MXFP8 operand is fed to bf16 MMAs without error.
#pragma once

#include <cuda_fp16.h>

#include "common/bf16.cuh"

namespace mla {

// Two floats to float8_e4m3fn bytes (lo in the low byte), RNE, saturating to +-448
// (cvt.rn.satfinite.e4m3x2.f32).
__device__ __forceinline__ unsigned short e4m3x2_from_f32(float lo, float hi) {
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}

// Two float8_e4m3fn bytes (lo = low byte) to floats, exact (cvt.rn.f16x2.e4m3x2).
__device__ __forceinline__ float2 e4m3x2_to_f32(unsigned short v) {
    unsigned h;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"(v));
    const __half2 hh = *reinterpret_cast<const __half2 *>(&h);
    return __half22float2(hh);
}

// 2^e as a float for e in [-127, 127] (2^-127 is subnormal).
__device__ __forceinline__ float exp2_int(int e) {
    return e >= -126 ? __int_as_float((e + 127) << 23) : __int_as_float(1 << 22);
}

// Exponent e of the ue8m0 scale of a block whose largest magnitude is amax (A3).
__device__ __forceinline__ int ue8m0_exponent(float amax) {
    const float r = fmaxf(amax, 1e-4f) / 448.0f;
    const int bits = __float_as_int(r);
    int e = ((bits >> 23) & 0xff) - 127 + ((bits & 0x7fffff) != 0 ? 1 : 0);
    return e < -127 ? -127 : (e > 127 ? 127 : e);
}

// Quantizes n floats with scale 2^e into e4m3 bytes (n % 4 == 0), written as n / 4 words.
template <int n>
__device__ __forceinline__ void e4m3_encode(const float *v, int e, unsigned *out) {
    const float inv = exp2_int(-e);  // exact: |e| <= 127
#pragma unroll
    for (int i = 0; i < n / 4; ++i) {
        const unsigned lo = e4m3x2_from_f32(v[4 * i] * inv, v[4 * i + 1] * inv);
        const unsigned hi = e4m3x2_from_f32(v[4 * i + 2] * inv, v[4 * i + 3] * inv);
        out[i] = lo | (hi << 16);
    }
}

// Decodes n e4m3 bytes (as n / 4 words) times 2^e into floats.
template <int n>
__device__ __forceinline__ void e4m3_decode(const unsigned *in, int e, float *v) {
    const float s = exp2_int(e);
#pragma unroll
    for (int i = 0; i < n / 4; ++i) {
        const float2 a = e4m3x2_to_f32((unsigned short)(in[i] & 0xffffu));
        const float2 b = e4m3x2_to_f32((unsigned short)(in[i] >> 16));
        v[4 * i] = a.x * s;
        v[4 * i + 1] = a.y * s;
        v[4 * i + 2] = b.x * s;
        v[4 * i + 3] = b.y * s;
    }
}

// In place: v[0..n) <- mxq(v) = e4m3(v / s) * s with s the ue8m0 scale of the block (one group).
template <int n>
__device__ __forceinline__ void mx_fake_quant(float *v) {
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < n; ++i) amax = fmaxf(amax, fabsf(v[i]));
    const int e = ue8m0_exponent(amax);
    unsigned q[n / 4];
    e4m3_encode<n>(v, e, q);
    e4m3_decode<n>(q, e, v);
}

// Byte offset of the scale of weight row n, K-group kb (k / 32), in SfAtom order with KB groups
// per row (§3.3): 128-row x 4-group atoms of 512 bytes, K-fastest.
__device__ __forceinline__ long long sfatom_offset(int n, int kb, int KB) {
    const int katoms = (KB + 3) / 4;
    return ((long long)(n / 128) * katoms + kb / 4) * 512 + (n % 32) * 16 + ((n % 128) / 32) * 4 +
           (kb % 4);
}

}  // namespace mla
