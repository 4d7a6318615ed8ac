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

/* ---- prefill oracle ---------------------------------------------------------------------- */

typedef struct mlr_fq_prefill_cfg {
    int heads, kv_heads;        /* head h reads kv head h / (heads / kv_heads) */
    int dqk, dv;
    int causal;                 /* Q is the suffix of the KV span */
    int block_n;                /* the KV tile of the running max and the P quantization */
    int carrier_fp16;           /* the dtype of v (the NVFP4-P carrier): 1 float16, 0 bfloat16 */
    double qk_scale;            /* softmax_scale * log2(e), as the kernel gets it */
    int q_mode, k_mode, p_mode, v_mode; /* MLR_FQ_* */
    double q_amax, k_amax, p_amax, v_amax;
    int sparsity_n, sparsity_m; /* N:M, n 0: off */
    int sink, recent;           /* dense_sink_tokens, dense_recent_tokens */
} mlr_fq_prefill_cfg;

/* N:M on the scores s[0..n) (n a multiple of m, group g = [m g, m g + m)): m = 4 keeps the top
 * keep_n by (value desc, index asc), m = 8 keeps every s >= the keep_n-th largest; the others
 * become -inf unless dense[j] (dense may be NULL: none). */
void mlr_fq_apply_nm(double *s, const int *dense, int n, int keep_n, int m);

/* One sequence of the §2.3 prefill schedule (tiles of block_n keys from key 0, N:M per §3):
 * q [q_len][heads][dqk], k [k_len][kv_heads][dqk], v [k_len][kv_heads][dv] as the kernel reads
 * them; out [q_len][heads][dv]; lse[h * lse_stride + i] natural log (-inf and out 0 for a row
 * with no visible key). 0 on success, -1 when out of memory. */
int mlr_fq_prefill_seq(const mlr_fq_prefill_cfg *cfg, const double *q, int q_len, const double *k,
                       const double *v, int k_len, double *out, double *lse, long lse_stride);

/* The scores that N:M ranks (§3 steps 1-2) for one sequence, the layouts of
 * mlr_fq_prefill_seq: s[((long)i * heads + h) * k_len + j] = qk_scale (Qq_i . Kq_j) (log2
 * domain, quantized q and k), -inf where key j is hidden from query i; mag[same index] = qk_scale
 * sum_f |Qq_i,f Kq_j,f| (what bounds the rounding error of that dot product; 0 where hidden).
 * 0 on success, -1 when out of memory. */
int mlr_fq_prefill_scores(const mlr_fq_prefill_cfg *cfg, const double *q, int q_len,
                          const double *k, int k_len, double *s, double *mag);

/* Plain masked softmax attention of one sequence (no quantization, no sparsity, one softmax over
 * every visible key), the same layouts: the reference of the no-quant prefill. */
int mlr_fq_prefill_dense(const mlr_fq_prefill_cfg *cfg, const double *q, int q_len,
                         const double *k, const double *v, int k_len, double *out, double *lse,
                         long lse_stride);

#endif
