/* mlajit precompile: compiles every (spec, arch) pair of presets and spec files into the disk
 * cache over a pool of threads, with a progress bar on a terminal and a summary. Needs no GPU. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/cli.h"

static const char precompile_usage[] =
    "usage: mlajit precompile [--arch ARCH]... [--preset NAME]... [--spec FILE.json]...\n"
    "                         [--jobs N] [--cache-dir DIR] [--quiet]\n"
    "       mlajit precompile --list-presets\n"
    "\n"
    "Compiles every spec of the presets and spec files for every arch into the kernel cache.\n"
    "Needs no GPU. Exit status: 0 all done, 1 some failed, 2 bad command line or spec file.\n"
    "\n"
    "  --arch ARCH       compile target, repeatable (default: the device's; without a GPU\n"
    "                    $MLAJIT_ARCH, else both sm_100a and sm_90a)\n"
    "  --preset NAME     a built-in spec list, repeatable (see --list-presets)\n"
    "  --spec FILE       a JSON spec file, repeatable: [{\"kernel\": \"...\", \"<param>\": int}]\n"
    "                    or {\"specs\": [...]}\n"
    "  --jobs N          compile N specs at once (default: the number of CPUs)\n"
    "  --cache-dir DIR   cache folder (default: $MLAJIT_CACHE_DIR, else\n"
    "                    ${XDG_CACHE_HOME:-~/.cache}/mlajit)\n"
    "  --quiet           print failures only\n"
    "  --list-presets    print the built-in presets and exit\n";

#define MAX_ARCHS 16

/* A growing list of distinct specs. */
typedef struct spec_list {
    mla__spec *v;
    int n, cap;
} spec_list;

/* One (spec, arch) pair and its outcome. */
typedef struct work_item {
    const mla__spec *spec;
    const char *arch;
    mla_status status;
    mla__origin origin;
    double seconds;
    char *error; /* malloc'd copy of the worker thread's mla_last_error() */
} work_item;

typedef struct work {
    mla_runtime *rt;
    work_item *items;
    int n;
    int next, done;             /* guarded by lock */
    int compiled, cached, failed;
    int progress_bar, quiet;
    pthread_mutex_t lock;
} work;

/* ---- specs ---------------------------------------------------------------------------------- */

static int spec_list_add(spec_list *l, const mla__spec *s) {
    for (int i = 0; i < l->n; i++)
        if (!memcmp(&l->v[i], s, sizeof *s)) return 0;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        mla__spec *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = *s;
    return 0;
}

/* Line and column of offset in text, for parse errors. */
static void text_position(const char *text, size_t offset, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < offset && text[i]; i++) {
        if (text[i] == '\n') ++*line, *col = 1;
        else ++*col;
    }
}

/* Adds the specs of one JSON text (what names it in messages). CLI_OK or CLI_USAGE. */
static int add_specs_json(const char *what, const char *text, size_t len, spec_list *out) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        int line, col;
        text_position(text, end ? (size_t)(end - text) : 0, &line, &col);
        return cli_usage_error("precompile", "%s: invalid JSON at line %d, column %d", what,
                               line, col);
    }
    const cJSON *arr = root;
    if (cJSON_IsObject(root)) arr = cJSON_GetObjectItemCaseSensitive(root, "specs");
    int rc = CLI_OK;
    if (!cJSON_IsArray(arr)) {
        rc = cli_usage_error("precompile", "%s: expected a JSON array of specs or an object "
                             "with a \"specs\" array", what);
        goto done;
    }
    int i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, arr) {
        mla__spec spec;
        if (!cJSON_IsObject(item)) {
            rc = cli_usage_error("precompile", "%s: spec %d: expected an object "
                                 "{\"kernel\": \"...\", ...}", what, i);
            goto done;
        }
        mla_status s = mla__spec_from_json(item, &spec);
        if (s != MLA_OK) {
            rc = cli_usage_error("precompile", "%s: spec %d: %s", what, i, mla_last_error());
            goto done;
        }
        if (spec_list_add(out, &spec) != 0) {
            rc = cli_fail("precompile", "out of memory");
            goto done;
        }
        i++;
    }
    if (i == 0) rc = cli_usage_error("precompile", "%s: no specs", what);
done:
    cJSON_Delete(root);
    return rc;
}

static int add_preset(const char *name, spec_list *out) {
    const cli_preset *p = cli_preset_find(name);
    if (!p) {
        int n;
        const cli_preset *all = cli_presets(&n);
        char known[512] = "";
        for (int i = 0; i < n; i++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "",
                     all[i].name);
        return cli_usage_error("precompile", "unknown preset '%s' (known: %s)", name, known);
    }
    char *json = cli_preset_json(p);
    if (!json) return cli_fail("precompile", "out of memory");
    char what[128];
    snprintf(what, sizeof what, "preset %s", name);
    int rc = add_specs_json(what, json, strlen(json), out);
    free(json);
    return rc;
}

static int add_spec_file(const char *path, spec_list *out) {
    FILE *f = fopen(path, "rb");
    if (!f) return cli_usage_error("precompile", "cannot read %s: %s", path, strerror(errno));
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (cap - len < 4096) {
            char *t = realloc(text, cap = cap ? 2 * cap : 65536);
            if (!t) break;
            text = t;
        }
        size_t got = fread(text + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    int err = ferror(f) || !text;
    fclose(f);
    int rc = err ? cli_usage_error("precompile", "cannot read %s", path)
                 : add_specs_json(path, text, len, out);
    free(text);
    return rc;
}

static void list_presets(void) {
    int n;
    const cli_preset *p = cli_presets(&n);
    for (int i = 0; i < n; i++) {
        char *json = cli_preset_json(&p[i]);
        printf("%s: %s\n%s%s", p[i].name, p[i].description, json ? json : "(out of memory)\n",
               i + 1 < n ? "\n" : "");
        free(json);
    }
}

/* ---- archs ---------------------------------------------------------------------------------- */

static int add_arch(const char *arch, const char **archs, int *n) {
    if (!cli_arch_valid(arch))
        return cli_usage_error("precompile", "--arch: expected sm_XY[a|f] (e.g. sm_90a), got '%s'",
                               arch);
    for (int i = 0; i < *n; i++)
        if (!strcmp(archs[i], arch)) return CLI_OK;
    if (*n == MAX_ARCHS) return cli_usage_error("precompile", "at most %d archs", MAX_ARCHS);
    archs[(*n)++] = arch;
    return CLI_OK;
}

/* The device's arch; without a GPU $MLAJIT_ARCH, else sm_100a and sm_90a. */
static void default_archs(const char **archs, int *n, char *buf, size_t size) {
    mla_runtime *rt = NULL;
    mla_runtime_info info;
    if (mla_runtime_create(NULL, &rt) == MLA_OK && mla_runtime_get_info(rt, &info) == MLA_OK &&
        info.has_device) {
        snprintf(buf, size, "%s", info.arch);
        archs[(*n)++] = buf;
    } else if (getenv("MLAJIT_ARCH") && cli_arch_valid(getenv("MLAJIT_ARCH"))) {
        archs[(*n)++] = getenv("MLAJIT_ARCH");
    } else {
        archs[(*n)++] = "sm_100a";
        archs[(*n)++] = "sm_90a";
    }
    mla_runtime_destroy(rt);
}

/* ---- the work ------------------------------------------------------------------------------- */

/* Prints text with every line after the first indented. */
static void print_indented(FILE *f, const char *text) {
    for (const char *p = text; *p; p++) {
        fputc(*p, f);
        if (*p == '\n' && p[1]) fputs("       ", f);
    }
    if (!*text || text[strlen(text) - 1] != '\n') fputc('\n', f);
}

/* Reports a finished item; called with w->lock held. */
static void report(work *w, const work_item *it) {
    char name[512];
    mla__spec_describe(it->spec, name, sizeof name);
    FILE *f = w->progress_bar ? stderr : stdout;
    if (w->progress_bar) fputs("\r\033[K", stderr);
    if (it->status != MLA_OK) {
        fprintf(f, "FAIL %-8s %s: ", it->arch, name);
        print_indented(f, it->error && it->error[0] ? it->error
                                                    : mla_status_string(it->status));
    } else if (!w->quiet && !w->progress_bar) {
        fprintf(f, "ok   %-8s %s %s %.2f s\n", it->arch, name,
                it->origin == MLA_ORIGIN_COMPILED ? "compiled" : "cached", it->seconds);
    }
    if (w->progress_bar) {
        enum { WIDTH = 30 };
        int fill = w->done * WIDTH / w->n;
        char bar[WIDTH + 1];
        for (int i = 0; i < WIDTH; i++) bar[i] = i < fill ? '#' : '.';
        bar[WIDTH] = '\0';
        fprintf(stderr, "[%s] %d/%d %s %s", bar, w->done, w->n, it->arch, name);
    }
    fflush(f);
}

static void *worker(void *arg) {
    work *w = arg;
    for (;;) {
        pthread_mutex_lock(&w->lock);
        int i = w->next < w->n ? w->next++ : -1;
        pthread_mutex_unlock(&w->lock);
        if (i < 0) break;
        work_item *it = &w->items[i];
        double t0 = cli_now();
        it->origin = MLA_ORIGIN_COMPILED;
        it->status = mla__precompile(w->rt, it->spec, it->arch, &it->origin, NULL);
        it->seconds = cli_now() - t0;
        if (it->status != MLA_OK) it->error = strdup(mla_last_error());
        pthread_mutex_lock(&w->lock);
        w->done++;
        if (it->status != MLA_OK) w->failed++;
        else if (it->origin == MLA_ORIGIN_COMPILED) w->compiled++;
        else w->cached++;
        report(w, it);
        pthread_mutex_unlock(&w->lock);
    }
    return NULL;
}

/* Runs worker on jobs threads (the calling thread if none can be started). */
static void run_pool(work *w, int jobs) {
    pthread_t threads[256];
    int started = 0;
    for (int i = 0; i < jobs; i++) {
        if (pthread_create(&threads[started], NULL, worker, w) != 0) break;
        started++;
    }
    if (started == 0) worker(w);
    for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
}

static int compile_all(mla_runtime *rt, const spec_list *specs, const char **archs, int n_archs,
                       int jobs, int quiet) {
    work w;
    memset(&w, 0, sizeof w);
    w.rt = rt;
    w.items = calloc((size_t)(specs->n * n_archs), sizeof *w.items);
    if (!w.items) return cli_fail("precompile", "out of memory");
    int skipped = 0; /* pairs of a kind the runtime never launches on that arch */
    for (int a = 0; a < n_archs; a++)
        for (int s = 0; s < specs->n; s++) {
            const mla__kernel_kind *kind = mla__kernel_kind_find(specs->v[s].kernel);
            if (kind && kind->only_arch && strcmp(kind->only_arch, archs[a]) != 0) {
                skipped++;
                continue;
            }
            w.items[w.n].spec = &specs->v[s];
            w.items[w.n++].arch = archs[a];
        }
    w.quiet = quiet;
    w.progress_bar = !quiet && isatty(STDERR_FILENO);
    pthread_mutex_init(&w.lock, NULL);
    if (jobs > w.n) jobs = w.n;

    double t0 = cli_now();
    run_pool(&w, jobs);
    double seconds = cli_now() - t0;

    if (w.progress_bar) fputs("\r\033[K", stderr);
    if (!quiet || w.failed)
        printf("precompiled %d specs for %d archs: %d compiled, %d cached, %d failed, %d skipped "
               "(kind not used on that arch) in %.2f s\n",
               specs->n, n_archs, w.compiled, w.cached, w.failed, skipped, seconds);
    for (int i = 0; i < w.n; i++) free(w.items[i].error);
    free(w.items);
    pthread_mutex_destroy(&w.lock);
    return w.failed ? CLI_FAIL : CLI_OK;
}

/* ---- mlajit precompile ---------------------------------------------------------------------- */

typedef struct precompile_args {
    const char *archs[MAX_ARCHS];
    int n_archs;
    const char *cache_dir;
    long jobs;
    int quiet;
} precompile_args;

/* Parses the options, collecting specs into specs as they come. CLI_OK, or an exit status
 * (-1: done, e.g. --help). */
static int parse_args(int argc, char **argv, precompile_args *a, spec_list *specs) {
    static const struct option longopts[] = {
        {"arch", required_argument, NULL, 'a'},
        {"preset", required_argument, NULL, 'p'},
        {"spec", required_argument, NULL, 's'},
        {"jobs", required_argument, NULL, 'j'},
        {"cache-dir", required_argument, NULL, 'c'},
        {"quiet", no_argument, NULL, 'q'},
        {"list-presets", no_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c, rc;
    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hqj:", longopts, NULL)) != -1) {
        switch (c) {
        case 'a':
            if ((rc = add_arch(optarg, a->archs, &a->n_archs)) != CLI_OK) return rc;
            break;
        case 'p':
            if ((rc = add_preset(optarg, specs)) != CLI_OK) return rc;
            break;
        case 's':
            if ((rc = add_spec_file(optarg, specs)) != CLI_OK) return rc;
            break;
        case 'j':
            if (cli_parse_long(optarg, 1, 256, &a->jobs) != 0)
                return cli_usage_error("precompile", "--jobs: expected 1..256, got '%s'", optarg);
            break;
        case 'c': a->cache_dir = optarg; break;
        case 'q': a->quiet = 1; break;
        case 'l': list_presets(); return -1;
        case 'h': fputs(precompile_usage, stdout); return -1;
        default: return cli_bad_option("precompile", argv, c);
        }
    }
    if (optind < argc)
        return cli_usage_error("precompile", "unexpected argument '%s'", argv[optind]);
    if (specs->n == 0)
        return cli_usage_error("precompile", "nothing to compile: give --preset or --spec");
    return CLI_OK;
}

int cli_precompile(int argc, char **argv) {
    precompile_args a;
    memset(&a, 0, sizeof a);
    spec_list specs = {0};
    char device_arch[16];
    mla_runtime *rt = NULL;
    int rc = parse_args(argc, argv, &a, &specs);
    if (rc != CLI_OK) {
        rc = rc < 0 ? CLI_OK : rc;
        goto done;
    }
    if (a.n_archs == 0) default_archs(a.archs, &a.n_archs, device_arch, sizeof device_arch);
    if (a.jobs == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        a.jobs = cpus < 1 ? 1 : cpus > 256 ? 256 : cpus;
    }
    if (cli_runtime_no_device("precompile", a.cache_dir, a.archs[0], &rt) != MLA_OK) {
        rc = CLI_FAIL;
        goto done;
    }
    mla_runtime_info info;
    if (mla_runtime_get_info(rt, &info) != MLA_OK) {
        rc = cli_fail("precompile", "mla_runtime_get_info: %s", mla_last_error());
        goto done;
    }
    if (!info.cache_dir[0] || !info.cache_writable) {
        rc = cli_fail("precompile", "cache folder '%s' is not writable: nothing would be kept",
                      info.cache_dir);
        goto done;
    }
    if (!a.quiet) printf("cache: %s\n", info.cache_dir);
    rc = compile_all(rt, &specs, a.archs, a.n_archs, (int)a.jobs, a.quiet);
done:
    mla_runtime_destroy(rt);
    free(specs.v);
    return rc;
}
