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

// Max / sum over the 4 lanes of a quad (the lanes holding one row of an mma.sync C fragment),
// xor 1 then xor 2 (group_sum<4> adds in the other order).
__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

}  // namespace mla
