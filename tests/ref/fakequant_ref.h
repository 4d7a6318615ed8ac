/* Float64 reference of the fake-quant MLA family (spec/fakequant.md): the scalar quantizers
 * (§2.1), the carrier roundings, and the decode oracle that follows the kernel's schedule (§2.2
 * block axes, §2.3 online softmax with P quantized after the row sum, §2.4 fixed splits of
 * 32-token tiles). Written from the spec, not from the kernels. An amax of NAN is None. */
#ifndef MLAJIT_TESTS_REF_FAKEQUANT_REF_H
#define MLAJIT_TESTS_REF_FAKEQUANT_REF_H

enum { MLR_FQ_NONE = 0, MLR_FQ_FP8 = 1, MLR_FQ_NVFP4 = 2 };

/* ---- scalar quantizers ------------------------------------------------------------------- */

/* Round half even of a finite a (|a| <= 448) to E4M3. */
double mlr_fq_rne_e4m3(double a);
/* rne_e4m3(clamp(x / sc, -448, 448)) * sc with sc = amax / 448 (1 for NAN). */
double mlr_fq_fp8_qdq(double x, double amax);
/* Round half even of a >= 0 on {0, .5, 1, 1.5, 2, 3, 4, 6}, saturating at 6. */
double mlr_fq_e2m1_mag(double a);
/* NVFP4 quantize-dequantize of one block of n <= 16 values (missing lanes count as 0). */
void mlr_fq_nvfp4_block(const double *x, int n, double amax, double *out);
/* Quantize-dequantize of a row of n values along the row (nvfp4: blocks of 16; none: copy). */
void mlr_fq_qdq_row(int mode, const double *x, int n, double amax, double *out);

/* Round half even to bfloat16 / float16 (directly from double; float16 subnormals and
 * saturation to inf as IEEE). */
double mlr_fq_round_bf16(double x);
double mlr_fq_round_fp16(double x);

/* ---- decode oracle ----------------------------------------------------------------------- */

typedef struct mlr_fq_decode_cfg {
    int heads, rank, rope;      /* D = rank + rope */
    int splits;                 /* num_kv_splits */
    int carrier_fp16;           /* the cache dtype (the NVFP4-P carrier): 1 float16, 0 bfloat16 */
    double qk_scale;            /* softmax_scale * log2(e), as the kernel gets it */
    int k_mode, v_mode, p_mode; /* MLR_FQ_* */
    double k_amax, v_amax, p_amax;
} mlr_fq_decode_cfg;

#define MLR_FQ_TILE 32

/* One request of length s: q [heads][D] (as the kernel reads it), kv [s][D] raw latent rows;
 * out [heads][rank], lse [heads] natural log (-inf and out 0 when s == 0). 0 on success, -1 when
 * out of memory. */
int mlr_fq_decode_request(const mlr_fq_decode_cfg *cfg, const double *q, const double *kv, int s,
                          double *out, double *lse);

/* V of a request as the decode quantizes it: vq [s][rank] from kv [s][D] (v_mode along absolute
 * 16-token groups, tokens past s as 0). */
int mlr_fq_quantize_v(int v_mode, double v_amax, const double *kv, int s, int D, int rank,
                      double *vq);

#endif
