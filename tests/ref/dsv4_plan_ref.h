/* CPU reference of the DSV4 attention plan (spec/dsv4.md §3.2, A7, §5), written from the spec.
 * A plan row is (slot0, len0, slot1, rows): window row g < len0 lies on slot slot0 + g, the
 * others on slot1 + g - len0; rows is the effective length. */
#ifndef MLAJIT_TESTS_REF_DSV4_PLAN_REF_H
#define MLAJIT_TESTS_REF_DSV4_PLAN_REF_H

#include <stdint.h>

/* One token: idx = kv_indices[t, 0..) (idx[0] must exist), L rows (0 <= L), page_size B (> 0),
 * step +1 or -1. Writes out[4] = (slot0, len0, slot1, rows). */
void mlr_dsv4_plan_row(const int32_t *idx, int L, int64_t page_size, int step, int32_t out[4]);

/* T tokens: row t of kv_indices at kv + t * row_stride; L = lengths ? lengths[t] : topk, clamped
 * to [0, topk] (the API documents lengths in 0..topk). Writes plan[T * 4]. */
void mlr_dsv4_plan(const int32_t *kv, int64_t row_stride, const int32_t *lengths, int T, int topk,
                   int64_t page_size, int step, int32_t *plan);

/* Slot of window row g (0 <= g < rows) under a plan row. */
int64_t mlr_dsv4_plan_slot(const int32_t row[4], int g);

#endif
