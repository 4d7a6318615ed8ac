/* The CUDA driver, loaded at run time: dlopen("libcuda.so.1"), then every entry point through
 * cuGetProcAddress at the pinned ABI version MLA_DRIVER_ABI_VERSION. Nothing links -lcuda. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "runtime/internal.h"

typedef CUresult (*mla__get_proc_fn)(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult *status);

/* Resolves one symbol; name is the base name ("cuMemAlloc"), the ABI version picks the variant. */
static mla_status resolve(mla__get_proc_fn get_proc, const char *name, void **pfn) {
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r = get_proc(name, pfn, MLA_DRIVER_ABI_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &found);
    MLA_RETURN_ERROR_IF(r != CUDA_SUCCESS || found != CU_GET_PROC_ADDRESS_SUCCESS || !*pfn,
                        MLA_ERR_NO_DEVICE,
                        "CUDA driver: entry point %s not found at ABI %d (driver too old?)", name,
                        MLA_DRIVER_ABI_VERSION);
    return MLA_OK;
}

mla_status mla__driver_load(mla__driver *drv) {
    memset(drv, 0, sizeof *drv);
    drv->handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!drv->handle) {
        const char *why = dlerror();
        return MLA_ERROR(MLA_ERR_NO_DEVICE, "CUDA driver: cannot load libcuda.so.1 (%s)",
                         why ? why : "unknown reason");
    }
    mla__get_proc_fn get_proc = (mla__get_proc_fn)dlsym(drv->handle, "cuGetProcAddress_v2");
    if (!get_proc) {
        mla__driver_unload(drv);
        return MLA_ERROR(MLA_ERR_NO_DEVICE, "CUDA driver: libcuda.so.1 has no cuGetProcAddress_v2 "
                                            "(driver older than CUDA 12)");
    }
    mla_status s = MLA_OK;
#define MLA_RESOLVE_(name) \
    if (s == MLA_OK) s = resolve(get_proc, #name, (void **)&drv->name);
    MLA_DRIVER_FUNCS(MLA_RESOLVE_)
#undef MLA_RESOLVE_
    if (s != MLA_OK) mla__driver_unload(drv);
    return s;
}

void mla__driver_unload(mla__driver *drv) {
    if (drv->handle) dlclose(drv->handle);
    memset(drv, 0, sizeof *drv);
}

mla_status mla__cu_check(const mla__driver *drv, CUresult r, const char *what, const char *file,
                         int line) {
    if (r == CUDA_SUCCESS) return MLA_OK;
    const char *name = NULL, *text = NULL;
    if (drv->cuGetErrorName) drv->cuGetErrorName(r, &name);
    if (drv->cuGetErrorString) drv->cuGetErrorString(r, &text);
    mla_status code = r == CUDA_ERROR_OUT_OF_MEMORY ? MLA_ERR_OUT_OF_MEMORY : MLA_ERR_CUDA;
    return mla__error(code, file, line, "%s: %s (%s)", what, name ? name : "CUDA_ERROR_?",
                      text ? text : "no description");
}
