/* The mla_output_proj kernels (kernel_src/dsv4/output_proj.cu) compile with NVRTC for sm_90a and
 * sm_100a, through mla__precompile (no GPU needed), for several valid (H, G); their kind builders
 * write the name expression and launch needs, and reject (H, G) outside the seed's constraints
 * (H % 512 == 0, H <= 4096, K = 32768 / G % 512 == 0, R = 2H / G % 256 == 0). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <string.h>

#include "runtime/dsv4_kinds.h"
#include "runtime/internal.h"
#include "util/gpu.h"

/* One compile: kind, arch and (H, G). Plain values only (Criterion forks its workers). */
typedef struct compile_case {
    char kind[32];
    char arch[16];
    int H, G, NT; /* NT: the stream kinds' 8-token tiles, 0 for the tiled kinds */
} compile_case;

#define HG_CASES(X, kind, arch)                                                                  \
    X(kind, arch, 4096, 8) X(kind, arch, 4096, 16) X(kind, arch, 512, 4)                         \
    X(kind, arch, 1024, 4) X(kind, arch, 2048, 16)
#define CASE_ROW_(kind, arch, H, G) {kind, arch, H, G, 0},
/* The stream kinds: every NT at H 4096 G 8, and the smallest and an odd (H, G) at NT 1 and 8. */
#define STREAM_CASES(X, kind, arch)                                                              \
    X(kind, arch, 4096, 8, 1) X(kind, arch, 4096, 8, 2) X(kind, arch, 4096, 8, 4)                \
    X(kind, arch, 4096, 8, 8) X(kind, arch, 512, 4, 1) X(kind, arch, 2048, 16, 8)
#define STREAM_ROW_(kind, arch, H, G, NT) {kind, arch, H, G, NT},

static compile_case compile_cases[] = {
    HG_CASES(CASE_ROW_, "dsv4_output_proj_a", "sm_90a")
    HG_CASES(CASE_ROW_, "dsv4_output_proj_b", "sm_90a")
    HG_CASES(CASE_ROW_, "dsv4_output_proj_a", "sm_100a")
    HG_CASES(CASE_ROW_, "dsv4_output_proj_b", "sm_100a")
    STREAM_CASES(STREAM_ROW_, "dsv4_output_proj_a_stream", "sm_90a")
    STREAM_CASES(STREAM_ROW_, "dsv4_output_proj_b_stream", "sm_90a")
    STREAM_CASES(STREAM_ROW_, "dsv4_output_proj_a_stream", "sm_100a")
    STREAM_CASES(STREAM_ROW_, "dsv4_output_proj_b_stream", "sm_100a")
};

static void make_spec(mla__spec *spec, const char *kind, long long H, long long G, int NT) {
    mla__spec_init(spec, kind);
    cr_assert(mla__spec_add(spec, "H", H) == MLA_OK && mla__spec_add(spec, "G", G) == MLA_OK,
              "%s(H=%lld,G=%lld): mla__spec_add: %s", kind, H, G, mla_last_error());
    if (NT > 0)
        cr_assert(mla__spec_add(spec, "NT", NT) == MLA_OK, "%s(NT=%d): mla__spec_add: %s", kind,
                  NT, mla_last_error());
}

ParameterizedTestParameters(dsv4_output_proj_compile, precompile) {
    return cr_make_param_array(compile_case, compile_cases,
                               sizeof compile_cases / sizeof compile_cases[0]);
}

ParameterizedTest(compile_case *c, dsv4_output_proj_compile, precompile) {
    mla_runtime *rt = NULL;
    mla_status s = mlt_cpu_runtime(c->arch, &rt);
    cr_assert(s == MLA_OK && rt, "%s(H=%d,G=%d) %s: runtime: %s", c->kind, c->H, c->G, c->arch,
              mla_last_error());
    mla__spec spec;
    make_spec(&spec, c->kind, c->H, c->G, c->NT);
    char hash[33] = "";
    mla__origin origin;
    s = mla__precompile(rt, &spec, c->arch, &origin, hash);
    cr_expect(s == MLA_OK, "%s(H=%d,G=%d) %s: mla__precompile: %s: %s", c->kind, c->H, c->G,
              c->arch, mla_status_string(s), mla_last_error());
    cr_expect(s != MLA_OK || strlen(hash) == 32, "%s(H=%d,G=%d) %s: key hash \"%s\"", c->kind,
              c->H, c->G, c->arch, hash);
    mla_runtime_destroy(rt);
}

/* The builders: name expression, 128 threads, the tile's dynamic shared memory. */
Test(dsv4_output_proj_compile, builders) {
    static const struct {
        const char *kind, *entry;
        int smem;
    } kinds[] = {
        {"dsv4_output_proj_a", "mla::dsv4::output_proj_a_kernel<4096, 8>",
         4 * (64 * 128 + 64 * 4 + 64 * 128 + 64 * 4) + 64 * 256 + 64 * 256},
        {"dsv4_output_proj_b", "mla::dsv4::output_proj_b_kernel<4096, 8>",
         4 * (64 * 128 + 64 * 4 + 32 * 128 + 32 * 4) + 64 * 256 + 32 * 256},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        const mla__kernel_kind *kind = mla__kernel_kind_find(kinds[i].kind);
        cr_assert(kind != NULL, "%s: kind not registered", kinds[i].kind);
        cr_expect(strcmp(kind->source, "dsv4/output_proj.cu") == 0, "%s: source %s",
                  kinds[i].kind, kind->source);
        mla__spec spec;
        make_spec(&spec, kinds[i].kind, 4096, 8, 0);
        char name[256];
        mla__launch_info launch;
        memset(&launch, 0, sizeof launch);
        mla_status s = kind->build(&spec, name, sizeof name, &launch);
        cr_assert(s == MLA_OK, "%s(H=4096,G=8): build: %s", kinds[i].kind, mla_last_error());
        cr_expect(strcmp(name, kinds[i].entry) == 0, "%s(H=4096,G=8): name expression %s",
                  kinds[i].kind, name);
        cr_expect(launch.threads == 128 && launch.cluster == 1 &&
                      launch.dynamic_smem == kinds[i].smem,
                  "%s(H=4096,G=8): launch threads %d smem %d cluster %d (want 128, %d, 1)",
                  kinds[i].kind, launch.threads, launch.dynamic_smem, launch.cluster,
                  kinds[i].smem);
    }
}

/* (H, G) outside the seed's constraints, with the word the message must contain. */
Test(dsv4_output_proj_compile, builders_reject) {
    static const struct {
        long long H, G;
        const char *want;
    } bad[] = {
        {512, 8, "R = 2H / G"},   {512, 16, "R = 2H / G"}, {4096, 128, "K = 32768 / G"},
        {4608, 8, "H a multiple"}, {384, 1, "H a multiple"}, {4096, 3, "G dividing"},
        {4096, 0, "G dividing"},  {2560, 8, "R = 2H / G"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        for (int k = 0; k < 2; k++) {
            const char *kn = k ? "dsv4_output_proj_b" : "dsv4_output_proj_a";
            const mla__kernel_kind *kind = mla__kernel_kind_find(kn);
            cr_assert(kind != NULL, "%s: kind not registered", kn);
            mla__spec spec;
            make_spec(&spec, kn, bad[i].H, bad[i].G, 0);
            char name[256];
            mla__launch_info launch;
            mla_status s = kind->build(&spec, name, sizeof name, &launch);
            cr_expect(s == MLA_ERR_INVALID_ARGUMENT && strstr(mla_last_error(), bad[i].want),
                      "%s(H=%lld,G=%lld): expected MLA_ERR_INVALID_ARGUMENT naming \"%s\", got "
                      "%s: %s", kn, bad[i].H, bad[i].G, bad[i].want, mla_status_string(s),
                      mla_last_error());
        }
    /* The stream kinds: NT outside {1, 2, 4, 8}, and the (H, G) checks. */
    static const struct {
        long long H, G, NT;
        const char *want;
    } bad_s[] = {{4096, 8, 3, "NT"}, {4096, 8, 16, "NT"}, {4096, 8, 0, "NT"}, {512, 8, 1, "R = 2H / G"}};
    for (size_t i = 0; i < sizeof bad_s / sizeof bad_s[0]; i++)
        for (int k = 0; k < 2; k++) {
            const char *kn = k ? "dsv4_output_proj_b_stream" : "dsv4_output_proj_a_stream";
            const mla__kernel_kind *kind = mla__kernel_kind_find(kn);
            cr_assert(kind != NULL, "%s: kind not registered", kn);
            mla__spec spec;
            mla__spec_init(&spec, kn);
            cr_assert(mla__spec_add(&spec, "H", bad_s[i].H) == MLA_OK &&
                      mla__spec_add(&spec, "G", bad_s[i].G) == MLA_OK &&
                      mla__spec_add(&spec, "NT", bad_s[i].NT) == MLA_OK, "%s: spec", kn);
            char name[256];
            mla__launch_info launch;
            mla_status s = kind->build(&spec, name, sizeof name, &launch);
            cr_expect(s == MLA_ERR_INVALID_ARGUMENT && strstr(mla_last_error(), bad_s[i].want),
                      "%s(H=%lld,G=%lld,NT=%lld): expected MLA_ERR_INVALID_ARGUMENT naming "
                      "\"%s\", got %s: %s", kn, bad_s[i].H, bad_s[i].G, bad_s[i].NT,
                      bad_s[i].want, mla_status_string(s), mla_last_error());
        }
    mla__spec spec;
    mla__spec_init(&spec, "dsv4_output_proj_a");
    char name[256];
    mla__launch_info launch;
    mla_status s = mla__dsv4_output_proj_a_build(&spec, name, sizeof name, &launch);
    cr_expect(s == MLA_ERR_INVALID_ARGUMENT && strstr(mla_last_error(), "(H, G)"),
              "dsv4_output_proj_a(): expected a missing-parameter error, got %s: %s",
              mla_status_string(s), mla_last_error());
}
