/* Argument checks of mla_attention_plan, mla_workspace_size, mla_workspace and mla_workspace_init.
 *
 * They run without a GPU: the runtime is created with no_device (arch sm_90a) and the tensors
 * hold fake device addresses, so every check must fire before any device access. Each case
 * breaks one argument of a valid call and expects MLA_ERR_INVALID_ARGUMENT with a message that
 * names the argument; the valid call itself must reach the device and fail with
 * MLA_ERR_NO_DEVICE (which proves the cases differ from it only by the broken argument). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <string.h>

#include "runtime/internal.h"
#include "util/gpu.h"

#define T_OK 7
#define TOPK_OK 128
#define KV_ADDR 0x100000
#define LEN_ADDR 0x200000
#define C128_ADDR 0x300000
#define WS_ADDR 0x400000

/* One mla_attention_plan call, built valid and then broken by a case. */
typedef struct plan_call {
    mla_runtime *rt;
    mlt_tensor kv, len, c128, ws;
    const DLTensor *kv_p, *len_p, *c128_p, *ws_p;
    int page_size, step;
} plan_call;

static void plan_call_init(plan_call *a, mla_runtime *rt) {
    int64_t kv_shape[2] = {T_OK, TOPK_OK}, vec[1] = {T_OK}, ws[1] = {MLA__DSV4_PLAN_END};
    memset(a, 0, sizeof *a);
    a->rt = rt;
    mlt_tensor_init(&a->kv, KV_ADDR, MLT_INT32, 2, kv_shape, NULL);
    mlt_tensor_init(&a->len, LEN_ADDR, MLT_INT32, 1, vec, NULL);
    mlt_tensor_init(&a->c128, C128_ADDR, MLT_INT32, 1, vec, NULL);
    mlt_tensor_init(&a->ws, WS_ADDR, MLT_UINT8, 1, ws, NULL);
    a->kv_p = &a->kv.t, a->len_p = &a->len.t, a->c128_p = &a->c128.t, a->ws_p = &a->ws.t;
    a->page_size = 128;
    a->step = 1;
}

static mla_status plan_call_run(plan_call *a, mla_tensor *plan) {
    return mla_attention_plan(a->rt, a->kv_p, a->len_p, a->page_size, a->step, a->c128_p, a->ws_p,
                              NULL, plan);
}

static mla_runtime *cpu_runtime(void) {
    mla_runtime *rt = NULL;
    mla_status s = mlt_cpu_runtime("sm_90a", &rt);
    cr_assert(s == MLA_OK && rt, "mla_runtime_create(no_device, sm_90a): %s", mla_last_error());
    return rt;
}

Test(dsv4_plan_args, valid_plan_reaches_the_device) {
    mla_runtime *rt = cpu_runtime();
    plan_call a;
    for (int v = 0; v < 4; v++) {
        plan_call_init(&a, rt);
        if (v & 1) a.len_p = NULL;
        if (v & 2) a.c128_p = NULL, a.step = -1;
        mla_tensor plan;
        mla_status s = plan_call_run(&a, &plan);
        cr_expect(s == MLA_ERR_NO_DEVICE, "valid plan call (variant %d) on a no-device runtime: "
                  "expected MLA_ERR_NO_DEVICE, got %s: %s", v, mla_status_string(s),
                  mla_last_error());
    }
    mla_runtime_destroy(rt);
}

/* A broken argument: which case, and two strings the message must contain. */
typedef struct arg_case {
    int id;
    char name[40];
    char want[32];   /* the argument's name */
    char want2[32];  /* the offending value or the expectation */
} arg_case;

/* id, case name, argument named in the message, second string in the message. */
#define PLAN_CASES(X)                                                                            \
    X(RT_NULL, "runtime NULL", "runtime", "NULL")                                                \
    X(KV_NULL, "kv_indices NULL", "kv_indices", "NULL")                                          \
    X(KV_F32, "kv_indices float32", "kv_indices", "int32")                                       \
    X(KV_I64, "kv_indices int64", "kv_indices", "int64")                                         \
    X(KV_1D, "kv_indices 1-D", "kv_indices", "dimensions")                                       \
    X(KV_3D, "kv_indices 3-D", "kv_indices", "dimensions")                                       \
    X(KV_CPU, "kv_indices on the CPU", "kv_indices", "CUDA")                                     \
    X(KV_DEV1, "kv_indices on device 1", "kv_indices", "device 1")                              \
    X(KV_T0, "kv_indices T=0", "kv_indices", "got 0")                                            \
    X(KV_T641, "kv_indices T=641", "kv_indices", "641")                                          \
    X(KV_TOPK0, "kv_indices topk=0", "kv_indices", "topk")                                       \
    X(KV_COL2, "kv_indices column stride 2", "kv_indices", "column stride")                      \
    X(KV_ALIGN, "kv_indices misaligned", "kv_indices", "aligned")                                \
    X(LEN_I64, "topk_lengths int64", "topk_lengths", "int32")                                    \
    X(LEN_2D, "topk_lengths 2-D", "topk_lengths", "dimensions")                                  \
    X(LEN_6, "topk_lengths shape [6]", "topk_lengths", "got 6")                                  \
    X(LEN_STRIDE, "topk_lengths stride 2", "topk_lengths", "contiguous")                         \
    X(LEN_CPU, "topk_lengths on the CPU", "topk_lengths", "CUDA")                                \
    X(PAGE_0, "page_size 0", "page_size", "got 0")                                               \
    X(PAGE_NEG, "page_size -128", "page_size", "got -128")                                       \
    X(PAGE_100, "page_size 100", "page_size", "got 100")                                         \
    X(PAGE_BIG, "page_size 2^21", "page_size", "got 2097152")                                    \
    X(STEP_0, "kv_run_step 0", "kv_run_step", "got 0")                                           \
    X(STEP_2, "kv_run_step 2", "kv_run_step", "got 2")                                           \
    X(STEP_M2, "kv_run_step -2", "kv_run_step", "got -2")                                        \
    X(C128_F32, "c128_attn_len float32", "c128_attn_len", "int32")                               \
    X(C128_8, "c128_attn_len shape [8]", "c128_attn_len", "got 8")                               \
    X(C128_STRIDE, "c128_attn_len stride 2", "c128_attn_len", "contiguous")                      \
    X(WS_NULL, "workspace NULL", "workspace", "NULL")                                            \
    X(WS_I8, "workspace int8", "workspace", "uint8")                                             \
    X(WS_2D, "workspace 2-D", "workspace", "dimensions")                                         \
    X(WS_SMALL, "workspace too small", "workspace", "133119")                                    \
    X(WS_ALIGN, "workspace misaligned", "workspace", "256")                                      \
    X(WS_STRIDE, "workspace stride 2", "workspace", "contiguous")                                \
    X(WS_CPU, "workspace on the CPU", "workspace", "CUDA")

#define CASE_ENUM_(id, name, want, want2) id,
#define CASE_ROW_(id, name, want, want2) {id, name, want, want2},
enum { PLAN_CASES(CASE_ENUM_) };
static arg_case plan_cases[] = {PLAN_CASES(CASE_ROW_)};

/* Re-initializes a tensor with a new shape (and strides) at the same address; shape and strides
 * must not point into *m. */
static void reshape(mlt_tensor *m, int ndim, const int64_t *shape, const int64_t *strides) {
    mlt_tensor_init(m, (CUdeviceptr)(uintptr_t)m->t.data, m->t.dtype, ndim, shape, strides);
}

/* Breaks the argument a case names. */
static void plan_case_apply(plan_call *a, int id) {
    static const int64_t col2[2] = {2 * TOPK_OK, 2}, stride2[1] = {2}, vec[1] = {T_OK};
    static const int64_t kv2[2] = {T_OK, TOPK_OK};
    static const int64_t kv3[3] = {T_OK, TOPK_OK, 1}, six[1] = {6}, eight[1] = {8};
    static const int64_t len2[2] = {T_OK, 1}, ws2[2] = {MLA__DSV4_PLAN_END, 1};
    static const int64_t ws_small[1] = {MLA__DSV4_PLAN_END - 1};
    static const int64_t ws_long[1] = {2 * MLA__DSV4_PLAN_END};
    switch (id) {
    case RT_NULL: a->rt = NULL; break;
    case KV_NULL: a->kv_p = NULL; break;
    case KV_F32: a->kv.t.dtype = MLT_FP32; break;
    case KV_I64: a->kv.t.dtype = (DLDataType){kDLInt, 64, 1}; break;
    case KV_1D: a->kv.t.ndim = 1; break;
    case KV_3D: reshape(&a->kv, 3, kv3, NULL); break;
    case KV_CPU: a->kv.t.device.device_type = kDLCPU; break;
    case KV_DEV1: a->kv.t.device.device_id = 1; break;
    case KV_T0: a->kv.shape[0] = 0; break;
    case KV_T641: a->kv.shape[0] = 641; break;
    case KV_TOPK0: a->kv.shape[1] = 0; break;
    case KV_COL2: reshape(&a->kv, 2, kv2, col2); break;
    case KV_ALIGN: a->kv.t.byte_offset = 2; break;
    case LEN_I64: a->len.t.dtype = (DLDataType){kDLInt, 64, 1}; break;
    case LEN_2D: reshape(&a->len, 2, len2, NULL); break;
    case LEN_6: reshape(&a->len, 1, six, NULL); break;
    case LEN_STRIDE: reshape(&a->len, 1, vec, stride2); break;
    case LEN_CPU: a->len.t.device.device_type = kDLCPU; break;
    case PAGE_0: a->page_size = 0; break;
    case PAGE_NEG: a->page_size = -128; break;
    case PAGE_100: a->page_size = 100; break;
    case PAGE_BIG: a->page_size = 1 << 21; break;
    case STEP_0: a->step = 0; break;
    case STEP_2: a->step = 2; break;
    case STEP_M2: a->step = -2; break;
    case C128_F32: a->c128.t.dtype = MLT_FP32; break;
    case C128_8: reshape(&a->c128, 1, eight, NULL); break;
    case C128_STRIDE: reshape(&a->c128, 1, vec, stride2); break;
    case WS_NULL: a->ws_p = NULL; break;
    case WS_I8: a->ws.t.dtype = (DLDataType){kDLInt, 8, 1}; break;
    case WS_2D: reshape(&a->ws, 2, ws2, NULL); break;
    case WS_SMALL: reshape(&a->ws, 1, ws_small, NULL); break;
    case WS_ALIGN: a->ws.t.byte_offset = 128; break;
    case WS_STRIDE: reshape(&a->ws, 1, ws_long, stride2); break;
    case WS_CPU: a->ws.t.device.device_type = kDLCPU; break;
    default: cr_assert_fail("unknown plan case %d", id);
    }
}

ParameterizedTestParameters(dsv4_plan_args, plan) {
    return cr_make_param_array(arg_case, plan_cases, sizeof plan_cases / sizeof plan_cases[0]);
}

/* The status and message of a broken call. */
static void expect_invalid(const arg_case *c, mla_status s) {
    const char *msg = mla_last_error();
    cr_expect(s == MLA_ERR_INVALID_ARGUMENT, "%s: expected MLA_ERR_INVALID_ARGUMENT, got %s (%s)",
              c->name, mla_status_string(s), msg);
    cr_expect(strstr(msg, c->want) != NULL, "%s: message does not name \"%s\": %s", c->name,
              c->want, msg);
    cr_expect(strstr(msg, c->want2) != NULL, "%s: message does not say \"%s\": %s", c->name,
              c->want2, msg);
}

ParameterizedTest(arg_case *c, dsv4_plan_args, plan) {
    mla_runtime *rt = cpu_runtime();
    plan_call a;
    plan_call_init(&a, rt);
    plan_case_apply(&a, c->id);
    mla_tensor plan;
    memset(&plan, 0xAB, sizeof plan);
    expect_invalid(c, plan_call_run(&a, &plan));
    cr_expect(plan.shape[0] == (int64_t)0xABABABABABABABABull, "%s: the plan view was written "
              "by a failed call", c->name);
    mla_runtime_destroy(rt);
}

/* ---- mla_workspace_size, mla_workspace, mla_workspace_init ---------------------------------- */

/* The four weights of a workspace call (DSV4-Flash: H 4096, G 8), built valid, then broken. */
typedef struct ws_call {
    mlt_tensor w[4]; /* wq_a, wkv, wo_a, wo_b */
    const DLTensor *p[4];
    int max_tokens;
} ws_call;

static void ws_call_init(ws_call *a, int64_t H, int64_t G) {
    int64_t s[4][2] = {{1024, H}, {512, H}, {2 * H, 32768 / G}, {H, 2 * H}};
    memset(a, 0, sizeof *a);
    for (int i = 0; i < 4; i++) {
        mlt_tensor_init(&a->w[i], 0x100000 * (i + 1), MLT_E4M3, 2, s[i], NULL);
        a->p[i] = &a->w[i].t;
    }
    a->max_tokens = 640;
}

static mla_status ws_call_size(const ws_call *a, size_t *bytes) {
    return mla_workspace_size(a->max_tokens, a->p[0], a->p[1], a->p[2], a->p[3], bytes);
}

#define WS_CASES(X)                                                                              \
    X(MAXT_0, "max_tokens 0", "max_tokens", "got 0")                                             \
    X(MAXT_641, "max_tokens 641", "max_tokens", "641")                                           \
    X(BYTES_NULL, "bytes NULL", "bytes", "NULL")                                                 \
    X(QA_NULL, "wq_a_weight NULL", "wq_a_weight", "NULL")                                        \
    X(KV_W_NULL, "wkv_weight NULL", "wkv_weight", "NULL")                                        \
    X(OA_NULL, "wo_a_weight NULL", "wo_a_weight", "NULL")                                        \
    X(OB_NULL, "wo_b_weight NULL", "wo_b_weight", "NULL")                                        \
    X(QA_BF16, "wq_a_weight bfloat16", "wq_a_weight", "float8_e4m3fn")                           \
    X(KV_W_I8, "wkv_weight int8", "wkv_weight", "float8_e4m3fn")                                 \
    X(OB_E5M2, "wo_b_weight float8_e5m2", "wo_b_weight", "float8_e5m2")                          \
    X(QA_1D, "wq_a_weight 1-D", "wq_a_weight", "dimensions")                                     \
    X(OA_3D, "wo_a_weight 3-D", "wo_a_weight", "dimensions")                                     \
    X(QA_CPU, "wq_a_weight on the CPU", "wq_a_weight", "CUDA")                                   \
    X(KV_W_DEV1, "wkv_weight on device 1", "wkv_weight", "cuda:1")                               \
    X(QA_ROWS, "wq_a_weight rows 1000", "wq_a_weight", "got 1000")                               \
    X(H_4000, "H 4000", "wq_a_weight", "got 4000")                                               \
    X(H_0, "H 0", "wq_a_weight", "got 0")                                                        \
    X(KV_W_ROWS, "wkv_weight rows 511", "wkv_weight", "got 511")                                 \
    X(KV_W_H, "wkv_weight H 2048", "wkv_weight", "got 2048")                                     \
    X(OA_ROWS, "wo_a_weight rows 4096", "wo_a_weight", "got 4096")                               \
    X(OA_K3000, "wo_a_weight K 3000", "wo_a_weight", "got 3000")                                 \
    X(OA_K1, "wo_a_weight K 1", "wo_a_weight", "groups")                                         \
    X(OB_ROWS, "wo_b_weight rows 8192", "wo_b_weight", "got 8192")                               \
    X(OB_COLS, "wo_b_weight cols 4096", "wo_b_weight", "got 4096")

enum { WS_CASES(CASE_ENUM_) };
static arg_case ws_cases[] = {WS_CASES(CASE_ROW_)};

static void ws_case_apply(ws_call *a, int id, size_t **bytes) {
    static const int64_t one[1] = {1024}, three[3] = {8192, 4096, 1};
    switch (id) {
    case MAXT_0: a->max_tokens = 0; break;
    case MAXT_641: a->max_tokens = 641; break;
    case BYTES_NULL: *bytes = NULL; break;
    case QA_NULL: a->p[0] = NULL; break;
    case KV_W_NULL: a->p[1] = NULL; break;
    case OA_NULL: a->p[2] = NULL; break;
    case OB_NULL: a->p[3] = NULL; break;
    case QA_BF16: a->w[0].t.dtype = MLT_BF16; break;
    case KV_W_I8: a->w[1].t.dtype = (DLDataType){kDLInt, 8, 1}; break;
    case OB_E5M2: a->w[3].t.dtype = (DLDataType){MLA_DL_FLOAT8_E5M2, 8, 1}; break;
    case QA_1D: reshape(&a->w[0], 1, one, NULL); break;
    case OA_3D: reshape(&a->w[2], 3, three, NULL); break;
    case QA_CPU: a->w[0].t.device.device_type = kDLCPU; break;
    case KV_W_DEV1: a->w[1].t.device.device_id = 1; break;
    case QA_ROWS: a->w[0].shape[0] = 1000; break;
    case H_4000: a->w[0].shape[1] = 4000; break;
    case H_0: a->w[0].shape[1] = 0; break;
    case KV_W_ROWS: a->w[1].shape[0] = 511; break;
    case KV_W_H: a->w[1].shape[1] = 2048; break;
    case OA_ROWS: a->w[2].shape[0] = 4096; break;
    case OA_K3000: a->w[2].shape[1] = 3000; break;
    case OA_K1: a->w[2].shape[1] = 1; break;
    case OB_ROWS: a->w[3].shape[0] = 8192; break;
    case OB_COLS: a->w[3].shape[1] = 4096; break;
    default: cr_assert_fail("unknown workspace case %d", id);
    }
}

ParameterizedTestParameters(dsv4_plan_args, workspace_size) {
    return cr_make_param_array(arg_case, ws_cases, sizeof ws_cases / sizeof ws_cases[0]);
}

ParameterizedTest(arg_case *c, dsv4_plan_args, workspace_size) {
    ws_call a;
    ws_call_init(&a, 4096, 8);
    size_t bytes = 12345, *bp = &bytes;
    ws_case_apply(&a, c->id, &bp);
    expect_invalid(c, ws_call_size(&a, bp));
    cr_expect(bytes == 12345, "%s: *bytes written by a failed call", c->name);
    /* mla_workspace runs the same checks first. */
    mla_runtime *rt = cpu_runtime();
    mla_buffer buf;
    if (bp != NULL) expect_invalid(c, mla_workspace(rt, a.max_tokens, a.p[0], a.p[1], a.p[2],
                                                    a.p[3], &buf));
    mla_runtime_destroy(rt);
}

Test(dsv4_plan_args, workspace_size_valid) {
    static const int64_t shapes[][2] = {{4096, 8}, {7168, 16}, {128, 1}, {512, 64}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        ws_call a;
        ws_call_init(&a, shapes[i][0], shapes[i][1]);
        size_t small = 0, big = 0;
        a.max_tokens = 1;
        cr_expect(ws_call_size(&a, &small) == MLA_OK, "H %lld G %lld T 1: %s",
                  (long long)shapes[i][0], (long long)shapes[i][1], mla_last_error());
        a.w[2].t.dtype = MLT_UINT8; /* raw bytes are accepted for fp8 */
        a.max_tokens = 640;
        cr_expect(ws_call_size(&a, &big) == MLA_OK, "H %lld G %lld T 640 (wo_a uint8): %s",
                  (long long)shapes[i][0], (long long)shapes[i][1], mla_last_error());
        cr_expect(small >= MLA__DSV4_PLAN_END && big > small && big % 256 == 0,
                  "H %lld G %lld: sizes %zu (T 1) and %zu (T 640)", (long long)shapes[i][0],
                  (long long)shapes[i][1], small, big);
    }
}

Test(dsv4_plan_args, workspace_valid_reaches_the_device) {
    mla_runtime *rt = cpu_runtime();
    ws_call a;
    ws_call_init(&a, 4096, 8);
    mla_buffer buf;
    mla_status s = mla_workspace(rt, 640, a.p[0], a.p[1], a.p[2], a.p[3], &buf);
    cr_expect(s == MLA_ERR_NO_DEVICE, "mla_workspace(valid) without a device: got %s: %s",
              mla_status_string(s), mla_last_error());
    cr_expect(buf.ptr == 0 && buf.bytes == 0, "mla_workspace: failed call left a buffer");
    s = mla_workspace(NULL, 640, a.p[0], a.p[1], a.p[2], a.p[3], &buf);
    cr_expect(s == MLA_ERR_INVALID_ARGUMENT && strstr(mla_last_error(), "runtime"),
              "mla_workspace(runtime NULL): got %s: %s", mla_status_string(s), mla_last_error());
    s = mla_workspace(rt, 640, a.p[0], a.p[1], a.p[2], a.p[3], NULL);
    cr_expect(s == MLA_ERR_INVALID_ARGUMENT && strstr(mla_last_error(), "workspace"),
              "mla_workspace(workspace NULL): got %s: %s", mla_status_string(s),
              mla_last_error());
    a.w[0].t.device.device_id = 1, a.w[1].t.device.device_id = 1;
    a.w[2].t.device.device_id = 1, a.w[3].t.device.device_id = 1;
    s = mla_workspace(rt, 640, a.p[0], a.p[1], a.p[2], a.p[3], &buf);
    cr_expect(s == MLA_ERR_INVALID_ARGUMENT && strstr(mla_last_error(), "wq_a_weight"),
              "mla_workspace(weights on device 1, runtime on 0): got %s: %s",
              mla_status_string(s), mla_last_error());
    mla_runtime_destroy(rt);
}

Test(dsv4_plan_args, workspace_init) {
    mla_runtime *rt = cpu_runtime();
    plan_call a; /* its workspace tensor is valid */
    plan_call_init(&a, rt);
    mla_status s = mla_workspace_init(rt, &a.ws.t, NULL);
    cr_expect(s == MLA_ERR_NO_DEVICE, "mla_workspace_init(valid) without a device: got %s: %s",
              mla_status_string(s), mla_last_error());
    static const int ids[] = {RT_NULL, WS_NULL, WS_I8, WS_2D, WS_SMALL, WS_ALIGN, WS_STRIDE,
                              WS_CPU};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        plan_call_init(&a, rt);
        plan_case_apply(&a, ids[i]);
        expect_invalid(&plan_cases[ids[i]], mla_workspace_init(a.rt, a.ws_p, NULL));
    }
    mla_runtime_destroy(rt);
}
