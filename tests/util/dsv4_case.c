/* Random DSV4 layer cases (see dsv4_case.h): structure (requests, positions, windows, slots,
 * ring rows, pool pages), content (weights, inputs, prior cache rows), the reference, the device
 * side and the comparisons. */
#include "util/dsv4_case.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/dsv4_plan_ref.h"
#include "runtime/internal.h"

#define OC MLR_DSV4_OCOLS
#define TOPK MLR_DSV4_WIN

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* ---- random values ------------------------------------------------------------------------ */

static double gauss(mlt_rng *r) {
    double u = mlt_rng_uniform(r), v = mlt_rng_uniform(r);
    return sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * v);
}

static double uniform(mlt_rng *r, double lo, double hi) {
    return lo + (hi - lo) * mlt_rng_uniform(r);
}

static void fill_bf16(mlt_rng *r, uint16_t *p, int64_t n, double sigma) {
    for (int64_t i = 0; i < n; i++) p[i] = mlr_bf16_bits(sigma * gauss(r));
}

static void fill_gain(mlt_rng *r, uint16_t *p, int64_t n) {
    for (int64_t i = 0; i < n; i++) p[i] = mlr_bf16_bits(uniform(r, 0.5, 1.5));
}

/* fp8 weight bytes: e4m3 codes of N(0, 1) samples, drawn from a table (32M bytes per weight). */
static void fill_fp8(mlt_rng *r, uint8_t *w, int64_t n) {
    uint8_t table[4096];
    for (int i = 0; i < 4096; i++) table[i] = mlr_e4m3_encode(gauss(r));
    for (int64_t i = 0; i < n; i += 5) {
        uint64_t u = mlt_rng_u64(r);
        for (int j = 0; j < 5 && i + j < n; j++, u >>= 12) w[i + j] = table[u & 4095];
    }
}

/* SfAtom scale bytes (N % 128 == 0, KB % 4 == 0: exactly N * KB bytes): random exponents around
 * 2^-log2(sqrt(Kw)), so a K-long dot product of N(0,1) operands stays O(1), +-3 binades. */
static void fill_sf(mlt_rng *r, uint8_t *sf, int64_t N, int64_t Kw) {
    int c = (int)lround(0.5 * log2((double)Kw));
    for (int64_t i = 0; i < N * (Kw / 32); i++) sf[i] = (uint8_t)(127 - c + mlt_rng_range(r, -3, 3));
}

/* A valid KV row of O(1) values (a prior write of an earlier launch). */
static void random_row(mlt_rng *r, uint8_t *cache, int64_t B, int64_t stride, int64_t slot) {
    double y[MLR_DSV4_D];
    for (int i = 0; i < MLR_DSV4_D; i++) y[i] = mlr_bf16(gauss(r));
    mlr_write_kv_row(cache, B, stride, slot, y);
}

/* freqs_real [max_pos, 64] of §2.3: theta_i(p) = p * inv_freq_i, YaRN (factor 16, original
 * length 65536, beta 32 / 1) when yarn. */
static void rope_table(float *f, int max_pos, double base, int yarn) {
    double inv[32];
    double dim_of = 64.0 / (2.0 * log(base)); /* find_correction_dim(rot) = dim_of*log(L/(rot 2pi)) */
    double low = floor(dim_of * log(65536.0 / (32.0 * 2 * M_PI)));
    double high = ceil(dim_of * log(65536.0 / (1.0 * 2 * M_PI)));
    low = fmax(low, 0), high = fmin(high, 63);
    if (high == low) high += 0.001;
    for (int i = 0; i < 32; i++) {
        inv[i] = pow(base, -2.0 * i / 64.0);
        if (yarn) {
            double smooth = 1.0 - fmin(fmax((i - low) / (high - low), 0.0), 1.0);
            inv[i] = inv[i] / 16.0 * (1.0 - smooth) + inv[i] * smooth;
        }
    }
    for (int64_t p = 0; p < max_pos; p++)
        for (int i = 0; i < 32; i++) {
            f[p * 64 + 2 * i] = (float)cos(p * inv[i]);
            f[p * 64 + 2 * i + 1] = (float)sin(p * inv[i]);
        }
}

/* ---- structure ---------------------------------------------------------------------------- */

/* One request while drawing the structure. */
typedef struct req {
    int t0, n, pad;
    int64_t p0, w0, cnt, base; /* first position, first window position, window span, slot base */
} req;

static int64_t slot_of(const mlt_dsv4_case *c, const req *q, int64_t p) {
    if (c->k.layout == MLT_DSV4_RING && c->k.page_size >= 128)
        return q->base + (c->k.step > 0 ? p % 128 : 127 - p % 128);
    return c->k.step > 0 ? q->base + (p - q->w0) : q->base + q->cnt - 1 - (p - q->w0);
}

/* Positions of request r: padding at 0.., firing (request 0 fires at its second token when it
 * has three), short (below 127) or anywhere in [127, 7800]. */
static void draw_positions(const mlt_dsv4_knobs *k, mlt_rng *r, int ri, req *q) {
    q->pad = k->padding && ri > 0 && mlt_rng_range(r, 0, 4) == 0;
    if (q->pad)
        q->p0 = 0;
    else if (k->fire && (ri == 0 || mlt_rng_range(r, 0, 2) == 0))
        q->p0 = 128 * mlt_rng_range(r, 1, 60) + 127 -
                (ri == 0 && q->n >= 3 ? 1 : mlt_rng_range(r, 0, q->n - 1));
    else if (k->short_pos && mlt_rng_range(r, 0, 2) == 0)
        q->p0 = mlt_rng_range(r, 0, 126);
    else
        q->p0 = mlt_rng_range(r, 127, 7800);
    q->w0 = q->p0 > 127 ? q->p0 - 127 : 0;
    q->cnt = q->p0 + q->n - q->w0;
}

/* Slot bases: linear regions packed with random gaps (windows cross pages at random rows,
 * sometimes start on a page), or 128-slot rings inside pages. Returns the slot count used. */
static int64_t place(const mlt_dsv4_case *c, mlt_rng *r, req *q, int64_t cursor) {
    int64_t B = c->k.page_size;
    if (c->k.layout == MLT_DSV4_RING && B >= 128) {
        q->base = cursor;
        return cursor + 128 * mlt_rng_range(r, 1, 2);
    }
    cursor = mlt_rng_range(r, 0, 2) == 0 ? (cursor + B - 1) / B * B
                                           : cursor + mlt_rng_range(r, 0, B - 1);
    q->base = cursor;
    return cursor + q->cnt;
}

static void token_window(mlt_dsv4_case *c, const req *q, int t, int64_t p) {
    int32_t *row = c->kv_indices + (int64_t)t * TOPK;
    int L = q->pad ? 0 : (int)min64(p + 1, TOPK);
    for (int g = 0; g < TOPK; g++) row[g] = g < L ? (int32_t)slot_of(c, q, p - L + 1 + g) : -1;
    c->topk_lengths[t] = L;
    c->swa_loc[t] = q->pad ? -1 : (int32_t)slot_of(c, q, p);
    c->positions[t] = (int32_t)p;
}

/* HCA structure: ring of each request (a shuffled ring index), pool pages, lengths, out_loc. */
static int hca_structure(mlt_dsv4_case *c, mlt_rng *r, const req *rq) {
    int nr = c->n_requests, pb = c->pool_block, rings = nr + 2, npages = 0, maxp = 1;
    for (int i = 0; i < nr; i++) {
        int64_t blocks = rq[i].pad ? 0 : (rq[i].p0 + rq[i].n) / 128;
        npages += (int)((blocks + pb - 1) / pb);
        maxp = (int)max64(maxp, (blocks + pb - 1) / pb);
    }
    c->ring_rows = (int64_t)rings * 128;
    c->max_pages = maxp;
    c->pool_pages = npages + 3; /* + a decoy page and two never used */
    int *perm = malloc(sizeof(int) * (size_t)(rings + c->pool_pages));
    c->ring_row = malloc(sizeof(int32_t) * (size_t)c->T);
    c->c128_out_loc = malloc(sizeof(int32_t) * (size_t)c->T);
    c->c128_attn_len = malloc(sizeof(int32_t) * (size_t)c->T);
    c->c128_page_table = malloc(sizeof(int32_t) * (size_t)c->T * maxp);
    if (!perm || !c->ring_row || !c->c128_out_loc || !c->c128_attn_len || !c->c128_page_table) {
        free(perm);
        return -1;
    }
    int *ring_of = perm, *page = perm + rings;
    for (int i = 0; i < rings; i++) ring_of[i] = i;
    for (int i = 0; i < c->pool_pages; i++) page[i] = i;
    for (int i = rings - 1; i > 0; i--) { int j = (int)mlt_rng_range(r, 0, i), s = ring_of[i]; ring_of[i] = ring_of[j], ring_of[j] = s; }
    for (int i = (int)c->pool_pages - 1; i > 0; i--) { int j = (int)mlt_rng_range(r, 0, i), s = page[i]; page[i] = page[j], page[j] = s; }
    int next = 0, decoy = page[npages];
    for (int i = 0; i < nr; i++) {
        const req *q = &rq[i];
        int64_t blocks = q->pad ? 0 : (q->p0 + q->n) / 128, np = (blocks + pb - 1) / pb;
        for (int t = q->t0; t < q->t0 + q->n; t++) {
            int64_t p = c->positions[t];
            int32_t *pt = c->c128_page_table + (int64_t)t * maxp;
            for (int j = 0; j < maxp; j++) pt[j] = j < np ? page[next + j] : -1;
            c->ring_row[t] = (int32_t)(ring_of[i] * 128 + p % 128);
            c->c128_attn_len[t] = q->pad ? 0 : (int32_t)((p + 1) / 128);
            int64_t j = p / 128;
            c->c128_out_loc[t] = (int32_t)(!q->pad && p % 128 == 127
                                               ? (int64_t)pt[j / pb] * pb + j % pb
                                               : (int64_t)decoy * pb + mlt_rng_range(r, 0, pb - 1));
        }
        next += (int)np;
    }
    free(perm);
    return 0;
}

static int draw_structure(mlt_dsv4_case *c, mlt_rng *r, req *rq) {
    int64_t cursor = 0;
    for (int t = 0; t < c->T; c->n_requests++) {
        req *q = &rq[c->n_requests];
        c->req_start[c->n_requests] = q->t0 = t;
        q->n = (int)min64(c->k.draft > 0 ? c->k.draft : c->k.multi ? mlt_rng_range(r, 1, 4) : 1,
                          c->T - t);
        draw_positions(&c->k, r, c->n_requests, q);
        if (!q->pad) cursor = place(c, r, q, cursor);
        for (int i = 0; i < q->n; i++) token_window(c, q, t + i, q->p0 + i);
        t += q->n;
    }
    c->req_start[c->n_requests] = c->T;
    c->num_pages = cursor / c->k.page_size + 2;
    c->max_pos = 1;
    for (int t = 0; t < c->T; t++) c->max_pos = (int)max64(c->max_pos, c->positions[t] + 1);
    return c->k.hca ? hca_structure(c, r, rq) : 0;
}

/* ---- content ------------------------------------------------------------------------------ */

/* fp8 weight [N, Kw] with SfAtom scales. */
static int weight(mlt_rng *r, int64_t N, int64_t Kw, uint8_t **w, uint8_t **sf) {
    *w = malloc((size_t)(N * Kw));
    *sf = malloc((size_t)(N * Kw / 32));
    if (!*w || !*sf) return -1;
    fill_fp8(r, *w, N * Kw);
    fill_sf(r, *sf, N, Kw);
    return 0;
}

/* Prior rows: the window rows of each request's first token before its own position, and on
 * HCA layers the compressed blocks j < p0 / 128 (fired by earlier launches). */
static void prior_rows(mlt_dsv4_case *c, mlt_rng *r) {
    for (int i = 0; i < c->n_requests; i++) {
        int t = c->req_start[i];
        for (int g = 0; g + 1 < c->topk_lengths[t]; g++)
            random_row(r, c->kv_cache, c->k.page_size, c->page_bytes,
                       c->kv_indices[(int64_t)t * TOPK + g]);
        for (int64_t j = 0; c->k.hca && c->topk_lengths[t] && j < c->positions[t] / 128; j++)
            random_row(r, c->pool, c->pool_block, c->pool_page_bytes,
                       (int64_t)c->c128_page_table[(int64_t)t * c->max_pages + j / c->pool_block] *
                               c->pool_block + j % c->pool_block);
    }
}

static int hca_content(mlt_dsv4_case *c, mlt_rng *r) {
    int64_t H = c->H;
    c->wkv_gate = malloc(sizeof(uint16_t) * (size_t)(1024 * H));
    c->c128_norm = malloc(sizeof(uint16_t) * 512);
    c->ring = malloc(sizeof(float) * (size_t)(c->ring_rows * 1024));
    c->ape = malloc(sizeof(float) * 128 * 512);
    c->pool = malloc((size_t)(c->pool_pages * c->pool_page_bytes));
    if (!c->wkv_gate || !c->c128_norm || !c->ring || !c->ape || !c->pool) return -1;
    fill_bf16(r, c->wkv_gate, 1024 * H, 1.0 / sqrt((double)H));
    fill_gain(r, c->c128_norm, 512);
    for (int64_t i = 0; i < c->ring_rows * 1024; i++) c->ring[i] = (float)gauss(r);
    for (int i = 0; i < 128 * 512; i++) c->ape[i] = (float)uniform(r, -1, 1);
    memset(c->pool, 0xFF, (size_t)(c->pool_pages * c->pool_page_bytes));
    return 0;
}

static int draw_content(mlt_dsv4_case *c, mlt_rng *r) {
    int64_t H = c->H;
    c->x_cols = H + (c->k.wide ? 64 : 0);
    c->x_col0 = c->k.wide ? 24 : 0; /* 48 bytes: 16-byte aligned rows */
    c->x = malloc(sizeof(uint16_t) * (size_t)(c->T * c->x_cols));
    c->freqs = malloc(sizeof(float) * 64 * (size_t)c->max_pos);
    c->c128_freqs = malloc(sizeof(float) * 64 * (size_t)c->max_pos);
    c->q_norm = malloc(2 * 1024), c->kv_norm = malloc(2 * 512);
    c->kv_cache = malloc((size_t)(c->num_pages * c->page_bytes));
    if (!c->x || !c->freqs || !c->c128_freqs || !c->q_norm || !c->kv_norm || !c->kv_cache) return -1;
    for (int64_t i = 0; i < c->T * c->x_cols; i++) { /* NaN outside the slice */
        int64_t col = i % c->x_cols - c->x_col0;
        c->x[i] = col >= 0 && col < H ? mlr_bf16_bits(gauss(r)) : 0xFFFF;
    }
    rope_table(c->freqs, c->max_pos, c->k.hca ? 1.6e5 : 1e4, c->k.hca);
    rope_table(c->c128_freqs, c->max_pos, 1.6e5, 0); /* differs from freqs on purpose */
    if (weight(r, 1024, H, &c->wq_a, &c->wq_a_sf) || weight(r, OC, 1024, &c->wq_b, &c->wq_b_sf) ||
        weight(r, 512, H, &c->wkv, &c->wkv_sf))
        return -1;
    if (H <= 4096 && H % 512 == 0 &&
        (weight(r, 2 * H, OC / c->G, &c->wo_a, &c->wo_a_sf) || weight(r, H, 2 * H, &c->wo_b, &c->wo_b_sf)))
        return -1;
    fill_gain(r, c->q_norm, 1024);
    fill_gain(r, c->kv_norm, 512);
    if (c->k.sink) {
        if (!(c->sink = malloc(sizeof(float) * 64))) return -1;
        for (int h = 0; h < 64; h++) c->sink[h] = (float)uniform(r, -2, 6);
    }
    memset(c->kv_cache, 0xFF, (size_t)(c->num_pages * c->page_bytes));
    if (c->k.hca && hca_content(c, r)) return -1;
    prior_rows(c, r);
    return 0;
}

int mlt_dsv4_case_make(const mlt_dsv4_knobs *k, uint64_t structure_seed, uint64_t content_seed,
                       mlt_dsv4_case *c) {
    mlt_rng rs, rc;
    memset(c, 0, sizeof *c);
    c->k = *k;
    c->H = k->H, c->G = k->G, c->topk = TOPK;
    c->T = k->draft > 0 ? (int)max64(k->draft, k->T - k->T % k->draft) : k->T;
    c->structure_seed = structure_seed, c->content_seed = content_seed;
    c->sm_scale = (float)(1.0 / sqrt(512.0)), c->q_eps = 1e-6f, c->kv_eps = 1e-6f;
    c->pool_block = k->pool_block > 0 ? k->pool_block : 64;
    mlt_rng_init(&rs, structure_seed);
    mlt_rng_init(&rc, content_seed);
    c->page_bytes = (k->page_size * 584 + 575) / 576 * 576 + 576 * mlt_rng_range(&rs, 0, 1);
    c->pool_page_bytes = (c->pool_block * 584 + 575) / 576 * 576 + 576 * mlt_rng_range(&rs, 0, 1);
    req *rq = malloc(sizeof(req) * (size_t)c->T);
    c->positions = malloc(sizeof(int32_t) * (size_t)c->T);
    c->swa_loc = malloc(sizeof(int32_t) * (size_t)c->T);
    c->topk_lengths = malloc(sizeof(int32_t) * (size_t)c->T);
    c->kv_indices = malloc(sizeof(int32_t) * (size_t)c->T * TOPK);
    c->req_start = malloc(sizeof(int) * (size_t)(c->T + 1));
    int rc_ = -1;
    if (rq && c->req_start && c->positions && c->swa_loc && c->topk_lengths && c->kv_indices &&
        draw_structure(c, &rs, rq) == 0 && draw_content(c, &rc) == 0)
        rc_ = 0;
    free(rq);
    if (rc_) mlt_dsv4_case_free(c);
    return rc_;
}

void mlt_dsv4_case_free(mlt_dsv4_case *c) {
    void *p[] = {c->req_start, c->x, c->positions, c->freqs, c->c128_freqs, c->wq_a, c->wq_a_sf,
                 c->wq_b, c->wq_b_sf, c->wkv, c->wkv_sf, c->q_norm, c->kv_norm, c->swa_loc,
                 c->sink, c->kv_cache, c->kv_indices, c->topk_lengths, c->wkv_gate, c->c128_norm,
                 c->ring, c->ape, c->ring_row, c->c128_out_loc, c->c128_page_table,
                 c->c128_attn_len, c->pool, c->wo_a, c->wo_a_sf, c->wo_b, c->wo_b_sf};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
    memset(c, 0, sizeof *c);
}

void mlt_dsv4_case_describe(const mlt_dsv4_case *c, char *buf, size_t size) {
    int pad = 0, fires = 0, cut = 0, split_rows = 0;
    int32_t plan[4];
    for (int t = 0; t < c->T; t++) {
        pad += c->topk_lengths[t] == 0;
        fires += c->k.hca && c->topk_lengths[t] && c->positions[t] % 128 == 127;
        mlr_dsv4_plan_row(c->kv_indices + (int64_t)t * TOPK, c->topk_lengths[t], c->k.page_size,
                          c->k.step, plan);
        cut += plan[3] == 1 && c->topk_lengths[t] > 1;
        split_rows += plan[1] < plan[3];
    }
    snprintf(buf, size, "T=%d H=%d G=%d requests=%d padding=%d fires=%d cut=%d two-run=%d "
             "seeds=%llu/%llu", c->T, c->H, c->G, c->n_requests, pad, fires, cut, split_rows,
             (unsigned long long)c->structure_seed, (unsigned long long)c->content_seed);
}

/* ---- reference ---------------------------------------------------------------------------- */

static void *dup(const void *p, size_t n) {
    void *q = p ? malloc(n) : NULL;
    if (q) memcpy(q, p, n);
    return q;
}

void mlt_dsv4_layer_of(const mlt_dsv4_case *c, uint8_t *kv_cache, float *ring, uint8_t *pool,
                       mlr_dsv4_layer *out) {
    mlr_dsv4_layer L = {
        .T = c->T, .H = c->H, .G = c->G, .quant_act_in = 1, .x = c->x + c->x_col0,
        .x_stride = c->x_cols, .positions = c->positions, .freqs = c->freqs,
        .sm_scale = c->sm_scale, .q_eps = c->q_eps, .kv_eps = c->kv_eps, .wq_a = c->wq_a,
        .wq_a_sf = c->wq_a_sf, .q_norm = c->q_norm, .wq_b = c->wq_b, .wq_b_sf = c->wq_b_sf,
        .wkv = c->wkv, .wkv_sf = c->wkv_sf, .kv_norm = c->kv_norm, .swa_loc = c->swa_loc,
        .sink = c->sink, .kv_cache = kv_cache, .page_size = c->k.page_size,
        .page_bytes = c->page_bytes, .kv_indices = c->kv_indices, .kv_stride = TOPK,
        .topk = TOPK, .topk_lengths = c->topk_lengths, .kv_run_step = c->k.step,
        .wkv_gate = c->k.hca ? c->wkv_gate : NULL, .ring = ring, .ring_row = c->ring_row,
        .ape = c->ape, .c128_norm = c->c128_norm, .c128_freqs = c->c128_freqs,
        .c128_out_loc = c->c128_out_loc, .pool = pool, .pool_page_bytes = c->pool_page_bytes,
        .pool_block = c->pool_block, .c128_page_table = c->c128_page_table,
        .max_pages = c->max_pages, .c128_attn_len = c->c128_attn_len, .wo_a = c->wo_a,
        .wo_a_sf = c->wo_a_sf, .wo_b = c->wo_b, .wo_b_sf = c->wo_b_sf};
    *out = L;
}

int mlt_dsv4_expect_make(const mlt_dsv4_case *c, int with_out, mlt_dsv4_expect *e) {
    memset(e, 0, sizeof *e);
    e->kv_cache = dup(c->kv_cache, (size_t)(c->num_pages * c->page_bytes));
    e->pool = dup(c->pool, (size_t)(c->pool_pages * c->pool_page_bytes));
    e->ring = dup(c->ring, sizeof(float) * (size_t)(c->ring_rows * 1024));
    if (!e->kv_cache || (c->k.hca && (!e->pool || !e->ring))) return -1;
    mlr_dsv4_layer L;
    mlt_dsv4_layer_of(c, e->kv_cache, e->ring, e->pool, &L);
    if (mlr_dsv4_attention(&L, &e->res) != 0) return -1;
    if (with_out && (!c->wo_a || mlr_dsv4_output_proj(&L, e->res.O, &e->res) != 0)) return -1;
    return 0;
}

void mlt_dsv4_expect_free(mlt_dsv4_expect *e) {
    mlr_dsv4_result_free(&e->res);
    free(e->kv_cache), free(e->pool), free(e->ring);
    memset(e, 0, sizeof *e);
}

/* ---- device side -------------------------------------------------------------------------- */

/* Allocates bytes at *p and uploads src (NULL: leave as is). */
static CUresult put(mla_runtime *rt, CUdeviceptr *p, const void *src, size_t bytes) {
    CUresult r = mlt_alloc(rt, bytes, p);
    return r != CUDA_SUCCESS || !src ? r : mlt_upload(rt, *p, src, bytes);
}

#define PUT(field, src, bytes)                                                                   \
    do {                                                                                         \
        if ((r = put(rt, &d->field, (src), (size_t)(bytes))) != CUDA_SUCCESS) return r;          \
    } while (0)

static void tensor(mlt_tensor *m, CUdeviceptr p, DLDataType dt, int64_t d0, int64_t d1) {
    int64_t shape[2] = {d0, d1};
    mlt_tensor_init(m, p, dt, d1 > 0 ? 2 : 1, shape, NULL);
}

static void make_tensors(const mlt_dsv4_case *c, mlt_dsv4_dev *d) {
    int64_t T = c->T, H = c->H, G = c->G, xs[2] = {c->x_cols, 1}, xshape[2] = {T, H};
    mlt_tensor_init(&d->t_x, d->x, MLT_BF16, 2, xshape, c->k.wide ? xs : NULL);
    d->t_x.t.byte_offset = (uint64_t)c->x_col0 * 2;
    tensor(&d->t_positions, d->positions, MLT_INT32, T, 0);
    tensor(&d->t_freqs, d->freqs, MLT_FP32, c->max_pos, 64);
    tensor(&d->t_c128_freqs, d->c128_freqs, MLT_FP32, c->max_pos, 64);
    tensor(&d->t_wq_a, d->wq_a, MLT_E4M3, 1024, H);
    tensor(&d->t_wq_a_sf, d->wq_a_sf, MLT_UINT8, 1024, H / 32);
    tensor(&d->t_q_norm, d->q_norm, MLT_BF16, 1024, 0);
    tensor(&d->t_wq_b, d->wq_b, MLT_E4M3, OC, 1024);
    tensor(&d->t_wq_b_sf, d->wq_b_sf, MLT_UINT8, OC, 32);
    tensor(&d->t_wkv, d->wkv, MLT_E4M3, 512, H);
    tensor(&d->t_wkv_sf, d->wkv_sf, MLT_UINT8, 512, H / 32);
    tensor(&d->t_kv_norm, d->kv_norm, MLT_BF16, 512, 0);
    tensor(&d->t_swa_loc, d->swa_loc, MLT_INT32, T, 0);
    tensor(&d->t_sink, d->sink, MLT_FP32, 64, 0);
    tensor(&d->t_kv_cache, d->kv_cache, MLT_UINT8, c->num_pages, c->page_bytes);
    tensor(&d->t_kv_indices, d->kv_indices, MLT_INT32, T, TOPK);
    tensor(&d->t_topk_lengths, d->topk_lengths, MLT_INT32, T, 0);
    tensor(&d->t_wkv_gate, d->wkv_gate, MLT_BF16, 1024, H);
    tensor(&d->t_ring, d->ring, MLT_FP32, c->ring_rows, 1024);
    tensor(&d->t_ring_row, d->ring_row, MLT_INT32, T, 0);
    tensor(&d->t_ape, d->ape, MLT_FP32, 128, 512);
    tensor(&d->t_c128_norm, d->c128_norm, MLT_BF16, 512, 0);
    tensor(&d->t_c128_out_loc, d->c128_out_loc, MLT_INT32, T, 0);
    tensor(&d->t_pool, d->pool, MLT_UINT8, c->pool_pages, c->pool_page_bytes);
    tensor(&d->t_page_table, d->page_table, MLT_INT32, T, c->max_pages);
    tensor(&d->t_attn_len, d->attn_len, MLT_INT32, T, 0);
    /* without wo weights (H > 4096): shape-only stand-ins over wq_b for mla_workspace */
    tensor(&d->t_wo_a, d->wo_a ? d->wo_a : d->wq_b, MLT_E4M3, 2 * H, OC / G);
    tensor(&d->t_wo_a_sf, d->wo_a_sf, MLT_UINT8, 2 * H, OC / G / 32);
    tensor(&d->t_wo_b, d->wo_b ? d->wo_b : d->wq_b, MLT_E4M3, H, 2 * H);
    tensor(&d->t_wo_b_sf, d->wo_b_sf, MLT_UINT8, H, 2 * H / 32);
    tensor(&d->t_q_or_x, d->q_or_x, MLT_BF16, T, OC);
    tensor(&d->t_out, d->out, MLT_BF16, T, H);
}

static CUresult upload_hca(mla_runtime *rt, const mlt_dsv4_case *c, mlt_dsv4_dev *d) {
    CUresult r;
    int64_t T = c->T;
    PUT(wkv_gate, c->wkv_gate, 2 * 1024 * c->H);
    PUT(ring, NULL, 4 * c->ring_rows * 1024);
    PUT(ring_row, c->ring_row, 4 * T);
    PUT(ape, c->ape, 4 * 128 * 512);
    PUT(c128_norm, c->c128_norm, 2 * 512);
    PUT(c128_out_loc, c->c128_out_loc, 4 * T);
    PUT(pool, NULL, c->pool_pages * c->pool_page_bytes);
    PUT(page_table, c->c128_page_table, 4 * T * c->max_pages);
    PUT(attn_len, c->c128_attn_len, 4 * T);
    return CUDA_SUCCESS;
}

CUresult mlt_dsv4_upload(mla_runtime *rt, const mlt_dsv4_case *c, mlt_dsv4_dev *d) {
    CUresult r;
    int64_t T = c->T, H = c->H;
    memset(d, 0, sizeof *d);
    PUT(x, c->x, 2 * T * c->x_cols);
    PUT(positions, c->positions, 4 * T);
    PUT(freqs, c->freqs, 4 * 64 * (int64_t)c->max_pos);
    PUT(c128_freqs, c->c128_freqs, 4 * 64 * (int64_t)c->max_pos);
    PUT(wq_a, c->wq_a, 1024 * H);
    PUT(wq_a_sf, c->wq_a_sf, 1024 * H / 32);
    PUT(q_norm, c->q_norm, 2 * 1024);
    PUT(wq_b, c->wq_b, (int64_t)OC * 1024);
    PUT(wq_b_sf, c->wq_b_sf, (int64_t)OC * 32);
    PUT(wkv, c->wkv, 512 * H);
    PUT(wkv_sf, c->wkv_sf, 512 * H / 32);
    PUT(kv_norm, c->kv_norm, 2 * 512);
    PUT(swa_loc, c->swa_loc, 4 * T);
    if (c->sink) PUT(sink, c->sink, 4 * 64);
    PUT(kv_cache, NULL, c->num_pages * c->page_bytes);
    PUT(kv_indices, c->kv_indices, 4 * T * TOPK);
    PUT(topk_lengths, c->topk_lengths, 4 * T);
    if (c->k.hca && (r = upload_hca(rt, c, d)) != CUDA_SUCCESS) return r;
    if (c->wo_a) {
        PUT(wo_a, c->wo_a, 2 * H * (OC / c->G));
        PUT(wo_a_sf, c->wo_a_sf, 2 * H * (OC / c->G) / 32);
        PUT(wo_b, c->wo_b, H * 2 * H);
        PUT(wo_b_sf, c->wo_b_sf, H * 2 * H / 32);
    }
    PUT(q_or_x, NULL, 2 * T * OC);
    PUT(out, NULL, 2 * T * H);
    make_tensors(c, d);
    return mlt_dsv4_reset(rt, c, d);
}

CUresult mlt_dsv4_reset(mla_runtime *rt, const mlt_dsv4_case *c, mlt_dsv4_dev *d) {
    CUresult r = mlt_upload(rt, d->kv_cache, c->kv_cache, (size_t)(c->num_pages * c->page_bytes));
    if (r == CUDA_SUCCESS && c->k.hca)
        r = mlt_upload(rt, d->ring, c->ring, (size_t)(4 * c->ring_rows * 1024));
    if (r == CUDA_SUCCESS && c->k.hca)
        r = mlt_upload(rt, d->pool, c->pool, (size_t)(c->pool_pages * c->pool_page_bytes));
    if (r == CUDA_SUCCESS) r = mlt_fill(rt, d->q_or_x, 0xFF, (size_t)(2 * c->T * OC));
    if (r == CUDA_SUCCESS) r = mlt_fill(rt, d->out, 0xFF, (size_t)(2 * c->T * c->H));
    return r;
}

void mlt_dsv4_dev_free(mla_runtime *rt, mlt_dsv4_dev *d) {
    CUdeviceptr p[] = {d->x, d->positions, d->freqs, d->c128_freqs, d->wq_a, d->wq_a_sf,
                       d->q_norm, d->wq_b, d->wq_b_sf, d->wkv, d->wkv_sf, d->kv_norm, d->swa_loc,
                       d->sink, d->kv_cache, d->kv_indices, d->topk_lengths, d->wkv_gate, d->ring,
                       d->ring_row, d->ape, d->c128_norm, d->c128_out_loc, d->pool,
                       d->page_table, d->attn_len, d->wo_a, d->wo_a_sf, d->wo_b, d->wo_b_sf,
                       d->q_or_x, d->out};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) mlt_free(rt, p[i]);
    memset(d, 0, sizeof *d);
}

void mlt_dsv4_dev_set_workspace(mlt_dsv4_dev *d, const DLTensor *ws, int max_tokens) {
    mlt_tensor_init(&d->t_ws, (CUdeviceptr)(uintptr_t)ws->data + ws->byte_offset, ws->dtype, 1,
                    ws->shape, NULL);
    d->ws_ptr = (CUdeviceptr)(uintptr_t)ws->data + ws->byte_offset;
    d->ws_max_tokens = max_tokens;
}

void mlt_dsv4_weights(const mlt_dsv4_dev *d, const DLTensor *w[4]) {
    w[0] = &d->t_wq_a.t, w[1] = &d->t_wkv.t, w[2] = &d->t_wo_a.t, w[3] = &d->t_wo_b.t;
}

void mlt_dsv4_attention_args(const mlt_dsv4_case *c, const mlt_dsv4_dev *d,
                             mla_attention_args *a) {
    mla_attention_args_init(a);
    a->q_or_x = &d->t_q_or_x.t, a->hidden_states = &d->t_x.t, a->kv_cache = &d->t_kv_cache.t;
    a->page_size = c->k.page_size, a->positions = &d->t_positions.t, a->freqs_real = &d->t_freqs.t;
    a->sm_scale = c->sm_scale, a->wq_a_weight = &d->t_wq_a.t, a->wq_a_sf = &d->t_wq_a_sf.t;
    a->q_norm_weight = &d->t_q_norm.t, a->wq_b_weight = &d->t_wq_b.t, a->wq_b_sf = &d->t_wq_b_sf.t;
    a->wkv_weight = &d->t_wkv.t, a->wkv_sf = &d->t_wkv_sf.t, a->kv_norm_weight = &d->t_kv_norm.t;
    a->swa_loc = &d->t_swa_loc.t, a->attn_sink = c->sink ? &d->t_sink.t : NULL;
    a->workspace = &d->t_ws.t, a->q_eps = c->q_eps, a->kv_eps = c->kv_eps;
    a->draft_tokens = c->k.draft;
    if (!c->k.hca) return;
    a->wkv_gate_weight = &d->t_wkv_gate.t, a->kv_score_ring = &d->t_ring.t;
    a->kv_gate_ring_row = &d->t_ring_row.t, a->c128_ape = &d->t_ape.t;
    a->c128_norm_weight = &d->t_c128_norm.t, a->c128_freqs_real = &d->t_c128_freqs.t;
    a->c128_out_loc = &d->t_c128_out_loc.t, a->c128_pool = &d->t_pool.t;
    a->c128_stride_kv_block = c->pool_page_bytes, a->c128_page_block = c->pool_block;
    a->c128_page_table = &d->t_page_table.t, a->c128_attn_len = &d->t_attn_len.t;
}

void mlt_dsv4_output_proj_args(const mlt_dsv4_case *c, const mlt_dsv4_dev *d,
                               mla_output_proj_args *a) {
    mla_output_proj_args_init(a);
    a->q_or_x = &d->t_q_or_x.t, a->positions = &d->t_positions.t, a->freqs_real = &d->t_freqs.t;
    a->wo_a_weight = &d->t_wo_a.t, a->wo_a_sf = &d->t_wo_a_sf.t, a->wo_b_weight = &d->t_wo_b.t;
    a->wo_b_sf = &d->t_wo_b_sf.t, a->out = &d->t_out.t, a->workspace = &d->t_ws.t;
    a->attn_sink = c->sink ? &d->t_sink.t : NULL;
    a->c128_attn_len = c->k.hca ? &d->t_attn_len.t : NULL;
}

mla_status mlt_dsv4_plan(mla_runtime *rt, const mlt_dsv4_case *c, const mlt_dsv4_dev *d,
                         CUstream stream) {
    return mla_attention_plan(rt, &d->t_kv_indices.t, &d->t_topk_lengths.t, c->k.page_size,
                              c->k.step, c->k.hca ? &d->t_attn_len.t : NULL, &d->t_ws.t, stream,
                              NULL);
}

/* ---- results and comparisons -------------------------------------------------------------- */

static CUresult get(mla_runtime *rt, void **dst, CUdeviceptr src, size_t bytes) {
    *dst = malloc(bytes ? bytes : 1);
    return *dst ? mlt_download(rt, *dst, src, bytes) : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult mlt_dsv4_download(mla_runtime *rt, const mlt_dsv4_case *c, const mlt_dsv4_dev *d,
                           int with_out, int with_partials, mlt_dsv4_got *g) {
    CUresult r = mlt_sync(rt);
    int64_t T = c->T;
    memset(g, 0, sizeof *g);
    if (r == CUDA_SUCCESS) r = get(rt, (void **)&g->q_or_x, d->q_or_x, (size_t)(2 * T * OC));
    if (r == CUDA_SUCCESS && with_out) r = get(rt, (void **)&g->out, d->out, (size_t)(2 * T * c->H));
    if (r == CUDA_SUCCESS)
        r = get(rt, (void **)&g->kv_cache, d->kv_cache, (size_t)(c->num_pages * c->page_bytes));
    if (r == CUDA_SUCCESS && c->k.hca)
        r = get(rt, (void **)&g->ring, d->ring, (size_t)(4 * c->ring_rows * 1024));
    if (r == CUDA_SUCCESS && c->k.hca)
        r = get(rt, (void **)&g->pool, d->pool, (size_t)(c->pool_pages * c->pool_page_bytes));
    g->kv_splits = mla__dsv4_kv_splits(rt, (int)T, c->k.hca);
    if (r != CUDA_SUCCESS || !with_partials || !mla__dsv4_split(c->T)) return r;
    mla__dsv4_ws_layout lay;
    mla__dsv4_layout(c->T, c->H, c->G, &lay); /* the kernels lay out the launch's T tokens */
    size_t heads = (size_t)T * g->kv_splits * MLR_DSV4_HEADS;
    r = get(rt, (void **)&g->part_o, d->ws_ptr + lay.part_o, heads * MLR_DSV4_D * 4);
    return r != CUDA_SUCCESS ? r : get(rt, (void **)&g->part_lse, d->ws_ptr + lay.part_lse, heads * 4);
}

void mlt_dsv4_got_free(mlt_dsv4_got *g) {
    free(g->q_or_x), free(g->out), free(g->part_o), free(g->part_lse), free(g->kv_cache);
    free(g->pool), free(g->ring);
    memset(g, 0, sizeof *g);
}

double mlt_rel_l2(const double *a, const double *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void bf16_to_double(const uint16_t *p, int64_t n, double *out) {
    for (int64_t i = 0; i < n; i++) out[i] = mlr_bf16_decode(p[i]);
}

/* The kernel's O: q_or_x for unsplit launches, the combined partials (with the sink) else. */
static void got_O(const mlt_dsv4_case *c, const mlt_dsv4_got *g, double *O) {
    if (!mla__dsv4_split(c->T)) {
        bf16_to_double(g->q_or_x, (int64_t)c->T * OC, O);
        return;
    }
    enum { NH = MLR_DSV4_HEADS, D = MLR_DSV4_D };
    const int S = g->kv_splits;
    double Os[MLA__DSV4_MAX_SPLITS * D], lses[MLA__DSV4_MAX_SPLITS];
    for (int t = 0; t < c->T; t++)
        for (int h = 0; h < NH; h++) {
            for (int s = 0; s < S; s++) {
                int64_t i = ((int64_t)t * S + s) * NH + h;
                lses[s] = g->part_lse[i];
                for (int k = 0; k < D; k++) Os[s * D + k] = g->part_o[i * D + k];
            }
            double sink = c->sink ? c->sink[h] : 0;
            mlr_dsv4_combine(S, Os, lses, c->sink ? &sink : NULL, O + (int64_t)t * OC + h * D);
        }
}

static long long count_nonfinite(const double *v, int64_t n) {
    long long k = 0;
    for (int64_t i = 0; i < n; i++) k += !isfinite(v[i]);
    return k;
}

/* Overall and worst per-token relative L2 of got vs ref [T, n]; tokens whose reference is all
 * zero must be exactly zero in got (counted in *zero_bad). */
static void token_errors(const double *got, const double *ref, int T, int64_t n, double *all,
                         double *worst, long long *zero_bad) {
    *all = mlt_rel_l2(got, ref, (int64_t)T * n);
    *worst = 0;
    for (int t = 0; t < T; t++) {
        const double *g = got + t * n, *r = ref + t * n;
        double norm = 0;
        for (int64_t i = 0; i < n; i++) norm += r[i] * r[i];
        if (norm > 0) {
            double e = mlt_rel_l2(g, r, n);
            *worst = e > *worst || isnan(e) ? e : *worst;
        } else {
            for (int64_t i = 0; i < n; i++) *zero_bad += g[i] != 0;
        }
    }
}

/* One e4m3 step at |x| (in units of the block scale): 2^-9 below the normal range, else 2^(e - 3)
 * for 2^e <= |x| < 2^(e + 1), 32 at the top of the range. */
static double e4m3_step(double x) {
    if (x < 0x1p-6) return 0x1p-9;
    int e;
    frexp(x, &e);  /* x = f 2^e, f in [0.5, 1): 2^(e - 1) <= x */
    return e - 4 > 5 ? 32.0 : ldexp(1.0, e - 4);
}

/* Elements of a decoded row more than one rounding step from the reference's. The GPU's GEMM sums
 * in another order than the reference, so a value next to a rounding boundary may land on the
 * neighbouring code, and a block's amax next to a power of 2 may move its UE8M0 scale by one
 * (the whole block then on a grid twice as fine or coarse): each e4m3 element may differ by one
 * step of the coarser of the two grids, each bf16 one by one bf16 step (plus kSlack of the
 * block's amax), a scale by one exponent. Wrong data is off by many steps. */
static double block_amax(const double *v, int lo, int hi) {
    double m = 0;
    for (int i = lo; i < hi; i++) m = fmax(m, fabs(v[i]));
    return m;
}

/* The summation-order error of an element is relative to the sums' terms, not to the element:
 * near zero (cancellation) it spans several of the fine steps there. An absolute slack of 1e-3 of
 * the block's amax covers it (measured on the H200: rows with relative L2 1e-6 and one element
 * beyond one step); a wrong value is off by a step of the coarse grid (~6 % of the amax) or more. */
static const double kSlack = 1e-3;

/* Whether got is within allow of ref; updates *w when it goes further past than w's. */
static int in_step(double got, double ref, double allow, double amax, int64_t slot, int index,
                   mlt_dsv4_off_elem *w) {
    const double d = fabs(got - ref);
    if (d <= allow) return 1;
    if (w && !(d / allow <= w->ratio))
        *w = (mlt_dsv4_off_elem){d / allow, got, ref, allow, amax, slot, index};
    return 0;
}

long long mlt_dsv4_row_off_steps(const uint8_t *got, const uint8_t *ref, int64_t B, int64_t stride,
                                 int64_t slot, const double *a, const double *b,
                                 mlt_dsv4_off_elem *worst) {
    const uint8_t *sa = got + mlr_kv_scale_off(B, stride, slot);
    const uint8_t *sb = ref + mlr_kv_scale_off(B, stride, slot);
    long long off = 0;
    for (int c = 0; c < 7; c++) {
        const double amax = block_amax(b, 64 * c, 64 * c + 64);
        if (abs((int)sa[c] - (int)sb[c]) > 1) {
            off += 64;
            if (worst && !(worst->ratio >= INFINITY))
                *worst = (mlt_dsv4_off_elem){INFINITY, mlr_ue8m0_decode(sa[c]),
                                             mlr_ue8m0_decode(sb[c]), 0, amax, slot, -1};
            continue;
        }
        const double s = fmax(mlr_ue8m0_decode(sa[c]), mlr_ue8m0_decode(sb[c]));
        for (int i = 64 * c; i < 64 * c + 64; i++) {
            const double x = fmax(fabs(a[i]), fabs(b[i])) / s;
            off += !in_step(a[i], b[i], e4m3_step(x) * s * (1 + 1e-9) + kSlack * amax, amax, slot,
                            i, worst);
        }
    }
    const double amax = block_amax(b, 448, MLR_DSV4_D);
    for (int i = 448; i < MLR_DSV4_D; i++) {
        int e;
        frexp(fmax(fabs(a[i]), fabs(b[i])), &e);  /* bf16: 8 significant bits */
        off += !in_step(a[i], b[i], ldexp(1.0, e - 8) * (1 + 1e-9) + kSlack * amax, amax, slot, i,
                        worst);
    }
    return off;
}

/* Worst decoded-row error over the written slots, the elements more than one rounding step off
 * and the bytes changed outside the rows. */
static void cache_errors(const uint8_t *got, const uint8_t *ref, const uint8_t *init,
                         int64_t bytes, int64_t B, int64_t stride, const int32_t *slots, int n,
                         double *worst, long long *off, mlt_dsv4_off_elem *w,
                         long long *stray) {
    uint8_t *mask = calloc((size_t)bytes, 1);
    double a[MLR_DSV4_D], b[MLR_DSV4_D];
    *worst = 0, *off = 0, *stray = 0;
    if (w) *w = (mlt_dsv4_off_elem){0, 0, 0, 0, 0, -1, 0};
    if (!mask) abort();
    for (int i = 0; i < n; i++) {
        if (slots[i] < 0) continue;
        mlr_decode_kv_row(got, B, stride, slots[i], a);
        mlr_decode_kv_row(ref, B, stride, slots[i], b);
        double e = mlt_rel_l2(a, b, MLR_DSV4_D);
        *worst = e > *worst || isnan(e) ? e : *worst;
        *off += mlt_dsv4_row_off_steps(got, ref, B, stride, slots[i], a, b, w);
        memset(mask + mlr_kv_row_off(B, stride, slots[i]), 1, MLR_DSV4_ROW);
        memset(mask + mlr_kv_scale_off(B, stride, slots[i]), 1, MLR_DSV4_SLOT);
    }
    for (int64_t i = 0; i < bytes; i++) *stray += !mask[i] && got[i] != init[i];
    free(mask);
}

/* Worst per-row relative L2 of the ring; rows no token writes must be bit-identical. */
static void ring_errors(const mlt_dsv4_case *c, const float *got, const float *ref,
                        double *worst, long long *stray) {
    char *written = calloc((size_t)c->ring_rows, 1);
    double a[1024], b[1024];
    *worst = 0, *stray = 0;
    if (!written) abort();
    for (int t = 0; t < c->T; t++) written[c->ring_row[t]] = 1;
    for (int64_t r = 0; r < c->ring_rows; r++) {
        for (int i = 0; i < 1024; i++) a[i] = got[r * 1024 + i], b[i] = ref[r * 1024 + i];
        double e = mlt_rel_l2(a, b, 1024);
        *worst = e > *worst || isnan(e) ? e : *worst;
        if (!written[r]) *stray += memcmp(got + r * 1024, c->ring + r * 1024, 4096) != 0;
    }
    free(written);
}

/* out against the reference phase C run on the kernel's own O: what mla_output_proj alone
 * contributes, free of the attention's error amplified by the two group-32 quantizations. */
static void own_out_errors(const mlt_dsv4_case *c, const mlt_dsv4_expect *e,
                           const mlt_dsv4_got *g, mlt_dsv4_errors *err) {
    int64_t nh = (int64_t)c->T * c->H;
    double *O = malloc(sizeof(double) * (size_t)c->T * OC), *out = malloc(sizeof(double) * (size_t)nh);
    if (!O || !out) abort();
    got_O(c, g, O);
    mlr_dsv4_layer L;
    mlt_dsv4_layer_of(c, e->kv_cache, e->ring, e->pool, &L);
    mlr_dsv4_result own = {0};
    if (mlr_dsv4_output_proj(&L, O, &own) != 0) abort();
    bf16_to_double(g->out, nh, out);
    long long zero_bad = 0;
    token_errors(out, own.out, c->T, c->H, &err->out_own, &err->out_own_token, &zero_bad);
    mlr_dsv4_result_free(&own);
    free(O), free(out);
}

void mlt_dsv4_compare(const mlt_dsv4_case *c, const mlt_dsv4_expect *e, const mlt_dsv4_got *g,
                      int with_out, mlt_dsv4_errors *err) {
    int64_t T = c->T, n = T * OC;
    double *O = malloc(sizeof(double) * (size_t)n), *q = malloc(sizeof(double) * (size_t)n);
    if (!O || !q) abort();
    memset(err, 0, sizeof *err);
    err->split = mla__dsv4_split(c->T);
    got_O(c, g, O);
    bf16_to_double(g->q_or_x, n, q);
    err->nan = count_nonfinite(O, n) + count_nonfinite(q, n);
    token_errors(O, e->res.O, c->T, OC, &err->O, &err->O_token, &err->zero_bad);
    if (err->split) err->q_split = mlt_rel_l2(q, e->res.q, n);
    if (with_out) {
        bf16_to_double(g->out, T * c->H, O);
        err->nan += count_nonfinite(O, T * c->H);
        token_errors(O, e->res.out, c->T, c->H, &err->out, &err->out_token, &err->zero_bad);
        own_out_errors(c, e, g, err);
    }
    cache_errors(g->kv_cache, e->kv_cache, c->kv_cache, c->num_pages * c->page_bytes,
                 c->k.page_size, c->page_bytes, c->swa_loc, c->T, &err->kv_row, &err->kv_off,
                 &err->kv_worst, &err->kv_stray);
    if (c->k.hca) {
        int32_t *fired = malloc(sizeof(int32_t) * (size_t)T);
        if (!fired) abort();
        for (int t = 0; t < T; t++)
            fired[t] = c->positions[t] % 128 == 127 && c->topk_lengths[t] ? c->c128_out_loc[t] : -1;
        cache_errors(g->pool, e->pool, c->pool, c->pool_pages * c->pool_page_bytes,
                     c->pool_block, c->pool_page_bytes, fired, c->T, &err->pool_row,
                     &err->pool_off, &err->pool_worst, &err->pool_stray);
        ring_errors(c, g->ring, e->ring, &err->ring_row, &err->ring_stray);
        free(fired);
    }
    free(O), free(q);
}

double mlt_dsv4_got_diff(const mlt_dsv4_case *c, const mlt_dsv4_got *a, const mlt_dsv4_got *b,
                         int with_out, int *identical) {
    int64_t n = (int64_t)c->T * OC, nh = (int64_t)c->T * c->H;
    int64_t kvb = c->num_pages * c->page_bytes, pb = c->pool_pages * c->pool_page_bytes;
    double *x = malloc(sizeof(double) * (size_t)n), *y = malloc(sizeof(double) * (size_t)n);
    if (!x || !y) abort();
    bf16_to_double(a->q_or_x, n, x), bf16_to_double(b->q_or_x, n, y);
    double diff = mlt_rel_l2(x, y, n), e = 0;
    *identical = memcmp(a->q_or_x, b->q_or_x, (size_t)n * 2) == 0 &&
                 memcmp(a->kv_cache, b->kv_cache, (size_t)kvb) == 0;
    if (with_out) {
        bf16_to_double(a->out, nh, x), bf16_to_double(b->out, nh, y);
        e = mlt_rel_l2(x, y, nh);
        diff = e > diff || isnan(e) ? e : diff;
        *identical = *identical && memcmp(a->out, b->out, (size_t)nh * 2) == 0;
    }
    long long stray, off;
    cache_errors(a->kv_cache, b->kv_cache, b->kv_cache, kvb, c->k.page_size, c->page_bytes,
                 c->swa_loc, c->T, &e, &off, NULL, &stray);
    diff = e > diff || isnan(e) || stray ? (stray ? INFINITY : e) : diff;
    if (c->k.hca) {
        *identical = *identical && memcmp(a->pool, b->pool, (size_t)pb) == 0 &&
                     memcmp(a->ring, b->ring, (size_t)(4 * c->ring_rows * 1024)) == 0;
        ring_errors(c, a->ring, b->ring, &e, &stray);
        diff = e > diff || isnan(e) ? e : diff;
    }
    free(x), free(y);
    return diff;
}
