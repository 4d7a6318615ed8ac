// Online softmax in base 2 and the attention sink (spec/dsv4.md §2.4, A11, A12, A16).
//
// Scores enter pre-multiplied by sm_scale * log2(e), so exp(s) = 2^(s log2 e). A running state
// (m, l) holds the max m of the scores seen so far (log2 units, -inf before any) and
// l = sum 2^(s - m). A tile with max mt moves the state to m' = max(m, mt) and rescales l and the
// output accumulator by 2^(m - m'). At the end:
//   natural LSE (no sink)        = (m + log2 l) ln 2         (-inf if l == 0)
//   normalized O with sink z     = O * 2^(m - m'') / (l 2^(m - m'') + 2^(z log2 e - m'')),
//                                  m'' = max(m, z log2 e)    (0 if the denominator is 0)
#pragma once

#include "common/warp.cuh"

namespace mla {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// -inf as a float (no <cmath> under NVRTC).
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

// 2^x (ex2.approx.ftz.f32: 2^-inf = 0).
__device__ __forceinline__ float exp2_fast(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// The exponent base of a max: -inf (nothing seen) becomes 0, so 2^(s - base) is 0, not NaN.
__device__ __forceinline__ float softmax_base(float m) { return m == neg_inf() ? 0.0f : m; }

// Factor that rescales a state of max m_old to the new max m_new (0 when m_old is -inf).
__device__ __forceinline__ float softmax_rescale(float m_old, float m_new) {
    return exp2_fast(m_old - softmax_base(m_new));
}

// Natural-log LSE of a finished state (-inf when empty).
__device__ __forceinline__ float softmax_lse(float m, float l) {
    return l > 0.0f ? (m + __log2f(l)) * kLn2 : neg_inf();
}

// Factor that turns the unnormalized accumulator of state (m, l) into the normalized output,
// with the sink logit sink (natural units, post-scale) when has_sink; 0 for an empty denominator.
__device__ __forceinline__ float softmax_out_scale(float m, float l, bool has_sink, float sink) {
    if (!has_sink) return l > 0.0f ? 1.0f / l : 0.0f;
    const float z = sink * kLog2e;
    const float mm = fmaxf(m, z);
    const float a = exp2_fast(m - mm);
    const float den = l * a + exp2_fast(z - mm);
    return den > 0.0f ? a / den : 0.0f;
}

}  // namespace mla
