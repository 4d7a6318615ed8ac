/* CPU reference of the DSV4 attention plan, a line-by-line transcription of spec/dsv4.md §3.2:
 *
 *   for g, s in enumerate(idx[:L]):
 *       if g and s == prev + step and s // B == prev // B: runs[-1][1] += 1
 *       else: runs.append([s, 1])
 *       prev = s
 *   if len(runs) > 2: return (idx[0], 1, idx[0], 1)
 *   lo = lambda r: r[0] if step == 1 else r[0] - (r[1] - 1)
 *   s1 = lo(runs[1]) if len(runs) == 2 else s0 + l0
 *
 * plus §5's empty window (idx[0], 0, idx[0], 0). Python's // is floor division and its integers
 * do not overflow: the reference computes in int64 with an explicit floor division, and stores
 * the results as int32 (two's complement). */
#include "ref/dsv4_plan_ref.h"

/* Python's a // b for b > 0. */
static int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

typedef struct run { int64_t first, len; } run;

void mlr_dsv4_plan_row(const int32_t *idx, int L, int64_t B, int step, int32_t out[4]) {
    run runs[3] = {{0, 0}};
    int n = 0;
    int64_t prev = 0;
    if (L == 0) {
        out[0] = idx[0], out[1] = 0, out[2] = idx[0], out[3] = 0;
        return;
    }
    for (int g = 0; g < L && n <= 2; g++) {
        int64_t s = idx[g];
        if (g && s == prev + step && floor_div(s, B) == floor_div(prev, B))
            runs[n - 1].len += 1;
        else
            runs[n++] = (run){s, 1};
        prev = s;
    }
    if (n > 2) {
        out[0] = idx[0], out[1] = 1, out[2] = idx[0], out[3] = 1;
        return;
    }
    int64_t s0 = step == 1 ? runs[0].first : runs[0].first - (runs[0].len - 1);
    int64_t l0 = runs[0].len;
    int64_t s1 = n == 2 ? (step == 1 ? runs[1].first : runs[1].first - (runs[1].len - 1))
                        : s0 + l0;
    out[0] = (int32_t)(uint32_t)s0, out[1] = (int32_t)l0;
    out[2] = (int32_t)(uint32_t)s1, out[3] = L;
}

void mlr_dsv4_plan(const int32_t *kv, int64_t row_stride, const int32_t *lengths, int T, int topk,
                   int64_t page_size, int step, int32_t *plan) {
    for (int t = 0; t < T; t++) {
        int L = lengths ? lengths[t] : topk;
        L = L < 0 ? 0 : L > topk ? topk : L;
        mlr_dsv4_plan_row(kv + (int64_t)t * row_stride, L, page_size, step, plan + 4 * t);
    }
}

int64_t mlr_dsv4_plan_slot(const int32_t row[4], int g) {
    return g < row[1] ? (int64_t)row[0] + g : (int64_t)row[2] + (g - row[1]);
}
