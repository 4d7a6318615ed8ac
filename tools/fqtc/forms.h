/* The candidate formulations of one BMM and the shared bookkeeping of the study. */
#ifndef MLAJIT_TOOLS_FQTC_FORMS_H
#define MLAJIT_TOOLS_FQTC_FORMS_H

#include <stdio.h>
#include <string.h>

#include "arith.h"

typedef struct form {
    const char *name;
    int cur;     /* 1: the current portable kernel: fp32 operands with the scales multiplied in,
                    fmaf chains in the kernel's order */
    int acc;     /* ACC_SEQ or ACC_TC for the MMA forms */
    int terms;   /* the fp32 operand (decode q, P none) as a sum of this many 16-bit (tf32) parts */
    int tf32;    /* tf32 MMA (k-step 8, half the bf16 rate on H100/H200) instead of bf16/fp16 */
} form;

static const form FORMS[] = {
    {"fp32 FMA (current kernel)", 1, ACC_SEQ, 0, 0},
    {"16-bit MMA", 0, ACC_TC, 1, 0},
    {"16-bit MMA, IEEE-seq accumulation", 0, ACC_SEQ, 1, 0},
    {"16-bit x2 split (hi+lo)", 0, ACC_TC, 2, 0},
    {"16-bit x3 split", 0, ACC_TC, 3, 0},
    {"tf32 MMA", 0, ACC_TC, 1, 1},
    {"2xtf32 split", 0, ACC_TC, 2, 1},
};
#define NFORMS ((int)(sizeof FORMS / sizeof FORMS[0]))

/* The parts of an fp32 value a (the rounding of each remainder), largest first. */
static inline int split_terms(const form *fm, int fp16, double a, double *t) {
    double r = a;
    for (int i = 0; i < fm->terms; i++) {
        t[i] = fm->tf32 ? to_tf32(r) : to_16(r, fp16);
        if (!isfinite(t[i])) t[i] = 0;   /* fp16 overflow of a part: not representable */
        r -= t[i];
    }
    return fm->terms;
}

/* MMA count of a product relative to one 16-bit MMA: inexact: whether one operand is fp32. */
static inline double form_cost(const form *fm, int inexact) {
    if (fm->cur) return 0;
    return (inexact ? fm->terms : 1) * (fm->tf32 ? 2.0 : 1.0);
}

/* Accumulated counts of one (case, form). */
typedef struct stats {
    long rows, rows_fail, elems, elems_fail, lse_fail;
    double worst;                /* max |err| / (atol + rtol |ref|) */
    long p_total, p_flip;        /* P decisions compared, differing */
    long nm_groups, nm_flip, nm_flip_unguarded, nm_ambiguous;
    long rows_skipped;           /* rows the N:M guard leaves out */
} stats;

/* A deterministic source with the tests' generator (splitmix64, tests/util/gpu.c). */
typedef struct rng { uint64_t s; } rng;
static inline uint64_t rng_u64(rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline double rng_unif(rng *r) { return (double)(rng_u64(r) >> 11) * (1.0 / 9007199254740992.0); }

/* Compares one row: out[n] and lse against ref with the test's tolerances. */
static inline void compare_row(stats *st, const double *got, const double *ref, int n, double gl,
                               double rl, double atol, double rtol) {
    int bad = 0;
    for (int j = 0; j < n; j++) {
        double tol = atol + rtol * fabs(ref[j]), err = fabs(got[j] - ref[j]);
        if (err / tol > st->worst) st->worst = err / tol;
        if (!(err <= tol)) bad = 1, st->elems_fail++;
    }
    int lok = isinf(rl) ? gl == rl : fabs(gl - rl) <= 1e-3 + 1e-5 * fabs(rl);
    if (!lok) st->lse_fail++, bad = 1;
    st->rows++, st->elems += n, st->rows_fail += bad;
}

#endif
