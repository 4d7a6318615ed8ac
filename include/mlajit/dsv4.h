/* mlajit DeepSeek-V4 (DSV4) MLA decode/verify layer: workspace and plan.
 *
 * Mirrors ../seeds/000 (mla_workspace, mla_attention_plan) with a runtime handle first and a
 * CUstream last. Tensor arguments are DLPack tensors on the runtime's CUDA device; a NULL pointer
 * stands for Python's None where the seed allows it. Nothing here synchronizes, allocates or reads
 * device memory on the host, except mla_workspace (allocation, once, before any graph capture). */
#ifndef MLAJIT_DSV4_H
#define MLAJIT_DSV4_H

#include "mlajit/mlajit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest number of tokens of one DSV4 launch (and of a workspace). */
#define MLA_DSV4_MAX_TOKENS 640

/* Bytes of the workspace prefix that holds the barrier banks (zeroed by mla_workspace and
 * mla_workspace_init, kept zeroed by the kernels). */
#define MLA_DSV4_BARRIER_BYTES 2048

/* Bytes a workspace needs to serve launches of up to max_tokens tokens with these weights.
 * max_tokens in [1, 640]; wq_a_weight [1024, H], wkv_weight [512, H], wo_a_weight [2H, 32768/G],
 * wo_b_weight [H, 2H], all float8_e4m3fn (or uint8) on a CUDA device. Reads no device memory. */
MLA_API mla_status mla_workspace_size(int max_tokens, const DLTensor *wq_a_weight,
                                      const DLTensor *wkv_weight, const DLTensor *wo_a_weight,
                                      const DLTensor *wo_b_weight, size_t *bytes);

/* Allocates the workspace (mla_workspace_size bytes) on the device of wq_a_weight, which must be
 * the runtime's, and zeroes its barrier prefix (synchronously: call it before graph capture).
 * Free it with mla_buffer_free. */
MLA_API mla_status mla_workspace(mla_runtime *runtime, int max_tokens, const DLTensor *wq_a_weight,
                                 const DLTensor *wkv_weight, const DLTensor *wo_a_weight,
                                 const DLTensor *wo_b_weight, mla_buffer *workspace);

/* For a workspace the caller allocated itself (1-D uint8, at least mla_workspace_size bytes,
 * 256-byte aligned): zeroes its barrier prefix on stream. */
MLA_API mla_status mla_workspace_init(mla_runtime *runtime, const DLTensor *workspace,
                                      CUstream stream);

/* Fills the plan slot of one layer kind in workspace and zeroes that kind's barrier bank.
 *
 * kv_indices    [T, topk] int32, unit column stride, 1 <= T <= 640, topk >= 1: each token's SWA
 *               kv_cache slots in window order; columns past its length are ignored.
 * topk_lengths  [T] int32 contiguous rows each token attends over (0..topk), or NULL for topk.
 * page_size     rows per kv_cache page, a power of two.
 * kv_run_step   slot step between consecutive window rows: 1 or -1.
 * c128_attn_len [T] int32 contiguous, or NULL: NULL selects the SWA slot, a tensor the HCA slot
 *               (its values are not read here).
 * workspace     1-D uint8 workspace, 256-byte aligned, large enough for the plan of T tokens.
 * plan          out: [T, 4] int32 view into workspace of (slot0, len0, slot1, rows) per token,
 *               valid until the next plan of this kind. May be NULL.
 *
 * A window of at most two runs (a run ends where the next slot is not the previous + kv_run_step
 * or lies on another page) is kept: row g < len0 on slot0 + g (the lowest slot of run 0), the
 * others on slot1 + g - len0. A window of more than two runs is cut to its first row. */
MLA_API mla_status mla_attention_plan(mla_runtime *runtime, const DLTensor *kv_indices,
                                      const DLTensor *topk_lengths, int page_size,
                                      int kv_run_step, const DLTensor *c128_attn_len,
                                      const DLTensor *workspace, CUstream stream, mla_tensor *plan);

#ifdef __cplusplus
}
#endif

#endif /* MLAJIT_DSV4_H */
