/* Bit-exact CPU emulation of the arithmetic a tensor-core fake-quant kernel would do
 * (tools/fqtc, the design study of docs/fakequant-tensorcore-plan.md). Every value is held in a
 * double that is exactly representable in the format it stands for. */
#ifndef MLAJIT_TOOLS_FQTC_ARITH_H
#define MLAJIT_TOOLS_FQTC_ARITH_H

#include <math.h>
#include <stdint.h>

/* fp32 round to nearest even (the double's cast). */
static inline double f32(double x) { return (double)(float)x; }

/* fp32 round toward zero. */
static inline double rz32(double x) {
    float f = (float)x;
    if (fabs((double)f) > fabs(x)) f = nextafterf(f, 0.f);
    return (double)f;
}

/* Round to `bits` significant bits, quantum at least 2^min_q; ties even (away: ties away). */
static inline double round_sig(double x, int bits, int min_q, int away) {
    if (x == 0 || !isfinite(x)) return x;
    int e;
    frexp(x, &e);
    int q = e - bits;
    if (q < min_q) q = min_q;
    double y = ldexp(x, -q);
    double r = away ? round(y) : nearbyint(y);
    return ldexp(r, q);
}

static inline double to_bf16(double x) { return round_sig(x, 8, -133, 0); }
static inline double to_fp16(double x) {
    double r = round_sig(x, 11, -24, 0);
    return fabs(r) > 65504 ? copysign(INFINITY, r) : r;
}
static inline double to_16(double x, int fp16) { return fp16 ? to_fp16(x) : to_bf16(x); }
/* cvt.rna.tf32.f32: 11 significant bits, ties away from zero. */
static inline double to_tf32(double x) { return round_sig(x, 11, -136, 1); }

/* ---- accumulation models of one MMA k-step ------------------------------------------------
 * acc + sum_i t[i] with every t[i] an exact product.
 *   ACC_SEQ: IEEE fp32, sequential round-to-nearest (a chain of fmaf; what the portable kernel
 *            does).
 *   ACC_TC:  the tensor-core model of Fasi et al. (2021) for A100/H100 fp16/bf16/tf32 MMA: the
 *            products and the accumulator are aligned to the largest exponent among them and
 *            truncated to 24 + TC_EXTRA bits below it (toward zero), summed exactly, and the sum
 *            is truncated to fp32. Pessimistic with TC_EXTRA = 0. */
enum { ACC_SEQ = 0, ACC_TC = 1 };
extern int g_tc_extra;

static inline double acc_step(int model, double acc, const double *t, int n) {
    if (model == ACC_SEQ) {
        for (int i = 0; i < n; i++) acc = f32(acc + t[i]);
        return acc;
    }
    double mx = fabs(acc);
    for (int i = 0; i < n; i++) mx = fmax(mx, fabs(t[i]));
    if (mx == 0) return 0;
    int e;
    frexp(mx, &e);                          /* mx in [2^(e-1), 2^e) */
    double quantum = ldexp(1.0, e - 1 - 23 - g_tc_extra);
    double s = trunc(acc / quantum);        /* exact: integers below 2^(24 + extra + 1) */
    for (int i = 0; i < n; i++) s += trunc(t[i] / quantum);
    return rz32(s * quantum);
}

/* Dot of a[] (the operand terms) and b[] over n in k-steps of `k`, chained into acc. */
static inline double dot_chain(int model, int k, double acc, const double *a, const double *b,
                               int n) {
    double t[32];
    for (int c = 0; c < n; c += k) {
        int m = n - c < k ? n - c : k;
        for (int i = 0; i < m; i++) t[i] = a[c + i] * b[c + i];
        acc = acc_step(model, acc, t, m);
    }
    return acc;
}

#endif
