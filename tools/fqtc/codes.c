/* Checks the fast quantizer pieces of the tensor-core decode (kernel_src/fakequant/
 * decode_mma_codes.cuh) against quant.cuh's, on the CPU with IEEE binary32 arithmetic (build
 * with -ffp-contract=off so that every operation rounds where the device's intrinsics do):
 *   1. e2m1_mag_fast == e2m1_mag for all 2^32 bit patterns >= +0 and every NaN;
 *   2. div_rcp (x * RN(1/b), one fma correction) gives the same E4M3 code (after the +-448
 *      clamp, either sign) and E2M1 magnitude as the IEEE quotient for every finite bf16 and
 *      fp16 x against every NVFP4 block scale fl32(e4m3 * amax / 2688) and fp8 scale
 *      amax / 448 of 13 amaxes (None = 2688 / 448 scale 1 included), and the same quotient for
 *      1e8 random fp32 p in (2^-31, 1] against 5 fp8 P scales;
 *   3. the NVFP4 block-scale decision rne_e4m3(min(bamax / (6 gs), 448)) through div_rcp with
 *      y = RN(1 / fl32(6 gs)) equals the IEEE one for every finite 16-bit bamax >= 0 and the
 *      13 amaxes' gs = amax / 2688.
 * Prints the mismatch counts (all 0 expected). make -C tools/fqtc codes && ./codes */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static float e2m1_mag(float a) {   /* quant.cuh */
    if (a <= 0.25f) return 0.f;
    if (a < 0.75f) return 0.5f;
    if (a <= 1.25f) return 1.f;
    if (a < 1.75f) return 1.5f;
    if (a <= 2.5f) return 2.f;
    if (a < 3.5f) return 3.f;
    if (a <= 5.f) return 4.f;
    return 6.f;
}
static float e2m1_mag_fast(float a) {   /* decode_mma_codes.cuh */
    uint32_t u = f2u(a);
    u = (u + 0x1fffffu + ((u >> 22) & 1u)) & 0xffc00000u;
    return a < 1.f ? rintf(a * 2.f) * 0.5f : a < 6.f ? u2f(u) : 6.f;
}
static float rne_e4m3(float a) {   /* quant.cuh, |a| <= 448 */
    float m = fabsf(a);
    if (m == 0) return 0;
    int e;
    frexpf(m, &e);
    e -= 1;
    if (e < -6) e = -6;
    float q = ldexpf(1.f, e - 3), r = rintf(m / q) * q;
    if (r > 448) r = 448;
    return a < 0 ? -r : r;
}
static float fp8_decision(float q) { return rne_e4m3(fminf(fmaxf(q, -448.f), 448.f)); }
static float div_rcp(float x, float b, float y) {   /* decode_mma_codes.cuh, y = RN(1 / b) */
    if (!(y < INFINITY)) return x / b;
    float q0 = x * y, q1 = fmaf(fmaf(-q0, b, x), y, q0);
    return fabsf(q0) == INFINITY ? q0 : q1;
}
static float bf16(uint16_t b) { return u2f((uint32_t)b << 16); }
static float fp16(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);
    return h >> 15 ? -v : v;
}

static long check_scale(float b, long *n) {
    float y = 1.0f / b;
    long bad = 0;
    for (int t = 0; t < 2; t++)
        for (uint32_t u = 0; u < 65536; u++) {
            float x = t ? bf16((uint16_t)u) : fp16((uint16_t)u);
            if (!isfinite(x)) continue;
            float a = fabsf(x), want = a / b, got = div_rcp(a, b, y);
            (*n)++;
            if (f2u(e2m1_mag(want)) != f2u(e2m1_mag(got)) ||
                f2u(fp8_decision(x / b)) != f2u(fp8_decision(div_rcp(x, b, y))))
                bad++;
        }
    return bad;
}

int main(void) {
    long bad1 = 0;
    for (uint64_t u = 0; u <= 0xffffffffull; u++) {
        float a = u2f((uint32_t)u);
        if (!(a >= 0.f) && !isnan(a)) continue;
        if (u == 0x80000000u) continue;   /* -0: callers pass fabsf(x) / sb */
        if (f2u(e2m1_mag(a)) != f2u(e2m1_mag_fast(a))) bad1++;
    }
    printf("e2m1_mag_fast: %ld mismatches\n", bad1);

    float e4m3[128];
    int ne = 0;
    for (int e = 0; e < 16; e++)
        for (int m = 0; m < 8; m++) {
            if (e == 15 && m == 7) continue;
            float v = e ? ldexpf(1.0f + m / 8.0f, e - 7) : ldexpf(m / 8.0f, -6);
            if (v > 0) e4m3[ne++] = v;
        }
    static const float amaxes[] = {2688, 1, 2, 3, 4, 5, 6, 0.5f, 0.1f, 7.3f, 100.f, 1e-3f, 1234.5f};
    long bad2 = 0, n2 = 0;
    for (size_t a = 0; a < sizeof amaxes / sizeof amaxes[0]; a++) {
        volatile float am = amaxes[a];
        float gs = am / 2688.0f, sc8 = am / 448.0f;
        for (int i = 0; i < ne; i++) bad2 += check_scale(e4m3[i] * gs, &n2);
        bad2 += check_scale(sc8, &n2);
    }
    printf("div_rcp, 16-bit x: decisions differ in %ld of %ld\n", bad2, n2);

    long bad4 = 0, n4 = 0;
    for (size_t a = 0; a < sizeof amaxes / sizeof amaxes[0]; a++) {
        volatile float am = amaxes[a];
        float gs = am / 2688.0f, b = 6.0f * gs, y = 1.0f / b;
        for (int t = 0; t < 2; t++)
            for (uint32_t u = 0; u < 32768; u++, n4++) {
                float x = t ? bf16((uint16_t)u) : fp16((uint16_t)u);
                if (!isfinite(x)) continue;
                if (f2u(rne_e4m3(fminf(x / b, 448.f))) != f2u(rne_e4m3(fminf(div_rcp(x, b, y), 448.f))))
                    bad4++;
            }
    }
    printf("div_rcp, block scales: decisions differ in %ld of %ld\n", bad4, n4);

    uint64_t s = 88172645463325252ull;
    long bad3 = 0, n3 = 0;
    static const float pam[] = {1.0f, 0.5f, 2.0f, 0.37f, 3.3f};
    for (int a = 0; a < 5; a++) {
        volatile float am = pam[a];
        float sc = am / 448.0f, y = 1.0f / sc;
        for (long i = 0; i < 20000000; i++, n3++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            float x = u2f(0x30000000u + (uint32_t)(s % (0x3f800001u - 0x30000000u)));
            if (f2u(x / sc) != f2u(div_rcp(x, sc, y))) bad3++;
        }
    }
    printf("div_rcp, fp32 p: quotients differ in %ld of %ld\n", bad3, n3);
    return bad1 || bad2 || bad3 || bad4;
}
