/* One fake-quant prefill problem for the tests: random packed q/k/v (or structured data: tied
 * scores, one-hot v), the device call of mla_prefill_attention (q with a padded token stride,
 * outputs and padding poisoned with NaN) and the float64 oracle of the same schedule
 * (tests/ref/fakequant_ref.c). Functions return 0 on success, else nonzero with a message. */
#ifndef MLAJIT_TESTS_UTIL_FAKEQUANT_PREFILL_CASE_H
#define MLAJIT_TESTS_UTIL_FAKEQUANT_PREFILL_CASE_H

#include <stddef.h>
#include <stdint.h>

#include "ref/fakequant_ref.h"
#include "util/gpu.h"

#define MLT_PF_MAX_SEQ 6

/* Data kinds. */
enum {
    MLT_PF_RANDOM = 0,  /* uniform q (amplitude amp), k, v in [-1, 1] */
    MLT_PF_TIED = 1,    /* k rows equal within each group of 8 keys: every N:M group ties */
    MLT_PF_ONE_HOT = 2, /* v[t, :, f] = (f == t): out[i, h, j] is the weight of key j (dv >= k) */
};

/* What a case varies (plain values: a Criterion parameter). */
typedef struct mlt_pf_case {
    char name[96];
    int fp16;                          /* q/k/v/out float16, else bfloat16 */
    int heads, kv_heads, dqk, dv;
    int nseq;
    int q_lens[MLT_PF_MAX_SEQ], k_lens[MLT_PF_MAX_SEQ];
    int causal;
    int q, k, p, v;                    /* MLA_QDQ_* */
    float q_amax, k_amax, p_amax, v_amax; /* 0: None (p: the default 1.0) */
    int sparsity_n, sparsity_m, sink, recent;
    int block_n;                       /* 0: 64 */
    int max_seqlen_q;                  /* 0: the true maximum; else passed as given */
    int data;                          /* MLT_PF_* */
} mlt_pf_case;

/* The host data of a case and the device's results. */
typedef struct mlt_pf_run {
    int total_q, total_k;
    int cu_q[MLT_PF_MAX_SEQ + 1], cu_k[MLT_PF_MAX_SEQ + 1];
    double *q, *k, *v;  /* packed [total, heads, d] as the kernel reads them */
    double *out;        /* [total_q, heads, dv] device result */
    double *lse;        /* [heads, total_q] */
} mlt_pf_run;

int mlt_pf_make(const mlt_pf_case *c, uint64_t seed, double amp, mlt_pf_run *r, char *msg,
                size_t size);
/* Runs mla_prefill_attention (return_lse 1) on the GPU; fills r->out and r->lse. */
int mlt_pf_device(mla_runtime *rt, const mlt_pf_case *c, mlt_pf_run *r, char *msg, size_t size);
/* The oracle's configuration of a case (qk_scale as the kernel gets it). */
void mlt_pf_cfg(const mlt_pf_case *c, mlr_fq_prefill_cfg *cfg);
/* The oracle (dense: the plain reference instead) of every sequence, in the device's layouts. */
int mlt_pf_oracle(const mlt_pf_case *c, const mlt_pf_run *r, int dense, double *out, double *lse);
/* The N:M choices that fp32 scores may legitimately make differently from the oracle's float64
 * ones (the bound is in the .c). unsure[(t * heads + h) * kstride + j] (kstride >= every k_len)
 * is set to 1 for key j (sequence-relative) of packed query token t, head h, when the gap between
 * the N-th and (N+1)-th largest score of its group is within the bound and the key's score lies
 * between them up to the bound; other entries are left alone. *groups counts the groups (over all
 * rows) whose top N leaves out a visible key (dense or not), *ambiguous those of them with such a
 * gap. 0 on success (also without sparsity: no groups), -1 when out of memory or a k_len exceeds
 * kstride. */
int mlt_pf_nm_unsure(const mlt_pf_case *c, const mlt_pf_run *r, int kstride, unsigned char *unsure,
                     long *groups, long *ambiguous);
void mlt_pf_free(mlt_pf_run *r);

#endif
