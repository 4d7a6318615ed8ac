/* Float64 references of the sparse decode and prefill (see flashmla_sparse_ref.h). One task per
 * query token, shared by pthreads through an atomic counter. */
#include "ref/flashmla_sparse_ref.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ref/flashmla_ref.h"

#define DV 512
#define DMAX 576

double mlr_flashmla_sparse_kv(const uint8_t *row, int e) {
    if (e >= 512) {
        uint16_t v;
        memcpy(&v, row + 528 + 2 * (e - 512), 2);
        return mlr_flashmla_bf16_to_f64(v);
    }
    float scale;
    memcpy(&scale, row + 512 + 4 * (e / 128), 4);
    return mlr_flashmla_e4m3_to_f64(row[e]) * (double)scale;
}

/* The attention of one query token: h_q rows of q (d dims) over n gathered keys, natural-log
 * results; sink may be NULL. Writes out rows [h_q][512], mx[h], lse[h] (-inf for no key). */
typedef struct token_job {
    int h_q, d, n;
    const double *q;      /* [h_q][d] */
    const double *keys;   /* [n][d] */
    double scale;
    const float *sink;
} token_job;

static void attend_token(const token_job *t, double *s, double *out, double *mx, double *lse) {
    for (int h = 0; h < t->h_q; h++) {
        double m = -INFINITY, sum = 0;
        for (int k = 0; k < t->n; k++) {
            double acc = 0;
            for (int e = 0; e < t->d; e++) acc += t->q[h * t->d + e] * t->keys[(int64_t)k * t->d + e];
            s[k] = acc * t->scale;
            m = s[k] > m ? s[k] : m;
        }
        for (int k = 0; k < t->n; k++) sum += exp(s[k] - m);
        double *o = out + (int64_t)h * DV;
        memset(o, 0, DV * sizeof *o);
        mx[h] = m;
        lse[h] = t->n ? m + log(sum) : -INFINITY;
        if (!t->n) continue;
        double f = t->sink ? 1.0 / (1.0 + exp((double)t->sink[h] - lse[h])) : 1.0;
        for (int k = 0; k < t->n; k++) {
            double w = exp(s[k] - lse[h]) * f;
            for (int e = 0; e < DV; e++) o[e] += w * t->keys[(int64_t)k * t->d + e];
        }
    }
}

static int entry_count(const int32_t *topk_length, int i, int topk) {
    if (!topk_length) return topk;
    int n = topk_length[i];
    return n < 0 ? 0 : n > topk ? topk : n;
}

/* A pool of tasks run by threads; run(ctx, task, scratch) does one. */
typedef struct pool {
    int tasks, next;
    size_t scratch_doubles;
    void (*run)(const void *ctx, int task, double *scratch);
    const void *ctx;
} pool;

static void *pool_worker(void *arg) {
    pool *p = arg;
    double *scratch = malloc(p->scratch_doubles * sizeof *scratch);
    if (!scratch) abort();
    for (int t; (t = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED)) < p->tasks;)
        p->run(p->ctx, t, scratch);
    free(scratch);
    return NULL;
}

static void pool_run(pool *p, int threads) {
    if (threads <= 0) threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    pthread_t th[64];
    int started = 0;
    for (; started < threads; started++)
        if (pthread_create(&th[started], NULL, pool_worker, p) != 0) break;
    if (started == 0) pool_worker(p);
    for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
}

/* ---- decode ----------------------------------------------------------------------------------- */

typedef struct decode_ctx {
    const mlr_sparse_decode_problem *p;
    double *out, *lse;
} decode_ctx;

static void decode_task(const void *arg, int task, double *scratch) {
    const decode_ctx *c = arg;
    const mlr_sparse_decode_problem *p = c->p;
    int i = task / p->s_q, j = task % p->s_q, n = 0;
    double *q = scratch, *keys = q + (size_t)p->h_q * DMAX, *s = keys + (size_t)p->topk * DMAX;
    double *mx = s + p->topk, *lse = mx + p->h_q;
    for (int h = 0; h < p->h_q; h++)
        for (int e = 0; e < DMAX; e++)
            q[h * DMAX + e] = mlr_flashmla_bf16_to_f64(p->q[i * p->q_stride[0] + j * p->q_stride[1] +
                                                           h * p->q_stride[2] + e]);
    const int32_t *list = p->indices + i * p->i_stride[0] + j * p->i_stride[1];
    int count = entry_count(p->topk_length, i, p->topk);
    for (int k = 0; k < count; k++) {
        int64_t idx = list[k];
        if (idx < 0 || idx >= p->num_blocks * p->page_size) continue;
        const uint8_t *row = p->k_cache + (idx / p->page_size) * p->k_stride_block +
                             (idx % p->page_size) * MLR_SPARSE_ROW_BYTES;
        for (int e = 0; e < DMAX; e++) keys[(int64_t)n * DMAX + e] = mlr_flashmla_sparse_kv(row, e);
        n++;
    }
    token_job t = {p->h_q, DMAX, n, q, keys, p->softmax_scale, p->attn_sink};
    double *out = c->out + (int64_t)task * p->h_q * DV;
    attend_token(&t, s, out, mx, lse);
    for (int h = 0; h < p->h_q; h++)
        c->lse[((int64_t)i * p->h_q + h) * p->s_q + j] = n ? lse[h] : INFINITY;
}

void mlr_flashmla_sparse_decode(const mlr_sparse_decode_problem *p, double *out, double *lse) {
    decode_ctx c = {p, out, lse};
    pool pl = {p->b * p->s_q, 0, (size_t)(p->h_q + p->topk) * DMAX + p->topk + 2 * p->h_q,
               decode_task, &c};
    pool_run(&pl, p->threads);
}

/* ---- prefill ---------------------------------------------------------------------------------- */

typedef struct prefill_ctx {
    const mlr_sparse_prefill_problem *p;
    double *out, *max_logits, *lse;
} prefill_ctx;

static void prefill_task(const void *arg, int i, double *scratch) {
    const prefill_ctx *c = arg;
    const mlr_sparse_prefill_problem *p = c->p;
    int d = p->d_qk, n = 0;
    double *q = scratch, *keys = q + (size_t)p->h_q * d, *s = keys + (size_t)p->topk * d;
    for (int h = 0; h < p->h_q; h++)
        for (int e = 0; e < d; e++)
            q[h * d + e] = mlr_flashmla_bf16_to_f64(p->q[i * p->q_stride[0] + h * p->q_stride[1] + e]);
    const int32_t *list = p->indices + (int64_t)i * p->i_stride;
    int count = entry_count(p->topk_length, i, p->topk);
    for (int k = 0; k < count; k++) {
        int64_t idx = list[k];
        if (idx < 0 || idx >= p->s_kv) continue;
        for (int e = 0; e < d; e++)
            keys[(int64_t)n * d + e] = mlr_flashmla_bf16_to_f64(p->kv[idx * p->kv_stride + e]);
        n++;
    }
    token_job t = {p->h_q, d, n, q, keys, p->sm_scale, p->attn_sink};
    int64_t r0 = (int64_t)i * p->h_q;
    attend_token(&t, s, c->out + r0 * DV, c->max_logits + r0, c->lse + r0);
    double unit = p->natural_log ? 1.0 : 1.0 / log(2.0);
    for (int h = 0; h < p->h_q; h++) {
        c->max_logits[r0 + h] *= unit;
        c->lse[r0 + h] = n ? c->lse[r0 + h] * unit : (p->natural_log ? INFINITY : -INFINITY);
    }
}

void mlr_flashmla_sparse_prefill(const mlr_sparse_prefill_problem *p, double *out,
                                 double *max_logits, double *lse) {
    prefill_ctx c = {p, out, max_logits, lse};
    pool pl = {p->s_q, 0, (size_t)(p->h_q + p->topk) * p->d_qk + p->topk, prefill_task, &c};
    pool_run(&pl, p->threads);
}
