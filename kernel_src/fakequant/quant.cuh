// Scalar fake quantizers of the fake-quant family (spec/fakequant.md §2.1), exact in software:
// every rounding is an IEEE fp32 operation named by its intrinsic (__fdiv_rn, __fmul_rn, rintf),
// so fast-math options never change a quantization decision.
//
//   rne_e4m3(a)        |a| <= 448: round half even to E4M3 (3 mantissa bits, subnormal quantum
//                      2^-9 below 2^-6), result <= 448
//   fp8_qdq(x, sc)     rne_e4m3(clamp(x / sc, -448, 448)) * sc      sc = amax / 448 (None: 1)
//   e2m1_mag(a)        a >= 0: round half even on {0, .5, 1, 1.5, 2, 3, 4, 6}, saturating at 6
//   nvfp4 block        gs = amax / 2688 (None: 1); bamax = max |x| of the 16 lanes;
//                      sb = rne_e4m3(min(bamax / (6 gs), 448)) * gs; sb == 0: every lane 0;
//                      else x -> sign(x) e2m1_mag(|x| / sb) sb
//
// Scales (sc, gs) are computed by the host in fp32 and passed in.
#pragma once

namespace mla {
namespace fakequant {

enum QdqMode { kNone = 0, kFp8 = 1, kNvfp4 = 2 };

constexpr float kE4M3Max = 448.f;

// 2^e as a float for -126 <= e <= 127.
__device__ __forceinline__ float exp2_int(int e) { return __int_as_float((e + 127) << 23); }

// Round half even of a (|a| <= 448, finite) to E4M3.
__device__ __forceinline__ float rne_e4m3(float a) {
    float m = fabsf(a);
    if (m == 0.f) return 0.f;
    int e = ((__float_as_int(m) >> 23) & 0xff) - 127;   // floor(log2 m); fp32 subnormals: -127
    e = e < -6 ? -6 : e;
    float q = exp2_int(e - 3);
    float r = __fmul_rn(rintf(__fdiv_rn(m, q)), q);     // both exact: q is a power of two
    r = fminf(r, kE4M3Max);
    return a < 0.f ? -r : r;
}

// Per-tensor E4M3 quantize-dequantize with scale sc.
__device__ __forceinline__ float fp8_qdq(float x, float sc) {
    float v = __fdiv_rn(x, sc);
    v = fminf(fmaxf(v, -kE4M3Max), kE4M3Max);
    return __fmul_rn(rne_e4m3(v), sc);
}

// Round half even of a >= 0 to the E2M1 magnitudes, saturating at 6.
__device__ __forceinline__ float e2m1_mag(float a) {
    if (a <= 0.25f) return 0.f;
    if (a < 0.75f) return 0.5f;
    if (a <= 1.25f) return 1.f;
    if (a < 1.75f) return 1.5f;
    if (a <= 2.5f) return 2.f;
    if (a < 3.5f) return 3.f;
    if (a <= 5.f) return 4.f;
    return 6.f;
}

// The dequantized E4M3 block scale of a block with absolute maximum bamax (0: the block is 0).
__device__ __forceinline__ float nvfp4_block_scale(float bamax, float gs) {
    float s = fminf(__fdiv_rn(bamax, __fmul_rn(6.f, gs)), kE4M3Max);
    return __fmul_rn(rne_e4m3(s), gs);
}

// One element of an NVFP4 block of scale sb.
__device__ __forceinline__ float nvfp4_elem(float x, float sb) {
    if (sb == 0.f) return 0.f;
    float r = __fmul_rn(e2m1_mag(__fdiv_rn(fabsf(x), sb)), sb);
    return x < 0.f ? -r : r;
}

// In-place NVFP4 quantize-dequantize of 16 values.
__device__ __forceinline__ void nvfp4_qdq16(float (&v)[16], float gs) {
    float bamax = 0.f;
#pragma unroll
    for (int i = 0; i < 16; i++) bamax = fmaxf(bamax, fabsf(v[i]));
    float sb = nvfp4_block_scale(bamax, gs);
#pragma unroll
    for (int i = 0; i < 16; i++) v[i] = nvfp4_elem(v[i], sb);
}

}  // namespace fakequant
}  // namespace mla
