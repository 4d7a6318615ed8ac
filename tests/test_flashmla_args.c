/* Argument checks of mla_get_metadata, mla_flash_with_kvcache and their shape helpers.
 *
 * They run without a GPU: the runtime is created with no_device (arch sm_90a) and the tensors
 * hold fake device addresses, so every check must fire before any device access. Each case breaks
 * one argument of a valid call and expects MLA_ERR_INVALID_ARGUMENT with a message that names
 * the argument (the sparse decode's checks: test_flashmla_sparse_args.c); the valid calls must
 * reach the device and fail with MLA_ERR_NO_DEVICE. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <string.h>

#include "runtime/flashmla_kinds.h"
#include "runtime/internal.h"
#include "util/flashmla_case.h"

#define B 4
#define SQ 2
#define HQ 16
#define HKV 2
#define PAGE 64
#define NBLK 32
#define MAXB 8
#define P 8
#define ROWS (SQ * HQ)
#define WS_BYTES (mla__flashmla_ws_bytes(ROWS, B + P))

/* One valid pair of calls, then broken by a case. */
typedef struct call {
    mla_runtime *rt;
    mlt_tensor q, k, bt, seq, sched, splits, out, lse, ws, dq, dk, idx;
    mla_get_metadata_args meta;
    mla_flash_with_kvcache_args args;
} call;

static mla_runtime *cpu_runtime(void) {
    mla_runtime *rt = NULL;
    mla_status s = mlt_cpu_runtime("sm_90a", &rt);
    cr_assert(s == MLA_OK && rt, "mla_runtime_create(no_device, sm_90a): %s", mla_last_error());
    return rt;
}

/* kv: 0 bf16, 1 fp16, 2 fp8 */
static void call_init(call *c, mla_runtime *rt, int kv) {
    static const DLDataType qt[3] = {{kDLBfloat, 16, 1}, {kDLFloat, 16, 1}, {MLA_DL_FLOAT8_E4M3FN, 8, 1}};
    int64_t qs[4] = {B, SQ, HQ, 576}, ks[4] = {NBLK, PAGE, HKV, 576}, bts[2] = {B, MAXB};
    int64_t vec[1] = {B}, sch[2] = {P, 8}, spl[1] = {B + 1}, os[4] = {B, SQ, HQ, 512};
    int64_t ls[3] = {B, HQ, SQ}, ws[1] = {(int64_t)WS_BYTES}, one[1] = {1}, idx[3] = {B, SQ, 128};
    memset(c, 0, sizeof *c);
    c->rt = rt;
    mlt_tensor_init(&c->q, 0x1000000, qt[kv], 4, qs, NULL);
    mlt_tensor_init(&c->k, 0x2000000, qt[kv], 4, ks, NULL);
    mlt_tensor_init(&c->bt, 0x3000000, MLT_INT32, 2, bts, NULL);
    mlt_tensor_init(&c->seq, 0x3100000, MLT_INT32, 1, vec, NULL);
    mlt_tensor_init(&c->sched, 0x3200000, MLT_INT32, 2, sch, NULL);
    mlt_tensor_init(&c->splits, 0x3300000, MLT_INT32, 1, spl, NULL);
    mlt_tensor_init(&c->out, 0x4000000, kv == 1 ? MLT_FP16 : MLT_BF16, 4, os, NULL);
    mlt_tensor_init(&c->lse, 0x5000000, MLT_FP32, 3, ls, NULL);
    mlt_tensor_init(&c->ws, 0x6000000, MLT_UINT8, 1, ws, NULL);
    mlt_tensor_init(&c->dq, 0x7000000, MLT_FP32, 1, one, NULL);
    mlt_tensor_init(&c->dk, 0x7000100, MLT_FP32, 1, one, NULL);
    mlt_tensor_init(&c->idx, 0x7100000, MLT_INT32, 3, idx, NULL);
    mla_get_metadata_args_init(&c->meta);
    c->meta.cache_seqlens = &c->seq.t;
    c->meta.num_q_tokens_per_head_k = SQ * HQ / HKV;
    c->meta.num_heads_k = HKV;
    c->meta.tile_scheduler_metadata = &c->sched.t;
    c->meta.num_splits = &c->splits.t;
    mla_flash_with_kvcache_args *a = &c->args;
    mla_flash_with_kvcache_args_init(a);
    a->q = &c->q.t, a->k_cache = &c->k.t, a->block_table = &c->bt.t, a->cache_seqlens = &c->seq.t;
    a->tile_scheduler_metadata = &c->sched.t, a->num_splits = &c->splits.t;
    a->out = &c->out.t, a->softmax_lse = &c->lse.t, a->workspace = &c->ws.t;
    a->causal = 1;
    if (kv == 2) a->descale_q = &c->dq.t, a->descale_k = &c->dk.t;
}

Test(flashmla_args, valid_calls_reach_the_device) {
    mla_runtime *rt = cpu_runtime();
    call c;
    for (int kv = 0; kv < 3; kv++) {
        call_init(&c, rt, kv);
        mla_status s = mla_flash_with_kvcache(rt, &c.args, NULL);
        cr_expect(s == MLA_ERR_NO_DEVICE, "valid decode (kv %d): expected MLA_ERR_NO_DEVICE, got "
                  "%s: %s", kv, mla_status_string(s), mla_last_error());
    }
    call_init(&c, rt, 0);
    mla_status s = mla_get_metadata(rt, &c.meta, NULL);
    cr_expect(s == MLA_ERR_NO_DEVICE, "valid metadata: expected MLA_ERR_NO_DEVICE, got %s: %s",
              mla_status_string(s), mla_last_error());
    c.meta.split_tokens = 256, c.meta.max_splits = B + P + 40;
    s = mla_get_metadata(rt, &c.meta, NULL);
    cr_expect(s == MLA_ERR_NO_DEVICE, "valid batch-invariant metadata: expected "
              "MLA_ERR_NO_DEVICE, got %s: %s", mla_status_string(s), mla_last_error());
    mla_runtime_destroy(rt);
}

/* A broken argument: which case, the status, and two strings the message must contain. */
typedef struct arg_case {
    int id;
    char name[48];
    char want[32];
    char want2[40];
} arg_case;

#define DECODE_CASES(X)                                                                          \
    X(RT_NULL, "runtime NULL", "runtime", "NULL")                                                \
    X(ARGS_SIZE, "args struct_size 8", "struct_size", "init")                                   \
    X(Q_NULL, "q NULL", "q", "NULL")                                                             \
    X(Q_F32, "q float32", "q", "float32")                                                        \
    X(Q_3D, "q 3-D", "q", "dimensions")                                                          \
    X(Q_CPU, "q on the CPU", "q", "CUDA")                                                        \
    X(Q_D512, "q head dim 512", "q", "576")                                                      \
    X(Q_SQ0, "q s_q 0", "q", "s_q")                                                              \
    X(Q_SQ2000, "q s_q 2000", "q", "2000")                                                       \
    X(Q_LAST_STRIDE, "q last stride 2", "q", "unit last stride")                                 \
    X(Q_STRIDE_ODD, "q head stride 580", "q", "stride[2]")                                       \
    X(Q_ALIGN, "q misaligned", "q", "aligned")                                                   \
    X(K_NULL, "k_cache NULL", "k_cache", "NULL")                                                 \
    X(K_FP16, "k_cache float16 with bf16 q", "k_cache", "bfloat16")                              \
    X(K_D512, "k_cache head dim 512", "k_cache", "576")                                          \
    X(K_HKV3, "k_cache h_kv 3 (16 % 3)", "k_cache", "h_kv")                                      \
    X(K_PAGE0, "k_cache page 0", "k_cache", "page_size")                                         \
    X(K_STRIDE, "k_cache token stride 580", "k_cache", "stride[1]")                              \
    X(BT_NULL, "block_table NULL", "block_table", "NULL")                                        \
    X(BT_I64, "block_table int64", "block_table", "int32")                                       \
    X(BT_ROWS, "block_table rows 3", "block_table", "got 3")                                     \
    X(BT_COL, "block_table column stride 2", "block_table", "unit last stride")                  \
    X(SEQ_NULL, "cache_seqlens NULL", "cache_seqlens", "NULL")                                   \
    X(SEQ_5, "cache_seqlens [5]", "cache_seqlens", "got 5")                                      \
    X(SEQ_STRIDE, "cache_seqlens stride 2", "cache_seqlens", "contiguous")                       \
    X(SCHED_NULL, "tile_scheduler_metadata NULL", "tile_scheduler_metadata", "NULL")             \
    X(SCHED_7, "tile_scheduler_metadata [8, 7]", "tile_scheduler_metadata", "got 7")             \
    X(SCHED_0, "tile_scheduler_metadata [0, 8]", "tile_scheduler_metadata", "num_sm_parts")      \
    X(SPLITS_B, "num_splits [b]", "num_splits", "b + 1")                                         \
    X(HDV_256, "head_dim_v 256", "head_dim_v", "got 256")                                        \
    X(SCALE_INF, "softmax_scale inf", "softmax_scale", "inf")                                    \
    X(CAUSAL_2, "causal 2", "causal", "got 2")                                                   \
    X(FP8_FLAG, "is_fp8_kvcache with bf16 q", "is_fp8_kvcache", "sparse")                        \
    X(FP8_FLAG_2, "is_fp8_kvcache 2", "is_fp8_kvcache", "got 2")                                 \
    X(DQ_BF16, "descale_q with bf16 q", "descale_q", "NULL")                                     \
    X(OUT_NULL, "out NULL", "out", "NULL")                                                       \
    X(OUT_FP16, "out float16 with bf16 q", "out", "bfloat16")                                    \
    X(OUT_SHAPE, "out head dim 576", "out", "head_dim_v")                                        \
    X(OUT_H, "out h_q 8", "out", "h_q of q")                                                     \
    X(LSE_NULL, "softmax_lse NULL", "softmax_lse", "NULL")                                       \
    X(LSE_BF16, "softmax_lse bfloat16", "softmax_lse", "float32")                                \
    X(LSE_T, "softmax_lse [b, s_q, h_q]", "softmax_lse", "h_q of q")                             \
    X(LSE_STRIDE, "softmax_lse strided", "softmax_lse", "contiguous")                            \
    X(WS_NULL, "workspace NULL", "workspace", "NULL")                                            \
    X(WS_SMALL, "workspace one byte short", "workspace", "split slots")                          \
    X(WS_ALIGN, "workspace misaligned", "workspace", "256")                                      \
    X(WS_I8, "workspace int8", "workspace", "uint8")

#define CASE_ENUM_(id, name, want, want2) id,
#define CASE_ROW_(id, name, want, want2) {id, name, want, want2},
enum { DECODE_CASES(CASE_ENUM_) N_DECODE_CASES };
static arg_case decode_cases[] = {DECODE_CASES(CASE_ROW_)};

/* Re-initializes a tensor with a new shape (and strides) at the same address. */
static void reshape(mlt_tensor *m, int ndim, const int64_t *shape, const int64_t *strides) {
    mlt_tensor_init(m, (CUdeviceptr)(uintptr_t)m->t.data, m->t.dtype, ndim, shape, strides);
}

static void decode_case_apply(call *c, int id) {
    mla_flash_with_kvcache_args *a = &c->args;
    static const int64_t q3[3] = {B, SQ, HQ}, q512[4] = {B, SQ, HQ, 512}, q0[4] = {B, 0, HQ, 576};
    static const int64_t q2k[4] = {B, 2000, HQ, 576}, qs[4] = {B, SQ, HQ, 576};
    static const int64_t qlast[4] = {SQ * HQ * 1152, HQ * 1152, 1152, 2};
    static const int64_t qodd[4] = {SQ * HQ * 580, HQ * 580, 580, 1};
    static const int64_t k512[4] = {NBLK, PAGE, HKV, 512}, k3[4] = {NBLK, PAGE, 3, 576};
    static const int64_t kp0[4] = {NBLK, 0, HKV, 576}, ks[4] = {NBLK, PAGE, HKV, 576};
    static const int64_t kst[4] = {PAGE * 580 * HKV, 580 * HKV + 4, 576, 1};
    static const int64_t bt3[2] = {3, MAXB}, bts[2] = {B, MAXB}, btcol[2] = {2 * MAXB, 2};
    static const int64_t five[1] = {5}, vec[1] = {B}, two[1] = {2}, s7[2] = {P, 7}, s0[2] = {0, 8};
    static const int64_t spb[1] = {B}, o576[4] = {B, SQ, HQ, 576}, oh8[4] = {B, SQ, 8, 512};
    static const int64_t lst[3] = {B, SQ, HQ}, ls[3] = {B, HQ, SQ}, lstr[3] = {2 * HQ * SQ, 2 * SQ, 1};
    int64_t wss[1] = {(int64_t)WS_BYTES - 1};
    switch (id) {
    case RT_NULL: c->rt = NULL; break;
    case ARGS_SIZE: a->struct_size = 8; break;
    case Q_NULL: a->q = NULL; break;
    case Q_F32: c->q.t.dtype = MLT_FP32; break;
    case Q_3D: reshape(&c->q, 3, q3, NULL); break;
    case Q_CPU: c->q.t.device.device_type = kDLCPU; break;
    case Q_D512: reshape(&c->q, 4, q512, NULL); break;
    case Q_SQ0: reshape(&c->q, 4, q0, NULL); break;
    case Q_SQ2000: reshape(&c->q, 4, q2k, NULL); break;
    case Q_LAST_STRIDE: reshape(&c->q, 4, qs, qlast); break;
    case Q_STRIDE_ODD: reshape(&c->q, 4, qs, qodd); break;
    case Q_ALIGN: c->q.t.byte_offset = 8; break;
    case K_NULL: a->k_cache = NULL; break;
    case K_FP16: c->k.t.dtype = MLT_FP16; break;
    case K_D512: reshape(&c->k, 4, k512, NULL); break;
    case K_HKV3: reshape(&c->k, 4, k3, NULL); break;
    case K_PAGE0: reshape(&c->k, 4, kp0, NULL); break;
    case K_STRIDE: reshape(&c->k, 4, ks, kst); break;
    case BT_NULL: a->block_table = NULL; break;
    case BT_I64: c->bt.t.dtype = (DLDataType){kDLInt, 64, 1}; break;
    case BT_ROWS: reshape(&c->bt, 2, bt3, NULL); break;
    case BT_COL: reshape(&c->bt, 2, bts, btcol); break;
    case SEQ_NULL: a->cache_seqlens = NULL; break;
    case SEQ_5: reshape(&c->seq, 1, five, NULL); break;
    case SEQ_STRIDE: reshape(&c->seq, 1, vec, two); break;
    case SCHED_NULL: a->tile_scheduler_metadata = NULL; break;
    case SCHED_7: reshape(&c->sched, 2, s7, NULL); break;
    case SCHED_0: reshape(&c->sched, 2, s0, NULL); break;
    case SPLITS_B: reshape(&c->splits, 1, spb, NULL); break;
    case HDV_256: a->head_dim_v = 256; break;
    case SCALE_INF: a->softmax_scale = INFINITY; break;
    case CAUSAL_2: a->causal = 2; break;
    case FP8_FLAG: a->is_fp8_kvcache = 1; break;
    case FP8_FLAG_2: a->is_fp8_kvcache = 2; break;
    case DQ_BF16: a->descale_q = &c->dq.t; break;
    case OUT_NULL: a->out = NULL; break;
    case OUT_FP16: c->out.t.dtype = MLT_FP16; break;
    case OUT_SHAPE: reshape(&c->out, 4, o576, NULL); break;
    case OUT_H: reshape(&c->out, 4, oh8, NULL); break;
    case LSE_NULL: a->softmax_lse = NULL; break;
    case LSE_BF16: c->lse.t.dtype = MLT_BF16; break;
    case LSE_T: reshape(&c->lse, 3, lst, NULL); break;
    case LSE_STRIDE: reshape(&c->lse, 3, ls, lstr); break;
    case WS_NULL: a->workspace = NULL; break;
    case WS_SMALL: reshape(&c->ws, 1, wss, NULL); break;
    case WS_ALIGN: c->ws.t.byte_offset = 128; break;
    case WS_I8: c->ws.t.dtype = (DLDataType){kDLInt, 8, 1}; break;
    default: cr_assert_fail("unknown decode case %d", id);
    }
}

/* The status and message of a broken call. */
static void expect_status(const arg_case *c, mla_status s, mla_status want) {
    const char *msg = mla_last_error();
    cr_expect(s == want, "%s: expected %s, got %s (%s)", c->name, mla_status_string(want),
              mla_status_string(s), msg);
    cr_expect(strstr(msg, c->want) != NULL, "%s: message does not name \"%s\": %s", c->name,
              c->want, msg);
    cr_expect(strstr(msg, c->want2) != NULL, "%s: message does not say \"%s\": %s", c->name,
              c->want2, msg);
}

ParameterizedTestParameters(flashmla_args, decode) {
    return cr_make_param_array(arg_case, decode_cases, sizeof decode_cases / sizeof decode_cases[0]);
}

ParameterizedTest(arg_case *ac, flashmla_args, decode) {
    mla_runtime *rt = cpu_runtime();
    call c;
    call_init(&c, rt, 0);
    decode_case_apply(&c, ac->id);
    expect_status(ac, mla_flash_with_kvcache(c.rt, &c.args, NULL), MLA_ERR_INVALID_ARGUMENT);
    mla_runtime_destroy(rt);
}

/* ---- fp8 and the sparse arguments -------------------------------------------------------------- */

Test(flashmla_args, fp8_needs_both_descales_of_shape_1) {
    mla_runtime *rt = cpu_runtime();
    call c;
    static const int64_t two[1] = {2};
    const char *names[4] = {"descale_q", "descale_k", "descale_q", "descale_k"};
    for (int v = 0; v < 4; v++) {
        call_init(&c, rt, 2);
        if (v == 0) c.args.descale_q = NULL;
        if (v == 1) c.args.descale_k = NULL;
        if (v == 2) reshape(&c.dq, 1, two, NULL);
        if (v == 3) c.dk.t.dtype = MLT_BF16;
        mla_status s = mla_flash_with_kvcache(rt, &c.args, NULL);
        cr_expect(s == MLA_ERR_INVALID_ARGUMENT && strstr(mla_last_error(), names[v]),
                  "fp8 variant %d: expected MLA_ERR_INVALID_ARGUMENT naming %s, got %s: %s", v,
                  names[v], mla_status_string(s), mla_last_error());
    }
    call_init(&c, rt, 2);
    c.k.t.dtype = MLT_UINT8;   /* raw e4m3 bytes are accepted */
    c.q.t.dtype = MLT_UINT8;
    mla_status s = mla_flash_with_kvcache(rt, &c.args, NULL);
    cr_expect(s == MLA_ERR_NO_DEVICE, "fp8 as uint8: expected MLA_ERR_NO_DEVICE, got %s: %s",
              mla_status_string(s), mla_last_error());
    call_init(&c, rt, 2);
    c.out.t.dtype = MLT_FP16;
    s = mla_flash_with_kvcache(rt, &c.args, NULL);
    cr_expect(s == MLA_ERR_INVALID_ARGUMENT && strstr(mla_last_error(), "out"),
              "fp8 with float16 out: expected MLA_ERR_INVALID_ARGUMENT naming out, got %s: %s",
              mla_status_string(s), mla_last_error());
    mla_runtime_destroy(rt);
}

Test(flashmla_args, indices_select_the_sparse_decode) {
    mla_runtime *rt = cpu_runtime();
    call c;
    call_init(&c, rt, 0);
    c.args.causal = 0;
    c.args.indices = &c.idx.t;
    mla_status s = mla_flash_with_kvcache(rt, &c.args, NULL);
    cr_expect(s == MLA_ERR_INVALID_ARGUMENT && strstr(mla_last_error(), "k_cache"), "indices with "
              "a bfloat16 k_cache: expected the sparse decode's MLA_ERR_INVALID_ARGUMENT naming "
              "k_cache, got %s: %s", mla_status_string(s), mla_last_error());
    call_init(&c, rt, 0);
    c.meta.topk = 128;
    s = mla_get_metadata(rt, &c.meta, NULL);
    cr_expect(s == MLA_ERR_NO_DEVICE, "topk 128: expected the metadata to reach the device "
              "(MLA_ERR_NO_DEVICE), got %s: %s", mla_status_string(s), mla_last_error());
    mla_runtime_destroy(rt);
}

/* ---- mla_get_metadata ----------------------------------------------------------------------- */

#define META_CASES(X)                                                                            \
    X(M_RT_NULL, "runtime NULL", "runtime", "NULL")                                              \
    X(M_SIZE, "args struct_size 0", "struct_size", "init")                                      \
    X(M_SEQ_NULL, "cache_seqlens NULL", "cache_seqlens", "NULL")                                 \
    X(M_SEQ_F32, "cache_seqlens float32", "cache_seqlens", "int32")                              \
    X(M_SEQ_0, "cache_seqlens [0]", "cache_seqlens", "got 0")                                    \
    X(M_SEQ_STRIDE, "cache_seqlens stride 2", "cache_seqlens", "contiguous")                     \
    X(M_HK_0, "num_heads_k 0", "num_heads_k", "got 0")                                           \
    X(M_QT_0, "num_q_tokens_per_head_k 0", "num_q_tokens_per_head_k", "got 0")                   \
    X(M_HQ_NEG, "num_heads_q -1", "num_heads_q", "got -1")                                       \
    X(M_FP8_3, "is_fp8_kvcache 3", "is_fp8_kvcache", "got 3")                                    \
    X(M_TOPK_NEG, "topk -1", "topk", "got -1")                                                   \
    X(M_SPLIT_100, "split_tokens 100", "split_tokens", "got 100")                                \
    X(M_MAXS_SMALL, "max_splits below b + parts", "max_splits", "b + num_sm_parts")              \
    X(M_SCHED_NULL, "tile_scheduler_metadata NULL", "tile_scheduler_metadata", "NULL")           \
    X(M_SCHED_9, "tile_scheduler_metadata [8, 9]", "tile_scheduler_metadata", "got 9")           \
    X(M_SCHED_BIG, "tile_scheduler_metadata [70000, 8]", "tile_scheduler_metadata", "70000")     \
    X(M_SCHED_STRIDE, "tile_scheduler_metadata strided", "tile_scheduler_metadata", "contiguous") \
    X(M_SPLITS_NULL, "num_splits NULL", "num_splits", "NULL")                                    \
    X(M_SPLITS_B, "num_splits [b]", "num_splits", "b + 1")

enum { META_CASES(CASE_ENUM_) N_META_CASES };
static arg_case meta_cases[] = {META_CASES(CASE_ROW_)};

static void meta_case_apply(call *c, int id) {
    mla_get_metadata_args *m = &c->meta;
    static const int64_t zero[1] = {0}, vec[1] = {B}, two[1] = {2}, s9[2] = {P, 9};
    static const int64_t big[2] = {70000, 8}, sch[2] = {P, 8}, schst[2] = {16, 1}, spb[1] = {B};
    switch (id) {
    case M_RT_NULL: c->rt = NULL; break;
    case M_SIZE: m->struct_size = 0; break;
    case M_SEQ_NULL: m->cache_seqlens = NULL; break;
    case M_SEQ_F32: c->seq.t.dtype = MLT_FP32; break;
    case M_SEQ_0: reshape(&c->seq, 1, zero, NULL); break;
    case M_SEQ_STRIDE: reshape(&c->seq, 1, vec, two); break;
    case M_HK_0: m->num_heads_k = 0; break;
    case M_QT_0: m->num_q_tokens_per_head_k = 0; break;
    case M_HQ_NEG: m->num_heads_q = -1; break;
    case M_FP8_3: m->is_fp8_kvcache = 3; break;
    case M_TOPK_NEG: m->topk = -1; break;
    case M_SPLIT_100: m->split_tokens = 100; break;
    case M_MAXS_SMALL: m->split_tokens = 64, m->max_splits = B + P - 1; break;
    case M_SCHED_NULL: m->tile_scheduler_metadata = NULL; break;
    case M_SCHED_9: reshape(&c->sched, 2, s9, NULL); break;
    case M_SCHED_BIG: reshape(&c->sched, 2, big, NULL); break;
    case M_SCHED_STRIDE: reshape(&c->sched, 2, sch, schst); break;
    case M_SPLITS_NULL: m->num_splits = NULL; break;
    case M_SPLITS_B: reshape(&c->splits, 1, spb, NULL); break;
    default: cr_assert_fail("unknown metadata case %d", id);
    }
}

ParameterizedTestParameters(flashmla_args, metadata) {
    return cr_make_param_array(arg_case, meta_cases, sizeof meta_cases / sizeof meta_cases[0]);
}

ParameterizedTest(arg_case *ac, flashmla_args, metadata) {
    mla_runtime *rt = cpu_runtime();
    call c;
    call_init(&c, rt, 0);
    meta_case_apply(&c, ac->id);
    expect_status(ac, mla_get_metadata(c.rt, &c.meta, NULL), MLA_ERR_INVALID_ARGUMENT);
    mla_runtime_destroy(rt);
}

/* ---- the shape helpers -------------------------------------------------------------------------- */

Test(flashmla_args, shape_helpers) {
    mla_runtime *rt = cpu_runtime();
    call c;
    call_init(&c, rt, 0);
    int64_t sched[2] = {0, 0}, splits[1] = {0};
    mla_status s = mla_get_metadata_shape(rt, &c.meta, sched, splits);
    cr_expect(s == MLA_ERR_NO_DEVICE && strstr(mla_last_error(), "num_sm_parts"), "shape without "
              "a device and num_sm_parts 0: expected MLA_ERR_NO_DEVICE, got %s: %s",
              mla_status_string(s), mla_last_error());
    c.meta.num_sm_parts = 33;
    s = mla_get_metadata_shape(rt, &c.meta, sched, splits);
    cr_expect(s == MLA_OK && sched[0] == 33 && sched[1] == 8 && splits[0] == B + 1,
              "metadata shape: got %s [%lld, %lld] [%lld], expected [33, 8] [%d]",
              mla_status_string(s), (long long)sched[0], (long long)sched[1],
              (long long)splits[0], B + 1);
    cr_expect(mla__flashmla_num_sm_parts(132, 1, 128) == 66 &&
                  mla__flashmla_num_sm_parts(132, 1, 16) == 132 &&
                  mla__flashmla_num_sm_parts(132, 8, 1024) == 1,
              "FlashMLA's num_sm_parts rule (132 SMs): 66 for h_q 128, 132 for h_q 16, 1 at least");
    mla_flash_with_kvcache_sizes sz;
    s = mla_flash_with_kvcache_shape(&c.args, 0, &sz);
    cr_expect(s == MLA_OK && sz.out[0] == B && sz.out[1] == SQ && sz.out[2] == HQ &&
                  sz.out[3] == 512 && sz.softmax_lse[0] == B && sz.softmax_lse[1] == HQ &&
                  sz.softmax_lse[2] == SQ && sz.workspace_bytes == WS_BYTES &&
                  sz.max_splits == B + P,
              "decode sizes: got %s out [%lld, %lld, %lld, %lld] lse [%lld, %lld, %lld] "
              "workspace %zu (%d slots), expected workspace %zu", mla_status_string(s),
              (long long)sz.out[0], (long long)sz.out[1], (long long)sz.out[2],
              (long long)sz.out[3], (long long)sz.softmax_lse[0], (long long)sz.softmax_lse[1],
              (long long)sz.softmax_lse[2], sz.workspace_bytes, sz.max_splits, (size_t)WS_BYTES);
    s = mla_flash_with_kvcache_shape(&c.args, 100, &sz);
    cr_expect(s == MLA_OK && sz.workspace_bytes == mla__flashmla_ws_bytes(ROWS, 100) &&
                  sz.max_splits == 100, "decode sizes with max_splits 100: %s", mla_last_error());
    s = mla_flash_with_kvcache_shape(&c.args, B + P - 1, &sz);
    cr_expect(s == MLA_ERR_INVALID_ARGUMENT && strstr(mla_last_error(), "max_splits"),
              "max_splits below b + parts: expected MLA_ERR_INVALID_ARGUMENT, got %s",
              mla_status_string(s));
    mla_runtime_destroy(rt);
}
