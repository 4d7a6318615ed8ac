/* Float64 CPU reference of one DSV4 layer (see dsv4_ref.h), transcribed from spec/dsv4.md:
 * §2.1 weights, §2.2 mxq, §2.3 phase A, §2.4 phase B, §2.5 phase C; A5 (sequential ring), A6
 * (every write before any read), A11 (sink), A15 (negative locations skip the write). */
#include "ref/dsv4_ref.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ref/dsv4_plan_ref.h"

#define D MLR_DSV4_D
#define NH MLR_DSV4_HEADS
#define QL MLR_DSV4_QL
#define OC MLR_DSV4_OCOLS

/* ---- threads ------------------------------------------------------------------------------ */

typedef struct pfor {
    atomic_llong next;
    int64_t n;
    void (*fn)(int64_t, void *);
    void *ctx;
} pfor;

static void *pfor_worker(void *arg) {
    pfor *p = arg;
    for (int64_t i; (i = atomic_fetch_add(&p->next, 1)) < p->n;) p->fn(i, p->ctx);
    return NULL;
}

void mlr_parallel_for(int64_t n, void (*fn)(int64_t i, void *ctx), void *ctx) {
    pfor p = {.n = n, .fn = fn, .ctx = ctx};
    atomic_init(&p.next, 0);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = (int)(cores < 1 ? 1 : cores > 64 ? 64 : cores);
    nt = n < nt ? (int)n : nt;
    pthread_t th[64];
    int started = 0;
    for (int i = 1; i < nt; i++)
        if (pthread_create(&th[started], NULL, pfor_worker, &p) == 0) started++;
    pfor_worker(&p);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
}

/* ---- GEMMs -------------------------------------------------------------------------------- */

static double dot(const double *a, const double *b, int64_t n) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i], s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2], s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; i++) s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

void mlr_dsv4_weight_row(const uint8_t *w, const uint8_t *sf, int64_t n, int64_t Kw,
                         double *row) {
    for (int64_t k = 0; k < Kw; k++)
        row[k] = mlr_e4m3_decode(w[n * Kw + k]) *
                 mlr_ue8m0_decode(sf[mlr_sfatom_off(n, k / 32, Kw / 32)]);
}

/* out[t, n] = a[t, (n / group_rows) * Kw + k] . W[n, k]: a plain GEMM with group_rows = N, the
 * grouped wo_a GEMM of §2.5 with group_rows = R. W is fp8 + SfAtom (sf) or bf16 (sf NULL). */
typedef struct gemm {
    const double *a;
    int T;
    int64_t a_stride;
    const void *w;
    const uint8_t *sf;
    int64_t N, Kw, group_rows;
    double *out;
} gemm;

#define GEMM_CHUNK 16 /* weight rows decoded at once (kept in cache while T tokens pass) */

static void gemm_chunk(int64_t c, void *ctx) {
    const gemm *g = ctx;
    int64_t n0 = c * GEMM_CHUNK, n1 = n0 + GEMM_CHUNK < g->N ? n0 + GEMM_CHUNK : g->N;
    double *rows = malloc((size_t)(n1 - n0) * g->Kw * sizeof(double));
    if (!rows) abort(); /* the reference cannot report a partial GEMM */
    for (int64_t n = n0; n < n1; n++) {
        double *r = rows + (n - n0) * g->Kw;
        if (g->sf)
            mlr_dsv4_weight_row(g->w, g->sf, n, g->Kw, r);
        else
            for (int64_t k = 0; k < g->Kw; k++)
                r[k] = mlr_bf16_decode(((const uint16_t *)g->w)[n * g->Kw + k]);
    }
    for (int t = 0; t < g->T; t++)
        for (int64_t n = n0; n < n1; n++)
            g->out[(int64_t)t * g->N + n] = dot(g->a + t * g->a_stride + (n / g->group_rows) * g->Kw,
                                                rows + (n - n0) * g->Kw, g->Kw);
    free(rows);
}

static void run_gemm(gemm *g) {
    mlr_parallel_for((g->N + GEMM_CHUNK - 1) / GEMM_CHUNK, gemm_chunk, g);
}

void mlr_dsv4_gemm_fp8(const double *a, int T, const uint8_t *w, const uint8_t *sf, int64_t N,
                       int64_t Kw, double *out) {
    gemm g = {a, T, Kw, w, sf, N, Kw, N, out};
    run_gemm(&g);
}

static void round_bf16(double *v, int64_t n) {
    for (int64_t i = 0; i < n; i++) v[i] = mlr_bf16(v[i]);
}

/* ---- phase A ------------------------------------------------------------------------------ */

/* xa[t] = mxq(x[t]) or x[t] (bf16 values); xg[t] = x[t] (for the kv_gate GEMM). */
static void load_x(const mlr_dsv4_layer *L, double *xa, double *xg) {
    for (int t = 0; t < L->T; t++) {
        for (int k = 0; k < L->H; k++)
            xg[(int64_t)t * L->H + k] = mlr_bf16_decode(L->x[t * L->x_stride + k]);
        memcpy(xa + (int64_t)t * L->H, xg + (int64_t)t * L->H, (size_t)L->H * sizeof(double));
        if (L->quant_act_in) mlr_quant_group(xa + (int64_t)t * L->H, L->H, 32, xa + (int64_t)t * L->H, NULL, NULL);
    }
}

/* qr = bf16(rmsnorm(qa)) (then mxq'd into qin when quant_act_in); the new KV row: kvn =
 * bf16(rmsnorm(kv)), RoPE on its last 64 dims, written at swa_loc (skipped when negative). */
static void norm_and_write(const mlr_dsv4_layer *L, const double *qa, const double *kv,
                           double *qin) {
    double kvn[D];
    for (int t = 0; t < L->T; t++) {
        double *qr = qin + (int64_t)t * QL;
        mlr_rmsnorm(qa + (int64_t)t * QL, L->q_norm, QL, L->q_eps, qr);
        round_bf16(qr, QL);
        if (L->quant_act_in) mlr_quant_group(qr, QL, 32, qr, NULL, NULL);
        mlr_rmsnorm(kv + (int64_t)t * D, L->kv_norm, D, L->kv_eps, kvn);
        round_bf16(kvn, D);
        mlr_rope(kvn + 448, L->freqs + (int64_t)L->positions[t] * 64, 0, kvn + 448);
        round_bf16(kvn + 448, 64);
        if (L->swa_loc[t] >= 0)
            mlr_write_kv_row(L->kv_cache, L->page_size, L->page_bytes, L->swa_loc[t], kvn);
    }
}

/* The c128 compressor of the firing token t (§2.3): softmax over the 128 ring rows per channel,
 * pooled, normed, roped at the window start, written at c128_out_loc. */
static void compress(const mlr_dsv4_layer *L, int t) {
    int64_t p = L->positions[t], base = L->ring_row[t] - 127;
    double y[D];
    for (int c = 0; c < D; c++) {
        double s[MLR_DSV4_WIN], m = -INFINITY, z = 0, acc = 0;
        for (int j = 0; j < MLR_DSV4_WIN; j++) {
            s[j] = (double)L->ring[(base + j) * 1024 + 512 + c] + L->ape[j * 512 + c];
            m = fmax(m, s[j]);
        }
        for (int j = 0; j < MLR_DSV4_WIN; j++) z += exp(s[j] - m);
        for (int j = 0; j < MLR_DSV4_WIN; j++)
            acc += exp(s[j] - m) / z * (double)L->ring[(base + j) * 1024 + c];
        y[c] = mlr_bf16(acc);
    }
    mlr_rmsnorm(y, L->c128_norm, D, L->kv_eps, y);
    round_bf16(y, D);
    mlr_rope(y + 448, L->c128_freqs + (p - 127) * 64, 0, y + 448);
    round_bf16(y + 448, 64);
    if (L->c128_out_loc[t] >= 0)
        mlr_write_kv_row(L->pool, L->pool_block, L->pool_page_bytes, L->c128_out_loc[t], y);
}

static int by_position(const void *a, const void *b, void *positions) {
    int ia = *(const int *)a, ib = *(const int *)b;
    int32_t pa = ((const int32_t *)positions)[ia], pb = ((const int32_t *)positions)[ib];
    return pa != pb ? (pa > pb) - (pa < pb) : (ia > ib) - (ia < ib);
}

/* HCA: g = x @ Wgate.T (exact bf16 products, float32 in the ring), then the tokens in ascending
 * position: ring row, and the compressor where p % 128 == 127 (A5: it sees its own window). */
static int hca_phase_a(const mlr_dsv4_layer *L, const double *xg) {
    double *g = malloc((size_t)L->T * 1024 * sizeof(double));
    int *order = malloc((size_t)L->T * sizeof(int));
    if (!g || !order) {
        free(g), free(order);
        return -1;
    }
    gemm gg = {xg, L->T, L->H, L->wkv_gate, NULL, 1024, L->H, 1024, g};
    run_gemm(&gg);
    for (int t = 0; t < L->T; t++) order[t] = t;
    qsort_r(order, (size_t)L->T, sizeof(int), by_position, (void *)L->positions);
    for (int i = 0; i < L->T; i++) {
        int t = order[i];
        for (int c = 0; c < 1024; c++)
            L->ring[(int64_t)L->ring_row[t] * 1024 + c] = (float)g[(int64_t)t * 1024 + c];
        if (L->positions[t] % 128 == 127) compress(L, t);
    }
    free(g), free(order);
    return 0;
}

/* x -> qa, kv (wq_a, wkv), norms, KV write, qr -> q (wq_b) into res->q; HCA ring + compressor. */
static int phase_a(const mlr_dsv4_layer *L, mlr_dsv4_result *res) {
    int T = L->T, rc = -1;
    double *xa = calloc((size_t)T * L->H, sizeof(double));
    double *xg = malloc((size_t)T * L->H * sizeof(double));
    double *qa = malloc((size_t)T * QL * sizeof(double));
    double *kv = malloc((size_t)T * D * sizeof(double));
    double *qin = malloc((size_t)T * QL * sizeof(double));
    if (!xa || !xg || !qa || !kv || !qin) goto done;
    load_x(L, xa, xg);
    mlr_dsv4_gemm_fp8(xa, T, L->wq_a, L->wq_a_sf, QL, L->H, qa);
    mlr_dsv4_gemm_fp8(xa, T, L->wkv, L->wkv_sf, D, L->H, kv);
    round_bf16(qa, (int64_t)T * QL);
    round_bf16(kv, (int64_t)T * D);
    norm_and_write(L, qa, kv, qin);
    mlr_dsv4_gemm_fp8(qin, T, L->wq_b, L->wq_b_sf, OC, QL, res->q);
    round_bf16(res->q, (int64_t)T * OC);
    rc = L->wkv_gate ? hca_phase_a(L, xg) : 0;
done:
    free(xa), free(xg), free(qa), free(kv), free(qin);
    return rc;
}

/* ---- phase B ------------------------------------------------------------------------------ */

void mlr_dsv4_attend(const double *q, const double *rows, int n, double sm_scale,
                     const double *sink, double *O, double *lse) {
    double *sc = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    if (!sc) abort();
    double m = sink ? *sink : -INFINITY, Z = 0;
    for (int i = 0; i < n; i++) {
        sc[i] = sm_scale * dot(rows + (int64_t)i * D, q, D);
        m = fmax(m, sc[i]);
    }
    memset(O, 0, D * sizeof(double));
    for (int i = 0; i < n; i++) {
        double e = exp(sc[i] - m);
        Z += e;
        for (int c = 0; c < D; c++) O[c] += e * rows[(int64_t)i * D + c];
    }
    double den = Z + (sink ? exp(*sink - m) : 0.0);
    for (int c = 0; c < D; c++) O[c] = den > 0 ? O[c] / den : 0.0;
    *lse = n > 0 ? m + log(Z) : -INFINITY;
    free(sc);
}

void mlr_dsv4_combine(int S, const double *Os, const double *lses, const double *sink,
                      double *O) {
    double m = -INFINITY, z = 0;
    for (int s = 0; s < S; s++) m = fmax(m, lses[s]);
    memset(O, 0, D * sizeof(double));
    if (m == -INFINITY) return;
    for (int s = 0; s < S; s++) z += exp(lses[s] - m);
    double LSE = m + log(z);
    for (int s = 0; s < S; s++) {
        if (lses[s] == -INFINITY) continue;
        double w = exp(lses[s] - LSE);
        for (int c = 0; c < D; c++) O[c] += w * Os[(int64_t)s * D + c];
    }
    if (sink)
        for (int c = 0; c < D; c++) O[c] *= 1.0 / (1.0 + exp(*sink - LSE));
}

typedef struct phase_b_ctx {
    const mlr_dsv4_layer *L;
    mlr_dsv4_result *res;
    int failed;
} phase_b_ctx;

/* Decodes token t's rows: the planned SWA window, then its compressed rows (HCA). */
static int gather_rows(const mlr_dsv4_layer *L, const int32_t plan[4], int t, double *rows) {
    int n = plan[3];
    for (int g = 0; g < n; g++)
        mlr_decode_kv_row(L->kv_cache, L->page_size, L->page_bytes, mlr_dsv4_plan_slot(plan, g),
                          rows + (int64_t)g * D);
    int nc = L->wkv_gate ? L->c128_attn_len[t] : 0;
    for (int j = 0; j < nc; j++) {
        int64_t page = L->c128_page_table[(int64_t)t * L->max_pages + j / L->pool_block];
        mlr_decode_kv_row(L->pool, L->pool_block, L->pool_page_bytes,
                          page * L->pool_block + j % L->pool_block, rows + (int64_t)(n + j) * D);
    }
    return n + nc;
}

/* Token t: Q per head (norm without gain, RoPE, bf16), then one softmax over all rows. */
static void attend_token(int64_t t, void *arg) {
    phase_b_ctx *c = arg;
    const mlr_dsv4_layer *L = c->L;
    mlr_dsv4_result *res = c->res;
    int nmax = res->plan[4 * t + 3] + (L->wkv_gate ? L->c128_attn_len[t] : 0);
    double *rows = malloc((size_t)(nmax > 0 ? nmax : 1) * D * sizeof(double)), Q[D];
    if (!rows) {
        c->failed = 1;
        return;
    }
    int n = gather_rows(L, res->plan + 4 * t, (int)t, rows);
    res->rows[t] = n;
    const float *f = L->freqs + (int64_t)L->positions[t] * 64;
    for (int h = 0; h < NH; h++) {
        mlr_rmsnorm(res->q + t * OC + h * D, NULL, D, L->q_eps, Q);
        mlr_rope(Q + 448, f, 0, Q + 448);
        round_bf16(Q, D);
        double sink = L->sink ? L->sink[h] : 0;
        mlr_dsv4_attend(Q, rows, n, L->sm_scale, L->sink ? &sink : NULL, res->O + t * OC + h * D,
                        res->lse + t * NH + h);
    }
    free(rows);
}

int mlr_dsv4_attention(const mlr_dsv4_layer *L, mlr_dsv4_result *res) {
    int T = L->T;
    memset(res, 0, sizeof *res);
    res->T = T;
    res->q = malloc((size_t)T * OC * sizeof(double));
    res->O = malloc((size_t)T * OC * sizeof(double));
    res->lse = malloc((size_t)T * NH * sizeof(double));
    res->plan = malloc((size_t)T * 4 * sizeof(int32_t));
    res->rows = malloc((size_t)T * sizeof(int));
    if (!res->q || !res->O || !res->lse || !res->plan || !res->rows) goto fail;
    if (phase_a(L, res) != 0) goto fail;
    mlr_dsv4_plan(L->kv_indices, L->kv_stride, L->topk_lengths, T, L->topk, L->page_size,
                  L->kv_run_step, res->plan);
    phase_b_ctx c = {L, res, 0};
    mlr_parallel_for(T, attend_token, &c);
    if (c.failed) goto fail;
    return 0;
fail:
    mlr_dsv4_result_free(res);
    return -1;
}

/* ---- phase C ------------------------------------------------------------------------------ */

int mlr_dsv4_output_proj(const mlr_dsv4_layer *L, const double *O, mlr_dsv4_result *res) {
    int T = L->T, rc = -1;
    int64_t H2 = 2 * (int64_t)L->H, K = OC / L->G;
    double *A = malloc((size_t)T * OC * sizeof(double));
    double *ol = malloc((size_t)T * H2 * sizeof(double));
    free(res->out);
    res->out = malloc((size_t)T * L->H * sizeof(double));
    if (!A || !ol || !res->out) goto done;
    memcpy(A, O, (size_t)T * OC * sizeof(double));
    for (int t = 0; t < T; t++) {
        const float *f = L->freqs + (int64_t)L->positions[t] * 64;
        for (int h = 0; h < NH; h++) mlr_rope(A + t * OC + h * D + 448, f, 1, A + t * OC + h * D + 448);
        round_bf16(A + (int64_t)t * OC, OC);
        mlr_quant_group(A + (int64_t)t * OC, OC, 32, A + (int64_t)t * OC, NULL, NULL);
    }
    gemm ga = {A, T, OC, L->wo_a, L->wo_a_sf, H2, K, H2 / L->G, ol};
    run_gemm(&ga);
    round_bf16(ol, (int64_t)T * H2);
    for (int t = 0; t < T; t++) mlr_quant_group(ol + t * H2, H2, 32, ol + t * H2, NULL, NULL);
    mlr_dsv4_gemm_fp8(ol, T, L->wo_b, L->wo_b_sf, L->H, H2, res->out);
    round_bf16(res->out, (int64_t)T * L->H);
    rc = 0;
done:
    free(A), free(ol);
    return rc;
}

void mlr_dsv4_result_free(mlr_dsv4_result *res) {
    free(res->q), free(res->O), free(res->lse), free(res->plan), free(res->rows), free(res->out);
    memset(res, 0, sizeof *res);
}
