/* The DSV4 float64 reference itself (runs everywhere, no GPU): the scalar helpers of
 * spec/dsv4.md §2.0 / §3.1 / §3.3 against hand-computed literals, the split-KV combine against
 * the unsplit attention, and invariants of tiny whole layers (KV row, single-row attention, the
 * ring, the sequential compressor of A5, the activation-quantization switch). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref/dsv4_numerics.h"
#include "ref/dsv4_plan_ref.h"
#include "ref/dsv4_ref.h"
#include "util/dsv4_case.h"

/* ---- numerics ------------------------------------------------------------------------------ */

Test(dsv4_ref, e4m3_encode_literals) {
    static const struct { double x; uint8_t b; const char *what; } cases[] = {
        {1.0, 0x38, "1"}, {-1.0, 0xB8, "-1"}, {448.0, 0x7E, "max"}, {500.0, 0x7E, "saturate"},
        {464.0, 0x7E, "tie above max saturates"}, {-1000.0, 0xFE, "negative saturate"},
        {240.0, 0x77, "1.875 * 2^7"}, {ldexp(1, -6), 0x08, "min normal"},
        {ldexp(1, -9), 0x01, "min subnormal"}, {ldexp(3, -9), 0x03, "subnormal 3"},
        {ldexp(1, -10), 0x00, "tie 0 / 2^-9 -> even 0"}, {-ldexp(1, -10), 0x80, "-tie -> -0"},
        {ldexp(3, -10), 0x02, "tie 1 / 2 subnormal -> even 2"},
        {ldexp(15, -10), 0x08, "tie 7 / 8 subnormal -> min normal"},
        {1.0625, 0x38, "tie 1 / 1.125 -> even 1"}, {1.1875, 0x3A, "tie 1.125 / 1.25 -> 1.25"},
        {17.0, 0x58, "tie 16 / 18 -> 16"}, {19.0, 0x5A, "tie 18 / 20 -> 20"},
        {15.9, 0x58, "rounds up into the next binade"}, {0.0, 0x00, "+0"}, {-0.0, 0x80, "-0"},
        {-ldexp(1, -12), 0x80, "tiny negative -> 0x80"}, {0.3, 0x2A, "0.3 -> 0.3125"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t b = mlr_e4m3_encode(cases[i].x);
        cr_expect(b == cases[i].b, "e4m3_encode(%.10g) [%s]: got 0x%02X, expected 0x%02X",
                  cases[i].x, cases[i].what, b, cases[i].b);
        double v = mlr_e4m3_decode(b);
        cr_expect(v == mlr_e4m3(cases[i].x) && signbit(v) == signbit(cases[i].x),
                  "e4m3 [%s]: decode(encode(%.10g)) = %.10g, e4m3() = %.10g", cases[i].what,
                  cases[i].x, v, mlr_e4m3(cases[i].x));
    }
}

Test(dsv4_ref, e4m3_decode_all_bytes) {
    cr_expect(isnan(mlr_e4m3_decode(0x7F)) && isnan(mlr_e4m3_decode(0xFF)), "e4m3 0x7F/0xFF: NaN");
    cr_expect(mlr_e4m3_decode(0x01) == ldexp(1, -9) && mlr_e4m3_decode(0x7E) == 448 &&
                  mlr_e4m3_decode(0xC0) == -2.0 && mlr_e4m3_decode(0x3F) == 1.875,
              "e4m3_decode literals 0x01, 0x7E, 0xC0, 0x3F");
    for (int b = 0; b < 256; b++) { /* every finite code round-trips */
        if ((b & 0x7F) == 0x7F) continue;
        double v = mlr_e4m3_decode((uint8_t)b);
        cr_expect(mlr_e4m3_encode(v) == b, "e4m3 byte 0x%02X (%.10g) re-encodes to 0x%02X", b, v,
                  mlr_e4m3_encode(v));
    }
}

Test(dsv4_ref, ue8m0_for_literals) {
    static const struct { double amax; uint8_t b; } cases[] = {
        {448, 127}, {449, 128}, {224, 126}, {224.5, 127}, {1.0, 119}, {3.5, 120}, {3.50001, 121},
        {0.0, 105}, {1e-10, 105}, {1e-4, 105}, {2e-4, 106}, {1e300, 254}, {448.0 * 1024, 137},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double s = 0;
        uint8_t b = mlr_ue8m0_for(cases[i].amax, &s);
        cr_expect(b == cases[i].b && s == mlr_ue8m0_decode(b),
                  "ue8m0_for(%.10g): got byte %d scale %.10g, expected byte %d", cases[i].amax, b,
                  s, cases[i].b);
    }
    cr_expect(isnan(mlr_ue8m0_decode(255)) && mlr_ue8m0_decode(127) == 1.0 &&
                  mlr_ue8m0_decode(0) == ldexp(1, -127), "ue8m0_decode 255 / 127 / 0");
}

Test(dsv4_ref, bf16_literals) {
    static const struct { double x; uint16_t b; } cases[] = {
        {1.0, 0x3F80}, {-2.5, 0xC020}, {1.0 + ldexp(1, -8), 0x3F80}, {1.0 + ldexp(3, -8), 0x3F82},
        {1.0 + ldexp(1, -8) + ldexp(1, -20), 0x3F81}, {0.0, 0x0000}, {-0.0, 0x8000},
        {3.0e38, 0x7F62}, {1e-40, 0x0001},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_expect(mlr_bf16_bits(cases[i].x) == cases[i].b, "bf16(%.10g): got 0x%04X, expected 0x%04X",
                  cases[i].x, mlr_bf16_bits(cases[i].x), cases[i].b);
    uint8_t le[2];
    mlr_bf16_store(le, 0x3F82);
    cr_expect(le[0] == 0x82 && le[1] == 0x3F && mlr_bf16_load(le) == 0x3F82, "bf16 bytes: LE");
}

Test(dsv4_ref, sfatom_offsets) {
    static const struct { int64_t n, kb, KB, off; } cases[] = {
        {0, 0, 4, 0}, {1, 0, 4, 16}, {31, 0, 4, 496}, {32, 0, 4, 4}, {96, 3, 4, 15},
        {0, 1, 4, 1}, {0, 4, 8, 512}, {128, 0, 8, 1024}, {130, 5, 8, 1569}, {100, 6, 32, 590},
        {255, 7, 8, 2047}, {33, 2, 32, 22},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t off = mlr_sfatom_off(cases[i].n, cases[i].kb, cases[i].KB);
        cr_expect(off == cases[i].off, "sfatom_off(n=%lld, kb=%lld, KB=%lld): got %lld, expected %lld",
                  (long long)cases[i].n, (long long)cases[i].kb, (long long)cases[i].KB,
                  (long long)off, (long long)cases[i].off);
    }
    /* a bijection onto [0, N * KB) when N % 128 == 0 and KB % 4 == 0 */
    enum { N = 256, KB = 12 };
    static unsigned char seen[N * KB];
    for (int n = 0; n < N; n++)
        for (int kb = 0; kb < KB; kb++) {
            int64_t off = mlr_sfatom_off(n, kb, KB);
            cr_assert(off >= 0 && off < N * KB && !seen[off], "sfatom_off(%d, %d, %d) = %lld: out "
                      "of range or taken twice", n, kb, KB, (long long)off);
            seen[off] = 1;
        }
}

Test(dsv4_ref, quant_group_error_bound) {
    mlt_rng r;
    mlt_rng_init(&r, 12345);
    double x[1024], deq[1024];
    uint8_t q[1024], sf[32];
    for (int i = 0; i < 1024; i++) /* magnitudes over 2^-20 .. 2^20, some exact zeros */
        x[i] = (i % 97 == 0) ? 0.0 : ldexp(mlt_rng_uniform(&r) - 0.5, (int)mlt_rng_range(&r, -20, 20));
    mlr_quant_group(x, 1024, 32, deq, q, sf);
    for (int i = 0; i < 1024; i++) {
        double s = mlr_ue8m0_decode(sf[i / 32]), err = fabs(deq[i] - x[i]);
        cr_expect(deq[i] == mlr_e4m3_decode(q[i]) * s, "quant_group element %d: deq != byte * scale", i);
        cr_expect(err <= fmax(ldexp(fabs(x[i]), -4), ldexp(s, -10)),
                  "quant_group element %d: |%.6g - %.6g| over 2^-4 relative / half a subnormal step",
                  i, deq[i], x[i]);
    }
    for (int g = 0; g < 32; g++) {
        double amax = 0;
        for (int i = 0; i < 32; i++) amax = fmax(amax, fabs(x[32 * g + i]));
        cr_expect(sf[g] == mlr_ue8m0_for(amax, NULL), "quant_group group %d: scale byte", g);
    }
}

Test(dsv4_ref, rope_inverse_is_identity) {
    float f[64];
    double v[64], w[64], back[64];
    for (int i = 0; i < 32; i++) {
        double th = 1234 * pow(1e4, -2.0 * i / 64);
        f[2 * i] = (float)cos(th), f[2 * i + 1] = (float)sin(th);
    }
    for (int i = 0; i < 64; i++) v[i] = sin(i * 1.7) * 3;
    mlr_rope(v, f, 0, w);
    mlr_rope(w, f, 1, back);
    /* (float) cos^2 + sin^2 differs from 1 by ~1e-7 */
    for (int i = 0; i < 64; i++)
        cr_expect(fabs(back[i] - v[i]) < 1e-6, "rope then inverse rope, dim %d: %.12g vs %.12g", i,
                  back[i], v[i]);
    double e[64] = {1, 0, 0, 1};
    mlr_rope(e, f, 0, w);
    cr_expect(w[0] == (double)f[0] && w[1] == (double)f[1] && w[2] == -(double)f[3] &&
                  w[3] == (double)f[2], "rope of (1, 0), (0, 1): (c, s), (-s, c) of pair 0 / 1");
}

Test(dsv4_ref, rmsnorm_literal) {
    double x[4] = {1, -1, 1, -1}, out[4];
    uint16_t w[4] = {0x4000, 0x3F80, 0x3F80, 0x3F80}; /* 2, 1, 1, 1 */
    mlr_rmsnorm(x, w, 4, 0.0, out);
    cr_expect(out[0] == 2 && out[1] == -1, "rmsnorm of +-1 with gain (2, 1): got %g %g", out[0], out[1]);
    mlr_rmsnorm(x, NULL, 4, 3.0, out);
    cr_expect(fabs(out[0] - 0.5) < 1e-15, "rmsnorm with eps 3: 1 / sqrt(1 + 3), got %.17g", out[0]);
}

Test(dsv4_ref, kv_row_layout_and_round_trip) {
    enum { B = 4, STRIDE = 2880 }; /* ceil(4 * 584 / 576) * 576 */
    cr_expect(mlr_kv_row_off(B, STRIDE, 5) == 3456 && mlr_kv_scale_off(B, STRIDE, 5) == 5192,
              "kv row offsets of slot 5 (B 4, page 2880): row 3456, scales 5192");
    static uint8_t cache[3 * STRIDE];
    memset(cache, 0xAB, sizeof cache);
    mlt_rng r;
    mlt_rng_init(&r, 99);
    double y[512], got[512];
    for (int i = 0; i < 512; i++)
        y[i] = mlr_bf16((mlt_rng_uniform(&r) - 0.5) * ldexp(1, (int)(i / 64) * 3 - 9));
    for (int i = 0; i < 64; i++) y[64 + i] = 0; /* an all-zero tile: eps scale */
    y[3] = -1e-30;                                /* rounds to -0 */
    mlr_write_kv_row(cache, B, STRIDE, 5, y);
    mlr_decode_kv_row(cache, B, STRIDE, 5, got);
    const uint8_t *sc = cache + 5192;
    for (int c = 0; c < 7; c++) {
        double amax = 0;
        for (int i = 0; i < 64; i++) amax = fmax(amax, fabs(y[64 * c + i]));
        cr_expect(sc[c] == mlr_ue8m0_for(amax, NULL), "kv row tile %d: scale byte %d", c, sc[c]);
        for (int i = 0; i < 64; i++)
            cr_expect(fabs(got[64 * c + i] - y[64 * c + i]) <=
                          fmax(ldexp(fabs(y[64 * c + i]), -4), ldexp(mlr_ue8m0_decode(sc[c]), -10)),
                      "kv row value %d: decoded %.6g, written %.6g", 64 * c + i, got[64 * c + i],
                      y[64 * c + i]);
    }
    cr_expect(sc[7] == 0, "kv row: pad byte 7 is 0 (A8)");
    cr_expect(cache[3456 + 3] == 0x80, "kv row: a negative value rounding to 0 is 0x80");
    for (int i = 448; i < 512; i++) cr_expect(got[i] == y[i], "kv row: RoPE value %d exact", i);
    for (int i = 0; i < (int)sizeof cache; i++) {
        int in_row = i >= 3456 && i < 3456 + 576, in_sc = i >= 5192 && i < 5200;
        if (!in_row && !in_sc) cr_assert(cache[i] == 0xAB, "kv row: byte %d outside the row written", i);
    }
}

/* ---- attention and combine ------------------------------------------------------------------ */

static void random_rows(mlt_rng *r, double *rows, int n, double *q) {
    for (int i = 0; i < n * 512; i++) rows[i] = mlt_rng_uniform(r) * 2 - 1;
    for (int i = 0; i < 512; i++) q[i] = (mlt_rng_uniform(r) * 2 - 1) * 3;
}

static void check_combine(int n, const double *sink, const char *what) {
    mlt_rng r;
    mlt_rng_init(&r, 7 + n);
    double *rows = malloc(sizeof(double) * 512 * (n + 1)), q[512], O[512], lse, Os[4 * 512];
    double lses[4], C[512];
    random_rows(&r, rows, n, q);
    mlr_dsv4_attend(q, rows, n, 0.044, sink, O, &lse);
    int per = (n + 3) / 4; /* the split-KV contract: 4 parts of ceil(n / 4) rows */
    for (int s = 0; s < 4; s++) {
        int a = s * per < n ? s * per : n, b = (s + 1) * per < n ? (s + 1) * per : n;
        mlr_dsv4_attend(q, rows + (int64_t)a * 512, b - a, 0.044, NULL, Os + s * 512, &lses[s]);
    }
    mlr_dsv4_combine(4, Os, lses, sink, C);
    for (int i = 0; i < 512; i++)
        cr_expect(fabs(C[i] - O[i]) <= 1e-12 * (1 + fabs(O[i])), "combine %s n=%d dim %d: %.15g vs "
                  "unsplit %.15g", what, n, i, C[i], O[i]);
    free(rows);
}

Test(dsv4_ref, split_combine_equals_unsplit) {
    double sink = 1.5, big = 40;
    check_combine(37, NULL, "no sink");
    check_combine(37, &sink, "sink 1.5");
    check_combine(3, &sink, "sink, an empty part");
    check_combine(128, &big, "sink 40");
    check_combine(1, NULL, "one row, three empty parts");
}

Test(dsv4_ref, attend_edge_cases) {
    double row[512], q[512], O[512], lse, sink = 0.7;
    for (int i = 0; i < 512; i++) row[i] = i * 0.01 - 2, q[i] = 0.001 * i;
    mlr_dsv4_attend(q, row, 1, 0.5, NULL, O, &lse);
    for (int i = 0; i < 512; i++) cr_expect(O[i] == row[i], "single row, no sink: O == V (dim %d)", i);
    double sc = 0;
    for (int i = 0; i < 512; i++) sc += 0.5 * row[i] * q[i];
    cr_expect(fabs(lse - sc) < 1e-12, "single row: lse %.15g == score %.15g", lse, sc);
    mlr_dsv4_attend(q, row, 1, 0.5, &sink, O, &lse);
    double f = 1.0 / (1.0 + exp(sink - sc));
    for (int i = 0; i < 512; i++)
        cr_expect(fabs(O[i] - f * row[i]) < 1e-12, "single row with sink: O == V / (1 + e^(sink - "
                  "lse)) (dim %d)", i);
    mlr_dsv4_attend(q, row, 0, 0.5, &sink, O, &lse);
    cr_expect(O[0] == 0 && O[511] == 0 && lse == -INFINITY, "no rows: O = 0, lse = -inf");
}

/* ---- tiny layers ------------------------------------------------------------------------------ */

static mlt_dsv4_knobs tiny(int hca, int draft, int T, int sink) {
    mlt_dsv4_knobs k = {.hca = hca, .H = 512, .G = 2, .T = T, .draft = draft, .page_size = 128,
                        .layout = MLT_DSV4_LINEAR, .step = 1, .sink = sink, .wide = 1,
                        .fire = 1, .pool_block = 16};
    return k;
}

/* The new KV row: x -> mxq -> wkv -> bf16 -> RMSNorm -> bf16 -> RoPE -> bf16, computed here
 * again, within fp8 error of the decoded row at swa_loc. */
static void check_kv_row(const mlt_dsv4_case *c, const mlt_dsv4_expect *e, int t) {
    double x[4096], kv[512], dec[512];
    for (int k = 0; k < c->H; k++) x[k] = mlr_bf16_decode(c->x[t * c->x_cols + c->x_col0 + k]);
    mlr_quant_group(x, c->H, 32, x, NULL, NULL);
    mlr_dsv4_gemm_fp8(x, 1, c->wkv, c->wkv_sf, 512, c->H, kv);
    for (int i = 0; i < 512; i++) kv[i] = mlr_bf16(kv[i]);
    mlr_rmsnorm(kv, c->kv_norm, 512, c->kv_eps, kv);
    for (int i = 0; i < 512; i++) kv[i] = mlr_bf16(kv[i]);
    mlr_rope(kv + 448, c->freqs + (int64_t)c->positions[t] * 64, 0, kv + 448);
    for (int i = 448; i < 512; i++) kv[i] = mlr_bf16(kv[i]);
    mlr_decode_kv_row(e->kv_cache, c->k.page_size, c->page_bytes, c->swa_loc[t], dec);
    for (int i = 0; i < 512; i++)
        cr_expect(fabs(dec[i] - kv[i]) <= ldexp(fabs(kv[i]), -4) + 1e-6 && (i < 448 || dec[i] == kv[i]),
                  "tiny layer token %d: KV dim %d decoded %.6g, expected %.6g", t, i, dec[i], kv[i]);
}

Test(dsv4_ref, tiny_layer_invariants) {
    mlt_dsv4_knobs k = tiny(1, 3, 3, 1);
    mlt_dsv4_case c;
    mlt_dsv4_expect e;
    cr_assert(mlt_dsv4_case_make(&k, 11, 12, &c) == 0, "tiny HCA layer: case");
    cr_assert(mlt_dsv4_expect_make(&c, 1, &e) == 0, "tiny HCA layer: reference");
    cr_assert(c.positions[1] % 128 == 127, "tiny HCA layer: token 1 fires (position %d)", c.positions[1]);
    for (int t = 0; t < c.T; t++) {
        check_kv_row(&c, &e, t);
        cr_expect(e.res.rows[t] == e.res.plan[4 * t + 3] + c.c128_attn_len[t] && e.res.plan[4 * t + 3] == 128,
                  "tiny layer token %d: rows %d = 128 window + %d compressed", t, e.res.rows[t],
                  c.c128_attn_len[t]);
        double g = 0; /* ring column 5 of the token: float32(x . gate[5]) */
        for (int kk = 0; kk < c.H; kk++)
            g += mlr_bf16_decode(c.x[t * c.x_cols + c.x_col0 + kk]) * mlr_bf16_decode(c.wkv_gate[5 * c.H + kk]);
        cr_expect(e.ring[(int64_t)c.ring_row[t] * 1024 + 5] == (float)g, "tiny layer token %d: ring "
                  "value %.9g, expected %.9g", t, e.ring[(int64_t)c.ring_row[t] * 1024 + 5], (float)g);
    }
    for (int64_t i = 0; i < (int64_t)c.T * c.H; i++)
        cr_assert(isfinite(e.res.out[i]) && e.res.out[i] == mlr_bf16(e.res.out[i]),
                  "tiny layer: out[%lld] = %g not a finite bf16", (long long)i, e.res.out[i]);
    mlt_dsv4_expect_free(&e);
    mlt_dsv4_case_free(&c);
}

/* A5: the firing token (the second of three) sees the ring as of its own position: its pool row
 * equals that of a launch of the first two tokens only, although the third token overwrites ring
 * row 0 of its window. */
Test(dsv4_ref, compressor_sequential_in_verify) {
    mlt_dsv4_knobs k = tiny(1, 3, 3, 0);
    mlt_dsv4_case c;
    cr_assert(mlt_dsv4_case_make(&k, 21, 22, &c) == 0, "sequential compressor: case");
    int t = 1;
    int64_t slot = c.c128_out_loc[t];
    cr_assert(c.positions[t] % 128 == 127 && c.ring_row[2] == c.ring_row[t] - 127,
              "sequential compressor: token 1 fires, token 2 rewrites ring row 0 of its window");
    size_t pool_bytes = (size_t)(c.pool_pages * c.pool_page_bytes);
    size_t ring_bytes = sizeof(float) * (size_t)c.ring_rows * 1024;
    uint8_t *kv[2], *pool[2];
    float *ring[2];
    mlr_dsv4_result res[2];
    for (int i = 0; i < 2; i++) {
        kv[i] = malloc((size_t)(c.num_pages * c.page_bytes)), pool[i] = malloc(pool_bytes);
        ring[i] = malloc(ring_bytes);
        memcpy(kv[i], c.kv_cache, (size_t)(c.num_pages * c.page_bytes));
        memcpy(pool[i], c.pool, pool_bytes), memcpy(ring[i], c.ring, ring_bytes);
        mlr_dsv4_layer L;
        mlt_dsv4_layer_of(&c, kv[i], ring[i], pool[i], &L);
        L.T = 3 - i; /* the whole launch, then its first two tokens */
        cr_assert(mlr_dsv4_attention(&L, &res[i]) == 0, "sequential compressor: reference %d", i);
    }
    int64_t off = mlr_kv_row_off(c.pool_block, c.pool_page_bytes, slot);
    cr_expect(memcmp(pool[0] + off, pool[1] + off, 576) == 0,
              "sequential compressor: the fired row depends on a later token's ring write");
    cr_expect(memcmp(ring[0] + (int64_t)c.ring_row[2] * 1024, ring[1] + (int64_t)c.ring_row[2] * 1024,
                     4096) != 0, "sequential compressor: token 2 did not write its ring row");
    cr_expect(memcmp(ring[1] + (int64_t)c.ring_row[2] * 1024, c.ring + (int64_t)c.ring_row[2] * 1024,
                     4096) == 0, "sequential compressor: 2-token launch changed ring row 0");
    for (int i = 0; i < 2; i++) {
        mlr_dsv4_result_free(&res[i]);
        free(kv[i]), free(pool[i]), free(ring[i]);
    }
    mlt_dsv4_case_free(&c);
}

/* A window of one row (the token's own new row): O == decoded row / (1 + e^(sink - lse)). */
Test(dsv4_ref, single_row_attention_returns_v) {
    mlt_dsv4_knobs k = tiny(0, 0, 2, 1);
    mlt_dsv4_case c;
    mlt_dsv4_expect e;
    cr_assert(mlt_dsv4_case_make(&k, 31, 32, &c) == 0, "single row: case");
    for (int t = 0; t < c.T; t++) {
        c.topk_lengths[t] = 1;
        c.kv_indices[(int64_t)t * 128] = c.swa_loc[t];
    }
    cr_assert(mlt_dsv4_expect_make(&c, 0, &e) == 0, "single row: reference");
    double v[512];
    for (int t = 0; t < c.T; t++) {
        mlr_decode_kv_row(e.kv_cache, c.k.page_size, c.page_bytes, c.swa_loc[t], v);
        for (int h = 0; h < 64; h++) {
            double f = 1.0 / (1.0 + exp(c.sink[h] - e.res.lse[t * 64 + h]));
            const double *O = e.res.O + (int64_t)t * 32768 + h * 512;
            for (int i = 0; i < 512; i++)
                cr_assert(fabs(O[i] - f * v[i]) <= 1e-12 * (1 + fabs(v[i])), "single row token %d head "
                          "%d dim %d: O %.12g, V * factor %.12g", t, h, i, O[i], f * v[i]);
        }
    }
    mlt_dsv4_expect_free(&e);
    mlt_dsv4_case_free(&c);
}

/* The activation-quantization switch (A1) changes out by a few percent, not more. */
Test(dsv4_ref, quant_act_in_switch) {
    mlt_dsv4_knobs k = tiny(0, 0, 2, 0);
    mlt_dsv4_case c;
    cr_assert(mlt_dsv4_case_make(&k, 41, 42, &c) == 0, "quant switch: case");
    mlr_dsv4_result res[2];
    for (int i = 0; i < 2; i++) {
        uint8_t *kv = malloc((size_t)(c.num_pages * c.page_bytes));
        memcpy(kv, c.kv_cache, (size_t)(c.num_pages * c.page_bytes));
        mlr_dsv4_layer L;
        mlt_dsv4_layer_of(&c, kv, NULL, NULL, &L);
        L.quant_act_in = i;
        cr_assert(mlr_dsv4_attention(&L, &res[i]) == 0 && mlr_dsv4_output_proj(&L, res[i].O, &res[i]) == 0,
                  "quant switch: reference quant_act_in=%d", i);
        free(kv);
    }
    double d = mlt_rel_l2(res[0].out, res[1].out, (int64_t)c.T * c.H);
    cr_log_info("quant_act_in on vs off: out differs by %.4f (relative L2)", d);
    cr_expect(d > 1e-3 && d < 0.2, "quant switch: out differs by %.4g, expected a few percent", d);
    mlr_dsv4_result_free(&res[0]), mlr_dsv4_result_free(&res[1]);
    mlt_dsv4_case_free(&c);
}

/* Phase C is discontinuous in O: its two group-32 fp8 quantizations turn a tiny change of O
 * into a change of out that is a hundred times larger. This is why the GPU tests hold out to
 * 2e-2 against phase C of the kernel's own O and only to 5e-2 against the full reference. */
Test(dsv4_ref, out_sensitivity) {
    mlt_dsv4_knobs k = tiny(0, 0, 8, 0);
    mlt_dsv4_case c;
    cr_assert(mlt_dsv4_case_make(&k, 11, 22, &c) == 0, "out sensitivity: case");
    mlt_dsv4_expect e;
    cr_assert(mlt_dsv4_expect_make(&c, 1, &e) == 0, "out sensitivity: reference");
    mlr_dsv4_layer L;
    mlt_dsv4_layer_of(&c, e.kv_cache, e.ring, e.pool, &L);
    int64_t n = (int64_t)c.T * 32768;
    double *O = malloc(sizeof(double) * (size_t)n);
    cr_assert_not_null(O, "out sensitivity: memory");
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < n; i++) { /* O * (1 + 1e-4 u), u uniform with unit variance */
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        double u = ((double)(state >> 11) / 9007199254740992.0 - 0.5) * sqrt(12.0);
        O[i] = e.res.O[i] * (1 + 1e-4 * u);
    }
    mlr_dsv4_result moved = {0};
    cr_assert(mlr_dsv4_output_proj(&L, O, &moved) == 0, "out sensitivity: phase C");
    double d = mlt_rel_l2(moved.out, e.res.out, (int64_t)c.T * c.H);
    cr_log_info("O moved by 1e-4 (relative): out moves by %.3e", d);
    cr_expect(d > 3e-3, "out sensitivity: a 1e-4 change of O moved out by only %.3e; the "
              "tolerance argument of test_dsv4_layer_gpu.c no longer holds", d);
    mlr_dsv4_result_free(&moved);
    free(O);
    mlt_dsv4_expect_free(&e);
    mlt_dsv4_case_free(&c);
}

/* ---- the GPU tests' comparisons, on a perfect "kernel" built from the reference ---------------- */

/* got as a correct kernel would leave it: q_or_x = q (split launch), partials of one part, the
 * reference's caches. */
static void perfect_got(const mlt_dsv4_case *c, const mlt_dsv4_expect *e, mlt_dsv4_got *g) {
    int64_t n = (int64_t)c->T * 32768, nh = (int64_t)c->T * c->H;
    memset(g, 0, sizeof *g);
    g->q_or_x = malloc(n * 2), g->out = malloc(nh * 2);
    g->kv_cache = malloc(c->num_pages * c->page_bytes), g->pool = malloc(c->pool_pages * c->pool_page_bytes);
    g->ring = malloc(c->ring_rows * 4096);
    g->kv_splits = 4;
    g->part_o = calloc((size_t)c->T * 4 * 64 * 512, 4), g->part_lse = malloc((size_t)c->T * 4 * 64 * 4);
    cr_assert(g->q_or_x && g->out && g->kv_cache && g->pool && g->ring && g->part_o && g->part_lse,
              "perfect kernel: out of memory");
    for (int64_t i = 0; i < n; i++) g->q_or_x[i] = mlr_bf16_bits(e->res.q[i]);
    for (int64_t i = 0; i < nh; i++) g->out[i] = mlr_bf16_bits(e->res.out[i]);
    memcpy(g->kv_cache, e->kv_cache, c->num_pages * c->page_bytes);
    memcpy(g->pool, e->pool, c->pool_pages * c->pool_page_bytes);
    memcpy(g->ring, e->ring, c->ring_rows * 4096);
    for (int t = 0; t < c->T; t++)
        for (int h = 0; h < 64; h++) { /* part 0 holds everything (O without the sink), 1..3 empty */
            double lse = e->res.lse[t * 64 + h], f = c->sink ? 1 + exp(c->sink[h] - lse) : 1;
            for (int s = 0; s < 4; s++) g->part_lse[(t * 4 + s) * 64 + h] = s ? -INFINITY : (float)lse;
            for (int i = 0; i < 512; i++)
                g->part_o[((int64_t)t * 4 * 64 + h) * 512 + i] = (float)(e->res.O[(int64_t)t * 32768 + h * 512 + i] * f);
        }
}

Test(dsv4_ref, gpu_comparisons_detect_errors) {
    mlt_dsv4_knobs k = tiny(1, 3, 3, 1);
    mlt_dsv4_case c;
    mlt_dsv4_expect e;
    mlt_dsv4_got g;
    mlt_dsv4_errors x;
    cr_assert(mlt_dsv4_case_make(&k, 51, 52, &c) == 0 && mlt_dsv4_expect_make(&c, 1, &e) == 0,
              "comparisons: case and reference");
    perfect_got(&c, &e, &g);
    mlt_dsv4_compare(&c, &e, &g, 1, &x);
    cr_expect(x.split && x.O < 1e-6 && x.O_token < 1e-6 && x.q_split < 3e-3 && x.out == 0 &&
                  x.kv_row == 0 && x.pool_row == 0 && x.ring_row == 0 && x.nan == 0 &&
                  x.zero_bad == 0 && x.kv_stray == 0 && x.pool_stray == 0 && x.ring_stray == 0,
              "comparisons: a perfect kernel shows errors: O %g/%g q %g out %g kv %g pool %g ring %g "
              "nan %lld zero %lld stray %lld %lld %lld", x.O, x.O_token, x.q_split, x.out, x.kv_row,
              x.pool_row, x.ring_row, x.nan, x.zero_bad, x.kv_stray, x.pool_stray, x.ring_stray);
    int64_t row = mlr_kv_row_off(c.k.page_size, c.page_bytes, c.swa_loc[0]);
    int64_t sc = mlr_kv_scale_off(c.k.page_size, c.page_bytes, c.swa_loc[0]);
    g.kv_cache[sc + 7] ^= 0x5A;                                   /* pad byte: not compared */
    for (int i = 0; i < 448; i++)                                 /* +0 / -0: equal */
        if (g.kv_cache[row + i] == 0) g.kv_cache[row + i] = 0x80;
    mlt_dsv4_compare(&c, &e, &g, 1, &x);
    cr_expect(x.kv_row == 0 && x.kv_stray == 0, "comparisons: pad byte or -0 counted (%g, %lld)",
              x.kv_row, x.kv_stray);
    g.kv_cache[row + 100] ^= 0x80;                                /* a sign in a new row */
    g.kv_cache[(c.num_pages - 1) * c.page_bytes] = 0;             /* a byte of the unused last page */
    int64_t free_ring = 0;
    for (int t = 0; t < c.T; t++) free_ring = c.ring_row[t] == free_ring ? free_ring + 1 : free_ring;
    g.ring[free_ring * 1024] += 1.0f;
    g.out[5] = mlr_bf16_bits(mlr_bf16_decode(g.out[5]) * 1.5 + 1.0);
    g.q_or_x[7] = 0xFFFF;
    mlt_dsv4_compare(&c, &e, &g, 1, &x);
    cr_expect(x.kv_row > 1e-3 && x.kv_stray == 1, "comparisons: changed KV row (%g) / stray byte "
              "(%lld) not seen", x.kv_row, x.kv_stray);
    cr_expect(x.ring_stray == 1 && x.ring_row > 1e-5, "comparisons: stray ring row not seen");
    cr_expect(x.out_token > 1e-3 && x.nan == 1, "comparisons: changed out (%g) / NaN (%lld) not "
              "seen", x.out_token, x.nan);
    g.part_lse[3 * 64 + 9] = g.part_lse[9]; /* token 0, part 3, head 9: a row of ones */
    for (int i = 0; i < 512; i++) g.part_o[(3 * 64 + 9) * 512 + i] = 1.0f;
    mlt_dsv4_compare(&c, &e, &g, 1, &x);
    cr_expect(x.O_token > 1e-3, "comparisons: a wrong split partial not seen (%g)", x.O_token);
    mlt_dsv4_got_free(&g);
    mlt_dsv4_expect_free(&e);
    mlt_dsv4_case_free(&c);
}

/* The GPU layer test's KV row check (mlt_dsv4_row_off_steps): rows within one rounding step of
 * the reference's pass, including a block whose UE8M0 scale moved by one; a value two steps off or
 * a scale two exponents off is counted. */
Test(dsv4_ref, kv_row_off_steps) {
    enum { B = 4, STRIDE = 2880 };
    static uint8_t ref[STRIDE], got[STRIDE];
    mlt_rng r;
    mlt_rng_init(&r, 7);
    double y[512], z[512], a[512], b[512];
    for (int i = 0; i < 512; i++) y[i] = mlr_bf16(mlt_rng_uniform(&r) - 0.5);
    y[64 * 2] = 0.8749;  /* block 2's amax just under 448 2^-9: z moves it over (scale doubles) */
    memset(ref, 0, sizeof ref);
    mlr_write_kv_row(ref, B, STRIDE, 1, y);
    mlr_decode_kv_row(ref, B, STRIDE, 1, b);
    /* the same values as summed in another order: relative 1e-6 apart, block 2's amax over 1 */
    for (int i = 0; i < 512; i++) z[i] = i < 448 ? y[i] * (1 + 1e-6 * (mlt_rng_uniform(&r) - 0.5)) : y[i];
    z[64 * 2] = 0.8751;
    memset(got, 0, sizeof got);
    mlr_write_kv_row(got, B, STRIDE, 1, z);
    mlr_decode_kv_row(got, B, STRIDE, 1, a);
    const uint8_t *sa = got + mlr_kv_scale_off(B, STRIDE, 1), *sb = ref + mlr_kv_scale_off(B, STRIDE, 1);
    cr_assert(sa[2] == sb[2] + 1, "block 2's scale moved by one exponent: %d vs %d", sa[2], sb[2]);
    cr_expect(mlt_dsv4_row_off_steps(got, ref, B, STRIDE, 1, a, b, NULL) == 0,
              "a row within one step (block 2 on the coarser grid): %lld elements off",
              mlt_dsv4_row_off_steps(got, ref, B, STRIDE, 1, a, b, NULL));
    cr_expect(mlt_dsv4_row_off_steps(ref, ref, B, STRIDE, 1, b, b, NULL) == 0, "a row against itself");
    /* element 5 (block 0) two steps up: its code + 2 (same sign, no binade edge at this value;
     * two steps there are far above the slack of 1e-3 of the block's amax) */
    memcpy(got, ref, sizeof got);
    uint8_t *d = got + mlr_kv_row_off(B, STRIDE, 1);
    d[5] = (uint8_t)(d[5] + 2);
    mlr_decode_kv_row(got, B, STRIDE, 1, a);
    mlt_dsv4_off_elem w = {0, 0, 0, 0, 0, -1, 0};
    cr_expect(mlt_dsv4_row_off_steps(got, ref, B, STRIDE, 1, a, b, &w) == 1,
              "one e4m3 element two codes off: %lld counted",
              mlt_dsv4_row_off_steps(got, ref, B, STRIDE, 1, a, b, NULL));
    cr_expect(w.index == 5 && w.slot == 1 && w.ratio > 1 && w.got == a[5] && w.ref == b[5],
              "the furthest element recorded: slot %lld element %d ratio %g",
              (long long)w.slot, w.index, w.ratio);
    d[5] = (uint8_t)(d[5] - 1);  /* one code off: in step */
    mlr_decode_kv_row(got, B, STRIDE, 1, a);
    cr_expect(mlt_dsv4_row_off_steps(got, ref, B, STRIDE, 1, a, b, NULL) == 0, "one code off: in step");
    /* a RoPE value (bf16) two steps off */
    memcpy(got, ref, sizeof got);
    uint16_t v;
    memcpy(&v, d + 448 + 2 * 3, 2);
    v = (uint16_t)(v + 2);
    memcpy(d + 448 + 2 * 3, &v, 2);
    mlr_decode_kv_row(got, B, STRIDE, 1, a);
    cr_expect(mlt_dsv4_row_off_steps(got, ref, B, STRIDE, 1, a, b, NULL) == 1,
              "one bf16 element two steps off: %lld counted",
              mlt_dsv4_row_off_steps(got, ref, B, STRIDE, 1, a, b, NULL));
    /* block 4's scale two exponents up: the whole block counts */
    memcpy(got, ref, sizeof got);
    got[mlr_kv_scale_off(B, STRIDE, 1) + 4] = (uint8_t)(sb[4] + 2);
    mlr_decode_kv_row(got, B, STRIDE, 1, a);
    cr_expect(mlt_dsv4_row_off_steps(got, ref, B, STRIDE, 1, a, b, NULL) == 64,
              "a scale two exponents off: %lld counted (64 expected)",
              mlt_dsv4_row_off_steps(got, ref, B, STRIDE, 1, a, b, NULL));
}
