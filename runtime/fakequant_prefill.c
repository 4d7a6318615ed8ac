/* Fake-quant MLA prefill: the kind builders of kernel_src/fakequant/prefill.cu (fp32, every
 * shape), prefill_mma.cu (mma.sync, where use_mma says it applies) and prefill_sm90.cu (wgmma,
 * where use_sm90 does), argument checks (spec §4, with the upstream messages), the shape helper
 * and dispatch of mla_prefill_attention. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "runtime/fakequant_kinds.h"
#include "runtime/internal.h"

#define LOG2E 1.4426950408889634
#define MAX_GRID_YZ 65535
#define MAX_GRID_X 65535

/* The parameters of the prefill kinds, each kind's a prefix: "fakequant_prefill" the first 6,
 * "fakequant_prefill_sm90" 8, "fakequant_prefill_mma" all 10 (runtime/spec.c), and their bounds. */
static const char *const kind_params[] = {"dtype", "q_quant", "k_quant", "p_quant", "v_quant",
                                          "sparsity_m", "dqk", "dv", "warps", "rows_per_warp"};
static const long long kind_max[] = {1, 2, 2, 2, 2, 8, 192, 128, 8, 32};

/* The head dims the tensor-core prefill is specialized for. */
static int mma_dqk_ok(long long d) { return d == 64 || d == 128 || d == 192; }
static int mma_dv_ok(long long d) { return d == 32 || d == 64 || d == 128; }
/* The head dims of the wgmma prefill (V in whole 64-feature slabs). */
static int sm90_dv_ok(long long d) { return d == 64 || d == 128; }

/* Checks that spec has the first n kind_params in their bounds, sparsity_m 0, 4 or 8 and, with
 * n > 6, the tensor-core kernels' dqk and dv (dv_ok). */
static mla_status check_kind(const mla__spec *spec, int n, int (*dv_ok)(long long)) {
    MLA_FORWARD_IF_ERROR(mla__fq_check_params(spec, kind_params, kind_max, n));
    long long m = spec->params[5].value;
    MLA_ARG_CHECK(m == 0 || m == 4 || m == 8, "%s: sparsity_m: expected 0 (off), 4 or 8, got %lld",
                  spec->kernel, m);
    if (n == 6) return MLA_OK;
    long long dqk = spec->params[6].value, dv = spec->params[7].value;
    MLA_ARG_CHECK(mma_dqk_ok(dqk), "%s: dqk: expected 64, 128 or 192, got %lld", spec->kernel, dqk);
    MLA_ARG_CHECK(dv_ok(dv), "%s: dv: expected %s, got %lld", spec->kernel,
                  dv_ok == sm90_dv_ok ? "64 or 128" : "32, 64 or 128", dv);
    return MLA_OK;
}

/* name_expr = "mla::fakequant::<kernel><dtype as bool, the next count - 1 spec values>" and the
 * launch needs. */
static mla_status set_kernel(const mla__spec *spec, const char *kernel, int count,
                             char *name_expr, size_t size, int threads, int smem,
                             mla__launch_info *launch) {
    int n = snprintf(name_expr, size, "mla::fakequant::%s<%s", kernel,
                     spec->params[0].value ? "true" : "false");
    for (int i = 1; i <= count && n >= 0 && (size_t)n < size; i++)
        n += i < count ? snprintf(name_expr + n, size - (size_t)n, ", %lld", spec->params[i].value)
                       : snprintf(name_expr + n, size - (size_t)n, ">");
    MLA_RETURN_ERROR_IF(n < 0 || (size_t)n >= size, MLA_ERR_INTERNAL,
                        "%s: name expression buffer of %zu bytes too small", spec->kernel, size);
    launch->threads = threads;
    launch->dynamic_smem = smem;
    launch->cluster = 1;
    return MLA_OK;
}

mla_status mla__fakequant_prefill_build(const mla__spec *spec, char *name_expr, size_t size,
                                        mla__launch_info *launch) {
    MLA_FORWARD_IF_ERROR(check_kind(spec, 6, NULL));
    return set_kernel(spec, "prefill_kernel", 6, name_expr, size, MLA__FQ_THREADS,
                      MLA__FQ_PREFILL_SMEM, launch);
}

mla_status mla__fakequant_prefill_mma_build(const mla__spec *spec, char *name_expr, size_t size,
                                            mla__launch_info *launch) {
    MLA_FORWARD_IF_ERROR(check_kind(spec, 10, mma_dv_ok));
    long long w = spec->params[8].value, rows = spec->params[9].value;
    MLA_ARG_CHECK((rows == 16 && (w == 4 || w == 8)) || (rows == 32 && w == 4), "%s: warps and "
                  "rows_per_warp: expected 4 and 16, 8 and 16 or 4 and 32, got %lld and %lld",
                  spec->kernel, w, rows);
    int dqk = (int)spec->params[6].value, dv = (int)spec->params[7].value;
    /* 32 rows per warp: prefill_mma2_kernel (4 warps, no warps parameter) */
    return set_kernel(spec, rows == 32 ? "prefill_mma2_kernel" : "prefill_mma_kernel",
                      rows == 32 ? 8 : 9, name_expr, size, (int)w * 32,
                      MLA__FQ_PREFILL_MMA_SMEM(dqk, dv, (int)w, (int)rows), launch);
}

mla_status mla__fakequant_prefill_sm90_build(const mla__spec *spec, char *name_expr, size_t size,
                                             mla__launch_info *launch) {
    MLA_FORWARD_IF_ERROR(check_kind(spec, 8, sm90_dv_ok));
    return set_kernel(spec, "prefill_sm90_kernel", 8, name_expr, size,
                      MLA__FQ_PREFILL_SM90_THREADS,
                      mla__fq_prefill_sm90_smem((int)spec->params[6].value,
                                                (int)spec->params[7].value), launch);
}

void mla_prefill_attention_args_init(mla_prefill_attention_args *args) {
    memset(args, 0, sizeof *args);
    args->struct_size = sizeof *args;
    args->softmax_scale = NAN;
    args->causal = 1;
    args->q_amax = args->k_amax = args->v_amax = NAN;
    args->p_amax = 1.0f;
    args->sparsity_m = 4;
    args->dense_recent_tokens = 64;
    args->block_m = args->block_n = 64;
}

/* What the checks learn about a call. */
typedef struct pdims {
    int f16;
    long long total_q, total_k;
    int batch, heads, kv_heads, dqk, dv;
} pdims;

/* Scalars: struct, modes and amaxes, sparsity, tiles, flags. */
static mla_status check_scalars(const mla_prefill_attention_args *a) {
    MLA_ARG_CHECK(a != NULL, "args: expected mla_prefill_attention_args, got NULL");
    MLA_ARG_CHECK(a->struct_size == sizeof *a, "args: struct_size %zu, expected %zu (call "
                  "mla_prefill_attention_args_init)", a->struct_size, sizeof *a);
    MLA_FORWARD_IF_ERROR(mla__fq_check_mode(a->q_quant, a->q_amax, "q_quant", "q_amax"));
    MLA_FORWARD_IF_ERROR(mla__fq_check_mode(a->k_quant, a->k_amax, "k_quant", "k_amax"));
    MLA_FORWARD_IF_ERROR(mla__fq_check_mode(a->p_quant, a->p_amax, "p_quant", "p_amax"));
    MLA_FORWARD_IF_ERROR(mla__fq_check_mode(a->v_quant, a->v_amax, "v_quant", "v_amax"));
    MLA_ARG_CHECK(a->p_quant == MLA_QDQ_NONE || !isnan(a->p_amax), "p_amax: expected a finite "
                  "positive amax with p_quant set, got nan");
    MLA_ARG_CHECK(isnan(a->softmax_scale) || isfinite(a->softmax_scale), "softmax_scale: expected "
                  "a finite value or NAN (None), got %g", (double)a->softmax_scale);
    MLA_ARG_CHECK(a->block_m > 0 && a->block_n > 0 && a->block_m % 16 == 0 && a->block_n % 16 == 0,
                  "block_m and block_n must be positive multiples of 16, got %d and %d",
                  a->block_m, a->block_n);
    MLA_RETURN_ERROR_IF(a->block_n > MLA_FAKEQUANT_PREFILL_MAX_BLOCK_N, MLA_ERR_NOT_SUPPORTED,
                        "block_n: supported up to %d, got %d", MLA_FAKEQUANT_PREFILL_MAX_BLOCK_N,
                        a->block_n);
    if (a->sparsity_n != 0) {
        MLA_ARG_CHECK(a->sparsity_m == 4 || a->sparsity_m == 8, "sparsity_m: expected 4 or 8, got "
                      "%d", a->sparsity_m);
        MLA_ARG_CHECK(a->sparsity_n >= 1 && a->sparsity_n < a->sparsity_m, "sparsity_n: expected "
                      "0 (off) or 1 <= sparsity_n < sparsity_m = %d, got %d", a->sparsity_m,
                      a->sparsity_n);
    }
    MLA_ARG_CHECK(a->dense_sink_tokens >= 0 && a->dense_recent_tokens >= 0, "dense_sink_tokens "
                  "and dense_recent_tokens: expected >= 0, got %d and %d", a->dense_sink_tokens,
                  a->dense_recent_tokens);
    MLA_ARG_CHECK(a->max_seqlen_q >= 0, "max_seqlen_q: expected >= 0, got %d", a->max_seqlen_q);
    MLA_ARG_CHECK(a->causal == 0 || a->causal == 1, "causal: expected 0 or 1, got %d", a->causal);
    MLA_ARG_CHECK(a->return_lse == 0 || a->return_lse == 1, "return_lse: expected 0 or 1, got %d",
                  a->return_lse);
    return MLA_OK;
}

/* A 3-D tensor of rows: unit last stride, non-negative other strides, aligned elements. */
static mla_status check_rows3(const mla_runtime *rt, const DLTensor *t, const char *name) {
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, t, name, MLA_DT_BF16_OR_FP16, 3));
    MLA_ARG_CHECK(mla__stride(t, 2) == 1 || t->shape[2] == 1, "%s: expected a unit last stride, "
                  "got %lld", name, (long long)mla__stride(t, 2));
    for (int i = 0; i < 2; i++)
        MLA_ARG_CHECK(t->shape[i] <= 1 || mla__stride(t, i) >= 0, "%s: expected stride[%d] >= 0, "
                      "got %lld", name, i, (long long)mla__stride(t, i));
    return mla__check_align(t, name, 2);
}

/* q, k, v: shapes and one dtype; the head dims against the quant modes and the bounds. */
static mla_status check_qkv(const mla_runtime *rt, const mla_prefill_attention_args *a,
                            pdims *d) {
    char b1[64], b2[64];
    MLA_FORWARD_IF_ERROR(check_rows3(rt, a->q, "q"));
    MLA_FORWARD_IF_ERROR(check_rows3(rt, a->k, "k"));
    MLA_FORWARD_IF_ERROR(check_rows3(rt, a->v, "v"));
    DLDataType dt = a->q->dtype;
    MLA_ARG_CHECK(a->k->dtype.code == dt.code && a->k->dtype.bits == dt.bits, "k: expected dtype "
                  "%s (q's), got %s", mla__dtype_name(dt, b1, sizeof b1),
                  mla__dtype_name(a->k->dtype, b2, sizeof b2));
    MLA_ARG_CHECK(a->v->dtype.code == dt.code && a->v->dtype.bits == dt.bits, "v: expected dtype "
                  "%s (q's), got %s", mla__dtype_name(dt, b1, sizeof b1),
                  mla__dtype_name(a->v->dtype, b2, sizeof b2));
    d->f16 = dt.code == kDLFloat;
    d->total_q = a->q->shape[0], d->total_k = a->k->shape[0];
    d->heads = (int)a->q->shape[1], d->kv_heads = (int)a->k->shape[1];
    d->dqk = (int)a->q->shape[2], d->dv = (int)a->v->shape[2];
    MLA_ARG_CHECK(a->q->shape[1] >= 1 && a->k->shape[1] >= 1 && a->q->shape[1] <= 0x7fffffff,
                  "q, k: expected num_heads and num_kv_heads >= 1, got %lld and %lld",
                  (long long)a->q->shape[1], (long long)a->k->shape[1]);
    MLA_ARG_CHECK(d->heads % d->kv_heads == 0, "q: num_heads %d must be divisible by k's "
                  "num_kv_heads %d", d->heads, d->kv_heads);
    MLA_FORWARD_IF_ERROR(mla__check_dim(a->k, "k", 2, d->dqk, "qk_head_dim of q"));
    MLA_FORWARD_IF_ERROR(mla__check_dim(a->v, "v", 0, d->total_k, "total_k of k"));
    MLA_FORWARD_IF_ERROR(mla__check_dim(a->v, "v", 1, d->kv_heads, "num_kv_heads of k"));
    MLA_ARG_CHECK(d->dqk >= 1 && d->dv >= 1, "q, v: expected qk_head_dim and v_head_dim >= 1, got "
                  "%d and %d", d->dqk, d->dv);
    MLA_ARG_CHECK((a->q_quant != MLA_QDQ_NVFP4 && a->k_quant != MLA_QDQ_NVFP4) || d->dqk % 16 == 0,
                  "q_quant/k_quant nvfp4 needs qk_head_dim %% 16 == 0, got qk_head_dim %d",
                  d->dqk);
    MLA_RETURN_ERROR_IF(d->dqk > MLA_FAKEQUANT_PREFILL_MAX_QK || d->dv > MLA_FAKEQUANT_PREFILL_MAX_V
                        || d->kv_heads > MAX_GRID_YZ, MLA_ERR_NOT_SUPPORTED, "q, v: supported up "
                        "to qk_head_dim %d, v_head_dim %d and %d kv heads, got %d, %d and %d",
                        MLA_FAKEQUANT_PREFILL_MAX_QK, MLA_FAKEQUANT_PREFILL_MAX_V, MAX_GRID_YZ,
                        d->dqk, d->dv, d->kv_heads);
    return MLA_OK;
}

/* cu_seqlens_q, cu_seqlens_k: int32 [batch + 1], the same length. */
static mla_status check_cu(const mla_runtime *rt, const mla_prefill_attention_args *a, pdims *d) {
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, a->cu_seqlens_q, "cu_seqlens_q", MLA_DT_INT32, 1));
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, a->cu_seqlens_k, "cu_seqlens_k", MLA_DT_INT32, 1));
    MLA_ARG_CHECK(a->cu_seqlens_q->shape[0] == a->cu_seqlens_k->shape[0], "cu_seqlens_q and "
                  "cu_seqlens_k must have the same length, got %lld and %lld",
                  (long long)a->cu_seqlens_q->shape[0], (long long)a->cu_seqlens_k->shape[0]);
    long long n = a->cu_seqlens_q->shape[0];
    MLA_ARG_CHECK(n >= 1, "cu_seqlens_q: expected batch + 1 >= 1 entries, got 0");
    MLA_RETURN_ERROR_IF(n - 1 > MAX_GRID_YZ, MLA_ERR_NOT_SUPPORTED, "cu_seqlens_q: supported up "
                        "to a batch of %d, got %lld", MAX_GRID_YZ, n - 1);
    MLA_FORWARD_IF_ERROR(mla__check_contiguous(a->cu_seqlens_q, "cu_seqlens_q"));
    MLA_FORWARD_IF_ERROR(mla__check_contiguous(a->cu_seqlens_k, "cu_seqlens_k"));
    MLA_FORWARD_IF_ERROR(mla__check_align(a->cu_seqlens_q, "cu_seqlens_q", 4));
    MLA_FORWARD_IF_ERROR(mla__check_align(a->cu_seqlens_k, "cu_seqlens_k", 4));
    MLA_RETURN_ERROR_IF(d->total_q > 0x7fffffff || d->total_k > 0x7fffffff, MLA_ERR_NOT_SUPPORTED,
                        "q, k: supported up to 2147483647 tokens (int32 cu_seqlens), got %lld and "
                        "%lld", d->total_q, d->total_k);
    d->batch = (int)(n - 1);
    return MLA_OK;
}

/* out [total_q, heads, dv] of q's dtype; lse [heads, total_q] float32 with return_lse. */
static mla_status check_outputs(const mla_runtime *rt, const mla_prefill_attention_args *a,
                                const pdims *d) {
    char b1[64], b2[64];
    MLA_FORWARD_IF_ERROR(check_rows3(rt, a->out, "out"));
    MLA_ARG_CHECK(a->out->dtype.code == a->v->dtype.code, "out: expected dtype %s (v's), got %s",
                  mla__dtype_name(a->v->dtype, b1, sizeof b1),
                  mla__dtype_name(a->out->dtype, b2, sizeof b2));
    const int64_t want[3] = {d->total_q, d->heads, d->dv};
    static const char *const what[3] = {"total_q of q", "num_heads of q", "v_head_dim of v"};
    for (int i = 0; i < 3; i++) MLA_FORWARD_IF_ERROR(mla__check_dim(a->out, "out", i, want[i], what[i]));
    if (!a->return_lse && !a->lse) return MLA_OK;
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, a->lse, "lse", MLA_DT_FP32, 2));
    MLA_FORWARD_IF_ERROR(mla__check_dim(a->lse, "lse", 0, d->heads, "num_heads of q"));
    MLA_FORWARD_IF_ERROR(mla__check_dim(a->lse, "lse", 1, d->total_q, "total_q of q"));
    MLA_FORWARD_IF_ERROR(mla__check_contiguous(a->lse, "lse"));
    return mla__check_align(a->lse, "lse", 4);
}

mla_status mla_prefill_attention_shape(const mla_prefill_attention_args *args,
                                       mla_prefill_attention_sizes *sizes) {
    MLA_FORWARD_IF_ERROR(check_scalars(args));
    MLA_ARG_CHECK(sizes != NULL, "sizes: expected a struct to fill, got NULL");
    MLA_ARG_CHECK(args->q != NULL && args->q->ndim == 3, "q: expected a 3-D tensor");
    MLA_ARG_CHECK(args->v != NULL && args->v->ndim == 3, "v: expected a 3-D tensor");
    long long t = args->q->shape[0], h = args->q->shape[1];
    sizes->out[0] = t, sizes->out[1] = h, sizes->out[2] = args->v->shape[2];
    sizes->lse[0] = h, sizes->lse[1] = t;
    return MLA_OK;
}

/* A tensor's element strides (dims 0 and 1) are multiples of mult and its data address of align. */
static int strides_aligned(const DLTensor *t, long long mult, unsigned align) {
    return mla__stride(t, 0) % mult == 0 && mla__stride(t, 1) % mult == 0 &&
           (uintptr_t)mla__data(t) % align == 0;
}

/* The tensor-core prefill applies: not forced off, its head dims, P's tiles inside its 64-key
 * tiles (block_n 16, 32 or 64 when P is quantized; any block_n is the same softmax otherwise),
 * 16-byte rows of q/k/v for cp.async, 4-byte pairs of out, int rows. */
static int use_mma(const mla_runtime *rt, const mla_prefill_attention_args *a, const pdims *d) {
    return !rt->fakequant_prefill_portable && mma_dqk_ok(d->dqk) && mma_dv_ok(d->dv) &&
           (a->p_quant == MLA_QDQ_NONE || a->block_n == 16 || a->block_n == 32 ||
            a->block_n == 64) &&
           strides_aligned(a->q, 8, 16) && strides_aligned(a->k, 8, 16) &&
           strides_aligned(a->v, 8, 16) && strides_aligned(a->out, 2, 4) &&
           d->total_q * (d->heads / d->kv_heads) < 0x7fffffffLL;
}

/* The per-tensor factor of an operand's codes (docs/fakequant-tensorcore-plan.md): the fp8 scale
 * or the nvfp4 global scale, 1 for mode none. */
static double code_factor(int mode, float amax) { return mode ? (double)mla__fq_scale(mode, amax) : 1.0; }

/* spec = kind with the parameters every prefill kind starts with: dtype, the four quantization
 * modes and sparsity_m (0 when the call is dense); then, with dims, the tensor-core kinds' dqk
 * and dv. */
static mla_status prefill_spec(mla__spec *spec, const char *kind,
                               const mla_prefill_attention_args *a, const pdims *d, int dims) {
    mla__spec_init(spec, kind);
    MLA_FORWARD_IF_ERROR(mla__spec_add(spec, "dtype", d->f16));
    MLA_FORWARD_IF_ERROR(mla__spec_add(spec, "q_quant", a->q_quant));
    MLA_FORWARD_IF_ERROR(mla__spec_add(spec, "k_quant", a->k_quant));
    MLA_FORWARD_IF_ERROR(mla__spec_add(spec, "p_quant", a->p_quant));
    MLA_FORWARD_IF_ERROR(mla__spec_add(spec, "v_quant", a->v_quant));
    MLA_FORWARD_IF_ERROR(mla__spec_add(spec, "sparsity_m", a->sparsity_n != 0 ? a->sparsity_m : 0));
    if (!dims) return MLA_OK;
    MLA_FORWARD_IF_ERROR(mla__spec_add(spec, "dqk", d->dqk));
    return mla__spec_add(spec, "dv", d->dv);
}

/* Launches k with its parameters args on a grid of (CTA row tiles of the longest request,
 * capped at MAX_GRID_X; kv heads; requests), cta_rows rows (query x group) a tile. */
static mla_status launch_grid(mla_runtime *rt, const mla__kernel *k,
                              const mla_prefill_attention_args *a, const pdims *d,
                              long long cta_rows, void **args, CUstream stream) {
    long long groups = d->heads / d->kv_heads;
    long long tiles = ((long long)a->max_seqlen_q * groups + cta_rows - 1) / cta_rows;
    unsigned gx = (unsigned)(tiles < 1 ? 1 : tiles > MAX_GRID_X ? MAX_GRID_X : tiles);
    return mla__launch(rt, k, gx, (unsigned)d->kv_heads, (unsigned)d->batch, stream, args);
}

/* launch_grid with the one parameter struct params. */
static mla_status launch_tiles(mla_runtime *rt, const mla__kernel *k,
                               const mla_prefill_attention_args *a, const pdims *d,
                               long long cta_rows, void *params, CUstream stream) {
    void *args[] = {params};
    return launch_grid(rt, k, a, d, cta_rows, args, stream);
}

/* The wgmma prefill applies: where the tensor-core one does, on sm_90a, no CTA shape of the
 * mma.sync kernel forced, v_head_dim 64 or 128, scales as mla__fq_scale_reciprocal_ok says. */
static int use_sm90(const mla_runtime *rt, const mla_prefill_attention_args *a, const pdims *d) {
    const mla__kernel_kind *kind = mla__kernel_kind_find("fakequant_prefill_sm90");
    return use_mma(rt, a, d) && !rt->fakequant_prefill_warps && sm90_dv_ok(d->dv) &&
           !strcmp(rt->arch, kind->only_arch) &&
           mla__fq_scale_reciprocal_ok(a->q_quant, a->q_amax) &&
           mla__fq_scale_reciprocal_ok(a->k_quant, a->k_amax) &&
           mla__fq_scale_reciprocal_ok(a->p_quant, a->p_amax) &&
           mla__fq_scale_reciprocal_ok(a->v_quant, a->v_amax);
}

/* The TMA descriptor of k or v [total_k, kv_heads, dim] for the wgmma prefill: a 4-D tensor
 * (dim, kv_heads, total_k, 1), boxes of 64 features x 1 head x 64 keys, 128-byte swizzle, keys
 * past total_k read as zeros; strides of dimensions of size 1 are free and replaced by a valid
 * one. Returns 0 when the driver refuses it (the caller then runs the mma.sync kernel). */
static int encode_rows_tma(mla_runtime *rt, const DLTensor *t, int f16, CUtensorMap *map) {
    const cuuint64_t row = (cuuint64_t)t->shape[2] * 2;
    cuuint64_t dim[4] = {(cuuint64_t)t->shape[2], (cuuint64_t)t->shape[1], (cuuint64_t)t->shape[0], 1};
    cuuint64_t stride[3] = {(cuuint64_t)mla__stride(t, 1) * 2, (cuuint64_t)mla__stride(t, 0) * 2,
                            row};
    for (int i = 0; i < 2; i++)
        if (dim[i + 1] == 1) stride[i] = row;
    const cuuint32_t box[4] = {64, 1, 64, 1};
    const cuuint32_t estride[4] = {1, 1, 1, 1};
    memset(map, 0, sizeof *map);
    CUresult r = rt->drv.cuTensorMapEncodeTiled(
        map, f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4,
        mla__data(t) ? (void *)(uintptr_t)mla__data(t) : NULL, dim, stride, box, estride,
        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        mla__log(rt, MLA_LOG_DEBUG, "fake-quant prefill: no TMA descriptor (CUresult %d): the "
                 "mma.sync kernel runs", (int)r);
    return r == CUDA_SUCCESS;
}

/* The common head of every prefill kernel's parameters for the checked call a. */
static mla__fq_prefill_common prefill_common(const mla_prefill_attention_args *a, const pdims *d) {
    return (mla__fq_prefill_common){
        .q = mla__data(a->q), .q_stride_t = mla__stride(a->q, 0), .q_stride_h = mla__stride(a->q, 1),
        .k = mla__data(a->k), .k_stride_t = mla__stride(a->k, 0), .k_stride_h = mla__stride(a->k, 1),
        .v = mla__data(a->v), .v_stride_t = mla__stride(a->v, 0), .v_stride_h = mla__stride(a->v, 1),
        .cu_q = mla__data(a->cu_seqlens_q), .cu_k = mla__data(a->cu_seqlens_k),
        .out = mla__data(a->out), .o_stride_t = mla__stride(a->out, 0),
        .o_stride_h = mla__stride(a->out, 1), .lse = a->return_lse ? mla__data(a->lse) : 0,
        .total_q = d->total_q, .batch = d->batch, .heads = d->heads, .kv_heads = d->kv_heads,
        .block_n = a->block_n, .causal = a->causal, .sparsity_n = a->sparsity_n,
        .sink = a->dense_sink_tokens, .recent = a->dense_recent_tokens,
        .q_scale = mla__fq_scale(a->q_quant, a->q_amax), .k_scale = mla__fq_scale(a->k_quant, a->k_amax),
        .p_scale = mla__fq_scale(a->p_quant, a->p_amax), .v_scale = mla__fq_scale(a->v_quant, a->v_amax),
    };
}

static mla_status launch_prefill_mma(mla_runtime *rt, const mla_prefill_attention_args *a,
                                     const pdims *d, double qk_scale, CUstream stream) {
    mla__fq_prefill_mma_params p = {
        .c = prefill_common(a, d),
        .qk_eff = (float)(qk_scale * code_factor(a->q_quant, a->q_amax) *
                          code_factor(a->k_quant, a->k_amax)),
        .pv_eff = (float)(code_factor(a->p_quant, a->p_amax) * code_factor(a->v_quant, a->v_amax)),
    };
    CUtensorMap tk, tv;
    const int sm90 = use_sm90(rt, a, d) && encode_rows_tma(rt, a->k, d->f16, &tk) &&
                     encode_rows_tma(rt, a->v, d->f16, &tv);
    mla__spec spec;
    MLA_FORWARD_IF_ERROR(prefill_spec(&spec, sm90 ? "fakequant_prefill_sm90"
                                                  : "fakequant_prefill_mma", a, d, 1));
    const int warps = rt->fakequant_prefill_warps ? rt->fakequant_prefill_warps
                                                  : MLA__FQ_PREFILL_MMA_WARPS;
    const int rows = rt->fakequant_prefill_rows ? rt->fakequant_prefill_rows
                                                : MLA__FQ_PREFILL_MMA_ROWS;
    if (!sm90) {
        MLA_FORWARD_IF_ERROR(mla__spec_add(&spec, "warps", warps));
        MLA_FORWARD_IF_ERROR(mla__spec_add(&spec, "rows_per_warp", rows));
    }
    const mla__kernel *k = NULL;
    MLA_FORWARD_IF_ERROR(mla__get_kernel(rt, &spec, &k));
    if (!sm90) return launch_tiles(rt, k, a, d, (long long)warps * rows, &p, stream);
    void *args[] = {&p, &tk, &tv};
    return launch_grid(rt, k, a, d, MLA__FQ_PREFILL_SM90_ROWS, args, stream);
}

static mla_status launch_prefill(mla_runtime *rt, const mla_prefill_attention_args *a,
                                 const pdims *d, CUstream stream) {
    double scale = isnan(a->softmax_scale) ? 1.0 / sqrt((double)d->dqk) : (double)a->softmax_scale;
    if (use_mma(rt, a, d)) return launch_prefill_mma(rt, a, d, scale * LOG2E, stream);
    mla__fq_prefill_params p = {
        .c = prefill_common(a, d), .dqk = d->dqk, .dv = d->dv, .qk_scale = (float)(scale * LOG2E),
    };
    mla__spec spec;
    MLA_FORWARD_IF_ERROR(prefill_spec(&spec, "fakequant_prefill", a, d, 0));
    const mla__kernel *k = NULL;
    MLA_FORWARD_IF_ERROR(mla__get_kernel(rt, &spec, &k));
    return launch_tiles(rt, k, a, d, MLA__FQ_PREFILL_ROWS, &p, stream);
}

mla_status mla_prefill_attention(mla_runtime *runtime, const mla_prefill_attention_args *args,
                                 CUstream stream) {
    MLA_ARG_CHECK(runtime != NULL, "runtime: expected a runtime, got NULL");
    pdims d = {0};
    MLA_FORWARD_IF_ERROR(check_scalars(args));
    MLA_FORWARD_IF_ERROR(check_qkv(runtime, args, &d));
    MLA_FORWARD_IF_ERROR(check_cu(runtime, args, &d));
    MLA_FORWARD_IF_ERROR(check_outputs(runtime, args, &d));
    if (d.batch == 0 || d.total_q == 0) return MLA_OK;
    MLA_FORWARD_IF_ERROR(mla__runtime_enter(runtime));
    return launch_prefill(runtime, args, &d, stream);
}
