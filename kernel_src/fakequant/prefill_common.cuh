// Fake-quant MLA prefill: what its three kernels (prefill.cu fp32, prefill_mma.cu mma.sync,
// prefill_sm90.cu wgmma) share (spec/fakequant.md §2.1-2.3, §4): the head of their parameter
// blocks, the geometry of a sequence of the packed batch, the keys a range of rows attends to,
// the q offset of a row, and the NVFP4 P carrier.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/softmax.cuh"

namespace mla {
namespace fakequant {

// The fields every prefill parameter block starts with (each kernel's block derives from it and
// adds its own; runtime/fakequant_kinds.h mirrors it as mla__fq_prefill_common). Buffers: q
// [total_q, heads, dqk], k [total_k, kv_heads, dqk], v [total_k, kv_heads, dv], out [total_q,
// heads, dv] (strides *_stride_t, *_stride_h in elements, last unit); cu_q, cu_k [batch + 1]
// int32; lse [heads, total_q] float32 or null. block_n: the P tile; sparsity_n: N of N:M (0:
// off) with the dense sink and recent tokens; *_scale: each operand's per-tensor factor (fp8
// amax / 448, nvfp4 amax / 2688, 1 for mode none).
struct PrefillCommon {
    const void *q;
    long long q_stride_t, q_stride_h;
    const void *k;
    long long k_stride_t, k_stride_h;
    const void *v;
    long long v_stride_t, v_stride_h;
    const int *cu_q, *cu_k;
    void *out;
    long long o_stride_t, o_stride_h;
    float *lse;
    long long total_q;
    int batch, heads, kv_heads, block_n, causal, sparsity_n, sink, recent;
    float q_scale, k_scale, p_scale, v_scale;
};
static_assert(sizeof(PrefillCommon) == 176, "mirrored by mla__fq_prefill_common");

// Sequence b of the batch: its first query row q0 and first key k0, its lengths (k_len >= 0),
// the heads of a kv head's group G = heads / kv_heads, and off = k_len - q_len (causal: key j is
// visible to query i iff j <= i + off, the queries being the suffix of the key span).
struct SeqInfo {
    long long q0, k0;
    int q_len, k_len, G, off;
};

// Reads sequence b's geometry into s; false (s then partly read) when the sequence has no
// queries, and so a CTA of it nothing to do.
__device__ __forceinline__ bool seq_info(const PrefillCommon &p, int b, SeqInfo &s) {
    s.q0 = p.cu_q[b], s.k0 = p.cu_k[b];
    s.q_len = p.cu_q[b + 1] - p.cu_q[b];
    const int k_len = p.cu_k[b + 1] - p.cu_k[b];
    if (s.q_len <= 0) return false;
    s.k_len = max(k_len, 0);
    s.G = p.heads / p.kv_heads;
    s.off = s.k_len - s.q_len;
    return true;
}

// The element offset in q of row r of kv head hk's rows: query r / G, head hk G + r % G.
__device__ __forceinline__ long long q_row_offset(const PrefillCommon &p, const SeqInfo &seq,
                                                  int hk, int r) {
    return (seq.q0 + r / seq.G) * p.q_stride_t + (long long)(hk * seq.G + r % seq.G) * p.q_stride_h;
}

// p rounded to the 16-bit data type (float16 when kF16, else bfloat16), in fp32: the carrier of
// NVFP4 P (spec §2.1).
template <bool kF16>
__device__ __forceinline__ float to_carrier(float p) {
    if constexpr (kF16) return __half2float(__float2half_rn(p));
    else return __bfloat162float(__float2bfloat16_rn(p));
}

// The keys [0, key_end) that rows [.., r_last] of a (sequence, kv head) attend to (rows: (query,
// head of the group) pairs, query-major).
__device__ __forceinline__ int key_end(const PrefillCommon &p, const SeqInfo &seq, int r_last) {
    return p.causal ? max(0, min(seq.k_len, r_last / seq.G + seq.off + 1)) : seq.k_len;
}

}  // namespace fakequant
}  // namespace mla
