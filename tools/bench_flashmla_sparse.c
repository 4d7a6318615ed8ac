/* mlajit bench: the FlashMLA-compatible sparse cases, the performance table of issue 5 (FlashMLA's
 * times on this H200 in the notes):
 *   sparse decode  b 64 / 128, h_q 128, s_q 2, topk 2048, s_k 32768, fp8 rows   185 / 366 us
 *   sparse prefill s_q 4096, h_q 128, topk 2048, s_kv 32768, d_qk 576          3.83 ms
 * plus h_q 64 and 16 of both (no FlashMLA figure).
 *
 * Decode: mla_flash_with_kvcache with indices over FlashMLA's fp8 cache of 656-byte rows (512
 * random e4m3 bytes without the NaN codes, 4 float32 scales 2^-8..2^-6, 64 bfloat16 RoPE in
 * [-1, 1)), pages of 64 rows, every request's s_k rows on its own pages in a random page order;
 * each query token names topk distinct random positions of its request, as slots block * 64 +
 * offset. No split, so no schedule (FlashMLA computes its metadata outside the timed call too).
 * Prefill: mla_flash_sparse_fwd over a bf16 kv [s_kv, 1, 576] (37.7 MB: within the H200's L2,
 * for FlashMLA at this shape too); each token names topk distinct random rows of [0, s_kv). q is
 * bfloat16 in [-1, 1). Large buffers are filled by repeating a random host pool (64 MiB at most)
 * of whole rows.
 *
 * CUDA events around each call, warm-up calls first, median of the repeats.
 *   FLOP  = 2 * h_q * b * s_q * topk * (576 + 512)        (prefill: b = 1)
 *   bytes = q + gathered rows (b * s_q * topk * 656, prefill * 1152) + indices (4 each) + out
 *           (b * s_q * h_q * 512 * 2); every gathered row counted, none deduplicated */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/bench.h"

#define SP_ROW_FP8 656          /* 512 e4m3, 4 float32 scales, 64 bfloat16 */
#define SP_ROW_BF16 (576 * 2)
#define SP_PAGE 64              /* decode cache rows per page */
#define SP_POOL_BYTES (64u << 20)

typedef struct sp_shape {
    const char *name;
    int prefill;          /* 0: sparse decode, 1: sparse prefill (b 1) */
    int b, s_q, h_q, topk, s_k;
    double flashmla_us;   /* FlashMLA's time on the H200, 0 if not known */
} sp_shape;

/* Device buffers, tensors and arguments of one shape. */
typedef struct sp_bufs {
    CUdeviceptr q, kv, idx, out, lse, max_logits;
    size_t q_bytes, kv_bytes, idx_bytes;
    int64_t qs[4], ks[4], is[3], os[4], ls[3], ms[2];
    DLTensor tq, tkv, tidx, tout, tlse, tmax;
    mla_flash_with_kvcache_args dec;
    mla_flash_sparse_fwd_args pre;
} sp_bufs;

/* ---- random host values --------------------------------------------------------------------- */


/* A bfloat16 in [-1, 1): sign, exponent 2^-8..2^-1, random mantissa. */
static uint16_t sp_bf16(uint64_t *s) {
    uint64_t u = bench_rng(s);
    return (uint16_t)((u & 0x8000) | (119 + u % 8) << 7 | (u >> 8 & 0x7F));
}

static void sp_fill_bf16(uint64_t *s, uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint16_t v = sp_bf16(s);
        memcpy(p + 2 * i, &v, 2);
    }
}

/* One 656-byte row: random e4m3 bytes (NaN codes 0x7F / 0xFF replaced by +-448), scales, RoPE. */
static void sp_fill_fp8_row(uint64_t *s, uint8_t *row) {
    for (int i = 0; i < 512; i++) {
        uint8_t u = (uint8_t)bench_rng(s);
        row[i] = (u & 0x7F) == 0x7F ? (uint8_t)(u & 0xFE) : u;
    }
    for (int t = 0; t < 4; t++) {
        float sc = ldexpf(1.f, -6 - (int)(bench_rng(s) % 3));
        memcpy(row + 512 + 4 * t, &sc, 4);
    }
    sp_fill_bf16(s, row + 528, 64);
}

/* A host pool of at most SP_POOL_BYTES (whole rows of row_bytes) covering up to total bytes. */
static uint8_t *sp_pool(uint64_t *s, size_t total, size_t row_bytes, int fp8, size_t *pool_bytes) {
    size_t rows = total / row_bytes, max_rows = SP_POOL_BYTES / row_bytes;
    if (rows > max_rows) rows = max_rows;
    uint8_t *p = malloc(rows * row_bytes);
    for (size_t r = 0; p && r < rows; r++) {
        if (fp8) sp_fill_fp8_row(s, p + r * row_bytes);
        else sp_fill_bf16(s, p + r * row_bytes, row_bytes / 2);
    }
    *pool_bytes = rows * row_bytes;
    return p;
}

/* A random order of the b * s_k / 64 cache pages: request i owns pages order[i * s_k / 64 ...]. */
static int32_t *sp_page_order(uint64_t *s, const sp_shape *sh) {
    int n = sh->b * (sh->s_k / SP_PAGE);
    int32_t *order = malloc((size_t)n * 4);
    for (int i = 0; order && i < n; i++) order[i] = i;
    for (int i = n - 1; order && i > 0; i--) {
        int j = (int)(bench_rng(s) % (uint64_t)(i + 1)), t = order[i];
        order[i] = order[j], order[j] = t;
    }
    return order;
}

/* Indices: per query token topk distinct positions of [0, s_k) (partial Fisher-Yates over pos,
 * which stays a permutation); decode maps position p of request i to the slot
 * order[i * s_k / 64 + p / 64] * 64 + p % 64, prefill uses p as the row. */
static int32_t *sp_indices(uint64_t *s, const sp_shape *sh) {
    size_t n = (size_t)sh->b * sh->s_q * sh->topk, pages = (size_t)sh->s_k / SP_PAGE;
    int32_t *idx = malloc(n * 4), *pos = malloc((size_t)sh->s_k * 4);
    int32_t *order = sh->prefill ? NULL : sp_page_order(s, sh);
    if (!idx || !pos || (!sh->prefill && !order)) {
        free(idx), free(pos), free(order);
        return NULL;
    }
    for (int i = 0; i < sh->s_k; i++) pos[i] = i;
    for (size_t tok = 0; tok < (size_t)sh->b * sh->s_q; tok++) {
        int32_t *list = idx + tok * sh->topk, *pg = order ? order + tok / sh->s_q * pages : NULL;
        for (int k = 0; k < sh->topk; k++) {
            int j = k + (int)(bench_rng(s) % (uint64_t)(sh->s_k - k)), p = pos[j];
            pos[j] = pos[k], pos[k] = p;
            list[k] = pg ? pg[p / SP_PAGE] * SP_PAGE + p % SP_PAGE : p;
        }
    }
    free(pos), free(order);
    return idx;
}

/* ---- device buffers ------------------------------------------------------------------------- */

/* Writes bytes at dst by repeating the host pool (bytes a multiple of its rows). */
static int sp_upload(mla_runtime *rt, CUdeviceptr dst, size_t bytes, const uint8_t *pool,
                     size_t pool_bytes) {
    for (size_t at = 0; at < bytes; at += pool_bytes) {
        size_t n = bytes - at < pool_bytes ? bytes - at : pool_bytes;
        BENCH_CU(rt, cuMemcpyHtoD(dst + at, pool, n));
    }
    return CLI_OK;
done:
    return CLI_FAIL;
}

/* Allocates q, kv and indices and fills them with random valid values. */
static int sp_inputs(mla_runtime *rt, const sp_shape *sh, sp_bufs *f) {
    uint64_t s = 0x9E3779B97F4A7C15ull ^ (uint64_t)sh->h_q << 32 ^ (uint64_t)sh->b;
    size_t row = sh->prefill ? SP_ROW_BF16 : SP_ROW_FP8, qp_bytes = 0, kp_bytes = 0;
    uint8_t *qp = sp_pool(&s, f->q_bytes, SP_ROW_BF16, 0, &qp_bytes);
    uint8_t *kp = sp_pool(&s, f->kv_bytes, row, !sh->prefill, &kp_bytes);
    int32_t *idx = sp_indices(&s, sh);
    int rc = CLI_FAIL;
    if (!qp || !kp || !idx) {
        cli_fail("bench", "out of memory");
        goto done;
    }
    BENCH_CU(rt, cuMemAlloc(&f->q, f->q_bytes));
    BENCH_CU(rt, cuMemAlloc(&f->kv, f->kv_bytes));
    BENCH_CU(rt, cuMemAlloc(&f->idx, f->idx_bytes));
    if (sp_upload(rt, f->q, f->q_bytes, qp, qp_bytes) != CLI_OK) goto done;
    if (sp_upload(rt, f->kv, f->kv_bytes, kp, kp_bytes) != CLI_OK) goto done;
    BENCH_CU(rt, cuMemcpyHtoD(f->idx, idx, f->idx_bytes));
    rc = CLI_OK;
done:
    free(qp), free(kp), free(idx);
    return rc;
}

/* Allocates the outputs (out bf16, lse and max_logits float32, zeroed). */
static int sp_outputs(mla_runtime *rt, const sp_shape *sh, sp_bufs *f) {
    size_t rows = (size_t)sh->b * sh->s_q * sh->h_q;
    BENCH_CU(rt, cuMemAlloc(&f->out, rows * 512 * 2));
    BENCH_CU(rt, cuMemAlloc(&f->lse, rows * 4));
    BENCH_CU(rt, cuMemsetD8(f->out, 0, rows * 512 * 2));
    BENCH_CU(rt, cuMemsetD8(f->lse, 0, rows * 4));
    if (sh->prefill) {
        BENCH_CU(rt, cuMemAlloc(&f->max_logits, rows * 4));
        BENCH_CU(rt, cuMemsetD8(f->max_logits, 0, rows * 4));
    }
    return CLI_OK;
done:
    return CLI_FAIL;
}


/* Decode tensors: q [b, s_q, h_q, 576], k_cache [blocks, 64, 1, 656] e4m3, indices
 * [b, s_q, topk], out [b, s_q, h_q, 512], lse [b, h_q, s_q]. */
static void sp_decode_args(int dev, const sp_shape *sh, sp_bufs *f) {
    DLDataType bf16 = {kDLBfloat, 16, 1}, e4m3 = {MLA_DL_FLOAT8_E4M3FN, 8, 1};
    f->qs[0] = sh->b, f->qs[1] = sh->s_q, f->qs[2] = sh->h_q, f->qs[3] = 576;
    f->ks[0] = (int64_t)sh->b * sh->s_k / SP_PAGE, f->ks[1] = SP_PAGE, f->ks[2] = 1;
    f->ks[3] = SP_ROW_FP8;
    f->is[0] = sh->b, f->is[1] = sh->s_q, f->is[2] = sh->topk;
    f->os[0] = sh->b, f->os[1] = sh->s_q, f->os[2] = sh->h_q, f->os[3] = 512;
    f->ls[0] = sh->b, f->ls[1] = sh->h_q, f->ls[2] = sh->s_q;
    bench_tensor(&f->tq, f->q, dev, 4, f->qs, bf16);
    bench_tensor(&f->tkv, f->kv, dev, 4, f->ks, e4m3);
    bench_tensor(&f->tidx, f->idx, dev, 3, f->is, (DLDataType){kDLInt, 32, 1});
    bench_tensor(&f->tout, f->out, dev, 4, f->os, bf16);
    bench_tensor(&f->tlse, f->lse, dev, 3, f->ls, (DLDataType){kDLFloat, 32, 1});
    mla_flash_with_kvcache_args *a = &f->dec;
    mla_flash_with_kvcache_args_init(a);
    a->q = &f->tq, a->k_cache = &f->tkv, a->indices = &f->tidx;
    a->out = &f->tout, a->softmax_lse = &f->tlse;
    a->is_fp8_kvcache = 1;
}

/* Prefill tensors: q [s_q, h_q, 576], kv [s_kv, 1, 576], indices [s_q, 1, topk], out
 * [s_q, h_q, 512], max_logits and lse [s_q, h_q]. */
static void sp_prefill_args(int dev, const sp_shape *sh, sp_bufs *f) {
    DLDataType bf16 = {kDLBfloat, 16, 1}, f32 = {kDLFloat, 32, 1};
    f->qs[0] = sh->s_q, f->qs[1] = sh->h_q, f->qs[2] = 576;
    f->ks[0] = sh->s_k, f->ks[1] = 1, f->ks[2] = 576;
    f->is[0] = sh->s_q, f->is[1] = 1, f->is[2] = sh->topk;
    f->os[0] = sh->s_q, f->os[1] = sh->h_q, f->os[2] = 512;
    f->ms[0] = sh->s_q, f->ms[1] = sh->h_q;
    bench_tensor(&f->tq, f->q, dev, 3, f->qs, bf16);
    bench_tensor(&f->tkv, f->kv, dev, 3, f->ks, bf16);
    bench_tensor(&f->tidx, f->idx, dev, 3, f->is, (DLDataType){kDLInt, 32, 1});
    bench_tensor(&f->tout, f->out, dev, 3, f->os, bf16);
    bench_tensor(&f->tmax, f->max_logits, dev, 2, f->ms, f32);
    bench_tensor(&f->tlse, f->lse, dev, 2, f->ms, f32);
    mla_flash_sparse_fwd_args *a = &f->pre;
    mla_flash_sparse_fwd_args_init(a);
    a->q = &f->tq, a->kv = &f->tkv, a->indices = &f->tidx;
    a->out = &f->tout, a->max_logits = &f->tmax, a->lse = &f->tlse;
    a->sm_scale = (float)(1.0 / sqrt(576.0));
}

static int sp_setup(bench_ctx *ctx, const sp_shape *sh, sp_bufs *f) {
    mla_runtime *rt = ctx->rt;
    size_t tokens = (size_t)sh->b * sh->s_q;
    f->q_bytes = tokens * sh->h_q * SP_ROW_BF16;
    f->kv_bytes = (size_t)sh->b * sh->s_k * (sh->prefill ? SP_ROW_BF16 : SP_ROW_FP8);
    f->idx_bytes = tokens * sh->topk * 4;
    if (mla__runtime_enter(rt) != MLA_OK) return cli_fail("bench", "%s", mla_last_error());
    if (sp_inputs(rt, sh, f) != CLI_OK || sp_outputs(rt, sh, f) != CLI_OK) return CLI_FAIL;
    if (sh->prefill) sp_prefill_args(rt->options.device, sh, f);
    else sp_decode_args(rt->options.device, sh, f);
    return CLI_OK;
}

static void sp_free(mla_runtime *rt, sp_bufs *f) {
    CUdeviceptr p[] = {f->q, f->kv, f->idx, f->out, f->lse, f->max_logits};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        if (p[i]) rt->drv.cuMemFree(p[i]);
}

/* ---- timing --------------------------------------------------------------------------------- */

static mla_status sp_call(mla_runtime *rt, const sp_shape *sh, const sp_bufs *f,
                          CUstream stream) {
    return sh->prefill ? mla_flash_sparse_fwd(rt, &f->pre, stream)
                       : mla_flash_with_kvcache(rt, &f->dec, stream);
}

/* Median seconds of iters timed calls on stream, after warmup untimed ones. */
static int sp_time(bench_ctx *ctx, const sp_shape *sh, const sp_bufs *f, CUstream stream,
                   int warmup, int iters, double *sec) {
    mla_runtime *rt = ctx->rt;
    CUevent *ev = calloc(2 * (size_t)iters, sizeof *ev);
    double *t = malloc((size_t)iters * sizeof *t);
    int rc = CLI_FAIL, n_ev = 0;
    if (!ev || !t) {
        cli_fail("bench", "out of memory");
        goto done;
    }
    for (; n_ev < 2 * iters; n_ev++) BENCH_CU(rt, cuEventCreate(&ev[n_ev], CU_EVENT_DEFAULT));
    for (int i = 0; i < warmup; i++)
        if (sp_call(rt, sh, f, stream) != MLA_OK) goto call_failed;
    for (int i = 0; i < iters; i++) {
        BENCH_CU(rt, cuEventRecord(ev[2 * i], stream));
        if (sp_call(rt, sh, f, stream) != MLA_OK) goto call_failed;
        BENCH_CU(rt, cuEventRecord(ev[2 * i + 1], stream));
    }
    BENCH_CU(rt, cuStreamSynchronize(stream));
    for (int i = 0; i < iters; i++) {
        float ms = 0;
        BENCH_CU(rt, cuEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
        t[i] = ms * 1e-3;
    }
    *sec = cli_median(t, iters);
    rc = CLI_OK;
    goto done;
call_failed:
    bench_case_fail(sh->name, sh->prefill ? "mla_flash_sparse_fwd" : "mla_flash_with_kvcache");
done:
    for (int i = 0; i < n_ev; i++) rt->drv.cuEventDestroy(ev[i]);
    free(ev), free(t);
    return rc;
}

/* The row of a timed shape: the header's byte and FLOP formulas, FlashMLA's ratio. */
static void sp_row(bench_ctx *ctx, const sp_shape *sh, double sec, int iters) {
    double tokens = (double)sh->b * sh->s_q, gathered = tokens * sh->topk;
    double row = sh->prefill ? SP_ROW_BF16 : SP_ROW_FP8;
    double bytes = tokens * sh->h_q * (576 + 512) * 2 + gathered * (row + 4);
    bench_row *r = bench_add_row(ctx, sh->name, sec * 1e6);
    r->gbps = bytes / sec * 1e-9;
    r->tflops = 2.0 * sh->h_q * gathered * (576 + 512) / sec * 1e-12;
    r->prec = PREC_BF16;
    int n = sh->prefill
                ? snprintf(r->note, sizeof r->note, "s_q %d h_q %d topk %d s_kv %d d 576 bf16, "
                           "median of %d", sh->s_q, sh->h_q, sh->topk, sh->s_k, iters)
                : snprintf(r->note, sizeof r->note, "b %d s_q %d h_q %d topk %d s_k %d page %d "
                           "fp8 656 B, median of %d", sh->b, sh->s_q, sh->h_q, sh->topk, sh->s_k,
                           SP_PAGE, iters);
    if (sh->flashmla_us > 0 && n > 0 && (size_t)n < sizeof r->note)
        snprintf(r->note + n, sizeof r->note - n, "; FlashMLA %.0f us: x%.2f", sh->flashmla_us,
                 sec * 1e6 / sh->flashmla_us);
}

static int sp_run_shape(bench_ctx *ctx, const sp_shape *sh) {
    mla_runtime *rt = ctx->rt;
    sp_bufs *f = calloc(1, sizeof *f);
    CUstream stream = NULL;
    int rc = CLI_FAIL, iters = ctx->iters ? ctx->iters : sh->prefill ? 20 : 50;
    double sec = 0;
    if (!f) return cli_fail("bench", "out of memory");
    if (sp_setup(ctx, sh, f) != CLI_OK) goto done;
    BENCH_CU(rt, cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    if (sp_time(ctx, sh, f, stream, sh->prefill ? 3 : 10, iters, &sec) != CLI_OK) goto done;
    sp_row(ctx, sh, sec, iters);
    rc = CLI_OK;
done:
    bench_stream_release(rt, stream);
    sp_free(rt, f);
    free(f);
    return rc;
}

static int sp_run_shapes(bench_ctx *ctx, const sp_shape *shapes, int n) {
    int rc = CLI_OK;
    for (int i = 0; i < n; i++)
        if (sp_run_shape(ctx, &shapes[i]) != CLI_OK) rc = CLI_FAIL;
    return rc;
}

/* ---- the cases ------------------------------------------------------------------------------ */

#define SP_DECODE(name, b, h_q, us) {name, 0, b, 2, h_q, 2048, 32768, us}
#define SP_PREFILL(name, h_q, us) {name, 1, 1, 4096, h_q, 2048, 32768, us}

int bench_flashmla_sparse_decode_h128(bench_ctx *ctx) {
    static const sp_shape shapes[] = {SP_DECODE("sfmla-dec-b64-h128", 64, 128, 185.0),
                                      SP_DECODE("sfmla-dec-b128-h128", 128, 128, 366.0)};
    return sp_run_shapes(ctx, shapes, 2);
}

int bench_flashmla_sparse_decode_h64(bench_ctx *ctx) {
    static const sp_shape shapes[] = {SP_DECODE("sfmla-dec-b64-h64", 64, 64, 0),
                                      SP_DECODE("sfmla-dec-b128-h64", 128, 64, 0)};
    return sp_run_shapes(ctx, shapes, 2);
}

int bench_flashmla_sparse_decode_h16(bench_ctx *ctx) {
    static const sp_shape shapes[] = {SP_DECODE("sfmla-dec-b64-h16", 64, 16, 0),
                                      SP_DECODE("sfmla-dec-b128-h16", 128, 16, 0)};
    return sp_run_shapes(ctx, shapes, 2);
}

int bench_flashmla_sparse_prefill_h128(bench_ctx *ctx) {
    static const sp_shape shape = SP_PREFILL("sfmla-pre-h128", 128, 3830.0);
    return sp_run_shapes(ctx, &shape, 1);
}

int bench_flashmla_sparse_prefill_h64(bench_ctx *ctx) {
    static const sp_shape shape = SP_PREFILL("sfmla-pre-h64", 64, 0);
    return sp_run_shapes(ctx, &shape, 1);
}

int bench_flashmla_sparse_prefill_h16(bench_ctx *ctx) {
    static const sp_shape shape = SP_PREFILL("sfmla-pre-h16", 16, 0);
    return sp_run_shapes(ctx, &shape, 1);
}
