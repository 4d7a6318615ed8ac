/* mlajit bench: what the case files share with the driver in bench.c. A case appends one or more
 * result rows to the context; all driver calls go through the runtime's table (rt->drv). */
#ifndef MLAJIT_TOOLS_BENCH_H
#define MLAJIT_TOOLS_BENCH_H

#include "tools/cli.h"

/* Measured ceilings of the H200 (docs/PERF.md): fractions are printed on H200-class devices. */
#define CEIL_COPY_GBPS 4280.0
#define CEIL_BF16_TFLOPS 672.0
#define CEIL_FP8_TFLOPS 1250.0

#define MAX_ROWS 96

typedef enum precision { PREC_NONE = 0, PREC_BF16, PREC_FP8 } precision;

/* One line of the table. Negative gbps / tflops: not meaningful. */
typedef struct bench_row {
    char name[32];
    double us;
    double gbps, tflops;
    precision prec;
    char note[160];
} bench_row;

typedef struct bench_ctx {
    mla_runtime *rt;            /* device runtime, default cache */
    mla_runtime_info info;
    int iters;                  /* 0: each case's default */
    int h200;                   /* print fractions of the ceilings */
    bench_row rows[MAX_ROWS];
    int n_rows;
} bench_ctx;

typedef struct bench_case {
    const char *name;
    const char *what;
    int (*run)(bench_ctx *ctx); /* CLI_OK or CLI_FAIL (message printed) */
} bench_case;

/* Appends a row (the last row is reused when the table is full). */
bench_row *bench_add_row(bench_ctx *ctx, const char *name, double us);
/* A DLTensor over device memory p (compact: strides NULL). shape must outlive t. */
void bench_tensor(DLTensor *t, CUdeviceptr p, int device, int ndim, int64_t *shape, DLDataType dt);
/* xorshift64 step (s != 0); uniform in [0, 1); standard normal (Box-Muller). */
uint64_t bench_rng(uint64_t *s);
double bench_uniform(uint64_t *s);
double bench_gauss(uint64_t *s);
/* float -> bfloat16 bits, round to nearest even. */
uint16_t bench_bf16_bits(float f);
/* float -> e4m3 (OCP E4M3FN) byte, round to nearest even, saturating at +-448. */
uint8_t bench_e4m3_bits(float f);
/* Fills n elements at dst with N(0, 1) values: bf16 (elem_bytes 2) or e4m3 (1). One host pool of
 * BENCH_POOL random values (an odd count, so tiled rows differ) is uploaded again and again.
 * Returns CLI_OK, or CLI_FAIL with the error printed. */
#define BENCH_POOL (((size_t)1 << 22) + 1)
int bench_fill_normal(mla_runtime *rt, CUdeviceptr dst, size_t n, int elem_bytes, uint64_t seed);

/* Waits for a case's stream and destroys it; NULL is a no-op (for the cases' done paths). */
void bench_stream_release(mla_runtime *rt, CUstream stream);

/* Prints "<case>: <what>: <last error>"; returns CLI_FAIL. */
int bench_case_fail(const char *name, const char *what);

/* Prints a failed driver call's message and jumps to done. */
#define BENCH_CU(rt, call)                                                                       \
    do {                                                                                         \
        if (mla__cu_check(&(rt)->drv, (rt)->drv.call, #call, __FILE__, __LINE__) != MLA_OK) {   \
            cli_fail("bench", "%s", mla_last_error());                                           \
            goto done;                                                                           \
        }                                                                                        \
    } while (0)


/* The DSV4 plan cases (bench_plan.c). */
int bench_plan_compile(bench_ctx *ctx);
int bench_plan_load(bench_ctx *ctx);
int bench_plan_call(bench_ctx *ctx);
int bench_plan_gpu(bench_ctx *ctx);

/* The DSV4 layer cases (bench_dsv4.c): mla_attention + mla_output_proj of one layer, H = 4096,
 * G = 8, for T decode tokens; SWA and HCA layers. */
int bench_dsv4_swa_1(bench_ctx *ctx);
int bench_dsv4_swa_4(bench_ctx *ctx);
int bench_dsv4_swa_16(bench_ctx *ctx);
int bench_dsv4_swa_64(bench_ctx *ctx);
int bench_dsv4_swa_256(bench_ctx *ctx);
int bench_dsv4_swa_640(bench_ctx *ctx);
int bench_dsv4_hca_1(bench_ctx *ctx);
int bench_dsv4_hca_4(bench_ctx *ctx);
int bench_dsv4_hca_16(bench_ctx *ctx);
int bench_dsv4_hca_64(bench_ctx *ctx);
int bench_dsv4_hca_256(bench_ctx *ctx);
int bench_dsv4_hca_640(bench_ctx *ctx);

/* The FlashMLA-compatible dense decode cases (bench_flashmla.c): issue 4's table, h_kv 1. */
int bench_flashmla_dense_s1(bench_ctx *ctx);
int bench_flashmla_dense_s2(bench_ctx *ctx);
int bench_flashmla_dense_heads(bench_ctx *ctx);
int bench_flashmla_dense_pages(bench_ctx *ctx);
int bench_flashmla_dense_long(bench_ctx *ctx);
int bench_flashmla_dense_fp8(bench_ctx *ctx);

/* The FlashMLA-compatible sparse cases (bench_flashmla_sparse.c): issue 5's table, sparse decode
 * over 656-byte fp8 rows and sparse prefill over bf16 rows, topk 2048. */
int bench_flashmla_sparse_decode_h128(bench_ctx *ctx);
int bench_flashmla_sparse_decode_h64(bench_ctx *ctx);
int bench_flashmla_sparse_decode_h16(bench_ctx *ctx);
int bench_flashmla_sparse_prefill_h128(bench_ctx *ctx);
int bench_flashmla_sparse_prefill_h64(bench_ctx *ctx);
int bench_flashmla_sparse_prefill_h16(bench_ctx *ctx);

/* The fake-quant cases (bench_fakequant.c): decode b 128, h 128, page 64, L 4096 / 16384 in
 * every K/V/P quant mode; prefill of one causal 8192-token sequence, h 128, dims 192/128, in
 * modes none / all fp8 / all nvfp4 and with 2:4 sparsity. */
int bench_fakequant_decode_4k(bench_ctx *ctx);
int bench_fakequant_decode_16k(bench_ctx *ctx);
int bench_fakequant_decode_p(bench_ctx *ctx);
int bench_fakequant_decode_b4(bench_ctx *ctx);
int bench_fakequant_decode_none(bench_ctx *ctx);
int bench_fakequant_decode_kv(bench_ctx *ctx);
int bench_fakequant_decode_mix(bench_ctx *ctx);
int bench_fakequant_prefill_8k(bench_ctx *ctx);

#endif /* MLAJIT_TOOLS_BENCH_H */
