/* Helpers of the GPU tests: runtimes, device memory through the runtime's driver table, DLPack
 * tensors over device memory, and a seeded random generator.
 *
 * Device helpers make the runtime's context current first and return the CUresult (check it and
 * print mlt_cu_name in the message). Without a GPU, mlt_gpu_runtime returns 0 and the test calls
 * cr_skip_test. */
#ifndef MLAJIT_TESTS_UTIL_GPU_H
#define MLAJIT_TESTS_UTIL_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "mlajit/mlajit.h"

/* ---- runtimes ---------------------------------------------------------------------------- */

/* Creates a runtime on device 0 with the default options ($MLAJIT_CACHE_DIR, set by CTest).
 * Returns 1 with *rt set when a GPU is usable; 0 with *rt NULL when there is none. */
int mlt_gpu_runtime(mla_runtime **rt);

/* mlt_gpu_runtime with the environment variable `name` set to value (unset for NULL) while the
 * runtime is created (it reads its MLAJIT_* switches at creation only); the variable's earlier
 * value is restored. -1 when the environment could not be set or restored (nothing is left
 * created), else what mlt_gpu_runtime returns. */
int mlt_gpu_runtime_env(const char *name, const char *value, mla_runtime **rt);

/* How many kernels of kind `kind` rt has loaded (its kernel table): which kernel a call ran. */
int mlt_loaded_of_kind(const mla_runtime *rt, const char *kind);

/* Creates a runtime that never loads the driver (no_device = 1) for arch (e.g. "sm_90a"), with
 * its disk cache in $MLAJIT_CACHE_DIR or else /tmp/mlajit-test-cache-<uid>. */
mla_status mlt_cpu_runtime(const char *arch, mla_runtime **rt);

/* ---- device memory ----------------------------------------------------------------------- */

CUresult mlt_alloc(mla_runtime *rt, size_t bytes, CUdeviceptr *p);
CUresult mlt_free(mla_runtime *rt, CUdeviceptr p);           /* 0 is a no-op */
CUresult mlt_upload(mla_runtime *rt, CUdeviceptr dst, const void *src, size_t bytes);
CUresult mlt_download(mla_runtime *rt, void *dst, CUdeviceptr src, size_t bytes);
/* Sets bytes to byte (0xFF: NaN for float32/bfloat16/float16, poison for integers). */
CUresult mlt_fill(mla_runtime *rt, CUdeviceptr p, unsigned char byte, size_t bytes);
/* Waits for all work of the context (catches launch failures). */
CUresult mlt_sync(mla_runtime *rt);
/* "CUDA_ERROR_X" of a result, for messages. */
const char *mlt_cu_name(mla_runtime *rt, CUresult r);

/* ---- tensors ----------------------------------------------------------------------------- */

#define MLT_INT32 ((DLDataType){kDLInt, 32, 1})
#define MLT_UINT8 ((DLDataType){kDLUInt, 8, 1})
#define MLT_E4M3 ((DLDataType){MLA_DL_FLOAT8_E4M3FN, 8, 1})
#define MLT_BF16 ((DLDataType){kDLBfloat, 16, 1})
#define MLT_FP32 ((DLDataType){kDLFloat, 32, 1})

/* A DLTensor with storage for its shape and strides. Initialize in place and do not copy it
 * (t.shape / t.strides point into the struct). */
typedef struct mlt_tensor {
    DLTensor t;
    int64_t shape[4];
    int64_t strides[4];
} mlt_tensor;

/* A tensor over data on CUDA device 0, ndim <= 4. strides NULL leaves t.strides NULL (compact
 * row-major, the DLPack convention); else they are copied. */
void mlt_tensor_init(mlt_tensor *m, CUdeviceptr data, DLDataType dtype, int ndim,
                     const int64_t *shape, const int64_t *strides);

/* ---- random numbers (splitmix64) --------------------------------------------------------- */

typedef struct mlt_rng {
    uint64_t seed;   /* print it in assertion messages: MLAJIT_TEST_SEED=<seed> reproduces */
    uint64_t state;
} mlt_rng;

/* $MLAJIT_TEST_SEED if set, else a fresh seed from the time and the process id. */
uint64_t mlt_seed(void);
void mlt_rng_init(mlt_rng *r, uint64_t seed);
uint64_t mlt_rng_u64(mlt_rng *r);
/* Uniform integer in [lo, hi] (lo <= hi). */
int64_t mlt_rng_range(mlt_rng *r, int64_t lo, int64_t hi);
/* Uniform double in [0, 1). */
double mlt_rng_uniform(mlt_rng *r);

#endif
