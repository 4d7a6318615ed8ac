// Quantization codes of the fake quantizers (quant.cuh) for tensor-core products: the value of a
// fake-quantized element with its per-tensor factor taken out (docs/fakequant-tensorcore-plan.md).
//
//   fp8_code(x, sc)      rne_e4m3(clamp(x / sc, -448, 448)); fp8_qdq(x, sc) == code * sc
//   NVFP4 block          e4 = rne_e4m3(min(bamax / (6 gs), 448)), sb = fl32(e4 gs) (the scale
//                        nvfp4_block_scale returns, so the E2M1 decisions are quant.cuh's);
//                        code = sign(x) e2m1_mag(|x| / sb) e4, 0 when sb == 0;
//                        nvfp4_elem(x, sb) == fl32(e2m1 sb) and code * gs differ by at most one
//                        fp32 rounding (2^-24 relative)
//
// Every code is exact in bf16 and fp16 (an E4M3 value, or an E2M1 value times one: at most 7
// significant bits, |code| <= 2688), so an MMA on codes has exact products; the factors (sc, gs)
// multiply the fp32 result. The decisions use exactly quant.cuh's operations in its order.
#pragma once

#include "fakequant/quant.cuh"

namespace mla {
namespace fakequant {

// rne_e4m3(a) with its division by the quantum q = 2^(e-3) written as the multiplication by
// 2^(3-e): both are exact (m / q lies in [0, 16), a power-of-two scaling that neither overflows
// nor loses bits, fp32 subnormals included), so the result is rne_e4m3's for every input.
__device__ __forceinline__ float rne_e4m3_mul(float a) {
    float m = fabsf(a);
    if (m == 0.f) return 0.f;
    int e = ((__float_as_int(m) >> 23) & 0xff) - 127;
    e = e < -6 ? -6 : e;
    float r = __fmul_rn(rintf(__fmul_rn(m, exp2_int(3 - e))), exp2_int(e - 3));
    r = fminf(r, kE4M3Max);
    return a < 0.f ? -r : r;
}

// E4M3 code of x for the per-tensor scale sc.
__device__ __forceinline__ float fp8_code(float x, float sc) {
    float v = __fdiv_rn(x, sc);
    v = fminf(fmaxf(v, -kE4M3Max), kE4M3Max);
    return rne_e4m3_mul(v);
}

// The E4M3 block-scale code e4 of a block with absolute maximum bamax, and the dequantized scale
// sb = fl32(e4 gs) (== nvfp4_block_scale(bamax, gs)).
__device__ __forceinline__ float nvfp4_scale_code(float bamax, float gs, float &sb) {
    float s = fminf(__fdiv_rn(bamax, __fmul_rn(6.f, gs)), kE4M3Max);
    float e4 = rne_e4m3_mul(s);
    sb = __fmul_rn(e4, gs);
    return e4;
}

// The NVFP4 code of x in a block of scale code e4 and dequantized scale sb.
__device__ __forceinline__ float nvfp4_code(float x, float e4, float sb) {
    if (sb == 0.f) return 0.f;
    float r = __fmul_rn(e2m1_mag(__fdiv_rn(fabsf(x), sb)), e4);   // exact: <= 6 * 448
    return x < 0.f ? -r : r;
}

// In-place NVFP4 codes of 16 values (a block; padded lanes 0).
__device__ __forceinline__ void nvfp4_code16(float (&v)[16], float gs) {
    float bamax = 0.f;
#pragma unroll
    for (int i = 0; i < 16; i++) bamax = fmaxf(bamax, fabsf(v[i]));
    float sb, e4 = nvfp4_scale_code(bamax, gs, sb);
#pragma unroll
    for (int i = 0; i < 16; i++) v[i] = nvfp4_code(v[i], e4, sb);
}

}  // namespace fakequant
}  // namespace mla
