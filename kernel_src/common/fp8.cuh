// fp8 (float8_e4m3fn) and ue8m0 codes, the SfAtom scale layout and group quantization (mxq)
// (spec/dsv4.md §2.0, §2.2, §3.1, §3.3, A3, §5), for every DSV4 kernel.
//
//   e4m3     1 sign, 4 exponent (bias 7), 3 mantissa bits; max 448, subnormal step 2^-9,
//            0x7F / 0xFF NaN (never produced here). Encoding is RNE and saturating
//            (cvt.rn.satfinite.e4m3x2.f32); a negative value that rounds to zero gives 0x80.
//   ue8m0    a power of two 2^(b - 127) stored as the byte b (b = 255 is NaN, never produced).
//   scale    of a group with absolute maximum amax (A3, the official act_quant):
//              e = ceil(log2(max(amax, 1e-4) / 448)), clamped to [-127, 127]; byte e + 127;
//            the group's values are stored as e4m3(v * 2^-e) and decode to e4m3 * 2^e.
//   mxq(v)   e4m3(v * 2^-e) * 2^e over each group (groups of 32 along K for activations, of 64
//            for a KV row's NoPE tiles).
//   SfAtom   (CUTLASS SM100 block-scaled, K-major) byte of weight row n, K block kb = k / 32,
//            KB = K / 32 blocks per row:
//              ((n / 128) * ceil(KB / 4) + kb / 4) * 512 + (n % 32) * 16 + ((n % 128) / 32) * 4
//              + kb % 4
//            so the 4 scales of row n for K blocks 4j..4j+3 are one aligned 32-bit word.
//
// Every e4m3 value times every ue8m0 scale of real data is exact in bf16 and fp32 (8-bit
// exponent, and e4m3 has a 3-bit mantissa), so dequantizing to bf16 loses nothing.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/warp.cuh"

namespace mla {
namespace fp8 {

// ---- e4m3 <-> float ---------------------------------------------------------------------------

// Two floats -> two e4m3 bytes, lo in the low byte (cvt.rn.satfinite.e4m3x2.f32 puts its first
// source operand in the upper byte).
__device__ __forceinline__ unsigned short pack_e4m3x2(float lo, float hi) {
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}

// Two e4m3 bytes -> two floats (.x from the low byte), exactly: cvt.rn.f16x2.e4m3x2 keeps the
// byte order (low byte -> low half) and every e4m3 value is an fp16 value.
__device__ __forceinline__ float2 unpack_e4m3x2(unsigned short v) {
    unsigned int h2;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h2) : "h"(v));
    __half2 h = *reinterpret_cast<__half2 *>(&h2);
    return __half22float2(h);
}

// Four floats -> four e4m3 bytes, v0 in the low byte.
__device__ __forceinline__ unsigned int pack_e4m3x4(float v0, float v1, float v2, float v3) {
    return (unsigned int)pack_e4m3x2(v0, v1) | ((unsigned int)pack_e4m3x2(v2, v3) << 16);
}

__device__ __forceinline__ float e4m3_to_float(unsigned char b) {
    return unpack_e4m3x2((unsigned short)b).x;
}

// ---- ue8m0 ------------------------------------------------------------------------------------

// 2^e exactly, for e in [-149, 127] (subnormal below -126).
__device__ __forceinline__ float exp2i(int e) {
    return e >= -126 ? __uint_as_float((unsigned int)(e + 127) << 23)
                     : __uint_as_float(1u << (e + 149));
}

// The value 2^(b - 127) of a ue8m0 byte (255 -> NaN).
__device__ __forceinline__ float ue8m0_decode(unsigned int b) {
    return b == 0u ? __uint_as_float(0x00400000u)            // 2^-127, subnormal
                   : (b == 255u ? __uint_as_float(0x7fffffffu) : __uint_as_float(b << 23));
}

// The exponent e = ceil(log2(max(amax, 1e-4) / 448)) of a group's scale, clamped to [-127, 127],
// computed exactly from the bits: with max(amax, 1e-4) = 1.m * 2^E and 448 = 1.75 * 2^8,
// amax / 448 = (1.m / 1.75) * 2^(E - 8) where 1.m / 1.75 lies in (0.57, 1.15), so e = E - 8, plus
// one when 1.m > 1.75 (mantissa bits above 0x600000). amax must be >= 0 (an absolute value; NaN
// counts as 0). Finite amax gives e in [-22, 120]; amax = +inf gives the clamp, 127.
__device__ __forceinline__ int ue8m0_exponent(float amax) {
    const unsigned int bits = __float_as_uint(fmaxf(amax, 1e-4f));
    if (bits >= 0x7f800000u) return 127;
    const int E = (int)(bits >> 23) - 127;
    return E - 8 + ((bits & 0x7fffffu) > 0x600000u ? 1 : 0);
}

// ---- SfAtom -----------------------------------------------------------------------------------

// Byte offset of the scale of row n, K block kb, in a SfAtom tensor of KB K blocks per row.
__device__ __forceinline__ long long sfatom_offset(long long n, long long kb, long long KB) {
    const long long k_atoms = (KB + 3) / 4;
    return ((n / 128) * k_atoms + kb / 4) * 512 + (n % 32) * 16 + ((n % 128) / 32) * 4 + kb % 4;
}

// ---- group quantization ----------------------------------------------------------------------

// e4m3(v * 2^-e) of n values (n % 4 == 0) as n / 4 words, byte i % 4 of q[i / 4] from v[i].
template <int n>
__device__ __forceinline__ void encode_e4m3(const float (&v)[n], int e, unsigned int (&q)[n / 4]) {
    static_assert(n % 4 == 0, "whole 32-bit words");
    const float inv = exp2i(-e);
#pragma unroll
    for (int i = 0; i < n / 4; ++i)
        q[i] = pack_e4m3x4(v[4 * i] * inv, v[4 * i + 1] * inv, v[4 * i + 2] * inv,
                           v[4 * i + 3] * inv);
}

// e4m3 * 2^e of n bytes (n / 4 words, byte i % 4 of q[i / 4] to v[i]), exactly for real data.
template <int n>
__device__ __forceinline__ void decode_e4m3(const unsigned int (&q)[n / 4], int e, float (&v)[n]) {
    static_assert(n % 4 == 0, "whole 32-bit words");
    const float s = exp2i(e);
#pragma unroll
    for (int i = 0; i < n / 4; ++i) {
        const float2 a = unpack_e4m3x2((unsigned short)(q[i] & 0xffffu));
        const float2 b = unpack_e4m3x2((unsigned short)(q[i] >> 16));
        v[4 * i] = a.x * s, v[4 * i + 1] = a.y * s, v[4 * i + 2] = b.x * s, v[4 * i + 3] = b.y * s;
    }
}

// Quantizes a group of kGroup values held by the kGroup / kVals lanes of an aligned lane group,
// kVals each (kGroup = 32, kVals = 32: one lane holds the group; kVals = 16: lanes 2k, 2k+1 hold
// a row's 32 consecutive values; kVals = 8: the 4 lanes of an mma.m16n8 accumulator row hold a
// 32-column group; kGroup = 64, kVals = 16: 4 lanes share a 64-wide KV tile; which lane holds
// which value does not matter). Writes the lane's e4m3 bytes, byte i % 4 of q[i / 4] from v[i],
// and returns the group's ue8m0 byte. kVals is a multiple of 4 dividing kGroup, kGroup / kVals
// a power of two <= 32; every lane of the warp calls it.
template <int kGroup, int kVals>
__device__ __forceinline__ unsigned int quantize_group(const float (&v)[kVals],
                                                       unsigned int (&q)[kVals / 4]) {
    static_assert(kVals % 4 == 0 && kGroup % kVals == 0 && kGroup / kVals <= 32,
                  "4.. values per lane, at most 32 lanes per group");
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < kVals; ++i) amax = fmaxf(amax, fabsf(v[i]));
    amax = group_max<kGroup / kVals>(amax);
    const int e = ue8m0_exponent(amax);
    encode_e4m3<kVals>(v, e, q);
    return (unsigned int)(e + 127);
}

// In place: v <- mxq(v) = e4m3(v * 2^-e) * 2^e over the group (lanes as in quantize_group).
template <int kGroup, int kVals>
__device__ __forceinline__ void mxq(float (&v)[kVals]) {
    unsigned int q[kVals / 4];
    const int e = (int)quantize_group<kGroup, kVals>(v, q) - 127;
    decode_e4m3<kVals>(q, e, v);
}

}  // namespace fp8
}  // namespace mla
