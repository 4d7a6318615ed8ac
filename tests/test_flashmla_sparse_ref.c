/* The float64 sparse references on cases whose results are known in closed form: the 656-byte
 * row decoding, one valid entry (out = V, lse = its logit), two equal logits (out = mean, lse + ln
 * 2), the sink factor, topk_length, invalid and out-of-range entries, empty rows (decode: out 0,
 * lse +inf; prefill: -inf / -inf in base 2, -inf / +inf in natural log). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "ref/flashmla_ref.h"
#include "ref/flashmla_sparse_ref.h"

static void put_row(uint8_t *row, double nope, float scale, double rope) {
    for (int t = 0; t < 4; t++) memcpy(row + 512 + 4 * t, &scale, 4);
    for (int e = 0; e < 512; e++) row[e] = mlr_flashmla_f64_to_e4m3(nope / scale);
    for (int e = 0; e < 64; e++) {
        uint16_t v = mlr_flashmla_f64_to_bf16(rope);
        memcpy(row + 528 + 2 * e, &v, 2);
    }
}

Test(flashmla_sparse_ref, row_decoding) {
    uint8_t row[656];
    put_row(row, 0.5, 0.25f, -0.75);
    cr_expect(mlr_flashmla_sparse_kv(row, 0) == 0.5 && mlr_flashmla_sparse_kv(row, 511) == 0.5,
              "row decoding: nope 0.5 at scale 0.25: got %g, %g", mlr_flashmla_sparse_kv(row, 0),
              mlr_flashmla_sparse_kv(row, 511));
    cr_expect(mlr_flashmla_sparse_kv(row, 512) == -0.75 && mlr_flashmla_sparse_kv(row, 575) == -0.75,
              "row decoding: rope -0.75: got %g", mlr_flashmla_sparse_kv(row, 512));
}

Test(flashmla_sparse_ref, decode_closed_forms) {
    enum { PAGE = 2, NB = 2, H = 2, TOPK = 4 };
    static uint8_t k[NB * PAGE * 656];
    memset(k, 0xFF, sizeof k);
    put_row(k + 1 * 656, 0.5, 1.f, 0.5);     /* slot 1 */
    put_row(k + 2 * 656, 0.5, 1.f, 0.5);     /* slot 2: the same key */
    static uint16_t q[2 * 1 * H * 576];
    for (int x = 0; x < 2 * H * 576; x++) q[x] = mlr_flashmla_f64_to_bf16(x % 576 < 8 ? 1.0 : 0.0);
    /* request 0: slot 1 and invalid entries; request 1: slots 1, 2 (and topk_length 2 cuts 3). */
    int32_t idx[2 * TOPK] = {1, -1, 4, 2147480000, 1, 2, -5, 1};
    int32_t tlen[2] = {4, 2};
    float sink[H] = {-INFINITY, 0.f};
    mlr_sparse_decode_problem p = {2, 1, H, TOPK, PAGE, NB, q, {H * 576, H * 576, 576}, k,
                                   PAGE * 656, idx, {TOPK, TOPK}, tlen, sink, 1.0, 1};
    static double out[2 * H * 512], lse[2 * H];
    mlr_flashmla_sparse_decode(&p, out, lse);
    /* logit = 8 * 0.5 = 4 */
    cr_expect(fabs(lse[0] - 4.0) < 1e-12 && fabs(out[0] - 0.5) < 1e-12, "decode one entry: lse "
              "%g (want 4), out %g (want 0.5)", lse[0], out[0]);
    cr_expect(fabs(lse[2] - (4.0 + log(2.0))) < 1e-12, "decode two equal entries: lse %g (want "
              "4 + ln 2)", lse[2]);
    double f = 1.0 / (1.0 + exp(0.0 - lse[1]));
    cr_expect(fabs(out[512] - 0.5 * f) < 1e-12, "decode sink 0 on head 1: out %g, want %g",
              out[512], 0.5 * f);
    tlen[0] = 0;
    mlr_flashmla_sparse_decode(&p, out, lse);
    cr_expect(isinf(lse[0]) && lse[0] > 0 && out[0] == 0 && out[511] == 0,
              "decode topk_length 0: out %g, lse %g (want 0, +inf)", out[0], lse[0]);
}

Test(flashmla_sparse_ref, prefill_closed_forms) {
    enum { SKV = 3, H = 16, D = 512, TOPK = 3 };
    static uint16_t kv[SKV * D], q[2 * H * D];
    for (int x = 0; x < SKV * D; x++) kv[x] = mlr_flashmla_f64_to_bf16(x / D == 1 ? 0.25 : NAN);
    for (int x = 0; x < 2 * H * D; x++) q[x] = mlr_flashmla_f64_to_bf16(x % D < 4 ? 1.0 : 0.0);
    int32_t idx[2 * TOPK] = {1, 3, -1, -7, 3, 2147480000};
    mlr_sparse_prefill_problem p = {2, H, D, TOPK, SKV, q, {H * D, D}, kv, D, idx, TOPK, NULL,
                                    NULL, 2.0, 0, 1};
    static double out[2 * H * 512], ml[2 * H], lse[2 * H];
    mlr_flashmla_sparse_prefill(&p, out, ml, lse);
    double want = 2.0 * 4 * 0.25 / log(2.0);  /* logit 2 in base 2 */
    cr_expect(fabs(ml[0] - want) < 1e-12 && fabs(lse[0] - want) < 1e-12 && out[0] == 0.25,
              "prefill one entry, base 2: max_logits %g lse %g (want %g), out %g", ml[0], lse[0],
              want, out[0]);
    cr_expect(isinf(ml[H]) && ml[H] < 0 && isinf(lse[H]) && lse[H] < 0 && out[H * 512] == 0,
              "prefill empty row, base 2: max_logits %g lse %g out %g (want -inf, -inf, 0)",
              ml[H], lse[H], out[H * 512]);
    p.natural_log = 1;
    mlr_flashmla_sparse_prefill(&p, out, ml, lse);
    cr_expect(fabs(lse[0] - 2.0) < 1e-12 && isinf(lse[H]) && lse[H] > 0,
              "prefill natural log: lse %g (want 2), empty %g (want +inf)", lse[0], lse[H]);
}
