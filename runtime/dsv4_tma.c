/* The TMA descriptors of the DSV4 stream GEMMs (kernel_src/common/stream_gemm.cuh, sgemm::Maps):
 * W and A as 2-D uint8 tensors with 128-byte swizzled boxes of 128 columns, W's SfAtom scales as
 * a 2-D uint32 tensor of 512-byte blocks. Built on the host per call (the weight pointers may
 * change), passed by value as a kernel parameter, so graph capture keeps them. */
#include <string.h>

#include "runtime/dsv4_kinds.h"
#include "runtime/internal.h"

static mla_status encode(mla_runtime *rt, CUtensorMap *map, CUtensorMapDataType type, CUdeviceptr p,
                         cuuint64_t cols, cuuint64_t rows, cuuint64_t stride, cuuint32_t box_cols,
                         cuuint32_t box_rows, CUtensorMapSwizzle swizzle, const char *what) {
    const cuuint64_t dim[2] = {cols, rows};
    const cuuint64_t strides[1] = {stride};
    const cuuint32_t box[2] = {box_cols, box_rows};
    const cuuint32_t estride[2] = {1, 1};
    CUresult r = rt->drv.cuTensorMapEncodeTiled(
        map, type, 2, (void *)(uintptr_t)p, dim, strides, box, estride,
        CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return mla__cu_check(&rt->drv, r, what, __FILE__, __LINE__);
}

mla_status mla__dsv4_stream_maps(mla_runtime *rt, mla__dsv4_maps *m, CUdeviceptr w,
                                 long long w_cols, long long w_rows, long long ldw, int bn,
                                 CUdeviceptr a, long long a_cols, long long a_rows, long long lda,
                                 int tp, CUdeviceptr w_sf, int atoms_per_stage) {
    memset(m, 0, sizeof *m);
    MLA_FORWARD_IF_ERROR(encode(rt, &m->w, CU_TENSOR_MAP_DATA_TYPE_UINT8, w, (cuuint64_t)w_cols,
                                (cuuint64_t)w_rows, (cuuint64_t)ldw, 128, (cuuint32_t)bn,
                                CU_TENSOR_MAP_SWIZZLE_128B, "stream GEMM W descriptor"));
    MLA_FORWARD_IF_ERROR(encode(rt, &m->a, CU_TENSOR_MAP_DATA_TYPE_UINT8, a, (cuuint64_t)a_cols,
                                (cuuint64_t)a_rows, (cuuint64_t)lda, 128, (cuuint32_t)tp,
                                CU_TENSOR_MAP_SWIZZLE_128B, "stream GEMM A descriptor"));
    /* SfAtom: per 128-row block of W and K-atom of 128 columns, 512 bytes. */
    long long blocks = (w_rows + 127) / 128 * ((w_cols / 32 + 3) / 4);
    return encode(rt, &m->sf, CU_TENSOR_MAP_DATA_TYPE_UINT32, w_sf, 128, (cuuint64_t)blocks, 512,
                  128, (cuuint32_t)atoms_per_stage, CU_TENSOR_MAP_SWIZZLE_NONE,
                  "stream GEMM scale descriptor");
}

mla_status mla__dsv4_byte_map(mla_runtime *rt, CUtensorMap *map, CUdeviceptr p, long long cols,
                              long long rows, long long ld, int box_rows, const char *what) {
    memset(map, 0, sizeof *map);
    return encode(rt, map, CU_TENSOR_MAP_DATA_TYPE_UINT8, p, (cuuint64_t)cols, (cuuint64_t)rows,
                  (cuuint64_t)ld, 128, (cuuint32_t)box_rows, CU_TENSOR_MAP_SWIZZLE_128B, what);
}
