/* Prefill (mla_prefill_attention) under each candidate formulation, against the float64 oracle
 * mlr_fq_prefill_seq with the GPU test's tolerances (tests/test_fakequant_prefill_gpu.c):
 * [atol 5e-3 | 2e-2 quantized, rtol 5e-3], lse 1e-3 + 1e-5 |lse|; N:M rows the test's near-tie
 * guard (mlt_pf_nm_unsure: keys within 2 (d + 2) 2^-23 qk_scale sum |q k| of the cut) leaves
 * out are left out here too, and a selection flip outside the guard is counted separately (it
 * would fail the test). Data as mlt_pf_make: q uniform(-4, 4), k and v uniform(-1, 1), each
 * rounded to the dtype; one-hot v for the nm_exemptions_exact cases. */
#include <stdlib.h>

#include "forms.h"
#include "quant.h"

#define LOG2E 1.4426950408889634
#define MAXBN 128

typedef struct pcase {
    const char *name;
    int fp16, heads, kv_heads, dqk, dv, nseq, q_lens[4], k_lens[4], causal, q, k, p, v;
    double q_amax, k_amax, p_amax, v_amax;   /* NAN: None; p 1 by default */
    int nm_n, nm_m, sink, recent, block_n;
    int one_hot;
    double amp;
} pcase;

/* One sequence's operands: kernel values and codes of Q, K, V; the oracle's Q and K. */
typedef struct seq {
    int ql, kl;
    double *q, *k, *v;                       /* raw */
    double *qv, *qc, *kv, *kc, *vv, *vc;     /* kernel values, codes */
    double *qr, *kr;                         /* oracle values */
    double qf, kf, vf, pf;
} seq;

static double *dalloc(size_t n) { return malloc((n + 1) * sizeof(double)); }

static void quantize_seq(const pcase *c, seq *s) {
    size_t nq = (size_t)s->ql * c->heads, nk = (size_t)s->kl * c->kv_heads;
    s->qf = fq_factor(c->q, c->q_amax), s->kf = fq_factor(c->k, c->k_amax);
    s->vf = fq_factor(c->v, c->v_amax), s->pf = fq_factor(c->p, c->p_amax);
    s->qv = dalloc(nq * c->dqk), s->qc = dalloc(nq * c->dqk), s->qr = dalloc(nq * c->dqk);
    s->kv = dalloc(nk * c->dqk), s->kc = dalloc(nk * c->dqk), s->kr = dalloc(nk * c->dqk);
    s->vv = dalloc(nk * c->dv), s->vc = dalloc(nk * c->dv);
    for (size_t r = 0; r < nq; r++) {
        q_row(c->q, s->q + r * c->dqk, c->dqk, s->qf, 0, s->qv + r * c->dqk, s->qc + r * c->dqk);
        mlr_fq_qdq_row(c->q, s->q + r * c->dqk, c->dqk, c->q_amax, s->qr + r * c->dqk);
    }
    for (size_t r = 0; r < nk; r++) {
        q_row(c->k, s->k + r * c->dqk, c->dqk, s->kf, 0, s->kv + r * c->dqk, s->kc + r * c->dqk);
        mlr_fq_qdq_row(c->k, s->k + r * c->dqk, c->dqk, c->k_amax, s->kr + r * c->dqk);
    }
    long vs = (long)c->kv_heads * c->dv;
    for (long col = 0; col < vs; col++)
        for (int g = 0; 16 * g < s->kl; g++) {
            double x[16] = {0}, val[16], code[16];
            for (int r = 0; r < 16 && 16 * g + r < s->kl; r++) x[r] = s->v[(16 * g + r) * vs + col];
            if (c->v == MLR_FQ_NVFP4) q_nvfp4(x, 16, s->vf, 0, val, code);
            else q_row(c->v, x, 16, s->vf, 0, val, code);
            for (int r = 0; r < 16 && 16 * g + r < s->kl; r++)
                s->vv[(16 * g + r) * vs + col] = val[r], s->vc[(16 * g + r) * vs + col] = code[r];
        }
}

static void free_seq(seq *s) {
    free(s->q), free(s->k), free(s->v), free(s->qv), free(s->qc), free(s->qr), free(s->kv);
    free(s->kc), free(s->kr), free(s->vv), free(s->vc);
}

static int hidden(const pcase *c, const seq *s, int i, long t) {
    return t >= s->kl || (c->causal && t > (long)i + s->kl - s->ql);
}
static int is_dense(const pcase *c, const seq *s, int i, long t) {
    long d = (long)i + s->kl - s->ql - t;
    return s->ql <= 1 || t < c->sink || (d >= 0 && d < c->recent);
}

/* Kernel N:M rule on the 16-aligned groups of sc[0..n). */
static void nm_apply(const pcase *c, const seq *s, int i, long t0, double *sc, int n) {
    if (!c->nm_n) return;
    int dense[MAXBN];
    for (int j = 0; j < n; j++) dense[j] = is_dense(c, s, i, t0 + j);
    mlr_fq_apply_nm(sc, dense, n, c->nm_n, c->nm_m);
}

/* The test's guard for one row (mlt_pf_nm_unsure / nm_row): unsure[t] for keys near the cut;
 * counts groups and ambiguous groups. s64, mag: the oracle's scores of the row over all keys. */
static void nm_guard(const pcase *c, const double *s64, const double *mag, int kl,
                     unsigned char *unsure, long *groups, long *ambiguous, unsigned char *amb_g) {
    int m = c->nm_m, n = c->nm_n;
    for (int g = 0; g < kl; g += m) {
        double x[8], eps = 0;
        amb_g[g / m] = 0;
        for (int e = 0; e < m; e++) {
            x[e] = g + e < kl ? s64[g + e] : -INFINITY;
            if (g + e < kl) eps = fmax(eps, (c->dqk + 2) * ldexp(mag[g + e], -23));
        }
        for (int a = 1; a < m; a++)
            for (int b = a; b > 0 && x[b] > x[b - 1]; b--) {
                double t = x[b];
                x[b] = x[b - 1], x[b - 1] = t;
            }
        if (x[n] == -INFINITY) continue;
        ++*groups;
        if (x[n - 1] - x[n] > 2 * eps) continue;
        ++*ambiguous, amb_g[g / m] = 1;
        for (int e = 0; e < m && g + e < kl; e++)
            if (s64[g + e] >= x[n - 1] - 2 * eps && s64[g + e] <= x[n] + 2 * eps) unsure[g + e] = 1;
    }
}

/* QP of a tile's p[0..n) (n a multiple of 16): values and codes (ref: the oracle's rounding). */
static void quant_p(const pcase *c, const seq *s, const double *p, int n, int ref, double *val,
                    double *code) {
    if (c->p == MLR_FQ_NVFP4) {
        double pc[MAXBN];
        for (int j = 0; j < n; j++) pc[j] = to_16(p[j], c->fp16);
        for (int j = 0; j < n; j += 16) q_nvfp4(pc + j, 16, s->pf, ref, val + j, code + j);
    } else {
        q_row(c->p, p, n, s->pf, ref, val, code);
    }
}

/* The oracle's trajectory of row (i, h): its kept keys (finite after N:M) and P codes. */
static void ref_row(const pcase *c, const seq *s, int i, int h, double qk_scale, double *keptp,
                    double *pcode) {
    int hk = h / (c->heads / c->kv_heads), bn = c->block_n;
    const double *qrow = s->qr + ((size_t)i * c->heads + h) * c->dqk;
    double m = -INFINITY;
    for (long t0 = 0; t0 < s->kl; t0 += bn) {
        double sc[MAXBN], p[MAXBN], val[MAXBN], code[MAXBN], mx = -INFINITY;
        for (int j = 0; j < bn; j++) {
            long t = t0 + j;
            sc[j] = -INFINITY;
            if (hidden(c, s, i, t)) continue;
            const double *kr = s->kr + ((size_t)t * c->kv_heads + hk) * c->dqk;
            double dot = 0;
            for (int f = 0; f < c->dqk; f++) dot += qrow[f] * kr[f];
            sc[j] = dot * qk_scale;
        }
        nm_apply(c, s, i, t0, sc, bn);
        for (int j = 0; j < bn; j++) mx = fmax(mx, sc[j]);
        double mn = fmax(m, mx);
        for (int j = 0; j < bn; j++) p[j] = sc[j] == -INFINITY ? 0 : exp2(sc[j] - mn);
        quant_p(c, s, p, bn, 1, val, code);
        for (int j = 0; j < bn && t0 + j < s->kl; j++)
            keptp[t0 + j] = sc[j] != -INFINITY, pcode[t0 + j] = code[j];
        m = mn;
    }
}

/* Row (i, h) under form fm: out[dv] in the dtype, lse, kept keys and P codes. */
static void emu_row(const form *fm, const pcase *c, const seq *s, int i, int h, double qk_scale,
                    double *out, double *lse, double *kept, double *pcode) {
    int hk = h / (c->heads / c->kv_heads), bn = c->block_n, dqk = c->dqk, dv = c->dv;
    size_t qo = ((size_t)i * c->heads + h) * dqk;
    double qk_eff = fm->cur ? qk_scale : f32(qk_scale * f32(s->qf * s->kf));
    double pv_eff = f32(s->pf * s->vf), m = -INFINITY, l = 0, acc[512];
    long end = c->causal ? (long)i + s->kl - s->ql + 1 : s->kl;
    if (end > s->kl) end = s->kl;
    for (int f = 0; f < dv; f++) acc[f] = 0;
    int kstep = fm->tf32 ? 8 : 16;
    for (long t0 = 0; t0 < end; t0 += bn) {
        int n = end - t0 < bn ? (int)(end - t0) : bn, nc = (n + 15) / 16 * 16;
        double sc[MAXBN], p[MAXBN], val[MAXBN], code[MAXBN], mx = -INFINITY;
        for (int j = 0; j < nc; j++) {
            long t = t0 + j;
            sc[j] = -INFINITY;
            if (hidden(c, s, i, t)) continue;
            size_t ko = ((size_t)t * c->kv_heads + hk) * dqk;
            if (fm->cur) {
                int half = (dqk + 1) / 2;
                double d0 = 0, d1 = 0;
                for (int f = 0; f < half; f++) d0 = f32(d0 + s->qv[qo + f] * s->kv[ko + f]);
                for (int f = half; f < dqk; f++) d1 = f32(d1 + s->qv[qo + f] * s->kv[ko + f]);
                sc[j] = f32(f32(d0 + d1) * qk_eff);
            } else {
                double a = dot_chain(fm->acc, kstep, 0, s->qc + qo, s->kc + ko, dqk);
                sc[j] = f32(a * qk_eff);
            }
        }
        nm_apply(c, s, i, t0, sc, nc);
        for (int j = 0; j < nc; j++) mx = fmax(mx, sc[j]);
        double mn = fmax(m, mx), lanes[32] = {0};
        for (int j = 0; j < nc; j++) {
            p[j] = sc[j] == -INFINITY ? 0 : f32(exp2(f32(sc[j] - mn)));
            lanes[j % 32] = f32(lanes[j % 32] + p[j]);
        }
        for (int d = 16; d > 0; d >>= 1) {
            double w[32];
            for (int j = 0; j < 32; j++) w[j] = f32(lanes[j] + lanes[j ^ d]);
            memcpy(lanes, w, sizeof w);
        }
        double cr = m == -INFINITY ? 0 : f32(exp2(f32(m - mn)));
        l = f32(f32(l * cr) + lanes[0]);
        quant_p(c, s, p, nc, 0, val, code);
        for (int j = 0; j < n; j++) kept[t0 + j] = sc[j] != -INFINITY, pcode[t0 + j] = code[j];
        size_t vs = (size_t)c->kv_heads * dv;
        double pt[MAXBN][3] = {{0}};
        int np = 1;
        for (int j = 0; j < nc && !fm->cur; j++) {
            pt[j][0] = c->p ? code[j] : p[j];
            if (!c->p) np = split_terms(fm, c->fp16, p[j], pt[j]);
        }
        for (int f = 0; f < dv; f++) {
            double a = f32(acc[f] * cr), prod[16];
            for (int j0 = 0; j0 < nc; j0 += 16) {
                if (fm->cur) {
                    for (int j = j0; j < j0 + 16 && t0 + j < s->kl; j++)
                        a = f32(a + val[j] * s->vv[(t0 + j) * vs + (size_t)hk * dv + f]);
                    continue;
                }
                for (int k0 = j0; k0 < j0 + 16; k0 += kstep)
                    for (int part = np - 1; part >= 0; part--) {
                        for (int x = 0; x < kstep; x++) {
                            long t = t0 + k0 + x;
                            prod[x] = t < s->kl ? pt[k0 + x][part] * s->vc[t * vs + (size_t)hk * dv + f] : 0;
                        }
                        a = acc_step(fm->acc, a, prod, kstep);
                    }
            }
            acc[f] = a;
        }
        m = mn;
    }
    for (int f = 0; f < dv; f++) {
        double a = fm->cur ? acc[f] : f32(acc[f] * pv_eff);
        out[f] = to_16(f32(a / fmax(l, 1e-6)), c->fp16);
    }
    *lse = l > 0 ? f32(M_LN2 * f32(m + f32(log2(l)))) : -INFINITY;
}

static void run_case(const pcase *c0, int seeds) {
    pcase cc = *c0, *c = &cc;
    if (!c->block_n) c->block_n = 64;
    stats st[NFORMS];
    memset(st, 0, sizeof st);
    double qk_scale = f32(1.0 / sqrt((double)c->dqk) * LOG2E);
    int quant = c->q || c->k || c->p || c->v;
    double atol = quant ? 2e-2 : 5e-3, rtol = 5e-3;
    mlr_fq_prefill_cfg cfg = {
        .heads = c->heads, .kv_heads = c->kv_heads, .dqk = c->dqk, .dv = c->dv, .causal = c->causal,
        .block_n = c->block_n, .carrier_fp16 = c->fp16, .qk_scale = qk_scale, .q_mode = c->q,
        .k_mode = c->k, .p_mode = c->p, .v_mode = c->v, .q_amax = c->q_amax, .k_amax = c->k_amax,
        .p_amax = c->p_amax, .v_amax = c->v_amax, .sparsity_n = c->nm_n, .sparsity_m = c->nm_m,
        .sink = c->sink, .recent = c->recent,
    };
    for (int sd = 0; sd < seeds; sd++) {
        rng g = {0xabcdefull + 104729ull * sd};
        seq S[4];
        /* the draw order of mlt_pf_make: all q, then all k, then all v */
        for (int b = 0; b < c->nseq; b++) {
            S[b].ql = c->q_lens[b], S[b].kl = c->k_lens[b];
            S[b].q = dalloc((size_t)S[b].ql * c->heads * c->dqk);
            S[b].k = dalloc((size_t)S[b].kl * c->kv_heads * c->dqk);
            S[b].v = dalloc((size_t)S[b].kl * c->kv_heads * c->dv);
        }
        for (int b = 0; b < c->nseq; b++)
            for (size_t x = 0; x < (size_t)S[b].ql * c->heads * c->dqk; x++)
                S[b].q[x] = to_16(c->amp * (2 * rng_unif(&g) - 1), c->fp16);
        for (int b = 0; b < c->nseq; b++)
            for (size_t x = 0; x < (size_t)S[b].kl * c->kv_heads * c->dqk; x++)
                S[b].k[x] = to_16(2 * rng_unif(&g) - 1, c->fp16);
        for (int b = 0; b < c->nseq; b++)
            for (size_t x = 0; x < (size_t)S[b].kl * c->kv_heads * c->dv; x++) {
                double u = to_16(2 * rng_unif(&g) - 1, c->fp16);
                S[b].v[x] = c->one_hot ? (double)((long)(x % c->dv) == (long)(x / ((size_t)c->kv_heads * c->dv))) : u;
            }
        for (int b = 0; b < c->nseq; b++) {
            seq *s = &S[b];
            if (s->ql == 0) continue;
            quantize_seq(c, s);
            size_t nrow = (size_t)s->ql * c->heads;
            double *ro = dalloc(nrow * c->dv), *rl = dalloc(nrow);
            double *s64 = dalloc(nrow * s->kl), *mag = dalloc(nrow * s->kl);
            {
                double *tmp_l = dalloc((size_t)c->heads * s->ql);
                mlr_fq_prefill_seq(&cfg, s->q, s->ql, s->k, s->v, s->kl, ro, tmp_l, s->ql);
                for (int h = 0; h < c->heads; h++)
                    for (int i = 0; i < s->ql; i++) rl[(size_t)i * c->heads + h] = tmp_l[(size_t)h * s->ql + i];
                free(tmp_l);
            }
            if (c->nm_n) mlr_fq_prefill_scores(&cfg, s->q, s->ql, s->k, s->kl, s64, mag);
            double *rk = dalloc(s->kl), *rc = dalloc(s->kl), *ek = dalloc(s->kl), *ec = dalloc(s->kl);
            unsigned char *uns = calloc((size_t)s->kl + 1, 1), *amb = calloc((size_t)s->kl + 1, 1);
            for (int i = 0; i < s->ql; i++)
                for (int h = 0; h < c->heads; h++) {
                    size_t row = (size_t)i * c->heads + h;
                    long groups = 0, ambiguous = 0;
                    memset(uns, 0, (size_t)s->kl + 1);
                    if (c->nm_n)
                        nm_guard(c, s64 + row * s->kl, mag + row * s->kl, s->kl, uns, &groups, &ambiguous, amb);
                    int skip = 0;
                    for (int t = 0; t < s->kl; t++) skip |= uns[t];
                    for (int t = 0; t < s->kl; t++) rk[t] = ek[t] = 0, rc[t] = ec[t] = 0;
                    ref_row(c, s, i, h, qk_scale, rk, rc);
                    for (int fi = 0; fi < NFORMS; fi++) {
                        double out[512], lse;
                        for (int t = 0; t < s->kl; t++) ek[t] = 0, ec[t] = 0;
                        emu_row(&FORMS[fi], c, s, i, h, qk_scale, out, &lse, ek, ec);
                        stats *x = &st[fi];
                        if (skip) x->rows_skipped++;
                        else compare_row(x, out, ro + row * c->dv, c->dv, lse, rl[row], atol, rtol);
                        for (int t = 0; c->p && t < s->kl; t++)
                            if (rk[t] || ek[t]) x->p_total++, x->p_flip += rc[t] != ec[t];
                        if (!c->nm_n) continue;
                        x->nm_groups += groups, x->nm_ambiguous += ambiguous;
                        for (int g0 = 0; g0 < s->kl; g0 += c->nm_m) {
                            int diff = 0;
                            for (int e = 0; e < c->nm_m && g0 + e < s->kl; e++) diff |= rk[g0 + e] != ek[g0 + e];
                            x->nm_flip += diff;
                            x->nm_flip_unguarded += diff && !amb[g0 / c->nm_m];
                        }
                    }
                }
            free(ro), free(rl), free(s64), free(mag), free(rk), free(rc), free(ek), free(ec);
            free(uns), free(amb);
        }
        for (int b = 0; b < c->nseq; b++) {
            if (S[b].ql) free_seq(&S[b]);
            else free(S[b].q), free(S[b].k), free(S[b].v);
        }
    }
    printf("\n### prefill: %s\n\n", c->name);
    printf("| formulation | BMM1 cost | BMM2 cost | rows | rows failing | worst err/tol | lse fails "
           "| P flips | N:M flips (unguarded) / groups | rows skipped by guard |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (int fi = 0; fi < NFORMS; fi++) {
        const form *fm = &FORMS[fi];
        stats *x = &st[fi];
        char flips[64] = "-", nm[80] = "-";
        if (c->p) snprintf(flips, sizeof flips, "%ld / %ld (%.2g)", x->p_flip, x->p_total, (double)x->p_flip / x->p_total);
        if (c->nm_n) snprintf(nm, sizeof nm, "%ld (%ld) / %ld", x->nm_flip, x->nm_flip_unguarded, x->nm_groups);
        char c1[16], c2[16];
        if (fm->cur) snprintf(c1, sizeof c1, "CUDA cores"), snprintf(c2, sizeof c2, "CUDA cores");
        else snprintf(c1, sizeof c1, "%.0f", form_cost(fm, 0)), snprintf(c2, sizeof c2, "%.0f", form_cost(fm, c->p == 0));
        printf("| %s | %s | %s | %ld | %ld | %.3g | %ld | %s | %s | %ld |\n", fm->name, c1, c2,
               x->rows, x->rows_fail, x->worst, x->lse_fail, flips, nm, x->rows_skipped);
    }
    fflush(stdout);
}

int g_tc_extra = 0;

int main(int argc, char **argv) {
    int seeds = argc > 1 ? atoi(argv[1]) : 10;
    if (getenv("FQTC_TC_EXTRA")) g_tc_extra = atoi(getenv("FQTC_TC_EXTRA"));
    const double N = NAN;
    /* The sweep of tests/test_fakequant_prefill_gpu.c, then the nm_exemptions_exact data. */
    pcase cases[] = {
        {"none MHA 192/128 causal varlen", 0, 4, 4, 192, 128, 4, {37, 0, 33, 5}, {41, 7, 33, 0}, 1, 0, 0, 0, 0, N, N, 1, N, 0, 4, 0, 64, 0, 0, 4},
        {"none GQA 8/2 64/32 non-causal", 0, 8, 2, 64, 32, 2, {37, 16}, {41, 80}, 0, 0, 0, 0, 0, N, N, 1, N, 0, 4, 0, 64, 0, 0, 4},
        {"none GQA 8/1 576/512 causal q16 of k80", 0, 8, 1, 576, 512, 1, {16}, {80}, 1, 0, 0, 0, 0, N, N, 1, N, 0, 4, 0, 64, 0, 0, 4},
        {"none fp16 64/32 bn16", 1, 4, 2, 64, 32, 2, {37, 50}, {37, 90}, 1, 0, 0, 0, 0, N, N, 1, N, 0, 4, 0, 64, 16, 0, 4},
        {"fp8 all ops GQA 4/2 192/128", 0, 4, 2, 192, 128, 2, {37, 16}, {41, 80}, 1, 1, 1, 1, 1, N, N, 1, N, 0, 4, 0, 64, 0, 0, 4},
        {"fp8 all ops amax 6/3/0.5/2", 0, 4, 2, 192, 128, 2, {37, 16}, {41, 80}, 1, 1, 1, 1, 1, 6, 3, 0.5, 2, 0, 4, 0, 64, 0, 0, 4},
        {"nvfp4 all ops 192/128", 0, 4, 2, 192, 128, 2, {37, 16}, {41, 80}, 1, 2, 2, 2, 2, N, N, 1, N, 0, 4, 0, 64, 0, 0, 4},
        {"nvfp4 all ops 576/512 non-causal amax 8/3/1/2", 0, 4, 1, 576, 512, 2, {9, 17}, {40, 33}, 0, 2, 2, 2, 2, 8, 3, 1, 2, 0, 4, 0, 64, 0, 0, 4},
        {"p nvfp4 bn16", 0, 4, 2, 64, 32, 2, {37, 16}, {41, 150}, 1, 0, 0, 2, 0, N, N, 1, N, 0, 4, 0, 64, 16, 0, 4},
        {"p nvfp4 bn128", 0, 4, 2, 64, 32, 2, {37, 16}, {41, 150}, 1, 0, 0, 2, 0, N, N, 1, N, 0, 4, 0, 64, 128, 0, 4},
        {"2:4 recent 16 192/128", 0, 4, 2, 192, 128, 2, {37, 1}, {41, 30}, 1, 0, 0, 0, 0, N, N, 1, N, 2, 4, 0, 16, 0, 0, 4},
        {"4:8 sink 4 recent 8 non-causal", 0, 4, 2, 64, 32, 2, {37, 16}, {41, 80}, 0, 0, 0, 0, 0, N, N, 1, N, 4, 8, 4, 8, 0, 0, 4},
        {"nvfp4 all + 2:4 recent 16", 0, 4, 2, 192, 128, 2, {37, 16}, {41, 80}, 1, 2, 2, 2, 2, N, N, 1, N, 2, 4, 0, 16, 0, 0, 4},
        {"fp16 q nvfp4 k fp8 p fp8 v nvfp4 amax", 1, 4, 2, 64, 32, 2, {37, 16}, {41, 80}, 1, 2, 1, 1, 2, 4, 2, 0.5, 3, 0, 4, 0, 64, 32, 0, 4},
        {"one-hot 2:4 sink 3 recent 5 (nm_exemptions_exact)", 0, 2, 1, 64, 128, 2, {24, 1}, {100, 40}, 1, 0, 0, 0, 0, N, N, 1, N, 2, 4, 3, 5, 32, 1, 1},
        {"one-hot 4:8 sink 3 recent 5 (nm_exemptions_exact)", 0, 2, 1, 64, 128, 2, {24, 1}, {100, 40}, 1, 0, 0, 0, 0, N, N, 1, N, 4, 8, 3, 5, 32, 1, 1},
    };
    int only = argc > 2 ? atoi(argv[2]) : -1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (only < 0 || (int)i == only) run_case(&cases[i], seeds);
    return 0;
}
