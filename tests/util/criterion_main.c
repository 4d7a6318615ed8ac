/* The main of every test binary: Criterion's runner, returning 77 (CTest's SKIP_RETURN_CODE) when
 * every test of the binary was skipped, e.g. GPU tests on a machine without a GPU. */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <stdio.h>

static int all_skipped;

ReportHook(POST_ALL)(struct criterion_global_stats *stats) {
    all_skipped = stats->nb_tests > 0 && stats->tests_skipped == stats->nb_tests;
}

int main(int argc, char *argv[]) {
    struct criterion_test_set *tests = criterion_initialize();
    int result = 0;
    if (criterion_handle_args(argc, argv, true)) result = !criterion_run_all_tests(tests);
    criterion_finalize(tests);
    if (result == 0 && all_skipped) {
        fprintf(stderr, "every test of this binary was skipped\n");
        return 77;
    }
    return result;
}
