/* The fake quantizers twice: as the kernels round (fp32, kernel_src/fakequant/quant.cuh) and as
 * the float64 oracle rounds (tests/ref/fakequant_ref.c), each returning the dequantized value
 * and the "code": the value without its per-tensor factor (sc for fp8, gs for NVFP4), which is
 * what a tensor-core kernel would feed to the MMA (E4M3 value, or E2M1 value times the E4M3 block
 * scale). The code identifies the quantization decision. */
#ifndef MLAJIT_TOOLS_FQTC_QUANT_H
#define MLAJIT_TOOLS_FQTC_QUANT_H

#include "arith.h"
#include "ref/fakequant_ref.h"

/* Per-tensor factor as the host passes it (fp32); NAN: 1. */
static inline double fq_factor(int mode, double amax) {
    if (mode == MLR_FQ_NONE || isnan(amax)) return 1.0;
    return f32(amax / (mode == MLR_FQ_FP8 ? 448.0 : 2688.0));
}

/* Kernel fp8: code = E4M3(clamp(fl32(x / sc))); value = fl32(code sc). */
static inline void k_fp8(double x, double sc, double *val, double *code) {
    double v = f32(x / sc);
    v = v > 448 ? 448 : v < -448 ? -448 : v;
    *code = mlr_fq_rne_e4m3(v);
    *val = f32(*code * sc);
}

/* Kernel NVFP4 block of n <= 16 (ref != 0: the oracle's rounding points instead). */
static inline void q_nvfp4(const double *x, int n, double gs, int ref, double *val, double *code) {
    double bamax = 0;
    for (int i = 0; i < n; i++) bamax = fmax(bamax, fabs(x[i]));
    double q = ref ? bamax / (6 * gs) : f32(bamax / f32(6 * gs));
    double sbc = mlr_fq_rne_e4m3(fmin(q, 448.0)), sb = f32(sbc * gs);
    for (int i = 0; i < n; i++) {
        double e = sb == 0 ? 0 : mlr_fq_e2m1_mag(f32(fabs(x[i]) / sb));
        double sg = x[i] < 0 ? -1 : 1;
        val[i] = sg * (ref ? e * sb : f32(e * sb));
        code[i] = sb == 0 ? 0 : sg * e * sbc;
    }
}

/* A row of n along its axis (NVFP4: blocks of 16), kernel or oracle rounding. */
static inline void q_row(int mode, const double *x, int n, double fac, int ref, double *val,
                         double *code) {
    if (mode == MLR_FQ_NVFP4) {
        for (int i = 0; i < n; i += 16)
            q_nvfp4(x + i, n - i < 16 ? n - i : 16, fac, ref, val + i, code + i);
    } else if (mode == MLR_FQ_FP8) {
        for (int i = 0; i < n; i++) k_fp8(x[i], fac, val + i, code + i);
    } else {
        for (int i = 0; i < n; i++) val[i] = code[i] = x[i];
    }
}

#endif
