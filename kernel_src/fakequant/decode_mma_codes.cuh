// Codes of the fake quantizers for the tensor-core decode (decode_mma.cu): the value each
// quantizer of quant.cuh returns, without its per-tensor factor (spec/fakequant.md §2.1;
// docs/fakequant-tensorcore-plan.md). Every decision (division, clamp, rounding) is the one of
// quant.cuh, made in the same order with the same intrinsics, so a code times its factor is the
// quant.cuh value up to where the factor is applied:
//
//   fp8_code(x, sc)          = rne_e4m3(clamp(x / sc, +-448))        fp8_qdq(x, sc) = code * sc
//   nvfp4_scale_code(a, gs)  = rne_e4m3(min(a / (6 gs), 448))        sb = fl32(code * gs)
//   nvfp4_code(x, sb, sc)    = sign(x) e2m1_mag(|x| / sb) * sc       nvfp4_elem(x, sb) = e2m1 * sb
//                              (0 when sb == 0)
//
// An E4M3 value (<= 4 significant bits, 2^-9..448) and an E2M1 value times one (<= 6 bits,
// 2^-10..2688) are exact in bfloat16 and float16, so the codes are exact MMA operands; the
// factors (sc, gs) are applied to the fp32 products.
#pragma once

#include "fakequant/quant.cuh"

namespace mla {
namespace fakequant {

__device__ __forceinline__ float fp8_code(float x, float sc) {
    float v = __fdiv_rn(x, sc);
    v = fminf(fmaxf(v, -kE4M3Max), kE4M3Max);
    return rne_e4m3(v);
}

__device__ __forceinline__ float nvfp4_scale_code(float bamax, float gs) {
    return rne_e4m3(fminf(__fdiv_rn(bamax, __fmul_rn(6.f, gs)), kE4M3Max));
}

// sb = __fmul_rn(sc, gs), the dequantized block scale nvfp4_block_scale returns.
__device__ __forceinline__ float nvfp4_code(float x, float sb, float sc) {
    if (sb == 0.f) return 0.f;
    float r = e2m1_mag(__fdiv_rn(fabsf(x), sb)) * sc;   // exact: <= 6 significant bits
    return x < 0.f ? -r : r;
}

}  // namespace fakequant
}  // namespace mla
