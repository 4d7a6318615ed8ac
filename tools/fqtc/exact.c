/* Exhaustive check of the exactness arguments of docs/fakequant-tensorcore-plan.md: which
 * fake-quantized operand values a 16-bit (bf16 / fp16) or tf32 MMA operand holds exactly. */
#include <stdio.h>
#include <string.h>

#include "arith.h"
#include "ref/fakequant_ref.h"

int g_tc_extra = 0;

static const double E2M1[8] = {0, .5, 1, 1.5, 2, 3, 4, 6};

/* Every finite non-negative E4M3 value (0, subnormals 2^-9 k, normals up to 448). */
static int e4m3_values(double *v) {
    int n = 0;
    for (int e = -6; e <= 8; e++)
        for (int m = 0; m < 8; m++) {
            double x = ldexp(1 + m / 8.0, e);
            if (x <= 448) v[n++] = x;
        }
    for (int m = 0; m < 8; m++) v[n++] = ldexp(m, -9);
    return n;
}

static int exact16(double x) { return to_bf16(x) == x && to_fp16(x) == x && to_tf32(x) == x; }


/* E2M1 decision by comparisons against t_k * sb (exact products, no division): the same as
 * e2m1(fl32(x / sb)) for every 16-bit x and every E4M3 block scale sb (gs = 1)? */
static double by_compare(double x, double sb) {
    static const double T[7] = {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5};
    static const int LE[7] = {1, 0, 1, 0, 1, 0, 1};   /* <= (tie to the even lower) or < */
    static const double V[8] = {0, .5, 1, 1.5, 2, 3, 4, 6};
    int k = 0;
    while (k < 7 && !(LE[k] ? x <= T[k] * sb : x < T[k] * sb)) k++;
    return V[k];
}

static void check_compare(void) {
    double e4[256];
    int n = e4m3_values(e4);
    long tot = 0, bad = 0;
    for (int fp16 = 0; fp16 < 2; fp16++)
        for (unsigned u = 1; u < 0x7c00u + (fp16 ? 0 : 0x380u); u++) {
            double x;
            if (fp16) {
                int e = (u >> 10) & 31, m = u & 1023;
                x = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
            } else {
                float f;
                unsigned w = u << 16;
                memcpy(&f, &w, 4);
                x = f;
            }
            for (int i = 1; i < n; i++) {
                double sb = e4[i];
                double ref = mlr_fq_e2m1_mag(f32(x / sb));
                tot++, bad += by_compare(x, sb) != ref;
            }
        }
    printf("E2M1 by comparison with t_k sb (no division) vs e2m1(fl32(x / sb)), every bf16 and fp16 x > 0 "
           "x every E4M3 sb > 0 (gs = 1): %ld of %ld differ\n", bad, tot);
}

int main(void) {
    check_compare();
    double e4[256];
    int n = e4m3_values(e4), bad = 0, total = 0;
    for (int i = 0; i < n; i++) total++, bad += !exact16(e4[i]);
    printf("E4M3 values (fp8 codes, NVFP4 block-scale codes): %d of %d not exact in bf16/fp16/tf32\n", bad, total);
    bad = total = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < 8; j++) total++, bad += !exact16(E2M1[j] * e4[i]);
    printf("E2M1 x E4M3 products (NVFP4 codes, gs factored out): %d of %d not exact in bf16/fp16/tf32\n", bad, total);
    /* dequantized values with a non-power-of-two per-tensor scale, as the oracle forms them */
    double amaxes[] = {3, 2, 6, 8, 0.5, 1, 5};
    for (int a = 0; a < 7; a++) {
        double sc = f32(amaxes[a] / 448), gs = f32(amaxes[a] / 2688);
        int b8 = 0, b4 = 0, t8 = 0, t4 = 0;
        for (int i = 0; i < n; i++) {
            t8++, b8 += to_bf16(e4[i] * sc) != e4[i] * sc;
            for (int j = 0; j < 8; j++) {
                double sb = f32(e4[i] * gs), x = E2M1[j] * sb;
                t4++, b4 += to_bf16(x) != x;
            }
        }
        printf("amax %-4g: fp8 code*sc not bf16-exact %d/%d; nvfp4 e2m1*fl32(e4m3*gs) not bf16-exact %d/%d\n",
               amaxes[a], b8, t8, b4, t4);
    }
    /* the decode q carrier: nvfp4_qdq(q, None) of fp32 rows; random rows */
    unsigned long long s = 12345;
    long cnt = 0, nb = 0;
    for (int r = 0; r < 20000; r++) {
        double x[576], y[576];
        for (int f = 0; f < 576; f++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            double u = (double)(s >> 11) / 9007199254740992.0;
            x[f] = f32((r % 7 + 0.1) * (2 * u - 1) * ldexp(1, r % 13 - 6));
        }
        mlr_fq_qdq_row(MLR_FQ_NVFP4, x, 576, NAN, y);
        for (int f = 0; f < 576; f++) cnt++, nb += !exact16(y[f]);
    }
    printf("decode q carrier nvfp4_qdq(q, None), %ld values over amplitudes 2^-6..2^6: %ld not exact in bf16/fp16/tf32\n", cnt, nb);
    printf("products: bf16 x code <= 8+6 = 14 significant bits, fp16 x code <= 17, code x code <= 12:\n"
           "exact in fp32 (normal range: |bf16| >= 2^-116 for bf16 inputs; always for fp16)\n");
    return 0;
}
