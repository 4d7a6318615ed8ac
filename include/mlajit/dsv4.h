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

/* ---- mla_attention ------------------------------------------------------------------------ */

/* The arguments of mla_attention, named as in the seed. Initialize with mla_attention_args_init
 * (which sets the seed's defaults), then set the tensors. NULL stands for None. Shapes use
 * T tokens, H hidden size (a multiple of 128), 64 heads of 512 dims. */
typedef struct mla_attention_args {
    size_t struct_size;              /* sizeof(mla_attention_args), set by the init function */
    const DLTensor *q_or_x;          /* [T, 32768] bf16 contiguous: q staging, on return O of
                                        every token whose KV was not split */
    const DLTensor *hidden_states;   /* [T, H] bf16, unit column stride, 16-byte aligned rows */
    const DLTensor *kv_cache;        /* [num_pages, page_bytes] uint8 paged SWA cache (576-byte
                                        rows, then page_size 8-byte ue8m0 scale slots) */
    int page_size;                   /* rows per page, a power of two (as given to the plan) */
    const DLTensor *positions;       /* [T] int32 */
    const DLTensor *freqs_real;      /* [max_pos, 64] float32, interleaved (cos, sin) */
    float sm_scale;                  /* softmax scale of the QK scores */
    const DLTensor *wq_a_weight;     /* [1024, H] float8_e4m3fn */
    const DLTensor *wq_a_sf;         /* [1024, H / 32] uint8 SfAtom ue8m0 */
    const DLTensor *q_norm_weight;   /* [1024] bf16 */
    const DLTensor *wq_b_weight;     /* [32768, 1024] float8_e4m3fn */
    const DLTensor *wq_b_sf;         /* [32768, 32] uint8 SfAtom ue8m0 */
    const DLTensor *wkv_weight;      /* [512, H] float8_e4m3fn */
    const DLTensor *wkv_sf;          /* [512, H / 32] uint8 SfAtom ue8m0 */
    const DLTensor *kv_norm_weight;  /* [512] bf16 */
    const DLTensor *swa_loc;         /* [T] int32 kv_cache slot of each new row (< 0: no write) */
    const DLTensor *attn_sink;       /* [64] float32 or NULL */
    const DLTensor *workspace;       /* from mla_workspace, planned for this kind */
    float q_eps;                     /* default 1e-6 */
    float kv_eps;                    /* default 1e-6 */
    /* HCA layers only (all NULL / 0 on SWA layers; wkv_gate_weight and c128_attn_len together) */
    const DLTensor *wkv_gate_weight; /* [1024, H] bf16 */
    const DLTensor *kv_score_ring;   /* [num_requests * 128, 1024] float32, updated in place */
    const DLTensor *kv_gate_ring_row;/* [T] int32 */
    const DLTensor *c128_ape;        /* [128, 512] float32 */
    const DLTensor *c128_norm_weight;/* [512] bf16 */
    const DLTensor *c128_freqs_real; /* [max_pos, 64] float32 */
    const DLTensor *c128_out_loc;    /* [T] int32 */
    const DLTensor *c128_pool;       /* [num_pool_pages, c128_stride_kv_block] uint8 */
    long long c128_stride_kv_block;  /* bytes per pool page, a multiple of 576 */
    int c128_page_block;             /* rows per pool page, a power of two */
    const DLTensor *c128_page_table; /* [T, max_pages] int32 */
    const DLTensor *c128_attn_len;   /* [T] int32 */
    int draft_tokens;                /* tokens per request in verify; 0 if unknown */
    int reset_barriers;              /* default 1; 0 only if mla_output_proj follows */
} mla_attention_args;

/* Sets struct_size, zeroes the tensors and sets the defaults (q_eps, kv_eps, reset_barriers). */
MLA_API void mla_attention_args_init(mla_attention_args *args);

/* DSV4 MLA decode/verify layer up to the sparse attention, one persistent launch on stream (see
 * the seed and docs/DSV4.md). Call mla_attention_plan for the kind first, on the same stream,
 * with the same T. Checks every argument before launching. */
MLA_API mla_status mla_attention(mla_runtime *runtime, const mla_attention_args *args,
                                 CUstream stream);

/* ---- mla_output_proj ---------------------------------------------------------------------- */

/* The arguments of mla_output_proj, named as in the seed. */
typedef struct mla_output_proj_args {
    size_t struct_size;              /* sizeof(mla_output_proj_args), set by the init function */
    const DLTensor *q_or_x;          /* [T, 32768] bf16 contiguous, 1 <= T <= 640, read only */
    const DLTensor *positions;       /* [T] int32 of the attention launch */
    const DLTensor *freqs_real;      /* [max_pos, 64] float32 of the attention launch */
    const DLTensor *wo_a_weight;     /* [2H, 32768 / G] float8_e4m3fn */
    const DLTensor *wo_a_sf;         /* [2H, 32768 / G / 32] uint8 SfAtom ue8m0 */
    const DLTensor *wo_b_weight;     /* [H, 2H] float8_e4m3fn */
    const DLTensor *wo_b_sf;         /* [H, 2H / 32] uint8 SfAtom ue8m0 */
    const DLTensor *out;             /* [T, H] bf16 contiguous, written */
    const DLTensor *workspace;       /* the attention launch's */
    const DLTensor *attn_sink;       /* [64] float32 of the attention launch, or NULL */
    const DLTensor *c128_attn_len;   /* NULL on SWA layers; only NULL-ness is used */
} mla_output_proj_args;

/* Sets struct_size and zeroes the tensors. */
MLA_API void mla_output_proj_args_init(mla_output_proj_args *args);

/* out = wo_b(quant(wo_a(quant(rope^-1(combine(O)))))) as two PDL-chained kernels on stream;
 * zeroes the attention's barrier bank. H % 512 == 0, H <= 4096, K = 32768 / G % 512 == 0,
 * 2H / G % 256 == 0. */
MLA_API mla_status mla_output_proj(mla_runtime *runtime, const mla_output_proj_args *args,
                                   CUstream stream);

#ifdef __cplusplus
}
#endif

#endif /* MLAJIT_DSV4_H */
