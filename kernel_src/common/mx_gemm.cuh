// Block-tile GEMM of the DSV4 attention kernel: C[m, n] = sum_k A[m, k] * W[n, k] on the portable
// tensor-core path (mma.sync m16n8k16 bf16, fp32 accumulate), 256 threads per block.
//
//   A  bf16 [M, K], row stride lda elements, 16-byte aligned rows; rows >= M read as zero.
//      kQuantA: A is replaced by mxq(A) (group-32 e4m3 / ue8m0 along K, spec §2.2) in shared
//      memory before the MMA (exact in bf16).
//   W  kWFp8:  float8_e4m3fn [N, K] row major with ue8m0 scales in SfAtom order (§3.3),
//              dequantized to bf16 in shared memory (exact);
//      else:   bf16 [N, K] row major.
//   K % kBK == 0, N % kBN == 0 (the caller's tile grid covers N exactly).
//
// One call computes the kBM x kBN tile at (m0, n0) and hands each pair of adjacent outputs
// (m, n), (m, n + 1) with m < M to store(m, n, v0, v1). Pipeline: kStages stages of cp.async
// (raw A, raw W, W scales), then per K-step: convert (mxq A in place, dequantize W) and MMA.
// 8 warps as 2 (M) x 4 (N), each a 32 x 16 warp tile (2 x 2 MMA tiles).
#pragma once

#include <cuda_bf16.h>

#include "common/bf16.cuh"
#include "common/mxfp8_attn.cuh"
#include "common/ptx_mma.cuh"

namespace mla {
namespace mxgemm {

constexpr int kThreads = 256;
constexpr int kBM = 64, kBN = 64, kBK = 128, kStages = 3;
constexpr int kLds = kBK + 8;                         // bf16 per smem row (272 B: no conflicts)
constexpr int kTileBytes = kBM * kLds * 2;            // one bf16 tile (A stage, W stage, W bf16)
constexpr int kSfBytes = kBN * 4;                     // 4 scale bytes (one u32) per W row
constexpr int kStageBytes = 2 * kTileBytes + kSfBytes;
constexpr int kSmemBytes = kStages * kStageBytes + kTileBytes;
static_assert(kBM == kBN, "one tile size for A and W buffers");

struct Operands {
    const __nv_bfloat16 *a;
    long long lda;
    int m;                    // valid rows of A
    const unsigned char *w;   // W row n at w + n * K * (kWFp8 ? 1 : 2)
    const unsigned char *sf;  // SfAtom scales (kWFp8)
    int k;                    // K
};

__device__ __forceinline__ unsigned char *stage_a(unsigned char *smem, int s) {
    return smem + s * kStageBytes;
}
__device__ __forceinline__ unsigned char *stage_w(unsigned char *smem, int s) {
    return smem + s * kStageBytes + kTileBytes;
}
__device__ __forceinline__ unsigned *stage_sf(unsigned char *smem, int s) {
    return reinterpret_cast<unsigned *>(smem + s * kStageBytes + 2 * kTileBytes);
}
__device__ __forceinline__ unsigned char *w_bf16(unsigned char *smem) {
    return smem + kStages * kStageBytes;
}

// Issues the cp.async copies of K-step kt into stage s.
template <bool kWFp8>
__device__ __forceinline__ void load_stage(const Operands &op, int m0, int n0, int kt, int s,
                                           unsigned char *smem) {
    const int k0 = kt * kBK;
    unsigned char *sa = stage_a(smem, s), *sw = stage_w(smem, s);
    for (int i = threadIdx.x; i < kBM * (kBK / 8); i += kThreads) {  // A: 16 chunks per row
        const int r = i / (kBK / 8), c = i % (kBK / 8);
        const bool ok = m0 + r < op.m;
        const __nv_bfloat16 *src = op.a + (ok ? (long long)(m0 + r) * op.lda + k0 + c * 8 : 0);
        cp_async_16(sa + r * kLds * 2 + c * 16, src, ok);
    }
    constexpr int wchunks = kWFp8 ? kBK / 16 : kBK / 8;                // 16-byte chunks per row
    constexpr int esize = kWFp8 ? 1 : 2;
    for (int i = threadIdx.x; i < kBN * wchunks; i += kThreads) {
        const int r = i / wchunks, c = i % wchunks;
        const unsigned char *src = op.w + ((long long)(n0 + r) * op.k + k0) * esize + c * 16;
        cp_async_16(sw + r * kLds * 2 + c * 16, src, true);
    }
    if (kWFp8 && threadIdx.x < kBN) {                                  // 4 scales of one row
        const int n = n0 + threadIdx.x;
        const unsigned char *src = op.sf + sfatom_offset(n, k0 / 32, op.k / 32);
        cp_async_4(stage_sf(smem, s) + threadIdx.x, src, true);
    }
}

// mxq of one 32-wide group of the A stage, in place (thread: row tid / 4, group tid % 4).
__device__ __forceinline__ void quant_a_group(unsigned char *sa) {
    static_assert(kBM * kBK / 32 == kThreads, "one group per thread");
    const int r = threadIdx.x / 4, g = threadIdx.x % 4;
    unsigned char *p = sa + r * kLds * 2 + g * 64;
    float v[32];
    load_bf16<32>(p, v);
    mx_fake_quant<32>(v);
    store_bf16<32>(p, v);
}

// Dequantizes one 32-wide group of the fp8 W stage into the bf16 W tile.
__device__ __forceinline__ void dequant_w_group(const unsigned char *sw, const unsigned *sf,
                                                unsigned char *wb) {
    static_assert(kBN * kBK / 32 == kThreads, "one group per thread");
    const int r = threadIdx.x / 4, g = threadIdx.x % 4;
    const uint4 *src = reinterpret_cast<const uint4 *>(sw + r * kLds * 2 + g * 32);
    const uint4 q0 = src[0], q1 = src[1];
    const unsigned q[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
    const int e = (int)((sf[r] >> (8 * g)) & 0xffu) - 127;
    float v[32];
    e4m3_decode<32>(q, e, v);
    store_bf16<32>(wb + r * kLds * 2 + g * 64, v);
}

// One K-step of MMAs of this warp's 32 x 16 tile.
__device__ __forceinline__ void mma_stage(const unsigned char *sa, const unsigned char *sw,
                                          float acc[2][2][4]) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = warp / 4, wn = warp % 4;
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
        unsigned a[2][4], b[4];
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
            ldmatrix_x4(a[mi], sa + (32 * wm + 16 * mi + lane % 16) * kLds * 2 +
                                   (kk * 16 + (lane / 16) * 8) * 2);
        ldmatrix_x4(b, sw + (16 * wn + (lane / 16) * 8 + lane % 8) * kLds * 2 +
                           (kk * 16 + ((lane / 8) % 2) * 8) * 2);
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
            mma_bf16_16816(acc[mi][0], a[mi], b[0], b[1]);
            mma_bf16_16816(acc[mi][1], a[mi], b[2], b[3]);
        }
    }
}

// Hands the accumulators to store(m, n, v0, v1) for rows m < M.
template <class Store>
__device__ __forceinline__ void store_tile(const float acc[2][2][4], int m0, int n0, int M,
                                           Store &store) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = warp / 4, wn = warp % 4;
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 2; ++ni)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int m = m0 + 32 * wm + 16 * mi + lane / 4 + 8 * h;
                const int n = n0 + 16 * wn + 8 * ni + (lane % 4) * 2;
                if (m < M) store(m, n, acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
            }
}

// The tile at (m0, n0). smem: kSmemBytes, 16-byte aligned. Ends with __syncthreads (smem free).
template <bool kQuantA, bool kWFp8, class Store>
__device__ void gemm_tile(const Operands &op, int m0, int n0, unsigned char *smem, Store store) {
    float acc[2][2][4] = {};
    const int ktiles = op.k / kBK;
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < ktiles) load_stage<kWFp8>(op, m0, n0, s, s, smem);
        cp_async_commit();
    }
    for (int kt = 0; kt < ktiles; ++kt) {
        const int s = kt % kStages;
        cp_async_wait<kStages - 2>();
        __syncthreads();
        if (kQuantA) quant_a_group(stage_a(smem, s));
        if (kWFp8) dequant_w_group(stage_w(smem, s), stage_sf(smem, s), w_bf16(smem));
        if (kQuantA || kWFp8) __syncthreads();
        const int next = kt + kStages - 1;
        if (next < ktiles) load_stage<kWFp8>(op, m0, n0, next, next % kStages, smem);
        cp_async_commit();
        mma_stage(stage_a(smem, s), kWFp8 ? w_bf16(smem) : stage_w(smem, s), acc);
    }
    cp_async_wait<0>();
    __syncthreads();
    store_tile(acc, m0, n0, op.m, store);
}

}  // namespace mxgemm
}  // namespace mla
