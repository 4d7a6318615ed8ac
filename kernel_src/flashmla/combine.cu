// FlashMLA-compatible split-KV combine: merges the split slots of every request that decode.cu
// split into more than one chunk (requests of one chunk were written directly and are skipped).
//
// Template parameters: kOutF16, out is fp16 (else bf16) (the specs "flashmla_combine" and
// "fakequant_dense_combine" fix it); kEmptyNegInf, the lse of a row that saw no key is -inf (the
// fake-quant spec's, "fakequant_dense_combine": mla_attention_decode's dense path) instead of
// FlashMLA's +inf ("flashmla_combine", false).
//
// Math (spec/flashmla.md §1.6): request i with n = num_splits[i + 1] - num_splits[i] > 1 chunks,
// slots s = num_splits[i] + c, row j * h_q + h:
//   lse = ln(sum_c exp(lse_c))           (+inf when every lse_c is -inf: the row saw no key)
//   out[i, j, h, :] = sum_c exp(lse_c - lse) o_c      (0 for a row that saw no key)
// The chunks are summed in chunk order, so a request's result depends on its chunks only.
// kEmptyNegInf: a request without keys (seqlens[i] <= 0, one empty chunk, whose rows the decode
// wrote with lse +inf) gets lse -inf for its rows here; a merged row that saw no key too.
//
// Buffers: o_accum [split_cap, s_q * h_q, 512] float32, lse_accum [split_cap, s_q * h_q] float32
// (natural log), num_splits [b + 1] int32, out [b, s_q, h_q, 512] (element strides, last
// contiguous), softmax_lse [b, h_q, s_q] float32 contiguous. Slots >= split_cap are never read.
//
// Grid (b, ceil(s_q * h_q / 32)), 256 threads: a warp merges 4 consecutive rows together (the
// loads of all four in flight at once), lane l owning columns [4 l + 128 k, +4) for k < 4
// (coalesced float4 reads); a CTA of a request that was not split exits after reading
// num_splits (4x fewer such CTAs than one row per warp). Launched as the programmatic dependent
// of the decode (runtime/flashmla_decode.c): it waits for the decode before reading anything.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/pdl.cuh"
#include "flashmla/params.cuh"
#include "flashmla/ptx.cuh"

namespace mla {
namespace flashmla {

constexpr int kCombineThreads = 256;
constexpr int kCombineRowsPerWarp = 4;
constexpr int kCombineRows = kCombineThreads / 32 * kCombineRowsPerWarp;  // rows per CTA

__device__ __forceinline__ float warp_max(float v) {
    for (int d = 16; d > 0; d >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, d));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
    for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
    return v;
}

// ln(sum_c exp(lse_c)) over the n slots of one row (every lane gets it); -inf if all are -inf.
__device__ __forceinline__ float merged_lse(const float *lse_accum, long long slot0, int n,
                                            long long rows, long long row) {
    const int lane = threadIdx.x & 31;
    float mx = -inf_f32();
    for (int c = lane; c < n; c += 32) mx = fmaxf(mx, lse_accum[(slot0 + c) * rows + row]);
    mx = warp_max(mx);
    if (mx == -inf_f32()) return -inf_f32();
    float sum = 0.f;
    for (int c = lane; c < n; c += 32) sum += expf(lse_accum[(slot0 + c) * rows + row] - mx);
    return mx + logf(warp_sum(sum));
}

template <bool kOutF16>
__device__ __forceinline__ void store4(void *dst, float4 v) {
    if constexpr (kOutF16) {
        __half2 a = __floats2half2_rn(v.x, v.y), b = __floats2half2_rn(v.z, v.w);
        *reinterpret_cast<uint2 *>(dst) =
            make_uint2(*reinterpret_cast<unsigned *>(&a), *reinterpret_cast<unsigned *>(&b));
    } else {
        __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
        *reinterpret_cast<uint2 *>(dst) =
            make_uint2(*reinterpret_cast<unsigned *>(&a), *reinterpret_cast<unsigned *>(&b));
    }
}

// kEmptyNegInf: -inf as the lse of this CTA's rows of request req, which has no keys (the
// decode, done before this grid reads anything, wrote them +inf).
__device__ __forceinline__ void empty_lse_rows(const CombineParams &p, int req, long long rows) {
    const long long row = (long long)blockIdx.y * kCombineRows + threadIdx.x;
    if (threadIdx.x >= kCombineRows || row >= rows) return;
    const int j = (int)(row / p.h_q), h = (int)(row % p.h_q);
    p.lse[((long long)req * p.h_q + h) * p.s_q + j] = -inf_f32();
}

template <bool kOutF16, bool kEmptyNegInf>
__global__ void __launch_bounds__(kCombineThreads) combine_kernel(const CombineParams p) {
    constexpr int kR = kCombineRowsPerWarp;
    pdl::wait();  // launched as the decode's programmatic dependent
    pdl::launch_dependents();  // the next decode (itself waiting for this grid) may launch
    const int req = blockIdx.x, lane = threadIdx.x & 31;
    const int slot0 = p.num_splits[req], n = p.num_splits[req + 1] - slot0;
    if constexpr (kEmptyNegInf)
        if (p.seqlens[req] <= 0) return empty_lse_rows(p, req, (long long)p.s_q * p.h_q);
    if (n <= 1 || slot0 < 0 || (long long)slot0 + n > p.split_cap) return;
    const long long rows = (long long)p.s_q * p.h_q;
    const long long row0 = (long long)blockIdx.y * kCombineRows + (threadIdx.x >> 5) * kR;
    if (row0 >= rows) return;
    const int nr = rows - row0 < kR ? (int)(rows - row0) : kR;  // rows of this warp
    float lse[kR];
    float4 acc[kR][4];
#pragma unroll
    for (int i = 0; i < kR; i++) {
        lse[i] = i < nr ? merged_lse(p.lse_accum, slot0, n, rows, row0 + i) : -inf_f32();
#pragma unroll
        for (int k = 0; k < 4; k++) acc[i][k] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    const unsigned long long dead = l2_policy_evict_first();  // partials are read once
    for (int c = 0; c < n; c++) {
#pragma unroll
        for (int i = 0; i < kR; i++) {
            if (lse[i] == -inf_f32()) continue;  // also the rows past nr
            const long long r = (long long)(slot0 + c) * rows + row0 + i;
            const float w = expf(p.lse_accum[r] - lse[i]);
            const float *src = p.o_accum + r * 512 + 4 * lane;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float4 v = ld_global_v4_hint(src + 128 * k, dead);
                acc[i][k].x += w * v.x, acc[i][k].y += w * v.y;
                acc[i][k].z += w * v.z, acc[i][k].w += w * v.w;
            }
        }
    }
#pragma unroll
    for (int i = 0; i < kR; i++) {
        if (i >= nr) break;
        const long long row = row0 + i;
        const int j = (int)(row / p.h_q), h = (int)(row % p.h_q);
        unsigned char *dst = static_cast<unsigned char *>(p.out) +
                             ((long long)req * p.o_stride_b + (long long)j * p.o_stride_s +
                              (long long)h * p.o_stride_h) * 2;
#pragma unroll
        for (int k = 0; k < 4; k++) store4<kOutF16>(dst + (128 * k + 4 * lane) * 2, acc[i][k]);
        if (lane == 0)
            p.lse[((long long)req * p.h_q + h) * p.s_q + j] =
                lse[i] == -inf_f32() && !kEmptyNegInf ? inf_f32() : lse[i];
    }
}

}  // namespace flashmla
}  // namespace mla
