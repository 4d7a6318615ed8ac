/* One fake-quant decode problem for the GPU tests: random host data, a paged latent cache (pages
 * of the requests in shuffled or linear order, every other slot NaN, unused block-table entries
 * poisoned), the device buffers and the mla_attention_decode call, and the float64 oracle
 * (tests/ref/fakequant_ref.c) of the same schedule. Functions return 0 on success, else nonzero
 * with a message in msg. */
#ifndef MLAJIT_TESTS_UTIL_FAKEQUANT_CASE_H
#define MLAJIT_TESTS_UTIL_FAKEQUANT_CASE_H

#include <stddef.h>
#include <stdint.h>

#include "util/gpu.h"

#define MLT_FQ_MAX_BATCH 6

/* What a case varies (plain values: Criterion parameter). */
typedef struct mlt_fq_case {
    char name[80];
    int fp16;          /* cache (and q) float16, else bfloat16 */
    int q_fp32;        /* q passed as float32: 1 the carrier nvfp4_qdq(q, None) along features,
                          2 plain float32 values (not 16-bit exact: the tensor-core decode's
                          residual-q path) */
    int batch, heads;
    int lens[MLT_FQ_MAX_BATCH];
    int page, splits;
    int k, v, p;       /* MLA_QDQ_* */
    float k_amax, v_amax, p_amax;   /* 0: None (p: the default 1.0) */
    int out;           /* 0: the cache's dtype, 1 bfloat16, 2 float16, 3 float32 */
    int shuffle;       /* pages in random order */
} mlt_fq_case;

/* The host data of a case and the results of the device. */
typedef struct mlt_fq_run {
    int D, rank;
    double *q;          /* [batch, heads, D] as the kernel reads it */
    double *kv;         /* [batch][max_len][D] raw rows as the cache holds them */
    int max_len;
    double *out;        /* [batch, heads, rank] device result */
    double *lse;        /* [batch, heads] */
} mlt_fq_run;

/* Draws q and the raw rows from seed (amplitude `amp` for q). */
int mlt_fq_make(const mlt_fq_case *c, uint64_t seed, double amp, mlt_fq_run *r, char *msg,
                size_t size);
/* Runs mla_attention_decode of the case's data with page size c->page, on the GPU. */
int mlt_fq_device(mla_runtime *rt, const mlt_fq_case *c, uint64_t seed, mlt_fq_run *r, char *msg,
                  size_t size);
/* The oracle of request i: out [heads, rank], lse [heads]. */
int mlt_fq_oracle(const mlt_fq_case *c, const mlt_fq_run *r, int i, double *out, double *lse);
void mlt_fq_free(mlt_fq_run *r);

#endif
