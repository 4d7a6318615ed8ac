// Warp reductions over aligned lane groups (__shfl_xor_sync butterflies).
#pragma once

namespace mla {

// Max and sum over the lanes of aligned groups of `width` lanes (a power of two <= 32); every
// lane of the warp must call them and every lane of a group gets the result.
template <int width>
__device__ __forceinline__ float group_max(float v) {
#pragma unroll
    for (int o = width / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
template <int width>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
    for (int o = width / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

}  // namespace mla
