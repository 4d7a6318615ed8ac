/* Compile tests of the FlashMLA-compatible sparse kernels: the sparse decode and both sparse
 * prefill specializations (d_qk 576, 512) compile with NVRTC for sm_90a and sm_100a through the
 * library (mla__precompile, no GPU needed), the sm_90a wgmma kinds for sm_90a, and report the
 * launch needs the runtime uses; spec values outside the kinds' ranges are refused by the
 * builders; the runtime's kind choice per target and $MLAJIT_FLASHMLA_DECODE value. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <string.h>

#include "runtime/flashmla_sparse.h"
#include "runtime/internal.h"
#include "util/gpu.h"

typedef struct compile_case {
    char arch[16];
    char kernel[32];
    int d_qk;          /* prefill: 576 or 512; decode: 0 (no parameter) */
    int smem;          /* expected dynamic shared memory */
    int threads;       /* expected block size */
    int cluster;       /* expected cluster size (0: 1) */
} compile_case;

static compile_case cases[] = {
#define T256 MLA__FLASHMLA_SPARSE_THREADS
#define T384 MLA__FLASHMLA_SPARSE_WS_THREADS
    {"sm_90a", "flashmla_sparse_decode", 0, MLA__FLASHMLA_SPARSE_DECODE_SMEM, T256},
    {"sm_90a", "flashmla_sparse_prefill", 576, MLA__FLASHMLA_SPARSE_PREFILL_SMEM_576, T256},
    {"sm_90a", "flashmla_sparse_prefill", 512, MLA__FLASHMLA_SPARSE_PREFILL_SMEM_512, T256},
    {"sm_100a", "flashmla_sparse_decode", 0, MLA__FLASHMLA_SPARSE_DECODE_SMEM, T256},
    {"sm_100a", "flashmla_sparse_prefill", 576, MLA__FLASHMLA_SPARSE_PREFILL_SMEM_576, T256},
    {"sm_100a", "flashmla_sparse_prefill", 512, MLA__FLASHMLA_SPARSE_PREFILL_SMEM_512, T256},
    {"sm_90a", "flashmla_sparse_decode_sm90", 0, MLA__FLASHMLA_SPARSE_SM90_SMEM, T256},
    {"sm_90a", "flashmla_sparse_decode_sm90x2", 0, MLA__FLASHMLA_SPARSE_SM90_SMEM, T384, 2},
    {"sm_90a", "flashmla_sparse_decode_sm90x2c", 0, MLA__FLASHMLA_SPARSE_SM90_SMEM, T384, 2},
    {"sm_90a", "flashmla_sparse_decode_sm90ws", 0, MLA__FLASHMLA_SPARSE_SM90_SMEM, T384},
    {"sm_90a", "flashmla_sparse_prefill_sm90", 0, MLA__FLASHMLA_SPARSE_SM90_SMEM, T384},
    {"sm_90a", "flashmla_sparse_prefill_sm90pp", 0, MLA__FLASHMLA_SPARSE_SM90_SMEM, T256},
};

ParameterizedTestParameters(flashmla_sparse_compile, every_spec) {
    return cr_make_param_array(compile_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(compile_case *c, flashmla_sparse_compile, every_spec) {
    mla__spec spec;
    mla__spec_init(&spec, c->kernel);
    if (c->d_qk) cr_assert(mla__spec_add(&spec, "d_qk", c->d_qk) == MLA_OK, "%s: spec_add", c->kernel);
    char desc[256];
    mla__spec_describe(&spec, desc, sizeof desc);
    cr_assert(mla__kernel_kind_find(c->kernel) != NULL, "%s: kernel kind not in the table", desc);
    mla_runtime *rt = NULL;
    cr_assert(mlt_cpu_runtime(c->arch, &rt) == MLA_OK, "%s %s: runtime: %s", desc, c->arch,
              mla_last_error());
    mla__origin origin;
    char hash[33];
    mla_status s = mla__precompile(rt, &spec, c->arch, &origin, hash);
    cr_assert(s == MLA_OK, "%s %s: precompile: %s: %s", desc, c->arch, mla_status_string(s),
              mla_last_error());
    char *key = NULL, name[256];
    mla__launch_info launch;
    cr_assert(mla__spec_key(rt, &spec, c->arch, &key, hash, name, sizeof name, &launch) == MLA_OK,
              "%s %s: spec key: %s", desc, c->arch, mla_last_error());
    free(key);
    const int cluster = c->cluster ? c->cluster : 1;
    cr_expect(launch.threads == c->threads && launch.dynamic_smem == c->smem &&
                  launch.cluster == cluster,
              "%s %s: launch (%d threads, %d smem, cluster %d), expected (%d, %d, %d)", desc,
              c->arch, launch.threads, launch.dynamic_smem, launch.cluster, c->threads, c->smem,
              cluster);
    cr_expect(strstr(name, "mla::flashmla::sparse::") == name, "%s %s: name expression %s", desc,
              c->arch, name);
    cr_expect(c->smem <= 232448, "%s: %d bytes of shared memory exceed the 227 KiB of sm_90a",
              desc, c->smem);
    mla_runtime_destroy(rt);
}

/* Specs the builders must refuse: kernel, parameter (name, value; n 0: none), text of the error. */
typedef struct bad_spec {
    char kernel[32];
    int n;
    char name[16];
    int value;
    char want[24];
} bad_spec;

static bad_spec bad[] = {
    {"flashmla_sparse_prefill", 1, "d_qk", 128, "d_qk"},
    {"flashmla_sparse_prefill", 1, "d_qk", 575, "d_qk"},
    {"flashmla_sparse_prefill", 0, "", 0, "d_qk"},
    {"flashmla_sparse_prefill", 1, "head_dim", 576, "d_qk"},
    {"flashmla_sparse_decode", 1, "d_qk", 576, "no parameters"},
    {"flashmla_sparse_decode_sm90", 1, "d_qk", 576, "no parameters"},
    {"flashmla_sparse_prefill_sm90", 1, "d_qk", 576, "no parameters"},
};

ParameterizedTestParameters(flashmla_sparse_compile, bad_specs) {
    return cr_make_param_array(bad_spec, bad, sizeof bad / sizeof bad[0]);
}

ParameterizedTest(bad_spec *b, flashmla_sparse_compile, bad_specs) {
    mla__spec spec;
    mla__spec_init(&spec, b->kernel);
    if (b->n) mla__spec_add(&spec, b->name, b->value);
    const mla__kernel_kind *kind = mla__kernel_kind_find(b->kernel);
    cr_assert(kind != NULL, "%s: kernel kind not in the table", b->kernel);
    char name[256];
    mla__launch_info launch;
    mla_status s = kind->build(&spec, name, sizeof name, &launch);
    cr_expect(s == MLA_ERR_INVALID_ARGUMENT && strstr(mla_last_error(), b->want),
              "%s (%s=%d): expected MLA_ERR_INVALID_ARGUMENT naming \"%s\", got %s: %s",
              b->kernel, b->name, b->value, b->want, mla_status_string(s), mla_last_error());
}

/* The table builder of the kinds without parameters refuses a kind it does not hold (a kind
 * table entry pointing at it by mistake) with an internal error naming the kind. */
Test(flashmla_sparse_compile, fixed_build_unknown_kind) {
    mla__spec spec;
    mla__spec_init(&spec, "flashmla_sparse_prefill");
    char name[256];
    mla__launch_info launch;
    mla_status s = mla__flashmla_sparse_fixed_build(&spec, name, sizeof name, &launch);
    cr_expect(s == MLA_ERR_INTERNAL && strstr(mla_last_error(), "flashmla_sparse_prefill"),
              "expected MLA_ERR_INTERNAL naming the kind, got %s: %s", mla_status_string(s),
              mla_last_error());
}

/* Which kind a sparse call runs: the wgmma kinds on sm_90a only (the prefill for d_qk 576 only),
 * the portable ones when forced and on every other target. */
Test(flashmla_sparse_compile, kind_choice) {
    struct { const char *arch; int prefill, d_qk, h_q; const char *force, *want; } k[] = {
        {"sm_90a", 0, 0, 64, NULL, "flashmla_sparse_decode_sm90"},
        {"sm_90a", 0, 0, 16, NULL, "flashmla_sparse_decode_sm90"},
        {"sm_90a", 0, 0, 128, NULL, "flashmla_sparse_decode_sm90x2c"},
        {"sm_90a", 0, 0, 65, NULL, "flashmla_sparse_decode_sm90x2c"},
        {"sm_90a", 0, 0, 128, "x2", "flashmla_sparse_decode_sm90x2"},
        {"sm_90a", 0, 0, 64, "x2", "flashmla_sparse_decode_sm90"},
        {"sm_90a", 1, 576, 128, "x2", "flashmla_sparse_prefill_sm90"},
        {"sm_100a", 0, 0, 128, "x2", "flashmla_sparse_decode"},
        {"sm_90a", 0, 0, 128, "x2c", "flashmla_sparse_decode_sm90x2c"},
        {"sm_90a", 0, 0, 16, "x2c", "flashmla_sparse_decode_sm90"},
        {"sm_90a", 0, 0, 128, "portable", "flashmla_sparse_decode"},
        {"sm_100a", 0, 0, 128, NULL, "flashmla_sparse_decode"},
        {"sm_100a", 0, 0, 16, NULL, "flashmla_sparse_decode"},
        {"sm_90a", 1, 576, 128, NULL, "flashmla_sparse_prefill_sm90"},
        {"sm_90a", 1, 512, 128, NULL, "flashmla_sparse_prefill"},
        {"sm_90a", 1, 576, 128, "portable", "flashmla_sparse_prefill"},
        {"sm_100a", 1, 576, 128, NULL, "flashmla_sparse_prefill"},
        {"sm_90a", 0, 0, 128, "pingpong", "flashmla_sparse_decode_sm90"},
        {"sm_90a", 1, 576, 16, "pingpong", "flashmla_sparse_prefill_sm90pp"},
        {"sm_90a", 0, 0, 128, "ws", "flashmla_sparse_decode_sm90ws"},
        {"sm_90a", 0, 0, 16, "ws", "flashmla_sparse_decode_sm90ws"},
        {"sm_90a", 1, 576, 128, "ws", "flashmla_sparse_prefill_sm90"},
        {"sm_90a", 1, 512, 128, "pingpong", "flashmla_sparse_prefill"},
        {"sm_100a", 0, 0, 128, "pingpong", "flashmla_sparse_decode"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        const char *got = mla__flashmla_sparse_kind(k[i].arch, k[i].prefill, k[i].d_qk, k[i].h_q,
                                                    k[i].force);
        cr_expect(!strcmp(got, k[i].want),
                  "%s prefill %d d_qk %d h_q %d force %s: got %s, expected %s", k[i].arch,
                  k[i].prefill, k[i].d_qk, k[i].h_q, k[i].force ? k[i].force : "(none)", got,
                  k[i].want);
    }
}
