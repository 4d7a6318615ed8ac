/* Argument checks of the sparse decode (mla_flash_with_kvcache with indices) and the sparse
 * prefill (mla_flash_sparse_fwd), and their shape helpers.
 *
 * They run without a GPU: the runtime has no device (arch sm_90a) and the tensors hold fake
 * device addresses, so every check must fire before any device access. Each case breaks one
 * argument of a valid call and expects MLA_ERR_INVALID_ARGUMENT with a message naming the
 * argument; the valid calls themselves reach the device and fail with MLA_ERR_NO_DEVICE. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <string.h>

#include "mlajit/flashmla.h"
#include "runtime/internal.h"
#include "util/gpu.h"

#define B 3
#define SQ 2
#define HQ 64
#define TOPK 128
#define NBLK 10
#define PAGE 61
#define SKV 300

typedef struct arg_case {
    int id;
    char name[48];
    char want[32];
} arg_case;

static mla_runtime *cpu_runtime(void) {
    mla_runtime *rt = NULL;
    mla_status s = mlt_cpu_runtime("sm_90a", &rt);
    cr_assert(s == MLA_OK && rt, "mla_runtime_create(no_device, sm_90a): %s", mla_last_error());
    return rt;
}

static void reshape(mlt_tensor *m, int ndim, const int64_t *shape, const int64_t *strides) {
    mlt_tensor_init(m, (CUdeviceptr)(uintptr_t)m->t.data, m->t.dtype, ndim, shape, strides);
}

static void expect_status(const arg_case *c, mla_status s, mla_status want) {
    const char *msg = mla_last_error();
    cr_expect(s == want, "%s: expected %s, got %s (%s)", c->name, mla_status_string(want),
              mla_status_string(s), msg);
    cr_expect(want == MLA_ERR_NO_DEVICE || strstr(msg, c->want) != NULL, "%s: message does not "
              "name \"%s\": %s", c->name, c->want, msg);
}

/* ---- sparse decode ---------------------------------------------------------------------------- */

typedef struct dcall {
    mlt_tensor q, k, idx, sink, tlen, out, lse;
    mla_flash_with_kvcache_args a;
} dcall;

static void dcall_init(dcall *c) {
    int64_t qs[4] = {B, SQ, HQ, 576}, ks[4] = {NBLK, PAGE, 1, 656}, is[3] = {B, SQ, TOPK};
    int64_t hs[1] = {HQ}, bs[1] = {B}, os[4] = {B, SQ, HQ, 512}, ls[3] = {B, HQ, SQ};
    memset(c, 0, sizeof *c);
    mlt_tensor_init(&c->q, 0x1000000, MLT_BF16, 4, qs, NULL);
    mlt_tensor_init(&c->k, 0x2000000, MLT_E4M3, 4, ks, NULL);
    mlt_tensor_init(&c->idx, 0x3000000, MLT_INT32, 3, is, NULL);
    mlt_tensor_init(&c->sink, 0x3100000, MLT_FP32, 1, hs, NULL);
    mlt_tensor_init(&c->tlen, 0x3200000, MLT_INT32, 1, bs, NULL);
    mlt_tensor_init(&c->out, 0x4000000, MLT_BF16, 4, os, NULL);
    mlt_tensor_init(&c->lse, 0x5000000, MLT_FP32, 3, ls, NULL);
    mla_flash_with_kvcache_args_init(&c->a);
    c->a.q = &c->q.t, c->a.k_cache = &c->k.t, c->a.indices = &c->idx.t;
    c->a.is_fp8_kvcache = 1, c->a.out = &c->out.t, c->a.softmax_lse = &c->lse.t;
    c->a.attn_sink = &c->sink.t, c->a.topk_length = &c->tlen.t;
}

#define DEC_CASES(X)                                                                             \
    X(D_VALID, "valid call", "")                                                                 \
    X(D_Q_FP16, "q float16", "q")                                                                \
    X(D_Q_512, "q head dim 512", "q")                                                            \
    X(D_Q_HQ24, "q h_q 24", "h_q")                                                               \
    X(D_Q_SQ5, "q s_q 5", "s_q")                                                                 \
    X(D_Q_STRIDE, "q stride[2] 580", "stride[2]")                                                \
    X(D_K_BF16, "k_cache bfloat16", "k_cache")                                                   \
    X(D_K_576, "k_cache 576 bytes per token", "656")                                             \
    X(D_K_HKV2, "k_cache h_kv 2", "h_kv")                                                        \
    X(D_K_ROWSTRIDE, "k_cache stride[1] 672", "stride[1]")                                       \
    X(D_K_BLKSTRIDE, "k_cache stride[0] not 16-aligned", "stride[0]")                            \
    X(D_I_NULLDT, "indices float32", "indices")                                                  \
    X(D_I_B, "indices b 2", "indices")                                                           \
    X(D_I_TOPK0, "indices topk 0", "topk")                                                       \
    X(D_I_STRIDE, "indices last stride 2", "indices")                                            \
    X(D_CAUSAL, "causal 1", "causal")                                                            \
    X(D_FP8_0, "is_fp8_kvcache 0", "is_fp8_kvcache")                                             \
    X(D_HDV, "head_dim_v 576", "head_dim_v")                                                     \
    X(D_SCALE, "softmax_scale inf", "softmax_scale")                                             \
    X(D_DESCALE, "descale_q given", "descale")                                                   \
    X(D_SINK_HQ, "attn_sink [h_q + 1]", "attn_sink")                                             \
    X(D_SINK_BF16, "attn_sink bfloat16", "attn_sink")                                            \
    X(D_TLEN_B, "topk_length [b + 1]", "topk_length")                                            \
    X(D_OUT_NULL, "out NULL", "out")                                                             \
    X(D_OUT_FP32, "out float32", "out")                                                          \
    X(D_OUT_HQ, "out h_q 32", "out")                                                             \
    X(D_LSE_T, "softmax_lse [b, s_q, h_q]", "softmax_lse")                                       \
    X(D_SIZE, "struct_size 0", "struct_size")

#define CASE_ENUM_(id, name, want) id,
#define CASE_ROW_(id, name, want) {id, name, want},
enum { DEC_CASES(CASE_ENUM_) N_DEC_CASES };
static arg_case dec_cases[] = {DEC_CASES(CASE_ROW_)};

static void dec_apply(dcall *c, int id) {
    mla_flash_with_kvcache_args *a = &c->a;
    static const int64_t q512[4] = {B, SQ, HQ, 512}, q24[4] = {B, SQ, 24, 576};
    static const int64_t q5[4] = {B, 5, HQ, 576}, qs[4] = {B, SQ, HQ, 576};
    static const int64_t qst[4] = {SQ * HQ * 580, HQ * 580, 580, 1};
    static const int64_t k576[4] = {NBLK, PAGE, 1, 576}, k2[4] = {NBLK, PAGE, 2, 656};
    static const int64_t ks[4] = {NBLK, PAGE, 1, 656}, kst1[4] = {PAGE * 672, 672, 656, 1};
    static const int64_t kst0[4] = {PAGE * 656 + 8, 656, 656, 1};
    static const int64_t ib[3] = {2, SQ, TOPK}, i0[3] = {B, SQ, 0}, is[3] = {B, SQ, TOPK};
    static const int64_t ist[3] = {SQ * TOPK * 2, TOPK * 2, 2};
    static const int64_t h1[1] = {HQ + 1}, b1[1] = {B + 1}, o32[4] = {B, SQ, 32, 512};
    static const int64_t lt[3] = {B, SQ, HQ};
    switch (id) {
    case D_VALID: break;
    case D_Q_FP16: c->q.t.dtype = (DLDataType){kDLFloat, 16, 1}; break;
    case D_Q_512: reshape(&c->q, 4, q512, NULL); break;
    case D_Q_HQ24: reshape(&c->q, 4, q24, NULL); break;
    case D_Q_SQ5: reshape(&c->q, 4, q5, NULL); break;
    case D_Q_STRIDE: reshape(&c->q, 4, qs, qst); break;
    case D_K_BF16: c->k.t.dtype = MLT_BF16; break;
    case D_K_576: reshape(&c->k, 4, k576, NULL); break;
    case D_K_HKV2: reshape(&c->k, 4, k2, NULL); break;
    case D_K_ROWSTRIDE: reshape(&c->k, 4, ks, kst1); break;
    case D_K_BLKSTRIDE: reshape(&c->k, 4, ks, kst0); break;
    case D_I_NULLDT: c->idx.t.dtype = MLT_FP32; break;
    case D_I_B: reshape(&c->idx, 3, ib, NULL); break;
    case D_I_TOPK0: reshape(&c->idx, 3, i0, NULL); break;
    case D_I_STRIDE: reshape(&c->idx, 3, is, ist); break;
    case D_CAUSAL: a->causal = 1; break;
    case D_FP8_0: a->is_fp8_kvcache = 0; break;
    case D_HDV: a->head_dim_v = 576; break;
    case D_SCALE: a->softmax_scale = INFINITY; break;
    case D_DESCALE: a->descale_q = &c->sink.t; break;
    case D_SINK_HQ: reshape(&c->sink, 1, h1, NULL); break;
    case D_SINK_BF16: c->sink.t.dtype = MLT_BF16; break;
    case D_TLEN_B: reshape(&c->tlen, 1, b1, NULL); break;
    case D_OUT_NULL: a->out = NULL; break;
    case D_OUT_FP32: c->out.t.dtype = MLT_FP32; break;
    case D_OUT_HQ: reshape(&c->out, 4, o32, NULL); break;
    case D_LSE_T: reshape(&c->lse, 3, lt, NULL); break;
    case D_SIZE: a->struct_size = 0; break;
    default: cr_assert_fail("unknown decode case %d", id);
    }
}

ParameterizedTestParameters(flashmla_sparse_args, decode) {
    return cr_make_param_array(arg_case, dec_cases, sizeof dec_cases / sizeof dec_cases[0]);
}

ParameterizedTest(arg_case *ac, flashmla_sparse_args, decode) {
    mla_runtime *rt = cpu_runtime();
    dcall c;
    dcall_init(&c);
    dec_apply(&c, ac->id);
    expect_status(ac, mla_flash_with_kvcache(rt, &c.a, NULL),
                  ac->id == D_VALID ? MLA_ERR_NO_DEVICE : MLA_ERR_INVALID_ARGUMENT);
    mla_runtime_destroy(rt);
}

Test(flashmla_sparse_args, decode_shape_and_optional_inputs) {
    mla_runtime *rt = cpu_runtime();
    dcall c;
    dcall_init(&c);
    c.a.attn_sink = NULL, c.a.topk_length = NULL;
    mla_status s = mla_flash_with_kvcache(rt, &c.a, NULL);
    cr_expect(s == MLA_ERR_NO_DEVICE, "sparse decode without sink and topk_length: expected "
              "MLA_ERR_NO_DEVICE, got %s: %s", mla_status_string(s), mla_last_error());
    c.k.t.dtype = MLT_UINT8;
    s = mla_flash_with_kvcache(rt, &c.a, NULL);
    cr_expect(s == MLA_ERR_NO_DEVICE, "sparse decode with a uint8 k_cache: expected "
              "MLA_ERR_NO_DEVICE, got %s: %s", mla_status_string(s), mla_last_error());
    mla_flash_with_kvcache_sizes sz;
    memset(&sz, 0x55, sizeof sz);
    s = mla_flash_with_kvcache_shape(&c.a, 0, &sz);
    cr_expect(s == MLA_OK && sz.out[0] == B && sz.out[1] == SQ && sz.out[2] == HQ &&
                  sz.out[3] == 512 && sz.softmax_lse[0] == B && sz.softmax_lse[1] == HQ &&
                  sz.softmax_lse[2] == SQ && sz.workspace_bytes == 0,
              "sparse decode sizes: got %s out [%lld, %lld, %lld, %lld] lse [%lld, %lld, %lld] "
              "workspace %zu", mla_status_string(s), (long long)sz.out[0], (long long)sz.out[1],
              (long long)sz.out[2], (long long)sz.out[3], (long long)sz.softmax_lse[0],
              (long long)sz.softmax_lse[1], (long long)sz.softmax_lse[2], sz.workspace_bytes);
    mla_runtime_destroy(rt);
}

/* ---- sparse prefill --------------------------------------------------------------------------- */

typedef struct pcall {
    mlt_tensor q, kv, idx, sink, tlen, out, ml, lse;
    mla_flash_sparse_fwd_args a;
} pcall;

static void pcall_init(pcall *c) {
    int64_t qs[3] = {SQ * 7, HQ, 576}, ks[3] = {SKV, 1, 576}, is[3] = {SQ * 7, 1, TOPK};
    int64_t hs[1] = {HQ}, ss[1] = {SQ * 7}, os[3] = {SQ * 7, HQ, 512}, ls[2] = {SQ * 7, HQ};
    memset(c, 0, sizeof *c);
    mlt_tensor_init(&c->q, 0x1000000, MLT_BF16, 3, qs, NULL);
    mlt_tensor_init(&c->kv, 0x2000000, MLT_BF16, 3, ks, NULL);
    mlt_tensor_init(&c->idx, 0x3000000, MLT_INT32, 3, is, NULL);
    mlt_tensor_init(&c->sink, 0x3100000, MLT_FP32, 1, hs, NULL);
    mlt_tensor_init(&c->tlen, 0x3200000, MLT_INT32, 1, ss, NULL);
    mlt_tensor_init(&c->out, 0x4000000, MLT_BF16, 3, os, NULL);
    mlt_tensor_init(&c->ml, 0x5000000, MLT_FP32, 2, ls, NULL);
    mlt_tensor_init(&c->lse, 0x5100000, MLT_FP32, 2, ls, NULL);
    mla_flash_sparse_fwd_args_init(&c->a);
    c->a.q = &c->q.t, c->a.kv = &c->kv.t, c->a.indices = &c->idx.t, c->a.sm_scale = 0.0416f;
    c->a.attn_sink = &c->sink.t, c->a.topk_length = &c->tlen.t;
    c->a.out = &c->out.t, c->a.max_logits = &c->ml.t, c->a.lse = &c->lse.t;
}

#define PRE_CASES(X)                                                                             \
    X(P_VALID, "valid call", "")                                                                 \
    X(P_Q_FP16, "q float16", "q")                                                                \
    X(P_Q_HQ8, "q h_q 8", "h_q")                                                                 \
    X(P_Q_HQ96, "q h_q 96", "h_q")                                                               \
    X(P_Q_D192, "q d_qk 192", "d_qk")                                                            \
    X(P_Q_4D, "q 4-D", "q")                                                                      \
    X(P_KV_D, "kv d_qk 512 with q 576", "kv")                                                    \
    X(P_KV_HKV, "kv h_kv 2", "kv")                                                               \
    X(P_KV_STRIDE, "kv stride[0] 577", "kv")                                                     \
    X(P_I_SQ, "indices s_q + 1", "indices")                                                      \
    X(P_I_H, "indices [s_q, 2, topk]", "indices")                                                \
    X(P_I_TOPK0, "indices topk 0", "topk")                                                       \
    X(P_SCALE, "sm_scale NAN (required)", "sm_scale")                                            \
    X(P_DV, "d_v 576", "d_v")                                                                    \
    X(P_NAT, "natural_log 2", "natural_log")                                                     \
    X(P_SINK, "attn_sink [h_q - 1]", "attn_sink")                                                \
    X(P_TLEN, "topk_length float32", "topk_length")                                              \
    X(P_OUT, "out d_v 576", "out")                                                               \
    X(P_ML, "max_logits [h_q, s_q]", "max_logits")                                               \
    X(P_LSE, "lse NULL", "lse")                                                                  \
    X(P_SIZE, "struct_size 0", "struct_size")

enum { PRE_CASES(CASE_ENUM_) N_PRE_CASES };
static arg_case pre_cases[] = {PRE_CASES(CASE_ROW_)};

static void pre_apply(pcall *c, int id) {
    mla_flash_sparse_fwd_args *a = &c->a;
    static const int64_t q8[3] = {SQ * 7, 8, 576}, q96[3] = {SQ * 7, 96, 576};
    static const int64_t q192[3] = {SQ * 7, HQ, 192}, q4[4] = {1, SQ * 7, HQ, 576};
    static const int64_t k512[3] = {SKV, 1, 512}, k2[3] = {SKV, 2, 576}, ks[3] = {SKV, 1, 576};
    static const int64_t kst[3] = {577, 577, 1}, isq[3] = {SQ * 7 + 1, 1, TOPK};
    static const int64_t ih[3] = {SQ * 7, 2, TOPK}, i0[3] = {SQ * 7, 1, 0}, sh[1] = {HQ - 1};
    static const int64_t o576[3] = {SQ * 7, HQ, 576}, mlt[2] = {HQ, SQ * 7};
    switch (id) {
    case P_VALID: break;
    case P_Q_FP16: c->q.t.dtype = (DLDataType){kDLFloat, 16, 1}; break;
    case P_Q_HQ8: reshape(&c->q, 3, q8, NULL); break;
    case P_Q_HQ96: reshape(&c->q, 3, q96, NULL); break;
    case P_Q_D192: reshape(&c->q, 3, q192, NULL); break;
    case P_Q_4D: reshape(&c->q, 4, q4, NULL); break;
    case P_KV_D: reshape(&c->kv, 3, k512, NULL); break;
    case P_KV_HKV: reshape(&c->kv, 3, k2, NULL); break;
    case P_KV_STRIDE: reshape(&c->kv, 3, ks, kst); break;
    case P_I_SQ: reshape(&c->idx, 3, isq, NULL); break;
    case P_I_H: reshape(&c->idx, 3, ih, NULL); break;
    case P_I_TOPK0: reshape(&c->idx, 3, i0, NULL); break;
    case P_SCALE: a->sm_scale = NAN; break;
    case P_DV: a->d_v = 576; break;
    case P_NAT: a->natural_log = 2; break;
    case P_SINK: reshape(&c->sink, 1, sh, NULL); break;
    case P_TLEN: c->tlen.t.dtype = MLT_FP32; break;
    case P_OUT: reshape(&c->out, 3, o576, NULL); break;
    case P_ML: reshape(&c->ml, 2, mlt, NULL); break;
    case P_LSE: a->lse = NULL; break;
    case P_SIZE: a->struct_size = 0; break;
    default: cr_assert_fail("unknown prefill case %d", id);
    }
}

ParameterizedTestParameters(flashmla_sparse_args, prefill) {
    return cr_make_param_array(arg_case, pre_cases, sizeof pre_cases / sizeof pre_cases[0]);
}

ParameterizedTest(arg_case *ac, flashmla_sparse_args, prefill) {
    mla_runtime *rt = cpu_runtime();
    pcall c;
    pcall_init(&c);
    pre_apply(&c, ac->id);
    expect_status(ac, mla_flash_sparse_fwd(rt, &c.a, NULL),
                  ac->id == P_VALID ? MLA_ERR_NO_DEVICE : MLA_ERR_INVALID_ARGUMENT);
    mla_runtime_destroy(rt);
}

Test(flashmla_sparse_args, prefill_shape_and_runtime) {
    mla_runtime *rt = cpu_runtime();
    pcall c;
    pcall_init(&c);
    mla_status s = mla_flash_sparse_fwd(NULL, &c.a, NULL);
    cr_expect(s == MLA_ERR_INVALID_ARGUMENT && strstr(mla_last_error(), "runtime"),
              "prefill with a NULL runtime: got %s: %s", mla_status_string(s), mla_last_error());
    mla_flash_sparse_fwd_sizes sz;
    memset(&sz, 0x55, sizeof sz);
    s = mla_flash_sparse_fwd_shape(&c.a, &sz);
    cr_expect(s == MLA_OK && sz.out[0] == SQ * 7 && sz.out[1] == HQ && sz.out[2] == 512 &&
                  sz.max_logits[0] == SQ * 7 && sz.max_logits[1] == HQ && sz.lse[0] == SQ * 7 &&
                  sz.lse[1] == HQ,
              "prefill sizes: got %s out [%lld, %lld, %lld] max_logits [%lld, %lld] lse [%lld, "
              "%lld]", mla_status_string(s), (long long)sz.out[0], (long long)sz.out[1],
              (long long)sz.out[2], (long long)sz.max_logits[0], (long long)sz.max_logits[1],
              (long long)sz.lse[0], (long long)sz.lse[1]);
    mla_runtime_destroy(rt);
}
