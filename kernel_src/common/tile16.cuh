// 16-bit operand helpers of the mma.sync kernels (flashmla/attn_tile.cuh, fakequant/decode_mma.cu,
// fakequant/prefill_mma.cu): the XOR-swizzled tile offset and the packing of a float pair.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace mla {

// Byte offset of 16-byte chunk c of row r in a swizzled tile of rows of `row_bytes`.
__device__ __forceinline__ unsigned swz(int r, int c, int row_bytes) {
    return (unsigned)(r * row_bytes + ((c ^ (r & 7)) << 4));
}

// Two floats as a packed 16-bit pair (fp16 when kF16, else bf16; round to nearest even), lo in
// the low half.
template <bool kF16>
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
    if constexpr (kF16) {
        __half2 h = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<unsigned *>(&h);
    } else {
        __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<unsigned *>(&h);
    }
}

}  // namespace mla
