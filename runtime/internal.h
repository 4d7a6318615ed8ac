/* mlajit internals shared by runtime/, cache/, tools/ and the tests (never installed).
 * Internal non-static functions are named mla__*. */
#ifndef MLAJIT_INTERNAL_H
#define MLAJIT_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>

#include "mlajit/mlajit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors (runtime/error.c) -------------------------------------------------------------- */

/* Records the thread's last error message (printf style) and returns code. */
mla_status mla__error(mla_status code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define MLA_ERROR(code, ...) mla__error((code), __FILE__, __LINE__, __VA_ARGS__)
/* Return code with a message when cond holds. */
#define MLA_RETURN_ERROR_IF(cond, code, ...)                                                     \
    do {                                                                                         \
        if (cond) return mla__error((code), __FILE__, __LINE__, __VA_ARGS__);                    \
    } while (0)
/* Return the status of expr when it is not MLA_OK (its message is already recorded). */
#define MLA_FORWARD_IF_ERROR(expr)                                                               \
    do {                                                                                         \
        mla_status mla_s_ = (expr);                                                              \
        if (mla_s_ != MLA_OK) return mla_s_;                                                     \
    } while (0)
#define MLA_ARG_CHECK(cond, ...) MLA_RETURN_ERROR_IF(!(cond), MLA_ERR_INVALID_ARGUMENT, __VA_ARGS__)

/* Appends text to the thread's last error message (e.g. an NVRTC log). */
void mla__error_append(const char *text);

/* ---- logging (runtime/log.c) -------------------------------------------------------------- */

void mla__log(const mla_runtime *rt, mla_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- driver (runtime/driver.c) ------------------------------------------------------------ */

/* The CUDA driver ABI the function table is resolved at (cuGetProcAddress cudaVersion). */
#define MLA_DRIVER_ABI_VERSION 12000

#define MLA_DRIVER_FUNCS(X)                                                                      \
    X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString)                        \
    X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetAttribute) X(cuDeviceGetName)                 \
    X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxGetCurrent)                   \
    X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuModuleLoadData) X(cuModuleUnload)                 \
    X(cuModuleGetFunction) X(cuFuncSetAttribute) X(cuFuncGetAttribute) X(cuLaunchKernel)         \
    X(cuLaunchKernelEx) X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD) X(cuMemcpyDtoH)               \
    X(cuMemsetD8) X(cuMemsetD8Async) X(cuMemsetD32Async) X(cuMemcpyHtoDAsync)                    \
    X(cuMemcpyDtoHAsync) X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize)            \
    X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuGraphInstantiateWithFlags) X(cuGraphLaunch)        \
    X(cuGraphExecDestroy) X(cuGraphDestroy) X(cuEventCreate) X(cuEventDestroy)                  \
    X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime) X(cuPointerGetAttribute)        \
    X(cuTensorMapEncodeTiled)

typedef struct mla__driver {
    void *handle; /* dlopen handle of libcuda.so.1 */
#define MLA_DRIVER_FIELD_(name) __typeof__(&name) name;
    MLA_DRIVER_FUNCS(MLA_DRIVER_FIELD_)
#undef MLA_DRIVER_FIELD_
} mla__driver;

/* Loads libcuda.so.1 and resolves the table. MLA_ERR_NO_DEVICE with a message if absent. */
mla_status mla__driver_load(mla__driver *drv);
void mla__driver_unload(mla__driver *drv);
/* Turns a CUresult into MLA_OK or MLA_ERR_CUDA with "what: CUDA_ERROR_X (text)". */
mla_status mla__cu_check(const mla__driver *drv, CUresult r, const char *what, const char *file,
                         int line);
#define MLA_CU(rt, call)                                                                         \
    MLA_FORWARD_IF_ERROR(mla__cu_check(&(rt)->drv, (rt)->drv.call, #call, __FILE__, __LINE__))

/* ---- kernel specs (runtime/spec.c, one builder per family) -------------------------------- */

#define MLA_SPEC_MAX_PARAMS 12
#define MLA_NAME_MAX 64

/* One integer parameter of a specialization, in the family's fixed order. */
typedef struct mla__param {
    char name[32];
    long long value;
} mla__param;

/* A specialization: everything that selects one compiled kernel, except the arch. Plain values
 * only, so it can be copied, compared with memcmp (after mla__spec_init) and used as a table key. */
typedef struct mla__spec {
    char kernel[MLA_NAME_MAX];   /* kernel kind, e.g. "dsv4_attention_plan" */
    int n_params;
    mla__param params[MLA_SPEC_MAX_PARAMS];
} mla__spec;

/* Launch needs of a compiled kernel, stored with the cubin. */
typedef struct mla__launch_info {
    char lowered_name[256];     /* the mangled entry point */
    int threads;                /* threads per block */
    int dynamic_smem;           /* bytes of dynamic shared memory */
    int cluster;                /* cluster size along x (1: none) */
} mla__launch_info;

/* A kernel kind: where its source lives and how a spec becomes a compilation. */
typedef struct mla__kernel_kind {
    const char *name;        /* "dsv4_attention_plan" */
    const char *source;      /* path relative to kernel_src/, e.g. "dsv4/plan.cu" */
    const char *const *params; /* the spec's parameter names in their fixed order, NULL-ended */
    /* Checks a spec's params and writes the name expression to compile (e.g.
     * "mla::dsv4::plan_kernel<256>") and the launch needs (minus lowered_name). */
    mla_status (*build)(const mla__spec *spec, char *name_expr, size_t name_expr_size,
                        mla__launch_info *launch);
    /* NULL: launched on every target. Else the one target the runtime launches the kind on
     * (it still compiles for others, for the compile tests); `mlajit precompile` skips the
     * others. */
    const char *only_arch;
} mla__kernel_kind;

/* The table of kernel kinds (runtime/spec.c); NULL if name is unknown. */
const mla__kernel_kind *mla__kernel_kind_find(const char *name);
/* All kinds, for listing; *count set. */
const mla__kernel_kind *mla__kernel_kinds(int *count);

void mla__spec_init(mla__spec *spec, const char *kernel);
/* Appends a parameter; MLA_ERR_INTERNAL when full. */
mla_status mla__spec_add(mla__spec *spec, const char *name, long long value);
/* Reads a spec from JSON {"kernel": "...", "<param>": int, ...}; params in the kind's order. */
mla_status mla__spec_from_json(const void *cjson_object, mla__spec *spec);
/* Writes "kernel(p1=v1,p2=v2)" for messages and listings. */
void mla__spec_describe(const mla__spec *spec, char *out, size_t size);

/* ---- kernel sources (runtime/sources.c + the generated embedded table) -------------------- */

/* Returns the text of kernel_src/<path> (embedded, or read from kernel_dir when set); NULL with
 * an error recorded if missing. The text is owned by the runtime (embedded: static). */
const char *mla__source_get(const mla_runtime *rt, const char *path, size_t *len);
/* Hash (hex, 32 chars + NUL) of a source and every kernel_src file it includes ("..." includes,
 * resolved relative to kernel_src/ and to the including file), in a fixed order. */
mla_status mla__source_hash(const mla_runtime *rt, const char *path, char out[33]);
/* A source and the kernel_src files it includes (root first, then depth-first order). */
#define MLA_SOURCE_SET_MAX 64
typedef struct mla__source_set {
    int count;
    char paths[MLA_SOURCE_SET_MAX][128];
    const char *texts[MLA_SOURCE_SET_MAX];
    size_t sizes[MLA_SOURCE_SET_MAX];
} mla__source_set;
mla_status mla__source_closure(const mla_runtime *rt, const char *path, mla__source_set *set);
/* Frees the sources read from kernel_dir. */
void mla__sources_free(mla_runtime *rt);
/* Embedded table, generated at build time. */
typedef struct mla__embedded_file {
    const char *path;
    const char *data;
    size_t size;
} mla__embedded_file;
extern const mla__embedded_file mla__embedded_files[];
extern const size_t mla__embedded_file_count;

/* ---- NVRTC (runtime/nvrtc.c) -------------------------------------------------------------- */

/* The compile options of every kernel, without -I paths and -arch (they enter the key). */
extern const char *const mla__nvrtc_options[];
extern const int mla__nvrtc_option_count;

/* Compiles kernel_src/<source> for arch with name_expr registered; returns a malloc'd cubin and
 * the lowered name. A failed compile returns MLA_ERR_COMPILE with the NVRTC log in the message. */
mla_status mla__nvrtc_compile(const mla_runtime *rt, const char *source, const char *name_expr,
                              const char *arch, void **cubin, size_t *cubin_size,
                              char *lowered, size_t lowered_size);
/* NVRTC version as major * 1000 + minor * 10. */
int mla__nvrtc_version(void);

/* ---- cache (cache/) ------------------------------------------------------------------------ */

#define MLA_CACHE_SCHEMA 1
#define MLA_CACHE_MAGIC "MLAJITK1"

/* What enters the key, in its fixed order. */
typedef struct mla__key_inputs {
    const char *library_version;  /* mla_version_string() */
    const char *source;           /* kernel_src path */
    const char *source_hash;      /* mla__source_hash */
    int nvrtc_version;
    const char *arch;
    const char *const *options;   /* compile options, no absolute paths */
    int n_options;
    const char *name_expr;
    const mla__spec *spec;
} mla__key_inputs;

/* Builds the canonical key JSON (malloc'd, compact, fixed field order). */
char *mla__key_json(const mla__key_inputs *in);
/* Hash of a key JSON: 32 lowercase hex chars + NUL. */
void mla__key_hash(const char *key_json, char out[33]);

/* One cache entry in memory. */
typedef struct mla__entry {
    char *key_json;            /* malloc'd */
    mla__launch_info launch;
    void *cubin;               /* malloc'd */
    size_t cubin_size;
} mla__entry;
void mla__entry_free(mla__entry *e);

/* File name of an entry: "<hash>.mlak" (the key's hash). */
void mla__entry_path(const char *dir, const char *hash, char *out, size_t size);

/* Serializes an entry into the file format (malloc'd *buf). */
mla_status mla__entry_encode(const mla__entry *e, void **buf, size_t *size);
/* Parses and checks a file image (magic, schema, lengths, checksum, JSON). MLA_ERR_CACHE with
 * the reason if corrupt. */
mla_status mla__entry_decode(const void *buf, size_t size, mla__entry *e);

/* Reads dir/<hash>.mlak: MLA_OK (and *found = 1) if present, intact and its key equals key_json;
 * *found = 0 if absent; MLA_ERR_CACHE if corrupt or a different key (the caller rebuilds). */
mla_status mla__cache_read(const char *dir, const char *hash, const char *key_json,
                           mla__entry *e, int *found);
/* Publishes an entry atomically (unique temp file, fsync, rename, fsync of dir). */
mla_status mla__cache_write(const char *dir, const char *hash, const mla__entry *e);
/* Takes the exclusive cross-process build lock of one key (F_OFD_SETLKW on dir/<hash>.lock). */
mla_status mla__cache_lock(const char *dir, const char *hash, int *fd);
void mla__cache_unlock(int fd);
/* Creates dir (and parents) and reports whether entries can be written there. */
int mla__cache_dir_writable(const char *dir);

/* Listing and pruning, for `mlajit cache list/verify/prune` (cache/store.c). */
/* Called for each dir/<hash>.mlak in name order: entry is the decoded entry (intact, and its key
 * hashes to the file's name) or NULL with error saying why the file is corrupt or unreadable.
 * Both are owned by mla__cache_foreach and valid during the call only. Nonzero stops the walk. */
typedef int (*mla__cache_visit)(const char *path, const char *hash, const mla__entry *entry,
                                const char *error, void *user);
/* Visits the entries of dir (an absent dir has none); MLA_ERR_IO if dir cannot be listed. */
mla_status mla__cache_foreach(const char *dir, mla__cache_visit visit, void *user);
/* Removes from dir: corrupt entries, temp files older than an hour, lock files whose entry is
 * gone and which nobody holds, and every entry (remove_all) or the entries last modified more than
 * older_than seconds ago (older_than >= 0; negative: no age limit). *removed counts the files. */
mla_status mla__cache_prune(const char *dir, int remove_all, long long older_than, int *removed);

/* ---- JIT and the loaded-kernel table (runtime/jit.c) -------------------------------------- */

/* A kernel ready to launch. */
typedef struct mla__kernel {
    mla__spec spec;
    CUmodule module;
    CUfunction function;
    mla__launch_info launch;
} mla__kernel;

/* How an entry was obtained, for tools and tests. */
typedef enum mla__origin {
    MLA_ORIGIN_MEMORY = 0,   /* already loaded in this runtime */
    MLA_ORIGIN_DISK = 1,     /* read from the disk cache */
    MLA_ORIGIN_COMPILED = 2, /* compiled now */
} mla__origin;

/* Returns the loaded kernel of spec for the runtime's arch: lookup, else disk, else compile
 * (serialized across processes), then load. Thread safe. */
mla_status mla__get_kernel(mla_runtime *rt, const mla__spec *spec, const mla__kernel **out);
/* Same, reporting the origin (NULL allowed). */
mla_status mla__get_kernel_ex(mla_runtime *rt, const mla__spec *spec, const mla__kernel **out,
                              mla__origin *origin);
/* Compiles spec for arch into the disk cache (or finds it there) without loading it: the
 * precompile path, needs no device. Writes the key hash to hash_out if not NULL. */
mla_status mla__precompile(mla_runtime *rt, const mla__spec *spec, const char *arch,
                           mla__origin *origin, char hash_out[33]);
/* Builds key JSON and hash for spec on arch (also fills the entry's launch info and name expr). */
mla_status mla__spec_key(const mla_runtime *rt, const mla__spec *spec, const char *arch,
                         char **key_json, char hash[33], char *name_expr, size_t name_expr_size,
                         mla__launch_info *launch);

/* ---- the runtime handle (runtime/runtime.c) ----------------------------------------------- */

#define MLA_PATH_MAX 4096

typedef struct mla__table_slot {
    mla__spec spec;
    mla__kernel *kernel;
} mla__table_slot;

struct mla_runtime {
    mla_options options;           /* strings below, not the caller's */
    int log_to_stderr;             /* $MLAJIT_LOG set and no callback */
    char cache_dir[MLA_PATH_MAX];  /* "" : no disk cache */
    int cache_writable;
    char kernel_dir[MLA_PATH_MAX]; /* "" : embedded sources */
    char arch[16];
    char cuda_home[MLA_PATH_MAX];  /* folder with include/cuda.h */
    char include_opts[2][MLA_PATH_MAX + 32]; /* -I<cuda>/include, -I<cuda>/include/cccl */
    mla__driver drv;
    int has_device;
    int driver_version;
    CUdevice device;
    CUcontext context;             /* the device's primary context */
    int sm_count;
    int cc;                        /* major * 10 + minor */
    char device_name[256];
    char no_device_reason[512];    /* why has_device is 0 */
    int flashmla_decode_portable;  /* $MLAJIT_FLASHMLA_DECODE was "portable" at create: the dense
                                      FlashMLA decode runs the portable kernel on sm_90a too */
    int flashmla_decode_pair;      /* ... was "pair": the sm_90a dense decode's cp.async path on
                                      the CTA pair (flashmla_decode_sm90x2) where it applies */
    int fakequant_prefill_portable; /* $MLAJIT_FAKEQUANT_PREFILL was "portable" at create: the
                                       fake-quant prefill runs the fp32 kernel everywhere */
    int fakequant_prefill_warps;    /* "mma4", "mma8", "mma32": the mma.sync prefill (not the */
    int fakequant_prefill_rows;     /* sm_90a wgmma one) with this CTA's warps and rows per warp
                                       (4/16, 8/16, 4/32); 0: default */
    int fakequant_decode_fp32;     /* $MLAJIT_FAKEQUANT_DECODE was "fp32" at create: the fake-quant
                                      decode runs decode.cu, not the tensor-core kernels */
    int fakequant_decode_mma;      /* ... was "mma": it runs decode_mma.cu where it applies, not
                                      the sm_90a decode_sm90.cu */
    int fakequant_decode_sm90;     /* ... was "sm90": decode_sm90.cu wherever it applies, for every
                                      mode (by default only for mla__fq_sm90_default's modes) */
    int fakequant_decode_dense;    /* ... was "dense": without quantization the FlashMLA-compatible
                                      dense decode where it applies (MLA__FQ_DENSE_DEFAULT) */
    int fakequant_dense_metadata;  /* $MLAJIT_FAKEQUANT_DENSE_SCHED was "metadata" at create */
    int fakequant_dense_chunk;     /* $MLAJIT_FAKEQUANT_DENSE_CHUNK at create (4096, 8192, 16384 or
                                      32768: the dense path's chunk keys, for comparisons); 0:
                                      MLA__FQ_DENSE_CHUNK */
    int flashmla_sparse_prefetch;  /* $MLAJIT_FLASHMLA_SPARSE_PREFETCH was "1" at create: the
                                      sm_90a sparse kernels prefetch gathered rows to L2 (measured
                                      slower; off by default) */
    int dsv4_outproj;              /* $MLAJIT_DSV4_OUTPROJ at create: 0 unset, 1 "split" (T <= 16:
                                      kernels A and B as two launches), 2 "fused" (one launch),
                                      3 "pdl" (T > 16: kernel A a programmatic dependent),
                                      4 "fused-nopf" (one launch, no L2 prefetch),
                                      5 "fused-pfb" (one launch, 6 wo_b steps prefetched),
                                      6 "fused,pdl" (2 and 3), 7 "stream64" (16 < T <= 64
                                      on the stream kernels), 8 "fused,stream64" (2 and 7) */
    int dsv4_kv_splits;            /* $MLAJIT_DSV4_KV_SPLITS at create: 0 unset (the table of
                                      mla__dsv4_kv_splits), else 2, 4, 8 or 16 parts per token
                                      at every T <= 16, both kinds (comparisons) */
    const char *flashmla_sparse_sm90; /* $MLAJIT_FLASHMLA_SPARSE_SM90 at create: "pingpong", "ws",
                                      "x2" or "x2c" (the sm_90a sparse kernels of one structure,
                                      for comparisons), or NULL (the defaults) */
    /* verdicts of the fake-quant codes' shortcut checks (runtime/fakequant.c mla__fq_codes_quick),
     * [0] fp8, [1] NVFP4: 16 words each, (1 << 63) | f16 << 33 | verdict << 32 | scale bits,
     * read and written whole (calls may come from several threads); 0: empty */
    _Atomic unsigned long long fq_quick[2][16];
    pthread_mutex_t lock;          /* guards the table */
    pthread_mutex_t sources_lock;  /* guards sources */
    mla__table_slot *table;        /* open addressing, capacity a power of two */
    size_t table_cap, table_len;
    struct mla__loaded_source *sources; /* kernel_dir files read so far */
};

/* Unloads and frees every loaded kernel (runtime/jit.c). */
void mla__table_free(mla_runtime *rt);
/* Makes the runtime's context current on this thread; MLA_ERR_NO_DEVICE without a device. */
mla_status mla__runtime_enter(mla_runtime *rt);

/* Launches a kernel: grid x/y/z, the kernel's own block size and dynamic smem. */
mla_status mla__launch(mla_runtime *rt, const mla__kernel *k, unsigned gx, unsigned gy,
                       unsigned gz, CUstream stream, void **args);
/* The same (clusters of the kernel's launch.cluster along x) as the programmatic dependent of
 * the previous kernel on stream (sm_90 and up: it may start before that kernel ends and must
 * griddepcontrol.wait before reading its results; elsewhere an ordinary launch). */
mla_status mla__launch_pdl(mla_runtime *rt, const mla__kernel *k, unsigned gx, unsigned gy,
                           unsigned gz, CUstream stream, void **args);

/* ---- tensor checks (runtime/tensor.c) ----------------------------------------------------- */

/* Expected dtype classes. */
typedef enum mla__dtype {
    MLA_DT_INT32,
    MLA_DT_UINT8,
    MLA_DT_FP8_E4M3,   /* DLPack float8_e4m3fn or uint8 */
    MLA_DT_BF16,
    MLA_DT_FP32,
    MLA_DT_BF16_OR_FP16,
} mla__dtype;

/* Checks: not NULL, on the runtime's CUDA device (rt may be NULL: any CUDA device), dtype, ndim.
 * name is the argument's name used in messages. */
mla_status mla__check_tensor(const mla_runtime *rt, const DLTensor *t, const char *name,
                             mla__dtype dtype, int ndim);
/* Checks dimension d equals want ("kv_indices: expected shape[0] == 7 (T), got 5"). */
mla_status mla__check_dim(const DLTensor *t, const char *name, int d, int64_t want,
                          const char *what);
/* Number of elements. */
int64_t mla__numel(const DLTensor *t);
/* Element stride of dimension d (strides may be NULL: compact row-major). */
int64_t mla__stride(const DLTensor *t, int d);
/* Checks the tensor is compact row-major. */
mla_status mla__check_contiguous(const DLTensor *t, const char *name);
/* Device address of element 0. */
static inline CUdeviceptr mla__data(const DLTensor *t) {
    return (CUdeviceptr)((const char *)t->data + t->byte_offset);
}
/* Checks the data address is a multiple of align bytes. */
mla_status mla__check_align(const DLTensor *t, const char *name, unsigned align);
/* Text of a dtype for messages ("int32", "bfloat16", ...). */
const char *mla__dtype_name(DLDataType dt, char *buf, size_t size);

/* ---- DSV4 workspace (runtime/dsv4_workspace.c) -------------------------------------------- */

/* Layer kinds: each has a barrier bank and a plan slot in the workspace. */
enum { MLA__DSV4_SWA = 0, MLA__DSV4_HCA = 1 };

#define MLA__DSV4_ALIGN 256                                   /* every region */
#define MLA__DSV4_BANK_BYTES (MLA_DSV4_BARRIER_BYTES / 2)     /* one barrier bank per kind */
#define MLA__DSV4_PLAN_SLOT_BYTES 65536                       /* runs first, then the work list */
#define MLA__DSV4_PLAN_RUNS_BYTES (MLA_DSV4_MAX_TOKENS * 4 * 4) /* [640, 4] int32 */
/* End of the fixed part: barrier prefix, SWA plan slot, HCA plan slot. */
#define MLA__DSV4_PLAN_END (MLA_DSV4_BARRIER_BYTES + 2 * MLA__DSV4_PLAN_SLOT_BYTES)
#define MLA__DSV4_MAX_SPLITS 16     /* most KV parts per token of the split-KV partials */
#define MLA__DSV4_PART_SLOTS 64     /* token-parts of part_o / part_lse (T * parts, T <= 16) */
#define MLA__DSV4_SPLIT_TOKENS 64   /* most tokens of a launch with split-K GEMMs (part_k, part_op) */
#define MLA__DSV4_KV_SPLIT_TOKENS 16 /* most tokens of a launch whose KV is split (part_o, part_lse) */
/* Split-K of mla_attention's phase 1 (T <= 64): at most this many K slices per output tile, fp32
 * partial rows of this many columns (the joint [qa 1024 | kv 512 | kv_gate 1024] output). */
#define MLA__DSV4_KSLICES 8
#define MLA__DSV4_PART_K_COLS 2560
/* Split-K of mla_output_proj's GEMMs (T <= 64): at most this many K slices per output tile. */
#define MLA__DSV4_OP_KSLICES 4

/* Byte offsets of the workspace regions for max_tokens T and hidden size H (G wo_a groups). */
typedef struct mla__dsv4_ws_layout {
    int max_tokens;
    long long H, G;
    size_t bank[2];           /* barrier banks [kind] (MLA__DSV4_BANK_BYTES each) */
    size_t plan[2];           /* plan slots [kind]: [640, 4] int32 runs, then the work list */
    size_t qr;                /* mxq(q_lora after RMSNorm), bf16 [T, 1024] (A operand of wq_b) */
    size_t qa, kv;            /* raw wq_a / wkv outputs of mla_attention, bf16 [T, 1024], [T, 512] */
    size_t kv_gate;           /* kv_gate rows of the launch (HCA), fp32 [T, 1024] */
    size_t part_o, part_lse;  /* split partials fp32 [min(T,16), 4, 64, 512], lse [.., 4, 64] */
    size_t part_k;            /* phase-1 split-K partials fp32 [8, min(T,64), 2560] */
    size_t part_op;           /* output-proj split-K partials fp32 [4, min(T,64), 2H] */
    size_t act_q, act_sf;     /* O after combine + inverse RoPE, fp8 [T, 32768], [T, 1024] */
    size_t o_lora;            /* wo_a output bf16 [T, 2H] */
    size_t o_lora_q, o_lora_sf; /* o_lora fp8 [T, 2H], scales [T, 2H / 32] */
    size_t total;             /* bytes of the whole workspace */
} mla__dsv4_ws_layout;

/* Fills *out for T = max_tokens tokens (arguments already checked). */
void mla__dsv4_layout(int max_tokens, long long H, long long G, mla__dsv4_ws_layout *out);
/* Byte offset of the barrier bank / plan slot of a kind (MLA__DSV4_SWA or MLA__DSV4_HCA). */
size_t mla__dsv4_bank_offset(int kind);
size_t mla__dsv4_plan_offset(int kind);
/* Checks a workspace tensor: on rt's device, 1-D uint8, contiguous, 256-byte aligned, at least
 * min_bytes long. */
mla_status mla__dsv4_check_workspace(const mla_runtime *rt, const DLTensor *ws, size_t min_bytes);

/* ---- DSV4 split-KV contract (between mla_attention and mla_output_proj) ------------------ */

/* A launch of T <= MLA__DSV4_KV_SPLIT_TOKENS tokens splits every token's row set (SWA window, then
 * the compressed rows on HCA layers, in that order) into S = mla__dsv4_kv_splits(rt, T, hca)
 * contiguous parts of ceil(n / S) rows; a longer launch splits nothing (S = 0). A split token's
 * q_or_x row is left as q; part s of token t, head h writes
 *   part_o  [t][s][h][512] float32: softmax(part's scores) @ V, normalized within the part
 *                                    (0 for an empty part)
 *   part_lse[t][s][h]      float32: natural-log LSE of the part's scaled scores, no sink
 *                                    (-inf for an empty part)
 * ([T][S] token-parts, T * S <= MLA__DSV4_PART_SLOTS) and mla_output_proj combines them (spec
 * §2.4) and applies the sink. Unsplit tokens' O (normalized with the sink) is written to q_or_x
 * as bf16. */
static inline int mla__dsv4_split(int T) { return T <= MLA__DSV4_KV_SPLIT_TOKENS; }
/* The parts per token (0: unsplit). Each phase-4 work item is (token, 16 or 32 heads, part): the
 * table keeps the items near the SM count (132 on the H200): SWA (<= 128 window rows, 16-head
 * items) 2 parts; HCA (128 + c128_attn_len rows, 128 + 640 in the bench) 16-head items in 16
 * parts at T <= 2, 8 at T <= 4, 4 at T <= 8, and at 8 < T <= 16 32-head items (attention.cu's
 * kWideHcaSplitT) in 4 parts (twice the 16-head table's 2: each dequantized tile shared by twice
 * the heads; T * 2 * 4 = 128 items at T 16). $MLAJIT_DSV4_KV_SPLITS (rt->dsv4_kv_splits) fixes S
 * instead (comparisons). */
static inline int mla__dsv4_kv_splits(const mla_runtime *rt, int T, int hca) {
    if (!mla__dsv4_split(T)) return 0;
    if (rt != NULL && rt->dsv4_kv_splits > 0) {
        int s = rt->dsv4_kv_splits;
        while (T * s > MLA__DSV4_PART_SLOTS) s /= 2;
        return s;
    }
    if (!hca) return 2;
    return T <= 2 ? 16 : (T <= 4 ? 8 : 4);
}

/* Token-parts of the part_o / part_lse regions for launches of up to max_tokens tokens. */
static inline size_t mla__dsv4_part_slots(int max_tokens) {
    size_t t = max_tokens < MLA__DSV4_KV_SPLIT_TOKENS ? (size_t)max_tokens : MLA__DSV4_KV_SPLIT_TOKENS;
    return t * MLA__DSV4_MAX_SPLITS < MLA__DSV4_PART_SLOTS ? t * MLA__DSV4_MAX_SPLITS
                                                           : MLA__DSV4_PART_SLOTS;
}

/* ---- DSV4 kernels (runtime/dsv4.c) -------------------------------------------------------- */

/* Threads per block of the plan kernel (one warp per token). */
#define MLA__DSV4_PLAN_THREADS 128
/* Kind builder of "dsv4_attention_plan" (no params): "mla::dsv4::plan_kernel<128>". */
mla_status mla__dsv4_plan_build(const mla__spec *spec, char *name_expr, size_t size,
                                mla__launch_info *launch);

#ifdef __cplusplus
}
#endif

#endif /* MLAJIT_INTERNAL_H */
