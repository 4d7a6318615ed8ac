/* Float64 references of the FlashMLA-compatible sparse decode and sparse prefill (spec/flashmla.md
 * §1.3, 1.4, 1.6, 1.9, 2.2, 2.3), written from the spec, not from the kernels. Comparison and
 * number formats: tests/ref/flashmla_ref.h. */
#ifndef MLAJIT_TESTS_REF_FLASHMLA_SPARSE_REF_H
#define MLAJIT_TESTS_REF_FLASHMLA_SPARSE_REF_H

#include <stddef.h>
#include <stdint.h>

#define MLR_SPARSE_ROW_BYTES 656   /* 512 e4m3, 4 float32 scales, 64 bfloat16 RoPE */

/* Element e < 576 of a 656-byte cache row, dequantized: e4m3[e] * scale[e / 128] for e < 512,
 * rope[e - 512] above. */
double mlr_flashmla_sparse_kv(const uint8_t *row, int e);

/* One sparse decode call. Strides in elements (k_cache: bytes). */
typedef struct mlr_sparse_decode_problem {
    int b, s_q, h_q, topk, page_size;
    int64_t num_blocks;
    const uint16_t *q;             /* [b, s_q, h_q, 576] bfloat16 */
    int64_t q_stride[3];
    const uint8_t *k_cache;        /* block blk, row r at k_cache + blk * k_stride_block + 656 r */
    int64_t k_stride_block;
    const int32_t *indices;        /* [b, s_q, topk], entry k at i * i_stride[0] + j * i_stride[1] + k */
    int64_t i_stride[2];
    const int32_t *topk_length;    /* [b] or NULL */
    const float *attn_sink;        /* [h_q] or NULL */
    double softmax_scale;
    int threads;                   /* worker threads, 0: one per online CPU */
} mlr_sparse_decode_problem;

/* out [b, s_q, h_q, 512] and lse [b, h_q, s_q] (natural log), compact:
 *   valid entry k < clamp(topk_length[i], 0, topk): 0 <= idx < num_blocks * page_size;
 *   s_k = softmax_scale * q . K_idx, lse = ln sum exp(s_k), out = sum exp(s_k - lse) K_idx[:512],
 *   sink: out *= 1 / (1 + exp(sink[h] - lse)); no valid entry: out 0, lse +inf. */
void mlr_flashmla_sparse_decode(const mlr_sparse_decode_problem *p, double *out, double *lse);

/* One sparse prefill call. Strides in elements. */
typedef struct mlr_sparse_prefill_problem {
    int s_q, h_q, d_qk, topk, s_kv;
    const uint16_t *q;             /* [s_q, h_q, d_qk] bfloat16 */
    int64_t q_stride[2];
    const uint16_t *kv;            /* [s_kv, 1, d_qk] bfloat16, row t at kv + t * kv_stride */
    int64_t kv_stride;
    const int32_t *indices;        /* [s_q, 1, topk], entry k of token i at i * i_stride + k */
    int64_t i_stride;
    const int32_t *topk_length;    /* [s_q] or NULL */
    const float *attn_sink;        /* [h_q] or NULL */
    double sm_scale;
    int natural_log;               /* 0: base 2 (the seed), 1: natural log */
    int threads;
} mlr_sparse_prefill_problem;

/* out [s_q, h_q, 512], max_logits and lse [s_q, h_q], compact:
 *   valid entry: 0 <= idx < s_kv; P_k = sm_scale * q . kv_idx (natural units);
 *   base 2: max_logits = max P_k * log2 e, lse = log2 sum exp(P_k); natural: max P_k, ln sum;
 *   out = sum exp(P_k - lse_ln) kv_idx[:512], sink: out *= 1 / (1 + exp(sink[h] - lse_ln));
 *   no valid entry: out 0, max_logits -inf, lse -inf (base 2) or +inf (natural). */
void mlr_flashmla_sparse_prefill(const mlr_sparse_prefill_problem *p, double *out,
                                 double *max_logits, double *lse);

#endif
