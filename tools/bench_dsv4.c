/* mlajit bench: the DSV4 layer cases. One row per layer kind and token count: the GPU time of
 * mla_attention + mla_output_proj of one layer (H = 4096, G = 8, kv_cache pages of 128 rows, sink
 * on) for T decode tokens, one request each.
 *
 * Inputs (spec/dsv4.md §3, §5): token t sits at a random position p in [65535, 65662],
 * so its window is full: the 128 rows ending at its own new row, slots linear by position on the
 * two kv_cache pages of its request (kv_run_step +1). On HCA layers c128_attn_len = (p + 1) / 128
 * = 512 compressed rows on 8 pool pages of 64 rows; p % 128 == 127 fires the compressor (about one
 * token in 128). Weights: random e4m3 bytes without the NaN codes and ue8m0 scales 2^-10..2^-4;
 * activations bf16 N(0, 1); every kv_cache and pool row random valid fp8 (scales 2^-10..2^-6); the
 * score ring starts at 0. Rows of different tokens are distinct, so the bytes count every row. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlajit/dsv4.h"
#include "tools/bench.h"

#define DSV4_H 4096
#define DSV4_G 8
#define DSV4_PAGE 128          /* kv_cache rows per page */
#define DSV4_WIN 128           /* window rows (topk) */
#define DSV4_C128_LEN 512      /* compressed rows per token (HCA) */
#define DSV4_POOL_BLOCK 64     /* rows per pool page */
#define DSV4_QCOLS 32768       /* 64 heads x 512 */
#define DSV4_P0 65535          /* positions p0 .. p0 + 127: (p + 1) / 128 == 512 */
#define DSV4_ROW_BYTES 584     /* a KV row and its scale slot */
#define DSV4_LOOP 10           /* layer calls per timed repeat */
#define DSV4_WARMUP 3

#define DT_E4M3 ((DLDataType){MLA_DL_FLOAT8_E4M3FN, 8, 1})
#define DT_U8 ((DLDataType){kDLUInt, 8, 1})
#define DT_BF16 ((DLDataType){kDLBfloat, 16, 1})
#define DT_F32 ((DLDataType){kDLFloat, 32, 1})
#define DT_I32 ((DLDataType){kDLInt, 32, 1})

/* The device buffers of one layer. */
enum {
    B_X, B_POS, B_FREQS, B_WQA, B_WQA_SF, B_QNORM, B_WQB, B_WQB_SF, B_WKV, B_WKV_SF, B_KVNORM,
    B_SWA_LOC, B_SINK, B_KV, B_KV_IDX, B_KV_LEN, B_Q_OR_X, B_OUT, B_WOA, B_WOA_SF, B_WOB, B_WOB_SF,
    /* HCA only */
    B_GATE, B_RING, B_RING_ROW, B_APE, B_C128_NORM, B_OUT_LOC, B_POOL, B_PAGE_TABLE, B_ATTN_LEN,
    N_BUF
};

typedef struct dev_buf {
    CUdeviceptr ptr;
    mla_tensor t;
} dev_buf;

typedef struct layer {
    int T, hca;
    int64_t kv_page_bytes, pool_page_bytes;
    dev_buf b[N_BUF];
    mla_buffer ws;
    mla_attention_args attn;
    mla_output_proj_args proj;
} layer;

#define TENSOR(L, i) (&(L)->b[i].t.tensor)

/* ---- random host values --------------------------------------------------------------------- */




/* Random e4m3 bytes, the NaN codes 0x7F / 0xFF replaced by +-448. */
static void fill_e4m3(uint64_t *s, uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i += 8) {
        uint64_t u = bench_rng(s);
        for (size_t j = 0; j < 8 && i + j < n; j++, u >>= 8)
            p[i + j] = (u & 0x7F) == 0x7F ? (uint8_t)(u & 0xFE) : (uint8_t)u;
    }
}

/* ue8m0 bytes of 2^lo .. 2^hi. */
static void fill_ue8m0(uint64_t *s, uint8_t *p, size_t n, int lo, int hi) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(127 + lo + (int)(bench_rng(s) % (hi - lo + 1)));
}

static uint8_t *rand_e4m3(uint64_t *s, size_t n) {
    uint8_t *p = malloc(n);
    if (p) fill_e4m3(s, p, n);
    return p;
}

static uint8_t *rand_ue8m0(uint64_t *s, size_t n, int lo, int hi) {
    uint8_t *p = malloc(n);
    if (p) fill_ue8m0(s, p, n, lo, hi);
    return p;
}

static uint16_t *rand_bf16(uint64_t *s, size_t n, double mean, double sigma) {
    uint16_t *p = malloc(n * 2);
    for (size_t i = 0; p && i < n; i++) p[i] = bench_bf16_bits((float)(mean + sigma * bench_gauss(s)));
    return p;
}

static float *rand_f32(uint64_t *s, size_t n, double lo, double hi) {
    float *p = malloc(n * 4);
    for (size_t i = 0; p && i < n; i++) p[i] = (float)(lo + (hi - lo) * bench_uniform(s));
    return p;
}

/* Pages of B valid rows (spec §3.1): 448 e4m3 bytes, 64 bf16 of magnitude 2^-3..2^2, the scale
 * slot (7 ue8m0 bytes, pad 0); the page padding zero. */
static uint8_t *kv_pages(uint64_t *s, int64_t pages, int64_t B, int64_t page_bytes) {
    uint8_t *p = calloc((size_t)(pages * page_bytes), 1);
    for (int64_t pg = 0; p && pg < pages; pg++) {
        uint8_t *page = p + pg * page_bytes;
        for (int64_t r = 0; r < B; r++) {
            uint8_t *row = page + r * 576, *slot = page + B * 576 + r * 8;
            fill_e4m3(s, row, 448);
            for (int i = 0; i < 64; i++) {
                uint64_t u = bench_rng(s);
                uint16_t v = (uint16_t)((u & 0x8000) | (124 + u % 6) << 7 | (u >> 8 & 0x7F));
                memcpy(row + 448 + 2 * i, &v, 2);
            }
            fill_ue8m0(s, slot, 7, -10, -6);
        }
    }
    return p;
}

/* freqs_real [max_pos, 64]: (cos, sin) of p * 10000^(-2i/64). */
static float *rope_table(int64_t max_pos) {
    float *f = malloc((size_t)max_pos * 64 * 4);
    for (int64_t p = 0; f && p < max_pos; p++)
        for (int i = 0; i < 32; i++) {
            double a = (double)p * pow(1e4, -2.0 * i / 64.0);
            f[p * 64 + 2 * i] = (float)cos(a), f[p * 64 + 2 * i + 1] = (float)sin(a);
        }
    return f;
}

/* ---- device buffers ------------------------------------------------------------------------- */

/* Allocates b as a zeroed [d0] (d1 == 0) or [d0, d1] tensor of dt. */
static int put_zero(mla_runtime *rt, dev_buf *b, DLDataType dt, int64_t d0, int64_t d1) {
    size_t bytes = (size_t)(d0 * (d1 ? d1 : 1)) * dt.bits / 8;
    BENCH_CU(rt, cuMemAlloc(&b->ptr, bytes));
    BENCH_CU(rt, cuMemsetD8(b->ptr, 0, bytes));
    memset(&b->t, 0, sizeof b->t);
    b->t.shape[0] = d0, b->t.shape[1] = d1;
    b->t.tensor.data = (void *)(uintptr_t)b->ptr;
    b->t.tensor.device = (DLDevice){kDLCUDA, rt->options.device};
    b->t.tensor.ndim = d1 ? 2 : 1;
    b->t.tensor.dtype = dt;
    b->t.tensor.shape = b->t.shape;
    return CLI_OK;
done:
    return CLI_FAIL;
}

/* put_zero, then uploads host and frees it (NULL: out of memory). */
static int put_host(mla_runtime *rt, dev_buf *b, void *host, DLDataType dt, int64_t d0,
                    int64_t d1) {
    int rc = CLI_FAIL;
    if (!host) {
        cli_fail("bench", "out of memory");
        goto done;
    }
    if (put_zero(rt, b, dt, d0, d1) != CLI_OK) goto done;
    BENCH_CU(rt, cuMemcpyHtoD(b->ptr, host, (size_t)(d0 * (d1 ? d1 : 1)) * dt.bits / 8));
    rc = CLI_OK;
done:
    free(host);
    return rc;
}

/* An fp8 weight [N, K] and its SfAtom scales [N, K / 32]. */
static int put_weight(mla_runtime *rt, uint64_t *s, dev_buf *w, dev_buf *sf, int64_t N,
                      int64_t K) {
    if (put_host(rt, w, rand_e4m3(s, (size_t)(N * K)), DT_E4M3, N, K) != CLI_OK) return CLI_FAIL;
    return put_host(rt, sf, rand_ue8m0(s, (size_t)(N * K / 32), -10, -4), DT_U8, N, K / 32);
}

/* A random permutation of 0 .. n - 1. */
static void shuffle(uint64_t *s, int32_t *p, int n) {
    for (int i = 0; i < n; i++) p[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(bench_rng(s) % (uint64_t)(i + 1));
        int32_t v = p[i];
        p[i] = p[j], p[j] = v;
    }
}

/* Positions, windows and (HCA) ring rows and pool pages of T one-token requests; see the top. */
static int put_structure(mla_runtime *rt, uint64_t *s, layer *L) {
    const int T = L->T, np = DSV4_C128_LEN / DSV4_POOL_BLOCK;
    int32_t *pos = malloc(4 * (size_t)T), *loc = malloc(4 * (size_t)T);
    int32_t *idx = malloc(4 * (size_t)T * DSV4_WIN), *len = malloc(4 * (size_t)T);
    int32_t *ring = malloc(4 * (size_t)T), *out = malloc(4 * (size_t)T);
    int32_t *pt = malloc(4 * (size_t)T * np), *clen = malloc(4 * (size_t)T);
    int32_t *kv_perm = malloc(4 * (size_t)T * 2), *pool_perm = malloc(4 * (size_t)T * np);
    int rc = CLI_FAIL;
    if (!pos || !loc || !idx || !len || !ring || !out || !pt || !clen || !kv_perm || !pool_perm) {
        cli_fail("bench", "out of memory");
        goto done;
    }
    shuffle(s, kv_perm, 2 * T);
    shuffle(s, pool_perm, np * T);
    for (int t = 0; t < T; t++) {
        int p = DSV4_P0 + (int)(bench_rng(s) % 128), last = p / DSV4_PAGE;
        for (int g = 0; g < DSV4_WIN; g++) { /* page kv_perm[2t] holds p's logical page */
            int q = p - DSV4_WIN + 1 + g, page = kv_perm[2 * t + (q / DSV4_PAGE != last)];
            idx[(size_t)t * DSV4_WIN + g] = page * DSV4_PAGE + q % DSV4_PAGE;
        }
        pos[t] = p, len[t] = DSV4_WIN, loc[t] = idx[(size_t)t * DSV4_WIN + DSV4_WIN - 1];
        ring[t] = t * 128 + p % 128;
        for (int i = 0; i < np; i++) pt[(size_t)t * np + i] = pool_perm[t * np + i];
        clen[t] = (p + 1) / 128;
        int j = p / 128; /* the compressed row a firing token writes */
        out[t] = p % 128 == 127 ? pt[(size_t)t * np + j / DSV4_POOL_BLOCK] * DSV4_POOL_BLOCK +
                                       j % DSV4_POOL_BLOCK : -1;
    }
    int32_t *host[] = {pos, loc, idx, len, ring, out, pt, clen};
    const int buf[] = {B_POS, B_SWA_LOC, B_KV_IDX, B_KV_LEN, B_RING_ROW, B_OUT_LOC, B_PAGE_TABLE,
                       B_ATTN_LEN};
    const int cols[] = {0, 0, DSV4_WIN, 0, 0, 0, np, 0};
    pos = loc = idx = len = ring = out = pt = clen = NULL; /* put_host frees them */
    rc = CLI_OK;
    for (int i = 0; i < 8; i++) {
        int hca_only = buf[i] >= B_GATE;
        if (rc == CLI_OK && (!hca_only || L->hca))
            rc = put_host(rt, &L->b[buf[i]], host[i], DT_I32, T, cols[i]);
        else
            free(host[i]);
    }
done:
    free(pos), free(loc), free(idx), free(len), free(ring), free(out), free(pt), free(clen);
    free(kv_perm), free(pool_perm);
    return rc;
}

/* The HCA inputs beyond the structure: gate weight, ring, ape, norm gain, pool. */
static int put_hca(mla_runtime *rt, uint64_t *s, layer *L) {
    const int64_t T = L->T, H = DSV4_H, pool_pages = T * (DSV4_C128_LEN / DSV4_POOL_BLOCK);
    L->pool_page_bytes = (DSV4_POOL_BLOCK * DSV4_ROW_BYTES + 575) / 576 * 576;
    if (put_host(rt, &L->b[B_GATE], rand_bf16(s, (size_t)(1024 * H), 0, 1 / sqrt((double)H)),
                 DT_BF16, 1024, H) ||
        put_zero(rt, &L->b[B_RING], DT_F32, T * 128, 1024) ||
        put_host(rt, &L->b[B_APE], rand_f32(s, 128 * 512, -1, 1), DT_F32, 128, 512) ||
        put_host(rt, &L->b[B_C128_NORM], rand_bf16(s, 512, 1, 0.25), DT_BF16, 512, 0) ||
        put_host(rt, &L->b[B_POOL], kv_pages(s, pool_pages, DSV4_POOL_BLOCK, L->pool_page_bytes),
                 DT_U8, pool_pages, L->pool_page_bytes))
        return CLI_FAIL;
    return CLI_OK;
}

/* Everything of one layer but the workspace. */
static int put_layer(mla_runtime *rt, uint64_t *s, layer *L) {
    const int64_t T = L->T, H = DSV4_H, max_pos = DSV4_P0 + 128;
    L->kv_page_bytes = (DSV4_PAGE * DSV4_ROW_BYTES + 575) / 576 * 576;
    if (put_structure(rt, s, L) || put_host(rt, &L->b[B_X], rand_bf16(s, (size_t)(T * H), 0, 1),
                                            DT_BF16, T, H) ||
        put_host(rt, &L->b[B_FREQS], rope_table(max_pos), DT_F32, max_pos, 64) ||
        put_weight(rt, s, &L->b[B_WQA], &L->b[B_WQA_SF], 1024, H) ||
        put_weight(rt, s, &L->b[B_WQB], &L->b[B_WQB_SF], DSV4_QCOLS, 1024) ||
        put_weight(rt, s, &L->b[B_WKV], &L->b[B_WKV_SF], 512, H) ||
        put_weight(rt, s, &L->b[B_WOA], &L->b[B_WOA_SF], 2 * H, DSV4_QCOLS / DSV4_G) ||
        put_weight(rt, s, &L->b[B_WOB], &L->b[B_WOB_SF], H, 2 * H) ||
        put_host(rt, &L->b[B_QNORM], rand_bf16(s, 1024, 1, 0.25), DT_BF16, 1024, 0) ||
        put_host(rt, &L->b[B_KVNORM], rand_bf16(s, 512, 1, 0.25), DT_BF16, 512, 0) ||
        put_host(rt, &L->b[B_SINK], rand_f32(s, 64, -2, 6), DT_F32, 64, 0) ||
        put_host(rt, &L->b[B_KV], kv_pages(s, 2 * T, DSV4_PAGE, L->kv_page_bytes), DT_U8, 2 * T,
                 L->kv_page_bytes) ||
        put_zero(rt, &L->b[B_Q_OR_X], DT_BF16, T, DSV4_QCOLS) ||
        put_zero(rt, &L->b[B_OUT], DT_BF16, T, H))
        return CLI_FAIL;
    return L->hca ? put_hca(rt, s, L) : CLI_OK;
}

/* The arguments of the two calls over L's buffers (reset_barriers 0: mla_output_proj follows). */
static void layer_args(layer *L) {
    mla_attention_args *a = &L->attn;
    mla_attention_args_init(a);
    a->q_or_x = TENSOR(L, B_Q_OR_X), a->hidden_states = TENSOR(L, B_X);
    a->kv_cache = TENSOR(L, B_KV), a->page_size = DSV4_PAGE, a->positions = TENSOR(L, B_POS);
    a->freqs_real = TENSOR(L, B_FREQS), a->sm_scale = (float)(1.0 / sqrt(512.0));
    a->wq_a_weight = TENSOR(L, B_WQA), a->wq_a_sf = TENSOR(L, B_WQA_SF);
    a->q_norm_weight = TENSOR(L, B_QNORM), a->wq_b_weight = TENSOR(L, B_WQB);
    a->wq_b_sf = TENSOR(L, B_WQB_SF), a->wkv_weight = TENSOR(L, B_WKV);
    a->wkv_sf = TENSOR(L, B_WKV_SF), a->kv_norm_weight = TENSOR(L, B_KVNORM);
    a->swa_loc = TENSOR(L, B_SWA_LOC), a->attn_sink = TENSOR(L, B_SINK);
    a->workspace = &L->ws.view.tensor, a->draft_tokens = 1, a->reset_barriers = 0;
    if (L->hca) {
        a->wkv_gate_weight = TENSOR(L, B_GATE), a->kv_score_ring = TENSOR(L, B_RING);
        a->kv_gate_ring_row = TENSOR(L, B_RING_ROW), a->c128_ape = TENSOR(L, B_APE);
        a->c128_norm_weight = TENSOR(L, B_C128_NORM), a->c128_freqs_real = TENSOR(L, B_FREQS);
        a->c128_out_loc = TENSOR(L, B_OUT_LOC), a->c128_pool = TENSOR(L, B_POOL);
        a->c128_stride_kv_block = L->pool_page_bytes, a->c128_page_block = DSV4_POOL_BLOCK;
        a->c128_page_table = TENSOR(L, B_PAGE_TABLE), a->c128_attn_len = TENSOR(L, B_ATTN_LEN);
    }
    mla_output_proj_args *o = &L->proj;
    mla_output_proj_args_init(o);
    o->q_or_x = TENSOR(L, B_Q_OR_X), o->positions = TENSOR(L, B_POS);
    o->freqs_real = TENSOR(L, B_FREQS), o->wo_a_weight = TENSOR(L, B_WOA);
    o->wo_a_sf = TENSOR(L, B_WOA_SF), o->wo_b_weight = TENSOR(L, B_WOB);
    o->wo_b_sf = TENSOR(L, B_WOB_SF), o->out = TENSOR(L, B_OUT), o->workspace = a->workspace;
    o->attn_sink = TENSOR(L, B_SINK), o->c128_attn_len = L->hca ? TENSOR(L, B_ATTN_LEN) : NULL;
}

static void layer_destroy(mla_runtime *rt, layer *L) {
    for (int i = 0; i < N_BUF; i++)
        if (L->b[i].ptr) rt->drv.cuMemFree(L->b[i].ptr);
    mla_buffer_free(rt, &L->ws);
    memset(L, 0, sizeof *L);
}

static int layer_create(mla_runtime *rt, const char *name, int T, int hca, layer *L) {
    uint64_t seed = 0x9E3779B97F4A7C15ull ^ (uint64_t)(T * 2 + hca);
    memset(L, 0, sizeof *L);
    L->T = T, L->hca = hca;
    if (mla__runtime_enter(rt) != MLA_OK) return cli_fail("bench", "%s", mla_last_error());
    if (put_layer(rt, &seed, L) != CLI_OK) return CLI_FAIL;
    if (mla_workspace(rt, T, TENSOR(L, B_WQA), TENSOR(L, B_WKV), TENSOR(L, B_WOA),
                      TENSOR(L, B_WOB), &L->ws) != MLA_OK)
        return bench_case_fail(name, "mla_workspace");
    layer_args(L);
    return CLI_OK;
}

/* ---- the cases ------------------------------------------------------------------------------ */

static mla_status layer_call(mla_runtime *rt, layer *L, CUstream stream) {
    MLA_FORWARD_IF_ERROR(mla_attention(rt, &L->attn, stream));
    return mla_output_proj(rt, &L->proj, stream);
}

/* Bytes one layer call must read: weights and their scales (+ the bf16 gate on HCA) and the KV
 * rows of every token; *weights gets the first part. */
static double layer_bytes(const layer *L, double *weights) {
    const double H = DSV4_H, fp8 = 1024 * H + 512 * H + (double)DSV4_QCOLS * 1024 +
                                   2 * H * (DSV4_QCOLS / DSV4_G) + H * 2 * H;
    *weights = fp8 * (1 + 1.0 / 32) + (L->hca ? 2 * 1024 * H : 0);
    return *weights + (double)L->T * (DSV4_WIN + (L->hca ? DSV4_C128_LEN : 0)) * DSV4_ROW_BYTES;
}

/* The five fp8 GEMMs and the attention (QK and PV over every row); not the bf16 gate GEMM. */
static double layer_flops(const layer *L) {
    const double H = DSV4_H, T = L->T, rows = DSV4_WIN + (L->hca ? DSV4_C128_LEN : 0);
    double nk = 1024 * H + 512 * H + (double)DSV4_QCOLS * 1024 + 2 * H * (DSV4_QCOLS / DSV4_G) +
                H * 2 * H;
    return 2 * T * nk + 2.0 * 2 * T * 64 * 512 * rows;
}

/* Times DSV4_LOOP back-to-back layer calls per repeat, the plan once before; per-call seconds. */
static int time_layer(bench_ctx *ctx, layer *L, const char *name, int reps, double *sec) {
    mla_runtime *rt = ctx->rt;
    CUstream stream = NULL;
    CUevent *ev = calloc(2 * (size_t)reps, sizeof *ev);
    double *t = malloc((size_t)reps * sizeof *t);
    int rc = CLI_FAIL, n_ev = 0;
    const char *failed = NULL;
    if (!ev || !t) {
        cli_fail("bench", "out of memory");
        goto done;
    }
    BENCH_CU(rt, cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    for (; n_ev < 2 * reps; n_ev++) BENCH_CU(rt, cuEventCreate(&ev[n_ev], CU_EVENT_DEFAULT));
    if (mla_attention_plan(rt, TENSOR(L, B_KV_IDX), TENSOR(L, B_KV_LEN), DSV4_PAGE, 1,
                           L->hca ? TENSOR(L, B_ATTN_LEN) : NULL, &L->ws.view.tensor, stream,
                           NULL) != MLA_OK) {
        failed = "mla_attention_plan";
        goto done;
    }
    for (int i = 0; i < DSV4_WARMUP; i++)
        if (layer_call(rt, L, stream) != MLA_OK) goto call_failed;
    for (int r = 0; r < reps; r++) {
        BENCH_CU(rt, cuEventRecord(ev[2 * r], stream));
        for (int i = 0; i < DSV4_LOOP; i++)
            if (layer_call(rt, L, stream) != MLA_OK) goto call_failed;
        BENCH_CU(rt, cuEventRecord(ev[2 * r + 1], stream));
    }
    BENCH_CU(rt, cuStreamSynchronize(stream));
    for (int r = 0; r < reps; r++) {
        float ms = 0;
        BENCH_CU(rt, cuEventElapsedTime(&ms, ev[2 * r], ev[2 * r + 1]));
        t[r] = ms * 1e-3 / DSV4_LOOP;
    }
    *sec = cli_median(t, reps);
    rc = CLI_OK;
    goto done;
call_failed:
    failed = "mla_attention + mla_output_proj";
done:
    if (failed) bench_case_fail(name, failed);
    bench_stream_release(rt, stream);
    for (int i = 0; i < n_ev; i++) rt->drv.cuEventDestroy(ev[i]);
    free(ev);
    free(t);
    return rc;
}

static int dsv4_case(bench_ctx *ctx, int hca, int T) {
    enum { MAX_REPS = 10000 };
    int reps = ctx->iters ? ctx->iters : 20, l2 = 0;
    if (reps > MAX_REPS) reps = MAX_REPS;
    char name[32];
    snprintf(name, sizeof name, "dsv4-%s-T%d", hca ? "hca" : "swa", T);
    layer L;
    double sec = 0, weights = 0;
    int rc = layer_create(ctx->rt, name, T, hca, &L);
    if (rc == CLI_OK) rc = time_layer(ctx, &L, name, reps, &sec);
    if (rc == CLI_OK) {
        double bytes = layer_bytes(&L, &weights);
        ctx->rt->drv.cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, ctx->rt->device);
        bench_row *r = bench_add_row(ctx, name, sec * 1e6);
        r->gbps = bytes / sec * 1e-9;
        if (T >= 256) r->tflops = layer_flops(&L) / sec * 1e-12, r->prec = PREC_FP8;
        snprintf(r->note, sizeof r->note, "attn+out_proj, plan outside the loop, median %dx%d; "
                 "floor %.1f us = %.1f MB (weights %.1f %s L2 %d, KV %.1f)", reps, DSV4_LOOP,
                 bytes / (CEIL_COPY_GBPS * 1e9) * 1e6, bytes * 1e-6, weights * 1e-6,
                 weights > (double)l2 ? ">" : "<=", l2 >> 20, (bytes - weights) * 1e-6);
    }
    layer_destroy(ctx->rt, &L);
    return rc;
}

int bench_dsv4_swa_1(bench_ctx *ctx) { return dsv4_case(ctx, 0, 1); }
int bench_dsv4_swa_4(bench_ctx *ctx) { return dsv4_case(ctx, 0, 4); }
int bench_dsv4_swa_16(bench_ctx *ctx) { return dsv4_case(ctx, 0, 16); }
int bench_dsv4_swa_64(bench_ctx *ctx) { return dsv4_case(ctx, 0, 64); }
int bench_dsv4_swa_256(bench_ctx *ctx) { return dsv4_case(ctx, 0, 256); }
int bench_dsv4_swa_640(bench_ctx *ctx) { return dsv4_case(ctx, 0, 640); }
int bench_dsv4_hca_1(bench_ctx *ctx) { return dsv4_case(ctx, 1, 1); }
int bench_dsv4_hca_4(bench_ctx *ctx) { return dsv4_case(ctx, 1, 4); }
int bench_dsv4_hca_16(bench_ctx *ctx) { return dsv4_case(ctx, 1, 16); }
int bench_dsv4_hca_64(bench_ctx *ctx) { return dsv4_case(ctx, 1, 64); }
int bench_dsv4_hca_256(bench_ctx *ctx) { return dsv4_case(ctx, 1, 256); }
int bench_dsv4_hca_640(bench_ctx *ctx) { return dsv4_case(ctx, 1, 640); }
