/* Argument checks of mla_output_proj and mla_output_proj_args_init.
 *
 * They run without a GPU: the runtime is created with no_device (arch sm_90a) and the tensors
 * hold fake device addresses, so every check must fire before any device access. Each case
 * breaks one argument of a valid call and expects MLA_ERR_INVALID_ARGUMENT with a message that
 * names the argument; the valid calls themselves must reach the device and fail with
 * MLA_ERR_NO_DEVICE (which proves the cases differ from them only by the broken argument). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <string.h>

#include "mlajit/dsv4.h"
#include "runtime/internal.h"
#include "util/gpu.h"

#define T_OK 7
#define H_OK 4096
#define G_OK 8
#define MAX_POS 4096

/* The tensors of one call, in the order of mla_output_proj_args. */
enum { Q, POS, FREQS, WA, SFA, WB, SFB, OUT, WS, SINK, C128, N_TENSORS };

/* One mla_output_proj call, built valid and then broken by a case. */
typedef struct op_call {
    mla_runtime *rt;
    mlt_tensor t[N_TENSORS];
    mla_output_proj_args args;
    const mla_output_proj_args *args_p;
} op_call;

/* Points args at the tensors (NULL-able ones kept as the call wants them). */
static void op_call_link(op_call *c, int with_sink, int with_c128) {
    mla_output_proj_args *a = &c->args;
    mla_output_proj_args_init(a);
    a->q_or_x = &c->t[Q].t, a->positions = &c->t[POS].t, a->freqs_real = &c->t[FREQS].t;
    a->wo_a_weight = &c->t[WA].t, a->wo_a_sf = &c->t[SFA].t;
    a->wo_b_weight = &c->t[WB].t, a->wo_b_sf = &c->t[SFB].t;
    a->out = &c->t[OUT].t, a->workspace = &c->t[WS].t;
    a->attn_sink = with_sink ? &c->t[SINK].t : NULL;
    a->c128_attn_len = with_c128 ? &c->t[C128].t : NULL;
    c->args_p = a;
}

/* A valid call for T tokens, hidden size H and G wo_a groups. */
static void op_call_init(op_call *c, mla_runtime *rt, int64_t T, int64_t H, int64_t G) {
    const int64_t K = 32768 / G;
    mla__dsv4_ws_layout layout;
    mla__dsv4_layout((int)T, H, G, &layout);
    const int64_t shapes[N_TENSORS][2] = {
        {T, 32768}, {T, 0}, {MAX_POS, 64}, {2 * H, K}, {2 * H, K / 32}, {H, 2 * H},
        {H, 2 * H / 32}, {T, H}, {(int64_t)layout.total, 0}, {64, 0}, {T, 0}};
    const int ndims[N_TENSORS] = {2, 1, 2, 2, 2, 2, 2, 2, 1, 1, 1};
    const DLDataType dtypes[N_TENSORS] = {MLT_BF16, MLT_INT32, MLT_FP32, MLT_E4M3, MLT_UINT8,
                                          MLT_E4M3, MLT_UINT8, MLT_BF16, MLT_UINT8, MLT_FP32,
                                          MLT_INT32};
    memset(c, 0, sizeof *c);
    c->rt = rt;
    for (int i = 0; i < N_TENSORS; i++)
        mlt_tensor_init(&c->t[i], (CUdeviceptr)0x10000000ull * (i + 1), dtypes[i], ndims[i],
                        shapes[i], NULL);
    op_call_link(c, 1, 1);
}

static mla_status op_call_run(const op_call *c) {
    return mla_output_proj(c->rt, c->args_p, NULL);
}

static mla_runtime *cpu_runtime(void) {
    mla_runtime *rt = NULL;
    mla_status s = mlt_cpu_runtime("sm_90a", &rt);
    cr_assert(s == MLA_OK && rt, "mla_runtime_create(no_device, sm_90a): %s", mla_last_error());
    return rt;
}

/* ---- valid calls ---------------------------------------------------------------------------- */

Test(dsv4_output_proj_args, valid_calls_reach_the_device) {
    static const int64_t shapes[][3] = {
        {T_OK, 4096, 8}, {1, 4096, 16}, {64, 512, 4}, {65, 1024, 4}, {640, 2048, 16},
        {640, 4096, 8}};
    mla_runtime *rt = cpu_runtime();
    op_call c;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int v = 0; v < 4; v++) {
            op_call_init(&c, rt, shapes[i][0], shapes[i][1], shapes[i][2]);
            op_call_link(&c, v & 1, v & 2);
            if (v == 3) c.t[WA].t.dtype = MLT_UINT8, c.t[WB].t.dtype = MLT_UINT8;
            mla_status s = op_call_run(&c);
            cr_expect(s == MLA_ERR_NO_DEVICE, "valid call T %lld H %lld G %lld (variant %d) on a "
                      "no-device runtime: expected MLA_ERR_NO_DEVICE, got %s: %s",
                      (long long)shapes[i][0], (long long)shapes[i][1], (long long)shapes[i][2],
                      v, mla_status_string(s), mla_last_error());
        }
    mla_runtime_destroy(rt);
}

Test(dsv4_output_proj_args, args_init) {
    mla_output_proj_args a;
    memset(&a, 0xAB, sizeof a);
    mla_output_proj_args_init(&a);
    cr_expect(a.struct_size == sizeof a, "struct_size %zu, want %zu", a.struct_size, sizeof a);
    cr_expect(a.q_or_x == NULL && a.workspace == NULL && a.attn_sink == NULL &&
                  a.c128_attn_len == NULL && a.out == NULL,
              "mla_output_proj_args_init left a tensor set");
    mla_output_proj_args_init(NULL); /* a no-op */
}

/* The workspace must hold mla__dsv4_layout(T, H, G).total bytes: exactly that passes. */
Test(dsv4_output_proj_args, workspace_size_boundary) {
    mla_runtime *rt = cpu_runtime();
    op_call c;
    op_call_init(&c, rt, T_OK, H_OK, G_OK);
    int64_t need = c.t[WS].shape[0];
    c.t[WS].shape[0] = need - 1;
    mla_status s = op_call_run(&c);
    cr_expect(s == MLA_ERR_INVALID_ARGUMENT && strstr(mla_last_error(), "workspace") &&
                  strstr(mla_last_error(), "at least"),
              "workspace of %lld bytes (need %lld): got %s: %s", (long long)(need - 1),
              (long long)need, mla_status_string(s), mla_last_error());
    c.t[WS].shape[0] = need + 4096;
    s = op_call_run(&c);
    cr_expect(s == MLA_ERR_NO_DEVICE, "workspace of %lld bytes (need %lld): got %s: %s",
              (long long)(need + 4096), (long long)need, mla_status_string(s), mla_last_error());
    mla_runtime_destroy(rt);
}

/* ---- broken arguments ----------------------------------------------------------------------- */

/* A broken argument: which case, and two strings the message must contain. */
typedef struct arg_case {
    int id;
    char name[40];
    char want[32];   /* the argument's name */
    char want2[48];  /* the offending value or the expectation */
} arg_case;

/* id, case name, argument named in the message, second string in the message. */
#define OP_CASES(X)                                                                              \
    X(RT_NULL, "runtime NULL", "runtime", "NULL")                                                \
    X(ARGS_NULL, "args NULL", "args", "NULL")                                                    \
    X(SIZE_0, "struct_size 0", "struct_size", "got 0")                                           \
    X(SIZE_BIG, "struct_size too big", "struct_size", "mla_output_proj_args_init")               \
    X(Q_NULL, "q_or_x NULL", "q_or_x", "NULL")                                                   \
    X(Q_F32, "q_or_x float32", "q_or_x", "float32")                                              \
    X(Q_F16, "q_or_x float16", "q_or_x", "float16")                                              \
    X(Q_1D, "q_or_x 1-D", "q_or_x", "dimensions")                                                \
    X(Q_CPU, "q_or_x on the CPU", "q_or_x", "CUDA")                                              \
    X(Q_DEV1, "q_or_x on device 1", "q_or_x", "device 1")                                        \
    X(Q_T0, "q_or_x T 0", "q_or_x", "got 0")                                                     \
    X(Q_T641, "q_or_x T 641", "q_or_x", "641")                                                   \
    X(Q_COLS, "q_or_x 16384 columns", "q_or_x", "got 16384")                                     \
    X(Q_STRIDE, "q_or_x row stride 65536", "q_or_x", "contiguous")                               \
    X(Q_ALIGN, "q_or_x misaligned", "q_or_x", "aligned")                                         \
    X(POS_NULL, "positions NULL", "positions", "NULL")                                           \
    X(POS_I64, "positions int64", "positions", "int32")                                          \
    X(POS_2D, "positions 2-D", "positions", "dimensions")                                        \
    X(POS_LEN, "positions [8]", "positions", "got 8")                                            \
    X(POS_STRIDE, "positions stride 2", "positions", "contiguous")                               \
    X(FR_NULL, "freqs_real NULL", "freqs_real", "NULL")                                          \
    X(FR_F64, "freqs_real float64", "freqs_real", "float32")                                     \
    X(FR_1D, "freqs_real 1-D", "freqs_real", "dimensions")                                       \
    X(FR_ROWS0, "freqs_real 0 rows", "freqs_real", "max_pos")                                    \
    X(FR_COLS, "freqs_real 32 columns", "freqs_real", "got 32")                                  \
    X(FR_STRIDE, "freqs_real row stride 128", "freqs_real", "contiguous")                        \
    X(FR_ALIGN, "freqs_real misaligned", "freqs_real", "aligned")                                \
    X(WA_NULL, "wo_a_weight NULL", "wo_a_weight", "NULL")                                        \
    X(WA_BF16, "wo_a_weight bfloat16", "wo_a_weight", "float8_e4m3fn")                           \
    X(WA_1D, "wo_a_weight 1-D", "wo_a_weight", "dimensions")                                     \
    X(WA_CPU, "wo_a_weight on the CPU", "wo_a_weight", "CUDA")                                   \
    X(WA_ODD, "wo_a_weight 8191 rows", "wo_a_weight", "got 8191")                                \
    X(WA_H_BIG, "wo_a_weight H 4608", "wo_a_weight", "got 9216")                                 \
    X(WA_H_SMALL, "wo_a_weight H 256", "wo_a_weight", "got 512")                                 \
    X(WA_H_640, "wo_a_weight H 640", "wo_a_weight", "H a multiple of 512")                       \
    X(WA_K3000, "wo_a_weight K 3000", "wo_a_weight", "K * G == 32768")                           \
    X(WA_K256, "wo_a_weight K 256", "wo_a_weight", "K = 32768 / G a multiple of 512")            \
    X(WA_R, "wo_a_weight H 512 G 8 (R 128)", "wo_a_weight", "R = 2H / G a multiple of 256")      \
    X(WA_STRIDE, "wo_a_weight row stride 8192", "wo_a_weight", "contiguous")                     \
    X(WA_ALIGN, "wo_a_weight misaligned", "wo_a_weight", "aligned")                              \
    X(SFA_NULL, "wo_a_sf NULL", "wo_a_sf", "NULL")                                               \
    X(SFA_E4M3, "wo_a_sf float8", "wo_a_sf", "uint8")                                            \
    X(SFA_ROWS, "wo_a_sf 4096 rows", "wo_a_sf", "got 4096")                                      \
    X(SFA_COLS, "wo_a_sf 64 columns", "wo_a_sf", "got 64")                                       \
    X(SFA_STRIDE, "wo_a_sf row stride 256", "wo_a_sf", "contiguous")                             \
    X(SFA_ALIGN, "wo_a_sf misaligned", "wo_a_sf", "aligned")                                     \
    X(WB_NULL, "wo_b_weight NULL", "wo_b_weight", "NULL")                                        \
    X(WB_I8, "wo_b_weight int8", "wo_b_weight", "float8_e4m3fn")                                 \
    X(WB_ROWS, "wo_b_weight 8192 rows", "wo_b_weight", "got 8192")                               \
    X(WB_COLS, "wo_b_weight 4096 columns", "wo_b_weight", "got 4096")                            \
    X(WB_STRIDE, "wo_b_weight row stride 16384", "wo_b_weight", "contiguous")                    \
    X(SFB_NULL, "wo_b_sf NULL", "wo_b_sf", "NULL")                                               \
    X(SFB_ROWS, "wo_b_sf 8192 rows", "wo_b_sf", "got 8192")                                      \
    X(SFB_COLS, "wo_b_sf 128 columns", "wo_b_sf", "got 128")                                     \
    X(SFB_CPU, "wo_b_sf on the CPU", "wo_b_sf", "CUDA")                                          \
    X(OUT_NULL, "out NULL", "out", "NULL")                                                       \
    X(OUT_F32, "out float32", "out", "float32")                                                  \
    X(OUT_ROWS, "out 8 rows", "out", "got 8")                                                    \
    X(OUT_COLS, "out 8192 columns", "out", "got 8192")                                           \
    X(OUT_STRIDE, "out row stride 8192", "out", "contiguous")                                    \
    X(OUT_ALIGN, "out misaligned", "out", "aligned")                                             \
    X(SINK_F64, "attn_sink float64", "attn_sink", "float32")                                     \
    X(SINK_LEN, "attn_sink [32]", "attn_sink", "got 32")                                         \
    X(SINK_2D, "attn_sink 2-D", "attn_sink", "dimensions")                                       \
    X(SINK_CPU, "attn_sink on the CPU", "attn_sink", "CUDA")                                     \
    X(C128_F32, "c128_attn_len float32", "c128_attn_len", "int32")                               \
    X(C128_LEN, "c128_attn_len [8]", "c128_attn_len", "got 8")                                   \
    X(C128_STRIDE, "c128_attn_len stride 2", "c128_attn_len", "contiguous")                      \
    X(WS_NULL, "workspace NULL", "workspace", "NULL")                                            \
    X(WS_I8, "workspace int8", "workspace", "uint8")                                             \
    X(WS_2D, "workspace 2-D", "workspace", "dimensions")                                         \
    X(WS_SMALL, "workspace 1 MiB", "workspace", "at least")                                      \
    X(WS_ALIGN, "workspace misaligned", "workspace", "256")                                      \
    X(WS_STRIDE, "workspace stride 2", "workspace", "contiguous")                                \
    X(WS_CPU, "workspace on the CPU", "workspace", "CUDA")

#define CASE_ENUM_(id, name, want, want2) id,
#define CASE_ROW_(id, name, want, want2) {id, name, want, want2},
enum { OP_CASES(CASE_ENUM_) };
static arg_case op_cases[] = {OP_CASES(CASE_ROW_)};

/* Gives tensor i a new shape (and strides, NULL for compact); keeps its address and dtype. */
static void reshape(op_call *c, int i, int ndim, const int64_t *shape, const int64_t *strides) {
    mlt_tensor *m = &c->t[i];
    mlt_tensor_init(m, (CUdeviceptr)(uintptr_t)m->t.data, m->t.dtype, ndim, shape, strides);
}

/* Sets dimension d of tensor i. */
static void set_dim(op_call *c, int i, int d, int64_t v) { c->t[i].shape[d] = v; }

/* Row-strided 2-D view of tensor i: same shape, row stride s. */
static void row_stride(op_call *c, int i, int64_t s) {
    const int64_t shape[2] = {c->t[i].shape[0], c->t[i].shape[1]}, strides[2] = {s, 1};
    reshape(c, i, 2, shape, strides);
}

/* A 1-D view of tensor i with element stride 2. */
static void stride2(op_call *c, int i) {
    const int64_t shape[1] = {c->t[i].shape[0]}, strides[1] = {2};
    reshape(c, i, 1, shape, strides);
}

/* wo_a_weight [rows, K] (it is checked before wo_a_sf, so its own check fails first). */
static void wo_a_shape(op_call *c, int64_t rows, int64_t K) {
    set_dim(c, WA, 0, rows), set_dim(c, WA, 1, K);
}

static const DLDataType DT_I64 = {kDLInt, 64, 1}, DT_F64 = {kDLFloat, 64, 1};
static const DLDataType DT_F16 = {kDLFloat, 16, 1}, DT_I8 = {kDLInt, 8, 1};

/* Breaks the argument a case names (cases of one tensor group together). */
static void op_case_apply(op_call *c, int id) {
    static const int64_t flat[1] = {T_OK * 32768};
    static const int64_t p2[2] = {T_OK, 1}, f1[1] = {MAX_POS * 64}, wa1[1] = {8192 * 4096};
    static const int64_t s2[2] = {64, 1}, ws2[2] = {1 << 20, 2};
    switch (id) {
    case RT_NULL: c->rt = NULL; break;
    case ARGS_NULL: c->args_p = NULL; break;
    case SIZE_0: c->args.struct_size = 0; break;
    case SIZE_BIG: c->args.struct_size = sizeof c->args + 8; break;
    case Q_NULL: c->args.q_or_x = NULL; break;
    case Q_F32: c->t[Q].t.dtype = MLT_FP32; break;
    case Q_F16: c->t[Q].t.dtype = DT_F16; break;
    case Q_1D: reshape(c, Q, 1, flat, NULL); break;
    case Q_CPU: c->t[Q].t.device.device_type = kDLCPU; break;
    case Q_DEV1: c->t[Q].t.device.device_id = 1; break;
    case Q_T0: set_dim(c, Q, 0, 0); break;
    case Q_T641: set_dim(c, Q, 0, 641); break;
    case Q_COLS: set_dim(c, Q, 1, 16384); break;
    case Q_STRIDE: row_stride(c, Q, 65536); break;
    case Q_ALIGN: c->t[Q].t.byte_offset = 2; break;
    case POS_NULL: c->args.positions = NULL; break;
    case POS_I64: c->t[POS].t.dtype = DT_I64; break;
    case POS_2D: reshape(c, POS, 2, p2, NULL); break;
    case POS_LEN: set_dim(c, POS, 0, 8); break;
    case POS_STRIDE: stride2(c, POS); break;
    case FR_NULL: c->args.freqs_real = NULL; break;
    case FR_F64: c->t[FREQS].t.dtype = DT_F64; break;
    case FR_1D: reshape(c, FREQS, 1, f1, NULL); break;
    case FR_ROWS0: set_dim(c, FREQS, 0, 0); break;
    case FR_COLS: set_dim(c, FREQS, 1, 32); break;
    case FR_STRIDE: row_stride(c, FREQS, 128); break;
    case FR_ALIGN: c->t[FREQS].t.byte_offset = 4; break;
    case WA_NULL: c->args.wo_a_weight = NULL; break;
    case WA_BF16: c->t[WA].t.dtype = MLT_BF16; break;
    case WA_1D: reshape(c, WA, 1, wa1, NULL); break;
    case WA_CPU: c->t[WA].t.device.device_type = kDLCPU; break;
    case WA_ODD: wo_a_shape(c, 8191, 4096); break;
    case WA_H_BIG: wo_a_shape(c, 9216, 4096); break;
    case WA_H_SMALL: wo_a_shape(c, 512, 4096); break;
    case WA_H_640: wo_a_shape(c, 1280, 4096); break;
    case WA_K3000: wo_a_shape(c, 8192, 3000); break;
    case WA_K256: wo_a_shape(c, 8192, 256); break;
    case WA_R: wo_a_shape(c, 1024, 4096); break;
    case WA_STRIDE: row_stride(c, WA, 8192); break;
    case WA_ALIGN: c->t[WA].t.byte_offset = 8; break;
    case SFA_NULL: c->args.wo_a_sf = NULL; break;
    case SFA_E4M3: c->t[SFA].t.dtype = MLT_E4M3; break;
    case SFA_ROWS: set_dim(c, SFA, 0, 4096); break;
    case SFA_COLS: set_dim(c, SFA, 1, 64); break;
    case SFA_STRIDE: row_stride(c, SFA, 256); break;
    case SFA_ALIGN: c->t[SFA].t.byte_offset = 4; break;
    case WB_NULL: c->args.wo_b_weight = NULL; break;
    case WB_I8: c->t[WB].t.dtype = DT_I8; break;
    case WB_ROWS: set_dim(c, WB, 0, 8192); break;
    case WB_COLS: set_dim(c, WB, 1, 4096); break;
    case WB_STRIDE: row_stride(c, WB, 16384); break;
    case SFB_NULL: c->args.wo_b_sf = NULL; break;
    case SFB_ROWS: set_dim(c, SFB, 0, 8192); break;
    case SFB_COLS: set_dim(c, SFB, 1, 128); break;
    case SFB_CPU: c->t[SFB].t.device.device_type = kDLCPU; break;
    case OUT_NULL: c->args.out = NULL; break;
    case OUT_F32: c->t[OUT].t.dtype = MLT_FP32; break;
    case OUT_ROWS: set_dim(c, OUT, 0, 8); break;
    case OUT_COLS: set_dim(c, OUT, 1, 8192); break;
    case OUT_STRIDE: row_stride(c, OUT, 8192); break;
    case OUT_ALIGN: c->t[OUT].t.byte_offset = 2; break;
    case SINK_F64: c->t[SINK].t.dtype = DT_F64; break;
    case SINK_LEN: set_dim(c, SINK, 0, 32); break;
    case SINK_2D: reshape(c, SINK, 2, s2, NULL); break;
    case SINK_CPU: c->t[SINK].t.device.device_type = kDLCPU; break;
    case C128_F32: c->t[C128].t.dtype = MLT_FP32; break;
    case C128_LEN: set_dim(c, C128, 0, 8); break;
    case C128_STRIDE: stride2(c, C128); break;
    case WS_NULL: c->args.workspace = NULL; break;
    case WS_I8: c->t[WS].t.dtype = DT_I8; break;
    case WS_2D: reshape(c, WS, 2, ws2, NULL); break;
    case WS_SMALL: set_dim(c, WS, 0, 1 << 20); break;
    case WS_ALIGN: c->t[WS].t.byte_offset = 128; break;
    case WS_STRIDE: stride2(c, WS); break;
    case WS_CPU: c->t[WS].t.device.device_type = kDLCPU; break;
    default: cr_assert_fail("unknown case %d", id);
    }
}

ParameterizedTestParameters(dsv4_output_proj_args, broken) {
    return cr_make_param_array(arg_case, op_cases, sizeof op_cases / sizeof op_cases[0]);
}

ParameterizedTest(arg_case *k, dsv4_output_proj_args, broken) {
    mla_runtime *rt = cpu_runtime();
    op_call c;
    op_call_init(&c, rt, T_OK, H_OK, G_OK);
    op_case_apply(&c, k->id);
    mla_status s = op_call_run(&c);
    const char *msg = mla_last_error();
    cr_expect(s == MLA_ERR_INVALID_ARGUMENT, "%s: expected MLA_ERR_INVALID_ARGUMENT, got %s (%s)",
              k->name, mla_status_string(s), msg);
    cr_expect(strstr(msg, k->want) != NULL, "%s: message does not name \"%s\": %s", k->name,
              k->want, msg);
    cr_expect(strstr(msg, k->want2) != NULL, "%s: message does not say \"%s\": %s", k->name,
              k->want2, msg);
    mla_runtime_destroy(rt);
}
