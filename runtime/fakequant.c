/* Fake-quant family: the kind builders (kernel_src/fakequant/qdq.cu, decode.cu), the shared
 * mode/amax checks and mla_fakequant_qdq_rows. The decode call is runtime/fakequant_decode.c. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "runtime/fakequant_kinds.h"
#include "runtime/internal.h"

static const char *const mode_names[] = {"none", "fp8", "nvfp4"};

mla_status mla__fq_check_params(const mla__spec *spec, const char *const *names,
                                const long long *max, int n) {
    MLA_ARG_CHECK(spec->n_params == n, "%s: expected %d parameters, got %d", spec->kernel, n,
                  spec->n_params);
    for (int i = 0; i < n; i++) {
        MLA_ARG_CHECK(!strcmp(spec->params[i].name, names[i]), "%s: parameter %d: expected %s, "
                      "got %s", spec->kernel, i, names[i], spec->params[i].name);
        MLA_ARG_CHECK(spec->params[i].value >= 0 && spec->params[i].value <= max[i],
                      "%s: %s: expected 0..%lld, got %lld", spec->kernel, names[i], max[i],
                      spec->params[i].value);
    }
    return MLA_OK;
}

static mla_status set_launch(const mla__spec *spec, char *name_expr, size_t size, const char *text,
                             int threads, int smem, mla__launch_info *launch) {
    int n = snprintf(name_expr, size, "%s", text);
    MLA_RETURN_ERROR_IF(n < 0 || (size_t)n >= size, MLA_ERR_INTERNAL,
                        "%s: name expression buffer of %zu bytes too small", spec->kernel, size);
    launch->threads = threads;
    launch->dynamic_smem = smem;
    launch->cluster = 1;
    return MLA_OK;
}

mla_status mla__fakequant_qdq_build(const mla__spec *spec, char *name_expr, size_t size,
                                    mla__launch_info *launch) {
    static const char *const names[] = {"in_dtype", "mode"};
    static const long long max[] = {2, 2};
    MLA_FORWARD_IF_ERROR(mla__fq_check_params(spec, names, max, 2));
    MLA_ARG_CHECK(spec->params[1].value != 0, "%s: mode: expected 1 (fp8) or 2 (nvfp4), got 0",
                  spec->kernel);
    char text[96];
    snprintf(text, sizeof text, "mla::fakequant::qdq_rows_kernel<%lld, %lld>",
             spec->params[0].value, spec->params[1].value);
    return set_launch(spec, name_expr, size, text, MLA__FQ_QDQ_THREADS, 0, launch);
}

/* The parameters both decode kinds take (cache_dtype, k_qdq, v_qdq, p_qdq) checked, and the name
 * expression of kernel (a qualified template name) with them in text[128]. */
static mla_status decode_text(const mla__spec *spec, const char *kernel, char (*text)[128]) {
    static const char *const names[] = {"cache_dtype", "k_qdq", "v_qdq", "p_qdq"};
    static const long long max[] = {1, 2, 2, 2};
    MLA_FORWARD_IF_ERROR(mla__fq_check_params(spec, names, max, 4));
    snprintf(*text, sizeof *text, "%s<%s, %lld, %lld, %lld>", kernel,
             spec->params[0].value ? "true" : "false", spec->params[1].value,
             spec->params[2].value, spec->params[3].value);
    return MLA_OK;
}

mla_status mla__fakequant_decode_build(const mla__spec *spec, char *name_expr, size_t size,
                                       mla__launch_info *launch) {
    char text[128];
    MLA_FORWARD_IF_ERROR(decode_text(spec, "mla::fakequant::decode_kernel", &text));
    return set_launch(spec, name_expr, size, text, MLA__FQ_THREADS, MLA__FQ_DECODE_SMEM, launch);
}

mla_status mla__fakequant_decode_mma_build(const mla__spec *spec, char *name_expr, size_t size,
                                           mla__launch_info *launch) {
    char text[128];
    MLA_FORWARD_IF_ERROR(decode_text(spec, "mla::fakequant::mmadec::decode_mma_kernel", &text));
    MLA_FORWARD_IF_ERROR(set_launch(spec, name_expr, size, text, MLA__FQ_THREADS,
                                    MLA__FQ_DECODE_MMA_SMEM, launch));
    launch->cluster = mla__fq_mma_cluster(spec->params[1].value, spec->params[2].value);
    return MLA_OK;
}

mla_status mla__fakequant_decode_sm90_build(const mla__spec *spec, char *name_expr, size_t size,
                                            mla__launch_info *launch) {
    /* decode_text's four, then q_fp32 (0: q of the cache dtype, 1: fp32) */
    static const char *const names[] = {"cache_dtype", "k_qdq", "v_qdq", "p_qdq", "q_fp32"};
    static const long long max[] = {1, 2, 2, 2, 1};
    MLA_FORWARD_IF_ERROR(mla__fq_check_params(spec, names, max, 5));
    char text[128];
    snprintf(text, sizeof text, "mla::fakequant::decode_sm90_kernel<%s, %lld, %lld, %lld, %s>",
             spec->params[0].value ? "true" : "false", spec->params[1].value,
             spec->params[2].value, spec->params[3].value, spec->params[4].value ? "true" : "false");
    return set_launch(spec, name_expr, size, text, MLA__FQ_THREADS, MLA__FQ_DECODE_SM90_SMEM,
                      launch);
}

mla_status mla__fakequant_decode_dense_build(const mla__spec *spec, char *name_expr, size_t size,
                                             mla__launch_info *launch) {
    char text[128];
    MLA_FORWARD_IF_ERROR(decode_text(spec, "unused", &text));
    long long kv = spec->params[0].value, k = spec->params[1].value, v = spec->params[2].value;
    MLA_ARG_CHECK(spec->params[3].value == 0, "%s: expected p_qdq 0 (P quantization depends on "
                  "the spec's tiles), got k_qdq %lld, v_qdq %lld, p_qdq %lld",
                  spec->kernel, k, v, spec->params[3].value);
    snprintf(text, sizeof text, "mla::flashmla::decode_sm90_fq_kernel<%lld, %lld, %lld>", kv, k, v);
    return set_launch(spec, name_expr, size, text, MLA__FQ_THREADS, MLA__FQ_DENSE_KV_SMEM, launch);
}

mla_status mla__fakequant_combine_build(const mla__spec *spec, char *name_expr, size_t size,
                                        mla__launch_info *launch) {
    static const char *const names[] = {"out_dtype"};
    static const long long max[] = {2};
    MLA_FORWARD_IF_ERROR(mla__fq_check_params(spec, names, max, 1));
    char text[96];
    snprintf(text, sizeof text, "mla::fakequant::combine_kernel<%lld>", spec->params[0].value);
    return set_launch(spec, name_expr, size, text, MLA__FQ_THREADS, 0, launch);
}

/* The E4M3 code cvt.rn.satfinite gives for a finite q: round to nearest even on the E4M3 grid
 * (quantum 2^(e - 3), e = max(floor(log2 |q|), -6)), |q| >= 448 to 448. Exact in double. */
static double e4m3_satfinite(double q) {
    double m = fabs(q);
    if (m >= 448.0) return copysign(448.0, q);
    if (m == 0.0) return 0.0 * q;
    int e = (int)floor(log2(m));
    if (e < -6) e = -6;
    double quantum = ldexp(1.0, e - 3), r = rint(m / quantum) * quantum;
    return copysign(r < 448.0 ? r : 448.0, q);
}

/* The value of the positive E4M3 code c (0 .. 0x7e). */
static double e4m3_value(int c) {
    const int e = c >> 3, m = c & 7;
    return e == 0 ? ldexp((double)m, -9) : ldexp((double)(8 + m), e - 10);
}

/* The value of a 16-bit pattern (bfloat16, or float16 when f16). */
static float value16(unsigned bits, int f16) {
    if (!f16) {
        union { uint32_t u; float f; } v = {bits << 16};
        return v.f;
    }
    unsigned e = (bits >> 10) & 31, m = bits & 1023;
    float mag = e == 0 ? ldexpf((float)m, -24) : e == 31 ? INFINITY : ldexpf((float)(m | 1024), (int)e - 25);
    return bits & 0x8000 ? -mag : mag;
}

/* E2M1 magnitude of q >= 0 (spec §2.1 rne_e2m1_mag: RNE on {0, .5, 1, 1.5, 2, 3, 4, 6}, 6 above). */
static double e2m1_mag(double a) {
    return a <= 0.25 ? 0.0 : a < 0.75 ? 0.5 : a <= 1.25 ? 1.0 : a < 1.75 ? 1.5 : a <= 2.5 ? 2.0
         : a < 3.5 ? 3.0 : a <= 5.0 ? 4.0 : 6.0;
}

/* The largest positive finite 16-bit pattern k with value(k) <= t (0 if none; t >= 0): from t's
 * exponent and leading mantissa bits, then corrected by a step at most. */
static unsigned pattern_at_or_below(double t, int f16) {
    const unsigned top = f16 ? 0x7bffu : 0x7f7fu;
    const int mbits = f16 ? 10 : 7, bias = f16 ? 15 : 127;
    unsigned k;
    if (!(t > 0.0)) return 0;
    if (t >= (double)value16(top, f16)) return top;
    int e;
    const double m = frexp(t, &e);   /* t = m 2^e, m in [0.5, 1) */
    const int field = e - 1 + bias;
    if (field <= 0) {                 /* subnormal: t / 2^(1 - bias - mbits) */
        k = (unsigned)floor(ldexp(t, bias - 1 + mbits));
    } else {
        k = ((unsigned)field << mbits) | (unsigned)floor((2.0 * m - 1.0) * (double)(1u << mbits));
    }
    if (k > top) k = top;
    while (k < top && (double)value16(k + 1, f16) <= t) k++;
    while (k > 0 && (double)value16(k, f16) > t) k--;
    return k;
}

/* Whether the positive 16-bit patterns next to t (the largest at or below it, k, and k - 1 ..
 * k + 2) get the same code from the exact quotient fl(x / s) and from the product fl(x rs), rs =
 * fl(1 / s). */
static int paths_agree_near(double t, float s, float rs, int f16, double (*code)(double)) {
    const unsigned top = f16 ? 0x7bffu : 0x7f7fu, a = pattern_at_or_below(t, f16);
    for (unsigned k = a > 0 ? a - 1 : 0; k <= a + 2 && k <= top; k++) {
        const float x = value16(k, f16);
        volatile float q = x / s, p = x * rs;
        if (code(q) != code(p)) return 0;
    }
    return 1;
}

/* A verdict of a quick_ok check, cached by (scale bits, dtype) in the runtime's 16 words (see
 * mla_runtime::fq_quick). */
static int cached_check(_Atomic unsigned long long *cache, float scale, int f16,
                        int (*check)(float, int)) {
    union { float f; uint32_t u; } v = {scale};
    const unsigned slot = ((v.u * 2654435761u >> 28) ^ (unsigned)(f16 != 0)) & 15;
    const unsigned long long key = (1ull << 63) | (unsigned long long)(f16 != 0) << 33 | v.u;
    const unsigned long long e = atomic_load_explicit(&cache[slot], memory_order_relaxed);
    if ((e & ~(1ull << 32)) == key) return (int)(e >> 32 & 1);
    const int verdict = check(scale, f16);
    atomic_store_explicit(&cache[slot], key | (unsigned long long)verdict << 32,
                          memory_order_relaxed);
    return verdict;
}

int mla__fq_fp8_quick_ok(float sc, int f16) {
    if (!(sc > 0.0f) || !isfinite(sc)) return 0;
    volatile float one = 1.0f;
    const float rsc = one / sc;
    if (!isfinite(rsc)) return 0;
    /* Both quotients lie within 2^-23 of x / sc (relative), so they can round differently only
     * for x / sc within that of a rounding boundary of E4M3, a midpoint M of two adjacent codes
     * below 448 (at 448 and above both paths give 448). The 16-bit grid is at least 2^-11
     * relative apart there, so the only candidates are the positive patterns next to M sc
     * (paths_agree_near; positive finite patterns are ordered like their values). The paths are
     * odd in x, so negative x follow. */
    for (int c = 0; c < 126; c++) {   /* E4M3 codes 0x00 .. 0x7e: 0 .. 448, ascending */
        const double mid = 0.5 * (e4m3_value(c) + e4m3_value(c + 1));
        if (!paths_agree_near(mid * (double)sc, sc, rsc, f16, e4m3_satfinite))   /* exact */
            return 0;
    }
    return 1;
}

int mla__fq_nvfp4_quick_ok(float gs, int f16) {
    static const double mid[] = {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0};
    if (!(gs > 0.0f) || !isfinite(gs)) return 0;
    volatile float one = 1.0f;
    for (int c = 1; c <= 126; c++) {   /* every nonzero block scale code e4 */
        volatile float e4 = (float)e4m3_value(c);
        const float sb = e4 * gs;   /* the kernel's fl32(e4 gs) */
        if (sb == 0.0f) continue;    /* a zero block: no quotient */
        const float rsb = one / sb;
        if (!isfinite(sb) || !isfinite(rsb)) return 0;
        /* as in mla__fq_fp8_quick_ok: only |x| next to a midpoint M of the E2M1 grid times sb
         * can round differently (beyond 5 both give 6) */
        for (int i = 0; i < 7; i++)
            if (!paths_agree_near(mid[i] * (double)sb, sb, rsb, f16, e2m1_mag)) return 0;   /* exact */
    }
    return 1;
}

int mla__fq_codes_quick(mla_runtime *rt, int mode, float scale, int f16) {
    return mode == MLA_QDQ_FP8 ? cached_check(rt->fq_quick[0], scale, f16, mla__fq_fp8_quick_ok)
         : mode == MLA_QDQ_NVFP4 ? cached_check(rt->fq_quick[1], scale, f16, mla__fq_nvfp4_quick_ok)
         : 0;
}

int mla__fq_scale_reciprocal_ok(int mode, float amax) {
    return mode == MLA_QDQ_NONE || mla__fq_scale(mode, amax) >= 0x1p-100f;
}

float mla__fq_scale(int mode, float amax) {
    if (mode == MLA_QDQ_NONE || isnan(amax)) return 1.0f;
    volatile float a = amax;   /* one IEEE fp32 division, as the kernels would do it */
    return mode == MLA_QDQ_FP8 ? a / 448.0f : a / 2688.0f;
}

mla_status mla__fq_check_mode(int mode, float amax, const char *name, const char *amax_name) {
    MLA_ARG_CHECK(mode >= MLA_QDQ_NONE && mode <= MLA_QDQ_NVFP4, "%s must be one of none (0), "
                  "fp8 (1), nvfp4 (2); got %d", name, mode);
    if (mode == MLA_QDQ_NONE || isnan(amax)) return MLA_OK;
    MLA_ARG_CHECK(isfinite(amax) && amax > 0.0f, "%s: expected a finite positive amax with "
                  "%s = %s (or NAN: None), got %g", amax_name, name, mode_names[mode],
                  (double)amax);
    return MLA_OK;
}

void mla_fakequant_qdq_args_init(mla_fakequant_qdq_args *args) {
    memset(args, 0, sizeof *args);
    args->struct_size = sizeof *args;
    args->mode = MLA_QDQ_NVFP4;
    args->amax = NAN;
}

/* x's in_dtype spec value, -1 if unsupported. */
static int qdq_in_dtype(DLDataType dt) {
    if (dt.lanes != 1) return -1;
    if (dt.code == kDLFloat && dt.bits == 32) return MLA__FQ_IN_FP32;
    if (dt.code == kDLBfloat && dt.bits == 16) return MLA__FQ_IN_BF16;
    if (dt.code == kDLFloat && dt.bits == 16) return MLA__FQ_IN_FP16;
    return -1;
}

static mla_status check_qdq(const mla_runtime *rt, const mla_fakequant_qdq_args *a, int *in) {
    char buf[64];
    MLA_ARG_CHECK(a != NULL, "args: expected mla_fakequant_qdq_args, got NULL");
    MLA_ARG_CHECK(a->struct_size == sizeof *a, "args: struct_size %zu, expected %zu (call "
                  "mla_fakequant_qdq_args_init)", a->struct_size, sizeof *a);
    MLA_ARG_CHECK(a->mode == MLA_QDQ_FP8 || a->mode == MLA_QDQ_NVFP4, "mode must be one of fp8 "
                  "(1), nvfp4 (2); got %d", a->mode);
    MLA_FORWARD_IF_ERROR(mla__fq_check_mode(a->mode, a->amax, "mode", "amax"));
    MLA_ARG_CHECK(a->x != NULL, "x: expected a tensor, got NULL");
    *in = qdq_in_dtype(a->x->dtype);
    MLA_ARG_CHECK(*in >= 0, "x: expected dtype float32, bfloat16 or float16, got %s",
                  mla__dtype_name(a->x->dtype, buf, sizeof buf));
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, a->x, "x", *in == MLA__FQ_IN_FP32 ? MLA_DT_FP32
                                           : MLA_DT_BF16_OR_FP16, 2));
    MLA_FORWARD_IF_ERROR(mla__check_contiguous(a->x, "x"));
    MLA_ARG_CHECK(a->mode != MLA_QDQ_NVFP4 || a->x->shape[1] % 16 == 0, "x: nvfp4 needs the row "
                  "length (shape[1]) divisible by 16, got %lld", (long long)a->x->shape[1]);
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, a->out, "out", MLA_DT_FP32, 2));
    MLA_FORWARD_IF_ERROR(mla__check_dim(a->out, "out", 0, a->x->shape[0], "rows of x"));
    MLA_FORWARD_IF_ERROR(mla__check_dim(a->out, "out", 1, a->x->shape[1], "row length of x"));
    MLA_FORWARD_IF_ERROR(mla__check_contiguous(a->out, "out"));
    MLA_FORWARD_IF_ERROR(mla__check_align(a->x, "x", 4));
    return mla__check_align(a->out, "out", 4);
}

mla_status mla_fakequant_qdq_rows(mla_runtime *runtime, const mla_fakequant_qdq_args *args,
                                  CUstream stream) {
    MLA_ARG_CHECK(runtime != NULL, "runtime: expected a runtime, got NULL");
    int in = 0;
    MLA_FORWARD_IF_ERROR(check_qdq(runtime, args, &in));
    long long n = (long long)mla__numel(args->x);
    if (n == 0) return MLA_OK;
    long long items = args->mode == MLA_QDQ_NVFP4 ? n / 16 : n;
    long long blocks = (items + MLA__FQ_QDQ_THREADS - 1) / MLA__FQ_QDQ_THREADS;
    MLA_RETURN_ERROR_IF(blocks > 0x7fffffff, MLA_ERR_NOT_SUPPORTED, "x: %lld elements is more "
                        "than one launch covers", n);
    MLA_FORWARD_IF_ERROR(mla__runtime_enter(runtime));
    mla__spec spec;
    mla__spec_init(&spec, "fakequant_qdq");
    MLA_FORWARD_IF_ERROR(mla__spec_add(&spec, "in_dtype", in));
    MLA_FORWARD_IF_ERROR(mla__spec_add(&spec, "mode", args->mode));
    const mla__kernel *k = NULL;
    MLA_FORWARD_IF_ERROR(mla__get_kernel(runtime, &spec, &k));
    CUdeviceptr x = mla__data(args->x), out = mla__data(args->out);
    float scale = mla__fq_scale(args->mode, args->amax);
    void *kargs[] = {&x, &out, &n, &scale};
    return mla__launch(runtime, k, (unsigned)blocks, 1, 1, stream, kargs);
}
