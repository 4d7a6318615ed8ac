/* Fake-quant family, internal: kind builders (referenced by the table in runtime/spec.c), launch
 * constants and the C mirrors of the kernels' parameter blocks (kernel_src/fakequant/decode.cu:
 * same fields, same order, same sizes). */
#ifndef MLAJIT_FAKEQUANT_KINDS_H
#define MLAJIT_FAKEQUANT_KINDS_H

#include <stddef.h>

#include "mlajit/mlajit.h"

struct mla__spec;
struct mla__launch_info;

/* "fakequant_qdq" (in_dtype, mode), "fakequant_decode" (cache_dtype, k_qdq, v_qdq, p_qdq),
 * "fakequant_decode_combine" (out_dtype). runtime/fakequant.c. */
mla_status mla__fakequant_qdq_build(const struct mla__spec *spec, char *name_expr, size_t size,
                                    struct mla__launch_info *launch);
mla_status mla__fakequant_decode_build(const struct mla__spec *spec, char *name_expr, size_t size,
                                       struct mla__launch_info *launch);
mla_status mla__fakequant_combine_build(const struct mla__spec *spec, char *name_expr, size_t size,
                                        struct mla__launch_info *launch);
/* "fakequant_decode_mma" (the same parameters as "fakequant_decode"): the tensor-core decode
 * (kernel_src/fakequant/decode_mma.cu). runtime/fakequant.c. */
mla_status mla__fakequant_decode_mma_build(const struct mla__spec *spec, char *name_expr,
                                           size_t size, struct mla__launch_info *launch);
/* "fakequant_decode_sm90" (the same parameters): the sm_90a decode on wgmma and TMA
 * (kernel_src/fakequant/decode_sm90.cu). runtime/fakequant.c. */
mla_status mla__fakequant_decode_sm90_build(const struct mla__spec *spec, char *name_expr,
                                            size_t size, struct mla__launch_info *launch);
/* "fakequant_decode_dense" (the same parameters; k_qdq or v_qdq set, p_qdq 0): K and / or V
 * fake-quantized on the FlashMLA-compatible sm_90a decode (kernel_src/flashmla/decode_sm90.cu
 * decode_sm90_fq_kernel), sm_90a only. runtime/fakequant.c. */
mla_status mla__fakequant_decode_dense_build(const struct mla__spec *spec, char *name_expr,
                                             size_t size, struct mla__launch_info *launch);
/* "fakequant_prefill" (dtype, q_quant, k_quant, p_quant, v_quant, sparsity_m).
 * runtime/fakequant_prefill.c. */
mla_status mla__fakequant_prefill_build(const struct mla__spec *spec, char *name_expr, size_t size,
                                        struct mla__launch_info *launch);
/* "fakequant_prefill_mma" (the same six, then dqk in {64, 128, 192}, dv in {32, 64, 128}, warps
 * and rows_per_warp in {4/16, 8/16, 4/32}): the tensor-core prefill
 * (kernel_src/fakequant/prefill_mma.cu). runtime/fakequant_prefill.c. */
mla_status mla__fakequant_prefill_mma_build(const struct mla__spec *spec, char *name_expr,
                                            size_t size, struct mla__launch_info *launch);

/* "fakequant_prefill_sm90" (the six of "fakequant_prefill", then dqk in {64, 128, 192}, dv in
 * {64, 128}): the wgmma prefill (kernel_src/fakequant/prefill_sm90.cu), sm_90a only.
 * runtime/fakequant_prefill.c. */
mla_status mla__fakequant_prefill_sm90_build(const struct mla__spec *spec, char *name_expr,
                                             size_t size, struct mla__launch_info *launch);

/* Spec values. */
enum { MLA__FQ_BF16 = 0, MLA__FQ_FP16 = 1, MLA__FQ_FP32 = 2 };   /* cache / out dtypes */
enum { MLA__FQ_IN_FP32 = 0, MLA__FQ_IN_BF16 = 1, MLA__FQ_IN_FP16 = 2 }; /* qdq in_dtype */

#define MLA__FQ_QDQ_THREADS 256
#define MLA__FQ_TILE 32                 /* decode tile (spec §5 choice 2) */
#define MLA__FQ_HEADS_PER_CTA 8
#define MLA__FQ_THREADS 256
#define MLA__FQ_DECODE_SMEM ((8 * 576 + 32 * 577 + 32 * 512) * 4)   /* decode.cu kSmemBytes */
#define MLA__FQ_WS_ALIGN 256

/* Workspace of the decode: acc [batch, heads, splits, rank] float32, then (m, l) pairs. */
static inline size_t mla__fq_ws_ml_offset(long long rows, int rank) {
    return (size_t)(rows * rank * 4);
}
static inline size_t mla__fq_ws_bytes(long long rows, int rank) {
    return mla__fq_ws_ml_offset(rows, rank) + (size_t)(rows * 2 * 4);
}

typedef struct mla__fq_decode_params {
    CUdeviceptr q;
    long long q_stride_b, q_stride_h;
    CUdeviceptr cache;
    long long c_stride_block, c_stride_tok;
    CUdeviceptr block_table;
    long long bt_stride;
    CUdeviceptr seq_len, ws_acc, ws_ml;
    int batch, heads, rank, rope, page_size, max_blocks, splits, q_fp32;
    float qk_scale, k_scale, v_scale, p_scale;
} mla__fq_decode_params;

/* Tensor-core decode (decode_mma.cu): 64 heads per CTA, rank 512 and rope 64 only; one workspace
 * slot per chunk of at least MLA__FQ_MMA_CHUNK_TILES tiles (kMinChunkTiles). */
#define MLA__FQ_MMA_HEADS 64
#define MLA__FQ_MMA_CHUNK_TILES 64
#define MLA__FQ_DECODE_MMA_SMEM 226304   /* decode_mma.cu kSmemBytes */
/* With K or V quantized the tensor-core decode runs in clusters of 2 CTAs along x (the two head
 * blocks of 128 heads share the tile quantization), else 1. */
static inline int mla__fq_mma_cluster(long long k_qdq, long long v_qdq) {
    return k_qdq || v_qdq ? 2 : 1;
}

/* sm_90a decode (decode_sm90.cu): the same parameter block as decode_mma.cu's and the cache's TMA
 * descriptor; 64 heads per CTA, page_size % 8 == 0; without P quantization one slot per chunk of
 * G "virtual splits" of MLA__FQ_SM90_VIRTUAL_TILES tiles, G = ceil(ceil(tiles / 64) / splits). */
#define MLA__FQ_DECODE_SM90_SMEM 231984   /* decode_sm90.cu kSmemBytes */
/* The modes (K, V, P; q_fp32: q is fp32) the sm_90a decode runs by default where it applies (else
 * decode_mma.cu, unless $MLAJIT_FAKEQUANT_DECODE=sm90): those where it measured faster on the
 * H200 (docs/perf-notes.md, "Fake-quant decode on wgmma" and "Tenth session"). With P quantized
 * and a 16-bit q its tile alternation takes K and V too (all fp8 at L 4096: 864 us against
 * decode_mma.cu's 1984), except K and V both NVFP4 (2374 against 2132); with an fp32 q, the
 * feature split. */
static inline int mla__fq_sm90_default(int k_qdq, int v_qdq, int p_qdq, int q_fp32) {
    if (p_qdq && !q_fp32) return !(k_qdq == 2 && v_qdq == 2);
    return (k_qdq != 2 && v_qdq != 2 && p_qdq != 2 && (k_qdq == 0 || v_qdq == 0)) ||
           (k_qdq == 0 && v_qdq == 0);   /* P alone, nvfp4 included (tile alternation) */
}
/* The dense path (no quantization; runtime/fakequant_decode.c use_dense): the FlashMLA-compatible
 * decode (mla_get_metadata in its batch-invariant mode with chunks of MLA__FQ_DENSE_CHUNK keys,
 * mla_flash_with_kvcache: flashmla/decode_sm90.cu and its combine as "fakequant_dense_combine",
 * which writes the spec's -inf lse of requests without keys). Where it
 * applies it is the default when MLA__FQ_DENSE_DEFAULT is 1, else only with
 * $MLAJIT_FAKEQUANT_DECODE=dense. */
#define MLA__FQ_DENSE_CHUNK 16384
#define MLA__FQ_DENSE_DEFAULT 1
#define MLA__FQ_DENSE_MAX_PARTS 512
/* K and / or V quantized, P not (fakequant_decode_dense): the same dense path on the quantizing
 * specialization of flashmla/decode_sm90.cu (page sizes multiples of 8: its TMA loads); the
 * default where it applies for the modes (k_qdq, v_qdq) of mla__fq_dense_kv_default, else only
 * with $MLAJIT_FAKEQUANT_DECODE=dense. */
static inline int mla__fq_dense_kv_default(int k_qdq, int v_qdq) {
    /* every K/V mode: faster than fakequant_decode_sm90 / decode_mma.cu in each (GPU request
     * fqkv/2, docs/perf-notes.md) */
    return k_qdq || v_qdq;
}
#define MLA__FQ_DENSE_KV_SMEM 231504   /* decode_sm90.cu kSmemBytesFq */
/* The mirror of decode_sm90.cu sm90::FqScales (the kernel's third parameter). */
typedef struct mla__fq_dense_scales {
    float k_scale, v_scale;
    int chunk_units;   /* > 0: each CTA cuts its own schedule (no metadata kernel) */
    int codes_quick;      /* bit 0 K, bit 1 V: mla__fq_codes_quick of the operand */
} mla__fq_dense_scales;
_Static_assert(sizeof(mla__fq_dense_scales) == 16, "mirror of FqScales");
static inline int mla__fq_dense_kv_modes(int k_qdq, int v_qdq, int p_qdq, int q_fp32,
                                         int out_same) {
    return (k_qdq || v_qdq) && p_qdq == 0 && !q_fp32 && out_same;
}
/* The modes and dtypes the dense path takes: no quantization, q of the cache's dtype (not the
 * fp32 carrier), out in the cache's dtype (out_same). */
static inline int mla__fq_dense_modes(int k_qdq, int v_qdq, int p_qdq, int q_fp32, int out_same) {
    return k_qdq == 0 && v_qdq == 0 && p_qdq == 0 && !q_fp32 && out_same;
}
/* Bytes of the decode workspace (mla_attention_decode_shape): the fixed splits' partials of the
 * fake-quant kernels and, for rank 512 / rope 64, room for the dense path (batch * (splits + 1)
 * FlashMLA split slots and its schedule). runtime/fakequant_decode.c. */
size_t mla__fq_decode_ws_bytes(long long batch, long long heads, int splits, int rank, int rope);
#define MLA__FQ_SM90_VIRTUAL_TILES 64     /* decode_sm90.cu kVirtualTiles */
#define MLA__FQ_SM90_P_CHUNK_TILES 128    /* decode_sm90.cu kPChunkTiles: P quantized, chunks of >= */
#define MLA__FQ_SM90_MAX_BOX_ROWS 32      /* decode_sm90.cu load_tile: rows of a TMA box */

typedef struct mla__fq_decode_mma_params {
    CUdeviceptr q;
    long long q_stride_b, q_stride_h;
    CUdeviceptr cache;
    long long c_stride_block, c_stride_tok;
    CUdeviceptr block_table;
    long long bt_stride;
    CUdeviceptr seq_len, ws_acc, ws_ml;
    int batch, heads, page_size, max_blocks, splits, slots, q_fp32;
    float qk_eff, pv_eff, k_scale, v_scale, p_scale;
    int codes_quick;   /* bit 0 K, bit 1 V: mla__fq_codes_quick of the operand (decode_sm90.cu) */
} mla__fq_decode_mma_params;

typedef struct mla__fq_combine_params {
    CUdeviceptr ws_acc, ws_ml, out;
    long long o_stride_b, o_stride_h;
    CUdeviceptr lse;
    int batch, heads, rank, splits;
} mla__fq_combine_params;

_Static_assert(sizeof(mla__fq_decode_params) == 136, "mirror of DecodeParams");
_Static_assert(sizeof(mla__fq_combine_params) == 64, "mirror of CombineParams");
_Static_assert(sizeof(mla__fq_decode_mma_params) == 144, "mirror of MmaDecodeParams");

/* Prefill (kernel_src/fakequant/prefill.cu): 8 warps, one query row each; smem kPfSmemBytes. */
#define MLA__FQ_PREFILL_ROWS 8
#define MLA__FQ_PREFILL_SMEM ((8 * 576 + 16 * 577 + 16 * 512 + 8 * 256) * 4)

/* The fields every prefill kernel's parameter block starts with (kernel_src/fakequant/
 * prefill_common.cuh PrefillCommon): buffers, element strides, batch shape, masks, N:M and the
 * four per-tensor scales. */
typedef struct mla__fq_prefill_common {
    CUdeviceptr q;
    long long q_stride_t, q_stride_h;
    CUdeviceptr k;
    long long k_stride_t, k_stride_h;
    CUdeviceptr v;
    long long v_stride_t, v_stride_h;
    CUdeviceptr cu_q, cu_k, out;
    long long o_stride_t, o_stride_h;
    CUdeviceptr lse;
    long long total_q;
    int batch, heads, kv_heads, block_n, causal, sparsity_n, sink, recent;
    float q_scale, k_scale, p_scale, v_scale;
} mla__fq_prefill_common;

_Static_assert(sizeof(mla__fq_prefill_common) == 176, "mirror of PrefillCommon");

typedef struct mla__fq_prefill_params {
    mla__fq_prefill_common c;
    int dqk, dv;
    float qk_scale;
} mla__fq_prefill_params;

_Static_assert(sizeof(mla__fq_prefill_params) == 192, "mirror of PrefillParams");

/* Tensor-core prefill (kernel_src/fakequant/prefill_mma.cu), 64-key tiles, smem of 16-bit
 * elements: w warps of 16 rows (prefill_mma_kernel; w 4: two CTAs per SM) with Q [16 w][dqk + 8],
 * K [2][64][dqk + 8], V [2][64][dv + 8]; or 4 warps of 32 rows (prefill_mma2_kernel, two CTAs
 * per SM) with Q [128][dqk + 8], one K [64][dqk + 8] and one V [64][dv + 8]. */
#define MLA__FQ_PREFILL_MMA_WARPS 8     /* the default CTA */
#define MLA__FQ_PREFILL_MMA_ROWS 16
#define MLA__FQ_PREFILL_MMA_SMEM(dqk, dv, w, rows) \
    ((rows) == 32 ? (128 * ((dqk) + 8) + 64 * ((dqk) + 8) + 64 * ((dv) + 8)) * 2 \
                  : (16 * (w) * ((dqk) + 8) + 2 * 64 * ((dqk) + 8) + 2 * 64 * ((dv) + 8)) * 2)

typedef struct mla__fq_prefill_mma_params {
    mla__fq_prefill_common c;
    float qk_eff, pv_eff;
} mla__fq_prefill_mma_params;

_Static_assert(sizeof(mla__fq_prefill_mma_params) == 184, "mirror of PrefillMmaParams");

/* wgmma prefill (prefill_sm90.cu sm90p::Layout): 384 threads (producer/quantizer warpgroup,
 * two consumer warpgroups of 64 rows), 128 rows a CTA, 64-key tiles; shared memory: Q of both
 * consumers, then a ring of min(4, what fits) stages of K and V tiles, slabs of 64 rows x 128
 * bytes, 8 bytes of mbarriers x 5 per stage, 1024 bytes of alignment slack. */
#define MLA__FQ_PREFILL_SM90_THREADS 384
#define MLA__FQ_PREFILL_SM90_ROWS 128
#define MLA__FQ_SM90_SLAB 8192
#define MLA__FQ_SM90_SMEM_MAX 232448
static inline int mla__fq_prefill_sm90_stages(int dqk, int dv) {
    int q = dqk / 64 * MLA__FQ_SM90_SLAB, stage = (dqk / 64 + dv / 64) * MLA__FQ_SM90_SLAB;
    int n = (MLA__FQ_SM90_SMEM_MAX - 1024 - 256 - 2 * q) / stage;
    return n > 4 ? 4 : n;
}
static inline int mla__fq_prefill_sm90_smem(int dqk, int dv) {
    int st = mla__fq_prefill_sm90_stages(dqk, dv);
    return 2 * (dqk / 64) * MLA__FQ_SM90_SLAB + st * (dqk / 64 + dv / 64) * MLA__FQ_SM90_SLAB +
           5 * st * 8 + 1024;
}

/* The fp32 scale of a mode's per-tensor amax (NAN: None): fp8 amax / 448, nvfp4 amax / 2688
 * (the global scale), 1 for None or mode none. */
float mla__fq_scale(int mode, float amax);
/* 1 for an unquantized operand or a per-tensor scale of at least 2^-100: the tensor-core
 * kernels' quantizers without a fallback division (the sm_90a decode's and prefill's) may take
 * its reciprocals (scale, 6 scale and every NVFP4 block scale >= 2^-9 scale stay normal). */
int mla__fq_scale_reciprocal_ok(int mode, float amax);
/* 1 when, for the fp8 scale sc, every finite x of the 16-bit cache dtype (f16: float16, else
 * bfloat16) gets the same E4M3 code (cvt.rn.satfinite) from fl(x * fl(1 / sc)) as from the
 * correctly rounded quotient fl(x / sc), so that the K / V quantizers may skip the quotient's
 * correction; checked at the codes' rounding boundaries (microseconds), exact for every x
 * (tests/test_fakequant_quant.c compares it with the exhaustive check). */
int mla__fq_fp8_quick_ok(float sc, int f16);
/* The same for the NVFP4 element codes of global scale gs: for every block scale the kernels can
 * form (sb = fl32(e4 gs), e4 each nonzero E4M3 code), fl(|x| fl(1 / sb)) and fl(|x| / sb) give the
 * same E2M1 magnitude for every finite 16-bit x. */
int mla__fq_nvfp4_quick_ok(float gs, int f16);
/* mla__fq_fp8_quick_ok or mla__fq_nvfp4_quick_ok by mode (0 for none), cached in rt (the
 * checks take 40 / 120 us; mla_runtime::fq_quick): the codes_quick bit of an operand of that mode
 * and per-tensor scale. */
int mla__fq_codes_quick(struct mla_runtime *rt, int mode, float scale, int f16);
/* Checks that a kind's spec has exactly the parameters names[0..n), in order, and each is in
 * [0, max[i]] (the builders of runtime/fakequant.c and fakequant_prefill.c). */
mla_status mla__fq_check_params(const struct mla__spec *spec, const char *const *names,
                                const long long *max, int n);
/* Checks a mode ("<name> must be one of ...") and, when the mode is set, its amax ("finite
 * positive"). */
mla_status mla__fq_check_mode(int mode, float amax, const char *name, const char *amax_name);

#endif /* MLAJIT_FAKEQUANT_KINDS_H */
