/* The canonical cache key: one JSON object built in a fixed order, and its hash.
 *
 * {"schema":1,"library":"0.1.0","source":"dsv4/plan.cu","source_hash":"<32 hex>","nvrtc":13000,
 *  "arch":"sm_90a","options":["-default-device",...],"name_expr":"...","kernel":"...",
 *  "spec":{"<param>":<value>,...}}
 *
 * printed compact (cJSON_PrintUnformatted), keys in exactly this order, spec params in the spec's
 * order. Only integers and strings appear: cJSON prints numbers through a double, so a spec value
 * inside the int32 range is a JSON integer and any other value is its decimal text as a JSON string
 * ("4294967296"). Every value thus has one exact spelling that survives a parse and re-print.
 * Options that carry an absolute path ("/x", "-I/x", "--opt=/x") are left out: the key must not
 * change when the library or the CUDA toolkit moves. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <xxhash.h>

#include "runtime/internal.h"

/* 1 if an option names an absolute path: "/x", "-I/x", "--include-path=/x". */
static int mla__option_has_abs_path(const char *opt) {
    const char *eq = strchr(opt, '=');
    if (opt[0] == '/') return 1;
    if (strncmp(opt, "-I", 2) == 0 && opt[2] == '/') return 1;
    return eq != NULL && eq[1] == '/';
}

/* A spec value: a JSON integer inside the int32 range, else its decimal text as a string. */
static cJSON *mla__key_value(long long v) {
    char text[32];
    if (v >= INT_MIN && v <= INT_MAX) return cJSON_CreateNumber((double)v);
    snprintf(text, sizeof text, "%lld", v);
    return cJSON_CreateString(text);
}

static cJSON *mla__key_options(const mla__key_inputs *in) {
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; arr != NULL && i < in->n_options; i++) {
        if (in->options[i] == NULL || mla__option_has_abs_path(in->options[i])) continue;
        if (!cJSON_AddItemToArray(arr, cJSON_CreateString(in->options[i]))) {
            cJSON_Delete(arr);
            return NULL;
        }
    }
    return arr;
}

static cJSON *mla__key_spec(const mla__spec *spec) {
    cJSON *obj = cJSON_CreateObject();
    for (int i = 0; obj != NULL && i < spec->n_params; i++) {
        const mla__param *p = &spec->params[i];
        if (!cJSON_AddItemToObject(obj, p->name, mla__key_value(p->value))) {
            cJSON_Delete(obj);
            return NULL;
        }
    }
    return obj;
}

static mla_status mla__key_check(const mla__key_inputs *in) {
    MLA_ARG_CHECK(in != NULL, "key inputs: expected a pointer, got NULL");
    MLA_ARG_CHECK(in->library_version != NULL, "key inputs: library_version is NULL");
    MLA_ARG_CHECK(in->source != NULL, "key inputs: source is NULL");
    MLA_ARG_CHECK(in->source_hash != NULL, "key inputs: source_hash is NULL");
    MLA_ARG_CHECK(in->arch != NULL, "key inputs: arch is NULL");
    MLA_ARG_CHECK(in->name_expr != NULL, "key inputs: name_expr is NULL");
    MLA_ARG_CHECK(in->spec != NULL, "key inputs: spec is NULL");
    MLA_ARG_CHECK(memchr(in->spec->kernel, '\0', sizeof in->spec->kernel) != NULL,
                  "key inputs: spec kernel name is not NUL-terminated");
    MLA_ARG_CHECK(in->n_options >= 0, "key inputs: expected n_options >= 0, got %d", in->n_options);
    MLA_ARG_CHECK(in->n_options == 0 || in->options != NULL,
                  "key inputs: options is NULL with n_options = %d", in->n_options);
    MLA_ARG_CHECK(in->spec->n_params >= 0 && in->spec->n_params <= MLA_SPEC_MAX_PARAMS,
                  "key inputs: expected spec n_params in [0, %d], got %d", MLA_SPEC_MAX_PARAMS,
                  in->spec->n_params);
    return MLA_OK;
}

char *mla__key_json(const mla__key_inputs *in) {
    char *text = NULL;
    if (mla__key_check(in) != MLA_OK) return NULL;
    cJSON *key = cJSON_CreateObject();
    int ok = key != NULL;
    ok = ok && cJSON_AddItemToObject(key, "schema", cJSON_CreateNumber(MLA_CACHE_SCHEMA));
    ok = ok && cJSON_AddItemToObject(key, "library", cJSON_CreateString(in->library_version));
    ok = ok && cJSON_AddItemToObject(key, "source", cJSON_CreateString(in->source));
    ok = ok && cJSON_AddItemToObject(key, "source_hash", cJSON_CreateString(in->source_hash));
    ok = ok && cJSON_AddItemToObject(key, "nvrtc", cJSON_CreateNumber(in->nvrtc_version));
    ok = ok && cJSON_AddItemToObject(key, "arch", cJSON_CreateString(in->arch));
    ok = ok && cJSON_AddItemToObject(key, "options", mla__key_options(in));
    ok = ok && cJSON_AddItemToObject(key, "name_expr", cJSON_CreateString(in->name_expr));
    ok = ok && cJSON_AddItemToObject(key, "kernel", cJSON_CreateString(in->spec->kernel));
    ok = ok && cJSON_AddItemToObject(key, "spec", mla__key_spec(in->spec));
    if (ok) text = cJSON_PrintUnformatted(key);
    if (text == NULL)
        MLA_ERROR(MLA_ERR_OUT_OF_MEMORY, "cache key: out of memory building the JSON");
    cJSON_Delete(key);
    return text;
}

void mla__key_hash(const char *key_json, char out[33]) {
    static const char hex[] = "0123456789abcdef";
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(key_json, strlen(key_json)));
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hex[c.digest[i] >> 4];
        out[2 * i + 1] = hex[c.digest[i] & 15];
    }
    out[32] = '\0';
}
