/* Status texts and the per-thread last-error message. */
#include <stdio.h>
#include <string.h>

#include "runtime/internal.h"

#define MLA_ERROR_MAX 16384

static _Thread_local char last_error[MLA_ERROR_MAX];

const char *mla_status_string(mla_status status) {
    switch (status) {
#define MLA_STATUS_CASE_(name, value, text) \
    case MLA_##name: return text;
        MLA_STATUS_MAP(MLA_STATUS_CASE_)
#undef MLA_STATUS_CASE_
    }
    return "unknown status";
}

const char *mla_last_error(void) { return last_error; }

#define MLA_STR_(x) #x
#define MLA_STR(x) MLA_STR_(x)

const char *mla_version_string(void) {
    return MLA_STR(MLAJIT_VERSION_MAJOR) "." MLA_STR(MLAJIT_VERSION_MINOR) "." MLA_STR(
        MLAJIT_VERSION_PATCH);
}

mla_status mla__error(mla_status code, const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    (void)file;
    (void)line;
    return code;
}

void mla__error_append(const char *text) {
    size_t used = strlen(last_error);
    if (used + 1 < sizeof last_error) snprintf(last_error + used, sizeof last_error - used, "%s", text);
}
