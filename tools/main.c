/* mlajit: the command-line tool. Dispatches to the subcommands, prints help and the version,
 * implements `mlajit info` and the helpers the subcommands share. */
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tools/cli.h"

static const char usage_text[] =
    "usage: mlajit <command> [options]\n"
    "\n"
    "MLA attention kernels compiled at run time with NVRTC and cached on disk.\n"
    "\n"
    "commands:\n"
    "  info          library, driver, device, NVRTC and cache settings\n"
    "  precompile    compile the specs of presets or spec files into the cache\n"
    "  cache         list, verify or prune the cache (cache list|verify|prune)\n"
    "  bench         time the kernels on this GPU\n"
    "\n"
    "options:\n"
    "  -h, --help    this text; `mlajit <command> --help` describes a command\n"
    "  -V, --version print the library version\n"
    "\n"
    "environment: MLAJIT_CACHE_DIR, MLAJIT_KERNEL_DIR, MLAJIT_ARCH, MLAJIT_LOG (see docs/CLI.md)\n";

static const char info_usage[] =
    "usage: mlajit info [--arch ARCH]\n"
    "\n"
    "Prints the library version, the CUDA driver, the device, the compile target, the NVRTC\n"
    "version, the cache folder and the kernel sources the runtime uses. Works without a GPU.\n"
    "\n"
    "  --arch ARCH   compile target to report (default: the device's; without a device\n"
    "                $MLAJIT_ARCH, else sm_90a)\n";

static int saved_argc;
static char **saved_argv;

/* ---- helpers -------------------------------------------------------------------------------- */

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "mlajit %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'mlajit %s --help'.\n", cmd);
    return CLI_USAGE;
}

int cli_fail(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "mlajit %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return CLI_FAIL;
}

int cli_bad_option(const char *cmd, char **argv, int optchar) {
    const char *text = argv[optind - 1];
    if (optchar == ':') return cli_usage_error(cmd, "option %s needs a value", text);
    if (optopt && optopt != '?') return cli_usage_error(cmd, "unknown option -%c", optopt);
    return cli_usage_error(cmd, "unknown option %s", text);
}

int cli_parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int cli_arch_valid(const char *s) {
    if (strncmp(s, "sm_", 3) != 0) return 0;
    const char *p = s + 3;
    int digits = 0;
    while (*p >= '0' && *p <= '9') p++, digits++;
    if (digits < 2 || digits > 3) return 0;
    if (*p == 'a' || *p == 'f') p++;
    return *p == '\0';
}

mla_status cli_runtime_no_device(const char *cmd, const char *cache_dir, const char *arch,
                                 mla_runtime **rt) {
    mla_options o;
    mla_options_init(&o);
    o.no_device = 1;
    o.cache_dir = cache_dir;
    o.arch = arch;
    if (!o.arch) o.arch = getenv("MLAJIT_ARCH");
    if (!o.arch || !*o.arch) o.arch = "sm_90a";
    mla_status s = mla_runtime_create(&o, rt);
    if (s != MLA_OK)
        cli_fail(cmd, "cannot create a runtime: %s: %s", mla_status_string(s), mla_last_error());
    return s;
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    return remove(path);
}

int cli_remove_tree(const char *dir) {
    return nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double cli_median(double *v, int n) {
    if (n <= 0) return 0.0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

const char *cli_command_line(void) {
    static char line[4096];
    size_t len = 0;
    line[0] = '\0';
    for (int i = 0; i < saved_argc && len + 1 < sizeof line; i++) {
        const char *a = i == 0 ? "mlajit" : saved_argv[i];
        const char *quote = strpbrk(a, " \t\"'") ? "'" : "";
        int n = snprintf(line + len, sizeof line - len, "%s%s%s%s", i ? " " : "", quote, a, quote);
        if (n < 0) break;
        len += (size_t)n;
    }
    return line;
}

/* ---- mlajit info ---------------------------------------------------------------------------- */

static void print_info(const mla_runtime_info *in, const char *reason) {
    printf("mlajit:           %s\n", mla_version_string());
    if (in->driver_version > 0)
        printf("driver:           CUDA %d.%d (%d)\n", in->driver_version / 1000,
               in->driver_version % 1000 / 10, in->driver_version);
    else
        printf("driver:           no driver: %s\n", reason);
    if (in->has_device) {
        printf("device:           %d: %s\n", in->device, in->device_name);
        printf("SMs:              %d\n", in->sm_count);
        printf("compute cap.:     %d.%d\n", in->compute_capability / 10,
               in->compute_capability % 10);
    } else {
        printf("device:           none found%s%s\n", in->driver_version > 0 ? ": " : "",
               in->driver_version > 0 ? reason : "");
    }
    printf("arch:             %s%s\n", in->arch, in->has_device ? "" : " (no device: assumed)");
    printf("NVRTC:            %d.%d\n", in->nvrtc_version / 1000, in->nvrtc_version % 1000 / 10);
    if (in->cache_dir[0])
        printf("cache dir:        %s (%s)\n", in->cache_dir,
               in->cache_writable ? "writable" : "not writable: compiling in memory");
    else
        printf("cache dir:        none (disk cache off)\n");
    printf("kernel source:    %s\n", in->kernel_source);
    printf("CUDA include:     %s\n", in->cuda_include);
}

int cli_info(int argc, char **argv) {
    static const struct option longopts[] = {
        {"arch", required_argument, NULL, 'a'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *arch = NULL;
    int c;
    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'a': arch = optarg; break;
        case 'h': fputs(info_usage, stdout); return CLI_OK;
        default: return cli_bad_option("info", argv, c);
        }
    }
    if (optind < argc) return cli_usage_error("info", "unexpected argument '%s'", argv[optind]);
    if (arch && !cli_arch_valid(arch))
        return cli_usage_error("info", "--arch: expected sm_XY[a|f], got '%s'", arch);

    char reason[1024] = "";
    mla_options o;
    mla_options_init(&o);
    o.arch = arch;
    mla_runtime *rt = NULL;
    mla_runtime_info info;
    mla_status s = mla_runtime_create(&o, &rt);
    if (s == MLA_OK) s = mla_runtime_get_info(rt, &info);
    if (s == MLA_OK && !info.has_device) {
        snprintf(reason, sizeof reason, "%s", info.no_device_reason);
        if (!info.arch[0]) s = MLA_ERR_NO_DEVICE; /* no arch known: retry with the default */
    } else if (s == MLA_ERR_NO_DEVICE) {
        snprintf(reason, sizeof reason, "%s", mla_last_error());
    }
    if (s == MLA_ERR_NO_DEVICE) {
        mla_runtime_destroy(rt);
        rt = NULL;
        if (cli_runtime_no_device("info", NULL, arch, &rt) != MLA_OK) return CLI_FAIL;
        s = mla_runtime_get_info(rt, &info);
    }
    if (s != MLA_OK) {
        mla_runtime_destroy(rt);
        return cli_fail("info", "cannot create a runtime: %s: %s", mla_status_string(s),
                        mla_last_error());
    }
    print_info(&info, reason);
    if (!info.has_device) printf("note:             no CUDA device found; compiling and caching work\n");
    mla_runtime_destroy(rt);
    return CLI_OK;
}

/* ---- main ----------------------------------------------------------------------------------- */

typedef struct cli_command {
    const char *name;
    int (*run)(int argc, char **argv);
} cli_command;

static const cli_command commands[] = {
    {"info", cli_info},
    {"precompile", cli_precompile},
    {"cache", cli_cache},
    {"bench", cli_bench},
    {CLI_FIRST_CALL_CMD, cli_bench_first_call},
};

int main(int argc, char **argv) {
    saved_argc = argc;
    saved_argv = argv;
    if (argc < 2) {
        fputs(usage_text, stderr);
        return CLI_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        fputs(usage_text, stdout);
        return CLI_OK;
    }
    if (!strcmp(cmd, "-V") || !strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("mlajit %s\n", mla_version_string());
        return CLI_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(cmd, commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "mlajit: unknown command '%s'\n\n%s", cmd, usage_text);
    return CLI_USAGE;
}
