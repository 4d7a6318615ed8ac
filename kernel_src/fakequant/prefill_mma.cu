// Fake-quant MLA prefill on tensor cores (mma.sync m16n8k16, sm_80 and later: sm_90a and sm_100a
// alike): the numerics of prefill.cu (spec/fakequant.md §2-4) with both products on the
// quantization codes of quant_code.cuh, exact in the data's 16-bit type, and the per-tensor
// factors applied to the fp32 results (docs/fakequant-tensorcore-plan.md):
//   s  = fl32(Qc . Kc) * qk_eff            qk_eff = fl32(qk_scale * sq * sk) (host, double)
//   pq = P code (fp8: E4M3 of p / sp; nvfp4: E2M1 x E4M3 of the carrier-rounded p, 16 keys;
//        none: p rounded to the data type, as upstream's p.to(v.dtype))
//   acc = acc * c + pq @ Vc;  out = acc * pv_eff / max(l, 1e-6)   pv_eff = fl32(sp * sv)
// where sq, sk, sp, sv are the per-tensor factors (fp8 amax / 448, nvfp4 amax / 2688, 1 for None
// or mode none). Masks, N:M (groups of M keys from the sequence's key 0, dense sink/recent
// exemptions), the unquantized row sum, the block_n schedule of P (running max and P quantized
// per block_n tile, block_n <= 64: the 64-key tile is walked in block_n sub-tiles) and the LSE
// are prefill.cu's.
//
// Template parameters (spec "fakequant_prefill_mma"): kF16 (else bf16), kQ, kK, kP, kV (QdqMode),
// kM (0, 4, 8), kDqk (64, 128, 192), kDv (32, 64, 128).
//
// CTA: 8 warps over 128 rows of one (sequence, kv head); rows are (query, head of the group)
// pairs, query-major, as in prefill.cu; warp w owns rows 16 w .. 16 w + 15 (Q codes in registers
// for the whole KV walk). The grid is (row tiles, kv_heads, batch); a CTA takes the tiles
// tiles - 1 - x, tiles - 1 - x - gridDim.x, ... (longest causal tiles first; any max_seqlen_q is
// correct). KV tiles of 64 keys, double buffered through cp.async (tile n + 1 loads while tile n
// computes); a quantized K or V tile is replaced in shared memory by its codes once per CTA
// before the MMAs. Shared rows are padded by 8 elements so that ldmatrix is conflict-free.
//
// Requirements (checked by the host, which otherwise runs prefill.cu): q, k, v 16-byte aligned
// with token and head strides multiples of 8 elements, out 4-byte aligned with even strides,
// p_quant none or block_n <= 64.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/ptx_mma.cuh"
#include "common/tile16.cuh"
#include "fakequant/prefill_common.cuh"
#include "fakequant/quant_code.cuh"

namespace mla {
namespace fakequant {

// The tensor-core kernels' parameter block (this file's and prefill_sm90.cu's): the common
// fields and the factors of the fp32 products, qk_eff (log2 domain) and pv_eff.
struct PrefillMmaParams : PrefillCommon {
    float qk_eff, pv_eff;
};
static_assert(sizeof(PrefillMmaParams) == 184, "mirrored by mla__fq_prefill_mma_params");

constexpr int kPmBN = 64;   // keys of a KV tile

// Shared-memory layout (elements of 16 bits): Q [16 warps][dqk + 8], K [2][64][dqk + 8],
// V [2][64][dv + 8].
template <int kW, int kDqk, int kDv>
struct PmLayout {
    static constexpr int kQs = kDqk + 8, kVs = kDv + 8;
    static constexpr int kQ = 16 * kW * kQs, kK = kPmBN * kQs, kV = kPmBN * kVs;
    static constexpr int kBytes = (kQ + 2 * kK + 2 * kV) * 2;
};

template <bool kF16>
__device__ __forceinline__ void pm_mma(float c[4], const unsigned a[4], unsigned b0, unsigned b1) {
    if constexpr (kF16)
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        mma_bf16_16816(c, a, b0, b1);
}

template <bool kF16>
__device__ __forceinline__ float pm_to_f32(unsigned short x) {
    if constexpr (kF16) return __half2float(__ushort_as_half(x));
    else return __bfloat162float(__ushort_as_bfloat16(x));
}

template <bool kF16>
__device__ __forceinline__ unsigned short pm_from_f32(float x) {   // exact for codes
    if constexpr (kF16) return __half_as_ushort(__float2half_rn(x));
    else return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

// Codes of the kN rows of a shared tile [kN][stride] of kD features, in place: fp8 elementwise
// (pairs), nvfp4 in 16-feature blocks of each row. Compile-time trip counts (every thread takes
// the same number of items where they divide), unrolled so that independent items overlap.
template <bool kF16, int kMode, int kThreads, int kN, int kD>
__device__ __forceinline__ void pm_quant_rows(unsigned short *t, int stride, float scale) {
    if constexpr (kMode == kNvfp4) {
        constexpr int kPer = kD / 16, kItems = kN * kPer;
#pragma unroll 2
        for (int it = 0; it < (kItems + kThreads - 1) / kThreads; it++) {
            const int b = it * kThreads + threadIdx.x;
            if (kItems % kThreads != 0 && b >= kItems) break;
            uint4 *x = reinterpret_cast<uint4 *>(t + (b / kPer) * stride + (b % kPer) * 16);
            uint4 w[2] = {x[0], x[1]};
            unsigned short *h = reinterpret_cast<unsigned short *>(w);
            float v[16];
#pragma unroll
            for (int i = 0; i < 16; i++) v[i] = pm_to_f32<kF16>(h[i]);
            nvfp4_code16(v, scale);
#pragma unroll
            for (int i = 0; i < 16; i++) h[i] = pm_from_f32<kF16>(v[i]);
            x[0] = w[0], x[1] = w[1];
        }
    } else if constexpr (kMode == kFp8) {
        constexpr int kPairs = kD / 2, kItems = kN * kPairs;
#pragma unroll 4
        for (int it = 0; it < (kItems + kThreads - 1) / kThreads; it++) {
            const int e = it * kThreads + threadIdx.x;
            if (kItems % kThreads != 0 && e >= kItems) break;
            unsigned *x = reinterpret_cast<unsigned *>(t + (e / kPairs) * stride) + e % kPairs;
            const unsigned w = *x;
            *x = pm_from_f32<kF16>(fp8_code(pm_to_f32<kF16>(w & 0xffff), scale)) |
                 (unsigned)pm_from_f32<kF16>(fp8_code(pm_to_f32<kF16>(w >> 16), scale)) << 16;
        }
    }
}

// V codes of a 64-key tile [64][stride] in place: fp8 elementwise, nvfp4 per feature over the 16
// keys of each group (the tile starts at a multiple of 64 from the sequence's key 0; keys past
// k_len were zero-filled, so the tail group pads with 0).
template <bool kF16, int kMode, int kDv, int kThreads>
__device__ __forceinline__ void pm_quant_v(unsigned short *t, int stride, float scale) {
    if constexpr (kMode == kNvfp4) {
        constexpr int kItems = kDv * (kPmBN / 16);
#pragma unroll 2
        for (int it = 0; it < (kItems + kThreads - 1) / kThreads; it++) {
            const int c = it * kThreads + threadIdx.x;
            if (kItems % kThreads != 0 && c >= kItems) break;
            const int f = c % kDv, g = c / kDv;
            unsigned short *x = t + g * 16 * stride + f;
            float v[16];
#pragma unroll
            for (int i = 0; i < 16; i++) v[i] = pm_to_f32<kF16>(x[i * stride]);
            nvfp4_code16(v, scale);
#pragma unroll
            for (int i = 0; i < 16; i++) x[i * stride] = pm_from_f32<kF16>(v[i]);
        }
    } else if constexpr (kMode == kFp8) {
        pm_quant_rows<kF16, kFp8, kThreads, kPmBN, kDv>(t, stride, scale);
    }
}

// cp.async of rows [0, n_rows) of d features into a shared tile [n_rows][stride]: row r from
// base + row_off(r) (elements), zero-filled where !valid(r).
template <int kD, int kThreads, class Off, class Valid>
__device__ __forceinline__ void pm_load_rows(unsigned short *t, int stride, const void *base,
                                             int n_rows, Off row_off, Valid valid) {
    constexpr int kChunks = kD / 8;
    const unsigned short *g = static_cast<const unsigned short *>(base);
    for (int c = threadIdx.x; c < n_rows * kChunks; c += kThreads) {
        const int r = c / kChunks, e = (c % kChunks) * 8;
        const bool ok = valid(r);
        cp_async_16(t + r * stride + e, ok ? g + row_off(r) + e : g, ok);
    }
}

// N:M on one 8-key n-tile of a row: this lane holds keys 2 t, 2 t + 1 (x0, x1) of the n-tile,
// t = lane % 4; the other keys of its group are in lanes t ^ 1 (M = 4) and the whole quad (M = 8).
// Returns the kept mask (bit e: key 2 t + e keeps its score before exemptions).
template <int kM>
__device__ __forceinline__ unsigned pm_nm_keep(float x0, float x1, int n) {
    const int t = threadIdx.x & 3;
    float a0 = __shfl_xor_sync(0xffffffffu, x0, 1), a1 = __shfl_xor_sync(0xffffffffu, x1, 1);
    int r0, r1;
    if constexpr (kM == 4) {
        // rank by (value desc, index asc); the partner's keys are lower iff t is odd
        const bool lower = t & 1;
        r0 = (x1 > x0) + (a0 > x0 || (lower && a0 == x0)) + (a1 > x0 || (lower && a1 == x0));
        r1 = (x0 >= x1) + (a0 > x1 || (lower && a0 == x1)) + (a1 > x1 || (lower && a1 == x1));
    } else {
        float c0 = __shfl_xor_sync(0xffffffffu, x0, 2), c1 = __shfl_xor_sync(0xffffffffu, x1, 2);
        float c2 = __shfl_xor_sync(0xffffffffu, a0, 2), c3 = __shfl_xor_sync(0xffffffffu, a1, 2);
        r0 = (x1 > x0) + (a0 > x0) + (a1 > x0) + (c0 > x0) + (c1 > x0) + (c2 > x0) + (c3 > x0);
        r1 = (x0 > x1) + (a0 > x1) + (a1 > x1) + (c0 > x1) + (c1 > x1) + (c2 > x1) + (c3 > x1);
    }
    return (r0 < n ? 1u : 0u) | (r1 < n ? 2u : 0u);
}

// Scores of one 16-row m-tile over the 64-key tile at j0 (s: the accumulators of Qc Kc^T, 8
// n-tiles): scaled by qk_eff, masked (masked: the tile crosses k_len or the causal bound; ia, ib
// the queries of this lane's rows g and g + 8), N:M with the dense exemptions.
template <int kM>
__device__ __forceinline__ void pm_scores(float (&s)[8][4], const PrefillMmaParams &p,
                                          const SeqInfo &seq, int j0, bool masked, int ia,
                                          int ib) {
    const int k_len = seq.k_len, off = seq.off, q_len = seq.q_len;
    const int t4 = threadIdx.x & 3;
    const float qk = p.qk_eff;
    if (masked) {   // one branch per tile, not one per score
        // key j0 + j * 8 + 2 t4 + (e & 1) is kept iff it is < lim of its row (k_len, or the
        // causal bound i + off + 1 if smaller)
        const int lim_a = p.causal ? min(k_len, ia + off + 1) : k_len;
        const int lim_b = p.causal ? min(k_len, ib + off + 1) : k_len;
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = j0 + j * 8 + 2 * t4 + (e & 1);
                const float x = __fmul_rn(s[j][e], qk);
                s[j][e] = key < (e < 2 ? lim_a : lim_b) ? x : neg_inf();
            }
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[j][e] = __fmul_rn(s[j][e], qk);
    }
    if constexpr (kM != 0) {
        // a dense key in the tile is possible only for a single-row sequence, a tile reaching
        // into the sink, or one reaching past the recent bound of the lane's first row (ia <= ib)
        const bool exempt = q_len <= 1 || j0 < p.sink || j0 + kPmBN - 1 > ia + off - p.recent;
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const unsigned keep = pm_nm_keep<kM>(s[j][2 * h], s[j][2 * h + 1], p.sparsity_n);
                const int i = h ? ib : ia;
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    bool dense = false;
                    if (exempt) {
                        const int key = j0 + j * 8 + 2 * t4 + e;
                        const int d = i + off - key;
                        dense = q_len <= 1 || key < p.sink || (d >= 0 && d < p.recent);
                    }
                    if (!dense && !(keep >> e & 1)) s[j][2 * h + e] = neg_inf();
                }
            }
    }
}

// p = exp2(s - mu) of chunk c (keys 16 c .. 16 c + 15 of the tile; this lane's 2 x 4 scores,
// rows h = 0, 1) and its unquantized row sums added to l, in the one order both tensor-core
// prefills (this file's and prefill_sm90.cu's) use.
__device__ __forceinline__ void pm_chunk_exp(const float (&s)[8][4], int c, const float (&mu)[2],
                                             float (&l)[2], float (&pv)[2][4]) {
#pragma unroll
    for (int e = 0; e < 2; e++)
#pragma unroll
        for (int k = 0; k < 4; k++) pv[e][k] = exp2_fast(s[2 * c + e][k] - mu[k >> 1]);
#pragma unroll
    for (int h = 0; h < 2; h++)
        l[h] += (pv[0][2 * h] + pv[0][2 * h + 1]) + (pv[1][2 * h] + pv[1][2 * h + 1]);
}

// NVFP4 P of a chunk (this lane's 2 x 4 p, rows h = 0, 1): p rounded to the carrier in place;
// then pm_p_block_max(pv, h) is the maximum of row h's 16-key block (4 keys here, 12 in the quad).
template <bool kF16>
__device__ __forceinline__ void pm_p_carrier(float (&pv)[2][4]) {
#pragma unroll
    for (int e = 0; e < 2; e++)
#pragma unroll
        for (int k = 0; k < 4; k++) pv[e][k] = to_carrier<kF16>(pv[e][k]);
}
__device__ __forceinline__ float pm_p_block_max(const float (&pv)[2][4], int h) {
    return quad_max(fmaxf(fmaxf(pv[0][2 * h], pv[0][2 * h + 1]),
                          fmaxf(pv[1][2 * h], pv[1][2 * h + 1])));
}

// The softmax step of chunk c (keys 16 c .. 16 c + 15 of the tile; c a constant once unrolled)
// of one m-tile: at the start of a P tile (every nb chunks) the running max m moves over the P
// tile's scores, rescaling l and o (mu: the max the exponents use, 0 while m is -inf); then p =
// exp2(s - mu) adds to l unquantized, and the quantized (or 16-bit) P of the chunk is returned
// as the A fragment of P V.
template <bool kF16, int kP, int kOn>
__device__ __forceinline__ void pm_chunk_p(const float (&s)[8][4], int c, int nb, float (&m)[2],
                                           float (&l)[2], float (&mu)[2], float (&o)[kOn][4],
                                           float p_scale, unsigned (&a)[4]) {
    if (c % nb == 0) {   // a new P tile (block_n keys) starts: move the running max
        float mx[2] = {neg_inf(), neg_inf()};
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (e >= c && e < c + nb)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    mx[h] = fmaxf(mx[h], fmaxf(fmaxf(s[2 * e][2 * h], s[2 * e][2 * h + 1]),
                                              fmaxf(s[2 * e + 1][2 * h], s[2 * e + 1][2 * h + 1])));
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const float m_new = fmaxf(m[h], quad_max(mx[h]));
            mu[h] = m_new == neg_inf() ? 0.f : m_new;   // exp2(-inf - mu) = 0
            if (m_new != m[h]) {
                const float corr = exp2_fast(m[h] - mu[h]);   // m = -inf: 0
                l[h] *= corr;
#pragma unroll
                for (int j = 0; j < kOn; j++) o[j][2 * h] *= corr, o[j][2 * h + 1] *= corr;
                m[h] = m_new;
            }
        }
    }
    float pv[2][4];
    pm_chunk_exp(s, c, mu, l, pv);
    if constexpr (kP == kFp8) {
#pragma unroll
        for (int e = 0; e < 2; e++)
#pragma unroll
            for (int k = 0; k < 4; k++) pv[e][k] = fp8_code(pv[e][k], p_scale);
    } else if constexpr (kP == kNvfp4) {
        pm_p_carrier<kF16>(pv);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float sb, e4 = nvfp4_scale_code(pm_p_block_max(pv, h), p_scale, sb);
#pragma unroll
            for (int e = 0; e < 2; e++)
#pragma unroll
                for (int k = 2 * h; k < 2 * h + 2; k++) pv[e][k] = nvfp4_code(pv[e][k], e4, sb);
        }
    }
    a[0] = pack2<kF16>(pv[0][0], pv[0][1]), a[1] = pack2<kF16>(pv[0][2], pv[0][3]);
    a[2] = pack2<kF16>(pv[1][0], pv[1][1]), a[3] = pack2<kF16>(pv[1][2], pv[1][3]);
}

// out = acc pv_eff / max(l, 1e-6) and lse = ln2 (m + log2 l) of one m-tile: this lane's rows ra
// and ra + 8 of the (sequence, kv head) (rows past `rows` are not stored); l is summed over the
// quad first.
template <bool kF16, int kOn>
__device__ __forceinline__ void pm_store(const PrefillMmaParams &p, const SeqInfo &seq,
                                         float (&o)[kOn][4], const float (&m)[2], float (&l)[2],
                                         int ra, int rows, int hk) {
    const int t4 = threadIdx.x & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) l[h] = quad_sum(l[h]);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int r = ra + 8 * h;
        if (r >= rows) continue;
        const int i = r / seq.G, head = hk * seq.G + r % seq.G;
        const float denom = fmaxf(l[h], 1e-6f);
        unsigned *orow = reinterpret_cast<unsigned *>(static_cast<unsigned short *>(p.out) +
                                                      (seq.q0 + i) * p.o_stride_t +
                                                      (long long)head * p.o_stride_h);
#pragma unroll
        for (int j = 0; j < kOn; j++)
            orow[j * 4 + t4] = pack2<kF16>(__fdiv_rn(__fmul_rn(o[j][2 * h], p.pv_eff), denom),
                                             __fdiv_rn(__fmul_rn(o[j][2 * h + 1], p.pv_eff), denom));
        if (p.lse && t4 == 0)
            p.lse[(long long)head * p.total_q + seq.q0 + i] =
                l[h] > 0.f ? kLn2 * (m[h] + log2f(l[h])) : neg_inf();
    }
}

template <bool kF16, int kQ, int kK, int kP, int kV, int kM, int kDqk, int kDv, int kW>
__global__ void __launch_bounds__(kW * 32, 8 / kW) prefill_mma_kernel(const PrefillMmaParams p) {
    constexpr int kPmThreads = kW * 32, kPmBM = 16 * kW;
    using L = PmLayout<kW, kDqk, kDv>;
    constexpr int kQk = kDqk / 16;   // k-steps of Q K^T
    constexpr int kOn = kDv / 8;     // n-tiles of O
    extern __shared__ __align__(16) unsigned short smem_pm[];
    unsigned short *q_s = smem_pm, *k_s = q_s + L::kQ, *v_s = k_s + 2 * L::kK;
    const int b = blockIdx.z, hk = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2;
    SeqInfo seq;
    if (!seq_info(p, b, seq)) return;
    const int rows = seq.q_len * seq.G, tiles = (rows + kPmBM - 1) / kPmBM;
    // P tile: the running max moves per block_n keys when P is quantized (block_n <= 64 here)
    const int nb = kP != kNone && p.block_n < kPmBN ? p.block_n / 16 : 4;

    for (int tile = tiles - 1 - (int)blockIdx.x; tile >= 0; tile -= (int)gridDim.x) {
        const int r0 = tile * kPmBM, r_last = min(r0 + kPmBM, rows) - 1;
        const int n_tiles = (key_end(p, seq, r_last) + kPmBN - 1) / kPmBN;
        const int i_first = r0 / seq.G;

        __syncthreads();   // the previous row tile is done with every buffer
        // Q rows (zero past the last row), then K/V tile 0: group 0
        pm_load_rows<kDqk, kPmThreads>(q_s, L::kQs, p.q, kPmBM,
                           [&](int r) { return q_row_offset(p, seq, hk, r0 + r); },
                           [&](int r) { return r0 + r < rows; });
        auto load_kv = [&](int n, int stage) {
            const int j0 = n * kPmBN;
            auto valid = [&](int r) { return j0 + r < seq.k_len; };
            pm_load_rows<kDqk, kPmThreads>(k_s + stage * L::kK, L::kQs, p.k, kPmBN,
                               [&](int r) {
                                   return (seq.k0 + j0 + r) * p.k_stride_t + (long long)hk * p.k_stride_h;
                               },
                               valid);
            pm_load_rows<kDv, kPmThreads>(v_s + stage * L::kV, L::kVs, p.v, kPmBN,
                              [&](int r) {
                                  return (seq.k0 + j0 + r) * p.v_stride_t + (long long)hk * p.v_stride_h;
                              },
                              valid);
        };
        if (n_tiles > 0) load_kv(0, 0);
        cp_async_commit();

        // Row state: this lane's rows g and g + 8 of the warp's 16.
        const int ra = r0 + warp * 16 + g, rb = ra + 8;
        const int ia = ra / seq.G, ib = rb / seq.G;   // queries (past the last row: never stored)
        float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.f, 0.f};
        float o[kOn][4];
#pragma unroll
        for (int j = 0; j < kOn; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
        unsigned qf[kQk][4];

        for (int n = 0; n < n_tiles; n++) {
            const int stage = n & 1;
            if (n + 1 < n_tiles) load_kv(n + 1, stage ^ 1);
            cp_async_commit();
            cp_async_wait<1>();   // tile n (and Q) landed for this thread
            __syncthreads();
            unsigned short *kt = k_s + stage * L::kK, *vt = v_s + stage * L::kV;
            if (n == 0 && kQ != kNone)
                pm_quant_rows<kF16, kQ, kPmThreads, kPmBM, kDqk>(q_s, L::kQs, p.q_scale);
            if constexpr (kK != kNone)
                pm_quant_rows<kF16, kK, kPmThreads, kPmBN, kDqk>(kt, L::kQs, p.k_scale);
            if constexpr (kV != kNone) pm_quant_v<kF16, kV, kDv, kPmThreads>(vt, L::kVs, p.v_scale);
            if (kQ != kNone || kK != kNone || kV != kNone) __syncthreads();
            if (n == 0) {
#pragma unroll
                for (int kk = 0; kk < kQk; kk++)
                    ldmatrix_x4(qf[kk], q_s + (warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * L::kQs +
                                            kk * 16 + (lane >> 4) * 8);
            }

            // S = Qc Kc^T: 8 n-tiles of 8 keys
            float s[8][4];
#pragma unroll
            for (int j = 0; j < 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
            for (int kk = 0; kk < kQk; kk++) {
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    unsigned kb[4];
                    ldmatrix_x4(kb, kt + (j * 16 + (lane & 7) + (lane >> 4) * 8) * L::kQs + kk * 16 +
                                        ((lane >> 3) & 1) * 8);
                    pm_mma<kF16>(s[2 * j], qf[kk], kb[0], kb[1]);
                    pm_mma<kF16>(s[2 * j + 1], qf[kk], kb[2], kb[3]);
                }
            }

            const int j0 = n * kPmBN;
            const bool masked = j0 + kPmBN > seq.k_len || (p.causal && j0 + kPmBN - 1 > i_first + seq.off);
            pm_scores<kM>(s, p, seq, j0, masked, ia, ib);

            // softmax and P V, per 16-key chunk c (keys 16 c .. 16 c + 15 of the tile)
            float mu[2];
#pragma unroll
            for (int c = 0; c < 4; c++) {
                unsigned a[4];
                pm_chunk_p<kF16, kP, kOn>(s, c, nb, m, l, mu, o, p.p_scale, a);
#pragma unroll
                for (int j = 0; j < kOn / 2; j++) {
                    unsigned vb[4];
                    ldmatrix_x4_trans(vb, vt + (c * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * L::kVs +
                                              j * 16 + (lane >> 4) * 8);
                    pm_mma<kF16>(o[2 * j], a, vb[0], vb[1]);
                    pm_mma<kF16>(o[2 * j + 1], a, vb[2], vb[3]);
                }
            }
            __syncthreads();   // every warp is done with this stage before it is refilled
        }
        cp_async_wait<0>();

        pm_store<kF16, kOn>(p, seq, o, m, l, ra, rows, hk);
    }
}


// The same numerics on 32 rows per warp (two m-tiles sharing every K and V fragment: a third less
// shared-memory traffic per MMA than 16 rows): CTA of 4 warps over 128 rows, Q codes in shared
// memory (fragments loaded per k-step), single K and V buffers loaded in turn so that two CTAs fit
// an SM: V(n) lands under Q K(n)^T, K(n + 1) under the softmax and P V(n).
template <bool kF16, int kQ, int kK, int kP, int kV, int kM, int kDqk, int kDv>
__global__ void __launch_bounds__(128, 2) prefill_mma2_kernel(const PrefillMmaParams p) {
    constexpr int kThreads = 128, kBM = 128;
    constexpr int kQs = kDqk + 8, kVs = kDv + 8;
    constexpr int kQk = kDqk / 16, kOn = kDv / 8;
    extern __shared__ __align__(16) unsigned short smem_pm[];
    unsigned short *q_s = smem_pm, *k_s = q_s + kBM * kQs, *v_s = k_s + kPmBN * kQs;
    const int b = blockIdx.z, hk = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2;
    SeqInfo seq;
    if (!seq_info(p, b, seq)) return;
    const int rows = seq.q_len * seq.G, tiles = (rows + kBM - 1) / kBM;
    const int nb = kP != kNone && p.block_n < kPmBN ? p.block_n / 16 : 4;

    for (int tile = tiles - 1 - (int)blockIdx.x; tile >= 0; tile -= (int)gridDim.x) {
        const int r0 = tile * kBM, r_last = min(r0 + kBM, rows) - 1;
        const int n_tiles = (key_end(p, seq, r_last) + kPmBN - 1) / kPmBN;
        const int i_first = r0 / seq.G;
        auto load_k = [&](int n) {
            const int j0 = n * kPmBN;
            pm_load_rows<kDqk, kThreads>(
                k_s, kQs, p.k, kPmBN,
                [&](int r) { return (seq.k0 + j0 + r) * p.k_stride_t + (long long)hk * p.k_stride_h; },
                [&](int r) { return j0 + r < seq.k_len; });
        };

        __syncthreads();   // the previous row tile is done with every buffer
        pm_load_rows<kDqk, kThreads>(q_s, kQs, p.q, kBM,
                                     [&](int r) { return q_row_offset(p, seq, hk, r0 + r); },
                                     [&](int r) { return r0 + r < rows; });
        if (n_tiles > 0) load_k(0);
        cp_async_commit();

        // this lane's rows: m-tile t covers rows r0 + 32 warp + 16 t + (g, g + 8)
        const int rw = r0 + warp * 32 + g;   // + 16 t: row g of m-tile t
        float m[2][2], l[2][2], o[2][kOn][4];
#pragma unroll
        for (int t = 0; t < 2; t++) {
            m[t][0] = m[t][1] = neg_inf(), l[t][0] = l[t][1] = 0.f;
#pragma unroll
            for (int j = 0; j < kOn; j++) o[t][j][0] = o[t][j][1] = o[t][j][2] = o[t][j][3] = 0.f;
        }

        for (int n = 0; n < n_tiles; n++) {
            cp_async_wait<0>();   // K(n) (and Q) landed for this thread
            __syncthreads();      // ... for every thread; every warp is done with V(n - 1)
            {
                const int j0 = n * kPmBN;
                pm_load_rows<kDv, kThreads>(
                    v_s, kVs, p.v, kPmBN,
                    [&](int r) { return (seq.k0 + j0 + r) * p.v_stride_t + (long long)hk * p.v_stride_h; },
                    [&](int r) { return j0 + r < seq.k_len; });
                cp_async_commit();
            }
            if (n == 0 && kQ != kNone) pm_quant_rows<kF16, kQ, kThreads, kBM, kDqk>(q_s, kQs, p.q_scale);
            if constexpr (kK != kNone) pm_quant_rows<kF16, kK, kThreads, kPmBN, kDqk>(k_s, kQs, p.k_scale);
            if (kQ != kNone || kK != kNone) __syncthreads();

            float s[2][8][4];
#pragma unroll
            for (int t = 0; t < 2; t++)
#pragma unroll
                for (int j = 0; j < 8; j++) s[t][j][0] = s[t][j][1] = s[t][j][2] = s[t][j][3] = 0.f;
#pragma unroll
            for (int kk = 0; kk < kQk; kk++) {
                unsigned qa[2][4];
#pragma unroll
                for (int t = 0; t < 2; t++)
                    ldmatrix_x4(qa[t], q_s + (warp * 32 + t * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kQs +
                                           kk * 16 + (lane >> 4) * 8);
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    unsigned kb[4];
                    ldmatrix_x4(kb, k_s + (j * 16 + (lane & 7) + (lane >> 4) * 8) * kQs + kk * 16 +
                                        ((lane >> 3) & 1) * 8);
#pragma unroll
                    for (int t = 0; t < 2; t++) {
                        pm_mma<kF16>(s[t][2 * j], qa[t], kb[0], kb[1]);
                        pm_mma<kF16>(s[t][2 * j + 1], qa[t], kb[2], kb[3]);
                    }
                }
            }
            const int j0 = n * kPmBN;
            const bool masked = j0 + kPmBN > seq.k_len || (p.causal && j0 + kPmBN - 1 > i_first + seq.off);
#pragma unroll
            for (int t = 0; t < 2; t++)
                pm_scores<kM>(s[t], p, seq, j0, masked, (rw + 16 * t) / seq.G,
                              (rw + 16 * t + 8) / seq.G);

            cp_async_wait<0>();   // V(n) landed for this thread
            __syncthreads();      // ... for every thread; every warp is done with K(n)
            if (n + 1 < n_tiles) load_k(n + 1);
            cp_async_commit();
            if constexpr (kV != kNone) {
                pm_quant_v<kF16, kV, kDv, kThreads>(v_s, kVs, p.v_scale);
                __syncthreads();
            }

            float mu[2][2];
#pragma unroll
            for (int c = 0; c < 4; c++) {
                unsigned a[2][4];
#pragma unroll
                for (int t = 0; t < 2; t++)
                    pm_chunk_p<kF16, kP, kOn>(s[t], c, nb, m[t], l[t], mu[t], o[t], p.p_scale, a[t]);
#pragma unroll
                for (int j = 0; j < kOn / 2; j++) {
                    unsigned vb[4];
                    ldmatrix_x4_trans(vb, v_s + (c * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kVs +
                                              j * 16 + (lane >> 4) * 8);
#pragma unroll
                    for (int t = 0; t < 2; t++) {
                        pm_mma<kF16>(o[t][2 * j], a[t], vb[0], vb[1]);
                        pm_mma<kF16>(o[t][2 * j + 1], a[t], vb[2], vb[3]);
                    }
                }
            }
        }
        cp_async_wait<0>();
#pragma unroll
        for (int t = 0; t < 2; t++) pm_store<kF16, kOn>(p, seq, o[t], m[t], l[t], rw + 16 * t, rows, hk);
    }
}

}  // namespace fakequant
}  // namespace mla
