/* Building kernel specs in tests (see spec.h). */
#include <criterion/criterion.h>

#include "util/spec.h"

void mlt_kind_spec(const char *kernel, int n, const int *v, mla__spec *spec) {
    mla__spec_init(spec, kernel);
    const mla__kernel_kind *kind = mla__kernel_kind_find(kernel);
    cr_assert(kind != NULL, "%s: kernel kind not in the table", kernel);
    for (int i = 0; i < n; i++) {
        cr_assert(kind->params[i] != NULL, "%s: the kind has fewer than %d parameters", kernel, n);
        cr_assert(mla__spec_add(spec, kind->params[i], v[i]) == MLA_OK, "%s: spec_add", kernel);
    }
    cr_assert(kind->params[n] == NULL, "%s: the kind has more than %d parameters", kernel, n);
}
