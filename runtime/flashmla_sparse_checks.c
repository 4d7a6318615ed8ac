/* Argument checks and the launch the FlashMLA-compatible sparse entry points share
 * (runtime/flashmla_sparse.c, runtime/flashmla_sparse_prefill.c; the args check also serves
 * runtime/flashmla_decode.c), the kind choice and the builder of the kinds without parameters. */
#include <stdio.h>
#include <string.h>

#include "runtime/flashmla_sparse.h"
#include "runtime/internal.h"

const char *mla__flashmla_sparse_kind(const char *arch, int prefill, int d_qk, int h_q,
                                      const char *force) {
    int portable = force && !strcmp(force, "portable");
    int pingpong = force && !strcmp(force, "pingpong"), ws = force && !strcmp(force, "ws");
    int x2 = force && !strcmp(force, "x2");
    const char *sm90 = prefill ? "flashmla_sparse_prefill_sm90" : "flashmla_sparse_decode_sm90";
    const mla__kernel_kind *kind = mla__kernel_kind_find(sm90);
    if (!portable && !strcmp(arch, kind->only_arch) && (!prefill || d_qk == 576)) {
        if (prefill) return pingpong ? "flashmla_sparse_prefill_sm90pp" : sm90;
        if (ws) return "flashmla_sparse_decode_sm90ws";
        /* h_q > 64: the CTA pair with CTA-scope barriers by default (measured 8 % faster than the
         * ping-pong kernel, docs/perf-notes.md "Sparse: the CTA pair as the default") */
        if (h_q > MLA__FLASHMLA_SPARSE_BLOCK_M && !pingpong)
            return x2 ? "flashmla_sparse_decode_sm90x2" : "flashmla_sparse_decode_sm90x2c";
        return sm90;
    }
    return prefill ? "flashmla_sparse_prefill" : "flashmla_sparse_decode";
}

/* The kinds without parameters: the kernel (a name expression) and its launch. */
typedef struct fixed_kind {
    const char *kind, *note, *kernel;  /* note: added to the parameter message */
    int threads, dynamic_smem, cluster;
} fixed_kind;

#define SPARSE_NS "mla::flashmla::sparse::"
static const fixed_kind fixed_kinds[] = {
    {"flashmla_sparse_decode", "", SPARSE_NS "sparse_decode_kernel", MLA__FLASHMLA_SPARSE_THREADS,
     MLA__FLASHMLA_SPARSE_DECODE_SMEM, 1},
    {"flashmla_sparse_decode_sm90", "", SPARSE_NS "sparse_decode_sm90_kernel<0>",
     MLA__FLASHMLA_SPARSE_THREADS, MLA__FLASHMLA_SPARSE_SM90_SMEM, 1},
    {"flashmla_sparse_decode_sm90ws", "", SPARSE_NS "sparse_decode_sm90_kernel<1>",
     MLA__FLASHMLA_SPARSE_WS_THREADS, MLA__FLASHMLA_SPARSE_SM90_SMEM, 1},
    {"flashmla_sparse_decode_sm90x2", "", SPARSE_NS "sparse_decode_sm90_kernel<2>",
     MLA__FLASHMLA_SPARSE_WS_THREADS, MLA__FLASHMLA_SPARSE_SM90_SMEM, 2},
    {"flashmla_sparse_decode_sm90x2c", "", SPARSE_NS "sparse_decode_sm90_kernel<3>",
     MLA__FLASHMLA_SPARSE_WS_THREADS, MLA__FLASHMLA_SPARSE_SM90_SMEM, 2},
    {"flashmla_sparse_prefill_sm90", " (d_qk 576 only)", SPARSE_NS "sparse_prefill_sm90_kernel<1>",
     MLA__FLASHMLA_SPARSE_WS_THREADS, MLA__FLASHMLA_SPARSE_SM90_SMEM, 1},
    {"flashmla_sparse_prefill_sm90pp", " (d_qk 576 only)",
     SPARSE_NS "sparse_prefill_sm90_kernel<0>", MLA__FLASHMLA_SPARSE_THREADS,
     MLA__FLASHMLA_SPARSE_SM90_SMEM, 1},
};
#undef SPARSE_NS

mla_status mla__flashmla_sparse_fixed_build(const mla__spec *spec, char *name_expr, size_t size,
                                            mla__launch_info *launch) {
    const fixed_kind *f = NULL;
    for (size_t i = 0; i < sizeof fixed_kinds / sizeof fixed_kinds[0] && !f; i++)
        if (!strcmp(spec->kernel, fixed_kinds[i].kind)) f = &fixed_kinds[i];
    MLA_RETURN_ERROR_IF(f == NULL, MLA_ERR_INTERNAL, "%s: not a sparse kind without parameters",
                        spec->kernel);
    MLA_ARG_CHECK(spec->n_params == 0, "%s: expected no parameters%s, got %d (first: %s)",
                  spec->kernel, f->note, spec->n_params,
                  spec->n_params ? spec->params[0].name : "");
    int n = snprintf(name_expr, size, "%s", f->kernel);
    MLA_RETURN_ERROR_IF(n < 0 || (size_t)n >= size, MLA_ERR_INTERNAL,
                        "%s: name expression buffer of %zu bytes too small", spec->kernel, size);
    launch->threads = f->threads;
    launch->dynamic_smem = f->dynamic_smem;
    launch->cluster = f->cluster;
    return MLA_OK;
}

mla_status mla__flashmla_check_kvcache_args(const mla_flash_with_kvcache_args *a) {
    MLA_ARG_CHECK(a != NULL, "args: expected mla_flash_with_kvcache_args, got NULL");
    MLA_ARG_CHECK(a->struct_size == sizeof *a, "args: struct_size %zu, expected %zu (call "
                  "mla_flash_with_kvcache_args_init)", a->struct_size, sizeof *a);
    return MLA_OK;
}

mla_status mla__flashmla_check_bf16_rows(const mla_runtime *rt, const DLTensor *t,
                                         const char *name, int ndim) {
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, t, name, MLA_DT_BF16, ndim));
    MLA_ARG_CHECK(mla__stride(t, ndim - 1) == 1, "%s: expected a unit last stride, got %lld",
                  name, (long long)mla__stride(t, ndim - 1));
    for (int d = 0; d < ndim - 1; d++) {
        long long s = (long long)mla__stride(t, d);
        MLA_ARG_CHECK(t->shape[d] <= 1 || (s >= 0 && s % 8 == 0), "%s: expected stride[%d] a "
                      "non-negative multiple of 8 elements (16 bytes), got %lld", name, d, s);
    }
    return mla__check_align(t, name, 16);
}

mla_status mla__flashmla_check_optional_vector(const mla_runtime *rt, const DLTensor *t,
                                               const char *name, mla__dtype dtype, int64_t n,
                                               const char *what) {
    if (t == NULL) return MLA_OK;
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, t, name, dtype, 1));
    MLA_FORWARD_IF_ERROR(mla__check_dim(t, name, 0, n, what));
    MLA_FORWARD_IF_ERROR(mla__check_contiguous(t, name));
    return mla__check_align(t, name, 4);
}

mla_status mla__flashmla_sparse_launch(mla_runtime *rt, const mla__spec *spec, unsigned grid_x,
                                       int h_q, int flat, CUstream stream, void *params) {
    MLA_FORWARD_IF_ERROR(mla__runtime_enter(rt));
    const mla__kernel *k = NULL;
    MLA_FORWARD_IF_ERROR(mla__get_kernel(rt, spec, &k));
    unsigned head_blocks = (unsigned)((h_q + MLA__FLASHMLA_SPARSE_BLOCK_M - 1) /
                                      MLA__FLASHMLA_SPARSE_BLOCK_M);
    void *kargs[] = {params};
    if (flat) return mla__launch(rt, k, grid_x * head_blocks, 1, 1, stream, kargs);
    return mla__launch(rt, k, grid_x, head_blocks, 1, stream, kargs);
}
