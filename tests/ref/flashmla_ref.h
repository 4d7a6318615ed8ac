/* Float64 reference of the FlashMLA-compatible dense decode (spec/flashmla.md §1.2, 1.5-1.7, §2.1),
 * the number formats it reads, and the spec's comparison (§0 tolerances, FlashMLA's
 * check_is_allclose). Written from the spec, not from the kernels. */
#ifndef MLAJIT_TESTS_REF_FLASHMLA_REF_H
#define MLAJIT_TESTS_REF_FLASHMLA_REF_H

#include <stddef.h>
#include <stdint.h>

/* ---- number formats (round to nearest even; NaN stays NaN) ---------------------------------- */

enum { MLR_FLASHMLA_BF16 = 0, MLR_FLASHMLA_FP16 = 1, MLR_FLASHMLA_E4M3 = 2 };

double mlr_flashmla_bf16_to_f64(uint16_t v);
uint16_t mlr_flashmla_f64_to_bf16(double x);
double mlr_flashmla_fp16_to_f64(uint16_t v);
uint16_t mlr_flashmla_f64_to_fp16(double x);
double mlr_flashmla_e4m3_to_f64(uint8_t v);           /* e4m3fn: no inf, 0x7F/0xFF NaN, max 448 */
uint8_t mlr_flashmla_f64_to_e4m3(double x);           /* saturates to +-448 */
/* Element i of a buffer of the format. */
double mlr_flashmla_load(const void *base, int format, int64_t i);

/* ---- the dense decode ------------------------------------------------------------------------ */

/* One call of the dense decode. Strides in elements; every buffer in `format` except the int32
 * ones. Only keys t < len of each request are read (others may hold NaN); block-table entries of
 * pages past a request's keys are never read. */
typedef struct mlr_flashmla_problem {
    int format;                   /* MLR_FLASHMLA_* of q and k_cache */
    int b, s_q, h_q, h_kv, page_size;
    const void *q;                /* [b, s_q, h_q, 576] */
    int64_t q_stride[3];          /* b, s_q, h_q */
    const void *k_cache;          /* [num_blocks, page_size, h_kv, 576]; V = [..., :512] */
    int64_t k_stride[3];          /* block, token, head */
    const int32_t *block_table;   /* row i at block_table + i * bt_stride */
    int64_t bt_stride;
    const int32_t *seqlens;       /* [b]; < 0 counts as 0 */
    double softmax_scale;
    double descale_q, descale_k;  /* 1 unless fp8 */
    int causal;                   /* bottom-right mask when s_q > 1 */
    int threads;                  /* worker threads, 0: one per online CPU */
} mlr_flashmla_problem;

/* out [b, s_q, h_q, 512] and lse [b, h_q, s_q] (natural log), compact, in float64:
 *   s_t = softmax_scale * descale_q * descale_k * (q . K_t) for visible keys t,
 *   lse = ln sum exp(s_t), out = descale_k * sum_t exp(s_t - lse) V_t;
 *   a row without visible keys: out = 0, lse = +inf. */
void mlr_flashmla_decode(const mlr_flashmla_problem *p, double *out, double *lse);

/* ---- comparison ------------------------------------------------------------------------------ */

/* FlashMLA's check_is_allclose: NaN and +-inf positions must match exactly; every other element
 * passes when |a - r| < abs_tol or |a - r| / (|r| + 1e-6) < rel_tol; and the cosine distance
 * 1 - 2 sum(a r) / sum(a^2 + r^2) over the finite elements must be <= cos_tol (cos_tol < 0: not
 * checked). Returns 1 when close; else 0 with the first failure described in msg. */
int mlr_flashmla_allclose(const double *got, const double *want, size_t n, double abs_tol,
                          double rel_tol, double cos_tol, char *msg, size_t msg_size);

/* The spec's tolerances (§0). */
#define MLR_FLASHMLA_OUT_ABS 8e-4
#define MLR_FLASHMLA_OUT_REL (2.01 / 128)
#define MLR_FLASHMLA_OUT_COS 5e-6
#define MLR_FLASHMLA_LSE_ABS 1e-6
#define MLR_FLASHMLA_LSE_REL (8.01 / 65536)
#define MLR_FLASHMLA_FP8_OUT_COS 1e-4 /* FlashMLA's dense fp8 test (spec §2) */

#endif
