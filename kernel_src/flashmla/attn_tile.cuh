// The tensor-core attention step every FlashMLA-compatible attention kernel shares: the dense
// decode (decode.cu, and decode_sm90.cu for the softmax and the stores) and the sparse decode and
// prefill (sparse_attn.cuh). Portable path (mma.sync m16n8k16, ldmatrix), sm_80 and later.
//
// One CTA of 8 warps holds 64 query rows. Warp w owns S columns [32 (w / 4), +32) and O columns
// [256 (w / 4), +256) of the rows [16 (w % 4), +16); thread lane of a warp holds the rows
// r0 = lane / 4 and r1 = r0 + 8 of its slab (the mma.sync C fragment: s[n][e] is row r(e / 2),
// key 8 n + 2 (lane % 4) + e % 2 of the warp's 32). Row maxima and sums are exchanged between the
// two warps of a slab through shared memory (red, [2][64] float32).
//
// Online softmax in base 2: S arrives as base-2 logits x; per tile
//   m' = max(m, max_t x_t),  alpha = 2^(m - m'),  l' = alpha l + sum_t 2^(x_t - m'),
//   O' = alpha O + P V,  P = 2^(x - m') rounded to 16 bits (bf16 or fp16, as in FlashMLA),
// with m' = -inf read as 0 in the exponents (a row with no key yet keeps l = 0, O = 0).
//
// Tiles (Q, K: 64 rows x kD 16-bit values; P: 64 x 64) are XOR-swizzled in 16-byte chunks
// (chunk ^ (row & 7)); V is K[:, :512].
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/tile16.cuh"
#include "common/warp.cuh"
#include "flashmla/ptx.cuh"

namespace mla {
namespace flashmla {

constexpr int kDV = 512, kBlockM = 64, kBlockN = 64, kThreads = 256;

// swz (tile offsets), pack2 (16-bit pairs): common/tile16.cuh; quad_max, quad_sum (the row
// reductions of a C fragment): common/warp.cuh.

// ---- tensor-core steps ------------------------------------------------------------------------

// S[16 rows of slab wm][32 keys of half wn] = Q K^T over kD dims; s[n8 tile][C fragment].
template <int kD, bool kF16>
__device__ __forceinline__ void qk_mma(float (&s)[4][4], unsigned q_tile, unsigned k_tile, int wm,
                                       int wn, int lane) {
    constexpr int kRow = kD * 2;
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
            mma_m16n8k16<kF16>(s[2 * np], a, b[0], b[1]);
            mma_m16n8k16<kF16>(s[2 * np + 1], a, b[2], b[3]);
        }
    }
}

// O[16 rows][256 columns of half wn] += P V, P from the swizzled P tile, V = K[:, :512].
template <int kD, bool kF16>
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
            ldmatrix_x4_trans(k_tile + swz(vr, wn * 32 + jj * 2 + (lane >> 4), kD * 2), b);
            mma_m16n8k16<kF16>(o[2 * jj], a, b[0], b[1]);
            mma_m16n8k16<kF16>(o[2 * jj + 1], a, b[2], b[3]);
        }
    }
}

// ---- online softmax ---------------------------------------------------------------------------

// Per-thread softmax state of its two rows (r0 = slab row lane / 4, r1 = r0 + 8).
struct RowState {
    float m[2];   // running max of the base-2 logits, shared by the row's two warps
    float l[2];   // this thread's part of the running sum (the total after finish_row_sums)
};

// Empty rows: m = -inf, l = 0, O = 0.
__device__ __forceinline__ void row_state_init(RowState &st, float (&o)[32][4]) {
    st.m[0] = st.m[1] = -inf_f32();
    st.l[0] = st.l[1] = 0.f;
#pragma unroll
    for (int jt = 0; jt < 32; jt++) o[jt][0] = o[jt][1] = o[jt][2] = o[jt][3] = 0.f;
}

// Scales S to base-2 logits; a key becomes -inf unless visible(c, h), c = the key's column
// [0, 64) in the tile, h = which of the thread's two rows.
template <class Visible>
__device__ __forceinline__ void scale_and_mask(float (&s)[4][4], float scale, int wn, int lane,
                                               Visible visible) {
#pragma unroll
    for (int n = 0; n < 4; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int c = wn * 32 + n * 8 + (lane & 3) * 2 + (e & 1);
            s[n][e] = visible(c, e >> 1) ? s[n][e] * scale : -inf_f32();
        }
}

// Publishes the maxima of this warp's S over the thread's two rows to red[wn][row] (one block
// barrier): the row max of the tile is then max(red[0][row], red[1][row]).
__device__ __forceinline__ void publish_row_max(const float (&s)[4][4], float *red, int wm,
                                                int wn, int lane) {
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
}

// New row maxima from both warps of the slab, rescales O and the sums, turns S into
// probabilities and stores them to the P tile. Contains one block barrier.
template <bool kF16>
__device__ __forceinline__ void online_softmax_update(float (&s)[4][4], float (&o)[32][4],
                                                      RowState &st, float *red,
                                                      unsigned char *p_tile, int wm, int wn,
                                                      int lane) {
    publish_row_max(s, red, wm, wn, lane);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int r = wm * 16 + (lane >> 2) + 8 * h;
        const float m_new = fmaxf(st.m[h], fmaxf(red[r], red[kBlockM + r]));
        const float m_use = m_new == -inf_f32() ? 0.f : m_new;
        const float alpha = ex2(st.m[h] - m_use);
        st.m[h] = m_new;
        st.l[h] *= alpha;
#pragma unroll
        for (int jt = 0; jt < 32; jt++) o[jt][2 * h] *= alpha, o[jt][2 * h + 1] *= alpha;
#pragma unroll
        for (int n = 0; n < 4; n++) {
            const float p0 = ex2(s[n][2 * h] - m_use);
            const float p1 = ex2(s[n][2 * h + 1] - m_use);
            st.l[h] += p0 + p1;
            const int c = wn * 32 + n * 8 + (lane & 3) * 2;
            *reinterpret_cast<unsigned *>(p_tile + swz(r, c >> 3, kBlockN * 2) + (c & 7) * 2) =
                pack2<kF16>(p0, p1);
        }
    }
}

// ---- outputs ----------------------------------------------------------------------------------

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

// Natural-log LSE of a finished row (m, l in base 2); meaningful only when l > 0.
__device__ __forceinline__ float row_lse_ln(float m, float l) {
    return (m + log2f(l)) * 0.69314718055994531f;
}

// Writes this thread's 64 values of output row h (of its two) times f as 16-bit pairs to
// row_ptr, the row's first element: columns 256 wn + 8 jt + 2 (lane % 4) + {0, 1}.
template <bool kF16>
__device__ __forceinline__ void store_out_row(void *row_ptr, const float (&o)[32][4], int h,
                                              float f, int wn, int lane) {
    unsigned char *dst = static_cast<unsigned char *>(row_ptr) + (wn * 256 + (lane & 3) * 2) * 2;
#pragma unroll
    for (int jt = 0; jt < 32; jt++)
        *reinterpret_cast<unsigned *>(dst + jt * 16) =
            pack2<kF16>(o[jt][2 * h] * f, o[jt][2 * h + 1] * f);
}

}  // namespace flashmla
}  // namespace mla
