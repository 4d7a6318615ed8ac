/* mla_prefill_attention on the GPU (skips without one) against the float64 references of
 * tests/ref/fakequant_ref.c, with the tolerances of spec/fakequant.md §5: no quant vs the plain
 * masked-softmax reference [rtol = atol = 5e-3]; quantized modes, mixes and N:M vs the oracle of
 * the same block_n schedule [rtol 5e-3, atol 2e-2]; lse within 1e-3 and -inf exactly where the
 * reference has it. N:M rows whose selection is a near-tie within the fp32 bound are left out
 * (mlt_pf_nm_unsure, under 1 % of the groups). Covers MHA and GQA 8/2, head dims 192/128, 64/32,
 * 576/512, varlen lengths off the 16-grid with empty sequences (q_len 0, k_len 0), causal suffix
 * and non-causal, causal rows with no visible key, max_seqlen_q smaller than the real maximum,
 * block_n 16..128, and q with a padded token stride. Properties: N:M keeps exactly the top N
 * under ties for M = 4 and every tie for M = 8, sink/recent/single-row exemptions (one-hot v makes
 * the kept set visible), the 2-chunk LSE merge equals the single shot, block_n and amax change
 * quantized results, and all-NVFP4 stays close to dense [cos > 0.98]. Every test runs on the same
 * inputs: on a default runtime, where the tensor-core kernel (prefill_mma.cu, "[mma]" in
 * messages) runs every case its shapes allow (head dims 192/128 and 64/32 here; 576/512 and P
 * quantized with block_n 128 take the fp32 kernel, and the test checks which kernel ran; on
 * sm_90a the wgmma kernel prefill_sm90.cu takes the tensor-core cases with v_head_dim 64 or 128,
 * "[default]" in messages), then on a runtime created with MLAJIT_FAKEQUANT_PREFILL=portable,
 * which runs the fp32 kernel (prefill.cu, "[fp32]") everywhere, and on runtimes with
 * MLAJIT_FAKEQUANT_PREFILL=mma4, mma8 or mma32 for the mma.sync kernel's CTA shapes ("[mma8]"
 * etc.; the one that is the default is skipped where the default runtime runs it).
 * Reproduce a failure with MLAJIT_TEST_SEED=<seed in the message>; MLT_PF_PASSES=default,fp32
 * (a comma-separated list of the labels) runs only those passes (development; unset: all). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/fakequant_kinds.h"
#include "runtime/internal.h"
#include "util/fakequant_prefill_case.h"

enum { N0 = MLA_QDQ_NONE, F8 = MLA_QDQ_FP8, F4 = MLA_QDQ_NVFP4 };

/* name, fp16, heads, kv_heads, dqk, dv, nseq, q_lens, k_lens, causal, q, k, p, v, q/k/p/v amax,
 * sparsity n, m, sink, recent, block_n, max_seqlen_q, data */
static mlt_pf_case sweep[] = {
    {"none MHA 192/128 causal varlen 37/0/33/5 of 41/7/33/0", 0, 4, 4, 192, 128, 4,
     {37, 0, 33, 5}, {41, 7, 33, 0}, 1, N0, N0, N0, N0, 0, 0, 0, 0, 0, 4, 0, 64, 0, 0, 0},
    {"none GQA 8/2 64/32 non-causal", 0, 8, 2, 64, 32, 2, {37, 16}, {41, 80}, 0,
     N0, N0, N0, N0, 0, 0, 0, 0, 0, 4, 0, 64, 0, 0, 0},
    {"none GQA 8/1 576/512 causal suffix q16 of k80", 0, 8, 1, 576, 512, 1, {16}, {80}, 1,
     N0, N0, N0, N0, 0, 0, 0, 0, 0, 4, 0, 64, 0, 0, 0},
    {"none fp16 64/32 bn16 max_seqlen_q 8 (too small)", 1, 4, 2, 64, 32, 2, {37, 50}, {37, 90}, 1,
     N0, N0, N0, N0, 0, 0, 0, 0, 0, 4, 0, 64, 16, 8, 0},
    {"none causal q 20 of k 10 (rows without keys)", 0, 2, 1, 64, 32, 1, {20}, {10}, 1,
     N0, N0, N0, N0, 0, 0, 0, 0, 0, 4, 0, 64, 0, 0, 0},
    {"fp8 all ops GQA 4/2 192/128", 0, 4, 2, 192, 128, 2, {37, 16}, {41, 80}, 1,
     F8, F8, F8, F8, 0, 0, 0, 0, 0, 4, 0, 64, 0, 0, 0},
    {"fp8 all ops amax 6/3/0.5/2", 0, 4, 2, 192, 128, 2, {37, 16}, {41, 80}, 1,
     F8, F8, F8, F8, 6, 3, 0.5f, 2, 0, 4, 0, 64, 0, 0, 0},
    {"nvfp4 all ops 192/128", 0, 4, 2, 192, 128, 2, {37, 16}, {41, 80}, 1,
     F4, F4, F4, F4, 0, 0, 0, 0, 0, 4, 0, 64, 0, 0, 0},
    {"nvfp4 all ops 576/512 non-causal amax 8/3/1/2", 0, 4, 1, 576, 512, 2, {9, 17}, {40, 33}, 0,
     F4, F4, F4, F4, 8, 3, 1, 2, 0, 4, 0, 64, 0, 0, 0},
    {"p nvfp4 bn16", 0, 4, 2, 64, 32, 2, {37, 16}, {41, 150}, 1, N0, N0, F4, N0, 0, 0, 0, 0,
     0, 4, 0, 64, 16, 0, 0},
    {"p nvfp4 bn32", 0, 4, 2, 64, 32, 2, {37, 16}, {41, 150}, 1, N0, N0, F4, N0, 0, 0, 0, 0,
     0, 4, 0, 64, 32, 0, 0},
    {"p nvfp4 bn64", 0, 4, 2, 64, 32, 2, {37, 16}, {41, 150}, 1, N0, N0, F4, N0, 0, 0, 0, 0,
     0, 4, 0, 64, 64, 0, 0},
    {"p nvfp4 bn128", 0, 4, 2, 64, 32, 2, {37, 16}, {41, 150}, 1, N0, N0, F4, N0, 0, 0, 0, 0,
     0, 4, 0, 64, 128, 0, 0},
    {"2:4 recent 16 192/128", 0, 4, 2, 192, 128, 2, {37, 1}, {41, 30}, 1, N0, N0, N0, N0, 0, 0,
     0, 0, 2, 4, 0, 16, 0, 0, 0},
    {"4:8 sink 4 recent 8 non-causal", 0, 4, 2, 64, 32, 2, {37, 16}, {41, 80}, 0, N0, N0, N0, N0,
     0, 0, 0, 0, 4, 8, 4, 8, 0, 0, 0},
    {"nvfp4 all + 2:4 recent 16", 0, 4, 2, 192, 128, 2, {37, 16}, {41, 80}, 1, F4, F4, F4, F4,
     0, 0, 0, 0, 2, 4, 0, 16, 0, 0, 0},
    {"fp16 q nvfp4 k fp8 p fp8 v nvfp4 amax", 1, 4, 2, 64, 32, 2, {37, 16}, {41, 80}, 1,
     F4, F8, F8, F4, 4, 2, 0.5f, 3, 0, 4, 0, 64, 32, 0, 0},
    {"fp16 128/64 q fp8 k nvfp4 p nvfp4 bn32 v fp8 amax", 1, 4, 2, 128, 64, 2, {37, 16}, {41, 80},
     1, F8, F4, F4, F8, 3, 2, 1, 2, 0, 4, 0, 64, 32, 0, 0},
};

ParameterizedTestParameters(fakequant_prefill_gpu, sweep) {
    return cr_make_param_array(mlt_pf_case, sweep, sizeof sweep / sizeof sweep[0]);
}

/* The passes: the default runtime, $MLAJIT_FAKEQUANT_PREFILL = "portable" (the fp32 kernel), then
 * the tensor-core kernel's other CTA shapes (4 or 8 warps of 16 rows, 4 warps of 32 rows; the
 * one that is the default is skipped). */
enum { N_PASS = 5 };
static const char *const pass_label[N_PASS] = {"default", "fp32", "mma4", "mma8", "mma32"};
static const char *const pass_env[N_PASS] = {NULL, "portable", "mma4", "mma8", "mma32"};
static const int pass_warps[N_PASS] = {0, 0, 4, 8, 4}, pass_rows[N_PASS] = {0, 0, 16, 16, 32};

/* The default runtime (pass 0, created first in every test) runs the wgmma kernel where it
 * applies (the device is sm_90a). */
static int default_sm90;

/* Pass p repeats what the default runtime runs (the default CTA of the mma.sync kernel, off
 * sm_90a), or MLT_PF_PASSES leaves it out. */
static int pass_skipped(int p) {
    const char *want = getenv("MLT_PF_PASSES");
    if (want && want[0]) {
        char list[128];
        snprintf(list, sizeof list, ",%s,", want);
        char item[32];
        snprintf(item, sizeof item, ",%s,", pass_label[p]);
        if (!strstr(list, item)) return 1;
    }
    return !default_sm90 && pass_warps[p] == MLA__FQ_PREFILL_MMA_WARPS &&
           pass_rows[p] == MLA__FQ_PREFILL_MMA_ROWS;
}

/* Runs on(pass) for every pass that pass_skipped does not leave out. */
static void each_pass(void (*on)(int pass)) {
    for (int pass = 0; pass < N_PASS; pass++)
        if (!pass_skipped(pass)) on(pass);
}

/* A GPU runtime created with $MLAJIT_FAKEQUANT_PREFILL as pass_env[pass] (unset for NULL), which
 * the runtime reads at creation only; the variable is restored. Skips without a GPU. */
static mla_runtime *gpu_or_skip(int pass) {
    int portable = pass == 1;
    mla_runtime *rt = NULL;
    int ok = mlt_gpu_runtime_env("MLAJIT_FAKEQUANT_PREFILL", pass_env[pass], &rt);
    cr_assert(ok >= 0, "set or restore MLAJIT_FAKEQUANT_PREFILL");
    if (!ok) cr_skip_test("no GPU");
    cr_assert(rt->fakequant_prefill_portable == portable &&
              rt->fakequant_prefill_warps == pass_warps[pass] &&
              rt->fakequant_prefill_rows == pass_rows[pass], "MLAJIT_FAKEQUANT_PREFILL=%s at "
              "creation: portable %d, warps %d, rows %d", pass_env[pass] ? pass_env[pass] : "(unset)",
              rt->fakequant_prefill_portable, rt->fakequant_prefill_warps,
              rt->fakequant_prefill_rows);
    if (pass == 0) default_sm90 = !strcmp(rt->arch, "sm_90a");
    return rt;
}

/* The shapes the tensor-core kernel takes (docs/FAKEQUANT.md): head dims (64 | 128 | 192, 32 |
 * 64 | 128), block_n 16, 32 or 64 when P is quantized (the tests' tensors are aligned). */
static int expect_mma(const mlt_pf_case *c) {
    int bn = c->block_n ? c->block_n : 64;
    return (c->dqk == 64 || c->dqk == 128 || c->dqk == 192) &&
           (c->dv == 32 || c->dv == 64 || c->dv == 128) &&
           (c->p == MLA_QDQ_NONE || bn == 16 || bn == 32 || bn == 64);
}

/* The kernel a case runs on in pass p: 2 the wgmma one (the default runtime on sm_90a, v_head_dim
 * 64 or 128), 1 the mma.sync one, 0 the fp32 one. */
static int kernel_of(const mlt_pf_case *c, int pass) {
    if (pass == 1 || !expect_mma(c)) return 0;
    return pass == 0 && default_sm90 && (c->dv == 64 || c->dv == 128) ? 2 : 1;
}

/* The kernels rt ran: the wgmma one (sm90), the mma.sync one (mma) and the fp32 one (fp32) each
 * when any case used expects it; in pass 1 the fp32 one only. */
static void expect_kernels(const mla_runtime *rt, int pass, int sm90, int mma, int fp32,
                           const char *name) {
    int nm = mlt_loaded_of_kind(rt, "fakequant_prefill_mma"), nf = mlt_loaded_of_kind(rt, "fakequant_prefill");
    int ns = mlt_loaded_of_kind(rt, "fakequant_prefill_sm90");
    if (pass == 1) sm90 = mma = 0, fp32 = 1;
    cr_assert((ns > 0) == sm90 && (nm > 0) == mma && (nf > 0) == fp32, "%s [%s]: expected %s "
              "wgmma, %s mma.sync and %s fp32 kernels, the runtime loaded %d, %d and %d", name,
              pass_label[pass], sm90 ? "some" : "no", mma ? "some" : "no", fp32 ? "some" : "no",
              ns, nm, nf);
}

/* expect_kernels for a test whose cases all run on the kernel of case c. */
static void expect_kernel_of(const mla_runtime *rt, int pass, const mlt_pf_case *c,
                             const char *name) {
    int k = kernel_of(c, pass);
    expect_kernels(rt, pass, k == 2, k == 1, k == 0, name);
}

/* c with " [mma]" or " [fp32]" appended to its name. */
static mlt_pf_case labelled(const mlt_pf_case *c, int pass) {
    mlt_pf_case l = *c;
    char name[sizeof l.name];
    snprintf(name, sizeof name, "%s", c->name);
    snprintf(l.name, sizeof l.name, "%.80s [%s]", name, pass_label[pass]);
    return l;
}

static size_t n_out(const mlt_pf_case *c, const mlt_pf_run *r) {
    return (size_t)r->total_q * c->heads * c->dv;
}

/* Device result vs a reference (dense: the plain one): out within atol + rtol |ref|, lse within
 * 1e-3 and -inf exactly where the reference is; rows (token t, head h) with skip[t * heads + h]
 * are left out (skip may be NULL). */
static void expect_ref_rows(const mlt_pf_case *c, const mlt_pf_run *r, int dense, double atol,
                            double rtol, uint64_t seed, const unsigned char *skip) {
    size_t n = n_out(c, r), nl = (size_t)r->total_q * c->heads;
    double *out = malloc((n + 1) * sizeof *out), *lse = malloc((nl + 1) * sizeof *lse);
    cr_assert(out && lse && mlt_pf_oracle(c, r, dense, out, lse) == 0, "%s seed %llu: reference",
              c->name, (unsigned long long)seed);
    int bad = 0;
    for (size_t j = 0; j < n && bad < 5; j++)
        if (!(skip && skip[j / c->dv]) && !(fabs(r->out[j] - out[j]) <= atol + rtol * fabs(out[j]))) {
            bad++;
            cr_expect(0, "%s seed %llu: token %zu head %zu col %zu: got %.6g, %s %.6g", c->name,
                      (unsigned long long)seed, j / ((size_t)c->heads * c->dv),
                      j / c->dv % c->heads, j % c->dv, r->out[j], out[j], dense ? "dense" : "oracle");
        }
    for (size_t j = 0; j < nl && bad < 10; j++) {
        if (skip && skip[j % r->total_q * c->heads + j / r->total_q]) continue;
        int ok = isinf(lse[j]) ? r->lse[j] == lse[j] : fabs(r->lse[j] - lse[j]) <= 1e-3 + 1e-5 * fabs(lse[j]);
        if (!ok) bad++;
        cr_expect(ok, "%s seed %llu: lse head %zu token %zu: got %.7g, reference %.7g", c->name,
                  (unsigned long long)seed, j / r->total_q, j % r->total_q, r->lse[j], lse[j]);
    }
    free(out), free(lse);
}

static void expect_ref(const mlt_pf_case *c, const mlt_pf_run *r, int dense, double atol,
                       double rtol, uint64_t seed) {
    expect_ref_rows(c, r, dense, atol, rtol, seed, NULL);
}

static void run_case(mla_runtime *rt, const mlt_pf_case *c, uint64_t seed, double amp,
                     mlt_pf_run *r) {
    char msg[512];
    cr_assert(mlt_pf_make(c, seed, amp, r, msg, sizeof msg) == 0, "%s: %s", c->name, msg);
    cr_assert(mlt_pf_device(rt, c, r, msg, sizeof msg) == 0, "%s seed %llu: %s", c->name,
              (unsigned long long)seed, msg);
}

/* The rows (skip[t * heads + h], token t, head h) of an N:M case with a group whose selection is
 * a near-tie that fp32 and float64 may legitimately break differently (mlt_pf_nm_unsure, the
 * guard of nm_exemptions_exact): such groups must stay under 1 %. NULL without N:M. */
static unsigned char *nm_unsure_rows(const mlt_pf_case *c, const mlt_pf_run *r, uint64_t seed) {
    if (!c->sparsity_n) return NULL;
    int kstride = 1;
    for (int b = 0; b < c->nseq; b++) kstride = c->k_lens[b] > kstride ? c->k_lens[b] : kstride;
    size_t rows = (size_t)r->total_q * c->heads;
    unsigned char *unsure = calloc(rows * kstride + 1, 1), *skip = calloc(rows + 1, 1);
    long groups, ambiguous;
    cr_assert(unsure && skip && mlt_pf_nm_unsure(c, r, kstride, unsure, &groups, &ambiguous) == 0,
              "%s: N:M near-ties", c->name);
    cr_log_info("%s seed %llu: %ld of %ld N:M groups near-tied within the fp32 bound", c->name,
                (unsigned long long)seed, ambiguous, groups);
    cr_assert(groups > 0 && ambiguous * 100 < groups, "%s seed %llu: %ld of %ld N:M groups "
              "near-tied within the fp32 bound (at most 1 %% expected)", c->name,
              (unsigned long long)seed, ambiguous, groups);
    for (size_t j = 0; j < rows * kstride; j++) skip[j / kstride] |= unsure[j];
    free(unsure);
    return skip;
}

ParameterizedTest(mlt_pf_case *c0, fakequant_prefill_gpu, sweep) {
    uint64_t seed = mlt_seed();
    for (int pass = 0; pass < N_PASS; pass++) {
        if (pass_skipped(pass)) continue;
        mla_runtime *rt = gpu_or_skip(pass);
        mlt_pf_case cl = labelled(c0, pass), *c = &cl;
        mlt_pf_run r;
        run_case(rt, c, seed, 4.0, &r);
        expect_kernel_of(rt, pass, c, c->name);
        int quant = c->q || c->k || c->p || c->v;
        if (!quant && !c->sparsity_n) expect_ref(c, &r, 1, 5e-3, 5e-3, seed);
        unsigned char *skip = nm_unsure_rows(c, &r, seed);
        expect_ref_rows(c, &r, 0, quant ? 2e-2 : 5e-3, 5e-3, seed, skip);
        free(skip);
        mlt_pf_free(&r);
        mla_runtime_destroy(rt);
    }
}

/* With one-hot v, out[i, h, j] is the weight of key j: a key is dropped (weight exactly 0) on
 * the device iff the oracle drops it. Sink 3, recent 5 (d = 4 dense, d = 5 not), a one-row
 * sequence (fully dense), 2:4 and 4:8. Random scores of a group can come within fp32 rounding of
 * each other (mlt_pf_nm_unsure: gap <= 2 (d + 2) 2^-23 qk_scale sum |q k|), and then fp32 and
 * float64 may legitimately keep different keys: those near-tied keys are not compared, nor the
 * values of their rows; such groups must stay under 1 % (expected: almost always none). */
static void nm_exemptions_exact_on(int pass) {
    mla_runtime *rt = gpu_or_skip(pass);
    uint64_t seed = mlt_seed();
    for (int m = 4; m <= 8; m += 4) {
        mlt_pf_case c = {"", 0, 2, 1, 64, 128, 2, {24, 1}, {100, 40}, 1, N0, N0, N0, N0, 0, 0, 0,
                         0, m / 2, m, 3, 5, 32, 0, MLT_PF_ONE_HOT};
        snprintf(c.name, sizeof c.name, "one-hot %d:%d sink 3 recent 5 [%s]", m / 2, m,
                 pass_label[pass]);
        mlt_pf_run r;
        run_case(rt, &c, seed, 1.0, &r);
        size_t n = n_out(&c, &r), nl = (size_t)r.total_q * c.heads, dropped = 0;
        double *out = malloc(n * sizeof *out), *lse = malloc(nl * sizeof *lse);
        double *all = malloc(n * sizeof *all), *lse2 = malloc(nl * sizeof *lse2);
        unsigned char *unsure = calloc(n, 1), *skip = calloc(nl, 1);
        long groups, ambiguous;
        cr_assert(out && lse && all && lse2 && unsure && skip &&
                  mlt_pf_oracle(&c, &r, 0, out, lse) == 0 &&
                  mlt_pf_oracle(&c, &r, 1, all, lse2) == 0 &&
                  mlt_pf_nm_unsure(&c, &r, c.dv, unsure, &groups, &ambiguous) == 0,
                  "%s: references", c.name);
        cr_log_info("%s seed %llu: %ld of %ld N:M groups near-tied within the fp32 bound", c.name,
                    (unsigned long long)seed, ambiguous, groups);
        cr_assert(groups > 0 && ambiguous * 100 < groups, "%s seed %llu: %ld of %ld N:M groups "
                  "near-tied within the fp32 bound (at most 1 %% expected)", c.name,
                  (unsigned long long)seed, ambiguous, groups);
        for (size_t j = 0; j < n; j++) {
            dropped += out[j] == 0 && all[j] > 0;
            skip[j / c.dv] |= unsure[j];
            if (unsure[j]) continue;
            cr_assert((r.out[j] == 0) == (out[j] == 0), "%s seed %llu: token %zu head %zu key "
                      "%zu: device weight %.6g, oracle %.6g", c.name, (unsigned long long)seed,
                      j / (2 * 128), j / 128 % 2, j % 128, r.out[j], out[j]);
        }
        /* token 24 (the one-row sequence) sees all 40 keys */
        for (size_t j = 0; j < 40; j++)
            cr_assert(out[(size_t)24 * 256 + j] > 0, "%s: the one-row sequence dropped key %zu",
                      c.name, j);
        /* the first sequence: row i keeps keys i + 76 - 4 .. i + 76 (d < 5) and 0..2 (sink) */
        for (size_t i = 0; i < 24; i++)
            for (size_t j = 0; j < 100; j++) {
                long d = (long)i + 76 - (long)j;
                if (j < 3 || (d >= 0 && d < 5))
                    cr_assert(out[i * 256 + j] > 0, "%s: oracle dropped exempt key %zu of row %zu",
                              c.name, j, i);
            }
        cr_assert(dropped > n / 8, "%s: the oracle dropped only %zu visible keys", c.name, dropped);
        expect_ref_rows(&c, &r, 0, 5e-3, 5e-3, seed, skip);
        free(out), free(lse), free(all), free(lse2), free(unsure), free(skip), mlt_pf_free(&r);
    }
    const mlt_pf_case shape = {"", 0, 2, 1, 64, 128};
    expect_kernel_of(rt, pass, &shape, "nm_exemptions_exact");
    mla_runtime_destroy(rt);
}

Test(fakequant_prefill_gpu, nm_exemptions_exact) { each_pass(nm_exemptions_exact_on); }

/* Every N:M group fully tied (k rows equal within groups of 8), non-causal, no exemptions: M = 4
 * keeps exactly N, the lowest indices; M = 8 keeps the whole tied group. */
static void nm_ties_on(int pass) {
    mla_runtime *rt = gpu_or_skip(pass);
    uint64_t seed = mlt_seed();
    for (int m = 4; m <= 8; m += 4) {
        mlt_pf_case c = {"", 0, 2, 2, 64, 128, 1, {6}, {96}, 0, N0, N0, N0, N0, 0, 0, 0, 0,
                         m == 4 ? 2 : 3, m, 0, 0, 64, 0, MLT_PF_TIED};
        snprintf(c.name, sizeof c.name, "tied %d:%d [%s]", c.sparsity_n, m, pass_label[pass]);
        mlt_pf_run r;
        /* one-hot v on top of the tied k */
        char msg[256];
        cr_assert(mlt_pf_make(&c, seed, 1.0, &r, msg, sizeof msg) == 0, "%s", msg);
        for (int t = 0; t < 96; t++)
            for (int f = 0; f < 2 * 128; f++) r.v[(size_t)t * 256 + f] = f % 128 == t;
        cr_assert(mlt_pf_device(rt, &c, &r, msg, sizeof msg) == 0, "%s seed %llu: %s", c.name,
                  (unsigned long long)seed, msg);
        for (int row = 0; row < 6 * 2; row++)
            for (int g = 0; g < 96 / m; g++)
                for (int e = 0; e < m; e++) {
                    double w = r.out[(size_t)row * 128 + g * m + e];
                    int kept = m == 8 || e < c.sparsity_n;
                    cr_assert(kept ? w > 0 : w == 0, "%s seed %llu: row %d group %d key %d: weight "
                              "%.6g, expected %s", c.name, (unsigned long long)seed, row, g, e, w,
                              kept ? "kept" : "dropped");
                }
        expect_ref(&c, &r, 0, 5e-3, 5e-3, seed);
        mlt_pf_free(&r);
    }
    const mlt_pf_case shape = {"", 0, 2, 2, 64, 128};
    expect_kernel_of(rt, pass, &shape, "nm_ties");
    mla_runtime_destroy(rt);
}

Test(fakequant_prefill_gpu, nm_ties) { each_pass(nm_ties_on); }

/* Causal prefill of q 48 over k 112 equals the LSE merge of a non-causal chunk over keys
 * [0, 64) and a causal chunk over keys [64, 112). */
static void two_chunk_lse_merge_on(int pass) {
    mla_runtime *rt = gpu_or_skip(pass);
    uint64_t seed = mlt_seed();
    mlt_pf_case full = {"single shot", 0, 4, 2, 192, 128, 1, {48}, {112}, 1, N0, N0, N0, N0,
                        0, 0, 0, 0, 0, 4, 0, 64, 0, 0, 0};
    mlt_pf_case c1 = full, c2 = full;
    snprintf(c1.name, sizeof c1.name, "context chunk"), snprintf(c2.name, sizeof c2.name, "new chunk");
    c1.k_lens[0] = 64, c1.causal = 0, c2.k_lens[0] = 48;
    char msg[256];
    mlt_pf_run rf, r1, r2;
    cr_assert(mlt_pf_make(&full, seed, 4.0, &rf, msg, sizeof msg) == 0, "%s", msg);
    cr_assert(mlt_pf_make(&c1, seed, 4.0, &r1, msg, sizeof msg) == 0, "%s", msg);
    cr_assert(mlt_pf_make(&c2, seed, 4.0, &r2, msg, sizeof msg) == 0, "%s", msg);
    size_t kr = 2 * 192, vr = 2 * 128, nq = (size_t)48 * 4 * 192;
    memcpy(r1.q, rf.q, nq * sizeof *rf.q), memcpy(r2.q, rf.q, nq * sizeof *rf.q);
    memcpy(r1.k, rf.k, 64 * kr * sizeof *rf.k), memcpy(r2.k, rf.k + 64 * kr, 48 * kr * sizeof *rf.k);
    memcpy(r1.v, rf.v, 64 * vr * sizeof *rf.v), memcpy(r2.v, rf.v + 64 * vr, 48 * vr * sizeof *rf.v);
    cr_assert(mlt_pf_device(rt, &full, &rf, msg, sizeof msg) == 0, "full [%s] seed %llu: %s",
              pass_label[pass], (unsigned long long)seed, msg);
    cr_assert(mlt_pf_device(rt, &c1, &r1, msg, sizeof msg) == 0, "chunk 1: %s", msg);
    cr_assert(mlt_pf_device(rt, &c2, &r2, msg, sizeof msg) == 0, "chunk 2: %s", msg);
    for (int h = 0; h < 4; h++)
        for (int i = 0; i < 48; i++) {
            double l1 = r1.lse[h * 48 + i], l2 = r2.lse[h * 48 + i], mx = fmax(l1, l2);
            double w1 = exp(l1 - mx), w2 = exp(l2 - mx), lse = mx + log(w1 + w2);
            cr_expect(fabs(lse - rf.lse[h * 48 + i]) <= 1e-3, "[%s] seed %llu: head %d token %d: "
                      "merged lse %.7g, single shot %.7g", pass_label[pass],
                      (unsigned long long)seed, h, i, lse, rf.lse[h * 48 + i]);
            for (int f = 0; f < 128; f++) {
                size_t o = ((size_t)i * 4 + h) * 128 + f;
                double m = (r1.out[o] * w1 + r2.out[o] * w2) / (w1 + w2);
                cr_assert(fabs(m - rf.out[o]) <= 1e-2, "[%s] seed %llu: head %d token %d col %d: "
                          "merged %.6g, single shot %.6g", pass_label[pass],
                          (unsigned long long)seed, h, i, f, m, rf.out[o]);
            }
        }
    mlt_pf_case fl = labelled(&full, pass);
    expect_ref(&fl, &rf, 1, 5e-3, 5e-3, seed);
    expect_kernel_of(rt, pass, &full, "two_chunk_lse_merge");
    mlt_pf_free(&rf), mlt_pf_free(&r1), mlt_pf_free(&r2);
    mla_runtime_destroy(rt);
}

Test(fakequant_prefill_gpu, two_chunk_lse_merge) { each_pass(two_chunk_lse_merge_on); }

static double max_diff(const double *a, const double *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs(a[i] - b[i]));
    return d;
}

/* Quantization is not a no-op: NVFP4 all-ops differs from dense, stays close to it (cos > 0.98 on
 * q of unit variance), and changes with the amax; P-NVFP4 with block_n 16 differs from the oracle
 * of block_n 128 (the schedule is part of the numerics). */
static void quantization_changes_results_on(int pass) {
    mla_runtime *rt = gpu_or_skip(pass);
    uint64_t seed = mlt_seed();
    mlt_pf_case c = {"nvfp4 all", 0, 4, 2, 192, 128, 2, {37, 16}, {41, 80}, 1, F4, F4, F4, F4,
                     0, 0, 0, 0, 0, 4, 0, 64, 0, 0, 0};
    snprintf(c.name, sizeof c.name, "nvfp4 all [%s]", pass_label[pass]);
    mlt_pf_case ca = c;
    snprintf(ca.name, sizeof ca.name, "nvfp4 all amax 5/5/1/5 [%s]", pass_label[pass]);
    ca.q_amax = ca.k_amax = ca.v_amax = 5;
    mlt_pf_run r, ra;
    run_case(rt, &c, seed, sqrt(3.0), &r);
    run_case(rt, &ca, seed, sqrt(3.0), &ra);
    size_t n = n_out(&c, &r), nl = (size_t)r.total_q * 4;
    double *dense = malloc(n * sizeof *dense), *lse = malloc(nl * sizeof *lse);
    cr_assert(dense && lse && mlt_pf_oracle(&c, &r, 1, dense, lse) == 0, "dense reference");
    double dot = 0, na = 0, nb = 0;
    for (size_t j = 0; j < n; j++) dot += r.out[j] * dense[j], na += r.out[j] * r.out[j], nb += dense[j] * dense[j];
    cr_expect(dot / sqrt(na * nb) > 0.98, "%s seed %llu: cos %.5f vs dense <= 0.98", c.name,
              (unsigned long long)seed, dot / sqrt(na * nb));
    cr_expect(max_diff(r.out, dense, n) > 1e-2, "%s seed %llu: no different from dense", c.name,
              (unsigned long long)seed);
    cr_expect(max_diff(r.out, ra.out, n) > 1e-3, "%s seed %llu: the amax changed nothing", ca.name,
              (unsigned long long)seed);
    expect_ref(&ca, &ra, 0, 2e-2, 5e-3, seed);
    mlt_pf_case p16 = {"p nvfp4 bn16", 0, 4, 2, 64, 32, 1, {64}, {200}, 1, N0, N0, F4, N0, 0, 0,
                       0, 0, 0, 4, 0, 64, 16, 0, 0};
    snprintf(p16.name, sizeof p16.name, "p nvfp4 bn16 [%s]", pass_label[pass]);
    mlt_pf_run rp;
    run_case(rt, &p16, seed, 4.0, &rp);
    mlt_pf_case p128 = p16;
    p128.block_n = 128;
    size_t np = n_out(&p16, &rp);
    double *o128 = malloc(np * sizeof *o128), *l128 = malloc((size_t)64 * 4 * sizeof *l128);
    cr_assert(o128 && l128 && mlt_pf_oracle(&p128, &rp, 0, o128, l128) == 0, "oracle bn128");
    expect_ref(&p16, &rp, 0, 2e-2, 5e-3, seed);
    cr_expect(max_diff(rp.out, o128, np) > 1e-3, "p nvfp4 [%s] seed %llu: block_n 16 on the "
              "device equals the block_n 128 oracle (max diff %.3g)", pass_label[pass],
              (unsigned long long)seed, max_diff(rp.out, o128, np));
    const int kc = kernel_of(&c, pass), kp = kernel_of(&p16, pass);
    expect_kernels(rt, pass, kc == 2 || kp == 2, kc == 1 || kp == 1, 0,
                   "quantization_changes_results");
    free(dense), free(lse), free(o128), free(l128);
    mlt_pf_free(&r), mlt_pf_free(&ra), mlt_pf_free(&rp);
    mla_runtime_destroy(rt);
}

Test(fakequant_prefill_gpu, quantization_changes_results) { each_pass(quantization_changes_results_on); }
