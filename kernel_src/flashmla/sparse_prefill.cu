// FlashMLA-compatible sparse prefill (mla_flash_sparse_fwd): the portable tensor-core path
// (sparse_attn.cuh), correct on sm_90a and sm_100a.
//
// Template parameter (the spec "flashmla_sparse_prefill" fixes it): kD, the q / kv head dim d_qk,
// 576 (512 latent + 64 RoPE) or 512; V = kv[..., :512] either way.
//
// Math (spec/flashmla.md §1.3, 1.6, 1.9, 2.3). Query token i < s_q, head h < h_q, entries
// k < n, n = topk_length ? clamp(topk_length[i], 0, topk) : topk:
//   idx  = indices[i, 0, k]; valid iff 0 <= idx < s_kv (others are never read)
//   P_k  = sm_scale * log2(e) * (q[i, h, :] . kv[idx, 0, :])   over the valid entries (base 2)
//   max_logits = max_k P_k,  lse = log2(sum_k 2^P_k),  out[i, h, :] = sum_k 2^(P_k - lse) V_idx
//   natural_log: max_logits and lse times ln 2 (FlashMLA's newer convention)
//   sink (attn_sink given, natural-log units): out *= 1 / (1 + exp(attn_sink[h] - lse * ln 2));
//        max_logits and lse unchanged
//   no valid entry: out = 0, max_logits = -inf, lse = -inf (base 2, the seed) or +inf (natural).
// Duplicate entries count twice.
//
// Buffers (element strides; last dimensions contiguous, 16-byte aligned rows):
//   q [s_q, h_q, kD] bfloat16      kv [s_kv, 1, kD] bfloat16      indices [s_q, 1, topk] int32
//   topk_length [s_q] int32 (optional)   attn_sink [h_q] float32 (optional)
//   out [s_q, h_q, 512] bfloat16   max_logits, lse [s_q, h_q] float32 contiguous
//
// Grid (s_q, ceil(h_q / 64)): CTA (i, m) takes heads [64 m, 64 m + 64) of token i over all its
// entries, 64 per tile, two K tiles in flight (cp.async double buffer). Shared memory (bytes):
// Q tile 64 x kD x 2, two K tiles 64 x kD x 2, P, row exchange, two flag arrays.

#include <cuda_bf16.h>

#include "flashmla/sparse_attn.cuh"
#include "flashmla/sparse_params.cuh"

namespace mla {
namespace flashmla {
namespace sparse {

template <int kD>
struct PrefillSmem {
    static constexpr int kQ = 0;
    static constexpr int kK = kQ + Tile<kD>::kBytes;   // two tiles
    static constexpr int kP = kK + 2 * Tile<kD>::kBytes;
    static constexpr int kRed = kP + kPBytes;
    static constexpr int kFlags = kRed + kRedBytes;
    static constexpr int kBytes = kFlags + 2 * kFlagBytes;   // 576: 230400; 512: 205824
};

__device__ __forceinline__ int entry_count(const SparsePrefillParams &p, int i) {
    if (p.topk_length == nullptr) return p.topk;
    return min(max(p.topk_length[i], 0), p.topk);
}

// Loads Q rows (heads 64 m + r) of token i; rows >= h_q are zero-filled.
template <int kD>
__device__ __forceinline__ void load_q_tile(const SparsePrefillParams &p, unsigned dst, int i,
                                            int m) {
    const int r = threadIdx.x >> 2, h = m * kBlockM + r;
    const unsigned char *src = nullptr;
    if (h < p.h_q)
        src = static_cast<const unsigned char *>(p.q) +
              ((long long)i * p.q_stride_s + (long long)h * p.q_stride_h) * 2;
    load_row_async<kD>(dst, r, threadIdx.x & 3, src, p.q);
}

// Issues the cp.async of the kv rows of entries [k0, k0 + 64) into a swizzled K tile (invalid
// entries zero-filled, never read) and writes their validity flags.
template <int kD>
__device__ __forceinline__ void load_kv_tile(const SparsePrefillParams &p, unsigned tile,
                                             int *flags, const int *list, int k0, int n) {
    const int r = threadIdx.x >> 2, part = threadIdx.x & 3, k = k0 + r;
    const long long idx = k < n ? list[k] : -1;
    const bool valid = idx >= 0 && idx < p.s_kv;
    const unsigned char *src =
        valid ? static_cast<const unsigned char *>(p.kv) + idx * p.kv_stride_s * 2 : nullptr;
    if (part == 0) flags[r] = valid;
    load_row_async<kD>(tile, r, part, src, p.kv);
}

// Writes out, max_logits and lse of the CTA's rows (heads < h_q).
__device__ __forceinline__ void store_rows(const SparsePrefillParams &p, const float (&o)[32][4],
                                           const RowState &st, int i, int m) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wm = warp & 3, wn = warp >> 2;
    const float unit = p.natural_log ? 0.69314718055994531f : 1.f;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int head = m * kBlockM + wm * 16 + (lane >> 2) + 8 * h;
        if (head >= p.h_q) continue;
        const float l = st.l[h];
        const float lse2 = l > 0.f ? st.m[h] + log2f(l) : -inf_f32();
        const float f = l > 0.f ? sink_factor(p.attn_sink, head, lse2 * 0.69314718055994531f) / l
                                : 0.f;
        void *row = static_cast<unsigned char *>(p.out) +
                    ((long long)i * p.o_stride_s + (long long)head * p.o_stride_h) * 2;
        store_out_row<false>(row, o, h, f, wn, lane);
        if (wn == 0 && (lane & 3) == 0) {
            const long long at = (long long)i * p.h_q + head;
            p.max_logits[at] = st.m[h] * unit;
            p.lse[at] = l > 0.f ? lse2 * unit : (p.natural_log ? inf_f32() : -inf_f32());
        }
    }
}

template <int kD>
__global__ void __launch_bounds__(kThreads, 1) sparse_prefill_kernel(const SparsePrefillParams p) {
    using S = PrefillSmem<kD>;
    extern __shared__ __align__(128) unsigned char smem[];
    const int i = blockIdx.x, m = blockIdx.y;
    const unsigned base = smem_addr(smem);
    int *flags = reinterpret_cast<int *>(smem + S::kFlags);
    const int *list = p.indices + (long long)i * p.i_stride_s;
    const int n = entry_count(p, i), n_tiles = (n + kBlockN - 1) / kBlockN;
    float o[32][4];
    RowState st;
    row_state_init(st, o);
    load_q_tile<kD>(p, base + S::kQ, i, m);
    if (n_tiles > 0) load_kv_tile<kD>(p, base + S::kK, flags, list, 0, n);
    cp_async_commit();
    for (int it = 0; it < n_tiles; it++) {
        const int nb = (it + 1) & 1;
        if (it + 1 < n_tiles) {
            load_kv_tile<kD>(p, base + S::kK + nb * Tile<kD>::kBytes, flags + nb * kBlockN, list,
                             (it + 1) * kBlockN, n);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();  // tile it (and Q) visible to every warp
        attend_tile<kD>(o, st, smem, S::kQ, S::kK + (it & 1) * Tile<kD>::kBytes, S::kP, S::kRed,
                        flags + (it & 1) * kBlockN, p.scale_log2);
    }
    cp_async_wait<0>();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    finish_row_sums(st, reinterpret_cast<float *>(smem + S::kRed), warp & 3, warp >> 2, lane);
    store_rows(p, o, st, i, m);
}

}  // namespace sparse
}  // namespace flashmla
}  // namespace mla
