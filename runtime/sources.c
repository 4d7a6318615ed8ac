/* Kernel sources: the kernel_src/ files embedded at build time, or a source folder named by
 * MLAJIT_KERNEL_DIR (read once per runtime). Includes between kernel sources are written
 * `#include "dir/file.cuh"`, relative to kernel_src/; includes that name no kernel_src file
 * (CUDA headers) are left to NVRTC's include path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "runtime/internal.h"

struct mla__loaded_source {
    struct mla__loaded_source *next;
    char *path;
    char *data;
    size_t size;
};

static const mla__embedded_file *embedded_find(const char *path) {
    for (size_t i = 0; i < mla__embedded_file_count; i++)
        if (strcmp(mla__embedded_files[i].path, path) == 0) return &mla__embedded_files[i];
    return NULL;
}

static char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *data = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (data = malloc((size_t)n + 1))) {
            if (fread(data, 1, (size_t)n, f) == (size_t)n) {
                data[n] = '\0';
                *size = (size_t)n;
            } else {
                free(data);
                data = NULL;
            }
        }
    }
    fclose(f);
    return data;
}

/* Looks the file up in the runtime's list, reading it on first use. Caller holds sources_lock. */
static const struct mla__loaded_source *dir_source(mla_runtime *rt, const char *path) {
    for (struct mla__loaded_source *s = rt->sources; s; s = s->next)
        if (strcmp(s->path, path) == 0) return s;
    char full[MLA_PATH_MAX * 2];
    snprintf(full, sizeof full, "%s/%s", rt->kernel_dir, path);
    struct mla__loaded_source *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->data = read_file(full, &s->size);
    s->path = strdup(path);
    if (!s->data || !s->path) {
        free(s->data);
        free(s->path);
        free(s);
        return NULL;
    }
    s->next = rt->sources;
    rt->sources = s;
    return s;
}

const char *mla__source_get(const mla_runtime *crt, const char *path, size_t *len) {
    mla_runtime *rt = (mla_runtime *)crt;
    if (!rt->kernel_dir[0]) {
        const mla__embedded_file *f = embedded_find(path);
        if (f) *len = f->size;
        return f ? f->data : NULL;
    }
    pthread_mutex_lock(&rt->sources_lock);
    const struct mla__loaded_source *s = dir_source(rt, path);
    pthread_mutex_unlock(&rt->sources_lock);
    if (s) *len = s->size;
    return s ? s->data : NULL;
}

void mla__sources_free(mla_runtime *rt) {
    while (rt->sources) {
        struct mla__loaded_source *next = rt->sources->next;
        free(rt->sources->path);
        free(rt->sources->data);
        free(rt->sources);
        rt->sources = next;
    }
}

static int closure_has(const mla__source_set *set, const char *path) {
    for (int i = 0; i < set->count; i++)
        if (strcmp(set->paths[i], path) == 0) return 1;
    return 0;
}

/* Adds path and, depth first, every kernel_src file it includes. */
static mla_status closure_add(const mla_runtime *rt, const char *path, mla__source_set *set) {
    if (closure_has(set, path)) return MLA_OK;
    size_t len = 0;
    const char *text = mla__source_get(rt, path, &len);
    MLA_RETURN_ERROR_IF(!text, MLA_ERR_IO, "kernel source %s not found in %s", path,
                        rt->kernel_dir[0] ? rt->kernel_dir : "the embedded sources");
    MLA_RETURN_ERROR_IF(set->count == MLA_SOURCE_SET_MAX, MLA_ERR_INTERNAL,
                        "kernel source %s: more than %d included files", path, MLA_SOURCE_SET_MAX);
    snprintf(set->paths[set->count], sizeof set->paths[0], "%s", path);
    set->texts[set->count] = text;
    set->sizes[set->count++] = len;
    for (const char *p = text; (p = strstr(p, "#include")) != NULL;) {
        p += 8;
        while (*p == ' ' || *p == '\t') p++;
        if (*p != '"') continue;
        const char *end = strchr(p + 1, '"');
        if (!end || end - p - 1 >= (long)sizeof set->paths[0]) continue;
        char inc[sizeof set->paths[0]];
        snprintf(inc, sizeof inc, "%.*s", (int)(end - p - 1), p + 1);
        size_t ilen;
        if (mla__source_get(rt, inc, &ilen)) MLA_FORWARD_IF_ERROR(closure_add(rt, inc, set));
    }
    return MLA_OK;
}

static int cmp_index(const void *a, const void *b, void *set) {
    const mla__source_set *s = set;
    return strcmp(s->paths[*(const int *)a], s->paths[*(const int *)b]);
}

mla_status mla__source_closure(const mla_runtime *rt, const char *path, mla__source_set *set) {
    set->count = 0;
    return closure_add(rt, path, set);
}

mla_status mla__source_hash(const mla_runtime *rt, const char *path, char out[33]) {
    mla__source_set set;
    MLA_FORWARD_IF_ERROR(mla__source_closure(rt, path, &set));
    int order[MLA_SOURCE_SET_MAX];
    for (int i = 0; i < set.count; i++) order[i] = i;
    qsort_r(order + 1, (size_t)set.count - 1, sizeof order[0], cmp_index, &set); /* root first */
    XXH3_state_t *st = XXH3_createState();
    MLA_RETURN_ERROR_IF(!st, MLA_ERR_OUT_OF_MEMORY, "source hash: out of memory");
    XXH3_128bits_reset(st);
    for (int i = 0; i < set.count; i++) {
        int k = order[i];
        uint64_t size = set.sizes[k];
        XXH3_128bits_update(st, set.paths[k], strlen(set.paths[k]) + 1);
        XXH3_128bits_update(st, &size, sizeof size);
        XXH3_128bits_update(st, set.texts[k], set.sizes[k]);
    }
    XXH128_hash_t h = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)h.high64, (unsigned long long)h.low64);
    return MLA_OK;
}
