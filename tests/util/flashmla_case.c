/* One FlashMLA-compatible dense decode problem for the GPU tests (see flashmla_case.h). */
#include "util/flashmla_case.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define D 576
#define DV 512

static int fail(char *msg, size_t size, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, size, fmt, ap);
    va_end(ap);
    return 1;
}

/* ---- host data -------------------------------------------------------------------------------- */

/* Approximately standard normal (Irwin-Hall of four 16-bit uniforms): cheap enough for the
 * hundreds of millions of cache values of the large cases. */
static double normal(mlt_rng *r) {
    uint64_t u = mlt_rng_u64(r);
    double s = (double)(u & 0xFFFF) + (double)((u >> 16) & 0xFFFF) + (double)((u >> 32) & 0xFFFF) +
               (double)(u >> 48);
    return (s / 65536.0 - 2.0) * 1.7320508075688772;
}

/* Stores x (or NaN when nan) as element i of the data's format. */
static void put(const mlt_fm_data *d, void *base, size_t i, double x) {
    if (d->c.kv == MLR_FLASHMLA_E4M3) ((uint8_t *)base)[i] = mlr_flashmla_f64_to_e4m3(x);
    else if (d->c.kv == MLR_FLASHMLA_BF16) ((uint16_t *)base)[i] = mlr_flashmla_f64_to_bf16(x);
    else ((uint16_t *)base)[i] = mlr_flashmla_f64_to_fp16(x);
}

/* A value as FlashMLA's tests draw it: randn / 10 clamped to +-1 (fp8: randn clamped to +-4). */
static double draw(const mlt_fm_data *d, mlt_rng *r) {
    double x = normal(r);
    if (d->c.kv == MLR_FLASHMLA_E4M3) return x < -4 ? -4 : x > 4 ? 4 : x;
    x /= 10;
    return x < -1 ? -1 : x > 1 ? 1 : x;
}

static void make_lengths(const mlt_fm_case *c, mlt_rng *r, int32_t *len) {
    for (int i = 0; i < c->b; i++) {
        double l = c->varlen ? nearbyint(c->s_k + normal(r) * c->s_k / 2) : c->s_k;
        len[i] = (int32_t)(l < c->s_q ? c->s_q : l);
    }
    for (int z = 0; z < c->zeros && z < c->b; z++) len[mlt_rng_range(r, 0, c->b - 1)] = 0;
}

/* Keys a request's pages hold (its length, or the capacity). */
static int keys_of(const mlt_fm_case *c, int len) { return len > c->capacity ? len : c->capacity; }

/* Block table: each request's pages are consecutive draws of a random permutation of the
 * physical pages; columns past its pages hold the poison. */
static int make_block_table(mlt_fm_data *d, mlt_rng *r) {
    const mlt_fm_case *c = &d->c;
    int used = 0;
    d->max_blocks = 1;
    for (int i = 0; i < c->b; i++) {
        int pages = (keys_of(c, d->seqlens[i]) + c->page - 1) / c->page;
        used += pages;
        d->max_blocks = pages + 1 > d->max_blocks ? pages + 1 : d->max_blocks;
    }
    d->num_blocks = used + 3;  /* three pages nobody uses */
    d->bt_stride = d->max_blocks + (c->strided ? 5 : 0);
    int32_t *perm = malloc((size_t)d->num_blocks * sizeof *perm);
    d->block_table = malloc((size_t)c->b * d->bt_stride * sizeof *d->block_table);
    if (!perm || !d->block_table) return free(perm), 1;
    for (int k = 0; k < d->num_blocks; k++) perm[k] = k;
    for (int k = d->num_blocks - 1; k > 0; k--) {
        int j = (int)mlt_rng_range(r, 0, k), t = perm[k];
        perm[k] = perm[j], perm[j] = t;
    }
    for (int i = 0, next = 0; i < c->b; i++) {
        int pages = (keys_of(c, d->seqlens[i]) + c->page - 1) / c->page;
        for (int64_t col = 0; col < d->bt_stride; col++)
            d->block_table[i * d->bt_stride + col] = col < pages ? perm[next + col] : MLT_FM_BT_POISON;
        next += pages;
    }
    free(perm);
    return 0;
}

static void set_strides(mlt_fm_data *d) {
    const mlt_fm_case *c = &d->c;
    int pad = c->strided ? 1 : 0; /* paddings are multiples of 16 elements (16 bytes for fp8) */
    d->q_stride[3] = 1, d->q_stride[2] = D + 32 * pad;
    d->q_stride[1] = c->h_q * d->q_stride[2] + 16 * pad, d->q_stride[0] = c->s_q * d->q_stride[1] + 64 * pad;
    d->k_stride[3] = 1, d->k_stride[2] = D + 64 * pad;
    d->k_stride[1] = c->h_kv * d->k_stride[2] + 32 * pad;
    d->k_stride[0] = c->page * d->k_stride[1] + 48 * pad;
    d->o_stride[3] = 1, d->o_stride[2] = DV + 16 * pad;
    d->o_stride[1] = c->h_q * d->o_stride[2] + 32 * pad, d->o_stride[0] = c->s_q * d->o_stride[1];
    d->q_elems = (size_t)c->b * d->q_stride[0];
    d->k_elems = (size_t)d->num_blocks * d->k_stride[0];
    d->o_elems = (size_t)c->b * d->o_stride[0];
}

/* NaN everywhere, then the keys t < keys_of(len) of every request (each kv head). */
static void fill_k(mlt_fm_data *d, mlt_rng *r) {
    const mlt_fm_case *c = &d->c;
    for (size_t e = 0; e < d->k_elems; e++) put(d, d->k, e, NAN);
    for (int i = 0; i < c->b; i++) {
        int n = c->capacity > 0 ? keys_of(c, d->seqlens[i]) : d->seqlens[i];
        for (int t = 0; t < n; t++) {
            const double gain = c->ramp > 0 ? 1.0 + c->ramp * t / n : 1.0;
            for (int g = 0; g < c->h_kv; g++) {
                int64_t blk = d->block_table[i * d->bt_stride + t / c->page];
                size_t e = (size_t)(blk * d->k_stride[0] + (t % c->page) * d->k_stride[1] +
                                    g * d->k_stride[2]);
                for (int x = 0; x < D; x++) put(d, d->k, e + x, (x < DV ? 1.0 : gain) * draw(d, r));
            }
        }
    }
}

static void fill_q(mlt_fm_data *d, mlt_rng *r) {
    const mlt_fm_case *c = &d->c;
    for (size_t e = 0; e < d->q_elems; e++) put(d, d->q, e, NAN);
    for (int i = 0; i < c->b; i++)
        for (int j = 0; j < c->s_q; j++)
            for (int h = 0; h < c->h_q; h++) {
                size_t e = (size_t)(i * d->q_stride[0] + j * d->q_stride[1] + h * d->q_stride[2]);
                for (int x = 0; x < D; x++) put(d, d->q, e + x, draw(d, r));
            }
}

int mlt_fm_data_make(const mlt_fm_case *c, uint64_t seed, mlt_fm_data *d, char *msg, size_t size) {
    mlt_rng r;
    memset(d, 0, sizeof *d);
    d->c = *c;
    d->seed = seed;
    mlt_rng_init(&r, seed);
    d->elem = c->kv == MLR_FLASHMLA_E4M3 ? 1 : 2;
    d->seqlens = malloc((size_t)c->b * sizeof *d->seqlens);
    if (!d->seqlens) return fail(msg, size, "%s: out of host memory", c->name);
    make_lengths(c, &r, d->seqlens);
    if (make_block_table(d, &r)) return fail(msg, size, "%s: out of host memory", c->name);
    set_strides(d);
    d->q = malloc(d->q_elems * d->elem);
    d->k = malloc(d->k_elems * d->elem);
    if (!d->q || !d->k) return fail(msg, size, "%s: out of host memory", c->name);
    fill_k(d, &r);
    fill_q(d, &r);
    d->descale[0] = d->descale[1] = 1.0f;
    if (c->kv == MLR_FLASHMLA_E4M3)
        for (int k = 0; k < 2; k++) d->descale[k] = (float)(0.5 + 1.5 * mlt_rng_uniform(&r));
    return 0;
}

void mlt_fm_data_free(mlt_fm_data *d) {
    free(d->seqlens), free(d->block_table), free(d->q), free(d->k);
    memset(d, 0, sizeof *d);
}

void mlt_fm_problem(const mlt_fm_data *d, mlr_flashmla_problem *p) {
    const mlt_fm_case *c = &d->c;
    memset(p, 0, sizeof *p);
    p->format = c->kv;
    p->b = c->b, p->s_q = c->s_q, p->h_q = c->h_q, p->h_kv = c->h_kv, p->page_size = c->page;
    p->q = d->q, p->k_cache = d->k;
    for (int k = 0; k < 3; k++) p->q_stride[k] = d->q_stride[k], p->k_stride[k] = d->k_stride[k];
    p->block_table = d->block_table, p->bt_stride = d->bt_stride, p->seqlens = d->seqlens;
    p->softmax_scale = c->scale > 0 ? c->scale : 1.0 / sqrt((double)D);
    p->descale_q = d->descale[0], p->descale_k = d->descale[1];
    p->causal = c->causal;
}

/* ---- device side ------------------------------------------------------------------------------ */

#define CU_TRY(call, what)                                                                       \
    do {                                                                                         \
        CUresult r_ = (call);                                                                    \
        if (r_ != CUDA_SUCCESS)                                                                  \
            return fail(msg, size, "%s: %s: %s", d->c.name, what, mlt_cu_name(rt, r_));          \
    } while (0)

static DLDataType q_dtype(int kv) {
    return kv == MLR_FLASHMLA_BF16 ? MLT_BF16 : kv == MLR_FLASHMLA_FP16 ? MLT_FP16 : MLT_E4M3;
}

static int upload_inputs(mla_runtime *rt, const mlt_fm_data *d, mlt_fm_dev *v, char *msg,
                         size_t size) {
    const mlt_fm_case *c = &d->c;
    size_t bt_bytes = (size_t)c->b * d->bt_stride * 4;
    CU_TRY(mlt_alloc(rt, d->q_elems * d->elem, &v->q), "alloc q");
    CU_TRY(mlt_alloc(rt, d->k_elems * d->elem, &v->k), "alloc k_cache");
    CU_TRY(mlt_alloc(rt, bt_bytes, &v->bt), "alloc block_table");
    CU_TRY(mlt_alloc(rt, (size_t)c->b * 4, &v->seqlens), "alloc cache_seqlens");
    CU_TRY(mlt_alloc(rt, 256, &v->descale), "alloc descales");
    CU_TRY(mlt_upload(rt, v->q, d->q, d->q_elems * d->elem), "upload q");
    CU_TRY(mlt_upload(rt, v->k, d->k, d->k_elems * d->elem), "upload k_cache");
    CU_TRY(mlt_upload(rt, v->bt, d->block_table, bt_bytes), "upload block_table");
    CU_TRY(mlt_upload(rt, v->seqlens, d->seqlens, (size_t)c->b * 4), "upload cache_seqlens");
    CU_TRY(mlt_upload(rt, v->descale, d->descale, sizeof d->descale), "upload descales");
    return 0;
}

/* Views of the inputs and the metadata arguments; sizes the schedule. */
static int input_views(mla_runtime *rt, const mlt_fm_data *d, mlt_fm_dev *v, char *msg,
                       size_t size) {
    const mlt_fm_case *c = &d->c;
    int64_t qs[4] = {c->b, c->s_q, c->h_q, D}, ks[4] = {d->num_blocks, c->page, c->h_kv, D};
    int64_t bts[2] = {c->b, d->max_blocks}, btst[2] = {d->bt_stride, 1}, vec[1] = {c->b};
    int64_t one[1] = {1};
    mlt_tensor_init(&v->tq, v->q, q_dtype(c->kv), 4, qs, d->q_stride);
    mlt_tensor_init(&v->tk, v->k, q_dtype(c->kv), 4, ks, d->k_stride);
    mlt_tensor_init(&v->tbt, v->bt, MLT_INT32, 2, bts, btst);
    mlt_tensor_init(&v->tseq, v->seqlens, MLT_INT32, 1, vec, NULL);
    mlt_tensor_init(&v->tdq, v->descale, MLT_FP32, 1, one, NULL);
    mlt_tensor_init(&v->tdk, v->descale + 4, MLT_FP32, 1, one, NULL);
    mla_get_metadata_args_init(&v->meta);
    v->meta.cache_seqlens = &v->tseq.t;
    v->meta.num_q_tokens_per_head_k = c->s_q * c->h_q / c->h_kv;
    v->meta.num_heads_k = c->h_kv;
    v->meta.is_fp8_kvcache = c->kv == MLR_FLASHMLA_E4M3;
    v->meta.num_sm_parts = c->parts;
    v->meta.split_tokens = c->split_tokens;
    int64_t sched_shape[2], splits_shape[1];
    if (mla_get_metadata_shape(rt, &v->meta, sched_shape, splits_shape) != MLA_OK)
        return fail(msg, size, "%s: mla_get_metadata_shape: %s", c->name, mla_last_error());
    v->parts = (int)sched_shape[0];
    v->max_splits = 0;
    if (c->split_tokens > 0) { /* every chunk of the batch-invariant split fits */
        v->max_splits = c->b + v->parts;
        for (int i = 0; i < c->b; i++) {
            int units = (keys_of(c, d->seqlens[i]) + 63) / 64;
            v->max_splits += (units + c->split_tokens / 64 - 1) / (c->split_tokens / 64);
        }
    }
    v->meta.max_splits = v->max_splits;
    CU_TRY(mlt_alloc(rt, (size_t)v->parts * 32, &v->sched), "alloc tile_scheduler_metadata");
    CU_TRY(mlt_alloc(rt, (size_t)(c->b + 1) * 4, &v->splits), "alloc num_splits");
    mlt_tensor_init(&v->tsched, v->sched, MLT_INT32, 2, sched_shape, NULL);
    mlt_tensor_init(&v->tsplits, v->splits, MLT_INT32, 1, splits_shape, NULL);
    v->meta.tile_scheduler_metadata = &v->tsched.t;
    v->meta.num_splits = &v->tsplits.t;
    return 0;
}

static int output_views(mla_runtime *rt, const mlt_fm_data *d, mlt_fm_dev *v, char *msg,
                        size_t size) {
    const mlt_fm_case *c = &d->c;
    mla_flash_with_kvcache_args *a = &v->args;
    mla_flash_with_kvcache_args_init(a);
    a->q = &v->tq.t, a->k_cache = &v->tk.t, a->block_table = &v->tbt.t;
    a->cache_seqlens = &v->tseq.t, a->tile_scheduler_metadata = &v->tsched.t;
    a->num_splits = &v->tsplits.t, a->causal = c->causal;
    if (c->scale > 0) a->softmax_scale = c->scale;
    if (c->kv == MLR_FLASHMLA_E4M3) a->descale_q = &v->tdq.t, a->descale_k = &v->tdk.t;
    mla_flash_with_kvcache_sizes sz;
    if (mla_flash_with_kvcache_shape(a, v->max_splits, &sz) != MLA_OK)
        return fail(msg, size, "%s: mla_flash_with_kvcache_shape: %s", c->name, mla_last_error());
    v->ws_bytes = sz.workspace_bytes;
    CU_TRY(mlt_alloc(rt, d->o_elems * 2, &v->out), "alloc out");
    CU_TRY(mlt_alloc(rt, (size_t)c->b * c->h_q * c->s_q * 4, &v->lse), "alloc softmax_lse");
    CU_TRY(mlt_alloc(rt, v->ws_bytes, &v->ws), "alloc workspace");
    int64_t ws_shape[1] = {(int64_t)v->ws_bytes};
    mlt_tensor_init(&v->tout, v->out, c->kv == MLR_FLASHMLA_FP16 ? MLT_FP16 : MLT_BF16, 4,
                    sz.out, d->o_stride);
    mlt_tensor_init(&v->tlse, v->lse, MLT_FP32, 3, sz.softmax_lse, NULL);
    mlt_tensor_init(&v->tws, v->ws, MLT_UINT8, 1, ws_shape, NULL);
    a->out = &v->tout.t, a->softmax_lse = &v->tlse.t, a->workspace = &v->tws.t;
    return 0;
}

int mlt_fm_poison_outputs(mla_runtime *rt, const mlt_fm_data *d, const mlt_fm_dev *v, char *msg,
                          size_t size) {
    const mlt_fm_case *c = &d->c;
    CU_TRY(mlt_fill(rt, v->out, 0xFF, d->o_elems * 2), "NaN-fill out");
    CU_TRY(mlt_fill(rt, v->lse, 0xFF, (size_t)c->b * c->h_q * c->s_q * 4), "NaN-fill lse");
    CU_TRY(mlt_fill(rt, v->ws, 0xFF, v->ws_bytes), "NaN-fill workspace");
    return 0;
}

int mlt_fm_dev_create(mla_runtime *rt, const mlt_fm_data *d, mlt_fm_dev *v, char *msg,
                      size_t size) {
    memset(v, 0, sizeof *v);
    if (upload_inputs(rt, d, v, msg, size) || input_views(rt, d, v, msg, size) ||
        output_views(rt, d, v, msg, size))
        return 1;
    CU_TRY(mlt_fill(rt, v->sched, 0xFF, (size_t)v->parts * 32), "poison the schedule");
    CU_TRY(mlt_fill(rt, v->splits, 0xFF, (size_t)(d->c.b + 1) * 4), "poison num_splits");
    return mlt_fm_poison_outputs(rt, d, v, msg, size);
}

void mlt_fm_dev_destroy(mla_runtime *rt, mlt_fm_dev *v) {
    CUdeviceptr p[] = {v->q, v->k, v->bt, v->seqlens, v->sched, v->splits, v->out, v->lse,
                       v->ws, v->descale};
    for (size_t k = 0; k < sizeof p / sizeof p[0]; k++) mlt_free(rt, p[k]);
    memset(v, 0, sizeof *v);
}

int mlt_fm_upload_seqlens(mla_runtime *rt, const mlt_fm_data *d, const mlt_fm_dev *v, char *msg,
                          size_t size) {
    CU_TRY(mlt_upload(rt, v->seqlens, d->seqlens, (size_t)d->c.b * 4), "upload cache_seqlens");
    return 0;
}

int mlt_fm_run(mla_runtime *rt, mlt_fm_dev *v, CUstream stream, char *msg, size_t size) {
    mla_status s = mla_get_metadata(rt, &v->meta, stream);
    if (s != MLA_OK) return fail(msg, size, "mla_get_metadata: %s", mla_last_error());
    s = mla_flash_with_kvcache(rt, &v->args, stream);
    if (s != MLA_OK) return fail(msg, size, "mla_flash_with_kvcache: %s", mla_last_error());
    return 0;
}

/* ---- results ---------------------------------------------------------------------------------- */

int mlt_fm_result_alloc(const mlt_fm_data *d, mlt_fm_result *r) {
    const mlt_fm_case *c = &d->c;
    memset(r, 0, sizeof *r);
    r->n_out = (size_t)c->b * c->s_q * c->h_q * DV;
    r->n_lse = (size_t)c->b * c->h_q * c->s_q;
    r->out = malloc(r->n_out * sizeof *r->out);
    r->lse = malloc(r->n_lse * sizeof *r->lse);
    return r->out && r->lse ? 0 : 1;
}

void mlt_fm_result_free(mlt_fm_result *r) {
    free(r->out), free(r->lse);
    memset(r, 0, sizeof *r);
}

int mlt_fm_download(mla_runtime *rt, const mlt_fm_data *d, const mlt_fm_dev *v, mlt_fm_result *r,
                    char *msg, size_t size) {
    const mlt_fm_case *c = &d->c;
    int fmt = c->kv == MLR_FLASHMLA_FP16 ? MLR_FLASHMLA_FP16 : MLR_FLASHMLA_BF16;
    uint16_t *o = malloc(d->o_elems * 2);
    float *l = malloc(r->n_lse * 4);
    if (!o || !l) return free(o), free(l), fail(msg, size, "%s: out of host memory", c->name);
    CU_TRY(mlt_sync(rt), "synchronize after the decode");
    CU_TRY(mlt_download(rt, o, v->out, d->o_elems * 2), "download out");
    CU_TRY(mlt_download(rt, l, v->lse, r->n_lse * 4), "download softmax_lse");
    size_t k = 0;
    for (int i = 0; i < c->b; i++)
        for (int j = 0; j < c->s_q; j++)
            for (int h = 0; h < c->h_q; h++)
                for (int x = 0; x < DV; x++)
                    r->out[k++] = mlr_flashmla_load(o, fmt, i * d->o_stride[0] + j * d->o_stride[1] +
                                                               h * d->o_stride[2] + x);
    size_t logical = 0;
    for (size_t e = 0; e < d->o_elems; e++) logical += !isnan(mlr_flashmla_load(o, fmt, (int64_t)e));
    r->padding_written = logical > r->n_out; /* outputs are never NaN, padding must stay NaN */
    for (size_t e = 0; e < r->n_lse; e++) r->lse[e] = l[e];
    free(o), free(l);
    return 0;
}

void mlt_fm_reference(const mlt_fm_data *d, mlt_fm_result *r) {
    mlr_flashmla_problem p;
    mlt_fm_problem(d, &p);
    mlr_flashmla_decode(&p, r->out, r->lse);
    r->padding_written = 0;
}

int mlt_fm_compare(const mlt_fm_data *d, const mlt_fm_result *got, const mlt_fm_result *want,
                   char *msg, size_t size) {
    const int fp8 = d->c.kv == MLR_FLASHMLA_E4M3;
    const int out_format = d->c.kv == MLR_FLASHMLA_FP16 ? MLR_FLASHMLA_FP16 : MLR_FLASHMLA_BF16;
    const double abs_tol = MLR_FLASHMLA_OUT_ABS * (fp8 ? 10.0 * d->descale[1] : 1.0);
    const double cos_tol = fp8 ? MLR_FLASHMLA_FP8_OUT_COS : MLR_FLASHMLA_OUT_COS;
    double *rounded = malloc(want->n_out * sizeof *rounded);
    if (!rounded) return fail(msg, size, "out of host memory");
    for (size_t k = 0; k < want->n_out; k++) {
        uint16_t v = out_format == MLR_FLASHMLA_FP16 ? mlr_flashmla_f64_to_fp16(want->out[k])
                                                     : mlr_flashmla_f64_to_bf16(want->out[k]);
        rounded[k] = mlr_flashmla_load(&v, out_format, 0);
    }
    char why[256];
    int ok = mlr_flashmla_allclose(got->out, rounded, want->n_out, abs_tol, MLR_FLASHMLA_OUT_REL,
                                   cos_tol, why, sizeof why);
    free(rounded);
    if (!ok) return fail(msg, size, "out: %s", why);
    if (!mlr_flashmla_allclose(got->lse, want->lse, want->n_lse, MLR_FLASHMLA_LSE_ABS,
                               MLR_FLASHMLA_LSE_REL, -1, why, sizeof why))
        return fail(msg, size, "softmax_lse: %s", why);
    if (got->padding_written) return fail(msg, size, "out: padding between strided rows written");
    return 0;
}
