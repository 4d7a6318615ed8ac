/* DSV4 (DeepSeek-V4) layer: argument checks and dispatch of mla_attention_plan, and the kind
 * builder of its kernel (kernel_src/dsv4/plan.cu). The workspace layout is dsv4_workspace.c. */
#include <stdio.h>
#include <string.h>

#include "runtime/internal.h"

#define DSV4_MAX_PAGE_SHIFT 20  /* page_size <= 2^20 rows */

mla_status mla__dsv4_plan_build(const mla__spec *spec, char *name_expr, size_t size,
                                mla__launch_info *launch) {
    MLA_ARG_CHECK(spec->n_params == 0, "%s: expected no parameters, got %d (first: %s)",
                  spec->kernel, spec->n_params, spec->n_params ? spec->params[0].name : "");
    int n = snprintf(name_expr, size, "mla::dsv4::plan_kernel<%d>", MLA__DSV4_PLAN_THREADS);
    MLA_RETURN_ERROR_IF(n < 0 || (size_t)n >= size, MLA_ERR_INTERNAL,
                        "%s: name expression buffer of %zu bytes too small", spec->kernel, size);
    launch->threads = MLA__DSV4_PLAN_THREADS;
    launch->dynamic_smem = 0;
    launch->cluster = 1;
    return MLA_OK;
}

/* kv_indices [T, topk] int32, unit column stride; sets T, topk and the row stride. */
static mla_status check_kv_indices(const mla_runtime *rt, const DLTensor *kv, int *T, int *topk,
                                   long long *row_stride) {
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, kv, "kv_indices", MLA_DT_INT32, 2));
    int64_t t = kv->shape[0], k = kv->shape[1];
    MLA_ARG_CHECK(t >= 1 && t <= MLA_DSV4_MAX_TOKENS,
                  "kv_indices: expected T = shape[0] in [1, %d], got %lld", MLA_DSV4_MAX_TOKENS,
                  (long long)t);
    MLA_ARG_CHECK(k >= 1 && k <= (1 << 20),
                  "kv_indices: expected topk = shape[1] in [1, 1048576], got %lld", (long long)k);
    MLA_ARG_CHECK(mla__stride(kv, 1) == 1, "kv_indices: expected unit column stride, got %lld",
                  (long long)mla__stride(kv, 1));
    MLA_ARG_CHECK(t == 1 || mla__stride(kv, 0) >= 0,
                  "kv_indices: expected a non-negative row stride, got %lld",
                  (long long)mla__stride(kv, 0));
    MLA_FORWARD_IF_ERROR(mla__check_align(kv, "kv_indices", 4));
    *T = (int)t;
    *topk = (int)k;
    *row_stride = (long long)mla__stride(kv, 0);
    return MLA_OK;
}

/* An optional [T] int32 contiguous per-token vector (topk_lengths, c128_attn_len). */
static mla_status check_token_vector(const mla_runtime *rt, const DLTensor *v, const char *name,
                                     int T) {
    if (v == NULL) return MLA_OK;
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, v, name, MLA_DT_INT32, 1));
    MLA_FORWARD_IF_ERROR(mla__check_dim(v, name, 0, T, "T of kv_indices"));
    MLA_FORWARD_IF_ERROR(mla__check_contiguous(v, name));
    return mla__check_align(v, name, 4);
}

/* page_size a power of two in [1, 2^20]; sets its log2. */
static mla_status check_page_size(int page_size, int *shift) {
    MLA_ARG_CHECK(page_size > 0 && (page_size & (page_size - 1)) == 0 &&
                      page_size <= (1 << DSV4_MAX_PAGE_SHIFT),
                  "page_size: expected a power of two in [1, %d], got %d",
                  1 << DSV4_MAX_PAGE_SHIFT, page_size);
    int s = 0;
    while ((1 << s) < page_size) ++s;
    *shift = s;
    return MLA_OK;
}

/* The [T, 4] int32 plan view at p, strides {4, 1}. */
static void fill_plan_view(mla_tensor *plan, CUdeviceptr p, DLDevice device, int T) {
    memset(plan, 0, sizeof *plan);
    plan->shape[0] = T;
    plan->shape[1] = 4;
    plan->strides[0] = 4;
    plan->strides[1] = 1;
    plan->tensor.data = (void *)(uintptr_t)p;
    plan->tensor.device = device;
    plan->tensor.ndim = 2;
    plan->tensor.dtype = (DLDataType){kDLInt, 32, 1};
    plan->tensor.shape = plan->shape;
    plan->tensor.strides = plan->strides;
}

/* Everything the plan kernel takes, in its argument order. */
typedef struct plan_args {
    CUdeviceptr kv_indices;
    long long row_stride;
    CUdeviceptr topk_lengths;
    int T, topk, page_shift, step;
    CUdeviceptr plan_out, barrier_bank;
    int barrier_words;
} plan_args;

static mla_status launch_plan(mla_runtime *rt, plan_args *a, CUstream stream) {
    mla__spec spec;
    mla__spec_init(&spec, "dsv4_attention_plan");
    const mla__kernel *k = NULL;
    MLA_FORWARD_IF_ERROR(mla__get_kernel(rt, &spec, &k));
    void *args[] = {&a->kv_indices, &a->row_stride,  &a->topk_lengths, &a->T,
                    &a->topk,       &a->page_shift,  &a->step,         &a->plan_out,
                    &a->barrier_bank, &a->barrier_words};
    const int tokens_per_block = k->launch.threads / 32; /* one warp per token */
    unsigned grid = (unsigned)((a->T + tokens_per_block - 1) / tokens_per_block);
    return mla__launch(rt, k, grid, 1, 1, stream, args);
}

mla_status mla_attention_plan(mla_runtime *runtime, const DLTensor *kv_indices,
                              const DLTensor *topk_lengths, int page_size, int kv_run_step,
                              const DLTensor *c128_attn_len, const DLTensor *workspace,
                              CUstream stream, mla_tensor *plan) {
    MLA_ARG_CHECK(runtime != NULL, "runtime: expected a runtime, got NULL");
    plan_args a = {0};
    MLA_FORWARD_IF_ERROR(check_kv_indices(runtime, kv_indices, &a.T, &a.topk, &a.row_stride));
    MLA_FORWARD_IF_ERROR(check_token_vector(runtime, topk_lengths, "topk_lengths", a.T));
    MLA_FORWARD_IF_ERROR(check_page_size(page_size, &a.page_shift));
    MLA_ARG_CHECK(kv_run_step == 1 || kv_run_step == -1,
                  "kv_run_step: expected 1 or -1, got %d", kv_run_step);
    MLA_FORWARD_IF_ERROR(check_token_vector(runtime, c128_attn_len, "c128_attn_len", a.T));
    MLA_FORWARD_IF_ERROR(mla__dsv4_check_workspace(runtime, workspace, MLA__DSV4_PLAN_END));
    int kind = c128_attn_len != NULL ? MLA__DSV4_HCA : MLA__DSV4_SWA;
    a.kv_indices = mla__data(kv_indices);
    a.topk_lengths = topk_lengths != NULL ? mla__data(topk_lengths) : 0;
    a.step = kv_run_step;
    a.plan_out = mla__data(workspace) + mla__dsv4_plan_offset(kind);
    a.barrier_bank = mla__data(workspace) + mla__dsv4_bank_offset(kind);
    a.barrier_words = MLA__DSV4_BANK_BYTES / 4;
    MLA_FORWARD_IF_ERROR(mla__runtime_enter(runtime));
    MLA_FORWARD_IF_ERROR(launch_plan(runtime, &a, stream));
    if (plan != NULL) fill_plan_view(plan, a.plan_out, workspace->device, a.T);
    return MLA_OK;
}
