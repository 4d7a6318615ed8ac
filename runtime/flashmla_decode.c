/* FlashMLA-compatible dense decode: argument checks and dispatch of mla_flash_with_kvcache (the
 * decode kernel, then the split combine), its shape helper and the decode kind builders
 * (kernel_src/flashmla/decode.cu, the portable kernel; decode_sm90.cu, the wgmma kernel that
 * sm_90a runs for 16-bit KV). */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "runtime/fakequant_kinds.h"
#include "runtime/flashmla_kinds.h"
#include "runtime/flashmla_sparse.h"
#include "runtime/internal.h"

#define MAX_S_Q 1024
#define MAX_H_Q 2048
#define MAX_H_KV 65535   /* decode grid.y */
#define LOG2E 1.4426950408889634

static const char *const kv_names[] = {"bfloat16", "float16", "float8_e4m3fn"};

/* Checks a decode spec (kv_dtype in [0, max_kv], page_class, causal) and writes the name
 * expression of kernel<kv, page_class, causal>. */
static mla_status build_decode(const mla__spec *spec, const char *kernel, long long max_kv,
                               char *name_expr, size_t size) {
    static const char *const names[] = {"kv_dtype", "page_class", "causal"};
    MLA_ARG_CHECK(spec->n_params == 3, "%s: expected 3 parameters (kv_dtype, page_class, "
                  "causal), got %d", spec->kernel, spec->n_params);
    for (int i = 0; i < 3; i++)
        MLA_ARG_CHECK(!strcmp(spec->params[i].name, names[i]), "%s: parameter %d: expected %s, "
                      "got %s", spec->kernel, i, names[i], spec->params[i].name);
    long long kv = spec->params[0].value, pc = spec->params[1].value, c = spec->params[2].value;
    MLA_ARG_CHECK(kv >= 0 && kv <= max_kv, "%s: kv_dtype: expected %s, got %lld", spec->kernel,
                  max_kv == MLA__FLASHMLA_KV_FP8 ? "0 (bfloat16), 1 (float16) or 2 (float8_e4m3fn)"
                                                 : "0 (bfloat16) or 1 (float16)", kv);
    MLA_ARG_CHECK(pc == 0 || pc == 1, "%s: page_class: expected 0 (any page size) or 1 (%s), got "
                  "%lld", spec->kernel, max_kv == MLA__FLASHMLA_KV_FP8 ? "page size a multiple of 64"
                  : "TMA loads, page size a multiple of 8", pc);
    MLA_ARG_CHECK(c == 0 || c == 1, "%s: causal: expected 0 or 1, got %lld", spec->kernel, c);
    int n = snprintf(name_expr, size, "mla::flashmla::%s<%lld, %lld, %s>", kernel, kv, pc,
                     c ? "true" : "false");
    MLA_RETURN_ERROR_IF(n < 0 || (size_t)n >= size, MLA_ERR_INTERNAL,
                        "%s: name expression buffer of %zu bytes too small", spec->kernel, size);
    return MLA_OK;
}

mla_status mla__flashmla_decode_build(const mla__spec *spec, char *name_expr, size_t size,
                                      mla__launch_info *launch) {
    MLA_FORWARD_IF_ERROR(build_decode(spec, "decode_kernel", MLA__FLASHMLA_KV_FP8, name_expr,
                                      size));
    launch->threads = MLA__FLASHMLA_DECODE_THREADS;
    launch->dynamic_smem = MLA__FLASHMLA_DECODE_SMEM;
    launch->cluster = 1;
    return MLA_OK;
}

mla_status mla__flashmla_decode_sm90_build(const mla__spec *spec, char *name_expr, size_t size,
                                           mla__launch_info *launch) {
    MLA_FORWARD_IF_ERROR(build_decode(spec, "decode_sm90_kernel", MLA__FLASHMLA_KV_FP16,
                                      name_expr, size));
    launch->threads = MLA__FLASHMLA_DECODE_THREADS;
    launch->dynamic_smem = MLA__FLASHMLA_DECODE_SM90_SMEM;
    launch->cluster = 1;
    return MLA_OK;
}

mla_status mla__flashmla_decode_sm90x2_build(const mla__spec *spec, char *name_expr, size_t size,
                                             mla__launch_info *launch) {
    MLA_ARG_CHECK(spec->n_params == 1 && !strcmp(spec->params[0].name, "kv_dtype"),
                  "%s: expected 1 parameter (kv_dtype), got %d", spec->kernel, spec->n_params);
    long long kv = spec->params[0].value;
    MLA_ARG_CHECK(kv == 0 || kv == 1, "%s: kv_dtype: expected 0 (bfloat16) or 1 (float16), got "
                  "%lld", spec->kernel, kv);
    int n = snprintf(name_expr, size, "mla::flashmla::decode_sm90x2_kernel<%lld>", kv);
    MLA_RETURN_ERROR_IF(n < 0 || (size_t)n >= size, MLA_ERR_INTERNAL,
                        "%s: name expression buffer of %zu bytes too small", spec->kernel, size);
    launch->threads = MLA__FLASHMLA_DECODE_THREADS;
    launch->dynamic_smem = MLA__FLASHMLA_DECODE_X2_SMEM;
    launch->cluster = 2;
    return MLA_OK;
}

const char *mla__flashmla_decode_kind(const char *arch, int kv, const char *force) {
    int portable = force && !strcmp(force, "portable");
    const mla__kernel_kind *sm90 = mla__kernel_kind_find("flashmla_decode_sm90");
    if (!portable && !strcmp(arch, sm90->only_arch) && kv != MLA__FLASHMLA_KV_FP8)
        return "flashmla_decode_sm90";
    return "flashmla_decode";
}

void mla_flash_with_kvcache_args_init(mla_flash_with_kvcache_args *args) {
    memset(args, 0, sizeof *args);
    args->struct_size = sizeof *args;
    args->head_dim_v = MLA_FLASHMLA_HEAD_DIM_V;
    args->softmax_scale = NAN;
}

/* Everything the checks learn about a call. */
typedef struct dims {
    int kv;                                   /* MLA__FLASHMLA_KV_* */
    int b, s_q, h_q, h_kv, page, num_blocks, max_blocks, parts, causal;
    long long rows, split_cap;                /* s_q * h_q; split slots of the workspace */
    float scale_log2;
} dims;

static int dtype_is(DLDataType dt, uint8_t code, uint8_t bits) {
    return dt.code == code && dt.bits == bits && dt.lanes == 1;
}

/* The KV kind a q dtype selects, -1 for none. */
static int kv_of(DLDataType dt) {
    if (dtype_is(dt, kDLBfloat, 16)) return MLA__FLASHMLA_KV_BF16;
    if (dtype_is(dt, kDLFloat, 16)) return MLA__FLASHMLA_KV_FP16;
    if (dtype_is(dt, MLA_DL_FLOAT8_E4M3FN, 8) || dtype_is(dt, kDLUInt, 8)) return MLA__FLASHMLA_KV_FP8;
    return -1;
}

/* A tensor of rows (q, k_cache, out): 4-D, of the KV kind kv (out: the out dtype), unit last
 * stride, other strides of dimensions longer than 1 non-negative multiples of 16 bytes,
 * 16-byte aligned. */
static mla_status check_rows_tensor(const mla_runtime *rt, const DLTensor *t, const char *name,
                                    int kv, int elem_bytes) {
    char buf[64];
    MLA_ARG_CHECK(t != NULL, "%s: expected a tensor, got NULL", name);
    MLA_ARG_CHECK(kv_of(t->dtype) == kv && (kv != MLA__FLASHMLA_KV_FP8 || elem_bytes == 1),
                  "%s: expected dtype %s, got %s", name,
                  elem_bytes == 1 ? "float8_e4m3fn (or uint8)" : kv_names[kv],
                  mla__dtype_name(t->dtype, buf, sizeof buf));
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, t, name, elem_bytes == 1 ? MLA_DT_FP8_E4M3
                                           : MLA_DT_BF16_OR_FP16, 4));
    MLA_ARG_CHECK(mla__stride(t, 3) == 1 || t->shape[3] == 1, "%s: expected a unit last stride, "
                  "got %lld", name, (long long)mla__stride(t, 3));
    for (int d = 0; d < 3; d++) {
        long long s = (long long)mla__stride(t, d);
        MLA_ARG_CHECK(t->shape[d] <= 1 || (s >= 0 && (s * elem_bytes) % 16 == 0),
                      "%s: expected stride[%d] a non-negative multiple of %d elements (16 bytes), "
                      "got %lld", name, d, 16 / elem_bytes, s);
    }
    return mla__check_align(t, name, 16);
}

/* q [b, s_q, h_q, 576]: sets kv, b, s_q, h_q. */
static mla_status check_q(const mla_runtime *rt, const DLTensor *q, dims *d) {
    char buf[64];
    MLA_ARG_CHECK(q != NULL, "q: expected a tensor, got NULL");
    d->kv = kv_of(q->dtype);
    MLA_ARG_CHECK(d->kv >= 0, "q: expected dtype bfloat16, float16 or float8_e4m3fn (or uint8), "
                  "got %s", mla__dtype_name(q->dtype, buf, sizeof buf));
    MLA_FORWARD_IF_ERROR(check_rows_tensor(rt, q, "q", d->kv, d->kv == MLA__FLASHMLA_KV_FP8 ? 1 : 2));
    MLA_FORWARD_IF_ERROR(mla__check_dim(q, "q", 3, MLA_FLASHMLA_HEAD_DIM, "head dim 576"));
    MLA_ARG_CHECK(q->shape[0] >= 1 && q->shape[0] < (1 << 24), "q: expected batch size shape[0] "
                  "in [1, 16777215], got %lld", (long long)q->shape[0]);
    MLA_ARG_CHECK(q->shape[1] >= 1 && q->shape[1] <= MAX_S_Q, "q: expected s_q = shape[1] in "
                  "[1, %d], got %lld", MAX_S_Q, (long long)q->shape[1]);
    MLA_ARG_CHECK(q->shape[2] >= 1 && q->shape[2] <= MAX_H_Q, "q: expected h_q = shape[2] in "
                  "[1, %d], got %lld", MAX_H_Q, (long long)q->shape[2]);
    d->b = (int)q->shape[0], d->s_q = (int)q->shape[1], d->h_q = (int)q->shape[2];
    d->rows = (long long)d->s_q * d->h_q;
    return MLA_OK;
}

/* k_cache [num_blocks, page, h_kv, 576] of q's kind: sets page, num_blocks, h_kv. */
static mla_status check_k_cache(const mla_runtime *rt, const DLTensor *k, dims *d) {
    MLA_FORWARD_IF_ERROR(check_rows_tensor(rt, k, "k_cache", d->kv,
                                           d->kv == MLA__FLASHMLA_KV_FP8 ? 1 : 2));
    MLA_FORWARD_IF_ERROR(mla__check_dim(k, "k_cache", 3, MLA_FLASHMLA_HEAD_DIM, "head dim 576"));
    MLA_ARG_CHECK(k->shape[0] >= 1 && k->shape[0] <= 0x7fffffff, "k_cache: expected num_blocks = "
                  "shape[0] in [1, 2147483647], got %lld", (long long)k->shape[0]);
    MLA_ARG_CHECK(k->shape[1] >= 1 && k->shape[1] <= 0x7fffffff, "k_cache: expected page_size = "
                  "shape[1] in [1, 2147483647], got %lld", (long long)k->shape[1]);
    MLA_ARG_CHECK(k->shape[2] >= 1 && k->shape[2] <= MAX_H_KV, "k_cache: expected h_kv = "
                  "shape[2] in [1, %d], got %lld", MAX_H_KV, (long long)k->shape[2]);
    MLA_ARG_CHECK(d->h_q % k->shape[2] == 0, "k_cache: expected h_kv = shape[2] dividing h_q = %d, "
                  "got %lld", d->h_q, (long long)k->shape[2]);
    d->num_blocks = (int)k->shape[0], d->page = (int)k->shape[1], d->h_kv = (int)k->shape[2];
    return MLA_OK;
}

/* block_table [b, max_blocks] int32 with a unit last stride. */
static mla_status check_block_table(const mla_runtime *rt, const DLTensor *t, dims *d) {
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, t, "block_table", MLA_DT_INT32, 2));
    MLA_FORWARD_IF_ERROR(mla__check_dim(t, "block_table", 0, d->b, "b of q"));
    MLA_ARG_CHECK(t->shape[1] <= 0x7fffffff, "block_table: expected max_blocks_per_seq = shape[1] "
                  "<= 2147483647, got %lld", (long long)t->shape[1]);
    MLA_ARG_CHECK(t->shape[1] <= 1 || mla__stride(t, 1) == 1, "block_table: expected a unit last "
                  "stride, got %lld", (long long)mla__stride(t, 1));
    MLA_ARG_CHECK(d->b == 1 || mla__stride(t, 0) >= 0, "block_table: expected a non-negative row "
                  "stride, got %lld", (long long)mla__stride(t, 0));
    d->max_blocks = (int)t->shape[1];
    return mla__check_align(t, "block_table", 4);
}

/* An int32 contiguous tensor of the schedule (cache_seqlens, num_splits). */
static mla_status check_int_vector(const mla_runtime *rt, const DLTensor *t, const char *name,
                                   int64_t n, const char *what) {
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, t, name, MLA_DT_INT32, 1));
    MLA_FORWARD_IF_ERROR(mla__check_dim(t, name, 0, n, what));
    MLA_FORWARD_IF_ERROR(mla__check_contiguous(t, name));
    return mla__check_align(t, name, 4);
}

/* cache_seqlens, tile_scheduler_metadata, num_splits: sets parts. */
static mla_status check_schedule(const mla_runtime *rt, const mla_flash_with_kvcache_args *a,
                                 dims *d) {
    const DLTensor *t = a->tile_scheduler_metadata;
    MLA_FORWARD_IF_ERROR(check_int_vector(rt, a->cache_seqlens, "cache_seqlens", d->b, "b of q"));
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, t, "tile_scheduler_metadata", MLA_DT_INT32, 2));
    MLA_FORWARD_IF_ERROR(mla__check_dim(t, "tile_scheduler_metadata", 1, 8, "ints per part"));
    MLA_ARG_CHECK(t->shape[0] >= 1 && t->shape[0] <= 65535, "tile_scheduler_metadata: expected "
                  "num_sm_parts = shape[0] in [1, 65535], got %lld", (long long)t->shape[0]);
    MLA_FORWARD_IF_ERROR(mla__check_contiguous(t, "tile_scheduler_metadata"));
    MLA_FORWARD_IF_ERROR(mla__check_align(t, "tile_scheduler_metadata", 4));
    d->parts = (int)t->shape[0];
    return check_int_vector(rt, a->num_splits, "num_splits", (int64_t)d->b + 1, "b + 1");
}

/* A [1] float32 descale: required for fp8 q, NULL otherwise. */
static mla_status check_descale(const mla_runtime *rt, const DLTensor *t, const char *name,
                                int kv) {
    if (kv != MLA__FLASHMLA_KV_FP8) {
        MLA_ARG_CHECK(t == NULL, "%s: expected NULL with a %s q (descales belong to fp8 q), got a "
                      "tensor", name, kv_names[kv]);
        return MLA_OK;
    }
    MLA_ARG_CHECK(t != NULL, "%s: expected a [1] float32 tensor with an fp8 q, got NULL", name);
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, t, name, MLA_DT_FP32, 1));
    MLA_FORWARD_IF_ERROR(mla__check_dim(t, name, 0, 1, "one scale"));
    return mla__check_align(t, name, 4);
}

/* head_dim_v, softmax_scale, causal, is_fp8_kvcache, indices, descales. */
static mla_status check_scalars(const mla_runtime *rt, const mla_flash_with_kvcache_args *a,
                                dims *d) {
    MLA_ARG_CHECK(a->attn_sink == NULL && a->topk_length == NULL, "attn_sink, topk_length: "
                  "expected NULL without indices (sparse decode extensions)");
    MLA_ARG_CHECK(a->head_dim_v == MLA_FLASHMLA_HEAD_DIM_V, "head_dim_v: expected %d, got %d",
                  MLA_FLASHMLA_HEAD_DIM_V, a->head_dim_v);
    MLA_ARG_CHECK(isnan(a->softmax_scale) || isfinite(a->softmax_scale), "softmax_scale: expected "
                  "a finite value or NAN (None: 576^-0.5), got %g", (double)a->softmax_scale);
    MLA_ARG_CHECK(a->causal == 0 || a->causal == 1, "causal: expected 0 or 1, got %d", a->causal);
    MLA_ARG_CHECK(a->is_fp8_kvcache == 0 || a->is_fp8_kvcache == 1,
                  "is_fp8_kvcache: expected 0 or 1, got %d", a->is_fp8_kvcache);
    MLA_ARG_CHECK(!a->is_fp8_kvcache || d->kv == MLA__FLASHMLA_KV_FP8, "is_fp8_kvcache: an fp8 "
                  "k_cache with a %s q is the sparse decode's (needs indices); the dense fp8 "
                  "decode takes an fp8 q", kv_names[d->kv]);
    MLA_FORWARD_IF_ERROR(check_descale(rt, a->descale_q, "descale_q", d->kv));
    MLA_FORWARD_IF_ERROR(check_descale(rt, a->descale_k, "descale_k", d->kv));
    double scale = isnan(a->softmax_scale) ? 1.0 / sqrt((double)MLA_FLASHMLA_HEAD_DIM)
                                           : (double)a->softmax_scale;
    d->scale_log2 = (float)(scale * LOG2E);
    d->causal = a->causal && d->s_q > 1;
    return MLA_OK;
}

/* out, softmax_lse, workspace: sets split_cap. */
static mla_status check_outputs(const mla_runtime *rt, const mla_flash_with_kvcache_args *a,
                                dims *d) {
    int out_kv = d->kv == MLA__FLASHMLA_KV_FP16 ? MLA__FLASHMLA_KV_FP16 : MLA__FLASHMLA_KV_BF16;
    MLA_FORWARD_IF_ERROR(check_rows_tensor(rt, a->out, "out", out_kv, 2));
    const int64_t want_out[4] = {d->b, d->s_q, d->h_q, MLA_FLASHMLA_HEAD_DIM_V};
    static const char *const out_what[4] = {"b of q", "s_q of q", "h_q of q", "head_dim_v"};
    for (int i = 0; i < 4; i++)
        MLA_FORWARD_IF_ERROR(mla__check_dim(a->out, "out", i, want_out[i], out_what[i]));
    const DLTensor *lse = a->softmax_lse;
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, lse, "softmax_lse", MLA_DT_FP32, 3));
    MLA_FORWARD_IF_ERROR(mla__check_dim(lse, "softmax_lse", 0, d->b, "b of q"));
    MLA_FORWARD_IF_ERROR(mla__check_dim(lse, "softmax_lse", 1, d->h_q, "h_q of q"));
    MLA_FORWARD_IF_ERROR(mla__check_dim(lse, "softmax_lse", 2, d->s_q, "s_q of q"));
    MLA_FORWARD_IF_ERROR(mla__check_contiguous(lse, "softmax_lse"));
    MLA_FORWARD_IF_ERROR(mla__check_align(lse, "softmax_lse", 4));
    const DLTensor *ws = a->workspace;
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, ws, "workspace", MLA_DT_UINT8, 1));
    MLA_FORWARD_IF_ERROR(mla__check_contiguous(ws, "workspace"));
    MLA_FORWARD_IF_ERROR(mla__check_align(ws, "workspace", MLA__FLASHMLA_WS_ALIGN));
    long long need = (long long)d->b + d->parts;
    size_t need_bytes = mla__flashmla_ws_bytes(d->rows, need);
    MLA_ARG_CHECK((size_t)ws->shape[0] >= need_bytes, "workspace: expected at least %zu bytes "
                  "(b + num_sm_parts = %lld split slots of s_q * h_q = %lld rows), got %lld",
                  need_bytes, need, d->rows, (long long)ws->shape[0]);
    d->split_cap = mla__flashmla_ws_slots(d->rows, (size_t)ws->shape[0]);
    if (d->split_cap > 0x7fffffff) d->split_cap = 0x7fffffff;
    return MLA_OK;
}

static mla_status check_call(const mla_runtime *rt, const mla_flash_with_kvcache_args *a,
                             dims *d) {
    MLA_FORWARD_IF_ERROR(mla__flashmla_check_kvcache_args(a));
    MLA_FORWARD_IF_ERROR(check_q(rt, a->q, d));
    MLA_FORWARD_IF_ERROR(check_k_cache(rt, a->k_cache, d));
    MLA_FORWARD_IF_ERROR(check_block_table(rt, a->block_table, d));
    MLA_FORWARD_IF_ERROR(check_schedule(rt, a, d));
    MLA_FORWARD_IF_ERROR(check_scalars(rt, a, d));
    return check_outputs(rt, a, d);
}

mla_status mla_flash_with_kvcache_shape(const mla_flash_with_kvcache_args *args, int max_splits,
                                        mla_flash_with_kvcache_sizes *sizes) {
    dims d = {0};
    MLA_ARG_CHECK(args != NULL, "args: expected mla_flash_with_kvcache_args, got NULL");
    MLA_ARG_CHECK(sizes != NULL, "sizes: expected an output struct, got NULL");
    if (args->indices) return mla__flash_sparse_decode_shape(args, sizes);
    MLA_FORWARD_IF_ERROR(check_q(NULL, args->q, &d));
    MLA_ARG_CHECK(args->head_dim_v == MLA_FLASHMLA_HEAD_DIM_V, "head_dim_v: expected %d, got %d",
                  MLA_FLASHMLA_HEAD_DIM_V, args->head_dim_v);
    const DLTensor *t = args->tile_scheduler_metadata;
    MLA_ARG_CHECK(t != NULL && t->ndim == 2 && t->shape && t->shape[0] >= 1,
                  "tile_scheduler_metadata: expected a [num_sm_parts, 8] tensor (its shape gives "
                  "the number of parts)");
    long long need = (long long)d.b + t->shape[0];
    MLA_ARG_CHECK(max_splits == 0 || max_splits >= need, "max_splits: expected 0 or >= b + "
                  "num_sm_parts = %lld, got %d", need, max_splits);
    long long slots = max_splits ? max_splits : need;
    sizes->out[0] = d.b, sizes->out[1] = d.s_q, sizes->out[2] = d.h_q;
    sizes->out[3] = MLA_FLASHMLA_HEAD_DIM_V;
    sizes->softmax_lse[0] = d.b, sizes->softmax_lse[1] = d.h_q, sizes->softmax_lse[2] = d.s_q;
    sizes->workspace_bytes = mla__flashmla_ws_bytes(d.rows, slots);
    sizes->max_splits = (int)slots;
    return MLA_OK;
}

/* Loads the kernel of a spec (kind name and up to three parameters). */
static mla_status get_kernel(mla_runtime *rt, const char *kind, const char *const *names,
                             const long long *values, int n, const mla__kernel **k) {
    mla__spec spec;
    mla__spec_init(&spec, kind);
    for (int i = 0; i < n; i++) MLA_FORWARD_IF_ERROR(mla__spec_add(&spec, names[i], values[i]));
    return mla__get_kernel(rt, &spec, k);
}

static void fill_decode_params(const mla_flash_with_kvcache_args *a, const dims *d,
                               mla__flashmla_decode_params *p) {
    CUdeviceptr ws = mla__data(a->workspace);
    memset(p, 0, sizeof *p);
    p->q = mla__data(a->q);
    p->q_stride_b = mla__stride(a->q, 0), p->q_stride_s = mla__stride(a->q, 1);
    p->q_stride_h = mla__stride(a->q, 2);
    p->k = mla__data(a->k_cache);
    p->k_stride_block = mla__stride(a->k_cache, 0), p->k_stride_tok = mla__stride(a->k_cache, 1);
    p->k_stride_head = mla__stride(a->k_cache, 2);
    p->block_table = mla__data(a->block_table), p->bt_stride = mla__stride(a->block_table, 0);
    p->seqlens = mla__data(a->cache_seqlens);
    p->sched = mla__data(a->tile_scheduler_metadata), p->num_splits = mla__data(a->num_splits);
    p->descale_q = a->descale_q ? mla__data(a->descale_q) : 0;
    p->descale_k = a->descale_k ? mla__data(a->descale_k) : 0;
    p->out = mla__data(a->out);
    p->o_stride_b = mla__stride(a->out, 0), p->o_stride_s = mla__stride(a->out, 1);
    p->o_stride_h = mla__stride(a->out, 2);
    p->lse = mla__data(a->softmax_lse);
    p->o_accum = ws, p->lse_accum = ws + mla__flashmla_ws_lse_offset(d->rows, d->split_cap);
    p->b = d->b, p->s_q = d->s_q, p->h_q = d->h_q, p->h_kv = d->h_kv;
    p->heads_per_kv = d->h_q / d->h_kv, p->page_size = d->page;
    p->max_blocks = d->max_blocks, p->num_blocks = d->num_blocks;
    p->num_parts = d->parts, p->split_cap = (int)d->split_cap;
    p->scale_log2 = d->scale_log2;
    p->page_shift = -1;
    for (int sh = 0; sh < 31; sh++)
        if (d->page == 1 << sh) p->page_shift = sh;
}

/* Rows of a TMA box of the sm_90a kernel (decode_sm90.cu tma_box_rows): the largest power of two
 * dividing the page size, at most 64. */
static int tma_box_rows(int page) {
    int r = page & -page;
    return r < MLA__FLASHMLA_UNIT_KEYS ? r : MLA__FLASHMLA_UNIT_KEYS;
}

/* The TMA descriptor of k_cache for the sm_90a kernel's page class 1: k_cache [num_blocks, page,
 * h_kv, 576] as a 4-D tensor (innermost dimension first), boxes of 64 columns x 1 head x
 * tma_box_rows keys x 1 page (one 64-column piece of a tile's rows in one page), 128-byte
 * swizzle, out-of-range boxes read as zeros.
 * Strides of dimensions of size 1 are free in the tensor and replaced by a valid one. Returns 0
 * when the driver refuses the descriptor (the caller then runs the cp.async path). */
static int encode_k_tma(mla_runtime *rt, const mla__flashmla_decode_params *p, const dims *d,
                        CUtensorMap *map) {
    const cuuint64_t row = MLA_FLASHMLA_HEAD_DIM * 2;
    cuuint64_t dim[4] = {MLA_FLASHMLA_HEAD_DIM, (cuuint64_t)d->h_kv, (cuuint64_t)d->page,
                         (cuuint64_t)d->num_blocks};
    cuuint64_t stride[3] = {(cuuint64_t)p->k_stride_head * 2, (cuuint64_t)p->k_stride_tok * 2,
                            (cuuint64_t)p->k_stride_block * 2};
    for (int i = 0; i < 3; i++)
        if (dim[i + 1] == 1) stride[i] = row;
    const cuuint32_t box[4] = {64, 1, (cuuint32_t)tma_box_rows(d->page), 1};
    const cuuint32_t estride[4] = {1, 1, 1, 1};
    CUresult r = rt->drv.cuTensorMapEncodeTiled(
        map, d->kv == MLA__FLASHMLA_KV_FP16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                           : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        4, (void *)(uintptr_t)p->k, dim, stride, box, estride, CU_TENSOR_MAP_INTERLEAVE_NONE,
        CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        mla__log(rt, MLA_LOG_DEBUG, "flashmla decode: no TMA descriptor for k_cache (CUresult %d): "
                 "cp.async loads", (int)r);
    return r == CUDA_SUCCESS;
}

static mla_status launch_decode(mla_runtime *rt, const mla__flashmla_decode_params *p,
                                const dims *d, CUstream stream) {
    static const char *const names[] = {"kv_dtype", "page_class", "causal"};
    const char *kind = mla__flashmla_decode_kind(rt->arch, d->kv,
                                                 rt->flashmla_decode_portable ? "portable" : NULL);
    const int sm90 = !strcmp(kind, "flashmla_decode_sm90");
    /* Portable kernel: page class 1 when a 64-key tile lies in one page. The sm_90a kernel
     * loads page class 1 tiles by TMA in boxes of at least 8 rows, whose smem destinations then
     * start on 1024-byte swizzle atoms (the descriptor is its second parameter, passed by value,
     * so graph capture keeps it); smaller boxes (page sizes not multiples of 8) take cp.async. */
    int page_class = sm90 ? tma_box_rows(d->page) >= MLA__FLASHMLA_TMA_MIN_ROWS
                          : d->page % MLA__FLASHMLA_UNIT_KEYS == 0;
    CUtensorMap map;
    const mla__kernel *k_x2 = NULL;
    memset(&map, 0, sizeof map);
    if (sm90 && page_class == 1 && !encode_k_tma(rt, p, d, &map)) page_class = 0;
    long long q_rows = (long long)d->s_q * (d->h_q / d->h_kv);
    unsigned m_blocks = (unsigned)((q_rows + MLA__FLASHMLA_BLOCK_M - 1) / MLA__FLASHMLA_BLOCK_M);
    void *args[] = {(void *)p, (void *)&map};
    /* On request ($MLAJIT_FLASHMLA_DECODE=pair; measured slower): the cp.async path without a
     * causal mask, head blocks in pairs, on the CTA pair (each CTA copies half of every tile and
     * sends it to the other), its parts' two CTAs neighbours along x. */
    if (sm90 && page_class == 0 && !d->causal && m_blocks % 2 == 0 && rt->flashmla_decode_pair) {
        const long long kv = d->kv;
        MLA_FORWARD_IF_ERROR(get_kernel(rt, "flashmla_decode_sm90x2", names, &kv, 1, &k_x2));
        return mla__launch_pdl(rt, k_x2, 2u * (unsigned)d->parts, (unsigned)d->h_kv, m_blocks / 2,
                               stream, args);
    }
    const long long values[] = {d->kv, page_class, d->causal};
    const mla__kernel *k = NULL;
    MLA_FORWARD_IF_ERROR(get_kernel(rt, kind, names, values, 3, &k));
    /* Programmatic dependent of the stream's previous kernel: the decode waits for it before
     * reading anything, so only its launch overlaps that kernel's tail. */
    return mla__launch_pdl(rt, k, (unsigned)d->parts, (unsigned)d->h_kv, m_blocks, stream, args);
}

static mla_status launch_combine(mla_runtime *rt, const mla__flashmla_decode_params *dp,
                                 const dims *d, const char *kind, CUstream stream) {
    static const char *const names[] = {"out_dtype"};
    const long long values[] = {d->kv == MLA__FLASHMLA_KV_FP16};
    const mla__kernel *k = NULL;
    MLA_FORWARD_IF_ERROR(get_kernel(rt, kind, names, values, 1, &k));
    mla__flashmla_combine_params p = {
        .o_accum = dp->o_accum, .lse_accum = dp->lse_accum, .num_splits = dp->num_splits,
        .out = dp->out, .o_stride_b = dp->o_stride_b, .o_stride_s = dp->o_stride_s,
        .o_stride_h = dp->o_stride_h, .lse = dp->lse, .b = d->b, .s_q = d->s_q, .h_q = d->h_q,
        .split_cap = dp->split_cap, .seqlens = dp->seqlens,
    };
    unsigned row_blocks = (unsigned)((d->rows + MLA__FLASHMLA_COMBINE_ROWS - 1) /
                                     MLA__FLASHMLA_COMBINE_ROWS);
    void *args[] = {&p};
    /* Programmatic dependent of the decode: its launch overlaps the decode's tail (the kernel
     * waits for the decode's results before reading them). */
    return mla__launch_pdl(rt, k, (unsigned)d->b, row_blocks, 1, stream, args);
}

mla_status mla__flash_with_kvcache_fq(mla_runtime *rt, const mla_flash_with_kvcache_args *args,
                                      int k_qdq, int v_qdq, float k_scale, float v_scale,
                                      int chunk_units, CUstream stream) {
    static const char *const names[] = {"cache_dtype", "k_qdq", "v_qdq", "p_qdq"};
    MLA_ARG_CHECK(rt != NULL, "runtime: expected a runtime, got NULL");
    MLA_ARG_CHECK(args && !args->indices, "args: expected dense decode arguments");
    dims d = {0};
    MLA_FORWARD_IF_ERROR(check_call(rt, args, &d));
    const mla__kernel_kind *kind = mla__kernel_kind_find("fakequant_decode_dense");
    MLA_RETURN_ERROR_IF(!kind || strcmp(rt->arch, kind->only_arch) || d.kv == MLA__FLASHMLA_KV_FP8
                        || d.causal || tma_box_rows(d.page) < MLA__FLASHMLA_TMA_MIN_ROWS,
                        MLA_ERR_NOT_SUPPORTED, "fake-quant K/V dense decode: needs sm_90a, 16-bit "
                        "KV, not causal, a page size multiple of %d", MLA__FLASHMLA_TMA_MIN_ROWS);
    mla__flashmla_decode_params p;
    fill_decode_params(args, &d, &p);
    p.scale_log2 = (float)((double)d.scale_log2 * k_scale);   /* qk_eff: S is on the K codes */
    CUtensorMap map;
    memset(&map, 0, sizeof map);
    MLA_RETURN_ERROR_IF(!encode_k_tma(rt, &p, &d, &map), MLA_ERR_NOT_SUPPORTED,
                        "fake-quant K/V dense decode: no TMA descriptor for k_cache");
    MLA_FORWARD_IF_ERROR(mla__runtime_enter(rt));
    const long long values[] = {d.kv, k_qdq, v_qdq, 0};
    const mla__kernel *k = NULL;
    mla__spec spec;
    mla__spec_init(&spec, "fakequant_decode_dense");
    for (int i = 0; i < 4; i++) MLA_FORWARD_IF_ERROR(mla__spec_add(&spec, names[i], values[i]));
    MLA_FORWARD_IF_ERROR(mla__get_kernel(rt, &spec, &k));
    unsigned m_blocks = (unsigned)((d.rows / d.h_kv + MLA__FLASHMLA_BLOCK_M - 1) /
                                   MLA__FLASHMLA_BLOCK_M);
    /* the codes' shortcut where the host proved it exact, but for K and V both NVFP4, where the
     * kernel measured 3 % slower with it (H200, 2026-12-02 15:41 UTC: 1730 against 1674 us at L
     * 4096; every other mode faster) */
    const int f16 = d.kv == MLA__FLASHMLA_KV_FP16;
    const int both_nvfp4 = k_qdq == MLA_QDQ_NVFP4 && v_qdq == MLA_QDQ_NVFP4;
    mla__fq_dense_scales fq = {k_scale, v_scale, chunk_units,
                               both_nvfp4 ? 0
                                          : mla__fq_codes_quick(rt, k_qdq, k_scale, f16) |
                                                mla__fq_codes_quick(rt, v_qdq, v_scale, f16) << 1};
    void *kargs[] = {(void *)&p, (void *)&map, (void *)&fq};
    MLA_FORWARD_IF_ERROR(mla__launch_pdl(rt, k, (unsigned)d.parts, (unsigned)d.h_kv, m_blocks,
                                         stream, kargs));
    /* the fake-quant combine: -inf as the lse of requests without keys */
    return launch_combine(rt, &p, &d, "fakequant_dense_combine", stream);
}

mla_status mla_flash_with_kvcache(mla_runtime *runtime, const mla_flash_with_kvcache_args *args,
                                  CUstream stream) {
    MLA_ARG_CHECK(runtime != NULL, "runtime: expected a runtime, got NULL");
    if (args && args->indices) return mla__flash_sparse_decode(runtime, args, stream);
    return mla__flash_with_kvcache(runtime, args, "flashmla_combine", stream);
}

mla_status mla__flash_with_kvcache(mla_runtime *runtime, const mla_flash_with_kvcache_args *args,
                                   const char *combine_kind, CUstream stream) {
    MLA_ARG_CHECK(runtime != NULL, "runtime: expected a runtime, got NULL");
    dims d = {0};
    MLA_FORWARD_IF_ERROR(check_call(runtime, args, &d));
    mla__flashmla_decode_params p;
    fill_decode_params(args, &d, &p);
    MLA_FORWARD_IF_ERROR(mla__runtime_enter(runtime));
    MLA_FORWARD_IF_ERROR(launch_decode(runtime, &p, &d, stream));
    return launch_combine(runtime, &p, &d, combine_kind, stream);
}
