/* mlajit: MLA attention kernels compiled at run time with NVRTC, cached on disk, launched through
 * the CUDA driver API.
 *
 * This header is the runtime: status codes, errors, the runtime handle, tensors and streams. The
 * kernel families have one header each (dsv4.h, ...), all included from here.
 *
 * Ownership: the caller owns every tensor and stream it passes; the library keeps no pointer to
 * them after a call returns. Strings returned by the library are owned by the library.
 * Threads: a runtime may be used from several threads at once. Errors: every function returns an
 * mla_status; the detailed message of the last failure on the calling thread is mla_last_error(). */
#ifndef MLAJIT_MLAJIT_H
#define MLAJIT_MLAJIT_H

#include <stddef.h>
#include <stdint.h>

#include <cuda.h>            /* CUstream, CUdeviceptr (types only: libcuda is loaded at run time) */
#include <dlpack/dlpack.h>   /* DLTensor */

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define MLA_API
#else
#define MLA_API __attribute__((visibility("default")))
#endif

#define MLAJIT_VERSION_MAJOR 0
#define MLAJIT_VERSION_MINOR 1
#define MLAJIT_VERSION_PATCH 0
/* The library version as MAJOR * 10000 + MINOR * 100 + PATCH. */
#define MLAJIT_VERSION_NUMBER \
    (MLAJIT_VERSION_MAJOR * 10000 + MLAJIT_VERSION_MINOR * 100 + MLAJIT_VERSION_PATCH)

/* ---- status ------------------------------------------------------------------------------- */

/* One table: name, value, text. It generates the enum and mla_status_string(). */
#define MLA_STATUS_MAP(X)                                                                        \
    X(OK, 0, "success")                                                                          \
    X(ERR_INVALID_ARGUMENT, -1, "invalid argument")                                              \
    X(ERR_NO_DEVICE, -2, "no CUDA driver or device")                                             \
    X(ERR_CUDA, -3, "CUDA driver call failed")                                                   \
    X(ERR_COMPILE, -4, "NVRTC compilation failed")                                               \
    X(ERR_CACHE, -5, "kernel cache error")                                                       \
    X(ERR_OUT_OF_MEMORY, -6, "out of memory")                                                    \
    X(ERR_NOT_SUPPORTED, -7, "not supported")                                                    \
    X(ERR_IO, -8, "file input/output failed")                                                    \
    X(ERR_INTERNAL, -9, "internal error")

typedef enum mla_status {
#define MLA_STATUS_ENUM_(name, value, text) MLA_##name = value,
    MLA_STATUS_MAP(MLA_STATUS_ENUM_)
#undef MLA_STATUS_ENUM_
} mla_status;

/* Static text of a status code ("invalid argument"); "unknown status" for other values. */
MLA_API const char *mla_status_string(mla_status status);

/* The detailed message of the last failed call on this thread (which argument, what was expected
 * and what came, the NVRTC log, the CUresult name). "" if none. Valid until the next failure on
 * this thread. */
MLA_API const char *mla_last_error(void);

/* The library version string, e.g. "0.1.0". */
MLA_API const char *mla_version_string(void);

/* ---- runtime ------------------------------------------------------------------------------ */

typedef struct mla_runtime mla_runtime;

/* Log levels passed to the log callback. */
typedef enum mla_log_level {
    MLA_LOG_ERROR = 0,
    MLA_LOG_WARN = 1,
    MLA_LOG_INFO = 2,
    MLA_LOG_DEBUG = 3,
} mla_log_level;

/* Receives every log line at or below the configured level. msg is valid during the call only. */
typedef void (*mla_log_fn)(void *user, mla_log_level level, const char *msg);

/* Runtime options. Initialize with mla_options_init(), then set what you need. Strings are
 * copied by mla_runtime_create. */
typedef struct mla_options {
    size_t struct_size;     /* sizeof(mla_options), set by mla_options_init (ABI growth) */
    const char *cache_dir;  /* NULL: $MLAJIT_CACHE_DIR, else ${XDG_CACHE_HOME:-~/.cache}/mlajit;
                               "" : no disk cache (compile in memory) */
    const char *kernel_dir; /* NULL: $MLAJIT_KERNEL_DIR, else the sources embedded at build time */
    const char *arch;       /* NULL: $MLAJIT_ARCH, else from the device ("sm_90a", "sm_100a",
                               "sm_XY"); needed when no_device is set */
    int device;             /* CUDA device ordinal (default 0) */
    int no_device;          /* 1: never load the CUDA driver; compile and cache only */
    mla_log_fn log;         /* NULL: log to stderr only if $MLAJIT_LOG is set (error|warn|info|debug) */
    void *log_user;         /* passed to log */
    mla_log_level log_level;/* highest level passed to log (default MLA_LOG_WARN) */
} mla_options;

/* Fills *options with the defaults. */
MLA_API void mla_options_init(mla_options *options);

/* Creates a runtime for one device. With options NULL the defaults apply. Without a driver or a
 * GPU it still succeeds (mla_runtime_get_info says why there is no device): compilation works
 * for an explicit arch and every GPU call returns MLA_ERR_NO_DEVICE. *out is NULL on failure. */
MLA_API mla_status mla_runtime_create(const mla_options *options, mla_runtime **out);

/* Destroys a runtime and unloads its kernels. NULL is a no-op. Not while kernels of it run. */
MLA_API void mla_runtime_destroy(mla_runtime *runtime);

/* What a runtime sees. Strings live as long as the runtime. */
typedef struct mla_runtime_info {
    int has_device;          /* 1 if a CUDA device is in use */
    int driver_version;      /* cuDriverGetVersion, 0 without a driver */
    int device;              /* device ordinal */
    char device_name[256];   /* "" without a device */
    int sm_count;            /* multiprocessors, 0 without a device */
    int compute_capability;  /* major * 10 + minor, 0 without a device */
    const char *arch;        /* compile target, e.g. "sm_90a" */
    int nvrtc_version;       /* major * 1000 + minor * 10 */
    const char *cache_dir;   /* "" when the disk cache is off */
    int cache_writable;      /* 0: entries are compiled in memory only */
    const char *kernel_source;   /* "embedded" or the kernel source folder */
    const char *cuda_include;    /* CUDA toolkit folder whose include/ NVRTC gets ("" if none) */
    const char *no_device_reason;/* why there is no device ("" with one) */
} mla_runtime_info;

/* Fills *info. */
MLA_API mla_status mla_runtime_get_info(mla_runtime *runtime, mla_runtime_info *info);

/* ---- tensors ------------------------------------------------------------------------------ */

/* DLPack codes of the fp8/fp4 types (DLPack >= 1.0); raw uint8 is accepted wherever these are. */
#define MLA_DL_FLOAT8_E4M3FN 10
#define MLA_DL_FLOAT8_E5M2 12
#define MLA_DL_FLOAT4_E2M1FN 17

/* A tensor the library returns: a DLTensor with storage for its shape and strides. */
typedef struct mla_tensor {
    DLTensor tensor;
    int64_t shape[4];
    int64_t strides[4];
} mla_tensor;

/* Device memory the library allocated (mla_workspace). Free with mla_buffer_free. */
typedef struct mla_buffer {
    mla_tensor view;      /* 1-D uint8 tensor over the allocation */
    CUdeviceptr ptr;
    size_t bytes;
} mla_buffer;

/* Frees a buffer from mla_workspace and clears *buffer. NULL or an empty buffer is a no-op. */
MLA_API void mla_buffer_free(mla_runtime *runtime, mla_buffer *buffer);

#ifdef __cplusplus
}
#endif

#include "mlajit/dsv4.h"
#include "mlajit/fakequant.h"
#include "mlajit/flashmla.h"

#endif /* MLAJIT_MLAJIT_H */
