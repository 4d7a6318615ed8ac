/* Decode (mla_attention_decode) under each candidate formulation, against the float64 oracle
 * mlr_fq_decode_request with the GPU test's tolerances (tests/test_fakequant_decode_gpu.c):
 * no quant [atol 5e-3, rtol 5e-3], quantized [atol 2e-2, rtol 5e-3], lse 1e-3 + 1e-5 |lse|.
 * Data as mlt_fq_make draws it: raw rows uniform(-1, 1) rounded to the cache dtype; q uniform
 * (-amp, amp) in the cache dtype, or (q_fp32) fp32 then NVFP4-QDQ'd along features (gs 1). */
#include <stdlib.h>

#include "forms.h"
#include "quant.h"

#define RANK 512
#define ROPE 64
#define D 576
#define TILE 32
#define LOG2E 1.4426950408889634

typedef struct dcase {
    const char *name;
    int fp16, q_fp32, heads, splits, k, v, p;
    double k_amax, v_amax, p_amax;   /* NAN: None; p: 1 is the default */
    int out;                         /* 0 the cache dtype, 3 fp32 */
    int nreq, lens[4];
    double amp;
    int q_raw32;                     /* q_fp32 without the NVFP4 QDQ: an arbitrary fp32 q */
} dcase;

/* One request: q, raw rows, the kernel's quantized K and V (fp32 values and codes). */
typedef struct req {
    int s;
    double *q, *kv, *kval, *kcode, *kref, *vval, *vcode;
    double kfac, vfac, pfac;
} req;

static void make_req(const dcase *c, rng *g, int s, req *r) {
    r->s = s;
    size_t n = (size_t)(s + 1) * D;
    r->q = malloc((size_t)c->heads * D * sizeof(double));
    r->kv = malloc(n * sizeof(double));
    r->kval = malloc(n * sizeof(double)), r->kcode = malloc(n * sizeof(double));
    r->kref = malloc(n * sizeof(double));
    r->vval = malloc(n * sizeof(double)), r->vcode = malloc(n * sizeof(double));
    for (int t = 0; t < s; t++)
        for (int f = 0; f < D; f++) r->kv[(size_t)t * D + f] = to_16(2 * rng_unif(g) - 1, c->fp16);
    for (int i = 0; i < c->heads * D; i++) {
        double x = c->amp * (2 * rng_unif(g) - 1);
        r->q[i] = c->q_fp32 ? f32(x) : to_16(x, c->fp16);
    }
    if (c->q_fp32 && !c->q_raw32)
        for (int h = 0; h < c->heads; h++) mlr_fq_qdq_row(MLR_FQ_NVFP4, r->q + h * D, D, NAN, r->q + h * D);
    r->kfac = fq_factor(c->k, c->k_amax), r->vfac = fq_factor(c->v, c->v_amax);
    r->pfac = fq_factor(c->p, c->p_amax);
    for (int t = 0; t < s; t++)
        q_row(c->k, r->kv + (size_t)t * D, D, r->kfac, 0, r->kval + (size_t)t * D, r->kcode + (size_t)t * D);
    for (int t = 0; t < s; t++)   /* the oracle's K (float64 products with the fp32 scales) */
        mlr_fq_qdq_row(c->k, r->kv + (size_t)t * D, D, c->k_amax, r->kref + (size_t)t * D);
    /* V: 16-token groups at absolute positions along each feature, tokens >= s as 0 */
    for (int f = 0; f < RANK; f++)
        for (int g0 = 0; g0 < s; g0 += 16) {
            double x[16] = {0}, val[16], code[16];
            for (int i = 0; i < 16 && g0 + i < s; i++) x[i] = r->kv[(size_t)(g0 + i) * D + f];
            if (c->v == MLR_FQ_NVFP4) q_nvfp4(x, 16, r->vfac, 0, val, code);
            else q_row(c->v, x, 16, r->vfac, 0, val, code);
            for (int i = 0; i < 16 && g0 + i < s; i++)
                r->vval[(size_t)(g0 + i) * RANK + f] = val[i], r->vcode[(size_t)(g0 + i) * RANK + f] = code[i];
        }
}

static void free_req(req *r) {
    free(r->q), free(r->kv), free(r->kval), free(r->kcode), free(r->kref), free(r->vval), free(r->vcode);
}

/* QP of one tile's fp32 p[32] in kernel rounding (ref: the oracle's rounding points): values
 * and codes. */
static void quant_p(const dcase *c, double pfac, const double *p, int ref, double *val,
                    double *code) {
    if (c->p == MLR_FQ_NVFP4) {
        double pc[TILE];
        for (int j = 0; j < TILE; j++) pc[j] = to_16(p[j], c->fp16);
        q_nvfp4(pc, 16, pfac, ref, val, code);
        q_nvfp4(pc + 16, 16, pfac, ref, val + 16, code + 16);
    } else {
        q_row(c->p, p, TILE, pfac, ref, val, code);
    }
}

/* The oracle's P decisions of one head (its own float64 trajectory, mlr_fq_decode_request's
 * schedule): pcode[t] for t < s. */
static void ref_decisions(const dcase *c, const req *r, const double *q, double qk_scale,
                          double *pcode) {
    int s = r->s, tiles = (s + TILE - 1) / TILE, tps = (tiles + c->splits - 1) / c->splits;
    for (int i = 0; i < c->splits; i++) {
        int b0 = i * tps * TILE, b1 = b0 + tps * TILE;
        if (b1 > s) b1 = s;
        double m = -INFINITY;
        for (int t0 = b0; t0 < b1; t0 += TILE) {
            double sc[TILE], p[TILE], val[TILE], code[TILE], mx = -INFINITY;
            for (int j = 0; j < TILE; j++) {
                sc[j] = -INFINITY;
                if (t0 + j >= b1) continue;
                double dot = 0;
                for (int f = 0; f < D; f++) dot += q[f] * r->kref[(size_t)(t0 + j) * D + f];
                sc[j] = dot * qk_scale;
                mx = fmax(mx, sc[j]);
            }
            double mn = fmax(m, mx);
            for (int j = 0; j < TILE; j++) p[j] = sc[j] == -INFINITY ? 0 : exp2(sc[j] - mn);
            quant_p(c, r->pfac, p, 1, val, code);
            for (int j = 0; j < TILE && t0 + j < b1; j++) pcode[t0 + j] = code[j];
            m = mn;
        }
    }
}

/* fp32 butterfly sum of 32 lanes (warp_sum). */
static double warp_sum32(const double *x) {
    double v[32], w[32];
    memcpy(v, x, sizeof v);
    for (int d = 16; d > 0; d >>= 1) {
        for (int j = 0; j < 32; j++) w[j] = f32(v[j] + v[j ^ d]);
        memcpy(v, w, sizeof v);
    }
    return v[0];
}

/* The score of token t under form fm (log2 domain). */
static double emu_score(const form *fm, const dcase *c, const req *r, const double *q,
                        const double *qt, int nq, double qk_eff, int t) {
    const double *kv = r->kval + (size_t)t * D, *kc = r->kcode + (size_t)t * D;
    if (fm->cur) {
        double nope = 0, pe = 0;
        for (int f = 0; f < RANK; f++) nope = f32(nope + q[f] * kv[f]);
        for (int f = RANK; f < D; f++) pe = f32(pe + q[f] * kv[f]);
        return f32(f32(nope + pe) * qk_eff);
    }
    int k = fm->tf32 ? 8 : 16;
    double acc = 0, prod[16];
    for (int f0 = 0; f0 < D; f0 += k)
        for (int part = nq - 1; part >= 0; part--) {   /* the smallest part first */
            for (int i = 0; i < k; i++) prod[i] = qt[(size_t)(f0 + i) * 3 + part] * kc[f0 + i];
            acc = acc_step(fm->acc, acc, prod, k);
        }
    return f32(acc * qk_eff);
}

/* One head under form fm: out[RANK] (rounded to the out dtype), lse, the P codes. */
static void emu_head(const form *fm, const dcase *c, const req *r, const double *q,
                     double qk_scale, double *out, double *lse, double *pcode) {
    int s = r->s, tiles = (s + TILE - 1) / TILE, tps = (tiles + c->splits - 1) / c->splits;
    /* q's parts: exact in 16 bits unless q is fp32 */
    double qt[D * 3];
    int qinexact = c->q_fp32, nq = 1;
    for (int f = 0; f < D; f++) {
        qt[f * 3] = q[f], qt[f * 3 + 1] = qt[f * 3 + 2] = 0;
        if (qinexact && !fm->cur) nq = split_terms(fm, c->fp16, q[f], qt + f * 3);
    }
    double qk_eff = fm->cur ? qk_scale : f32(qk_scale * r->kfac);
    double pv_eff = f32(r->pfac * r->vfac);
    double M = -INFINITY, L = 0, A[RANK], acc[RANK];
    for (int f = 0; f < RANK; f++) A[f] = 0;
    for (int i = 0; i < c->splits; i++) {
        int b0 = i * tps * TILE, b1 = b0 + tps * TILE;
        if (b1 > s) b1 = s;
        double m = -INFINITY, l = 0;
        for (int f = 0; f < RANK; f++) acc[f] = 0;
        for (int t0 = b0; t0 < b1; t0 += TILE) {
            double sc[TILE], p[TILE], val[TILE], code[TILE], mx = -INFINITY;
            for (int j = 0; j < TILE; j++) {
                sc[j] = t0 + j < b1 ? emu_score(fm, c, r, q, qt, nq, qk_eff, t0 + j) : -INFINITY;
                mx = fmax(mx, sc[j]);
            }
            double mn = fmax(m, mx), cr = m == -INFINITY ? 0 : f32(exp2(f32(m - mn)));
            for (int j = 0; j < TILE; j++) p[j] = sc[j] == -INFINITY ? 0 : f32(exp2(f32(sc[j] - mn)));
            l = f32(f32(l * cr) + warp_sum32(p));
            quant_p(c, r->pfac, p, 0, val, code);
            for (int j = 0; j < TILE && t0 + j < b1; j++) pcode[t0 + j] = code[j];
            int n = b1 - t0 < TILE ? b1 - t0 : TILE;
            if (fm->cur) {
                for (int f = 0; f < RANK; f++) {
                    double a = f32(acc[f] * cr);
                    for (int j = 0; j < n; j++) a = f32(a + val[j] * r->vval[(size_t)(t0 + j) * RANK + f]);
                    acc[f] = a;
                }
            } else {
                /* A operand: P codes (exact), or the parts of the fp32 p (P none) */
                double pt[TILE][3] = {{0}};
                int np = 1;
                for (int j = 0; j < TILE; j++) {
                    pt[j][0] = c->p ? code[j] : p[j];
                    if (!c->p) np = split_terms(fm, c->fp16, p[j], pt[j]);
                }
                int k = fm->tf32 ? 8 : 16;
                for (int f = 0; f < RANK; f++) {
                    double a = f32(acc[f] * cr), prod[16];
                    for (int j0 = 0; j0 < TILE; j0 += k)
                        for (int part = np - 1; part >= 0; part--) {
                            for (int x = 0; x < k; x++)
                                prod[x] = j0 + x < n ? pt[j0 + x][part] * r->vcode[(size_t)(t0 + j0 + x) * RANK + f] : 0;
                            a = acc_step(fm->acc, a, prod, k);
                        }
                    acc[f] = a;
                }
            }
            m = mn;
        }
        if (!(l > 0)) continue;
        if (!fm->cur && pv_eff != 1)
            for (int f = 0; f < RANK; f++) acc[f] = f32(acc[f] * pv_eff);
        double nm = fmax(M, m), ca = M == -INFINITY ? 0 : f32(exp2(f32(M - nm))), cb = f32(exp2(f32(m - nm)));
        for (int f = 0; f < RANK; f++) A[f] = f32(f32(A[f] * ca) + f32(acc[f] * cb));
        L = f32(f32(L * ca) + f32(l * cb));
        M = nm;
    }
    for (int f = 0; f < RANK; f++) {
        double o = f32(A[f] / fmax(L, 1e-6));
        out[f] = c->out == 3 ? o : to_16(o, c->fp16);
    }
    *lse = L > 0 ? f32(M_LN2 * f32(M + f32(log2(L)))) : -INFINITY;
}

static void run_case(const dcase *c, int seeds, int splits_pair) {
    stats st[NFORMS];
    memset(st, 0, sizeof st);
    double qk_scale = f32(1.0 / sqrt((double)D) * LOG2E);
    int quant = c->k || c->v || c->p;
    double atol = quant ? 2e-2 : 5e-3, rtol = 5e-3;
    for (int sd = 0; sd < seeds; sd++) {
        rng g = {0x1234567ull + 7919ull * sd};
        for (int ri = 0; ri < c->nreq; ri++) {
            req r;
            int s = c->lens[ri];
            make_req(c, &g, s, &r);
            mlr_fq_decode_cfg cfg = {
                .heads = c->heads, .rank = RANK, .rope = ROPE, .splits = c->splits,
                .carrier_fp16 = c->fp16, .qk_scale = qk_scale, .k_mode = c->k, .v_mode = c->v,
                .p_mode = c->p, .k_amax = c->k_amax, .v_amax = c->v_amax, .p_amax = c->p_amax,
            };
            double *ro = malloc((size_t)c->heads * RANK * sizeof *ro), rl[64];
            double *rc = malloc((size_t)(s + 1) * sizeof *rc), *ec = malloc((size_t)(s + 1) * sizeof *ec);
            mlr_fq_decode_request(&cfg, r.q, r.kv, s, ro, rl);
            for (int h = 0; h < c->heads; h++) {
                const double *q = r.q + (size_t)h * D;
                if (c->p) ref_decisions(c, &r, q, qk_scale, rc);
                for (int fi = 0; fi < NFORMS; fi++) {
                    double out[RANK], lse;
                    emu_head(&FORMS[fi], c, &r, q, qk_scale, out, &lse, ec);
                    if (splits_pair) {   /* the same form with 1 split: the splits test */
                        dcase c1 = *c;
                        double o1[RANK], l1;
                        c1.splits = 1;
                        emu_head(&FORMS[fi], &c1, &r, q, qk_scale, o1, &l1, ec);
                        compare_row(&st[fi], o1, out, RANK, l1, lse, 1e-5, 1e-4);
                        continue;
                    }
                    compare_row(&st[fi], out, ro + (size_t)h * RANK, RANK, lse, rl[h], atol, rtol);
                    for (int t = 0; c->p && t < s; t++) st[fi].p_total++, st[fi].p_flip += ec[t] != rc[t];
                }
            }
            free(ro), free(rc), free(ec), free_req(&r);
        }
    }
    printf("\n### decode: %s%s\n\n", c->name, splits_pair ? " (splits 1 vs splits, 1e-5 + 1e-4|x|)" : "");
    printf("| formulation | QK cost | PV cost | rows | rows failing | worst err/tol | lse fails | P flips |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (int fi = 0; fi < NFORMS; fi++) {
        const form *fm = &FORMS[fi];
        char flips[64] = "-";
        if (c->p && !splits_pair)
            snprintf(flips, sizeof flips, "%ld / %ld (%.2g)", st[fi].p_flip, st[fi].p_total,
                     (double)st[fi].p_flip / st[fi].p_total);
        printf("| %s | %.0f | %.0f | %ld | %ld | %.3g | %ld | %s |\n", fm->name,
               form_cost(fm, c->q_fp32), form_cost(fm, c->p == 0), st[fi].rows, st[fi].rows_fail,
               st[fi].worst, st[fi].lse_fail, flips);
    }
    fflush(stdout);
}

int g_tc_extra = 0;

int main(int argc, char **argv) {
    if (getenv("FQTC_TC_EXTRA")) g_tc_extra = atoi(getenv("FQTC_TC_EXTRA"));
    int seeds = argc > 1 ? atoi(argv[1]) : 20;
    const double N = NAN;
    /* The sweep of tests/test_fakequant_decode_gpu.c (lens trimmed to the test's, heads as the
     * test), then the full recipe at amp sqrt 3, then fp32 q without the QDQ (not in the tests). */
    dcase cases[] = {
        {"bf16 none s32 lens 200/7/64", 0, 0, 16, 32, 0, 0, 0, N, N, 1, 0, 3, {200, 7, 64}, 4, 0},
        {"fp16 none s3 out fp32 lens 1000/33", 1, 0, 2, 3, 0, 0, 0, N, N, 1, 3, 2, {1000, 33}, 4, 0},
        {"bf16 p fp8", 0, 0, 16, 32, 0, 0, 1, N, N, 1, 0, 2, {200, 41}, 4, 0},
        {"bf16 p nvfp4", 0, 0, 16, 32, 0, 0, 2, N, N, 1, 0, 2, {200, 41}, 4, 0},
        {"fp16 p nvfp4 s2", 1, 0, 8, 2, 0, 0, 2, N, N, 1, 0, 2, {300, 77}, 4, 0},
        {"bf16 k fp8", 0, 0, 8, 32, 1, 0, 0, N, N, 1, 0, 2, {130, 17}, 4, 0},
        {"bf16 k nvfp4 amax 3", 0, 0, 8, 32, 2, 0, 0, 3, N, 1, 0, 2, {130, 17}, 4, 0},
        {"bf16 v fp8 amax 2", 0, 0, 8, 32, 0, 1, 0, N, 2, 1, 0, 2, {130, 17}, 4, 0},
        {"bf16 v nvfp4 tail", 0, 0, 8, 32, 0, 2, 0, N, N, 1, 0, 3, {129, 31, 5}, 4, 0},
        {"fp16 k fp8 + v nvfp4", 1, 0, 8, 32, 1, 2, 0, N, N, 1, 0, 2, {200, 50}, 4, 0},
        {"bf16 k nvfp4 + v fp8 + p fp8 s4", 0, 0, 8, 4, 2, 1, 1, N, N, 1, 0, 2, {200, 50}, 4, 0},
        {"bf16 all nvfp4 q fp32", 0, 1, 16, 32, 2, 2, 2, N, N, 1, 0, 2, {256, 100}, 4, 0},
        {"fp16 all fp8 amax 1/1/p 0.5 s8", 1, 0, 8, 8, 1, 1, 1, 1, 1, 0.5, 0, 2, {256, 100}, 4, 0},
        {"full recipe amp sqrt3", 0, 1, 16, 32, 2, 2, 2, N, N, 1, 0, 2, {300, 45}, 1.7320508075688772, 0},
        {"bf16 all nvfp4, fp32 q NOT quantized (outside the tests)", 0, 1, 16, 32, 2, 2, 2, N, N, 1, 0, 2, {256, 100}, 4, 1},
        {"bf16 none, fp32 q NOT quantized (outside the tests)", 0, 1, 16, 32, 0, 0, 0, N, N, 1, 0, 2, {256, 100}, 4, 1},
    };
    int only = argc > 2 ? atoi(argv[2]) : -1;   /* one case (the splits pair: the count) */
    int nc = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < nc; i++)
        if (only < 0 || only == i) run_case(&cases[i], seeds, 0);
    if (only >= 0 && only != nc) return 0;
    dcase sp = {"no quant len 700 H8 out fp32", 0, 0, 8, 32, 0, 0, 0, N, N, 1, 3, 1, {700}, 4, 0};
    run_case(&sp, seeds, 1);
    return 0;
}
