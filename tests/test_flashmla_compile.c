/* Compile tests of the FlashMLA-compatible kernels: every specialization (metadata; decode for
 * kv_dtype x page_class x causal; combine for both out dtypes) compiles with NVRTC for sm_90a and
 * sm_100a through the library (mla__precompile, no GPU needed) and reports the launch needs the
 * runtime will use; the wgmma decode (16-bit KV x page_class x causal) compiles for sm_90a, and
 * the dispatch picks it on sm_90a only, for 16-bit KV only, unless the portable path is forced;
 * its CTA pair for the cp.async path (flashmla_decode_sm90x2, 16-bit KV) compiles for sm_90a with
 * clusters of 2.
 * Spec values outside the kinds' ranges are refused by the builders. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <string.h>

#include "runtime/flashmla_kinds.h"
#include "runtime/internal.h"
#include "util/gpu.h"
#include "util/spec.h"

typedef struct compile_case {
    char arch[16];
    char kernel[32];
    int n;            /* parameters used */
    int v[3];         /* kv_dtype, page_class, causal | out_dtype */
} compile_case;

#define N_CASES (2 * (1 + 12 + 2) + 8 + 2)
static compile_case cases[N_CASES];

static void fill_cases(void) {
    static const char *const archs[2] = {"sm_90a", "sm_100a"};
    int n = 0;
    for (int a = 0; a < 2; a++) {
        compile_case *c = &cases[n++];
        snprintf(c->arch, sizeof c->arch, "%s", archs[a]);
        snprintf(c->kernel, sizeof c->kernel, "flashmla_metadata");
        for (int kv = 0; kv < 3; kv++)
            for (int pc = 0; pc < 2; pc++)
                for (int causal = 0; causal < 2; causal++) {
                    c = &cases[n++];
                    snprintf(c->arch, sizeof c->arch, "%s", archs[a]);
                    snprintf(c->kernel, sizeof c->kernel, "flashmla_decode");
                    c->n = 3, c->v[0] = kv, c->v[1] = pc, c->v[2] = causal;
                }
        for (int out = 0; out < 2; out++) {
            c = &cases[n++];
            snprintf(c->arch, sizeof c->arch, "%s", archs[a]);
            snprintf(c->kernel, sizeof c->kernel, "flashmla_combine");
            c->n = 1, c->v[0] = out;
        }
    }
    for (int kv = 0; kv < 2; kv++)
        for (int pc = 0; pc < 2; pc++)
            for (int causal = 0; causal < 2; causal++) {
                compile_case *c = &cases[n++];
                snprintf(c->arch, sizeof c->arch, "sm_90a");
                snprintf(c->kernel, sizeof c->kernel, "flashmla_decode_sm90");
                c->n = 3, c->v[0] = kv, c->v[1] = pc, c->v[2] = causal;
            }
    for (int kv = 0; kv < 2; kv++) {
        compile_case *c = &cases[n++];
        snprintf(c->arch, sizeof c->arch, "sm_90a");
        snprintf(c->kernel, sizeof c->kernel, "flashmla_decode_sm90x2");
        c->n = 1, c->v[0] = kv;
    }
}

ParameterizedTestParameters(flashmla_compile, every_spec) {
    fill_cases();
    return cr_make_param_array(compile_case, cases, N_CASES);
}

ParameterizedTest(compile_case *c, flashmla_compile, every_spec) {
    mla__spec spec;
    mlt_kind_spec(c->kernel, c->n, c->v, &spec);
    char desc[256];
    mla__spec_describe(&spec, desc, sizeof desc);
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
    int sm90 = !strcmp(c->kernel, "flashmla_decode_sm90");
    int x2 = !strcmp(c->kernel, "flashmla_decode_sm90x2");
    int want_threads = !strcmp(c->kernel, "flashmla_decode") || sm90 || x2
                           ? MLA__FLASHMLA_DECODE_THREADS
                       : !strcmp(c->kernel, "flashmla_combine") ? MLA__FLASHMLA_COMBINE_THREADS
                                                                : MLA__FLASHMLA_METADATA_THREADS;
    int want_smem = !strcmp(c->kernel, "flashmla_decode") ? MLA__FLASHMLA_DECODE_SMEM
                    : sm90                                ? MLA__FLASHMLA_DECODE_SM90_SMEM
                    : x2                                  ? MLA__FLASHMLA_DECODE_X2_SMEM
                                                          : 0;
    int want_cluster = x2 ? 2 : 1;
    cr_expect(launch.threads == want_threads && launch.dynamic_smem == want_smem &&
                  launch.cluster == want_cluster,
              "%s %s: launch (%d threads, %d smem, cluster %d), expected (%d, %d, %d)", desc,
              c->arch, launch.threads, launch.dynamic_smem, launch.cluster, want_threads,
              want_smem, want_cluster);
    cr_expect(strstr(name, "mla::flashmla::") == name, "%s %s: name expression %s", desc, c->arch,
              name);
    mla_runtime_destroy(rt);
}

/* Specs the builders must refuse: name, params (name=value pairs), the text the error names. */
typedef struct bad_spec {
    char kernel[32];
    int n;
    char names[3][16];
    int v[3];
    char want[24];
} bad_spec;

static bad_spec bad[] = {
    {"flashmla_decode", 3, {"kv_dtype", "page_class", "causal"}, {3, 0, 0}, "kv_dtype"},
    {"flashmla_decode", 3, {"kv_dtype", "page_class", "causal"}, {-1, 0, 0}, "kv_dtype"},
    {"flashmla_decode", 3, {"kv_dtype", "page_class", "causal"}, {0, 2, 0}, "page_class"},
    {"flashmla_decode", 3, {"kv_dtype", "page_class", "causal"}, {0, 0, 2}, "causal"},
    {"flashmla_decode", 2, {"kv_dtype", "page_class", ""}, {0, 0, 0}, "3 parameters"},
    {"flashmla_decode", 3, {"kv_dtype", "causal", "page_class"}, {0, 0, 0}, "page_class"},
    {"flashmla_decode_sm90", 3, {"kv_dtype", "page_class", "causal"}, {2, 0, 0}, "kv_dtype"},
    {"flashmla_decode_sm90", 3, {"kv_dtype", "page_class", "causal"}, {0, 2, 0}, "page_class"},
    {"flashmla_decode_sm90", 3, {"kv_dtype", "page_class", "causal"}, {0, 0, 2}, "causal"},
    {"flashmla_decode_sm90x2", 1, {"kv_dtype", "", ""}, {2, 0, 0}, "kv_dtype"},
    {"flashmla_decode_sm90x2", 3, {"kv_dtype", "page_class", "causal"}, {0, 0, 0}, "1 parameter"},
    {"flashmla_combine", 1, {"out_dtype", "", ""}, {2, 0, 0}, "out_dtype"},
    {"flashmla_combine", 0, {"", "", ""}, {0, 0, 0}, "out_dtype"},
    {"flashmla_metadata", 1, {"x", "", ""}, {1, 0, 0}, "no parameters"},
};

ParameterizedTestParameters(flashmla_compile, bad_specs) {
    return cr_make_param_array(bad_spec, bad, sizeof bad / sizeof bad[0]);
}

ParameterizedTest(bad_spec *b, flashmla_compile, bad_specs) {
    mla__spec spec;
    mla__spec_init(&spec, b->kernel);
    for (int i = 0; i < b->n; i++) mla__spec_add(&spec, b->names[i], b->v[i]);
    const mla__kernel_kind *kind = mla__kernel_kind_find(b->kernel);
    cr_assert(kind != NULL, "%s: kernel kind not in the table", b->kernel);
    char name[256];
    mla__launch_info launch;
    mla_status s = kind->build(&spec, name, sizeof name, &launch);
    cr_expect(s == MLA_ERR_INVALID_ARGUMENT && strstr(mla_last_error(), b->want),
              "%s (%s=%d ...): expected MLA_ERR_INVALID_ARGUMENT naming \"%s\", got %s: %s",
              b->kernel, b->names[0], b->v[0], b->want, mla_status_string(s), mla_last_error());
}

/* The decode kind each arch and KV kind runs: the wgmma kernel on sm_90a for bf16 and fp16 only,
 * and the portable one when $MLAJIT_FLASHMLA_DECODE=portable forces it. */
Test(flashmla_compile, decode_dispatch) {
    static const struct {
        char arch[16];
        int kv;
        char force[16];
        char want[32];
    } rows[] = {
        {"sm_90a", MLA__FLASHMLA_KV_BF16, "", "flashmla_decode_sm90"},
        {"sm_90a", MLA__FLASHMLA_KV_FP16, "", "flashmla_decode_sm90"},
        {"sm_90a", MLA__FLASHMLA_KV_FP8, "", "flashmla_decode"},
        {"sm_90a", MLA__FLASHMLA_KV_BF16, "portable", "flashmla_decode"},
        {"sm_90a", MLA__FLASHMLA_KV_FP16, "other", "flashmla_decode_sm90"},
        {"sm_100a", MLA__FLASHMLA_KV_BF16, "", "flashmla_decode"},
        {"sm_100a", MLA__FLASHMLA_KV_FP16, "", "flashmla_decode"},
        {"sm_90", MLA__FLASHMLA_KV_BF16, "", "flashmla_decode"},
        {"sm_89", MLA__FLASHMLA_KV_FP16, "", "flashmla_decode"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const char *got = mla__flashmla_decode_kind(rows[i].arch, rows[i].kv,
                                                    rows[i].force[0] ? rows[i].force : NULL);
        cr_expect(!strcmp(got, rows[i].want), "%s kv %d force \"%s\": expected %s, got %s",
                  rows[i].arch, rows[i].kv, rows[i].force, rows[i].want, got);
        cr_expect(mla__kernel_kind_find(got) != NULL, "%s: kernel kind not in the table", got);
    }
}
