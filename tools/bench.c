/* mlajit bench: times the kernels on this GPU and prints a table (and --json) that can be pasted
 * into docs/PERF.md. Each case is a function in the case table at the bottom; a case appends one
 * or more result rows. All driver calls go through the runtime's function table (rt->drv). */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tools/cli.h"

static const char bench_usage[] =
    "usage: mlajit bench [--case NAME]... [--iters N] [--json FILE] [--list-cases]\n"
    "\n"
    "Times the kernels on this GPU (needs one) and prints microseconds, GB/s, TFLOP/s and the\n"
    "fraction of the H200's measured ceilings.\n"
    "\n"
    "  --case NAME    run this case, repeatable (default: all; see --list-cases)\n"
    "  --iters N      timed repeats of the per-call cases (default: each case's own)\n"
    "  --json FILE    also write the results as JSON to FILE\n"
    "  --list-cases   print the cases and exit\n";

/* Measured ceilings of the H200 (docs/PERF.md): fractions are printed on H200-class devices. */
#define CEIL_COPY_GBPS 4280.0
#define CEIL_BF16_TFLOPS 672.0
#define CEIL_FP8_TFLOPS 1250.0

#define MAX_ROWS 64

typedef enum precision { PREC_NONE = 0, PREC_BF16, PREC_FP8 } precision;

/* One line of the table. Negative gbps / tflops: not meaningful. */
typedef struct bench_row {
    char name[32];
    double us;
    double gbps, tflops;
    precision prec;
    char note[160];
} bench_row;

typedef struct bench_ctx {
    mla_runtime *rt;            /* device runtime, default cache */
    mla_runtime_info info;
    int iters;                  /* 0: each case's default */
    int h200;                   /* print fractions of the ceilings */
    bench_row rows[MAX_ROWS];
    int n_rows;
} bench_ctx;

typedef struct bench_case {
    const char *name;
    const char *what;
    int (*run)(bench_ctx *ctx); /* CLI_OK or CLI_FAIL (message printed) */
} bench_case;

static bench_row *add_row(bench_ctx *ctx, const char *name, double us) {
    if (ctx->n_rows == MAX_ROWS) return &ctx->rows[MAX_ROWS - 1];
    bench_row *r = &ctx->rows[ctx->n_rows++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    r->us = us;
    r->gbps = r->tflops = -1.0;
    return r;
}

/* Prints a failed driver call's message and jumps to done. */
#define BENCH_CU(rt, call)                                                                       \
    do {                                                                                         \
        if (mla__cu_check(&(rt)->drv, (rt)->drv.call, #call, __FILE__, __LINE__) != MLA_OK) {   \
            cli_fail("bench", "%s", mla_last_error());                                           \
            goto done;                                                                           \
        }                                                                                        \
    } while (0)

static int case_fail(const char *name, const char *what) {
    return cli_fail("bench", "%s: %s: %s", name, what, mla_last_error());
}

/* ---- DSV4 plan inputs ----------------------------------------------------------------------- */

#define PLAN_T 640
#define PLAN_TOPK 128
#define PLAN_PAGE 128
#define PLAN_POSITIONS 8192   /* token positions drawn from [0, 8192) */
#define PLAN_PAGES 4096       /* physical kv_cache pages */

/* Device inputs of mla_attention_plan: `copies` sets of kv_indices / topk_lengths (rotated so
 * the GPU case reads from DRAM, not L2), one workspace. */
typedef struct plan_inputs {
    int T, topk, page, copies;
    CUdeviceptr idx, len, ws;
    size_t idx_bytes, len_bytes;    /* of one copy */
    double bytes;                   /* bytes read + written per call (mean over the copies) */
    int64_t idx_shape[2], len_shape[1], ws_shape[1];
    DLTensor kv, lengths, workspace;
} plan_inputs;

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Real windows (../spec/dsv4.md §5): token t at a random position p attends over the
 * min(p + 1, topk) rows ending at p, laid out linearly by position on randomly chosen pages
 * (slot = page_of(p / page) * page + p % page), in window order; -1 past the length. Returns the
 * sum of the lengths. */
static long long make_windows(uint64_t *seed, int T, int topk, int page, int32_t *idx,
                              int32_t *len) {
    long long total = 0;
    for (int t = 0; t < T; t++) {
        int p = (int)(rng_next(seed) % PLAN_POSITIONS);
        int L = p + 1 < topk ? p + 1 : topk;
        int last_lp = p / page;
        int32_t phys_last = (int32_t)(rng_next(seed) % PLAN_PAGES);
        int32_t phys_prev = (int32_t)((phys_last + 1 + rng_next(seed) % (PLAN_PAGES - 1)) %
                                      PLAN_PAGES);
        for (int g = 0; g < topk; g++) {
            int pos = p - L + 1 + g;
            int32_t phys = pos / page == last_lp ? phys_last : phys_prev;
            idx[(size_t)t * topk + g] = g < L ? phys * page + pos % page : -1;
        }
        len[t] = L;
        total += L;
    }
    return total;
}

static void set_tensor(DLTensor *t, CUdeviceptr p, int device, int ndim, int64_t *shape,
                       DLDataType dt) {
    memset(t, 0, sizeof *t);
    t->data = (void *)(uintptr_t)p;
    t->device = (DLDevice){kDLCUDA, device};
    t->ndim = ndim;
    t->dtype = dt;
    t->shape = shape;
}

/* Allocates and uploads the inputs; CLI_OK or CLI_FAIL. */
static int plan_inputs_create(mla_runtime *rt, int copies, uint64_t seed, plan_inputs *in) {
    memset(in, 0, sizeof *in);
    in->T = PLAN_T, in->topk = PLAN_TOPK, in->page = PLAN_PAGE, in->copies = copies;
    in->idx_bytes = (size_t)in->T * in->topk * 4;
    in->len_bytes = (size_t)in->T * 4;
    int32_t *idx = malloc(in->idx_bytes), *len = malloc(in->len_bytes);
    int rc = CLI_FAIL;
    if (!idx || !len) {
        cli_fail("bench", "out of memory");
        goto done;
    }
    if (mla__runtime_enter(rt) != MLA_OK) {
        cli_fail("bench", "%s", mla_last_error());
        goto done;
    }
    BENCH_CU(rt, cuMemAlloc(&in->idx, in->idx_bytes * copies));
    BENCH_CU(rt, cuMemAlloc(&in->len, in->len_bytes * copies));
    BENCH_CU(rt, cuMemAlloc(&in->ws, MLA__DSV4_PLAN_END));
    BENCH_CU(rt, cuMemsetD8(in->ws, 0, MLA__DSV4_PLAN_END));
    long long rows = 0;
    for (int c = 0; c < copies; c++) {
        rows += make_windows(&seed, in->T, in->topk, in->page, idx, len);
        BENCH_CU(rt, cuMemcpyHtoD(in->idx + in->idx_bytes * c, idx, in->idx_bytes));
        BENCH_CU(rt, cuMemcpyHtoD(in->len + in->len_bytes * c, len, in->len_bytes));
    }
    /* read: the window rows and the lengths; written: the [T, 4] plan and the barrier bank */
    in->bytes = (double)rows * 4 / copies + (double)in->len_bytes + (double)in->T * 16 +
                MLA__DSV4_BANK_BYTES;
    in->idx_shape[0] = in->T, in->idx_shape[1] = in->topk;
    in->len_shape[0] = in->T;
    in->ws_shape[0] = MLA__DSV4_PLAN_END;
    set_tensor(&in->kv, in->idx, rt->options.device, 2, in->idx_shape, (DLDataType){kDLInt, 32, 1});
    set_tensor(&in->lengths, in->len, rt->options.device, 1, in->len_shape,
               (DLDataType){kDLInt, 32, 1});
    set_tensor(&in->workspace, in->ws, rt->options.device, 1, in->ws_shape,
               (DLDataType){kDLUInt, 8, 1});
    rc = CLI_OK;
done:
    free(idx);
    free(len);
    return rc;
}

static void plan_inputs_destroy(mla_runtime *rt, plan_inputs *in) {
    if (in->idx) rt->drv.cuMemFree(in->idx);
    if (in->len) rt->drv.cuMemFree(in->len);
    if (in->ws) rt->drv.cuMemFree(in->ws);
    memset(in, 0, sizeof *in);
}

/* One SWA plan call on input copy c. */
static mla_status plan_call(mla_runtime *rt, plan_inputs *in, int c, CUstream stream) {
    in->kv.data = (void *)(uintptr_t)(in->idx + in->idx_bytes * (size_t)c);
    in->lengths.data = (void *)(uintptr_t)(in->len + in->len_bytes * (size_t)c);
    return mla_attention_plan(rt, &in->kv, &in->lengths, in->page, 1, NULL, &in->workspace,
                              stream, NULL);
}

static mla_status plan_spec(mla__spec *spec) {
    mla__spec_init(spec, "dsv4_attention_plan");
    return MLA_OK;
}

/* ---- case plan-compile: cold NVRTC compile ------------------------------------------------- */

/* Compiles the plan kernel into a fresh temporary cache folder; seconds in *sec. */
static mla_status compile_once(const char *arch, double *sec) {
    char dir[] = "/tmp/mlajit-bench-XXXXXX";
    if (!mkdtemp(dir)) return MLA_ERROR(MLA_ERR_IO, "mkdtemp %s failed", dir);
    mla_runtime *rt = NULL;
    mla__spec spec;
    mla__origin origin = MLA_ORIGIN_MEMORY;
    mla_status s = cli_runtime_no_device("bench", dir, arch, &rt);
    if (s == MLA_OK) s = plan_spec(&spec);
    double t0 = cli_now();
    if (s == MLA_OK) s = mla__precompile(rt, &spec, arch, &origin, NULL);
    *sec = cli_now() - t0;
    if (s == MLA_OK && origin != MLA_ORIGIN_COMPILED)
        s = MLA_ERROR(MLA_ERR_INTERNAL, "expected a compile in a fresh cache, got origin %d",
                      (int)origin);
    mla_runtime_destroy(rt);
    cli_remove_tree(dir);
    return s;
}

static int case_plan_compile(bench_ctx *ctx) {
    enum { REPS = 3 };
    double t[REPS];
    for (int i = 0; i < REPS; i++)
        if (compile_once(ctx->info.arch, &t[i]) != MLA_OK)
            return case_fail("plan-compile", "mla__precompile");
    bench_row *r = add_row(ctx, "plan-compile", cli_median(t, REPS) * 1e6);
    snprintf(r->note, sizeof r->note, "cold NVRTC compile for %s into an empty cache, median of %d",
             ctx->info.arch, REPS);
    return CLI_OK;
}

/* ---- case plan-load: warm disk cache, fresh runtime ---------------------------------------- */

/* Runs argv (a re-exec of this binary) and reads its stdout into out; 0 on exit status 0. */
static int run_capture(char *const argv[], char *out, size_t size) {
    int fds[2];
    if (pipe(fds) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    size_t len = 0;
    ssize_t got;
    while (len + 1 < size && (got = read(fds[0], out + len, size - 1 - len)) > 0) len += (size_t)got;
    out[len] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* The first call in new processes: median create and call microseconds over reps runs. */
static int first_call_in_new_process(const char *dir, int reps, double *create_us,
                                     double *call_us) {
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return -1;
    self[n] = '\0';
    double c[16], k[16];
    for (int i = 0; i < reps && i < 16; i++) {
        char *argv[] = {self, CLI_FIRST_CALL_CMD, "--cache-dir", (char *)dir, NULL};
        char out[256];
        if (run_capture(argv, out, sizeof out) != 0 ||
            sscanf(out, "create_us=%lf call_us=%lf", &c[i], &k[i]) != 2)
            return -1;
    }
    *create_us = cli_median(c, reps);
    *call_us = cli_median(k, reps);
    return 0;
}

/* Loads the plan kernel from the disk cache dir into a fresh device runtime; seconds in *sec. */
static mla_status load_once(const char *dir, const mla__spec *spec, double *sec) {
    mla_options o;
    mla_options_init(&o);
    o.cache_dir = dir;
    mla_runtime *rt = NULL;
    const mla__kernel *k = NULL;
    mla__origin origin = MLA_ORIGIN_MEMORY;
    MLA_FORWARD_IF_ERROR(mla_runtime_create(&o, &rt));
    double t0 = cli_now();
    mla_status s = mla__get_kernel_ex(rt, spec, &k, &origin);
    *sec = cli_now() - t0;
    mla_runtime_destroy(rt);
    MLA_FORWARD_IF_ERROR(s);
    MLA_RETURN_ERROR_IF(origin != MLA_ORIGIN_DISK, MLA_ERR_INTERNAL,
                        "expected the kernel from the disk cache, got origin %d", (int)origin);
    return MLA_OK;
}

static int case_plan_load(bench_ctx *ctx) {
    enum { REPS = 20, PROCESS_REPS = 5 };
    char dir[] = "/tmp/mlajit-bench-XXXXXX";
    if (!mkdtemp(dir)) return cli_fail("bench", "plan-load: mkdtemp failed");
    int rc = CLI_FAIL;
    double t[REPS], create_us, call_us;
    mla_runtime *rt = NULL;
    mla__spec spec;
    plan_spec(&spec);
    if (cli_runtime_no_device("bench", dir, ctx->info.arch, &rt) != MLA_OK) goto done;
    if (mla__precompile(rt, &spec, ctx->info.arch, NULL, NULL) != MLA_OK) {
        case_fail("plan-load", "mla__precompile");
        goto done;
    }
    for (int i = 0; i < REPS; i++) {
        if (load_once(dir, &spec, &t[i]) != MLA_OK) {
            case_fail("plan-load", "load from the disk cache");
            goto done;
        }
    }
    bench_row *r = add_row(ctx, "plan-load", cli_median(t, REPS) * 1e6);
    snprintf(r->note, sizeof r->note, "disk cache -> loaded kernel in a fresh runtime, median of %d",
             REPS);
    if (first_call_in_new_process(dir, PROCESS_REPS, &create_us, &call_us) != 0) {
        cli_fail("bench", "plan-load: the first-call child process failed");
        goto done;
    }
    r = add_row(ctx, "plan-first-call", call_us);
    snprintf(r->note, sizeof r->note, "new process, warm disk: first plan call + sync "
             "(runtime create %.0f us), median of %d", create_us, PROCESS_REPS);
    rc = CLI_OK;
done:
    mla_runtime_destroy(rt);
    cli_remove_tree(dir);
    return rc;
}

/* The hidden subcommand: creates a runtime on --cache-dir and times its first plan call. */
int cli_bench_first_call(int argc, char **argv) {
    if (argc != 3 || strcmp(argv[1], "--cache-dir") != 0)
        return cli_usage_error(CLI_FIRST_CALL_CMD, "expected --cache-dir DIR");
    mla_options o;
    mla_options_init(&o);
    o.cache_dir = argv[2];
    mla_runtime *rt = NULL;
    plan_inputs in = {0};
    CUstream stream = NULL;
    int rc = CLI_FAIL;
    double t0 = cli_now();
    if (mla_runtime_create(&o, &rt) != MLA_OK || !rt->has_device) {
        cli_fail(CLI_FIRST_CALL_CMD, "no device: %s", rt ? rt->no_device_reason : mla_last_error());
        goto done;
    }
    double create = cli_now() - t0;
    if (plan_inputs_create(rt, 1, 1, &in) != CLI_OK) goto done;
    BENCH_CU(rt, cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    t0 = cli_now();
    if (plan_call(rt, &in, 0, stream) != MLA_OK) {
        case_fail(CLI_FIRST_CALL_CMD, "mla_attention_plan");
        goto done;
    }
    BENCH_CU(rt, cuStreamSynchronize(stream));
    printf("create_us=%.1f call_us=%.1f\n", create * 1e6, (cli_now() - t0) * 1e6);
    rc = CLI_OK;
done:
    if (stream) rt->drv.cuStreamDestroy(stream);
    if (rt && rt->has_device) plan_inputs_destroy(rt, &in);
    mla_runtime_destroy(rt);
    return rc;
}

/* ---- case plan-call: host overhead of a warm call ------------------------------------------ */

static int case_plan_call(bench_ctx *ctx) {
    enum { WARMUP = 100, SYNC_EVERY = 256 };
    int iters = ctx->iters ? ctx->iters : 10000;
    mla_runtime *rt = ctx->rt;
    plan_inputs in = {0};
    CUstream stream = NULL;
    double *t = malloc((size_t)iters * sizeof *t);
    int rc = CLI_FAIL;
    if (!t) return cli_fail("bench", "out of memory");
    if (plan_inputs_create(rt, 1, 2, &in) != CLI_OK) goto done;
    BENCH_CU(rt, cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < WARMUP; i++)
        if (plan_call(rt, &in, 0, stream) != MLA_OK) goto call_failed;
    for (int i = 0; i < iters; i++) {
        if (i % SYNC_EVERY == 0) BENCH_CU(rt, cuStreamSynchronize(stream));
        double t0 = cli_now();
        mla_status s = plan_call(rt, &in, 0, stream);
        t[i] = cli_now() - t0;
        if (s != MLA_OK) goto call_failed;
    }
    BENCH_CU(rt, cuStreamSynchronize(stream));
    bench_row *r = add_row(ctx, "plan-call", cli_median(t, iters) * 1e6);
    snprintf(r->note, sizeof r->note, "host time of a warm mla_attention_plan call "
             "(T=%d), median of %d", in.T, iters);
    rc = CLI_OK;
    goto done;
call_failed:
    case_fail("plan-call", "mla_attention_plan");
done:
    if (stream) {
        rt->drv.cuStreamSynchronize(stream);
        rt->drv.cuStreamDestroy(stream);
    }
    plan_inputs_destroy(rt, &in);
    free(t);
    return rc;
}

/* ---- case plan-gpu: GPU time of the plan kernel -------------------------------------------- */

/* Input copies so that they span twice the L2 cache (at most 256). */
static int rotating_copies(mla_runtime *rt, size_t bytes_per_copy) {
    int l2 = 0;
    rt->drv.cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, rt->device);
    size_t want = 2 * (size_t)(l2 > 0 ? l2 : 64 << 20) / bytes_per_copy + 1;
    return want > 256 ? 256 : (int)want;
}

static int case_plan_gpu(bench_ctx *ctx) {
    enum { WARMUP = 50, MAX_ITERS = 100000 }; /* two events per launch */
    int iters = ctx->iters ? ctx->iters : 1000;
    if (iters > MAX_ITERS) iters = MAX_ITERS;
    mla_runtime *rt = ctx->rt;
    plan_inputs in = {0};
    CUstream stream = NULL;
    CUevent *ev = calloc(2 * (size_t)iters, sizeof *ev);
    double *t = malloc((size_t)iters * sizeof *t);
    int rc = CLI_FAIL, n_ev = 0;
    int copies = rotating_copies(rt, (size_t)PLAN_T * PLAN_TOPK * 4);
    if (!ev || !t) {
        cli_fail("bench", "out of memory");
        goto done;
    }
    if (plan_inputs_create(rt, copies, 3, &in) != CLI_OK) goto done;
    BENCH_CU(rt, cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    for (; n_ev < 2 * iters; n_ev++) BENCH_CU(rt, cuEventCreate(&ev[n_ev], CU_EVENT_DEFAULT));
    for (int i = 0; i < WARMUP; i++)
        if (plan_call(rt, &in, i % copies, stream) != MLA_OK) goto call_failed;
    for (int i = 0; i < iters; i++) {
        BENCH_CU(rt, cuEventRecord(ev[2 * i], stream));
        if (plan_call(rt, &in, i % copies, stream) != MLA_OK) goto call_failed;
        BENCH_CU(rt, cuEventRecord(ev[2 * i + 1], stream));
    }
    BENCH_CU(rt, cuStreamSynchronize(stream));
    for (int i = 0; i < iters; i++) {
        float ms = 0;
        BENCH_CU(rt, cuEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
        t[i] = ms * 1e-3;
    }
    double sec = cli_median(t, iters);
    bench_row *r = add_row(ctx, "plan-gpu", sec * 1e6);
    r->gbps = in.bytes / sec * 1e-9;
    snprintf(r->note, sizeof r->note, "T=%d topk=%d page=%d real windows, %d input copies, "
             "median of %d", in.T, in.topk, in.page, copies, iters);
    rc = CLI_OK;
    goto done;
call_failed:
    case_fail("plan-gpu", "mla_attention_plan");
done:
    if (stream) {
        rt->drv.cuStreamSynchronize(stream);
        rt->drv.cuStreamDestroy(stream);
    }
    for (int i = 0; i < n_ev; i++) rt->drv.cuEventDestroy(ev[i]);
    plan_inputs_destroy(rt, &in);
    free(ev);
    free(t);
    return rc;
}

/* ---- the case table -------------------------------------------------------------------------- */

static const bench_case cases[] = {
    {"plan-compile", "cold NVRTC compile of the DSV4 plan kernel", case_plan_compile},
    {"plan-load", "warm-cache load in a fresh runtime, and the first call in a new process",
     case_plan_load},
    {"plan-call", "host time of a warm mla_attention_plan call", case_plan_call},
    {"plan-gpu", "GPU time of the DSV4 plan kernel (T=640, topk=128, page 128)", case_plan_gpu},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

static int find_case(const char *name) {
    for (int i = 0; i < N_CASES; i++)
        if (!strcmp(cases[i].name, name)) return i;
    return -1;
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
    printf("%-16s %12s %9s %8s %7s %7s  %s\n", "case", "us", "GB/s", "TFLOP/s", "%copy", "%peak",
           "notes");
}

static void print_row(const bench_ctx *ctx, const bench_row *r) {
    double fc = frac_copy(ctx, r), fp = frac_peak(ctx, r);
    printf("%-16s", r->name);
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
            if ((i = find_case(optarg)) < 0)
                return cli_usage_error("bench", "unknown case '%s' (see --list-cases)", optarg);
            a->selected[i] = a->any_selected = 1;
            break;
        case 'i':
            if (cli_parse_long(optarg, 1, 1000000, &a->iters) != 0)
                return cli_usage_error("bench", "--iters: expected 1..1000000, got '%s'", optarg);
            break;
        case 'j': a->json = optarg; break;
        case 'l':
            for (i = 0; i < N_CASES; i++) printf("%-16s %s\n", cases[i].name, cases[i].what);
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
