/* Float64 CPU reference of one DSV4 layer (spec/dsv4.md §2): phase A (projections, norms, RoPE,
 * KV row write; on HCA layers the kv_gate GEMM, the ring and the c128 compressor with the
 * sequential semantics of A5), phase B (sparse attention over the planned SWA window plus the
 * compressed rows, one softmax, the sink) and phase C (mla_output_proj). Written from the spec,
 * not from any kernel.
 *
 * The layer is described by host arrays that mirror mla_attention_args / mla_output_proj_args:
 * bf16 tensors as uint16 bits, fp8 tensors and scale tensors as bytes, int32 and float32 as such.
 * The caches (kv_cache, c128_pool, kv_score_ring) are updated in place: give the reference its
 * own copies. The big GEMMs run on all host cores (pthreads). */
#ifndef MLAJIT_TESTS_REF_DSV4_REF_H
#define MLAJIT_TESTS_REF_DSV4_REF_H

#include <stdint.h>

#include "ref/dsv4_numerics.h"

typedef struct mlr_dsv4_layer {
    int T, H, G;
    int quant_act_in;           /* A1: group-32 quantize x and qr before wq_a/wkv and wq_b */
    /* mla_attention */
    const uint16_t *x;          /* hidden_states: row t at x + t * x_stride, H columns */
    int64_t x_stride;
    const int32_t *positions;   /* [T] */
    const float *freqs;         /* freqs_real [max_pos, 64] */
    double sm_scale, q_eps, kv_eps;
    const uint8_t *wq_a, *wq_a_sf;   /* [1024, H], SfAtom */
    const uint16_t *q_norm;          /* [1024] */
    const uint8_t *wq_b, *wq_b_sf;   /* [32768, 1024], SfAtom */
    const uint8_t *wkv, *wkv_sf;     /* [512, H], SfAtom */
    const uint16_t *kv_norm;         /* [512] */
    const int32_t *swa_loc;          /* [T] (< 0: no write) */
    const float *sink;               /* [64] or NULL */
    uint8_t *kv_cache;               /* updated in place */
    int64_t page_size, page_bytes;
    /* the plan's inputs (mla_attention_plan) */
    const int32_t *kv_indices;       /* [T, topk] with row stride kv_stride */
    int64_t kv_stride;
    int topk;
    const int32_t *topk_lengths;     /* [T] or NULL */
    int kv_run_step;
    /* HCA layers (wkv_gate != NULL) */
    const uint16_t *wkv_gate;        /* [1024, H] bf16 */
    float *ring;                     /* kv_score_ring [R * 128, 1024], updated in place */
    const int32_t *ring_row;         /* [T] */
    const float *ape;                /* [128, 512] */
    const uint16_t *c128_norm;       /* [512] */
    const float *c128_freqs;         /* [max_pos, 64] */
    const int32_t *c128_out_loc;     /* [T] */
    uint8_t *pool;                   /* c128_pool, updated in place */
    int64_t pool_page_bytes, pool_block;
    const int32_t *c128_page_table;  /* [T, max_pages] */
    int max_pages;
    const int32_t *c128_attn_len;    /* [T] */
    /* mla_output_proj */
    const uint8_t *wo_a, *wo_a_sf;   /* [2H, 32768 / G], SfAtom */
    const uint8_t *wo_b, *wo_b_sf;   /* [H, 2H], SfAtom */
} mlr_dsv4_layer;

/* What the reference computes; arrays malloc'd by mlr_dsv4_attention, freed by
 * mlr_dsv4_result_free. */
typedef struct mlr_dsv4_result {
    int T;
    double *q;        /* [T, 32768] wq_b output as staged in q_or_x (bf16 values) */
    double *O;        /* [T, 32768] normalized O with the sink, before the inverse RoPE */
    double *lse;      /* [T, 64] natural-log LSE without the sink (-inf: no rows) */
    int32_t *plan;    /* [T, 4] the plan rows used */
    int *rows;        /* [T] rows attended (SWA + compressed) */
    double *out;      /* [T, H] bf16 values, by mlr_dsv4_output_proj (NULL until then) */
} mlr_dsv4_result;

/* Phases A and B of the layer: fills res (T, q, O, lse, plan, rows) and updates L->kv_cache,
 * and on HCA layers L->ring and L->pool. Returns 0, or -1 when out of memory. */
int mlr_dsv4_attention(const mlr_dsv4_layer *L, mlr_dsv4_result *res);
/* Phase C from O [T, 32768]: res->out = bf16(mxq(bf16(grouped wo_a(mxq(bf16(rope^-1(O)))))) @
 * wo_b). Returns 0, or -1 when out of memory. */
int mlr_dsv4_output_proj(const mlr_dsv4_layer *L, const double *O, mlr_dsv4_result *res);
void mlr_dsv4_result_free(mlr_dsv4_result *res);

/* ---- pieces, also used by the unit tests ---------------------------------------------------- */

/* Attention of one head over n rows [n, 512] (K == V) for query q[512] (§2.4): O[512] and the
 * LSE without the sink; sink NULL for none. n == 0 gives O = 0 and lse = -inf. */
void mlr_dsv4_attend(const double *q, const double *rows, int n, double sm_scale,
                     const double *sink, double *O, double *lse);
/* Split-KV combine of §2.4: S normalized partials Os [S, 512] with their lse (-inf: empty) ->
 * O[512], with the sink when given. */
void mlr_dsv4_combine(int S, const double *Os, const double *lses, const double *sink,
                      double *O);
/* Dequantized weight row n of an fp8 [N, Kw] weight with SfAtom scales (§2.1). */
void mlr_dsv4_weight_row(const uint8_t *w, const uint8_t *sf, int64_t n, int64_t Kw, double *row);
/* out[t, n] = sum_k a[t, k] * Wd[n, k] for t < T, n < N (float64, unrounded); a is [T, Kw]. */
void mlr_dsv4_gemm_fp8(const double *a, int T, const uint8_t *w, const uint8_t *sf, int64_t N,
                       int64_t Kw, double *out);

/* Runs fn(i, ctx) for i in [0, n) on up to the host's core count of threads. */
void mlr_parallel_for(int64_t n, void (*fn)(int64_t i, void *ctx), void *ctx);

#endif
