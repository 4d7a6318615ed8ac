/* mlajit bench: the DSV4 plan cases (compile, load, host overhead of a call, GPU time). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools/bench.h"

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


/* Real windows (../spec/dsv4.md §5): token t at a random position p attends over the
 * min(p + 1, topk) rows ending at p, laid out linearly by position on randomly chosen pages
 * (slot = page_of(p / page) * page + p % page), in window order; -1 past the length. Returns the
 * sum of the lengths. */
static long long make_windows(uint64_t *seed, int T, int topk, int page, int32_t *idx,
                              int32_t *len) {
    long long total = 0;
    for (int t = 0; t < T; t++) {
        int p = (int)(bench_rng(seed) % PLAN_POSITIONS);
        int L = p + 1 < topk ? p + 1 : topk;
        int last_lp = p / page;
        int32_t phys_last = (int32_t)(bench_rng(seed) % PLAN_PAGES);
        int32_t phys_prev = (int32_t)((phys_last + 1 + bench_rng(seed) % (PLAN_PAGES - 1)) %
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
    bench_tensor(&in->kv, in->idx, rt->options.device, 2, in->idx_shape, (DLDataType){kDLInt, 32, 1});
    bench_tensor(&in->lengths, in->len, rt->options.device, 1, in->len_shape,
               (DLDataType){kDLInt, 32, 1});
    bench_tensor(&in->workspace, in->ws, rt->options.device, 1, in->ws_shape,
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

int bench_plan_compile(bench_ctx *ctx) {
    enum { REPS = 3 };
    double t[REPS];
    for (int i = 0; i < REPS; i++)
        if (compile_once(ctx->info.arch, &t[i]) != MLA_OK)
            return bench_case_fail("plan-compile", "mla__precompile");
    bench_row *r = bench_add_row(ctx, "plan-compile", cli_median(t, REPS) * 1e6);
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

int bench_plan_load(bench_ctx *ctx) {
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
        bench_case_fail("plan-load", "mla__precompile");
        goto done;
    }
    for (int i = 0; i < REPS; i++) {
        if (load_once(dir, &spec, &t[i]) != MLA_OK) {
            bench_case_fail("plan-load", "load from the disk cache");
            goto done;
        }
    }
    bench_row *r = bench_add_row(ctx, "plan-load", cli_median(t, REPS) * 1e6);
    snprintf(r->note, sizeof r->note, "disk cache -> loaded kernel in a fresh runtime, median of %d",
             REPS);
    if (first_call_in_new_process(dir, PROCESS_REPS, &create_us, &call_us) != 0) {
        cli_fail("bench", "plan-load: the first-call child process failed");
        goto done;
    }
    r = bench_add_row(ctx, "plan-first-call", call_us);
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
        bench_case_fail(CLI_FIRST_CALL_CMD, "mla_attention_plan");
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

int bench_plan_call(bench_ctx *ctx) {
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
    bench_row *r = bench_add_row(ctx, "plan-call", cli_median(t, iters) * 1e6);
    snprintf(r->note, sizeof r->note, "host time of a warm mla_attention_plan call "
             "(T=%d), median of %d", in.T, iters);
    rc = CLI_OK;
    goto done;
call_failed:
    bench_case_fail("plan-call", "mla_attention_plan");
done:
    bench_stream_release(rt, stream);
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

int bench_plan_gpu(bench_ctx *ctx) {
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
    bench_row *r = bench_add_row(ctx, "plan-gpu", sec * 1e6);
    r->gbps = in.bytes / sec * 1e-9;
    snprintf(r->note, sizeof r->note, "T=%d topk=%d page=%d real windows, %d input copies, "
             "median of %d", in.T, in.topk, in.page, copies, iters);
    rc = CLI_OK;
    goto done;
call_failed:
    bench_case_fail("plan-gpu", "mla_attention_plan");
done:
    bench_stream_release(rt, stream);
    for (int i = 0; i < n_ev; i++) rt->drv.cuEventDestroy(ev[i]);
    plan_inputs_destroy(rt, &in);
    free(ev);
    free(t);
    return rc;
}

