/* DSV4 attention plan on the GPU (skips without one): mla_attention_plan against the CPU
 * reference (tests/ref/dsv4_plan_ref.c) on random windows shaped as spec/dsv4.md §5 describes,
 * and mla_workspace / mla_workspace_init.
 *
 * Every case runs T = 1, 7, 64, 640 tokens in requests of 1..4 consecutive positions. Before each
 * call the barrier banks are filled with nonzero bytes and both plan slots with 0xFF; after it the
 * kind's bank must be zero, the other bank and the other slot untouched, the rows past T of the
 * kind's slot untouched, and every plan row equal to the reference (slot1 only where a second
 * run exists, per A7). Reproduce a failure with MLAJIT_TEST_SEED=<seed from the message>. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdlib.h>
#include <string.h>

#include "ref/dsv4_plan_ref.h"
#include "runtime/internal.h"
#include "util/gpu.h"

enum { LINEAR, RING, RANDOM };

#define TOPK 128          /* a real SWA window */
#define WIDE_COL0 5       /* wide cases: kv_indices = columns [5, 5 + 128) of a [T, 165] buffer */
#define WIDE_COLS (TOPK + 37)
#define BANK_FILL_SWA 0xA5
#define BANK_FILL_HCA 0x5A
#define WS_BYTES (MLA__DSV4_PLAN_END + 4096)

typedef struct gpu_case {
    char name[48];
    int layout;     /* LINEAR: slot = base ± p; RING: slot = base + p % 128 (or 127 - p % 128);
                       RANDOM: random runs with -1 holes */
    int step;       /* kv_run_step */
    int page_size;
    int lengths;    /* 1: topk_lengths given (short windows, padding tokens, shortened L) */
    int hca;        /* 1: c128_attn_len given (HCA slot) */
    int wide;       /* 1: kv_indices is a column slice (row stride 165, byte_offset 20) */
} gpu_case;

static gpu_case cases[] = {
    {"linear+1 B128 full swa", LINEAR, 1, 128, 0, 0, 0},
    {"linear+1 B256 lengths hca wide", LINEAR, 1, 256, 1, 1, 1},
    {"linear-1 B128 lengths swa wide", LINEAR, -1, 128, 1, 0, 1},
    {"linear-1 B256 full hca", LINEAR, -1, 256, 0, 1, 0},
    {"ring+1 B128 lengths swa", RING, 1, 128, 1, 0, 0},
    {"ring+1 B256 full hca wide", RING, 1, 256, 0, 1, 1},
    {"ring-1 B128 full hca wide", RING, -1, 128, 0, 1, 1},
    {"ring-1 B256 lengths swa", RING, -1, 256, 1, 0, 0},
    {"linear+1 B16 lengths swa (cut)", LINEAR, 1, 16, 1, 0, 0},
    {"linear+1 B64 full hca wide (cut)", LINEAR, 1, 64, 0, 1, 1},
    {"linear-1 B16 full swa wide (cut)", LINEAR, -1, 16, 0, 0, 1},
    {"ring+1 B64 lengths hca (cut)", RING, 1, 64, 1, 1, 0},
    {"random+1 B16 lengths swa wide", RANDOM, 1, 16, 1, 0, 1},
    {"random-1 B1 lengths hca", RANDOM, -1, 1, 1, 1, 0},
    {"random+1 B128 full hca", RANDOM, 1, 128, 0, 1, 0},
    {"random-1 B64 lengths swa", RANDOM, -1, 64, 1, 0, 0},
};

ParameterizedTestParameters(dsv4_plan_gpu, random_windows) {
    return cr_make_param_array(gpu_case, cases, sizeof cases / sizeof cases[0]);
}

/* Host side of one launch: kv_indices is columns [col0, col0 + TOPK) of buf [T, cols]. */
typedef struct windows {
    int T, cols, col0;
    int32_t *buf;
    int32_t *lengths;
} windows;

static int32_t slot_of(const gpu_case *c, int64_t base, int64_t p) {
    if (c->layout == LINEAR) return (int32_t)(c->step == 1 ? base + p : base - p);
    return (int32_t)(base + (c->step == 1 ? p % 128 : 127 - p % 128));
}

/* One request of n tokens at positions p0.. with real windows (min(p + 1, 128) rows). */
static void real_request(const gpu_case *c, mlt_rng *r, windows *w, int t0, int n) {
    int64_t p0 = mlt_rng_range(r, 0, 3) || !c->lengths ? mlt_rng_range(r, 127, 20000)
                                                        : mlt_rng_range(r, 0, 130);
    int64_t base = c->layout == RING ? 128 * mlt_rng_range(r, 0, 8191)
                   : c->step == 1    ? mlt_rng_range(r, 0, 1 << 20)
                                     : mlt_rng_range(r, 25000, 1 << 21);
    for (int t = t0; t < t0 + n; t++) {
        int64_t p = p0 + (t - t0);
        int L = p + 1 < TOPK ? (int)p + 1 : TOPK;
        int32_t *row = w->buf + (int64_t)t * w->cols + w->col0;
        for (int g = 0; g < TOPK; g++) row[g] = g < L ? slot_of(c, base, p - (L - 1) + g) : -1;
        w->lengths[t] = L;
        int64_t roll = mlt_rng_range(r, 0, 7);
        if (c->lengths && roll == 0) { /* padding token */
            w->lengths[t] = 0;
            for (int g = 0; g < TOPK; g++) row[g] = -1;
        } else if (c->lengths && roll == 1) { /* shorter than its slots: columns past L ignored */
            w->lengths[t] = (int32_t)mlt_rng_range(r, 1, L);
        }
    }
}

/* A token of random runs (steps of c->step, jumps, -1 holes); garbage past L. */
static void random_token(const gpu_case *c, mlt_rng *r, windows *w, int t) {
    int32_t *row = w->buf + (int64_t)t * w->cols + w->col0;
    int L = c->lengths ? (int)mlt_rng_range(r, 0, TOPK) : TOPK;
    row[0] = (int32_t)mlt_rng_range(r, -1, 5000);
    for (int g = 1; g < TOPK; g++)
        row[g] = g >= L                  ? (int32_t)mlt_rng_u64(r)
                 : mlt_rng_range(r, 0, 15) ? row[g - 1] + c->step
                                           : (int32_t)mlt_rng_range(r, -1, 5000);
    w->lengths[t] = L;
}

static void make_windows(const gpu_case *c, mlt_rng *r, int T, windows *w) {
    w->T = T;
    w->cols = c->wide ? WIDE_COLS : TOPK;
    w->col0 = c->wide ? WIDE_COL0 : 0;
    w->buf = malloc((size_t)T * w->cols * sizeof(int32_t));
    w->lengths = malloc((size_t)T * sizeof(int32_t));
    cr_assert(w->buf && w->lengths, "%s: out of host memory", c->name);
    for (int64_t i = 0; i < (int64_t)T * w->cols; i++) w->buf[i] = (int32_t)mlt_rng_u64(r);
    for (int t = 0; t < T;) {
        int n = (int)mlt_rng_range(r, 1, 4);
        n = n < T - t ? n : T - t;
        if (c->layout == RANDOM)
            for (int i = 0; i < n; i++) random_token(c, r, w, t + i);
        else
            real_request(c, r, w, t, n);
        t += n;
    }
}

/* Device buffers of one launch. */
typedef struct dev_bufs {
    CUdeviceptr kv, lengths, c128, ws;
} dev_bufs;

#define CU_OK(rt, call, ...)                                                                     \
    do {                                                                                         \
        CUresult r_ = (call);                                                                    \
        cr_assert(r_ == CUDA_SUCCESS, "%s: " #call ": %s", __VA_ARGS__, mlt_cu_name(rt, r_));    \
    } while (0)

static void upload(mla_runtime *rt, const gpu_case *c, const windows *w, dev_bufs *d) {
    size_t kv_bytes = (size_t)w->T * w->cols * sizeof(int32_t), vec = (size_t)w->T * 4;
    CU_OK(rt, mlt_alloc(rt, kv_bytes, &d->kv), c->name);
    CU_OK(rt, mlt_alloc(rt, vec, &d->lengths), c->name);
    CU_OK(rt, mlt_alloc(rt, vec, &d->c128), c->name);
    CU_OK(rt, mlt_upload(rt, d->kv, w->buf, kv_bytes), c->name);
    CU_OK(rt, mlt_upload(rt, d->lengths, w->lengths, vec), c->name);
    CU_OK(rt, mlt_fill(rt, d->c128, 0x7F, vec), c->name); /* values are not read */
    CU_OK(rt, mlt_fill(rt, d->ws, BANK_FILL_SWA, MLA__DSV4_BANK_BYTES), c->name);
    CU_OK(rt, mlt_fill(rt, d->ws + MLA__DSV4_BANK_BYTES, BANK_FILL_HCA, MLA__DSV4_BANK_BYTES),
          c->name);
    CU_OK(rt, mlt_fill(rt, d->ws + MLA_DSV4_BARRIER_BYTES, 0xFF,
                       MLA__DSV4_PLAN_END - MLA_DSV4_BARRIER_BYTES), c->name);
}

/* Calls mla_attention_plan on the device buffers and checks the returned view. */
static void call_plan(mla_runtime *rt, const gpu_case *c, const windows *w, const dev_bufs *d) {
    int64_t kv_shape[2] = {w->T, TOPK}, kv_strides[2] = {w->cols, 1}, vec[1] = {w->T};
    int64_t ws_shape[1] = {WS_BYTES};
    mlt_tensor kv, len, c128, ws;
    mlt_tensor_init(&kv, d->kv, MLT_INT32, 2, kv_shape, c->wide ? kv_strides : NULL);
    kv.t.byte_offset = (uint64_t)w->col0 * sizeof(int32_t);
    mlt_tensor_init(&len, d->lengths, MLT_INT32, 1, vec, NULL);
    mlt_tensor_init(&c128, d->c128, MLT_INT32, 1, vec, NULL);
    mlt_tensor_init(&ws, d->ws, MLT_UINT8, 1, ws_shape, NULL);
    mla_tensor plan;
    mla_status s = mla_attention_plan(rt, &kv.t, c->lengths ? &len.t : NULL, c->page_size,
                                      c->step, c->hca ? &c128.t : NULL, &ws.t, NULL, &plan);
    cr_assert(s == MLA_OK, "%s T=%d: mla_attention_plan: %s", c->name, w->T, mla_last_error());
    CU_OK(rt, mlt_sync(rt), c->name);
    CUdeviceptr want = d->ws + mla__dsv4_plan_offset(c->hca ? MLA__DSV4_HCA : MLA__DSV4_SWA);
    cr_assert((CUdeviceptr)(uintptr_t)plan.tensor.data + plan.tensor.byte_offset == want,
              "%s T=%d: plan view at %p, expected the %s slot at 0x%llx", c->name, w->T,
              plan.tensor.data, c->hca ? "HCA" : "SWA", (unsigned long long)want);
    cr_assert(plan.tensor.ndim == 2 && plan.tensor.shape[0] == w->T && plan.tensor.shape[1] == 4 &&
                  plan.tensor.strides && plan.tensor.strides[0] == 4 && plan.tensor.strides[1] == 1,
              "%s T=%d: plan view is not [T, 4] with strides {4, 1}", c->name, w->T);
    cr_assert(plan.tensor.dtype.code == kDLInt && plan.tensor.dtype.bits == 32 &&
                  plan.tensor.dtype.lanes == 1 && plan.tensor.device.device_type == kDLCUDA &&
                  plan.tensor.device.device_id == 0,
              "%s T=%d: plan view is not int32 on cuda:0", c->name, w->T);
}

/* Every byte of p[0..n) equals v. */
static int all_bytes(const uint8_t *p, size_t n, uint8_t v) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != v) return 0;
    return 1;
}

/* Banks and slots outside the plan rows: the kind's bank zero, everything else untouched. */
static void check_untouched(const gpu_case *c, int T, unsigned long long seed, const uint8_t *ws) {
    int kind = c->hca ? MLA__DSV4_HCA : MLA__DSV4_SWA, other = 1 - kind;
    uint8_t other_fill = other == MLA__DSV4_HCA ? BANK_FILL_HCA : BANK_FILL_SWA;
    cr_assert(all_bytes(ws + mla__dsv4_bank_offset(kind), MLA__DSV4_BANK_BYTES, 0),
              "%s T=%d seed %llu: the kind's barrier bank is not zero", c->name, T, seed);
    cr_assert(all_bytes(ws + mla__dsv4_bank_offset(other), MLA__DSV4_BANK_BYTES, other_fill),
              "%s T=%d seed %llu: the other kind's barrier bank changed", c->name, T, seed);
    cr_assert(all_bytes(ws + mla__dsv4_plan_offset(other), MLA__DSV4_PLAN_RUNS_BYTES, 0xFF),
              "%s T=%d seed %llu: the other kind's plan slot changed", c->name, T, seed);
    cr_assert(all_bytes(ws + mla__dsv4_plan_offset(kind) + (size_t)T * 16,
                        MLA__DSV4_PLAN_RUNS_BYTES - (size_t)T * 16, 0xFF),
              "%s T=%d seed %llu: plan rows past T were written", c->name, T, seed);
}

/* Row t of the device plan against the reference: slot0, len0, rows literally, slot1 where a
 * second run exists (A7), and the row -> slot mapping of every row. */
static void check_row(const gpu_case *c, int T, unsigned long long seed, int t,
                      const int32_t got[4], const int32_t want[4]) {
    cr_assert(got[0] == want[0] && got[1] == want[1] && got[3] == want[3] &&
                  (want[1] == want[3] || got[2] == want[2]),
              "%s T=%d seed %llu token %d: plan (%d, %d, %d, %d), reference (%d, %d, %d, %d)",
              c->name, T, seed, t, got[0], got[1], got[2], got[3], want[0], want[1], want[2],
              want[3]);
    for (int g = 0; g < want[3]; g++)
        cr_assert(mlr_dsv4_plan_slot(got, g) == mlr_dsv4_plan_slot(want, g),
                  "%s T=%d seed %llu token %d row %d: slot %lld, reference %lld", c->name, T,
                  seed, t, g, (long long)mlr_dsv4_plan_slot(got, g),
                  (long long)mlr_dsv4_plan_slot(want, g));
}

static void run_case(mla_runtime *rt, const gpu_case *c, int T, CUdeviceptr ws_dev) {
    mlt_rng r;
    mlt_rng_init(&r, mlt_seed());
    windows w;
    make_windows(c, &r, T, &w);
    dev_bufs d = {.ws = ws_dev};
    upload(rt, c, &w, &d);
    call_plan(rt, c, &w, &d);
    uint8_t *ws = malloc(MLA__DSV4_PLAN_END);
    int32_t *want = malloc((size_t)T * 16);
    cr_assert(ws && want, "%s: out of host memory", c->name);
    CU_OK(rt, mlt_download(rt, ws, ws_dev, MLA__DSV4_PLAN_END), c->name);
    check_untouched(c, T, (unsigned long long)r.seed, ws);
    mlr_dsv4_plan(w.buf + w.col0, w.cols, c->lengths ? w.lengths : NULL, T, TOPK, c->page_size,
                  c->step, want);
    const int32_t *got =
        (const int32_t *)(ws + mla__dsv4_plan_offset(c->hca ? MLA__DSV4_HCA : MLA__DSV4_SWA));
    for (int t = 0; t < T; t++)
        check_row(c, T, (unsigned long long)r.seed, t, got + 4 * t, want + 4 * t);
    CU_OK(rt, mlt_free(rt, d.kv), c->name);
    CU_OK(rt, mlt_free(rt, d.lengths), c->name);
    CU_OK(rt, mlt_free(rt, d.c128), c->name);
    free(ws), free(want), free(w.buf), free(w.lengths);
}

ParameterizedTest(gpu_case *c, dsv4_plan_gpu, random_windows) {
    mla_runtime *rt;
    if (!mlt_gpu_runtime(&rt)) cr_skip_test("no CUDA device");
    CUdeviceptr ws = 0;
    CU_OK(rt, mlt_alloc(rt, WS_BYTES, &ws), c->name);
    static const int Ts[] = {1, 7, 64, MLA_DSV4_MAX_TOKENS};
    for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) run_case(rt, c, Ts[i], ws);
    CU_OK(rt, mlt_free(rt, ws), c->name);
    mla_runtime_destroy(rt);
}

/* ---- mla_workspace and mla_workspace_init --------------------------------------------------- */

/* DSV4-Flash shapes (H 4096, G 8). The weights' data is never read: a fake address suffices. */
static void flash_weights(mlt_tensor w[4]) {
    int64_t s[4][2] = {{1024, 4096}, {512, 4096}, {8192, 4096}, {4096, 8192}};
    for (int i = 0; i < 4; i++) mlt_tensor_init(&w[i], 0x10000, MLT_E4M3, 2, s[i], NULL);
}

/* One token {8, 9, 10, 11} planned into an mla_workspace buffer: (8, 4, 12, 4). */
static void plan_on_workspace(mla_runtime *rt, const DLTensor *ws) {
    int32_t idx[4] = {8, 9, 10, 11}, got[4];
    CUdeviceptr kv_dev = 0;
    CU_OK(rt, mlt_alloc(rt, sizeof idx, &kv_dev), "plan on mla_workspace");
    CU_OK(rt, mlt_upload(rt, kv_dev, idx, sizeof idx), "plan on mla_workspace");
    int64_t shape[2] = {1, 4};
    mlt_tensor kv;
    mlt_tensor_init(&kv, kv_dev, MLT_INT32, 2, shape, NULL);
    mla_tensor plan;
    cr_assert(mla_attention_plan(rt, &kv.t, NULL, 128, 1, NULL, ws, NULL, &plan) == MLA_OK,
              "plan on mla_workspace: %s", mla_last_error());
    CU_OK(rt, mlt_download(rt, got, (CUdeviceptr)(uintptr_t)plan.tensor.data, sizeof got),
          "plan on mla_workspace");
    cr_assert(got[0] == 8 && got[1] == 4 && got[2] == 12 && got[3] == 4,
              "plan on mla_workspace: expected (8, 4, 12, 4), got (%d, %d, %d, %d)", got[0],
              got[1], got[2], got[3]);
    CU_OK(rt, mlt_free(rt, kv_dev), "plan on mla_workspace");
}

Test(dsv4_plan_gpu, workspace_alloc_init_and_plan) {
    mla_runtime *rt;
    if (!mlt_gpu_runtime(&rt)) cr_skip_test("no CUDA device");
    mlt_tensor w[4];
    flash_weights(w);
    size_t bytes = 0;
    cr_assert(mla_workspace_size(640, &w[0].t, &w[1].t, &w[2].t, &w[3].t, &bytes) == MLA_OK,
              "mla_workspace_size(640, flash): %s", mla_last_error());
    mla_buffer buf;
    cr_assert(mla_workspace(rt, 640, &w[0].t, &w[1].t, &w[2].t, &w[3].t, &buf) == MLA_OK,
              "mla_workspace(640, flash): %s", mla_last_error());
    cr_assert(buf.bytes == bytes && buf.ptr % 256 == 0, "workspace: %zu bytes at 0x%llx, "
              "expected %zu bytes, 256-aligned", buf.bytes, (unsigned long long)buf.ptr, bytes);
    const DLTensor *v = &buf.view.tensor;
    cr_assert(v->ndim == 1 && v->shape[0] == (int64_t)bytes && v->dtype.code == kDLUInt &&
                  v->dtype.bits == 8 && v->device.device_type == kDLCUDA &&
                  (CUdeviceptr)(uintptr_t)v->data == buf.ptr,
              "workspace view: expected 1-D uint8 [%zu] on cuda at the allocation", bytes);
    uint8_t prefix[4096];
    CU_OK(rt, mlt_download(rt, prefix, buf.ptr, MLA_DSV4_BARRIER_BYTES), "mla_workspace");
    cr_assert(all_bytes(prefix, MLA_DSV4_BARRIER_BYTES, 0), "mla_workspace: barrier prefix "
              "not zeroed");
    CU_OK(rt, mlt_fill(rt, buf.ptr, 0x3C, sizeof prefix), "mla_workspace_init");
    cr_assert(mla_workspace_init(rt, v, NULL) == MLA_OK, "mla_workspace_init: %s",
              mla_last_error());
    CU_OK(rt, mlt_sync(rt), "mla_workspace_init");
    CU_OK(rt, mlt_download(rt, prefix, buf.ptr, sizeof prefix), "mla_workspace_init");
    cr_assert(all_bytes(prefix, MLA_DSV4_BARRIER_BYTES, 0), "mla_workspace_init: barrier prefix "
              "not zeroed");
    cr_assert(all_bytes(prefix + MLA_DSV4_BARRIER_BYTES, sizeof prefix - MLA_DSV4_BARRIER_BYTES,
                        0x3C), "mla_workspace_init: wrote past the barrier prefix");
    plan_on_workspace(rt, v);
    mla_buffer_free(rt, &buf);
    cr_assert(buf.ptr == 0 && buf.bytes == 0, "mla_buffer_free: buffer not cleared");
    mla_runtime_destroy(rt);
}
