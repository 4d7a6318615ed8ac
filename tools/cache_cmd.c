/* mlajit cache list | verify | prune: looks after the on-disk kernel cache. Works without a GPU
 * (the runtime is created with no_device only to resolve the default cache folder). */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tools/cli.h"

static const char cache_usage[] =
    "usage: mlajit cache list   [--cache-dir DIR]\n"
    "       mlajit cache verify [--cache-dir DIR]\n"
    "       mlajit cache prune  [--cache-dir DIR] [--all] [--older-than DAYS]\n"
    "\n"
    "  list        one line per entry: hash, kernel and spec, arch, cubin bytes, modified (UTC)\n"
    "  verify      decode every entry and check it against its name; exit 1 if one is corrupt\n"
    "  prune       remove corrupt entries, stale temporary and lock files, and with --all every\n"
    "              entry, with --older-than DAYS the entries not modified for DAYS days\n"
    "\n"
    "  --cache-dir DIR    cache folder (default: $MLAJIT_CACHE_DIR, else\n"
    "                     ${XDG_CACHE_HOME:-~/.cache}/mlajit)\n";

/* What the tool knows of one entry file. */
typedef struct entry_info {
    char hash[64];
    char path[MLA_PATH_MAX];
    char what[512];     /* "kernel(p=v,...)" from the key */
    char arch[16];
    char library[32];
    long long cubin_size;
    time_t mtime;
    char *error;        /* malloc'd; NULL when intact */
} entry_info;

typedef struct entry_list {
    entry_info *v;
    int n, cap;
} entry_list;

static void entry_list_free(entry_list *l) {
    for (int i = 0; i < l->n; i++) free(l->v[i].error);
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* Reads kernel, spec, arch and library version from a key JSON. */
static void describe_key(const char *key_json, entry_info *out) {
    cJSON *key = cJSON_Parse(key_json);
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(key, "kernel");
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(key, "arch");
    const cJSON *lib = cJSON_GetObjectItemCaseSensitive(key, "library");
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(key, "spec");
    size_t used = (size_t)snprintf(out->what, sizeof out->what, "%s(",
                                   cJSON_IsString(k) ? k->valuestring : "?");
    const cJSON *p;
    int i = 0;
    cJSON_ArrayForEach(p, spec) {
        if (used >= sizeof out->what) break;
        if (cJSON_IsNumber(p))
            used += (size_t)snprintf(out->what + used, sizeof out->what - used, "%s%s=%lld",
                                     i++ ? "," : "", p->string, (long long)p->valuedouble);
        else if (cJSON_IsString(p))
            used += (size_t)snprintf(out->what + used, sizeof out->what - used, "%s%s=%s",
                                     i++ ? "," : "", p->string, p->valuestring);
    }
    if (used < sizeof out->what) snprintf(out->what + used, sizeof out->what - used, ")");
    snprintf(out->arch, sizeof out->arch, "%s", cJSON_IsString(arch) ? arch->valuestring : "?");
    snprintf(out->library, sizeof out->library, "%s", cJSON_IsString(lib) ? lib->valuestring : "?");
    cJSON_Delete(key);
}

static int collect(const char *path, const char *hash, const mla__entry *entry, const char *error,
                   void *user) {
    entry_list *l = user;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        entry_info *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return 1;
        l->v = v;
        l->cap = cap;
    }
    entry_info *e = &l->v[l->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->hash, sizeof e->hash, "%s", hash);
    snprintf(e->path, sizeof e->path, "%s", path);
    struct stat st;
    if (stat(path, &st) == 0) e->mtime = st.st_mtime;
    if (entry) {
        describe_key(entry->key_json, e);
        e->cubin_size = (long long)entry->cubin_size;
    } else {
        e->error = strdup(error && error[0] ? error : "unreadable");
    }
    return 0;
}

/* Decodes every entry of dir into l; CLI_OK or CLI_FAIL (message printed). */
static int scan(const char *cmd, const char *dir, entry_list *l) {
    if (mla__cache_foreach(dir, collect, l) != MLA_OK)
        return cli_fail(cmd, "cannot list %s: %s", dir, mla_last_error());
    return CLI_OK;
}

static void format_time(time_t t, char *out, size_t size) {
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, size, "%Y-%m-%d %H:%M:%S", &tm);
}

/* ---- subcommands ---------------------------------------------------------------------------- */

static int cache_list(const char *dir) {
    entry_list l = {0};
    if (scan("cache list", dir, &l) != CLI_OK) return CLI_FAIL;
    long long total = 0;
    int corrupt = 0;
    printf("cache: %s\n", dir);
    if (l.n) printf("%-32s  %-40s %-8s %10s  %s\n", "hash", "kernel", "arch", "cubin B",
                    "modified (UTC)");
    for (int i = 0; i < l.n; i++) {
        const entry_info *e = &l.v[i];
        char when[32];
        format_time(e->mtime, when, sizeof when);
        if (e->error) {
            printf("%-32s  CORRUPT: %s\n", e->hash, e->error);
            corrupt++;
            continue;
        }
        printf("%-32s  %-40s %-8s %10lld  %s%s%s\n", e->hash, e->what, e->arch, e->cubin_size,
               when, strcmp(e->library, mla_version_string()) ? "  library " : "",
               strcmp(e->library, mla_version_string()) ? e->library : "");
        total += e->cubin_size;
    }
    printf("%d entries, %lld cubin bytes", l.n - corrupt, total);
    if (corrupt) printf(", %d corrupt (mlajit cache prune removes them)", corrupt);
    printf("\n");
    entry_list_free(&l);
    return CLI_OK;
}

static int cache_verify(const char *dir) {
    entry_list l = {0};
    if (scan("cache verify", dir, &l) != CLI_OK) return CLI_FAIL;
    int corrupt = 0;
    for (int i = 0; i < l.n; i++) {
        if (!l.v[i].error) continue;
        printf("CORRUPT %s: %s\n", l.v[i].hash, l.v[i].error);
        corrupt++;
    }
    printf("verified %d entries in %s: %d intact, %d corrupt\n", l.n, dir, l.n - corrupt, corrupt);
    entry_list_free(&l);
    return corrupt ? CLI_FAIL : CLI_OK;
}

static int cache_prune(const char *dir, int all, double days) {
    entry_list before = {0};
    if (scan("cache prune", dir, &before) != CLI_OK) return CLI_FAIL;
    long long older_than = days < 0 ? -1 : (long long)llround(days * 86400.0);
    int removed = 0, entries = 0;
    mla_status s = mla__cache_prune(dir, all, older_than, &removed);
    for (int i = 0; i < before.n; i++) {
        const entry_info *e = &before.v[i];
        if (access(e->path, F_OK) == 0) continue;
        entries++;
        if (e->error) printf("removed %s (corrupt: %s)\n", e->hash, e->error);
        else printf("removed %s %s %s (%s)\n", e->hash, e->what, e->arch,
                    all ? "--all" : older_than >= 0 ? "older than the limit" : "gone");
    }
    printf("removed %d files from %s: %d entries, %d temporary or lock files\n", removed, dir,
           entries, removed > entries ? removed - entries : 0);
    entry_list_free(&before);
    if (s != MLA_OK) return cli_fail("cache prune", "%s", mla_last_error());
    return CLI_OK;
}

/* ---- mlajit cache --------------------------------------------------------------------------- */

int cli_cache(int argc, char **argv) {
    static const struct option longopts[] = {
        {"cache-dir", required_argument, NULL, 'c'},
        {"all", no_argument, NULL, 'a'},
        {"older-than", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    if (argc < 2) return cli_usage_error("cache", "expected list, verify or prune");
    const char *sub = argv[1];
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h")) {
        fputs(cache_usage, stdout);
        return CLI_OK;
    }
    int is_list = !strcmp(sub, "list"), is_verify = !strcmp(sub, "verify");
    int is_prune = !strcmp(sub, "prune");
    if (!is_list && !is_verify && !is_prune)
        return cli_usage_error("cache", "unknown subcommand '%s' (expected list, verify or prune)",
                               sub);
    const char *cache_dir = NULL;
    int all = 0, c;
    double days = -1.0;
    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc - 1, argv + 1, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'c': cache_dir = optarg; break;
        case 'h': fputs(cache_usage, stdout); return CLI_OK;
        case 'a':
        case 'o':
            if (!is_prune)
                return cli_usage_error("cache", "--all and --older-than belong to cache prune");
            if (c == 'a') {
                all = 1;
                break;
            }
            char *end;
            days = strtod(optarg, &end);
            if (end == optarg || *end || !(days >= 0) || days > 1e6)
                return cli_usage_error("cache", "--older-than: expected a number of days >= 0, "
                                       "got '%s'", optarg);
            break;
        default: return cli_bad_option("cache", argv + 1, c);
        }
    }
    if (optind < argc - 1)
        return cli_usage_error("cache", "unexpected argument '%s'", argv[1 + optind]);

    mla_runtime *rt = NULL;
    if (cli_runtime_no_device("cache", cache_dir, NULL, &rt) != MLA_OK) return CLI_FAIL;
    mla_runtime_info info;
    int rc = CLI_FAIL;
    if (mla_runtime_get_info(rt, &info) != MLA_OK)
        cli_fail("cache", "mla_runtime_get_info: %s", mla_last_error());
    else if (!info.cache_dir[0])
        cli_fail("cache", "the disk cache is off (MLAJIT_CACHE_DIR is empty)");
    else if (is_list)
        rc = cache_list(info.cache_dir);
    else if (is_verify)
        rc = cache_verify(info.cache_dir);
    else
        rc = cache_prune(info.cache_dir, all, days);
    mla_runtime_destroy(rt);
    return rc;
}
