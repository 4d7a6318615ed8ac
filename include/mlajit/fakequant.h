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
 * Also: mla_fakequant_qdq_rows, the fp8 / NVFP4 quantize-dequantize of rows (spec §2.1, §2.5: the
 * caller's dynamic NVFP4 of q with an fp32 carrier).
 *
 * Not implemented yet: mla_prefill_attention. */
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

#ifdef __cplusplus
}
#endif

#endif /* MLAJIT_FAKEQUANT_H */
