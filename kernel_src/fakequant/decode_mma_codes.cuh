// Codes of the fake quantizers for the tensor-core decode (decode_mma.cu): the value each
// quantizer of quant.cuh returns, without its per-tensor factor (spec/fakequant.md §2.1;
// docs/fakequant-tensorcore-plan.md). Every decision (division, clamp, rounding) is the one of
// quant.cuh, made in the same order with the same intrinsics, so a code times its factor is the
// quant.cuh value up to where the factor is applied:
//
//   e4m3(fp8_scaled(x, sc))  = rne_e4m3(clamp(x / sc, +-448))        fp8_qdq(x, sc) = code * sc
//   nvfp4_scale(a, gs).sc    = rne_e4m3(min(a / (6 gs), 448))        sb = fl32(sc * gs)
//   nvfp4_code(x, scale)     = sign(x) e2m1_mag(|x| / sb) * sc       nvfp4_elem(x, sb) = e2m1 * sb
//                              (0 when sb == 0)
// The per-element quotients use a reciprocal of the scale and one correction (div_rcp), the
// E4M3 rounding the hardware conversion and E2M1 a bit operation; each gives quant.cuh's
// decision for every input that reaches it (see each function).
//
// An E4M3 value (<= 4 significant bits, 2^-9..448) and an E2M1 value times one (<= 6 bits,
// 2^-10..2688) are exact in bfloat16 and float16, so the codes are exact MMA operands; the
// factors (sc, gs) are applied to the fp32 products.
#pragma once

#include "common/select.cuh"
#include "fakequant/quant.cuh"

namespace mla {
namespace fakequant {

// x / b for the quantizers' decisions from y = __frcp_rn(b): q0 = x y, then one correction step
// with the exact residual x - q0 b (Markstein). Where the reciprocal overflows (subnormal b) it is
// __fdiv_rn itself. Elsewhere the quotient equals __fdiv_rn(x, b) except where that is subnormal
// or overflows, and there every decision taken from it (the E4M3 code after the +-448 clamp, the
// E2M1 magnitude) is the same: checked for all 16-bit x (bf16 and fp16) against every NVFP4 block
// scale fl32(e4m3 * amax / 2688) and fp8 scale amax / 448 of 13 amaxes (None, 1e-3 .. 2688),
// 2.1e8 pairs, and for 1e8 random fp32 p in (2^-31, 1] against 5 fp8 P scales (equal quotients)
// (tools/fqtc/codes.c).
__device__ __forceinline__ float div_rcp(float x, float b, float y) {
    if (!(y < __int_as_float(0x7f800000))) return __fdiv_rn(x, b);
    const float q0 = __fmul_rn(x, y);
    const float q1 = __fmaf_rn(__fmaf_rn(-q0, b, x), y, q0);
    return fabsf(q0) == __int_as_float(0x7f800000) ? q0 : q1;
}

// fp8: the quotient that is rounded, x / sc clamped to +-448 (quant.cuh fp8_qdq's first steps);
// rsc = __frcp_rn(sc).
__device__ __forceinline__ float fp8_scaled(float x, float sc, float rsc) {
    return fminf(fmaxf(div_rcp(x, sc, rsc), -kE4M3Max), kE4M3Max);
}

// cvt.rn.satfinite.e4m3x2.f32 then cvt.rn.f16x2.e4m3x2: the E4M3 roundings (nearest even; the
// inputs are within +-448, so satfinite never acts) of two floats as an fp16 pair, lo in the low
// half; exact, the hardware form of quant.cuh's rne_e4m3 (sm_89 and later).
__device__ __forceinline__ unsigned e4m3x2_f16x2(float lo, float hi) {
    unsigned short b;
    unsigned r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(b) : "f"(hi), "f"(lo));
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(r) : "h"(b));
    return r;
}

// rne_e4m3(a) for |a| <= 448 through the conversion above.
__device__ __forceinline__ float e4m3_rn(float a) {
    return __half2float(__ushort_as_half((unsigned short)(e4m3x2_f16x2(a, 0.f) & 0xffffu)));
}

// quant.cuh's e2m1_mag without the comparison chain, equal to it for every a >= +0 and NaN
// (checked over all 2^32 bit patterns, tools/fqtc/codes.c): below 1 the quantum is 0.5 (rint of 2a, nearest even),
// from 1 to 6 the fp32 significand is rounded to one bit (nearest even), from 6 on (and NaN) 6.
// Both roundings are computed and one is selected (common/select.cuh): written as C ternaries
// they compiled to two nested branches per element, on which the lanes of a block diverge.
__device__ __forceinline__ float e2m1_mag_fast(float a) {
    unsigned u = __float_as_uint(a);
    u = (u + 0x1fffffu + ((u >> 22) & 1u)) & 0xffc00000u;
    return select(a < 1.f, rintf(a * 2.f) * 0.5f, select(a < 6.f, __uint_as_float(u), 6.f));
}

// An NVFP4 block's scale: the code sc = rne_e4m3(min(bamax / (6 gs), 448)) (the quotient from
// g6 = fl32(6 gs) and r6 = __frcp_rn(g6): decisions checked equal for every 16-bit bamax and the
// 13 amaxes, tools/fqtc/codes.c), sb = fl32(sc gs) (nvfp4_block_scale's value) and rsb = 1 / sb.
struct Nvfp4Scale {
    float sc, sb, rsb;
};
__device__ __forceinline__ Nvfp4Scale nvfp4_scale(float bamax, float gs, float g6, float r6) {
    Nvfp4Scale s;
    s.sc = e4m3_rn(fminf(div_rcp(bamax, g6, r6), kE4M3Max));
    s.sb = __fmul_rn(s.sc, gs);
    s.rsb = __frcp_rn(s.sb);
    return s;
}

// The block's elements may take nvfp4_code_fast (sb != 0 and 1 / sb finite); else nvfp4_code.
__device__ __forceinline__ bool nvfp4_fast(const Nvfp4Scale &s) {
    return s.sb != 0.f && s.rsb < __int_as_float(0x7f800000);
}

// sign(x) e2m1_mag(|x| / sb) sc, no branch (div_rcp's steps with 1 / sb finite).
__device__ __forceinline__ float nvfp4_code_fast(float x, const Nvfp4Scale &s) {
    const float a = fabsf(x), q0 = __fmul_rn(a, s.rsb);
    const float q1 = __fmaf_rn(__fmaf_rn(-q0, s.sb, a), s.rsb, q0);
    const float r = e2m1_mag_fast(q0 == __int_as_float(0x7f800000) ? q0 : q1) * s.sc;
    return x < 0.f ? -r : r;
}

// The same for any block (sb == 0: 0; 1 / sb infinite: __fdiv_rn).
__device__ __forceinline__ float nvfp4_code(float x, const Nvfp4Scale &s) {
    if (s.sb == 0.f) return 0.f;
    float r = e2m1_mag_fast(div_rcp(fabsf(x), s.sb, s.rsb)) * s.sc;   // exact: <= 6 bits
    return x < 0.f ? -r : r;
}

}  // namespace fakequant
}  // namespace mla
