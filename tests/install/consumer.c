/* Uses an installed mlajit: creates a compile-only runtime and compiles the plan kernel spec. */
#include <mlajit/mlajit.h>
#include <stdio.h>
#include <string.h>

int main(void) {
    mla_options o;
    mla_options_init(&o);
    o.no_device = 1;
    o.arch = "sm_90a";
    o.cache_dir = "";
    mla_runtime *rt = NULL;
    mla_status s = mla_runtime_create(&o, &rt);
    if (s != MLA_OK) {
        fprintf(stderr, "mla_runtime_create: %s: %s\n", mla_status_string(s), mla_last_error());
        return 1;
    }
    mla_runtime_info info;
    mla_runtime_get_info(rt, &info);
    printf("mlajit %s, arch %s, NVRTC %d\n", mla_version_string(), info.arch, info.nvrtc_version);
    int ok = strcmp(info.arch, "sm_90a") == 0 && info.nvrtc_version > 0;
    mla_runtime_destroy(rt);
    return ok ? 0 : 1;
}
