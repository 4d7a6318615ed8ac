/* mlajit bench: the fake-quant cases (include/mlajit/fakequant.h, docs/FAKEQUANT.md), the issue's
 * performance table:
 *   decode:  b 128, h 128, latent rows of 576 (rank 512), page 64, fixed lengths L 4096 / 16384,
 *            bf16 q and cache; modes none, K / V / P alone in fp8 and in nvfp4, all fp8, all
 *            nvfp4. Targets: no quant within 1.3x of FlashMLA's dense decode on this H200
 *            (230 / 870 us), each mode within 1.5x of no quant at the same length.
 *   prefill: one causal sequence of 8192, h 128 (h_kv 128), qk 192, v 128, bf16; modes none,
 *            all fp8 (Q, K, P, V), all nvfp4, and 2:4 score sparsity without quant.
 * num_kv_splits is the API's default, 32 (the seed keeps it fixed for reproducibility; it is part
 * of the P-quant numerics, so a caller who keeps the default gets these times). K and V amaxes
 * are 4.0 (the inputs are N(0,1)), P's the default 1.0; prefill Q/K/V amaxes 4.0.
 *
 * Inputs: bf16 N(0,1) values (a pool of BENCH_POOL random values tiled over each buffer, so rows
 * differ), pages in a random order. CUDA events around each call after the warm-up (the first
 * call compiles), median. Formulas:
 *   decode bytes  = b * L * 576 * 2 + b * h * 576 * 2 + b * h * 512 * 2   (cache rows, q, out)
 *   decode FLOP   = 2 * b * h * L * (576 + 512)
 *   prefill FLOP  = 2 * h * (S * (S + 1) / 2) * (192 + 128)             (causal; 2:4 counted dense)
 * The prefill kernel is plain fp32 FMA: when the first timed call takes over a second, only 3
 * calls are timed (unless --iters says otherwise). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlajit/fakequant.h"
#include "tools/bench.h"

#define FQ_B 128
#define FQ_H 128
#define FQ_ROW 576
#define FQ_RANK 512
#define FQ_PAGE 64
#define FQ_SPLITS 32
#define FQ_AMAX 4.0f
#define FQ_PF_S 8192
#define FQ_PF_DQK 192
#define FQ_PF_DV 128
#define FQ_SLOW_S 1.0                    /* a prefill call slower than this: 3 timed calls */

typedef mla_status (*fq_call)(mla_runtime *rt, const void *args, CUstream stream);

/* ---- random inputs --------------------------------------------------------------------------- */

/* Uploads a random permutation of the n_pages physical pages as the [b, n_pages / b] table. */
static int fq_block_table(mla_runtime *rt, CUdeviceptr dst, int n_pages) {
    int32_t *bt = malloc((size_t)n_pages * sizeof *bt);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    int rc = CLI_FAIL;
    if (!bt) {
        cli_fail("bench", "out of memory");
        goto done;
    }
    for (int i = 0; i < n_pages; i++) bt[i] = i;
    for (int i = n_pages - 1; i > 0; i--) {
        int j = (int)(bench_rng(&s) % (uint64_t)(i + 1)), t = bt[i];
        bt[i] = bt[j], bt[j] = t;
    }
    BENCH_CU(rt, cuMemcpyHtoD(dst, bt, (size_t)n_pages * 4));
    rc = CLI_OK;
done:
    free(bt);
    return rc;
}


static void fq_free(mla_runtime *rt, CUdeviceptr *p, int n) {
    for (int i = 0; i < n; i++)
        if (p[i]) rt->drv.cuMemFree(p[i]);
}

/* ---- timing ---------------------------------------------------------------------------------- */

/* Median seconds of *iters timed calls after warmup untimed ones (the first compiles; the stream
 * is synchronized before timing). slow_s > 0: when the first timed call takes longer, at most 3
 * calls are timed; *iters says how many were. */
static int fq_time(mla_runtime *rt, const char *name, fq_call call, const void *args,
                   CUstream stream, int warmup, int *iters, double slow_s, double *sec) {
    int n = *iters, n_ev = 0, rc = CLI_FAIL;
    CUevent *ev = calloc(2 * (size_t)n, sizeof *ev);
    double *t = malloc((size_t)n * sizeof *t);
    float ms = 0;
    if (!ev || !t) {
        cli_fail("bench", "out of memory");
        goto done;
    }
    for (; n_ev < 2 * n; n_ev++) BENCH_CU(rt, cuEventCreate(&ev[n_ev], CU_EVENT_DEFAULT));
    for (int i = 0; i < warmup; i++)
        if (call(rt, args, stream) != MLA_OK) goto call_failed;
    BENCH_CU(rt, cuStreamSynchronize(stream));
    for (int i = 0; i < n; i++) {
        BENCH_CU(rt, cuEventRecord(ev[2 * i], stream));
        if (call(rt, args, stream) != MLA_OK) goto call_failed;
        BENCH_CU(rt, cuEventRecord(ev[2 * i + 1], stream));
        if (i > 0 || slow_s <= 0) continue;
        BENCH_CU(rt, cuEventSynchronize(ev[1]));
        BENCH_CU(rt, cuEventElapsedTime(&ms, ev[0], ev[1]));
        if (ms * 1e-3 > slow_s && n > 3) n = 3;
    }
    BENCH_CU(rt, cuStreamSynchronize(stream));
    for (int i = 0; i < n; i++) {
        BENCH_CU(rt, cuEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
        t[i] = ms * 1e-3;
    }
    *sec = cli_median(t, n), *iters = n;
    rc = CLI_OK;
    goto done;
call_failed:
    bench_case_fail(name, "call");
done:
    for (int i = 0; i < n_ev; i++) rt->drv.cuEventDestroy(ev[i]);
    free(ev), free(t);
    return rc;
}

/* ---- decode ---------------------------------------------------------------------------------- */

typedef struct fq_decode_shape {
    const char *name; /* row name prefix */
    int len;          /* every request's length */
    double flashmla_us;
    int batch;        /* requests (at most FQ_B) */
    int n_modes;      /* the first n_modes of fq_decode_modes (or of modes) */
    unsigned skip;    /* bit i set: mode i not run */
    const struct fq_mode *modes;   /* NULL: fq_decode_modes */
} fq_decode_shape;

struct fq_mode;
typedef struct fq_mode {
    const char *name;
    int k, v, p; /* decode: K, V, P; prefill: k = Q, K, P and V, p = sparsity N of N:4 */
} fq_mode;

static const fq_mode fq_decode_modes[] = {
    {"none", 0, 0, 0},      {"k-fp8", 1, 0, 0},   {"v-fp8", 0, 1, 0},
    {"p-fp8", 0, 0, 1},     {"k-nvfp4", 2, 0, 0}, {"v-nvfp4", 0, 2, 0},
    {"p-nvfp4", 0, 0, 2},   {"fp8", 1, 1, 1},     {"nvfp4", 2, 2, 2},
};

/* K and / or V quantized, P not (the dense path's quantizing kernel where it is chosen). */
static const fq_mode fq_decode_kv_modes[] = {
    {"none", 0, 0, 0},    {"k-fp8", 1, 0, 0},   {"v-fp8", 0, 1, 0},   {"kv-fp8", 1, 1, 0},
    {"k-nvfp4", 2, 0, 0}, {"v-nvfp4", 0, 2, 0}, {"kv-nvfp4", 2, 2, 0},
};

/* K and / or V with P (the tile alternation of decode_sm90.cu or decode_mma.cu, by the modes). */
static const fq_mode fq_decode_mix_modes[] = {
    {"none", 0, 0, 0},          {"k-fp8-p-fp8", 1, 0, 1},   {"v-fp8-p-fp8", 0, 1, 1},
    {"kv-fp8-p-nvfp4", 1, 1, 2}, {"k-nvfp4-p-fp8", 2, 0, 1}, {"v-nvfp4-p-fp8", 0, 2, 1},
};

enum { DQ, DCACHE, DBT, DLEN, DOUT, DLSE, DWS, N_DBUF };

typedef struct fq_decode_bufs {
    CUdeviceptr p[N_DBUF];
    int64_t qs[3], cs[3], bts[2], lens[1], os[3], ls[2], wss[1];
    DLTensor tq, tc, tbt, tlen, tout, tlse, tws;
    mla_attention_decode_args args;
} fq_decode_bufs;

static mla_status fq_call_decode(mla_runtime *rt, const void *args, CUstream stream) {
    return mla_attention_decode(rt, args, stream);
}

/* Tensors and the arguments (modes none) of the decode over the buffers. */
static void fq_decode_views(mla_runtime *rt, const fq_decode_shape *sh, fq_decode_bufs *f) {
    int dev = rt->options.device, pages = sh->len / FQ_PAGE, B = sh->batch;
    DLDataType bf16 = {kDLBfloat, 16, 1}, i32 = {kDLInt, 32, 1};
    f->qs[0] = B, f->qs[1] = FQ_H, f->qs[2] = FQ_ROW;
    f->cs[0] = (int64_t)B * pages, f->cs[1] = FQ_PAGE, f->cs[2] = FQ_ROW;
    f->bts[0] = B, f->bts[1] = pages, f->lens[0] = B;
    f->os[0] = B, f->os[1] = FQ_H, f->os[2] = FQ_RANK, f->ls[0] = B, f->ls[1] = FQ_H;
    bench_tensor(&f->tq, f->p[DQ], dev, 3, f->qs, bf16);
    bench_tensor(&f->tc, f->p[DCACHE], dev, 3, f->cs, bf16);
    bench_tensor(&f->tbt, f->p[DBT], dev, 2, f->bts, i32);
    bench_tensor(&f->tlen, f->p[DLEN], dev, 1, f->lens, i32);
    bench_tensor(&f->tout, f->p[DOUT], dev, 3, f->os, bf16);
    bench_tensor(&f->tlse, f->p[DLSE], dev, 2, f->ls, (DLDataType){kDLFloat, 32, 1});
    mla_attention_decode_args *a = &f->args;
    mla_attention_decode_args_init(a);
    a->q = &f->tq, a->latent_cache = &f->tc, a->block_table = &f->tbt, a->b_seq_len = &f->tlen;
    a->softmax_scale = (float)(1.0 / sqrt((double)FQ_ROW));
    a->page_size = FQ_PAGE, a->num_kv_splits = FQ_SPLITS;
    a->out = &f->tout, a->lse = &f->tlse;
}

/* Allocates and fills the inputs of one length; the workspace from mla_attention_decode_shape. */
static int fq_decode_setup(bench_ctx *ctx, const fq_decode_shape *sh, fq_decode_bufs *f) {
    mla_runtime *rt = ctx->rt;
    int pages = sh->len / FQ_PAGE, B = sh->batch;
    size_t n_q = (size_t)B * FQ_H * FQ_ROW, n_c = (size_t)B * pages * FQ_PAGE * FQ_ROW;
    int32_t lens[FQ_B];
    mla_attention_decode_sizes sz;
    if (mla__runtime_enter(rt) != MLA_OK) return cli_fail("bench", "%s", mla_last_error());
    for (int i = 0; i < B; i++) lens[i] = sh->len;
    BENCH_CU(rt, cuMemAlloc(&f->p[DQ], n_q * 2));
    BENCH_CU(rt, cuMemAlloc(&f->p[DCACHE], n_c * 2));
    BENCH_CU(rt, cuMemAlloc(&f->p[DBT], (size_t)B * pages * 4));
    BENCH_CU(rt, cuMemAlloc(&f->p[DLEN], (size_t)B * 4));
    BENCH_CU(rt, cuMemAlloc(&f->p[DOUT], (size_t)B * FQ_H * FQ_RANK * 2));
    BENCH_CU(rt, cuMemAlloc(&f->p[DLSE], (size_t)B * FQ_H * 4));
    BENCH_CU(rt, cuMemcpyHtoD(f->p[DLEN], lens, (size_t)B * 4));
    if (bench_fill_normal(rt, f->p[DQ], n_q, 2, 0x243F6A8885A308D3ull) != CLI_OK ||
        bench_fill_normal(rt, f->p[DCACHE], n_c, 2, 0x13198A2E03707344ull) != CLI_OK ||
        fq_block_table(rt, f->p[DBT], B * pages) != CLI_OK)
        return CLI_FAIL;
    fq_decode_views(rt, sh, f);
    if (mla_attention_decode_shape(&f->args, &sz) != MLA_OK)
        return bench_case_fail(sh->name, "mla_attention_decode_shape");
    f->wss[0] = (int64_t)sz.workspace_bytes;
    BENCH_CU(rt, cuMemAlloc(&f->p[DWS], sz.workspace_bytes));
    bench_tensor(&f->tws, f->p[DWS], rt->options.device, 1, f->wss, (DLDataType){kDLUInt, 8, 1});
    f->args.workspace = &f->tws;
    return CLI_OK;
done:
    return CLI_FAIL;
}

static void fq_decode_row(bench_ctx *ctx, const fq_decode_shape *sh, const fq_mode *m,
                          double sec, double none_sec, int iters) {
    char name[32];
    double rows = (double)sh->batch * FQ_H, keys = (double)sh->batch * sh->len;
    snprintf(name, sizeof name, "%s-%s", sh->name, m->name);
    bench_row *r = bench_add_row(ctx, name, sec * 1e6);
    r->gbps = (keys * FQ_ROW * 2 + rows * FQ_ROW * 2 + rows * FQ_RANK * 2) / sec * 1e-9;
    r->tflops = 2.0 * rows * sh->len * (FQ_ROW + FQ_RANK) / sec * 1e-12;
    r->prec = PREC_BF16;
    int n = snprintf(r->note, sizeof r->note, "b %d h %d L %d page %d splits %d, median of %d; "
                     "none x%.2f (<= 1.5)", sh->batch, FQ_H, sh->len, FQ_PAGE, FQ_SPLITS, iters,
                     sec / none_sec);
    if (sh->flashmla_us > 0 && n > 0 && (size_t)n < sizeof r->note)
        snprintf(r->note + n, sizeof r->note - n, "; FlashMLA %.0f us x%.2f (none <= 1.3)",
                 sh->flashmla_us, sec * 1e6 / sh->flashmla_us);
}

/* One length: inputs once, then every mode (none first: the others' ratio is to it). */
static int fq_decode_run(bench_ctx *ctx, const fq_decode_shape *sh) {
    mla_runtime *rt = ctx->rt;
    fq_decode_bufs *f = calloc(1, sizeof *f);
    CUstream stream = NULL;
    int rc = CLI_FAIL;
    double none_sec = 0;
    if (!f) return cli_fail("bench", "out of memory");
    if (fq_decode_setup(ctx, sh, f) != CLI_OK) goto done;
    BENCH_CU(rt, cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < sh->n_modes; i++) {
        const fq_mode *m = sh->modes ? &sh->modes[i] : &fq_decode_modes[i];
        if (sh->skip >> i & 1) continue;
        mla_attention_decode_args *a = &f->args;
        int iters = ctx->iters ? ctx->iters : 20;
        double sec = 0;
        a->k_qdq = m->k, a->v_qdq = m->v, a->p_qdq = m->p;
        a->k_qdq_amax = m->k ? FQ_AMAX : NAN, a->v_qdq_amax = m->v ? FQ_AMAX : NAN;
        if (fq_time(rt, sh->name, fq_call_decode, a, stream, 3, &iters, 0, &sec) != CLI_OK)
            goto done;
        if (i == 0) none_sec = sec;
        fq_decode_row(ctx, sh, m, sec, none_sec, iters);
    }
    rc = CLI_OK;
done:
    bench_stream_release(rt, stream);
    if (f) fq_free(rt, f->p, N_DBUF);
    free(f);
    return rc;
}

int bench_fakequant_decode_4k(bench_ctx *ctx) {
    static const fq_decode_shape sh = {"fq-dec-4k", 4096, 230.0, FQ_B, 9};
    return fq_decode_run(ctx, &sh);
}

int bench_fakequant_decode_16k(bench_ctx *ctx) {
    static const fq_decode_shape sh = {"fq-dec-16k", 16384, 870.0, FQ_B, 9};
    return fq_decode_run(ctx, &sh);
}

/* The P modes alone (none, p-fp8, p-nvfp4) at both lengths. */
int bench_fakequant_decode_p(bench_ctx *ctx) {
    static const fq_decode_shape sh4 = {"fq-dec-4k", 4096, 230.0, FQ_B, 7, 0x36};
    static const fq_decode_shape sh16 = {"fq-dec-16k", 16384, 870.0, FQ_B, 7, 0x36};
    int rc = fq_decode_run(ctx, &sh4);
    return rc != CLI_OK ? rc : fq_decode_run(ctx, &sh16);
}

/* A small batch (no quantization, and P fp8): how the schedule spreads 4 long requests. */
int bench_fakequant_decode_b4(bench_ctx *ctx) {
    static const fq_decode_shape sh = {"fq-dec-b4-16k", 16384, 0.0, 4, 4};
    return fq_decode_run(ctx, &sh);
}

/* No quantization only (the dense path on sm_90a): the three shapes above, mode none. */
int bench_fakequant_decode_none(bench_ctx *ctx) {
    static const fq_decode_shape sh[] = {
        {"fq-none-4k", 4096, 230.0, FQ_B, 1},
        {"fq-none-16k", 16384, 870.0, FQ_B, 1},
        {"fq-none-b4-16k", 16384, 0.0, 4, 1},
    };
    int rc = CLI_OK;
    for (int i = 0; i < 3; i++)
        if (fq_decode_run(ctx, &sh[i]) != CLI_OK) rc = CLI_FAIL;
    return rc;
}

/* K / V modes only (no P quantization), L 4096 and 16384. */
int bench_fakequant_decode_kv(bench_ctx *ctx) {
    static const fq_decode_shape sh4 = {"fq-dec-kv-4k", 4096, 230.0, FQ_B, 7, 0, fq_decode_kv_modes};
    static const fq_decode_shape sh16 = {"fq-dec-kv-16k", 16384, 870.0, FQ_B, 4, 0,
                                         fq_decode_kv_modes};
    int rc = fq_decode_run(ctx, &sh4);
    return rc != CLI_OK ? rc : fq_decode_run(ctx, &sh16);
}

/* K / V modes with P, L 4096. */
int bench_fakequant_decode_mix(bench_ctx *ctx) {
    static const fq_decode_shape sh = {"fq-dec-mix-4k", 4096, 230.0, FQ_B, 6, 0, fq_decode_mix_modes};
    return fq_decode_run(ctx, &sh);
}

/* ---- prefill --------------------------------------------------------------------------------- */

static const fq_mode fq_prefill_modes[] = {
    {"none", 0, 0, 0}, {"fp8", 1, 0, 0}, {"nvfp4", 2, 0, 0}, {"2of4", 0, 0, 2},
};

enum { PQ, PK, PV, PCU, POUT, N_PBUF };

typedef struct fq_prefill_bufs {
    CUdeviceptr p[N_PBUF];
    int64_t qs[3], ks[3], vs[3], cus[1];
    DLTensor tq, tk, tv, tcu, tout;
    mla_prefill_attention_sizes sz;
    mla_prefill_attention_args args;
} fq_prefill_bufs;

static mla_status fq_call_prefill(mla_runtime *rt, const void *args, CUstream stream) {
    return mla_prefill_attention(rt, args, stream);
}

static void fq_prefill_views(mla_runtime *rt, fq_prefill_bufs *f) {
    int dev = rt->options.device;
    DLDataType bf16 = {kDLBfloat, 16, 1};
    f->qs[0] = f->ks[0] = f->vs[0] = FQ_PF_S, f->qs[1] = f->ks[1] = f->vs[1] = FQ_H;
    f->qs[2] = f->ks[2] = FQ_PF_DQK, f->vs[2] = FQ_PF_DV, f->cus[0] = 2;
    bench_tensor(&f->tq, f->p[PQ], dev, 3, f->qs, bf16);
    bench_tensor(&f->tk, f->p[PK], dev, 3, f->ks, bf16);
    bench_tensor(&f->tv, f->p[PV], dev, 3, f->vs, bf16);
    bench_tensor(&f->tcu, f->p[PCU], dev, 1, f->cus, (DLDataType){kDLInt, 32, 1});
    mla_prefill_attention_args *a = &f->args;
    mla_prefill_attention_args_init(a);
    a->q = &f->tq, a->k = &f->tk, a->v = &f->tv;
    a->cu_seqlens_q = a->cu_seqlens_k = &f->tcu;
    a->max_seqlen_q = FQ_PF_S, a->causal = 1, a->return_lse = 0;
}

static int fq_prefill_setup(bench_ctx *ctx, fq_prefill_bufs *f) {
    mla_runtime *rt = ctx->rt;
    size_t n_qk = (size_t)FQ_PF_S * FQ_H * FQ_PF_DQK, n_v = (size_t)FQ_PF_S * FQ_H * FQ_PF_DV;
    int32_t cu[2] = {0, FQ_PF_S};
    if (mla__runtime_enter(rt) != MLA_OK) return cli_fail("bench", "%s", mla_last_error());
    BENCH_CU(rt, cuMemAlloc(&f->p[PQ], n_qk * 2));
    BENCH_CU(rt, cuMemAlloc(&f->p[PK], n_qk * 2));
    BENCH_CU(rt, cuMemAlloc(&f->p[PV], n_v * 2));
    BENCH_CU(rt, cuMemAlloc(&f->p[PCU], sizeof cu));
    BENCH_CU(rt, cuMemcpyHtoD(f->p[PCU], cu, sizeof cu));
    if (bench_fill_normal(rt, f->p[PQ], n_qk, 2, 0xA4093822299F31D0ull) != CLI_OK ||
        bench_fill_normal(rt, f->p[PK], n_qk, 2, 0x082EFA98EC4E6C89ull) != CLI_OK ||
        bench_fill_normal(rt, f->p[PV], n_v, 2, 0x452821E638D01377ull) != CLI_OK)
        return CLI_FAIL;
    fq_prefill_views(rt, f);
    if (mla_prefill_attention_shape(&f->args, &f->sz) != MLA_OK)
        return bench_case_fail("fq-pre", "mla_prefill_attention_shape");
    BENCH_CU(rt, cuMemAlloc(&f->p[POUT], (size_t)(f->sz.out[0] * f->sz.out[1] * f->sz.out[2]) * 2));
    bench_tensor(&f->tout, f->p[POUT], rt->options.device, 3, f->sz.out, f->tq.dtype);
    f->args.out = &f->tout;
    return CLI_OK;
done:
    return CLI_FAIL;
}

static void fq_prefill_row(bench_ctx *ctx, const fq_mode *m, double sec, double none_sec,
                           int iters) {
    char name[32];
    double pairs = (double)FQ_PF_S * (FQ_PF_S + 1) / 2;
    snprintf(name, sizeof name, "fq-pre-8k-%s", m->name);
    bench_row *r = bench_add_row(ctx, name, sec * 1e6);
    r->tflops = 2.0 * FQ_H * pairs * (FQ_PF_DQK + FQ_PF_DV) / sec * 1e-12;
    r->prec = PREC_BF16;
    snprintf(r->note, sizeof r->note, "S %d h %d/%d d %d/%d causal block_n 64%s, median of %d; "
             "none x%.2f", FQ_PF_S, FQ_H, FQ_H, FQ_PF_DQK, FQ_PF_DV,
             m->p ? ", 2:4 (FLOP counted dense)" : m->k ? ", Q/K/P/V quant" : "", iters,
             sec / none_sec);
}

int bench_fakequant_prefill_8k(bench_ctx *ctx) {
    mla_runtime *rt = ctx->rt;
    fq_prefill_bufs *f = calloc(1, sizeof *f);
    CUstream stream = NULL;
    int rc = CLI_FAIL;
    double none_sec = 0;
    if (!f) return cli_fail("bench", "out of memory");
    if (fq_prefill_setup(ctx, f) != CLI_OK) goto done;
    BENCH_CU(rt, cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    for (size_t i = 0; i < sizeof fq_prefill_modes / sizeof fq_prefill_modes[0]; i++) {
        const fq_mode *m = &fq_prefill_modes[i];
        mla_prefill_attention_args *a = &f->args;
        int iters = ctx->iters ? ctx->iters : 5;
        double sec = 0;
        float amax = m->k ? FQ_AMAX : NAN;
        a->q_quant = a->k_quant = a->p_quant = a->v_quant = m->k;
        a->q_amax = a->k_amax = a->v_amax = amax;
        a->sparsity_n = m->p, a->sparsity_m = 4;
        if (fq_time(rt, "fq-pre-8k", fq_call_prefill, a, stream, 1, &iters,
                    ctx->iters ? 0 : FQ_SLOW_S, &sec) != CLI_OK)
            goto done;
        if (i == 0) none_sec = sec;
        fq_prefill_row(ctx, m, sec, none_sec, iters);
    }
    rc = CLI_OK;
done:
    bench_stream_release(rt, stream);
    if (f) fq_free(rt, f->p, N_PBUF);
    free(f);
    return rc;
}
