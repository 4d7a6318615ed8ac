/* mlajit fake-quant MLA: decode over a paged latent cache with K/V/P fake quantization on read.
 *
 * Mirrors Model-Optimizer's MLA attention-quantization API (../seeds/001, semantics in
 * spec/fakequant.md): mla_attention_decode(q, latent_cache, block_table, b_seq_len, *, ...), with
 * a runtime handle first and a CUstream last. The seed returns new tensors; here the caller
 * allocates every output (mla_attention_decode_shape says how large) and passes DLPack tensors on
 * the runtime's CUDA device. NAN stands for an amax of None (scale 1.0). Nothing here
 * synchronizes, allocates or reads device memory on the host: a call can be captured in a CUDA
 * graph.
 *
 * Also: mla_prefill_attention, varlen prefill over packed q/k/v with Q/K/P/V fake quantization
 * and N:M score sparsity, and mla_fakequant_qdq_rows, the fp8 / NVFP4 quantize-dequantize of rows
 * (spec §2.1, §2.5: the caller's dynamic NVFP4 of q with an fp32 carrier). docs/FAKEQUANT.md
 * describes the family. */
#ifndef MLAJIT_FAKEQUANT_H
#define MLAJIT_FAKEQUANT_H

#include "mlajit/mlajit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A fake quant-dequant mode (the seed's None, "fp8", "nvfp4"). */
typedef enum mla_qdq_mode {
    MLA_QDQ_NONE = 0,   /* no quantization */
    MLA_QDQ_FP8 = 1,    /* per-tensor E4M3, scale amax / 448, saturating */
    MLA_QDQ_NVFP4 = 2,  /* E2M1 in 1x16 blocks with an E4M3 block scale times amax / 2688 */
} mla_qdq_mode;

/* Largest latent row of the decode (kv_lora_rank + qk_rope_head_dim) and latent width. */
#define MLA_FAKEQUANT_MAX_ROW 576
#define MLA_FAKEQUANT_MAX_RANK 512
/* Bounds of num_kv_splits. */
#define MLA_FAKEQUANT_MAX_SPLITS 32

/* ---- mla_fakequant_qdq_rows ---------------------------------------------------------------- */

/* Quantize-dequantize of each row of x along its last axis: fp8 elementwise, NVFP4 in blocks of
 * 16 consecutive features (the row length must be a multiple of 16). */
typedef struct mla_fakequant_qdq_args {
    size_t struct_size;  /* sizeof(mla_fakequant_qdq_args), set by init */
    const DLTensor *x;   /* [rows, d] float32, bfloat16 or float16, contiguous */
    int mode;            /* MLA_QDQ_FP8 or MLA_QDQ_NVFP4 */
    float amax;          /* NAN (the init value): None, scale 1.0; else finite and > 0 */
    const DLTensor *out; /* [rows, d] float32 contiguous (the fp32 carrier) */
} mla_fakequant_qdq_args;

/* Sets struct_size, zeroes the tensors, mode = MLA_QDQ_NVFP4, amax = NAN. */
MLA_API void mla_fakequant_qdq_args_init(mla_fakequant_qdq_args *args);

/* out = QDQ(x) on stream (spec §2.1, bit-exact round-to-nearest-even quantizers). */
MLA_API mla_status mla_fakequant_qdq_rows(mla_runtime *runtime, const mla_fakequant_qdq_args *args,
                                          CUstream stream);

/* ---- mla_attention_decode ------------------------------------------------------------------ */

/* The arguments of mla_attention_decode, named as in the seed. */
typedef struct mla_attention_decode_args {
    size_t struct_size;           /* sizeof(mla_attention_decode_args), set by init */
    const DLTensor *q;            /* [batch, num_heads, kv_lora_rank + qk_rope_head_dim]
                                     bfloat16/float16 (the cache's dtype) or float32 (the
                                     dynamic-NVFP4 carrier); unit last stride */
    const DLTensor *latent_cache; /* [num_blocks, page_size, kv_lora_rank + qk_rope_head_dim]
                                     bfloat16 or float16, raw values; unit last stride */
    const DLTensor *block_table;  /* [batch, max_blocks_per_seq] int32, unit last stride */
    const DLTensor *b_seq_len;    /* [batch] int32 contiguous; < 0 counts as 0, and lengths are
                                     capped at max_blocks_per_seq * page_size */
    float softmax_scale;          /* required (NAN, the init value, is refused) */
    int kv_lora_rank;             /* 512: V / output width, 1..512 */
    int qk_rope_head_dim;         /* 64: RoPE width; rank + rope <= 576 */
    int page_size;                /* 0 (None): latent_cache.shape[1]; else must equal it */
    int num_kv_splits;            /* 32: fixed split count, 1..32 (spec §2.4) */
    int k_qdq;                    /* mla_qdq_mode of K (features of each latent row) */
    float k_qdq_amax;             /* NAN: None */
    int v_qdq;                    /* mla_qdq_mode of V (absolute 16-token groups) */
    float v_qdq_amax;             /* NAN: None */
    int p_qdq;                    /* mla_qdq_mode of softmax P (16 keys) */
    float p_qdq_amax;             /* 1.0; ignored when p_qdq is MLA_QDQ_NONE */
    int return_lse;               /* 1: write lse */
    DLDataType out_dtype;         /* {0, 0, 0} (None): latent_cache's dtype; else bfloat16,
                                     float16 or float32, and out must have it */
    /* Outputs and scratch, allocated by the caller (mla_attention_decode_shape): */
    const DLTensor *out;          /* [batch, num_heads, kv_lora_rank] of out_dtype, unit last
                                     stride */
    const DLTensor *lse;          /* [batch, num_heads] float32 contiguous, natural log, -inf for
                                     an empty request; NULL allowed when return_lse is 0 */
    const DLTensor *workspace;    /* 1-D uint8, 256-byte aligned, >= workspace_bytes: the
                                     split partials */
} mla_attention_decode_args;

/* Sets struct_size and the seed's defaults: kv_lora_rank 512, qk_rope_head_dim 64,
 * num_kv_splits 32, every mode none, amaxes NAN except p_qdq_amax 1.0, return_lse 1,
 * softmax_scale NAN (must be set). */
MLA_API void mla_attention_decode_args_init(mla_attention_decode_args *args);

/* What mla_attention_decode needs the caller to allocate. */
typedef struct mla_attention_decode_sizes {
    int64_t out[3];         /* [batch, num_heads, kv_lora_rank] */
    int64_t lse[2];         /* [batch, num_heads] float32 */
    size_t workspace_bytes; /* uint8 workspace */
} mla_attention_decode_sizes;

/* Output shapes and workspace size from the shapes of q and the scalar arguments. */
MLA_API mla_status mla_attention_decode_shape(const mla_attention_decode_args *args,
                                              mla_attention_decode_sizes *sizes);

/* Decode one absorbed query token per request over its paged latent cache, with K, V and P
 * fake-quantized on read (spec §2.1-2.4): num_kv_splits fixed splits of 32-token tiles, merged
 * through their LSE. The result of a request depends on its own q, cache rows, length and the
 * arguments only, never on the batch, the page size or the device. Checks every argument first. */
MLA_API mla_status mla_attention_decode(mla_runtime *runtime,
                                        const mla_attention_decode_args *args, CUstream stream);

/* ---- mla_prefill_attention ----------------------------------------------------------------- */

/* Bounds of mla_prefill_attention (MLA_ERR_NOT_SUPPORTED beyond them). */
#define MLA_FAKEQUANT_PREFILL_MAX_QK 576     /* qk_head_dim */
#define MLA_FAKEQUANT_PREFILL_MAX_V 512      /* v_head_dim */
#define MLA_FAKEQUANT_PREFILL_MAX_BLOCK_N 256

/* The arguments of mla_prefill_attention, named as in the seed. q, k, v share one dtype. */
typedef struct mla_prefill_attention_args {
    size_t struct_size;           /* sizeof(mla_prefill_attention_args), set by init */
    const DLTensor *q;            /* [total_q, num_heads, qk_head_dim] bfloat16 or float16, unit
                                     last stride */
    const DLTensor *k;            /* [total_k, num_kv_heads, qk_head_dim] (NOPE ++ RoPE), q's
                                     dtype, unit last stride */
    const DLTensor *v;            /* [total_k, num_kv_heads, v_head_dim], q's dtype, unit last
                                     stride */
    const DLTensor *cu_seqlens_q; /* [batch + 1] int32 contiguous, non-decreasing, from 0 to at
                                     most total_q (read on the device only) */
    const DLTensor *cu_seqlens_k; /* [batch + 1] int32 contiguous, the same for total_k */
    int max_seqlen_q;             /* >= 0; sizes the grid only: longer sequences are still done */
    float softmax_scale;          /* NAN (the init value): None, qk_head_dim ** -0.5 */
    int causal;                   /* 1: Q is the suffix of the KV span; 0: every key visible */
    int return_lse;               /* 0; 1: write lse */
    int q_quant, k_quant, p_quant, v_quant; /* mla_qdq_mode of each operand (none) */
    float q_amax, k_amax;         /* NAN: None (scale 1.0) */
    float p_amax;                 /* 1.0; ignored when p_quant is MLA_QDQ_NONE */
    float v_amax;                 /* NAN: None */
    int sparsity_n;               /* 0: off; else N of N:M, 1 <= N < M */
    int sparsity_m;               /* 4: group size, 4 or 8 */
    int dense_sink_tokens;        /* 0: leading keys kept dense, >= 0 */
    int dense_recent_tokens;      /* 64: keys kept dense before and at the diagonal, >= 0 */
    int block_m;                  /* 64: Q tile, a multiple of 16 (does not change numerics) */
    int block_n;                  /* 64: KV tile, a multiple of 16 up to 256; the running max and
                                     P quantization follow it */
    /* Outputs, allocated by the caller (mla_prefill_attention_shape): */
    const DLTensor *out;          /* [total_q, num_heads, v_head_dim] of q's dtype, unit last
                                     stride */
    const DLTensor *lse;          /* [num_heads, total_q] float32 contiguous, natural log, -inf
                                     for a row with no visible key; NULL when return_lse is 0 */
} mla_prefill_attention_args;

/* Sets struct_size and the seed's defaults: causal 1, return_lse 0, every mode none, q/k/v amax
 * NAN, p_amax 1.0, sparsity 0:4, sink 0, recent 64, block_m = block_n = 64, softmax_scale NAN. */
MLA_API void mla_prefill_attention_args_init(mla_prefill_attention_args *args);

/* What mla_prefill_attention needs the caller to allocate. */
typedef struct mla_prefill_attention_sizes {
    int64_t out[3]; /* [total_q, num_heads, v_head_dim] of q's dtype */
    int64_t lse[2]; /* [num_heads, total_q] float32 */
} mla_prefill_attention_sizes;

/* Output shapes from the shapes of q and v and the scalar arguments. */
MLA_API mla_status mla_prefill_attention_shape(const mla_prefill_attention_args *args,
                                               mla_prefill_attention_sizes *sizes);

/* Varlen MLA prefill attention with Q, K, P and V fake-quantized in the kernel and optional N:M
 * score sparsity (spec §2-4): per sequence b, queries cu_seqlens_q[b]..[b+1] attend to keys
 * cu_seqlens_k[b]..[b+1]; head h reads kv head h / (num_heads / num_kv_heads). The running max
 * and P quantization follow block_n tiles of keys from the sequence's key 0. A row with no
 * visible key (k_len 0, or causal with q_len > k_len) gets out 0 and lse -inf; empty sequences
 * are skipped. Checks every argument first. */
MLA_API mla_status mla_prefill_attention(mla_runtime *runtime,
                                         const mla_prefill_attention_args *args, CUstream stream);

#ifdef __cplusplus
}
#endif

#endif /* MLAJIT_FAKEQUANT_H */
