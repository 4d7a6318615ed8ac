/* Argument checks of mla_attention and the "dsv4_attention" kind builder.
 *
 * They run without a GPU: the runtime is created with no_device (arch sm_90a) and the tensors
 * hold fake device addresses, so every check must fire before any device access. Each case
 * breaks one argument of a valid SWA or HCA call and expects MLA_ERR_INVALID_ARGUMENT with a
 * message that names the argument; the valid calls themselves must reach the device and fail
 * with MLA_ERR_NO_DEVICE (so the cases differ from them only by the broken argument). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <string.h>

#include "runtime/dsv4_kinds.h"
#include "runtime/internal.h"
#include "util/gpu.h"

#define T_OK 8
#define H_OK 4096
#define PAGE_OK 128
#define PAGE_BYTES_OK (130 * 576)  /* >= 128 * 584 = 74752 */
#define POOL_BLOCK_OK 64
#define POOL_BYTES_OK (65 * 576)   /* >= 64 * 584 = 37376 */

enum {
    Q, X, KV, POS, FREQ, QA, QA_SF, QNORM, QB, QB_SF, KVW, KVW_SF, KVNORM, LOC, SINK, WS,
    GATE, RING, RROW, APE, CNORM, CFREQ, OUTLOC, POOL, PTAB, CLEN, N_TENSORS
};

/* One mla_attention call, built valid and then broken by a case. Initialize in place. */
typedef struct attn_call {
    mla_runtime *rt;
    mlt_tensor t[N_TENSORS];
    mla_attention_args a;
    const mla_attention_args *ap;
} attn_call;

/* Bytes of the workspace of T tokens (the whole layout). */
static int64_t ws_bytes(int T) {
    mla__dsv4_ws_layout l;
    mla__dsv4_layout(T, H_OK, 8, &l);
    return (int64_t)l.total;
}

static void init_tensor(attn_call *c, int i, DLDataType dt, int ndim, int64_t d0, int64_t d1) {
    const int64_t shape[2] = {d0, d1};
    mlt_tensor_init(&c->t[i], (CUdeviceptr)0x1000000 * (CUdeviceptr)(i + 1), dt, ndim, shape, NULL);
}

static void init_swa_tensors(attn_call *c) {
    init_tensor(c, Q, MLT_BF16, 2, T_OK, 32768);
    init_tensor(c, X, MLT_BF16, 2, T_OK, H_OK);
    init_tensor(c, KV, MLT_UINT8, 2, 16, PAGE_BYTES_OK);
    init_tensor(c, POS, MLT_INT32, 1, T_OK, 0);
    init_tensor(c, FREQ, MLT_FP32, 2, 4096, 64);
    init_tensor(c, QA, MLT_E4M3, 2, 1024, H_OK);
    init_tensor(c, QA_SF, MLT_UINT8, 2, 1024, H_OK / 32);
    init_tensor(c, QNORM, MLT_BF16, 1, 1024, 0);
    init_tensor(c, QB, MLT_E4M3, 2, 32768, 1024);
    init_tensor(c, QB_SF, MLT_UINT8, 2, 32768, 32);
    init_tensor(c, KVW, MLT_UINT8, 2, 512, H_OK); /* raw bytes are accepted for fp8 */
    init_tensor(c, KVW_SF, MLT_UINT8, 2, 512, H_OK / 32);
    init_tensor(c, KVNORM, MLT_BF16, 1, 512, 0);
    init_tensor(c, LOC, MLT_INT32, 1, T_OK, 0);
    init_tensor(c, SINK, MLT_FP32, 1, 64, 0);
    init_tensor(c, WS, MLT_UINT8, 1, ws_bytes(T_OK), 0);
}

static void init_hca_tensors(attn_call *c) {
    init_tensor(c, GATE, MLT_BF16, 2, 1024, H_OK);
    init_tensor(c, RING, MLT_FP32, 2, 4 * 128, 1024);
    init_tensor(c, RROW, MLT_INT32, 1, T_OK, 0);
    init_tensor(c, APE, MLT_FP32, 2, 128, 512);
    init_tensor(c, CNORM, MLT_BF16, 1, 512, 0);
    init_tensor(c, CFREQ, MLT_FP32, 2, 4096, 64);
    init_tensor(c, OUTLOC, MLT_INT32, 1, T_OK, 0);
    init_tensor(c, POOL, MLT_UINT8, 2, 32, POOL_BYTES_OK);
    init_tensor(c, PTAB, MLT_INT32, 2, T_OK, 16);
    init_tensor(c, CLEN, MLT_INT32, 1, T_OK, 0);
}

/* Points the args at the tensors (SWA: the HCA fields stay NULL). */
static void attn_call_init(attn_call *c, mla_runtime *rt, int hca) {
    memset(c, 0, sizeof *c);
    c->rt = rt;
    init_swa_tensors(c);
    init_hca_tensors(c);
    mla_attention_args *a = &c->a;
    mla_attention_args_init(a);
    a->q_or_x = &c->t[Q].t, a->hidden_states = &c->t[X].t, a->kv_cache = &c->t[KV].t;
    a->page_size = PAGE_OK, a->positions = &c->t[POS].t, a->freqs_real = &c->t[FREQ].t;
    a->sm_scale = 0.044194174f;
    a->wq_a_weight = &c->t[QA].t, a->wq_a_sf = &c->t[QA_SF].t, a->q_norm_weight = &c->t[QNORM].t;
    a->wq_b_weight = &c->t[QB].t, a->wq_b_sf = &c->t[QB_SF].t;
    a->wkv_weight = &c->t[KVW].t, a->wkv_sf = &c->t[KVW_SF].t, a->kv_norm_weight = &c->t[KVNORM].t;
    a->swa_loc = &c->t[LOC].t, a->attn_sink = &c->t[SINK].t, a->workspace = &c->t[WS].t;
    c->ap = a;
    if (!hca) return;
    a->wkv_gate_weight = &c->t[GATE].t, a->kv_score_ring = &c->t[RING].t;
    a->kv_gate_ring_row = &c->t[RROW].t, a->c128_ape = &c->t[APE].t;
    a->c128_norm_weight = &c->t[CNORM].t, a->c128_freqs_real = &c->t[CFREQ].t;
    a->c128_out_loc = &c->t[OUTLOC].t, a->c128_pool = &c->t[POOL].t;
    a->c128_stride_kv_block = POOL_BYTES_OK, a->c128_page_block = POOL_BLOCK_OK;
    a->c128_page_table = &c->t[PTAB].t, a->c128_attn_len = &c->t[CLEN].t;
}

static mla_status attn_call_run(attn_call *c) { return mla_attention(c->rt, c->ap, NULL); }

static mla_runtime *cpu_runtime(void) {
    mla_runtime *rt = NULL;
    mla_status s = mlt_cpu_runtime("sm_90a", &rt);
    cr_assert(s == MLA_OK && rt, "mla_runtime_create(no_device, sm_90a): %s", mla_last_error());
    return rt;
}

/* Re-initializes tensor i with a new shape and strides at the same address. */
static void reshape(attn_call *c, int i, int ndim, const int64_t *shape, const int64_t *strides) {
    mlt_tensor *m = &c->t[i];
    mlt_tensor_init(m, (CUdeviceptr)(uintptr_t)m->t.data, m->t.dtype, ndim, shape, strides);
}

Test(dsv4_attention_args, args_init_defaults) {
    mla_attention_args a;
    memset(&a, 0xAB, sizeof a);
    mla_attention_args_init(&a);
    cr_expect(a.struct_size == sizeof a, "struct_size %zu, want %zu", a.struct_size, sizeof a);
    cr_expect(a.q_eps == 1e-6f && a.kv_eps == 1e-6f, "eps defaults %g %g", (double)a.q_eps,
              (double)a.kv_eps);
    cr_expect(a.reset_barriers == 1 && a.draft_tokens == 0, "reset_barriers %d draft_tokens %d",
              a.reset_barriers, a.draft_tokens);
    cr_expect(a.q_or_x == NULL && a.wkv_gate_weight == NULL && a.c128_attn_len == NULL &&
                  a.c128_page_block == 0 && a.c128_stride_kv_block == 0,
              "tensors and HCA ints must start NULL / 0");
    mla_attention_args_init(NULL); /* a no-op */
}

/* Valid variants: SWA / HCA, no sink, a wide hidden_states row, draft tokens, a split launch,
 * T = 640, H = 7168 and 512, reset_barriers 0. */
Test(dsv4_attention_args, valid_calls_reach_the_device) {
    mla_runtime *rt = cpu_runtime();
    static attn_call c;
    for (int v = 0; v < 10; v++) {
        attn_call_init(&c, rt, v % 2);
        static const int64_t wide[2] = {T_OK, H_OK}, wide_s[2] = {H_OK + 64, 1};
        static const int64_t t640[1] = {640}, q640[2] = {640, 32768}, x640[2] = {640, H_OK};
        if (v == 2) c.a.attn_sink = NULL;
        if (v == 3) reshape(&c, X, 2, wide, wide_s);
        if (v == 4) c.a.draft_tokens = 4;
        if (v == 5) c.a.draft_tokens = 1, c.a.reset_barriers = 0;
        if (v == 6 || v == 7) { /* T = 640: no split, the biggest workspace */
            reshape(&c, Q, 2, q640, NULL), reshape(&c, X, 2, x640, NULL);
            reshape(&c, POS, 1, t640, NULL), reshape(&c, LOC, 1, t640, NULL);
            c.t[WS].shape[0] = ws_bytes(640);
            c.a.attn_sink = NULL, c.a.kv_score_ring = NULL, c.a.wkv_gate_weight = NULL;
            c.a.c128_attn_len = NULL, c.a.kv_gate_ring_row = NULL, c.a.c128_ape = NULL;
            c.a.c128_norm_weight = NULL, c.a.c128_freqs_real = NULL, c.a.c128_out_loc = NULL;
            c.a.c128_pool = NULL, c.a.c128_page_table = NULL;
            c.a.c128_stride_kv_block = 0, c.a.c128_page_block = 0;
        }
        if (v == 8 || v == 9) { /* H = 7168 and 512 */
            const int64_t h = v == 8 ? 7168 : 512;
            c.t[X].shape[1] = h, c.t[QA].shape[1] = h, c.t[QA_SF].shape[1] = h / 32;
            c.t[KVW].shape[1] = h, c.t[KVW_SF].shape[1] = h / 32, c.t[GATE].shape[1] = h;
        }
        mla_status s = attn_call_run(&c);
        cr_expect(s == MLA_ERR_NO_DEVICE, "valid mla_attention (variant %d) on a no-device "
                  "runtime: expected MLA_ERR_NO_DEVICE, got %s: %s", v, mla_status_string(s),
                  mla_last_error());
    }
    mla_runtime_destroy(rt);
}

/* A broken argument: which case, on which layer kind, and two strings the message must hold. */
typedef struct arg_case {
    int id;
    int hca;          /* the valid call it breaks: 0 SWA, 1 HCA */
    char name[48];
    char want[32];    /* the argument's name */
    char want2[48];   /* the offending value or the expectation */
} arg_case;

#define ATTN_CASES(X)                                                                            \
    X(RT_NULL, 0, "runtime NULL", "runtime", "NULL")                                             \
    X(ARGS_NULL, 0, "args NULL", "args", "NULL")                                                 \
    X(STRUCT_SIZE, 0, "struct_size 8", "struct_size", "got 8")                                   \
    X(Q_NULL, 0, "q_or_x NULL", "q_or_x", "NULL")                                                \
    X(Q_F32, 0, "q_or_x float32", "q_or_x", "bfloat16")                                          \
    X(Q_CPU, 0, "q_or_x on the CPU", "q_or_x", "CUDA")                                           \
    X(Q_T0, 0, "q_or_x T=0", "q_or_x", "got 0")                                                  \
    X(Q_T641, 0, "q_or_x T=641", "q_or_x", "641")                                                \
    X(Q_COLS, 0, "q_or_x 32767 columns", "q_or_x", "got 32767")                                  \
    X(Q_STRIDE, 0, "q_or_x row stride 65536", "q_or_x", "contiguous")                            \
    X(Q_ALIGN, 0, "q_or_x misaligned", "q_or_x", "aligned")                                      \
    X(X_NULL, 0, "hidden_states NULL", "hidden_states", "NULL")                                  \
    X(X_T, 0, "hidden_states 6 rows", "hidden_states", "got 6")                                  \
    X(X_H4064, 0, "hidden_states H=4064", "hidden_states", "multiple of 32 but not of 128")      \
    X(X_H100, 0, "hidden_states H=100", "hidden_states", "got 100")                              \
    X(X_COL2, 0, "hidden_states column stride 2", "hidden_states", "column stride")              \
    X(X_ROWS, 0, "hidden_states row stride 4100", "hidden_states", "got 4100")                   \
    X(X_ALIGN, 0, "hidden_states misaligned", "hidden_states", "aligned")                        \
    X(KV_NULL, 0, "kv_cache NULL", "kv_cache", "NULL")                                           \
    X(KV_BF16, 0, "kv_cache bfloat16", "kv_cache", "uint8")                                      \
    X(KV_PB, 0, "kv_cache page_bytes 74752", "kv_cache", "got 74752")                            \
    X(KV_PB_SMALL, 0, "kv_cache page_bytes 129*576", "kv_cache", "74752")                        \
    X(KV_ALIGN, 0, "kv_cache misaligned", "kv_cache", "aligned")                                 \
    X(PAGE_100, 0, "page_size 100", "page_size", "got 100")                                      \
    X(PAGE_0, 0, "page_size 0", "page_size", "got 0")                                            \
    X(POS_NULL, 0, "positions NULL", "positions", "NULL")                                        \
    X(POS_LEN, 0, "positions shape [9]", "positions", "got 9")                                   \
    X(POS_I64, 0, "positions int64", "positions", "int32")                                       \
    X(FREQ_NULL, 0, "freqs_real NULL", "freqs_real", "NULL")                                     \
    X(FREQ_COLS, 0, "freqs_real 32 columns", "freqs_real", "got 32")                             \
    X(FREQ_BF16, 0, "freqs_real bfloat16", "freqs_real", "float32")                              \
    X(SCALE_NAN, 0, "sm_scale NaN", "sm_scale", "nan")                                           \
    X(QA_NULL, 0, "wq_a_weight NULL", "wq_a_weight", "NULL")                                     \
    X(QA_BF16, 0, "wq_a_weight bfloat16", "wq_a_weight", "float8_e4m3fn")                        \
    X(QA_H, 0, "wq_a_weight H 2048", "wq_a_weight", "got 2048")                                  \
    X(QA_STRIDE, 0, "wq_a_weight row stride 8192", "wq_a_weight", "contiguous")                  \
    X(QA_SF_NULL, 0, "wq_a_sf NULL", "wq_a_sf", "NULL")                                          \
    X(QA_SF_COLS, 0, "wq_a_sf 64 columns", "wq_a_sf", "got 64")                                  \
    X(QA_SF_E4M3, 0, "wq_a_sf float8_e4m3fn", "wq_a_sf", "uint8")                                \
    X(QNORM_NULL, 0, "q_norm_weight NULL", "q_norm_weight", "NULL")                              \
    X(QNORM_F32, 0, "q_norm_weight float32", "q_norm_weight", "bfloat16")                        \
    X(QB_ROWS, 0, "wq_b_weight 16384 rows", "wq_b_weight", "got 16384")                          \
    X(QB_SF_COLS, 0, "wq_b_sf 16 columns", "wq_b_sf", "got 16")                                  \
    X(KVW_ROWS, 0, "wkv_weight 511 rows", "wkv_weight", "got 511")                               \
    X(KVW_SF_NULL, 0, "wkv_sf NULL", "wkv_sf", "NULL")                                           \
    X(KVNORM_LEN, 0, "kv_norm_weight 1024", "kv_norm_weight", "got 1024")                        \
    X(LOC_NULL, 0, "swa_loc NULL", "swa_loc", "NULL")                                            \
    X(LOC_STRIDE, 0, "swa_loc stride 2", "swa_loc", "contiguous")                                \
    X(SINK_LEN, 0, "attn_sink shape [32]", "attn_sink", "got 32")                                \
    X(SINK_BF16, 0, "attn_sink bfloat16", "attn_sink", "float32")                                \
    X(QEPS_NEG, 0, "q_eps -1", "q_eps", "got -1")                                                \
    X(KVEPS_INF, 0, "kv_eps inf", "kv_eps", "inf")                                               \
    X(WS_NULL, 0, "workspace NULL", "workspace", "NULL")                                         \
    X(WS_SMALL, 0, "workspace of 1 token for T=8", "workspace", "T = 8")                         \
    X(WS_PREFIX, 0, "workspace of 1024 bytes", "workspace", "1024")                              \
    X(WS_ALIGN, 0, "workspace misaligned", "workspace", "256")                                   \
    X(DRAFT_NEG, 0, "draft_tokens -1", "draft_tokens", "got -1")                                 \
    X(DRAFT_3, 0, "draft_tokens 3 with T=8", "draft_tokens", "got 3")                            \
    X(RESET_2, 0, "reset_barriers 2", "reset_barriers", "got 2")                                 \
    X(GATE_ONLY, 0, "wkv_gate_weight without c128_attn_len", "c128_attn_len",                   \
      "got only wkv_gate_weight")                                                                \
    X(LEN_ONLY, 1, "c128_attn_len without wkv_gate_weight", "wkv_gate_weight",                   \
      "got only c128_attn_len")                                                                  \
    X(SWA_RING, 0, "kv_score_ring on SWA", "kv_score_ring", "SWA")                               \
    X(SWA_POOL, 0, "c128_pool on SWA", "c128_pool", "SWA")                                       \
    X(SWA_STRIDE, 0, "c128_stride_kv_block on SWA", "c128_stride_kv_block", "SWA")               \
    X(SWA_BLOCK, 0, "c128_page_block on SWA", "c128_page_block", "SWA")                          \
    X(GATE_F32, 1, "wkv_gate_weight float32", "wkv_gate_weight", "bfloat16")                     \
    X(GATE_H, 1, "wkv_gate_weight H 2048", "wkv_gate_weight", "got 2048")                        \
    X(GATE_ROWS, 1, "wkv_gate_weight 512 rows", "wkv_gate_weight", "got 512")                    \
    X(RING_NULL, 1, "kv_score_ring NULL", "kv_score_ring", "NULL")                               \
    X(RING_ROWS, 1, "kv_score_ring 100 rows", "kv_score_ring", "got 100")                        \
    X(RING_COLS, 1, "kv_score_ring 512 columns", "kv_score_ring", "got 512")                     \
    X(RROW_NULL, 1, "kv_gate_ring_row NULL", "kv_gate_ring_row", "NULL")                         \
    X(APE_ROWS, 1, "c128_ape 64 rows", "c128_ape", "got 64")                                     \
    X(CNORM_NULL, 1, "c128_norm_weight NULL", "c128_norm_weight", "NULL")                        \
    X(CFREQ_NULL, 1, "c128_freqs_real NULL", "c128_freqs_real", "NULL")                          \
    X(CFREQ_COLS, 1, "c128_freqs_real 128 columns", "c128_freqs_real", "got 128")                \
    X(OUTLOC_LEN, 1, "c128_out_loc shape [6]", "c128_out_loc", "got 6")                          \
    X(POOL_NULL, 1, "c128_pool NULL", "c128_pool", "NULL")                                       \
    X(POOL_PB, 1, "c128_pool page bytes 37377", "c128_pool", "got 37377")                        \
    X(POOL_SMALL, 1, "c128_pool page bytes 64*576", "c128_pool", "37376")                        \
    X(POOL_STRIDE, 1, "c128_stride_kv_block != shape[1]", "c128_stride_kv_block", "got 576")     \
    X(BLOCK_3, 1, "c128_page_block 3", "c128_page_block", "got 3")                               \
    X(BLOCK_0, 1, "c128_page_block 0", "c128_page_block", "got 0")                               \
    X(PTAB_NULL, 1, "c128_page_table NULL", "c128_page_table", "NULL")                           \
    X(PTAB_ROWS, 1, "c128_page_table 6 rows", "c128_page_table", "got 6")                        \
    X(PTAB_COL2, 1, "c128_page_table column stride 2", "c128_page_table", "column stride")       \
    X(CLEN_I64, 1, "c128_attn_len int64", "c128_attn_len", "int32")                              \
    X(CLEN_LEN, 1, "c128_attn_len shape [9]", "c128_attn_len", "got 9")

#define CASE_ENUM_(id, hca, name, want, want2) id,
#define CASE_ROW_(id, hca, name, want, want2) {id, hca, name, want, want2},
enum { ATTN_CASES(CASE_ENUM_) };
static arg_case attn_cases[] = {ATTN_CASES(CASE_ROW_)};

/* Breaks the argument of a case (part 1: the common inputs). */
static int apply_common_case(attn_call *c, int id) {
    static const int64_t qs[2] = {65536, 1}, xs[2] = {2 * H_OK, 2}, xr[2] = {4100, 1};
    static const int64_t q_shape[2] = {T_OK, 32768}, x_shape[2] = {T_OK, H_OK};
    static const int64_t v2[1] = {2}, vec[1] = {T_OK}, qa_s[2] = {8192, 1};
    static const int64_t qa_shape[2] = {1024, H_OK};
    mla_attention_args *a = &c->a;
    switch (id) {
    case RT_NULL: c->rt = NULL; break;
    case ARGS_NULL: c->ap = NULL; break;
    case STRUCT_SIZE: a->struct_size = 8; break;
    case Q_NULL: a->q_or_x = NULL; break;
    case Q_F32: c->t[Q].t.dtype = MLT_FP32; break;
    case Q_CPU: c->t[Q].t.device.device_type = kDLCPU; break;
    case Q_T0: c->t[Q].shape[0] = 0; break;
    case Q_T641: c->t[Q].shape[0] = 641; break;
    case Q_COLS: c->t[Q].shape[1] = 32767; break;
    case Q_STRIDE: reshape(c, Q, 2, q_shape, qs); break;
    case Q_ALIGN: c->t[Q].t.byte_offset = 2; break;
    case X_NULL: a->hidden_states = NULL; break;
    case X_T: c->t[X].shape[0] = 6; break;
    case X_H4064: c->t[X].shape[1] = 4064; break;
    case X_H100: c->t[X].shape[1] = 100; break;
    case X_COL2: reshape(c, X, 2, x_shape, xs); break;
    case X_ROWS: reshape(c, X, 2, x_shape, xr); break;
    case X_ALIGN: c->t[X].t.byte_offset = 8; break;
    case KV_NULL: a->kv_cache = NULL; break;
    case KV_BF16: c->t[KV].t.dtype = MLT_BF16; break;
    case KV_PB: c->t[KV].shape[1] = 128 * 584; break;
    case KV_PB_SMALL: c->t[KV].shape[1] = 129 * 576; break;
    case KV_ALIGN: c->t[KV].t.byte_offset = 8; break;
    case PAGE_100: a->page_size = 100; break;
    case PAGE_0: a->page_size = 0; break;
    case POS_NULL: a->positions = NULL; break;
    case POS_LEN: c->t[POS].shape[0] = 9; break;
    case POS_I64: c->t[POS].t.dtype = (DLDataType){kDLInt, 64, 1}; break;
    case FREQ_NULL: a->freqs_real = NULL; break;
    case FREQ_COLS: c->t[FREQ].shape[1] = 32; break;
    case FREQ_BF16: c->t[FREQ].t.dtype = MLT_BF16; break;
    case SCALE_NAN: a->sm_scale = NAN; break;
    case QA_NULL: a->wq_a_weight = NULL; break;
    case QA_BF16: c->t[QA].t.dtype = MLT_BF16; break;
    case QA_H: c->t[QA].shape[1] = 2048; break;
    case QA_STRIDE: reshape(c, QA, 2, qa_shape, qa_s); break;
    case QA_SF_NULL: a->wq_a_sf = NULL; break;
    case QA_SF_COLS: c->t[QA_SF].shape[1] = 64; break;
    case QA_SF_E4M3: c->t[QA_SF].t.dtype = MLT_E4M3; break;
    case QNORM_NULL: a->q_norm_weight = NULL; break;
    case QNORM_F32: c->t[QNORM].t.dtype = MLT_FP32; break;
    case QB_ROWS: c->t[QB].shape[0] = 16384; break;
    case QB_SF_COLS: c->t[QB_SF].shape[1] = 16; break;
    case KVW_ROWS: c->t[KVW].shape[0] = 511; break;
    case KVW_SF_NULL: a->wkv_sf = NULL; break;
    case KVNORM_LEN: c->t[KVNORM].shape[0] = 1024; break;
    case LOC_NULL: a->swa_loc = NULL; break;
    case LOC_STRIDE: reshape(c, LOC, 1, vec, v2); break;
    case SINK_LEN: c->t[SINK].shape[0] = 32; break;
    case SINK_BF16: c->t[SINK].t.dtype = MLT_BF16; break;
    case QEPS_NEG: a->q_eps = -1.0f; break;
    case KVEPS_INF: a->kv_eps = INFINITY; break;
    default: return 0;
    }
    return 1;
}

/* Part 2: workspace, launch integers and the layer kind. */
static int apply_kind_case(attn_call *c, int id) {
    mla_attention_args *a = &c->a;
    switch (id) {
    case WS_NULL: a->workspace = NULL; break;
    case WS_SMALL: c->t[WS].shape[0] = ws_bytes(1); break;
    case WS_PREFIX: c->t[WS].shape[0] = 1024; break;
    case WS_ALIGN: c->t[WS].t.byte_offset = 128; break;
    case DRAFT_NEG: a->draft_tokens = -1; break;
    case DRAFT_3: a->draft_tokens = 3; break;
    case RESET_2: a->reset_barriers = 2; break;
    case GATE_ONLY: a->wkv_gate_weight = &c->t[GATE].t; break;
    case LEN_ONLY: a->wkv_gate_weight = NULL; break;
    case SWA_RING: a->kv_score_ring = &c->t[RING].t; break;
    case SWA_POOL: a->c128_pool = &c->t[POOL].t; break;
    case SWA_STRIDE: a->c128_stride_kv_block = POOL_BYTES_OK; break;
    case SWA_BLOCK: a->c128_page_block = POOL_BLOCK_OK; break;
    default: return 0;
    }
    return 1;
}

/* Part 3: the HCA inputs. */
static int apply_hca_case(attn_call *c, int id) {
    static const int64_t pt_shape[2] = {T_OK, 16}, pt_s[2] = {32, 2};
    mla_attention_args *a = &c->a;
    switch (id) {
    case GATE_F32: c->t[GATE].t.dtype = MLT_FP32; break;
    case GATE_H: c->t[GATE].shape[1] = 2048; break;
    case GATE_ROWS: c->t[GATE].shape[0] = 512; break;
    case RING_NULL: a->kv_score_ring = NULL; break;
    case RING_ROWS: c->t[RING].shape[0] = 100; break;
    case RING_COLS: c->t[RING].shape[1] = 512; break;
    case RROW_NULL: a->kv_gate_ring_row = NULL; break;
    case APE_ROWS: c->t[APE].shape[0] = 64; break;
    case CNORM_NULL: a->c128_norm_weight = NULL; break;
    case CFREQ_NULL: a->c128_freqs_real = NULL; break;
    case CFREQ_COLS: c->t[CFREQ].shape[1] = 128; break;
    case OUTLOC_LEN: c->t[OUTLOC].shape[0] = 6; break;
    case POOL_NULL: a->c128_pool = NULL; break;
    case POOL_PB: c->t[POOL].shape[1] = 37377, a->c128_stride_kv_block = 37377; break;
    case POOL_SMALL: c->t[POOL].shape[1] = 64 * 576, a->c128_stride_kv_block = 64 * 576; break;
    case POOL_STRIDE: a->c128_stride_kv_block = 576; break;
    case BLOCK_3: a->c128_page_block = 3; break;
    case BLOCK_0: a->c128_page_block = 0; break;
    case PTAB_NULL: a->c128_page_table = NULL; break;
    case PTAB_ROWS: c->t[PTAB].shape[0] = 6; break;
    case PTAB_COL2: reshape(c, PTAB, 2, pt_shape, pt_s); break;
    case CLEN_I64: c->t[CLEN].t.dtype = (DLDataType){kDLInt, 64, 1}; break;
    case CLEN_LEN: c->t[CLEN].shape[0] = 9; break;
    default: return 0;
    }
    return 1;
}

static void apply_case(attn_call *c, int id) {
    if (apply_common_case(c, id) || apply_kind_case(c, id) || apply_hca_case(c, id)) return;
    cr_assert_fail("unknown mla_attention case %d", id);
}

ParameterizedTestParameters(dsv4_attention_args, broken) {
    return cr_make_param_array(arg_case, attn_cases, sizeof attn_cases / sizeof attn_cases[0]);
}

ParameterizedTest(arg_case *k, dsv4_attention_args, broken) {
    mla_runtime *rt = cpu_runtime();
    static attn_call c;
    attn_call_init(&c, rt, k->hca);
    apply_case(&c, k->id);
    mla_status s = attn_call_run(&c);
    const char *msg = mla_last_error();
    cr_expect(s == MLA_ERR_INVALID_ARGUMENT, "%s (%s): expected MLA_ERR_INVALID_ARGUMENT, got %s "
              "(%s)", k->name, k->hca ? "HCA" : "SWA", mla_status_string(s), msg);
    cr_expect(strstr(msg, k->want) != NULL, "%s: message does not name \"%s\": %s", k->name,
              k->want, msg);
    cr_expect(strstr(msg, k->want2) != NULL, "%s: message does not say \"%s\": %s", k->name,
              k->want2, msg);
    mla_runtime_destroy(rt);
}

/* ---- the kind builder --------------------------------------------------------------------- */

static mla_status build(long long H, long long page, long long draft, long long hca,
                        char *expr, size_t size, mla__launch_info *li) {
    mla__spec spec;
    mla__spec_init(&spec, "dsv4_attention");
    const long long v[4] = {H, page, draft, hca};
    static const char *const names[4] = {"H", "page_size", "draft_tokens", "hca"};
    for (int i = 0; i < 4; i++) mla__spec_add(&spec, names[i], v[i]);
    memset(li, 0, sizeof *li);
    return mla__dsv4_attention_build(&spec, expr, size, li);
}

Test(dsv4_attention_args, build_name_expr) {
    char expr[128];
    mla__launch_info li;
    cr_assert(build(4096, 256, 2, 1, expr, sizeof expr, &li) == MLA_OK, "%s", mla_last_error());
    cr_expect_str_eq(expr, "mla::dsv4::attention_kernel<4096, 256, 2, 1>");
    cr_expect(li.threads == 256 && li.dynamic_smem > 48 * 1024 && li.cluster == 1,
              "launch needs: threads %d smem %d cluster %d", li.threads, li.dynamic_smem,
              li.cluster);
    static const struct { long long H, page, draft, hca; const char *want; } bad[] = {
        {4064, 128, 0, 0, "multiple of 32 but not of 128"}, {100, 128, 0, 0, "got 100"},
        {0, 128, 0, 0, "got 0"}, {4096, 100, 0, 0, "page_size"}, {4096, 128, -1, 0,
        "draft_tokens"}, {4096, 128, 641, 0, "draft_tokens"}, {4096, 128, 0, 2, "hca"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mla_status s = build(bad[i].H, bad[i].page, bad[i].draft, bad[i].hca, expr, sizeof expr,
                             &li);
        cr_expect(s == MLA_ERR_INVALID_ARGUMENT && strstr(mla_last_error(), bad[i].want),
                  "spec (H %lld, page %lld, draft %lld, hca %lld): got %s: %s", bad[i].H,
                  bad[i].page, bad[i].draft, bad[i].hca, mla_status_string(s), mla_last_error());
    }
    mla__spec spec;
    mla__spec_init(&spec, "dsv4_attention");
    mla__spec_add(&spec, "H", 4096);
    cr_expect(mla__dsv4_attention_build(&spec, expr, sizeof expr, &li) ==
                  MLA_ERR_INVALID_ARGUMENT, "a spec of 1 parameter must be refused");
    cr_expect(build(4096, 128, 0, 0, expr, 8, &li) == MLA_ERR_INTERNAL,
              "a name buffer of 8 bytes must be refused");
}
