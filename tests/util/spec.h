/* Building kernel specs in tests. */
#ifndef MLAJIT_TESTS_UTIL_SPEC_H
#define MLAJIT_TESTS_UTIL_SPEC_H

#include "runtime/internal.h"

/* The spec of kernel kind `kernel` with its first n parameters (in the kind's order) set to
 * v[0..n); asserts (Criterion) that the kind exists and has exactly n parameters. */
void mlt_kind_spec(const char *kernel, int n, const int *v, mla__spec *spec);

#endif
