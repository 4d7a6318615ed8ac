/* CPU checks of the float64 prefill references (tests/ref/fakequant_ref.c) against the spec's
 * own statements (§2.3, §3): without quantization or sparsity the block_n schedule is plain
 * softmax attention, whatever block_n; N:M keeps exactly N (lowest index first) under ties for
 * M = 4 and every tie for M = 8, masked keys never displace finite ones, dense keys keep their
 * score; P quantization makes the result depend on block_n. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "ref/fakequant_ref.h"
#include "util/gpu.h"

static void fill(double *x, size_t n, mlt_rng *g) {
    for (size_t i = 0; i < n; i++) x[i] = 2 * mlt_rng_uniform(g) - 1;
}

static double run(const mlr_fq_prefill_cfg *c, int dense, const double *q, int ql, const double *k,
                  const double *v, int kl, double *out, double *lse) {
    int rc = dense ? mlr_fq_prefill_dense(c, q, ql, k, v, kl, out, lse, ql)
                   : mlr_fq_prefill_seq(c, q, ql, k, v, kl, out, lse, ql);
    cr_assert(rc == 0, "reference: out of memory");
    return 0;
}

Test(fakequant_prefill_ref, schedule_without_quant_is_softmax) {
    enum { QL = 21, KL = 75, H = 4, HKV = 2, DQK = 32, DV = 16 };
    mlt_rng g;
    mlt_rng_init(&g, 7);
    static double q[QL * H * DQK], k[KL * HKV * DQK], v[KL * HKV * DV];
    static double o1[QL * H * DV], o2[QL * H * DV], l1[H * QL], l2[H * QL];
    fill(q, sizeof q / sizeof q[0], &g), fill(k, sizeof k / sizeof k[0], &g);
    fill(v, sizeof v / sizeof v[0], &g);
    for (int causal = 0; causal <= 1; causal++)
        for (int bn = 16; bn <= 128; bn *= 2) {
            mlr_fq_prefill_cfg c = {H, HKV, DQK, DV, causal, bn, 0, 0.3, 0, 0, 0, 0, NAN, NAN, 1,
                                    NAN, 0, 4, 0, 64};
            run(&c, 0, q, QL, k, v, KL, o1, l1);
            run(&c, 1, q, QL, k, v, KL, o2, l2);
            for (int i = 0; i < QL * H * DV; i++)
                cr_assert(fabs(o1[i] - o2[i]) < 1e-12, "causal %d block_n %d: out[%d] %.17g vs "
                          "softmax %.17g", causal, bn, i, o1[i], o2[i]);
            for (int i = 0; i < H * QL; i++)
                cr_assert(fabs(l1[i] - l2[i]) < 1e-12, "causal %d block_n %d: lse[%d] %.17g vs "
                          "%.17g", causal, bn, i, l1[i], l2[i]);
        }
}

Test(fakequant_prefill_ref, nm_rules) {
    double s[8] = {1, 1, 1, 1, 2, 2, 2, 2};
    mlr_fq_apply_nm(s, NULL, 8, 2, 4);   /* two tied groups of 4: keep indices 0, 1 and 4, 5 */
    for (int j = 0; j < 8; j++)
        cr_expect((j % 4 < 2) == isfinite(s[j]), "2:4 ties: key %d kept %d", j, isfinite(s[j]) != 0);
    double t[8] = {3, 3, 3, 1, 3, 0, 0, 0};
    mlr_fq_apply_nm(t, NULL, 8, 2, 8);   /* threshold 3: all four 3s kept */
    for (int j = 0; j < 8; j++)
        cr_expect((t[j] == 3) == isfinite(t[j]), "2:8 ties: key %d kept %d", j, isfinite(t[j]) != 0);
    double u[4] = {-INFINITY, -INFINITY, -5, -INFINITY};
    mlr_fq_apply_nm(u, NULL, 4, 1, 4);   /* the one finite key survives 1:4 */
    cr_expect(u[2] == -5, "1:4 with masked neighbours: the finite key was dropped");
    double w[8] = {-INFINITY, 1, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    mlr_fq_apply_nm(w, NULL, 8, 3, 8);   /* fewer than N finite: everything kept */
    cr_expect(w[1] == 1, "3:8 with one finite key: dropped");
    double x[4] = {4, 3, 2, 1};
    int dense[4] = {0, 0, 0, 1};
    mlr_fq_apply_nm(x, dense, 4, 1, 4);
    cr_expect(x[0] == 4 && isinf(x[1]) && isinf(x[2]) && x[3] == 1, "1:4 with a dense key: got "
              "%g %g %g %g", x[0], x[1], x[2], x[3]);
}

Test(fakequant_prefill_ref, p_quant_depends_on_block_n) {
    enum { QL = 16, KL = 200, DQK = 64, DV = 32 };
    mlt_rng g;
    mlt_rng_init(&g, 11);
    static double q[QL * DQK], k[KL * DQK], v[KL * DV], o1[QL * DV], o2[QL * DV], l[QL];
    fill(q, QL * DQK, &g), fill(k, KL * DQK, &g), fill(v, KL * DV, &g);
    for (int i = 0; i < QL * DQK; i++) q[i] *= 4;
    for (int mode = 1; mode <= 2; mode++) {
        mlr_fq_prefill_cfg c = {1, 1, DQK, DV, 1, 16, 0, 0.18, 0, 0, mode, 0, NAN, NAN, 1, NAN,
                                0, 4, 0, 64};
        run(&c, 0, q, QL, k, v, KL, o1, l);
        c.block_n = 128;
        run(&c, 0, q, QL, k, v, KL, o2, l);
        double d = 0;
        for (int i = 0; i < QL * DV; i++) d = fmax(d, fabs(o1[i] - o2[i]));
        cr_expect(d > 1e-4, "p mode %d: block_n 16 and 128 agree (max diff %.3g)", mode, d);
    }
}
