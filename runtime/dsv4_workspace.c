/* The DSV4 workspace: its layout (in one place), mla_workspace_size, mla_workspace,
 * mla_workspace_init and mla_buffer_free.
 *
 * Layout (byte offsets, every region 256-byte aligned), for T = max_tokens:
 *   [0, 1024)            SWA barrier bank        } the barrier prefix, MLA_DSV4_BARRIER_BYTES,
 *   [1024, 2048)         HCA barrier bank        } zeroed here and kept zeroed by the kernels
 *   [2048, +64 KiB)      SWA plan slot: [640, 4] int32 runs, then the attention's work list
 *   [+64 KiB, +64 KiB)   HCA plan slot, same
 *   then the per-launch regions of mla__dsv4_ws_layout, sized for T tokens (scale regions for
 *   T rounded up to 128 rows, the SfAtom granularity). */
#include <string.h>

#include "runtime/internal.h"

#define DSV4_QL 1024          /* q_lora rank */
#define DSV4_KVL 512          /* kv_lora rank */
#define DSV4_HEADS 64
#define DSV4_HEAD_DIM 512
#define DSV4_O_COLS (DSV4_HEADS * DSV4_HEAD_DIM) /* 32768, flat O columns */
#define DSV4_MAX_H 65536      /* keeps every region size far from overflow */

size_t mla__dsv4_bank_offset(int kind) {
    return kind == MLA__DSV4_HCA ? MLA__DSV4_BANK_BYTES : 0;
}

size_t mla__dsv4_plan_offset(int kind) {
    return MLA_DSV4_BARRIER_BYTES + (kind == MLA__DSV4_HCA ? MLA__DSV4_PLAN_SLOT_BYTES : 0);
}

/* Reserves bytes at *cursor and moves the cursor to the next aligned offset. */
static size_t take(size_t *cursor, size_t bytes) {
    size_t off = *cursor;
    *cursor = (off + bytes + MLA__DSV4_ALIGN - 1) / MLA__DSV4_ALIGN * MLA__DSV4_ALIGN;
    return off;
}

void mla__dsv4_layout(int max_tokens, long long H, long long G, mla__dsv4_ws_layout *out) {
    size_t t = (size_t)max_tokens, h = (size_t)H;
    size_t ts = (t + 127) / 128 * 128;  /* rows of the scale regions */
    size_t tp = t < MLA__DSV4_SPLIT_TOKENS ? t : MLA__DSV4_SPLIT_TOKENS;
    size_t c = MLA__DSV4_PLAN_END;
    memset(out, 0, sizeof *out);
    out->max_tokens = max_tokens;
    out->H = H;
    out->G = G;
    for (int k = MLA__DSV4_SWA; k <= MLA__DSV4_HCA; ++k) {
        out->bank[k] = mla__dsv4_bank_offset(k);
        out->plan[k] = mla__dsv4_plan_offset(k);
    }
    out->qr = take(&c, t * DSV4_QL * 2);
    out->qa = take(&c, t * DSV4_QL * 2);
    out->kv = take(&c, t * DSV4_KVL * 2);
    out->kv_gate = take(&c, t * 2 * DSV4_KVL * 4);
    out->part_o = take(&c, mla__dsv4_part_slots(max_tokens) * DSV4_HEADS * DSV4_HEAD_DIM * 4);
    out->part_lse = take(&c, mla__dsv4_part_slots(max_tokens) * DSV4_HEADS * 4);
    out->part_k = take(&c, MLA__DSV4_KSLICES * tp * MLA__DSV4_PART_K_COLS * 4);
    out->act_q = take(&c, t * DSV4_O_COLS);
    out->act_sf = take(&c, ts * DSV4_O_COLS / 32);
    out->o_lora = take(&c, t * 2 * h * 2);
    out->o_lora_q = take(&c, t * 2 * h);
    out->o_lora_sf = take(&c, ts * 2 * h / 32);
    out->part_op = take(&c, MLA__DSV4_OP_KSLICES * tp * 2 * h * 4);
    out->total = c;
}

/* One fp8 weight: CUDA (same device as ref when given), 2-D, fp8/uint8, rows == want_rows. */
static mla_status check_weight(const DLTensor *w, const char *name, const DLTensor *ref,
                               int64_t want_rows, const char *rows_what) {
    MLA_FORWARD_IF_ERROR(mla__check_tensor(NULL, w, name, MLA_DT_FP8_E4M3, 2));
    MLA_ARG_CHECK(ref == NULL || w->device.device_id == ref->device.device_id,
                  "%s: expected device cuda:%d (that of wq_a_weight), got cuda:%d", name,
                  ref ? ref->device.device_id : 0, w->device.device_id);
    return mla__check_dim(w, name, 0, want_rows, rows_what);
}

/* Checks the four weights and derives H and G. */
static mla_status check_weights(const DLTensor *wq_a, const DLTensor *wkv, const DLTensor *wo_a,
                                const DLTensor *wo_b, long long *H, long long *G) {
    MLA_FORWARD_IF_ERROR(check_weight(wq_a, "wq_a_weight", NULL, DSV4_QL, "q_lora rank"));
    long long h = (long long)wq_a->shape[1];
    MLA_ARG_CHECK(h > 0 && h % 128 == 0 && h <= DSV4_MAX_H,
                  "wq_a_weight: expected H = shape[1] a positive multiple of 128 up to %d, "
                  "got %lld", DSV4_MAX_H, h);
    MLA_FORWARD_IF_ERROR(check_weight(wkv, "wkv_weight", wq_a, DSV4_KVL, "kv_lora rank"));
    MLA_FORWARD_IF_ERROR(mla__check_dim(wkv, "wkv_weight", 1, h, "H of wq_a_weight"));
    MLA_FORWARD_IF_ERROR(check_weight(wo_a, "wo_a_weight", wq_a, 2 * h, "2H"));
    long long k = (long long)wo_a->shape[1];
    MLA_ARG_CHECK(k > 0 && DSV4_O_COLS % k == 0,
                  "wo_a_weight: expected shape[1] = 32768 / G, a divisor of 32768, got %lld", k);
    long long g = DSV4_O_COLS / k;
    MLA_ARG_CHECK((2 * h) % g == 0,
                  "wo_a_weight: expected 2H = %lld rows to split evenly into G = 32768 / %lld = "
                  "%lld groups, got a remainder of %lld", 2 * h, k, g, (2 * h) % g);
    MLA_FORWARD_IF_ERROR(check_weight(wo_b, "wo_b_weight", wq_a, h, "H"));
    MLA_FORWARD_IF_ERROR(mla__check_dim(wo_b, "wo_b_weight", 1, 2 * h, "2H"));
    *H = h;
    *G = g;
    return MLA_OK;
}

mla_status mla_workspace_size(int max_tokens, const DLTensor *wq_a_weight,
                              const DLTensor *wkv_weight, const DLTensor *wo_a_weight,
                              const DLTensor *wo_b_weight, size_t *bytes) {
    MLA_ARG_CHECK(bytes != NULL, "bytes: expected a size_t to fill, got NULL");
    MLA_ARG_CHECK(max_tokens >= 1 && max_tokens <= MLA_DSV4_MAX_TOKENS,
                  "max_tokens: expected 1 <= max_tokens <= %d, got %d", MLA_DSV4_MAX_TOKENS,
                  max_tokens);
    long long H = 0, G = 0;
    MLA_FORWARD_IF_ERROR(check_weights(wq_a_weight, wkv_weight, wo_a_weight, wo_b_weight, &H, &G));
    mla__dsv4_ws_layout layout;
    mla__dsv4_layout(max_tokens, H, G, &layout);
    *bytes = layout.total;
    return MLA_OK;
}

/* A 1-D uint8 view of bytes at p on CUDA device dev. */
static void fill_byte_view(mla_tensor *v, CUdeviceptr p, size_t bytes, int dev) {
    memset(v, 0, sizeof *v);
    v->shape[0] = (int64_t)bytes;
    v->strides[0] = 1;
    v->tensor.data = (void *)(uintptr_t)p;
    v->tensor.device = (DLDevice){kDLCUDA, dev};
    v->tensor.ndim = 1;
    v->tensor.dtype = (DLDataType){kDLUInt, 8, 1};
    v->tensor.shape = v->shape;
    v->tensor.strides = v->strides;
}

/* Allocates bytes on rt's device and zeroes the first zero_bytes synchronously. */
static mla_status alloc_zeroed_prefix(mla_runtime *rt, size_t bytes, size_t zero_bytes,
                                      CUdeviceptr *out) {
    CUdeviceptr p = 0;
    CUresult r = rt->drv.cuMemAlloc(&p, bytes);
    MLA_RETURN_ERROR_IF(r == CUDA_ERROR_OUT_OF_MEMORY, MLA_ERR_OUT_OF_MEMORY,
                        "mla_workspace: cuMemAlloc of %zu bytes: out of device memory", bytes);
    MLA_FORWARD_IF_ERROR(mla__cu_check(&rt->drv, r, "cuMemAlloc", __FILE__, __LINE__));
    mla_status s = mla__cu_check(&rt->drv, rt->drv.cuMemsetD8(p, 0, zero_bytes), "cuMemsetD8",
                                 __FILE__, __LINE__);
    if (s != MLA_OK) {
        rt->drv.cuMemFree(p);
        return s;
    }
    *out = p;
    return MLA_OK;
}

mla_status mla_workspace(mla_runtime *runtime, int max_tokens, const DLTensor *wq_a_weight,
                         const DLTensor *wkv_weight, const DLTensor *wo_a_weight,
                         const DLTensor *wo_b_weight, mla_buffer *workspace) {
    MLA_ARG_CHECK(runtime != NULL, "runtime: expected a runtime, got NULL");
    MLA_ARG_CHECK(workspace != NULL, "workspace: expected an mla_buffer to fill, got NULL");
    memset(workspace, 0, sizeof *workspace);
    size_t bytes = 0;
    MLA_FORWARD_IF_ERROR(mla_workspace_size(max_tokens, wq_a_weight, wkv_weight, wo_a_weight,
                                            wo_b_weight, &bytes));
    MLA_FORWARD_IF_ERROR(mla__check_tensor(runtime, wq_a_weight, "wq_a_weight",
                                           MLA_DT_FP8_E4M3, 2));
    MLA_FORWARD_IF_ERROR(mla__runtime_enter(runtime));
    CUdeviceptr p = 0;
    MLA_FORWARD_IF_ERROR(alloc_zeroed_prefix(runtime, bytes, MLA_DSV4_BARRIER_BYTES, &p));
    workspace->ptr = p;
    workspace->bytes = bytes;
    fill_byte_view(&workspace->view, p, bytes, runtime->options.device);
    return MLA_OK;
}

mla_status mla__dsv4_check_workspace(const mla_runtime *rt, const DLTensor *ws,
                                     size_t min_bytes) {
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, ws, "workspace", MLA_DT_UINT8, 1));
    MLA_FORWARD_IF_ERROR(mla__check_contiguous(ws, "workspace"));
    MLA_FORWARD_IF_ERROR(mla__check_align(ws, "workspace", MLA__DSV4_ALIGN));
    MLA_ARG_CHECK(ws->shape[0] >= (int64_t)min_bytes,
                  "workspace: expected at least %zu bytes (barrier banks and both plan slots), "
                  "got %lld bytes", min_bytes, (long long)ws->shape[0]);
    return MLA_OK;
}

mla_status mla_workspace_init(mla_runtime *runtime, const DLTensor *workspace, CUstream stream) {
    MLA_ARG_CHECK(runtime != NULL, "runtime: expected a runtime, got NULL");
    MLA_FORWARD_IF_ERROR(mla__dsv4_check_workspace(runtime, workspace, MLA__DSV4_PLAN_END));
    MLA_FORWARD_IF_ERROR(mla__runtime_enter(runtime));
    MLA_CU(runtime, cuMemsetD8Async(mla__data(workspace), 0, MLA_DSV4_BARRIER_BYTES, stream));
    return MLA_OK;
}

void mla_buffer_free(mla_runtime *runtime, mla_buffer *buffer) {
    if (buffer == NULL || buffer->ptr == 0) return;
    if (runtime != NULL && runtime->has_device && mla__runtime_enter(runtime) == MLA_OK)
        runtime->drv.cuMemFree(buffer->ptr);
    memset(buffer, 0, sizeof *buffer);
}
