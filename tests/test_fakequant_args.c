/* Argument checks of mla_attention_decode, its shape helper and mla_fakequant_qdq_rows (spec
 * §4 messages). They run without a GPU: a no_device runtime and fake device addresses, so every
 * check must fire before any device access. Each case breaks one argument of a valid call and
 * expects MLA_ERR_INVALID_ARGUMENT (or MLA_ERR_NOT_SUPPORTED) with a message containing the
 * expected text; the valid call itself must reach the device and fail with MLA_ERR_NO_DEVICE. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "runtime/fakequant_kinds.h"
#include "runtime/flashmla_kinds.h"
#include "runtime/internal.h"
#include "util/gpu.h"

#define B 3
#define H 16
#define PAGE 32
#define NBLK 20
#define MAXB 6

typedef struct call {
    mlt_tensor q, c, bt, len, out, lse, ws;
    mla_attention_decode_args a;
} call;

static mla_runtime *cpu_runtime(void) {
    mla_runtime *rt = NULL;
    cr_assert(mlt_cpu_runtime("sm_90a", &rt) == MLA_OK && rt, "runtime: %s", mla_last_error());
    return rt;
}

static void call_init(call *c) {
    int64_t qs[3] = {B, H, 576}, cs[3] = {NBLK, PAGE, 576}, bs[2] = {B, MAXB}, ls[1] = {B};
    int64_t os[3] = {B, H, 512}, lse[2] = {B, H};
    int64_t ws[1] = {(int64_t)mla__fq_decode_ws_bytes(B, H, 32, 512, 64)};
    memset(c, 0, sizeof *c);
    mlt_tensor_init(&c->q, 0x1000000, MLT_BF16, 3, qs, NULL);
    mlt_tensor_init(&c->c, 0x2000000, MLT_BF16, 3, cs, NULL);
    mlt_tensor_init(&c->bt, 0x3000000, MLT_INT32, 2, bs, NULL);
    mlt_tensor_init(&c->len, 0x3100000, MLT_INT32, 1, ls, NULL);
    mlt_tensor_init(&c->out, 0x4000000, MLT_BF16, 3, os, NULL);
    mlt_tensor_init(&c->lse, 0x5000000, MLT_FP32, 2, lse, NULL);
    mlt_tensor_init(&c->ws, 0x6000000, MLT_UINT8, 1, ws, NULL);
    mla_attention_decode_args_init(&c->a);
    c->a.q = &c->q.t, c->a.latent_cache = &c->c.t, c->a.block_table = &c->bt.t;
    c->a.b_seq_len = &c->len.t, c->a.out = &c->out.t, c->a.lse = &c->lse.t;
    c->a.workspace = &c->ws.t, c->a.softmax_scale = 0.1f;
}

Test(fakequant_args, valid_calls_reach_the_device) {
    mla_runtime *rt = cpu_runtime();
    call c;
    call_init(&c);
    mla_status s = mla_attention_decode(rt, &c.a, NULL);
    cr_expect(s == MLA_ERR_NO_DEVICE, "valid decode: expected MLA_ERR_NO_DEVICE, got %s: %s",
              mla_status_string(s), mla_last_error());
    c.a.k_qdq = c.a.v_qdq = c.a.p_qdq = MLA_QDQ_NVFP4, c.a.k_qdq_amax = 2.0f;
    s = mla_attention_decode(rt, &c.a, NULL);
    cr_expect(s == MLA_ERR_NO_DEVICE, "valid nvfp4 decode: expected MLA_ERR_NO_DEVICE, got %s: %s",
              mla_status_string(s), mla_last_error());
    mla_runtime_destroy(rt);
}

enum {
    SPLITS0, SPLITS33, MODE3, KAMAX_INF, VAMAX_NEG, PAMAX_0, SCALE_NAN, PAGE_MISMATCH,
    NVFP4_RANK, Q_FEAT, CACHE_FEAT, BT_BATCH, LEN_BATCH, Q_DTYPE, CACHE_FP32, OUT_DTYPE,
    OUT_SHAPE, LSE_MISSING, WS_SMALL, RANK_BIG, N_CASES
};
static const char *const wants[N_CASES][2] = {
    {"num_kv_splits", "[1, 32]"}, {"num_kv_splits", "33"}, {"k_qdq must be one of", "3"},
    {"k_qdq_amax", "finite positive"}, {"v_qdq_amax", "finite positive"},
    {"p_qdq_amax", "finite positive"}, {"softmax_scale", "required"},
    {"page_size", "latent_cache.shape[1]"}, {"divisible by 16", "kv_lora_rank"},
    {"q", "kv_lora_rank + qk_rope_head_dim"}, {"latent_cache", "kv_lora_rank + qk_rope_head_dim"},
    {"block_table", "batch"}, {"b_seq_len", "batch"}, {"q", "float16"},
    {"latent_cache", "bfloat16 or float16"}, {"out", "out_dtype"}, {"out", "shape[2]"},
    {"lse", "NULL"}, {"workspace", "at least"}, {"kv_lora_rank", "supported"},
};

static void break_case(int id, call *c) {
    mla_attention_decode_args *a = &c->a;
    switch (id) {
    case SPLITS0: a->num_kv_splits = 0; break;
    case SPLITS33: a->num_kv_splits = 33; break;
    case MODE3: a->k_qdq = 3; break;
    case KAMAX_INF: a->k_qdq = MLA_QDQ_FP8, a->k_qdq_amax = INFINITY; break;
    case VAMAX_NEG: a->v_qdq = MLA_QDQ_NVFP4, a->v_qdq_amax = -1; break;
    case PAMAX_0: a->p_qdq = MLA_QDQ_FP8, a->p_qdq_amax = 0; break;
    case SCALE_NAN: a->softmax_scale = NAN; break;
    case PAGE_MISMATCH: a->page_size = 64; break;
    case NVFP4_RANK: a->k_qdq = MLA_QDQ_NVFP4, a->kv_lora_rank = 504, a->qk_rope_head_dim = 72; break;
    case Q_FEAT: c->q.shape[2] = 512; break;
    case CACHE_FEAT: c->c.shape[2] = 512; break;
    case BT_BATCH: c->bt.shape[0] = B + 1; break;
    case LEN_BATCH: c->len.shape[0] = B - 1; break;
    case Q_DTYPE: c->q.t.dtype = (DLDataType){kDLFloat, 16, 1}; break;
    case CACHE_FP32: c->c.t.dtype = MLT_FP32; break;
    case OUT_DTYPE: a->out_dtype = MLT_FP32; break;
    case OUT_SHAPE: c->out.shape[2] = 256; break;
    case LSE_MISSING: a->lse = NULL; break;
    case WS_SMALL: c->ws.shape[0] = 1024; break;
    case RANK_BIG: a->kv_lora_rank = 640, a->qk_rope_head_dim = 0; break;
    }
}

Test(fakequant_args, every_error_path) {
    mla_runtime *rt = cpu_runtime();
    for (int id = 0; id < N_CASES; id++) {
        call c;
        call_init(&c);
        break_case(id, &c);
        mla_status s = mla_attention_decode(rt, &c.a, NULL);
        mla_status want = id == RANK_BIG ? MLA_ERR_NOT_SUPPORTED : MLA_ERR_INVALID_ARGUMENT;
        const char *m = mla_last_error();
        cr_expect(s == want, "case %d (%s): expected %s, got %s: %s", id, wants[id][0],
                  mla_status_string(want), mla_status_string(s), m);
        cr_expect(strstr(m, wants[id][0]) && strstr(m, wants[id][1]), "case %d: message \"%s\" "
                  "lacks \"%s\" / \"%s\"", id, m, wants[id][0], wants[id][1]);
    }
    mla_runtime_destroy(rt);
}

Test(fakequant_args, shape_helper) {
    call c;
    call_init(&c);
    mla_attention_decode_sizes sz;
    cr_assert(mla_attention_decode_shape(&c.a, &sz) == MLA_OK, "shape: %s", mla_last_error());
    cr_expect(sz.out[0] == B && sz.out[1] == H && sz.out[2] == 512 && sz.lse[1] == H,
              "shape: out [%lld, %lld, %lld]", (long long)sz.out[0], (long long)sz.out[1],
              (long long)sz.out[2]);
    cr_expect(sz.workspace_bytes == mla__fq_decode_ws_bytes(B, H, 32, 512, 64),
              "shape: workspace %zu", sz.workspace_bytes);
    /* room for the fake-quant kernels' 32 splits and for the dense path's B * 33 FlashMLA split
     * slots beside its schedule */
    cr_expect(sz.workspace_bytes >= mla__fq_ws_bytes((long long)B * H * 32, 512) &&
              sz.workspace_bytes >= mla__flashmla_ws_bytes(H, (long long)B * 33) +
              MLA__FQ_DENSE_MAX_PARTS * 32 + (B + 1) * 4 + B * H * 4,
              "shape: workspace %zu too small for a kernel", sz.workspace_bytes);
    c.a.num_kv_splits = 0;
    cr_expect(mla_attention_decode_shape(&c.a, &sz) == MLA_ERR_INVALID_ARGUMENT,
              "shape with num_kv_splits 0 must fail");
}

Test(fakequant_args, qdq_rows_errors) {
    mla_runtime *rt = cpu_runtime();
    int64_t s[2] = {4, 24};
    mlt_tensor x, o;
    mlt_tensor_init(&x, 0x1000000, MLT_FP32, 2, s, NULL);
    mlt_tensor_init(&o, 0x2000000, MLT_FP32, 2, s, NULL);
    mla_fakequant_qdq_args a;
    mla_fakequant_qdq_args_init(&a);
    a.x = &x.t, a.out = &o.t;
    mla_status st = mla_fakequant_qdq_rows(rt, &a, NULL);
    cr_expect(st == MLA_ERR_INVALID_ARGUMENT && strstr(mla_last_error(), "divisible by 16"),
              "nvfp4 rows of 24: %s", mla_last_error());
    a.mode = MLA_QDQ_FP8;
    st = mla_fakequant_qdq_rows(rt, &a, NULL);
    cr_expect(st == MLA_ERR_NO_DEVICE, "valid fp8 qdq: expected MLA_ERR_NO_DEVICE, got %s: %s",
              mla_status_string(st), mla_last_error());
    a.amax = -2.0f;
    st = mla_fakequant_qdq_rows(rt, &a, NULL);
    cr_expect(st == MLA_ERR_INVALID_ARGUMENT && strstr(mla_last_error(), "finite positive"),
              "amax -2: %s", mla_last_error());
    a.amax = NAN, a.mode = 0;
    st = mla_fakequant_qdq_rows(rt, &a, NULL);
    cr_expect(st == MLA_ERR_INVALID_ARGUMENT && strstr(mla_last_error(), "must be one of"),
              "mode 0: %s", mla_last_error());
    mla_runtime_destroy(rt);
}
