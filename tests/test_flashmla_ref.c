/* The float64 reference of the FlashMLA-compatible decode checked against closed forms (no GPU):
 * number formats, uniform attention, two-key softmax, the bottom-right causal mask, empty rows,
 * GQA head mapping, paging through a permuted block table, fp8 descales, thread count
 * independence, and the comparison function itself. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref/flashmla_ref.h"

#define D 576
#define DV 512

/* ---- number formats ----------------------------------------------------------------------------- */

Test(flashmla_ref, formats_round_trip_every_code) {
    for (unsigned v = 0; v < 65536; v++) {
        double b = mlr_flashmla_bf16_to_f64((uint16_t)v), h = mlr_flashmla_fp16_to_f64((uint16_t)v);
        if (!isnan(b))
            cr_assert(mlr_flashmla_f64_to_bf16(b) == v, "bf16 code 0x%04x (%g) round trip gave "
                      "0x%04x", v, b, mlr_flashmla_f64_to_bf16(b));
        if (!isnan(h))
            cr_assert(mlr_flashmla_f64_to_fp16(h) == v, "fp16 code 0x%04x (%g) round trip gave "
                      "0x%04x", v, h, mlr_flashmla_f64_to_fp16(h));
    }
    for (unsigned v = 0; v < 256; v++) {
        double e = mlr_flashmla_e4m3_to_f64((uint8_t)v);
        cr_assert(isnan(e) == ((v & 0x7F) == 0x7F), "e4m3 code 0x%02x: NaN-ness wrong (%g)", v, e);
        if (!isnan(e))
            cr_assert(mlr_flashmla_f64_to_e4m3(e) == v, "e4m3 code 0x%02x (%g) round trip gave "
                      "0x%02x", v, e, mlr_flashmla_f64_to_e4m3(e));
    }
}

Test(flashmla_ref, formats_known_values) {
    cr_expect(mlr_flashmla_e4m3_to_f64(0x7E) == 448.0, "e4m3 0x7E: expected 448");
    cr_expect(mlr_flashmla_e4m3_to_f64(0x01) == ldexp(1, -9), "e4m3 0x01: expected 2^-9");
    cr_expect(mlr_flashmla_f64_to_e4m3(1000.0) == 0x7E, "e4m3(1000): expected saturation to 448");
    cr_expect(mlr_flashmla_f64_to_e4m3(-1.0) == 0xB8, "e4m3(-1): expected 0xB8");
    cr_expect(mlr_flashmla_f64_to_e4m3(1.0625) == 0x38, "e4m3(1.0625): tie to even 1.0 (0x38)");
    cr_expect(mlr_flashmla_f64_to_e4m3(1.1875) == 0x3A, "e4m3(1.1875): tie to even 1.25 (0x3A)");
    cr_expect(mlr_flashmla_f64_to_bf16(1.0) == 0x3F80, "bf16(1): expected 0x3F80");
    cr_expect(mlr_flashmla_f64_to_bf16(1.0 + ldexp(1, -8)) == 0x3F80, "bf16(1 + 2^-8): tie to "
              "even 0x3F80");
    cr_expect(mlr_flashmla_f64_to_fp16(65504.0) == 0x7BFF, "fp16(65504): expected 0x7BFF");
    cr_expect(mlr_flashmla_f64_to_fp16(1e6) == 0x7C00, "fp16(1e6): expected inf");
    cr_expect(mlr_flashmla_f64_to_fp16(ldexp(1, -24)) == 0x0001, "fp16(2^-24): expected 0x0001");
    cr_expect(isnan(mlr_flashmla_bf16_to_f64(mlr_flashmla_f64_to_bf16(NAN))), "bf16(NaN) is NaN");
}

/* ---- a tiny fp16-free problem builder: bf16 q and cache from doubles ----------------------------- */

typedef struct tiny {
    int b, s_q, h_q, h_kv, page, num_blocks, max_blocks;
    uint16_t *q, *k;
    int32_t *bt, *len;
    mlr_flashmla_problem p;
    double *out, *lse;
} tiny;

static void tiny_init(tiny *t, int b, int s_q, int h_q, int h_kv, int page, int max_blocks,
                      int num_blocks) {
    memset(t, 0, sizeof *t);
    t->b = b, t->s_q = s_q, t->h_q = h_q, t->h_kv = h_kv, t->page = page;
    t->num_blocks = num_blocks, t->max_blocks = max_blocks;
    t->q = calloc((size_t)b * s_q * h_q * D, 2);
    t->k = calloc((size_t)num_blocks * page * h_kv * D, 2);
    t->bt = calloc((size_t)b * max_blocks, 4);
    t->len = calloc((size_t)b, 4);
    t->out = calloc((size_t)b * s_q * h_q * DV, sizeof(double));
    t->lse = calloc((size_t)b * h_q * s_q, sizeof(double));
    cr_assert(t->q && t->k && t->bt && t->len && t->out && t->lse, "tiny: out of memory");
    for (int i = 0; i < b; i++)
        for (int c = 0; c < max_blocks; c++) t->bt[i * max_blocks + c] = c; /* identity */
    mlr_flashmla_problem *p = &t->p;
    p->format = MLR_FLASHMLA_BF16;
    p->b = b, p->s_q = s_q, p->h_q = h_q, p->h_kv = h_kv, p->page_size = page;
    p->q = t->q, p->k_cache = t->k, p->block_table = t->bt, p->bt_stride = max_blocks;
    p->seqlens = t->len;
    p->q_stride[2] = D, p->q_stride[1] = (int64_t)h_q * D, p->q_stride[0] = (int64_t)s_q * h_q * D;
    p->k_stride[2] = D, p->k_stride[1] = (int64_t)h_kv * D, p->k_stride[0] = (int64_t)page * h_kv * D;
    p->softmax_scale = 1.0, p->descale_q = p->descale_k = 1.0;
    p->threads = 2;
}

static void tiny_free(tiny *t) {
    free(t->q), free(t->k), free(t->bt), free(t->len), free(t->out), free(t->lse);
}

static void set_q(tiny *t, int i, int j, int h, int d, double v) {
    t->q[(((int64_t)i * t->s_q + j) * t->h_q + h) * D + d] = mlr_flashmla_f64_to_bf16(v);
}

/* Key at logical position pos of request i (through its block-table row). */
static void set_k(tiny *t, int i, int pos, int g, int d, double v) {
    int64_t blk = t->bt[i * t->max_blocks + pos / t->page];
    t->k[((blk * t->page + pos % t->page) * t->h_kv + g) * D + d] = mlr_flashmla_f64_to_bf16(v);
}

static double out_at(const tiny *t, int i, int j, int h, int d) {
    return t->out[(((int64_t)i * t->s_q + j) * t->h_q + h) * DV + d];
}
static double lse_at(const tiny *t, int i, int j, int h) {
    return t->lse[((int64_t)i * t->h_q + h) * t->s_q + j];
}

/* ---- the decode ---------------------------------------------------------------------------------- */

Test(flashmla_ref, uniform_keys_average_the_values) {
    tiny t;
    tiny_init(&t, 1, 1, 1, 1, 4, 3, 3);
    t.len[0] = 10;
    set_q(&t, 0, 0, 0, 0, 1.0);
    for (int pos = 0; pos < 10; pos++) {
        set_k(&t, 0, pos, 0, 0, 0.5);             /* every logit 0.5 */
        set_k(&t, 0, pos, 0, 1, (double)pos);     /* V column 1 = pos */
    }
    mlr_flashmla_decode(&t.p, t.out, t.lse);
    cr_expect(fabs(out_at(&t, 0, 0, 0, 1) - 4.5) < 1e-12, "uniform: out[1] = %.15g, expected 4.5",
              out_at(&t, 0, 0, 0, 1));
    cr_expect(fabs(out_at(&t, 0, 0, 0, 0) - 0.5) < 1e-12, "uniform: out[0] = %.15g, expected 0.5",
              out_at(&t, 0, 0, 0, 0));
    cr_expect(fabs(lse_at(&t, 0, 0, 0) - (0.5 + log(10.0))) < 1e-12, "uniform: lse = %.15g, "
              "expected 0.5 + ln 10", lse_at(&t, 0, 0, 0));
    tiny_free(&t);
}

Test(flashmla_ref, two_keys_softmax_with_scale) {
    tiny t;
    tiny_init(&t, 1, 1, 1, 1, 64, 1, 1);
    t.len[0] = 2;
    t.p.softmax_scale = 0.5;
    set_q(&t, 0, 0, 0, 3, 2.0);
    set_k(&t, 0, 0, 0, 3, 1.0), set_k(&t, 0, 0, 0, 10, 1.0);   /* s0 = 0.5 * 2 = 1, V[10] = 1 */
    set_k(&t, 0, 1, 0, 3, 3.0), set_k(&t, 0, 1, 0, 11, 1.0);   /* s1 = 3,           V[11] = 1 */
    mlr_flashmla_decode(&t.p, t.out, t.lse);
    double lse = log(exp(1.0) + exp(3.0));
    cr_expect(fabs(lse_at(&t, 0, 0, 0) - lse) < 1e-12, "two keys: lse %.15g, expected %.15g",
              lse_at(&t, 0, 0, 0), lse);
    cr_expect(fabs(out_at(&t, 0, 0, 0, 10) - exp(1.0 - lse)) < 1e-12, "two keys: weight of key 0");
    cr_expect(fabs(out_at(&t, 0, 0, 0, 11) - exp(3.0 - lse)) < 1e-12, "two keys: weight of key 1");
    tiny_free(&t);
}

Test(flashmla_ref, causal_is_bottom_right_and_empty_rows_are_zero_inf) {
    tiny t;
    tiny_init(&t, 2, 3, 1, 1, 2, 4, 8);
    for (int c = 0; c < 4; c++) t.bt[4 + c] = 4 + c;
    t.len[0] = 4, t.len[1] = 1;   /* request 1: shorter than s_q */
    t.p.causal = 1;
    for (int i = 0; i < 2; i++)
        for (int pos = 0; pos < t.len[i]; pos++) set_k(&t, i, pos, 0, 20, (double)(pos + 1));
    mlr_flashmla_decode(&t.p, t.out, t.lse);
    /* request 0, len 4, s_q 3: query j sees keys t <= 1 + j; logits 0 -> means of V */
    for (int j = 0; j < 3; j++) {
        double n = 2 + j, mean = (n + 1) / 2;
        cr_expect(fabs(out_at(&t, 0, j, 0, 20) - mean) < 1e-12, "causal j=%d: out %.15g, "
                  "expected mean of 1..%g", j, out_at(&t, 0, j, 0, 20), n);
        cr_expect(fabs(lse_at(&t, 0, j, 0) - log(n)) < 1e-12, "causal j=%d: lse", j);
    }
    /* request 1, len 1: j = 0, 1 see nothing, j = 2 sees key 0 */
    for (int j = 0; j < 2; j++) {
        cr_expect(isinf(lse_at(&t, 1, j, 0)) && lse_at(&t, 1, j, 0) > 0, "empty row j=%d: lse "
                  "%g, expected +inf", j, lse_at(&t, 1, j, 0));
        cr_expect(out_at(&t, 1, j, 0, 20) == 0.0, "empty row j=%d: out not 0", j);
    }
    cr_expect(fabs(out_at(&t, 1, 2, 0, 20) - 1.0) < 1e-12, "request 1 j=2 sees its only key");
    t.p.causal = 0;
    mlr_flashmla_decode(&t.p, t.out, t.lse);
    cr_expect(fabs(out_at(&t, 0, 0, 0, 20) - 2.5) < 1e-12, "non-causal: every query sees 4 keys");
    tiny_free(&t);
}

Test(flashmla_ref, zero_length_request) {
    tiny t;
    tiny_init(&t, 1, 1, 2, 1, 16, 1, 1);
    mlr_flashmla_decode(&t.p, t.out, t.lse);
    for (int h = 0; h < 2; h++)
        cr_expect(isinf(lse_at(&t, 0, 0, h)) && lse_at(&t, 0, 0, h) > 0 && out_at(&t, 0, 0, h, 5) == 0,
                  "zero length, head %d: expected out 0, lse +inf", h);
    tiny_free(&t);
}

Test(flashmla_ref, gqa_heads_use_their_kv_head_and_pages_follow_the_table) {
    tiny t;
    tiny_init(&t, 1, 2, 4, 2, 3, 3, 5);
    int perm[3] = {4, 0, 2};
    for (int c = 0; c < 3; c++) t.bt[c] = perm[c];
    t.len[0] = 7;
    for (int pos = 0; pos < 7; pos++)
        for (int g = 0; g < 2; g++) set_k(&t, 0, pos, g, 30, 100.0 * g + pos);
    mlr_flashmla_decode(&t.p, t.out, t.lse);  /* q = 0: uniform over 7 keys */
    for (int j = 0; j < 2; j++)
        for (int h = 0; h < 4; h++) {
            double want = 100.0 * (h / 2) + 3.0;
            cr_expect(fabs(out_at(&t, 0, j, h, 30) - want) < 1e-9, "gqa j=%d head %d: out %.15g, "
                      "expected %g (kv head %d)", j, h, out_at(&t, 0, j, h, 30), want, h / 2);
        }
    tiny_free(&t);
}

Test(flashmla_ref, fp8_descales_scale_logits_and_values) {
    uint8_t q[D] = {0}, k[2 * D] = {0};
    int32_t bt[1] = {0}, len[1] = {2};
    q[0] = mlr_flashmla_f64_to_e4m3(2.0);
    k[0] = mlr_flashmla_f64_to_e4m3(1.0), k[7] = mlr_flashmla_f64_to_e4m3(4.0);
    k[D] = mlr_flashmla_f64_to_e4m3(0.5), k[D + 7] = mlr_flashmla_f64_to_e4m3(8.0);
    mlr_flashmla_problem p = {.format = MLR_FLASHMLA_E4M3, .b = 1, .s_q = 1, .h_q = 1, .h_kv = 1,
                              .page_size = 2, .q = q, .q_stride = {D, D, D}, .k_cache = k,
                              .k_stride = {2 * D, D, D}, .block_table = bt, .bt_stride = 1,
                              .seqlens = len, .softmax_scale = 0.25, .descale_q = 2.0,
                              .descale_k = 0.5, .threads = 1};
    double out[DV], lse[1];
    mlr_flashmla_decode(&p, out, lse);
    double s0 = 0.25 * 2.0 * 0.5 * 2.0, s1 = 0.25 * 2.0 * 0.5 * 1.0, l = log(exp(s0) + exp(s1));
    double v = 0.5 * (exp(s0 - l) * 4.0 + exp(s1 - l) * 8.0);
    cr_expect(fabs(lse[0] - l) < 1e-12, "fp8: lse %.15g, expected %.15g", lse[0], l);
    cr_expect(fabs(out[7] - v) < 1e-12, "fp8: out[7] %.15g, expected %.15g", out[7], v);
}

Test(flashmla_ref, thread_count_does_not_change_results) {
    tiny t;
    tiny_init(&t, 3, 2, 6, 2, 5, 4, 12);
    for (int i = 0; i < 3; i++)
        for (int c = 0; c < 4; c++) t.bt[i * 4 + c] = i * 4 + c;
    uint64_t s = 12345;
    for (size_t e = 0; e < (size_t)12 * 5 * 2 * D; e++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        t.k[e] = mlr_flashmla_f64_to_bf16((double)(int)(s >> 40 & 0xFF) / 256 - 0.5);
    }
    for (size_t e = 0; e < (size_t)3 * 2 * 6 * D; e++) t.q[e] = t.k[e + 17];
    t.len[0] = 20, t.len[1] = 0, t.len[2] = 13;
    size_t n_out = (size_t)3 * 2 * 6 * DV, n_lse = 36;
    double *o1 = malloc(n_out * 8), *l1 = malloc(n_lse * 8);
    cr_assert(o1 && l1, "out of memory");
    t.p.threads = 1;
    mlr_flashmla_decode(&t.p, o1, l1);
    t.p.threads = 5;
    mlr_flashmla_decode(&t.p, t.out, t.lse);
    cr_expect(!memcmp(o1, t.out, n_out * 8) && !memcmp(l1, t.lse, n_lse * 8),
              "1 thread and 5 threads differ");
    free(o1), free(l1);
    tiny_free(&t);
}

/* ---- comparison ---------------------------------------------------------------------------------- */

Test(flashmla_ref, allclose_follows_flashmla) {
    char msg[256];
    double r[4] = {1.0, -2.0, INFINITY, 0.0}, a[4] = {1.0, -2.0, INFINITY, 0.0};
    cr_expect(mlr_flashmla_allclose(a, r, 4, 1e-3, 1e-2, 1e-6, msg, sizeof msg), "equal: %s", msg);
    a[0] = 1.009;   /* rel 0.009 < 0.01 */
    cr_expect(mlr_flashmla_allclose(a, r, 4, 1e-3, 1e-2, -1, msg, sizeof msg), "rel ok: %s", msg);
    a[0] = 1.02;
    cr_expect(!mlr_flashmla_allclose(a, r, 4, 1e-3, 1e-2, -1, msg, sizeof msg), "rel 0.02 passed");
    a[0] = 1.0, a[3] = 5e-4;   /* abs 5e-4 < 1e-3 */
    cr_expect(mlr_flashmla_allclose(a, r, 4, 1e-3, 1e-2, -1, msg, sizeof msg), "abs ok: %s", msg);
    a[3] = 0, a[2] = 3.0;
    cr_expect(!mlr_flashmla_allclose(a, r, 4, 1e-3, 1e-2, -1, msg, sizeof msg), "inf vs finite "
              "passed");
    a[2] = INFINITY, a[1] = NAN;
    cr_expect(!mlr_flashmla_allclose(a, r, 4, 1e-3, 1e-2, -1, msg, sizeof msg), "NaN passed");
    double big[2] = {1.0, 1.0}, got[2] = {1.0, 0.99};
    cr_expect(!mlr_flashmla_allclose(got, big, 2, 1, 1, 1e-6, msg, sizeof msg), "cosine distance "
              "of 2.5e-5 passed a 1e-6 tolerance");
}
