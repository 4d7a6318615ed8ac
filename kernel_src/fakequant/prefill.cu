// Fake-quant MLA prefill (spec/fakequant.md §2.1-2.3, §3, §4): varlen packed q/k/v, causal (Q is
// the suffix of the KV span) or not, GQA, Q/K/P/V fake-quantized in the kernel, N:M score
// sparsity with dense sink and recent tokens, natural-log LSE.
//
// Template parameters (the spec "fakequant_prefill" fixes them): kF16, q/k/v/out are float16
// (else bfloat16; also the NVFP4-P carrier); kQ, kK, kP, kV the QdqMode of each operand; kM the
// N:M group size (0: no sparsity, 4 or 8).
//
// Math, for sequence b (q rows [cu_q[b], cu_q[b+1]), keys [cu_k[b], cu_k[b+1])), query i (0-based
// in the sequence), head h, kv head h / (heads / kv_heads), all in fp32:
//   Qq = QQ(q row)      fp8 elementwise (q_scale); nvfp4: 16-feature blocks, gs q_scale
//   Kq = QK(k row)      the same along the features of each (token, kv head) row
//   Vq[t, f]            nvfp4: 16-token groups [16 g, 16 g + 16) at sequence-relative positions,
//                       tokens >= k_len read as 0; fp8: elementwise
//   key j visible iff j < k_len and (not causal or j <= i + k_len - q_len)
//   tiles of block_n keys from 0: s_j = fl32(Qq . Kq_j) * qk_scale (log2 domain), -inf if hidden;
//     N:M (kM): groups [M g, M g + M); M = 4 keeps the top N by (value desc, index asc), M = 8
//     keeps s >= the N-th largest; dense keys (q_len <= 1, j < sink, 0 <= d < recent with
//     d = i + k_len - q_len - j) keep their score; dropped keys get -inf
//     m' = max(m, max s_j); p_j = exp2(s_j - m'); c = exp2(m - m'); l = l c + sum p_j (unquant.)
//     pq = QP(p): fp8 elementwise (p_scale); nvfp4: p -> carrier -> fp32, blocks of 16 keys
//     acc = acc c + sum_j pq_j Vq_j;  m = m'
//   out = acc / max(l, 1e-6) (0 when nothing is visible); lse = ln2 (m + log2 l), -inf if l == 0
//
// Buffers: q [total_q, heads, dqk], k [total_k, kv_heads, dqk], v [total_k, kv_heads, dv], out
// [total_q, heads, dv] (strides *_stride_t, *_stride_h, last unit); cu_q, cu_k [batch + 1] int32;
// lse [heads, total_q] float32 or null.
//
// Grid (x, kv_heads, batch), 256 threads. The rows of a (sequence, kv head) are (query, head of
// the group) pairs, query-major; the CTA takes tiles of 8 rows x, x + gridDim.x, ... (so any
// max_seqlen_q is correct; it only sizes the grid), warp w owning row 8 tile + w. The KV axis is
// walked in block_n tiles of 16-key chunks: pass 1 quantizes each chunk of K into shared memory
// and writes the scores (after masking and N:M) to the warp's score row; then the tile's max and
// row sum; pass 2 quantizes each chunk of V and accumulates its quantized P (16 keys: one NVFP4
// P block, one V group). So the numerics are those of block_n whatever the chunking.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "fakequant/prefill_common.cuh"
#include "fakequant/quant.cuh"

namespace mla {
namespace fakequant {

// The fp32 kernel's parameter block: the common fields, the head dims (run-time here) and the
// log2-domain score scale.
struct PrefillParams : PrefillCommon {
    int dqk, dv;
    float qk_scale;
};
static_assert(sizeof(PrefillParams) == 192, "mirrored by mla__fq_prefill_params");

constexpr int kPfWarps = 8;
constexpr int kPfThreads = kPfWarps * 32;
constexpr int kChunk = 16;
constexpr int kPfMaxQk = 576;
constexpr int kPfMaxV = 512;
constexpr int kPfMaxBlockN = 256;
constexpr int kPfAcc = kPfMaxV / 32;
constexpr int kPfKStride = kPfMaxQk + 1;   // odd: lanes on different keys hit different banks
constexpr int kPfSmemFloats = kPfWarps * kPfMaxQk + kChunk * kPfKStride + kChunk * kPfMaxV +
                              kPfWarps * kPfMaxBlockN;
constexpr int kPfSmemBytes = kPfSmemFloats * 4;

template <bool kF16>
__device__ __forceinline__ float pf_load(const void *base, long long i) {
    if constexpr (kF16) return __half2float(static_cast<const __half *>(base)[i]);
    else return __bfloat162float(static_cast<const __nv_bfloat16 *>(base)[i]);
}

// Quantize-dequantize along a row of n features (elementwise or in 16-feature NVFP4 blocks),
// written to dst; the threads [first, first + count) share the work.
template <bool kF16, int kMode>
__device__ __forceinline__ void qdq_row(const void *src, long long base, int n, float scale,
                                        float *dst, int t, int count) {
    if constexpr (kMode == kNvfp4) {
        for (int blk = t; blk < n / 16; blk += count) {
            float x[16];
#pragma unroll
            for (int i = 0; i < 16; i++) x[i] = pf_load<kF16>(src, base + blk * 16 + i);
            nvfp4_qdq16(x, scale);
#pragma unroll
            for (int i = 0; i < 16; i++) dst[blk * 16 + i] = x[i];
        }
    } else {
        for (int f = t; f < n; f += count) {
            float x = pf_load<kF16>(src, base + f);
            dst[f] = kMode == kFp8 ? fp8_qdq(x, scale) : x;
        }
    }
}

// Kq of keys [c0, c0 + 16) of kv head hk into k_s (keys >= k_len as 0).
template <bool kF16, int kK>
__device__ __forceinline__ void load_k_chunk(const PrefillParams &p, const SeqInfo &s, int hk,
                                             int c0, float *k_s) {
    const int per = kK == kNvfp4 ? p.dqk / 16 : p.dqk;
    for (int idx = threadIdx.x; idx < kChunk * per; idx += kPfThreads) {
        int j = idx / per, e = idx - j * per, t = c0 + j;
        float *row = k_s + j * kPfKStride;
        if (t >= s.k_len) {
            if constexpr (kK == kNvfp4) for (int i = 0; i < 16; i++) row[e * 16 + i] = 0.f;
            else row[e] = 0.f;
            continue;
        }
        long long base = (s.k0 + t) * p.k_stride_t + (long long)hk * p.k_stride_h;
        qdq_row<kF16, kK>(p.k, base, p.dqk, p.k_scale, row, e, per);   // block or element e
    }
}

// Vq of keys [c0, c0 + 16) of kv head hk into v_s: one 16-token group per feature.
template <bool kF16, int kV>
__device__ __forceinline__ void load_v_chunk(const PrefillParams &p, const SeqInfo &s, int hk,
                                             int c0, float *v_s) {
    for (int f = threadIdx.x; f < p.dv; f += kPfThreads) {
        float x[16];
#pragma unroll
        for (int r = 0; r < 16; r++) {
            long long base = (s.k0 + c0 + r) * p.v_stride_t + (long long)hk * p.v_stride_h;
            x[r] = c0 + r < s.k_len ? pf_load<kF16>(p.v, base + f) : 0.f;
        }
        if constexpr (kV == kNvfp4) nvfp4_qdq16(x, p.v_scale);
#pragma unroll
        for (int r = 0; r < 16; r++) v_s[r * kPfMaxV + f] = kV == kFp8 ? fp8_qdq(x[r], p.v_scale) : x[r];
    }
}

// N:M on the 16 scores of a chunk in sc (the warp's score row at the chunk), lane j < 16 owning
// key c0 + j: the kept or dense score, else -inf. Every lane of the warp calls it.
template <int kM>
__device__ __forceinline__ void sparse_nm(const PrefillParams &p, const SeqInfo &s, int i, int c0,
                                          float *sc) {
    const int lane = threadIdx.x & 31, j = lane & 15;
    __syncwarp();
    float x = sc[j];
    int g0 = (j / kM) * kM, above = 0;
#pragma unroll
    for (int e = 0; e < kM; e++) {
        float y = sc[g0 + e];
        if constexpr (kM == 4) above += y > x || (y == x && g0 + e < j);
        else above += y > x;
    }
    long long d = (long long)i + s.k_len - s.q_len - (c0 + j);
    bool dense = s.q_len <= 1 || c0 + j < p.sink || (d >= 0 && d < p.recent);
    __syncwarp();
    if (lane < 16 && !dense && above >= p.sparsity_n) sc[j] = neg_inf();
    __syncwarp();
}

// Scores of keys [c0, c0 + 16) for this warp's row into sc (lanes 0-15 write; lane j and j + 16
// each take half of the features).
__device__ __forceinline__ void qk_chunk(const PrefillParams &p, const SeqInfo &s, int i, int c0,
                                         const float *q_s, const float *k_s, float *sc) {
    const int lane = threadIdx.x & 31, j = lane & 15, half = (p.dqk + 1) / 2;
    const int f0 = lane < 16 ? 0 : half, f1 = lane < 16 ? half : p.dqk;
    const float *krow = k_s + j * kPfKStride;
    float dot = 0.f;
    for (int f = f0; f < f1; f++) dot = fmaf(q_s[f], krow[f], dot);
    dot += __shfl_xor_sync(0xffffffffu, dot, 16);
    int t = c0 + j;
    bool visible = t < s.k_len && (!p.causal || (long long)t <= (long long)i + s.k_len - s.q_len);
    if (lane < 16) sc[j] = visible ? __fmul_rn(dot, p.qk_scale) : neg_inf();
}

// QP of this lane's p (lanes j and j + 16 hold the same key j of the chunk).
template <bool kF16, int kP>
__device__ __forceinline__ float pf_quantize_p(float pj, float p_scale) {
    if constexpr (kP == kFp8) return fp8_qdq(pj, p_scale);
    else if constexpr (kP == kNvfp4) {
        float pc = to_carrier<kF16>(pj);
        return nvfp4_elem(pc, nvfp4_block_scale(group_max<16>(pc), p_scale));
    } else return pj;
}

struct PfRow {
    float m, l;
    float acc[kPfAcc];
};

template <bool kF16>
__device__ __forceinline__ void pf_store(void *out, long long i, float v) {
    if constexpr (kF16) static_cast<__half *>(out)[i] = __float2half_rn(v);
    else static_cast<__nv_bfloat16 *>(out)[i] = __float2bfloat16_rn(v);
}

// out and lse of row (query i, head h).
template <bool kF16>
__device__ __forceinline__ void store_row(const PrefillParams &p, const SeqInfo &s, int i, int h,
                                          const PfRow &st) {
    const int lane = threadIdx.x & 31;
    float denom = fmaxf(st.l, 1e-6f);
    long long o = (s.q0 + i) * p.o_stride_t + (long long)h * p.o_stride_h;
#pragma unroll
    for (int k = 0; k < kPfAcc; k++)
        if (lane + 32 * k < p.dv) pf_store<kF16>(p.out, o + lane + 32 * k, __fdiv_rn(st.acc[k], denom));
    if (p.lse && lane == 0)
        p.lse[(long long)h * p.total_q + s.q0 + i] =
            st.l > 0.f ? kLn2 * (st.m + log2f(st.l)) : neg_inf();
}

template <bool kF16, int kQ, int kK, int kP, int kV, int kM>
__global__ void __launch_bounds__(kPfThreads) prefill_kernel(const PrefillParams p) {
    extern __shared__ float smem[];
    float *q_all = smem, *k_s = q_all + kPfWarps * kPfMaxQk, *v_s = k_s + kChunk * kPfKStride;
    float *s_all = v_s + kChunk * kPfMaxV;
    const int b = blockIdx.z, hk = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *q_s = q_all + warp * kPfMaxQk, *sc = s_all + warp * kPfMaxBlockN;
    SeqInfo s;
    if (!seq_info(p, b, s)) return;
    const int G = s.G;
    const long long rows = (long long)s.q_len * G, tiles = (rows + kPfWarps - 1) / kPfWarps;
    for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        long long r = tile * kPfWarps + warp, r_last = min(tile * kPfWarps + kPfWarps, rows) - 1;
        const bool valid = r < rows;
        const int i = (int)((valid ? r : r_last) / G), h = hk * G + (int)((valid ? r : r_last) % G);
        long long end = s.k_len;
        if (p.causal) end = min(end, r_last / G + s.k_len - s.q_len + 1);
        __syncthreads();   // the previous tile's rows are done with q_s
        if (valid)
            qdq_row<kF16, kQ>(p.q, (s.q0 + i) * p.q_stride_t + (long long)h * p.q_stride_h, p.dqk,
                              p.q_scale, q_s, lane, 32);
        PfRow st;
        st.m = neg_inf(), st.l = 0.f;
#pragma unroll
        for (int k = 0; k < kPfAcc; k++) st.acc[k] = 0.f;
        for (long long t0 = 0; t0 < end; t0 += p.block_n) {
            const int n = (int)min((long long)p.block_n, end - t0);   // keys of the tile to visit
            for (int c = 0; c < n; c += kChunk) {
                __syncthreads();
                load_k_chunk<kF16, kK>(p, s, hk, (int)t0 + c, k_s);
                __syncthreads();
                if (!valid) continue;
                qk_chunk(p, s, i, (int)t0 + c, q_s, k_s, sc + c);
                if constexpr (kM != 0) sparse_nm<kM>(p, s, i, (int)t0 + c, sc + c);
            }
            __syncwarp();
            const int nc = (n + kChunk - 1) / kChunk * kChunk;
            float mx = neg_inf();
            for (int j = lane; valid && j < nc; j += 32) mx = fmaxf(mx, sc[j]);
            const float m_new = fmaxf(st.m, group_max<32>(mx));
            float sum = 0.f;
            for (int j = lane; valid && j < nc; j += 32)
                sum += sc[j] == neg_inf() ? 0.f : exp2f(sc[j] - m_new);
            const float corr = st.m == neg_inf() ? 0.f : exp2f(st.m - m_new);
            st.l = st.l * corr + group_sum<32>(sum);
#pragma unroll
            for (int k = 0; k < kPfAcc; k++) st.acc[k] *= corr;
            for (int c = 0; c < n; c += kChunk) {
                __syncthreads();
                load_v_chunk<kF16, kV>(p, s, hk, (int)t0 + c, v_s);
                __syncthreads();
                if (!valid) continue;
                float x = sc[c + (lane & 15)];
                float pj = x == neg_inf() ? 0.f : exp2f(x - m_new);
                float pq = pf_quantize_p<kF16, kP>(pj, p.p_scale);
                for (int j = 0; j < kChunk; j++) {
                    float w = __shfl_sync(0xffffffffu, pq, j);
#pragma unroll
                    for (int k = 0; k < kPfAcc; k++)
                        if (lane + 32 * k < p.dv)
                            st.acc[k] = fmaf(w, v_s[j * kPfMaxV + lane + 32 * k], st.acc[k]);
                }
            }
            st.m = m_new;
        }
        if (valid) store_row<kF16>(p, s, i, h, st);
    }
}

}  // namespace fakequant
}  // namespace mla
