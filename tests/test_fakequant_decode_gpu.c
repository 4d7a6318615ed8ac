/* mla_attention_decode on the GPU (skips without one) against the float64 oracle of the same
 * schedule (tests/ref/fakequant_ref.c), with the tolerances of spec/fakequant.md §5: no quant
 * [5e-3], quantized modes and their mixes [rtol 5e-3, atol 2e-2], the full recipe with an fp32
 * NVFP4 q carrier [the same, and cos > 0.98 vs dense on q of unit variance]. Lengths 200/7/64/0
 * and ones off the 16-grid (the open V tail), 2100..4500 (several CTA chunks of the tensor-core
 * decode), pages 16/32/64 in shuffled order, splits 1/3/32, H = 2 and 80, every out dtype.
 * Properties: the result of a request does not depend on the page size or on its batch mates (bit
 * for bit; all NVFP4 and no quant), and num_kv_splits never changes a no-quant result beyond fp32
 * rounding (fp32 out; with a bf16 out at most one ulp, and not at all on the dense path). Every test
 * runs on five runtimes: the default one ("[default]": on sm_90a the wgmma kernel
 * fakequant/decode_sm90.cu for the modes it runs by default, decode_mma.cu for the others, the
 * dense path and its quantizing kind for the modes mla__fq_dense_kv_default names), one
 * created with MLAJIT_FAKEQUANT_DECODE=sm90 ("[sm90]": decode_sm90.cu for every mode), =mma
 * ("[mma]": the mma.sync kernel fakequant/decode_mma.cu), =fp32 ("[fp32]": the exact fp32
 * kernel) and =dense ("[dense]": without quantization, 16-bit q and out of the cache dtype the
 * FlashMLA-compatible dense decode flashmla/decode_sm90.cu; with K and / or V quantized and P not,
 * its quantizing specialization fakequant_decode_dense (page sizes multiples of 8); the default's
 * kernels otherwise; the variable is read at runtime creation only); after each run the
 * runtime's kernel table must hold the expected kind and no other of the five.
 * Reproduce a failure with MLAJIT_TEST_SEED=<seed from the message>. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/fakequant_kinds.h"
#include "runtime/internal.h"
#include "util/fakequant_case.h"

enum { N0 = MLA_QDQ_NONE, F8 = MLA_QDQ_FP8, F4 = MLA_QDQ_NVFP4 };

/* name, fp16, q_fp32, batch, heads, lens, page, splits, k, v, p, k_amax, v_amax, p_amax, out,
 * shuffle */
static mlt_fq_case sweep[] = {
    {"bf16 none p16 s32 lens 200/7/64", 0, 0, 3, 16, {200, 7, 64}, 16, 32, N0, N0, N0, 0, 0, 0, 0, 1},
    {"bf16 none p64 s1 lens 200/7/0", 0, 0, 3, 2, {200, 7, 0}, 64, 1, N0, N0, N0, 0, 0, 0, 0, 1},
    {"fp16 none p32 s3 H2 out fp32", 1, 0, 2, 2, {1000, 33}, 32, 3, N0, N0, N0, 0, 0, 0, 3, 1},
    {"bf16 p fp8", 0, 0, 2, 16, {200, 41}, 16, 32, N0, N0, F8, 0, 0, 0, 0, 1},
    {"bf16 p nvfp4", 0, 0, 2, 16, {200, 41}, 16, 32, N0, N0, F4, 0, 0, 0, 0, 1},
    {"fp16 p nvfp4 s2 (multi-tile splits)", 1, 0, 2, 8, {300, 77}, 32, 2, N0, N0, F4, 0, 0, 0, 0, 1},
    {"bf16 k nvfp4 + v fp8 + p fp8 out fp16", 0, 0, 2, 8, {200, 50}, 32, 4, F4, F8, F8, 0, 0, 0, 2, 1},
    {"bf16 all nvfp4 q fp32", 0, 1, 2, 16, {256, 100}, 64, 32, F4, F4, F4, 0, 0, 0, 0, 1},
    {"fp16 all fp8 amax p 0.5", 1, 0, 2, 8, {256, 100}, 16, 8, F8, F8, F8, 1.0f, 1.0f, 0.5f, 0, 0},
    /* longer than one chunk of the tensor-core decode (>= 64 tiles: 3 and 1 chunks, 2 and 1), and
     * more heads than one of its CTAs (64) */
    {"bf16 v nvfp4 + p nvfp4 lens 4500/2100", 0, 0, 2, 8, {4500, 2100}, 64, 32, N0, F4, F4, 0, 0,
     0, 0, 1},
    {"fp16 none lens 3000/129 out fp32", 1, 0, 2, 4, {3000, 129}, 32, 32, N0, N0, N0, 0, 0, 0, 3, 1},
    /* the dense path in fp16, and a request of two of its chunks (16384 keys each: its split
     * partials and the combine, which also writes the -inf lse of the empty request) */
    {"fp16 none p64 s8 lens 2100/1/64", 1, 0, 3, 8, {2100, 1, 64}, 64, 8, N0, N0, N0, 0, 0, 0, 0, 1},
    {"bf16 none lens 17000/300/0", 0, 0, 3, 8, {17000, 300, 0}, 64, 32, N0, N0, N0, 0, 0, 0, 0, 1},
    /* a plain float32 q (not the NVFP4 carrier, so not exact in 16 bits): the tensor-core decode
     * adds the residual product of q - fl16(q) */
    {"bf16 none q fp32 plain", 0, 2, 2, 16, {300, 45}, 64, 32, N0, N0, N0, 0, 0, 0, 3, 1},
    {"fp16 k fp8 + p nvfp4 q fp32 plain", 1, 2, 2, 8, {200, 64}, 32, 8, F8, N0, F4, 0, 0, 0, 0, 1},
    /* K and / or V with P on the tile alternation ([sm90]): several tile pairs, a tail tile,
     * two head blocks (80 heads, the second partial), an empty request; K alone with P (its raw V
     * reload) with an odd tps */
    {"bf16 all fp8 H80 lens 2300/77/0", 0, 0, 3, 80, {2300, 77, 0}, 64, 32, F8, F8, F8, 0, 0, 0, 0,
     1},
    {"bf16 k fp8 + p fp8 s3 lens 700/130", 0, 0, 2, 16, {700, 130}, 16, 3, F8, N0, F8, 2.0f, 0, 0,
     0, 1},
    {"fp16 all nvfp4 lens 1500/40", 1, 0, 2, 16, {1500, 40}, 32, 32, F4, F4, F4, 0, 0, 0, 0, 1},
    /* an fp8 scale for which the runtime refuses the K / V codes' shortcut (mla__fq_fp8_quick_ok:
     * some 16-bit x would round differently), on the alternation */
    {"bf16 all fp8 amax 0.40625 (no fp8 shortcut)", 0, 0, 2, 16, {700, 90}, 32, 32, F8, F8, F8,
     0.40625f, 0.40625f, 0, 0, 1},
    /* NVFP4 V with a global scale the runtime allows the codes' shortcut for (amax 10; amax None,
     * gs 1, refuses it: the E4M3 block scales make exact ties), on the alternation */
    {"fp16 v nvfp4 + p fp8 amax 10 (codes shortcut)", 1, 0, 2, 16, {700, 90}, 32, 32, N0, F4, F8,
     0, 10.0f, 0, 0, 1},
    /* and with a plain fp32 q: the feature split with its residual product, not the alternation */
    {"bf16 all fp8 q fp32 plain", 0, 2, 2, 16, {300, 45}, 64, 32, F8, F8, F8, 0, 0, 0, 0, 1},
};

/* K and / or V quantized, P not (on [dense] and by default where chosen: fakequant_decode_dense;
 * pages that are multiples of 8), the same checks: single tiles with the open V tail, several
 * tile pairs, 80 heads (two head blocks, the second partial), and 17000 keys (two dense chunks
 * through FlashMLA's combine) with an empty request. */
static mlt_fq_case kv_sweep[] = {
    {"bf16 k fp8", 0, 0, 2, 8, {130, 17}, 64, 32, F8, N0, N0, 0, 0, 0, 0, 1},
    {"bf16 k nvfp4 amax 3", 0, 0, 2, 8, {130, 17}, 64, 32, F4, N0, N0, 3.0f, 0, 0, 0, 1},
    {"bf16 v fp8 amax 2", 0, 0, 2, 8, {130, 17}, 16, 32, N0, F8, N0, 0, 2.0f, 0, 0, 1},
    {"bf16 v nvfp4 tail", 0, 0, 3, 8, {129, 31, 5}, 16, 32, N0, F4, N0, 0, 0, 0, 0, 1},
    {"fp16 k fp8 + v nvfp4", 1, 0, 2, 8, {200, 50}, 32, 32, F8, F4, N0, 0, 0, 0, 0, 1},
    {"bf16 k fp8 H80", 0, 0, 1, 80, {150}, 16, 32, F8, N0, N0, 0, 0, 0, 0, 1},
    /* fp8 scales for which the runtime refuses the codes' shortcut (amax 2.1: some x would round
     * differently through fl(x * (1 / sc))), K and V */
    {"bf16 k fp8 + v fp8 amax 2.1 (no fp8 shortcut)", 0, 0, 2, 8, {300, 45}, 64, 32, F8, F8, N0,
     2.1f, 2.1f, 0, 0, 1},
    /* NVFP4 K with the codes' shortcut (amax 4; the other NVFP4 cases' amax None and 3 refuse
     * it; with K and V both NVFP4 the dense path does not take it) */
    {"bf16 k nvfp4 + v fp8 amax 4 (codes shortcut)", 0, 0, 2, 8, {300, 45}, 64, 32, F4, F8, N0,
     4.0f, 4.0f, 0, 0, 1},
    /* K and V quantized, P not, over several tile pairs and (17000) two dense chunks with an
     * empty request: fakequant_decode_dense on [dense] */
    {"bf16 k nvfp4 + v nvfp4 lens 4500/2100", 0, 0, 2, 8, {4500, 2100}, 64, 32, F4, F4, N0, 0, 0,
     0, 0, 1},
    {"fp16 k fp8 + v fp8 lens 17000/300/0", 1, 0, 3, 8, {17000, 300, 0}, 64, 32, F8, F8, N0, 0, 0,
     0, 0, 1},
};

ParameterizedTestParameters(fakequant_decode_gpu, kv_sweep) {
    return cr_make_param_array(mlt_fq_case, kv_sweep, sizeof kv_sweep / sizeof kv_sweep[0]);
}

ParameterizedTestParameters(fakequant_decode_gpu, sweep) {
    return cr_make_param_array(mlt_fq_case, sweep, sizeof sweep / sizeof sweep[0]);
}

/* The decode kernels: [0] the default runtime's (where the runtime compiles for sm_90a, and every
 * case here has a page size that is a multiple of 8: decode_sm90.cu for the modes of
 * mla__fq_sm90_default, decode_mma.cu for the others, and with MLA__FQ_DENSE_DEFAULT the dense
 * path where it applies; decode_mma.cu elsewhere), [1] $MLAJIT_FAKEQUANT_DECODE=sm90's
 * (decode_sm90.cu for every mode on sm_90a), [2] =mma's (decode_mma.cu), [3] =fp32's (decode.cu),
 * [4] =dense's (the dense path where it applies, else as [0] without it). */
enum { N_KERNELS = 5, N_KINDS = 5 };
static const char *const envs[N_KERNELS] = {NULL, "sm90", "mma", "fp32", "dense"};
static const char *const all_kinds[N_KINDS] = {"fakequant_decode_sm90", "fakequant_decode_mma",
                                               "fakequant_decode", "flashmla_decode_sm90",
                                               "fakequant_decode_dense"};
static const char *const tags[N_KERNELS] = {"[default]", "[sm90]", "[mma]", "[fp32]", "[dense]"};

/* Case c takes the dense path where it is chosen (sm_90a): no quantization, a 16-bit q, out of
 * the cache's dtype (the cases' workspaces from mla_attention_decode_shape hold their chunks). */
static int dense_case(const mlt_fq_case *c) {
    return mla__fq_dense_modes(c->k, c->v, c->p, c->q_fp32 != 0, c->out == 0 ||
                               c->out == (c->fp16 ? 2 : 1));
}

/* Case c takes the quantizing dense path where it is chosen (sm_90a): K and / or V quantized, P
 * not, a 16-bit q, out of the cache's dtype, a page size that is a multiple of 8. */
static int dense_kv_case(const mlt_fq_case *c) {
    return mla__fq_dense_kv_modes(c->k, c->v, c->p, c->q_fp32 != 0, c->out == 0 ||
                                  c->out == (c->fp16 ? 2 : 1)) && c->page % 8 == 0;
}

/* The kind kernel `which` of rt runs for case c. */
static const char *kind_of(const mla_runtime *rt, int which, const mlt_fq_case *c) {
    int sm90 = !strcmp(rt->arch, "sm_90a");
    if ((which == 4 || (which == 0 && MLA__FQ_DENSE_DEFAULT)) && sm90 && dense_case(c))
        /* the self-scheduled decode on fakequant_decode_dense where its TMA loads apply */
        return c->page % 8 == 0 && !rt->fakequant_dense_metadata ? all_kinds[4] : all_kinds[3];
    if ((which == 4 || (which == 0 && mla__fq_dense_kv_default(c->k, c->v))) && sm90 &&
        dense_kv_case(c))
        return all_kinds[4];
    if (which == 0 || which == 4)
        return sm90 && mla__fq_sm90_default(c->k, c->v, c->p, c->q_fp32 != 0) ? all_kinds[0] : all_kinds[1];
    if (which == 1) return sm90 ? all_kinds[0] : all_kinds[1];
    return all_kinds[which - 1];
}

/* A GPU runtime for kernel `which` (MLAJIT_FAKEQUANT_DECODE unset, "sm90", "mma", "fp32" or
 * "dense" at its creation, then restored); skips the test without a GPU. */
static mla_runtime *gpu_or_skip(int which) {
    mla_runtime *rt = NULL;
    int ok = mlt_gpu_runtime_env("MLAJIT_FAKEQUANT_DECODE", envs[which], &rt);
    cr_assert(ok >= 0, "set or restore MLAJIT_FAKEQUANT_DECODE");
    if (!ok) cr_skip_test("no GPU");
    cr_assert(rt->fakequant_decode_sm90 == (which == 1) && rt->fakequant_decode_mma == (which == 2) &&
              rt->fakequant_decode_fp32 == (which == 3) && rt->fakequant_decode_dense == (which == 4),
              "%s: the runtime's fakequant_decode_sm90 / mma / fp32 / dense are %d / %d / %d / %d",
              tags[which], rt->fakequant_decode_sm90, rt->fakequant_decode_mma,
              rt->fakequant_decode_fp32, rt->fakequant_decode_dense);
    return rt;
}

/* The decodes rt ran (all of case c's modes) were of kernel `which`'s kind only. */
static void assert_kind(const mla_runtime *rt, int which, const mlt_fq_case *c, const char *name) {
    const char *want = kind_of(rt, which, c);
    for (int k = 0; k < N_KINDS; k++) {
        int n = mlt_loaded_of_kind(rt, all_kinds[k]), is = !strcmp(all_kinds[k], want);
        cr_assert(is ? n >= 1 : n == 0, "%s %s: expected the decode to run %s only, the runtime "
                  "loaded %d %s kernels", name, tags[which], want, n, all_kinds[k]);
    }
}

/* Compares request i's device result with its oracle; atol/rtol on out, 1e-3 on lse. */
static void expect_oracle(const mlt_fq_case *c, const mlt_fq_run *r, int i, double atol,
                          double rtol, uint64_t seed, const char *tag) {
    size_t nh = (size_t)c->heads, n = nh * r->rank;
    double *out = malloc(n * sizeof *out), *lse = malloc(nh * sizeof *lse);
    cr_assert(out && lse && mlt_fq_oracle(c, r, i, out, lse) == 0, "%s seed %llu: oracle", c->name,
              (unsigned long long)seed);
    const double *got = r->out + (size_t)i * n, *gl = r->lse + (size_t)i * nh;
    int bad = 0;
    for (size_t j = 0; j < n && bad < 5; j++)
        if (!(fabs(got[j] - out[j]) <= atol + rtol * fabs(out[j]))) {
            bad++;
            cr_expect(0, "%s %s seed %llu: request %d (len %d) head %zu col %zu: got %.6g, oracle "
                      "%.6g", c->name, tag, (unsigned long long)seed, i, c->lens[i], j / r->rank,
                      j % r->rank, got[j], out[j]);
        }
    for (size_t h = 0; h < nh; h++) {
        int ok = isinf(lse[h]) ? gl[h] == lse[h] : fabs(gl[h] - lse[h]) <= 1e-3 + 1e-5 * fabs(lse[h]);
        cr_expect(ok, "%s %s seed %llu: request %d head %zu: lse %.7g, oracle %.7g", c->name, tag,
                  (unsigned long long)seed, i, h, gl[h], lse[h]);
    }
    free(out), free(lse);
}

/* Runtime `which` is among those to run: all, or those whose digits $MLT_FQ_RUNTIMES lists
 * (kernel development on a GPU with a cold cache: e.g. "4" runs [dense] only; never set by the
 * suite). */
static int runtime_selected(int which) {
    const char *e = getenv("MLT_FQ_RUNTIMES");
    return !e || !*e || strchr(e, '0' + which) != NULL;
}

/* Case c on every (selected) runtime against its oracle. */
static void run_case(const mlt_fq_case *c) {
    uint64_t seed = mlt_seed();
    char msg[512];
    int quant = c->k || c->v || c->p;
    for (int kd = 0; kd < N_KERNELS; kd++) {
        if (!runtime_selected(kd)) continue;
        mla_runtime *rt = gpu_or_skip(kd);
        mlt_fq_run r;
        cr_assert(mlt_fq_make(c, seed, 4.0, &r, msg, sizeof msg) == 0, "%s: %s", c->name, msg);
        cr_assert(mlt_fq_device(rt, c, seed, &r, msg, sizeof msg) == 0, "%s %s seed %llu: %s",
                  c->name, tags[kd], (unsigned long long)seed, msg);
        assert_kind(rt, kd, c, c->name);
        for (int i = 0; i < c->batch; i++)
            expect_oracle(c, &r, i, quant ? 2e-2 : 5e-3, 5e-3, seed, tags[kd]);
        mlt_fq_free(&r);
        mla_runtime_destroy(rt);
    }
}

ParameterizedTest(mlt_fq_case *c, fakequant_decode_gpu, sweep) { run_case(c); }

ParameterizedTest(mlt_fq_case *c, fakequant_decode_gpu, kv_sweep) { run_case(c); }

/* The full recipe: against its oracle [rtol 5e-3, atol 2e-2], and cosine similarity > 0.98 vs
 * dense on every request (§5). The cosine is a property of the recipe and of the data: q of unit
 * variance (amplitude sqrt 3; the oracle's own cosine is 0.986..0.990 over 80 requests). With the
 * sweep's amplitude 4 the oracle itself gives 0.972..0.984, so the 0.98 bound would test the data,
 * not the kernel. */
Test(fakequant_decode_gpu, full_recipe_close_to_dense) {
    uint64_t seed = mlt_seed();
    char msg[512];
    const double amp = sqrt(3.0);
    mlt_fq_case c = {"full recipe", 0, 1, 2, 16, {300, 45}, 32, 32, F4, F4, F4, 0, 0, 0, 0, 1};
    mlt_fq_case dense = c;
    dense.q_fp32 = 0, dense.k = dense.v = dense.p = N0;
    snprintf(dense.name, sizeof dense.name, "dense");
    for (int kd = 0; kd < N_KERNELS; kd++) {
        mla_runtime *rt = gpu_or_skip(kd);
        mlt_fq_run r, rd;
        cr_assert(mlt_fq_make(&c, seed, amp, &r, msg, sizeof msg) == 0, "%s", msg);
        cr_assert(mlt_fq_make(&dense, seed, amp, &rd, msg, sizeof msg) == 0, "%s", msg);
        cr_assert(mlt_fq_device(rt, &c, seed, &r, msg, sizeof msg) == 0, "full recipe %s seed "
                  "%llu: %s", tags[kd], (unsigned long long)seed, msg);
        assert_kind(rt, kd, &c, c.name);
        size_t n = (size_t)c.heads * r.rank;
        double *out = malloc(n * sizeof *out), *lse = malloc((size_t)c.heads * sizeof *lse);
        cr_assert(out && lse, "host memory");
        for (int i = 0; i < c.batch; i++) {
            expect_oracle(&c, &r, i, 2e-2, 5e-3, seed, tags[kd]);
            cr_assert(mlt_fq_oracle(&dense, &rd, i, out, lse) == 0, "dense oracle");
            double dot = 0, na = 0, nb = 0, diff = 0;
            for (size_t j = 0; j < n; j++) {
                double a = r.out[(size_t)i * n + j];
                dot += a * out[j], na += a * a, nb += out[j] * out[j], diff += fabs(a - out[j]);
            }
            double cosine = dot / sqrt(na * nb);
            cr_expect(cosine > 0.98, "full recipe %s seed %llu request %d: cos %.5f vs dense <= "
                      "0.98", tags[kd], (unsigned long long)seed, i, cosine);
            cr_expect(diff > 0, "full recipe %s seed %llu request %d: identical to dense "
                      "(quantization had no effect)", tags[kd], (unsigned long long)seed, i);
        }
        free(out), free(lse);
        mlt_fq_free(&r), mlt_fq_free(&rd);
        mla_runtime_destroy(rt);
    }
}

/* Request 0 alone with page 64 vs in a batch of three with page 16: bit-identical out and lse;
 * modes all NVFP4 (mode 2), none (mode 0: the dense path on [dense]) or K and V NVFP4 with P none
 * (mode 3: fakequant_decode_dense on [dense]). */
static void invariance(int mode) {
    const int p_mode = mode == 3 ? N0 : mode;
    if (mode == 3) mode = F4;
    uint64_t seed = mlt_seed();
    char msg[512];
    mlt_fq_case a = {"alone p64", 0, 0, 1, 8, {173}, 64, 32, mode, mode, p_mode, 0, 0, 0, 0, 1};
    mlt_fq_case b = {"batched p16", 0, 0, 3, 8, {173, 250, 3}, 16, 32, mode, mode, p_mode, 0, 0, 0,
                     0, 1};
    for (int kd = 0; kd < N_KERNELS; kd++) {
        if (!runtime_selected(kd)) continue;
        mla_runtime *rt = gpu_or_skip(kd);
        mlt_fq_run ra, rb;
        cr_assert(mlt_fq_make(&b, seed, 4.0, &rb, msg, sizeof msg) == 0, "%s", msg);
        cr_assert(mlt_fq_make(&a, seed, 4.0, &ra, msg, sizeof msg) == 0, "%s", msg);
        /* request 0 of b is a's only request: copy its data */
        memcpy(ra.q, rb.q, (size_t)8 * ra.D * sizeof *ra.q);
        ra.max_len = 173;
        for (int t = 0; t < 173; t++)
            memcpy(ra.kv + (size_t)t * ra.D, rb.kv + (size_t)t * rb.D, (size_t)rb.D * sizeof *rb.kv);
        cr_assert(mlt_fq_device(rt, &a, seed, &ra, msg, sizeof msg) == 0, "alone %s seed %llu: %s",
                  tags[kd], (unsigned long long)seed, msg);
        cr_assert(mlt_fq_device(rt, &b, seed, &rb, msg, sizeof msg) == 0, "batched %s seed %llu: "
                  "%s", tags[kd], (unsigned long long)seed, msg);
        assert_kind(rt, kd, &a, "invariant_to_page_size_and_batch");
        size_t n = (size_t)8 * ra.rank;
        cr_expect(memcmp(ra.out, rb.out, n * sizeof *ra.out) == 0, "mode %d p %d %s seed %llu: "
                  "request 0 out differs between alone/page 64 and batched/page 16", mode, p_mode, tags[kd],
                  (unsigned long long)seed);
        cr_expect(memcmp(ra.lse, rb.lse, 8 * sizeof *ra.lse) == 0, "mode %d p %d %s seed %llu: "
                  "request 0 lse differs", mode, p_mode, tags[kd], (unsigned long long)seed);
        expect_oracle(&a, &ra, 0, mode ? 2e-2 : 5e-3, 5e-3, seed, tags[kd]);
        mlt_fq_free(&ra), mlt_fq_free(&rb);
        mla_runtime_destroy(rt);
    }
}

Test(fakequant_decode_gpu, invariant_to_page_size_and_batch) { invariance(F4); }

Test(fakequant_decode_gpu, invariant_to_page_size_and_batch_no_quant) { invariance(N0); }

Test(fakequant_decode_gpu, invariant_to_page_size_and_batch_kv_quant) { invariance(3); }

/* Without quantization and with a bf16 out, splits 1 and 32: bit-identical on the dense path
 * (its chunks depend on the length only), else within one bf16 ulp (fp32 rounding moved across a
 * rounding boundary of out, 1e-6 beside it for values near 0); each against the oracle too. */
Test(fakequant_decode_gpu, splits_no_quant_bf16_out) {
    uint64_t seed = mlt_seed();
    char msg[512];
    mlt_fq_case c1 = {"no quant splits 1 bf16", 0, 0, 2, 8, {700, 3000}, 32, 1, N0, N0, N0, 0, 0,
                      0, 0, 1};
    mlt_fq_case c32 = c1;
    c32.splits = 32;
    snprintf(c32.name, sizeof c32.name, "no quant splits 32 bf16");
    for (int kd = 0; kd < N_KERNELS; kd++) {
        mla_runtime *rt = gpu_or_skip(kd);
        mlt_fq_run r1, r32;
        cr_assert(mlt_fq_make(&c1, seed, 4.0, &r1, msg, sizeof msg) == 0, "%s", msg);
        cr_assert(mlt_fq_make(&c32, seed, 4.0, &r32, msg, sizeof msg) == 0, "%s", msg);
        cr_assert(mlt_fq_device(rt, &c1, seed, &r1, msg, sizeof msg) == 0, "%s %s: %s", c1.name,
                  tags[kd], msg);
        cr_assert(mlt_fq_device(rt, &c32, seed, &r32, msg, sizeof msg) == 0, "%s %s: %s",
                  c32.name, tags[kd], msg);
        assert_kind(rt, kd, &c1, "splits_no_quant_bf16_out");
        int exact = !strcmp(kind_of(rt, kd, &c1), all_kinds[3]);
        for (size_t j = 0; j < (size_t)c1.batch * 8 * r1.rank; j++) {
            double a = r1.out[j], b = r32.out[j], ulp = ldexp(fmax(fabs(a), fabs(b)), -7);
            cr_assert(exact ? a == b : fabs(a - b) <= ulp + 1e-6, "%s seed %llu: request %zu col %zu: "
                      "splits 1 %.7g vs splits 32 %.7g (%s)", tags[kd], (unsigned long long)seed,
                      j / (8 * r1.rank), j % (8 * r1.rank), a, b, exact ? "bit for bit" : "1 ulp");
        }
        if (exact)
            cr_expect(memcmp(r1.lse, r32.lse, (size_t)c1.batch * 8 * sizeof *r1.lse) == 0,
                      "%s seed %llu: lse differs between splits 1 and 32", tags[kd],
                      (unsigned long long)seed);
        for (int i = 0; i < c1.batch; i++) expect_oracle(&c1, &r1, i, 5e-3, 5e-3, seed, tags[kd]);
        mlt_fq_free(&r1), mlt_fq_free(&r32);
        mla_runtime_destroy(rt);
    }
}

/* Without quantization, splits 1 and 32 agree to fp32 rounding (each against the oracle too);
 * lengths 700 and 3000 (3000: more than one chunk of the tensor-core decodes at splits 32, one at
 * splits 1). */
Test(fakequant_decode_gpu, splits_only_reorder_no_quant) {
    uint64_t seed = mlt_seed();
    char msg[512];
    mlt_fq_case c1 = {"no quant splits 1", 0, 0, 2, 8, {700, 3000}, 32, 1, N0, N0, N0, 0, 0, 0, 3, 1};
    mlt_fq_case c32 = c1;
    c32.splits = 32;
    snprintf(c32.name, sizeof c32.name, "no quant splits 32");
    for (int kd = 0; kd < N_KERNELS; kd++) {
        mla_runtime *rt = gpu_or_skip(kd);
        mlt_fq_run r1, r32;
        cr_assert(mlt_fq_make(&c1, seed, 4.0, &r1, msg, sizeof msg) == 0, "%s", msg);
        cr_assert(mlt_fq_make(&c32, seed, 4.0, &r32, msg, sizeof msg) == 0, "%s", msg);
        cr_assert(mlt_fq_device(rt, &c1, seed, &r1, msg, sizeof msg) == 0, "%s %s: %s", c1.name,
                  tags[kd], msg);
        cr_assert(mlt_fq_device(rt, &c32, seed, &r32, msg, sizeof msg) == 0, "%s %s: %s",
                  c32.name, tags[kd], msg);
        assert_kind(rt, kd, &c1, "splits_only_reorder_no_quant");
        for (size_t j = 0; j < (size_t)c1.batch * 8 * r1.rank; j++)
            cr_assert(fabs(r1.out[j] - r32.out[j]) <= 1e-5 + 1e-4 * fabs(r1.out[j]), "%s seed %llu: "
                      "request %zu col %zu: splits 1 %.7g vs splits 32 %.7g", tags[kd],
                      (unsigned long long)seed, j / (8 * r1.rank), j % (8 * r1.rank), r1.out[j],
                      r32.out[j]);
        for (int i = 0; i < c1.batch; i++) expect_oracle(&c1, &r1, i, 5e-3, 5e-3, seed, tags[kd]);
        mlt_fq_free(&r1), mlt_fq_free(&r32);
        mla_runtime_destroy(rt);
    }
}
