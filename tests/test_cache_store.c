/* The entry file format (cache/entry.c) and the cache directory (cache/store.c): round trips,
 * every kind of corruption, atomic overwrite, the cross-process lock, unwritable directories,
 * listing and pruning. Each test works in its own mkdtemp directory under /tmp. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "runtime/internal.h"

/* ---- helpers ------------------------------------------------------------------------------- */

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    chmod(path, 0755); /* undo the read-only tests */
    return remove(path) != 0 && errno != ENOENT;
}

static void rm_rf(const char *dir) {
    chmod(dir, 0755);
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* The test's temp dir (each test runs in its own worker), removed by the suite's fini even when
 * an assertion ends the test early. */
static char test_dir[64];

static void make_tmpdir(char dir[64]) {
    strcpy(dir, "/tmp/mlajit-cachetest-XXXXXX");
    cr_assert_not_null(mkdtemp(dir), "test setup: mkdtemp: %s", strerror(errno));
    strcpy(test_dir, dir);
}

static void remove_test_dir(void) {
    if (test_dir[0] != '\0') rm_rf(test_dir);
}

TestSuite(cache_store, .fini = remove_test_dir);

/* A spec "plan" with one variable parameter; its key and hash. */
static char *make_key(int variant, char hash[33]) {
    static const char *const opts[] = {"-default-device", "-std=c++17"};
    mla__spec spec;
    memset(&spec, 0, sizeof spec);
    strcpy(spec.kernel, "dsv4_attention_plan");
    strcpy(spec.params[0].name, "H");
    spec.params[0].value = variant;
    spec.n_params = 1;
    mla__key_inputs in = {.library_version = "0.1.0",
                          .source = "dsv4/plan.cu",
                          .source_hash = "00112233445566778899aabbccddeeff",
                          .nvrtc_version = 13000,
                          .arch = "sm_90a",
                          .options = opts,
                          .n_options = 2,
                          .name_expr = "mla::dsv4::plan_kernel<64>",
                          .spec = &spec};
    char *key = mla__key_json(&in);
    cr_assert_not_null(key, "test setup: mla__key_json of variant %d: %s", variant,
                       mla_last_error());
    mla__key_hash(key, hash);
    return key;
}

/* An entry of key variant `variant` with a cubin of `bytes` bytes filled from `seed`. */
static void make_entry(mla__entry *e, int variant, size_t bytes, unsigned seed, char hash[33]) {
    memset(e, 0, sizeof *e);
    e->key_json = make_key(variant, hash);
    strcpy(e->launch.lowered_name, "_ZN3mla4dsv411plan_kernelILi64EEEvv");
    e->launch.threads = 128;
    e->launch.dynamic_smem = 4096;
    e->launch.cluster = 2;
    e->cubin = malloc(bytes);
    e->cubin_size = bytes;
    cr_assert_not_null(e->cubin, "test setup: malloc of a %zu byte cubin", bytes);
    for (size_t i = 0; i < bytes; i++)
        ((unsigned char *)e->cubin)[i] = (unsigned char)(seed + i * 7);
}

static void assert_entries_equal(const mla__entry *got, const mla__entry *want, const char *what) {
    cr_assert_str_eq(got->key_json, want->key_json, "%s: key_json", what);
    cr_assert_str_eq(got->launch.lowered_name, want->launch.lowered_name, "%s: lowered_name", what);
    cr_assert_eq(got->launch.threads, want->launch.threads, "%s: threads", what);
    cr_assert_eq(got->launch.dynamic_smem, want->launch.dynamic_smem, "%s: dynamic_smem", what);
    cr_assert_eq(got->launch.cluster, want->launch.cluster, "%s: cluster", what);
    cr_assert_eq(got->cubin_size, want->cubin_size, "%s: cubin_size %zu vs %zu", what,
                 got->cubin_size, want->cubin_size);
    cr_assert_eq(memcmp(got->cubin, want->cubin, want->cubin_size), 0, "%s: cubin bytes", what);
}

static void read_file(const char *path, unsigned char **buf, size_t *size) {
    struct stat st;
    int fd = open(path, O_RDONLY);
    cr_assert_geq(fd, 0, "test setup: open %s: %s", path, strerror(errno));
    cr_assert_eq(fstat(fd, &st), 0, "test setup: fstat %s", path);
    *size = (size_t)st.st_size;
    *buf = malloc(*size + 1);
    cr_assert_eq(read(fd, *buf, *size), (ssize_t)*size, "test setup: read %s", path);
    close(fd);
}

static void write_file(const char *path, const void *buf, size_t size) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert_geq(fd, 0, "test setup: create %s: %s", path, strerror(errno));
    cr_assert_eq(write(fd, buf, size), (ssize_t)size, "test setup: write %s", path);
    close(fd);
}

static void set_age(const char *path, long seconds) {
    struct timespec t[2];
    t[0].tv_sec = t[1].tv_sec = time(NULL) - seconds;
    t[0].tv_nsec = t[1].tv_nsec = 0;
    cr_assert_eq(utimensat(AT_FDCWD, path, t, 0), 0, "test setup: utimensat %s", path);
}

/* Number of names in dir (other than . and ..) that contain `part` ("" : all); -1 if unlistable. */
static int count_names(const char *dir, const char *part) {
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;
    if (d == NULL) return -1; /* no cr_assert: also used in forked children */
    while ((de = readdir(d)) != NULL)
        n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && strstr(de->d_name, part);
    closedir(d);
    return n;
}

static int exists(const char *dir, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

/* ---- encode / decode ----------------------------------------------------------------------- */

Test(cache_store, encode_decode_round_trip_and_format) {
    mla__entry e, d;
    char hash[33], meta[1024];
    void *buf = NULL;
    size_t size = 0;
    make_entry(&e, 64, 1000, 3, hash);
    cr_assert_eq(mla__entry_encode(&e, &buf, &size), MLA_OK, "encode: %s", mla_last_error());
    const unsigned char *p = buf;
    snprintf(meta, sizeof meta,
             "{\"key\":%s,\"launch\":{\"lowered_name\":\"%s\",\"threads\":128,"
             "\"dynamic_smem\":4096,\"cluster\":2}}",
             e.key_json, e.launch.lowered_name);
    size_t meta_len = strlen(meta);
    cr_assert_eq(size, 64 + meta_len + 1000, "encoded size: expected header + meta + cubin");
    cr_assert_eq(memcmp(p, "MLAJITK1", 8), 0, "encoded magic");
    cr_assert(p[8] == 1 && p[9] == 0 && p[12] == 64 && p[13] == 0,
              "encoded schema 1, header 64 (LE)");
    cr_assert(p[16] == (meta_len & 255) && p[17] == (meta_len >> 8) && p[24] == (1000 & 255) &&
                  p[25] == (1000 >> 8),
              "encoded meta_len and cubin_len (LE)");
    uint64_t sum = XXH3_64bits(p + 64, meta_len + 1000), stored = 0;
    for (int i = 0; i < 8; i++) stored |= (uint64_t)p[32 + i] << (8 * i);
    cr_assert_eq(stored, sum, "encoded checksum: XXH3_64bits over meta and cubin");
    cr_assert_eq(memcmp(p + 64, meta, meta_len), 0, "encoded meta text: want %s", meta);
    cr_assert_eq(memcmp(p + 64 + meta_len, e.cubin, 1000), 0, "encoded cubin after the meta");
    cr_assert_eq(mla__entry_decode(buf, size, &d), MLA_OK, "decode: %s", mla_last_error());
    assert_entries_equal(&d, &e, "decode(encode(entry))");
    mla__entry_free(&d);
    mla__entry_free(&e);
    cr_assert_null(e.key_json, "mla__entry_free clears key_json");
    mla__entry_free(NULL);
    free(buf);
}

typedef struct encode_bad_case {
    char name[40];
    int what;
} encode_bad_case;

ParameterizedTestParameters(cache_store, encode_rejects_bad_entries) {
    static encode_bad_case cases[] = {
        {"key not JSON", 0},       {"key an array", 1}, {"empty cubin", 2},   {"threads 0", 3},
        {"empty lowered name", 4}, {"cluster 0", 5},    {"negative smem", 6}, {"NULL key", 7},
    };
    return cr_make_param_array(encode_bad_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(encode_bad_case *c, cache_store, encode_rejects_bad_entries) {
    mla__entry e;
    char hash[33], *key;
    void *buf = NULL;
    size_t size = 0;
    make_entry(&e, 64, 16, 1, hash);
    key = e.key_json;
    if (c->what == 0) e.key_json = "{\"schema\":";
    if (c->what == 1) e.key_json = "[1,2]";
    if (c->what == 2) e.cubin_size = 0;
    if (c->what == 3) e.launch.threads = 0;
    if (c->what == 4) e.launch.lowered_name[0] = '\0';
    if (c->what == 5) e.launch.cluster = 0;
    if (c->what == 6) e.launch.dynamic_smem = -1;
    if (c->what == 7) e.key_json = NULL;
    cr_assert_eq(mla__entry_encode(&e, &buf, &size), MLA_ERR_INVALID_ARGUMENT,
                 "encode with %s: expected MLA_ERR_INVALID_ARGUMENT", c->name);
    cr_assert_neq(mla_last_error()[0], '\0', "encode with %s: expected a message", c->name);
    e.key_json = key;
    mla__entry_free(&e);
}

/* Builds a file image around any meta text, with a correct checksum, to reach the JSON checks. */
static unsigned char *forge(const char *meta, size_t *size) {
    size_t m = strlen(meta), cubin = 8;
    unsigned char *p = calloc(1, 64 + m + cubin);
    memcpy(p, "MLAJITK1", 8);
    p[8] = 1;
    p[12] = 64;
    for (int i = 0; i < 8; i++) p[16 + i] = (unsigned char)(m >> (8 * i));
    p[24] = (unsigned char)cubin;
    memcpy(p + 64, meta, m);
    memcpy(p + 64 + m, "CUBIN!!!", cubin);
    uint64_t sum = XXH3_64bits(p + 64, m + cubin);
    for (int i = 0; i < 8; i++) p[32 + i] = (unsigned char)(sum >> (8 * i));
    *size = 64 + m + cubin;
    return p;
}

typedef struct forged_case {
    char name[40];
    char launch[160]; /* the "launch" member; "" : use `meta` as the whole meta */
    char meta[96];
    int long_name; /* lowered_name of 300 chars */
    int ok;        /* the control case: expected to decode */
} forged_case;

/* A "launch" member; T, S and C are pasted as JSON text. */
#define LAUNCH(N, T, S, C)                                                                         \
    "{\"lowered_name\":\"" N "\",\"threads\":" #T ",\"dynamic_smem\":" #S ",\"cluster\":" #C "}"
#define LAUNCH_OK LAUNCH("k", 128, 0, 1)

ParameterizedTestParameters(cache_store, decode_checks_meta) {
    static forged_case cases[] = {
        {"control: valid", LAUNCH_OK, "", 0, 1},
        {"meta not JSON", "", "{\"key\":{", 0, 0},
        {"meta with trailing bytes", "", "{\"key\":{},\"launch\":" LAUNCH_OK "} ", 0, 0},
        {"meta an array", "", "[1]", 0, 0},
        {"key missing", "", "{\"launch\":" LAUNCH_OK "}", 0, 0},
        {"key a string", "", "{\"key\":\"x\",\"launch\":" LAUNCH_OK "}", 0, 0},
        {"launch missing", "", "{\"key\":{}}", 0, 0},
        {"lowered_name missing", "{\"threads\":128,\"dynamic_smem\":0,\"cluster\":1}", "", 0, 0},
        {"lowered_name empty", LAUNCH("", 1, 0, 1), "", 0, 0},
        {"lowered_name too long", "", "", 1, 0},
        {"threads missing", "{\"lowered_name\":\"k\",\"dynamic_smem\":0,\"cluster\":1}", "", 0, 0},
        {"threads 0", LAUNCH("k", 0, 0, 1), "", 0, 0},
        {"threads 2048", LAUNCH("k", 2048, 0, 1), "", 0, 0},
        {"threads 1.5", LAUNCH("k", 1.5, 0, 1), "", 0, 0},
        {"threads a string", LAUNCH("k", "128", 0, 1), "", 0, 0},
        {"dynamic_smem -1", LAUNCH("k", 1, -1, 1), "", 0, 0},
        {"dynamic_smem 2^31", LAUNCH("k", 1, 2147483648, 1), "", 0, 0},
        {"cluster 0", LAUNCH("k", 1, 0, 0), "", 0, 0},
        {"cluster 17", LAUNCH("k", 1, 0, 17), "", 0, 0},
    };
    return cr_make_param_array(forged_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(forged_case *c, cache_store, decode_checks_meta) {
    char meta[1024], name[301];
    mla__entry e;
    size_t size;
    memset(name, 'n', 300);
    name[300] = '\0';
    if (c->long_name)
        snprintf(meta, sizeof meta,
                 "{\"key\":{},\"launch\":{\"lowered_name\":\"%s\",\"threads\":1,"
                 "\"dynamic_smem\":0,\"cluster\":1}}",
                 name);
    else if (c->launch[0])
        snprintf(meta, sizeof meta, "{\"key\":{\"schema\":1},\"launch\":%s}", c->launch);
    else
        snprintf(meta, sizeof meta, "%s", c->meta);
    unsigned char *img = forge(meta, &size);
    mla_status st = mla__entry_decode(img, size, &e);
    if (c->ok) {
        cr_assert_eq(st, MLA_OK, "decode of forged %s: %s", c->name, mla_last_error());
        cr_assert_str_eq(e.key_json, "{\"schema\":1}", "decode of forged %s: key", c->name);
        cr_assert(e.cubin_size == 8 && memcmp(e.cubin, "CUBIN!!!", 8) == 0, "forged %s: cubin",
                  c->name);
    } else {
        cr_assert_eq(st, MLA_ERR_CACHE, "decode of forged %s: expected MLA_ERR_CACHE, got %d",
                     c->name, st);
        cr_assert(e.key_json == NULL && e.cubin == NULL, "decode of forged %s: entry left empty",
                  c->name);
        cr_assert_not_null(strstr(mla_last_error(), "cache entry"), "forged %s: reason: %s",
                           c->name, mla_last_error());
    }
    mla__entry_free(&e);
    free(img);
}

/* ---- write / read -------------------------------------------------------------------------- */

Test(cache_store, write_read_round_trip) {
    char tmp[64], dir[128], path[256], hash[33];
    mla__entry e, got;
    int found = -1;
    struct stat st;
    make_tmpdir(tmp);
    snprintf(dir, sizeof dir, "%s/a/b/cache", tmp); /* parents created on the way */
    make_entry(&e, 64, 5000, 9, hash);
    cr_assert_eq(mla__cache_write(dir, hash, &e), MLA_OK, "write: %s", mla_last_error());
    mla__entry_path(dir, hash, path, sizeof path);
    cr_assert_eq(stat(path, &st), 0, "write: %s exists", path);
    cr_assert_eq(st.st_mode & 0777, 0644, "write: %s mode 0644, got %o", path, st.st_mode & 0777);
    cr_assert_eq(mla__cache_read(dir, hash, e.key_json, &got, &found), MLA_OK, "read: %s",
                 mla_last_error());
    cr_assert_eq(found, 1, "read after write: found");
    assert_entries_equal(&got, &e, "read(write(entry))");
    cr_assert_eq(count_names(dir, ""), 1, "after write: only the entry, no temp files");
    mla__entry_free(&got);
    mla__entry_free(&e);
    rm_rf(tmp);
}

Test(cache_store, absent_entry_is_not_found) {
    char tmp[64], dir[128], hash[33];
    mla__entry e;
    int found = -1;
    make_tmpdir(tmp);
    char *key = make_key(64, hash);
    cr_assert_eq(mla__cache_read(tmp, hash, key, &e, &found), MLA_OK, "read absent: %s",
                 mla_last_error());
    cr_assert_eq(found, 0, "read of an absent entry: found = 0");
    cr_assert_null(e.key_json, "read of an absent entry: entry left empty");
    snprintf(dir, sizeof dir, "%s/never/made", tmp);
    cr_assert_eq(mla__cache_read(dir, hash, key, &e, &found), MLA_OK, "read in an absent dir");
    cr_assert_eq(found, 0, "read in an absent dir: found = 0");
    cr_assert_eq(mla__cache_read(tmp, "not-a-hash", key, &e, &found), MLA_ERR_INVALID_ARGUMENT,
                 "read with a malformed hash: invalid argument");
    free(key);
    rm_rf(tmp);
}

/* clang-format off */
enum { C_CUBIN, C_META, C_MAGIC, C_SCHEMA, C_HEADER_SIZE, C_PADDING, C_CHECKSUM, C_LENGTH,
       C_TRUNCATED, C_SHORT, C_EMPTY, C_TRAILING, C_WRONG_KEY };
/* clang-format on */

typedef struct corrupt_case {
    char name[40];
    int kind;
} corrupt_case;

ParameterizedTestParameters(cache_store, corruption_is_detected) {
    static corrupt_case cases[] = {
        {"byte flipped in the cubin", C_CUBIN},
        {"byte flipped in the meta", C_META},
        {"byte flipped in the magic", C_MAGIC},
        {"schema changed", C_SCHEMA},
        {"header size changed", C_HEADER_SIZE},
        {"header padding set", C_PADDING},
        {"checksum changed", C_CHECKSUM},
        {"cubin_len changed", C_LENGTH},
        {"truncated by one byte", C_TRUNCATED},
        {"truncated into the header", C_SHORT},
        {"empty file", C_EMPTY},
        {"trailing garbage", C_TRAILING},
        {"a different key", C_WRONG_KEY},
    };
    return cr_make_param_array(corrupt_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(corrupt_case *c, cache_store, corruption_is_detected) {
    char tmp[64], path[256], hash[33], other[33];
    unsigned char *img;
    size_t size;
    mla__entry e, got;
    int found = -1;
    make_tmpdir(tmp);
    make_entry(&e, 64, 300, 5, hash);
    cr_assert_eq(mla__cache_write(tmp, hash, &e), MLA_OK, "%s: write: %s", c->name,
                 mla_last_error());
    mla__entry_path(tmp, hash, path, sizeof path);
    read_file(path, &img, &size);
    if (c->kind == C_CUBIN) img[size - 1] ^= 1;
    if (c->kind == C_META) img[64 + 10] ^= 0x20;
    if (c->kind == C_MAGIC) img[0] ^= 1;
    if (c->kind == C_SCHEMA) img[8] = 2;
    if (c->kind == C_HEADER_SIZE) img[12] = 72;
    if (c->kind == C_PADDING) img[50] = 1;
    if (c->kind == C_CHECKSUM) img[39] ^= 0x80;
    if (c->kind == C_LENGTH) img[24] ^= 1;
    if (c->kind == C_TRUNCATED) size -= 1;
    if (c->kind == C_SHORT) size = 40;
    if (c->kind == C_EMPTY) size = 0;
    if (c->kind == C_TRAILING) img[size++] = 0;
    write_file(path, img, size);
    char *key = c->kind == C_WRONG_KEY ? make_key(65, other) : strdup(e.key_json);
    mla_status st = mla__cache_read(tmp, hash, key, &got, &found);
    cr_assert_eq(st, MLA_ERR_CACHE, "read with %s: expected MLA_ERR_CACHE, got %d (%s)", c->name,
                 st, mla_last_error());
    cr_assert_eq(found, 0, "read with %s: found = 0", c->name);
    cr_assert(got.key_json == NULL && got.cubin == NULL, "read with %s: entry left empty", c->name);
    cr_assert_not_null(strstr(mla_last_error(), path), "read with %s: reason names the file: %s",
                       c->name, mla_last_error());
    free(key);
    free(img);
    mla__entry_free(&e);
    rm_rf(tmp);
}

Test(cache_store, overwrite_replaces_atomically) {
    char tmp[64], path[256], hash[33];
    mla__entry a, b, got;
    unsigned char old[64];
    int found = 0;
    struct stat st_a, st_b;
    make_tmpdir(tmp);
    make_entry(&a, 64, 4000, 1, hash);
    make_entry(&b, 64, 6000, 2, hash);
    mla__entry_path(tmp, hash, path, sizeof path);
    cr_assert_eq(mla__cache_write(tmp, hash, &a), MLA_OK, "write A: %s", mla_last_error());
    int reader = open(path, O_RDONLY); /* a reader that opened A before the overwrite */
    cr_assert_geq(reader, 0, "test setup: open %s", path);
    cr_assert_eq(fstat(reader, &st_a), 0, "test setup: fstat A");
    cr_assert_eq(mla__cache_write(tmp, hash, &b), MLA_OK, "write B over A: %s", mla_last_error());
    cr_assert_eq(stat(path, &st_b), 0, "overwrite: %s exists", path);
    cr_assert_neq(st_a.st_ino, st_b.st_ino, "overwrite: a new file renamed in, not A rewritten");
    cr_assert_eq(pread(reader, old, sizeof old, (off_t)st_a.st_size - sizeof old),
                 (ssize_t)sizeof old, "overwrite: the reader of A still reads A's whole length");
    cr_assert_eq(memcmp(old, (unsigned char *)a.cubin + 4000 - sizeof old, sizeof old), 0,
                 "overwrite: the reader of A still sees A's cubin");
    close(reader);
    cr_assert_eq(mla__cache_read(tmp, hash, b.key_json, &got, &found), MLA_OK,
                 "read after overwrite");
    assert_entries_equal(&got, &b, "read after overwrite");
    cr_assert_eq(count_names(tmp, ""), 1, "after overwrite: only the entry (no temp files left)");
    mla__entry_free(&got);
    mla__entry_free(&a);
    mla__entry_free(&b);
    rm_rf(tmp);
}

/* Writers replace one entry over and over while the parent reads it: every read must see a whole
 * entry, old or new, never a torn or missing one. */
Test(cache_store, concurrent_writers_never_expose_a_partial_entry) {
    char tmp[64], hash[33];
    mla__entry a, b, got;
    pid_t pids[4];
    int found = 0, status;
    make_tmpdir(tmp);
    make_entry(&a, 64, 200000, 1, hash);
    make_entry(&b, 64, 300000, 2, hash);
    cr_assert_eq(mla__cache_write(tmp, hash, &a), MLA_OK, "first write: %s", mla_last_error());
    for (int w = 0; w < 4; w++) {
        pids[w] = fork();
        if (pids[w] != 0) continue;
        for (int i = 0; i < 25; i++)
            if (mla__cache_write(tmp, hash, (i + w) % 2 ? &b : &a) != MLA_OK) _exit(1);
        _exit(0);
    }
    for (int i = 0; i < 200; i++) {
        mla_status st = mla__cache_read(tmp, hash, a.key_json, &got, &found);
        cr_assert(st == MLA_OK && found == 1, "read %d during writes: status %d found %d (%s)", i,
                  st, found, mla_last_error());
        const mla__entry *want = got.cubin_size == a.cubin_size ? &a : &b;
        assert_entries_equal(&got, want, "read during concurrent writes");
        mla__entry_free(&got);
    }
    for (int w = 0; w < 4; w++) {
        cr_assert_eq(waitpid(pids[w], &status, 0), pids[w], "waitpid writer %d", w);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "writer %d status %d", w, status);
    }
    cr_assert_eq(count_names(tmp, ""), 1, "after concurrent writes: one entry, no temp files");
    mla__entry_free(&a);
    mla__entry_free(&b);
    rm_rf(tmp);
}

/* ---- the lock ------------------------------------------------------------------------------ */

/* One byte from fd within ms milliseconds; -1 on timeout or error. */
static int read_byte(int fd, int ms) {
    struct pollfd p = {fd, POLLIN, 0};
    unsigned char c;
    if (poll(&p, 1, ms) != 1 || read(fd, &c, 1) != 1) return -1;
    return c;
}

static void child_locks(const char *dir, const char *hash, int say, char before, char after,
                        int wait_fd) {
    int fd = -1;
    if (before && write(say, &before, 1) != 1) _exit(2);
    if (mla__cache_lock(dir, hash, &fd) != MLA_OK || fd < 0) _exit(1);
    if (write(say, "L", 1) != 1) _exit(2);
    if (wait_fd >= 0 && read_byte(wait_fd, 20000) < 0) _exit(3);
    if (after && write(say, &after, 1) != 1) _exit(2);
    mla__cache_unlock(fd);
    _exit(0);
}

Test(cache_store, lock_excludes_another_process) {
    char tmp[64], hash[33], lock[48];
    int a_say[2], b_say[2], release[2], status;
    make_tmpdir(tmp);
    free(make_key(64, hash));
    cr_assert(pipe(a_say) == 0 && pipe(b_say) == 0 && pipe(release) == 0, "test setup: pipes");
    pid_t a = fork();
    if (a == 0) child_locks(tmp, hash, a_say[1], 0, 'a', release[0]);
    cr_assert_eq(read_byte(a_say[0], 20000), 'L', "lock: child A takes the free lock");
    pid_t b = fork();
    if (b == 0) child_locks(tmp, hash, b_say[1], 'w', 0, -1);
    cr_assert_eq(read_byte(b_say[0], 20000), 'w', "lock: child B starts and asks for the lock");
    cr_assert_eq(read_byte(b_say[0], 500), -1, "lock: child B must wait while A holds the lock");
    cr_assert_eq(write(release[1], "r", 1), 1, "test setup: release A");
    cr_assert_eq(read_byte(a_say[0], 20000), 'a', "lock: A is about to unlock");
    cr_assert_eq(read_byte(b_say[0], 20000), 'L', "lock: B gets the lock once A unlocked");
    cr_assert_eq(waitpid(a, &status, 0), a, "waitpid A");
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "lock: child A exit status %d",
              status);
    cr_assert_eq(waitpid(b, &status, 0), b, "waitpid B");
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "lock: child B exit status %d",
              status);
    snprintf(lock, sizeof lock, "%s.lock", hash);
    cr_assert(exists(tmp, lock) && count_names(tmp, "") == 1, "lock: only <hash>.lock was made");
    rm_rf(tmp);
}

Test(cache_store, lock_conflicts_between_descriptors_and_unlock_releases) {
    char tmp[64], hash[33], path[256];
    int fd = -1, again = -1;
    struct flock fl;
    make_tmpdir(tmp);
    free(make_key(64, hash));
    cr_assert_eq(mla__cache_lock(tmp, hash, &fd), MLA_OK, "lock: %s", mla_last_error());
    snprintf(path, sizeof path, "%s/%s.lock", tmp, hash);
    int probe = open(path, O_RDWR);
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    cr_assert_eq(fcntl(probe, F_OFD_SETLK, &fl), -1, "lock held: another open file can't lock");
    mla__cache_unlock(fd);
    cr_assert_eq(fcntl(probe, F_OFD_SETLK, &fl), 0, "after unlock: the lock is free");
    close(probe);
    cr_assert_eq(mla__cache_lock(tmp, hash, &again), MLA_OK, "lock again: %s", mla_last_error());
    mla__cache_unlock(again);
    mla__cache_unlock(-1); /* no-op */
    rm_rf(tmp);
}

/* ---- unwritable directories ---------------------------------------------------------------- */

/* A path through a regular file (ENOTDIR): unwritable even for root, so this always runs. */
Test(cache_store, dir_under_a_file_fails_with_io_error) {
    char tmp[64], file[128], dir[160], hash[33];
    mla__entry e;
    int fd = 0;
    make_tmpdir(tmp);
    snprintf(file, sizeof file, "%s/file", tmp);
    write_file(file, "x", 1);
    snprintf(dir, sizeof dir, "%s/cache", file);
    make_entry(&e, 64, 100, 1, hash);
    cr_assert_eq(mla__cache_write(dir, hash, &e), MLA_ERR_IO,
                 "write under a file: expected MLA_ERR_IO");
    cr_assert_not_null(strstr(mla_last_error(), "Not a directory"), "write under a file: reason %s",
                       mla_last_error());
    cr_assert_eq(mla__cache_dir_writable(dir), 0, "dir_writable under a file: expected 0");
    cr_assert_eq(mla__cache_dir_writable(file), 0, "dir_writable of a file: expected 0");
    cr_assert_eq(mla__cache_lock(dir, hash, &fd), MLA_ERR_IO, "lock under a file: MLA_ERR_IO");
    cr_assert_eq(fd, -1, "lock under a file: fd = -1");
    cr_assert_eq(count_names(tmp, ""), 1, "write under a file: nothing left beside the file");
    mla__entry_free(&e);
    rm_rf(tmp);
}

/* The final name is a non-empty directory: the rename fails after the temp file was written. */
Test(cache_store, failed_publish_removes_its_temp_file) {
    char tmp[64], path[256], hash[33];
    mla__entry e;
    make_tmpdir(tmp);
    make_entry(&e, 64, 100, 1, hash);
    mla__entry_path(tmp, hash, path, sizeof path);
    cr_assert_eq(mkdir(path, 0755), 0, "test setup: mkdir %s", path);
    strcat(path, "/x");
    write_file(path, "x", 1);
    cr_assert_eq(mla__cache_write(tmp, hash, &e), MLA_ERR_IO, "write over a directory: MLA_ERR_IO");
    cr_assert_not_null(strstr(mla_last_error(), "rename"), "write over a directory: reason %s",
                       mla_last_error());
    cr_assert_eq(count_names(tmp, ".tmp."), 0, "write over a directory: the temp file is removed");
    mla__entry_free(&e);
    rm_rf(tmp);
}

typedef struct ro_result {
    int setuid_failed, write_status, writable, writable_before, files_left;
    char message[256];
} ro_result;

/* In a child: (as root, become nobody first, since root ignores modes) write into the 0555 dir. */
static void ro_child(const char *dir, const char *hash, const mla__entry *e, int out) {
    ro_result r;
    memset(&r, 0, sizeof r);
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) r.setuid_failed = 1;
    if (!r.setuid_failed) {
        r.write_status = mla__cache_write(dir, hash, e);
        snprintf(r.message, sizeof r.message, "%s", mla_last_error());
        r.writable = mla__cache_dir_writable(dir);
        r.files_left = count_names(dir, "");
    }
    _exit(write(out, &r, sizeof r) == (ssize_t)sizeof r ? 0 : 1);
}

Test(cache_store, read_only_dir_fails_with_io_error) {
    char tmp[64], dir[128], hash[33];
    mla__entry e;
    ro_result r;
    int out[2], status;
    make_tmpdir(tmp);
    snprintf(dir, sizeof dir, "%s/ro", tmp);
    make_entry(&e, 64, 100, 1, hash);
    cr_assert_eq(mla__cache_dir_writable(dir), 1, "dir_writable of a fresh dir: expected 1");
    cr_assert_eq(count_names(dir, ""), 0, "dir_writable leaves no probe file behind");
    if (geteuid() == 0)
        cr_assert(chmod(tmp, 0755) == 0 && chown(dir, 65534, 65534) == 0,
                  "test setup: hand the dir to nobody");
    cr_assert_eq(chmod(dir, 0555), 0, "test setup: chmod 0555 %s", dir);
    cr_assert_eq(pipe(out), 0, "test setup: pipe");
    pid_t pid = fork();
    if (pid == 0) ro_child(dir, hash, &e, out[1]);
    cr_assert_eq(read(out[0], &r, sizeof r), (ssize_t)sizeof r, "read-only child reported");
    cr_assert_eq(waitpid(pid, &status, 0), pid, "waitpid read-only child");
    if (r.setuid_failed)
        cr_skip_test("read-only dir: running as root and setuid(nobody) failed, so modes can't be "
                     "enforced; dir_under_a_file_fails_with_io_error covers the failure path");
    cr_assert_eq(r.write_status, MLA_ERR_IO,
                 "write in a 0555 dir: expected MLA_ERR_IO, got %d (%s)", r.write_status,
                 r.message);
    cr_assert_not_null(strstr(r.message, "Permission denied"), "write in a 0555 dir: reason %s",
                       r.message);
    cr_assert_eq(r.writable, 0, "dir_writable of a 0555 dir: expected 0");
    cr_assert_eq(r.files_left, 0, "write in a 0555 dir: no file left behind");
    mla__entry_free(&e);
    rm_rf(tmp);
}

/* ---- listing ------------------------------------------------------------------------------- */

typedef struct visit_log {
    int count, stop_after;
    char names[8][64];
    int intact[8];
    char keys[8][512];
    char errors[8][512];
} visit_log;

static int visit_record(const char *path, const char *hash, const mla__entry *entry,
                        const char *error, void *user) {
    visit_log *log = user;
    int i = log->count++;
    if (i >= 8) return 1;
    snprintf(log->names[i], sizeof log->names[i], "%s", hash);
    log->intact[i] = entry != NULL;
    snprintf(log->keys[i], sizeof log->keys[i], "%s", entry ? entry->key_json : "");
    snprintf(log->errors[i], sizeof log->errors[i], "%s", error ? error : "");
    return log->stop_after > 0 && log->count >= log->stop_after;
}

Test(cache_store, foreach_lists_entries_in_order_and_flags_corrupt_ones) {
    char tmp[64], path[256], src[256], h[3][33], junk[40], moved[40];
    mla__entry e[3];
    visit_log log;
    make_tmpdir(tmp);
    for (int i = 0; i < 3; i++) {
        make_entry(&e[i], 100 + i, 64, (unsigned)i, h[i]);
        cr_assert_eq(mla__cache_write(tmp, h[i], &e[i]), MLA_OK, "write entry %d", i);
    }
    memset(junk, 'f', 32);
    junk[32] = '\0';
    snprintf(path, sizeof path, "%s/%s.mlak", tmp, junk);
    write_file(path, "junk", 4);
    memset(moved, '0', 32); /* an intact file under a name its key doesn't hash to */
    moved[32] = '\0';
    mla__entry_path(tmp, h[0], src, sizeof src);
    snprintf(path, sizeof path, "%s/%s.mlak", tmp, moved);
    cr_assert_eq(link(src, path), 0, "test setup: link");
    snprintf(path, sizeof path, "%s/notes.txt", tmp);
    write_file(path, "x", 1);
    snprintf(path, sizeof path, "%s/%s.mlak.tmp.1.abcdef", tmp, h[1]);
    write_file(path, "x", 1);
    memset(&log, 0, sizeof log);
    cr_assert_eq(mla__cache_foreach(tmp, visit_record, &log), MLA_OK, "foreach: %s",
                 mla_last_error());
    cr_assert_eq(log.count, 5, "foreach: 5 .mlak files visited, got %d", log.count);
    for (int i = 1; i < 5; i++)
        cr_assert_lt(strcmp(log.names[i - 1], log.names[i]), 0, "foreach: name order at %d", i);
    for (int i = 0; i < 5; i++) {
        int good = -1;
        for (int k = 0; k < 3; k++) good = strcmp(log.names[i], h[k]) == 0 ? k : good;
        cr_assert_eq(log.intact[i], good >= 0, "foreach: %s intact iff a good entry", log.names[i]);
        if (good >= 0)
            cr_assert_str_eq(log.keys[i], e[good].key_json, "foreach: key of %s", log.names[i]);
        if (good >= 0) cr_assert_str_empty(log.errors[i], "foreach: no error for %s", log.names[i]);
        if (strcmp(log.names[i], junk) == 0)
            cr_assert_not_null(strstr(log.errors[i], "at least 64 bytes"), "foreach junk: %s",
                               log.errors[i]);
        if (strcmp(log.names[i], moved) == 0)
            cr_assert_not_null(strstr(log.errors[i], "hashes to"), "foreach renamed: %s",
                               log.errors[i]);
    }
    memset(&log, 0, sizeof log);
    log.stop_after = 2;
    cr_assert_eq(mla__cache_foreach(tmp, visit_record, &log), MLA_OK, "foreach with stop");
    cr_assert_eq(log.count, 2, "foreach: a nonzero return stops the walk, got %d visits",
                 log.count);
    memset(&log, 0, sizeof log);
    snprintf(path, sizeof path, "%s/absent", tmp);
    cr_assert_eq(mla__cache_foreach(path, visit_record, &log), MLA_OK, "foreach of an absent dir");
    cr_assert_eq(log.count, 0, "foreach of an absent dir: no visits");
    for (int i = 0; i < 3; i++) mla__entry_free(&e[i]);
    rm_rf(tmp);
}

/* ---- pruning ------------------------------------------------------------------------------- */

Test(cache_store, prune_removes_what_it_should_and_only_that) {
    char tmp[64], path[256], name[128], h[4][33];
    mla__entry e[3];
    int removed = -1, held = -1;
    make_tmpdir(tmp);
    for (int i = 0; i < 3; i++) { /* 0: fresh, 1: two days old, 2: corrupt */
        make_entry(&e[i], 200 + i, 64, (unsigned)i, h[i]);
        cr_assert_eq(mla__cache_write(tmp, h[i], &e[i]), MLA_OK, "write entry %d", i);
    }
    free(make_key(203, h[3])); /* a key with a lock file and no entry */
    int fd = -1;
    cr_assert_eq(mla__cache_lock(tmp, h[0], &fd), MLA_OK, "lock entry 0");
    mla__cache_unlock(fd);
    cr_assert_eq(mla__cache_lock(tmp, h[3], &fd), MLA_OK, "lock orphan");
    mla__cache_unlock(fd);
    mla__entry_path(tmp, h[1], path, sizeof path);
    set_age(path, 2 * 86400);
    mla__entry_path(tmp, h[2], path, sizeof path);
    write_file(path, "MLAJITK1 broken", 15);
    snprintf(path, sizeof path, "%s/%s.mlak.tmp.1.aaaaaa", tmp, h[0]);
    write_file(path, "old", 3);
    set_age(path, 2 * 3600);
    snprintf(path, sizeof path, "%s/%s.mlak.tmp.2.bbbbbb", tmp, h[0]);
    write_file(path, "new", 3);
    snprintf(path, sizeof path, "%s/README", tmp);
    write_file(path, "keep", 4);
    set_age(path, 30 * 86400);
    char held_hash[33];
    memset(held_hash, 'c', 32);
    held_hash[32] = '\0';
    cr_assert_eq(mla__cache_lock(tmp, held_hash, &held), MLA_OK, "hold a lock with no entry");

    cr_assert_eq(mla__cache_prune(tmp, 0, -1, &removed), MLA_OK, "prune: %s", mla_last_error());
    cr_assert_eq(removed, 3, "prune without age: corrupt entry, old temp, orphan lock; got %d",
                 removed);
    snprintf(name, sizeof name, "%s.mlak", h[2]);
    cr_assert(!exists(tmp, name), "prune: the corrupt entry is gone");
    snprintf(name, sizeof name, "%s.mlak.tmp.1.aaaaaa", h[0]);
    cr_assert(!exists(tmp, name), "prune: the temp file of 2 hours is gone");
    snprintf(name, sizeof name, "%s.lock", h[3]);
    cr_assert(!exists(tmp, name), "prune: the lock with no entry is gone");
    snprintf(name, sizeof name, "%s.mlak", h[1]);
    cr_assert(exists(tmp, name), "prune without age: the old entry stays");
    snprintf(name, sizeof name, "%s.lock", held_hash);
    cr_assert(exists(tmp, name), "prune: a held lock stays");
    cr_assert(exists(tmp, "README"), "prune: an unrelated file stays");

    cr_assert_eq(mla__cache_prune(tmp, 0, 86400, &removed), MLA_OK, "prune older than a day");
    cr_assert_eq(removed, 1, "prune older than a day: the 2-day entry only, got %d", removed);
    snprintf(name, sizeof name, "%s.mlak", h[1]);
    cr_assert(!exists(tmp, name), "prune older than a day: the 2-day entry is gone");
    snprintf(name, sizeof name, "%s.mlak", h[0]);
    cr_assert(exists(tmp, name), "prune older than a day: the fresh entry stays");

    cr_assert_eq(mla__cache_prune(tmp, 1, -1, &removed), MLA_OK, "prune all");
    cr_assert_eq(removed, 2, "prune all: the fresh entry and then its lock, got %d", removed);
    cr_assert_eq(count_names(tmp, ".mlak"), 1, "prune all: only the fresh temp file has .mlak");
    mla__cache_unlock(held);
    cr_assert_eq(mla__cache_prune(tmp, 0, -1, &removed), MLA_OK, "prune after unlock");
    cr_assert_eq(removed, 1, "prune after unlock: the released lock, got %d", removed);
    cr_assert_eq(count_names(tmp, ""), 2, "left: the fresh temp file and README");
    snprintf(path, sizeof path, "%s/absent", tmp);
    cr_assert_eq(mla__cache_prune(path, 1, -1, &removed), MLA_OK, "prune of an absent dir");
    cr_assert_eq(removed, 0, "prune of an absent dir: nothing removed");
    for (int i = 0; i < 3; i++) mla__entry_free(&e[i]);
    rm_rf(tmp);
}
