/* The runtime handle: options, the device and its primary context, the cache folder, the CUDA
 * include folder for NVRTC. */
#include <ctype.h>
#include <dlfcn.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "runtime/internal.h"

#ifndef MLAJIT_CUDA_HOME_HINT
#define MLAJIT_CUDA_HOME_HINT "/usr/local/cuda"
#endif

void mla_options_init(mla_options *o) {
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->log_level = MLA_LOG_WARN;
}

static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && v[0] ? v : NULL;
}

static void resolve_cache_dir(mla_runtime *rt, const char *opt) {
    const char *dir = opt ? opt : env("MLAJIT_CACHE_DIR");
    const char *xdg = env("XDG_CACHE_HOME"), *home = env("HOME");
    if (dir)
        snprintf(rt->cache_dir, sizeof rt->cache_dir, "%s", dir);
    else if (xdg)
        snprintf(rt->cache_dir, sizeof rt->cache_dir, "%s/mlajit", xdg);
    else if (home)
        snprintf(rt->cache_dir, sizeof rt->cache_dir, "%s/.cache/mlajit", home);
    rt->cache_writable = rt->cache_dir[0] && mla__cache_dir_writable(rt->cache_dir);
    if (rt->cache_dir[0] && !rt->cache_writable)
        mla__log(rt, MLA_LOG_WARN, "cache folder %s is not writable: kernels are compiled in "
                 "memory", rt->cache_dir);
}

static int has_cuda_headers(const char *home) {
    char path[MLA_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/include/cuda_fp8.h", home);
    return access(path, R_OK) == 0;
}

/* Finds the toolkit folder whose include/ NVRTC needs: $CUDA_HOME, $CUDA_PATH, the folder above
 * libnvrtc's, the build-time toolkit, /usr/local/cuda. */
static void resolve_cuda_home(mla_runtime *rt) {
    char candidates[5][MLA_PATH_MAX];
    int n = 0;
    if (env("CUDA_HOME")) snprintf(candidates[n++], MLA_PATH_MAX, "%s", env("CUDA_HOME"));
    if (env("CUDA_PATH")) snprintf(candidates[n++], MLA_PATH_MAX, "%s", env("CUDA_PATH"));
    Dl_info info;
    if (dladdr((void *)nvrtcVersion, &info) && info.dli_fname) {
        snprintf(candidates[n], MLA_PATH_MAX, "%s", info.dli_fname);
        char *slash = strrchr(candidates[n], '/');
        if (slash) {
            snprintf(slash, (size_t)(candidates[n] + MLA_PATH_MAX - slash), "/..");
            n++;
        }
    }
    snprintf(candidates[n++], MLA_PATH_MAX, "%s", MLAJIT_CUDA_HOME_HINT);
    snprintf(candidates[n++], MLA_PATH_MAX, "/usr/local/cuda");
    for (int i = 0; i < n; i++) {
        char real[MLA_PATH_MAX];
        if (!realpath(candidates[i], real) || !has_cuda_headers(real)) continue;
        snprintf(rt->cuda_home, sizeof rt->cuda_home, "%s", real);
        snprintf(rt->include_opts[0], sizeof rt->include_opts[0], "-I%s/include", real);
        snprintf(rt->include_opts[1], sizeof rt->include_opts[1], "-I%s/include/cccl", real);
        return;
    }
    mla__log(rt, MLA_LOG_WARN, "CUDA headers not found (set CUDA_HOME): NVRTC compiles of "
             "kernels that include them will fail");
}

/* "sm_" + two or three digits + an optional "a" or "f". */
static int arch_valid(const char *a) {
    if (strncmp(a, "sm_", 3) != 0) return 0;
    int digits = 0;
    for (a += 3; isdigit((unsigned char)*a); a++) digits++;
    if (*a == 'a' || *a == 'f') a++;
    return digits >= 2 && digits <= 3 && *a == '\0';
}

/* The compile target of a compute capability (major * 10 + minor). */
static void arch_for(int cc, char *out, size_t size) {
    if (cc == 90 || cc == 100)
        snprintf(out, size, "sm_%da", cc);
    else
        snprintf(out, size, "sm_%d", cc);
}

static mla_log_level env_log_level(int *set) {
    const char *v = env("MLAJIT_LOG");
    static const char *const names[] = {"error", "warn", "info", "debug"};
    *set = v != NULL;
    for (int i = 0; v && i < 4; i++)
        if (strcasecmp(v, names[i]) == 0) return (mla_log_level)i;
    return MLA_LOG_INFO;
}

/* Loads the driver and opens the device's primary context. */
static mla_status open_device(mla_runtime *rt) {
    MLA_FORWARD_IF_ERROR(mla__driver_load(&rt->drv));
    MLA_RETURN_ERROR_IF(rt->drv.cuInit(0) != CUDA_SUCCESS, MLA_ERR_NO_DEVICE,
                        "CUDA driver: cuInit failed (no usable GPU)");
    int count = 0, major = 0, minor = 0;
    MLA_CU(rt, cuDriverGetVersion(&rt->driver_version));
    MLA_CU(rt, cuDeviceGetCount(&count));
    MLA_RETURN_ERROR_IF(rt->options.device < 0 || rt->options.device >= count, MLA_ERR_NO_DEVICE,
                        "options.device: expected a device ordinal in [0, %d), got %d", count,
                        rt->options.device);
    MLA_CU(rt, cuDeviceGet(&rt->device, rt->options.device));
    MLA_CU(rt, cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, rt->device));
    MLA_CU(rt, cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, rt->device));
    MLA_CU(rt, cuDeviceGetAttribute(&rt->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                    rt->device));
    MLA_CU(rt, cuDeviceGetName(rt->device_name, sizeof rt->device_name, rt->device));
    MLA_CU(rt, cuDevicePrimaryCtxRetain(&rt->context, rt->device));
    rt->cc = major * 10 + minor;
    rt->has_device = 1;
    return MLA_OK;
}

/* The kernel switches of the environment, read here once so that no call reads it: the index in
 * values (n of them) of the value of the variable name; -1 when it is unset or empty, or names
 * none of them (then one warning naming the variable, the value and every accepted one). */
static int env_choice(mla_runtime *rt, const char *name, const char *const *values, int n) {
    const char *v = env(name);
    if (!v) return -1;
    for (int i = 0; i < n; i++)
        if (!strcmp(v, values[i])) return i;
    char list[192] = "";
    size_t len = 0;
    for (int i = 0; i < n && len < sizeof list; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s\"%s\"", i ? ", " : "",
                                values[i]);
    mla__log(rt, MLA_LOG_WARN, "%s: expected %s or unset, got \"%s\": ignored", name, list, v);
    return -1;
}
#define ENV_CHOICE(rt, name, values) \
    env_choice(rt, name, values, (int)(sizeof values / sizeof values[0]))

/* $MLAJIT_FLASHMLA_DECODE: "portable" forces the portable dense decode kernel (and the portable
 * sparse kernels); "pair" runs the sm_90a dense decode's cp.async path on the CTA pair
 * (flashmla_decode_sm90x2) where it applies (measured slower, docs/perf-notes.md; comparisons). */
static void resolve_flashmla_decode(mla_runtime *rt) {
    static const char *const values[] = {"portable", "pair"};
    const int c = ENV_CHOICE(rt, "MLAJIT_FLASHMLA_DECODE", values);
    rt->flashmla_decode_portable = c == 0;
    rt->flashmla_decode_pair = c == 1;
}

/* $MLAJIT_FAKEQUANT_PREFILL: "portable" runs the fake-quant prefill on the fp32 kernel even where
 * a tensor-core one applies; "mma4", "mma8" and "mma32" run the mma.sync kernel (instead of the
 * wgmma one on sm_90a) with that CTA (4 or 8 warps of 16 rows, 4 warps of 32 rows; unset: 8 x 16)
 * (comparisons). */
static void resolve_fakequant_prefill(mla_runtime *rt) {
    static const char *const values[] = {"portable", "mma4", "mma8", "mma32"};
    static const int warps[] = {0, 4, 8, 4}, rows[] = {0, 16, 16, 32};
    const int c = ENV_CHOICE(rt, "MLAJIT_FAKEQUANT_PREFILL", values);
    rt->fakequant_prefill_portable = c == 0;
    rt->fakequant_prefill_warps = c < 0 ? 0 : warps[c];
    rt->fakequant_prefill_rows = c < 0 ? 0 : rows[c];
}

/* $MLAJIT_FAKEQUANT_DECODE: "fp32" forces the fake-quant decode's exact fp32 FMA kernel
 * (fakequant/decode.cu) where a tensor-core one would run, "mma" the portable tensor-core kernel
 * (fakequant/decode_mma.cu) where the sm_90a one would, "sm90" the sm_90a kernel
 * (fakequant/decode_sm90.cu) wherever it applies, whatever the modes, "dense" the FlashMLA-
 * compatible dense decode without quantization where it applies (runtime/fakequant_decode.c).
 * $MLAJIT_FAKEQUANT_DENSE_CHUNK: that path's chunk size in keys (comparisons; unset: the default). */
static void resolve_fakequant_decode(mla_runtime *rt) {
    static const char *const values[] = {"fp32", "mma", "sm90", "dense"};
    const int c = ENV_CHOICE(rt, "MLAJIT_FAKEQUANT_DECODE", values);
    rt->fakequant_decode_fp32 = c == 0;
    rt->fakequant_decode_mma = c == 1;
    rt->fakequant_decode_sm90 = c == 2;
    rt->fakequant_decode_dense = c == 3;
    static const char *const chunks[] = {"4096", "8192", "16384", "32768"};
    const int k = ENV_CHOICE(rt, "MLAJIT_FAKEQUANT_DENSE_CHUNK", chunks);
    rt->fakequant_dense_chunk = k < 0 ? 0 : 4096 << k;
    static const char *const scheds[] = {"metadata"};
    rt->fakequant_dense_metadata = ENV_CHOICE(rt, "MLAJIT_FAKEQUANT_DENSE_SCHED", scheds) == 0;
}

/* $MLAJIT_FLASHMLA_SPARSE_PREFETCH: "1" turns on the L2 prefetch of gathered rows in the sm_90a
 * sparse decode and prefill (measured slower on the H200, docs/perf-notes.md; kept for
 * comparisons); "0" or unset leaves it off. */
static void resolve_flashmla_sparse_prefetch(mla_runtime *rt) {
    static const char *const values[] = {"0", "1"};
    rt->flashmla_sparse_prefetch = ENV_CHOICE(rt, "MLAJIT_FLASHMLA_SPARSE_PREFETCH", values) == 1;
}

/* $MLAJIT_FLASHMLA_SPARSE_SM90: "pingpong" runs every sm_90a sparse call on the two-warpgroup
 * ping-pong kernels, "ws" on the one-CTA warp-specialized ones, "x2" / "x2c" the decode at
 * h_q > 64 on the warp-specialized CTA pair with cluster- / CTA-scope barrier semantics (x2c is
 * also the default there; comparisons with the defaults, docs/perf-notes.md); unset: the
 * defaults (mla__flashmla_sparse_kind). */
static void resolve_flashmla_sparse_sm90(mla_runtime *rt) {
    static const char *const values[] = {"pingpong", "ws", "x2", "x2c"};
    const int c = ENV_CHOICE(rt, "MLAJIT_FLASHMLA_SPARSE_SM90", values);
    rt->flashmla_sparse_sm90 = c < 0 ? NULL : values[c];
}

/* $MLAJIT_DSV4_OUTPROJ: "split" runs mla_output_proj at T <= 16 as kernels A and B (two
 * launches), "fused" as one launch ("fused-nopf": without its L2 prefetches, "fused-pfb": with
 * only 6 wo_b steps prefetched), "pdl" launches its tiled kernel A at T > 16 as a programmatic
 * dependent of the attention instead of behind a memset, "fused,pdl" both; "stream64" runs
 * 16 < T <= 64 on the stream kernels with a K split, "fused,stream64" with "fused" (comparisons;
 * unset: the defaults of runtime/dsv4_output_proj.c). */
static void resolve_dsv4_outproj(mla_runtime *rt) {
    static const char *const values[] = {"split", "fused", "pdl", "fused-nopf", "fused-pfb",
                                         "fused,pdl", "stream64", "fused,stream64"};
    rt->dsv4_outproj = ENV_CHOICE(rt, "MLAJIT_DSV4_OUTPROJ", values) + 1;
}

/* $MLAJIT_DSV4_KV_SPLITS: "2", "4", "8" or "16" KV parts per token in every split launch
 * (T <= 16) of mla_attention, both layer kinds (comparisons; unset: the table of
 * mla__dsv4_kv_splits; "4" is the fixed split of earlier sessions). */
static void resolve_dsv4_kv_splits(mla_runtime *rt) {
    static const char *const values[] = {"2", "4", "8", "16"};
    const int c = ENV_CHOICE(rt, "MLAJIT_DSV4_KV_SPLITS", values);
    rt->dsv4_kv_splits = c < 0 ? 0 : 2 << c;
}

/* Copies the options and resolves what they leave to the environment. */
static mla_status apply_options(mla_runtime *rt, const mla_options *options) {
    mla_options_init(&rt->options);
    if (options) {
        MLA_ARG_CHECK(options->struct_size >= offsetof(mla_options, log_level) + sizeof(int) &&
                      options->struct_size <= sizeof(mla_options), "options: struct_size %zu "
                      "is not that of mla_options (%zu): call mla_options_init",
                      options->struct_size, sizeof(mla_options));
        memcpy(&rt->options, options, options->struct_size);
    }
    int log_env = 0;
    mla_log_level level = env_log_level(&log_env);
    rt->log_to_stderr = log_env && !rt->options.log;
    if (rt->log_to_stderr) rt->options.log_level = level;
    const char *arch = rt->options.arch ? rt->options.arch : env("MLAJIT_ARCH");
    MLA_ARG_CHECK(!arch || arch_valid(arch), "options.arch: expected sm_XY, sm_XYa or sm_XYf "
                  "(e.g. sm_90a), got \"%s\"", arch);
    if (arch) snprintf(rt->arch, sizeof rt->arch, "%s", arch);
    const char *kdir = rt->options.kernel_dir ? rt->options.kernel_dir : env("MLAJIT_KERNEL_DIR");
    if (kdir) snprintf(rt->kernel_dir, sizeof rt->kernel_dir, "%s", kdir);
    rt->options.arch = rt->options.cache_dir = rt->options.kernel_dir = NULL;
    resolve_cache_dir(rt, options ? options->cache_dir : NULL);
    resolve_cuda_home(rt);
    resolve_flashmla_decode(rt);
    resolve_fakequant_prefill(rt);
    resolve_fakequant_decode(rt);
    resolve_flashmla_sparse_prefetch(rt);
    resolve_flashmla_sparse_sm90(rt);
    resolve_dsv4_outproj(rt);
    resolve_dsv4_kv_splits(rt);
    return MLA_OK;
}

mla_status mla_runtime_create(const mla_options *options, mla_runtime **out) {
    MLA_ARG_CHECK(out != NULL, "out: expected a pointer to receive the runtime, got NULL");
    *out = NULL;
    mla_runtime *rt = calloc(1, sizeof *rt);
    MLA_RETURN_ERROR_IF(!rt, MLA_ERR_OUT_OF_MEMORY, "mla_runtime_create: out of memory");
    pthread_mutex_init(&rt->lock, NULL);
    pthread_mutex_init(&rt->sources_lock, NULL);
    mla_status s = apply_options(rt, options);
    if (s != MLA_OK) goto fail;
    if (!rt->options.no_device && open_device(rt) != MLA_OK) {
        snprintf(rt->no_device_reason, sizeof rt->no_device_reason, "%s", mla_last_error());
        mla__log(rt, MLA_LOG_INFO, "no device: %s", rt->no_device_reason);
        if (rt->context) rt->drv.cuDevicePrimaryCtxRelease(rt->device);
        rt->context = NULL;
        rt->has_device = 0;
        mla__driver_unload(&rt->drv);
    } else if (rt->options.no_device) {
        snprintf(rt->no_device_reason, sizeof rt->no_device_reason, "the runtime was created "
                 "with options.no_device");
    }
    if (rt->has_device && !rt->arch[0]) arch_for(rt->cc, rt->arch, sizeof rt->arch);
    *out = rt;
    return MLA_OK;
fail:
    mla_runtime_destroy(rt);
    return s;
}

void mla_runtime_destroy(mla_runtime *rt) {
    if (!rt) return;
    if (rt->has_device) rt->drv.cuCtxSetCurrent(rt->context);
    mla__table_free(rt);
    if (rt->has_device) rt->drv.cuDevicePrimaryCtxRelease(rt->device);
    if (rt->drv.handle) mla__driver_unload(&rt->drv);
    mla__sources_free(rt);
    pthread_mutex_destroy(&rt->lock);
    pthread_mutex_destroy(&rt->sources_lock);
    free(rt);
}

mla_status mla_runtime_get_info(mla_runtime *rt, mla_runtime_info *info) {
    MLA_ARG_CHECK(rt != NULL, "runtime: expected a runtime, got NULL");
    MLA_ARG_CHECK(info != NULL, "info: expected a pointer, got NULL");
    memset(info, 0, sizeof *info);
    info->has_device = rt->has_device;
    info->driver_version = rt->driver_version;
    info->device = rt->options.device;
    snprintf(info->device_name, sizeof info->device_name, "%s", rt->device_name);
    info->sm_count = rt->sm_count;
    info->compute_capability = rt->cc;
    info->arch = rt->arch;
    info->nvrtc_version = mla__nvrtc_version();
    info->cache_dir = rt->cache_dir;
    info->cache_writable = rt->cache_writable;
    info->kernel_source = rt->kernel_dir[0] ? rt->kernel_dir : "embedded";
    info->cuda_include = rt->cuda_home;
    info->no_device_reason = rt->has_device ? "" : rt->no_device_reason;
    return MLA_OK;
}

mla_status mla__runtime_enter(mla_runtime *rt) {
    MLA_RETURN_ERROR_IF(!rt->has_device, MLA_ERR_NO_DEVICE, "no CUDA device: %s",
                        rt->no_device_reason);
    CUcontext current = NULL;
    if (rt->drv.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == rt->context) return MLA_OK;
    MLA_CU(rt, cuCtxSetCurrent(rt->context));
    return MLA_OK;
}
