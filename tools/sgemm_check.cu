// Developer check of kernel_src/common/stream_gemm.cuh outside the library (not built by CMake):
// random MXFP8 operands against a float64 CPU product (error <= 1e-5 of the sum of |terms|; the
// e4m3 wgmma cases print FAIL there by design, their error is ~1e-4..7e-4 of it, printed as
// "max err/sum|terms|"; kMathNone cases are timing only), then the time of each configuration
// over 4 rotating 32 MB weight copies (cold L2). "pf": with the (measured slower) L2 prefetch.
// K-split cases (kSplit > 1) sum their slices on the host. Build and run:
//   nvcc -O3 -std=c++17 -arch=sm_90a -Ikernel_src -o sgemm_check tools/sgemm_check.cu -lcuda
//   ./sgemm_check [case index]
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <cuda_runtime.h>
#include <cuda.h>
#include "common/stream_gemm.cuh"
using namespace mla;
#include "cuda_check.cuh"

// The L2 prefetch variant ("pf", measured slower, not in the library): one thread asks L2 for
// the tile's whole W block (cp.async.bulk.prefetch.L2, 64 KB pieces) before the stream starts.
static __device__ void prefetch_w_l2(const sgemm::Operands &op, int n0, int rows) {
    for (int r = 0; r < rows; ++r) {
        const unsigned char *p = op.w + (long long)(n0 + r) * op.ldw + op.w_k0;
        for (int i = 0; i < op.k_len; i += 65536) {
            const unsigned n = (unsigned)(op.k_len - i < 65536 ? op.k_len - i : 65536);
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p + i), "r"(n) : "memory");
        }
    }
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads) k_test(sgemm::Operands op, float *out, int N, int pf, const __grid_constant__ sgemm::Maps maps) {
    op.maps = &maps;
    extern __shared__ __align__(128) unsigned char smem[];
    const int n0 = blockIdx.x * Cfg::kBN;
    if (pf && threadIdx.x == 0) prefetch_w_l2(op, n0, Cfg::kBN);
    sgemm::run<Cfg>(op, n0, smem, [] {}, [&](const float *D, int T) {
        for (int i = threadIdx.x; i < T * Cfg::kBN; i += Cfg::kConsumers) {
            const int t = i / Cfg::kBN, r = i % Cfg::kBN;
            out[(long long)t * N + n0 + r] = D[r * Cfg::kDPitch + t];
        }
    });
}

// K split: grid (N / BN, S), CTA (x, y) covers K slice y of K / S and writes its fp32 partial
// to out + y * T * N (the host sums the slices in order).
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads) k_split(sgemm::Operands op, float *out, int N, int pf, const __grid_constant__ sgemm::Maps maps) {
    op.maps = &maps;
    extern __shared__ __align__(128) unsigned char smem[];
    const int n0 = blockIdx.x * Cfg::kBN, S = gridDim.y, y = blockIdx.y;
    const int len = op.k_len / S, k0 = y * len;
    op.a_sf += k0 / 32; op.w_k0 = k0; op.a_col0 = k0; op.k_len = len;
    if (pf && threadIdx.x == 0) prefetch_w_l2(op, n0, Cfg::kBN);
    float *o = out + (long long)y * op.T * N;
    sgemm::run<Cfg>(op, n0, smem, [] {}, [&](const float *D, int T) {
        for (int i = threadIdx.x; i < T * Cfg::kBN; i += Cfg::kConsumers) {
            const int t = i / Cfg::kBN, r = i % Cfg::kBN;
            o[(long long)t * N + n0 + r] = D[r * Cfg::kDPitch + t];
        }
    });
}

// The attention's phase-3 use: a 256-thread block, 4 consumer warps, tiles blockIdx.x + i * grid.
template <class Cfg>
__global__ void __launch_bounds__(256) k_multi(sgemm::Operands op, float *out, int N, int pf, const __grid_constant__ sgemm::Maps maps) {
    op.maps = &maps;
    extern __shared__ __align__(128) unsigned char smem[];
    const int tiles = N / Cfg::kBN;
    const int count = (int)blockIdx.x < tiles ? (tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
    if (pf && threadIdx.x == 0)
        for (int i = 0; i < count; ++i) prefetch_w_l2(op, ((int)blockIdx.x + i * (int)gridDim.x) * Cfg::kBN, Cfg::kBN);
    sgemm::run_tiles<Cfg>(op, count, [](int i) { return ((int)blockIdx.x + i * (int)gridDim.x) * Cfg::kBN; }, smem, [] {},
        [&](int, int n0, const float *D, int T) {
            for (int i = threadIdx.x; i < T * Cfg::kBN; i += Cfg::kConsumers) {
                const int t = i / Cfg::kBN, r = i % Cfg::kBN;
                out[(long long)t * N + n0 + r] = D[r * Cfg::kDPitch + t];
            }
        });
    __syncthreads();
}

static void enc(CUtensorMap *m, CUtensorMapDataType ty, void *p, cuuint64_t cols, cuuint64_t rows, cuuint64_t stride, cuuint32_t bc, cuuint32_t br, CUtensorMapSwizzle sw) {
    cuuint64_t dim[2] = {cols, rows}; cuuint64_t st[1] = {stride}; cuuint32_t box[2] = {bc, br}, es[2] = {1, 1};
    CUresult r = cuTensorMapEncodeTiled(m, ty, 2, p, dim, st, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, sw, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) { printf("encode failed %d\n", (int)r); exit(1); }
}
template <class Cfg>
static void make_maps(sgemm::Maps *m, void *w, int N, int K, void *a, int T, void *wsf) {
    enc((CUtensorMap *)&m->w, CU_TENSOR_MAP_DATA_TYPE_UINT8, w, K, N, K, 128, Cfg::kBN, CU_TENSOR_MAP_SWIZZLE_128B);
    enc((CUtensorMap *)&m->a, CU_TENSOR_MAP_DATA_TYPE_UINT8, a, K, T, K, 128, Cfg::kTP, CU_TENSOR_MAP_SWIZZLE_128B);
    enc((CUtensorMap *)&m->sf, CU_TENSOR_MAP_DATA_TYPE_UINT32, wsf, 128, (N / 128) * ((K / 32 + 3) / 4), 512, 128, Cfg::kAtoms, CU_TENSOR_MAP_SWIZZLE_NONE);
}

static double e4m3(unsigned b) {
    int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    double v = e == 0 ? m / 8.0 * ldexp(1.0, -6) : (1 + m / 8.0) * ldexp(1.0, e - 7);
    return s ? -v : v;
}
static long long sfatom(long long n, long long kb, long long KB) {
    long long ka = (KB + 3) / 4;
    return ((n / 128) * ka + kb / 4) * 512 + (n % 32) * 16 + ((n % 128) / 32) * 4 + kb % 4;
}
static unsigned rnd() { static unsigned long long x = 88172645463325252ull; x ^= x << 13; x ^= x >> 7; x ^= x << 17; return (unsigned)x; }
static unsigned char rb() { unsigned b; do b = rnd() & 0xff; while ((b & 0x7f) == 0x7f); return (unsigned char)b; }

template <class Cfg, bool kMultiK = false, int kSplit = 1>
static void run_case(const char *name, int N, int K, int T, int pf = 0, int nbuf = 4) {
    size_t wbytes = (size_t)N * K, sfbytes = (size_t)(N / 128) * ((K / 32 + 3) / 4) * 512;
    std::vector<unsigned char> w(wbytes), wsf(sfbytes), a((size_t)T * K), asf((size_t)T * K / 32);
    for (auto &x : w) x = rb();
    for (auto &x : wsf) x = (unsigned char)(120 + rnd() % 12);
    for (auto &x : a) x = rb();
    for (auto &x : asf) x = (unsigned char)(120 + rnd() % 12);
    unsigned char *dw, *dwsf, *da, *dasf; float *dout;
    CK(cudaMalloc(&dw, wbytes * nbuf)); CK(cudaMalloc(&dwsf, sfbytes * nbuf));
    CK(cudaMalloc(&da, a.size())); CK(cudaMalloc(&dasf, asf.size())); CK(cudaMalloc(&dout, (size_t)kSplit * T * N * 4));
    for (int b = 0; b < nbuf; ++b) { CK(cudaMemcpy(dw + b * wbytes, w.data(), wbytes, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dwsf + b * sfbytes, wsf.data(), sfbytes, cudaMemcpyHostToDevice)); }
    CK(cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice)); CK(cudaMemcpy(dasf, asf.data(), asf.size(), cudaMemcpyHostToDevice));
    CK(cudaMemset(dout, 0xff, (size_t)kSplit * T * N * 4));
    sgemm::Operands op;
    op.a = da; op.a_sf = dasf; op.lda = K; op.lda_sf = K / 32; op.w = dw; op.w_sf = dwsf; op.ldw = K;
    op.w_kb = K / 32; op.w_k0 = 0; op.k_len = K; op.T = T; op.a_col0 = 0; op.maps = nullptr;
    std::vector<sgemm::Maps> maps(nbuf);
    for (int b = 0; b < nbuf; ++b) make_maps<Cfg>(&maps[b], dw + b * wbytes, N, K, da, T, dwsf + b * sfbytes);
    void (*kern)(sgemm::Operands, float *, int, int, sgemm::Maps);
    if constexpr (kMultiK) kern = k_multi<Cfg>;
    else if constexpr (kSplit > 1) kern = k_split<Cfg>;
    else kern = k_test<Cfg>;
    const dim3 grid(kMultiK ? 132 : N / Cfg::kBN, kSplit);
    const int block = kMultiK ? 256 : Cfg::kThreads;
    CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
    kern<<<grid, block, Cfg::kSmemBytes>>>(op, dout, N, pf, maps[0]);
    CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
    std::vector<float> outs((size_t)kSplit * T * N), out((size_t)T * N, 0.f);
    CK(cudaMemcpy(outs.data(), dout, outs.size() * 4, cudaMemcpyDeviceToHost));
    for (int y = 0; y < kSplit; ++y)
        for (size_t i = 0; i < out.size(); ++i) out[i] += outs[(size_t)y * T * N + i];
    double maxerr = 0, maxref = 0, maxrel = 0; int bad = 0;
    const bool none = Cfg::kMath == sgemm::kMathNone;
    const int stride = T > 16 ? 101 : (T > 8 ? 29 : 7);
    for (int t = 0; t < T; ++t)
        for (int n = t % stride; n < N; n += (n % 97 == 0 ? 1 : stride)) {
            double ref = 0, refabs = 0;
            for (int k = 0; k < K; ++k) {
                double sw = ldexp(1.0, (int)wsf[sfatom(n, k / 32, K / 32)] - 127);
                double sa = ldexp(1.0, (int)asf[(size_t)t * (K / 32) + k / 32] - 127);
                double term = e4m3(w[(size_t)n * K + k]) * sw * e4m3(a[(size_t)t * K + k]) * sa;
                ref += term, refabs += fabs(term);
            }
            double got = out[(size_t)t * N + n];
            if (!none && !(fabs(got - ref) <= 1e-5 * refabs)) ++bad;
            maxerr = fmax(maxerr, fabs(got - ref)); maxref = fmax(maxref, fabs(ref));
            if (refabs > 0) maxrel = fmax(maxrel, fabs(got - ref) / refabs);
        }
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    const int iters = 40;
    for (int i = 0; i < 4; ++i) { op.w = dw + (i % nbuf) * wbytes; op.w_sf = dwsf + (i % nbuf) * sfbytes; kern<<<grid, block, Cfg::kSmemBytes>>>(op, dout, N, pf, maps[i % nbuf]); }
    CK(cudaEventRecord(e0));
    for (int i = 0; i < iters; ++i) { op.w = dw + (i % nbuf) * wbytes; op.w_sf = dwsf + (i % nbuf) * sfbytes; kern<<<grid, block, Cfg::kSmemBytes>>>(op, dout, N, pf, maps[i % nbuf]); }
    CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1));
    float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
    double us = ms * 1000 / iters;
    printf("%-34s%s N %5d K %5d T %2d smem %6d grid %4d: %s (bad %d, max err %.3g of max |ref| %.3g, max err/sum|terms| %.2g)  %.2f us  %.2f TB/s (W + scales)\n",
           name, pf ? " pf" : "   ", N, K, T, Cfg::kSmemBytes, (int)(grid.x * grid.y), none ? "timing only" : (bad ? "FAIL" : "ok"), bad, maxerr, maxref, maxrel, us,
           (wbytes + sfbytes) / us * 1e-6);
    fflush(stdout);
    cudaFree(dw); cudaFree(dwsf); cudaFree(da); cudaFree(dasf); cudaFree(dout);
}

static void copy_ref() {
    const size_t bytes = 32u << 20; const int nbuf = 4, iters = 40;
    unsigned char *src, *dst; CK(cudaMalloc(&src, bytes * nbuf)); CK(cudaMalloc(&dst, bytes * nbuf));
    CK(cudaMemset(src, 1, bytes * nbuf));
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    for (int i = 0; i < 4; ++i) CK(cudaMemcpyAsync(dst + (i % nbuf) * bytes, src + (i % nbuf) * bytes, bytes, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e0));
    for (int i = 0; i < iters; ++i) CK(cudaMemcpyAsync(dst + (i % nbuf) * bytes, src + (i % nbuf) * bytes, bytes, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1));
    float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
    const double us = ms * 1000 / iters;
    printf("%-34s 32 MB D2D copy: %.2f us, %.2f TB/s (read + write)\n", "copy reference", us, 2.0 * bytes / us * 1e-6);
    cudaFree(src); cudaFree(dst);
}

int main(int argc, char **argv) {
    const int only = argc > 1 ? atoi(argv[1]) : -1;
    int idx = 0;
    using namespace sgemm;
#define CASE(...) if (only < 0 || only == idx) __VA_ARGS__; ++idx
    CASE(copy_ref());
    // out-proj B shape (N 4096, K 8192): the library's T <= 8 / T <= 16 configurations, more stages
    CASE((run_case<Config<32, 1, 512, 5, 1, 256, 8, false, kMathMmaSync>>("B mma bn32 nt1 ks512 st5", 4096, 8192, 1)));
    CASE((run_case<Config<32, 1, 512, 8, 1, 256, 8, false, kMathMmaSync>>("B mma bn32 nt1 ks512 st8", 4096, 8192, 1)));
    CASE((run_case<Config<32, 1, 512, 8, 1, 512, 8, false, kMathMmaSync>>("B mma bn32 nt1 ks512 st8 (K x2)", 4096, 16384, 1)));
    CASE((run_case<Config<32, 2, 512, 4, 1, 256, 8, false, kMathMmaSync>>("B mma bn32 nt2 ks512 st4", 4096, 8192, 13)));
    CASE((run_case<Config<32, 2, 512, 7, 1, 256, 8, false, kMathMmaSync>>("B mma bn32 nt2 ks512 st7", 4096, 8192, 13)));
    CASE((run_case<Config<64, 1, 256, 8, 1, 256, 8, false, kMathWgmma>, false, 2>("B wg bn64 nt1 ks256 st8 split2", 4096, 8192, 1)));
    // out-proj A shape (N 8192, K 4096)
    CASE((run_case<Config<64, 1, 256, 5, 1, 128, 8, false, kMathMmaSync>>("A mma bn64 nt1 ks256 st5", 8192, 4096, 1)));
    CASE((run_case<Config<64, 1, 256, 9, 1, 128, 8, false, kMathMmaSync>>("A mma bn64 nt1 ks256 st9", 8192, 4096, 1)));
    CASE((run_case<Config<64, 2, 256, 8, 1, 128, 8, false, kMathMmaSync>>("A mma bn64 nt2 ks256 st8", 8192, 4096, 16)));
    // phase 3 (wq_b) shape: N 32768, K 1024, multi
    CASE((run_case<Config<128, 1, 256, 4, 2, 32, 4, true, kMathWgmma>, true>("Q wg bn128 nt1 st4 multi", 32768, 1024, 1)));
    CASE((run_case<Config<128, 2, 256, 3, 2, 32, 4, true, kMathWgmma>, true>("Q wg bn128 nt2 st3 multi", 32768, 1024, 16)));
    // 16 < T <= 64 (T 64, NT 8): the library's K-split kinds (A: 64-row blocks, B: 32-row
    // blocks, 2 slices each) against 128-row blocks (A 2 slices, B 4: 128 CTAs, one per SM), on
    // mma.sync, wgmma and no math.
    CASE((run_case<Config<64, 8, 256, 3, 4, 128, 8, false, kMathMmaSync, true>, false, 2>("A64 lib mma nt8 split2", 8192, 4096, 64)));
    CASE((run_case<Config<64, 8, 256, 3, 4, 128, 8, false, kMathNone, true>, false, 2>("A64 lib none nt8 split2", 8192, 4096, 64)));
    CASE((run_case<Config<128, 8, 256, 4, 4, 64, 8, false, kMathMmaSync, true>, false, 2>("A128 mma nt8 st4 split2", 8192, 4096, 64)));
    CASE((run_case<Config<128, 8, 256, 4, 4, 64, 8, false, kMathWgmma, true>, false, 2>("A128 wg nt8 st4 split2", 8192, 4096, 64)));
    CASE((run_case<Config<128, 8, 256, 4, 4, 64, 8, false, kMathNone, true>, false, 2>("A128 none nt8 st4 split2", 8192, 4096, 64)));
    CASE((run_case<Config<128, 8, 128, 8, 4, 64, 8, false, kMathWgmma, true>, false, 2>("A128 wg nt8 ks128 st8 split2", 8192, 4096, 64)));
    CASE((run_case<Config<32, 8, 256, 3, 2, 256, 8, false, kMathMmaSync, true>, false, 2>("B32 lib mma nt8 split2", 4096, 8192, 64)));
    CASE((run_case<Config<32, 8, 256, 3, 2, 256, 8, false, kMathNone, true>, false, 2>("B32 lib none nt8 split2", 4096, 8192, 64)));
    CASE((run_case<Config<128, 8, 256, 4, 4, 64, 8, false, kMathMmaSync, true>, false, 4>("B128 mma nt8 st4 split4", 4096, 8192, 64)));
    CASE((run_case<Config<128, 8, 256, 4, 4, 64, 8, false, kMathWgmma, true>, false, 4>("B128 wg nt8 st4 split4", 4096, 8192, 64)));
    CASE((run_case<Config<128, 8, 256, 4, 4, 64, 8, false, kMathNone, true>, false, 4>("B128 none nt8 st4 split4", 4096, 8192, 64)));
    CASE((run_case<Config<64, 8, 256, 4, 4, 128, 8, false, kMathWgmma, true>, false, 2>("B64 wg nt8 st4 split2", 4096, 8192, 64)));
    // T 32 (NT 4)
    CASE((run_case<Config<64, 4, 256, 3, 4, 128, 8, false, kMathMmaSync, true>, false, 2>("A64 lib mma nt4 split2", 8192, 4096, 32)));
    CASE((run_case<Config<128, 4, 256, 4, 4, 64, 8, false, kMathWgmma, true>, false, 2>("A128 wg nt4 st4 split2", 8192, 4096, 32)));
    CASE((run_case<Config<32, 4, 256, 3, 2, 256, 8, false, kMathMmaSync, true>, false, 2>("B32 lib mma nt4 split2", 4096, 8192, 32)));
    CASE((run_case<Config<128, 4, 256, 4, 4, 64, 8, false, kMathWgmma, true>, false, 4>("B128 wg nt4 st4 split4", 4096, 8192, 32)));
    // kMathWgmmaRows: 64 rows a warpgroup, the next group's wgmma ahead of the promotion
    CASE((run_case<Config<128, 8, 256, 4, 4, 64, 8, false, kMathWgmmaRows, true>, false, 2>("A128 wgr nt8 st4 split2", 8192, 4096, 64)));
    CASE((run_case<Config<128, 8, 256, 4, 4, 64, 8, false, kMathWgmmaRows, true>, false, 4>("B128 wgr nt8 st4 split4", 4096, 8192, 64)));
    CASE((run_case<Config<128, 8, 128, 8, 4, 64, 8, false, kMathWgmmaRows, true>, false, 2>("A128 wgr nt8 ks128 st8 split2", 8192, 4096, 64)));
    CASE((run_case<Config<128, 4, 256, 4, 4, 64, 8, false, kMathWgmmaRows, true>, false, 2>("A128 wgr nt4 st4 split2", 8192, 4096, 32)));
    CASE((run_case<Config<128, 4, 256, 4, 4, 64, 8, false, kMathWgmmaRows, true>, false, 4>("B128 wgr nt4 st4 split4", 4096, 8192, 32)));
    CASE((run_case<Config<64, 8, 256, 3, 2, 64, 4, false, kMathWgmmaRows, true>, false, 2>("A64 wgr 4w nt8 st3 split2", 8192, 4096, 64)));
    CASE((run_case<Config<128, 8, 256, 4, 4, 64, 8, false, kMathWgmmaRows, true>, false, 2>("Q128 wgr nt8 st4 split2 (wq_b)", 32768, 1024, 64)));
    CASE((run_case<Config<128, 8, 256, 4, 4, 32, 8, false, kMathWgmmaRows, true>>("Q128 wgr nt8 st4 (wq_b)", 32768, 1024, 64)));
    // T <= 16 (cases 36..): the library's NT 1 / 2 out-proj kinds against the wgmma-rows consumer
    // on 64-row blocks (one consumer warpgroup), B also as 64-row blocks in 2 K slices
    CASE((run_case<Config<64, 1, 256, 5, 1, 128, 8, false, kMathAuto, true>>("A lib nt1 st5", 8192, 4096, 1)));
    CASE((run_case<Config<64, 1, 256, 5, 4, 128, 4, false, kMathWgmmaRows, true>>("A wgr 4w nt1 st5", 8192, 4096, 1)));
    CASE((run_case<Config<64, 1, 256, 9, 4, 128, 4, false, kMathWgmmaRows, true>>("A wgr 4w nt1 st9", 8192, 4096, 1)));
    CASE((run_case<Config<64, 2, 256, 5, 1, 128, 8, false, kMathAuto, true>>("A lib nt2 st5", 8192, 4096, 16)));
    CASE((run_case<Config<64, 2, 256, 5, 4, 128, 4, false, kMathWgmmaRows, true>>("A wgr 4w nt2 st5", 8192, 4096, 16)));
    CASE((run_case<Config<32, 1, 512, 5, 1, 256, 8, false, kMathAuto, true>>("B lib nt1 ks512 st5", 4096, 8192, 1)));
    CASE((run_case<Config<64, 1, 512, 4, 4, 128, 4, false, kMathWgmmaRows, true>, false, 2>("B wgr 4w nt1 ks512 st4 split2", 4096, 8192, 1)));
    CASE((run_case<Config<64, 1, 256, 5, 4, 256, 4, false, kMathWgmmaRows, true>>("B wgr 4w nt1 st5 (64 CTAs)", 4096, 8192, 1)));
    CASE((run_case<Config<32, 2, 512, 4, 1, 256, 8, false, kMathAuto, true>>("B lib nt2 ks512 st4", 4096, 8192, 16)));
    CASE((run_case<Config<64, 2, 512, 4, 4, 128, 4, false, kMathWgmmaRows, true>, false, 2>("B wgr 4w nt2 ks512 st4 split2", 4096, 8192, 16)));
    // Resident cases (46..): one W copy of 8 MB (N 2048 or 1024), read again by every launch, so
    // L2 feeds the ring and the time is the consumers' (32 CTAs of 16 or 32 stages each; the
    // K 8192 / K 16384 rows minus the K 4096 / 8192 ones: 16 stages of consumer time).
    CASE((run_case<Config<64, 1, 256, 5, 4, 128, 4, false, kMathWgmmaRows, true>>("res A wgr nt1 K4k", 2048, 4096, 1, 0, 1)));
    CASE((run_case<Config<64, 1, 256, 5, 4, 256, 4, false, kMathWgmmaRows, true>>("res A wgr nt1 K8k", 2048, 8192, 1, 0, 1)));
    CASE((run_case<Config<64, 1, 256, 5, 4, 128, 4, false, kMathNone, true>>("res A none nt1 K4k", 2048, 4096, 1, 0, 1)));
    CASE((run_case<Config<64, 1, 256, 5, 4, 256, 4, false, kMathNone, true>>("res A none nt1 K8k", 2048, 8192, 1, 0, 1)));
    CASE((run_case<Config<64, 1, 256, 5, 1, 128, 8, false, kMathMmaSync, true>>("res A mma 8w nt1 K4k", 2048, 4096, 1, 0, 1)));
    CASE((run_case<Config<64, 1, 256, 5, 1, 256, 8, false, kMathMmaSync, true>>("res A mma 8w nt1 K8k", 2048, 8192, 1, 0, 1)));
    CASE((run_case<Config<32, 1, 512, 5, 1, 256, 8, false, kMathAuto, true>>("res B lib nt1 K8k", 1024, 8192, 1, 0, 1)));
    CASE((run_case<Config<32, 1, 512, 5, 1, 512, 8, false, kMathAuto, true>>("res B lib nt1 K16k", 1024, 16384, 1, 0, 1)));
    CASE((run_case<Config<32, 1, 512, 5, 1, 256, 8, false, kMathNone, true>>("res B none nt1 K8k", 1024, 8192, 1, 0, 1)));
    CASE((run_case<Config<32, 1, 512, 5, 1, 512, 8, false, kMathNone, true>>("res B none nt1 K16k", 1024, 16384, 1, 0, 1)));
    // (56..) consumer variants, resident: A with 512-byte stages, A on two warpgroups splitting
    // each stage's groups (kMathWgmma), B with 16 consumer warps, the no-math pipeline 8 deep
    CASE((run_case<Config<64, 1, 512, 3, 4, 128, 4, false, kMathWgmmaRows, true>>("res A wgr ks512 st3 K4k", 2048, 4096, 1, 0, 1)));
    CASE((run_case<Config<64, 1, 512, 3, 4, 256, 4, false, kMathWgmmaRows, true>>("res A wgr ks512 st3 K8k", 2048, 8192, 1, 0, 1)));
    CASE((run_case<Config<64, 1, 256, 5, 1, 128, 8, false, kMathWgmma, true>>("res A wg 2wg K4k", 2048, 4096, 1, 0, 1)));
    CASE((run_case<Config<64, 1, 256, 5, 1, 256, 8, false, kMathWgmma, true>>("res A wg 2wg K8k", 2048, 8192, 1, 0, 1)));
    CASE((run_case<Config<32, 1, 512, 5, 1, 256, 16, false, kMathMmaSync, true>>("res B mma 16w K8k", 1024, 8192, 1, 0, 1)));
    CASE((run_case<Config<32, 1, 512, 5, 1, 512, 16, false, kMathMmaSync, true>>("res B mma 16w K16k", 1024, 16384, 1, 0, 1)));
    CASE((run_case<Config<64, 1, 256, 8, 4, 128, 4, false, kMathNone, true>>("res A none st8 K4k", 2048, 4096, 1, 0, 1)));
    CASE((run_case<Config<64, 1, 256, 8, 4, 256, 4, false, kMathNone, true>>("res A none st8 K8k", 2048, 8192, 1, 0, 1)));
    CASE((run_case<Config<64, 1, 256, 8, 4, 128, 4, false, kMathWgmmaRows, true>>("res A wgr st8 K4k", 2048, 4096, 1, 0, 1)));
    CASE((run_case<Config<64, 1, 256, 8, 4, 256, 4, false, kMathWgmmaRows, true>>("res A wgr st8 K8k", 2048, 8192, 1, 0, 1)));
    CASE((run_case<Config<64, 1, 256, 5, 4, 128, 4, false, kMathWgmmaRows, false>>("res A wgr noEF K4k", 2048, 4096, 1, 0, 1)));
    CASE((run_case<Config<64, 1, 256, 5, 4, 256, 4, false, kMathWgmmaRows, false>>("res A wgr noEF K8k", 2048, 8192, 1, 0, 1)));
    return 0;
}
