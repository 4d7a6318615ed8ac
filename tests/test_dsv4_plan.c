/* DSV4 attention plan (spec/dsv4.md §3.2, A7, §5):
 *   ref_*      the CPU reference on hand-built windows with literal answers, and its row -> slot
 *              mapping against the window on random windows;
 *   compile_*  the plan kernel compiles for sm_90a and sm_100a (NVRTC only, no GPU), and its
 *              kind builder writes the name expression and launch needs.
 * The argument checks are in test_dsv4_plan_args.c, the GPU tests in test_dsv4_plan_gpu.c. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "ref/dsv4_plan_ref.h"
#include "runtime/internal.h"
#include "util/gpu.h"

/* ---- (a) the reference on windows with known plans ------------------------------------------ */

/* Asserts the reference plan of one window. */
static void expect_row(const char *what, const int32_t *idx, int L, int B, int step, int32_t s0,
                       int32_t l0, int32_t s1, int32_t rows) {
    int32_t got[4];
    mlr_dsv4_plan_row(idx, L, B, step, got);
    cr_expect(got[0] == s0 && got[1] == l0 && got[2] == s1 && got[3] == rows,
              "%s: expected plan (%d, %d, %d, %d), got (%d, %d, %d, %d)", what, s0, l0, s1, rows,
              got[0], got[1], got[2], got[3]);
}

/* Fills w[0..n) with first, first + step, ... */
static void fill_run(int32_t *w, int n, int32_t first, int step) {
    for (int g = 0; g < n; g++) w[g] = first + g * step;
}

Test(dsv4_plan, ref_linear_crossing_a_page) {
    int32_t w[128];
    fill_run(w, 128, 200, 1); /* 200..255 on page 1, 256..327 on page 2 (B = 128) */
    expect_row("linear +1, B=128, slots 200..327", w, 128, 128, 1, 200, 56, 256, 128);
    fill_run(w, 128, 256, 1); /* one page-aligned run: slot1 unused = slot0 + len0 */
    expect_row("linear +1, B=128, slots 256..383", w, 128, 128, 1, 256, 128, 384, 128);
    expect_row("linear +1, B=256, slots 256..383", w, 128, 256, 1, 256, 128, 384, 128);
}

Test(dsv4_plan, ref_ring_wrap) {
    /* Token at p = 257, ring base 512, slot = base + p % 128: positions 130..255 on slots
     * 514..639, then 256, 257 on 512, 513 (B = 256: one page). */
    int32_t w[128];
    fill_run(w, 126, 514, 1);
    fill_run(w + 126, 2, 512, 1);
    expect_row("ring +1, B=256, p=257", w, 128, 256, 1, 514, 126, 512, 128);
    /* Descending ring (step -1, slot = base + 127 - p % 128): 637 down to 512, then 639, 638. */
    fill_run(w, 126, 512 + 127 - 2, -1);
    fill_run(w + 126, 2, 512 + 127, -1);
    expect_row("ring -1, B=256, p=257", w, 128, 256, -1, 512, 126, 638, 128);
}

Test(dsv4_plan, ref_step_minus_one) {
    /* 1000 down to 873, B = 128: 1000..896 on page 7 (105 rows), 895..873 on page 6 (23 rows);
     * each run is stored by its lowest slot (A7). */
    int32_t w[128];
    fill_run(w, 128, 1000, -1);
    expect_row("linear -1, B=128, slots 1000..873", w, 128, 128, -1, 896, 105, 873, 128);
    fill_run(w, 10, 1000, -1);
    expect_row("linear -1, B=128, slots 1000..991", w, 10, 128, -1, 991, 10, 1001, 10);
    /* A +1 run under step -1 is a chain of single-row runs. */
    fill_run(w, 3, 40, 1);
    expect_row("slots 40,41,42 with step -1", w, 3, 128, -1, 40, 1, 40, 1);
}

Test(dsv4_plan, ref_more_than_two_runs_is_cut) {
    int32_t w[128];
    fill_run(w, 128, 100, 1); /* B = 16: pages 6..14 */
    expect_row("linear +1, B=16, slots 100..227", w, 128, 16, 1, 100, 1, 100, 1);
    fill_run(w, 128, 1000, -1); /* B = 64: pages 15..13 */
    expect_row("linear -1, B=64, slots 1000..873", w, 128, 64, -1, 1000, 1, 1000, 1);
    int32_t jumps[6] = {5, 6, 7, 20, 21, 40}; /* three runs on one page */
    expect_row("slots 5,6,7,20,21,40, B=1024", jumps, 6, 1024, 1, 5, 1, 5, 1);
    expect_row("slots 5,6,7,20,21 (L=5), B=1024", jumps, 5, 1024, 1, 5, 3, 20, 5);
}

Test(dsv4_plan, ref_empty_and_short_windows) {
    int32_t w[4] = {77, -1, -1, -1};
    expect_row("L=0 (padding token)", w, 0, 128, 1, 77, 0, 77, 0);
    expect_row("L=1", w, 1, 128, 1, 77, 1, 78, 1);
    int32_t pad[4] = {5, 6, -1, -1};
    expect_row("slots 5,6 then -1 padding past L=2", pad, 2, 128, 1, 5, 2, 7, 2);
    int32_t neg[4] = {-1, -1, -1, -1};
    expect_row("all -1, L=0", neg, 0, 128, -1, -1, 0, -1, 0);
}

Test(dsv4_plan, ref_negative_slots_use_floor_pages) {
    /* B = 4: -3, -2, -1 are on page -1 (floor division), 0 on page 0. Truncating division would
     * put all four on page 0 and give one run. */
    int32_t w[4] = {-3, -2, -1, 0};
    expect_row("slots -3..0, B=4", w, 4, 4, 1, -3, 3, 0, 4);
    int32_t d[3] = {1, 0, -1};
    expect_row("slots 1,0,-1, B=2, step -1", d, 3, 2, -1, 0, 2, -1, 3);
}

Test(dsv4_plan, ref_full_plan_lengths) {
    /* topk 4, rows {10..13} and {40, 41, 8, 9}. */
    int32_t kv[2 * 6] = {10, 11, 12, 13, 99, 99, 40, 41, 8, 9, 99, 99};
    int32_t plan[8];
    int32_t want_null[8] = {10, 4, 14, 4, 40, 2, 8, 4};
    mlr_dsv4_plan(kv, 6, NULL, 2, 4, 128, 1, plan);
    cr_expect(memcmp(plan, want_null, sizeof plan) == 0,
              "topk_lengths NULL: expected rows (10,4,14,4) (40,2,8,4), got (%d,%d,%d,%d) "
              "(%d,%d,%d,%d)", plan[0], plan[1], plan[2], plan[3], plan[4], plan[5], plan[6],
              plan[7]);
    int32_t lengths[2] = {-3, 9}; /* clamped to 0 and topk */
    int32_t want_len[8] = {10, 0, 10, 0, 40, 2, 8, 4};
    mlr_dsv4_plan(kv, 6, lengths, 2, 4, 128, 1, plan);
    cr_expect(memcmp(plan, want_len, sizeof plan) == 0,
              "topk_lengths {-3, 9}: expected rows (10,0,10,0) (40,2,8,4), got (%d,%d,%d,%d) "
              "(%d,%d,%d,%d)", plan[0], plan[1], plan[2], plan[3], plan[4], plan[5], plan[6],
              plan[7]);
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* True when the plan row maps rows 0..L-1 onto exactly the window's slots (as a multiset). */
static int plan_covers_window(const int32_t row[4], const int32_t *idx, int L) {
    int64_t a[128], b[128];
    for (int g = 0; g < L; g++) a[g] = mlr_dsv4_plan_slot(row, g), b[g] = idx[g];
    qsort(a, (size_t)L, sizeof a[0], cmp_i64);
    qsort(b, (size_t)L, sizeof b[0], cmp_i64);
    return row[3] == L && memcmp(a, b, (size_t)L * sizeof a[0]) == 0;
}

/* A random window of at most a few runs: mostly steps of `step`, some jumps. */
static void random_window(mlt_rng *r, int32_t *w, int L, int step) {
    w[0] = (int32_t)mlt_rng_range(r, -2, 4000);
    for (int g = 1; g < L; g++)
        w[g] = mlt_rng_range(r, 0, 15) ? w[g - 1] + step : (int32_t)mlt_rng_range(r, -2, 4000);
}

Test(dsv4_plan, ref_mapping_matches_window) {
    mlt_rng r;
    mlt_rng_init(&r, mlt_seed());
    int32_t w[128], row[4];
    for (int it = 0; it < 20000; it++) {
        int L = (int)mlt_rng_range(&r, 1, 128), step = mlt_rng_range(&r, 0, 1) ? 1 : -1;
        int B = 1 << mlt_rng_range(&r, 0, 9);
        random_window(&r, w, L, step);
        mlr_dsv4_plan_row(w, L, B, step, row);
        int cut = row[0] == w[0] && row[1] == 1 && row[2] == w[0] && row[3] == 1;
        cr_assert(cut || plan_covers_window(row, w, L),
                  "seed %llu it %d L=%d B=%d step %d: plan (%d,%d,%d,%d) does not map onto "
                  "the window", (unsigned long long)r.seed, it, L, B, step, row[0], row[1],
                  row[2], row[3]);
        cr_assert(row[1] >= 1 && row[1] <= row[3], "seed %llu it %d: len0 %d outside [1, %d]",
                  (unsigned long long)r.seed, it, row[1], row[3]);
    }
}

/* ---- (b) the kernel compiles ------------------------------------------------------------ */

static void precompile_plan(const char *arch) {
    mla_runtime *rt = NULL;
    mla_status s = mlt_cpu_runtime(arch, &rt);
    cr_assert(s == MLA_OK, "%s: mla_runtime_create(no_device): %s", arch, mla_last_error());
    mla__spec spec;
    mla__spec_init(&spec, "dsv4_attention_plan");
    char hash[33] = "";
    s = mla__precompile(rt, &spec, arch, NULL, hash);
    cr_expect(s == MLA_OK, "dsv4_attention_plan for %s: %s", arch, mla_last_error());
    cr_expect(strlen(hash) == 32, "dsv4_attention_plan for %s: key hash \"%s\"", arch, hash);
    mla_runtime_destroy(rt);
}

Test(dsv4_plan, compile_sm_90a) { precompile_plan("sm_90a"); }
Test(dsv4_plan, compile_sm_100a) { precompile_plan("sm_100a"); }

Test(dsv4_plan, build_name_expr) {
    mla__spec spec;
    mla__spec_init(&spec, "dsv4_attention_plan");
    char expr[128];
    mla__launch_info li;
    memset(&li, 0, sizeof li);
    cr_assert(mla__dsv4_plan_build(&spec, expr, sizeof expr, &li) == MLA_OK, "%s",
              mla_last_error());
    cr_expect_str_eq(expr, "mla::dsv4::plan_kernel<128>");
    cr_expect(li.threads == 128 && li.dynamic_smem == 0 && li.cluster == 1,
              "dsv4_attention_plan launch: threads %d smem %d cluster %d", li.threads,
              li.dynamic_smem, li.cluster);
    mla__spec_add(&spec, "threads", 256);
    cr_expect(mla__dsv4_plan_build(&spec, expr, sizeof expr, &li) == MLA_ERR_INVALID_ARGUMENT,
              "dsv4_attention_plan with a parameter must be rejected");
    cr_expect(strstr(mla_last_error(), "threads") != NULL, "message: %s", mla_last_error());
}
