/* The file format of one cache entry, self-describing and checked on every read.
 *
 *   offset  size  field (integers little-endian)
 *        0     8  magic "MLAJITK1"
 *        8     4  u32 schema (MLA_CACHE_SCHEMA)
 *       12     4  u32 header size (64)
 *       16     8  u64 meta_len
 *       24     8  u64 cubin_len
 *       32     8  u64 checksum: XXH3_64bits over the meta_len + cubin_len bytes that follow
 *       40    24  zero
 *       64        meta: compact JSON {"key":{...},"launch":{"lowered_name":"...","threads":N,
 *                 "dynamic_smem":N,"cluster":N}}
 *  64+meta        the cubin
 *
 * The file ends right after the cubin: any other length is corrupt. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <xxhash.h>

#include "runtime/internal.h"

#define MLA_ENTRY_HEADER_SIZE 64
#define MLA_ENTRY_MAX_THREADS 1024
#define MLA_ENTRY_MAX_SMEM (1 << 20) /* far above any GPU's shared memory */
#define MLA_ENTRY_MAX_CLUSTER 16

typedef struct mla__entry_header {
    uint32_t schema, header_size;
    uint64_t meta_len, cubin_len, checksum;
} mla__entry_header;

static void mla__put_le(unsigned char *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t mla__get_le(const unsigned char *p, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void mla__entry_free(mla__entry *e) {
    if (e == NULL) return;
    free(e->key_json);
    free(e->cubin);
    memset(e, 0, sizeof *e);
}

/* Checks launch needs; code is the status to report (bad argument, or a corrupt file). */
static mla_status mla__launch_check(const mla__launch_info *l, mla_status code) {
    size_t n = strnlen(l->lowered_name, sizeof l->lowered_name);
    MLA_RETURN_ERROR_IF(n == 0 || n == sizeof l->lowered_name, code,
                        "cache entry: launch.lowered_name: expected 1 to %zu chars, got %s",
                        sizeof l->lowered_name - 1, n == 0 ? "an empty name" : "a longer one");
    MLA_RETURN_ERROR_IF(l->threads < 1 || l->threads > MLA_ENTRY_MAX_THREADS, code,
                        "cache entry: launch.threads: expected 1 to %d, got %d",
                        MLA_ENTRY_MAX_THREADS, l->threads);
    MLA_RETURN_ERROR_IF(l->dynamic_smem < 0 || l->dynamic_smem > MLA_ENTRY_MAX_SMEM, code,
                        "cache entry: launch.dynamic_smem: expected 0 to %d, got %d",
                        MLA_ENTRY_MAX_SMEM, l->dynamic_smem);
    MLA_RETURN_ERROR_IF(l->cluster < 1 || l->cluster > MLA_ENTRY_MAX_CLUSTER, code,
                        "cache entry: launch.cluster: expected 1 to %d, got %d",
                        MLA_ENTRY_MAX_CLUSTER, l->cluster);
    return MLA_OK;
}

/* The meta JSON text of an entry (malloc'd), or NULL if key_json is not a JSON object. */
static char *mla__meta_print(const mla__entry *e) {
    char *text = NULL;
    cJSON *meta = cJSON_CreateObject(), *launch = cJSON_CreateObject();
    cJSON *key = cJSON_Parse(e->key_json);
    int ok = meta != NULL && launch != NULL && cJSON_IsObject(key);
    ok = ok && cJSON_AddItemToObject(meta, "key", key);
    if (!ok) cJSON_Delete(key);
    ok = ok && cJSON_AddItemToObject(meta, "launch", launch);
    if (!ok) cJSON_Delete(launch);
    ok = ok &&
         cJSON_AddItemToObject(launch, "lowered_name", cJSON_CreateString(e->launch.lowered_name));
    ok = ok && cJSON_AddItemToObject(launch, "threads", cJSON_CreateNumber(e->launch.threads));
    ok = ok &&
         cJSON_AddItemToObject(launch, "dynamic_smem", cJSON_CreateNumber(e->launch.dynamic_smem));
    ok = ok && cJSON_AddItemToObject(launch, "cluster", cJSON_CreateNumber(e->launch.cluster));
    if (ok) text = cJSON_PrintUnformatted(meta);
    cJSON_Delete(meta);
    return text;
}

mla_status mla__entry_encode(const mla__entry *e, void **buf, size_t *size) {
    MLA_ARG_CHECK(e != NULL && buf != NULL && size != NULL,
                  "entry encode: e, buf and size must not be NULL");
    MLA_ARG_CHECK(e->key_json != NULL, "entry encode: key_json: expected a JSON object, got NULL");
    MLA_ARG_CHECK(e->cubin != NULL && e->cubin_size > 0,
                  "entry encode: cubin: expected a non-empty image, got %zu bytes", e->cubin_size);
    MLA_FORWARD_IF_ERROR(mla__launch_check(&e->launch, MLA_ERR_INVALID_ARGUMENT));
    char *meta = mla__meta_print(e);
    MLA_ARG_CHECK(meta != NULL, "entry encode: key_json: expected a JSON object, got \"%.80s\"",
                  e->key_json);
    size_t meta_len = strlen(meta), total = MLA_ENTRY_HEADER_SIZE + meta_len + e->cubin_size;
    unsigned char *p = calloc(1, total);
    if (p == NULL) {
        free(meta);
        return MLA_ERROR(MLA_ERR_OUT_OF_MEMORY, "entry encode: cannot allocate %zu bytes", total);
    }
    memcpy(p, MLA_CACHE_MAGIC, 8);
    mla__put_le(p + 8, MLA_CACHE_SCHEMA, 4);
    mla__put_le(p + 12, MLA_ENTRY_HEADER_SIZE, 4);
    mla__put_le(p + 16, meta_len, 8);
    mla__put_le(p + 24, e->cubin_size, 8);
    memcpy(p + MLA_ENTRY_HEADER_SIZE, meta, meta_len);
    memcpy(p + MLA_ENTRY_HEADER_SIZE + meta_len, e->cubin, e->cubin_size);
    mla__put_le(p + 32, XXH3_64bits(p + MLA_ENTRY_HEADER_SIZE, meta_len + e->cubin_size), 8);
    free(meta);
    *buf = p;
    *size = total;
    return MLA_OK;
}

/* Reads and checks the header against the image size. */
static mla_status mla__header_read(const unsigned char *p, size_t size, mla__entry_header *h) {
    char magic[9];
    MLA_RETURN_ERROR_IF(size < MLA_ENTRY_HEADER_SIZE, MLA_ERR_CACHE,
                        "cache entry: expected at least %d bytes, got %zu", MLA_ENTRY_HEADER_SIZE,
                        size);
    for (int i = 0; i < 8; i++) magic[i] = (p[i] >= 0x20 && p[i] < 0x7f) ? (char)p[i] : '?';
    magic[8] = '\0';
    MLA_RETURN_ERROR_IF(memcmp(p, MLA_CACHE_MAGIC, 8) != 0, MLA_ERR_CACHE,
                        "cache entry: expected magic \"%s\", got \"%s\"", MLA_CACHE_MAGIC, magic);
    h->schema = (uint32_t)mla__get_le(p + 8, 4);
    h->header_size = (uint32_t)mla__get_le(p + 12, 4);
    h->meta_len = mla__get_le(p + 16, 8);
    h->cubin_len = mla__get_le(p + 24, 8);
    h->checksum = mla__get_le(p + 32, 8);
    MLA_RETURN_ERROR_IF(h->schema != MLA_CACHE_SCHEMA, MLA_ERR_CACHE,
                        "cache entry: expected schema %d, got %u", MLA_CACHE_SCHEMA, h->schema);
    MLA_RETURN_ERROR_IF(h->header_size != MLA_ENTRY_HEADER_SIZE, MLA_ERR_CACHE,
                        "cache entry: expected header size %d, got %u", MLA_ENTRY_HEADER_SIZE,
                        h->header_size);
    for (int i = 40; i < MLA_ENTRY_HEADER_SIZE; i++)
        MLA_RETURN_ERROR_IF(p[i] != 0, MLA_ERR_CACHE,
                            "cache entry: expected zero header padding, got 0x%02x at byte %d",
                            p[i], i);
    size_t body = size - MLA_ENTRY_HEADER_SIZE;
    MLA_RETURN_ERROR_IF(h->meta_len == 0 || h->meta_len > body, MLA_ERR_CACHE,
                        "cache entry: expected meta length 1 to %zu (file of %zu bytes), got %llu",
                        body, size, (unsigned long long)h->meta_len);
    MLA_RETURN_ERROR_IF(h->cubin_len == 0 || h->cubin_len != body - h->meta_len, MLA_ERR_CACHE,
                        "cache entry: expected cubin length %llu (file of %zu bytes), got %llu",
                        (unsigned long long)(body - h->meta_len), size,
                        (unsigned long long)h->cubin_len);
    return MLA_OK;
}

/* Reads launch.<name> as an integer in [lo, hi]. */
static mla_status mla__meta_int(const cJSON *launch, const char *name, int lo, int hi, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(launch, name);
    MLA_RETURN_ERROR_IF(!cJSON_IsNumber(v), MLA_ERR_CACHE,
                        "cache entry: launch.%s: expected an integer, got %s", name,
                        v == NULL ? "nothing" : "another type");
    double d = v->valuedouble;
    MLA_RETURN_ERROR_IF(!(d >= lo && d <= hi) || d != (double)(int)d, MLA_ERR_CACHE,
                        "cache entry: launch.%s: expected an integer in [%d, %d], got %g", name, lo,
                        hi, d);
    *out = (int)d;
    return MLA_OK;
}

static mla_status mla__meta_launch(const cJSON *launch, mla__launch_info *l) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(launch, "lowered_name");
    MLA_RETURN_ERROR_IF(!cJSON_IsString(name), MLA_ERR_CACHE,
                        "cache entry: launch.lowered_name: expected a string, got %s",
                        name == NULL ? "nothing" : "another type");
    size_t n = strlen(name->valuestring);
    MLA_RETURN_ERROR_IF(n == 0 || n >= sizeof l->lowered_name, MLA_ERR_CACHE,
                        "cache entry: launch.lowered_name: expected 1 to %zu chars, got %zu",
                        sizeof l->lowered_name - 1, n);
    memcpy(l->lowered_name, name->valuestring, n + 1);
    MLA_FORWARD_IF_ERROR(mla__meta_int(launch, "threads", 1, MLA_ENTRY_MAX_THREADS, &l->threads));
    MLA_FORWARD_IF_ERROR(
        mla__meta_int(launch, "dynamic_smem", 0, MLA_ENTRY_MAX_SMEM, &l->dynamic_smem));
    MLA_FORWARD_IF_ERROR(mla__meta_int(launch, "cluster", 1, MLA_ENTRY_MAX_CLUSTER, &l->cluster));
    return MLA_OK;
}

/* Parses the meta JSON into e->key_json (re-printed compact) and e->launch. */
static mla_status mla__meta_parse(const char *meta, size_t len, mla__entry *e) {
    const char *end = NULL;
    mla_status st = MLA_OK;
    cJSON *root = cJSON_ParseWithLengthOpts(meta, len, &end, 0);
    const cJSON *key = cJSON_GetObjectItemCaseSensitive(root, "key");
    const cJSON *launch = cJSON_GetObjectItemCaseSensitive(root, "launch");
    if (root == NULL || end != meta + len) {
        st = MLA_ERROR(MLA_ERR_CACHE,
                       "cache entry: meta: expected %zu bytes of JSON, it %s at byte %td", len,
                       root == NULL ? "fails to parse" : "ends", end ? end - meta : (ptrdiff_t)0);
        goto done;
    }
    if (!cJSON_IsObject(root) || !cJSON_IsObject(key) || !cJSON_IsObject(launch)) {
        st = MLA_ERROR(MLA_ERR_CACHE, "cache entry: meta: expected an object with objects "
                                      "\"key\" and \"launch\"");
        goto done;
    }
    st = mla__meta_launch(launch, &e->launch);
    if (st != MLA_OK) goto done;
    e->key_json = cJSON_PrintUnformatted(key);
    if (e->key_json == NULL) st = MLA_ERROR(MLA_ERR_OUT_OF_MEMORY, "cache entry: out of memory");
done:
    cJSON_Delete(root);
    return st;
}

mla_status mla__entry_decode(const void *buf, size_t size, mla__entry *e) {
    MLA_ARG_CHECK(e != NULL, "entry decode: e: expected a pointer, got NULL");
    memset(e, 0, sizeof *e);
    MLA_ARG_CHECK(buf != NULL || size == 0, "entry decode: buf is NULL with size %zu", size);
    const unsigned char *p = buf;
    mla__entry_header h = {0};
    MLA_FORWARD_IF_ERROR(mla__header_read(p, size, &h));
    uint64_t sum = XXH3_64bits(p + MLA_ENTRY_HEADER_SIZE, h.meta_len + h.cubin_len);
    MLA_RETURN_ERROR_IF(sum != h.checksum, MLA_ERR_CACHE,
                        "cache entry: expected checksum %016llx, got %016llx (damaged file)",
                        (unsigned long long)h.checksum, (unsigned long long)sum);
    mla_status st = mla__meta_parse((const char *)p + MLA_ENTRY_HEADER_SIZE, h.meta_len, e);
    if (st != MLA_OK) goto done;
    e->cubin = malloc(h.cubin_len);
    if (e->cubin == NULL) {
        st = MLA_ERROR(MLA_ERR_OUT_OF_MEMORY, "entry decode: cannot allocate %llu bytes",
                       (unsigned long long)h.cubin_len);
        goto done;
    }
    memcpy(e->cubin, p + MLA_ENTRY_HEADER_SIZE + h.meta_len, h.cubin_len);
    e->cubin_size = h.cubin_len;
done:
    if (st != MLA_OK) mla__entry_free(e);
    return st;
}
