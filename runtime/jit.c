/* Specialization to a loaded kernel: the in-memory table (a warm call is a lookup), then the disk
 * cache, then NVRTC, with cold builds of one key serialized across processes by the cache lock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "runtime/internal.h"

mla_status mla__spec_key(const mla_runtime *rt, const mla__spec *spec, const char *arch,
                         char **key_json, char hash[33], char *name_expr, size_t name_expr_size,
                         mla__launch_info *launch) {
    const mla__kernel_kind *kind = mla__kernel_kind_find(spec->kernel);
    MLA_RETURN_ERROR_IF(!kind, MLA_ERR_INVALID_ARGUMENT, "unknown kernel kind \"%s\"", spec->kernel);
    memset(launch, 0, sizeof *launch);
    MLA_FORWARD_IF_ERROR(kind->build(spec, name_expr, name_expr_size, launch));
    char source_hash[33];
    MLA_FORWARD_IF_ERROR(mla__source_hash(rt, kind->source, source_hash));
    mla__key_inputs in = {
        .library_version = mla_version_string(), .source = kind->source,
        .source_hash = source_hash, .nvrtc_version = mla__nvrtc_version(), .arch = arch,
        .options = mla__nvrtc_options, .n_options = mla__nvrtc_option_count,
        .name_expr = name_expr, .spec = spec,
    };
    *key_json = mla__key_json(&in);
    if (!*key_json) return MLA_ERR_INTERNAL; /* mla__key_json recorded why */
    mla__key_hash(*key_json, hash);
    return MLA_OK;
}

/* Compiles the entry of a key (its key_json and launch already set). */
static mla_status compile_entry(const mla_runtime *rt, const mla__spec *spec, const char *arch,
                                const char *name_expr, mla__entry *e) {
    const mla__kernel_kind *kind = mla__kernel_kind_find(spec->kernel);
    return mla__nvrtc_compile(rt, kind->source, name_expr, arch, &e->cubin, &e->cubin_size,
                              e->launch.lowered_name, sizeof e->launch.lowered_name);
}

/* Disk lookup under the key's lock; compiles and publishes on a miss. */
static mla_status locked_build(const mla_runtime *rt, const mla__spec *spec, const char *arch,
                               const char *hash, const char *name_expr, int force,
                               mla__entry *e, mla__origin *origin) {
    int fd = -1, found = 0;
    mla_status s = mla__cache_lock(rt->cache_dir, hash, &fd);
    if (s != MLA_OK) {
        mla__log(rt, MLA_LOG_WARN, "cache lock failed (%s); compiling without it", mla_last_error());
        fd = -1;
    }
    mla__entry disk = {0};
    s = force ? MLA_OK : mla__cache_read(rt->cache_dir, hash, e->key_json, &disk, &found);
    if (s == MLA_OK && found) { /* another process built it while we waited */
        free(disk.key_json);
        disk.key_json = e->key_json;
        *e = disk;
        *origin = MLA_ORIGIN_DISK;
        goto done;
    }
    if (s != MLA_OK)
        mla__log(rt, MLA_LOG_WARN, "cache entry %s is corrupt (%s); rebuilding", hash,
                 mla_last_error());
    s = compile_entry(rt, spec, arch, name_expr, e);
    if (s != MLA_OK) goto done;
    *origin = MLA_ORIGIN_COMPILED;
    if (mla__cache_write(rt->cache_dir, hash, e) != MLA_OK)
        mla__log(rt, MLA_LOG_WARN, "cannot store cache entry %s (%s); kept in memory", hash,
                 mla_last_error());
done:
    if (fd >= 0) mla__cache_unlock(fd);
    return s;
}

/* The entry of spec on arch: disk cache, else compiled (and stored). e->key_json is set. With
 * force, the disk entry is not read but rebuilt and replaced (it did not load). */
static mla_status obtain_entry(const mla_runtime *rt, const mla__spec *spec, const char *arch,
                               int force, mla__entry *e, char hash[33], mla__origin *origin) {
    char name_expr[256];
    memset(e, 0, sizeof *e);
    MLA_FORWARD_IF_ERROR(mla__spec_key(rt, spec, arch, &e->key_json, hash, name_expr,
                                       sizeof name_expr, &e->launch));
    mla_status s;
    if (!rt->cache_dir[0] || !rt->cache_writable) {
        s = compile_entry(rt, spec, arch, name_expr, e);
        *origin = MLA_ORIGIN_COMPILED;
    } else {
        int found = 0;
        mla__entry disk = {0};
        s = force ? MLA_OK : mla__cache_read(rt->cache_dir, hash, e->key_json, &disk, &found);
        if (s == MLA_OK && found) {
            free(disk.key_json);
            disk.key_json = e->key_json;
            *e = disk;
            *origin = MLA_ORIGIN_DISK;
            return MLA_OK;
        }
        s = locked_build(rt, spec, arch, hash, name_expr, force, e, origin);
    }
    if (s != MLA_OK) mla__entry_free(e);
    return s;
}

mla_status mla__precompile(mla_runtime *rt, const mla__spec *spec, const char *arch,
                           mla__origin *origin, char hash_out[33]) {
    mla__entry e;
    char hash[33];
    mla__origin o = MLA_ORIGIN_COMPILED;
    MLA_FORWARD_IF_ERROR(obtain_entry(rt, spec, arch, 0, &e, hash, &o));
    mla__entry_free(&e);
    if (origin) *origin = o;
    if (hash_out) memcpy(hash_out, hash, 33);
    return MLA_OK;
}

/* ---- the loaded-kernel table ---------------------------------------------------------------- */

static size_t spec_slot(const mla__spec *spec, size_t cap) {
    return (size_t)XXH3_64bits(spec, sizeof *spec) & (cap - 1);
}

/* Finds spec's kernel; caller holds rt->lock. */
static mla__kernel *table_find(const mla_runtime *rt, const mla__spec *spec) {
    if (!rt->table_cap) return NULL;
    for (size_t i = spec_slot(spec, rt->table_cap);; i = (i + 1) & (rt->table_cap - 1)) {
        const mla__table_slot *slot = &rt->table[i];
        if (!slot->kernel) return NULL;
        if (memcmp(&slot->spec, spec, sizeof *spec) == 0) return slot->kernel;
    }
}

static void table_put(mla__table_slot *table, size_t cap, mla__kernel *k) {
    size_t i = spec_slot(&k->spec, cap);
    while (table[i].kernel) i = (i + 1) & (cap - 1);
    table[i].spec = k->spec;
    table[i].kernel = k;
}

/* Inserts k, growing the table at half load; caller holds rt->lock. */
static mla_status table_insert(mla_runtime *rt, mla__kernel *k) {
    if (2 * (rt->table_len + 1) > rt->table_cap) {
        size_t cap = rt->table_cap ? 2 * rt->table_cap : 64;
        mla__table_slot *t = calloc(cap, sizeof *t);
        MLA_RETURN_ERROR_IF(!t, MLA_ERR_OUT_OF_MEMORY, "kernel table: out of memory");
        for (size_t i = 0; i < rt->table_cap; i++)
            if (rt->table[i].kernel) table_put(t, cap, rt->table[i].kernel);
        free(rt->table);
        rt->table = t;
        rt->table_cap = cap;
    }
    table_put(rt->table, rt->table_cap, k);
    rt->table_len++;
    return MLA_OK;
}

void mla__table_free(mla_runtime *rt) {
    for (size_t i = 0; i < rt->table_cap; i++) {
        mla__kernel *k = rt->table[i].kernel;
        if (!k) continue;
        if (rt->has_device && k->module) rt->drv.cuModuleUnload(k->module);
        free(k);
    }
    free(rt->table);
    rt->table = NULL;
    rt->table_cap = rt->table_len = 0;
}

/* Loads a cubin and sets the function's launch attributes once. */
static mla_status load_module(mla_runtime *rt, const mla__entry *e, mla__kernel *k) {
    MLA_CU(rt, cuModuleLoadData(&k->module, e->cubin));
    mla_status s = mla__cu_check(&rt->drv, rt->drv.cuModuleGetFunction(&k->function, k->module,
                                 e->launch.lowered_name), "cuModuleGetFunction", __FILE__, __LINE__);
    if (s == MLA_OK && e->launch.dynamic_smem > 48 * 1024)
        s = mla__cu_check(&rt->drv, rt->drv.cuFuncSetAttribute(k->function,
                          CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, e->launch.dynamic_smem),
                          "cuFuncSetAttribute(max dynamic shared memory)", __FILE__, __LINE__);
    if (s != MLA_OK) {
        rt->drv.cuModuleUnload(k->module);
        k->module = NULL;
    }
    k->launch = e->launch;
    return s;
}

/* Loads spec's kernel from disk or NVRTC; an entry from disk that does not load is rebuilt and
 * replaced. */
static mla_status load_kernel(mla_runtime *rt, const mla__spec *spec, mla__kernel *k,
                              mla__origin *origin) {
    mla__entry e;
    char hash[33];
    MLA_FORWARD_IF_ERROR(obtain_entry(rt, spec, rt->arch, 0, &e, hash, origin));
    mla_status s = load_module(rt, &e, k);
    mla__entry_free(&e);
    if (s == MLA_OK || *origin != MLA_ORIGIN_DISK) return s;
    mla__log(rt, MLA_LOG_WARN, "cache entry %s does not load (%s); rebuilding", hash,
             mla_last_error());
    MLA_FORWARD_IF_ERROR(obtain_entry(rt, spec, rt->arch, 1, &e, hash, origin));
    s = load_module(rt, &e, k);
    mla__entry_free(&e);
    return s;
}

mla_status mla__get_kernel_ex(mla_runtime *rt, const mla__spec *spec, const mla__kernel **out,
                              mla__origin *origin) {
    pthread_mutex_lock(&rt->lock);
    mla__kernel *k = table_find(rt, spec);
    pthread_mutex_unlock(&rt->lock);
    if (origin) *origin = MLA_ORIGIN_MEMORY;
    if (k) {
        *out = k;
        return MLA_OK;
    }
    MLA_FORWARD_IF_ERROR(mla__runtime_enter(rt));
    k = calloc(1, sizeof *k);
    MLA_RETURN_ERROR_IF(!k, MLA_ERR_OUT_OF_MEMORY, "kernel table: out of memory");
    k->spec = *spec;
    mla__origin o;
    mla_status s = load_kernel(rt, spec, k, &o);
    if (s != MLA_OK) {
        free(k);
        return s;
    }
    pthread_mutex_lock(&rt->lock);
    mla__kernel *winner = table_find(rt, spec); /* another thread may have loaded it meanwhile */
    if (!winner && (s = table_insert(rt, k)) == MLA_OK) winner = k;
    pthread_mutex_unlock(&rt->lock);
    if (winner != k) {
        rt->drv.cuModuleUnload(k->module);
        free(k);
    }
    if (origin) *origin = o;
    *out = winner;
    return winner ? MLA_OK : s;
}

mla_status mla__get_kernel(mla_runtime *rt, const mla__spec *spec, const mla__kernel **out) {
    return mla__get_kernel_ex(rt, spec, out, NULL);
}

/* cuLaunchKernelEx of k over grid (gx, gy, gz) with its block size and dynamic shared memory and
 * the n launch attributes attrs. */
static mla_status launch_ex(mla_runtime *rt, const mla__kernel *k, unsigned gx, unsigned gy,
                            unsigned gz, CUstream stream, void **args, CUlaunchAttribute *attrs,
                            unsigned n) {
    CUlaunchConfig cfg = {
        .gridDimX = gx, .gridDimY = gy, .gridDimZ = gz, .blockDimX = (unsigned)k->launch.threads,
        .blockDimY = 1, .blockDimZ = 1, .sharedMemBytes = (unsigned)k->launch.dynamic_smem,
        .hStream = stream, .attrs = attrs, .numAttrs = n,
    };
    MLA_CU(rt, cuLaunchKernelEx(&cfg, k->function, args, NULL));
    return MLA_OK;
}

mla_status mla__launch(mla_runtime *rt, const mla__kernel *k, unsigned gx, unsigned gy,
                       unsigned gz, CUstream stream, void **args) {
    if (k->launch.cluster <= 1) {
        MLA_CU(rt, cuLaunchKernel(k->function, gx, gy, gz, (unsigned)k->launch.threads, 1, 1,
                                  (unsigned)k->launch.dynamic_smem, stream, args, NULL));
        return MLA_OK;
    }
    CUlaunchAttribute attr = {.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION};
    attr.value.clusterDim.x = (unsigned)k->launch.cluster;
    attr.value.clusterDim.y = attr.value.clusterDim.z = 1;
    return launch_ex(rt, k, gx, gy, gz, stream, args, &attr, 1);
}

mla_status mla__launch_pdl(mla_runtime *rt, const mla__kernel *k, unsigned gx, unsigned gy,
                           unsigned gz, CUstream stream, void **args) {
    CUlaunchAttribute attr[2];
    memset(attr, 0, sizeof attr);
    unsigned n = 0;
    if (rt->cc >= 90) {
        attr[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr[n++].value.programmaticStreamSerializationAllowed = 1;
    }
    if (k->launch.cluster > 1) {
        attr[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attr[n].value.clusterDim.x = (unsigned)k->launch.cluster;
        attr[n].value.clusterDim.y = attr[n].value.clusterDim.z = 1;
        n++;
    }
    return launch_ex(rt, k, gx, gy, gz, stream, args, attr, n);
}
