/* The mlajit command-line tool, run as a program (MLAJIT_TEST_CLI) against a fresh cache folder
 * per test: version, help, info without a GPU, precompile (compiled, then cached), cache
 * list/verify/prune with a damaged entry, and the exit status of bad command lines and files. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mlajit/mlajit.h"

#ifdef MLAJIT_TEST_CLI

/* The cache round trip compiles a small spec file (the plan kernel and the metadata kernel) for
 * both archs: the dsv4-flash preset's 38 compiles (then) took more than the suite's 600 s on CI's two
 * cores once the attention kinds grew (its kernels are compiled by test_dsv4_attention_compile
 * and test_dsv4_output_proj_compile; its contents are checked by list_presets). */
#define SMALL_SPECS "[{\"kernel\": \"dsv4_attention_plan\"}, {\"kernel\": \"flashmla_metadata\"}]"
#define PRESET_CMD "precompile --spec %s --arch sm_90a --arch sm_100a --jobs 2"

static char cache_dir[] = "/tmp/mlajit-test-cli-XXXXXX";
static char out[1 << 16];

static void make_dir(void) {
    cr_assert_not_null(mkdtemp(cache_dir), "mkdtemp %s failed", cache_dir);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    return remove(path);
}

static void remove_dir(void) {
    nftw(cache_dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Runs `mlajit <args>` with MLAJIT_CACHE_DIR = cache_dir and the other MLAJIT_* variables unset;
 * stdout and stderr go to out. Returns the exit status (-1 if it did not exit). */
static int run_cli(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run_cli(const char *fmt, ...) {
    char args[2048], cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "env -u MLAJIT_ARCH -u MLAJIT_KERNEL_DIR -u MLAJIT_LOG "
             "MLAJIT_CACHE_DIR='%s' '%s' %s 2>&1", cache_dir, MLAJIT_TEST_CLI, args);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p, "popen(%s) failed", cmd);
    size_t len = fread(out, 1, sizeof out - 1, p);
    out[len] = '\0';
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void write_file(const char *name, const char *text, char *path, size_t size) {
    snprintf(path, size, "%s/%s", cache_dir, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

/* Names of the entry files (<hash>.mlak) in cache_dir; returns their count. */
static int list_entries(char names[][80], int max) {
    DIR *d = opendir(cache_dir);
    cr_assert_not_null(d, "opendir %s failed", cache_dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len > 5 && !strcmp(e->d_name + len - 5, ".mlak") && n < max)
            snprintf(names[n++], 80, "%s", e->d_name);
    }
    closedir(d);
    return n;
}

static int count_lines_with(const char *text, const char *needle) {
    int n = 0;
    for (const char *line = text; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        const char *hit = strstr(line, needle);
        if (hit && hit < line + len) n++;
        line = nl ? nl + 1 : NULL;
    }
    return n;
}

TestSuite(cli, .init = make_dir, .fini = remove_dir, .timeout = 600);

Test(cli, version_and_help) {
    char want[64];
    snprintf(want, sizeof want, "mlajit %s", mla_version_string());
    cr_expect_eq(run_cli("--version"), 0, "mlajit --version: exit status");
    cr_expect(strstr(out, want) != NULL, "mlajit --version: expected '%s', got '%s'", want, out);
    cr_expect_eq(run_cli("--help"), 0, "mlajit --help: exit status");
    cr_expect(strstr(out, "precompile") && strstr(out, "bench"), "mlajit --help: got '%s'", out);
    const char *cmds[] = {"info", "precompile", "cache", "bench"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        cr_expect_eq(run_cli("%s --help", cmds[i]), 0, "mlajit %s --help: exit status", cmds[i]);
        cr_expect(strstr(out, "usage: mlajit") != NULL, "mlajit %s --help: got '%s'", cmds[i], out);
    }
}

Test(cli, usage_errors_exit_2) {
    cr_expect_eq(run_cli("no-such-command"), 2, "unknown command: got '%s'", out);
    cr_expect_eq(run_cli("precompile --no-such-option"), 2, "unknown option: got '%s'", out);
    cr_expect_eq(run_cli("precompile"), 2, "precompile without specs: got '%s'", out);
    cr_expect_eq(run_cli("precompile --preset dsv4-flash --jobs 0"), 2, "--jobs 0: got '%s'", out);
    cr_expect_eq(run_cli("precompile --preset dsv4-flash --arch 90"), 2, "--arch 90: got '%s'",
                 out);
    cr_expect_eq(run_cli("cache frobnicate"), 2, "cache frobnicate: got '%s'", out);
    cr_expect_eq(run_cli("bench --case no-such-case"), 2, "bench --case: got '%s'", out);
}

Test(cli, info_works_without_gpu) {
    cr_assert_eq(run_cli("info"), 0, "mlajit info: exit status, output '%s'", out);
    const char *fields[] = {"mlajit:", "driver:", "device:", "arch:", "NVRTC:", "cache dir:",
                            "kernel source:", "CUDA include:"};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        cr_expect(strstr(out, fields[i]) != NULL, "mlajit info: no '%s' in '%s'", fields[i], out);
    cr_expect(strstr(out, cache_dir) != NULL, "mlajit info: cache dir %s not in '%s'", cache_dir,
              out);
    cr_expect_eq(run_cli("info --arch sm_100a"), 0, "mlajit info --arch sm_100a: '%s'", out);
}

Test(cli, list_presets) {
    cr_assert_eq(run_cli("precompile --list-presets"), 0, "--list-presets: '%s'", out);
    cr_expect(strstr(out, "dsv4-flash") && strstr(out, "dsv4_attention_plan"),
              "--list-presets: expected dsv4-flash with dsv4_attention_plan, got '%s'", out);
    cr_expect(strstr(out, "flashmla-sparse") && strstr(out, "flashmla_sparse_prefill_sm90"),
              "--list-presets: expected flashmla-sparse with flashmla_sparse_prefill_sm90, got "
              "'%s'", out);
    cr_expect(count_lines_with(out, "\"dsv4_attention\"") == 16 &&
                  count_lines_with(out, "dsv4_output_proj_") == 11 &&
                  count_lines_with(out, "dsv4_output_proj_a_stream") == 4 &&
                  count_lines_with(out, "dsv4_output_proj_b_stream") == 4 &&
                  count_lines_with(out, "\"dsv4_output_proj_stream\"") == 1,
              "--list-presets: the dsv4-flash preset has the plan, 16 attention and 11 output "
              "projection specs (tiled A and B, stream A and B at NT 1, 2, 4, 8, the one launch "
              "at NT 2): '%s'", out);
}


/* Reads "precompiled N specs for K archs: C compiled, H cached, F failed" from out. */
static int summary(int *specs, int *archs, int *compiled, int *cached, int *failed) {
    const char *p = strstr(out, "precompiled ");
    return p && sscanf(p, "precompiled %d specs for %d archs: %d compiled, %d cached, %d failed",
                       specs, archs, compiled, cached, failed) == 5;
}

Test(cli, precompile_then_cache_list_verify_prune) {
    int specs, archs, compiled, cached, failed;
    char specs_path[4096];
    write_file("small.json", SMALL_SPECS, specs_path, sizeof specs_path);
    cr_assert_eq(run_cli(PRESET_CMD, specs_path), 0, "first precompile: '%s'", out);
    cr_assert(summary(&specs, &archs, &compiled, &cached, &failed), "no summary in '%s'", out);
    const int entries = specs * archs;
    cr_expect(archs == 2 && specs == 2, "first precompile: 2 specs for 2 archs: '%s'", out);
    cr_expect(compiled == entries && cached == 0 && failed == 0,
              "first precompile: expected %d compiled, got '%s'", entries, out);
    cr_assert_eq(run_cli(PRESET_CMD, specs_path), 0, "second precompile: '%s'", out);
    cr_assert(summary(&specs, &archs, &compiled, &cached, &failed), "no summary in '%s'", out);
    cr_expect(compiled == 0 && cached == entries && failed == 0,
              "second precompile: expected %d cached, got '%s'", entries, out);

    char want[32];
    cr_assert_eq(run_cli("cache list"), 0, "cache list: '%s'", out);
    cr_expect_eq(count_lines_with(out, "dsv4_attention_plan"), 2, "cache list: '%s'", out);
    cr_expect(strstr(out, "sm_90a") && strstr(out, "sm_100a"), "cache list: archs in '%s'", out);
    snprintf(want, sizeof want, "%d entries", entries);
    cr_expect(strstr(out, want) != NULL, "cache list: expected %s, got '%s'", want, out);
    cr_assert_eq(run_cli("cache verify"), 0, "cache verify of an intact cache: '%s'", out);

    char names[64][80], path[4096];
    cr_assert_eq(list_entries(names, 64), entries, "expected %d entry files in %s", entries,
                 cache_dir);
    snprintf(path, sizeof path, "%s/%s", cache_dir, names[0]);
    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long mid = ftell(f) / 2;
    fseek(f, mid, SEEK_SET);
    int c = fgetc(f);
    fseek(f, mid, SEEK_SET);
    fputc(c ^ 0x5a, f);
    fclose(f);

    char hash[40];
    snprintf(hash, sizeof hash, "%.32s", names[0]);
    cr_expect_eq(run_cli("cache verify"), 1, "cache verify of a damaged entry: '%s'", out);
    cr_expect(strstr(out, hash) != NULL, "cache verify: damaged %s not named in '%s'", hash, out);
    cr_assert_eq(run_cli("cache prune"), 0, "cache prune: '%s'", out);
    cr_expect(strstr(out, hash) != NULL, "cache prune: removed %s not named in '%s'", hash, out);
    cr_expect_eq(access(path, F_OK), -1, "cache prune: %s still exists", path);
    cr_expect_eq(run_cli("cache verify"), 0, "cache verify after prune: '%s'", out);
    cr_expect_eq(run_cli("cache list"), 0, "cache list after prune: '%s'", out);
    snprintf(want, sizeof want, "%d entries", entries - 1);
    cr_expect(strstr(out, want) != NULL, "cache list after prune: expected %s, got '%s'", want,
              out);

    cr_assert_eq(run_cli("cache prune --all"), 0, "cache prune --all: '%s'", out);
    cr_expect_eq(list_entries(names, 64), 0, "cache prune --all left entries in %s", cache_dir);
}

Test(cli, spec_file_object_form) {
    char path[4096];
    write_file("specs.json", "{\"specs\": [{\"kernel\": \"dsv4_attention_plan\"}]}", path,
               sizeof path);
    cr_expect_eq(run_cli("precompile --spec %s --arch sm_90a --jobs 1", path), 0,
                 "precompile --spec {\"specs\": [...]}: '%s'", out);
    cr_expect(strstr(out, "1 compiled") != NULL, "precompile --spec object form: got '%s'", out);
}

/* A kind the runtime launches on one arch only (the sm_90a wgmma decode) is compiled for that
 * arch and skipped, not compiled, for the others. */
Test(cli, only_arch_kind_skipped_elsewhere) {
    char path[4096];
    write_file("sm90.json", "[{\"kernel\": \"flashmla_decode_sm90\", \"kv_dtype\": 0, "
               "\"page_class\": 1, \"causal\": 0}]", path, sizeof path);
    cr_expect_eq(run_cli("precompile --spec %s --arch sm_100a --jobs 1", path), 0,
                 "precompile sm90 kind for sm_100a: '%s'", out);
    cr_expect(strstr(out, "0 compiled") && strstr(out, "1 skipped"),
              "sm90 kind for sm_100a: expected 0 compiled, 1 skipped, got '%s'", out);
    cr_expect_eq(run_cli("precompile --spec %s --arch sm_90a --arch sm_100a --jobs 1", path), 0,
                 "precompile sm90 kind for sm_90a and sm_100a: '%s'", out);
    cr_expect(strstr(out, "1 compiled") && strstr(out, "1 skipped"),
              "sm90 kind for both archs: expected 1 compiled, 1 skipped, got '%s'", out);
}

Test(cli, bad_spec_file_exits_2) {
    char path[4096];
    write_file("bad.json", "[{\"kernel\": ", path, sizeof path);
    cr_expect_eq(run_cli("precompile --spec %s --arch sm_90a", path), 2, "bad JSON: '%s'", out);
    cr_expect(strstr(out, "invalid JSON") != NULL, "bad JSON: expected a message, got '%s'", out);
    write_file("scalar.json", "42", path, sizeof path);
    cr_expect_eq(run_cli("precompile --spec %s --arch sm_90a", path), 2, "JSON 42: '%s'", out);
    cr_expect_eq(run_cli("precompile --spec %s/absent.json --arch sm_90a", cache_dir), 2,
                 "absent spec file: '%s'", out);
    cr_expect(strstr(out, "absent.json") != NULL, "absent spec file: got '%s'", out);
}

Test(cli, unknown_preset_exits_2) {
    cr_expect_eq(run_cli("precompile --preset no-such-preset --arch sm_90a"), 2,
                 "unknown preset: '%s'", out);
    cr_expect(strstr(out, "unknown preset") && strstr(out, "no-such-preset"),
              "unknown preset: expected a message, got '%s'", out);
}

Test(cli, unknown_kernel_fails) {
    char path[4096];
    write_file("unknown.json", "[{\"kernel\": \"no_such_kernel\"}]", path, sizeof path);
    int status = run_cli("precompile --spec %s --arch sm_90a", path);
    cr_expect(status == 1 || status == 2, "unknown kernel: expected exit 1 or 2, got %d ('%s')",
              status, out);
    cr_expect(strstr(out, "no_such_kernel") != NULL, "unknown kernel: got '%s'", out);
}

Test(cli, bench_without_gpu_exits_1) {
    mla_options o;
    mla_options_init(&o);
    o.cache_dir = cache_dir;
    mla_runtime *rt = NULL;
    mla_runtime_info info;
    cr_assert_eq(mla_runtime_create(&o, &rt), MLA_OK, "mla_runtime_create: %s", mla_last_error());
    mla_runtime_get_info(rt, &info);
    int has_device = info.has_device;
    mla_runtime_destroy(rt);
    if (has_device) cr_skip_test("a GPU is present: bench times kernels, tests never do");
    cr_expect_eq(run_cli("bench"), 1, "bench without a GPU: '%s'", out);
    cr_expect(strstr(out, "GPU") != NULL, "bench without a GPU: expected a message, got '%s'", out);
}

/* The sparse preset compiles for sm_100a with its three sm_90a-only kinds skipped (no GPU needed). */
Test(cli, precompile_sparse_preset_skips_sm90_kinds_elsewhere) {
    int specs, archs, compiled, cached, failed;
    cr_assert_eq(run_cli("precompile --preset flashmla-sparse --arch sm_100a --jobs 2"), 0,
                 "precompile --preset flashmla-sparse --arch sm_100a: '%s'", out);
    cr_assert(summary(&specs, &archs, &compiled, &cached, &failed), "no summary in '%s'", out);
    cr_expect(specs == 6 && archs == 1 && failed == 0 && compiled + cached == 3,
              "flashmla-sparse for sm_100a: expected 6 specs, 3 built (3 sm_90a-only skipped), "
              "got '%s'", out);
}

#else

Test(cli, not_built) {
    cr_skip_test("the mlajit CLI is not built (MLAJIT_BUILD_TOOLS=OFF)");
}

#endif
