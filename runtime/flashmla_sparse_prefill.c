/* FlashMLA-compatible sparse prefill: mla_flash_sparse_fwd (argument checks and dispatch of
 * kernel_src/flashmla/sparse_prefill.cu), its shape helper and the kind builder. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "runtime/flashmla_sparse.h"
#include "runtime/internal.h"

#define LOG2E 1.4426950408889634
#define MAX_S_Q 0x7fffffff   /* grid.x */
#define MAX_TOPK (1 << 24)

mla_status mla__flashmla_sparse_prefill_build(const mla__spec *spec, char *name_expr, size_t size,
                                              mla__launch_info *launch) {
    MLA_ARG_CHECK(spec->n_params == 1 && !strcmp(spec->params[0].name, "d_qk"),
                  "%s: expected the parameter d_qk", spec->kernel);
    long long d = spec->params[0].value;
    MLA_ARG_CHECK(d == 576 || d == 512, "%s: d_qk: expected 576 or 512, got %lld", spec->kernel, d);
    int n = snprintf(name_expr, size, "mla::flashmla::sparse::sparse_prefill_kernel<%lld>", d);
    MLA_RETURN_ERROR_IF(n < 0 || (size_t)n >= size, MLA_ERR_INTERNAL,
                        "%s: name expression buffer of %zu bytes too small", spec->kernel, size);
    launch->threads = MLA__FLASHMLA_SPARSE_THREADS;
    launch->dynamic_smem = d == 576 ? MLA__FLASHMLA_SPARSE_PREFILL_SMEM_576
                                    : MLA__FLASHMLA_SPARSE_PREFILL_SMEM_512;
    launch->cluster = 1;
    return MLA_OK;
}

void mla_flash_sparse_fwd_args_init(mla_flash_sparse_fwd_args *args) {
    memset(args, 0, sizeof *args);
    args->struct_size = sizeof *args;
    args->sm_scale = NAN;
    args->d_v = MLA_FLASHMLA_HEAD_DIM_V;
}

/* Everything the checks learn about a call. */
typedef struct pdims {
    int s_q, h_q, d_qk, topk, s_kv;
} pdims;

/* q [s_q, h_q, d_qk]: sets s_q, h_q, d_qk. */
static mla_status check_q(const mla_runtime *rt, const DLTensor *q, pdims *d) {
    MLA_FORWARD_IF_ERROR(mla__flashmla_check_bf16_rows(rt, q, "q", 3));
    MLA_ARG_CHECK(q->shape[0] >= 1 && q->shape[0] <= MAX_S_Q, "q: expected s_q = shape[0] in "
                  "[1, %d], got %lld", MAX_S_Q, (long long)q->shape[0]);
    long long h = q->shape[1];
    MLA_ARG_CHECK(h == 16 || h == 32 || h == 64 || h == 128, "q: expected h_q = shape[1] in {16, "
                  "32, 64, 128}, got %lld", h);
    MLA_ARG_CHECK(q->shape[2] == 576 || q->shape[2] == 512, "q: expected d_qk = shape[2] 576 or "
                  "512, got %lld", (long long)q->shape[2]);
    d->s_q = (int)q->shape[0], d->h_q = (int)h, d->d_qk = (int)q->shape[2];
    return MLA_OK;
}

/* kv [s_kv, 1, d_qk]: sets s_kv. */
static mla_status check_kv(const mla_runtime *rt, const DLTensor *kv, pdims *d) {
    MLA_FORWARD_IF_ERROR(mla__flashmla_check_bf16_rows(rt, kv, "kv", 3));
    MLA_ARG_CHECK(kv->shape[0] >= 1 && kv->shape[0] <= 0x7fffffff, "kv: expected s_kv = shape[0] "
                  "in [1, 2147483647], got %lld", (long long)kv->shape[0]);
    MLA_FORWARD_IF_ERROR(mla__check_dim(kv, "kv", 1, 1, "h_kv 1"));
    MLA_FORWARD_IF_ERROR(mla__check_dim(kv, "kv", 2, d->d_qk, "d_qk of q"));
    d->s_kv = (int)kv->shape[0];
    return MLA_OK;
}

/* indices [s_q, 1, topk] int32 with a unit last stride: sets topk. */
static mla_status check_indices(const mla_runtime *rt, const DLTensor *t, pdims *d) {
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, t, "indices", MLA_DT_INT32, 3));
    MLA_FORWARD_IF_ERROR(mla__check_dim(t, "indices", 0, d->s_q, "s_q of q"));
    MLA_FORWARD_IF_ERROR(mla__check_dim(t, "indices", 1, 1, "h_kv 1"));
    MLA_ARG_CHECK(t->shape[2] >= 1 && t->shape[2] <= MAX_TOPK, "indices: expected topk = "
                  "shape[2] in [1, %d], got %lld", MAX_TOPK, (long long)t->shape[2]);
    MLA_ARG_CHECK(t->shape[2] == 1 || mla__stride(t, 2) == 1, "indices: expected a unit last "
                  "stride, got %lld", (long long)mla__stride(t, 2));
    MLA_ARG_CHECK(mla__stride(t, 0) >= 0, "indices: expected a non-negative stride[0], got %lld",
                  (long long)mla__stride(t, 0));
    d->topk = (int)t->shape[2];
    return mla__check_align(t, "indices", 4);
}

/* A [s_q, h_q] float32 contiguous output (max_logits, lse). */
static mla_status check_stat(const mla_runtime *rt, const DLTensor *t, const char *name,
                             const pdims *d) {
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, t, name, MLA_DT_FP32, 2));
    MLA_FORWARD_IF_ERROR(mla__check_dim(t, name, 0, d->s_q, "s_q of q"));
    MLA_FORWARD_IF_ERROR(mla__check_dim(t, name, 1, d->h_q, "h_q of q"));
    MLA_FORWARD_IF_ERROR(mla__check_contiguous(t, name));
    return mla__check_align(t, name, 4);
}

static mla_status check_outputs(const mla_runtime *rt, const mla_flash_sparse_fwd_args *a,
                                const pdims *d) {
    MLA_FORWARD_IF_ERROR(mla__flashmla_check_bf16_rows(rt, a->out, "out", 3));
    MLA_FORWARD_IF_ERROR(mla__check_dim(a->out, "out", 0, d->s_q, "s_q of q"));
    MLA_FORWARD_IF_ERROR(mla__check_dim(a->out, "out", 1, d->h_q, "h_q of q"));
    MLA_FORWARD_IF_ERROR(mla__check_dim(a->out, "out", 2, MLA_FLASHMLA_HEAD_DIM_V, "d_v"));
    MLA_FORWARD_IF_ERROR(check_stat(rt, a->max_logits, "max_logits", d));
    return check_stat(rt, a->lse, "lse", d);
}

static mla_status check_call(const mla_runtime *rt, const mla_flash_sparse_fwd_args *a,
                             pdims *d) {
    MLA_ARG_CHECK(a != NULL, "args: expected mla_flash_sparse_fwd_args, got NULL");
    MLA_ARG_CHECK(a->struct_size == sizeof *a, "args: struct_size %zu, expected %zu (call "
                  "mla_flash_sparse_fwd_args_init)", a->struct_size, sizeof *a);
    MLA_FORWARD_IF_ERROR(check_q(rt, a->q, d));
    MLA_FORWARD_IF_ERROR(check_kv(rt, a->kv, d));
    MLA_FORWARD_IF_ERROR(check_indices(rt, a->indices, d));
    MLA_ARG_CHECK(isfinite(a->sm_scale), "sm_scale: expected a finite value (required), got %g",
                  (double)a->sm_scale);
    MLA_ARG_CHECK(a->d_v == MLA_FLASHMLA_HEAD_DIM_V, "d_v: expected %d, got %d",
                  MLA_FLASHMLA_HEAD_DIM_V, a->d_v);
    MLA_ARG_CHECK(a->natural_log == 0 || a->natural_log == 1, "natural_log: expected 0 (base 2) "
                  "or 1, got %d", a->natural_log);
    MLA_FORWARD_IF_ERROR(mla__flashmla_check_optional_vector(rt, a->attn_sink, "attn_sink",
                                                             MLA_DT_FP32, d->h_q, "h_q of q"));
    MLA_FORWARD_IF_ERROR(mla__flashmla_check_optional_vector(rt, a->topk_length, "topk_length",
                                                             MLA_DT_INT32, d->s_q, "s_q of q"));
    return check_outputs(rt, a, d);
}

mla_status mla_flash_sparse_fwd_shape(const mla_flash_sparse_fwd_args *args,
                                      mla_flash_sparse_fwd_sizes *sizes) {
    pdims d = {0};
    MLA_ARG_CHECK(args != NULL, "args: expected mla_flash_sparse_fwd_args, got NULL");
    MLA_ARG_CHECK(sizes != NULL, "sizes: expected an output struct, got NULL");
    MLA_FORWARD_IF_ERROR(check_q(NULL, args->q, &d));
    MLA_ARG_CHECK(args->d_v == MLA_FLASHMLA_HEAD_DIM_V, "d_v: expected %d, got %d",
                  MLA_FLASHMLA_HEAD_DIM_V, args->d_v);
    sizes->out[0] = d.s_q, sizes->out[1] = d.h_q, sizes->out[2] = args->d_v;
    sizes->max_logits[0] = sizes->lse[0] = d.s_q;
    sizes->max_logits[1] = sizes->lse[1] = d.h_q;
    return MLA_OK;
}

static void fill_params(const mla_flash_sparse_fwd_args *a, const pdims *d,
                        mla__flashmla_sparse_prefill_params *p) {
    memset(p, 0, sizeof *p);
    p->q = mla__data(a->q), p->q_stride_s = mla__stride(a->q, 0);
    p->q_stride_h = mla__stride(a->q, 1);
    p->kv = mla__data(a->kv), p->kv_stride_s = mla__stride(a->kv, 0);
    p->indices = mla__data(a->indices), p->i_stride_s = mla__stride(a->indices, 0);
    p->topk_length = a->topk_length ? mla__data(a->topk_length) : 0;
    p->attn_sink = a->attn_sink ? mla__data(a->attn_sink) : 0;
    p->out = mla__data(a->out), p->o_stride_s = mla__stride(a->out, 0);
    p->o_stride_h = mla__stride(a->out, 1);
    p->max_logits = mla__data(a->max_logits), p->lse = mla__data(a->lse);
    p->s_q = d->s_q, p->h_q = d->h_q, p->topk = d->topk, p->s_kv = d->s_kv;
    p->scale_log2 = (float)((double)a->sm_scale * LOG2E);
    p->natural_log = a->natural_log;
}

mla_status mla_flash_sparse_fwd(mla_runtime *runtime, const mla_flash_sparse_fwd_args *args,
                                CUstream stream) {
    MLA_ARG_CHECK(runtime != NULL, "runtime: expected a runtime, got NULL");
    pdims d = {0};
    MLA_FORWARD_IF_ERROR(check_call(runtime, args, &d));
    mla__flashmla_sparse_prefill_params p;
    fill_params(args, &d, &p);
    p.l2_prefetch = runtime->flashmla_sparse_prefetch;
    /* The sm_90a kind's flat grid needs s_q * ceil(h_q / 64) <= 2^31 - 1 blocks. */
    const char *kind = mla__flashmla_sparse_kind(
        runtime->arch, 1, d.d_qk, d.h_q,
        runtime->flashmla_decode_portable ? "portable" : runtime->flashmla_sparse_sm90);
    const int flat = strcmp(kind, "flashmla_sparse_prefill") != 0 &&
                     (long long)d.s_q * ((d.h_q + 63) / 64) <= 0x7fffffffLL;
    mla__spec spec;
    mla__spec_init(&spec, flat ? kind : "flashmla_sparse_prefill");
    if (!flat) MLA_FORWARD_IF_ERROR(mla__spec_add(&spec, "d_qk", d.d_qk));
    return mla__flashmla_sparse_launch(runtime, &spec, (unsigned)d.s_q, d.h_q, flat, stream, &p);
}
