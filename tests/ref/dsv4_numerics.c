/* Float64 scalar helpers of the DSV4 reference (see dsv4_numerics.h), line by line from
 * spec/dsv4.md §2.0 (bf16, e4m3, ue8m0_for, quant_group, rmsnorm), §2.3 (rope, write_kv_row) and
 * §3.3 (sfatom_off). */
#include "ref/dsv4_numerics.h"

#include <math.h>
#include <string.h>

/* ---- bfloat16 ----------------------------------------------------------------------------- */

uint16_t mlr_bf16_bits(double x) {
    float f = (float)x; /* RNE onto float32 */
    uint32_t u;
    memcpy(&u, &f, 4);
    if (isnan(f)) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7FFFu + ((u >> 16) & 1u); /* RNE of the low 16 bits */
    return (uint16_t)(u >> 16);
}

double mlr_bf16_decode(uint16_t bits) {
    uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

double mlr_bf16(double x) { return mlr_bf16_decode(mlr_bf16_bits(x)); }

void mlr_bf16_store(uint8_t *p, uint16_t bits) {
    p[0] = (uint8_t)(bits & 0xFF), p[1] = (uint8_t)(bits >> 8);
}

uint16_t mlr_bf16_load(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

/* ---- float8_e4m3fn and ue8m0 -------------------------------------------------------------- */

/* floor(log2(a)) for a > 0, exactly. */
static int floor_log2(double a) {
    int e;
    frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
    return e - 1;
}

double mlr_e4m3(double x) {
    double a = fabs(x), s = signbit(x) ? -1.0 : 1.0;
    if (a >= 448.0) return s * 448.0;
    double q = a < ldexp(1.0, -6) ? ldexp(1.0, -9) : ldexp(1.0, floor_log2(a) - 3);
    return s * nearbyint(a / q) * q; /* nearbyint: round half to even in the default mode */
}

uint8_t mlr_e4m3_encode(double x) {
    double v = mlr_e4m3(x), a = fabs(v);
    uint8_t sign = signbit(x) ? 0x80 : 0x00;
    if (a < ldexp(1.0, -6)) return sign | (uint8_t)(a / ldexp(1.0, -9)); /* subnormal, 0 */
    int e = floor_log2(a);
    int man = (int)(a / ldexp(1.0, e) * 8.0) - 8;
    return sign | (uint8_t)(((e + 7) << 3) | man);
}

double mlr_e4m3_decode(uint8_t b) {
    int exp = (b >> 3) & 15, man = b & 7;
    double s = (b & 0x80) ? -1.0 : 1.0;
    if ((b & 0x7F) == 0x7F) return NAN;
    if (exp == 0) return s * man / 8.0 * ldexp(1.0, -6);
    return s * (1.0 + man / 8.0) * ldexp(1.0, exp - 7);
}

double mlr_ue8m0_decode(uint8_t b) { return b == 255 ? NAN : ldexp(1.0, (int)b - 127); }

uint8_t mlr_ue8m0_for(double amax, double *scale) {
    double v = fmax(amax, 1e-4) / 448.0;
    int e;
    double m = frexp(v, &e);       /* v = m * 2^e, m in [0.5, 1) */
    int c = m == 0.5 ? e - 1 : e;  /* exact ceil(log2(v)) */
    c = c < -127 ? -127 : c > 127 ? 127 : c;
    if (scale) *scale = ldexp(1.0, c);
    return (uint8_t)(c + 127);
}

void mlr_quant_group(const double *x, int64_t n, int g, double *deq, uint8_t *q, uint8_t *sf) {
    for (int64_t i0 = 0; i0 < n; i0 += g) {
        double amax = 0, s;
        for (int i = 0; i < g; i++) amax = fmax(amax, fabs(x[i0 + i]));
        uint8_t byte = mlr_ue8m0_for(amax, &s);
        if (sf) sf[i0 / g] = byte;
        for (int i = 0; i < g; i++) {
            double v = fmin(fmax(x[i0 + i] / s, -448.0), 448.0);
            if (q) q[i0 + i] = mlr_e4m3_encode(v);
            if (deq) deq[i0 + i] = mlr_e4m3(v) * s;
        }
    }
}

/* ---- norms and RoPE ----------------------------------------------------------------------- */

void mlr_rmsnorm(const double *x, const uint16_t *w, int n, double eps, double *out) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * r * (w ? mlr_bf16_decode(w[i]) : 1.0);
}

void mlr_rope(const double *v, const float *f, int inverse, double *out) {
    for (int i = 0; i < 32; i++) {
        double c = f[2 * i], s = inverse ? -(double)f[2 * i + 1] : f[2 * i + 1];
        double a = v[2 * i], b = v[2 * i + 1];
        out[2 * i] = a * c - b * s;
        out[2 * i + 1] = a * s + b * c;
    }
}

/* ---- layouts ------------------------------------------------------------------------------ */

int64_t mlr_sfatom_off(int64_t n, int64_t kb, int64_t KB) {
    int64_t nKa = (KB + 3) / 4;
    return ((n / 128) * nKa + kb / 4) * 512 + (n % 32) * 16 + ((n % 128) / 32) * 4 + (kb % 4);
}

int64_t mlr_kv_row_off(int64_t B, int64_t page_stride, int64_t slot) {
    return (slot / B) * page_stride + (slot % B) * MLR_DSV4_ROW;
}

int64_t mlr_kv_scale_off(int64_t B, int64_t page_stride, int64_t slot) {
    return (slot / B) * page_stride + B * MLR_DSV4_ROW + (slot % B) * MLR_DSV4_SLOT;
}

void mlr_write_kv_row(uint8_t *cache, int64_t B, int64_t page_stride, int64_t slot,
                      const double *y) {
    uint8_t *data = cache + mlr_kv_row_off(B, page_stride, slot);
    uint8_t *sc = cache + mlr_kv_scale_off(B, page_stride, slot);
    for (int c = 0; c < 7; c++) {
        double amax = 0, s;
        for (int i = 0; i < 64; i++) amax = fmax(amax, fabs(y[64 * c + i]));
        sc[c] = mlr_ue8m0_for(amax, &s);
        for (int i = 0; i < 64; i++)
            data[64 * c + i] = mlr_e4m3_encode(fmin(fmax(y[64 * c + i] / s, -448.0), 448.0));
    }
    sc[7] = 0;
    for (int i = 0; i < 64; i++) mlr_bf16_store(data + 448 + 2 * i, mlr_bf16_bits(y[448 + i]));
}

void mlr_decode_kv_row(const uint8_t *cache, int64_t B, int64_t page_stride, int64_t slot,
                       double *out) {
    const uint8_t *data = cache + mlr_kv_row_off(B, page_stride, slot);
    const uint8_t *sc = cache + mlr_kv_scale_off(B, page_stride, slot);
    for (int i = 0; i < 448; i++) out[i] = mlr_e4m3_decode(data[i]) * mlr_ue8m0_decode(sc[i / 64]);
    for (int i = 0; i < 64; i++) out[448 + i] = mlr_bf16_decode(mlr_bf16_load(data + 448 + 2 * i));
}
