// Fake-quant MLA decode (spec/fakequant.md §2.1-2.4): one absorbed query token per request over
// a paged latent cache of raw values, K, V and P fake-quantized on read, in num_kv_splits fixed
// splits of 32-token tiles, then a combine of the splits through their (m, l).
//
// Template parameters (the spec "fakequant_decode" fixes them): kF16, the cache is float16 (else
// bfloat16; also the NVFP4-P carrier); kK, kV, kP the QdqMode of K, V and P. The combine
// ("fakequant_decode_combine") has kOut: out is 0 bfloat16, 1 float16, 2 float32.
//
// Math, for request b (length s, capped at max_blocks * page_size), head h, D = rank + rope:
//   row t of the cache: cache[block_table[b, t / page_size], t % page_size, 0:D]
//   Kq[t] = QK(row t)           fp8: elementwise, scale k_scale; nvfp4: 16-feature blocks, gs
//                               k_scale (D / 16 blocks, the RoPE slice included)
//   Vq[t, f] = QV(row[0:rank])  nvfp4: for each feature f, 16-token groups [16 g, 16 g + 16) at
//                               absolute positions, tokens >= s read as 0 (the open tail group
//                               re-quantizes as s grows); fp8: elementwise
//   tiles of 32 tokens from 0; tps = ceil(ceil(s / 32) / S); split i = [i tps 32, (i+1) tps 32)
//   per split, per tile T: s_j = fl32(dot(q[0:rank], Kq[0:rank]) + dot(q[rank:], Kq[rank:]))
//                          * qk_scale (log2 domain; -inf for t >= s)
//     m' = max(m, max s_j); p_j = exp2(s_j - m'); c = exp2(m - m'); l = l c + sum p_j (unquant.)
//     pq = QP(p): fp8 elementwise (p_scale); nvfp4: p -> carrier -> fp32, blocks of 16 keys
//     acc = acc c + sum_j pq_j Vq[j];  m = m'
//   combine, splits in order: M, L, A merged with exp2 weights (§2.4); out = A / max(L, 1e-6);
//   lse = ln2 (M + log2 L), -inf when L == 0.
//
// Buffers: q [batch, heads, D] (float32 if q_fp32 else the cache dtype; strides q_stride_b,
// q_stride_h, last unit); cache [num_blocks, page_size, D] (strides c_stride_block, c_stride_tok,
// last unit); block_table int32 rows of bt_stride; seq_len [batch] int32; workspace: ws_acc
// [batch, heads, splits, rank] float32, ws_ml [batch, heads, splits, 2] float32 (m, l);
// out [batch, heads, rank] (strides o_stride_b, o_stride_h, last unit); lse [batch, heads]
// float32 or null.
//
// Decode grid (splits, ceil(heads / 8), batch), 256 threads: the CTA quantizes each tile of K and
// V once into shared memory (fp32), then warp w runs head 8 blockIdx.y + w, lane j owning key j
// of the tile for the scores and features lane + 32 k of the accumulator.
// Combine grid (batch, ceil(heads / 8)), 256 threads, one warp per head.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "fakequant/quant.cuh"

namespace mla {
namespace fakequant {

struct DecodeParams {
    const void *q;
    long long q_stride_b, q_stride_h;
    const void *cache;
    long long c_stride_block, c_stride_tok;
    const int *block_table;
    long long bt_stride;
    const int *seq_len;
    float *ws_acc, *ws_ml;
    int batch, heads, rank, rope, page_size, max_blocks, splits, q_fp32;
    float qk_scale, k_scale, v_scale, p_scale;
};

struct CombineParams {
    const float *ws_acc, *ws_ml;
    void *out;
    long long o_stride_b, o_stride_h;
    float *lse;
    int batch, heads, rank, splits;
};

constexpr int kTile = 32;
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxRow = 576;
constexpr int kMaxRank = 512;
constexpr int kAccPerLane = kMaxRank / 32;
constexpr int kKStride = kMaxRow + 1;   // odd: lane j reading row j hits bank (j + f) % 32
constexpr int kSmemFloats = kWarps * kMaxRow + kTile * kKStride + kTile * kMaxRank;
constexpr int kSmemBytes = kSmemFloats * 4;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

template <bool kF16>
__device__ __forceinline__ float load_raw(const void *base, long long i) {
    if constexpr (kF16) return __half2float(static_cast<const __half *>(base)[i]);
    else return __bfloat162float(static_cast<const __nv_bfloat16 *>(base)[i]);
}

// Rounds p to the carrier dtype (the cache's) and back.
template <bool kF16>
__device__ __forceinline__ float to_carrier(float p) {
    if constexpr (kF16) return __half2float(__float2half_rn(p));
    else return __bfloat162float(__float2bfloat16_rn(p));
}

// Element offset of token t's latent row.
__device__ __forceinline__ long long cache_row(const DecodeParams &p, const int *bt_row, int t) {
    long long page = bt_row[t / p.page_size];
    return page * p.c_stride_block + (long long)(t % p.page_size) * p.c_stride_tok;
}

// Raw feature f of token t, 0 past the sequence.
template <bool kF16>
__device__ __forceinline__ float load_latent(const DecodeParams &p, const int *bt_row, int t,
                                             int s, int f) {
    return t < s ? load_raw<kF16>(p.cache, cache_row(p, bt_row, t) + f) : 0.f;
}

// Warp w's query row (fp32) into q_s.
template <bool kF16>
__device__ __forceinline__ void load_q(const DecodeParams &p, int b, int h, float *q_s) {
    const int lane = threadIdx.x & 31, D = p.rank + p.rope;
    long long base = (long long)b * p.q_stride_b + (long long)h * p.q_stride_h;
    for (int f = lane; f < D; f += 32)
        q_s[f] = p.q_fp32 ? static_cast<const float *>(p.q)[base + f] : load_raw<kF16>(p.q, base + f);
}

// Kq of the tile at t0: per-token rows, quantized along features.
template <bool kF16, int kK>
__device__ __forceinline__ void load_k_tile(const DecodeParams &p, const int *bt_row, int t0,
                                            int s, float *kq) {
    const int D = p.rank + p.rope;
    if constexpr (kK == kNvfp4) {
        const int nb = D / 16;
        for (int idx = threadIdx.x; idx < kTile * nb; idx += kThreads) {
            int j = idx / nb, f0 = (idx - j * nb) * 16;
            float v[16];
#pragma unroll
            for (int i = 0; i < 16; i++) v[i] = load_latent<kF16>(p, bt_row, t0 + j, s, f0 + i);
            nvfp4_qdq16(v, p.k_scale);
#pragma unroll
            for (int i = 0; i < 16; i++) kq[j * kKStride + f0 + i] = v[i];
        }
    } else {
        for (int idx = threadIdx.x; idx < kTile * D; idx += kThreads) {
            int j = idx / D, f = idx - j * D;
            float v = load_latent<kF16>(p, bt_row, t0 + j, s, f);
            kq[j * kKStride + f] = kK == kFp8 ? fp8_qdq(v, p.k_scale) : v;
        }
    }
}

// Vq of the tile at t0: the raw latent's first rank features, quantized along tokens.
template <bool kF16, int kV>
__device__ __forceinline__ void load_v_tile(const DecodeParams &p, const int *bt_row, int t0,
                                            int s, float *vq) {
    if constexpr (kV == kNvfp4) {
        for (int idx = threadIdx.x; idx < 2 * p.rank; idx += kThreads) {
            int g = idx / p.rank, f = idx - g * p.rank;
            float v[16];
#pragma unroll
            for (int r = 0; r < 16; r++) v[r] = load_latent<kF16>(p, bt_row, t0 + 16 * g + r, s, f);
            nvfp4_qdq16(v, p.v_scale);
#pragma unroll
            for (int r = 0; r < 16; r++) vq[(16 * g + r) * kMaxRank + f] = v[r];
        }
    } else {
        for (int idx = threadIdx.x; idx < kTile * p.rank; idx += kThreads) {
            int j = idx / p.rank, f = idx - j * p.rank;
            float v = load_latent<kF16>(p, bt_row, t0 + j, s, f);
            vq[j * kMaxRank + f] = kV == kFp8 ? fp8_qdq(v, p.v_scale) : v;
        }
    }
}

// s_j of this lane's key (log2 domain), -inf past the sequence.
__device__ __forceinline__ float qk_score(const DecodeParams &p, const float *q_s,
                                          const float *krow, bool valid) {
    if (!valid) return neg_inf();
    float nope = 0.f, pe = 0.f;
    for (int f = 0; f < p.rank; f++) nope = fmaf(q_s[f], krow[f], nope);
    for (int f = p.rank; f < p.rank + p.rope; f++) pe = fmaf(q_s[f], krow[f], pe);
    return __fmul_rn(nope + pe, p.qk_scale);
}

__device__ __forceinline__ float warp_max(float v) {
    for (int d = 16; d > 0; d >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, d));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
    for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
    return v;
}
// Max over the 16 lanes of this lane's half warp (one P block of 16 keys).
__device__ __forceinline__ float half_warp_max(float v) {
    for (int d = 8; d > 0; d >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, d));
    return v;
}

// QP(p) of this lane's key (after the row sum).
template <bool kF16, int kP>
__device__ __forceinline__ float quantize_p(float p, float p_scale) {
    if constexpr (kP == kFp8) return fp8_qdq(p, p_scale);
    else if constexpr (kP == kNvfp4) {
        float pc = to_carrier<kF16>(p);
        return nvfp4_elem(pc, nvfp4_block_scale(half_warp_max(pc), p_scale));
    } else return p;
}

// Online softmax state of one head (one warp): m, l and the lane's accumulator columns.
struct RowState {
    float m, l;
    float acc[kAccPerLane];
};

// One tile for this warp's head: scores, online softmax update, P quantization, P @ Vq.
template <bool kF16, int kP>
__device__ __forceinline__ void online_softmax_tile(const DecodeParams &p, const float *q_s,
                                                    const float *kq, const float *vq, int t0,
                                                    int s, RowState &st) {
    const int lane = threadIdx.x & 31;
    float sj = qk_score(p, q_s, kq + lane * kKStride, t0 + lane < s);
    float m_new = fmaxf(st.m, warp_max(sj));
    float pj = sj == neg_inf() ? 0.f : exp2f(sj - m_new);
    float c = st.m == neg_inf() ? 0.f : exp2f(st.m - m_new);
    st.l = st.l * c + warp_sum(pj);
    float pq = quantize_p<kF16, kP>(pj, p.p_scale);
#pragma unroll
    for (int k = 0; k < kAccPerLane; k++) st.acc[k] *= c;
    for (int j = 0; j < kTile; j++) {
        float w = __shfl_sync(0xffffffffu, pq, j);
#pragma unroll
        for (int k = 0; k < kAccPerLane; k++)
            if (lane + 32 * k < p.rank) st.acc[k] = fmaf(w, vq[j * kMaxRank + lane + 32 * k], st.acc[k]);
    }
    st.m = m_new;
}

// The split's (acc, m, l) of row (b, h, split) into the workspace.
__device__ __forceinline__ void store_partial(const DecodeParams &p, long long row,
                                              const RowState &st) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int k = 0; k < kAccPerLane; k++)
        if (lane + 32 * k < p.rank) p.ws_acc[row * p.rank + lane + 32 * k] = st.acc[k];
    if (lane == 0) p.ws_ml[row * 2] = st.m, p.ws_ml[row * 2 + 1] = st.l;
}

template <bool kF16, int kK, int kV, int kP>
__global__ void __launch_bounds__(kThreads) decode_kernel(const DecodeParams p) {
    extern __shared__ float smem[];
    float *q_all = smem, *kq = smem + kWarps * kMaxRow, *vq = kq + kTile * kKStride;
    const int split = blockIdx.x, b = blockIdx.z, warp = threadIdx.x >> 5;
    const int h = blockIdx.y * kWarps + warp;
    float *q_s = q_all + warp * kMaxRow;
    long long cap = (long long)p.max_blocks * p.page_size;
    int s = p.seq_len[b] < 0 ? 0 : p.seq_len[b];
    if ((long long)s > cap) s = (int)cap;
    long long tiles = (s + kTile - 1) / kTile, tps = (tiles + p.splits - 1) / p.splits;
    long long begin = split * tps * kTile, end = begin + tps * kTile;
    if (end > s) end = s;
    const int *bt_row = p.block_table + (long long)b * p.bt_stride;
    RowState st;
    st.m = neg_inf(), st.l = 0.f;
#pragma unroll
    for (int k = 0; k < kAccPerLane; k++) st.acc[k] = 0.f;
    if (h < p.heads) load_q<kF16>(p, b, h, q_s);
    for (long long t0 = begin; t0 < end; t0 += kTile) {
        __syncthreads();   // q written; the previous tile consumed
        load_k_tile<kF16, kK>(p, bt_row, (int)t0, s, kq);
        load_v_tile<kF16, kV>(p, bt_row, (int)t0, s, vq);
        __syncthreads();
        if (h < p.heads) online_softmax_tile<kF16, kP>(p, q_s, kq, vq, (int)t0, s, st);
    }
    if (h < p.heads) store_partial(p, ((long long)b * p.heads + h) * p.splits + split, st);
}

template <int kOut>
__device__ __forceinline__ void store_out(void *out, long long i, float v) {
    if constexpr (kOut == 0) static_cast<__nv_bfloat16 *>(out)[i] = __float2bfloat16_rn(v);
    else if constexpr (kOut == 1) static_cast<__half *>(out)[i] = __float2half_rn(v);
    else static_cast<float *>(out)[i] = v;
}

template <int kOut>
__global__ void __launch_bounds__(kThreads) combine_kernel(const CombineParams p) {
    const int b = blockIdx.x, lane = threadIdx.x & 31;
    const int h = blockIdx.y * kWarps + (threadIdx.x >> 5);
    if (h >= p.heads) return;
    long long row0 = ((long long)b * p.heads + h) * p.splits;
    float M = neg_inf(), L = 0.f, A[kAccPerLane];
#pragma unroll
    for (int k = 0; k < kAccPerLane; k++) A[k] = 0.f;
    for (int i = 0; i < p.splits; i++) {
        float mi = p.ws_ml[(row0 + i) * 2], li = p.ws_ml[(row0 + i) * 2 + 1];
        if (!(li > 0.f)) continue;
        float n = fmaxf(M, mi);
        float ca = M == neg_inf() ? 0.f : exp2f(M - n), cb = exp2f(mi - n);
        const float *acc = p.ws_acc + (row0 + i) * p.rank;
#pragma unroll
        for (int k = 0; k < kAccPerLane; k++)
            if (lane + 32 * k < p.rank) A[k] = A[k] * ca + acc[lane + 32 * k] * cb;
        L = L * ca + li * cb;
        M = n;
    }
    float denom = fmaxf(L, 1e-6f);
    long long o = (long long)b * p.o_stride_b + (long long)h * p.o_stride_h;
#pragma unroll
    for (int k = 0; k < kAccPerLane; k++)
        if (lane + 32 * k < p.rank) store_out<kOut>(p.out, o + lane + 32 * k, __fdiv_rn(A[k], denom));
    if (p.lse && lane == 0)
        p.lse[(long long)b * p.heads + h] = L > 0.f ? kLn2 * (M + log2f(L)) : neg_inf();
}

}  // namespace fakequant
}  // namespace mla
