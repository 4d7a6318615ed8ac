/* Kind builders of the DSV4 kernels, referenced by the kernel-kind table in runtime/spec.c. Each
 * writes the name expression to compile and the launch needs of a spec (see mla__kernel_kind). */
#ifndef MLAJIT_DSV4_KINDS_H
#define MLAJIT_DSV4_KINDS_H

#include <stddef.h>

#include "mlajit/mlajit.h"

struct mla__spec;
struct mla__launch_info;

/* "dsv4_attention": params H, page_size, draft_tokens, hca (runtime/dsv4_attention.c). */
mla_status mla__dsv4_attention_build(const struct mla__spec *spec, char *name_expr, size_t size,
                                     struct mla__launch_info *launch);
/* "dsv4_output_proj_a" (combine, inverse RoPE, quant, grouped wo_a) and "dsv4_output_proj_b"
 * (quant, wo_b): params H, G (runtime/dsv4_output_proj.c). */
mla_status mla__dsv4_output_proj_a_build(const struct mla__spec *spec, char *name_expr, size_t size,
                                         struct mla__launch_info *launch);
mla_status mla__dsv4_output_proj_b_build(const struct mla__spec *spec, char *name_expr, size_t size,
                                         struct mla__launch_info *launch);
/* "dsv4_output_proj_a_stream" and "dsv4_output_proj_b_stream": the T <= 64 weight-streaming
 * variants, params H, G, NT (8-token tiles: 1, 2, 4, 8). */
mla_status mla__dsv4_output_proj_a_stream_build(const struct mla__spec *spec, char *name_expr,
                                                size_t size, struct mla__launch_info *launch);
mla_status mla__dsv4_output_proj_b_stream_build(const struct mla__spec *spec, char *name_expr,
                                                size_t size, struct mla__launch_info *launch);
/* "dsv4_output_proj_stream": both stream GEMMs in one launch, params H, G, NT (1 or 2). */
mla_status mla__dsv4_output_proj_stream_build(const struct mla__spec *spec, char *name_expr,
                                              size_t size, struct mla__launch_info *launch);

/* The TMA descriptors of a stream GEMM (sgemm::Maps of kernel_src/common/stream_gemm.cuh, a
 * kernel parameter by value), runtime/dsv4_tma.c: W [w_rows, w_cols] uint8 with row stride ldw
 * in boxes of 128 columns x bn rows, A [a_rows, a_cols] likewise in boxes of 128 x tp, W's SfAtom
 * scales in boxes of atoms_per_stage blocks. */
typedef struct mla__dsv4_maps {
    CUtensorMap w, a, sf;
} mla__dsv4_maps;
struct mla_runtime;
mla_status mla__dsv4_stream_maps(struct mla_runtime *rt, mla__dsv4_maps *m, CUdeviceptr w,
                                 long long w_cols, long long w_rows, long long ldw, int bn,
                                 CUdeviceptr a, long long a_cols, long long a_rows, long long lda,
                                 int tp, CUdeviceptr w_sf, int atoms_per_stage);
/* One uint8 2-D descriptor of such a map alone ([rows, cols] with row stride ld, boxes of 128
 * columns x box_rows, 128-byte swizzle): the bf16 stream GEMM's operands, as bytes. */
mla_status mla__dsv4_byte_map(struct mla_runtime *rt, CUtensorMap *map, CUdeviceptr p,
                              long long cols, long long rows, long long ld, int box_rows,
                              const char *what);

#endif
