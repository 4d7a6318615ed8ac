/* NVRTC: one program per compilation (programs are not shared across threads), the kernel_src
 * closure of the source passed as named headers, the entry point found through its name
 * expression, SASS for a real sm_XX[a] target. */
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"

const char *const mla__nvrtc_options[] = {"--std=c++17", "-default-device", "-DMLAJIT_NVRTC=1"};
const int mla__nvrtc_option_count = (int)(sizeof mla__nvrtc_options / sizeof mla__nvrtc_options[0]);

int mla__nvrtc_version(void) {
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return 0;
    return major * 1000 + minor * 10;
}

#define NVRTC_CHECK(call, what)                                                                  \
    do {                                                                                         \
        nvrtcResult r_ = (call);                                                                 \
        if (r_ != NVRTC_SUCCESS) {                                                               \
            status = MLA_ERROR(MLA_ERR_COMPILE, "%s: %s: %s", source, what,                      \
                               nvrtcGetErrorString(r_));                                         \
            goto done;                                                                           \
        }                                                                                        \
    } while (0)

/* Appends the program log to the last error message. */
static void append_log(nvrtcProgram prog) {
    size_t n = 0;
    if (nvrtcGetProgramLogSize(prog, &n) != NVRTC_SUCCESS || n <= 1) return;
    char *log = malloc(n);
    if (log && nvrtcGetProgramLog(prog, log) == NVRTC_SUCCESS) {
        mla__error_append("\n");
        mla__error_append(log);
    }
    free(log);
}

static int build_options(const mla_runtime *rt, const char *arch, const char **opts, char *arch_opt,
                         size_t arch_size) {
    int n = 0;
    for (int i = 0; i < mla__nvrtc_option_count; i++) opts[n++] = mla__nvrtc_options[i];
    snprintf(arch_opt, arch_size, "--gpu-architecture=%s", arch);
    opts[n++] = arch_opt;
    for (int i = 0; i < 2; i++)
        if (rt->include_opts[i][0]) opts[n++] = rt->include_opts[i];
    return n;
}

mla_status mla__nvrtc_compile(const mla_runtime *rt, const char *source, const char *name_expr,
                              const char *arch, void **cubin, size_t *cubin_size, char *lowered,
                              size_t lowered_size) {
    mla_status status = MLA_OK;
    nvrtcProgram prog = NULL;
    mla__source_set *set = malloc(sizeof *set);
    *cubin = NULL;
    MLA_RETURN_ERROR_IF(!set, MLA_ERR_OUT_OF_MEMORY, "%s: out of memory", source);
    status = mla__source_closure(rt, source, set);
    if (status != MLA_OK) goto done;
    const char *names[MLA_SOURCE_SET_MAX];
    for (int i = 0; i < set->count; i++) names[i] = set->paths[i];
    NVRTC_CHECK(nvrtcCreateProgram(&prog, set->texts[0], source, set->count - 1, set->texts + 1,
                                   names + 1), "nvrtcCreateProgram");
    NVRTC_CHECK(nvrtcAddNameExpression(prog, name_expr), "nvrtcAddNameExpression");
    const char *opts[16];
    char arch_opt[64];
    int n_opts = build_options(rt, arch, opts, arch_opt, sizeof arch_opt);
    nvrtcResult r = nvrtcCompileProgram(prog, n_opts, opts);
    if (r != NVRTC_SUCCESS) {
        status = MLA_ERROR(MLA_ERR_COMPILE, "%s (%s, %s): compilation failed: %s", source,
                           name_expr, arch, nvrtcGetErrorString(r));
        append_log(prog);
        goto done;
    }
    const char *low = NULL;
    NVRTC_CHECK(nvrtcGetLoweredName(prog, name_expr, &low), "nvrtcGetLoweredName");
    if (strlen(low) >= lowered_size) {
        status = MLA_ERROR(MLA_ERR_INTERNAL, "%s: lowered name of %s too long", source, name_expr);
        goto done;
    }
    snprintf(lowered, lowered_size, "%s", low);
    NVRTC_CHECK(nvrtcGetCUBINSize(prog, cubin_size), "nvrtcGetCUBINSize");
    if (*cubin_size == 0) {
        status = MLA_ERROR(MLA_ERR_COMPILE, "%s: NVRTC produced an empty cubin for %s (a real "
                           "sm_XX target is needed)", source, arch);
        goto done;
    }
    *cubin = malloc(*cubin_size);
    if (!*cubin) {
        status = MLA_ERROR(MLA_ERR_OUT_OF_MEMORY, "%s: out of memory for the cubin", source);
        goto done;
    }
    NVRTC_CHECK(nvrtcGetCUBIN(prog, *cubin), "nvrtcGetCUBIN");
done:
    if (status != MLA_OK) {
        free(*cubin);
        *cubin = NULL;
    }
    if (prog) nvrtcDestroyProgram(&prog);
    free(set);
    return status;
}
