/* Argument checks of mla_prefill_attention and its shape helper (spec §4, the upstream messages).
 * They run without a GPU: a no_device runtime and fake device addresses, so every check must fire
 * before any device access. Each case breaks one argument of a valid call and expects
 * MLA_ERR_INVALID_ARGUMENT (or MLA_ERR_NOT_SUPPORTED) with a message containing the expected
 * text; the valid calls themselves must reach the device and fail with MLA_ERR_NO_DEVICE. Also
 * the reading of $MLAJIT_FAKEQUANT_PREFILL at runtime creation. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlajit/fakequant.h"
#include "runtime/internal.h"
#include "util/gpu.h"

#define TQ 50
#define TK 120
#define H 8
#define HKV 2
#define B 3

typedef struct call {
    mlt_tensor q, k, v, cq, ck, out, lse;
    mla_prefill_attention_args a;
} call;

static mla_runtime *cpu_runtime(void) {
    mla_runtime *rt = NULL;
    cr_assert(mlt_cpu_runtime("sm_90a", &rt) == MLA_OK && rt, "runtime: %s", mla_last_error());
    return rt;
}

static void call_init(call *c) {
    int64_t qs[3] = {TQ, H, 192}, ks[3] = {TK, HKV, 192}, vs[3] = {TK, HKV, 128}, cs[1] = {B + 1};
    int64_t os[3] = {TQ, H, 128}, ls[2] = {H, TQ};
    memset(c, 0, sizeof *c);
    mlt_tensor_init(&c->q, 0x1000000, MLT_BF16, 3, qs, NULL);
    mlt_tensor_init(&c->k, 0x2000000, MLT_BF16, 3, ks, NULL);
    mlt_tensor_init(&c->v, 0x3000000, MLT_BF16, 3, vs, NULL);
    mlt_tensor_init(&c->cq, 0x4000000, MLT_INT32, 1, cs, NULL);
    mlt_tensor_init(&c->ck, 0x4100000, MLT_INT32, 1, cs, NULL);
    mlt_tensor_init(&c->out, 0x5000000, MLT_BF16, 3, os, NULL);
    mlt_tensor_init(&c->lse, 0x6000000, MLT_FP32, 2, ls, NULL);
    mla_prefill_attention_args_init(&c->a);
    c->a.q = &c->q.t, c->a.k = &c->k.t, c->a.v = &c->v.t;
    c->a.cu_seqlens_q = &c->cq.t, c->a.cu_seqlens_k = &c->ck.t;
    c->a.out = &c->out.t, c->a.lse = &c->lse.t, c->a.return_lse = 1, c->a.max_seqlen_q = 40;
}

Test(fakequant_prefill_args, valid_calls_reach_the_device) {
    mla_runtime *rt = cpu_runtime();
    call c;
    call_init(&c);
    mla_status s = mla_prefill_attention(rt, &c.a, NULL);
    cr_expect(s == MLA_ERR_NO_DEVICE, "valid prefill: expected MLA_ERR_NO_DEVICE, got %s: %s",
              mla_status_string(s), mla_last_error());
    c.a.q_quant = c.a.k_quant = c.a.p_quant = c.a.v_quant = MLA_QDQ_NVFP4, c.a.k_amax = 3.0f;
    c.a.sparsity_n = 4, c.a.sparsity_m = 8, c.a.block_n = 256, c.a.block_m = 16, c.a.causal = 0;
    s = mla_prefill_attention(rt, &c.a, NULL);
    cr_expect(s == MLA_ERR_NO_DEVICE, "valid nvfp4 4:8 prefill: expected MLA_ERR_NO_DEVICE, got "
              "%s: %s", mla_status_string(s), mla_last_error());
    c.a.return_lse = 0, c.a.lse = NULL, c.a.p_quant = MLA_QDQ_NONE, c.a.p_amax = NAN;
    s = mla_prefill_attention(rt, &c.a, NULL);
    cr_expect(s == MLA_ERR_NO_DEVICE, "valid prefill without lse, p_amax ignored: expected "
              "MLA_ERR_NO_DEVICE, got %s: %s", mla_status_string(s), mla_last_error());
    call_init(&c);
    c.q.shape[0] = 0, c.out.shape[0] = 0, c.lse.shape[1] = 0;
    s = mla_prefill_attention(rt, &c.a, NULL);
    cr_expect(s == MLA_OK, "total_q 0: nothing to do, expected MLA_OK, got %s: %s",
              mla_status_string(s), mla_last_error());
    mla_runtime_destroy(rt);
}

enum {
    QMODE3, PMODE_NEG, BLOCK_M24, BLOCK_N0, KAMAX_INF, PAMAX_0, PAMAX_NAN, VAMAX_NEG, NVFP4_DIM,
    CU_LEN, CU_DTYPE, SPARSE_M6, SPARSE_N4, SINK_NEG, MAXQ_NEG, CAUSAL2, GQA, K_DTYPE, V_TOKENS,
    V_HEADS, K_DIM, OUT_SHAPE, OUT_DTYPE, LSE_MISSING, LSE_LAYOUT, SCALE_INF, STRUCT_SIZE,
    BLOCK_N512, DQK_BIG, DV_BIG, N_CASES
};
static const char *const wants[N_CASES][2] = {
    {"q_quant must be one of", "3"}, {"p_quant must be one of", "-1"},
    {"multiples of 16", "24"}, {"multiples of 16", "0"}, {"k_amax", "finite positive"},
    {"p_amax", "finite positive"}, {"p_amax", "finite positive"}, {"v_amax", "finite positive"},
    {"qk_head_dim % 16", "72"}, {"cu_seqlens_q and cu_seqlens_k", "same length"},
    {"cu_seqlens_q", "int32"}, {"sparsity_m", "4 or 8"}, {"sparsity_n", "sparsity_m"},
    {"dense_sink_tokens", ">= 0"}, {"max_seqlen_q", ">= 0"}, {"causal", "0 or 1"},
    {"num_heads", "divisible"}, {"k: expected dtype", "bfloat16"}, {"v", "total_k"},
    {"v", "num_kv_heads"}, {"k", "qk_head_dim"}, {"out", "v_head_dim"}, {"out", "dtype"},
    {"lse", "NULL"}, {"lse", "num_heads"}, {"softmax_scale", "finite"},
    {"struct_size", "mla_prefill_attention_args_init"}, {"block_n", "supported up to 256"},
    {"qk_head_dim", "supported"}, {"v_head_dim", "supported"},
};

static void break_case(int id, call *c) {
    mla_prefill_attention_args *a = &c->a;
    switch (id) {
    case QMODE3: a->q_quant = 3; break;
    case PMODE_NEG: a->p_quant = -1; break;
    case BLOCK_M24: a->block_m = 24; break;
    case BLOCK_N0: a->block_n = 0; break;
    case KAMAX_INF: a->k_quant = MLA_QDQ_FP8, a->k_amax = INFINITY; break;
    case PAMAX_0: a->p_quant = MLA_QDQ_NVFP4, a->p_amax = 0; break;
    case PAMAX_NAN: a->p_quant = MLA_QDQ_FP8, a->p_amax = NAN; break;
    case VAMAX_NEG: a->v_quant = MLA_QDQ_NVFP4, a->v_amax = -1; break;
    case NVFP4_DIM: a->k_quant = MLA_QDQ_NVFP4, c->q.shape[2] = c->k.shape[2] = 72; break;
    case CU_LEN: c->ck.shape[0] = B + 2; break;
    case CU_DTYPE: c->cq.t.dtype = (DLDataType){kDLInt, 64, 1}; break;
    case SPARSE_M6: a->sparsity_n = 2, a->sparsity_m = 6; break;
    case SPARSE_N4: a->sparsity_n = 4, a->sparsity_m = 4; break;
    case SINK_NEG: a->dense_sink_tokens = -1; break;
    case MAXQ_NEG: a->max_seqlen_q = -1; break;
    case CAUSAL2: a->causal = 2; break;
    case GQA: c->k.shape[1] = c->v.shape[1] = 3; break;
    case K_DTYPE: c->k.t.dtype = (DLDataType){kDLFloat, 16, 1}; break;
    case V_TOKENS: c->v.shape[0] = TK - 1; break;
    case V_HEADS: c->v.shape[1] = 1; break;
    case K_DIM: c->k.shape[2] = 128; break;
    case OUT_SHAPE: c->out.shape[2] = 192; break;
    case OUT_DTYPE: c->out.t.dtype = (DLDataType){kDLFloat, 16, 1}; break;
    case LSE_MISSING: a->lse = NULL; break;
    case LSE_LAYOUT: c->lse.shape[0] = TQ, c->lse.shape[1] = H; break;
    case SCALE_INF: a->softmax_scale = INFINITY; break;
    case STRUCT_SIZE: a->struct_size = 8; break;
    case BLOCK_N512: a->block_n = 512; break;
    case DQK_BIG: c->q.shape[2] = c->k.shape[2] = 640; break;
    case DV_BIG: c->v.shape[2] = c->out.shape[2] = 640; break;
    }
}

Test(fakequant_prefill_args, every_error_path) {
    mla_runtime *rt = cpu_runtime();
    for (int id = 0; id < N_CASES; id++) {
        call c;
        call_init(&c);
        break_case(id, &c);
        mla_status s = mla_prefill_attention(rt, &c.a, NULL);
        mla_status want = id >= BLOCK_N512 ? MLA_ERR_NOT_SUPPORTED : MLA_ERR_INVALID_ARGUMENT;
        const char *m = mla_last_error();
        cr_expect(s == want, "case %d (%s / %s): expected %s, got %s: %s", id, wants[id][0],
                  wants[id][1], mla_status_string(want), mla_status_string(s), m);
        cr_expect(strstr(m, wants[id][0]) && strstr(m, wants[id][1]), "case %d: message \"%s\" "
                  "lacks \"%s\" / \"%s\"", id, m, wants[id][0], wants[id][1]);
    }
    mla_runtime_destroy(rt);
}

Test(fakequant_prefill_args, defaults_and_shape_helper) {
    mla_prefill_attention_args a;
    mla_prefill_attention_args_init(&a);
    cr_expect(a.causal == 1 && a.return_lse == 0 && isnan(a.softmax_scale) && isnan(a.q_amax) &&
              isnan(a.k_amax) && isnan(a.v_amax) && a.p_amax == 1.0f && a.sparsity_n == 0 &&
              a.sparsity_m == 4 && a.dense_sink_tokens == 0 && a.dense_recent_tokens == 64 &&
              a.block_m == 64 && a.block_n == 64 && a.q_quant == MLA_QDQ_NONE,
              "init: the seed's defaults");
    call c;
    call_init(&c);
    mla_prefill_attention_sizes sz;
    cr_assert(mla_prefill_attention_shape(&c.a, &sz) == MLA_OK, "shape: %s", mla_last_error());
    cr_expect(sz.out[0] == TQ && sz.out[1] == H && sz.out[2] == 128, "shape: out [%lld, %lld, "
              "%lld]", (long long)sz.out[0], (long long)sz.out[1], (long long)sz.out[2]);
    cr_expect(sz.lse[0] == H && sz.lse[1] == TQ, "shape: lse [%lld, %lld], expected [heads, "
              "total_q]", (long long)sz.lse[0], (long long)sz.lse[1]);
    c.a.block_n = 40;
    cr_expect(mla_prefill_attention_shape(&c.a, &sz) == MLA_ERR_INVALID_ARGUMENT,
              "shape with block_n 40 must fail");
}

/* Warnings about $MLAJIT_FAKEQUANT_PREFILL received by the log callback, and the last one. */
static int env_warnings;
static char env_msg[512];
static void record_env(void *user, mla_log_level level, const char *msg) {
    (void)user;
    if (level != MLA_LOG_WARN || !strstr(msg, "MLAJIT_FAKEQUANT_PREFILL")) return;
    env_warnings++;
    snprintf(env_msg, sizeof env_msg, "%s", msg);
}

/* A no_device runtime created with $MLAJIT_FAKEQUANT_PREFILL set to value (unset for NULL); the
 * variable is unset again before returning. */
static mla_runtime *runtime_with_env(const char *value) {
    cr_assert_eq(value ? setenv("MLAJIT_FAKEQUANT_PREFILL", value, 1)
                       : unsetenv("MLAJIT_FAKEQUANT_PREFILL"), 0, "set MLAJIT_FAKEQUANT_PREFILL");
    mla_options o;
    mla_options_init(&o);
    o.no_device = 1;
    o.arch = "sm_90a";
    o.cache_dir = "";
    o.log = record_env;
    env_warnings = 0;
    env_msg[0] = '\0';
    mla_runtime *rt = NULL;
    mla_status s = mla_runtime_create(&o, &rt);
    cr_assert_eq(unsetenv("MLAJIT_FAKEQUANT_PREFILL"), 0, "unset MLAJIT_FAKEQUANT_PREFILL");
    cr_assert_eq(s, MLA_OK, "MLAJIT_FAKEQUANT_PREFILL=%s: mla_runtime_create: %s",
                 value ? value : "(unset)", mla_last_error());
    return rt;
}

/* $MLAJIT_FAKEQUANT_PREFILL is read once, at creation: "portable" forces the fp32 prefill,
 * "mma4" / "mma8" / "mma32" pick the tensor-core CTA (warps, rows per warp), unset or empty leave
 * the defaults (0); any other value is ignored with one warning naming it. */
Test(fakequant_prefill_args, env_read_at_create) {
    static const struct {
        const char *value;
        int portable, warps, rows, warns;
    } rows[] = {
        {NULL, 0, 0, 0, 0},     {"", 0, 0, 0, 0},      {"portable", 1, 0, 0, 0},
        {"mma4", 0, 4, 16, 0},  {"mma8", 0, 8, 16, 0}, {"mma32", 0, 4, 32, 0},
        {"mma16", 0, 0, 0, 1},  {"Portable", 0, 0, 0, 1},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const char *shown = rows[i].value ? rows[i].value : "(unset)";
        mla_runtime *rt = runtime_with_env(rows[i].value);
        cr_expect(rt->fakequant_prefill_portable == rows[i].portable &&
                  rt->fakequant_prefill_warps == rows[i].warps &&
                  rt->fakequant_prefill_rows == rows[i].rows, "MLAJIT_FAKEQUANT_PREFILL=%s: "
                  "portable %d, warps %d, rows %d; expected %d, %d, %d", shown,
                  rt->fakequant_prefill_portable, rt->fakequant_prefill_warps,
                  rt->fakequant_prefill_rows, rows[i].portable, rows[i].warps, rows[i].rows);
        cr_expect_eq(env_warnings, rows[i].warns, "MLAJIT_FAKEQUANT_PREFILL=%s: %d warnings, "
                     "expected %d (last: %s)", shown, env_warnings, rows[i].warns, env_msg);
        if (rows[i].warns)
            cr_expect(strstr(env_msg, rows[i].value) && strstr(env_msg, "portable"),
                      "the warning names the value and what is expected: %s", env_msg);
        mla_runtime_destroy(rt);
    }
    mla_runtime *forced = runtime_with_env("portable");
    cr_assert_eq(setenv("MLAJIT_FAKEQUANT_PREFILL", "mma4", 1), 0, "setenv");
    cr_expect(forced->fakequant_prefill_portable && !forced->fakequant_prefill_warps,
              "a later change of MLAJIT_FAKEQUANT_PREFILL must not change an existing runtime");
    cr_assert_eq(unsetenv("MLAJIT_FAKEQUANT_PREFILL"), 0, "unsetenv");
    mla_runtime_destroy(forced);
}
