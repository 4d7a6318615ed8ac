/* mlajit FlashMLA-compatible decode: split schedule (metadata) and dense paged decode.
 *
 * Mirrors sgl_kernel.flash_mla (../seeds/003, semantics in spec/flashmla.md): get_mla_metadata ->
 * mla_get_metadata, flash_mla_with_kvcache -> mla_flash_with_kvcache, with a runtime handle first
 * and a CUstream last. The seed returns new tensors; here the caller allocates every output (the
 * *_shape helpers say how large) and passes DLPack tensors on the runtime's CUDA device. NULL
 * stands for Python's None. Nothing here synchronizes, allocates or reads device memory on the
 * host: metadata + decode can be captured in a CUDA graph once and replayed with new
 * cache_seqlens.
 *
 * Implemented: dense decode with bf16 / fp16 q and k_cache, dense fp8 (e4m3 q and k_cache with
 * descale_q / descale_k), sparse decode (indices, fp8 cache of 656-byte rows) and sparse prefill
 * (mla_flash_sparse_fwd). */
#ifndef MLAJIT_FLASHMLA_H
#define MLAJIT_FLASHMLA_H

#include "mlajit/mlajit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Head dimensions of the dense decode: q and k_cache rows of 576 (512 latent + 64 RoPE), V the
 * first 512 of each k_cache row. */
#define MLA_FLASHMLA_HEAD_DIM 576
#define MLA_FLASHMLA_HEAD_DIM_V 512

/* ---- mla_get_metadata --------------------------------------------------------------------- */

/* The arguments of mla_get_metadata, named as in the seed. Initialize with
 * mla_get_metadata_args_init, then set the tensors and sizes. */
typedef struct mla_get_metadata_args {
    size_t struct_size;                      /* sizeof(mla_get_metadata_args), set by init */
    const DLTensor *cache_seqlens;           /* [b] int32 contiguous, b >= 1; values < 0 count
                                                as 0 */
    int num_q_tokens_per_head_k;             /* s_q * h_q / h_kv */
    int num_heads_k;                         /* h_kv >= 1 */
    int num_heads_q;                         /* h_q, or 0 (None; sparse only) */
    int is_fp8_kvcache;                      /* 0 or 1 */
    int topk;                                /* 0 (None): dense; > 0: sparse (the sparse decode
                                                does not split: it reads no schedule) */
    /* Extensions (0 keeps FlashMLA's behaviour): */
    int num_sm_parts;                        /* mla_get_metadata_shape only: 0 derives it from
                                                the device as FlashMLA does */
    int split_tokens;                        /* 0: splits follow the batch (FlashMLA); > 0, a
                                                multiple of 64: batch-invariant mode, every
                                                request is split into chunks of split_tokens
                                                keys, so its result never depends on its batch
                                                mates */
    int max_splits;                          /* batch-invariant mode: split slots of the decode
                                                workspace (mla_flash_with_kvcache_shape); 0:
                                                b + num_sm_parts. A call needing more chunks
                                                falls back to the batch-dependent split (results
                                                stay correct, not batch-invariant) */
    const DLTensor *tile_scheduler_metadata; /* out: [num_sm_parts, 8] int32 contiguous, any
                                                num_sm_parts >= 1 (the decode grid follows it) */
    const DLTensor *num_splits;              /* out: [b + 1] int32 contiguous */
} mla_get_metadata_args;

/* Sets struct_size and zeroes the rest (the seed's defaults). */
MLA_API void mla_get_metadata_args_init(mla_get_metadata_args *args);

/* The shapes the outputs of mla_get_metadata must have: tile_scheduler_metadata
 * [num_sm_parts, 8] with FlashMLA's num_sm_parts = max(sm_count / h_kv /
 * ceil(num_q_tokens_per_head_k / 64), 1) (or args->num_sm_parts when set), num_splits [b + 1].
 * Reads cache_seqlens' shape only. MLA_ERR_NO_DEVICE when num_sm_parts is 0 and the runtime has
 * no device. */
MLA_API mla_status mla_get_metadata_shape(mla_runtime *runtime, const mla_get_metadata_args *args,
                                          int64_t tile_scheduler_metadata_shape[2],
                                          int64_t num_splits_shape[1]);

/* Computes the split schedule of a decode batch from cache_seqlens, on the device (one small
 * kernel on stream). The metadata depends on cache_seqlens and the number of parts only, not on
 * the heads: one schedule serves every layer of a step. */
MLA_API mla_status mla_get_metadata(mla_runtime *runtime, const mla_get_metadata_args *args,
                                    CUstream stream);

/* ---- mla_flash_with_kvcache --------------------------------------------------------------- */

/* The arguments of mla_flash_with_kvcache, named as in the seed. */
typedef struct mla_flash_with_kvcache_args {
    size_t struct_size;                      /* sizeof(mla_flash_with_kvcache_args), set by init */
    const DLTensor *q;                       /* [b, s_q, h_q, 576] bfloat16, float16 or
                                                float8_e4m3fn (or uint8 holding e4m3); unit last
                                                stride, other strides multiples of 16 bytes and
                                                >= 0, 16-byte aligned; h_q % h_kv == 0 */
    const DLTensor *k_cache;                 /* [num_blocks, page_size, h_kv, 576] of q's dtype,
                                                any page_size >= 1; same stride rules as q.
                                                V = k_cache[..., :512] */
    const DLTensor *block_table;             /* [b, max_blocks_per_seq] int32, unit last stride;
                                                entries past a request's pages are never read */
    const DLTensor *cache_seqlens;           /* [b] int32 contiguous; keys past a length are
                                                never read */
    int head_dim_v;                          /* 512 */
    const DLTensor *tile_scheduler_metadata; /* [num_sm_parts, 8] int32 from mla_get_metadata */
    const DLTensor *num_splits;              /* [b + 1] int32 from mla_get_metadata */
    float softmax_scale;                     /* NAN (the init value): 576^-0.5 */
    int causal;                              /* 1: query j sees keys t <= len - s_q + j
                                                (bottom-right); ignored when s_q == 1 */
    const DLTensor *descale_q;               /* fp8 q: [1] float32, required; else NULL */
    const DLTensor *descale_k;               /* fp8 q: [1] float32, required; else NULL */
    int is_fp8_kvcache;                      /* dense: with a bf16/fp16 q must be 0, with fp8 q
                                                0 or 1; sparse: 1 */
    const DLTensor *indices;                 /* NULL: dense. Sparse decode: [b, s_q, topk] int32,
                                                unit last stride, entries = block * page +
                                                offset (block_table already applied); -1 and any
                                                value outside [0, num_blocks * page) is invalid
                                                and never read. Then q is [b, s_q, h_q, 576]
                                                bfloat16 with h_q in {8, 16, 32, 64, 128},
                                                k_cache [num_blocks, page, 1, 656] float8_e4m3fn
                                                / int8 / uint8 (512 e4m3, 4 float32 scales, 64
                                                bfloat16 RoPE per token; stride[1] == 656,
                                                stride[0] a multiple of 16), out bfloat16;
                                                block_table, cache_seqlens, the schedule and the
                                                workspace may be NULL (never read); causal 0 */
    /* Outputs and scratch, allocated by the caller (mla_flash_with_kvcache_shape): */
    const DLTensor *out;                     /* [b, s_q, h_q, 512]: q's dtype (bfloat16 for fp8
                                                q); unit last stride, other strides multiples of
                                                16 bytes, 16-byte aligned */
    const DLTensor *softmax_lse;             /* [b, h_q, s_q] float32 contiguous: natural-log LSE
                                                of the scaled logits; +inf for a row without keys
                                                (its out is 0) */
    const DLTensor *workspace;               /* 1-D uint8, 256-byte aligned, at least
                                                workspace_bytes: split-KV partials */
    /* Sparse decode extensions (spec §1.9; NULL: off): */
    const DLTensor *attn_sink;               /* [h_q] float32: out *= 1 / (1 + exp(sink - lse))
                                                (lse unchanged; +inf gives 0, -inf no effect) */
    const DLTensor *topk_length;             /* [b] int32: request i uses its first
                                                clamp(topk_length[i], 0, topk) entries */
} mla_flash_with_kvcache_args;

/* Sets struct_size, zeroes the tensors, softmax_scale = NAN (None), head_dim_v = 512. */
MLA_API void mla_flash_with_kvcache_args_init(mla_flash_with_kvcache_args *args);

/* What mla_flash_with_kvcache needs the caller to allocate. */
typedef struct mla_flash_with_kvcache_shape {
    int64_t out[4];           /* [b, s_q, h_q, head_dim_v] */
    int64_t softmax_lse[3];   /* [b, h_q, s_q] float32 */
    size_t workspace_bytes;   /* uint8 workspace for max_splits split slots */
    int max_splits;           /* the slots it holds */
} mla_flash_with_kvcache_sizes;

/* Output shapes and workspace size from args->q, args->head_dim_v and the number of parts
 * (args->tile_scheduler_metadata's shape[0]). max_splits 0: b + num_sm_parts, enough for the
 * batch-dependent schedule; batch-invariant mode needs the max_splits given to mla_get_metadata.
 * Reads shapes only. */
MLA_API mla_status mla_flash_with_kvcache_shape(const mla_flash_with_kvcache_args *args,
                                                int max_splits,
                                                mla_flash_with_kvcache_sizes *sizes);

/* Dense paged MLA decode with split-KV (spec/flashmla.md §1.2-1.7): attention of every query
 * token over its request's cache, then a combine of the split requests, on stream. Call
 * mla_get_metadata on the same cache_seqlens (and the same stream) first. Checks every argument
 * before launching; the workspace must hold at least b + num_sm_parts split slots. */
MLA_API mla_status mla_flash_with_kvcache(mla_runtime *runtime,
                                          const mla_flash_with_kvcache_args *args,
                                          CUstream stream);

/* ---- mla_flash_sparse_fwd ----------------------------------------------------------------- */

/* The arguments of mla_flash_sparse_fwd (the seed's flash_mla_sparse_fwd). */
typedef struct mla_flash_sparse_fwd_args {
    size_t struct_size;            /* sizeof(mla_flash_sparse_fwd_args), set by init */
    const DLTensor *q;             /* [s_q, h_q, d_qk] bfloat16, d_qk 576 or 512, h_q in {16, 32,
                                      64, 128}; unit last stride, other strides multiples of 8
                                      elements, 16-byte aligned */
    const DLTensor *kv;            /* [s_kv, 1, d_qk] bfloat16, same stride rules; V = kv[..., :512] */
    const DLTensor *indices;       /* [s_q, 1, topk] int32, unit last stride, topk >= 1; an entry
                                      outside [0, s_kv) is invalid and never read */
    float sm_scale;                /* required (init: NAN) */
    int d_v;                       /* 512 */
    /* Extensions (spec §1.9; NULL / 0: the seed's behaviour): */
    const DLTensor *attn_sink;     /* [h_q] float32, natural-log units: out *= 1 / (1 +
                                      exp(sink - lse_ln)); max_logits and lse unchanged */
    const DLTensor *topk_length;   /* [s_q] int32: token i uses its first clamp(topk_length[i], 0,
                                      topk) entries */
    int natural_log;               /* 0: max_logits and lse in base 2 (the seed; a row without a
                                      valid entry: -inf, -inf); 1: natural log (FlashMLA's newer
                                      convention; empty row: -inf, +inf) */
    /* Outputs, allocated by the caller (mla_flash_sparse_fwd_shape): */
    const DLTensor *out;           /* [s_q, h_q, 512] bfloat16, unit last stride, other strides
                                      multiples of 8 elements, 16-byte aligned; 0 for an empty row */
    const DLTensor *max_logits;    /* [s_q, h_q] float32 contiguous: max of the scaled logits */
    const DLTensor *lse;           /* [s_q, h_q] float32 contiguous: log-sum-exp of the logits */
} mla_flash_sparse_fwd_args;

/* Sets struct_size, zeroes the tensors, sm_scale = NAN (must be set), d_v = 512. */
MLA_API void mla_flash_sparse_fwd_args_init(mla_flash_sparse_fwd_args *args);

/* What mla_flash_sparse_fwd needs the caller to allocate. */
typedef struct mla_flash_sparse_fwd_sizes {
    int64_t out[3];         /* [s_q, h_q, d_v] bfloat16 */
    int64_t max_logits[2];  /* [s_q, h_q] float32 */
    int64_t lse[2];         /* [s_q, h_q] float32 */
} mla_flash_sparse_fwd_sizes;

/* Output shapes from args->q and args->d_v. Reads shapes only. */
MLA_API mla_status mla_flash_sparse_fwd_shape(const mla_flash_sparse_fwd_args *args,
                                              mla_flash_sparse_fwd_sizes *sizes);

/* Sparse MLA prefill (spec/flashmla.md §1.3, 1.6, 1.9): every query token attends the kv rows its
 * indices name, on stream. Checks every argument before launching; allocates nothing. */
MLA_API mla_status mla_flash_sparse_fwd(mla_runtime *runtime,
                                        const mla_flash_sparse_fwd_args *args, CUstream stream);

#ifdef __cplusplus
}
#endif

#endif /* MLAJIT_FLASHMLA_H */
