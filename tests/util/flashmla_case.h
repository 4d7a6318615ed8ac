/* One FlashMLA-compatible dense decode problem for the GPU tests: random host data shaped like
 * FlashMLA's own tests (spec/flashmla.md §2.1), its device buffers and DLPack views, the
 * mla_get_metadata + mla_flash_with_kvcache calls, and the float64 results of both the device and
 * the reference.
 *
 * Poison: every k_cache element that is not a key of some request (slots past a length, padding
 * between strided rows, unused pages) is NaN, unused block-table entries are 2147480000, the
 * padding of strided q is NaN, and out, softmax_lse and the workspace are NaN-filled before a
 * call. Functions return 0 on success, else nonzero with a message in msg. */
#ifndef MLAJIT_TESTS_UTIL_FLASHMLA_CASE_H
#define MLAJIT_TESTS_UTIL_FLASHMLA_CASE_H

#include <stddef.h>
#include <stdint.h>

#include "ref/flashmla_ref.h"
#include "util/gpu.h"

#define MLT_FP16 ((DLDataType){kDLFloat, 16, 1})
#define MLT_FM_BT_POISON 2147480000

/* What a case varies (plain values: Criterion parameter). */
typedef struct mlt_fm_case {
    char name[64];
    int kv;            /* MLR_FLASHMLA_BF16 / FP16 / E4M3 (q, k_cache; out bf16 for e4m3) */
    int b, s_q, s_k, h_q, h_kv, page;
    int varlen;        /* lengths max(round(N(s_k, s_k / 2)), s_q), else s_k */
    int zeros;         /* this many random requests get length 0 */
    int causal;
    int strided;       /* padded strides of q, k_cache, block_table and out */
    int parts;         /* num_sm_parts; 0: mla_get_metadata_shape's */
    int split_tokens;  /* batch-invariant mode when > 0 */
    int capacity;      /* > 0: every request has pages and valid keys for this many keys (so its
                          length may grow up to it: graph replays) */
    float scale;       /* softmax_scale; 0: None (576^-0.5) */
    float ramp;        /* > 0: the RoPE columns (512..575, not in V) of key t of a request scaled
                          by 1 + ramp t / n (n its keys), so that with a large scale the logits
                          grow along the sequence and the running max jumps by more than the lazy
                          rescaling's threshold several times (V keeps its magnitude) */
} mlt_fm_case;

/* Host data of a case. */
typedef struct mlt_fm_data {
    mlt_fm_case c;
    uint64_t seed;
    int32_t *seqlens;                 /* [b] */
    int32_t *block_table;             /* [b, bt_stride], max_blocks used columns */
    int64_t bt_stride;
    int max_blocks, num_blocks;
    void *q, *k;                      /* element buffers of q_elems / k_elems */
    size_t q_elems, k_elems, elem;    /* elem: bytes per element */
    int64_t q_stride[4], k_stride[4], o_stride[4];
    size_t o_elems;
    float descale[2];                 /* fp8: descale_q, descale_k; else 1 */
} mlt_fm_data;

/* Draws a case's data from seed. */
int mlt_fm_data_make(const mlt_fm_case *c, uint64_t seed, mlt_fm_data *d, char *msg, size_t size);
void mlt_fm_data_free(mlt_fm_data *d);
/* The reference problem of the data (pointers into d). */
void mlt_fm_problem(const mlt_fm_data *d, mlr_flashmla_problem *p);

/* Device side of a case. */
typedef struct mlt_fm_dev {
    CUdeviceptr q, k, bt, seqlens, sched, splits, out, lse, ws, descale;
    int parts, max_splits;
    size_t ws_bytes;
    mlt_tensor tq, tk, tbt, tseq, tsched, tsplits, tout, tlse, tws, tdq, tdk;
    mla_get_metadata_args meta;
    mla_flash_with_kvcache_args args;
} mlt_fm_dev;

/* Allocates and uploads (q, k_cache, block_table, cache_seqlens, descales), sizes the schedule
 * and the workspace, NaN-fills out, softmax_lse, workspace and schedule, fills meta and args. */
int mlt_fm_dev_create(mla_runtime *rt, const mlt_fm_data *d, mlt_fm_dev *v, char *msg, size_t size);
void mlt_fm_dev_destroy(mla_runtime *rt, mlt_fm_dev *v);
/* Uploads d->seqlens again (after the caller changed them). */
int mlt_fm_upload_seqlens(mla_runtime *rt, const mlt_fm_data *d, const mlt_fm_dev *v, char *msg,
                          size_t size);
/* NaN-fills out, softmax_lse and the workspace. */
int mlt_fm_poison_outputs(mla_runtime *rt, const mlt_fm_data *d, const mlt_fm_dev *v, char *msg,
                          size_t size);
/* mla_get_metadata then mla_flash_with_kvcache on stream. */
int mlt_fm_run(mla_runtime *rt, mlt_fm_dev *v, CUstream stream, char *msg, size_t size);

/* Results in float64: out [b, s_q, h_q, 512] compact, lse [b, h_q, s_q]. */
typedef struct mlt_fm_result {
    double *out, *lse;
    size_t n_out, n_lse;
    int padding_written;   /* strided out: 1 if a padding element is no longer NaN */
} mlt_fm_result;

int mlt_fm_result_alloc(const mlt_fm_data *d, mlt_fm_result *r);
void mlt_fm_result_free(mlt_fm_result *r);
/* Synchronizes and downloads the device results. */
int mlt_fm_download(mla_runtime *rt, const mlt_fm_data *d, const mlt_fm_dev *v, mlt_fm_result *r,
                    char *msg, size_t size);
/* The float64 reference of the data. */
void mlt_fm_reference(const mlt_fm_data *d, mlt_fm_result *r);
/* Compares with the spec's tolerances (out rounded to its dtype first); 0 if close. fp8 data
 * (values of std 1 instead of 0.1, out scaled by descale_k) get the out abs tolerance scaled by
 * 10 descale_k and FlashMLA's fp8 cosine bound (1e-4, spec §2): its out errors (16-bit P times
 * V) scale with |V|. */
int mlt_fm_compare(const mlt_fm_data *d, const mlt_fm_result *got, const mlt_fm_result *want,
                   char *msg, size_t size);

#endif
