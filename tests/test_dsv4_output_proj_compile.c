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
/* Both stream GEMMs in one launch (NT 1 and 2 only): H 4096 G 8, the smallest and an odd (H, G). */
#define FUSED_CASES(X, kind, arch)                                                               \
    X(kind, arch, 4096, 8, 1) X(kind, arch, 4096, 8, 2) X(kind, arch, 512, 4, 1)                 \
    X(kind, arch, 2048, 16, 2)

static compile_case compile_cases[] = {
    HG_CASES(CASE_ROW_, "dsv4_output_proj_a", "sm_90a")
    HG_CASES(CASE_ROW_, "dsv4_output_proj_b", "sm_90a")
    HG_CASES(CASE_ROW_, "dsv4_output_proj_a", "sm_100a")
    HG_CASES(CASE_ROW_, "dsv4_output_proj_b", "sm_100a")
    STREAM_CASES(STREAM_ROW_, "dsv4_output_proj_a_stream", "sm_90a")
    STREAM_CASES(STREAM_ROW_, "dsv4_output_proj_b_stream", "sm_90a")
    STREAM_CASES(STREAM_ROW_, "dsv4_output_proj_a_stream", "sm_100a")
    STREAM_CASES(STREAM_ROW_, "dsv4_output_proj_b_stream", "sm_100a")
    FUSED_CASES(STREAM_ROW_, "dsv4_output_proj_stream", "sm_90a")
    FUSED_CASES(STREAM_ROW_, "dsv4_output_proj_stream", "sm_100a")
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

/* The one-launch stream kind: its entry, 288 threads, and the shared memory of kernel A's and
 * kernel B's stream kinds together (its two rings), at NT 1 and 2. */
Test(dsv4_output_proj_compile, builders_fused) {
    const mla__kernel_kind *kf = mla__kernel_kind_find("dsv4_output_proj_stream");
    const mla__kernel_kind *ka = mla__kernel_kind_find("dsv4_output_proj_a_stream");
    const mla__kernel_kind *kb = mla__kernel_kind_find("dsv4_output_proj_b_stream");
    cr_assert(kf && ka && kb, "the stream kinds are registered");
    cr_expect(strcmp(kf->source, "dsv4/output_proj.cu") == 0, "dsv4_output_proj_stream: source %s",
              kf->source);
    for (int nt = 1; nt <= 2; nt++) {
        mla__spec spec;
        make_spec(&spec, "dsv4_output_proj_stream", 4096, 8, nt);
        char name[256], want[96];
        mla__launch_info lf, la, lb;
        memset(&lf, 0, sizeof lf), memset(&la, 0, sizeof la), memset(&lb, 0, sizeof lb);
        cr_assert(kf->build(&spec, name, sizeof name, &lf) == MLA_OK,
                  "dsv4_output_proj_stream(NT=%d): build: %s", nt, mla_last_error());
        snprintf(want, sizeof want, "mla::dsv4::output_proj_stream_kernel<4096, 8, %d>", nt);
        cr_expect(strcmp(name, want) == 0, "dsv4_output_proj_stream(NT=%d): name %s", nt, name);
        cr_assert(ka->build(&spec, name, sizeof name, &la) == MLA_OK &&
                      kb->build(&spec, name, sizeof name, &lb) == MLA_OK,
                  "a / b stream (NT=%d): build: %s", nt, mla_last_error());
        cr_expect(lf.threads == 288 && lf.cluster == 1 &&
                      lf.dynamic_smem == la.dynamic_smem + lb.dynamic_smem &&
                      lf.dynamic_smem <= 227 * 1024,
                  "dsv4_output_proj_stream(NT=%d): threads %d smem %d cluster %d (want 288, %d + "
                  "%d <= 227 KB, 1)", nt, lf.threads, lf.dynamic_smem, lf.cluster,
                  la.dynamic_smem, lb.dynamic_smem);
    }
    static const long long bad_nt[] = {0, 3, 4, 8};
    for (size_t i = 0; i < sizeof bad_nt / sizeof bad_nt[0]; i++) {
        mla__spec spec;
        make_spec(&spec, "dsv4_output_proj_stream", 4096, 8, (int)bad_nt[i]);
        if (bad_nt[i] == 0) {   /* make_spec leaves NT out at 0: add it explicitly */
            mla__spec_init(&spec, "dsv4_output_proj_stream");
            cr_assert(mla__spec_add(&spec, "H", 4096) == MLA_OK &&
                      mla__spec_add(&spec, "G", 8) == MLA_OK &&
                      mla__spec_add(&spec, "NT", 0) == MLA_OK, "spec");
        }
        char name[256];
        mla__launch_info launch;
        mla_status s = kf->build(&spec, name, sizeof name, &launch);
        cr_expect(s == MLA_ERR_INVALID_ARGUMENT && strstr(mla_last_error(), "NT"),
                  "dsv4_output_proj_stream(NT=%lld): expected MLA_ERR_INVALID_ARGUMENT naming NT, "
                  "got %s: %s", bad_nt[i], mla_status_string(s), mla_last_error());
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
