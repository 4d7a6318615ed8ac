/* Exact quantizer tests of the fake-quant family (spec/fakequant.md §2.1, §5 test plan).
 *
 * reference: the float64 quantizers against hand-computed values (E4M3 ties, saturation and
 * subnormals, every E2M1 threshold and +-0, NVFP4 blocks with amax None and calibrated, an
 * underflowing block, the saturated-scale path, mixed signs, the non-idempotent value of §5).
 * device: mla_fakequant_qdq_rows (the kernels' quantizers, quant.cuh) against the float64
 * reference, bit for bit, on those values and random ones, for fp32/bf16/fp16 inputs, with amax
 * None and amaxes whose scales are exact in fp32 (so float64 and fp32 agree at ties). Skips
 * without a GPU.
 * fp8_fast_path_check: the runtime's test for the K / V quantizers' shortcut
 * (mla__fq_fp8_quick_ok: fl(x * fl(1 / sc)) instead of fl(x / sc)) against every finite bfloat16
 * and float16 x, for random and small-ratio amaxes. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ref/fakequant_ref.h"
#include "ref/flashmla_ref.h"
#include "runtime/fakequant_kinds.h"
#include "util/gpu.h"

#define P2(e) ldexp(1.0, (e))

/* ---- reference ---------------------------------------------------------------------------- */

Test(fakequant_quant, e4m3_reference) {
    static const double in[][2] = {
        {P2(-10), 0},               /* tie between 0 and the smallest subnormal 2^-9 -> even 0 */
        {3 * P2(-10), P2(-8)},      /* 1.5 quanta -> 2 quanta */
        {5 * P2(-10), P2(-8)},      /* 2.5 quanta -> 2 */
        {7 * P2(-10), P2(-7)},      /* 3.5 -> 4 */
        {P2(-9), P2(-9)},           /* smallest subnormal */
        {7 * P2(-9), 7 * P2(-9)},   /* largest subnormal */
        {1.0625, 1.0},              /* tie 1 + 1/16 -> 1 (even mantissa) */
        {1.1875, 1.25},             /* tie 1 + 3/16 -> 1.25 */
        {448, 448}, {-448, -448}, {440, 448}, {416, 416}, {424, 416}, /* 424 tie -> 416 */
        {-3 * P2(-10), -P2(-8)}, {0.3, 0.3125},
    };
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
        cr_expect(mlr_fq_rne_e4m3(in[i][0]) == in[i][1], "rne_e4m3(%a): expected %a, got %a",
                  in[i][0], in[i][1], mlr_fq_rne_e4m3(in[i][0]));
    cr_expect(mlr_fq_fp8_qdq(1e9, NAN) == 448, "fp8_qdq(1e9, None) saturates at 448");
    cr_expect(mlr_fq_fp8_qdq(-500, NAN) == -448, "fp8_qdq(-500, None) saturates at -448");
    cr_expect(mlr_fq_fp8_qdq(1e9, 896) == 896, "fp8_qdq(1e9, amax 896) saturates at amax");
    cr_expect(mlr_fq_fp8_qdq(3 * P2(-10) * 2, 896) == P2(-7), "fp8_qdq scales before rounding");
}

Test(fakequant_quant, e2m1_reference) {
    static const double in[][2] = {
        {0, 0}, {0.25, 0}, {0.2500001, 0.5}, {0.75, 1.0}, {0.7499999, 0.5}, {1.25, 1.0},
        {1.2500001, 1.5}, {1.75, 2.0}, {1.7499999, 1.5}, {2.5, 2.0}, {2.5000001, 3.0},
        {3.5, 4.0}, {3.4999999, 3.0}, {5.0, 4.0}, {5.0000001, 6.0}, {6.0, 6.0}, {100, 6.0},
    };
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
        cr_expect(mlr_fq_e2m1_mag(in[i][0]) == in[i][1], "e2m1_mag(%.9g): expected %g, got %g",
                  in[i][0], in[i][1], mlr_fq_e2m1_mag(in[i][0]));
    double x[16] = {-0.0, 0.0}, y[16];
    x[2] = 6;   /* bamax 6 -> scale 1 */
    mlr_fq_nvfp4_block(x, 16, NAN, y);
    cr_expect(y[0] == 0 && y[1] == 0 && y[2] == 6, "nvfp4 block of +-0 and 6: got %g %g %g", y[0],
              y[1], y[2]);
}

Test(fakequant_quant, nvfp4_reference) {
    double x[16], y[16], z[16];
    for (int i = 0; i < 16; i++) x[i] = 0.017578125;
    mlr_fq_nvfp4_block(x, 16, NAN, y);
    cr_expect(y[0] == 0.015625, "QDQ(0.017578125 ones): expected 0.015625, got %.12g", y[0]);
    mlr_fq_nvfp4_block(y, 16, NAN, z);
    cr_expect(z[0] == 0.01171875, "QDQ twice: expected 0.01171875 (not idempotent), got %.12g",
              z[0]);
    for (int i = 0; i < 16; i++) x[i] = i == 3 ? 0.005859375 : 0.001;
    mlr_fq_nvfp4_block(x, 16, NAN, y);
    for (int i = 0; i < 16; i++)
        cr_expect(y[i] == 0, "block of amax 0.005859375 (scale tie at 2^-10) must be 0, lane %d: %g",
                  i, y[i]);
    x[3] = 0.0059;   /* just above: the scale is 2^-9 */
    mlr_fq_nvfp4_block(x, 16, NAN, y);
    cr_expect(y[3] == 3 * P2(-9), "block of amax 0.0059 (scale 2^-9, 3.02 quanta): expected "
              "3 * 2^-9, got %a", y[3]);
    for (int i = 0; i < 16; i++) x[i] = (i & 1 ? -1 : 1) * 1e4 * (i + 1);
    mlr_fq_nvfp4_block(x, 16, NAN, y);
    cr_expect(y[15] == -2688 && y[0] == 2688, "saturated scale clips at +-2688, got %g %g", y[0],
              y[15]);
    for (int i = 0; i < 16; i++) x[i] = (i & 1 ? -0.5 : 0.25) * (i + 1);
    mlr_fq_nvfp4_block(x, 16, 2688.0 / 8, y);   /* gs = 1/8: scale E4M3(8 / 6 * 8) / 8 */
    double sb = mlr_fq_rne_e4m3(8.0 / (6.0 / 8)) / 8;
    for (int i = 0; i < 16; i++) {
        double want = (x[i] < 0 ? -1 : 1) * mlr_fq_e2m1_mag(fabs(x[i]) / sb) * sb;
        cr_expect(y[i] == want, "calibrated mixed-sign block lane %d: expected %g, got %g", i, want,
                  y[i]);
    }
}

Test(fakequant_quant, carrier_rounding) {
    cr_expect(mlr_fq_round_bf16(1 + P2(-8)) == 1, "bf16 tie 1 + 2^-8 -> 1");
    cr_expect(mlr_fq_round_bf16(1 + 3 * P2(-8)) == 1 + P2(-6), "bf16 tie 1 + 3 2^-8 -> 1 + 2^-6");
    cr_expect(mlr_fq_round_fp16(1 + P2(-11)) == 1, "fp16 tie 1 + 2^-11 -> 1");
    cr_expect(mlr_fq_round_fp16(P2(-25)) == 0, "fp16 tie 2^-25 -> 0");
    cr_expect(mlr_fq_round_fp16(3 * P2(-25)) == P2(-23), "fp16 subnormal tie -> even");
}

/* ---- device against the reference --------------------------------------------------------- */

#define ROWS 64
#define COLS 64   /* 4 NVFP4 blocks per row */

/* Special values, scaled by `unit`, then random magnitudes over many binades. */
static void fill_values(double *x, double unit, mlt_rng *r) {
    static const double special[] = {
        0x1p-10, 3 * 0x1p-10, 5 * 0x1p-10, 0x1p-9, 7 * 0x1p-9, 1.0625, 1.1875, 448, 440, 424, 500,
        1e6, -0.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, 6, 0.017578125, 0.005859375, 0.0059,
        -0.25, -3.5, 0x1p-14, 3 * 0x1p-16};
    int n = (int)(sizeof special / sizeof special[0]);
    for (int i = 0; i < ROWS * COLS; i++) {
        if (i < n) x[i] = special[i] * unit;
        else if (i < 16 * 16) x[i] = special[i % n] * unit * (i % 3 ? 1 : -1);  /* whole blocks */
        else x[i] = (mlt_rng_uniform(r) - 0.5) * ldexp(1.0, (int)mlt_rng_range(r, -14, 10)) * unit;
    }
}

/* Rounds the inputs to the input dtype (0 fp32, 1 bf16, 2 fp16) and packs them. */
static void pack_inputs(int in, double *x, void *buf) {
    for (int i = 0; i < ROWS * COLS; i++) {
        if (in == 0) {
            float f = (float)x[i];
            x[i] = f;
            ((float *)buf)[i] = f;
        } else if (in == 1) {
            uint16_t v = mlr_flashmla_f64_to_bf16(x[i]);
            x[i] = mlr_flashmla_bf16_to_f64(v), ((uint16_t *)buf)[i] = v;
        } else {
            uint16_t v = mlr_flashmla_f64_to_fp16(x[i]);
            x[i] = mlr_flashmla_fp16_to_f64(v), ((uint16_t *)buf)[i] = v;
        }
    }
}

/* One device run of mode/amax over inputs of dtype in; compares every element bit for bit. */
static void device_case(mla_runtime *rt, int mode, float amax, int in, double unit, uint64_t seed) {
    static const DLDataType dts[3] = {{kDLFloat, 32, 1}, {kDLBfloat, 16, 1}, {kDLFloat, 16, 1}};
    static double x[ROWS * COLS], want[ROWS * COLS];
    static float got[ROWS * COLS];
    static unsigned char buf[ROWS * COLS * 4];
    char name[128];
    snprintf(name, sizeof name, "%s amax %g in %d unit %g seed %llu", mode == 1 ? "fp8" : "nvfp4",
             (double)amax, in, unit, (unsigned long long)seed);
    mlt_rng r;
    mlt_rng_init(&r, seed);
    fill_values(x, unit, &r);
    pack_inputs(in, x, buf);
    for (int i = 0; i < ROWS; i++)
        mlr_fq_qdq_row(mode, x + i * COLS, COLS, (double)amax, want + i * COLS);
    CUdeviceptr dx = 0, dout = 0;
    size_t in_bytes = (size_t)ROWS * COLS * (in ? 2 : 4), out_bytes = (size_t)ROWS * COLS * 4;
    cr_assert(mlt_alloc(rt, in_bytes, &dx) == 0 && mlt_alloc(rt, out_bytes, &dout) == 0,
              "%s: alloc", name);
    cr_assert(mlt_upload(rt, dx, buf, in_bytes) == 0 && mlt_fill(rt, dout, 0xFF, out_bytes) == 0,
              "%s: upload", name);
    int64_t shape[2] = {ROWS, COLS};
    mlt_tensor tx, to;
    mlt_tensor_init(&tx, dx, dts[in], 2, shape, NULL);
    mlt_tensor_init(&to, dout, MLT_FP32, 2, shape, NULL);
    mla_fakequant_qdq_args a;
    mla_fakequant_qdq_args_init(&a);
    a.x = &tx.t, a.out = &to.t, a.mode = mode, a.amax = amax;
    mla_status s = mla_fakequant_qdq_rows(rt, &a, NULL);
    cr_assert(s == MLA_OK, "%s: mla_fakequant_qdq_rows: %s", name, mla_last_error());
    CUresult cr = mlt_sync(rt);
    cr_assert(cr == 0, "%s: sync: %s", name, mlt_cu_name(rt, cr));
    cr_assert(mlt_download(rt, got, dout, out_bytes) == 0, "%s: download", name);
    int bad = 0;
    for (int i = 0; i < ROWS * COLS && bad < 8; i++)
        if (!((double)got[i] == want[i] && (float)want[i] == got[i])) {
            bad++;
            cr_expect(0, "%s: element %d (row %d): x = %a: device %a, float64 %a", name, i,
                      i / COLS, x[i], (double)got[i], want[i]);
        }
    mlt_free(rt, dx), mlt_free(rt, dout);
}

Test(fakequant_quant, device_matches_float64) {
    mla_runtime *rt = NULL;
    if (!mlt_gpu_runtime(&rt)) cr_skip_test("no GPU");
    uint64_t seed = mlt_seed();
    for (int in = 0; in < 3; in++) {
        device_case(rt, 1, NAN, in, 1.0, seed);
        device_case(rt, 1, 448.0f * 4, in, 4.0, seed);      /* scale 4, exact */
        device_case(rt, 1, 448.0f / 1024, in, 1.0 / 1024, seed);
        device_case(rt, 2, NAN, in, 1.0, seed);
        device_case(rt, 2, 2688.0f / 8, in, 1.0 / 8, seed); /* gs 1/8, exact */
        device_case(rt, 2, 2688.0f * 2, in, 2.0, seed);
        device_case(rt, 2, NAN, in, 1.0 / 512, seed);       /* underflowing blocks */
    }
    mla_runtime_destroy(rt);
}

/* ---- the fp8 shortcut's check ------------------------------------------------------------- */

/* The value of a 16-bit pattern (bfloat16, or float16 when f16; the references' decoders). */
static float pattern16(unsigned bits, int f16) {
    return (float)(f16 ? mlr_flashmla_fp16_to_f64((uint16_t)bits)
                       : mlr_flashmla_bf16_to_f64((uint16_t)bits));
}

/* E4M3 of q as cvt.rn.satfinite rounds it (|q| >= 448: 448). */
static double satfinite_e4m3(double q) {
    return fabs(q) >= 448.0 ? copysign(448.0, q) : mlr_fq_rne_e4m3(q);
}

/* Every finite x among the dtype's first n patterns (65536: all, 32768: the positive ones):
 * code(fl(x / s)) equals code(fl(x * fl(1 / s))). */
static int paths_agree_everywhere(float s, int f16, unsigned n, double (*code)(double)) {
    volatile float one = 1.0f;
    const float rs = one / s;
    for (unsigned b = 0; b < n; b++) {
        const float x = pattern16(b, f16);
        if (!isfinite(x)) continue;
        volatile float q = x / s, p = x * rs;
        if (code(q) != code(p)) return 0;
    }
    return 1;
}

Test(fakequant_quant, fp8_fast_path_check) {
    uint64_t s = 0x9e3779b97f4a7c15ull;
    int refused = 0, agreed = 0;
    for (int i = 0; i < 240; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const unsigned r = (unsigned)(s >> 33);
        /* log-uniform amaxes in [1e-4, 1e4], and small ratios p / q (where ties are likelier) */
        const float amax = i % 2 ? (float)exp(log(1e-4) + log(1e8) * (r % 100000) / 1e5)
                                 : (float)(1 + r % 61) / (float)(1 + (r >> 8) % 61);
        const float sc = mla__fq_scale(MLA_QDQ_FP8, amax);
        for (int f16 = 0; f16 < 2; f16++) {
            const int fast = mla__fq_fp8_quick_ok(sc, f16);
            const int all = paths_agree_everywhere(sc, f16, 65536, satfinite_e4m3);
            cr_expect(!fast || all, "amax %.9g (scale %a) %s: the check allows the shortcut, but "
                      "some x rounds differently", amax, sc, f16 ? "float16" : "bfloat16");
            refused += !fast, agreed += all;
        }
    }
    /* both outcomes occur, so that the fallback is exercised and the shortcut is not vacuous */
    cr_expect(refused > 0 && agreed > refused, "refused %d, agreed %d of 480", refused, agreed);
    cr_expect(mla__fq_fp8_quick_ok(1.0f, 0) && mla__fq_fp8_quick_ok(1.0f, 1), "scale 1 (amax None)");
    cr_expect(!mla__fq_fp8_quick_ok(0.0f, 0) && !mla__fq_fp8_quick_ok(INFINITY, 1), "bad scales");
}

/* Every nonzero block scale sb = fl32(e4 gs) of gs and every finite positive x: the product
 * path's E2M1 magnitude equals the quotient path's. */
static int nvfp4_paths_agree_everywhere(float gs, int f16) {
    for (int c = 1; c <= 126; c++) {
        volatile float e4 = (float)mlr_flashmla_e4m3_to_f64((uint8_t)c);
        const float sb = e4 * gs;
        if (sb != 0.0f && !paths_agree_everywhere(sb, f16, 32768, mlr_fq_e2m1_mag)) return 0;
    }
    return 1;
}

Test(fakequant_quant, nvfp4_fast_path_check) {
    /* amax None (gs 1: E4M3 block scales with few bits make exact ties), 3 and 2.1 (refused),
     * the bench's 4 and 10 (allowed), and two log-uniform ones */
    static const float amaxes[] = {NAN, 3.0f, 2.1f, 4.0f, 10.0f, 0.0731f, 517.3f};
    int refused = 0, allowed = 0;
    for (size_t i = 0; i < sizeof amaxes / sizeof amaxes[0]; i++)
        for (int f16 = 0; f16 < 2; f16++) {
            const float gs = mla__fq_scale(MLA_QDQ_NVFP4, amaxes[i]);
            const int fast = mla__fq_nvfp4_quick_ok(gs, f16);
            const int all = nvfp4_paths_agree_everywhere(gs, f16);
            cr_expect(fast == all, "amax %.9g (global scale %a) %s: the check says %d, the "
                      "exhaustive one %d", amaxes[i], gs, f16 ? "float16" : "bfloat16", fast, all);
            refused += !fast, allowed += fast;
        }
    cr_expect(refused > 0 && allowed > 0, "refused %d, allowed %d", refused, allowed);
}

/* The runtime's cached verdicts: the checks' own, twice (filled, then read back), for both
 * modes, dtypes and scales that pass and fail; none for an unquantized operand. */
Test(fakequant_quant, codes_quick_cache) {
    mla_runtime *rt = NULL;
    cr_assert(mla_runtime_create(NULL, &rt) == MLA_OK && rt, "runtime (no GPU needed)");
    static const float amaxes[] = {NAN, 2.1f, 3.0f, 4.0f, 0.40625f, 10.0f};
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < sizeof amaxes / sizeof amaxes[0]; i++)
            for (int f16 = 0; f16 < 2; f16++) {
                const float s8 = mla__fq_scale(MLA_QDQ_FP8, amaxes[i]);
                const float s4 = mla__fq_scale(MLA_QDQ_NVFP4, amaxes[i]);
                cr_expect(mla__fq_codes_quick(rt, MLA_QDQ_FP8, s8, f16) ==
                              mla__fq_fp8_quick_ok(s8, f16),
                          "pass %d amax %g f16 %d: fp8 verdict", pass, amaxes[i], f16);
                cr_expect(mla__fq_codes_quick(rt, MLA_QDQ_NVFP4, s4, f16) ==
                              mla__fq_nvfp4_quick_ok(s4, f16),
                          "pass %d amax %g f16 %d: NVFP4 verdict", pass, amaxes[i], f16);
            }
    cr_expect(mla__fq_codes_quick(rt, MLA_QDQ_NONE, 1.0f, 0) == 0, "no codes without quantization");
    mla_runtime_destroy(rt);
}

