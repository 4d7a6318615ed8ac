/* The "dsv4_attention" kernel compiles with NVRTC (no GPU needed) for sm_90a and sm_100a: every
 * DeepSeek-V4-Flash specialization (H 4096; page_size 128 and 256; draft_tokens 0..3; SWA and
 * HCA) and the smallest and largest hidden sizes (H 512 and 7168). A spec already in the disk
 * cache under the same key (same sources, NVRTC, options) counts: it compiled then. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <string.h>

#include "runtime/internal.h"
#include "util/gpu.h"

typedef struct compile_case {
    int H, page_size, draft_tokens, hca;
    char arch[16];
} compile_case;

#define N_FLASH 16
#define N_EXTRA 4
#define N_ARCH 2

ParameterizedTestParameters(dsv4_attention_compile, spec) {
    static compile_case cases[(N_FLASH + N_EXTRA) * N_ARCH];
    static const char *const archs[N_ARCH] = {"sm_90a", "sm_100a"};
    int n = 0;
    for (int a = 0; a < N_ARCH; a++) {
        for (int i = 0; i < N_FLASH; i++) {
            compile_case *c = &cases[n++];
            c->H = 4096, c->page_size = i & 1 ? 256 : 128, c->draft_tokens = (i >> 1) & 3;
            c->hca = i >> 3;
            snprintf(c->arch, sizeof c->arch, "%s", archs[a]);
        }
        for (int i = 0; i < N_EXTRA; i++) {
            compile_case *c = &cases[n++];
            c->H = i & 1 ? 7168 : 512, c->page_size = 128, c->draft_tokens = 0, c->hca = i >> 1;
            snprintf(c->arch, sizeof c->arch, "%s", archs[a]);
        }
    }
    return cr_make_param_array(compile_case, cases, (size_t)n);
}

ParameterizedTest(compile_case *c, dsv4_attention_compile, spec) {
    char what[160];
    snprintf(what, sizeof what, "dsv4_attention(H=%d, page_size=%d, draft_tokens=%d, hca=%d) "
             "for %s", c->H, c->page_size, c->draft_tokens, c->hca, c->arch);
    mla_runtime *rt = NULL;
    mla_status s = mlt_cpu_runtime(c->arch, &rt);
    cr_assert(s == MLA_OK, "%s: mla_runtime_create(no_device): %s", what, mla_last_error());
    mla__spec spec;
    mla__spec_init(&spec, "dsv4_attention");
    const long long v[4] = {c->H, c->page_size, c->draft_tokens, c->hca};
    static const char *const names[4] = {"H", "page_size", "draft_tokens", "hca"};
    for (int i = 0; i < 4; i++)
        cr_assert(mla__spec_add(&spec, names[i], v[i]) == MLA_OK, "%s: spec", what);
    char hash[33] = "";
    s = mla__precompile(rt, &spec, c->arch, NULL, hash);
    cr_expect(s == MLA_OK, "%s: %s", what, mla_last_error());
    cr_expect(strlen(hash) == 32, "%s: key hash \"%s\"", what, hash);
    mla_runtime_destroy(rt);
}
