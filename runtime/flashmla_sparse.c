/* FlashMLA-compatible sparse decode: argument checks and dispatch of mla_flash_with_kvcache with
 * indices (kernel_src/flashmla/sparse_decode.cu and sparse_decode_sm90.cu) and its shape helper
 * (the kind builder: runtime/flashmla_sparse_checks.c).
 * One CTA per (query token, 64 heads), no split: the schedule and the workspace are not used. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "runtime/flashmla_sparse.h"
#include "runtime/internal.h"

#define LOG2E 1.4426950408889634
#define MAX_B 16777215
#define MAX_S_Q 4
#define MAX_TOPK (1 << 24)

/* Everything the checks learn about a call. */
typedef struct sdims {
    int b, s_q, h_q, topk, page;
    long long num_blocks;
    float scale_log2;
} sdims;

static int is_h_q(long long h) { return h == 8 || h == 16 || h == 32 || h == 64 || h == 128; }

/* q [b, s_q, h_q, 576] bfloat16: sets b, s_q, h_q. */
static mla_status check_q(const mla_runtime *rt, const DLTensor *q, sdims *d) {
    MLA_FORWARD_IF_ERROR(mla__flashmla_check_bf16_rows(rt, q, "q", 4));
    MLA_FORWARD_IF_ERROR(mla__check_dim(q, "q", 3, MLA_FLASHMLA_HEAD_DIM, "head dim 576"));
    MLA_ARG_CHECK(q->shape[0] >= 1 && q->shape[0] <= MAX_B, "q: expected batch size shape[0] in "
                  "[1, %d], got %lld", MAX_B, (long long)q->shape[0]);
    MLA_ARG_CHECK(q->shape[1] >= 1 && q->shape[1] <= MAX_S_Q, "q: expected s_q = shape[1] in "
                  "[1, %d] (sparse decode), got %lld", MAX_S_Q, (long long)q->shape[1]);
    MLA_ARG_CHECK(is_h_q(q->shape[2]), "q: expected h_q = shape[2] in {8, 16, 32, 64, 128} "
                  "(sparse decode), got %lld", (long long)q->shape[2]);
    d->b = (int)q->shape[0], d->s_q = (int)q->shape[1], d->h_q = (int)q->shape[2];
    return MLA_OK;
}

/* k_cache [num_blocks, page, 1, 656] bytes (float8_e4m3fn, uint8 or int8): sets page, blocks. */
static mla_status check_k_cache(const mla_runtime *rt, const DLTensor *k, sdims *d) {
    char buf[64];
    MLA_ARG_CHECK(k != NULL, "k_cache: expected a tensor, got NULL");
    DLDataType dt = k->dtype;
    MLA_ARG_CHECK(dt.bits == 8 && dt.lanes == 1 && (dt.code == MLA_DL_FLOAT8_E4M3FN ||
                  dt.code == kDLUInt || dt.code == kDLInt), "k_cache: expected dtype "
                  "float8_e4m3fn, uint8 or int8 (656-byte rows), got %s",
                  mla__dtype_name(dt, buf, sizeof buf));
    DLTensor as_u8 = *k;
    as_u8.dtype = (DLDataType){kDLUInt, 8, 1};
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, &as_u8, "k_cache", MLA_DT_UINT8, 4));
    MLA_FORWARD_IF_ERROR(mla__check_dim(k, "k_cache", 2, 1, "h_kv 1 (sparse decode)"));
    MLA_FORWARD_IF_ERROR(mla__check_dim(k, "k_cache", 3, MLA__FLASHMLA_SPARSE_ROW_BYTES,
                                        "656 bytes per token"));
    MLA_ARG_CHECK(k->shape[0] >= 1 && k->shape[1] >= 1 && k->shape[1] <= 0x7fffffff,
                  "k_cache: expected num_blocks >= 1 and page_size in [1, 2147483647], got "
                  "[%lld, %lld]", (long long)k->shape[0], (long long)k->shape[1]);
    MLA_ARG_CHECK(mla__stride(k, 3) == 1 && (k->shape[1] == 1 || mla__stride(k, 1) ==
                  MLA__FLASHMLA_SPARSE_ROW_BYTES), "k_cache: expected stride[3] == 1 and "
                  "stride[1] == 656 (whole rows), got %lld and %lld", (long long)mla__stride(k, 3),
                  (long long)mla__stride(k, 1));
    long long s0 = (long long)mla__stride(k, 0);
    MLA_ARG_CHECK(k->shape[0] == 1 || (s0 >= 0 && s0 % 16 == 0), "k_cache: expected stride[0] a "
                  "non-negative multiple of 16 bytes, got %lld", s0);
    d->page = (int)k->shape[1], d->num_blocks = (long long)k->shape[0];
    return mla__check_align(k, "k_cache", 16);
}

/* indices [b, s_q, topk] int32, unit last stride: sets topk. */
static mla_status check_indices(const mla_runtime *rt, const DLTensor *t, sdims *d) {
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, t, "indices", MLA_DT_INT32, 3));
    MLA_FORWARD_IF_ERROR(mla__check_dim(t, "indices", 0, d->b, "b of q"));
    MLA_FORWARD_IF_ERROR(mla__check_dim(t, "indices", 1, d->s_q, "s_q of q"));
    MLA_ARG_CHECK(t->shape[2] >= 1 && t->shape[2] <= MAX_TOPK, "indices: expected topk = "
                  "shape[2] in [1, %d], got %lld", MAX_TOPK, (long long)t->shape[2]);
    MLA_ARG_CHECK(t->shape[2] == 1 || mla__stride(t, 2) == 1, "indices: expected a unit last "
                  "stride, got %lld", (long long)mla__stride(t, 2));
    MLA_ARG_CHECK(mla__stride(t, 0) >= 0 && mla__stride(t, 1) >= 0, "indices: expected "
                  "non-negative strides, got %lld, %lld", (long long)mla__stride(t, 0),
                  (long long)mla__stride(t, 1));
    d->topk = (int)t->shape[2];
    return mla__check_align(t, "indices", 4);
}

/* The scalars and the dense-only arguments. */
static mla_status check_scalars(const mla_flash_with_kvcache_args *a, sdims *d) {
    MLA_ARG_CHECK(a->head_dim_v == MLA_FLASHMLA_HEAD_DIM_V, "head_dim_v: expected %d, got %d",
                  MLA_FLASHMLA_HEAD_DIM_V, a->head_dim_v);
    MLA_ARG_CHECK(isnan(a->softmax_scale) || isfinite(a->softmax_scale), "softmax_scale: expected "
                  "a finite value or NAN (None: 576^-0.5), got %g", (double)a->softmax_scale);
    MLA_ARG_CHECK(a->causal == 0, "causal: expected 0 with indices (the indices encode "
                  "visibility), got %d", a->causal);
    MLA_ARG_CHECK(a->is_fp8_kvcache == 1, "is_fp8_kvcache: expected 1 with indices (the sparse "
                  "decode reads the fp8 cache of 656-byte rows), got %d", a->is_fp8_kvcache);
    MLA_ARG_CHECK(a->descale_q == NULL && a->descale_k == NULL, "descale_q, descale_k: expected "
                  "NULL with indices (the cache rows carry their scales)");
    double scale = isnan(a->softmax_scale) ? 1.0 / sqrt((double)MLA_FLASHMLA_HEAD_DIM)
                                           : (double)a->softmax_scale;
    d->scale_log2 = (float)(scale * LOG2E);
    return MLA_OK;
}

/* out [b, s_q, h_q, 512] bfloat16 and softmax_lse [b, h_q, s_q] float32 contiguous. */
static mla_status check_outputs(const mla_runtime *rt, const mla_flash_with_kvcache_args *a,
                                const sdims *d) {
    MLA_FORWARD_IF_ERROR(mla__flashmla_check_bf16_rows(rt, a->out, "out", 4));
    const int64_t want[4] = {d->b, d->s_q, d->h_q, MLA_FLASHMLA_HEAD_DIM_V};
    static const char *const what[4] = {"b of q", "s_q of q", "h_q of q", "head_dim_v"};
    for (int i = 0; i < 4; i++) MLA_FORWARD_IF_ERROR(mla__check_dim(a->out, "out", i, want[i], what[i]));
    const DLTensor *lse = a->softmax_lse;
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, lse, "softmax_lse", MLA_DT_FP32, 3));
    MLA_FORWARD_IF_ERROR(mla__check_dim(lse, "softmax_lse", 0, d->b, "b of q"));
    MLA_FORWARD_IF_ERROR(mla__check_dim(lse, "softmax_lse", 1, d->h_q, "h_q of q"));
    MLA_FORWARD_IF_ERROR(mla__check_dim(lse, "softmax_lse", 2, d->s_q, "s_q of q"));
    MLA_FORWARD_IF_ERROR(mla__check_contiguous(lse, "softmax_lse"));
    return mla__check_align(lse, "softmax_lse", 4);
}

static mla_status check_call(const mla_runtime *rt, const mla_flash_with_kvcache_args *a,
                             sdims *d) {
    MLA_FORWARD_IF_ERROR(mla__flashmla_check_kvcache_args(a));
    MLA_FORWARD_IF_ERROR(check_q(rt, a->q, d));
    MLA_FORWARD_IF_ERROR(check_k_cache(rt, a->k_cache, d));
    MLA_FORWARD_IF_ERROR(check_indices(rt, a->indices, d));
    MLA_FORWARD_IF_ERROR(check_scalars(a, d));
    MLA_FORWARD_IF_ERROR(mla__flashmla_check_optional_vector(rt, a->attn_sink, "attn_sink",
                                                             MLA_DT_FP32, d->h_q, "h_q of q"));
    MLA_FORWARD_IF_ERROR(mla__flashmla_check_optional_vector(rt, a->topk_length, "topk_length",
                                                             MLA_DT_INT32, d->b, "b of q"));
    return check_outputs(rt, a, d);
}

mla_status mla__flash_sparse_decode_shape(const mla_flash_with_kvcache_args *args,
                                          mla_flash_with_kvcache_sizes *sizes) {
    sdims d = {0};
    MLA_ARG_CHECK(sizes != NULL, "sizes: expected an output struct, got NULL");
    MLA_FORWARD_IF_ERROR(check_q(NULL, args->q, &d));
    MLA_ARG_CHECK(args->head_dim_v == MLA_FLASHMLA_HEAD_DIM_V, "head_dim_v: expected %d, got %d",
                  MLA_FLASHMLA_HEAD_DIM_V, args->head_dim_v);
    sizes->out[0] = d.b, sizes->out[1] = d.s_q, sizes->out[2] = d.h_q;
    sizes->out[3] = MLA_FLASHMLA_HEAD_DIM_V;
    sizes->softmax_lse[0] = d.b, sizes->softmax_lse[1] = d.h_q, sizes->softmax_lse[2] = d.s_q;
    sizes->workspace_bytes = 0;  /* no split */
    sizes->max_splits = 0;
    return MLA_OK;
}

static void fill_params(const mla_flash_with_kvcache_args *a, const sdims *d,
                        mla__flashmla_sparse_decode_params *p) {
    memset(p, 0, sizeof *p);
    p->q = mla__data(a->q);
    p->q_stride_b = mla__stride(a->q, 0), p->q_stride_s = mla__stride(a->q, 1);
    p->q_stride_h = mla__stride(a->q, 2);
    p->k = mla__data(a->k_cache), p->k_stride_block_bytes = mla__stride(a->k_cache, 0);
    p->indices = mla__data(a->indices);
    p->i_stride_b = mla__stride(a->indices, 0), p->i_stride_s = mla__stride(a->indices, 1);
    p->topk_length = a->topk_length ? mla__data(a->topk_length) : 0;
    p->attn_sink = a->attn_sink ? mla__data(a->attn_sink) : 0;
    p->out = mla__data(a->out);
    p->o_stride_b = mla__stride(a->out, 0), p->o_stride_s = mla__stride(a->out, 1);
    p->o_stride_h = mla__stride(a->out, 2);
    p->lse = mla__data(a->softmax_lse);
    p->num_slots = d->num_blocks * d->page;
    p->b = d->b, p->s_q = d->s_q, p->h_q = d->h_q, p->topk = d->topk, p->page_size = d->page;
    p->scale_log2 = d->scale_log2;
}

mla_status mla__flash_sparse_decode(mla_runtime *rt, const mla_flash_with_kvcache_args *args,
                                    CUstream stream) {
    sdims d = {0};
    MLA_FORWARD_IF_ERROR(check_call(rt, args, &d));
    mla__flashmla_sparse_decode_params p;
    fill_params(args, &d, &p);
    p.l2_prefetch = rt->flashmla_sparse_prefetch;
    const char *kind = mla__flashmla_sparse_kind(
        rt->arch, 0, 0, d.h_q, rt->flashmla_decode_portable ? "portable" : rt->flashmla_sparse_sm90);
    mla__spec spec;
    mla__spec_init(&spec, kind);
    return mla__flashmla_sparse_launch(rt, &spec, (unsigned)(d.b * d.s_q), d.h_q,
                                       strcmp(kind, "flashmla_sparse_decode") != 0, stream, &p);
}
