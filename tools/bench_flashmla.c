/* mlajit bench: the FlashMLA-compatible dense decode cases, the performance table of issue 4
 * (h_kv 1, page 64, causal, fixed lengths; FlashMLA's times on this H200 in the notes):
 *   b 128, h_q 128, s_q 1, s_k 1024 / 4096 / 16384      72 / 230 / 870 us
 *   b 128, h_q 128, s_q 2, s_k 1024 / 4096 / 16384      131 / 430 / 1600 us
 *   b 128, h_q 64,  s_q 1, s_k 4096                     166 us
 *   b 64,  h_q 16,  s_q 1, s_k 8192                     167 us
 * plus the b 128, h_q 128, s_q 1, s_k 4096 case at page 16 and page 1 (FlashMLA has page 64 only:
 * the ratio is to its page-64 time), s_k 8192 / 32768 (no FlashMLA figure) and the fp8 cache.
 *
 * Each case computes the schedule once (mla_get_metadata), then times mla_flash_with_kvcache
 * (decode + combine) with CUDA events, 10 warm-up calls, median of the repeats. q and the cache
 * hold N(0, 1) values (bench_fill_normal), as FlashMLA's benchmark does; until 2026-12-02 they
 * held one constant, on which the tensor cores draw less power and the clock stays higher
 * (docs/PERF.md). The cache of one case (>= 150 MB) is larger than L2, so inputs are not
 * rotated. The formulas:
 *   bytes = b * (s_q * h_q * 576 + s_k * 576) * kv_bytes + b * s_q * h_q * 512 * 2
 *   FLOP  = b * h_q * s_q * (2 * 576 * s_k + 2 * 512 * s_k)   (causal masking not subtracted) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/flashmla_kinds.h"
#include "tools/bench.h"

#define FM_BF16 MLA__FLASHMLA_KV_BF16
#define FM_FP8 MLA__FLASHMLA_KV_FP8

typedef struct fm_shape {
    const char *name;
    int kv;               /* MLA__FLASHMLA_KV_* */
    int b, s_q, s_k, h_q, page;
    double flashmla_us;   /* FlashMLA's time on the H200 (page 64), 0 if not known */
} fm_shape;

/* Device buffers and tensors of one shape. */
typedef struct fm_bufs {
    CUdeviceptr q, k, bt, seq, sched, splits, out, lse, ws, descale;
    int64_t qs[4], ks[4], bts[2], vec[1], sch[2], spl[1], os[4], ls[3], wss[1], one[1];
    DLTensor tq, tk, tbt, tseq, tsched, tsplits, tout, tlse, tws, tdq, tdk;
    mla_get_metadata_args meta;
    mla_flash_with_kvcache_args args;
} fm_bufs;


/* Random permutation of the b * pages physical pages, as FlashMLA's benchmark lays them. */
static int32_t *fm_block_table(int b, int pages) {
    int32_t *bt = malloc((size_t)b * pages * sizeof *bt);
    if (!bt) return NULL;
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < b * pages; i++) bt[i] = i;
    for (int i = b * pages - 1; i > 0; i--) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        int j = (int)(s % (uint64_t)(i + 1)), t = bt[i];
        bt[i] = bt[j], bt[j] = t;
    }
    return bt;
}

/* Fills q and the cache with N(0, 1) values (bf16, or e4m3 with descales 1), as FlashMLA's own
 * benchmark draws them (torch.randn); uploads the block table and lengths. */
static int fm_fill(mla_runtime *rt, const fm_shape *sh, fm_bufs *f, size_t q_bytes,
                   size_t k_bytes, int pages) {
    int eb = sh->kv == MLA__FLASHMLA_KV_FP8 ? 1 : 2;
    int32_t *bt = fm_block_table(sh->b, pages), *len = malloc((size_t)sh->b * 4);
    float descale[2] = {1.0f, 1.0f};
    int rc = CLI_FAIL;
    if (!bt || !len) {
        cli_fail("bench", "out of memory");
        goto done;
    }
    for (int i = 0; i < sh->b; i++) len[i] = sh->s_k;
    if (bench_fill_normal(rt, f->q, q_bytes / (size_t)eb, eb, 0x243F6A8885A308D3ull) != CLI_OK ||
        bench_fill_normal(rt, f->k, k_bytes / (size_t)eb, eb, 0x13198A2E03707344ull) != CLI_OK)
        goto done;
    BENCH_CU(rt, cuMemcpyHtoD(f->bt, bt, (size_t)sh->b * pages * 4));
    BENCH_CU(rt, cuMemcpyHtoD(f->seq, len, (size_t)sh->b * 4));
    BENCH_CU(rt, cuMemcpyHtoD(f->descale, descale, sizeof descale));
    rc = CLI_OK;
done:
    free(bt), free(len);
    return rc;
}

/* Sets up tensors and argument structs; allocations via the driver. */
static int fm_setup(bench_ctx *ctx, const fm_shape *sh, fm_bufs *f) {
    mla_runtime *rt = ctx->rt;
    int dev = rt->options.device, pages = (sh->s_k + sh->page - 1) / sh->page;
    size_t eb = sh->kv == MLA__FLASHMLA_KV_FP8 ? 1 : 2;
    size_t q_bytes = (size_t)sh->b * sh->s_q * sh->h_q * 576 * eb;
    size_t k_bytes = (size_t)sh->b * pages * sh->page * 576 * eb;
    memset(f, 0, sizeof *f);
    if (mla__runtime_enter(rt) != MLA_OK) return cli_fail("bench", "%s", mla_last_error());
    f->qs[0] = sh->b, f->qs[1] = sh->s_q, f->qs[2] = sh->h_q, f->qs[3] = 576;
    f->ks[0] = (int64_t)sh->b * pages, f->ks[1] = sh->page, f->ks[2] = 1, f->ks[3] = 576;
    f->bts[0] = sh->b, f->bts[1] = pages, f->vec[0] = sh->b, f->spl[0] = sh->b + 1;
    f->os[0] = sh->b, f->os[1] = sh->s_q, f->os[2] = sh->h_q, f->os[3] = 512;
    f->ls[0] = sh->b, f->ls[1] = sh->h_q, f->ls[2] = sh->s_q, f->one[0] = 1;
    mla_get_metadata_args_init(&f->meta);
    f->meta.num_q_tokens_per_head_k = sh->s_q * sh->h_q, f->meta.num_heads_k = 1;
    f->meta.is_fp8_kvcache = sh->kv == MLA__FLASHMLA_KV_FP8;
    BENCH_CU(rt, cuMemAlloc(&f->seq, (size_t)sh->b * 4)); /* the shape query checks it */
    bench_tensor(&f->tseq, f->seq, dev, 1, f->vec, (DLDataType){kDLInt, 32, 1});
    f->meta.cache_seqlens = &f->tseq;
    if (mla_get_metadata_shape(rt, &f->meta, f->sch, f->spl) != MLA_OK)
        return bench_case_fail(sh->name, "mla_get_metadata_shape");
    long long rows = (long long)sh->s_q * sh->h_q, slots = sh->b + f->sch[0];
    f->wss[0] = (int64_t)mla__flashmla_ws_bytes(rows, slots);
    BENCH_CU(rt, cuMemAlloc(&f->q, q_bytes));
    BENCH_CU(rt, cuMemAlloc(&f->k, k_bytes));
    BENCH_CU(rt, cuMemAlloc(&f->bt, (size_t)sh->b * pages * 4));
    BENCH_CU(rt, cuMemAlloc(&f->sched, (size_t)f->sch[0] * 32));
    BENCH_CU(rt, cuMemAlloc(&f->splits, (size_t)(sh->b + 1) * 4));
    BENCH_CU(rt, cuMemAlloc(&f->out, (size_t)rows * sh->b * 512 * 2));
    BENCH_CU(rt, cuMemAlloc(&f->lse, (size_t)rows * sh->b * 4));
    BENCH_CU(rt, cuMemAlloc(&f->ws, (size_t)f->wss[0]));
    BENCH_CU(rt, cuMemAlloc(&f->descale, 256));
    return fm_fill(rt, sh, f, q_bytes, k_bytes, pages);
done:
    return CLI_FAIL;
}

static void fm_views(bench_ctx *ctx, const fm_shape *sh, fm_bufs *f) {
    int dev = ctx->rt->options.device;
    DLDataType i32 = {kDLInt, 32, 1}, f32 = {kDLFloat, 32, 1}, u8 = {kDLUInt, 8, 1};
    DLDataType dt = sh->kv == MLA__FLASHMLA_KV_FP8 ? (DLDataType){MLA_DL_FLOAT8_E4M3FN, 8, 1}
                                                   : (DLDataType){kDLBfloat, 16, 1};
    bench_tensor(&f->tq, f->q, dev, 4, f->qs, dt);
    bench_tensor(&f->tk, f->k, dev, 4, f->ks, dt);
    bench_tensor(&f->tbt, f->bt, dev, 2, f->bts, i32);
    bench_tensor(&f->tseq, f->seq, dev, 1, f->vec, i32);
    bench_tensor(&f->tsched, f->sched, dev, 2, f->sch, i32);
    bench_tensor(&f->tsplits, f->splits, dev, 1, f->spl, i32);
    bench_tensor(&f->tout, f->out, dev, 4, f->os, (DLDataType){kDLBfloat, 16, 1});
    bench_tensor(&f->tlse, f->lse, dev, 3, f->ls, f32);
    bench_tensor(&f->tws, f->ws, dev, 1, f->wss, u8);
    bench_tensor(&f->tdq, f->descale, dev, 1, f->one, f32);
    bench_tensor(&f->tdk, f->descale + 4, dev, 1, f->one, f32);
    f->meta.cache_seqlens = &f->tseq;
    f->meta.tile_scheduler_metadata = &f->tsched, f->meta.num_splits = &f->tsplits;
    mla_flash_with_kvcache_args *a = &f->args;
    mla_flash_with_kvcache_args_init(a);
    a->q = &f->tq, a->k_cache = &f->tk, a->block_table = &f->tbt, a->cache_seqlens = &f->tseq;
    a->tile_scheduler_metadata = &f->tsched, a->num_splits = &f->tsplits;
    a->out = &f->tout, a->softmax_lse = &f->tlse, a->workspace = &f->tws;
    a->causal = sh->s_q > 1;
    if (sh->kv == MLA__FLASHMLA_KV_FP8) a->descale_q = &f->tdq, a->descale_k = &f->tdk;
}

static void fm_free(mla_runtime *rt, fm_bufs *f) {
    CUdeviceptr p[] = {f->q, f->k, f->bt, f->seq, f->sched, f->splits, f->out, f->lse, f->ws,
                       f->descale};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        if (p[i]) rt->drv.cuMemFree(p[i]);
}

/* Median seconds of iters timed decode calls on stream. */
static int fm_time(bench_ctx *ctx, fm_bufs *f, CUstream stream, int iters, double *sec) {
    enum { WARMUP = 10 };
    mla_runtime *rt = ctx->rt;
    CUevent *ev = calloc(2 * (size_t)iters, sizeof *ev);
    double *t = malloc((size_t)iters * sizeof *t);
    int rc = CLI_FAIL, n_ev = 0;
    if (!ev || !t) {
        cli_fail("bench", "out of memory");
        goto done;
    }
    for (; n_ev < 2 * iters; n_ev++) BENCH_CU(rt, cuEventCreate(&ev[n_ev], CU_EVENT_DEFAULT));
    for (int i = 0; i < WARMUP; i++)
        if (mla_flash_with_kvcache(rt, &f->args, stream) != MLA_OK) goto call_failed;
    for (int i = 0; i < iters; i++) {
        BENCH_CU(rt, cuEventRecord(ev[2 * i], stream));
        if (mla_flash_with_kvcache(rt, &f->args, stream) != MLA_OK) goto call_failed;
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
    bench_case_fail("flashmla", "mla_flash_with_kvcache");
done:
    for (int i = 0; i < n_ev; i++) rt->drv.cuEventDestroy(ev[i]);
    free(ev), free(t);
    return rc;
}

/* One shape: setup, metadata, timing, a row with FlashMLA's byte and FLOP formulas. */
static int fm_run_shape(bench_ctx *ctx, const fm_shape *sh) {
    mla_runtime *rt = ctx->rt;
    fm_bufs *f = calloc(1, sizeof *f);
    CUstream stream = NULL;
    int rc = CLI_FAIL, iters = ctx->iters ? ctx->iters : 50;
    double sec = 0;
    if (!f) return cli_fail("bench", "out of memory");
    if (fm_setup(ctx, sh, f) != CLI_OK) goto done;
    fm_views(ctx, sh, f);
    BENCH_CU(rt, cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    if (mla_get_metadata(rt, &f->meta, stream) != MLA_OK) {
        bench_case_fail(sh->name, "mla_get_metadata");
        goto done;
    }
    if (fm_time(ctx, f, stream, iters, &sec) != CLI_OK) goto done;
    double kv_bytes = sh->kv == MLA__FLASHMLA_KV_FP8 ? 1 : 2, total = (double)sh->b * sh->s_k;
    double rows = (double)sh->b * sh->s_q * sh->h_q;
    bench_row *r = bench_add_row(ctx, sh->name, sec * 1e6);
    r->gbps = ((total * 576 + rows * 576) * kv_bytes + rows * 512 * 2) / sec * 1e-9;
    r->tflops = 2.0 * sh->s_q * total * sh->h_q * (576 + 512) / sec * 1e-12;
    r->prec = sh->kv == MLA__FLASHMLA_KV_FP8 ? PREC_FP8 : PREC_BF16;
    int n = snprintf(r->note, sizeof r->note, "b %d s_q %d s_k %d h_q %d/1 page %d%s, P %lld, "
                     "median of %d", sh->b, sh->s_q, sh->s_k, sh->h_q, sh->page,
                     sh->s_q > 1 ? " causal" : "", (long long)f->sch[0], iters);
    if (sh->flashmla_us > 0 && n > 0 && (size_t)n < sizeof r->note)
        snprintf(r->note + n, sizeof r->note - n, "; FlashMLA%s %.0f us: x%.2f",
                 sh->page == 64 ? "" : " (page 64)", sh->flashmla_us,
                 sec * 1e6 / sh->flashmla_us);
    rc = CLI_OK;
done:
    bench_stream_release(rt, stream);
    fm_free(rt, f);
    free(f);
    return rc;
}

static int fm_run_shapes(bench_ctx *ctx, const fm_shape *shapes, int n) {
    int rc = CLI_OK;
    for (int i = 0; i < n; i++)
        if (fm_run_shape(ctx, &shapes[i]) != CLI_OK) rc = CLI_FAIL;
    return rc;
}

#define FM_RUN(ctx, shapes) fm_run_shapes(ctx, shapes, (int)(sizeof shapes / sizeof shapes[0]))

int bench_flashmla_dense_s1(bench_ctx *ctx) {
    static const fm_shape shapes[] = {
        {"fmla-b128-s1-1k", FM_BF16, 128, 1, 1024, 128, 64, 72.0},
        {"fmla-b128-s1-4k", FM_BF16, 128, 1, 4096, 128, 64, 230.0},
        {"fmla-b128-s1-16k", FM_BF16, 128, 1, 16384, 128, 64, 870.0},
    };
    return FM_RUN(ctx, shapes);
}

int bench_flashmla_dense_s2(bench_ctx *ctx) {
    static const fm_shape shapes[] = {
        {"fmla-b128-s2-1k", FM_BF16, 128, 2, 1024, 128, 64, 131.0},
        {"fmla-b128-s2-4k", FM_BF16, 128, 2, 4096, 128, 64, 430.0},
        {"fmla-b128-s2-16k", FM_BF16, 128, 2, 16384, 128, 64, 1600.0},
    };
    return FM_RUN(ctx, shapes);
}

int bench_flashmla_dense_heads(bench_ctx *ctx) {
    static const fm_shape shapes[] = {
        {"fmla-b128-h64-s1-4k", FM_BF16, 128, 1, 4096, 64, 64, 166.0},
        {"fmla-b64-h16-s1-8k", FM_BF16, 64, 1, 8192, 16, 64, 167.0},
    };
    return FM_RUN(ctx, shapes);
}

int bench_flashmla_dense_pages(bench_ctx *ctx) {
    static const fm_shape shapes[] = {
        {"fmla-b128-s1-4k-p16", FM_BF16, 128, 1, 4096, 128, 16, 230.0},
        {"fmla-b128-s1-4k-p1", FM_BF16, 128, 1, 4096, 128, 1, 230.0},
    };
    return FM_RUN(ctx, shapes);
}

int bench_flashmla_dense_long(bench_ctx *ctx) {
    static const fm_shape shapes[] = {
        {"fmla-b128-s1-8k", FM_BF16, 128, 1, 8192, 128, 64, 0},
        {"fmla-b128-s1-32k", FM_BF16, 128, 1, 32768, 128, 64, 0},
        {"fmla-b128-s2-8k", FM_BF16, 128, 2, 8192, 128, 64, 0},
        {"fmla-b128-s2-32k", FM_BF16, 128, 2, 32768, 128, 64, 0},
    };
    return FM_RUN(ctx, shapes);
}

int bench_flashmla_dense_fp8(bench_ctx *ctx) {
    static const fm_shape shapes[] = {
        {"fmla-fp8-b128-s1-4k", FM_FP8, 128, 1, 4096, 128, 64, 0},
        {"fmla-fp8-b128-s2-4k", FM_FP8, 128, 2, 4096, 128, 64, 0},
    };
    return FM_RUN(ctx, shapes);
}
