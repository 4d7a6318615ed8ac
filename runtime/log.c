/* Logging: to the runtime's callback, or to stderr when $MLAJIT_LOG asks for it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"

static const char *level_name(mla_log_level level) {
    static const char *const names[] = {"error", "warn", "info", "debug"};
    return level <= MLA_LOG_DEBUG ? names[level] : "?";
}

void mla__log(const mla_runtime *rt, mla_log_level level, const char *fmt, ...) {
    if (!rt || level > rt->options.log_level) return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (rt->options.log)
        rt->options.log(rt->options.log_user, level, msg);
    else if (rt->log_to_stderr)
        fprintf(stderr, "mlajit %s: %s\n", level_name(level), msg);
}
