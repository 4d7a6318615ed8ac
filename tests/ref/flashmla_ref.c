/* Float64 reference of the FlashMLA-compatible dense decode (see flashmla_ref.h). One task per
 * (request, kv head), shared by pthreads through an atomic counter. */
#include "ref/flashmla_ref.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define D 576
#define DV 512

/* ---- number formats -------------------------------------------------------------------------- */

double mlr_flashmla_bf16_to_f64(uint16_t v) {
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t mlr_flashmla_f64_to_bf16(double x) {
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, 4);
    if (isnan(f)) return 0x7FC0;
    u += 0x7FFF + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

double mlr_flashmla_fp16_to_f64(uint16_t v) {
    int sign = v >> 15, e = (v >> 10) & 31, m = v & 1023;
    double mag = e == 0    ? ldexp(m, -24)
                 : e == 31 ? (m ? NAN : INFINITY)
                           : ldexp(1024 + m, e - 25);
    return sign ? -mag : mag;
}

uint16_t mlr_flashmla_f64_to_fp16(double x) {
    if (isnan(x)) return 0x7E00;
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double a = fabs(x);
    if (a >= 65520.0) return sign | 0x7C00;                 /* rounds to inf */
    int e;
    frexp(a, &e);                                           /* a = f 2^e, f in [0.5, 1) */
    int exp = e - 1 < -14 ? -14 : e - 1;                    /* subnormals share 2^-14 */
    double q = nearbyint(ldexp(a, 10 - exp));               /* mantissa with the hidden bit */
    if (q >= 2048) q /= 2, exp++;
    if (q < 1024) return sign | (uint16_t)q;                /* subnormal (or zero) */
    return sign | (uint16_t)((exp + 15) << 10) | (uint16_t)((int)q - 1024);
}

double mlr_flashmla_e4m3_to_f64(uint8_t v) {
    int sign = v >> 7, e = (v >> 3) & 15, m = v & 7;
    if (e == 15 && m == 7) return NAN;
    double mag = e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10);
    return sign ? -mag : mag;
}

uint8_t mlr_flashmla_f64_to_e4m3(double x) {
    if (isnan(x)) return 0x7F;
    uint8_t sign = signbit(x) ? 0x80 : 0;
    double a = fabs(x);
    if (a >= 448.0) return sign | 0x7E;                     /* saturate (e4m3fn has no inf) */
    if (a < ldexp(1, -6)) return sign | (uint8_t)nearbyint(ldexp(a, 9)); /* subnormal; 8 = 2^-6 */
    int e;
    frexp(a, &e);                                           /* a in [2^(e-1), 2^e) */
    int q = (int)nearbyint(ldexp(a, 4 - e));                /* 8..16: hidden bit + 3 bits */
    if (q == 16) q = 8, e++;
    int code = ((e - 1 + 7) << 3) | (q - 8);
    return sign | (uint8_t)(code > 0x7E ? 0x7E : code);
}

double mlr_flashmla_load(const void *base, int format, int64_t i) {
    if (format == MLR_FLASHMLA_E4M3) return mlr_flashmla_e4m3_to_f64(((const uint8_t *)base)[i]);
    uint16_t v = ((const uint16_t *)base)[i];
    return format == MLR_FLASHMLA_BF16 ? mlr_flashmla_bf16_to_f64(v) : mlr_flashmla_fp16_to_f64(v);
}

/* ---- the dense decode ------------------------------------------------------------------------ */

typedef struct ref_job {
    const mlr_flashmla_problem *p;
    double *out, *lse;
    int next;                      /* next task, taken atomically */
} ref_job;

/* Keys of request i, kv head g: kv[t][d] for t < len. */
static void gather_keys(const mlr_flashmla_problem *p, int i, int g, int len, double *kv) {
    for (int t = 0; t < len; t++) {
        int64_t blk = p->block_table[(int64_t)i * p->bt_stride + t / p->page_size];
        int64_t e = blk * p->k_stride[0] + (int64_t)(t % p->page_size) * p->k_stride[1] +
                    (int64_t)g * p->k_stride[2];
        for (int d = 0; d < D; d++) kv[(int64_t)t * D + d] = mlr_flashmla_load(p->k_cache, p->format, e + d);
    }
}

/* q . k over the 576 dims, four partial sums (independent chains: the reference is the slow
 * part of the GPU tests). */
static double dot(const double *q, const double *k) {
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (int d = 0; d < D; d += 4)
        a0 += q[d] * k[d], a1 += q[d + 1] * k[d + 1], a2 += q[d + 2] * k[d + 2],
            a3 += q[d + 3] * k[d + 3];
    return (a0 + a1) + (a2 + a3);
}

#define ROWS 8   /* query rows per pass over the keys */

/* The query rows of one pass: request i, kv head g, rows r0 .. r0 + n of the group (row r is
 * token r / hpg, head g * hpg + r % hpg). */
typedef struct row_block {
    int i, g, r0, n, len;
    double q[ROWS][D];
    int visible[ROWS];
    double mx[ROWS], lse[ROWS];
} row_block;

static void load_rows(const mlr_flashmla_problem *p, row_block *rb) {
    int hpg = p->h_q / p->h_kv;
    for (int k = 0; k < rb->n; k++) {
        int r = rb->r0 + k, j = r / hpg, h = rb->g * hpg + r % hpg;
        int64_t qe = (int64_t)rb->i * p->q_stride[0] + (int64_t)j * p->q_stride[1] +
                     (int64_t)h * p->q_stride[2];
        for (int d = 0; d < D; d++) rb->q[k][d] = mlr_flashmla_load(p->q, p->format, qe + d);
        int vis = p->causal && p->s_q > 1 ? rb->len - p->s_q + j + 1 : rb->len;
        rb->visible[k] = vis < rb->len ? vis : rb->len;
    }
}

/* s[k * len + t] = scaled logits; row maxima and LSE (-inf for a row without keys). */
static void block_logits(const mlr_flashmla_problem *p, row_block *rb, const double *kv,
                         double *s) {
    double scale = p->softmax_scale * p->descale_q * p->descale_k;
    for (int k = 0; k < rb->n; k++) rb->mx[k] = -INFINITY;
    for (int t = 0; t < rb->len; t++)
        for (int k = 0; k < rb->n; k++) {
            if (t >= rb->visible[k]) continue;
            double v = dot(rb->q[k], kv + (int64_t)t * D) * scale;
            s[(int64_t)k * rb->len + t] = v;
            rb->mx[k] = v > rb->mx[k] ? v : rb->mx[k];
        }
    for (int k = 0; k < rb->n; k++) {
        double sum = 0;
        for (int t = 0; t < rb->visible[k]; t++) sum += exp(s[(int64_t)k * rb->len + t] - rb->mx[k]);
        rb->lse[k] = rb->visible[k] > 0 ? rb->mx[k] + log(sum) : -INFINITY;
    }
}

/* out and lse of the block's rows (empty rows: 0 and +inf). */
static void block_outputs(const mlr_flashmla_problem *p, const row_block *rb, const double *kv,
                          const double *s, double *out, double *lse) {
    int hpg = p->h_q / p->h_kv;
    for (int k = 0; k < rb->n; k++) {
        int r = rb->r0 + k, j = r / hpg, h = rb->g * hpg + r % hpg;
        double *o = out + (((int64_t)rb->i * p->s_q + j) * p->h_q + h) * DV;
        memset(o, 0, DV * sizeof *o);
        lse[((int64_t)rb->i * p->h_q + h) * p->s_q + j] = rb->visible[k] > 0 ? rb->lse[k] : INFINITY;
        for (int t = 0; t < rb->visible[k]; t++) {
            double w = exp(s[(int64_t)k * rb->len + t] - rb->lse[k]) * p->descale_k;
            const double *v = kv + (int64_t)t * D;
            for (int d = 0; d < DV; d++) o[d] += w * v[d];
        }
    }
}

static void run_task(const mlr_flashmla_problem *p, int task, row_block *rb, double *kv,
                     double *s, double *out, double *lse) {
    int rows = p->s_q * (p->h_q / p->h_kv);
    rb->i = task / p->h_kv, rb->g = task % p->h_kv;
    rb->len = p->seqlens[rb->i] > 0 ? p->seqlens[rb->i] : 0;
    gather_keys(p, rb->i, rb->g, rb->len, kv);
    for (rb->r0 = 0; rb->r0 < rows; rb->r0 += ROWS) {
        rb->n = rows - rb->r0 < ROWS ? rows - rb->r0 : ROWS;
        load_rows(p, rb);
        block_logits(p, rb, kv, s);
        block_outputs(p, rb, kv, s, out, lse);
    }
}

static int max_len(const mlr_flashmla_problem *p) {
    int m = 1;
    for (int i = 0; i < p->b; i++) m = p->seqlens[i] > m ? p->seqlens[i] : m;
    return m;
}

static void *worker(void *arg) {
    ref_job *job = arg;
    const mlr_flashmla_problem *p = job->p;
    int n = max_len(p), tasks = p->b * p->h_kv;
    double *kv = malloc((size_t)n * D * sizeof *kv), *s = malloc((size_t)n * ROWS * sizeof *s);
    row_block *rb = malloc(sizeof *rb);
    if (!kv || !s || !rb) abort();
    for (int t; (t = __atomic_fetch_add(&job->next, 1, __ATOMIC_RELAXED)) < tasks;)
        run_task(p, t, rb, kv, s, job->out, job->lse);
    free(kv);
    free(s);
    free(rb);
    return NULL;
}

void mlr_flashmla_decode(const mlr_flashmla_problem *p, double *out, double *lse) {
    ref_job job = {p, out, lse, 0};
    int n = p->threads > 0 ? p->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    if (n > 64) n = 64;
    if (n > p->b * p->h_kv) n = p->b * p->h_kv;
    pthread_t th[64];
    int started = 0;
    for (; started < n - 1; started++)
        if (pthread_create(&th[started], NULL, worker, &job) != 0) break;
    worker(&job);
    for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
}

/* ---- comparison ------------------------------------------------------------------------------ */

static int same_special(double a, double r) {
    if (isnan(a) || isnan(r)) return isnan(a) && isnan(r);
    if (isinf(a) || isinf(r)) return a == r;
    return 1;
}

int mlr_flashmla_allclose(const double *got, const double *want, size_t n, double abs_tol,
                          double rel_tol, double cos_tol, char *msg, size_t msg_size) {
    double ar = 0, aa_rr = 0;
    for (size_t k = 0; k < n; k++) {
        double a = got[k], r = want[k];
        if (!same_special(a, r)) {
            snprintf(msg, msg_size, "element %zu: got %.9g, expected %.9g (NaN/inf positions "
                     "differ)", k, a, r);
            return 0;
        }
        if (!isfinite(a)) continue;
        double err = fabs(a - r);
        if (!(err < abs_tol || err / (fabs(r) + 1e-6) < rel_tol)) {
            snprintf(msg, msg_size, "element %zu: got %.9g, expected %.9g (abs err %.3g > %.3g, "
                     "rel err %.3g > %.3g)", k, a, r, err, abs_tol, err / (fabs(r) + 1e-6),
                     rel_tol);
            return 0;
        }
        ar += a * r;
        aa_rr += a * a + r * r;
    }
    double cos_diff = aa_rr > 0 ? 1 - 2 * ar / aa_rr : 0;
    if (cos_tol >= 0 && cos_diff > cos_tol) {
        snprintf(msg, msg_size, "cosine distance %.3g > %.3g", cos_diff, cos_tol);
        return 0;
    }
    return 1;
}
