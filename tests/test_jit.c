/* The JIT path end to end: keys of a spec across source trees, NVRTC compile of every kernel kind
 * for sm_90a and sm_100a, the disk cache under concurrency, corruption and a read-only folder,
 * the runtime without a device, status texts. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/internal.h"

/* A fresh folder under /tmp. */
static void temp_dir(char *out, size_t size) {
    snprintf(out, size, "/tmp/mlajit-test-jit-XXXXXX");
    cr_assert_not_null(mkdtemp(out), "mkdtemp");
}

static mla_runtime *compile_runtime(const char *cache_dir, const char *kernel_dir) {
    mla_options o;
    mla_options_init(&o);
    o.no_device = 1;
    o.arch = "sm_90a";
    o.cache_dir = cache_dir;
    o.kernel_dir = kernel_dir;
    mla_runtime *rt = NULL;
    mla_status s = mla_runtime_create(&o, &rt);
    cr_assert_eq(s, MLA_OK, "mla_runtime_create(no_device): %s", mla_last_error());
    return rt;
}

static void plan_spec(mla__spec *spec) { mla__spec_init(spec, "dsv4_attention_plan"); }

static void key_of(mla_runtime *rt, const mla__spec *spec, const char *arch, char hash[33]) {
    char *json = NULL, name[256];
    mla__launch_info launch;
    mla_status s = mla__spec_key(rt, spec, arch, &json, hash, name, sizeof name, &launch);
    cr_assert_eq(s, MLA_OK, "mla__spec_key(%s, %s): %s", spec->kernel, arch, mla_last_error());
    cr_assert(strstr(json, "/tmp") == NULL && strstr(json, "/usr") == NULL,
              "key of %s has an absolute path: %s", spec->kernel, json);
    free(json);
}

/* Copies the embedded kernel_src tree into dir (as a kernel source folder). */
static void write_tree(const char *dir) {
    for (size_t i = 0; i < mla__embedded_file_count; i++) {
        char path[MLA_PATH_MAX], cmd[MLA_PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/%s", dir, mla__embedded_files[i].path);
        snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", path);
        cr_assert_eq(system(cmd), 0, "mkdir for %s", path);
        FILE *f = fopen(path, "wb");
        cr_assert_not_null(f, "open %s", path);
        fwrite(mla__embedded_files[i].data, 1, mla__embedded_files[i].size, f);
        fclose(f);
    }
}

Test(jit_key, same_key_embedded_and_moved_trees_new_key_after_edit) {
    char cache[256], a[256], b[256];
    temp_dir(cache, sizeof cache);
    temp_dir(a, sizeof a);
    temp_dir(b, sizeof b);
    write_tree(a);
    write_tree(b);
    mla__spec spec;
    plan_spec(&spec);
    char h_emb[33], h_a[33], h_b[33], h_edit[33], h_arch[33];
    mla_runtime *emb = compile_runtime(cache, NULL), *ra = compile_runtime(cache, a),
                *rb = compile_runtime(cache, b);
    key_of(emb, &spec, "sm_90a", h_emb);
    key_of(ra, &spec, "sm_90a", h_a);
    key_of(rb, &spec, "sm_90a", h_b);
    key_of(emb, &spec, "sm_100a", h_arch);
    cr_expect_str_eq(h_a, h_emb, "moving the source tree must keep the key");
    cr_expect_str_eq(h_b, h_emb, "a second copy of the source tree must keep the key");
    cr_expect_str_neq(h_arch, h_emb, "another arch must give another key");
    /* Edit an included file (or the kernel itself when it includes none) of copy b. */
    mla__source_set set;
    cr_assert_eq(mla__source_closure(emb, "dsv4/plan.cu", &set), MLA_OK, "%s", mla_last_error());
    char path[MLA_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", b, set.paths[set.count - 1]);
    FILE *f = fopen(path, "ab");
    cr_assert_not_null(f, "open %s", path);
    fputs("\n// edited\n", f);
    fclose(f);
    mla_runtime *rb2 = compile_runtime(cache, b);
    key_of(rb2, &spec, "sm_90a", h_edit);
    cr_expect_str_neq(h_edit, h_emb, "editing %s must change the key", set.paths[set.count - 1]);
    mla_runtime_destroy(emb);
    mla_runtime_destroy(ra);
    mla_runtime_destroy(rb);
    mla_runtime_destroy(rb2);
}

/* Every kernel kind with no parameters, and every spec the tests know, compile for both arches. */
typedef struct arch_param {
    char arch[16];
} arch_param;

ParameterizedTestParameters(jit_compile, every_kind) {
    static arch_param p[] = {{"sm_90a"}, {"sm_100a"}};
    return cr_make_param_array(arch_param, p, 2);
}

ParameterizedTest(arch_param *p, jit_compile, every_kind) {
    char cache[256];
    temp_dir(cache, sizeof cache);
    mla_runtime *rt = compile_runtime(cache, NULL);
    int n = 0;
    const mla__kernel_kind *kinds = mla__kernel_kinds(&n);
    for (int i = 0; i < n; i++) {
        if (kinds[i].params[0]) continue; /* kinds with parameters: compiled through presets */
        mla__spec spec;
        mla__spec_init(&spec, kinds[i].name);
        mla__origin origin;
        mla_status s = mla__precompile(rt, &spec, p->arch, &origin, NULL);
        cr_expect_eq(s, MLA_OK, "compile %s for %s: %s", kinds[i].name, p->arch, mla_last_error());
        cr_expect_eq(origin, MLA_ORIGIN_COMPILED, "%s for %s: first build compiles", kinds[i].name,
                     p->arch);
        s = mla__precompile(rt, &spec, p->arch, &origin, NULL);
        cr_expect_eq(s, MLA_OK, "reload %s for %s: %s", kinds[i].name, p->arch, mla_last_error());
        cr_expect_eq(origin, MLA_ORIGIN_DISK, "%s for %s: second build is a disk hit",
                     kinds[i].name, p->arch);
    }
    mla_runtime_destroy(rt);
}

Test(jit_compile, nvrtc_error_carries_the_log) {
    char cache[256], tree[256];
    temp_dir(cache, sizeof cache);
    temp_dir(tree, sizeof tree);
    write_tree(tree);
    char path[MLA_PATH_MAX];
    snprintf(path, sizeof path, "%s/dsv4/plan.cu", tree);
    FILE *f = fopen(path, "ab");
    cr_assert_not_null(f, "open %s", path);
    fputs("\nthis_is_not_cuda x;\n", f);
    fclose(f);
    mla_runtime *rt = compile_runtime(cache, tree);
    mla__spec spec;
    plan_spec(&spec);
    mla_status s = mla__precompile(rt, &spec, "sm_90a", NULL, NULL);
    cr_expect_eq(s, MLA_ERR_COMPILE, "a broken kernel must fail with MLA_ERR_COMPILE");
    cr_expect(strstr(mla_last_error(), "this_is_not_cuda") != NULL,
              "the NVRTC log must be in the message: %s", mla_last_error());
    mla_runtime_destroy(rt);
}

/* 8 processes compiling one key at once compile it once; all of them get the entry. */
Test(jit_cache, eight_processes_compile_once) {
    char cache[256];
    temp_dir(cache, sizeof cache);
    int go[2], results[2];
    cr_assert_eq(pipe(go), 0, "pipe");
    cr_assert_eq(pipe(results), 0, "pipe");
    pid_t pids[8];
    for (int i = 0; i < 8; i++) {
        pids[i] = fork();
        cr_assert_geq(pids[i], 0, "fork");
        if (pids[i] == 0) {
            close(go[1]);
            char c;
            if (read(go[0], &c, 1) != 0) _exit(3); /* wait for the start: the parent closes */
            mla_runtime *rt = compile_runtime(cache, NULL);
            mla__spec spec;
            plan_spec(&spec);
            mla__origin origin = MLA_ORIGIN_MEMORY;
            mla_status s = mla__precompile(rt, &spec, "sm_90a", &origin, NULL);
            char r = s == MLA_OK ? (char)('0' + origin) : 'F';
            if (write(results[1], &r, 1) != 1) _exit(4);
            mla_runtime_destroy(rt);
            _exit(0);
        }
    }
    close(go[0]);
    close(go[1]);
    close(results[1]);
    int compiled = 0, disk = 0, failed = 0;
    char r;
    while (read(results[0], &r, 1) == 1) {
        compiled += r == '0' + MLA_ORIGIN_COMPILED;
        disk += r == '0' + MLA_ORIGIN_DISK;
        failed += r == 'F';
    }
    for (int i = 0; i < 8; i++) {
        int st;
        waitpid(pids[i], &st, 0);
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d exit status %d", i, st);
    }
    cr_expect_eq(failed, 0, "no process may fail");
    cr_expect_eq(compiled, 1, "exactly one process compiles (got %d)", compiled);
    cr_expect_eq(disk, 7, "the other seven read the entry from disk (got %d)", disk);
}

static int warnings;
static void count_warnings(void *user, mla_log_level level, const char *msg) {
    if (level == MLA_LOG_WARN) warnings++;
}

/* A corrupt entry is a miss: it is rebuilt, replaced and reported with a warning. */
Test(jit_cache, corrupt_entry_rebuilt_with_warning) {
    char cache[256];
    temp_dir(cache, sizeof cache);
    mla_options o;
    mla_options_init(&o);
    o.no_device = 1;
    o.arch = "sm_90a";
    o.cache_dir = cache;
    o.log = count_warnings;
    mla_runtime *rt = NULL;
    cr_assert_eq(mla_runtime_create(&o, &rt), MLA_OK, "%s", mla_last_error());
    mla__spec spec;
    plan_spec(&spec);
    char hash[33];
    mla__origin origin;
    cr_assert_eq(mla__precompile(rt, &spec, "sm_90a", &origin, hash), MLA_OK, "%s",
                 mla_last_error());
    char path[MLA_PATH_MAX];
    mla__entry_path(cache, hash, path, sizeof path);
    int fd = open(path, O_RDWR);
    cr_assert_geq(fd, 0, "open %s", path);
    off_t size = lseek(fd, 0, SEEK_END);
    unsigned char byte;
    cr_assert_eq(pread(fd, &byte, 1, size - 7), 1, "read");
    byte ^= 0x5a;
    cr_assert_eq(pwrite(fd, &byte, 1, size - 7), 1, "write");
    close(fd);
    warnings = 0;
    cr_assert_eq(mla__precompile(rt, &spec, "sm_90a", &origin, NULL), MLA_OK, "%s",
                 mla_last_error());
    cr_expect_eq(origin, MLA_ORIGIN_COMPILED, "a corrupt entry must be rebuilt");
    cr_expect_geq(warnings, 1, "rebuilding a corrupt entry must warn");
    cr_assert_eq(mla__precompile(rt, &spec, "sm_90a", &origin, NULL), MLA_OK, "%s",
                 mla_last_error());
    cr_expect_eq(origin, MLA_ORIGIN_DISK, "the rebuilt entry must replace the corrupt one");
    mla_runtime_destroy(rt);
}

/* A cache folder that cannot be written (here: below a regular file, which fails for root too)
 * degrades to in-memory compilation. */
Test(jit_cache, unwritable_cache_dir_compiles_in_memory) {
    char dir[256], cache[300];
    temp_dir(dir, sizeof dir);
    snprintf(cache, sizeof cache, "%s/file", dir);
    FILE *f = fopen(cache, "w");
    cr_assert_not_null(f, "create %s", cache);
    fclose(f);
    strcat(cache, "/cache");
    mla_runtime *rt = compile_runtime(cache, NULL);
    mla_runtime_info info;
    cr_assert_eq(mla_runtime_get_info(rt, &info), MLA_OK, "%s", mla_last_error());
    cr_expect_eq(info.cache_writable, 0, "%s must be reported as not writable", cache);
    mla__spec spec;
    plan_spec(&spec);
    for (int i = 0; i < 2; i++) {
        mla__origin origin = MLA_ORIGIN_DISK;
        mla_status s = mla__precompile(rt, &spec, "sm_90a", &origin, NULL);
        cr_expect_eq(s, MLA_OK, "in-memory compile %d: %s", i, mla_last_error());
        cr_expect_eq(origin, MLA_ORIGIN_COMPILED, "in-memory compile %d", i);
    }
    mla_runtime_destroy(rt);
}

/* Where the tests can drop write permission (not root), a read-only folder degrades too. */
Test(jit_cache, read_only_cache_dir_compiles_in_memory) {
    char cache[256];
    temp_dir(cache, sizeof cache);
    cr_assert_eq(chmod(cache, 0555), 0, "chmod");
    int root = access(cache, W_OK) == 0; /* root ignores the mode bits */
    mla_runtime *rt = compile_runtime(cache, NULL);
    mla_runtime_info info;
    mla_runtime_get_info(rt, &info);
    cr_expect_eq(info.cache_writable, root, "a 0555 folder is writable only for root");
    mla__spec spec;
    plan_spec(&spec);
    mla__origin origin;
    mla_status s = mla__precompile(rt, &spec, "sm_90a", &origin, NULL);
    cr_expect_eq(s, MLA_OK, "compile with a read-only cache folder: %s", mla_last_error());
    mla_runtime_destroy(rt);
    chmod(cache, 0755);
}

Test(jit_runtime, no_device_runtime_reports_and_refuses_gpu_calls) {
    mla_runtime *rt = compile_runtime("", NULL);
    mla_runtime_info info;
    cr_assert_eq(mla_runtime_get_info(rt, &info), MLA_OK, "%s", mla_last_error());
    cr_expect_eq(info.has_device, 0, "no_device runtime has no device");
    cr_expect_str_eq(info.arch, "sm_90a", "arch from the options");
    cr_expect_str_eq(info.cache_dir, "", "empty cache_dir disables the disk cache");
    cr_expect_gt(info.nvrtc_version, 12000, "NVRTC version");
    cr_expect(strlen(info.no_device_reason) > 0, "a reason for no device");
    mla__spec spec;
    plan_spec(&spec);
    const mla__kernel *k = NULL;
    cr_expect_eq(mla__get_kernel(rt, &spec, &k), MLA_ERR_NO_DEVICE, "get_kernel without device");
    cr_expect(strstr(mla_last_error(), "no CUDA device") != NULL, "message: %s", mla_last_error());
    mla_runtime_destroy(rt);
    mla_runtime_destroy(NULL); /* a no-op */
}

Test(jit_runtime, bad_options_are_rejected) {
    mla_options o;
    mla_options_init(&o);
    o.arch = "compute_90";
    mla_runtime *rt = (mla_runtime *)0x1;
    cr_expect_eq(mla_runtime_create(&o, &rt), MLA_ERR_INVALID_ARGUMENT, "arch compute_90");
    cr_expect_null(rt, "out is NULL on failure");
    cr_expect(strstr(mla_last_error(), "options.arch") != NULL, "message: %s", mla_last_error());
    mla_options_init(&o);
    o.struct_size = 3;
    cr_expect_eq(mla_runtime_create(&o, &rt), MLA_ERR_INVALID_ARGUMENT, "struct_size 3");
    cr_expect_eq(mla_runtime_create(NULL, NULL), MLA_ERR_INVALID_ARGUMENT, "out NULL");
}

/* Warnings naming the variable switch_env_name received by the log callback, and the last one. */
static const char *switch_env_name;
static int switch_env_warnings;
static char switch_env_msg[512];
static void record_switch_env(void *user, mla_log_level level, const char *msg) {
    if (level != MLA_LOG_WARN || !strstr(msg, switch_env_name)) return;
    switch_env_warnings++;
    snprintf(switch_env_msg, sizeof switch_env_msg, "%s", msg);
}

/* A no_device sm_90a runtime created with the variable var set to value (unset for NULL) and its
 * warnings recorded; the variable is unset again before returning. */
static mla_runtime *runtime_with_env(const char *var, const char *value) {
    cr_assert_eq(value ? setenv(var, value, 1) : unsetenv(var), 0, "set %s", var);
    mla_options o;
    mla_options_init(&o);
    o.no_device = 1;
    o.arch = "sm_90a";
    o.cache_dir = "";
    o.log = record_switch_env;
    switch_env_name = var;
    switch_env_warnings = 0;
    switch_env_msg[0] = '\0';
    mla_runtime *rt = NULL;
    mla_status s = mla_runtime_create(&o, &rt);
    cr_assert_eq(unsetenv(var), 0, "unset %s", var);
    cr_assert_eq(s, MLA_OK, "%s=%s: mla_runtime_create: %s", var, value ? value : "(unset)",
                 mla_last_error());
    return rt;
}
static mla_runtime *runtime_with_decode_env(const char *value) {
    return runtime_with_env("MLAJIT_FLASHMLA_DECODE", value);
}

/* $MLAJIT_FLASHMLA_DECODE is read once, when the runtime is created: "portable" forces the
 * portable dense decode; unset or empty does not; any other value still creates the runtime, is
 * ignored and is reported by one warning that names it. Changing the variable afterwards leaves
 * the runtime as it was. */
Test(jit_runtime, flashmla_decode_env_read_at_create) {
    static const struct {
        const char *value;
        int portable, warns;
    } rows[] = {
        {NULL, 0, 0}, {"", 0, 0}, {"portable", 1, 0}, {"bogus", 0, 1}, {"PORTABLE", 0, 1},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const char *shown = rows[i].value ? rows[i].value : "(unset)";
        mla_runtime *rt = runtime_with_decode_env(rows[i].value);
        cr_expect_eq(rt->flashmla_decode_portable, rows[i].portable,
                     "MLAJIT_FLASHMLA_DECODE=%s: portable decode %d, expected %d", shown,
                     rt->flashmla_decode_portable, rows[i].portable);
        cr_expect_eq(switch_env_warnings, rows[i].warns, "MLAJIT_FLASHMLA_DECODE=%s: %d "
                     "warnings, expected %d (last: %s)", shown, switch_env_warnings,
                     rows[i].warns, switch_env_msg);
        if (rows[i].warns)
            cr_expect(strstr(switch_env_msg, rows[i].value) && strstr(switch_env_msg, "portable"),
                      "the warning names the value and what is expected: %s", switch_env_msg);
        mla_runtime_destroy(rt);
    }
    mla_runtime *forced = runtime_with_decode_env("portable");
    mla_runtime *plain = runtime_with_decode_env(NULL);
    cr_assert_eq(setenv("MLAJIT_FLASHMLA_DECODE", "portable", 1), 0, "setenv");
    cr_expect(forced->flashmla_decode_portable && !plain->flashmla_decode_portable,
              "a later change of MLAJIT_FLASHMLA_DECODE must not change existing runtimes");
    cr_assert_eq(unsetenv("MLAJIT_FLASHMLA_DECODE"), 0, "unsetenv");
    mla_runtime_destroy(forced);
    mla_runtime_destroy(plain);
}

/* The kernel switches a runtime read from the environment at creation, as one string. */
static void switch_string(char *out, size_t size, int fd, int fpp, int warps, int rows, int d32,
                          int dmma, int d90, int pf, const char *sp) {
    snprintf(out, size, "flashmla_decode_portable %d fakequant_prefill_portable %d warps %d rows %d "
             "fakequant_decode fp32 %d mma %d sm90 %d sparse_prefetch %d sparse_sm90 %s", fd, fpp,
             warps, rows, d32, dmma, d90, pf, sp ? sp : "(default)");
}

/* Every kernel switch of the environment, every value it takes and a bad one: a no_device runtime
 * created with only that variable set has exactly the switch the value names (every other one at
 * its default), and a bad value gives one warning that names the variable, the value and every
 * accepted value. */
Test(jit_runtime, every_switch_env_read_at_create) {
    static const char *const vars[] = {"MLAJIT_FLASHMLA_DECODE", "MLAJIT_FAKEQUANT_PREFILL",
                                       "MLAJIT_FAKEQUANT_DECODE", "MLAJIT_FLASHMLA_SPARSE_PREFETCH",
                                       "MLAJIT_FLASHMLA_SPARSE_SM90"};
    static const char *const accepted[][5] = {
        {"portable"}, {"portable", "mma4", "mma8", "mma32"}, {"fp32", "mma", "sm90"}, {"0", "1"},
        {"pingpong", "ws", "x2", "x2c"}};
    static const struct {
        int var;
        const char *value;
        int fd, fpp, warps, rows, d32, dmma, d90, pf;
        const char *sp;
        int warns;
    } rows[] = {
        {0, "portable", 1, 0, 0, 0, 0, 0, 0, 0, NULL, 0},
        {0, "mma", 0, 0, 0, 0, 0, 0, 0, 0, NULL, 1},
        {1, "portable", 0, 1, 0, 0, 0, 0, 0, 0, NULL, 0},
        {1, "mma4", 0, 0, 4, 16, 0, 0, 0, 0, NULL, 0},
        {1, "mma8", 0, 0, 8, 16, 0, 0, 0, 0, NULL, 0},
        {1, "mma32", 0, 0, 4, 32, 0, 0, 0, 0, NULL, 0},
        {1, "mma16", 0, 0, 0, 0, 0, 0, 0, 0, NULL, 1},
        {2, "fp32", 0, 0, 0, 0, 1, 0, 0, 0, NULL, 0},
        {2, "mma", 0, 0, 0, 0, 0, 1, 0, 0, NULL, 0},
        {2, "sm90", 0, 0, 0, 0, 0, 0, 1, 0, NULL, 0},
        {2, "portable", 0, 0, 0, 0, 0, 0, 0, 0, NULL, 1},
        {3, "1", 0, 0, 0, 0, 0, 0, 0, 1, NULL, 0},
        {3, "0", 0, 0, 0, 0, 0, 0, 0, 0, NULL, 0},
        {3, "yes", 0, 0, 0, 0, 0, 0, 0, 0, NULL, 1},
        {4, "pingpong", 0, 0, 0, 0, 0, 0, 0, 0, "pingpong", 0},
        {4, "ws", 0, 0, 0, 0, 0, 0, 0, 0, "ws", 0},
        {4, "x2", 0, 0, 0, 0, 0, 0, 0, 0, "x2", 0},
        {4, "x2c", 0, 0, 0, 0, 0, 0, 0, 0, "x2c", 0},
        {4, "x3", 0, 0, 0, 0, 0, 0, 0, 0, NULL, 1},
    };
    for (size_t v = 0; v < sizeof vars / sizeof vars[0]; v++)
        cr_assert_eq(unsetenv(vars[v]), 0, "unsetenv %s", vars[v]);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const char *var = vars[rows[i].var];
        mla_runtime *rt = runtime_with_env(var, rows[i].value);
        char got_state[256], want_state[256];
        switch_string(got_state, sizeof got_state, rt->flashmla_decode_portable,
                      rt->fakequant_prefill_portable, rt->fakequant_prefill_warps,
                      rt->fakequant_prefill_rows, rt->fakequant_decode_fp32,
                      rt->fakequant_decode_mma, rt->fakequant_decode_sm90,
                      rt->flashmla_sparse_prefetch, rt->flashmla_sparse_sm90);
        switch_string(want_state, sizeof want_state, rows[i].fd, rows[i].fpp, rows[i].warps,
                      rows[i].rows, rows[i].d32, rows[i].dmma, rows[i].d90, rows[i].pf,
                      rows[i].sp);
        cr_expect_str_eq(got_state, want_state, "%s=%s: got %s, expected %s", var, rows[i].value,
                         got_state, want_state);
        cr_expect_eq(switch_env_warnings, rows[i].warns, "%s=%s: %d warnings, expected %d (last: "
                     "%s)", var, rows[i].value, switch_env_warnings, rows[i].warns, switch_env_msg);
        if (rows[i].warns) {
            cr_expect(strstr(switch_env_msg, rows[i].value) != NULL,
                      "the warning names the value: %s", switch_env_msg);
            for (int a = 0; a < 5 && accepted[rows[i].var][a]; a++) {
                char quoted[32];
                snprintf(quoted, sizeof quoted, "\"%s\"", accepted[rows[i].var][a]);
                cr_expect(strstr(switch_env_msg, quoted) != NULL,
                          "the warning names the accepted value %s: %s", quoted, switch_env_msg);
            }
        }
        mla_runtime_destroy(rt);
    }
}

Test(jit_runtime, status_strings) {
    cr_expect_str_eq(mla_status_string(MLA_OK), "success", "MLA_OK");
    cr_expect_str_eq(mla_status_string(MLA_ERR_NO_DEVICE), "no CUDA driver or device", "NO_DEVICE");
    cr_expect_str_eq(mla_status_string((mla_status)-1000), "unknown status", "unknown code");
    cr_expect_str_eq(mla_version_string(), "0.1.0", "version");
}

/* Runs in a child: creates a device runtime on cache and loads the plan kernel. Reports 'N' (no
 * device), 'F' (failure) or '0' + origin. */
static char child_load(const char *cache) {
    mla_options o;
    mla_options_init(&o);
    o.cache_dir = cache;
    mla_runtime *rt = NULL;
    if (mla_runtime_create(&o, &rt) != MLA_OK) return 'F';
    mla_runtime_info info;
    mla_runtime_get_info(rt, &info);
    char r = 'N';
    if (info.has_device) {
        mla__spec spec;
        plan_spec(&spec);
        const mla__kernel *k = NULL;
        mla__origin origin;
        mla_status s = mla__get_kernel_ex(rt, &spec, &k, &origin);
        r = s == MLA_OK && k && k->function ? (char)('0' + origin) : 'F';
        if (r == 'F') fprintf(stderr, "child load: %s\n", mla_last_error());
    }
    mla_runtime_destroy(rt);
    return r;
}

/* GPU: 8 processes load one kernel at once: one compiles, the others load its entry. */
Test(jit_gpu, eight_processes_load_one_kernel) {
    char cache[256];
    temp_dir(cache, sizeof cache);
    int go[2], results[2];
    cr_assert_eq(pipe(go), 0, "pipe");
    cr_assert_eq(pipe(results), 0, "pipe");
    for (int i = 0; i < 8; i++) {
        pid_t pid = fork();
        cr_assert_geq(pid, 0, "fork");
        if (pid == 0) {
            close(go[1]);
            char c;
            if (read(go[0], &c, 1) != 0) _exit(3);
            char r = child_load(cache);
            _exit(write(results[1], &r, 1) == 1 ? 0 : 4);
        }
    }
    close(go[0]);
    close(go[1]);
    close(results[1]);
    int count[256] = {0}, n = 0;
    char r;
    while (read(results[0], &r, 1) == 1) count[(unsigned char)r]++, n++;
    while (wait(NULL) > 0) {}
    if (count['N'] == 8) cr_skip_test("no CUDA device");
    cr_expect_eq(n, 8, "8 results");
    cr_expect_eq(count['F'], 0, "no process may fail to load");
    cr_expect_eq(count['0' + MLA_ORIGIN_COMPILED], 1, "exactly one process compiles");
    cr_expect_eq(count['0' + MLA_ORIGIN_DISK], 7, "seven processes load from disk");
}

/* GPU: an entry whose checksum is right but whose cubin does not load is rebuilt and replaced. */
Test(jit_gpu, unloadable_entry_rebuilt) {
    char cache[256];
    temp_dir(cache, sizeof cache);
    mla_options o;
    mla_options_init(&o);
    o.cache_dir = cache;
    o.log = count_warnings;
    mla_runtime *rt = NULL;
    cr_assert_eq(mla_runtime_create(&o, &rt), MLA_OK, "%s", mla_last_error());
    mla_runtime_info info;
    mla_runtime_get_info(rt, &info);
    if (!info.has_device) {
        mla_runtime_destroy(rt);
        cr_skip_test("no CUDA device");
    }
    mla__spec spec;
    plan_spec(&spec);
    mla__entry e = {0};
    char hash[33], name[256];
    cr_assert_eq(mla__spec_key(rt, &spec, info.arch, &e.key_json, hash, name, sizeof name,
                               &e.launch), MLA_OK, "%s", mla_last_error());
    snprintf(e.launch.lowered_name, sizeof e.launch.lowered_name, "not_a_kernel");
    char junk[256];
    memset(junk, 0x42, sizeof junk);
    e.cubin = junk;
    e.cubin_size = sizeof junk;
    cr_assert_eq(mla__cache_write(cache, hash, &e), MLA_OK, "%s", mla_last_error());
    free(e.key_json);
    warnings = 0;
    const mla__kernel *k = NULL;
    mla__origin origin;
    cr_assert_eq(mla__get_kernel_ex(rt, &spec, &k, &origin), MLA_OK, "%s", mla_last_error());
    cr_expect_eq(origin, MLA_ORIGIN_COMPILED, "an unloadable entry must be rebuilt");
    cr_expect_geq(warnings, 1, "rebuilding an unloadable entry must warn");
    mla_runtime_destroy(rt);
    cr_assert_eq(mla_runtime_create(&o, &rt), MLA_OK, "%s", mla_last_error());
    cr_assert_eq(mla__get_kernel_ex(rt, &spec, &k, &origin), MLA_OK, "%s", mla_last_error());
    cr_expect_eq(origin, MLA_ORIGIN_DISK, "the rebuilt entry replaced the bad one");
    mla_runtime_destroy(rt);
}
