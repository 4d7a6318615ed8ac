// Developer probe (not built by CMake): how fast DRAM streams a 32 MB fp8 weight matrix into
// shared memory through the bulk tensor copy engine, by the shape of the copies, with no math.
// The question it answers: whether the stream GEMMs' stage shape (W boxes of BN rows x 128 B,
// kAtoms of them a stage: 256-512 contiguous bytes per row at a time) limits their DRAM rate.
// Each CTA owns blocks of BR rows (blocks b, b + grid, ..) and walks their K in stages of KS
// bytes a row through a ring of S stages (one producer thread, one consumer warp that releases
// each stage as soon as it has landed). Patterns:
//   2d   a 2-D map {C, R}, box {128, BR} (128-byte swizzle), KS / 128 boxes a stage (the library's)
//   4d   a 4-D map {128, 8, C / 128, R / 8} (strides C, 128, 8 C), box {128, 8, KS / 128, BR / 8}:
//        one box a stage, the same bytes, the smem layout [8-row group][128-B column][row][128 B]
//   1d   a bulk copy of BR x KS contiguous bytes (a pre-packed layout's stage)
//   ld   no shared memory: 16-byte loads of the same 32 MB by every thread (the copy reference)
// Four rotating copies (128 MB, over the 60 MB L2), 40 launches, time per launch from events.
// Build and run on the H200:
//   nvcc -O3 -std=c++17 -arch=sm_90a -o stream_probe tools/stream_probe.cu -lcuda && ./stream_probe
#include <cstdio>
#include <cstdlib>
#include <cuda.h>
#include <cuda_runtime.h>

#include "cuda_check.cuh"

enum Pattern { k2d, k4d, k1d, kLd };
struct Probe {
    int pattern, R, C, BR, KS, S;
};

__device__ __forceinline__ unsigned su32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void bar_init(unsigned b, unsigned n) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(b), "r"(n) : "memory");
}
__device__ __forceinline__ void bar_expect(unsigned b, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bar_arrive(unsigned b) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(b) : "memory");
}
__device__ __forceinline__ void bar_wait(unsigned b, unsigned par) {
    asm volatile("{\n.reg .pred p;\nW: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra W;\n}\n"
                 ::"r"(b), "r"(par) : "memory");
}
__device__ __forceinline__ void tma2(unsigned dst, const CUtensorMap *m, int c0, int c1, unsigned b) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 ::"r"(dst), "l"(m), "r"(c0), "r"(c1), "r"(b) : "memory");
}
__device__ __forceinline__ void tma4(unsigned dst, const CUtensorMap *m, int c0, int c1, int c2, int c3, unsigned b) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];"
                 ::"r"(dst), "l"(m), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(b) : "memory");
}
__device__ __forceinline__ void bulk1(unsigned dst, const void *src, unsigned bytes, unsigned b) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(b) : "memory");
}

__global__ void __launch_bounds__(64) k_stream(Probe pr, const __grid_constant__ CUtensorMap map,
                                               const unsigned char *w, unsigned *sink) {
    extern __shared__ __align__(1024) unsigned char smem[];
    unsigned char *base = (unsigned char *)(((unsigned long long)smem + 1023) & ~1023ull);
    const int stage = pr.BR * pr.KS;
    unsigned long long *bars = (unsigned long long *)(base + pr.S * stage);
    const unsigned full0 = su32(bars), empty0 = su32(bars + pr.S);
    if (threadIdx.x == 0) {
        for (int s = 0; s < pr.S; ++s) bar_init(full0 + 8 * s, 1), bar_init(empty0 + 8 * s, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    const int blocks = pr.R / pr.BR, ksteps = pr.C / pr.KS;
    int nsteps = 0;
    for (int b = blockIdx.x; b < blocks; b += gridDim.x) nsteps += ksteps;
    if (threadIdx.x == 0) {                                   // the producer
        int i = 0;
        for (int b = blockIdx.x; b < blocks; b += gridDim.x)
            for (int k = 0; k < ksteps; ++k, ++i) {
                const int s = i % pr.S;
                if (i >= pr.S) bar_wait(empty0 + 8 * s, ((i / pr.S) - 1) & 1);
                const unsigned full = full0 + 8 * s, dst = su32(base + s * stage);
                bar_expect(full, stage);
                if (pr.pattern == k2d) {
                    for (int a = 0; a < pr.KS / 128; ++a)
                        tma2(dst + a * pr.BR * 128, &map, k * pr.KS + 128 * a, b * pr.BR, full);
                } else if (pr.pattern == k4d) {
                    tma4(dst, &map, 0, 0, k * pr.KS / 128, b * pr.BR / 8, full);
                } else {
                    bulk1(dst, w + (long long)b * pr.BR * pr.C + (long long)k * stage, stage, full);
                }
            }
    } else if (threadIdx.x >= 32) {                           // the consumer warp
        unsigned acc = 0;
        for (int i = 0; i < nsteps; ++i) {
            const int s = i % pr.S;
            bar_wait(full0 + 8 * s, (i / pr.S) & 1);
            acc += *(volatile unsigned *)(base + s * stage + (threadIdx.x - 32) * 4);
            __syncwarp();
            if (threadIdx.x == 32) bar_arrive(empty0 + 8 * s);
        }
        if (acc == 0x12345678u) sink[0] = acc;
    }
}

__global__ void k_load(const uint4 *w, long long n, unsigned *sink) {
    unsigned acc = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        uint4 v;
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(w + i));
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u) sink[0] = acc;
}

static void encode(CUtensorMap *m, const Probe &pr, void *w, CUtensorMapL2promotion l2) {
    CUresult r;
    if (pr.pattern == k2d) {
        cuuint64_t dim[2] = {(cuuint64_t)pr.C, (cuuint64_t)pr.R}, st[1] = {(cuuint64_t)pr.C};
        cuuint32_t box[2] = {128, (cuuint32_t)pr.BR}, es[2] = {1, 1};
        r = cuTensorMapEncodeTiled(m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, w, dim, st, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                   CU_TENSOR_MAP_SWIZZLE_128B, l2, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    } else {
        cuuint64_t dim[4] = {128, 8, (cuuint64_t)pr.C / 128, (cuuint64_t)pr.R / 8};
        cuuint64_t st[3] = {(cuuint64_t)pr.C, 128, (cuuint64_t)pr.C * 8};
        cuuint32_t box[4] = {128, 8, (cuuint32_t)pr.KS / 128, (cuuint32_t)pr.BR / 8}, es[4] = {1, 1, 1, 1};
        r = cuTensorMapEncodeTiled(m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, w, dim, st, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                   CU_TENSOR_MAP_SWIZZLE_128B, l2, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    }
    if (r != CUDA_SUCCESS) { printf("encode failed %d\n", (int)r); exit(1); }
}

int main(int argc, char **argv) {
    const int grid = argc > 1 ? atoi(argv[1]) : 128;
    const size_t maxbytes = 128u << 20;
    const int nbuf = 4;
    unsigned char *w[nbuf];
    unsigned *sink;
    for (int i = 0; i < nbuf; ++i) { CK(cudaMalloc(&w[i], maxbytes)); CK(cudaMemset(w[i], 1 + i, maxbytes)); }
    CK(cudaMalloc(&sink, 64));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    const int reps = 10;
    struct Case { const char *name; Probe p; CUtensorMapL2promotion l2; };
    const Case cases[] = {
        {"A 2d BR64 KS256 S5 (lib A NT1)", {k2d, 8192, 4096, 64, 256, 5}, CU_TENSOR_MAP_L2_PROMOTION_L2_256B},
        {"A 2d BR64 KS256 S5 no-promo", {k2d, 8192, 4096, 64, 256, 5}, CU_TENSOR_MAP_L2_PROMOTION_NONE},
        {"A 2d BR64 KS256 S8", {k2d, 8192, 4096, 64, 256, 8}, CU_TENSOR_MAP_L2_PROMOTION_L2_256B},
        {"A 2d BR64 KS256 S12", {k2d, 8192, 4096, 64, 256, 12}, CU_TENSOR_MAP_L2_PROMOTION_L2_256B},
        {"A 4d BR64 KS256 S5", {k4d, 8192, 4096, 64, 256, 5}, CU_TENSOR_MAP_L2_PROMOTION_L2_256B},
        {"A 4d BR64 KS512 S3", {k4d, 8192, 4096, 64, 512, 3}, CU_TENSOR_MAP_L2_PROMOTION_L2_256B},
        {"A 4d BR64 KS512 S5", {k4d, 8192, 4096, 64, 512, 5}, CU_TENSOR_MAP_L2_PROMOTION_L2_256B},
        {"A 4d BR64 KS1024 S3", {k4d, 8192, 4096, 64, 1024, 3}, CU_TENSOR_MAP_L2_PROMOTION_L2_256B},
        {"A 4d BR16 KS1024 S5", {k4d, 8192, 4096, 16, 1024, 5}, CU_TENSOR_MAP_L2_PROMOTION_L2_256B},
        {"A 4d BR8 KS4096 S3", {k4d, 8192, 4096, 8, 4096, 3}, CU_TENSOR_MAP_L2_PROMOTION_L2_256B},
        {"A 1d BR64 KS256 S5 (16 KB)", {k1d, 8192, 4096, 64, 256, 5}, CU_TENSOR_MAP_L2_PROMOTION_L2_256B},
        {"A 1d BR64 KS256 S8 (16 KB)", {k1d, 8192, 4096, 64, 256, 8}, CU_TENSOR_MAP_L2_PROMOTION_L2_256B},
        {"A 1d BR64 KS512 S5 (32 KB)", {k1d, 8192, 4096, 64, 512, 5}, CU_TENSOR_MAP_L2_PROMOTION_L2_256B},
        {"B 2d BR32 KS512 S5 (lib B NT1)", {k2d, 4096, 8192, 32, 512, 5}, CU_TENSOR_MAP_L2_PROMOTION_L2_256B},
        {"B 2d BR32 KS512 S8", {k2d, 4096, 8192, 32, 512, 8}, CU_TENSOR_MAP_L2_PROMOTION_L2_256B},
        {"B 4d BR32 KS512 S5", {k4d, 4096, 8192, 32, 512, 5}, CU_TENSOR_MAP_L2_PROMOTION_L2_256B},
        {"B 4d BR32 KS1024 S3", {k4d, 4096, 8192, 32, 1024, 3}, CU_TENSOR_MAP_L2_PROMOTION_L2_256B},
        {"B 4d BR16 KS2048 S3", {k4d, 4096, 8192, 16, 2048, 3}, CU_TENSOR_MAP_L2_PROMOTION_L2_256B},
        {"B 1d BR32 KS512 S5 (16 KB)", {k1d, 4096, 8192, 32, 512, 5}, CU_TENSOR_MAP_L2_PROMOTION_L2_256B},
        {"ld 16 B loads", {kLd, 8192, 4096, 0, 0, 0}, CU_TENSOR_MAP_L2_PROMOTION_NONE},
        {"A 2d BR64 KS256 S5 x2 (64 MB)", {k2d, 16384, 4096, 64, 256, 5}, CU_TENSOR_MAP_L2_PROMOTION_L2_256B},
        {"A 2d BR64 KS256 S5 x4 (128 MB)", {k2d, 32768, 4096, 64, 256, 5}, CU_TENSOR_MAP_L2_PROMOTION_L2_256B},
        {"A 1d BR64 KS256 S5 x4 (128 MB)", {k1d, 32768, 4096, 64, 256, 5}, CU_TENSOR_MAP_L2_PROMOTION_L2_256B},
        {"ld 16 B loads x2 (64 MB)", {kLd, 16384, 4096, 0, 0, 0}, CU_TENSOR_MAP_L2_PROMOTION_NONE},
        {"ld 16 B loads x4 (128 MB)", {kLd, 32768, 4096, 0, 0, 0}, CU_TENSOR_MAP_L2_PROMOTION_NONE},
    };
    printf("grid %d, %d rotating copies (32 MB a launch unless named)\n", grid, nbuf);
    for (const Case &c : cases) {
        CUtensorMap maps[nbuf] = {};
        const Probe &p = c.p;
        const size_t bytes = (size_t)p.R * p.C;
        int smem = p.pattern == kLd ? 0 : p.S * p.BR * p.KS + 2 * p.S * 8 + 1024;
        if (p.pattern != kLd) {
            if (p.pattern != k1d) for (int i = 0; i < nbuf; ++i) encode(&maps[i], p, w[i], c.l2);
            else for (int i = 0; i < nbuf; ++i) maps[i] = maps[0];
            CK(cudaFuncSetAttribute(k_stream, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        }
        auto launch = [&](int i) {
            if (p.pattern == kLd) k_load<<<132 * 4, 512>>>((const uint4 *)w[i], (long long)(bytes / 16), sink);
            else k_stream<<<grid, 64, smem>>>(p, maps[i], w[i], sink);
        };
        for (int i = 0; i < nbuf; ++i) launch(i);
        CK(cudaDeviceSynchronize());
        float best = 1e30f, sum = 0.f;
        for (int r = 0; r < 3; ++r) {
            CK(cudaEventRecord(e0));
            for (int i = 0; i < reps * nbuf; ++i) launch(i % nbuf);
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
            const float us = ms * 1e3f / (reps * nbuf);
            sum += us; if (us < best) best = us;
        }
        CK(cudaGetLastError());
        printf("%-34s smem %6d  %7.2f us (mean of 3: %7.2f)  %6.0f GB/s\n", c.name, smem, best, sum / 3, bytes / (best * 1e3));
    }
    return 0;
}
