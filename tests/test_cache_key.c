/* The canonical cache key (cache/key.c): deterministic, sensitive to every input, free of absolute
 * paths, exact for every spec value, and printed in one pinned format. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"

/* The inputs of a key as plain values (Criterion parameters may not hold pointers). */
typedef struct key_fixture {
    char library[16], source[64], source_hash[40], arch[16], name_expr[96];
    int nvrtc;
    char options[4][48];
    int n_options;
    mla__spec spec;
} key_fixture;

static void add_param(mla__spec *s, const char *name, long long value) {
    cr_assert(s->n_params < MLA_SPEC_MAX_PARAMS, "test setup: too many params for %s", name);
    strcpy(s->params[s->n_params].name, name);
    s->params[s->n_params++].value = value;
}

static void fixture_init(key_fixture *f) {
    memset(f, 0, sizeof *f);
    strcpy(f->library, "0.1.0");
    strcpy(f->source, "dsv4/plan.cu");
    strcpy(f->source_hash, "00112233445566778899aabbccddeeff");
    f->nvrtc = 13000;
    strcpy(f->arch, "sm_90a");
    strcpy(f->options[0], "-default-device");
    strcpy(f->options[1], "-std=c++17");
    strcpy(f->options[2], "-I/usr/local/cuda/include");
    f->n_options = 3;
    strcpy(f->name_expr, "mla::dsv4::plan_kernel<64, 256>");
    strcpy(f->spec.kernel, "dsv4_attention_plan");
    add_param(&f->spec, "H", 64);
    add_param(&f->spec, "page_size", 256);
    add_param(&f->spec, "draft_tokens", 2);
    add_param(&f->spec, "big", 4294967296LL);
    add_param(&f->spec, "neg", -1);
}

/* mla__key_json of the fixture; fails the test if it returns NULL. */
static char *fixture_key(const key_fixture *f) {
    const char *opts[4];
    for (int i = 0; i < f->n_options; i++) opts[i] = f->options[i];
    mla__key_inputs in = {f->library, f->source,    f->source_hash, f->nvrtc, f->arch,
                          opts,       f->n_options, f->name_expr,   &f->spec};
    char *key = mla__key_json(&in);
    cr_assert_not_null(key, "mla__key_json of %s: returned NULL (%s)", f->spec.kernel,
                       mla_last_error());
    return key;
}

static const char base_key_text[] =
    "{\"schema\":1,\"library\":\"0.1.0\",\"source\":\"dsv4/plan.cu\","
    "\"source_hash\":\"00112233445566778899aabbccddeeff\",\"nvrtc\":13000,\"arch\":\"sm_90a\","
    "\"options\":[\"-default-device\",\"-std=c++17\"],"
    "\"name_expr\":\"mla::dsv4::plan_kernel<64, 256>\",\"kernel\":\"dsv4_attention_plan\","
    "\"spec\":{\"H\":64,\"page_size\":256,\"draft_tokens\":2,\"big\":\"4294967296\",\"neg\":-1}}";

Test(cache_key, canonical_text_is_pinned) {
    key_fixture f;
    fixture_init(&f);
    char *key = fixture_key(&f);
    cr_assert_str_eq(key, base_key_text,
                     "canonical key text of the base fixture:\n got %s\nwant %s", key,
                     base_key_text);
    free(key);
}

Test(cache_key, hash_is_pinned_32_lowercase_hex) {
    char hash[33];
    memset(hash, 'Z', sizeof hash);
    mla__key_hash(base_key_text, hash);
    cr_assert_eq(strlen(hash), 32, "key hash length: expected 32, got %zu", strlen(hash));
    cr_assert_eq(strspn(hash, "0123456789abcdef"), 32, "key hash %s: expected lowercase hex", hash);
    /* XXH3-128 of base_key_text, as xxhsum -H2 prints it (high64 then low64): pins the algorithm,
     * whose change would silently orphan every cache on disk. */
    cr_assert_str_eq(hash, "e2efac0a610307847b7988708c34035d",
                     "key hash of the base key text: got %s", hash);
}

Test(cache_key, same_inputs_same_key_and_hash) {
    key_fixture a, b;
    char ha[33], hb[33];
    fixture_init(&a);
    fixture_init(&b);
    char *ka = fixture_key(&a), *kb = fixture_key(&b);
    cr_assert_str_eq(ka, kb, "key of identical inputs: %s vs %s", ka, kb);
    mla__key_hash(ka, ha);
    mla__key_hash(kb, hb);
    cr_assert_str_eq(ha, hb, "hash of identical keys: %s vs %s", ha, hb);
    free(ka);
    free(kb);
}

enum key_change {
    CH_LIBRARY,
    CH_SOURCE,
    CH_SOURCE_HASH,
    CH_NVRTC,
    CH_ARCH,
    CH_OPTION_VALUE,
    CH_OPTION_ADDED,
    CH_OPTION_REMOVED,
    CH_OPTION_ORDER,
    CH_NAME_EXPR,
    CH_KERNEL,
    CH_PARAM_VALUE,
    CH_PARAM_NAME,
    CH_PARAM_ORDER,
    CH_PARAM_ADDED,
};

typedef struct key_change_case {
    char name[40];
    int change;
    int param; /* which param, for CH_PARAM_VALUE */
} key_change_case;

static void apply_change(key_fixture *f, const key_change_case *c) {
    mla__param tmp;
    switch (c->change) {
    case CH_LIBRARY: strcpy(f->library, "0.1.1"); break;
    case CH_SOURCE: strcpy(f->source, "dsv4/attention.cu"); break;
    case CH_SOURCE_HASH: f->source_hash[31] = 'e'; break;
    case CH_NVRTC: f->nvrtc = 13010; break;
    case CH_ARCH: strcpy(f->arch, "sm_100a"); break;
    case CH_OPTION_VALUE: strcpy(f->options[1], "-std=c++20"); break;
    case CH_OPTION_ADDED: strcpy(f->options[f->n_options++], "-lineinfo"); break;
    case CH_OPTION_REMOVED: f->n_options = 1; break;
    case CH_OPTION_ORDER:
        strcpy(f->options[0], "-std=c++17");
        strcpy(f->options[1], "-default-device");
        break;
    case CH_NAME_EXPR: strcpy(f->name_expr, "mla::dsv4::plan_kernel<64, 128>"); break;
    case CH_KERNEL: strcpy(f->spec.kernel, "dsv4_attention"); break;
    case CH_PARAM_VALUE: f->spec.params[c->param].value += 1; break;
    case CH_PARAM_NAME: strcpy(f->spec.params[0].name, "heads"); break;
    case CH_PARAM_ORDER:
        tmp = f->spec.params[0];
        f->spec.params[0] = f->spec.params[1];
        f->spec.params[1] = tmp;
        break;
    case CH_PARAM_ADDED: add_param(&f->spec, "causal", 0); break;
    default: cr_assert_fail("test setup: unknown change %d", c->change);
    }
}

ParameterizedTestParameters(cache_key, each_field_changes_key) {
    static key_change_case cases[] = {
        {"library", CH_LIBRARY, 0},
        {"source", CH_SOURCE, 0},
        {"source_hash", CH_SOURCE_HASH, 0},
        {"nvrtc", CH_NVRTC, 0},
        {"arch", CH_ARCH, 0},
        {"option value", CH_OPTION_VALUE, 0},
        {"option added", CH_OPTION_ADDED, 0},
        {"option removed", CH_OPTION_REMOVED, 0},
        {"option order", CH_OPTION_ORDER, 0},
        {"name_expr", CH_NAME_EXPR, 0},
        {"kernel", CH_KERNEL, 0},
        {"param H", CH_PARAM_VALUE, 0},
        {"param page_size", CH_PARAM_VALUE, 1},
        {"param draft_tokens", CH_PARAM_VALUE, 2},
        {"param big", CH_PARAM_VALUE, 3},
        {"param neg", CH_PARAM_VALUE, 4},
        {"param name", CH_PARAM_NAME, 0},
        {"param order", CH_PARAM_ORDER, 0},
        {"param added", CH_PARAM_ADDED, 0},
    };
    return cr_make_param_array(key_change_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(key_change_case *c, cache_key, each_field_changes_key) {
    key_fixture base, changed;
    char hb[33], hc[33];
    fixture_init(&base);
    fixture_init(&changed);
    apply_change(&changed, c);
    char *kb = fixture_key(&base), *kc = fixture_key(&changed);
    cr_assert_str_neq(kb, kc, "key after changing %s: expected a different key, got the same %s",
                      c->name, kc);
    mla__key_hash(kb, hb);
    mla__key_hash(kc, hc);
    cr_assert_str_neq(hb, hc, "hash after changing %s: expected a different hash, got %s", c->name,
                      hc);
    free(kb);
    free(kc);
}

Test(cache_key, absolute_paths_left_out_of_options) {
    key_fixture f, plain;
    fixture_init(&f);
    fixture_init(&plain);
    strcpy(f.options[1], "--include-path=/opt/kernels");
    strcpy(f.options[2], "/abs/extra.h");
    strcpy(f.options[3], "-Icommon");
    f.n_options = 4;
    strcpy(plain.options[1], "-Icommon");
    plain.n_options = 2;
    char *key = fixture_key(&f), *want = fixture_key(&plain);
    cr_assert_null(strstr(key, "\"/"), "key with absolute options: has a \"/... string: %s", key);
    cr_assert_null(strstr(key, "-I/"), "key with -I/usr/local/cuda/include: has it: %s", key);
    cr_assert_null(strstr(key, "=/"), "key with --include-path=/opt/kernels: has it: %s", key);
    cr_assert_str_eq(key, want, "key with absolute options: expected the key without them");
    cr_assert_not_null(strstr(key, "\"-Icommon\""), "key: relative -Icommon must stay: %s", key);
    free(key);
    free(want);
}

Test(cache_key, spec_values_exact_beyond_int32_and_2_pow_53) {
    key_fixture a, b;
    fixture_init(&a);
    fixture_init(&b);
    a.spec.params[0].value = 9007199254740993LL; /* 2^53 + 1: not a double */
    b.spec.params[0].value = 9007199254740992LL;
    a.spec.params[1].value = INT_MAX;
    a.spec.params[2].value = (long long)INT_MIN - 1;
    a.spec.params[4].value = LLONG_MIN;
    char *ka = fixture_key(&a), *kb = fixture_key(&b);
    cr_assert_not_null(strstr(ka, "\"H\":\"9007199254740993\""), "2^53+1 spelled exactly: %s", ka);
    cr_assert_not_null(strstr(kb, "\"H\":\"9007199254740992\""), "2^53 spelled exactly: %s", kb);
    cr_assert_not_null(strstr(ka, "\"page_size\":2147483647,"), "INT_MAX as an integer: %s", ka);
    cr_assert_not_null(strstr(ka, "\"draft_tokens\":\"-2147483649\""), "INT_MIN-1 as text: %s", ka);
    cr_assert_not_null(strstr(ka, "\"neg\":\"-9223372036854775808\""), "LLONG_MIN as text: %s", ka);
    cr_assert_str_neq(ka, kb, "keys of 2^53+1 and 2^53: expected different");
    free(ka);
    free(kb);
}

Test(cache_key, missing_input_is_an_error) {
    key_fixture f;
    fixture_init(&f);
    mla__key_inputs in = {f.library, f.source, NULL,        f.nvrtc, f.arch,
                          NULL,      0,        f.name_expr, &f.spec};
    cr_assert_null(mla__key_json(&in), "key with source_hash NULL: expected NULL");
    cr_assert_not_null(strstr(mla_last_error(), "source_hash"),
                       "error of key with source_hash NULL names it: %s", mla_last_error());
    cr_assert_null(mla__key_json(NULL), "key of NULL inputs: expected NULL");
}
