/* Helpers of the GPU tests (see gpu.h). */
#include "util/gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/internal.h"

int mlt_gpu_runtime(mla_runtime **rt) {
    mla_runtime_info info;
    *rt = NULL;
    if (mla_runtime_create(NULL, rt) != MLA_OK) return 0;
    if (mla_runtime_get_info(*rt, &info) != MLA_OK || !info.has_device) {
        mla_runtime_destroy(*rt);
        *rt = NULL;
        return 0;
    }
    return 1;
}

int mlt_gpu_runtime_env(const char *name, const char *value, mla_runtime **rt) {
    *rt = NULL;
    const char *old = getenv(name);
    char *saved = old ? strdup(old) : NULL;
    if (old && !saved) return -1;
    if ((value ? setenv(name, value, 1) : unsetenv(name)) != 0) return free(saved), -1;
    int ok = mlt_gpu_runtime(rt);
    int restored = (saved ? setenv(name, saved, 1) : unsetenv(name)) == 0;
    free(saved);
    if (!restored) {
        if (*rt) mla_runtime_destroy(*rt);
        *rt = NULL;
        return -1;
    }
    return ok;
}

int mlt_loaded_of_kind(const mla_runtime *rt, const char *kind) {
    int n = 0;
    for (size_t i = 0; i < rt->table_cap; i++)
        if (rt->table[i].kernel && !strcmp(rt->table[i].spec.kernel, kind)) n++;
    return n;
}

mla_status mlt_cpu_runtime(const char *arch, mla_runtime **rt) {
    char dir[256];
    const char *env = getenv("MLAJIT_CACHE_DIR");
    if (env && env[0])
        snprintf(dir, sizeof dir, "%s", env);
    else
        snprintf(dir, sizeof dir, "/tmp/mlajit-test-cache-%u", (unsigned)getuid());
    mla_options o;
    mla_options_init(&o);
    o.no_device = 1;
    o.arch = arch;
    o.cache_dir = dir;
    return mla_runtime_create(&o, rt);
}

/* Makes the runtime's context current; a CUresult for the helpers below. */
static CUresult enter(mla_runtime *rt) {
    return rt && mla__runtime_enter(rt) == MLA_OK ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult mlt_alloc(mla_runtime *rt, size_t bytes, CUdeviceptr *p) {
    CUresult r = enter(rt);
    *p = 0;
    return r != CUDA_SUCCESS ? r : rt->drv.cuMemAlloc(p, bytes);
}

CUresult mlt_free(mla_runtime *rt, CUdeviceptr p) {
    if (p == 0) return CUDA_SUCCESS;
    CUresult r = enter(rt);
    return r != CUDA_SUCCESS ? r : rt->drv.cuMemFree(p);
}

CUresult mlt_upload(mla_runtime *rt, CUdeviceptr dst, const void *src, size_t bytes) {
    CUresult r = enter(rt);
    return r != CUDA_SUCCESS ? r : rt->drv.cuMemcpyHtoD(dst, src, bytes);
}

CUresult mlt_download(mla_runtime *rt, void *dst, CUdeviceptr src, size_t bytes) {
    CUresult r = enter(rt);
    return r != CUDA_SUCCESS ? r : rt->drv.cuMemcpyDtoH(dst, src, bytes);
}

CUresult mlt_fill(mla_runtime *rt, CUdeviceptr p, unsigned char byte, size_t bytes) {
    CUresult r = enter(rt);
    if (r != CUDA_SUCCESS) return r;
    r = rt->drv.cuMemsetD8(p, byte, bytes);
    return r != CUDA_SUCCESS ? r : rt->drv.cuCtxSynchronize();
}

CUresult mlt_sync(mla_runtime *rt) {
    CUresult r = enter(rt);
    return r != CUDA_SUCCESS ? r : rt->drv.cuCtxSynchronize();
}

const char *mlt_cu_name(mla_runtime *rt, CUresult r) {
    const char *name = NULL;
    if (rt && rt->has_device && rt->drv.cuGetErrorName) rt->drv.cuGetErrorName(r, &name);
    return name ? name : "CUDA_ERROR_(unknown)";
}

void mlt_tensor_init(mlt_tensor *m, CUdeviceptr data, DLDataType dtype, int ndim,
                     const int64_t *shape, const int64_t *strides) {
    memset(m, 0, sizeof *m);
    m->t.data = (void *)(uintptr_t)data;
    m->t.device = (DLDevice){kDLCUDA, 0};
    m->t.dtype = dtype;
    m->t.ndim = ndim;
    m->t.shape = m->shape;
    for (int d = 0; d < ndim && d < 4; d++) m->shape[d] = shape[d];
    if (strides) {
        for (int d = 0; d < ndim && d < 4; d++) m->strides[d] = strides[d];
        m->t.strides = m->strides;
    }
}

uint64_t mlt_seed(void) {
    const char *env = getenv("MLAJIT_TEST_SEED");
    if (env && env[0]) return strtoull(env, NULL, 0);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec ^
           ((uint64_t)getpid() << 32);
}

void mlt_rng_init(mlt_rng *r, uint64_t seed) {
    r->seed = seed;
    r->state = seed;
}

uint64_t mlt_rng_u64(mlt_rng *r) {
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int64_t mlt_rng_range(mlt_rng *r, int64_t lo, int64_t hi) {
    uint64_t span = (uint64_t)(hi - lo) + 1;
    return span == 0 ? (int64_t)mlt_rng_u64(r) : lo + (int64_t)(mlt_rng_u64(r) % span);
}

double mlt_rng_uniform(mlt_rng *r) {
    return (double)(mlt_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}
