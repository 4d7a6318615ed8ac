/* Float64 scalar helpers of the DSV4 reference, transcribed from spec/dsv4.md §2.0, §2.3, §3.1
 * and §3.3: bf16 rounding, float8_e4m3fn and ue8m0 codes, group quantization, RMSNorm, RoPE, the
 * SfAtom scale offset and the 576 + 8 byte KV row. Everything is exact in float64 unless noted. */
#ifndef MLAJIT_TESTS_REF_DSV4_NUMERICS_H
#define MLAJIT_TESTS_REF_DSV4_NUMERICS_H

#include <stdint.h>

#define MLR_DSV4_HEADS 64
#define MLR_DSV4_D 512        /* head dim = kv_lora rank */
#define MLR_DSV4_DN 448       /* NoPE dims */
#define MLR_DSV4_DR 64        /* RoPE dims */
#define MLR_DSV4_QL 1024      /* q_lora rank */
#define MLR_DSV4_OCOLS 32768  /* 64 heads x 512 */
#define MLR_DSV4_ROW 576      /* bytes of one KV row: 448 e4m3 + 64 bf16 */
#define MLR_DSV4_SLOT 8       /* bytes of one scale slot: 7 ue8m0 + pad */
#define MLR_DSV4_WIN 128      /* sliding window and c128 ratio */

/* ---- bfloat16 ----------------------------------------------------------------------------- */

/* Bits of bf16(x): float32(x) (RNE), then RNE of its low 16 bits. NaN stays NaN. */
uint16_t mlr_bf16_bits(double x);
/* Value of bf16 bits. */
double mlr_bf16_decode(uint16_t bits);
/* x rounded onto the bf16 grid. */
double mlr_bf16(double x);

/* ---- float8_e4m3fn and ue8m0 -------------------------------------------------------------- */

/* e4m3(x) of §2.0: RNE, saturating at +-448, subnormal step 2^-9. */
double mlr_e4m3(double x);
/* The byte of e4m3(x); a negative x (or -0) that rounds to zero gives 0x80 (§5). Never 0x7F/0xFF. */
uint8_t mlr_e4m3_encode(double x);
/* Value of an e4m3 byte; 0x7F / 0xFF give NaN. */
double mlr_e4m3_decode(uint8_t b);
/* 2^(b - 127); 255 gives NaN. */
double mlr_ue8m0_decode(uint8_t b);
/* ue8m0_for(amax) of §2.0 with eps 1e-4 (A3): e = ceil(log2(max(amax, 1e-4) / 448)), clamped to
 * [-127, 127]. Returns the byte e + 127 and writes 2^e to *scale (may be NULL). */
uint8_t mlr_ue8m0_for(double amax, double *scale);

/* quant_group(x, g) of §2.0 over n values (n % g == 0): deq[i] = e4m3(clip(x/s, +-448)) * s with
 * one scale per group of g. Any of deq, q (e4m3 bytes, n) and sf (ue8m0 bytes, n / g) may be
 * NULL. deq may alias x. */
void mlr_quant_group(const double *x, int64_t n, int g, double *deq, uint8_t *q, uint8_t *sf);

/* ---- norms and RoPE ----------------------------------------------------------------------- */

/* out = x / sqrt(mean(x^2) + eps) * (w ? w : 1); w holds bf16 bits. out may alias x. */
void mlr_rmsnorm(const double *x, const uint16_t *w, int n, double eps, double *out);
/* RoPE of §2.3 on 64 values (32 pairs) with f = freqs_real[p] (32 interleaved cos, sin);
 * inverse != 0 rotates by the conjugate. out may alias v. */
void mlr_rope(const double *v, const float *f, int inverse, double *out);

/* ---- layouts ------------------------------------------------------------------------------ */

/* Byte offset of the ue8m0 scale of weight row n, K-block kb (= k / 32) in a SfAtom-ordered
 * scale tensor of KB = Kw / 32 blocks per row (§3.3). */
int64_t mlr_sfatom_off(int64_t n, int64_t kb, int64_t KB);

/* write_kv_row of §2.3 / §3.1: row y[512] (its RoPE part is stored as bf16, the NoPE part as 7
 * tiles of 64 e4m3 with a ue8m0 scale each, pad byte 0) into slot of a cache of B rows per page
 * and page_stride bytes per page. */
void mlr_write_kv_row(uint8_t *cache, int64_t B, int64_t page_stride, int64_t slot,
                      const double *y);
/* The dequantized row (the attention's K and V) of slot: 448 e4m3 * 2^(sc - 127), 64 bf16. */
void mlr_decode_kv_row(const uint8_t *cache, int64_t B, int64_t page_stride, int64_t slot,
                       double *out);
/* Byte offsets of slot's 576-byte row and 8-byte scale slot. */
int64_t mlr_kv_row_off(int64_t B, int64_t page_stride, int64_t slot);
int64_t mlr_kv_scale_off(int64_t B, int64_t page_stride, int64_t slot);

/* Little-endian bytes of bf16 bits and back. */
void mlr_bf16_store(uint8_t *p, uint16_t bits);
uint16_t mlr_bf16_load(const uint8_t *p);

#endif
