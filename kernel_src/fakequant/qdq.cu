// Fake quantize-dequantize of rows (spec/fakequant.md §2.1, §2.5): mla_fakequant_qdq_rows, the
// caller's dynamic NVFP4 of q with an fp32 carrier, and the device side of the exact quantizer
// tests.
//
// Template parameters (the spec "fakequant_qdq" fixes them): kIn, the dtype of x (0 float32,
// 1 bfloat16, 2 float16); kMode, fp8 (1) or nvfp4 (2).
//
// Math: fp8: out[i] = fp8_qdq(x[i], scale) elementwise; nvfp4: each run of 16 elements
// [16 k, 16 k + 16) is one block, out = nvfp4 blocks of global scale `scale` (quant.cuh).
//
// Buffers: x [n] of kIn, out [n] float32, both contiguous (n a multiple of 16 for nvfp4).
// Grid ceil(items / 256), 256 threads; an item is an element (fp8) or a block (nvfp4).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "fakequant/quant.cuh"

namespace mla {
namespace fakequant {

constexpr int kQdqThreads = 256;

template <int kIn>
__device__ __forceinline__ float load_elem(const void *x, long long i) {
    if constexpr (kIn == 1) return __bfloat162float(static_cast<const __nv_bfloat16 *>(x)[i]);
    else if constexpr (kIn == 2) return __half2float(static_cast<const __half *>(x)[i]);
    else return static_cast<const float *>(x)[i];
}

template <int kIn, int kMode>
__global__ void __launch_bounds__(kQdqThreads) qdq_rows_kernel(const void *x, float *out,
                                                               long long n, float scale) {
    long long item = (long long)blockIdx.x * kQdqThreads + threadIdx.x;
    if constexpr (kMode == kFp8) {
        if (item < n) out[item] = fp8_qdq(load_elem<kIn>(x, item), scale);
    } else {
        if (item * 16 >= n) return;
        float v[16];
#pragma unroll
        for (int i = 0; i < 16; i++) v[i] = load_elem<kIn>(x, item * 16 + i);
        nvfp4_qdq16(v, scale);
#pragma unroll
        for (int i = 0; i < 16; i++) out[item * 16 + i] = v[i];
    }
}

}  // namespace fakequant
}  // namespace mla
