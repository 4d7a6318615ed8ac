/* FlashMLA-compatible metadata and dense decode on the GPU (skips without one), against the
 * float64 reference (tests/ref/flashmla_ref.c) with the spec's tolerances (§0).
 *
 * The sweep covers every value of FlashMLA's own axes (b 1/2/6/64/128, s_q 1/2/4 and MTP 8,
 * s_k 20/140/4096, h_q 1/3/9/16/63/64/126/128, h_kv 1/2/3/8, varlen with zero-length requests,
 * causal on and off, pages 1/3/16/32/64/128, bf16/fp16/fp8, strided tensors, forced part counts)
 * without the full cross product. Poison as in FlashMLA's tests (util/flashmla_case.h). Every
 * schedule is also checked on its own: each unit of each request is covered once, in order, and
 * the chunk indices of a request are 0 .. n - 1 in order; and alone, at scale (b up to 5000, P up
 * to 1000, normal, batch-invariant and its fallback).
 * Batch-invariant mode: each request alone and in its batch (under two part counts) gives
 * bit-identical out and softmax_lse. Graph capture: metadata + decode captured once, replayed
 * with new cache_seqlens. Reproduce a failure with MLAJIT_TEST_SEED=<seed from the message>.
 * Where the runtime picks the sm_90a wgmma decode (bf16/fp16 on an H100/H200), each sweep case
 * runs twice on the same inputs: on the wgmma kernel ("[sm90]" in messages), then on the portable
 * one through a second runtime created with MLAJIT_FLASHMLA_DECODE=portable ("[portable]"; the
 * variable is read at runtime creation only). After each run the runtime's kernel table must hold
 * the decode kind that run was meant to use and no other. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/flashmla_kinds.h"
#include "runtime/internal.h"
#include "util/flashmla_case.h"

enum { BF = MLR_FLASHMLA_BF16, FP = MLR_FLASHMLA_FP16, F8 = MLR_FLASHMLA_E4M3 };

/* name, kv, b, s_q, s_k, h_q, h_kv, page, varlen, zeros, causal, strided, parts, split_tokens,
 * capacity, scale */
static mlt_fm_case sweep[] = {
    {"bf16 b1 sq1 sk20 h1/1 p64", BF, 1, 1, 20, 1, 1, 64, 0, 0, 0, 0, 0, 0, 0, 0},
    {"bf16 b2 sq2 sk140 h3/1 p16 var causal", BF, 2, 2, 140, 3, 1, 16, 1, 0, 1, 0, 0, 0, 0, 0},
    {"bf16 b6 sq4 sk140 h9/3 p1 var causal", BF, 6, 4, 140, 9, 3, 1, 1, 0, 1, 0, 0, 0, 0, 0},
    {"bf16 b64 sq1 sk4096 h128/1 p64 var zeros", BF, 64, 1, 4096, 128, 1, 64, 1, 5, 0, 0, 0, 0, 0, 0},
    {"bf16 b64 sq2 sk4096 h16/1 p128 var zeros causal strided", BF, 64, 2, 4096, 16, 1, 128, 1, 4,
     1, 1, 0, 0, 0, 0},
    {"bf16 b2 sq4 sk4096 h126/2 p128 var causal", BF, 2, 4, 4096, 126, 2, 128, 1, 0, 1, 0, 0, 0, 0, 0},
    {"bf16 b6 sq1 sk140 h63/1 p32 var zeros", BF, 6, 1, 140, 63, 1, 32, 1, 2, 0, 0, 0, 0, 0, 0},
    {"bf16 b1 sq2 sk4096 h64/8 p1 causal", BF, 1, 2, 4096, 64, 8, 1, 0, 0, 1, 0, 0, 0, 0, 0},
    {"bf16 b64 sq1 sk140 h16/8 p16 var zeros strided", BF, 64, 1, 140, 16, 8, 16, 1, 9, 0, 1, 0, 0, 0, 0},
    {"bf16 b6 sq2 sk20 h128/2 p1 var causal", BF, 6, 2, 20, 128, 2, 1, 1, 0, 1, 0, 0, 0, 0, 0},
    {"bf16 b2 sq8 sk140 h16/1 p32 causal (MTP 8)", BF, 2, 8, 140, 16, 1, 32, 0, 0, 1, 0, 0, 0, 0, 0},
    {"bf16 b6 sq4 sk20 h64/1 p128 causal zeros", BF, 6, 4, 20, 64, 1, 128, 0, 2, 1, 0, 0, 0, 0, 0},
    {"bf16 b128 sq2 sk4096 h16/1 p64 var zeros causal", BF, 128, 2, 4096, 16, 1, 64, 1, 16, 1, 0, 0,
     0, 0, 0},
    {"bf16 b2 sq1 sk4096 h128/1 p64 noncausal", BF, 2, 1, 4096, 128, 1, 64, 0, 0, 0, 0, 0, 0, 0, 0},
    {"bf16 b6 sq1 sk4096 h16/1 p64 var parts=1", BF, 6, 1, 4096, 16, 1, 64, 1, 1, 0, 0, 1, 0, 0, 0},
    {"bf16 b2 sq2 sk4096 h64/1 p16 causal parts=300", BF, 2, 2, 4096, 64, 1, 16, 0, 0, 1, 0, 300, 0,
     0, 0},
    {"bf16 b64 sq1 sk140 h3/1 p64 var zeros parts=7 scale=0.2", BF, 64, 1, 140, 3, 1, 64, 1, 10, 0,
     0, 7, 0, 0, 0.2f},
    {"fp16 b6 sq4 sk4096 h128/1 p64 var causal", FP, 6, 4, 4096, 128, 1, 64, 1, 0, 1, 0, 0, 0, 0, 0},
    {"fp16 b2 sq1 sk140 h16/2 p16", FP, 2, 1, 140, 16, 2, 16, 0, 0, 0, 0, 0, 0, 0, 0},
    {"fp16 b64 sq2 sk140 h63/1 p128 var zeros strided", FP, 64, 2, 140, 63, 1, 128, 1, 6, 0, 1, 0, 0,
     0, 0},
    {"fp16 b1 sq1 sk4096 h1/1 p1", FP, 1, 1, 4096, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0},
    /* sm_90a page class 0 (producer warpgroup): several chunks per CTA, split and whole */
    {"bf16 b16 sq1 sk1000 h128/1 p1 var zeros parts=5", BF, 16, 1, 1000, 128, 1, 1, 1, 3, 0, 0,
     5, 0, 0, 0},
    {"fp16 b16 sq2 sk1000 h32/2 p3 var causal strided parts=9", FP, 16, 2, 1000, 32, 2, 3, 1, 0, 1,
     1, 9, 0, 0, 0},
    {"fp8 b6 sq2 sk4096 h128/1 p64 var causal", F8, 6, 2, 4096, 128, 1, 64, 1, 0, 1, 0, 0, 0, 0, 0},
    {"fp8 b2 sq1 sk140 h16/1 p1", F8, 2, 1, 140, 16, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0},
    {"fp8 b64 sq1 sk4096 h64/1 p64 var zeros", F8, 64, 1, 4096, 64, 1, 64, 1, 3, 0, 0, 0, 0, 0, 0},
    {"fp8 b6 sq4 sk20 h9/1 p16 causal strided scale=0.1", F8, 6, 4, 20, 9, 1, 16, 0, 0, 1, 1, 0, 0,
     0, 0.1f},
    {"fp8 b2 sq2 sk140 h32/2 p32 var causal", F8, 2, 2, 140, 32, 2, 32, 1, 0, 1, 0, 0, 0, 0, 0},
    /* growing logits (ramp, large scale): the running max jumps past the lazy rescaling's
     * threshold several times in a chunk, within a pair and between pairs */
    {"bf16 b4 sq2 sk4096 h128/1 p64 causal ramp scale=10", BF, 4, 2, 4096, 128, 1, 64, 0, 0, 1, 0,
     0, 0, 0, 10.f, 30.f},
    {"bf16 b3 sq1 sk1000 h64/1 p1 var ramp scale=10", BF, 3, 1, 1000, 64, 1, 1, 1, 0, 0, 0, 0, 0,
     0, 10.f, 30.f},
    {"fp16 b6 sq1 sk4096 h16/1 p16 var ramp scale=8 parts=3", FP, 6, 1, 4096, 16, 1, 16, 1, 0, 0, 0,
     3, 0, 0, 8.f, 30.f},
    {"fp8 b2 sq1 sk4096 h128/1 p64 ramp", F8, 2, 1, 4096, 128, 1, 64, 0, 0, 0, 0, 0, 0, 0, 0, 20.f},
};

ParameterizedTestParameters(flashmla_gpu, sweep) {
    return cr_make_param_array(mlt_fm_case, sweep, sizeof sweep / sizeof sweep[0]);
}

/* ---- the schedule, checked on its own ------------------------------------------------------ */

static int units_of(int len) { return len <= 0 ? 1 : (len + 63) / 64; }

/* Walks the records as the decode does: every unit covered once and in order, chunk indices of a
 * request consecutive from 0, num_splits a prefix sum. 0 if sound, else a message. */
static int check_schedule(const int32_t *rec, int parts, const int32_t *splits, const int32_t *len,
                          int b, long long max_total, char *msg, size_t size) {
    int *next_chunk = calloc((size_t)b, sizeof *next_chunk), ok = 0;
    int cur_req = 0, cur_unit = 0;
    if (!next_chunk) return snprintf(msg, size, "out of host memory"), 1;
    if (splits[0] != 0) { snprintf(msg, size, "num_splits[0] = %d", splits[0]); goto done; }
    for (int i = 0; i < b; i++)
        if (splits[i + 1] <= splits[i]) {
            snprintf(msg, size, "num_splits[%d..%d] = %d, %d: no chunk", i, i + 1, splits[i], splits[i + 1]);
            goto done;
        }
    if (splits[b] > max_total) {
        snprintf(msg, size, "num_splits[b] = %d > %lld split slots", splits[b], max_total);
        goto done;
    }
    for (int p = 0; p < parts; p++) {
        const int32_t *r = rec + 8 * p;
        if (r[2] == -1) continue;
        if (r[0] != cur_req || r[1] != cur_unit || r[2] < r[0] || r[2] >= b) {
            snprintf(msg, size, "part %d starts at (%d, %d) ends at request %d, expected start "
                     "(%d, %d)", p, r[0], r[1], r[2], cur_req, cur_unit);
            goto done;
        }
        for (int i = r[0]; i <= r[2]; i++) {
            int lo = i == r[0] ? r[1] : 0, hi = i == r[2] ? r[3] : units_of(len[i]);
            int chunk = i == r[0] ? r[4] : 0;
            if (lo >= hi || hi > units_of(len[i])) {
                snprintf(msg, size, "part %d request %d: units [%d, %d) of %d", p, i, lo, hi,
                         units_of(len[i]));
                goto done;
            }
            for (int u0 = lo; u0 < hi; chunk++) {
                int u1 = r[5] > 0 ? (u0 / r[5] + 1) * r[5] : hi;
                if (r[5] > 0) chunk = u0 / r[5];
                if (chunk != next_chunk[i] || chunk >= splits[i + 1] - splits[i]) {
                    snprintf(msg, size, "part %d request %d: chunk %d, expected %d of %d", p, i,
                             chunk, next_chunk[i], splits[i + 1] - splits[i]);
                    goto done;
                }
                next_chunk[i]++;
                u0 = u1 < hi ? u1 : hi;
            }
        }
        cur_req = r[2], cur_unit = r[3];
        if (cur_unit == units_of(len[cur_req])) cur_req++, cur_unit = 0;
    }
    if (cur_req != b) { snprintf(msg, size, "requests from %d on are not covered", cur_req); goto done; }
    for (int i = 0; i < b; i++)
        if (next_chunk[i] != splits[i + 1] - splits[i]) {
            snprintf(msg, size, "request %d: %d chunks seen, num_splits says %d", i, next_chunk[i],
                     splits[i + 1] - splits[i]);
            goto done;
        }
    ok = 1;
done:
    free(next_chunk);
    return !ok;
}

/* Downloads and checks the schedule of a launched case. */
static void assert_schedule(mla_runtime *rt, const mlt_fm_data *d, const mlt_fm_dev *v) {
    int b = d->c.b;
    int32_t *rec = malloc((size_t)v->parts * 32), *splits = malloc((size_t)(b + 1) * 4);
    cr_assert(rec && splits, "%s: out of host memory", d->c.name);
    cr_assert(mlt_sync(rt) == CUDA_SUCCESS, "%s: synchronize", d->c.name);
    cr_assert(mlt_download(rt, rec, v->sched, (size_t)v->parts * 32) == CUDA_SUCCESS &&
                  mlt_download(rt, splits, v->splits, (size_t)(b + 1) * 4) == CUDA_SUCCESS,
              "%s: download the schedule", d->c.name);
    char msg[256];
    long long cap = v->max_splits ? v->max_splits : (long long)b + v->parts - 1;
    cr_assert(!check_schedule(rec, v->parts, splits, d->seqlens, b, cap, msg, sizeof msg),
              "%s seed %llu (P=%d): schedule: %s", d->c.name, (unsigned long long)d->seed,
              v->parts, msg);
    free(rec), free(splits);
}

/* ---- the schedule alone, at scale ---------------------------------------------------------- */

/* One mla_get_metadata call on random lengths (zero and negative ones included) in mode 0
 * (normal), 1 (batch-invariant, 4-unit chunks, room for them) or 2 (batch-invariant with only
 * b + P slots: falls back to the normal split when the chunks do not fit). */
static void metadata_case(mla_runtime *rt, mlt_rng *r, int b, int parts, int mode) {
    int32_t *len = malloc((size_t)b * 4), *rec = malloc((size_t)parts * 32);
    int32_t *splits = malloc((size_t)(b + 1) * 4);
    cr_assert(len && rec && splits, "metadata b %d P %d: out of host memory", b, parts);
    long long need = 0;
    for (int i = 0; i < b; i++) {
        int64_t x = mlt_rng_range(r, 0, 34);
        len[i] = x == 0 ? 0 : x == 1 ? -3 : (int32_t)mlt_rng_range(r, 1, 20000);
        need += (units_of(len[i]) + 3) / 4;
    }
    int max_splits = mode == 1 ? (int)(need + b + parts) : b + parts;
    CUdeviceptr dl = 0, dr = 0, ds = 0;
    cr_assert(mlt_alloc(rt, (size_t)b * 4, &dl) == CUDA_SUCCESS &&
                  mlt_alloc(rt, (size_t)parts * 32, &dr) == CUDA_SUCCESS &&
                  mlt_alloc(rt, (size_t)(b + 1) * 4, &ds) == CUDA_SUCCESS &&
                  mlt_upload(rt, dl, len, (size_t)b * 4) == CUDA_SUCCESS &&
                  mlt_fill(rt, dr, 0xFF, (size_t)parts * 32) == CUDA_SUCCESS,
              "metadata b %d P %d: device buffers", b, parts);
    int64_t vec[1] = {b}, sch[2] = {parts, 8}, spl[1] = {b + 1};
    mlt_tensor tl, tr, ts;
    mlt_tensor_init(&tl, dl, MLT_INT32, 1, vec, NULL);
    mlt_tensor_init(&tr, dr, MLT_INT32, 2, sch, NULL);
    mlt_tensor_init(&ts, ds, MLT_INT32, 1, spl, NULL);
    mla_get_metadata_args m;
    mla_get_metadata_args_init(&m);
    m.cache_seqlens = &tl.t, m.num_q_tokens_per_head_k = 128, m.num_heads_k = 1;
    m.tile_scheduler_metadata = &tr.t, m.num_splits = &ts.t;
    m.split_tokens = mode ? 256 : 0, m.max_splits = mode ? max_splits : 0;
    cr_assert(mla_get_metadata(rt, &m, NULL) == MLA_OK, "metadata b %d P %d mode %d: %s", b,
              parts, mode, mla_last_error());
    cr_assert(mlt_sync(rt) == CUDA_SUCCESS && mlt_download(rt, rec, dr, (size_t)parts * 32) ==
                  CUDA_SUCCESS && mlt_download(rt, splits, ds, (size_t)(b + 1) * 4) == CUDA_SUCCESS,
              "metadata b %d P %d mode %d: download", b, parts, mode);
    char msg[256];
    /* batch-invariant chunks (mode 1, and mode 2 when they fit) may use all max_splits slots;
     * the normal split at most b + P - 1 */
    int want_cu = mode == 1 || (mode == 2 && need <= max_splits) ? 4 : 0;
    long long cap = want_cu ? max_splits : (long long)b + parts - 1;
    cr_assert(!check_schedule(rec, parts, splits, len, b, cap, msg, sizeof msg),
              "metadata b %d P %d mode %d seed %llu: %s", b, parts, mode,
              (unsigned long long)r->seed, msg);
    for (int p = 0; p < parts; p++)
        cr_assert(rec[8 * p + 2] == -1 || rec[8 * p + 5] == want_cu, "metadata b %d P %d mode %d "
                  "seed %llu: part %d has chunk_units %d, expected %d", b, parts, mode,
                  (unsigned long long)r->seed, p, rec[8 * p + 5], want_cu);
    mlt_free(rt, dl), mlt_free(rt, dr), mlt_free(rt, ds);
    free(len), free(rec), free(splits);
}

Test(flashmla_gpu, metadata_at_scale) {
    mla_runtime *rt;
    if (!mlt_gpu_runtime(&rt)) cr_skip_test("no CUDA device");
    static const int bs[] = {1, 7, 1000, 5000}, ps[] = {1, 66, 132, 1000};
    mlt_rng r;
    mlt_rng_init(&r, mlt_seed());
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 4; k++)
            for (int mode = 0; mode < 3; mode++) metadata_case(rt, &r, bs[i], ps[k], mode);
    mla_runtime_destroy(rt);
}

/* ---- the sweep ------------------------------------------------------------------------------- */

/* The device results of the last launch against the reference, and its schedule. */
static void check_results(mla_runtime *rt, mlt_fm_data *d, const mlt_fm_dev *v, const char *what) {
    char msg[512];
    mlt_fm_result got, want;
    cr_assert(!mlt_fm_result_alloc(d, &got) && !mlt_fm_result_alloc(d, &want), "%s: out of host "
              "memory", d->c.name);
    cr_assert(!mlt_fm_download(rt, d, v, &got, msg, sizeof msg), "%s", msg);
    assert_schedule(rt, d, v);
    mlt_fm_reference(d, &want);
    cr_assert(!mlt_fm_compare(d, &got, &want, msg, sizeof msg), "%s%s seed %llu (P=%d): %s",
              d->c.name, what, (unsigned long long)d->seed, v->parts, msg);
    mlt_fm_result_free(&got), mlt_fm_result_free(&want);
}

/* Launches a case on stream and checks it. */
static void run_and_check(mla_runtime *rt, mlt_fm_data *d, mlt_fm_dev *v, CUstream stream,
                          const char *what) {
    char msg[512];
    cr_assert(!mlt_fm_run(rt, v, stream, msg, sizeof msg), "%s%s: %s", d->c.name, what, msg);
    check_results(rt, d, v, what);
}

/* A GPU runtime created with $MLAJIT_FLASHMLA_DECODE set to value (unset for NULL), which the
 * runtime reads at creation only; the variable is restored before returning. 0 without a GPU. */
static int runtime_with_decode_env(const char *value, mla_runtime **rt) {
    int ok = mlt_gpu_runtime_env("MLAJIT_FLASHMLA_DECODE", value, rt);
    cr_assert(ok >= 0, "set or restore MLAJIT_FLASHMLA_DECODE");
    return ok;
}

/* The dense decode rt ran was of kind want, and never of the other kind (the sm_90a kind counting
 * its CTA pair, flashmla_decode_sm90x2, which it must have run where pair is set, and only then). */
static void assert_decode_kind(const mla_runtime *rt, const char *name, const char *want,
                               const char *what, int pair) {
    int sm90 = !!strcmp(want, "flashmla_decode");
    const char *other = sm90 ? "flashmla_decode" : "flashmla_decode_sm90";
    int n_want = mlt_loaded_of_kind(rt, want), n_x2 = mlt_loaded_of_kind(rt, "flashmla_decode_sm90x2");
    int n_other = mlt_loaded_of_kind(rt, other);
    cr_assert((sm90 ? n_want + n_x2 : n_want) >= 1 && n_other == 0 && (sm90 || n_x2 == 0),
              "%s%s: expected the decode to run %s only, the runtime loaded %d %s, %d x2 and %d "
              "%s kernels", name, what, want, n_want, want, n_x2, n_other, other);
    cr_assert(pair ? n_x2 >= 1 : n_x2 == 0, "%s%s: expected %s CTA pair (flashmla_decode_sm90x2), "
              "loaded %d", name, what, pair ? "the" : "no", n_x2);
}

/* Whether the sm_90a decode of case c runs on the CTA pair under MLAJIT_FLASHMLA_DECODE=pair:
 * cp.async path (a page size not a multiple of 8), no causal mask, an even number of 64-row head
 * blocks (launch_decode). */
static int runs_pair(const mlt_fm_case *c) {
    long long blocks = ((long long)c->s_q * (c->h_q / c->h_kv) + 63) / 64;
    return c->page % 8 != 0 && !(c->causal && c->s_q > 1) && blocks % 2 == 0;
}

/* sm_90a CTA pair (page class 0, non-causal, head blocks in pairs; sweep's p1 h128 case runs on
 * it too): four head blocks (two pairs along z), a partial second head block, strided tensors,
 * split and whole requests, several chunks per CTA. */
static mlt_fm_case pair[] = {
    {"pair fp16 b6 sq2 sk4096 h128/1 p1 var zeros strided", FP, 6, 2, 4096, 128, 1, 1, 1, 2, 0, 1,
     0, 0, 0, 0},
    {"pair bf16 b8 sq1 sk700 h100/1 p2 var parts=3", BF, 8, 1, 700, 100, 1, 2, 1, 0, 0, 0, 3, 0, 0,
     0},
    {"pair bf16 b32 sq1 sk4096 h128/1 p1", BF, 32, 1, 4096, 128, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0},
};

/* One case on the decode the runtime picks, checked, and on sm_90a again on the portable kernel
 * (and, where it applies, on the CTA pair). */
static void sweep_case(const mlt_fm_case *c) {
    mla_runtime *rt, *portable = NULL;
    if (!runtime_with_decode_env(NULL, &rt)) cr_skip_test("no CUDA device");
    cr_assert(!rt->flashmla_decode_portable, "a runtime created without MLAJIT_FLASHMLA_DECODE "
              "forces the portable decode");
    char msg[512];
    mlt_fm_data d;
    mlt_fm_dev v;
    cr_assert(!mlt_fm_data_make(c, mlt_seed(), &d, msg, sizeof msg), "%s", msg);
    cr_assert(!mlt_fm_dev_create(rt, &d, &v, msg, sizeof msg), "%s", msg);
    /* kv kinds: MLR_FLASHMLA_* == MLA__FLASHMLA_KV_* */
    const char *kind = mla__flashmla_decode_kind(rt->arch, c->kv, NULL);
    if (strcmp(kind, "flashmla_decode")) {
        run_and_check(rt, &d, &v, NULL, " [sm90]");
        assert_decode_kind(rt, c->name, kind, " [sm90]", 0);
        if (runs_pair(c)) {  /* the CTA pair as well */
            mla_runtime *pr = NULL;
            cr_assert(runtime_with_decode_env("pair", &pr) && pr != rt,
                      "%s: a second runtime with MLAJIT_FLASHMLA_DECODE=pair: %s", c->name,
                      mla_last_error());
            cr_assert(!mlt_fm_poison_outputs(rt, &d, &v, msg, sizeof msg), "%s", msg);
            run_and_check(pr, &d, &v, NULL, " [sm90 pair]");
            assert_decode_kind(pr, c->name, kind, " [sm90 pair]", 1);
            mla_runtime_destroy(pr);
        }
        /* Both runtimes share the device's primary context, so v's buffers serve both. */
        cr_assert(runtime_with_decode_env("portable", &portable) && portable != rt,
                  "%s: a second runtime with MLAJIT_FLASHMLA_DECODE=portable: %s", c->name,
                  mla_last_error());
        cr_assert(portable->flashmla_decode_portable, "%s: MLAJIT_FLASHMLA_DECODE=portable at "
                  "creation must force the portable decode", c->name);
        cr_assert(!mlt_fm_poison_outputs(rt, &d, &v, msg, sizeof msg), "%s", msg);
        run_and_check(portable, &d, &v, NULL, " [portable]");
        assert_decode_kind(portable, c->name, "flashmla_decode", " [portable]", 0);
        mla_runtime_destroy(portable);
    } else {
        run_and_check(rt, &d, &v, NULL, "");
        assert_decode_kind(rt, c->name, kind, "", 0);
    }
    mlt_fm_dev_destroy(rt, &v);
    mlt_fm_data_free(&d);
    mla_runtime_destroy(rt);
}

ParameterizedTest(mlt_fm_case *c, flashmla_gpu, sweep) { sweep_case(c); }

ParameterizedTestParameters(flashmla_gpu, pair) {
    return cr_make_param_array(mlt_fm_case, pair, sizeof pair / sizeof pair[0]);
}

ParameterizedTest(mlt_fm_case *c, flashmla_gpu, pair) {
    cr_assert(runs_pair(c), "%s: not a CTA pair case", c->name);
    sweep_case(c);
}

/* ---- batch-invariant mode ------------------------------------------------------------------- */

static mlt_fm_case invariant[] = {
    {"invariant bf16 b6 sq2 sk4096 h64/1 p64 var zeros causal split256", BF, 6, 2, 4096, 64, 1, 64,
     1, 1, 1, 0, 0, 256, 256, 0},
    {"invariant fp8 b6 sq1 sk4096 h128/1 p16 var zeros split512", F8, 6, 1, 4096, 128, 1, 16, 1, 1,
     0, 0, 0, 512, 256, 0},
    {"invariant fp16 b6 sq4 sk140 h16/2 p1 var causal split64", FP, 6, 4, 140, 16, 2, 1, 1, 0, 1,
     0, 0, 64, 256, 0},
};

ParameterizedTestParameters(flashmla_gpu, batch_invariant) {
    return cr_make_param_array(mlt_fm_case, invariant, sizeof invariant / sizeof invariant[0]);
}

/* The results of request i as a batch of one: tensors into the batch's buffers at request i,
 * its own schedule, outputs and workspace. */
static void run_alone(mla_runtime *rt, const mlt_fm_data *d, const mlt_fm_dev *v, int i,
                      uint16_t *out, float *lse) {
    const mlt_fm_case *c = &d->c;
    char msg[512];
    mlt_fm_dev one = *v;
    int64_t qs[4] = {1, c->s_q, c->h_q, 576}, bts[2] = {1, d->max_blocks}, vec[1] = {1};
    int64_t btst[2] = {d->bt_stride, 1}, sched[2] = {v->parts, 8}, two[1] = {2};
    int64_t os[4] = {1, c->s_q, c->h_q, 512}, ls[3] = {1, c->h_q, c->s_q};
    mlt_tensor_init(&one.tq, v->q + (CUdeviceptr)(i * d->q_stride[0] * d->elem), v->tq.t.dtype, 4,
                    qs, d->q_stride);
    mlt_tensor_init(&one.tbt, v->bt + (CUdeviceptr)(i * d->bt_stride * 4), MLT_INT32, 2, bts, btst);
    mlt_tensor_init(&one.tseq, v->seqlens + (CUdeviceptr)i * 4, MLT_INT32, 1, vec, NULL);
    CUdeviceptr o = 0, l = 0, s = 0, n = 0;
    cr_assert(mlt_alloc(rt, (size_t)c->s_q * c->h_q * 512 * 2, &o) == CUDA_SUCCESS &&
                  mlt_alloc(rt, (size_t)c->s_q * c->h_q * 4, &l) == CUDA_SUCCESS &&
                  mlt_alloc(rt, (size_t)v->parts * 32, &s) == CUDA_SUCCESS &&
                  mlt_alloc(rt, 8, &n) == CUDA_SUCCESS,
              "%s request %d: alloc", c->name, i);
    mlt_tensor_init(&one.tsched, s, MLT_INT32, 2, sched, NULL);
    mlt_tensor_init(&one.tsplits, n, MLT_INT32, 1, two, NULL);
    mlt_tensor_init(&one.tout, o, v->tout.t.dtype, 4, os, NULL);
    mlt_tensor_init(&one.tlse, l, MLT_FP32, 3, ls, NULL);
    one.meta.cache_seqlens = &one.tseq.t, one.meta.tile_scheduler_metadata = &one.tsched.t;
    one.meta.num_splits = &one.tsplits.t;
    mla_flash_with_kvcache_args *a = &one.args;
    a->q = &one.tq.t, a->block_table = &one.tbt.t, a->cache_seqlens = &one.tseq.t;
    a->tile_scheduler_metadata = &one.tsched.t, a->num_splits = &one.tsplits.t;
    a->out = &one.tout.t, a->softmax_lse = &one.tlse.t, a->workspace = &one.tws.t;
    a->k_cache = &one.tk.t, a->descale_q = a->descale_q ? &one.tdq.t : NULL;
    a->descale_k = a->descale_k ? &one.tdk.t : NULL;
    cr_assert(!mlt_fm_run(rt, &one, NULL, msg, sizeof msg), "%s request %d alone: %s", c->name, i,
              msg);
    cr_assert(mlt_sync(rt) == CUDA_SUCCESS, "%s request %d alone: synchronize", c->name, i);
    cr_assert(mlt_download(rt, out, o, (size_t)c->s_q * c->h_q * 512 * 2) == CUDA_SUCCESS &&
                  mlt_download(rt, lse, l, (size_t)c->s_q * c->h_q * 4) == CUDA_SUCCESS,
              "%s request %d alone: download", c->name, i);
    mlt_free(rt, o), mlt_free(rt, l), mlt_free(rt, s), mlt_free(rt, n);
}

/* Request i of the batch's device outputs equals the alone run bit for bit. */
static void assert_same_bits(mla_runtime *rt, const mlt_fm_data *d, const mlt_fm_dev *v, int i,
                             const uint16_t *out, const float *lse, const char *what) {
    const mlt_fm_case *c = &d->c;
    size_t row = (size_t)c->s_q * c->h_q;
    uint16_t *bo = malloc(d->o_elems * 2);
    float *bl = malloc((size_t)c->b * row * 4);
    cr_assert(bo && bl, "%s: out of host memory", c->name);
    cr_assert(mlt_download(rt, bo, v->out, d->o_elems * 2) == CUDA_SUCCESS &&
                  mlt_download(rt, bl, v->lse, (size_t)c->b * row * 4) == CUDA_SUCCESS,
              "%s: download", c->name);
    cr_assert(!memcmp(bo + i * d->o_stride[0], out, row * 512 * 2), "%s seed %llu%s: request %d "
              "(len %d): out differs from the request alone", c->name,
              (unsigned long long)d->seed, what, i, d->seqlens[i]);
    cr_assert(!memcmp(bl + i * row, lse, row * 4), "%s seed %llu%s: request %d (len %d): "
              "softmax_lse differs from the request alone", c->name, (unsigned long long)d->seed,
              what, i, d->seqlens[i]);
    free(bo), free(bl);
}

ParameterizedTest(mlt_fm_case *c, flashmla_gpu, batch_invariant) {
    mla_runtime *rt;
    if (!mlt_gpu_runtime(&rt)) cr_skip_test("no CUDA device");
    char msg[512];
    mlt_fm_data d;
    mlt_fm_dev v;
    cr_assert(!mlt_fm_data_make(c, mlt_seed(), &d, msg, sizeof msg), "%s", msg);
    d.seqlens[1] = 64 * 3 + 5;   /* a short request next to the long ones (within the capacity) */
    cr_assert(!mlt_fm_dev_create(rt, &d, &v, msg, sizeof msg), "%s", msg);
    size_t row = (size_t)c->s_q * c->h_q;
    uint16_t *out = malloc((size_t)c->b * row * 512 * 2);
    float *lse = malloc((size_t)c->b * row * 4);
    cr_assert(out && lse, "%s: out of host memory", c->name);
    for (int i = 0; i < c->b; i++) run_alone(rt, &d, &v, i, out + i * row * 512, lse + i * row);
    run_and_check(rt, &d, &v, NULL, "");
    for (int i = 0; i < c->b; i++)
        assert_same_bits(rt, &d, &v, i, out + i * row * 512, lse + i * row, "");
    /* The same batch under another part count: the schedule differs, the bits must not. */
    mlt_fm_dev_destroy(rt, &v);
    d.c.parts = 5;
    cr_assert(!mlt_fm_dev_create(rt, &d, &v, msg, sizeof msg), "%s", msg);
    run_and_check(rt, &d, &v, NULL, " (P=5)");
    for (int i = 0; i < c->b; i++)
        assert_same_bits(rt, &d, &v, i, out + i * row * 512, lse + i * row, " (P=5)");
    free(out), free(lse);
    mlt_fm_dev_destroy(rt, &v);
    mlt_fm_data_free(&d);
    mla_runtime_destroy(rt);
}

/* ---- graph capture ---------------------------------------------------------------------------- */

Test(flashmla_gpu, graph_capture_replays_with_new_seqlens) {
    mla_runtime *rt;
    if (!mlt_gpu_runtime(&rt)) cr_skip_test("no CUDA device");
    mlt_fm_case c = {"graph bf16 b6 sq2 h64/1 p16 causal", BF, 6, 2, 1000, 64, 1, 16, 1, 1, 1, 0,
                     0, 0, 2000, 0};
    char msg[512];
    mlt_fm_data d;
    mlt_fm_dev v;
    mlt_rng r;
    cr_assert(!mlt_fm_data_make(&c, mlt_seed(), &d, msg, sizeof msg), "%s", msg);
    mlt_rng_init(&r, d.seed ^ 0x5eed);
    cr_assert(!mlt_fm_dev_create(rt, &d, &v, msg, sizeof msg), "%s", msg);
    CUstream stream = NULL;
    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    cr_assert(rt->drv.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS, "%s: stream",
              c.name);
    run_and_check(rt, &d, &v, stream, " (warm-up, before capture)");
    cr_assert(rt->drv.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) ==
                  CUDA_SUCCESS, "%s: begin capture", c.name);
    int failed = mlt_fm_run(rt, &v, stream, msg, sizeof msg);
    CUresult end = rt->drv.cuStreamEndCapture(stream, &graph);
    cr_assert(!failed, "%s: during capture: %s", c.name, msg);
    cr_assert(end == CUDA_SUCCESS, "%s: end capture: %s", c.name, mlt_cu_name(rt, end));
    cr_assert(rt->drv.cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS,
              "%s: instantiate", c.name);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < c.b; i++)   /* new lengths up to the capacity, some zero */
            d.seqlens[i] = mlt_rng_range(&r, 0, 4) == 0 ? 0 : (int32_t)mlt_rng_range(&r, 1, 2000);
        cr_assert(!mlt_fm_upload_seqlens(rt, &d, &v, msg, sizeof msg), "%s", msg);
        cr_assert(!mlt_fm_poison_outputs(rt, &d, &v, msg, sizeof msg), "%s", msg);
        cr_assert(rt->drv.cuGraphLaunch(exec, stream) == CUDA_SUCCESS, "%s: graph launch", c.name);
        cr_assert(rt->drv.cuStreamSynchronize(stream) == CUDA_SUCCESS, "%s: replay %d", c.name,
                  round);
        char what[48];
        snprintf(what, sizeof what, " (graph replay %d)", round);
        check_results(rt, &d, &v, what);
    }
    rt->drv.cuGraphExecDestroy(exec);
    rt->drv.cuGraphDestroy(graph);
    rt->drv.cuStreamDestroy(stream);
    mlt_fm_dev_destroy(rt, &v);
    mlt_fm_data_free(&d);
    mla_runtime_destroy(rt);
}
