/* The cache directory: one "<hash>.mlak" file per entry (format in entry.c), published atomically
 * (unique temp file in the same directory, fsync, rename, fsync of the directory), cold builds of
 * one key serialized across processes by an F_OFD_SETLKW lock on "<hash>.lock", and the listing and
 * pruning the CLI needs.
 *
 * Names in the directory: "<hash>.mlak" entries, "<hash>.lock" lock files, and temporary files
 * containing ".tmp." ("<hash>.mlak.tmp.<pid>.<random>" while an entry is written,
 * "probe.tmp.<pid>.<random>" while the directory is probed). Anything else is left alone.
 *
 * Lock files may be removed by a prune; a locker therefore checks, once it holds the lock, that its
 * descriptor is still the file at the path, and starts over if it is not. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* F_OFD_SETLKW, mkostemp, scandir */
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runtime/internal.h"

#define MLA_CACHE_PATH_SIZE (MLA_PATH_MAX + 320)
#define MLA_CACHE_TMP_MAX_AGE 3600 /* seconds after which a temp file is a leftover */

static mla_status mla__io_error(const char *what, const char *path, int err) {
    char text[256];
    const char *msg = strerror_r(err, text, sizeof text); /* GNU: returns the text */
    return MLA_ERROR(MLA_ERR_IO, "cache: cannot %s %s: %s", what, path, msg);
}

static int mla__has_suffix(const char *name, const char *suffix) {
    size_t n = strlen(name), k = strlen(suffix);
    return n > k && memcmp(name + n - k, suffix, k) == 0;
}

/* Writes "<dir>/<name><suffix>" into out. */
static mla_status mla__join(char *out, size_t size, const char *dir, const char *name,
                            const char *suffix) {
    int n = snprintf(out, size, "%s/%s%s", dir, name, suffix);
    MLA_ARG_CHECK(n > 0 && (size_t)n < size, "cache path: expected at most %zu chars, got %d",
                  size - 1, n);
    return MLA_OK;
}

static mla_status mla__hash_check(const char *hash) {
    MLA_ARG_CHECK(hash != NULL, "cache hash: expected 32 lowercase hex chars, got NULL");
    size_t n = strspn(hash, "0123456789abcdef");
    MLA_ARG_CHECK(n == 32 && hash[32] == '\0',
                  "cache hash: expected 32 lowercase hex chars, got \"%.80s\"", hash);
    return MLA_OK;
}

/* mkdir -p dir, mode 0755. */
static mla_status mla__mkdir_p(const char *dir) {
    char p[MLA_PATH_MAX];
    struct stat st;
    MLA_ARG_CHECK(dir != NULL && dir[0] != '\0', "cache dir: expected a path, got an empty one");
    size_t n = strlen(dir);
    MLA_ARG_CHECK(n < sizeof p, "cache dir: expected at most %d chars, got %zu", MLA_PATH_MAX - 1,
                  n);
    memcpy(p, dir, n + 1);
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0') continue;
        char c = *s;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            return mla__io_error("create directory", p, errno);
        *s = c;
        if (c == '\0') break;
    }
    if (stat(dir, &st) != 0) return mla__io_error("create directory", dir, errno);
    MLA_RETURN_ERROR_IF(!S_ISDIR(st.st_mode), MLA_ERR_IO,
                        "cache: cannot use %s: expected a directory, got another kind of file",
                        dir);
    return MLA_OK;
}

void mla__entry_path(const char *dir, const char *hash, char *out, size_t size) {
    snprintf(out, size, "%s/%s.mlak", dir, hash);
}

/* Reads a whole file into a malloc'd buffer; *missing = 1 (and MLA_OK) if it does not exist. */
static mla_status mla__read_file(const char *path, void **buf, size_t *size, int *missing) {
    struct stat st;
    size_t got = 0;
    *buf = NULL;
    *missing = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) *missing = 1;
    if (fd < 0) return *missing ? MLA_OK : mla__io_error("open", path, errno);
    if (fstat(fd, &st) != 0) goto fail;
    char *p = *buf = malloc(st.st_size > 0 ? (size_t)st.st_size : 1);
    if (p == NULL) goto fail;
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, p + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) goto fail;
        if (n == 0) break; /* shrank meanwhile: the decoder reports the short file */
        got += (size_t)n;
    }
    close(fd);
    *size = got;
    return MLA_OK;
fail:;
    int err = errno;
    close(fd);
    free(*buf);
    *buf = NULL;
    return mla__io_error("read", path, err);
}

/* Re-records the last error (a decoder's reason) with the file's path in front. */
static mla_status mla__error_at(mla_status code, const char *path) {
    char reason[1024];
    snprintf(reason, sizeof reason, "%s", mla_last_error());
    return MLA_ERROR(code, "%s: %s", path, reason);
}

/* Reads and decodes the entry at path: *found = 0 if absent, MLA_ERR_CACHE if corrupt. */
static mla_status mla__cache_load(const char *path, mla__entry *e, int *found) {
    void *buf = NULL;
    size_t size = 0;
    int missing = 0;
    memset(e, 0, sizeof *e);
    *found = 0;
    MLA_FORWARD_IF_ERROR(mla__read_file(path, &buf, &size, &missing));
    if (missing) return MLA_OK;
    mla_status st = mla__entry_decode(buf, size, e);
    free(buf);
    if (st != MLA_OK) return mla__error_at(st, path);
    *found = 1;
    return MLA_OK;
}

mla_status mla__cache_read(const char *dir, const char *hash, const char *key_json, mla__entry *e,
                           int *found) {
    char path[MLA_CACHE_PATH_SIZE];
    MLA_ARG_CHECK(e != NULL && found != NULL, "cache read: e and found must not be NULL");
    memset(e, 0, sizeof *e);
    *found = 0;
    MLA_ARG_CHECK(dir != NULL && key_json != NULL, "cache read: dir and key_json must not be NULL");
    MLA_FORWARD_IF_ERROR(mla__hash_check(hash));
    MLA_FORWARD_IF_ERROR(mla__join(path, sizeof path, dir, hash, ".mlak"));
    MLA_FORWARD_IF_ERROR(mla__cache_load(path, e, found));
    if (*found && strcmp(e->key_json, key_json) != 0) {
        mla_status st =
            MLA_ERROR(MLA_ERR_CACHE, "%s: expected the key %.300s, got the stored key %.300s", path,
                      key_json, e->key_json);
        mla__entry_free(e);
        *found = 0;
        return st;
    }
    return MLA_OK;
}

/* Writes buf to fd completely, makes the file 0644 and flushes it to the disk. */
static mla_status mla__write_sync(int fd, const void *buf, size_t size, const char *path) {
    const char *p = buf;
    while (size > 0) {
        ssize_t n = write(fd, p, size);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return mla__io_error("write", path, n < 0 ? errno : ENOSPC);
        p += n;
        size -= (size_t)n;
    }
    if (fchmod(fd, 0644) != 0) return mla__io_error("chmod", path, errno);
    while (fsync(fd) != 0)
        if (errno != EINTR) return mla__io_error("fsync", path, errno);
    return MLA_OK;
}

/* Best effort: the rename is done; a directory that cannot be synced only loses durability. */
static void mla__fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    while (fsync(fd) != 0 && errno == EINTR) {}
    close(fd);
}

/* Encodes e into a new unique temp file next to its final name; *tmp names it ("" if none). */
static mla_status mla__write_tmp(const char *dir, const char *hash, const mla__entry *e, char *tmp,
                                 size_t size) {
    void *buf = NULL;
    size_t len = 0;
    tmp[0] = '\0';
    MLA_FORWARD_IF_ERROR(mla__entry_encode(e, &buf, &len));
    int n = snprintf(tmp, size, "%s/%s.mlak.tmp.%ld.XXXXXX", dir, hash, (long)getpid());
    int fd = (n > 0 && (size_t)n < size) ? mkostemp(tmp, O_CLOEXEC) : -1;
    mla_status st = MLA_OK;
    if (fd < 0) {
        st = mla__io_error("create a file in", dir,
                           (n > 0 && (size_t)n < size) ? errno : ENAMETOOLONG);
        tmp[0] = '\0';
        goto done;
    }
    st = mla__write_sync(fd, buf, len, tmp);
    if (close(fd) != 0 && st == MLA_OK) st = mla__io_error("close", tmp, errno);
done:
    free(buf);
    return st;
}

mla_status mla__cache_write(const char *dir, const char *hash, const mla__entry *e) {
    char path[MLA_CACHE_PATH_SIZE], tmp[MLA_CACHE_PATH_SIZE];
    MLA_ARG_CHECK(dir != NULL && e != NULL, "cache write: dir and e must not be NULL");
    MLA_FORWARD_IF_ERROR(mla__hash_check(hash));
    MLA_FORWARD_IF_ERROR(mla__join(path, sizeof path, dir, hash, ".mlak"));
    MLA_FORWARD_IF_ERROR(mla__mkdir_p(dir));
    mla_status st = mla__write_tmp(dir, hash, e, tmp, sizeof tmp);
    if (st != MLA_OK) goto done;
    if (rename(tmp, path) != 0) {
        st = mla__io_error("rename a temp file to", path, errno);
        goto done;
    }
    tmp[0] = '\0';
    mla__fsync_dir(dir);
done:
    if (tmp[0] != '\0') unlink(tmp);
    return st;
}

/* fcntl lock of the whole file (cmd F_OFD_SETLK or F_OFD_SETLKW); 0 or -1 with errno. */
static int mla__lock_fd(int fd, int cmd) {
    struct flock fl;
    int r;
    memset(&fl, 0, sizeof fl); /* l_pid must be 0 for OFD locks */
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    do r = fcntl(fd, cmd, &fl);
    while (r != 0 && errno == EINTR);
    return r;
}

/* 1 if fd is still the file at path (it may have been pruned and replaced). */
static int mla__fd_is_path(int fd, const char *path) {
    struct stat a, b;
    if (fstat(fd, &a) != 0 || stat(path, &b) != 0) return 0;
    return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

mla_status mla__cache_lock(const char *dir, const char *hash, int *fd) {
    char path[MLA_CACHE_PATH_SIZE];
    MLA_ARG_CHECK(fd != NULL, "cache lock: fd: expected a pointer, got NULL");
    *fd = -1;
    MLA_ARG_CHECK(dir != NULL, "cache lock: dir: expected a path, got NULL");
    MLA_FORWARD_IF_ERROR(mla__hash_check(hash));
    MLA_FORWARD_IF_ERROR(mla__join(path, sizeof path, dir, hash, ".lock"));
    MLA_FORWARD_IF_ERROR(mla__mkdir_p(dir));
    for (;;) {
        int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (f < 0) return mla__io_error("open", path, errno);
        if (mla__lock_fd(f, F_OFD_SETLKW) != 0) {
            int err = errno;
            close(f);
            return mla__io_error("lock", path, err);
        }
        if (mla__fd_is_path(f, path)) {
            *fd = f;
            return MLA_OK;
        }
        close(f); /* pruned while we waited: lock the file now at the path */
    }
}

void mla__cache_unlock(int fd) {
    if (fd >= 0) close(fd);
}

int mla__cache_dir_writable(const char *dir) {
    char probe[MLA_CACHE_PATH_SIZE];
    if (dir == NULL || mla__mkdir_p(dir) != MLA_OK) return 0;
    int n = snprintf(probe, sizeof probe, "%s/probe.tmp.%ld.XXXXXX", dir, (long)getpid());
    if (n <= 0 || (size_t)n >= sizeof probe) return 0;
    int fd = mkostemp(probe, O_CLOEXEC);
    if (fd < 0) return 0;
    close(fd);
    unlink(probe);
    return 1;
}

/* ---- listing and pruning ------------------------------------------------------------------- */

static int mla__name_is_entry(const struct dirent *d) {
    return mla__has_suffix(d->d_name, ".mlak");
}

static int mla__name_is_file(const struct dirent *d) {
    return d->d_name[0] != '.';
}

static int mla__name_cmp(const struct dirent **a, const struct dirent **b) {
    return strcmp((*a)->d_name, (*b)->d_name);
}

/* The names of dir that filter accepts, in strcmp order; an absent dir has none. */
static mla_status mla__list(const char *dir, int (*filter)(const struct dirent *),
                            struct dirent ***names, int *count) {
    *names = NULL;
    *count = 0;
    int n = scandir(dir, names, filter, mla__name_cmp);
    if (n < 0 && errno == ENOENT) return MLA_OK;
    if (n < 0) return mla__io_error("list", dir, errno);
    *count = n;
    return MLA_OK;
}

static void mla__list_free(struct dirent **names, int count) {
    for (int i = 0; i < count; i++) free(names[i]);
    free(names);
}

/* Loads the entry dir/name and checks that its key hashes to the hash its name carries. */
static mla_status mla__cache_check(const char *dir, const char *name, char *path, size_t size,
                                   char hash[64], mla__entry *e, int *found) {
    char key_hash[33];
    memset(e, 0, sizeof *e);
    *found = 0;
    snprintf(hash, 64, "%.*s", (int)(strlen(name) - strlen(".mlak")), name);
    MLA_FORWARD_IF_ERROR(mla__join(path, size, dir, name, ""));
    MLA_FORWARD_IF_ERROR(mla__cache_load(path, e, found));
    if (!*found) return MLA_OK;
    mla__key_hash(e->key_json, key_hash);
    if (strcmp(key_hash, hash) == 0) return MLA_OK;
    mla__entry_free(e);
    *found = 0;
    return MLA_ERROR(MLA_ERR_CACHE,
                     "%s: expected a key that hashes to %s, got one that hashes to %s", path, hash,
                     key_hash);
}

/* Visits one entry file; returns the visitor's answer (nonzero: stop). */
static int mla__visit_one(const char *dir, const char *name, mla__cache_visit visit, void *user) {
    char path[MLA_CACHE_PATH_SIZE], hash[64], reason[1024];
    mla__entry e;
    int found = 0;
    mla_status st = mla__cache_check(dir, name, path, sizeof path, hash, &e, &found);
    if (st == MLA_OK && !found) return 0; /* removed meanwhile */
    if (st != MLA_OK) snprintf(reason, sizeof reason, "%s", mla_last_error());
    int r = visit(path, hash, st == MLA_OK ? &e : NULL, st == MLA_OK ? NULL : reason, user);
    mla__entry_free(&e);
    return r;
}

mla_status mla__cache_foreach(const char *dir, mla__cache_visit visit, void *user) {
    struct dirent **names;
    int count, stop = 0;
    MLA_ARG_CHECK(dir != NULL && visit != NULL, "cache foreach: dir and visit must not be NULL");
    MLA_FORWARD_IF_ERROR(mla__list(dir, mla__name_is_entry, &names, &count));
    for (int i = 0; i < count && !stop; i++)
        stop = mla__visit_one(dir, names[i]->d_name, visit, user);
    mla__list_free(names, count);
    return MLA_OK;
}

typedef struct mla__prune_rule {
    int remove_all;
    long long older_than; /* seconds; < 0: no age limit */
    time_t now;
} mla__prune_rule;

static mla_status mla__remove(const char *path, int *removed) {
    if (unlink(path) == 0) {
        (*removed)++;
        return MLA_OK;
    }
    return errno == ENOENT ? MLA_OK : mla__io_error("remove", path, errno);
}

/* Entries (corrupt, or selected by the rule) and old temp files; lock files are done after. */
static mla_status mla__prune_file(const char *dir, const char *name, const mla__prune_rule *rule,
                                  int *removed) {
    char path[MLA_CACHE_PATH_SIZE], hash[64];
    struct stat st;
    mla__entry e;
    int found = 0, drop = 0;
    memset(&e, 0, sizeof e);
    MLA_FORWARD_IF_ERROR(mla__join(path, sizeof path, dir, name, ""));
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) return MLA_OK;
    long long age = (long long)(rule->now - st.st_mtime);
    if (mla__has_suffix(name, ".mlak")) {
        drop = rule->remove_all || (rule->older_than >= 0 && age > rule->older_than);
        if (!drop &&
            mla__cache_check(dir, name, path, sizeof path, hash, &e, &found) == MLA_ERR_CACHE)
            drop = 1;
        mla__entry_free(&e);
    } else if (strstr(name, ".tmp.") != NULL) {
        drop = age > MLA_CACHE_TMP_MAX_AGE;
    }
    return drop ? mla__remove(path, removed) : MLA_OK;
}

/* A lock file whose entry is gone, unless someone holds it (then a build is under way). */
static mla_status mla__prune_lock(const char *dir, const char *name, int *removed) {
    char path[MLA_CACHE_PATH_SIZE], entry[MLA_CACHE_PATH_SIZE];
    mla_status st = MLA_OK;
    MLA_FORWARD_IF_ERROR(mla__join(path, sizeof path, dir, name, ""));
    int n = snprintf(entry, sizeof entry, "%s/%.*s.mlak", dir, (int)(strlen(name) - 5), name);
    if (n <= 0 || (size_t)n >= sizeof entry || access(entry, F_OK) == 0) return MLA_OK;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return MLA_OK;
    if (mla__lock_fd(fd, F_OFD_SETLK) == 0 && mla__fd_is_path(fd, path) && access(entry, F_OK) != 0)
        st = mla__remove(path, removed);
    close(fd);
    return st;
}

mla_status mla__cache_prune(const char *dir, int remove_all, long long older_than, int *removed) {
    struct dirent **names;
    int count;
    MLA_ARG_CHECK(dir != NULL && removed != NULL, "cache prune: dir and removed must not be NULL");
    *removed = 0;
    mla__prune_rule rule = {remove_all, older_than, time(NULL)};
    MLA_FORWARD_IF_ERROR(mla__list(dir, mla__name_is_file, &names, &count));
    mla_status st = MLA_OK;
    for (int i = 0; i < count && st == MLA_OK; i++)
        if (!mla__has_suffix(names[i]->d_name, ".lock"))
            st = mla__prune_file(dir, names[i]->d_name, &rule, removed);
    for (int i = 0; i < count && st == MLA_OK; i++)
        if (mla__has_suffix(names[i]->d_name, ".lock"))
            st = mla__prune_lock(dir, names[i]->d_name, removed);
    mla__list_free(names, count);
    return st;
}
