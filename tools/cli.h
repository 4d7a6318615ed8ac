/* The mlajit command-line tool: what its files share (never installed).
 *
 * main.c dispatches to one function per subcommand; each takes the subcommand's own argv
 * (argv[0] is the subcommand name) and returns the process exit status: CLI_OK, CLI_FAIL (the
 * work failed) or CLI_USAGE (bad command line or input files). */
#ifndef MLAJIT_TOOLS_CLI_H
#define MLAJIT_TOOLS_CLI_H

#include <stddef.h>

#include "runtime/internal.h"

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* ---- subcommands ---------------------------------------------------------------------------- */

int cli_info(int argc, char **argv);
int cli_precompile(int argc, char **argv);
int cli_cache(int argc, char **argv);
int cli_bench(int argc, char **argv);
/* Hidden: one timed first call in a fresh process, for bench's plan-load case. */
int cli_bench_first_call(int argc, char **argv);

/* The hidden subcommand bench re-executes itself with. */
#define CLI_FIRST_CALL_CMD "__bench-first-call"

/* ---- presets (presets.c) -------------------------------------------------------------------- */

/* A named list of specs, one JSON object {"kernel": ..., "<param>": int, ...} each. */
typedef struct cli_preset {
    const char *name;
    const char *description;
    const char *const *specs; /* NULL-terminated */
} cli_preset;

/* The preset called name, or NULL. */
const cli_preset *cli_preset_find(const char *name);
/* All presets; *count set. */
const cli_preset *cli_presets(int *count);
/* The preset as --spec file text (a JSON array); malloc'd, NULL when out of memory. */
char *cli_preset_json(const cli_preset *preset);

/* ---- helpers (main.c) ----------------------------------------------------------------------- */

/* Prints "mlajit <cmd>: <message>" and a pointer to --help on stderr; returns CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints "mlajit <cmd>: <message>" on stderr; returns CLI_FAIL. */
int cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Reports the getopt error of the option just read (opterr must be 0); returns CLI_USAGE. */
int cli_bad_option(const char *cmd, char **argv, int optchar);
/* Parses a decimal integer in [lo, hi]; 0 on success, -1 otherwise. */
int cli_parse_long(const char *s, long lo, long hi, long *out);
/* 1 if s looks like a compile target ("sm_90a", "sm_100a", "sm_89"). */
int cli_arch_valid(const char *s);
/* Creates a runtime that never touches the driver (compile and cache only). cache_dir NULL: the
 * default; arch NULL: $MLAJIT_ARCH, else "sm_90a". Prints the error and returns it on failure. */
mla_status cli_runtime_no_device(const char *cmd, const char *cache_dir, const char *arch,
                                 mla_runtime **rt);
/* Monotonic clock in seconds. */
double cli_now(void);
/* Removes dir and everything under it (for temporary cache folders); 0 on success. */
int cli_remove_tree(const char *dir);
/* Median of n values (sorts v in place); 0 for n == 0. */
double cli_median(double *v, int n);
/* The command line as one string, for report headers (static storage). */
const char *cli_command_line(void);

#endif /* MLAJIT_TOOLS_CLI_H */
