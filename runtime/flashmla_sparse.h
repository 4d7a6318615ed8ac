/* FlashMLA-compatible sparse kernels, internal: kind builders (referenced by the table in
 * runtime/spec.c), launch constants, the entry points runtime/flashmla_decode.c dispatches to,
 * and the C mirrors of the kernels' parameter blocks (kernel_src/flashmla/sparse_params.cuh:
 * same fields, same order, same sizes). */
#ifndef MLAJIT_FLASHMLA_SPARSE_H
#define MLAJIT_FLASHMLA_SPARSE_H

#include <stddef.h>

#include "mlajit/flashmla.h"
#include "runtime/internal.h"

struct mla__spec;
struct mla__launch_info;

/* "flashmla_sparse_prefill" (d_qk: 576 or 512; the portable prefill):
 * runtime/flashmla_sparse_prefill.c. */
mla_status mla__flashmla_sparse_prefill_build(const struct mla__spec *spec, char *name_expr,
                                              size_t size, struct mla__launch_info *launch);
/* The builder of the kinds without parameters (runtime/flashmla_sparse_checks.c, one table):
 * checks that spec has none, names the kernel, sets its launch. The kinds:
 *   "flashmla_sparse_decode"         the portable decode (kernel_src/flashmla/sparse_decode.cu)
 * and the sm_90a wgmma kinds (kernel_src/flashmla/sparse_decode_sm90.cu, sparse_prefill_sm90.cu),
 * launched on sm_90a only, on a flat grid (tokens * ceil(h_q / 64)):
 *   "flashmla_sparse_decode_sm90"    two-warpgroup ping-pong kernel (sparse_sm90.cuh; the
 *                                    default at h_q <= 64)
 *   "flashmla_sparse_decode_sm90x2"  warp-specialized kernel (sparse_ws_sm90.cuh), the two head
 *                                    blocks of a token (h_q > 64) in a cluster of 2 sharing the
 *                                    converted tiles, cluster-scope barrier semantics (comparison)
 *   "flashmla_sparse_decode_sm90x2c" the same with CTA-scope waits and peer arrivals, as
 *                                    CUTLASS's cluster pipelines (the default at h_q > 64)
 *   "flashmla_sparse_decode_sm90ws"  warp-specialized kernel, one CTA per head block (comparison)
 *   "flashmla_sparse_prefill_sm90"   warp-specialized kernel (d_qk 576)
 *   "flashmla_sparse_prefill_sm90pp" ping-pong kernel (comparison) */
mla_status mla__flashmla_sparse_fixed_build(const struct mla__spec *spec, char *name_expr,
                                            size_t size, struct mla__launch_info *launch);
/* The kind a sparse call on arch runs: on sm_90a the sm_90a kind (the prefill for d_qk 576 only)
 * unless force is "portable" (the runtime's $MLAJIT_FLASHMLA_DECODE choice, read at
 * mla_runtime_create; may be NULL), else the portable kind. The decode at h_q > 64 runs the CTA
 * pair with CTA-scope barriers (x2c), at h_q <= 64 the ping-pong kernel. force "pingpong" (every
 * sm_90a sparse call on the ping-pong kernels), "ws" (on the one-CTA warp-specialized ones), "x2"
 * (the decode at h_q > 64 on the CTA pair with cluster-scope barriers), "x2c" (the default):
 * $MLAJIT_FLASHMLA_SPARSE_SM90, for comparisons. prefill: 0 decode, 1 prefill. */
const char *mla__flashmla_sparse_kind(const char *arch, int prefill, int d_qk, int h_q,
                                      const char *force);
/* mla_flash_with_kvcache and its shape helper when args->indices is set. */
mla_status mla__flash_sparse_decode(mla_runtime *rt, const mla_flash_with_kvcache_args *args,
                                    CUstream stream);
mla_status mla__flash_sparse_decode_shape(const mla_flash_with_kvcache_args *args,
                                          mla_flash_with_kvcache_sizes *sizes);

/* runtime/flashmla_sparse_checks.c: what the sparse entry points share. */
/* args non-NULL and of this library's struct_size (also the dense decode's first check). */
mla_status mla__flashmla_check_kvcache_args(const mla_flash_with_kvcache_args *a);
/* A bfloat16 tensor of ndim dimensions holding rows (q, kv, out): unit last stride, the other
 * strides of dimensions longer than 1 non-negative multiples of 8 elements, 16-byte aligned. */
mla_status mla__flashmla_check_bf16_rows(const mla_runtime *rt, const DLTensor *t,
                                         const char *name, int ndim);
/* An optional (NULL: fine) contiguous 1-D tensor of n elements of dtype (attn_sink,
 * topk_length); `what` names where n comes from in the message. */
mla_status mla__flashmla_check_optional_vector(const mla_runtime *rt, const DLTensor *t,
                                               const char *name, mla__dtype dtype, int64_t n,
                                               const char *what);
/* Enters the runtime, loads the kernel of spec and launches it on grid (grid_x, ceil(h_q / 64)),
 * or (grid_x * ceil(h_q / 64)) when flat (the sm_90a kinds), with the parameter block params. */
mla_status mla__flashmla_sparse_launch(mla_runtime *rt, const mla__spec *spec, unsigned grid_x,
                                       int h_q, int flat, CUstream stream, void *params);

#define MLA__FLASHMLA_SPARSE_THREADS 256
#define MLA__FLASHMLA_SPARSE_WS_THREADS 384      /* sparse_ws_sm90.cuh kThreadsWs */
#define MLA__FLASHMLA_SPARSE_BLOCK_M 64            /* heads per CTA */
#define MLA__FLASHMLA_SPARSE_DECODE_SMEM 198656    /* sparse_decode.cu kDecSmemBytes */
#define MLA__FLASHMLA_SPARSE_PREFILL_SMEM_576 230400 /* sparse_prefill.cu PrefillSmem<576> */
#define MLA__FLASHMLA_SPARSE_PREFILL_SMEM_512 205824 /* PrefillSmem<512> */
#define MLA__FLASHMLA_SPARSE_SM90_SMEM 231488      /* sparse_sm90.cuh kSmemBytesS */
#define MLA__FLASHMLA_SPARSE_ROW_BYTES 656         /* fp8 cache row: 512 e4m3, 4 fp32, 64 bf16 */

typedef struct mla__flashmla_sparse_decode_params {
    CUdeviceptr q;
    long long q_stride_b, q_stride_s, q_stride_h;
    CUdeviceptr k;
    long long k_stride_block_bytes;
    CUdeviceptr indices;
    long long i_stride_b, i_stride_s;
    CUdeviceptr topk_length, attn_sink, out;
    long long o_stride_b, o_stride_s, o_stride_h;
    CUdeviceptr lse;
    long long num_slots;
    int b, s_q, h_q, topk, page_size;
    float scale_log2;
    int l2_prefetch;
} mla__flashmla_sparse_decode_params;

typedef struct mla__flashmla_sparse_prefill_params {
    CUdeviceptr q;
    long long q_stride_s, q_stride_h;
    CUdeviceptr kv;
    long long kv_stride_s;
    CUdeviceptr indices;
    long long i_stride_s;
    CUdeviceptr topk_length, attn_sink, out;
    long long o_stride_s, o_stride_h;
    CUdeviceptr max_logits, lse;
    int s_q, h_q, topk, s_kv;
    float scale_log2;
    int natural_log;
    int l2_prefetch;
} mla__flashmla_sparse_prefill_params;

_Static_assert(sizeof(mla__flashmla_sparse_decode_params) == 168, "mirror of SparseDecodeParams");
_Static_assert(sizeof(mla__flashmla_sparse_prefill_params) == 144,
               "mirror of SparsePrefillParams");

#endif /* MLAJIT_FLASHMLA_SPARSE_H */
