/* FlashMLA-compatible family, internal: kind builders (referenced by the table in runtime/spec.c),
 * the kernels' launch constants and the C mirrors of their parameter blocks
 * (kernel_src/flashmla/params.cuh: same fields, same order, same sizes). */
#ifndef MLAJIT_FLASHMLA_KINDS_H
#define MLAJIT_FLASHMLA_KINDS_H

#include <stddef.h>

#include "mlajit/mlajit.h"

struct mla__spec;
struct mla__launch_info;

/* "flashmla_metadata" (no params), "flashmla_decode" (kv_dtype, page_class, causal),
 * "flashmla_combine" (out_dtype), and "fakequant_dense_combine" (out_dtype: the same combine with
 * -inf as the lse of rows without keys, for mla_attention_decode's dense path).
 * runtime/flashmla.c and runtime/flashmla_decode.c. */
mla_status mla__flashmla_metadata_build(const struct mla__spec *spec, char *name_expr,
                                        size_t size, struct mla__launch_info *launch);
mla_status mla__flashmla_decode_build(const struct mla__spec *spec, char *name_expr, size_t size,
                                      struct mla__launch_info *launch);
mla_status mla__flashmla_combine_build(const struct mla__spec *spec, char *name_expr, size_t size,
                                       struct mla__launch_info *launch);
/* "flashmla_decode_sm90" (kv_dtype 0 or 1, page_class, causal): the wgmma decode
 * (kernel_src/flashmla/decode_sm90.cu), same grid as "flashmla_decode"; its parameters are the
 * decode parameters and a k_cache TMA descriptor (CUtensorMap, by value; used by page class 1,
 * which launch_decode downgrades to 0 when the driver refuses the descriptor). */
mla_status mla__flashmla_decode_sm90_build(const struct mla__spec *spec, char *name_expr,
                                           size_t size, struct mla__launch_info *launch);
/* "flashmla_decode_sm90x2" (kv_dtype 0 or 1): the sm_90a decode's cp.async path (page class 0,
 * non-causal) on CTA pairs (kernel_src/flashmla/decode_sm90x2.cu), clusters of 2 along x over
 * grid (2 P, h_kv, head blocks / 2); launch_decode runs it for page class 0 calls of the sm90
 * kind without a causal mask and with an even number of head blocks when the runtime was created
 * with $MLAJIT_FLASHMLA_DECODE=pair (measured slower than the one-CTA kernel; comparisons). */
mla_status mla__flashmla_decode_sm90x2_build(const struct mla__spec *spec, char *name_expr,
                                             size_t size, struct mla__launch_info *launch);
/* The decode kind a call on arch with KV kind kv runs: "flashmla_decode_sm90" on sm_90a for
 * 16-bit KV unless force is "portable" (the runtime's $MLAJIT_FLASHMLA_DECODE choice, read at
 * mla_runtime_create; may be NULL), else "flashmla_decode". */
const char *mla__flashmla_decode_kind(const char *arch, int kv, const char *force);

/* mla_flash_with_kvcache (dense) with the combine of kind combine_kind ("flashmla_combine" or
 * "fakequant_dense_combine"). */
mla_status mla__flash_with_kvcache(mla_runtime *runtime, const mla_flash_with_kvcache_args *args,
                                   const char *combine_kind, CUstream stream);
/* mla_get_metadata with its metadata kernel launched as a programmatic dependent of the
 * stream's previous kernel when pdl is set (it waits for that kernel before reading anything). */
mla_status mla__get_metadata(mla_runtime *runtime, const mla_get_metadata_args *args, int pdl,
                             CUstream stream);

/* Spec values. */
enum { MLA__FLASHMLA_KV_BF16 = 0, MLA__FLASHMLA_KV_FP16 = 1, MLA__FLASHMLA_KV_FP8 = 2 };
/* page_class 1: flashmla_decode, page_size % 64 == 0; flashmla_decode_sm90, TMA loads
 * (page_size % MLA__FLASHMLA_TMA_MIN_ROWS == 0) */
enum { MLA__FLASHMLA_PAGE_ANY = 0, MLA__FLASHMLA_PAGE_64X = 1 };
enum { MLA__FLASHMLA_OUT_BF16 = 0, MLA__FLASHMLA_OUT_FP16 = 1 };

#define MLA__FLASHMLA_UNIT_KEYS 64          /* keys per schedule unit and decode tile */
#define MLA__FLASHMLA_BLOCK_M 64            /* query rows per decode CTA */
#define MLA__FLASHMLA_TMA_MIN_ROWS 8        /* smallest TMA box (rows) of the sm_90a decode */
#define MLA__FLASHMLA_METADATA_THREADS 512
#define MLA__FLASHMLA_DECODE_THREADS 256
#define MLA__FLASHMLA_DECODE_SMEM 229888    /* decode.cu kSmemBytes */
#define MLA__FLASHMLA_DECODE_SM90_SMEM 231488 /* decode_sm90.cu kSmemBytes90 */
#define MLA__FLASHMLA_DECODE_X2_SMEM 231560 /* decode_sm90x2.cu kSmemBytesX2 */
#define MLA__FLASHMLA_COMBINE_THREADS 256
#define MLA__FLASHMLA_COMBINE_ROWS 32       /* rows per combine CTA (4 per warp) */
#define MLA__FLASHMLA_WS_ALIGN 256

/* Workspace layout for `slots` split slots of rows = s_q * h_q rows: o_accum
 * [slots, rows, 512] float32 at 0, lse_accum [slots, rows] float32 at lse_offset. */
static inline size_t mla__flashmla_ws_lse_offset(long long rows, long long slots) {
    return (size_t)(slots * rows * MLA_FLASHMLA_HEAD_DIM_V * 4);
}
static inline size_t mla__flashmla_ws_bytes(long long rows, long long slots) {
    return mla__flashmla_ws_lse_offset(rows, slots) + (size_t)(slots * rows * 4);
}
/* Split slots a workspace of `bytes` holds. */
static inline long long mla__flashmla_ws_slots(long long rows, size_t bytes) {
    return (long long)(bytes / (size_t)(rows * (MLA_FLASHMLA_HEAD_DIM_V + 1) * 4));
}

/* FlashMLA's num_sm_parts: max(sm_count / h_kv / ceil(q_per_hk / 64), 1). */
static inline int mla__flashmla_num_sm_parts(int sm_count, int h_kv, int q_per_hk) {
    int m_blocks = (q_per_hk + MLA__FLASHMLA_BLOCK_M - 1) / MLA__FLASHMLA_BLOCK_M;
    int parts = sm_count / h_kv / (m_blocks > 0 ? m_blocks : 1);
    return parts > 1 ? parts : 1;
}

/* C mirrors of the kernel parameter blocks. */
typedef struct mla__flashmla_metadata_params {
    CUdeviceptr seqlens, sched, num_splits;
    int b, num_parts, chunk_units, max_splits;
} mla__flashmla_metadata_params;

typedef struct mla__flashmla_decode_params {
    CUdeviceptr q;
    long long q_stride_b, q_stride_s, q_stride_h;
    CUdeviceptr k;
    long long k_stride_block, k_stride_tok, k_stride_head;
    CUdeviceptr block_table;
    long long bt_stride;
    CUdeviceptr seqlens, sched, num_splits, descale_q, descale_k;
    CUdeviceptr out;
    long long o_stride_b, o_stride_s, o_stride_h;
    CUdeviceptr lse, o_accum, lse_accum;
    int b, s_q, h_q, h_kv, heads_per_kv, page_size, max_blocks, num_blocks, num_parts, split_cap;
    float scale_log2;
    int page_shift; /* log2(page_size) when a power of two, else -1 */
} mla__flashmla_decode_params;

typedef struct mla__flashmla_combine_params {
    CUdeviceptr o_accum, lse_accum, num_splits, out;
    long long o_stride_b, o_stride_s, o_stride_h;
    CUdeviceptr lse;
    int b, s_q, h_q, split_cap;
    CUdeviceptr seqlens;
} mla__flashmla_combine_params;

_Static_assert(sizeof(mla__flashmla_metadata_params) == 40, "mirror of MetadataParams");
_Static_assert(sizeof(mla__flashmla_decode_params) == 224, "mirror of DecodeParams");
_Static_assert(sizeof(mla__flashmla_combine_params) == 88, "mirror of CombineParams");

/* mla_flash_with_kvcache (bf16 / fp16, not causal, the sm_90a decode with TMA loads) on the
 * fake-quant kind "fakequant_decode_dense" (k_qdq / v_qdq: 1 fp8, 2 nvfp4; scales as
 * mla__fq_scale): K and / or V fake-quantized, P not; then the combine. MLA_ERR_NOT_SUPPORTED
 * (nothing launched) where it does not apply: another arch, causal, a page size not a multiple
 * of 8, or a k_cache the driver's TMA descriptor refuses. k_qdq = v_qdq = 0: the unquantized
 * pair loop on the same kernel. chunk_units > 0: the decode cuts the batch-invariant schedule of
 * chunks of chunk_units units itself and writes num_splits (no mla_get_metadata before it; the
 * records in tile_scheduler_metadata are not read); 0: the records of mla_get_metadata.
 * runtime/flashmla_decode.c. */
struct mla_flash_with_kvcache_args;
mla_status mla__flash_with_kvcache_fq(mla_runtime *rt, const struct mla_flash_with_kvcache_args *args,
                                      int k_qdq, int v_qdq, float k_scale, float v_scale,
                                      int chunk_units, CUstream stream);

#endif /* MLAJIT_FLASHMLA_KINDS_H */
