/* Compile tests of the fake-quant kernels: every specialization (qdq for in_dtype x mode; decode
 * and the tensor-core decode_mma for cache_dtype x k_qdq x v_qdq x p_qdq, and the sm_90a decode_sm90 the
 * same for sm_90a only; the combine for each out_dtype; the combine of the dense path) and a covering set of
 * the prefill's (dtype x q/k/p/v quant x sparsity_m: every value of every parameter, each mode
 * beside each other mode and each sparsity, the GPU tests' specs among them; for the tensor-core
 * prefill the same set over its head dims, every dqk and every dv; for the wgmma prefill, sm_90a
 * only, the same set over its head dims) compiles with NVRTC
 * for sm_90a and sm_100a through the library (mla__precompile, no GPU needed) and reports the
 * launch needs the runtime uses. Spec values outside the kinds' ranges are refused. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <string.h>

#include "runtime/fakequant_kinds.h"
#include "runtime/internal.h"
#include "util/gpu.h"
#include "util/spec.h"

typedef struct compile_case {
    char arch[16];
    char kernel[32];
    int n;
    int v[10];
} compile_case;

#define N_PREFILL 12
#define N_PER_ARCH (6 + 2 * 54 + 3 + 2 + 2 * N_PREFILL + 6)
#define N_SM90 108   /* the sm_90a decode, for sm_90a only (its kind's only arch): 54 x q_fp32 0, 1 */
#define N_DENSE_KV 18   /* fakequant_decode_dense (sm_90a only): 2 dtypes x 9 K/V modes (none: the
                          self-scheduled unquantized path) */
static compile_case cases[2 * N_PER_ARCH + N_PREFILL + N_SM90 + N_DENSE_KV];

static compile_case *add_case(int *n, const char *arch, const char *kernel, int count, int v0,
                              int v1, int v2, int v3) {
    compile_case *c = &cases[(*n)++];
    snprintf(c->arch, sizeof c->arch, "%s", arch);
    snprintf(c->kernel, sizeof c->kernel, "%s", kernel);
    c->n = count, c->v[0] = v0, c->v[1] = v1, c->v[2] = v2, c->v[3] = v3;
    c->v[4] = c->v[5] = c->v[6] = c->v[7] = c->v[8] = c->v[9] = 0;
    return c;
}

/* dtype, q_quant, k_quant, p_quant, v_quant, sparsity_m */
static const int prefill_specs[N_PREFILL][6] = {
    {0, 0, 0, 0, 0, 0}, {1, 0, 0, 0, 0, 0}, {0, 1, 1, 1, 1, 0}, {1, 1, 1, 1, 1, 8},
    {0, 2, 2, 2, 2, 0}, {1, 2, 2, 2, 2, 4}, {0, 2, 2, 2, 2, 4}, {0, 0, 0, 2, 0, 0},
    {0, 0, 0, 0, 0, 4}, {0, 0, 0, 0, 0, 8}, {1, 2, 1, 1, 2, 0}, {0, 1, 2, 0, 1, 4},
};

static void fill_cases(void) {
    static const char *const archs[2] = {"sm_90a", "sm_100a"};
    int n = 0;
    for (int a = 0; a < 2; a++) {
        for (int in = 0; in < 3; in++)
            for (int mode = 1; mode <= 2; mode++)
                add_case(&n, archs[a], "fakequant_qdq", 2, in, mode, 0, 0);
        for (int c = 0; c < 2; c++)
            for (int k = 0; k < 3; k++)
                for (int v = 0; v < 3; v++)
                    for (int p = 0; p < 3; p++)
                        for (int mma = 0; mma < 2; mma++)
                            add_case(&n, archs[a], mma ? "fakequant_decode_mma" : "fakequant_decode",
                                     4, c, k, v, p);
        for (int o = 0; o < 3; o++) add_case(&n, archs[a], "fakequant_decode_combine", 1, o, 0, 0, 0);
        for (int o = 0; o < 2; o++) add_case(&n, archs[a], "fakequant_dense_combine", 1, o, 0, 0, 0);
        for (int i = 0; i < N_PREFILL; i++) {
            const int *v = prefill_specs[i];
            compile_case *c = add_case(&n, archs[a], "fakequant_prefill", 6, v[0], v[1], v[2], v[3]);
            c->v[4] = v[4], c->v[5] = v[5];
        }
        /* tensor-core prefill: the same specs, head dims (192, 128) (the GPU tests' and the
         * bench's), (64, 32) and in turn every other dqk and dv, each CTA shape */
        static const int dims[N_PREFILL][2] = {
            {192, 128}, {192, 128}, {192, 128}, {64, 32}, {192, 128}, {64, 32},
            {192, 128}, {64, 32}, {128, 64}, {64, 32}, {64, 32}, {128, 128},
        };
        for (int i = 0; i < N_PREFILL; i++) {
            const int *v = prefill_specs[i];
            compile_case *c = add_case(&n, archs[a], "fakequant_prefill_mma", 10, v[0], v[1],
                                       v[2], v[3]);
            c->v[4] = v[4], c->v[5] = v[5], c->v[6] = dims[i][0], c->v[7] = dims[i][1];
            c->v[8] = i % 3 == 1 ? 8 : 4, c->v[9] = i % 3 == 2 ? 32 : 16;
        }
        /* 4 warps of 32 rows: the bench's four specs (192/128 bf16: none, fp8, nvfp4, 2:4) */
        static const int x32[4][6] = {{0, 0, 0, 0, 0, 0}, {0, 1, 1, 1, 1, 0}, {0, 2, 2, 2, 2, 0},
                                      {0, 0, 0, 0, 0, 4}};
        for (int i = 0; i < 4; i++) {
            compile_case *c = add_case(&n, archs[a], "fakequant_prefill_mma", 10, x32[i][0],
                                       x32[i][1], x32[i][2], x32[i][3]);
            c->v[4] = x32[i][4], c->v[5] = x32[i][5], c->v[6] = 192, c->v[7] = 128;
            c->v[8] = 4, c->v[9] = 32;
        }
        /* the sm_90a decode (wgmma, TMA): every specialization the runtime uses, for sm_90a only
         * (q_fp32 0 and 1 for every mode, runtime/fakequant_decode.c) */
        if (a == 0)
            for (int c = 0; c < 2; c++)
                for (int k = 0; k < 3; k++)
                    for (int v = 0; v < 3; v++)
                        for (int p = 0; p < 3; p++)
                            for (int q = 0; q < 2; q++)
                                add_case(&n, archs[a], "fakequant_decode_sm90", 5, c, k, v, p)
                                    ->v[4] = q;
        /* K / V quantized on the dense sm_90a decode: every specialization, for sm_90a only */
        if (a == 0)
            for (int c = 0; c < 2; c++)
                for (int k = 0; k < 3; k++)
                    for (int v = 0; v < 3; v++)
                        add_case(&n, archs[a], "fakequant_decode_dense", 4, c, k, v, 0);
        /* and 8 warps of 16 rows for the same none and 2:4 */
        for (int i = 0; i < 4; i += 3) {
            compile_case *c = add_case(&n, archs[a], "fakequant_prefill_mma", 10, x32[i][0],
                                       x32[i][1], x32[i][2], x32[i][3]);
            c->v[4] = x32[i][4], c->v[5] = x32[i][5], c->v[6] = 192, c->v[7] = 128;
            c->v[8] = 8, c->v[9] = 16;
        }
    }
    /* the wgmma prefill (sm_90a only): the same specs over its head dims, the bench's and GPU
     * tests' (192, 128), (128, 64), (64, 128) among them */
    static const int dims90[N_PREFILL][2] = {
        {192, 128}, {192, 128}, {192, 128}, {64, 128}, {192, 128}, {64, 64},
        {192, 128}, {128, 64}, {64, 128}, {64, 128}, {128, 64}, {128, 128},
    };
    for (int i = 0; i < N_PREFILL; i++) {
        const int *v = prefill_specs[i];
        compile_case *c = add_case(&n, "sm_90a", "fakequant_prefill_sm90", 8, v[0], v[1], v[2],
                                   v[3]);
        c->v[4] = v[4], c->v[5] = v[5], c->v[6] = dims90[i][0], c->v[7] = dims90[i][1];
    }
}

ParameterizedTestParameters(fakequant_compile, every_spec) {
    fill_cases();
    return cr_make_param_array(compile_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(compile_case *c, fakequant_compile, every_spec) {
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
    char name_expr[256];
    mla__launch_info launch;
    const mla__kernel_kind *kind = mla__kernel_kind_find(c->kernel);
    cr_assert(kind->build(&spec, name_expr, sizeof name_expr, &launch) == MLA_OK, "%s: build",
              desc);
    int decode = !strcmp(c->kernel, "fakequant_decode");
    int decode_mma = !strcmp(c->kernel, "fakequant_decode_mma");
    int decode_sm90 = !strcmp(c->kernel, "fakequant_decode_sm90");
    int decode_dense = !strcmp(c->kernel, "fakequant_decode_dense");
    int prefill = !strcmp(c->kernel, "fakequant_prefill");
    int prefill_mma = !strcmp(c->kernel, "fakequant_prefill_mma");
    int prefill_sm90 = !strcmp(c->kernel, "fakequant_prefill_sm90");
    cr_expect(launch.threads == (prefill_mma ? c->v[8] * 32
                                 : prefill_sm90 ? MLA__FQ_PREFILL_SM90_THREADS
                                 : strcmp(c->kernel, "fakequant_qdq") ? MLA__FQ_THREADS
                                                                      : MLA__FQ_QDQ_THREADS),
              "%s: threads %d", desc, launch.threads);
    cr_expect(launch.dynamic_smem == (decode ? MLA__FQ_DECODE_SMEM
                                      : decode_mma ? MLA__FQ_DECODE_MMA_SMEM
                                      : decode_sm90 ? MLA__FQ_DECODE_SM90_SMEM
                                      : decode_dense ? MLA__FQ_DENSE_KV_SMEM
                                      : prefill ? MLA__FQ_PREFILL_SMEM
                                      : prefill_mma ? MLA__FQ_PREFILL_MMA_SMEM(c->v[6], c->v[7],
                                                                               c->v[8], c->v[9])
                                      : prefill_sm90 ? mla__fq_prefill_sm90_smem(c->v[6], c->v[7])
                                      : 0),
              "%s: smem %d", desc, launch.dynamic_smem);
    cr_expect(launch.dynamic_smem <= 227 * 1024, "%s: smem %d over the 227 KiB limit", desc,
              launch.dynamic_smem);
    mla_runtime_destroy(rt);
}

Test(fakequant_compile, builders_refuse_bad_specs) {
    static const struct { const char *kernel; int n; long long v[10]; } bad[] = {
        {"fakequant_qdq", 2, {3, 1}}, {"fakequant_qdq", 2, {0, 0}}, {"fakequant_qdq", 2, {0, 3}},
        {"fakequant_decode", 4, {2, 0, 0, 0}}, {"fakequant_decode", 4, {0, 3, 0, 0}},
        {"fakequant_decode", 4, {0, 0, -1, 0}}, {"fakequant_decode", 4, {0, 0, 0, 3}},
        {"fakequant_decode", 3, {0, 0, 0}}, {"fakequant_decode_mma", 4, {2, 0, 0, 0}},
        {"fakequant_dense_combine", 1, {2}}, {"fakequant_dense_combine", 0, {0}},
        {"fakequant_decode_mma", 4, {0, 0, 3, 0}}, {"fakequant_decode_mma", 3, {0, 0, 0}},
        {"fakequant_decode_sm90", 5, {2, 0, 0, 0, 0}}, {"fakequant_decode_sm90", 5, {0, 0, 0, 3, 0}},
        {"fakequant_decode_sm90", 5, {0, 0, 0, 0, 2}}, {"fakequant_decode_sm90", 4, {0, 0, 0, 0}},
        {"fakequant_decode_dense", 4, {0, 0, 0, 2}}, {"fakequant_decode_dense", 4, {0, 1, 0, 1}},
        {"fakequant_decode_dense", 4, {2, 1, 0, 0}}, {"fakequant_decode_dense", 4, {0, 3, 0, 0}},
        {"fakequant_decode_combine", 1, {3}},
        {"fakequant_prefill", 6, {2, 0, 0, 0, 0, 0}}, {"fakequant_prefill", 6, {0, 3, 0, 0, 0, 0}},
        {"fakequant_prefill", 6, {0, 0, 0, 0, 0, 6}}, {"fakequant_prefill", 6, {0, 0, 0, 0, 0, 9}},
        {"fakequant_prefill", 5, {0, 0, 0, 0, 0}},
        {"fakequant_prefill_mma", 10, {0, 0, 0, 0, 0, 0, 576, 512, 4, 16}},
        {"fakequant_prefill_mma", 10, {0, 0, 0, 0, 0, 0, 192, 96, 4, 16}},
        {"fakequant_prefill_mma", 10, {0, 0, 0, 0, 0, 0, 96, 128, 4, 16}},
        {"fakequant_prefill_mma", 10, {0, 0, 0, 0, 0, 6, 192, 128, 4, 16}},
        {"fakequant_prefill_mma", 10, {0, 0, 0, 0, 0, 0, 192, 128, 6, 16}},
        {"fakequant_prefill_mma", 10, {0, 0, 0, 0, 0, 0, 192, 128, 8, 32}},
        {"fakequant_prefill_mma", 10, {0, 0, 0, 0, 0, 0, 192, 128, 4, 24}},
        {"fakequant_prefill_mma", 9, {0, 0, 0, 0, 0, 0, 192, 128, 4}},
        {"fakequant_prefill_sm90", 8, {0, 0, 0, 0, 0, 0, 192, 32}},
        {"fakequant_prefill_sm90", 8, {0, 0, 0, 0, 0, 0, 96, 128}},
        {"fakequant_prefill_sm90", 8, {0, 0, 0, 0, 0, 6, 192, 128}},
        {"fakequant_prefill_sm90", 8, {3, 0, 0, 0, 0, 0, 192, 128}},
        {"fakequant_prefill_sm90", 7, {0, 0, 0, 0, 0, 0, 192}},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const mla__kernel_kind *kind = mla__kernel_kind_find(bad[i].kernel);
        cr_assert(kind != NULL, "%s: kind", bad[i].kernel);
        mla__spec spec;
        mla__spec_init(&spec, bad[i].kernel);
        for (int j = 0; j < bad[i].n; j++) mla__spec_add(&spec, kind->params[j], bad[i].v[j]);
        char desc[256], name_expr[256];
        mla__spec_describe(&spec, desc, sizeof desc);
        mla__launch_info launch;
        mla_status s = kind->build(&spec, name_expr, sizeof name_expr, &launch);
        cr_expect(s == MLA_ERR_INVALID_ARGUMENT, "%s: expected MLA_ERR_INVALID_ARGUMENT, got %s",
                  desc, mla_status_string(s));
    }
}
