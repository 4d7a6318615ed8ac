/* Float64 reference of the fake-quant MLA family (see fakequant_ref.h). */
#include "ref/fakequant_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define E4M3_MAX 448.0

/* Rounds to fp32. The kernels compute in fp32 (§5.5) and get each per-tensor scale (amax / 448,
 * amax / 2688) as an fp32 scalar (§5.9), and §2.3 has the reference copy the rounding points that
 * change quantization decisions: with a non-dyadic scale, the exact ties of x / sc and x / sb
 * (x / sb = 3.5 and the like are common with bf16 inputs) fall on whichever side the fp32 scale,
 * the fp32 block scale and the fp32 quotient put them, not where float64 would. */
static double f32(double x) { return (double)(float)x; }

/* The per-tensor scale amax / div as the kernels get it; NAN (None): 1. */
static double tensor_scale(double amax, double div) { return isnan(amax) ? 1.0 : f32(amax / div); }

double mlr_fq_rne_e4m3(double a) {
    if (a == 0) return 0.0;
    double m = fabs(a);
    int e = (int)floor(log2(m));
    if (ldexp(1.0, e) > m) e--;          /* guard log2 rounding up */
    if (ldexp(1.0, e + 1) <= m) e++;
    if (e < -6) e = -6;
    double q = ldexp(1.0, e - 3);
    double r = nearbyint(m / q) * q;     /* default rounding mode: half even */
    if (r > E4M3_MAX) r = E4M3_MAX;
    return a < 0 ? -r : r;
}

double mlr_fq_fp8_qdq(double x, double amax) {
    double sc = tensor_scale(amax, E4M3_MAX);
    double v = f32(x / sc);
    v = v > E4M3_MAX ? E4M3_MAX : v < -E4M3_MAX ? -E4M3_MAX : v;
    return mlr_fq_rne_e4m3(v) * sc;
}

double mlr_fq_e2m1_mag(double a) {
    return a <= 0.25 ? 0.0 : a < 0.75 ? 0.5 : a <= 1.25 ? 1.0 : a < 1.75 ? 1.5
         : a <= 2.5 ? 2.0 : a < 3.5 ? 3.0 : a <= 5.0 ? 4.0 : 6.0;
}

void mlr_fq_nvfp4_block(const double *x, int n, double amax, double *out) {
    double gs = tensor_scale(amax, 6 * E4M3_MAX);
    double bamax = 0;
    for (int i = 0; i < n; i++) bamax = fmax(bamax, fabs(x[i]));
    double sb = f32(mlr_fq_rne_e4m3(fmin(bamax / (6 * gs), E4M3_MAX)) * gs);
    for (int i = 0; i < n; i++) {
        double r = sb == 0 ? 0.0 : mlr_fq_e2m1_mag(f32(fabs(x[i]) / sb)) * sb;
        out[i] = x[i] < 0 ? -r : r;
    }
}

void mlr_fq_qdq_row(int mode, const double *x, int n, double amax, double *out) {
    if (mode == MLR_FQ_NVFP4) {
        for (int i = 0; i < n; i += 16) mlr_fq_nvfp4_block(x + i, n - i < 16 ? n - i : 16, amax, out + i);
    } else {
        for (int i = 0; i < n; i++) out[i] = mode == MLR_FQ_FP8 ? mlr_fq_fp8_qdq(x[i], amax) : x[i];
    }
}

/* Round half even to `bits` significant bits, with quantum at least 2^min_q. */
static double round_bits(double x, int bits, int min_q) {
    if (x == 0 || !isfinite(x)) return x;
    int e;
    frexp(x, &e);                        /* |x| in [2^(e-1), 2^e) */
    int q = e - bits;
    if (q < min_q) q = min_q;
    return nearbyint(ldexp(x, -q)) * ldexp(1.0, q);
}

double mlr_fq_round_bf16(double x) { return round_bits(x, 8, -133); }

double mlr_fq_round_fp16(double x) {
    double r = round_bits(x, 11, -24);
    return fabs(r) > 65504 ? copysign(INFINITY, r) : r;
}

int mlr_fq_quantize_v(int v_mode, double v_amax, const double *kv, int s, int D, int rank,
                      double *vq) {
    int groups = (s + 15) / 16;
    for (int f = 0; f < rank; f++)
        for (int g = 0; g < groups; g++) {
            double col[16] = {0}, res[16];
            for (int r = 0; r < 16 && 16 * g + r < s; r++) col[r] = kv[(size_t)(16 * g + r) * D + f];
            if (v_mode == MLR_FQ_NVFP4) mlr_fq_nvfp4_block(col, 16, v_amax, res);
            else mlr_fq_qdq_row(v_mode, col, 16, v_amax, res);
            for (int r = 0; r < 16 && 16 * g + r < s; r++) vq[(size_t)(16 * g + r) * rank + f] = res[r];
        }
    return 0;
}

/* QP of one tile's p (n valid keys of 32; the rest 0). */
static void quantize_p(const mlr_fq_decode_cfg *c, const double *p, double *pq) {
    if (c->p_mode == MLR_FQ_NVFP4) {
        double pc[MLR_FQ_TILE];
        for (int j = 0; j < MLR_FQ_TILE; j++)
            pc[j] = c->carrier_fp16 ? mlr_fq_round_fp16(p[j]) : mlr_fq_round_bf16(p[j]);
        mlr_fq_nvfp4_block(pc, 16, c->p_amax, pq);
        mlr_fq_nvfp4_block(pc + 16, 16, c->p_amax, pq + 16);
    } else {
        mlr_fq_qdq_row(c->p_mode, p, MLR_FQ_TILE, c->p_amax, pq);
    }
}

/* One split [t_begin, t_end) of one head: the §2.3 loop; m, l, acc[rank]. */
static void split_state(const mlr_fq_decode_cfg *c, const double *q, const double *kq,
                        const double *vq, int t_begin, int t_end, double *m, double *l,
                        double *acc) {
    int D = c->rank + c->rope;
    *m = -INFINITY, *l = 0;
    for (int f = 0; f < c->rank; f++) acc[f] = 0;
    for (int t0 = t_begin; t0 < t_end; t0 += MLR_FQ_TILE) {
        double sc[MLR_FQ_TILE], p[MLR_FQ_TILE], pq[MLR_FQ_TILE], mx = -INFINITY;
        for (int j = 0; j < MLR_FQ_TILE; j++) {
            sc[j] = -INFINITY;
            if (t0 + j >= t_end) continue;
            double dot = 0;
            for (int f = 0; f < D; f++) dot += q[f] * kq[(size_t)(t0 + j) * D + f];
            sc[j] = dot * c->qk_scale;
            mx = fmax(mx, sc[j]);
        }
        double m_new = fmax(*m, mx), corr = *m == -INFINITY ? 0 : exp2(*m - m_new), sum = 0;
        for (int j = 0; j < MLR_FQ_TILE; j++) {
            p[j] = sc[j] == -INFINITY ? 0 : exp2(sc[j] - m_new);
            sum += p[j];
        }
        *l = *l * corr + sum;
        quantize_p(c, p, pq);
        for (int f = 0; f < c->rank; f++) {
            double a = acc[f] * corr;
            for (int j = 0; j < MLR_FQ_TILE && t0 + j < t_end; j++)
                a += pq[j] * vq[(size_t)(t0 + j) * c->rank + f];
            acc[f] = a;
        }
        *m = m_new;
    }
}

/* The §2.4 merge of one head over its splits, then out and lse. */
static void decode_head(const mlr_fq_decode_cfg *c, const double *q, const double *kq,
                        const double *vq, int s, double *acc, double *out, double *lse) {
    int tiles = (s + MLR_FQ_TILE - 1) / MLR_FQ_TILE, tps = (tiles + c->splits - 1) / c->splits;
    double M = -INFINITY, L = 0;
    for (int f = 0; f < c->rank; f++) out[f] = 0;
    for (int i = 0; i < c->splits; i++) {
        int b0 = i * tps * MLR_FQ_TILE, b1 = b0 + tps * MLR_FQ_TILE;
        if (b1 > s) b1 = s;
        double mi, li;
        split_state(c, q, kq, vq, b0, b1, &mi, &li, acc);
        if (!(li > 0)) continue;
        double n = fmax(M, mi), ca = M == -INFINITY ? 0 : exp2(M - n), cb = exp2(mi - n);
        for (int f = 0; f < c->rank; f++) out[f] = out[f] * ca + acc[f] * cb;
        L = L * ca + li * cb;
        M = n;
    }
    for (int f = 0; f < c->rank; f++) out[f] /= fmax(L, 1e-6);
    *lse = L > 0 ? M_LN2 * (M + log2(L)) : -INFINITY;
}

int mlr_fq_decode_request(const mlr_fq_decode_cfg *c, const double *q, const double *kv, int s,
                          double *out, double *lse) {
    int D = c->rank + c->rope, rc = -1;
    size_t rows = s > 0 ? (size_t)s : 1;
    double *kq = malloc(rows * D * sizeof *kq), *vq = malloc(rows * c->rank * sizeof *vq);
    double *acc = malloc((size_t)c->rank * sizeof *acc);
    if (!kq || !vq || !acc) goto done;
    for (int t = 0; t < s; t++)
        mlr_fq_qdq_row(c->k_mode, kv + (size_t)t * D, D, c->k_amax, kq + (size_t)t * D);
    mlr_fq_quantize_v(c->v_mode, c->v_amax, kv, s, D, c->rank, vq);
    for (int h = 0; h < c->heads; h++)
        decode_head(c, q + (size_t)h * D, kq, vq, s, acc, out + (size_t)h * c->rank, lse + h);
    rc = 0;
done:
    free(kq), free(vq), free(acc);
    return rc;
}

/* ---- prefill ----------------------------------------------------------------------------- */

void mlr_fq_apply_nm(double *s, const int *dense, int n, int keep_n, int m) {
    double x[8];
    for (int g = 0; g + m <= n; g += m) {
        memcpy(x, s + g, (size_t)m * sizeof *x);
        for (int j = 0; j < m; j++) {
            int above = 0;   /* keys that outrank key j */
            for (int e = 0; e < m; e++) above += x[e] > x[j] || (m == 4 && x[e] == x[j] && e < j);
            if (above >= keep_n && !(dense && dense[g + j])) s[g + j] = -INFINITY;
        }
    }
}

/* The quantized copy of one sequence's q and k (per row). */
static void prefill_quantize_qk(const mlr_fq_prefill_cfg *c, const double *q, int q_len,
                                const double *k, int k_len, double *qq, double *kq) {
    for (long r = 0; r < (long)q_len * c->heads; r++)
        mlr_fq_qdq_row(c->q_mode, q + r * c->dqk, c->dqk, c->q_amax, qq + r * c->dqk);
    for (long r = 0; r < (long)k_len * c->kv_heads; r++)
        mlr_fq_qdq_row(c->k_mode, k + r * c->dqk, c->dqk, c->k_amax, kq + r * c->dqk);
}

/* The quantized copy of one sequence's q, k and v (16-token groups per column,
 * sequence-relative, the tail padded with 0). */
static void prefill_quantize(const mlr_fq_prefill_cfg *c, const double *q, int q_len,
                             const double *k, const double *v, int k_len, double *qq, double *kq,
                             double *vq) {
    prefill_quantize_qk(c, q, q_len, k, k_len, qq, kq);
    long vs = (long)c->kv_heads * c->dv;   /* token stride of v */
    for (int col = 0; col < c->kv_heads * c->dv; col++)
        for (int g = 0; 16 * g < k_len; g++) {
            double x[16] = {0}, y[16];
            for (int r = 0; r < 16 && 16 * g + r < k_len; r++) x[r] = v[(16 * g + r) * vs + col];
            if (c->v_mode == MLR_FQ_NVFP4) mlr_fq_nvfp4_block(x, 16, c->v_amax, y);
            else mlr_fq_qdq_row(c->v_mode, x, 16, c->v_amax, y);
            for (int r = 0; r < 16 && 16 * g + r < k_len; r++) vq[(16 * g + r) * vs + col] = y[r];
        }
}

/* Score of query i against key j (log2 domain), -inf when hidden. */
static double prefill_score(const mlr_fq_prefill_cfg *c, const double *qrow, const double *k,
                            int hk, int i, int j, int q_len, int k_len) {
    if (j >= k_len || (c->causal && j > i + k_len - q_len)) return -INFINITY;
    const double *krow = k + ((long)j * c->kv_heads + hk) * c->dqk;
    double dot = 0;
    for (int f = 0; f < c->dqk; f++) dot += qrow[f] * krow[f];
    return dot * c->qk_scale;
}

/* QP of one tile's p[0..n) (n a multiple of 16). */
static void prefill_quantize_p(const mlr_fq_prefill_cfg *c, double *p, int n) {
    if (c->p_mode == MLR_FQ_NVFP4) {
        for (int j = 0; j < n; j++)
            p[j] = c->carrier_fp16 ? mlr_fq_round_fp16(p[j]) : mlr_fq_round_bf16(p[j]);
        for (int j = 0; j < n; j += 16) mlr_fq_nvfp4_block(p + j, 16, c->p_amax, p + j);
    } else {
        mlr_fq_qdq_row(c->p_mode, p, n, c->p_amax, p);
    }
}

/* One row (query i, head h) of the §2.3 loop over block_n tiles. s, p, dense: block_n scratch. */
static void prefill_row(const mlr_fq_prefill_cfg *c, const double *qrow, const double *kq,
                        const double *vq, int h, int i, int q_len, int k_len, double *s,
                        double *p, int *dense, double *out, double *lse) {
    int hk = h / (c->heads / c->kv_heads), bn = c->block_n;
    long end = c->causal ? (long)i + k_len - q_len + 1 : k_len;
    if (end > k_len) end = k_len;
    double m = -INFINITY, l = 0;
    for (int f = 0; f < c->dv; f++) out[f] = 0;
    for (long t0 = 0; t0 < end; t0 += bn) {
        double mx = -INFINITY;
        for (int j = 0; j < bn; j++) {
            long t = t0 + j, d = (long)i + k_len - q_len - t;
            s[j] = prefill_score(c, qrow, kq, hk, i, (int)t, q_len, k_len);
            dense[j] = q_len <= 1 || t < c->sink || (d >= 0 && d < c->recent);
        }
        if (c->sparsity_n) mlr_fq_apply_nm(s, dense, bn, c->sparsity_n, c->sparsity_m);
        for (int j = 0; j < bn; j++) mx = fmax(mx, s[j]);
        double m_new = fmax(m, mx), corr = m == -INFINITY ? 0 : exp2(m - m_new), sum = 0;
        for (int j = 0; j < bn; j++) sum += p[j] = s[j] == -INFINITY ? 0 : exp2(s[j] - m_new);
        l = l * corr + sum;
        prefill_quantize_p(c, p, bn);
        for (int f = 0; f < c->dv; f++) {
            double a = out[f] * corr;
            for (int j = 0; j < bn && t0 + j < k_len; j++)
                a += p[j] * vq[((t0 + j) * c->kv_heads + hk) * c->dv + f];
            out[f] = a;
        }
        m = m_new;
    }
    for (int f = 0; f < c->dv; f++) out[f] /= fmax(l, 1e-6);
    *lse = l > 0 ? M_LN2 * (m + log2(l)) : -INFINITY;
}

int mlr_fq_prefill_seq(const mlr_fq_prefill_cfg *c, const double *q, int q_len, const double *k,
                       const double *v, int k_len, double *out, double *lse, long lse_stride) {
    size_t nq = (size_t)q_len * c->heads * c->dqk, nk = (size_t)k_len * c->kv_heads * c->dqk;
    size_t nv = (size_t)k_len * c->kv_heads * c->dv;
    double *qq = malloc((nq + 1) * sizeof *qq), *kq = malloc((nk + 1) * sizeof *kq);
    double *vq = malloc((nv + 1) * sizeof *vq), *s = malloc((size_t)c->block_n * sizeof *s);
    double *p = malloc((size_t)c->block_n * sizeof *p);
    int *dense = malloc((size_t)c->block_n * sizeof *dense), rc = -1;
    if (!qq || !kq || !vq || !s || !p || !dense) goto done;
    prefill_quantize(c, q, q_len, k, v, k_len, qq, kq, vq);
    for (int i = 0; i < q_len; i++)
        for (int h = 0; h < c->heads; h++)
            prefill_row(c, qq + ((size_t)i * c->heads + h) * c->dqk, kq, vq, h, i, q_len, k_len, s,
                        p, dense, out + ((size_t)i * c->heads + h) * c->dv, lse + h * lse_stride + i);
    rc = 0;
done:
    free(qq), free(kq), free(vq), free(s), free(p), free(dense);
    return rc;
}

int mlr_fq_prefill_scores(const mlr_fq_prefill_cfg *c, const double *q, int q_len,
                          const double *k, int k_len, double *s, double *mag) {
    size_t nq = (size_t)q_len * c->heads * c->dqk, nk = (size_t)k_len * c->kv_heads * c->dqk;
    double *qq = malloc((nq + 1) * sizeof *qq), *kq = malloc((nk + 1) * sizeof *kq);
    int rc = -1;
    if (!qq || !kq) goto done;
    prefill_quantize_qk(c, q, q_len, k, k_len, qq, kq);
    for (int i = 0; i < q_len; i++)
        for (int h = 0; h < c->heads; h++) {
            int hk = h / (c->heads / c->kv_heads);
            const double *qrow = qq + ((size_t)i * c->heads + h) * c->dqk;
            for (int j = 0; j < k_len; j++) {
                const double *krow = kq + ((size_t)j * c->kv_heads + hk) * c->dqk;
                size_t at = ((size_t)i * c->heads + h) * k_len + j;
                double a = 0;
                for (int f = 0; f < c->dqk; f++) a += fabs(qrow[f] * krow[f]);
                s[at] = prefill_score(c, qrow, kq, hk, i, j, q_len, k_len);
                mag[at] = s[at] == -INFINITY ? 0 : a * c->qk_scale;
            }
        }
    rc = 0;
done:
    free(qq), free(kq);
    return rc;
}

int mlr_fq_prefill_dense(const mlr_fq_prefill_cfg *c, const double *q, int q_len,
                         const double *k, const double *v, int k_len, double *out, double *lse,
                         long lse_stride) {
    double *w = malloc(((size_t)k_len + 1) * sizeof *w);
    if (!w) return -1;
    for (int i = 0; i < q_len; i++)
        for (int h = 0; h < c->heads; h++) {
            int hk = h / (c->heads / c->kv_heads);
            double mx = -INFINITY, sum = 0, *o = out + ((size_t)i * c->heads + h) * c->dv;
            const double *qrow = q + ((size_t)i * c->heads + h) * c->dqk;
            for (int j = 0; j < k_len; j++)
                mx = fmax(mx, w[j] = prefill_score(c, qrow, k, hk, i, j, q_len, k_len));
            for (int j = 0; j < k_len; j++) sum += w[j] = w[j] == -INFINITY ? 0 : exp2(w[j] - mx);
            for (int f = 0; f < c->dv; f++) {
                double a = 0;
                for (int j = 0; j < k_len; j++) a += w[j] * v[((size_t)j * c->kv_heads + hk) * c->dv + f];
                o[f] = sum > 0 ? a / sum : 0;
            }
            lse[h * lse_stride + i] = sum > 0 ? M_LN2 * (mx + log2(sum)) : -INFINITY;
        }
    free(w);
    return 0;
}
