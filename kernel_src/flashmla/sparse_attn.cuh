// The tensor-core core shared by the sparse decode (sparse_decode.cu) and the sparse prefill
// (sparse_prefill.cu): one CTA attends the 64 query rows (heads) of one query token over that
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
// CTA: 8 warps. Warp w owns S columns [32 (w / 4), +32) and O columns [256 (w / 4), +256) of the
// rows [16 (w % 4), +16); row maxima and sums are exchanged between the two warps of a row slab
// through shared memory (red, [2][64] float32). Tiles of bf16 rows (Q: 64 x kD, K: 64 x kD,
// P: 64 x 64) are XOR-swizzled in 16-byte chunks (chunk ^ (row & 7)); the key-validity flags of
// a K tile are int32 [64] in shared memory.
#pragma once

#include <cuda_bf16.h>

#include "flashmla/ptx.cuh"

namespace mla {
namespace flashmla {
namespace sparse {

constexpr int kDV = 512, kBlockM = 64, kBlockN = 64, kThreads = 256;
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

// +inf (NVRTC has no math.h INFINITY).
__device__ __forceinline__ float inf_f32() { return __int_as_float(0x7f800000); }

// Byte offset of 16-byte chunk c of row r in a swizzled tile of rows of `row_bytes`.
__device__ __forceinline__ unsigned swz(int r, int c, int row_bytes) {
    return (unsigned)(r * row_bytes + ((c ^ (r & 7)) << 4));
}

// Two floats as a packed bf16 pair (round to nearest even).
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<unsigned *>(&h);
}

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

// ---- tensor-core steps ------------------------------------------------------------------------

// S[16 rows of slab wm][32 keys of half wn] = Q K^T over kD dims; s[n8 tile][C fragment].
template <int kD>
__device__ __forceinline__ void qk_mma(float (&s)[4][4], unsigned q_tile, unsigned k_tile, int wm,
                                       int wn, int lane) {
    constexpr int kRow = Tile<kD>::kRowBytes;
#pragma unroll
    for (int n = 0; n < 4; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
    const int qr = wm * 16 + (lane & 15);
    const int kr0 = wn * 32 + (lane & 7) + ((lane >> 4) << 3);
#pragma unroll 4
    for (int kk = 0; kk < kD / 16; kk++) {
        unsigned a[4], b[4];
        ldmatrix_x4(q_tile + swz(qr, 2 * kk + (lane >> 4), kRow), a);
#pragma unroll
        for (int np = 0; np < 2; np++) {
            ldmatrix_x4(k_tile + swz(kr0 + np * 16, 2 * kk + ((lane >> 3) & 1), kRow), b);
            mma_m16n8k16<false>(s[2 * np], a, b[0], b[1]);
            mma_m16n8k16<false>(s[2 * np + 1], a, b[2], b[3]);
        }
    }
}

// O[16 rows][256 columns of half wn] += P V, P from the swizzled P tile, V = K[:, :512].
template <int kD>
__device__ __forceinline__ void pv_mma(float (&o)[32][4], unsigned p_tile, unsigned k_tile,
                                       int wm, int wn, int lane) {
    const int pr = wm * 16 + (lane & 15);
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; kk++) {
        unsigned a[4];
        ldmatrix_x4(p_tile + swz(pr, 2 * kk + (lane >> 4), kBlockN * 2), a);
        const int vr = kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
#pragma unroll
        for (int jj = 0; jj < 16; jj++) {
            unsigned b[4];
            ldmatrix_x4_trans(k_tile + swz(vr, wn * 32 + jj * 2 + (lane >> 4), Tile<kD>::kRowBytes),
                              b);
            mma_m16n8k16<false>(o[2 * jj], a, b[0], b[1]);
            mma_m16n8k16<false>(o[2 * jj + 1], a, b[2], b[3]);
        }
    }
}

// ---- online softmax ---------------------------------------------------------------------------

// Per-thread softmax state of its two rows (r0 = slab row lane / 4, r1 = r0 + 8).
struct RowState {
    float m[2];   // running max of the base-2 logits, shared by the row's two warps
    float l[2];   // this thread's part of the running sum (the total after finish_row_sums)
};

__device__ __forceinline__ void row_state_init(RowState &st, float (&o)[32][4]) {
    st.m[0] = st.m[1] = -inf_f32();
    st.l[0] = st.l[1] = 0.f;
#pragma unroll
    for (int jt = 0; jt < 32; jt++) o[jt][0] = o[jt][1] = o[jt][2] = o[jt][3] = 0.f;
}

// Scales S to base-2 logits; keys whose flag is 0 become -inf.
__device__ __forceinline__ void scale_and_mask(float (&s)[4][4], const int *flags, float scale,
                                               int wn, int lane) {
#pragma unroll
    for (int n = 0; n < 4; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int c = wn * 32 + n * 8 + (lane & 3) * 2 + (e & 1);
            s[n][e] = flags[c] ? s[n][e] * scale : -inf_f32();
        }
}

// Max / sum over the 4 lanes of a quad (the lanes holding one row).
__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// New row maxima from both warps of the slab, rescales O and the sums, turns S into
// probabilities and stores them to the P tile. Contains one block barrier.
__device__ __forceinline__ void online_softmax_update(float (&s)[4][4], float (&o)[32][4],
                                                      RowState &st, float *red,
                                                      unsigned char *p_tile, int wm, int wn,
                                                      int lane) {
    const int r0 = wm * 16 + (lane >> 2);
    float mx[2] = {-inf_f32(), -inf_f32()};
#pragma unroll
    for (int n = 0; n < 4; n++) {
        mx[0] = fmaxf(mx[0], fmaxf(s[n][0], s[n][1]));
        mx[1] = fmaxf(mx[1], fmaxf(s[n][2], s[n][3]));
    }
    mx[0] = quad_max(mx[0]), mx[1] = quad_max(mx[1]);
    if ((lane & 3) == 0) red[wn * kBlockM + r0] = mx[0], red[wn * kBlockM + r0 + 8] = mx[1];
    __syncthreads();
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int r = r0 + 8 * h;
        const float m_new = fmaxf(st.m[h], fmaxf(red[r], red[kBlockM + r]));
        const float m_use = m_new == -inf_f32() ? 0.f : m_new;
        const float alpha = ex2(st.m[h] - m_use);
        st.m[h] = m_new;
        st.l[h] *= alpha;
#pragma unroll
        for (int jt = 0; jt < 32; jt++) o[jt][2 * h] *= alpha, o[jt][2 * h + 1] *= alpha;
#pragma unroll
        for (int n = 0; n < 4; n++) {
            const float p0 = ex2(s[n][2 * h] - m_use), p1 = ex2(s[n][2 * h + 1] - m_use);
            st.l[h] += p0 + p1;
            const int c = wn * 32 + n * 8 + (lane & 3) * 2;
            *reinterpret_cast<unsigned *>(p_tile + swz(r, c >> 3, kBlockN * 2) + (c & 7) * 2) =
                pack_bf16x2(p0, p1);
        }
    }
}

// Total row sums of both warps (one barrier pair); returns them in st.l.
__device__ __forceinline__ void finish_row_sums(RowState &st, float *red, int wm, int wn,
                                                int lane) {
    const int r0 = wm * 16 + (lane >> 2);
    const float l0 = quad_sum(st.l[0]), l1 = quad_sum(st.l[1]);
    if ((lane & 3) == 0) red[wn * kBlockM + r0] = l0, red[wn * kBlockM + r0 + 8] = l1;
    __syncthreads();
    st.l[0] = red[r0] + red[kBlockM + r0];
    st.l[1] = red[r0 + 8] + red[kBlockM + r0 + 8];
    __syncthreads();
}

// ---- outputs ----------------------------------------------------------------------------------

// Natural-log LSE of a finished row (m, l in base 2); meaningful only when l > 0.
__device__ __forceinline__ float row_lse_ln(float m, float l) {
    return (m + log2f(l)) * 0.69314718055994531f;
}

// The factor the attention sink applies to a row's output: 1 / (1 + exp(sink - lse)), lse in
// natural log (sink +inf: 0, -inf: 1).
__device__ __forceinline__ float sink_factor(const float *attn_sink, int head, float lse_ln) {
    if (attn_sink == nullptr) return 1.f;
    return 1.f / (1.f + expf(attn_sink[head] - lse_ln));
}

// Writes this thread's 64 values of output row h (of its two) times f as bf16 to row_ptr, the
// row's first element: columns 256 wn + 8 jt + 2 (lane % 4) + {0, 1}.
__device__ __forceinline__ void store_out_row(void *row_ptr, const float (&o)[32][4], int h,
                                              float f, int wn, int lane) {
    unsigned char *dst = static_cast<unsigned char *>(row_ptr) + (wn * 256 + (lane & 3) * 2) * 2;
#pragma unroll
    for (int jt = 0; jt < 32; jt++)
        *reinterpret_cast<unsigned *>(dst + jt * 16) =
            pack_bf16x2(o[jt][2 * h] * f, o[jt][2 * h + 1] * f);
}

// The attention step of one K tile already in shared memory (Q too): S, mask, online softmax,
// P V. Ends with a block barrier, after which k_tile, flags and P may be overwritten.
template <int kD>
__device__ __forceinline__ void attend_tile(float (&o)[32][4], RowState &st, unsigned char *smem,
                                            int q_off, int k_off, int p_off, int red_off,
                                            const int *flags, float scale_log2) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wm = warp & 3, wn = warp >> 2;
    const unsigned base = smem_addr(smem);
    float s[4][4];
    qk_mma<kD>(s, base + q_off, base + k_off, wm, wn, lane);
    scale_and_mask(s, flags, scale_log2, wn, lane);
    online_softmax_update(s, o, st, reinterpret_cast<float *>(smem + red_off), smem + p_off, wm,
                          wn, lane);
    __syncthreads();  // P visible
    pv_mma<kD>(o, base + p_off, base + k_off, wm, wn, lane);
    __syncthreads();  // K tile, flags and P consumed
}

}  // namespace sparse
}  // namespace flashmla
}  // namespace mla
