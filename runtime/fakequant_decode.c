/* Fake-quant MLA decode: argument checks (spec §4, with the upstream messages) and dispatch of
 * mla_attention_decode (decode kernel over the fixed splits, then the split combine), and its
 * shape helper. Kernels: kernel_src/fakequant/decode_sm90.cu (wgmma and TMA, the default on
 * sm_90a where it applies: rank 512, rope 64, 16-byte cache rows, page % 8 == 0; forced off by
 * $MLAJIT_FAKEQUANT_DECODE=mma), decode_mma.cu (mma.sync, cc 9.0 and later, same shapes, any
 * page; chunks of splits per CTA) and decode.cu (exact fp32 FMA, every shape; forced by
 * $MLAJIT_FAKEQUANT_DECODE=fp32), then decode.cu's combine. Without quantization on sm_90a
 * (use_dense) the call can run the FlashMLA-compatible dense decode instead, through the
 * functions behind its public ones (mla__get_metadata in the batch-invariant mode,
 * mla__flash_with_kvcache with the fakequant_dense_combine) over views of the same tensors and of
 * the workspace. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mlajit/flashmla.h"
#include "runtime/fakequant_kinds.h"
#include "runtime/flashmla_kinds.h"
#include "runtime/internal.h"

#define LOG2E 1.4426950408889634
#define MAX_HEADS 65535 * MLA__FQ_HEADS_PER_CTA   /* grid.y */
#define MAX_BATCH 65535                           /* grid.z */

/* Everything the checks learn about a call. */
typedef struct dims {
    int cache;          /* MLA__FQ_BF16 / FP16 */
    int out;            /* MLA__FQ_BF16 / FP16 / FP32 */
    int q_fp32;
    int batch, heads, rank, rope, page, max_blocks, splits;
} dims;

void mla_attention_decode_args_init(mla_attention_decode_args *args) {
    memset(args, 0, sizeof *args);
    args->struct_size = sizeof *args;
    args->softmax_scale = NAN;
    args->kv_lora_rank = 512;
    args->qk_rope_head_dim = 64;
    args->num_kv_splits = 32;
    args->k_qdq_amax = NAN;
    args->v_qdq_amax = NAN;
    args->p_qdq_amax = 1.0f;
    args->return_lse = 1;
}

static int dtype_is(DLDataType dt, uint8_t code, uint8_t bits) {
    return dt.code == code && dt.bits == bits && dt.lanes == 1;
}

/* MLA__FQ_BF16 / FP16 / FP32 of a dtype, -1 for any other. */
static int fq_dtype(DLDataType dt) {
    if (dtype_is(dt, kDLBfloat, 16)) return MLA__FQ_BF16;
    if (dtype_is(dt, kDLFloat, 16)) return MLA__FQ_FP16;
    if (dtype_is(dt, kDLFloat, 32)) return MLA__FQ_FP32;
    return -1;
}

static const char *const dt_names[] = {"bfloat16", "float16", "float32"};

/* Scalars: struct, scale, dims, splits, modes and amaxes, return_lse. */
static mla_status check_scalars(const mla_attention_decode_args *a, dims *d) {
    MLA_ARG_CHECK(a != NULL, "args: expected mla_attention_decode_args, got NULL");
    MLA_ARG_CHECK(a->struct_size == sizeof *a, "args: struct_size %zu, expected %zu (call "
                  "mla_attention_decode_args_init)", a->struct_size, sizeof *a);
    MLA_ARG_CHECK(isfinite(a->softmax_scale), "softmax_scale: required (a finite value; MLA "
                  "layers fold in mscale), got %g", (double)a->softmax_scale);
    MLA_ARG_CHECK(a->num_kv_splits >= 1 && a->num_kv_splits <= MLA_FAKEQUANT_MAX_SPLITS,
                  "num_kv_splits: expected in [1, %d], got %d", MLA_FAKEQUANT_MAX_SPLITS,
                  a->num_kv_splits);
    MLA_ARG_CHECK(a->kv_lora_rank >= 1, "kv_lora_rank: expected >= 1, got %d", a->kv_lora_rank);
    MLA_ARG_CHECK(a->qk_rope_head_dim >= 0, "qk_rope_head_dim: expected >= 0, got %d",
                  a->qk_rope_head_dim);
    MLA_FORWARD_IF_ERROR(mla__fq_check_mode(a->k_qdq, a->k_qdq_amax, "k_qdq", "k_qdq_amax"));
    MLA_FORWARD_IF_ERROR(mla__fq_check_mode(a->v_qdq, a->v_qdq_amax, "v_qdq", "v_qdq_amax"));
    MLA_FORWARD_IF_ERROR(mla__fq_check_mode(a->p_qdq, a->p_qdq_amax, "p_qdq", "p_qdq_amax"));
    MLA_ARG_CHECK(a->p_qdq == MLA_QDQ_NONE || !isnan(a->p_qdq_amax), "p_qdq_amax: expected a "
                  "finite positive amax with p_qdq set, got nan");
    MLA_ARG_CHECK(a->k_qdq != MLA_QDQ_NVFP4 || (a->kv_lora_rank % 16 == 0 &&
                  a->qk_rope_head_dim % 16 == 0), "k_qdq: nvfp4 needs kv_lora_rank and "
                  "qk_rope_head_dim divisible by 16, got %d and %d", a->kv_lora_rank,
                  a->qk_rope_head_dim);
    MLA_ARG_CHECK(a->return_lse == 0 || a->return_lse == 1, "return_lse: expected 0 or 1, got %d",
                  a->return_lse);
    MLA_RETURN_ERROR_IF(a->kv_lora_rank > MLA_FAKEQUANT_MAX_RANK || a->kv_lora_rank +
                        a->qk_rope_head_dim > MLA_FAKEQUANT_MAX_ROW, MLA_ERR_NOT_SUPPORTED,
                        "kv_lora_rank, qk_rope_head_dim: supported up to %d and a row of %d, got "
                        "%d + %d", MLA_FAKEQUANT_MAX_RANK, MLA_FAKEQUANT_MAX_ROW, a->kv_lora_rank,
                        a->qk_rope_head_dim);
    d->rank = a->kv_lora_rank, d->rope = a->qk_rope_head_dim, d->splits = a->num_kv_splits;
    return MLA_OK;
}

/* A tensor of rows with a unit last stride and non-negative other strides. */
static mla_status check_rows(const mla_runtime *rt, const DLTensor *t, const char *name,
                             mla__dtype dt, int ndim) {
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, t, name, dt, ndim));
    MLA_ARG_CHECK(mla__stride(t, ndim - 1) == 1 || t->shape[ndim - 1] == 1, "%s: expected a unit "
                  "last stride, got %lld", name, (long long)mla__stride(t, ndim - 1));
    for (int i = 0; i < ndim - 1; i++)
        MLA_ARG_CHECK(t->shape[i] <= 1 || mla__stride(t, i) >= 0, "%s: expected stride[%d] >= 0, "
                      "got %lld", name, i, (long long)mla__stride(t, i));
    return mla__check_align(t, name, (unsigned)(t->dtype.bits / 8));
}

/* q [batch, heads, rank + rope] and latent_cache [num_blocks, page, rank + rope]. */
static mla_status check_q_cache(const mla_runtime *rt, const mla_attention_decode_args *a,
                                dims *d) {
    char buf[64];
    const DLTensor *q = a->q, *c = a->latent_cache;
    MLA_ARG_CHECK(c != NULL, "latent_cache: expected a tensor, got NULL");
    d->cache = fq_dtype(c->dtype);
    MLA_ARG_CHECK(d->cache == MLA__FQ_BF16 || d->cache == MLA__FQ_FP16, "latent_cache: expected "
                  "dtype bfloat16 or float16, got %s", mla__dtype_name(c->dtype, buf, sizeof buf));
    MLA_FORWARD_IF_ERROR(check_rows(rt, c, "latent_cache", MLA_DT_BF16_OR_FP16, 3));
    MLA_ARG_CHECK(q != NULL, "q: expected a tensor, got NULL");
    int qd = fq_dtype(q->dtype);
    MLA_ARG_CHECK(qd == d->cache || qd == MLA__FQ_FP32, "q: expected dtype %s (latent_cache's) or "
                  "float32 (the NVFP4 carrier), got %s", dt_names[d->cache],
                  mla__dtype_name(q->dtype, buf, sizeof buf));
    d->q_fp32 = qd == MLA__FQ_FP32;
    MLA_FORWARD_IF_ERROR(check_rows(rt, q, "q", d->q_fp32 ? MLA_DT_FP32 : MLA_DT_BF16_OR_FP16, 3));
    int D = d->rank + d->rope;
    MLA_ARG_CHECK(q->shape[2] == D, "q: feature dim %lld != kv_lora_rank + qk_rope_head_dim = %d",
                  (long long)q->shape[2], D);
    MLA_ARG_CHECK(c->shape[2] == D, "latent_cache: feature dim %lld != kv_lora_rank + "
                  "qk_rope_head_dim = %d", (long long)c->shape[2], D);
    MLA_ARG_CHECK(q->shape[0] >= 1 && q->shape[0] <= MAX_BATCH, "q: expected batch = shape[0] in "
                  "[1, %d], got %lld", MAX_BATCH, (long long)q->shape[0]);
    MLA_ARG_CHECK(q->shape[1] >= 1 && q->shape[1] <= MAX_HEADS, "q: expected num_heads = shape[1] "
                  "in [1, %d], got %lld", MAX_HEADS, (long long)q->shape[1]);
    MLA_ARG_CHECK(c->shape[1] >= 1 && c->shape[1] <= 0x7fffffff, "latent_cache: expected "
                  "page_size = shape[1] in [1, 2147483647], got %lld", (long long)c->shape[1]);
    MLA_ARG_CHECK(a->page_size == 0 || a->page_size == c->shape[1], "page_size %d != "
                  "latent_cache.shape[1] = %lld", a->page_size, (long long)c->shape[1]);
    d->batch = (int)q->shape[0], d->heads = (int)q->shape[1], d->page = (int)c->shape[1];
    return MLA_OK;
}

/* block_table [batch, max_blocks] and b_seq_len [batch]. */
static mla_status check_table(const mla_runtime *rt, const mla_attention_decode_args *a, dims *d) {
    const DLTensor *t = a->block_table;
    MLA_FORWARD_IF_ERROR(check_rows(rt, t, "block_table", MLA_DT_INT32, 2));
    MLA_ARG_CHECK(t->shape[0] == d->batch, "block_table: batch %lld != q's batch %d",
                  (long long)t->shape[0], d->batch);
    MLA_ARG_CHECK(t->shape[1] <= 0x7fffffff, "block_table: expected max_blocks_per_seq = shape[1] "
                  "<= 2147483647, got %lld", (long long)t->shape[1]);
    d->max_blocks = (int)t->shape[1];
    const DLTensor *s = a->b_seq_len;
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, s, "b_seq_len", MLA_DT_INT32, 1));
    MLA_ARG_CHECK(s->shape[0] == d->batch, "b_seq_len: batch %lld != q's batch %d",
                  (long long)s->shape[0], d->batch);
    MLA_FORWARD_IF_ERROR(mla__check_contiguous(s, "b_seq_len"));
    return mla__check_align(s, "b_seq_len", 4);
}

/* out, lse, workspace. */
static mla_status check_outputs(const mla_runtime *rt, const mla_attention_decode_args *a,
                                dims *d) {
    char buf[64];
    d->out = a->out_dtype.bits == 0 && a->out_dtype.code == 0 ? d->cache : fq_dtype(a->out_dtype);
    MLA_ARG_CHECK(d->out >= 0, "out_dtype: expected bfloat16, float16 or float32 (or {0,0,0}: "
                  "latent_cache's), got %s", mla__dtype_name(a->out_dtype, buf, sizeof buf));
    MLA_ARG_CHECK(a->out != NULL, "out: expected a tensor, got NULL");
    MLA_ARG_CHECK(fq_dtype(a->out->dtype) == d->out, "out: expected dtype %s (out_dtype), got %s",
                  dt_names[d->out], mla__dtype_name(a->out->dtype, buf, sizeof buf));
    MLA_FORWARD_IF_ERROR(check_rows(rt, a->out, "out", d->out == MLA__FQ_FP32 ? MLA_DT_FP32
                                    : MLA_DT_BF16_OR_FP16, 3));
    const int64_t want[3] = {d->batch, d->heads, d->rank};
    static const char *const what[3] = {"batch of q", "num_heads of q", "kv_lora_rank"};
    for (int i = 0; i < 3; i++) MLA_FORWARD_IF_ERROR(mla__check_dim(a->out, "out", i, want[i], what[i]));
    if (a->return_lse || a->lse) {
        MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, a->lse, "lse", MLA_DT_FP32, 2));
        MLA_FORWARD_IF_ERROR(mla__check_dim(a->lse, "lse", 0, d->batch, "batch of q"));
        MLA_FORWARD_IF_ERROR(mla__check_dim(a->lse, "lse", 1, d->heads, "num_heads of q"));
        MLA_FORWARD_IF_ERROR(mla__check_contiguous(a->lse, "lse"));
        MLA_FORWARD_IF_ERROR(mla__check_align(a->lse, "lse", 4));
    }
    const DLTensor *ws = a->workspace;
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, ws, "workspace", MLA_DT_UINT8, 1));
    MLA_FORWARD_IF_ERROR(mla__check_contiguous(ws, "workspace"));
    MLA_FORWARD_IF_ERROR(mla__check_align(ws, "workspace", MLA__FQ_WS_ALIGN));
    size_t need = mla__fq_decode_ws_bytes(d->batch, d->heads, d->splits, d->rank, d->rope);
    MLA_ARG_CHECK((size_t)ws->shape[0] >= need, "workspace: expected at least %zu bytes, got %lld",
                  need, (long long)ws->shape[0]);
    return MLA_OK;
}

mla_status mla_attention_decode_shape(const mla_attention_decode_args *args,
                                      mla_attention_decode_sizes *sizes) {
    dims d = {0};
    MLA_FORWARD_IF_ERROR(check_scalars(args, &d));
    MLA_ARG_CHECK(sizes != NULL, "sizes: expected a struct to fill, got NULL");
    MLA_ARG_CHECK(args->q != NULL && args->q->ndim == 3, "q: expected a 3-D tensor");
    long long b = args->q->shape[0], h = args->q->shape[1];
    sizes->out[0] = b, sizes->out[1] = h, sizes->out[2] = d.rank;
    sizes->lse[0] = b, sizes->lse[1] = h;
    sizes->workspace_bytes = mla__fq_decode_ws_bytes(b, h, d.splits, d.rank, d.rope);
    return MLA_OK;
}

/* The tensor-core decode applies: not forced off ($MLAJIT_FAKEQUANT_DECODE=fp32), a device with
 * clusters and the E4M3 conversions (cc 9.0 and later), the DeepSeek latent shape it is written
 * for, and cache rows it can copy in 16-byte pieces. */
static int use_mma(const mla_runtime *rt, const mla_attention_decode_args *a, const dims *d) {
    const DLTensor *c = a->latent_cache;
    return !rt->fakequant_decode_fp32 && rt->cc >= 90 && d->rank == 512 && d->rope == 64 &&
           mla__data(c) % 16 == 0 && (d->page == 1 || mla__stride(c, 1) % 8 == 0) &&
           mla__stride(c, 0) % 8 == 0;
}

/* Workspace slots per (request, head) of the tensor-core decode: at most its number of chunks
 * (decode_mma.cu: G of the S splits of tps tiles, G tps >= 64 tiles, so ceil(tiles / 64) and
 * <= S) for the longest request the block table holds. */
static int mma_slots(const dims *d) {
    long long cap = (long long)d->max_blocks * d->page, tiles = (cap + MLA__FQ_TILE - 1) / MLA__FQ_TILE;
    long long n = (tiles + MLA__FQ_MMA_CHUNK_TILES - 1) / MLA__FQ_MMA_CHUNK_TILES;
    return n < 1 ? 1 : n > d->splits ? d->splits : (int)n;
}

static mla_status decode_spec(const mla_attention_decode_args *a, const dims *d, const char *kind,
                              mla__spec *spec) {
    mla__spec_init(spec, kind);
    MLA_FORWARD_IF_ERROR(mla__spec_add(spec, "cache_dtype", d->cache));
    MLA_FORWARD_IF_ERROR(mla__spec_add(spec, "k_qdq", a->k_qdq));
    MLA_FORWARD_IF_ERROR(mla__spec_add(spec, "v_qdq", a->v_qdq));
    return mla__spec_add(spec, "p_qdq", a->p_qdq);
}

/* The parameter block of the tensor-core kernels (decode_mma.cu, decode_sm90.cu). */
static mla__fq_decode_mma_params mma_params(mla_runtime *rt, const mla_attention_decode_args *a,
                                            const dims *d, int slots) {
    CUdeviceptr ws = mla__data(a->workspace);
    long long rows = (long long)d->batch * d->heads * slots;
    float qk_scale = (float)((double)a->softmax_scale * LOG2E);
    float k_scale = mla__fq_scale(a->k_qdq, a->k_qdq_amax);
    float v_scale = mla__fq_scale(a->v_qdq, a->v_qdq_amax);
    float p_scale = mla__fq_scale(a->p_qdq, a->p_qdq_amax);
    mla__fq_decode_mma_params p = {
        .q = mla__data(a->q), .q_stride_b = mla__stride(a->q, 0), .q_stride_h = mla__stride(a->q, 1),
        .cache = mla__data(a->latent_cache), .c_stride_block = mla__stride(a->latent_cache, 0),
        .c_stride_tok = mla__stride(a->latent_cache, 1), .block_table = mla__data(a->block_table),
        .bt_stride = mla__stride(a->block_table, 0), .seq_len = mla__data(a->b_seq_len),
        .ws_acc = ws, .ws_ml = ws + mla__fq_ws_ml_offset(rows, d->rank),
        .batch = d->batch, .heads = d->heads, .page_size = d->page, .max_blocks = d->max_blocks,
        .splits = d->splits, .slots = slots, .q_fp32 = d->q_fp32,
        /* the per-tensor factors of the codes, applied to the fp32 products (rounded once) */
        .qk_eff = (float)((double)qk_scale * k_scale),
        .pv_eff = (float)((double)p_scale * v_scale),
        .k_scale = k_scale, .v_scale = v_scale, .p_scale = p_scale,
        /* decode_sm90.cu's alternation: the fp8 K / V codes' shortcut where it is exact */
        .codes_quick = mla__fq_codes_quick(rt, a->k_qdq, k_scale, d->cache == MLA__FQ_FP16) |
                       mla__fq_codes_quick(rt, a->v_qdq, v_scale, d->cache == MLA__FQ_FP16) << 1,
    };
    return p;
}

static mla_status launch_decode_mma(mla_runtime *rt, const mla_attention_decode_args *a,
                                    const dims *d, int slots, CUstream stream) {
    mla__fq_decode_mma_params p = mma_params(rt, a, d, slots);
    mla__spec spec;
    MLA_FORWARD_IF_ERROR(decode_spec(a, d, "fakequant_decode_mma", &spec));
    const mla__kernel *k = NULL;
    MLA_FORWARD_IF_ERROR(mla__get_kernel(rt, &spec, &k));
    /* head blocks of 64, an even number of them for clusters of 2 */
    unsigned c = (unsigned)mla__fq_mma_cluster(a->k_qdq, a->v_qdq);
    unsigned hb = (unsigned)((d->heads + c * MLA__FQ_MMA_HEADS - 1) / (c * MLA__FQ_MMA_HEADS)) * c;
    void *args[] = {&p};
    return mla__launch(rt, k, hb, (unsigned)slots, (unsigned)d->batch, stream, args);
}

/* The sm_90a decode applies where the tensor-core one does (use_mma), on a runtime that compiles
 * for its arch (sm_90a), not forced to decode_mma.cu ($MLAJIT_FAKEQUANT_DECODE=mma), and for page
 * sizes that are multiples of 8 (its TMA boxes of >= 8 rows start on 1024-byte swizzle atoms); it
 * runs for the modes of mla__fq_sm90_default, or every mode with $MLAJIT_FAKEQUANT_DECODE=sm90. */
static int use_sm90(const mla_runtime *rt, const mla_attention_decode_args *a, const dims *d) {
    const mla__kernel_kind *k = mla__kernel_kind_find("fakequant_decode_sm90");
    /* its tile alternation (a 16-bit q, any K / V / P modes: decode_sm90.cu kAltKv) takes NVFP4 P
     * codes and flashmla/decode_sm90.cu's K / V quantizers, which have no fallback for an
     * infinite reciprocal of a scale: every set K / V scale and an NVFP4 P's at least 2^-100 */
    int alt = !d->q_fp32;
    if (alt && ((a->p_qdq == MLA_QDQ_NVFP4 && !mla__fq_scale_reciprocal_ok(a->p_qdq, a->p_qdq_amax)) ||
                !mla__fq_scale_reciprocal_ok(a->k_qdq, a->k_qdq_amax) ||
                !mla__fq_scale_reciprocal_ok(a->v_qdq, a->v_qdq_amax)))
        return 0;
    return !rt->fakequant_decode_mma && k && !strcmp(rt->arch, k->only_arch) && d->page % 8 == 0 &&
           (rt->fakequant_decode_sm90 || mla__fq_sm90_default(a->k_qdq, a->v_qdq, a->p_qdq, d->q_fp32));
}

/* Workspace slots of the sm_90a decode (for the longest request the block table holds): with P
 * quantized its chunks of G splits, G tps >= MLA__FQ_SM90_P_CHUNK_TILES tiles, so at most
 * ceil(tiles / 128) and S; without, its chunks of G = ceil(v / S) virtual splits of 64 tiles (v
 * of them), so at most min(v, S). */
static int sm90_slots(const mla_attention_decode_args *a, const dims *d) {
    long long cap = (long long)d->max_blocks * d->page, tiles = (cap + MLA__FQ_TILE - 1) / MLA__FQ_TILE;
    if (a->p_qdq != MLA_QDQ_NONE) {   /* decode_mma.cu's chunks, of >= 128 tiles */
        long long n = (tiles + MLA__FQ_SM90_P_CHUNK_TILES - 1) / MLA__FQ_SM90_P_CHUNK_TILES;
        return n < 1 ? 1 : n > d->splits ? d->splits : (int)n;
    }
    long long v = (tiles + MLA__FQ_SM90_VIRTUAL_TILES - 1) / MLA__FQ_SM90_VIRTUAL_TILES;
    return v < 1 ? 1 : v > d->splits ? d->splits : (int)v;
}

/* The TMA descriptor of latent_cache for decode_sm90.cu: [num_blocks, page, 576] as the 4-D tensor
 * (576 columns, 1, page, num_blocks) (innermost first; the unit dimension keeps the 4-D copy of
 * common/mbarrier.cuh), boxes of 64 columns x R rows, R = min(largest power of two dividing
 * page_size, 32), 128-byte swizzle, out-of-range boxes read as zeros. Strides of dimensions of
 * size 1 are free and replaced by a valid one. Returns 0 when the driver refuses it (the caller
 * then runs decode_mma.cu). */
static int encode_cache_tma(mla_runtime *rt, const mla_attention_decode_args *a, const dims *d,
                            CUtensorMap *map) {
    const DLTensor *c = a->latent_cache;
    const cuuint64_t row = (cuuint64_t)(d->rank + d->rope) * 2;
    cuuint64_t dim[4] = {(cuuint64_t)(d->rank + d->rope), 1, (cuuint64_t)d->page,
                         (cuuint64_t)c->shape[0]};
    cuuint64_t stride[3] = {row, (cuuint64_t)mla__stride(c, 1) * 2, (cuuint64_t)mla__stride(c, 0) * 2};
    for (int i = 0; i < 3; i++)
        if (dim[i + 1] == 1) stride[i] = row;
    int r = d->page & -d->page;
    const cuuint32_t box[4] = {64, 1, (cuuint32_t)(r < MLA__FQ_SM90_MAX_BOX_ROWS ? r
                                                   : MLA__FQ_SM90_MAX_BOX_ROWS), 1};
    const cuuint32_t estride[4] = {1, 1, 1, 1};
    CUresult res = rt->drv.cuTensorMapEncodeTiled(
        map, d->cache == MLA__FQ_FP16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                      : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        4, (void *)(uintptr_t)mla__data(c), dim, stride, box, estride,
        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (res != CUDA_SUCCESS)
        mla__log(rt, MLA_LOG_DEBUG, "fakequant decode: no TMA descriptor for latent_cache "
                 "(CUresult %d): decode_mma.cu", (int)res);
    return res == CUDA_SUCCESS;
}

static mla_status launch_decode_sm90(mla_runtime *rt, const mla_attention_decode_args *a,
                                     const dims *d, int slots, const CUtensorMap *map,
                                     CUstream stream) {
    mla__fq_decode_mma_params p = mma_params(rt, a, d, slots);
    mla__spec spec;
    MLA_FORWARD_IF_ERROR(decode_spec(a, d, "fakequant_decode_sm90", &spec));
    /* q_fp32: the feature split (with the residual product of an inexact q) instead of the tile
     * alternation, which takes a 16-bit q only; for every K / V / P mode, since the alternation
     * takes them all (decode_sm90.cu kAltKv) */
    MLA_FORWARD_IF_ERROR(mla__spec_add(&spec, "q_fp32", d->q_fp32 ? 1 : 0));
    const mla__kernel *k = NULL;
    MLA_FORWARD_IF_ERROR(mla__get_kernel(rt, &spec, &k));
    unsigned hb = (unsigned)((d->heads + MLA__FQ_MMA_HEADS - 1) / MLA__FQ_MMA_HEADS);
    void *args[] = {&p, (void *)map};
    return mla__launch(rt, k, hb, (unsigned)slots, (unsigned)d->batch, stream, args);
}

static mla_status launch_decode(mla_runtime *rt, const mla_attention_decode_args *a,
                                const dims *d, CUstream stream) {
    CUdeviceptr ws = mla__data(a->workspace);
    long long rows = (long long)d->batch * d->heads * d->splits;
    mla__fq_decode_params p = {
        .q = mla__data(a->q), .q_stride_b = mla__stride(a->q, 0), .q_stride_h = mla__stride(a->q, 1),
        .cache = mla__data(a->latent_cache), .c_stride_block = mla__stride(a->latent_cache, 0),
        .c_stride_tok = mla__stride(a->latent_cache, 1), .block_table = mla__data(a->block_table),
        .bt_stride = mla__stride(a->block_table, 0), .seq_len = mla__data(a->b_seq_len),
        .ws_acc = ws, .ws_ml = ws + mla__fq_ws_ml_offset(rows, d->rank),
        .batch = d->batch, .heads = d->heads, .rank = d->rank, .rope = d->rope,
        .page_size = d->page, .max_blocks = d->max_blocks, .splits = d->splits,
        .q_fp32 = d->q_fp32, .qk_scale = (float)((double)a->softmax_scale * LOG2E),
        .k_scale = mla__fq_scale(a->k_qdq, a->k_qdq_amax),
        .v_scale = mla__fq_scale(a->v_qdq, a->v_qdq_amax),
        .p_scale = mla__fq_scale(a->p_qdq, a->p_qdq_amax),
    };
    mla__spec spec;
    MLA_FORWARD_IF_ERROR(decode_spec(a, d, "fakequant_decode", &spec));
    const mla__kernel *k = NULL;
    MLA_FORWARD_IF_ERROR(mla__get_kernel(rt, &spec, &k));
    unsigned hb = (unsigned)((d->heads + MLA__FQ_HEADS_PER_CTA - 1) / MLA__FQ_HEADS_PER_CTA);
    void *args[] = {&p};
    return mla__launch(rt, k, (unsigned)d->splits, hb, (unsigned)d->batch, stream, args);
}

/* The combine over `slots` partials per (request, head) (splits, or the tensor-core chunks). */
static mla_status launch_combine(mla_runtime *rt, const mla_attention_decode_args *a,
                                 const dims *d, int slots, CUstream stream) {
    CUdeviceptr ws = mla__data(a->workspace);
    long long rows = (long long)d->batch * d->heads * slots;
    mla__fq_combine_params p = {
        .ws_acc = ws, .ws_ml = ws + mla__fq_ws_ml_offset(rows, d->rank), .out = mla__data(a->out),
        .o_stride_b = mla__stride(a->out, 0), .o_stride_h = mla__stride(a->out, 1),
        .lse = a->return_lse ? mla__data(a->lse) : 0,
        .batch = d->batch, .heads = d->heads, .rank = d->rank, .splits = slots,
    };
    mla__spec spec;
    mla__spec_init(&spec, "fakequant_decode_combine");
    MLA_FORWARD_IF_ERROR(mla__spec_add(&spec, "out_dtype", d->out));
    const mla__kernel *k = NULL;
    MLA_FORWARD_IF_ERROR(mla__get_kernel(rt, &spec, &k));
    unsigned hb = (unsigned)((d->heads + MLA__FQ_HEADS_PER_CTA - 1) / MLA__FQ_HEADS_PER_CTA);
    void *args[] = {&p};
    return mla__launch(rt, k, (unsigned)d->batch, hb, 1, stream, args);
}

/* ---- The dense path: no quantization on the FlashMLA-compatible decode ------------------------
 * Without K, V or P quantization the work is the dense bf16/fp16 MLA decode, and the spec's split
 * schedule is not part of the numerics (§2.4: only P quantization depends on it); P enters P V
 * rounded once to the cache dtype (upstream's p.to(v.dtype) @ v, as decode_sm90.cu does), the row
 * sum takes the fp32 p. So the call runs mla_get_metadata + mla_flash_with_kvcache (on sm_90a
 * flashmla/decode_sm90.cu: 64-key tiles, the two warpgroups on alternate tiles, then its combine)
 * over 4-D views of q, the cache, out and lse, with two differences of launch: the metadata
 * kernel is a programmatic dependent of the stream's previous kernel, and the combine is
 * "fakequant_dense_combine" (the same kernel, specialized). Its running max restarts at each chunk
 * of a request, which decides where P is rounded; the schedule is FlashMLA's batch-invariant
 * mode with chunks of MLA__FQ_DENSE_CHUNK keys of the request's own, so the chunks, and the
 * result bit for bit, depend on the request's length only: not on num_kv_splits, the page size or
 * the batch (a request of at most MLA__FQ_DENSE_CHUNK keys is one chunk, written directly). The
 * decode writes FlashMLA's +inf as the lse of a request without keys; the combine, which runs
 * after it, makes it the spec's -inf.
 * Workspace: [schedule: parts x 8 int32 | num_splits: batch + 1 int32 | lse scratch (return_lse
 * 0): batch x heads float32 | FlashMLA split slots], each part 256-byte aligned. */

static size_t align256(size_t x) { return (x + 255) / 256 * 256; }

static size_t dense_head_bytes(long long b, long long h, long long parts) {
    return align256((size_t)parts * 32) + align256((size_t)(b + 1) * 4) + align256((size_t)(b * h) * 4);
}

size_t mla__fq_decode_ws_bytes(long long b, long long h, int splits, int rank, int rope) {
    size_t fq = mla__fq_ws_bytes(b * h * splits, rank);
    if (rank != MLA_FLASHMLA_HEAD_DIM_V || rank + rope != MLA_FLASHMLA_HEAD_DIM) return fq;
    size_t dense = dense_head_bytes(b, h, MLA__FQ_DENSE_MAX_PARTS) +
                   mla__flashmla_ws_bytes(h, b * ((long long)splits + 1));
    return dense > fq ? dense : fq;
}

/* Keys per chunk of the dense path ($MLAJIT_FAKEQUANT_DENSE_CHUNK or MLA__FQ_DENSE_CHUNK). */
static int dense_chunk(const mla_runtime *rt) {
    return rt->fakequant_dense_chunk ? rt->fakequant_dense_chunk : MLA__FQ_DENSE_CHUNK;
}

typedef struct dense_plan {
    int kv;                /* K and / or V quantized: fakequant_decode_dense */
    int parts;             /* schedule parts (the decode grid's x) */
    long long slots;       /* FlashMLA split slots the workspace holds */
    size_t head;           /* bytes before the FlashMLA workspace */
} dense_plan;

static int stride16(const DLTensor *t, int dim) {
    return t->shape[dim] <= 1 || (mla__stride(t, dim) * 2) % 16 == 0;
}

/* The dense path applies: chosen ($MLAJIT_FAKEQUANT_DECODE=dense, or by default with
 * MLA__FQ_DENSE_DEFAULT unless another kernel is forced), no quantization with a 16-bit q and
 * out of the cache's dtype, on a runtime for sm_90a that runs flashmla_decode_sm90, the latent
 * shape and 16-byte rows of use_mma, q and out strides of 16 bytes, heads <= 2048, and a
 * workspace that holds every chunk of the longest request the block table can hold. With K
 * and / or V quantized and P not (pl->kv: fakequant_decode_dense), the same where chosen
 * ($MLAJIT_FAKEQUANT_DECODE=dense, or by default for the modes of mla__fq_dense_kv_default), the page size is a multiple
 * of 8 (its TMA loads) and every set scale is at least 2^-100 (its reciprocals finite). */
static int use_dense(const mla_runtime *rt, const mla_attention_decode_args *a, const dims *d,
                     dense_plan *pl) {
    const int forced_other = rt->fakequant_decode_sm90 || rt->fakequant_decode_mma ||
                             rt->fakequant_decode_fp32;
    const int out_same = d->out == d->cache;
    pl->kv = mla__fq_dense_kv_modes(a->k_qdq, a->v_qdq, a->p_qdq, d->q_fp32, out_same);
    const int deflt = pl->kv ? mla__fq_dense_kv_default(a->k_qdq, a->v_qdq) : MLA__FQ_DENSE_DEFAULT;
    if (!(rt->fakequant_decode_dense || (deflt && !forced_other))) return 0;
    const mla__kernel_kind *k = mla__kernel_kind_find("flashmla_decode_sm90");
    if (!k || strcmp(rt->arch, k->only_arch) || rt->flashmla_decode_portable) return 0;
    if (!pl->kv && !mla__fq_dense_modes(a->k_qdq, a->v_qdq, a->p_qdq, d->q_fp32, out_same))
        return 0;
    /* the quantizing kernel's quantizers take reciprocals of the scales without a fallback */
    if (pl->kv && (d->page % 8 || !mla__fq_scale_reciprocal_ok(a->k_qdq, a->k_qdq_amax) ||
                   !mla__fq_scale_reciprocal_ok(a->v_qdq, a->v_qdq_amax)))
        return 0;
    if (d->heads > 2048 || !stride16(a->q, 0) || !stride16(a->q, 1) || mla__data(a->q) % 16 ||
        !stride16(a->out, 0) || !stride16(a->out, 1) || mla__data(a->out) % 16)
        return 0;
    long long cap = (long long)d->max_blocks * d->page, chunk = dense_chunk(rt);
    long long n_max = (cap + chunk - 1) / chunk;
    if (n_max < 1) n_max = 1;
    long long parts = mla__flashmla_num_sm_parts(rt->sm_count, 1, d->heads);
    if (parts > MLA__FQ_DENSE_MAX_PARTS) parts = MLA__FQ_DENSE_MAX_PARTS;
    if (parts > d->batch * n_max) parts = d->batch * n_max;
    size_t head = dense_head_bytes(d->batch, d->heads, parts), bytes = (size_t)a->workspace->shape[0];
    if (bytes < head) return 0;
    long long slots = mla__flashmla_ws_slots(d->heads, bytes - head);
    long long need = d->batch * n_max > d->batch + parts ? d->batch * n_max : d->batch + parts;
    if (slots < need) return 0;
    pl->parts = (int)parts, pl->slots = slots > 0x7fffffff ? 0x7fffffff : slots, pl->head = head;
    return 1;
}

/* A view of a strided tensor with new shape and strides (elements), same data and dtype. */
static void view(DLTensor *v, const DLTensor *t, int ndim, int64_t *shape, int64_t *strides) {
    *v = *t;
    v->ndim = ndim, v->shape = shape, v->strides = strides;
}

/* A contiguous view of workspace bytes at offset off. */
static void ws_view(DLTensor *v, const DLTensor *ws, size_t off, DLDataType dt, int ndim,
                    int64_t *shape) {
    memset(v, 0, sizeof *v);
    v->data = (void *)(uintptr_t)(mla__data(ws) + off);
    v->device = ws->device, v->ndim = ndim, v->dtype = dt, v->shape = shape;
}

static mla_status launch_dense(mla_runtime *rt, const mla_attention_decode_args *a,
                               const dims *d, const dense_plan *pl, CUstream stream) {
    const DLDataType i32 = {kDLInt, 32, 1}, f32 = {kDLFloat, 32, 1}, u8 = {kDLUInt, 8, 1};
    const long long b = d->batch, h = d->heads;
    const DLTensor *c = a->latent_cache;
    int64_t qs[4] = {b, 1, h, MLA_FLASHMLA_HEAD_DIM};
    int64_t qst[4] = {mla__stride(a->q, 0), mla__stride(a->q, 0), mla__stride(a->q, 1), 1};
    int64_t cs[4] = {c->shape[0], c->shape[1], 1, MLA_FLASHMLA_HEAD_DIM};
    int64_t cst[4] = {mla__stride(c, 0), mla__stride(c, 1), MLA_FLASHMLA_HEAD_DIM, 1};
    int64_t os[4] = {b, 1, h, MLA_FLASHMLA_HEAD_DIM_V};
    int64_t ost[4] = {mla__stride(a->out, 0), mla__stride(a->out, 0), mla__stride(a->out, 1), 1};
    int64_t ls[3] = {b, h, 1}, sched_s[2] = {pl->parts, 8}, split_s[1] = {b + 1};
    size_t sched_off = 0, split_off = align256((size_t)pl->parts * 32);
    size_t lse_off = split_off + align256((size_t)(b + 1) * 4);
    int64_t fl_s[1] = {(int64_t)(a->workspace->shape[0] - pl->head)};
    DLTensor q4, c4, o4, l3, sched, splits, fl;
    view(&q4, a->q, 4, qs, qst);
    view(&c4, c, 4, cs, cst);
    view(&o4, a->out, 4, os, ost);
    if (a->return_lse) view(&l3, a->lse, 3, ls, NULL);
    else ws_view(&l3, a->workspace, lse_off, f32, 3, ls);
    ws_view(&sched, a->workspace, sched_off, i32, 2, sched_s);
    ws_view(&splits, a->workspace, split_off, i32, 1, split_s);
    ws_view(&fl, a->workspace, pl->head, u8, 1, fl_s);

    mla_flash_with_kvcache_args f;
    mla_flash_with_kvcache_args_init(&f);
    f.q = &q4, f.k_cache = &c4, f.block_table = a->block_table, f.cache_seqlens = a->b_seq_len;
    f.tile_scheduler_metadata = &sched, f.num_splits = &splits;
    f.softmax_scale = a->softmax_scale, f.causal = 0;
    f.out = &o4, f.softmax_lse = &l3, f.workspace = &fl;
    const float ks = mla__fq_scale(a->k_qdq, a->k_qdq_amax), vs = mla__fq_scale(a->v_qdq, a->v_qdq_amax);
    /* Without K / V quantization the decode (fakequant_decode_dense k = v = none) cuts its
     * schedule itself: no metadata kernel on the chain ($MLAJIT_FAKEQUANT_DENSE_SCHED=metadata: as
     * before). The K / V kinds read the metadata's records (the self-cut schedule's code cost
     * them registers and spills: kv fp8 710 -> 789 us at L 4k on the H200). */
    if (!rt->fakequant_dense_metadata && !pl->kv) {
        mla_status s = mla__flash_with_kvcache_fq(rt, &f, a->k_qdq, a->v_qdq, ks, vs,
                                                  dense_chunk(rt) / MLA__FLASHMLA_UNIT_KEYS, stream);
        if (s != MLA_ERR_NOT_SUPPORTED) return s;
    }

    mla_get_metadata_args m;
    mla_get_metadata_args_init(&m);
    m.cache_seqlens = a->b_seq_len;
    m.num_q_tokens_per_head_k = (int)h, m.num_heads_k = 1;
    m.split_tokens = dense_chunk(rt), m.max_splits = (int)pl->slots;
    m.tile_scheduler_metadata = &sched, m.num_splits = &splits;
    /* a programmatic dependent of the previous kernel (the metadata kernel waits for it), so its
     * launch overlaps that kernel's tail */
    MLA_FORWARD_IF_ERROR(mla__get_metadata(rt, &m, 1, stream));

    if (pl->kv)   /* the same combine (-inf lse of requests without keys) after the K/V kernel */
        return mla__flash_with_kvcache_fq(rt, &f, a->k_qdq, a->v_qdq, ks, vs, 0, stream);
    /* the combine writes -inf as the lse of requests without keys (FlashMLA's is +inf) */
    return mla__flash_with_kvcache(rt, &f, "fakequant_dense_combine", stream);
}

mla_status mla_attention_decode(mla_runtime *runtime, const mla_attention_decode_args *args,
                                CUstream stream) {
    MLA_ARG_CHECK(runtime != NULL, "runtime: expected a runtime, got NULL");
    dims d = {0};
    MLA_FORWARD_IF_ERROR(check_scalars(args, &d));
    MLA_FORWARD_IF_ERROR(check_q_cache(runtime, args, &d));
    MLA_FORWARD_IF_ERROR(check_table(runtime, args, &d));
    MLA_FORWARD_IF_ERROR(check_outputs(runtime, args, &d));
    MLA_FORWARD_IF_ERROR(mla__runtime_enter(runtime));
    if (use_mma(runtime, args, &d)) {
        dense_plan pl;
        if (use_dense(runtime, args, &d, &pl)) {
            mla_status s = launch_dense(runtime, args, &d, &pl, stream);
            /* the quantizing kernel refused (no TMA descriptor): the fake-quant kernels below */
            if (!(pl.kv && s == MLA_ERR_NOT_SUPPORTED)) return s;
        }
        CUtensorMap map;
        memset(&map, 0, sizeof map);
        if (use_sm90(runtime, args, &d) && encode_cache_tma(runtime, args, &d, &map)) {
            int slots = sm90_slots(args, &d);
            MLA_FORWARD_IF_ERROR(launch_decode_sm90(runtime, args, &d, slots, &map, stream));
            return launch_combine(runtime, args, &d, slots, stream);
        }
        int slots = mma_slots(&d);
        MLA_FORWARD_IF_ERROR(launch_decode_mma(runtime, args, &d, slots, stream));
        return launch_combine(runtime, args, &d, slots, stream);
    }
    MLA_FORWARD_IF_ERROR(launch_decode(runtime, args, &d, stream));
    return launch_combine(runtime, args, &d, d.splits, stream);
}
