// Rotary position embedding on interleaved pairs (spec/dsv4.md §2.3).
//
// A table row f (64 floats) holds (cos θ_i, sin θ_i) at f[2i], f[2i + 1], i = 0..31; the rope
// dim pair (2i, 2i + 1) = (a, b) rotates to (a c - b s, a s + b c); the inverse uses -s.
#pragma once

namespace mla {

// Rotates n consecutive rope values v[0..n) that start at rope dim d0 (even) of the 64, in fp32.
// f_row points at the table row; its floats d0..d0+n-1 are exactly the pairs of these values.
template <int n, bool kInverse = false>
__device__ __forceinline__ void rope_apply(float v[n], const float *f_row, int d0) {
    static_assert(n % 4 == 0, "whole float4 loads of the table");
    const float4 *f = reinterpret_cast<const float4 *>(f_row + d0);
#pragma unroll
    for (int i = 0; i < n / 4; ++i) {
        const float4 cs = f[i];  // (cos, sin) of two pairs
        const float s0 = kInverse ? -cs.y : cs.y, s1 = kInverse ? -cs.w : cs.w;
        const float a0 = v[4 * i], b0 = v[4 * i + 1], a1 = v[4 * i + 2], b1 = v[4 * i + 3];
        v[4 * i] = a0 * cs.x - b0 * s0;
        v[4 * i + 1] = a0 * s0 + b0 * cs.x;
        v[4 * i + 2] = a1 * cs.z - b1 * s1;
        v[4 * i + 3] = a1 * s1 + b1 * cs.z;
    }
}

}  // namespace mla
