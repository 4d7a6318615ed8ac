/* One fake-quant decode problem for the GPU tests (see fakequant_case.h). */
#include "util/fakequant_case.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/fakequant_ref.h"
#include "ref/flashmla_ref.h"

#define RANK 512
#define ROPE 64
#define ROW (RANK + ROPE)
#define BT_POISON 2147480000
#define LOG2E 1.4426950408889634

static double round_elem(int fp16, double x) {
    return fp16 ? mlr_flashmla_fp16_to_f64(mlr_flashmla_f64_to_fp16(x))
                : mlr_flashmla_bf16_to_f64(mlr_flashmla_f64_to_bf16(x));
}
static uint16_t pack_elem(int fp16, double x) {
    return fp16 ? mlr_flashmla_f64_to_fp16(x) : mlr_flashmla_f64_to_bf16(x);
}

int mlt_fq_make(const mlt_fq_case *c, uint64_t seed, double amp, mlt_fq_run *r, char *msg,
                size_t size) {
    memset(r, 0, sizeof *r);
    r->D = ROW, r->rank = RANK;
    for (int i = 0; i < c->batch; i++) r->max_len = c->lens[i] > r->max_len ? c->lens[i] : r->max_len;
    size_t nq = (size_t)c->batch * c->heads * ROW, nkv = (size_t)c->batch * (r->max_len + 1) * ROW;
    r->q = malloc(nq * sizeof *r->q), r->kv = malloc(nkv * sizeof *r->kv);
    r->out = malloc((size_t)c->batch * c->heads * RANK * sizeof *r->out);
    r->lse = malloc((size_t)c->batch * c->heads * sizeof *r->lse);
    if (!r->q || !r->kv || !r->out || !r->lse) return snprintf(msg, size, "out of host memory"), 1;
    mlt_rng g;
    mlt_rng_init(&g, seed);
    for (size_t i = 0; i < nkv; i++) r->kv[i] = round_elem(c->fp16, 2 * mlt_rng_uniform(&g) - 1);
    for (size_t i = 0; i < nq; i++) {
        double x = amp * (2 * mlt_rng_uniform(&g) - 1);
        r->q[i] = c->q_fp32 ? (double)(float)x : round_elem(c->fp16, x);
    }
    if (c->q_fp32 == 1)   /* the caller's dynamic NVFP4 of q, amax None, kept in fp32 */
        for (size_t row = 0; row < nq / ROW; row++)
            mlr_fq_qdq_row(MLR_FQ_NVFP4, r->q + row * ROW, ROW, NAN, r->q + row * ROW);
    return 0;
}

void mlt_fq_free(mlt_fq_run *r) {
    free(r->q), free(r->kv), free(r->out), free(r->lse);
    memset(r, 0, sizeof *r);
}

static double amax_of(float a) { return a > 0 ? (double)a : NAN; }

int mlt_fq_oracle(const mlt_fq_case *c, const mlt_fq_run *r, int i, double *out, double *lse) {
    mlr_fq_decode_cfg cfg = {
        .heads = c->heads, .rank = RANK, .rope = ROPE, .splits = c->splits,
        .carrier_fp16 = c->fp16,
        .qk_scale = (double)(float)(1.0 / sqrt((double)ROW) * LOG2E),
        .k_mode = c->k, .v_mode = c->v, .p_mode = c->p,
        .k_amax = amax_of(c->k_amax), .v_amax = amax_of(c->v_amax),
        .p_amax = c->p_amax > 0 ? (double)c->p_amax : 1.0,
    };
    return mlr_fq_decode_request(&cfg, r->q + (size_t)i * c->heads * ROW,
                                 r->kv + (size_t)i * (r->max_len + 1) * ROW, c->lens[i], out, lse);
}

/* Device buffers of one call. */
typedef struct dev {
    CUdeviceptr q, cache, bt, len, out, lse, ws;
    mlt_tensor tq, tc, tbt, tlen, tout, tlse, tws;
} dev;

static const DLDataType out_types[4] = {{0, 0, 0}, {kDLBfloat, 16, 1}, {kDLFloat, 16, 1},
                                        {kDLFloat, 32, 1}};

/* Host images of the cache and the block table; pages drawn in linear or shuffled order. */
static int build_cache(const mlt_fq_case *c, const mlt_fq_run *r, uint64_t seed, uint16_t **cache,
                       int32_t *bt, int max_pages, int *num_blocks) {
    int total = 0;
    for (int i = 0; i < c->batch; i++) total += (c->lens[i] + c->page - 1) / c->page;
    *num_blocks = total + 2;
    int *order = malloc((size_t)*num_blocks * sizeof *order);
    size_t n = (size_t)*num_blocks * c->page * ROW;
    *cache = malloc(n * 2);
    if (!order || !*cache) return free(order), 1;
    for (size_t i = 0; i < n; i++) (*cache)[i] = c->fp16 ? 0x7E00 : 0x7FC0;   /* NaN */
    for (int i = 0; i < *num_blocks; i++) order[i] = i;
    mlt_rng g;
    mlt_rng_init(&g, seed ^ 0x5bd1e995u);
    for (int i = *num_blocks - 1; c->shuffle && i > 0; i--) {
        int j = (int)mlt_rng_range(&g, 0, i), t = order[i];
        order[i] = order[j], order[j] = t;
    }
    int next = 1;   /* page 0 stays unused */
    for (int i = 0; i < c->batch; i++)
        for (int pg = 0; pg < max_pages; pg++) {
            int32_t *e = &bt[(size_t)i * max_pages + pg];
            *e = BT_POISON;
            if (pg * c->page >= c->lens[i]) continue;
            *e = order[next++];
            for (int s = 0; s < c->page && pg * c->page + s < c->lens[i]; s++)
                for (int f = 0; f < ROW; f++)
                    (*cache)[((size_t)*e * c->page + s) * ROW + f] = pack_elem(
                        c->fp16, r->kv[((size_t)i * (r->max_len + 1) + pg * c->page + s) * ROW + f]);
        }
    free(order);
    return 0;
}

static int upload_inputs(mla_runtime *rt, const mlt_fq_case *c, const mlt_fq_run *r,
                         uint64_t seed, dev *d, char *msg, size_t size) {
    int max_pages = (r->max_len + c->page - 1) / c->page + 1, num_blocks = 0;
    int32_t *bt = malloc((size_t)c->batch * max_pages * sizeof *bt), lens[MLT_FQ_MAX_BATCH];
    uint16_t *cache = NULL;
    size_t nq = (size_t)c->batch * c->heads * ROW, qb = c->q_fp32 ? 4 : 2;
    void *qh = malloc(nq * qb);
    int rc = 1;
    if (!bt || !qh || build_cache(c, r, seed, &cache, bt, max_pages, &num_blocks)) {
        snprintf(msg, size, "out of host memory");
        goto done;
    }
    for (size_t i = 0; i < nq; i++) {
        if (c->q_fp32) ((float *)qh)[i] = (float)r->q[i];
        else ((uint16_t *)qh)[i] = pack_elem(c->fp16, r->q[i]);
    }
    for (int i = 0; i < c->batch; i++) lens[i] = c->lens[i];
    size_t cb = (size_t)num_blocks * c->page * ROW * 2, btb = (size_t)c->batch * max_pages * 4;
    if (mlt_alloc(rt, nq * qb, &d->q) || mlt_alloc(rt, cb, &d->cache) || mlt_alloc(rt, btb, &d->bt) ||
        mlt_alloc(rt, (size_t)c->batch * 4, &d->len) || mlt_upload(rt, d->q, qh, nq * qb) ||
        mlt_upload(rt, d->cache, cache, cb) || mlt_upload(rt, d->bt, bt, btb) ||
        mlt_upload(rt, d->len, lens, (size_t)c->batch * 4)) {
        snprintf(msg, size, "device alloc/upload failed");
        goto done;
    }
    DLDataType et = c->fp16 ? (DLDataType){kDLFloat, 16, 1} : MLT_BF16;
    int64_t qs[3] = {c->batch, c->heads, ROW}, cs[3] = {num_blocks, c->page, ROW};
    int64_t bs[2] = {c->batch, max_pages}, ls[1] = {c->batch};
    mlt_tensor_init(&d->tq, d->q, c->q_fp32 ? MLT_FP32 : et, 3, qs, NULL);
    mlt_tensor_init(&d->tc, d->cache, et, 3, cs, NULL);
    mlt_tensor_init(&d->tbt, d->bt, MLT_INT32, 2, bs, NULL);
    mlt_tensor_init(&d->tlen, d->len, MLT_INT32, 1, ls, NULL);
    rc = 0;
done:
    free(bt), free(cache), free(qh);
    return rc;
}

static void args_of(const mlt_fq_case *c, dev *d, mla_attention_decode_args *a) {
    mla_attention_decode_args_init(a);
    a->q = &d->tq.t, a->latent_cache = &d->tc.t, a->block_table = &d->tbt.t;
    a->b_seq_len = &d->tlen.t;
    a->softmax_scale = (float)(1.0 / sqrt((double)ROW));
    a->num_kv_splits = c->splits;
    a->k_qdq = c->k, a->v_qdq = c->v, a->p_qdq = c->p;
    a->k_qdq_amax = c->k_amax > 0 ? c->k_amax : NAN;
    a->v_qdq_amax = c->v_amax > 0 ? c->v_amax : NAN;
    if (c->p_amax > 0) a->p_qdq_amax = c->p_amax;
    a->out_dtype = out_types[c->out];
}

static double load_out(const void *buf, int dt, size_t i) {
    if (dt == 3) return ((const float *)buf)[i];
    uint16_t v = ((const uint16_t *)buf)[i];
    return dt == 2 ? mlr_flashmla_fp16_to_f64(v) : mlr_flashmla_bf16_to_f64(v);
}

static int run_call(mla_runtime *rt, const mlt_fq_case *c, mlt_fq_run *r, dev *d, char *msg,
                    size_t size) {
    mla_attention_decode_args a;
    args_of(c, d, &a);
    int dt = c->out ? c->out : (c->fp16 ? 2 : 1);
    mla_attention_decode_sizes sz;
    if (mla_attention_decode_shape(&a, &sz) != MLA_OK)
        return snprintf(msg, size, "shape: %s", mla_last_error()), 1;
    size_t no = (size_t)c->batch * c->heads * RANK, ob = no * (dt == 3 ? 4 : 2);
    size_t nl = (size_t)c->batch * c->heads;
    if (mlt_alloc(rt, ob, &d->out) || mlt_alloc(rt, nl * 4, &d->lse) ||
        mlt_alloc(rt, sz.workspace_bytes, &d->ws) || mlt_fill(rt, d->out, 0xFF, ob) ||
        mlt_fill(rt, d->lse, 0xFF, nl * 4) || mlt_fill(rt, d->ws, 0xFF, sz.workspace_bytes))
        return snprintf(msg, size, "device alloc of the outputs failed"), 1;
    int64_t os[3] = {c->batch, c->heads, RANK}, ls[2] = {c->batch, c->heads};
    int64_t ws[1] = {(int64_t)sz.workspace_bytes};
    mlt_tensor_init(&d->tout, d->out, out_types[dt], 3, os, NULL);
    mlt_tensor_init(&d->tlse, d->lse, MLT_FP32, 2, ls, NULL);
    mlt_tensor_init(&d->tws, d->ws, MLT_UINT8, 1, ws, NULL);
    a.out = &d->tout.t, a.lse = &d->tlse.t, a.workspace = &d->tws.t;
    mla_status s = mla_attention_decode(rt, &a, NULL);
    if (s != MLA_OK) return snprintf(msg, size, "mla_attention_decode: %s", mla_last_error()), 1;
    CUresult cr = mlt_sync(rt);
    if (cr) return snprintf(msg, size, "sync: %s", mlt_cu_name(rt, cr)), 1;
    void *buf = malloc(ob);
    float *lse = malloc(nl * 4);
    int bad = !buf || !lse || mlt_download(rt, buf, d->out, ob) || mlt_download(rt, lse, d->lse, nl * 4);
    for (size_t i = 0; !bad && i < no; i++) r->out[i] = load_out(buf, dt, i);
    for (size_t i = 0; !bad && i < nl; i++) r->lse[i] = lse[i];
    free(buf), free(lse);
    return bad ? (snprintf(msg, size, "download failed"), 1) : 0;
}

int mlt_fq_device(mla_runtime *rt, const mlt_fq_case *c, uint64_t seed, mlt_fq_run *r, char *msg,
                  size_t size) {
    dev d;
    memset(&d, 0, sizeof d);
    int rc = upload_inputs(rt, c, r, seed, &d, msg, size);
    if (!rc) rc = run_call(rt, c, r, &d, msg, size);
    CUdeviceptr all[] = {d.q, d.cache, d.bt, d.len, d.out, d.lse, d.ws};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mlt_free(rt, all[i]);
    return rc;
}
