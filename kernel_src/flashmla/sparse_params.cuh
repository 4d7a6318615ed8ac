// Parameter blocks of the FlashMLA-compatible sparse kernels (sparse_decode.cu, sparse_prefill.cu),
// mirrored field for field by the C structs of runtime/flashmla_sparse.h (same order, same sizes;
// both sides assert the size). Strides in elements unless named *_bytes.
#pragma once

namespace mla {
namespace flashmla {

// Sparse decode over the fp8 cache of 656-byte rows (mla_flash_with_kvcache with indices).
struct SparseDecodeParams {
    const void *q;                 // [b, s_q, h_q, 576] bfloat16
    long long q_stride_b, q_stride_s, q_stride_h;
    const unsigned char *k;        // [num_blocks, page, 1, 656] bytes
    long long k_stride_block_bytes;
    const int *indices;            // [b, s_q, topk] int32, unit last stride
    long long i_stride_b, i_stride_s;
    const int *topk_length;        // [b] int32 or null
    const float *attn_sink;        // [h_q] float32 or null
    void *out;                     // [b, s_q, h_q, 512] bfloat16
    long long o_stride_b, o_stride_s, o_stride_h;
    float *lse;                    // [b, h_q, s_q] float32 contiguous
    long long num_slots;           // num_blocks * page: indices outside [0, num_slots) are invalid
    int b, s_q, h_q, topk, page_size;
    float scale_log2;              // softmax_scale * log2(e)
    int l2_prefetch;               // sm_90a kernel: prefetch the rows of the pair after next to L2
};
static_assert(sizeof(SparseDecodeParams) == 168, "SparseDecodeParams must match the C mirror");

// Sparse prefill (mla_flash_sparse_fwd).
struct SparsePrefillParams {
    const void *q;                 // [s_q, h_q, d_qk] bfloat16
    long long q_stride_s, q_stride_h;
    const void *kv;                // [s_kv, 1, d_qk] bfloat16
    long long kv_stride_s;
    const int *indices;            // [s_q, 1, topk] int32, unit last stride
    long long i_stride_s;
    const int *topk_length;        // [s_q] int32 or null
    const float *attn_sink;        // [h_q] float32 or null
    void *out;                     // [s_q, h_q, 512] bfloat16
    long long o_stride_s, o_stride_h;
    float *max_logits;             // [s_q, h_q] float32 contiguous
    float *lse;                    // [s_q, h_q] float32 contiguous
    int s_q, h_q, topk, s_kv;
    float scale_log2;              // sm_scale * log2(e)
    int natural_log;               // 1: max_logits and lse in natural log; 0: base 2
    int l2_prefetch;               // sm_90a kernel: prefetch the rows of the pair after next to L2
};
static_assert(sizeof(SparsePrefillParams) == 144, "SparsePrefillParams must match the C mirror");

}  // namespace flashmla
}  // namespace mla
