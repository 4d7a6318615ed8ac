// Developer check of fp8::e4m3x8_to_bf16 (kernel_src/common/fp8.cuh) on the device (not built by
// CMake): for every ue8m0 exponent e in [-127, 128] and units of 8 codes that put each of the 256
// codes in each of the 8 positions, plus 2^22 random units, the fast path's bits must equal the
// float path's (decode_e4m3 + pack_bf16x8, the DSV4 attention's dequantization before it) wherever
// e4m3x8_bf16_fast_ok holds, and fast_ok must hold exactly when e <= 7 and no code is NaN
// (0x7F / 0xFF). Prints the counts and exits 1 on any mismatch (or CUDA error). The helpers come with
// docs/wip/dsv4-dequant-int.patch (until it lands, -I a patched copy of kernel_src). Build and run:
//   nvcc -O3 -std=c++17 -arch=sm_90a -I<kernel_src with the patch> -o e4m3_bf16_check tools/e4m3_bf16_check.cu
//   ./e4m3_bf16_check
#include <cstdio>
#include <cuda_runtime.h>

#include "common/bf16.cuh"
#include "common/fp8.cuh"
#include "cuda_check.cuh"
using namespace mla;


struct Counts {
    unsigned long long checked, fast, wrong_bits, wrong_ok;
};

__device__ unsigned long long mix(unsigned long long x) {
    x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

// Unit u of exponent row blockIdx.y: u < 256 the structured units, else random ones.
__global__ void check(Counts *c, int units) {
    const int e = (int)blockIdx.y - 127;
    unsigned long long checked = 0, fast = 0, wrong_bits = 0, wrong_ok = 0;
    for (int u = blockIdx.x * blockDim.x + threadIdx.x; u < units; u += gridDim.x * blockDim.x) {
        unsigned b[8];
        if (u < 256) {
            for (int k = 0; k < 8; ++k) b[k] = (unsigned)(u + 37 * k) & 255u;
        } else {
            const unsigned long long r = mix((unsigned long long)u * 0x9e3779b97f4a7c15ull + e);
            for (int k = 0; k < 8; ++k) b[k] = (unsigned)(r >> (8 * k)) & 255u;
        }
        const uint2 q = make_uint2(b[0] | b[1] << 8 | b[2] << 16 | b[3] << 24,
                                   b[4] | b[5] << 8 | b[6] << 16 | b[7] << 24);
        bool nan = false;
        for (int k = 0; k < 8; ++k) nan = nan || (b[k] & 0x7fu) == 0x7fu;
        const bool ok = fp8::e4m3x8_bf16_fast_ok(q, e);
        wrong_ok += ok != (e <= 7 && !nan);
        ++checked;
        if (!ok) continue;
        ++fast;
        const uint4 got = fp8::e4m3x8_to_bf16(q, e);
        const unsigned w[2] = {q.x, q.y};
        float v[8];
        fp8::decode_e4m3<8>(w, e, v);
        const uint4 want = pack_bf16x8(v);
        const bool differ = got.x != want.x || got.y != want.y || got.z != want.z || got.w != want.w;
        wrong_bits += differ;
        if (differ && wrong_bits <= 2)
            printf("e %d codes %08x %08x: got %08x %08x %08x %08x want %08x %08x %08x %08x\n", e,
                   q.x, q.y, got.x, got.y, got.z, got.w, want.x, want.y, want.z, want.w);
    }
    atomicAdd(&c->checked, checked), atomicAdd(&c->fast, fast);
    atomicAdd(&c->wrong_bits, wrong_bits), atomicAdd(&c->wrong_ok, wrong_ok);
}

int main() {
    Counts *c;
    CK(cudaMallocManaged(&c, sizeof *c));
    *c = Counts{};
    const int units = 256 + (1 << 22) / 256;  // per exponent: the structured units + random ones
    check<<<dim3(16, 256), 256>>>(c, units);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    printf("e4m3x8_to_bf16: %llu units checked (e -127..128), %llu on the fast path, %llu with "
           "other bits than the float path, %llu with a wrong fast_ok\n",
           c->checked, c->fast, c->wrong_bits, c->wrong_ok);
    const bool pass = c->wrong_bits == 0 && c->wrong_ok == 0 && c->fast > 0;
    printf("%s\n", pass ? "PASS" : "FAIL");
    return pass ? 0 : 1;
}
