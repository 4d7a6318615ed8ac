// fp8 (float8_e4m3fn) and ue8m0 codes, the SfAtom scale layout and group-32 quantization
// (spec/dsv4.md §2.0, §2.2, §3.3, A3, §5).
//
//   e4m3     1 sign, 4 exponent (bias 7), 3 mantissa bits; max 448, subnormal step 2^-9,
//            0x7F / 0xFF NaN (never produced here). Encoding is RNE and saturating
//            (cvt.rn.satfinite.e4m3x2.f32); a negative value that rounds to zero gives 0x80.
//   ue8m0    a power of two 2^(b - 127) stored as the byte b (b = 255 is NaN, never produced).
//   scale    of a group with absolute maximum amax (A3, the official act_quant):
//              e = ceil(log2(max(amax, 1e-4) / 448)), clamped to [-127, 127]; byte e + 127;
//            the group's values are stored as e4m3(v * 2^-e) and decode to e4m3 * 2^e.
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
// one when 1.m > 1.75 (mantissa bits above 0x600000). amax must be >= 0 (an absolute value).
__device__ __forceinline__ int ue8m0_exponent(float amax) {
    const unsigned int bits = __float_as_uint(fmaxf(amax, 1e-4f));
    const int E = (int)(bits >> 23) - 127;
    int e = E - 8 + ((bits & 0x7fffffu) > 0x600000u ? 1 : 0);
    return e < -127 ? -127 : (e > 127 ? 127 : e);
}

// ---- SfAtom -----------------------------------------------------------------------------------

// Byte offset of the scale of row n, K block kb, in a SfAtom tensor of KB K blocks per row.
__device__ __forceinline__ long long sfatom_offset(long long n, long long kb, long long KB) {
    const long long k_atoms = (KB + 3) / 4;
    return ((n / 128) * k_atoms + kb / 4) * 512 + (n % 32) * 16 + ((n % 128) / 32) * 4 + kb % 4;
}

// ---- group-32 quantization --------------------------------------------------------------------

// Maximum of v over each aligned group of kLanes consecutive lanes (a power of two <= 32). Every
// lane of the warp must call it.
template <int kLanes>
__device__ __forceinline__ float group_max(float v) {
#pragma unroll
    for (int o = 1; o < kLanes; o <<= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Quantizes a group of 32 values held by the 32 / kVals lanes of an aligned lane group, kVals
// each (kVals = 16: lanes 2k, 2k+1 hold a row's 32 consecutive values; kVals = 8: the 4 lanes of
// an mma.m16n8 accumulator row hold a 32-column group; which lane holds which value does not
// matter). Writes the lane's e4m3 bytes, byte i % 4 of q[i / 4] from v[i], and returns the
// group's ue8m0 byte. kVals is a multiple of 4 dividing 32; every lane of the warp calls it.
template <int kVals>
__device__ __forceinline__ unsigned int quantize_group32(const float (&v)[kVals],
                                                         unsigned int (&q)[kVals / 4]) {
    static_assert(kVals % 4 == 0 && 32 % kVals == 0, "4..32 values per lane");
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < kVals; ++i) amax = fmaxf(amax, fabsf(v[i]));
    amax = group_max<32 / kVals>(amax);
    const int e = ue8m0_exponent(amax);
    const float inv = exp2i(-e);
#pragma unroll
    for (int i = 0; i < kVals / 4; ++i)
        q[i] = pack_e4m3x4(v[4 * i] * inv, v[4 * i + 1] * inv, v[4 * i + 2] * inv,
                           v[4 * i + 3] * inv);
    return (unsigned int)(e + 127);
}

// bf16(x) as a float (RNE), the rounding of every bf16 result.
__device__ __forceinline__ float round_bf16(float x) {
    return __bfloat162float(__float2bfloat16_rn(x));
}

}  // namespace fp8
}  // namespace mla
