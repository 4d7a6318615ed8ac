/* FlashMLA-compatible family: mla_get_metadata (argument checks and dispatch) and the kind
 * builders of the metadata and combine kernels (kernel_src/flashmla/metadata.cu, combine.cu).
 * The decode is runtime/flashmla_decode.c. */
#include <stdio.h>
#include <string.h>

#include "runtime/flashmla_kinds.h"
#include "runtime/internal.h"

#define MAX_PARTS 65535   /* decode grid.x is the part; kept well inside the driver's limits */

/* Writes a name expression; MLA_ERR_INTERNAL if it does not fit. */
static mla_status name_expr_printf(const mla__spec *spec, char *out, size_t size,
                                   const char *text) {
    int n = snprintf(out, size, "%s", text);
    MLA_RETURN_ERROR_IF(n < 0 || (size_t)n >= size, MLA_ERR_INTERNAL,
                        "%s: name expression buffer of %zu bytes too small", spec->kernel, size);
    return MLA_OK;
}

mla_status mla__flashmla_metadata_build(const mla__spec *spec, char *name_expr, size_t size,
                                        mla__launch_info *launch) {
    MLA_ARG_CHECK(spec->n_params == 0, "%s: expected no parameters, got %d (first: %s)",
                  spec->kernel, spec->n_params, spec->n_params ? spec->params[0].name : "");
    char text[96];
    snprintf(text, sizeof text, "mla::flashmla::metadata_kernel<%d>",
             MLA__FLASHMLA_METADATA_THREADS);
    MLA_FORWARD_IF_ERROR(name_expr_printf(spec, name_expr, size, text));
    launch->threads = MLA__FLASHMLA_METADATA_THREADS;
    launch->dynamic_smem = 0;
    launch->cluster = 1;
    return MLA_OK;
}

mla_status mla__flashmla_combine_build(const mla__spec *spec, char *name_expr, size_t size,
                                       mla__launch_info *launch) {
    MLA_ARG_CHECK(spec->n_params == 1 && !strcmp(spec->params[0].name, "out_dtype"),
                  "%s: expected the parameter out_dtype", spec->kernel);
    long long out = spec->params[0].value;
    MLA_ARG_CHECK(out == MLA__FLASHMLA_OUT_BF16 || out == MLA__FLASHMLA_OUT_FP16,
                  "%s: out_dtype: expected 0 (bfloat16) or 1 (float16), got %lld", spec->kernel,
                  out);
    /* "fakequant_dense_combine": the same kernel with the fake-quant spec's -inf lse of empty rows */
    const int neg = !strcmp(spec->kernel, "fakequant_dense_combine");
    char text[64];
    snprintf(text, sizeof text, "mla::flashmla::combine_kernel<%s, %s>", out ? "true" : "false",
             neg ? "true" : "false");
    MLA_FORWARD_IF_ERROR(name_expr_printf(spec, name_expr, size, text));
    launch->threads = MLA__FLASHMLA_COMBINE_THREADS;
    launch->dynamic_smem = 0;
    launch->cluster = 1;
    return MLA_OK;
}

void mla_get_metadata_args_init(mla_get_metadata_args *args) {
    memset(args, 0, sizeof *args);
    args->struct_size = sizeof *args;
}

/* The scalar arguments shared by the shape helper and the call; sets *b. */
static mla_status check_metadata_scalars(const mla_runtime *rt, const mla_get_metadata_args *a,
                                         int *b) {
    MLA_ARG_CHECK(a != NULL, "args: expected mla_get_metadata_args, got NULL");
    MLA_ARG_CHECK(a->struct_size == sizeof *a, "args: struct_size %zu, expected %zu (call "
                  "mla_get_metadata_args_init)", a->struct_size, sizeof *a);
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, a->cache_seqlens, "cache_seqlens", MLA_DT_INT32, 1));
    MLA_ARG_CHECK(a->cache_seqlens->shape[0] >= 1 && a->cache_seqlens->shape[0] < (1 << 24),
                  "cache_seqlens: expected batch size shape[0] in [1, 16777215], got %lld",
                  (long long)a->cache_seqlens->shape[0]);
    MLA_ARG_CHECK(a->num_heads_k >= 1, "num_heads_k: expected >= 1, got %d", a->num_heads_k);
    MLA_ARG_CHECK(a->num_q_tokens_per_head_k >= 1, "num_q_tokens_per_head_k: expected >= 1 "
                  "(s_q * h_q / h_kv), got %d", a->num_q_tokens_per_head_k);
    MLA_ARG_CHECK(a->num_heads_q >= 0, "num_heads_q: expected >= 0 (0: None), got %d",
                  a->num_heads_q);
    MLA_ARG_CHECK(a->is_fp8_kvcache == 0 || a->is_fp8_kvcache == 1,
                  "is_fp8_kvcache: expected 0 or 1, got %d", a->is_fp8_kvcache);
    MLA_ARG_CHECK(a->topk >= 0, "topk: expected >= 0 (0: None), got %d", a->topk);
    MLA_ARG_CHECK(a->num_sm_parts >= 0 && a->num_sm_parts <= MAX_PARTS,
                  "num_sm_parts: expected 0 (from the device) or 1..%d, got %d", MAX_PARTS,
                  a->num_sm_parts);
    MLA_ARG_CHECK(a->split_tokens >= 0 && a->split_tokens % MLA__FLASHMLA_UNIT_KEYS == 0 &&
                      a->split_tokens <= (1 << 30),
                  "split_tokens: expected 0 or a positive multiple of %d, got %d",
                  MLA__FLASHMLA_UNIT_KEYS, a->split_tokens);
    MLA_ARG_CHECK(a->max_splits >= 0, "max_splits: expected >= 0 (0: b + num_sm_parts), got %d",
                  a->max_splits);
    *b = (int)a->cache_seqlens->shape[0];
    return MLA_OK;
}

mla_status mla_get_metadata_shape(mla_runtime *runtime, const mla_get_metadata_args *args,
                                  int64_t tile_scheduler_metadata_shape[2],
                                  int64_t num_splits_shape[1]) {
    MLA_ARG_CHECK(runtime != NULL, "runtime: expected a runtime, got NULL");
    int b = 0;
    MLA_FORWARD_IF_ERROR(check_metadata_scalars(runtime, args, &b));
    MLA_ARG_CHECK(tile_scheduler_metadata_shape && num_splits_shape,
                  "tile_scheduler_metadata_shape, num_splits_shape: expected arrays, got NULL");
    int parts = args->num_sm_parts;
    if (parts == 0) {
        MLA_RETURN_ERROR_IF(!runtime->has_device, MLA_ERR_NO_DEVICE, "num_sm_parts: 0 derives it "
                            "from the device, but the runtime has none (%s)",
                            runtime->no_device_reason);
        parts = mla__flashmla_num_sm_parts(runtime->sm_count, args->num_heads_k,
                                           args->num_q_tokens_per_head_k);
    }
    tile_scheduler_metadata_shape[0] = parts;
    tile_scheduler_metadata_shape[1] = 8;
    num_splits_shape[0] = (int64_t)b + 1;
    return MLA_OK;
}

/* An int32 contiguous output of the given shape (2-D: [rows, 8]; 1-D: [n]); sets *rows. */
static mla_status check_int32_out(const mla_runtime *rt, const DLTensor *t, const char *name,
                                  int ndim, int64_t want0, int64_t *rows) {
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, t, name, MLA_DT_INT32, ndim));
    if (ndim == 2) {
        MLA_FORWARD_IF_ERROR(mla__check_dim(t, name, 1, 8, "ints per part"));
        MLA_ARG_CHECK(t->shape[0] >= 1 && t->shape[0] <= MAX_PARTS, "%s: expected num_sm_parts = "
                      "shape[0] in [1, %d], got %lld", name, MAX_PARTS, (long long)t->shape[0]);
    } else {
        MLA_FORWARD_IF_ERROR(mla__check_dim(t, name, 0, want0, "b + 1"));
    }
    MLA_FORWARD_IF_ERROR(mla__check_contiguous(t, name));
    MLA_FORWARD_IF_ERROR(mla__check_align(t, name, 4));
    if (rows) *rows = t->shape[0];
    return MLA_OK;
}

mla_status mla_get_metadata(mla_runtime *runtime, const mla_get_metadata_args *args,
                            CUstream stream) {
    return mla__get_metadata(runtime, args, 0, stream);
}

mla_status mla__get_metadata(mla_runtime *runtime, const mla_get_metadata_args *args, int pdl,
                             CUstream stream) {
    MLA_ARG_CHECK(runtime != NULL, "runtime: expected a runtime, got NULL");
    int b = 0;
    int64_t parts = 0;
    MLA_FORWARD_IF_ERROR(check_metadata_scalars(runtime, args, &b));
    MLA_FORWARD_IF_ERROR(mla__check_contiguous(args->cache_seqlens, "cache_seqlens"));
    MLA_FORWARD_IF_ERROR(mla__check_align(args->cache_seqlens, "cache_seqlens", 4));
    MLA_FORWARD_IF_ERROR(check_int32_out(runtime, args->tile_scheduler_metadata,
                                         "tile_scheduler_metadata", 2, 0, &parts));
    MLA_FORWARD_IF_ERROR(check_int32_out(runtime, args->num_splits, "num_splits", 1,
                                         (int64_t)b + 1, NULL));
    long long max_splits = args->max_splits ? args->max_splits : (long long)b + parts;
    MLA_ARG_CHECK(max_splits >= (long long)b + parts, "max_splits: expected >= b + num_sm_parts "
                  "= %lld (room for the batch-dependent fallback), got %lld",
                  (long long)b + parts, max_splits);
    mla__flashmla_metadata_params p = {
        .seqlens = mla__data(args->cache_seqlens),
        .sched = mla__data(args->tile_scheduler_metadata),
        .num_splits = mla__data(args->num_splits),
        .b = b, .num_parts = (int)parts,
        .chunk_units = args->split_tokens / MLA__FLASHMLA_UNIT_KEYS,
        .max_splits = max_splits > 0x7fffffff ? 0x7fffffff : (int)max_splits,
    };
    MLA_FORWARD_IF_ERROR(mla__runtime_enter(runtime));
    mla__spec spec;
    mla__spec_init(&spec, "flashmla_metadata");
    const mla__kernel *k = NULL;
    MLA_FORWARD_IF_ERROR(mla__get_kernel(runtime, &spec, &k));
    void *kargs[] = {&p};
    return pdl ? mla__launch_pdl(runtime, k, 1, 1, 1, stream, kargs)
               : mla__launch(runtime, k, 1, 1, 1, stream, kargs);
}
