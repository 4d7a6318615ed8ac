// A weight-streaming bf16 GEMM for few tokens (sm_90 and later: TMA, mbarrier expect_tx), the
// bf16 sibling of common/stream_gemm.cuh for the HCA kv_gate projection (A14: bf16 x bf16, fp32
// out, no quantization). One CTA computes the transposed output tile
//
//   D[r][t] = sum_k W[n0 + r, k0 + k] * X[t, k0 + k]       r < BN, t < T, k < k_len
//
// W bf16 [N, K] and X bf16 [T, K] (row strides in the tensor maps). A producer warp streams the
// CTA's BN rows of W and the T rows of X through a ring of kStages stages of kKS bytes per row
// (2-D TMA boxes of 128 bytes x BN or kTP rows, 128-byte swizzle, rows of X past T read as zeros),
// kConsumerWarps consumer warps multiply with mma.sync m16n8k16 bf16 (W the A operand, 16 rows;
// X the B operand, 8 tokens) straight from the ring (no conversion: both operands are bf16),
// kWR row groups x kWK K parts per stage, the K parts summed at the end in a fixed order
// (deterministic; only the fp32 summation order differs from common/gemm.cuh's tiled path).
//
// Shared memory (Cfg::kSmemBytes; the base is aligned up to 1024 B inside run): kStages stages of
// kAtoms W boxes [BN][128 B] then kAtoms X boxes [kTP][128 B] (16-byte chunk c of row r at chunk
// c ^ (r % 8)), padded to 1024 B; then 2 kStages mbarriers. The reduction reuses the ring after
// the K loop.
//
// Use: every thread of the block (at least Cfg::kThreads = kConsumers + 32; warps past the
// producer warp return at once) calls run<Cfg>(op, n0, smem, epilogue); epilogue(D, T) is called
// by the kConsumers consumer threads (threadIdx.x < kConsumers) with D[r * kDPitch + t] (t < T
// valid) in shared memory; it may use named barrier 1 (kConsumers threads), not __syncthreads.
// Requirements: k0_bytes % 128 == 0, k_bytes % kKS == 0, n0 + BN <= N, 1 <= T <= kTP.
#pragma once

#include "common/mbarrier.cuh"
#include "common/stream_gemm.cuh"

namespace mla {
namespace bstream {

template <int kBN_, int kNT_, int kKS_, int kStages_, int kWR_, int kConsumerWarps_,
          bool kWEvictFirst_ = false>
struct Config {
    static constexpr int kBN = kBN_, kNT = kNT_, kKS = kKS_, kStages = kStages_, kWR = kWR_;
    static constexpr bool kWEvictFirst = kWEvictFirst_;  // W copies: L2 evict_first (sgemm's)
    static constexpr int kConsumerWarps = kConsumerWarps_, kWK = kConsumerWarps / kWR;
    static_assert(kWK * kWR == kConsumerWarps, "warps = row groups x K parts");
    static constexpr int kConsumers = kConsumerWarps * 32;
    static constexpr int kThreads = kConsumers + 32;         // + the producer warp
    static constexpr int kTP = 8 * kNT;                      // token rows of a stage
    static constexpr int kAtoms = kKS / 128;                 // 128-byte boxes per row and stage
    static constexpr int kK16 = kKS / 32;                    // k16 MMA steps per stage
    static_assert(kKS % 128 == 0 && kK16 % kWK == 0, "whole k16 steps per warp");
    static constexpr int kWarpK16 = kK16 / kWK;
    static constexpr int kWarpRows = kBN / kWR, kRT = kWarpRows / 16;
    static_assert(kBN % (16 * kWR) == 0, "16-row tiles per warp");
    static constexpr int kWBox = kBN * 128, kABox = kTP * 128;
    static constexpr int kWBytes = kAtoms * kWBox, kABytes = kAtoms * kABox;
    static constexpr int kStageBytes = (kWBytes + kABytes + 1023) / 1024 * 1024;
    static constexpr int kRingBytes = kStages * kStageBytes;
    static constexpr int kDPitch = kTP + 1;
    static constexpr int kRedBytes = kWK * kBN * kDPitch * 4;
    static_assert(kRedBytes <= kRingBytes, "the reduction fits the ring");
    static constexpr int kBarOffset = kRingBytes;
    static constexpr int kSmemBytes = kBarOffset + 2 * kStages * 8 + 1024;
};

struct Operands {
    const sgemm::TmaMap *w;   // uint8 2-D {2 K, N}, box {128, BN}, 128-byte swizzle
    const sgemm::TmaMap *x;   // uint8 2-D {2 K, T}, box {128, kTP}, 128-byte swizzle
    int k0_bytes, k_bytes;    // the K range, in bytes of a row (2 per element)
    int T;
};

// d += a b: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (not volatile: register-only,
// the compiler may schedule it; the ldmatrix loads stay volatile after the stage's wait).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                         unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <class Cfg>
struct Smem {
    unsigned char *base;
    __device__ __forceinline__ unsigned char *w(int s) const { return base + s * Cfg::kStageBytes; }
    __device__ __forceinline__ unsigned char *x(int s) const { return w(s) + Cfg::kWBytes; }
    __device__ __forceinline__ unsigned full(int s) const {
        return sgemm::smem_u32(base + Cfg::kBarOffset + 8 * s);
    }
    __device__ __forceinline__ unsigned empty(int s) const {
        return sgemm::smem_u32(base + Cfg::kBarOffset + 8 * (Cfg::kStages + s));
    }
};

// The producer (lane 0 of the producer warp): every K-step's W and X boxes, in order.
template <class Cfg>
__device__ __forceinline__ void produce(const Operands &op, int n0, const Smem<Cfg> &sm) {
    const int steps = op.k_bytes / Cfg::kKS;
    for (int f = 0; f < steps; ++f) {
        const int s = f % Cfg::kStages;
        if (f >= Cfg::kStages)
            mbarrier_wait_parity(sm.empty(s), (unsigned)((f / Cfg::kStages - 1) & 1));
        mbarrier_arrive_expect_tx(sm.full(s), Cfg::kWBytes + Cfg::kABytes);
        const int k = op.k0_bytes + f * Cfg::kKS;
        for (int at = 0; at < Cfg::kAtoms; ++at) {
            sgemm::tma_2d_w<Cfg::kWEvictFirst>(sgemm::smem_u32(sm.w(s) + at * Cfg::kWBox), op.w,
                                               k + 128 * at, n0, sm.full(s));
            sgemm::tma_2d(sgemm::smem_u32(sm.x(s) + at * Cfg::kABox), op.x, k + 128 * at, 0,
                          sm.full(s));
        }
    }
}

// One consumer warp over all K-steps: acc[i][j] is its 16-row tile i x 8-token tile j.
template <class Cfg>
__device__ __forceinline__ void consume(const Operands &op, const Smem<Cfg> &sm,
                                        float (&acc)[Cfg::kRT][Cfg::kNT][4]) {
    const int warp = (int)(threadIdx.x / 32), lane = (int)(threadIdx.x % 32);
    const int wr = warp % Cfg::kWR, wk = warp / Cfg::kWR;
    const int steps = op.k_bytes / Cfg::kKS;
#pragma unroll
    for (int i = 0; i < Cfg::kRT; ++i)
#pragma unroll
        for (int j = 0; j < Cfg::kNT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
    // ldmatrix rows: W (A operand) lanes 8m..8m+7 give matrix m = (rows +8 (m & 1), k +8 (m / 2));
    // X (B operand, .x2) lanes 0..7 tokens at k 0..7, lanes 8..15 at k 8..15.
    const int wrow = lane % 8 + 8 * ((lane / 8) & 1), whalf = lane / 16;
    const int xrow = lane % 8, xhalf = (lane / 8) & 1;
    for (int ks = 0; ks < steps; ++ks) {
        const int s = ks % Cfg::kStages;
        mbarrier_wait_parity(sm.full(s), (unsigned)((ks / Cfg::kStages) & 1));
        const unsigned wbase = sgemm::smem_u32(sm.w(s)), xbase = sgemm::smem_u32(sm.x(s));
#pragma unroll
        for (int u = 0; u < Cfg::kWarpK16; ++u) {
            const int k16 = wk * Cfg::kWarpK16 + u, box = k16 / 4, kk = k16 % 4;
            unsigned a[Cfg::kRT][4], b[Cfg::kNT][2];
#pragma unroll
            for (int j = 0; j < Cfg::kNT; ++j) {
                const int r = 8 * j + xrow;
                sgemm::ldsm_x2(b[j], xbase + box * Cfg::kABox + r * 128 +
                                         (((2 * kk + xhalf) ^ (r % 8)) * 16));
            }
#pragma unroll
            for (int i = 0; i < Cfg::kRT; ++i) {
                const int r = wr * Cfg::kWarpRows + 16 * i + wrow;
                sgemm::ldsm_x4(a[i], wbase + box * Cfg::kWBox + r * 128 +
                                         (((2 * kk + whalf) ^ (r % 8)) * 16));
            }
#pragma unroll
            for (int i = 0; i < Cfg::kRT; ++i)
#pragma unroll
                for (int j = 0; j < Cfg::kNT; ++j) mma_bf16(acc[i][j], a[i], b[j][0], b[j][1]);
        }
        __syncwarp();
        if (lane == 0) sgemm::mbarrier_arrive(sm.empty(s));
    }
}

// The tile of W rows n0 .. n0 + BN - 1 over the op's K range; epilogue(D, T) as above.
template <class Cfg, class Epilogue>
__device__ __forceinline__ void run(const Operands &op, int n0, unsigned char *smem_in,
                                    Epilogue epilogue) {
    unsigned char *smem =
        smem_in + ((1024u - (sgemm::smem_u32(smem_in) & 1023u)) & 1023u);
    const Smem<Cfg> sm{smem};
    const int tid = (int)threadIdx.x;
    if (tid == 0) {
        for (int s = 0; s < Cfg::kStages; ++s) {
            mbarrier_init(sm.full(s), 1);
            mbarrier_init(sm.empty(s), Cfg::kConsumerWarps);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (tid >= Cfg::kConsumers + 32) return;             // idle warps of a larger block
    if (tid >= Cfg::kConsumers) {                        // the producer warp
        if (tid == Cfg::kConsumers) produce<Cfg>(op, n0, sm);
        return;
    }
    const int warp = tid / 32, lane = tid % 32;
    const int wr = warp % Cfg::kWR, wk = warp / Cfg::kWR;
    float acc[Cfg::kRT][Cfg::kNT][4];
    consume<Cfg>(op, sm, acc);
    // red[wk][r][t] (in the ring: every consumer is past its last stage), summed over wk in
    // order 0, 1, ... into red[0].
    named_barrier_sync(1, Cfg::kConsumers);
    float *red = reinterpret_cast<float *>(smem);
    sgemm::store_acc<Cfg>(red + wk * Cfg::kBN * Cfg::kDPitch, acc, wr, lane);
    named_barrier_sync(1, Cfg::kConsumers);
    sgemm::sum_k_warps<Cfg>(red, tid);
    epilogue(static_cast<const float *>(red), op.T);
    // Every copy has landed and every wait is done: the barriers' memory may be reused.
    named_barrier_sync(1, Cfg::kConsumers);
    if (tid == 0)
        for (int s = 0; s < 2 * Cfg::kStages; ++s)
            asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(
                             sgemm::smem_u32(smem + Cfg::kBarOffset + 8 * s))
                         : "memory");
}

}  // namespace bstream
}  // namespace mla
