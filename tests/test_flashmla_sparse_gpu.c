/* FlashMLA-compatible sparse decode and sparse prefill on the GPU (skips without one), against the
 * float64 references (tests/ref/flashmla_sparse_ref.c) with the spec's tolerances (§0, §2.2-2.3).
 *
 * A covering subset of FlashMLA's own sweeps: decode (s_k, topk, page) in {(512, 64, 2),
 * (512, 64, 64), (1024, 576, 61), (2046, 2048, 64), (2046, 2048, 576)}, h_q 8/16/32/64/128, s_q
 * 1/3, b 4/74; prefill (s_kv, topk) in {(128, 128), (592, 128), (1840, 256), (1521, 512),
 * (95, 128), (153, 256)}, s_q 1/62/213, h_q 16/32/64/128, d_qk 576/512, base 2 and natural log;
 * attn_sink (with +-inf entries) and topk_length on and off; a token whose entries are all invalid;
 * invalid entries -1, -123456, 2147480000 and s_kv; every cache / kv slot no entry names holds NaN,
 * and outputs start as NaN. Decode scales are powers of two (FlashMLA's quant.py), so the
 * dequantized cache is exact. Where the runtime picks an sm_90a wgmma kind (the decode, the prefill
 * at d_qk 576, on an H100/H200), each case runs twice on the same inputs: on the wgmma kernel
 * ("[sm90]" in messages), then on the portable one through a second runtime created with
 * MLAJIT_FLASHMLA_DECODE=portable ("[portable]"), outputs poisoned again in between; after each
 * run the runtime's kernel table must hold the kind that run was meant to use and not the other
 * run's (the portable run: not the default run's kind, e.g. the CTA pair at h_q 128).
 * Reproduce a failure with MLAJIT_TEST_SEED=<seed from the message>. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlajit/flashmla.h"
#include "ref/flashmla_ref.h"
#include "ref/flashmla_sparse_ref.h"
#include "runtime/flashmla_sparse.h"
#include "runtime/internal.h"
#include "util/gpu.h"

/* ---- shared helpers --------------------------------------------------------------------------- */

static double gauss(mlt_rng *r) {
    double u = mlt_rng_uniform(r) + 1e-12, v = mlt_rng_uniform(r);
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}
static double clampd(double x, double lo, double hi) { return x < lo ? lo : x > hi ? hi : x; }

/* Up to topk distinct positions < n in random order, then fillers: -1 or another invalid value. */
static void draw_entries(mlt_rng *r, int n, int topk, int32_t *pos, int32_t invalid_hi) {
    int32_t *perm = malloc((size_t)n * sizeof *perm);
    cr_assert(perm, "malloc");
    for (int t = 0; t < n; t++) perm[t] = t;
    for (int t = n - 1; t > 0; t--) {
        int u = (int)mlt_rng_range(r, 0, t);
        int32_t x = perm[t];
        perm[t] = perm[u], perm[u] = x;
    }
    static const int32_t fill[4] = {-1, -123456, 2147480000, -1};
    for (int k = 0; k < topk; k++) {
        int32_t v = k < n ? perm[k] : -1;
        double u = mlt_rng_uniform(r);
        if (u < 0.08) v = fill[mlt_rng_range(r, 0, 3)];
        else if (u < 0.10) v = invalid_hi;
        pos[k] = v;
    }
    free(perm);
}

static void make_sink(mlt_rng *r, float *sink, int h_q) {
    for (int h = 0; h < h_q; h++)
        sink[h] = h % 9 == 0 ? INFINITY : h % 9 == 1 ? -INFINITY : (float)gauss(r);
}

static void compare(const char *name, const char *what, const double *got, const double *want,
                    size_t n, double abs_tol, double rel_tol, double cos_tol, uint64_t seed) {
    char msg[512];
    int ok = mlr_flashmla_allclose(got, want, n, abs_tol, rel_tol, cos_tol, msg, sizeof msg);
    cr_expect(ok, "%s: %s: %s (seed %llu)", name, what, msg, (unsigned long long)seed);
}

#define CU_OK(rt, call, name)                                                                    \
    do {                                                                                         \
        CUresult r_ = (call);                                                                    \
        cr_assert(r_ == CUDA_SUCCESS, "%s: %s: %s", name, #call, mlt_cu_name(rt, r_));           \
    } while (0)

/* A GPU runtime created with $MLAJIT_FLASHMLA_DECODE set to value (unset for NULL), which the
 * runtime reads at creation only; the variable is restored before returning. 0 without a GPU. */
static int runtime_with_decode_env(const char *value, mla_runtime **rt) {
    int ok = mlt_gpu_runtime_env("MLAJIT_FLASHMLA_DECODE", value, rt);
    cr_assert(ok >= 0, "set or restore MLAJIT_FLASHMLA_DECODE");
    return ok;
}

/* rt ran kind want and never kind other. */
static void assert_kind(const mla_runtime *rt, const char *name, const char *want,
                        const char *other) {
    cr_assert(mlt_loaded_of_kind(rt, want) >= 1 && mlt_loaded_of_kind(rt, other) == 0, "%s: expected "
              "%s only, the runtime loaded %d %s and %d %s kernels", name, want,
              mlt_loaded_of_kind(rt, want), want, mlt_loaded_of_kind(rt, other), other);
}

/* The runs of a case: the default runtime, then (where it picked the wgmma kind) a portable one.
 * Returns the number of runs (1 or 2) and fills rts / kinds / whats, and others: the kind each run
 * must not have loaded (the portable kind for the wgmma run, the default run's kind for the
 * portable one; with one run, the plain sm_90a kind). */
static int case_runtimes(mla_runtime *rt, int prefill, int d_qk, int h_q, mla_runtime **rts,
                         const char **kinds, const char **whats, const char **others) {
    /* $MLAJIT_FLASHMLA_SPARSE_SM90 may pick the other sm_90a structure (a run for comparison) */
    const char *kind =
        mla__flashmla_sparse_kind(rt->arch, prefill, d_qk, h_q, rt->flashmla_sparse_sm90);
    const char *portable = prefill ? "flashmla_sparse_prefill" : "flashmla_sparse_decode";
    rts[0] = rt, kinds[0] = kind, whats[0] = "";
    others[0] = prefill ? "flashmla_sparse_prefill_sm90" : "flashmla_sparse_decode_sm90";
    if (!strcmp(kind, portable)) return 1;
    whats[0] = " [sm90]", others[0] = portable, others[1] = kind;
    cr_assert(runtime_with_decode_env("portable", &rts[1]) && rts[1] != rt,
              "a second runtime with MLAJIT_FLASHMLA_DECODE=portable: %s", mla_last_error());
    cr_assert(rts[1]->flashmla_decode_portable, "MLAJIT_FLASHMLA_DECODE=portable at creation "
              "must force the portable kernels");
    kinds[1] = portable, whats[1] = " [portable]";
    return 2;
}

/* ---- sparse decode ---------------------------------------------------------------------------- */

typedef struct dec_case {
    char name[64];
    int b, s_q, h_q, s_k, topk, page, sink, topk_length, all_invalid;
} dec_case;

static dec_case dec_cases[] = {
    {"b4 sq1 h16 sk512 topk64 p2", 4, 1, 16, 512, 64, 2, 0, 0, 0},
    {"b74 sq3 h64 sk512 topk64 p64 sink", 74, 3, 64, 512, 64, 64, 1, 0, 0},
    {"b4 sq3 h128 sk1024 topk576 p61 topk_length", 4, 3, 128, 1024, 576, 61, 0, 1, 0},
    {"b74 sq1 h16 sk1024 topk576 p61 sink topk_length", 74, 1, 16, 1024, 576, 61, 1, 1, 0},
    {"b4 sq1 h128 sk2046 topk2048 p64 invalid", 4, 1, 128, 2046, 2048, 64, 0, 0, 1},
    {"b4 sq3 h64 sk2046 topk2048 p576 sink invalid", 4, 3, 64, 2046, 2048, 576, 1, 0, 1},
    {"b74 sq1 h128 sk512 topk64 p2 sink topk_length", 74, 1, 128, 512, 64, 2, 1, 1, 0},
    {"b4 sq2 h8 sk300 topk100 p16 sink topk_length", 4, 2, 8, 300, 100, 16, 1, 1, 1},
    {"b4 sq4 h32 sk2046 topk2048 p576", 4, 4, 32, 2046, 2048, 576, 0, 0, 0},
};

/* Host data of a decode case. */
typedef struct dec_data {
    int64_t num_blocks, blocks_per;
    uint8_t *k;
    uint16_t *q;
    int32_t *idx, *tlen;
    float *sink;
} dec_data;

/* Fills the referenced cache row slot with a random quantized token (power-of-two scales). */
static void fill_row(mlt_rng *r, uint8_t *row) {
    for (int t = 0; t < 4; t++) {
        float sc = ldexpf(1.f, -(int)mlt_rng_range(r, 2, 9));
        memcpy(row + 512 + 4 * t, &sc, 4);
        for (int e = 0; e < 128; e++)
            row[128 * t + e] = mlr_flashmla_f64_to_e4m3(clampd(gauss(r) / 10, -1, 1) / sc);
    }
    for (int e = 0; e < 64; e++) {
        uint16_t v = mlr_flashmla_f64_to_bf16(clampd(gauss(r) / 10, -1, 1));
        memcpy(row + 528 + 2 * e, &v, 2);
    }
}

static void dec_make(const dec_case *c, mlt_rng *r, dec_data *d) {
    d->blocks_per = (c->s_k + c->page - 1) / c->page;
    d->num_blocks = c->b * d->blocks_per + 2;
    size_t kbytes = (size_t)d->num_blocks * c->page * MLR_SPARSE_ROW_BYTES;
    size_t nq = (size_t)c->b * c->s_q * c->h_q * 576, ni = (size_t)c->b * c->s_q * c->topk;
    d->k = malloc(kbytes), d->q = malloc(nq * 2), d->idx = malloc(ni * 4);
    d->tlen = malloc((size_t)c->b * 4), d->sink = malloc((size_t)c->h_q * 4);
    cr_assert(d->k && d->q && d->idx && d->tlen && d->sink, "%s: malloc", c->name);
    memset(d->k, 0xFF, kbytes);  /* e4m3 NaN, float32 / bfloat16 NaN */
    for (size_t x = 0; x < nq; x++) d->q[x] = mlr_flashmla_f64_to_bf16(clampd(gauss(r), -1, 1));
    int64_t *perm = malloc((size_t)d->num_blocks * sizeof *perm);  /* block order */
    cr_assert(perm, "%s: malloc", c->name);
    for (int64_t x = 0; x < d->num_blocks; x++) perm[x] = x;
    for (int64_t x = d->num_blocks - 1; x > 0; x--) {
        int64_t u = mlt_rng_range(r, 0, x), t = perm[x];
        perm[x] = perm[u], perm[u] = t;
    }
    int64_t slots = d->num_blocks * c->page;
    for (int i = 0; i < c->b; i++) {
        d->tlen[i] = (int32_t)mlt_rng_range(r, 0, c->topk);
        for (int j = 0; j < c->s_q; j++) {
            int32_t *list = d->idx + ((size_t)i * c->s_q + j) * c->topk;
            draw_entries(r, c->s_k, c->topk, list, (int32_t)slots);
            for (int k = 0; k < c->topk; k++) {
                if (c->all_invalid && i == 1 % c->b) list[k] = -1;
                if (list[k] < 0 || list[k] >= c->s_k) continue;
                int64_t blk = perm[i * d->blocks_per + list[k] / c->page];
                list[k] = (int32_t)(blk * c->page + list[k] % c->page);
                fill_row(r, d->k + (size_t)list[k] * MLR_SPARSE_ROW_BYTES);
            }
        }
    }
    free(perm);
    make_sink(r, d->sink, c->h_q);
}

static void dec_free(dec_data *d) {
    free(d->k), free(d->q), free(d->idx), free(d->tlen), free(d->sink);
}

ParameterizedTestParameters(flashmla_sparse_gpu, decode) {
    return cr_make_param_array(dec_case, dec_cases, sizeof dec_cases / sizeof dec_cases[0]);
}

ParameterizedTest(dec_case *c, flashmla_sparse_gpu, decode) {
    mla_runtime *rt = NULL;
    if (!runtime_with_decode_env(NULL, &rt)) cr_skip_test("no CUDA device");
    cr_assert(!rt->flashmla_decode_portable, "a runtime created without MLAJIT_FLASHMLA_DECODE "
              "forces the portable kernels");
    uint64_t seed = mlt_seed();
    mlt_rng r;
    mlt_rng_init(&r, seed);
    dec_data d;
    dec_make(c, &r, &d);
    size_t kbytes = (size_t)d.num_blocks * c->page * MLR_SPARSE_ROW_BYTES;
    size_t nq = (size_t)c->b * c->s_q * c->h_q * 576, ni = (size_t)c->b * c->s_q * c->topk;
    size_t no = (size_t)c->b * c->s_q * c->h_q * 512, nl = (size_t)c->b * c->h_q * c->s_q;
    CUdeviceptr dk, dq, di, dt, ds, dout, dlse;
    CU_OK(rt, mlt_alloc(rt, kbytes, &dk), c->name);
    CU_OK(rt, mlt_alloc(rt, nq * 2, &dq), c->name);
    CU_OK(rt, mlt_alloc(rt, ni * 4, &di), c->name);
    CU_OK(rt, mlt_alloc(rt, (size_t)c->b * 4, &dt), c->name);
    CU_OK(rt, mlt_alloc(rt, (size_t)c->h_q * 4, &ds), c->name);
    CU_OK(rt, mlt_alloc(rt, no * 2, &dout), c->name);
    CU_OK(rt, mlt_alloc(rt, nl * 4, &dlse), c->name);
    CU_OK(rt, mlt_upload(rt, dk, d.k, kbytes), c->name);
    CU_OK(rt, mlt_upload(rt, dq, d.q, nq * 2), c->name);
    CU_OK(rt, mlt_upload(rt, di, d.idx, ni * 4), c->name);
    CU_OK(rt, mlt_upload(rt, dt, d.tlen, (size_t)c->b * 4), c->name);
    CU_OK(rt, mlt_upload(rt, ds, d.sink, (size_t)c->h_q * 4), c->name);
    mlt_tensor q, k, idx, tl, sk, out, lse;
    int64_t qs[4] = {c->b, c->s_q, c->h_q, 576}, ks[4] = {d.num_blocks, c->page, 1, 656};
    int64_t is[3] = {c->b, c->s_q, c->topk}, bs[1] = {c->b}, hs[1] = {c->h_q};
    int64_t os[4] = {c->b, c->s_q, c->h_q, 512}, ls[3] = {c->b, c->h_q, c->s_q};
    mlt_tensor_init(&q, dq, MLT_BF16, 4, qs, NULL);
    mlt_tensor_init(&k, dk, MLT_E4M3, 4, ks, NULL);
    mlt_tensor_init(&idx, di, MLT_INT32, 3, is, NULL);
    mlt_tensor_init(&tl, dt, MLT_INT32, 1, bs, NULL);
    mlt_tensor_init(&sk, ds, MLT_FP32, 1, hs, NULL);
    mlt_tensor_init(&out, dout, MLT_BF16, 4, os, NULL);
    mlt_tensor_init(&lse, dlse, MLT_FP32, 3, ls, NULL);
    mla_flash_with_kvcache_args a;
    mla_flash_with_kvcache_args_init(&a);
    a.q = &q.t, a.k_cache = &k.t, a.indices = &idx.t, a.is_fp8_kvcache = 1;
    a.softmax_scale = (float)pow(576.0, -0.55);
    a.out = &out.t, a.softmax_lse = &lse.t;
    if (c->sink) a.attn_sink = &sk.t;
    if (c->topk_length) a.topk_length = &tl.t;
    uint16_t *ho = malloc(no * 2);
    float *hl = malloc(nl * 4);
    double *go = malloc(no * 8), *wo = malloc(no * 8), *gl = malloc(nl * 8), *wl = malloc(nl * 8);
    cr_assert(ho && hl && go && wo && gl && wl, "%s: malloc", c->name);
    mlr_sparse_decode_problem p = {
        .b = c->b, .s_q = c->s_q, .h_q = c->h_q, .topk = c->topk, .page_size = c->page,
        .num_blocks = d.num_blocks, .q = d.q,
        .q_stride = {(int64_t)c->s_q * c->h_q * 576, (int64_t)c->h_q * 576, 576},
        .k_cache = d.k, .k_stride_block = (int64_t)c->page * 656, .indices = d.idx,
        .i_stride = {(int64_t)c->s_q * c->topk, c->topk},
        .topk_length = c->topk_length ? d.tlen : NULL, .attn_sink = c->sink ? d.sink : NULL,
        .softmax_scale = (double)a.softmax_scale, .threads = 0,
    };
    mlr_flashmla_sparse_decode(&p, wo, wl);
    mla_runtime *rts[2];
    const char *kinds[2], *whats[2], *others[2];
    const int runs = case_runtimes(rt, 0, 0, c->h_q, rts, kinds, whats, others);
    for (int v = 0; v < runs; v++) {
        char name[96];
        snprintf(name, sizeof name, "%s%s", c->name, whats[v]);
        /* Both runtimes share the device's primary context, so the buffers serve both. */
        CU_OK(rt, mlt_fill(rt, dout, 0xFF, no * 2), name);
        CU_OK(rt, mlt_fill(rt, dlse, 0xFF, nl * 4), name);
        mla_status s = mla_flash_with_kvcache(rts[v], &a, NULL);
        cr_assert(s == MLA_OK, "%s: mla_flash_with_kvcache: %s: %s", name, mla_status_string(s),
                  mla_last_error());
        CU_OK(rt, mlt_sync(rt), name);
        assert_kind(rts[v], name, kinds[v], others[v]);
        CU_OK(rt, mlt_download(rt, ho, dout, no * 2), name);
        CU_OK(rt, mlt_download(rt, hl, dlse, nl * 4), name);
        for (size_t x = 0; x < no; x++) go[x] = mlr_flashmla_bf16_to_f64(ho[x]);
        for (size_t x = 0; x < nl; x++) gl[x] = hl[x];
        compare(name, "out", go, wo, no, 1e-3, MLR_FLASHMLA_OUT_REL, MLR_FLASHMLA_OUT_COS, seed);
        compare(name, "softmax_lse", gl, wl, nl, MLR_FLASHMLA_LSE_ABS, MLR_FLASHMLA_LSE_REL, -1,
                seed);
    }
    if (runs == 2) mla_runtime_destroy(rts[1]);
    free(ho), free(hl), free(go), free(wo), free(gl), free(wl);
    CUdeviceptr all[] = {dk, dq, di, dt, ds, dout, dlse};
    for (int x = 0; x < 7; x++) mlt_free(rt, all[x]);
    dec_free(&d);
    mla_runtime_destroy(rt);
}

/* ---- sparse prefill --------------------------------------------------------------------------- */

typedef struct pre_case {
    char name[64];
    int s_q, h_q, d_qk, s_kv, topk, sink, topk_length, natural_log;
} pre_case;

static pre_case pre_cases[] = {
    {"sq1 h128 d576 skv128 topk128", 1, 128, 576, 128, 128, 0, 0, 0},
    {"sq62 h64 d576 skv592 topk128 sink", 62, 64, 576, 592, 128, 1, 0, 0},
    {"sq213 h16 d576 skv1840 topk256 topk_length", 213, 16, 576, 1840, 256, 0, 1, 0},
    {"sq62 h128 d576 skv1521 topk512 sink topk_length", 62, 128, 576, 1521, 512, 1, 1, 0},
    {"sq213 h64 d512 skv95 topk128 ln", 213, 64, 512, 95, 128, 0, 0, 1},
    {"sq62 h16 d576 skv153 topk256 sink ln", 62, 16, 576, 153, 256, 1, 0, 1},
    {"sq1 h32 d512 skv1840 topk256 sink topk_length ln", 1, 32, 512, 1840, 256, 1, 1, 1},
    {"sq62 h128 d512 skv32 topk192 (s_kv < topk)", 62, 128, 512, 32, 192, 0, 1, 0},
};

ParameterizedTestParameters(flashmla_sparse_gpu, prefill) {
    return cr_make_param_array(pre_case, pre_cases, sizeof pre_cases / sizeof pre_cases[0]);
}

ParameterizedTest(pre_case *c, flashmla_sparse_gpu, prefill) {
    mla_runtime *rt = NULL;
    if (!runtime_with_decode_env(NULL, &rt)) cr_skip_test("no CUDA device");
    uint64_t seed = mlt_seed();
    mlt_rng r;
    mlt_rng_init(&r, seed);
    int d = c->d_qk;
    /* kv gets one NaN row past s_kv: a read of index s_kv would show. */
    size_t nkv = (size_t)(c->s_kv + 1) * d, nq = (size_t)c->s_q * c->h_q * d;
    size_t ni = (size_t)c->s_q * c->topk, no = (size_t)c->s_q * c->h_q * 512;
    size_t ns = (size_t)c->s_q * c->h_q;
    uint16_t *kv = malloc(nkv * 2), *q = malloc(nq * 2);
    int32_t *idx = malloc(ni * 4), *tlen = malloc((size_t)c->s_q * 4);
    float *sink = malloc((size_t)c->h_q * 4);
    char *used = calloc((size_t)c->s_kv, 1);
    cr_assert(kv && q && idx && tlen && sink && used, "%s: malloc", c->name);
    for (size_t x = 0; x < nq; x++)
        q[x] = mlr_flashmla_f64_to_bf16(clampd(gauss(&r) / 10 + 0.02, -10, 10));
    for (int i = 0; i < c->s_q; i++) {
        tlen[i] = (int32_t)mlt_rng_range(&r, 0, c->topk);
        int32_t *list = idx + (size_t)i * c->topk;
        draw_entries(&r, c->s_kv, c->topk, list, c->s_kv);
        for (int k = 0; k < c->topk; k++) {
            if (i == 1 % c->s_q && c->s_q > 1) list[k] = -1;   /* an all-invalid token */
            if (list[k] >= 0 && list[k] < c->s_kv) used[list[k]] = 1;
        }
    }
    for (int t = 0; t <= c->s_kv; t++)
        for (int e = 0; e < d; e++)
            kv[(size_t)t * d + e] = t < c->s_kv && used[t]
                                        ? mlr_flashmla_f64_to_bf16(clampd(gauss(&r) / 10 + 0.01, -10, 10))
                                        : 0xFFFF;
    make_sink(&r, sink, c->h_q);
    CUdeviceptr dkv, dq, di, dt, ds, dout, dml, dlse;
    CU_OK(rt, mlt_alloc(rt, nkv * 2, &dkv), c->name);
    CU_OK(rt, mlt_alloc(rt, nq * 2, &dq), c->name);
    CU_OK(rt, mlt_alloc(rt, ni * 4, &di), c->name);
    CU_OK(rt, mlt_alloc(rt, (size_t)c->s_q * 4, &dt), c->name);
    CU_OK(rt, mlt_alloc(rt, (size_t)c->h_q * 4, &ds), c->name);
    CU_OK(rt, mlt_alloc(rt, no * 2, &dout), c->name);
    CU_OK(rt, mlt_alloc(rt, ns * 4, &dml), c->name);
    CU_OK(rt, mlt_alloc(rt, ns * 4, &dlse), c->name);
    CU_OK(rt, mlt_upload(rt, dkv, kv, nkv * 2), c->name);
    CU_OK(rt, mlt_upload(rt, dq, q, nq * 2), c->name);
    CU_OK(rt, mlt_upload(rt, di, idx, ni * 4), c->name);
    CU_OK(rt, mlt_upload(rt, dt, tlen, (size_t)c->s_q * 4), c->name);
    CU_OK(rt, mlt_upload(rt, ds, sink, (size_t)c->h_q * 4), c->name);
    mlt_tensor tq, tkv, ti, tt, ts, to, tml, tl;
    int64_t qs[3] = {c->s_q, c->h_q, d}, ks[3] = {c->s_kv, 1, d}, is[3] = {c->s_q, 1, c->topk};
    int64_t ss[1] = {c->s_q}, hs[1] = {c->h_q}, os[3] = {c->s_q, c->h_q, 512};
    int64_t ls[2] = {c->s_q, c->h_q};
    mlt_tensor_init(&tq, dq, MLT_BF16, 3, qs, NULL);
    mlt_tensor_init(&tkv, dkv, MLT_BF16, 3, ks, NULL);
    mlt_tensor_init(&ti, di, MLT_INT32, 3, is, NULL);
    mlt_tensor_init(&tt, dt, MLT_INT32, 1, ss, NULL);
    mlt_tensor_init(&ts, ds, MLT_FP32, 1, hs, NULL);
    mlt_tensor_init(&to, dout, MLT_BF16, 3, os, NULL);
    mlt_tensor_init(&tml, dml, MLT_FP32, 2, ls, NULL);
    mlt_tensor_init(&tl, dlse, MLT_FP32, 2, ls, NULL);
    mla_flash_sparse_fwd_args a;
    mla_flash_sparse_fwd_args_init(&a);
    a.q = &tq.t, a.kv = &tkv.t, a.indices = &ti.t, a.sm_scale = (float)(1.0 / sqrt((double)d));
    a.natural_log = c->natural_log;
    a.out = &to.t, a.max_logits = &tml.t, a.lse = &tl.t;
    if (c->sink) a.attn_sink = &ts.t;
    if (c->topk_length) a.topk_length = &tt.t;
    uint16_t *ho = malloc(no * 2);
    float *hm = malloc(ns * 4), *hl = malloc(ns * 4);
    double *go = malloc(no * 8), *wo = malloc(no * 8), *gm = malloc(ns * 8), *wm = malloc(ns * 8);
    double *gl = malloc(ns * 8), *wl = malloc(ns * 8);
    cr_assert(ho && hm && hl && go && wo && gm && wm && gl && wl, "%s: malloc", c->name);
    mlr_sparse_prefill_problem p = {
        .s_q = c->s_q, .h_q = c->h_q, .d_qk = d, .topk = c->topk, .s_kv = c->s_kv, .q = q,
        .q_stride = {(int64_t)c->h_q * d, d}, .kv = kv, .kv_stride = d, .indices = idx,
        .i_stride = c->topk, .topk_length = c->topk_length ? tlen : NULL,
        .attn_sink = c->sink ? sink : NULL, .sm_scale = (double)a.sm_scale,
        .natural_log = c->natural_log, .threads = 0,
    };
    mlr_flashmla_sparse_prefill(&p, wo, wm, wl);
    mla_runtime *rts[2];
    const char *kinds[2], *whats[2], *others[2];
    const int runs = case_runtimes(rt, 1, d, c->h_q, rts, kinds, whats, others);
    for (int v = 0; v < runs; v++) {
        char name[96];
        snprintf(name, sizeof name, "%s%s", c->name, whats[v]);
        CU_OK(rt, mlt_fill(rt, dout, 0xFF, no * 2), name);
        CU_OK(rt, mlt_fill(rt, dml, 0xFF, ns * 4), name);
        CU_OK(rt, mlt_fill(rt, dlse, 0xFF, ns * 4), name);
        mla_status s = mla_flash_sparse_fwd(rts[v], &a, NULL);
        cr_assert(s == MLA_OK, "%s: mla_flash_sparse_fwd: %s: %s", name, mla_status_string(s),
                  mla_last_error());
        CU_OK(rt, mlt_sync(rt), name);
        assert_kind(rts[v], name, kinds[v], others[v]);
        CU_OK(rt, mlt_download(rt, ho, dout, no * 2), name);
        CU_OK(rt, mlt_download(rt, hm, dml, ns * 4), name);
        CU_OK(rt, mlt_download(rt, hl, dlse, ns * 4), name);
        for (size_t x = 0; x < no; x++) go[x] = mlr_flashmla_bf16_to_f64(ho[x]);
        for (size_t x = 0; x < ns; x++) gm[x] = hm[x], gl[x] = hl[x];
        compare(name, "out", go, wo, no, MLR_FLASHMLA_OUT_ABS, MLR_FLASHMLA_OUT_REL,
                MLR_FLASHMLA_OUT_COS, seed);
        compare(name, "max_logits", gm, wm, ns, 1e-6, 2.01 / 65536, -1, seed);
        compare(name, "lse", gl, wl, ns, 1e-6, 2.01 / 65536, -1, seed);
    }
    if (runs == 2) mla_runtime_destroy(rts[1]);
    free(ho), free(hm), free(hl), free(go), free(wo), free(gm), free(wm), free(gl), free(wl);
    CUdeviceptr all[] = {dkv, dq, di, dt, ds, dout, dml, dlse};
    for (int x = 0; x < 8; x++) mlt_free(rt, all[x]);
    free(kv), free(q), free(idx), free(tlen), free(sink), free(used);
    mla_runtime_destroy(rt);
}
