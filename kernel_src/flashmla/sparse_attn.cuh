// What the sparse decode (sparse_decode.cu) and the sparse prefill (sparse_prefill.cu) share on
// top of the attention tile (attn_tile.cuh): one CTA attends the 64 query rows (heads) of one query token over that
// token's own list of KV rows, gathered 64 at a time into shared memory. Portable path
// (mma.sync m16n8k16 bf16, ldmatrix, cp.async), correct on sm_90a and sm_100a.
//
// Math of one query row (head h of token i), keys t < n of the token's list, valid(t) when the
// list entry names an existing KV row (the families define it):
//   x_t = scale_log2 * (q . K_t)      for valid t (base-2 logits, scale_log2 = scale * log2 e)
//   m   = max_t x_t,  l = sum_t 2^(x_t - m),  o = sum_t 2^(x_t - m) V_t / l,  V_t = K_t[:512]
// computed online tile by tile (FlashAttention); the probabilities enter P V as bf16 (as in
// FlashMLA). A row without a valid key keeps m = -inf, l = 0, o = 0.
//
// CTA: 8 warps, the warp layout, row exchange and swizzled tiles of attn_tile.cuh (bf16 rows:
// Q 64 x kD, K 64 x kD, P 64 x 64); the key-validity flags of a K tile are int32 [64] in shared
// memory.
#pragma once

#include "flashmla/attn_tile.cuh"

namespace mla {
namespace flashmla {
namespace sparse {

constexpr int kPBytes = kBlockM * kBlockN * 2;   // the P tile
constexpr int kRedBytes = 2 * kBlockM * 4;       // the row exchange
constexpr int kFlagBytes = kBlockN * 4;          // validity flags of one K tile

// Byte sizes of bf16 tiles with rows of kD elements.
template <int kD>
struct Tile {
    static constexpr int kRowBytes = kD * 2;
    static constexpr int kRowChunks = kRowBytes / 16;
    static constexpr int kBytes = kBlockM * kRowBytes;
    static_assert(kRowChunks % 8 == 0, "the swizzle permutes chunks within groups of 8");
};

// Issues the cp.async of one bf16 row of kD elements (src null: 16-byte zero fills) into row r of
// a swizzled tile; the 4 threads of a row copy chunks part, part + 4, ...
template <int kD>
__device__ __forceinline__ void load_row_async(unsigned tile, int r, int part,
                                               const unsigned char *src, const void *any) {
    const bool valid = src != nullptr;
    if (!valid) src = static_cast<const unsigned char *>(any);
    for (int c = part; c < Tile<kD>::kRowChunks; c += 4)
        cp_async_16(tile + swz(r, c, Tile<kD>::kRowBytes), src + c * 16, valid);
}

// 16 e4m3 values of an fp8 cache row (sparse decode) times a float32 scale as 8 bf16 pairs (two
// 16-byte chunks): the scale applied in float32, then rounded to bf16.
__device__ __forceinline__ void dequant16(uint4 v, float scale, uint4 &lo, uint4 &hi) {
    const unsigned w[4] = {v.x, v.y, v.z, v.w};
    unsigned out[8];
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const uint2 h = e4m3x4_to_f16x4(w[q]);
        const float2 a = __half22float2(*reinterpret_cast<const __half2 *>(&h.x));
        const float2 b = __half22float2(*reinterpret_cast<const __half2 *>(&h.y));
        out[2 * q] = pack2<false>(a.x * scale, a.y * scale);
        out[2 * q + 1] = pack2<false>(b.x * scale, b.y * scale);
    }
    lo = make_uint4(out[0], out[1], out[2], out[3]);
    hi = make_uint4(out[4], out[5], out[6], out[7]);
}

// ---- the attention step -----------------------------------------------------------------------

// The factor the attention sink applies to a row's output: 1 / (1 + exp(sink - lse)), lse in
// natural log (sink +inf: 0, -inf: 1).
__device__ __forceinline__ float sink_factor(const float *attn_sink, int head, float lse_ln) {
    if (attn_sink == nullptr) return 1.f;
    return 1.f / (1.f + expf(attn_sink[head] - lse_ln));
}

// The attention step of one K tile already in shared memory (Q too): S, mask, online softmax,
// P V. Ends with a block barrier, after which k_tile, flags and P may be overwritten. A warp
// whose row slab is all padding (slab_used false, warp-uniform) skips both MMAs and their
// shared-memory reads but still takes every barrier; its rows hold meaningless values and must
// not be stored.
template <int kD>
__device__ __forceinline__ void attend_tile(float (&o)[32][4], RowState &st, unsigned char *smem,
                                            int q_off, int k_off, int p_off, int red_off,
                                            const int *flags, float scale_log2,
                                            bool slab_used = true) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wm = warp & 3, wn = warp >> 2;
    const unsigned base = smem_addr(smem);
    float s[4][4] = {};
    if (slab_used) qk_mma<kD, false>(s, base + q_off, base + k_off, wm, wn, lane);
    scale_and_mask(s, scale_log2, wn, lane, [flags](int c, int) { return flags[c] != 0; });
    online_softmax_update<false>(s, o, st, reinterpret_cast<float *>(smem + red_off),
                                 smem + p_off, wm, wn, lane);
    __syncthreads();  // P visible
    if (slab_used) pv_mma<kD, false>(o, base + p_off, base + k_off, wm, wn, lane);
    __syncthreads();  // K tile, flags and P consumed
}

}  // namespace sparse
}  // namespace flashmla
}  // namespace mla
