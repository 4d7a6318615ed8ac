/* mlajit bench: times the kernels on this GPU and prints a table (and --json) that can be pasted
 * into docs/PERF.md. Each case is a function in the case table at the bottom; a case appends one
 * or more result rows. All driver calls go through the runtime's function table (rt->drv). */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tools/bench.h"

static const char bench_usage[] =
    "usage: mlajit bench [--case NAME]... [--iters N] [--json FILE] [--list-cases]\n"
    "\n"
    "Times the kernels on this GPU (needs one) and prints microseconds, GB/s, TFLOP/s and the\n"
    "fraction of the H200's measured ceilings.\n"
    "\n"
    "  --case NAME    run this case, or every case named NAME-..., repeatable (default: all;\n"
    "                 see --list-cases)\n"
    "  --iters N      timed repeats of the per-call cases (default: each case's own)\n"
    "  --json FILE    also write the results as JSON to FILE\n"
    "  --list-cases   print the cases and exit\n";

bench_row *bench_add_row(bench_ctx *ctx, const char *name, double us) {
    if (ctx->n_rows == MAX_ROWS) return &ctx->rows[MAX_ROWS - 1];
    bench_row *r = &ctx->rows[ctx->n_rows++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    r->us = us;
    r->gbps = r->tflops = -1.0;
    return r;
}

void bench_tensor(DLTensor *t, CUdeviceptr p, int device, int ndim, int64_t *shape, DLDataType dt) {
    memset(t, 0, sizeof *t);
    t->data = (void *)(uintptr_t)p;
    t->device = (DLDevice){kDLCUDA, device};
    t->ndim = ndim, t->dtype = dt, t->shape = shape;
}

uint64_t bench_rng(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

double bench_uniform(uint64_t *s) { return (double)(bench_rng(s) >> 11) * 0x1p-53; }

double bench_gauss(uint64_t *s) {
    double u = bench_uniform(s), v = bench_uniform(s);
    return sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * v);
}

uint16_t bench_bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16); /* round to nearest even */
}

uint8_t bench_e4m3_bits(float f) {
    uint8_t sign = f < 0 ? 0x80 : 0;
    double a = fabs((double)f);
    if (!(a < 448.0)) return sign | 0x7E; /* saturate (also for inf; NaN never occurs here) */
    if (a < 0.015625) return sign | (uint8_t)nearbyint(a * 512.0); /* subnormals, 2^-9 steps */
    int e;
    double m = frexp(a, &e) * 2.0; /* a = m * 2^(e - 1), m in [1, 2) */
    int mant = (int)nearbyint((m - 1.0) * 8.0);
    e -= 1;
    if (mant == 8) mant = 0, e += 1;
    if (e > 8 || (e == 8 && mant > 6)) return sign | 0x7E;
    return sign | (uint8_t)(((e + 7) << 3) | mant);
}

int bench_fill_normal(mla_runtime *rt, CUdeviceptr dst, size_t n, int elem_bytes, uint64_t seed) {
    size_t pool = n < BENCH_POOL ? n : BENCH_POOL;
    uint8_t *h = malloc(pool * (size_t)elem_bytes);
    int rc = CLI_FAIL;
    if (!h) {
        cli_fail("bench", "out of memory");
        goto done;
    }
    for (size_t i = 0; i < pool; i++) {
        float g = (float)bench_gauss(&seed);
        if (elem_bytes == 1) {
            h[i] = bench_e4m3_bits(g);
        } else {
            uint16_t b = bench_bf16_bits(g);
            memcpy(h + 2 * i, &b, 2);
        }
    }
    for (size_t at = 0; at < n; at += pool) {
        size_t m = n - at < pool ? n - at : pool;
        BENCH_CU(rt, cuMemcpyHtoD(dst + at * (size_t)elem_bytes, h, m * (size_t)elem_bytes));
    }
    rc = CLI_OK;
done:
    free(h);
    return rc;
}

void bench_stream_release(mla_runtime *rt, CUstream stream) {
    if (!stream) return;
    rt->drv.cuStreamSynchronize(stream);
    rt->drv.cuStreamDestroy(stream);
}

int bench_case_fail(const char *name, const char *what) {
    return cli_fail("bench", "%s: %s: %s", name, what, mla_last_error());
}

/* ---- the case table -------------------------------------------------------------------------- */

static const bench_case cases[] = {
    {"plan-compile", "cold NVRTC compile of the DSV4 plan kernel", bench_plan_compile},
    {"plan-load", "warm-cache load in a fresh runtime, and the first call in a new process",
     bench_plan_load},
    {"plan-call", "host time of a warm mla_attention_plan call", bench_plan_call},
    {"plan-gpu", "GPU time of the DSV4 plan kernel (T=640, topk=128, page 128)", bench_plan_gpu},
    {"dsv4-swa-T1", "DSV4 SWA layer, attention + output proj, T=1", bench_dsv4_swa_1},
    {"dsv4-swa-T4", "DSV4 SWA layer, attention + output proj, T=4", bench_dsv4_swa_4},
    {"dsv4-swa-T16", "DSV4 SWA layer, attention + output proj, T=16", bench_dsv4_swa_16},
    {"dsv4-swa-T64", "DSV4 SWA layer, attention + output proj, T=64", bench_dsv4_swa_64},
    {"dsv4-swa-T256", "DSV4 SWA layer, attention + output proj, T=256", bench_dsv4_swa_256},
    {"dsv4-swa-T640", "DSV4 SWA layer, attention + output proj, T=640", bench_dsv4_swa_640},
    {"dsv4-hca-T1", "DSV4 HCA layer, attention + output proj, T=1", bench_dsv4_hca_1},
    {"dsv4-hca-T4", "DSV4 HCA layer, attention + output proj, T=4", bench_dsv4_hca_4},
    {"dsv4-hca-T16", "DSV4 HCA layer, attention + output proj, T=16", bench_dsv4_hca_16},
    {"dsv4-hca-T64", "DSV4 HCA layer, attention + output proj, T=64", bench_dsv4_hca_64},
    {"dsv4-hca-T256", "DSV4 HCA layer, attention + output proj, T=256", bench_dsv4_hca_256},
    {"dsv4-hca-T640", "DSV4 HCA layer, attention + output proj, T=640", bench_dsv4_hca_640},
    {"flashmla-dense-s1", "FlashMLA dense decode b 128, h_q 128, s_q 1, s_k 1k/4k/16k bf16 "
     "(FlashMLA: 72/230/870 us)", bench_flashmla_dense_s1},
    {"flashmla-dense-s2", "FlashMLA dense decode b 128, h_q 128, s_q 2 causal, s_k 1k/4k/16k bf16 "
     "(FlashMLA: 131/430/1600 us)", bench_flashmla_dense_s2},
    {"flashmla-dense-heads", "FlashMLA dense decode b 128 h_q 64 s_k 4k, b 64 h_q 16 s_k 8k, s_q 1 "
     "bf16 (FlashMLA: 166/167 us)", bench_flashmla_dense_heads},
    {"flashmla-dense-pages", "FlashMLA dense decode b 128, h_q 128, s_q 1, s_k 4k bf16 at page 16 "
     "and page 1", bench_flashmla_dense_pages},
    {"flashmla-dense-long", "FlashMLA dense decode b 128, h_q 128, s_q 1/2, s_k 8k/32k bf16",
     bench_flashmla_dense_long},
    {"flashmla-dense-fp8", "FlashMLA dense fp8 decode b 128, h_q 128, s_q 1/2, s_k 4096",
     bench_flashmla_dense_fp8},
    {"flashmla-sparse-decode-h128",
     "FlashMLA sparse fp8 decode b 64/128, h_q 128, s_q 2, topk 2048, s_k 32k "
     "(FlashMLA: 185/366 us)",
     bench_flashmla_sparse_decode_h128},
    {"flashmla-sparse-decode-h64",
     "FlashMLA sparse fp8 decode b 64/128, h_q 64, s_q 2, topk 2048, s_k 32k",
     bench_flashmla_sparse_decode_h64},
    {"flashmla-sparse-decode-h16",
     "FlashMLA sparse fp8 decode b 64/128, h_q 16, s_q 2, topk 2048, s_k 32k",
     bench_flashmla_sparse_decode_h16},
    {"flashmla-sparse-prefill-h128",
     "FlashMLA sparse prefill s_q 4096, h_q 128, topk 2048, s_kv 32k, d 576 (FlashMLA: 3.83 ms)",
     bench_flashmla_sparse_prefill_h128},
    {"flashmla-sparse-prefill-h64",
     "FlashMLA sparse prefill s_q 4096, h_q 64, topk 2048, s_kv 32k, d 576",
     bench_flashmla_sparse_prefill_h64},
    {"flashmla-sparse-prefill-h16",
     "FlashMLA sparse prefill s_q 4096, h_q 16, topk 2048, s_kv 32k, d 576",
     bench_flashmla_sparse_prefill_h16},
    {"fakequant-decode-4k",
     "fake-quant decode b 128, h 128, L 4096, page 64, bf16, 9 K/V/P modes (FlashMLA: 230 us)",
     bench_fakequant_decode_4k},
    {"fakequant-decode-16k",
     "fake-quant decode b 128, h 128, L 16384, page 64, bf16, 9 K/V/P modes (FlashMLA: 870 us)",
     bench_fakequant_decode_16k},
    {"fakequant-decode-p",
     "fake-quant decode b 128, h 128, L 4096 and 16384, page 64, bf16, modes none, p-fp8, p-nvfp4",
     bench_fakequant_decode_p},
    {"fakequant-decode-b4",
     "fake-quant decode b 4, h 128, L 16384, page 64, bf16, modes none, k-fp8, v-fp8, p-fp8",
     bench_fakequant_decode_b4},
    {"fakequant-decode-none",
     "fake-quant decode without quantization: b 128 at L 4096 and 16384, b 4 at 16384",
     bench_fakequant_decode_none},
    {"fakequant-decode-kv",
     "fake-quant decode b 128, h 128, page 64, bf16, K/V modes without P: L 4096 (none, k, v, kv in "
     "fp8 and nvfp4), L 16384 (none, k-fp8, v-fp8, kv-fp8)",
     bench_fakequant_decode_kv},
    {"fakequant-decode-mix",
     "fake-quant decode b 128, h 128, L 4096, page 64, bf16, K/V modes with P: k-fp8-p-fp8, "
     "v-fp8-p-fp8, kv-fp8-p-nvfp4, k-nvfp4-p-fp8, v-nvfp4-p-fp8",
     bench_fakequant_decode_mix},
    {"fakequant-prefill-8k",
     "fake-quant prefill S 8192 causal, h 128, d 192/128, bf16: none, fp8, nvfp4, 2:4",
     bench_fakequant_prefill_8k},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

/* Selects the case called name, or every case whose name starts with name + "-" ("dsv4",
 * "dsv4-hca", "plan"); returns how many. */
static int select_cases(const char *name, int *selected) {
    size_t len = strlen(name);
    int n = 0;
    for (int i = 0; i < N_CASES; i++)
        if (!strncmp(cases[i].name, name, len) &&
            (cases[i].name[len] == '\0' || cases[i].name[len] == '-'))
            selected[i] = 1, n++;
    return n;
}

/* ---- output ----------------------------------------------------------------------------------- */

static void utc_date(char *out, size_t size) {
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(out, size, "%Y-%m-%d %H:%M:%S UTC", &tm);
}

static double frac_copy(const bench_ctx *ctx, const bench_row *r) {
    return ctx->h200 && r->gbps >= 0 ? r->gbps / CEIL_COPY_GBPS : -1.0;
}

static double frac_peak(const bench_ctx *ctx, const bench_row *r) {
    if (!ctx->h200 || r->tflops < 0 || r->prec == PREC_NONE) return -1.0;
    return r->tflops / (r->prec == PREC_FP8 ? CEIL_FP8_TFLOPS : CEIL_BF16_TFLOPS);
}

/* Prints v with fmt, or "-" when negative, right-aligned in width. */
static void print_cell(int width, const char *fmt, double v) {
    char buf[32];
    if (v < 0) snprintf(buf, sizeof buf, "-");
    else snprintf(buf, sizeof buf, fmt, v);
    printf(" %*s", width, buf);
}

static void print_header(const bench_ctx *ctx, const char *date) {
    const mla_runtime_info *in = &ctx->info;
    printf("mlajit bench %s\n", mla_version_string());
    printf("date:    %s\n", date);
    printf("device:  %s, %d SMs, cc %d.%d, %s; CUDA driver %d.%d, NVRTC %d.%d\n",
           in->device_name, in->sm_count, in->compute_capability / 10,
           in->compute_capability % 10, in->arch, in->driver_version / 1000,
           in->driver_version % 1000 / 10, in->nvrtc_version / 1000,
           in->nvrtc_version % 1000 / 10);
    printf("command: %s\n", cli_command_line());
    printf("ceilings: copy %.0f GB/s, bf16 %.0f TFLOP/s, fp8 %.0f TFLOP/s (H200, measured)%s\n\n",
           CEIL_COPY_GBPS, CEIL_BF16_TFLOPS, CEIL_FP8_TFLOPS,
           ctx->h200 ? "" : "; not an H200: fractions not shown");
    printf("%-20s %12s %9s %8s %7s %7s  %s\n", "case", "us", "GB/s", "TFLOP/s", "%copy", "%peak",
           "notes");
}

static void print_row(const bench_ctx *ctx, const bench_row *r) {
    double fc = frac_copy(ctx, r), fp = frac_peak(ctx, r);
    printf("%-20s", r->name);
    print_cell(12, "%.2f", r->us);
    print_cell(9, "%.1f", r->gbps);
    print_cell(8, "%.1f", r->tflops);
    print_cell(7, "%.1f", fc < 0 ? -1.0 : 100.0 * fc);
    print_cell(7, "%.1f", fp < 0 ? -1.0 : 100.0 * fp);
    printf("  %s\n", r->note);
    fflush(stdout);
}

static void json_number_or_null(cJSON *obj, const char *name, double v) {
    if (v < 0) cJSON_AddNullToObject(obj, name);
    else cJSON_AddNumberToObject(obj, name, v);
}

static int write_json(const bench_ctx *ctx, const char *date, const char *path) {
    static const char *const prec_names[] = {"none", "bf16", "fp8"};
    const mla_runtime_info *in = &ctx->info;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "mlajit", mla_version_string());
    cJSON_AddStringToObject(root, "date", date);
    cJSON_AddStringToObject(root, "command", cli_command_line());
    cJSON *dev = cJSON_AddObjectToObject(root, "device");
    cJSON_AddStringToObject(dev, "name", in->device_name);
    cJSON_AddNumberToObject(dev, "sm_count", in->sm_count);
    cJSON_AddNumberToObject(dev, "compute_capability", in->compute_capability);
    cJSON_AddStringToObject(dev, "arch", in->arch);
    cJSON_AddNumberToObject(dev, "driver_version", in->driver_version);
    cJSON_AddNumberToObject(dev, "nvrtc_version", in->nvrtc_version);
    cJSON *ceil = cJSON_AddObjectToObject(root, "ceilings");
    cJSON_AddNumberToObject(ceil, "copy_gbps", CEIL_COPY_GBPS);
    cJSON_AddNumberToObject(ceil, "bf16_tflops", CEIL_BF16_TFLOPS);
    cJSON_AddNumberToObject(ceil, "fp8_tflops", CEIL_FP8_TFLOPS);
    cJSON_AddBoolToObject(ceil, "applies", ctx->h200);
    cJSON *results = cJSON_AddArrayToObject(root, "results");
    for (int i = 0; i < ctx->n_rows; i++) {
        const bench_row *r = &ctx->rows[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "case", r->name);
        cJSON_AddNumberToObject(o, "us", r->us);
        json_number_or_null(o, "gbps", r->gbps);
        json_number_or_null(o, "tflops", r->tflops);
        cJSON_AddStringToObject(o, "precision", prec_names[r->prec]);
        json_number_or_null(o, "frac_copy", frac_copy(ctx, r));
        json_number_or_null(o, "frac_peak", frac_peak(ctx, r));
        cJSON_AddStringToObject(o, "note", r->note);
        cJSON_AddItemToArray(results, o);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    FILE *f = text ? fopen(path, "w") : NULL;
    int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    if (f && fclose(f) != 0) ok = 0;
    free(text);
    return ok ? CLI_OK : cli_fail("bench", "cannot write %s", path);
}

/* ---- mlajit bench --------------------------------------------------------------------------- */

typedef struct bench_args {
    int selected[N_CASES], any_selected;
    long iters;
    const char *json;
} bench_args;

/* Parses the options: CLI_OK, or an exit status (-1: done, e.g. --help). */
static int parse_args(int argc, char **argv, bench_args *a) {
    static const struct option longopts[] = {
        {"case", required_argument, NULL, 'c'},
        {"iters", required_argument, NULL, 'i'},
        {"json", required_argument, NULL, 'j'},
        {"list-cases", no_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c, i;
    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'c':
            if (select_cases(optarg, a->selected) == 0)
                return cli_usage_error("bench", "unknown case '%s' (see --list-cases)", optarg);
            a->any_selected = 1;
            break;
        case 'i':
            if (cli_parse_long(optarg, 1, 1000000, &a->iters) != 0)
                return cli_usage_error("bench", "--iters: expected 1..1000000, got '%s'", optarg);
            break;
        case 'j': a->json = optarg; break;
        case 'l':
            for (i = 0; i < N_CASES; i++) printf("%-30s %s\n", cases[i].name, cases[i].what);
            return -1;
        case 'h': fputs(bench_usage, stdout); return -1;
        default: return cli_bad_option("bench", argv, c);
        }
    }
    if (optind < argc) return cli_usage_error("bench", "unexpected argument '%s'", argv[optind]);
    return CLI_OK;
}

int cli_bench(int argc, char **argv) {
    bench_args a;
    memset(&a, 0, sizeof a);
    int rc = parse_args(argc, argv, &a);
    if (rc != CLI_OK) return rc < 0 ? CLI_OK : rc;
    bench_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return cli_fail("bench", "out of memory");
    ctx->iters = (int)a.iters;
    rc = CLI_FAIL;
    if (mla_runtime_create(NULL, &ctx->rt) != MLA_OK) {
        cli_fail("bench", "cannot create a runtime: %s", mla_last_error());
        goto done;
    }
    mla_runtime_get_info(ctx->rt, &ctx->info);
    if (!ctx->info.has_device) {
        cli_fail("bench", "needs a CUDA GPU: %s", ctx->info.no_device_reason);
        goto done;
    }
    ctx->h200 = strstr(ctx->info.device_name, "H200") != NULL;
    char date[64];
    utc_date(date, sizeof date);
    print_header(ctx, date);
    rc = CLI_OK;
    for (int i = 0; i < N_CASES; i++) {
        if (a.any_selected && !a.selected[i]) continue;
        int first = ctx->n_rows;
        if (cases[i].run(ctx) != CLI_OK) rc = CLI_FAIL;
        for (int r = first; r < ctx->n_rows; r++) print_row(ctx, &ctx->rows[r]);
    }
    if (a.json && write_json(ctx, date, a.json) != CLI_OK) rc = CLI_FAIL;
done:
    mla_runtime_destroy(ctx->rt);
    free(ctx);
    return rc;
}
