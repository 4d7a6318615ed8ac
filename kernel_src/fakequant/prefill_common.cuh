// Fake-quant MLA prefill: what its three kernels (prefill.cu fp32, prefill_mma.cu mma.sync,
// prefill_sm90.cu wgmma) share (spec/fakequant.md §2.1-2.3, §4).
#pragma once

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

}  // namespace fakequant
}  // namespace mla
