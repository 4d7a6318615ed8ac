/* One fake-quant prefill problem for the tests (see fakequant_prefill_case.h). */
#include "util/fakequant_prefill_case.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/flashmla_ref.h"

#define LOG2E 1.4426950408889634
#define Q_PAD 8   /* extra elements per q token: a non-compact token stride */

static double round_elem(int fp16, double x) {
    return fp16 ? mlr_flashmla_fp16_to_f64(mlr_flashmla_f64_to_fp16(x))
                : mlr_flashmla_bf16_to_f64(mlr_flashmla_f64_to_bf16(x));
}
static uint16_t pack_elem(int fp16, double x) {
    return fp16 ? mlr_flashmla_f64_to_fp16(x) : mlr_flashmla_f64_to_bf16(x);
}

int mlt_pf_make(const mlt_pf_case *c, uint64_t seed, double amp, mlt_pf_run *r, char *msg,
                size_t size) {
    memset(r, 0, sizeof *r);
    for (int b = 0; b < c->nseq; b++)
        r->cu_q[b + 1] = r->cu_q[b] + c->q_lens[b], r->cu_k[b + 1] = r->cu_k[b] + c->k_lens[b];
    r->total_q = r->cu_q[c->nseq], r->total_k = r->cu_k[c->nseq];
    size_t nq = (size_t)r->total_q * c->heads * c->dqk, nk = (size_t)r->total_k * c->kv_heads * c->dqk;
    size_t nv = (size_t)r->total_k * c->kv_heads * c->dv, no = (size_t)r->total_q * c->heads * c->dv;
    r->q = malloc((nq + 1) * sizeof *r->q), r->k = malloc((nk + 1) * sizeof *r->k);
    r->v = malloc((nv + 1) * sizeof *r->v), r->out = malloc((no + 1) * sizeof *r->out);
    r->lse = malloc(((size_t)r->total_q * c->heads + 1) * sizeof *r->lse);
    if (!r->q || !r->k || !r->v || !r->out || !r->lse) return snprintf(msg, size, "out of host memory"), 1;
    mlt_rng g;
    mlt_rng_init(&g, seed);
    for (size_t i = 0; i < nq; i++) r->q[i] = round_elem(c->fp16, amp * (2 * mlt_rng_uniform(&g) - 1));
    for (size_t i = 0; i < nk; i++) r->k[i] = round_elem(c->fp16, 2 * mlt_rng_uniform(&g) - 1);
    for (size_t i = 0; i < nv; i++) r->v[i] = round_elem(c->fp16, 2 * mlt_rng_uniform(&g) - 1);
    size_t krow = (size_t)c->kv_heads * c->dqk, vrow = (size_t)c->kv_heads * c->dv;
    for (int b = 0; b < c->nseq; b++)
        for (int t = 0; t < c->k_lens[b]; t++) {
            size_t at = (size_t)r->cu_k[b] + t;
            if (c->data == MLT_PF_TIED && t % 8)
                memcpy(r->k + at * krow, r->k + (at - t % 8) * krow, krow * sizeof *r->k);
            for (size_t f = 0; c->data == MLT_PF_ONE_HOT && f < vrow; f++)
                r->v[at * vrow + f] = (long)(f % c->dv) == t ? 1.0 : 0.0;
        }
    return 0;
}

void mlt_pf_free(mlt_pf_run *r) {
    free(r->q), free(r->k), free(r->v), free(r->out), free(r->lse);
    memset(r, 0, sizeof *r);
}

static double amax_of(float a) { return a > 0 ? (double)a : NAN; }

void mlt_pf_cfg(const mlt_pf_case *c, mlr_fq_prefill_cfg *cfg) {
    mlr_fq_prefill_cfg x = {
        .heads = c->heads, .kv_heads = c->kv_heads, .dqk = c->dqk, .dv = c->dv,
        .causal = c->causal, .block_n = c->block_n ? c->block_n : 64, .carrier_fp16 = c->fp16,
        .qk_scale = (double)(float)(1.0 / sqrt((double)c->dqk) * LOG2E),
        .q_mode = c->q, .k_mode = c->k, .p_mode = c->p, .v_mode = c->v,
        .q_amax = amax_of(c->q_amax), .k_amax = amax_of(c->k_amax),
        .p_amax = c->p_amax > 0 ? (double)c->p_amax : 1.0, .v_amax = amax_of(c->v_amax),
        .sparsity_n = c->sparsity_n, .sparsity_m = c->sparsity_m, .sink = c->sink,
        .recent = c->recent,
    };
    *cfg = x;
}

int mlt_pf_oracle(const mlt_pf_case *c, const mlt_pf_run *r, int dense, double *out, double *lse) {
    mlr_fq_prefill_cfg cfg;
    mlt_pf_cfg(c, &cfg);
    for (int b = 0; b < c->nseq; b++) {
        const double *q = r->q + (size_t)r->cu_q[b] * c->heads * c->dqk;
        const double *k = r->k + (size_t)r->cu_k[b] * c->kv_heads * c->dqk;
        const double *v = r->v + (size_t)r->cu_k[b] * c->kv_heads * c->dv;
        double *o = out + (size_t)r->cu_q[b] * c->heads * c->dv, *l = lse + r->cu_q[b];
        int rc = dense ? mlr_fq_prefill_dense(&cfg, q, c->q_lens[b], k, v, c->k_lens[b], o, l, r->total_q)
                       : mlr_fq_prefill_seq(&cfg, q, c->q_lens[b], k, v, c->k_lens[b], o, l, r->total_q);
        if (rc) return rc;
    }
    return 0;
}

/* fp32 vs float64 scores. The device's score of a key is the fp32 dot product of the quantized q
 * and k rows (the same values as the oracle's) times the fp32 qk_scale: d products and sums in any
 * order and the scaling, each rounded to nearest or toward zero (u <= 2^-23), so
 *   |s32 - s64| <= gamma_(d+1) qk_scale sum_f |q_f k_f| < eps_j = (d + 2) 2^-23 mag_j
 * with mag from mlr_fq_prefill_scores (the float64 oracle's own error is ~2^-30 of that). Two keys
 * of a group can change order only if their float64 scores are within 2 eps, eps the largest
 * eps_j of the group. With x_N >= x_N1 the N-th and (N+1)-th largest float64 scores, a key above
 * x_N1 + 2 eps is kept by both and one below x_N - 2 eps dropped by both, for M = 4 (top N by
 * value, then index) and for M = 8 (s >= the N-th largest) alike; so a group with
 * x_N - x_N1 > 2 eps selects the same keys on both, and in the others the keys in
 * [x_N - 2 eps, x_N1 + 2 eps] are unsure. (Measured with the device's fmaf order on the
 * nm_exemptions_exact data: the actual difference stays >= 60 times below eps.) */
static void nm_row(const mlt_pf_case *c, const double *s, const double *mag, int k_len,
                   unsigned char *unsure, long *groups, long *ambiguous) {
    int m = c->sparsity_m, n = c->sparsity_n;
    for (int g = 0; g < k_len; g += m) {
        double x[8], eps = 0;
        for (int e = 0; e < m; e++) {
            x[e] = g + e < k_len ? s[g + e] : -INFINITY;
            if (g + e < k_len) eps = fmax(eps, (c->dqk + 2) * ldexp(mag[g + e], -23));
        }
        for (int a = 1; a < m; a++)         /* descending */
            for (int b = a; b > 0 && x[b] > x[b - 1]; b--) {
                double t = x[b];
                x[b] = x[b - 1], x[b - 1] = t;
            }
        if (x[n] == -INFINITY) continue;   /* nothing visible is dropped */
        ++*groups;
        if (x[n - 1] - x[n] > 2 * eps) continue;
        ++*ambiguous;
        for (int e = 0; e < m && g + e < k_len; e++)
            if (s[g + e] >= x[n - 1] - 2 * eps && s[g + e] <= x[n] + 2 * eps) unsure[g + e] = 1;
    }
}

int mlt_pf_nm_unsure(const mlt_pf_case *c, const mlt_pf_run *r, int kstride, unsigned char *unsure,
                     long *groups, long *ambiguous) {
    mlr_fq_prefill_cfg cfg;
    mlt_pf_cfg(c, &cfg);
    *groups = *ambiguous = 0;
    if (!c->sparsity_n) return 0;
    for (int b = 0; b < c->nseq; b++) {
        int ql = c->q_lens[b], kl = c->k_lens[b];
        size_t ns = (size_t)ql * c->heads * kl;
        double *s = malloc((ns + 1) * sizeof *s), *mag = malloc((ns + 1) * sizeof *mag);
        int rc = kl > kstride || !s || !mag ||
                 mlr_fq_prefill_scores(&cfg, r->q + (size_t)r->cu_q[b] * c->heads * c->dqk, ql,
                                       r->k + (size_t)r->cu_k[b] * c->kv_heads * c->dqk, kl, s, mag);
        for (size_t row = 0; !rc && row < (size_t)ql * c->heads; row++)
            nm_row(c, s + row * kl, mag + row * kl, kl,
                   unsure + ((size_t)r->cu_q[b] * c->heads + row) * kstride, groups, ambiguous);
        free(s), free(mag);
        if (rc) return -1;
    }
    return 0;
}

/* Device buffers of one call. */
typedef struct pdev {
    CUdeviceptr q, k, v, cq, ck, out, lse;
    mlt_tensor tq, tk, tv, tcq, tck, tout, tlse;
} pdev;

/* A host image of n values in the case's dtype (NaN where src is NULL). */
static uint16_t *pack(const mlt_pf_case *c, const double *src, size_t n) {
    uint16_t *h = malloc((n + 1) * 2);
    for (size_t i = 0; h && i < n; i++) h[i] = src ? pack_elem(c->fp16, src[i]) : 0xFFFF;
    return h;
}

static int upload(mla_runtime *rt, const mlt_pf_case *c, const mlt_pf_run *r, pdev *d) {
    size_t qrow = (size_t)c->heads * c->dqk, nq = (size_t)r->total_q * (qrow + Q_PAD);
    size_t nk = (size_t)r->total_k * c->kv_heads * c->dqk, nv = (size_t)r->total_k * c->kv_heads * c->dv;
    uint16_t *qh = pack(c, NULL, nq), *kh = pack(c, r->k, nk), *vh = pack(c, r->v, nv);
    int rc = 1;
    if (!qh || !kh || !vh) goto done;
    for (int t = 0; t < r->total_q; t++)
        for (size_t f = 0; f < qrow; f++) qh[t * (qrow + Q_PAD) + f] = pack_elem(c->fp16, r->q[t * qrow + f]);
    size_t ncu = (size_t)(c->nseq + 1) * 4;
    if (mlt_alloc(rt, nq * 2 + 2, &d->q) || mlt_alloc(rt, nk * 2 + 2, &d->k) ||
        mlt_alloc(rt, nv * 2 + 2, &d->v) || mlt_alloc(rt, ncu, &d->cq) || mlt_alloc(rt, ncu, &d->ck) ||
        mlt_upload(rt, d->q, qh, nq * 2) || mlt_upload(rt, d->k, kh, nk * 2) ||
        mlt_upload(rt, d->v, vh, nv * 2) || mlt_upload(rt, d->cq, r->cu_q, ncu) ||
        mlt_upload(rt, d->ck, r->cu_k, ncu))
        goto done;
    DLDataType et = c->fp16 ? (DLDataType){kDLFloat, 16, 1} : MLT_BF16;
    int64_t qs[3] = {r->total_q, c->heads, c->dqk}, qst[3] = {(int64_t)(qrow + Q_PAD), c->dqk, 1};
    int64_t ks[3] = {r->total_k, c->kv_heads, c->dqk}, vs[3] = {r->total_k, c->kv_heads, c->dv};
    int64_t cs[1] = {c->nseq + 1};
    mlt_tensor_init(&d->tq, d->q, et, 3, qs, qst);
    mlt_tensor_init(&d->tk, d->k, et, 3, ks, NULL);
    mlt_tensor_init(&d->tv, d->v, et, 3, vs, NULL);
    mlt_tensor_init(&d->tcq, d->cq, MLT_INT32, 1, cs, NULL);
    mlt_tensor_init(&d->tck, d->ck, MLT_INT32, 1, cs, NULL);
    rc = 0;
done:
    free(qh), free(kh), free(vh);
    return rc;
}

static void args_of(const mlt_pf_case *c, const mlt_pf_run *r, pdev *d,
                    mla_prefill_attention_args *a) {
    mla_prefill_attention_args_init(a);
    a->q = &d->tq.t, a->k = &d->tk.t, a->v = &d->tv.t;
    a->cu_seqlens_q = &d->tcq.t, a->cu_seqlens_k = &d->tck.t;
    int mq = 0;
    for (int b = 0; b < c->nseq; b++) mq = c->q_lens[b] > mq ? c->q_lens[b] : mq;
    a->max_seqlen_q = c->max_seqlen_q ? c->max_seqlen_q : mq;
    a->causal = c->causal, a->return_lse = 1;
    a->q_quant = c->q, a->k_quant = c->k, a->p_quant = c->p, a->v_quant = c->v;
    a->q_amax = c->q_amax > 0 ? c->q_amax : NAN, a->k_amax = c->k_amax > 0 ? c->k_amax : NAN;
    a->v_amax = c->v_amax > 0 ? c->v_amax : NAN;
    if (c->p_amax > 0) a->p_amax = c->p_amax;
    a->sparsity_n = c->sparsity_n, a->sparsity_m = c->sparsity_m ? c->sparsity_m : 4;
    a->dense_sink_tokens = c->sink, a->dense_recent_tokens = c->recent;
    a->block_n = c->block_n ? c->block_n : 64;
    (void)r;
}

static int run_call(mla_runtime *rt, const mlt_pf_case *c, mlt_pf_run *r, pdev *d, char *msg,
                    size_t size) {
    mla_prefill_attention_args a;
    args_of(c, r, d, &a);
    mla_prefill_attention_sizes sz;
    if (mla_prefill_attention_shape(&a, &sz) != MLA_OK)
        return snprintf(msg, size, "shape: %s", mla_last_error()), 1;
    size_t no = (size_t)sz.out[0] * sz.out[1] * sz.out[2], nl = (size_t)sz.lse[0] * sz.lse[1];
    if (mlt_alloc(rt, no * 2 + 2, &d->out) || mlt_alloc(rt, nl * 4 + 4, &d->lse) ||
        mlt_fill(rt, d->out, 0xFF, no * 2 + 2) || mlt_fill(rt, d->lse, 0xFF, nl * 4 + 4))
        return snprintf(msg, size, "device alloc of the outputs failed"), 1;
    mlt_tensor_init(&d->tout, d->out, d->tq.t.dtype, 3, sz.out, NULL);
    mlt_tensor_init(&d->tlse, d->lse, MLT_FP32, 2, sz.lse, NULL);
    a.out = &d->tout.t, a.lse = &d->tlse.t;
    mla_status s = mla_prefill_attention(rt, &a, NULL);
    if (s != MLA_OK) return snprintf(msg, size, "mla_prefill_attention: %s", mla_last_error()), 1;
    CUresult cr = mlt_sync(rt);
    if (cr) return snprintf(msg, size, "sync: %s", mlt_cu_name(rt, cr)), 1;
    uint16_t *ob = malloc(no * 2 + 2);
    float *lb = malloc(nl * 4 + 4);
    int bad = !ob || !lb || mlt_download(rt, ob, d->out, no * 2) || mlt_download(rt, lb, d->lse, nl * 4);
    for (size_t i = 0; !bad && i < no; i++)
        r->out[i] = c->fp16 ? mlr_flashmla_fp16_to_f64(ob[i]) : mlr_flashmla_bf16_to_f64(ob[i]);
    for (size_t i = 0; !bad && i < nl; i++) r->lse[i] = lb[i];
    free(ob), free(lb);
    return bad ? (snprintf(msg, size, "download failed"), 1) : 0;
}

int mlt_pf_device(mla_runtime *rt, const mlt_pf_case *c, mlt_pf_run *r, char *msg, size_t size) {
    pdev d;
    memset(&d, 0, sizeof d);
    int rc = upload(rt, c, r, &d);
    if (rc) snprintf(msg, size, "device alloc/upload failed");
    else rc = run_call(rt, c, r, &d, msg, size);
    CUdeviceptr all[] = {d.q, d.k, d.v, d.cq, d.ck, d.out, d.lse};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mlt_free(rt, all[i]);
    return rc;
}
