/* Random DSV4 layer cases for the GPU tests (spec/dsv4.md §5): the host arrays of one
 * mla_attention + mla_output_proj call with real windows, the float64 reference of it, the
 * device copies and DLTensors, and the comparisons (measured errors, for printing and asserting).
 *
 * A case is drawn from two seeds: the structure seed fixes T, the requests, positions, slots,
 * windows, ring rows and pool pages (identical for an SWA and an HCA layer of the same knobs, so
 * layers can share one plan per kind); the content seed fixes weights, inputs, the sink and the
 * prior cache and ring contents. Unused cache and pool bytes are 0xFF (NaN in fp8, ue8m0 and
 * bf16): the reference never reads them, and a kernel that does produces NaN. */
#ifndef MLAJIT_TESTS_UTIL_DSV4_CASE_H
#define MLAJIT_TESTS_UTIL_DSV4_CASE_H

#include <stdint.h>

#include "mlajit/mlajit.h"
#include "ref/dsv4_ref.h"
#include "util/gpu.h"

enum { MLT_DSV4_LINEAR = 0, MLT_DSV4_RING = 1 };

/* The knobs of a case: plain values (part of Criterion parameter structs). */
typedef struct mlt_dsv4_knobs {
    int hca;         /* 1: HCA layer (kv_gate, ring, compressor, compressed rows) */
    int H, G;        /* hidden size, wo_a groups */
    int T;           /* tokens; with draft > 0 rounded down to a multiple of draft (>= draft) */
    int draft;       /* draft_tokens: tokens per request; 0: decode (one token per request) */
    int multi;       /* with draft 0: requests of 1..4 consecutive tokens (layout unknown) */
    int page_size;   /* kv_cache rows per page (16, 64: windows cut to one row) */
    int layout;      /* MLT_DSV4_LINEAR (slots by position) or MLT_DSV4_RING (128-slot rings) */
    int step;        /* kv_run_step, +1 or -1 */
    int sink;        /* attn_sink given */
    int wide;        /* hidden_states is a column slice of a wider buffer */
    int padding;     /* some requests are padding tokens (L = 0, no KV write) */
    int fire;        /* request 0 (and others at random) hits position % 128 == 127 */
    int short_pos;   /* some requests start below position 127 (windows shorter than 128) */
    int pool_block;  /* c128_page_block (HCA), e.g. 16 or 64 */
} mlt_dsv4_knobs;

/* The host side of one layer call. Owned arrays, freed by mlt_dsv4_case_free. */
typedef struct mlt_dsv4_case {
    mlt_dsv4_knobs k;
    int T, H, G, n_requests;
    int *req_start;                  /* [n_requests + 1] first token of each request, then T */
    uint64_t structure_seed, content_seed;
    /* mla_attention */
    uint16_t *x;                     /* [T, x_cols]; hidden_states = columns [x_col0, + H) */
    int64_t x_cols, x_col0;
    int32_t *positions;
    int max_pos;
    float *freqs, *c128_freqs;       /* [max_pos, 64] each (different tables on purpose) */
    float sm_scale, q_eps, kv_eps;
    uint8_t *wq_a, *wq_a_sf, *wq_b, *wq_b_sf, *wkv, *wkv_sf;
    uint16_t *q_norm, *kv_norm;
    int32_t *swa_loc;
    float *sink;                     /* [64], NULL without sink */
    uint8_t *kv_cache;               /* initial contents [num_pages, page_bytes] */
    int64_t num_pages, page_bytes;
    /* mla_attention_plan */
    int32_t *kv_indices;             /* [T, 128], -1 past each length */
    int topk;
    int32_t *topk_lengths;
    /* HCA */
    uint16_t *wkv_gate, *c128_norm;
    float *ring, *ape;               /* ring initial contents [ring_rows, 1024] */
    int64_t ring_rows;
    int32_t *ring_row, *c128_out_loc, *c128_page_table, *c128_attn_len;
    uint8_t *pool;                   /* initial contents [pool_pages, pool_page_bytes] */
    int64_t pool_pages, pool_page_bytes;
    int pool_block, max_pages;
    /* mla_output_proj */
    uint8_t *wo_a, *wo_a_sf, *wo_b, *wo_b_sf;
} mlt_dsv4_case;

/* Draws a case. Returns 0, or -1 when out of host memory. */
int mlt_dsv4_case_make(const mlt_dsv4_knobs *k, uint64_t structure_seed, uint64_t content_seed,
                       mlt_dsv4_case *c);
void mlt_dsv4_case_free(mlt_dsv4_case *c);
/* One line describing the drawn case (T, requests, fires, padding, rows), for logs. */
void mlt_dsv4_case_describe(const mlt_dsv4_case *c, char *buf, size_t size);

/* The reference's view of the case over the given cache copies (updated by the reference). */
void mlt_dsv4_layer_of(const mlt_dsv4_case *c, uint8_t *kv_cache, float *ring, uint8_t *pool,
                       mlr_dsv4_layer *L);

/* The reference's results and its copies of the caches after the call. */
typedef struct mlt_dsv4_expect {
    mlr_dsv4_result res;             /* q, O, lse, plan, rows; out when with_out */
    uint8_t *kv_cache, *pool;
    float *ring;
} mlt_dsv4_expect;

/* Runs the float64 reference (quant_act_in on, §5), with phase C when with_out. Returns 0, or
 * -1 when out of host memory. */
int mlt_dsv4_expect_make(const mlt_dsv4_case *c, int with_out, mlt_dsv4_expect *e);
void mlt_dsv4_expect_free(mlt_dsv4_expect *e);

/* ---- device side -------------------------------------------------------------------------- */

/* Device buffers and tensors of one layer. Do not copy (the tensors point into it). */
typedef struct mlt_dsv4_dev {
    CUdeviceptr x, positions, freqs, c128_freqs, wq_a, wq_a_sf, q_norm, wq_b, wq_b_sf, wkv, wkv_sf,
        kv_norm, swa_loc, sink, kv_cache, kv_indices, topk_lengths, wkv_gate, ring, ring_row, ape,
        c128_norm, c128_out_loc, pool, page_table, attn_len, wo_a, wo_a_sf, wo_b, wo_b_sf,
        q_or_x, out;
    mlt_tensor t_x, t_positions, t_freqs, t_c128_freqs, t_wq_a, t_wq_a_sf, t_q_norm, t_wq_b,
        t_wq_b_sf, t_wkv, t_wkv_sf, t_kv_norm, t_swa_loc, t_sink, t_kv_cache, t_kv_indices,
        t_topk_lengths, t_wkv_gate, t_ring, t_ring_row, t_ape, t_c128_norm, t_c128_out_loc,
        t_pool, t_page_table, t_attn_len, t_wo_a, t_wo_a_sf, t_wo_b, t_wo_b_sf, t_q_or_x, t_out,
        t_ws;
    int ws_max_tokens;               /* max_tokens the workspace was sized for (its regions are
                                        laid out for the launch's T, mla__dsv4_layout(T, H, G)) */
    CUdeviceptr ws_ptr;
} mlt_dsv4_dev;

/* Allocates and uploads every tensor of the case (outputs poisoned with NaN). The workspace is
 * set separately with mlt_dsv4_dev_set_workspace. Returns the first failing CUresult. */
CUresult mlt_dsv4_upload(mla_runtime *rt, const mlt_dsv4_case *c, mlt_dsv4_dev *d);
/* Restores the initial kv_cache, ring and pool and fills q_or_x and out with NaN (0xFF). */
CUresult mlt_dsv4_reset(mla_runtime *rt, const mlt_dsv4_case *c, mlt_dsv4_dev *d);
void mlt_dsv4_dev_free(mla_runtime *rt, mlt_dsv4_dev *d);
/* Points d's workspace tensor at a workspace sized for max_tokens. */
void mlt_dsv4_dev_set_workspace(mlt_dsv4_dev *d, const DLTensor *ws, int max_tokens);
/* Weight tensors for mla_workspace (wo_a / wo_b are shape-only stand-ins where H > 4096). */
void mlt_dsv4_weights(const mlt_dsv4_dev *d, const DLTensor *w[4]);

/* The arguments of the three calls over d's tensors. */
void mlt_dsv4_attention_args(const mlt_dsv4_case *c, const mlt_dsv4_dev *d,
                             mla_attention_args *a);
void mlt_dsv4_output_proj_args(const mlt_dsv4_case *c, const mlt_dsv4_dev *d,
                               mla_output_proj_args *a);
mla_status mlt_dsv4_plan(mla_runtime *rt, const mlt_dsv4_case *c, const mlt_dsv4_dev *d,
                         CUstream stream);

/* ---- results and comparisons -------------------------------------------------------------- */

/* What came back from the device after a call. */
typedef struct mlt_dsv4_got {
    uint16_t *q_or_x;                /* [T, 32768] */
    uint16_t *out;                   /* [T, H] (with_out) */
    float *part_o, *part_lse;        /* split tokens' partials (T <= 16): [T][kv_splits][64] */
    int kv_splits;                   /* KV parts per token (mla__dsv4_kv_splits), 0: unsplit */
    uint8_t *kv_cache, *pool;
    float *ring;
} mlt_dsv4_got;

CUresult mlt_dsv4_download(mla_runtime *rt, const mlt_dsv4_case *c, const mlt_dsv4_dev *d,
                           int with_out, int with_partials, mlt_dsv4_got *g);
void mlt_dsv4_got_free(mlt_dsv4_got *g);

/* Measured errors of a call against the reference. Relative L2 errors are ||got - ref|| /
 * ||ref||; per-token (or per-row) ones are the worst over tokens with a nonzero reference. */
/* The element of the written rows furthest past its allowance (ratio |got - ref| / allowance; 0
 * when every element is within it): for the failure messages. */
typedef struct mlt_dsv4_off_elem {
    double ratio, got, ref, allow, amax;  /* amax: of the element's block in the reference row */
    int64_t slot;
    int index;                            /* 0..511; -1: a block scale more than one exponent off */
} mlt_dsv4_off_elem;

typedef struct mlt_dsv4_errors {
    double O, O_token;               /* O: q_or_x (unsplit) or the combined partials (split) */
    double q_split, out, out_token;  /* q_or_x of split tokens (left as q); out */
    double out_own, out_own_token;   /* out vs the reference phase C applied to the kernel's
                                        own O (isolates mla_output_proj from the attention) */
    double kv_row, pool_row, ring_row; /* worst decoded new KV row, fired pool row, ring row */
    long long nan;                   /* NaN / Inf values in O, q_or_x, out */
    long long zero_bad;              /* nonzero O or out where the reference is exactly 0 */
    long long kv_stray, pool_stray, ring_stray; /* changed bytes / rows nobody should write */
    long long kv_off, pool_off;      /* decoded elements of the new KV / fired pool rows more than
                                        one rounding step from the reference's (cache_errors) */
    mlt_dsv4_off_elem kv_worst, pool_worst;
    int split;                       /* 1: the launch split its tokens' KV */
} mlt_dsv4_errors;

/* Elements of the KV row in slot of cache got more than one rounding step from that of ref (a, b:
 * the two rows decoded by mlr_decode_kv_row; a block scale more than one exponent apart counts its
 * 64 elements). worst (or NULL): updated where an element of this row goes further past. */
long long mlt_dsv4_row_off_steps(const uint8_t *got, const uint8_t *ref, int64_t B, int64_t stride,
                                 int64_t slot, const double *a, const double *b,
                                 mlt_dsv4_off_elem *worst);

void mlt_dsv4_compare(const mlt_dsv4_case *c, const mlt_dsv4_expect *e, const mlt_dsv4_got *g,
                      int with_out, mlt_dsv4_errors *err);
/* Largest relative L2 difference between two downloads (q_or_x, out, caches decoded), and
 * whether they are bit-identical; for "same results as separate calls". */
double mlt_dsv4_got_diff(const mlt_dsv4_case *c, const mlt_dsv4_got *a, const mlt_dsv4_got *b,
                         int with_out, int *identical);
/* Relative L2 error ||a - b|| / ||b|| of n values. */
double mlt_rel_l2(const double *a, const double *b, int64_t n);

#endif
