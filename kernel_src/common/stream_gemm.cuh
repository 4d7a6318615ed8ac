// A weight-streaming block-scaled GEMM for few tokens (sm_90 and later: cp.async.bulk, mbarrier
// expect_tx; so sm_90a and sm_100a alike): one CTA computes the transposed output tile
//
//   D[r][t] = sum_k W[n0 + r, w_k0 + k] * A[t, k]       r < BN, t < T, k < k_len
//
// with both operands MXFP8: e4m3 bytes and one ue8m0 scale per 32-wide K group (W's scales in
// SfAtom order over the whole W, A's row-major [T, k_len / 32]), so that
//
//   D[r][t] = sum_g 2^(sw[r,g] - 127) 2^(sa[t,g] - 127) sum_{k in g} w[r,k] a[t,k]   (codes)
//
// For T <= 64 the product is a skinny GEMM bound by reading W once, so the CTA streams its BN
// rows of W through a ring of kStages stages of kKS bytes per row with bulk copies
// (cp.async.bulk, one per row, completing on the stage's mbarrier), issued by one producer warp,
// so that several stages (tens of KB per SM) are in flight; the A rows of the same K range ride
// in the same stage (they are small and L2-resident). kConsumerWarps (8 or 4) consumer warps
// multiply: kWR row groups x kWK K parts of each stage, the K parts summed at the end in a
// fixed order (deterministic).
//
// The math (exact up to fp32 summation order): e4m3 codes are exact in f16, so each 16-wide K
// step is one mma.sync.m16n8k16 f16 x f16 -> f32 on the raw codes, converted in registers with
// cvt.rn.f16x2.e4m3x2 (one instruction per two bytes; no dequantization pass in shared memory).
// The two k16 steps of a 32-wide group go into a fresh fp32 partial, which is then added to the
// accumulator times the product of the group's two scales (a power of two). W is the MMA's A
// operand (16 rows of W), A the B operand (8 tokens), so T rows cost ceil(T / 8) MMA columns.
//
// K order inside a 16-wide MMA step: a thread's fragment registers hold bytes 4c..4c+3 of a
// 16-byte chunk (ldmatrix of byte pairs, c = lane % 4); the f16 pairs (4c, 4c+1) and
// (4c+2, 4c+3) are used as the MMA's k pairs (2c, 2c+1) and (2c+8, 2c+9) for both operands, so
// the MMA sums exactly the 16 products of the chunk (a fixed permutation of its k).
//
// Shared memory (Cfg::kSmemBytes, 128-byte aligned): kStages stages, each
//   W rows  [BN][kKS + 16]   (a 16-byte pad per row: conflict-free ldmatrix)
//   A rows  [kTP][kKS + 16]  (tokens >= T are never written; they only feed discarded columns)
//   W scales: the kKS / 128 SfAtom blocks (512 bytes each: 128 rows x 4 groups) of the rows' block
// then the A scale table [kTP][kSfRow] bytes (all of A's k_len / 32 groups, loaded once), then
// (kMulti) the reduction buffer [kWK][BN][kDPitch] floats, then 2 kStages mbarriers; without
// kMulti the reduction reuses the ring after the K loop.
//
// Use: every thread of the block (at least Cfg::kThreads = kConsumers + 32 threads; warps past
// the producer warp return at once) calls run_tiles<Cfg>(op, count, tile_n0, smem, ready,
// epilogue) for the CTA's tiles tile_n0(0..count-1) (the same A and K range; the ring carries
// over from tile to tile; count > 1 needs Cfg::kMulti, which gives the reduction its own
// buffer), or run<Cfg>(op, n0, smem, ready, epilogue) for one tile. ready() is called by every
// lane of the producer warp before its first A copy (the W stream starts before it) and by one
// consumer thread (then a barrier) before the consumers read the A scales: e.g. a spin on a
// ready counter, or griddepcontrol.wait. epilogue(i, n0, D, T) (run: epilogue(D, T)) is called
// by the kConsumers consumer threads (threadIdx.x < kConsumers) with D a shared-memory float
// tile, D[r * kDPitch + t] (t < T valid); it may use named barrier 1 (kConsumers threads) but not
// __syncthreads. An optional last argument prologue() is called by every consumer thread once,
// after the barriers' initialization and before the first ready() of the consumers, while the
// producer already streams W (e.g. the CTA's share of the work that ready() waits for; it may
// use named barrier 1 but not __syncthreads). Requirements: k_len % kKS == 0, k_len / 32 <= kSfRow, w_k0 % 128 == 0, every
// n0 % BN == 0 (BN divides 128: the rows lie in one SfAtom block), 16-byte aligned a, w, lda,
// ldw; 4-byte aligned a_sf, lda_sf; 1 <= T <= kTP.
#pragma once

#include "common/fp8.cuh"
#include "common/mbarrier.cuh"
#include "common/wgmma.cuh"

namespace mla {
namespace sgemm {

// The consumers' math (Config's kMath): kMathAuto picks kMathWgmma where the sm_90a wgmma
// instructions exist and MLA_SGEMM_WGMMA allows it (0: never, the default; 1: every
// configuration; 2: tiles of 128 rows or more), kMathMmaSync elsewhere (sm_100a, the portable
// path). kMathNone is a timing diagnostic for tools/sgemm_check only (the consumers wait for
// each stage and release it without reading it: the results are garbage). kMathWgmmaRows (asked
// for explicitly; sm_90a only, kMathMmaSync elsewhere) gives each consumer warpgroup 64 of the
// kBN rows over the whole K, its groups' wgmmas pipelined one ahead of their promotion
// (consume_wgr; kBN = 64 x warpgroups).
enum Math { kMathAuto = 0, kMathMmaSync = 1, kMathWgmma = 2, kMathNone = 3, kMathWgmmaRows = 4 };
#ifndef MLA_SGEMM_WGMMA
#define MLA_SGEMM_WGMMA 0
#endif
__host__ __device__ constexpr int resolve_math(int m, int bn) {
    return m == kMathWgmmaRows ? (MLA_WGMMA_ENABLED ? kMathWgmmaRows : kMathMmaSync)
           : m != kMathAuto    ? m
                               : (MLA_WGMMA_ENABLED && (MLA_SGEMM_WGMMA == 1 ||
                                                   (MLA_SGEMM_WGMMA == 2 && bn >= 128))
                                 ? kMathWgmma
                                 : kMathMmaSync);
}

// PickConfig<c, A, B>::type: A if c, else B (one of two configurations by a compile-time rule;
// NVRTC's headers have no std::conditional).
template <bool kFirst, class A, class B>
struct PickConfig {
    using type = A;
};
template <class A, class B>
struct PickConfig<false, A, B> {
    using type = B;
};

template <int kBN_, int kNT_, int kKS_, int kStages_, int kWR_, int kSfRow_,
          int kConsumerWarps_ = 8, bool kMulti_ = false, int kMath_ = kMathAuto,
          bool kWEvictFirst_ = false>
struct Config {
    static constexpr int kBN = kBN_, kNT = kNT_, kKS = kKS_, kStages = kStages_, kWR = kWR_;
    // The W and W-scale copies with an L2 evict_first policy (weights read once per call), so
    // that they do not push the kernel's other data and code out of L2.
    static constexpr bool kWEvictFirst = kWEvictFirst_;
    static constexpr int kSfRow = kSfRow_;
    static constexpr bool kMulti = kMulti_;                 // several tiles per CTA (run_tiles)
    static constexpr int kMath = resolve_math(kMath_, kBN_);
    static constexpr bool kWg = kMath == kMathWgmma;
    static constexpr bool kWgR = kMath == kMathWgmmaRows;
    static constexpr int kConsumerWarps = kConsumerWarps_;
    // K parts of a stage: mma.sync one per warp column (kWR row groups of warps), wgmma one per
    // warpgroup (every warpgroup covers all kBN rows as kMB blocks of 64, the last one partly
    // past kBN when kBN is 32: those rows read the stage's next bytes and are discarded).
    static constexpr int kWK = kWgR ? 1 : (kWg ? kConsumerWarps / 4 : kConsumerWarps / kWR);
    static_assert(kWg ? kConsumerWarps % 4 == 0 : kWgR || kWK * kWR == kConsumerWarps,
                  "warps = row groups x K parts (wgmma: whole warpgroups)");
    static_assert(kMath_ != kMathWgmmaRows ||
                      (kBN == 16 * kConsumerWarps && kConsumerWarps % 4 == 0 &&
                       (kConsumerWarps / kWR) * kWR == kConsumerWarps &&
                       (kNT == 1 || kNT == 2 || kNT == 4 || kNT == 8)),
                  "wgmma rows: 64 rows a warpgroup, N 8..64, and a valid mma.sync fallback");
    static constexpr int kMB = (kBN + 63) / 64;             // wgmma: 64-row blocks of M
    static constexpr int kConsumers = kConsumerWarps * 32;
    static constexpr int kThreads = kConsumers + 32;        // + one producer warp (at least)
    static constexpr int kTP = 8 * kNT;                     // token rows of a stage
    static constexpr int kGroups = kKS / 32, kAtoms = kKS / 128;
    static constexpr int kWarpGroups = kGroups / kWK;       // 32-wide groups per warp and stage
    static constexpr int kWarpRows = kBN / kWR, kRT = kWarpRows / 16;
    static_assert(!kWg || kBN == 32 || kBN % 64 == 0, "wgmma: 32 rows or whole 64-row blocks");
    static_assert(!kWg || kNT == 1 || kNT == 2 || kNT == 4 || kNT == 8, "wgmma: N 8, 16, 32, 64");
    // wgmma: the groups of a chunk (issued together, then promoted) keep <= 64 partial registers.
    static constexpr int kChunkRaw = 16 / (kMB * kNT);
    static constexpr int kChunk = kChunkRaw < 1 ? 1 : (kChunkRaw > 4 ? 4 : kChunkRaw);
    static_assert(!kWg || kWarpGroups % kChunk == 0, "whole chunks per warpgroup");
    static_assert(kKS % 128 == 0 && kGroups % kWK == 0, "whole groups per warp");
    static_assert(kBN % (16 * kWR) == 0 && 128 % kBN == 0, "16-row tiles inside one SfAtom block");
    static_assert(kSfRow % 4 == 0, "scale rows of whole words");
    // A stage: kAtoms TMA boxes of W [BN][128 B], kAtoms boxes of A [kTP][128 B] (both 128-byte
    // swizzled: 16-byte chunk c of row r at chunk c ^ (r % 8)), then the kAtoms SfAtom blocks of
    // 512 B; padded to 1024 B (the swizzle atom).
    static constexpr int kWBox = kBN * 128, kABox = kTP * 128;
    static constexpr int kWBytes = kAtoms * kWBox, kABytes = kAtoms * kABox, kWSfBytes = kAtoms * 512;
    static constexpr int kStageBytes = (kWBytes + kABytes + kWSfBytes + 1023) / 1024 * 1024;
    static constexpr int kRingBytes = kStages * kStageBytes;
    static constexpr int kDPitch = kTP + 1;
    // With kMathAuto sized for the mma.sync path's K parts (at least the wgmma path's), so that
    // the shared memory of a configuration is the same on every path (the runtime mirrors it).
    static constexpr int kRedWK = kMath_ == kMathWgmma ? kWK : kConsumerWarps / kWR;
    static constexpr int kRedBytes = kRedWK * kBN * kDPitch * 4;
    static_assert(kMulti || kRedBytes <= kRingBytes, "the reduction fits the ring");
    static constexpr int kTableBytes = kTP * kSfRow;
    // kMathWgmmaRows (asked for, whichever path it resolves to, so that the shared memory is the
    // same on every arch): the A scales again as floats, [kSfRow][kTP] (group-major).
    static constexpr int kFTableBytes = kMath_ == kMathWgmmaRows ? kTP * kSfRow * 4 : 0;
    // With several tiles the reduction has its own buffer (the ring holds the next tile's data).
    static constexpr int kRedOffset = kMulti ? kRingBytes + kTableBytes + kFTableBytes : 0;
    static constexpr int kBarOffset =
        kRingBytes + kTableBytes + kFTableBytes + (kMulti ? kRedBytes : 0);
    // + 1024: the base is aligned up to 1024 B inside run_tiles.
    static constexpr int kSmemBytes = kBarOffset + 2 * kStages * 8 + 1024;
};

// The three TMA descriptors of a stream GEMM (CUtensorMap, 128 bytes each), a kernel parameter
// (__grid_constant__) built by the host (runtime/dsv4_tma.c):
//   w   uint8 2-D {W columns, N rows}, row stride ldw, box {128, BN}, 128-byte swizzle
//   a   uint8 2-D {A columns, T rows}, row stride lda, box {128, kTP}, 128-byte swizzle (rows >= T
//       read as zeros)
//   sf  uint32 2-D {128, N / 128 * K-atoms} (the SfAtom blocks of 512 B), box {128, kAtoms}
struct alignas(64) TmaMap {
    unsigned char bytes[128];
};
struct alignas(64) Maps {
    TmaMap w, a, sf;
};

struct Operands {
    const unsigned char *a;      // A row t at a + t * lda (its K range)
    const unsigned char *a_sf;   // A's scales: group j of row t at a_sf[t * lda_sf + j]
    long long lda, lda_sf;
    const unsigned char *w;      // W row n at w + n * ldw, K range from column w_k0
    const unsigned char *w_sf;   // SfAtom over the whole W
    long long ldw;
    int w_kb;                    // W's K / 32
    int w_k0, k_len, T;
    int a_col0;                  // A's first column in the a map (its K range starts there)
    const Maps *maps;            // the TMA descriptors (address of a __grid_constant__ parameter)
};

__device__ __forceinline__ unsigned smem_u32(const void *p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

// cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes: bytes (a multiple of 16,
// 16-byte aligned ends) from global src to shared dst, completing on bar.
__device__ __forceinline__ void bulk_copy(unsigned dst, const void *src, unsigned bytes,
                                          unsigned bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
        ::"r"(dst), "l"(src), "r"(bytes), "r"(bar)
        : "memory");
}

// cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes: the box at
// (c0, c1) of the tensor map to dst, completing on bar.
__device__ __forceinline__ void tma_2d(unsigned dst, const TmaMap *map, int c0, int c1,
                                       unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
        "l"(map), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
}

// cp.async.bulk.prefetch.tensor.2d.L2.global.tile: the box at (c0, c1) of the tensor map into L2.
__device__ __forceinline__ void tma_prefetch_2d(const TmaMap *map, int c0, int c1) {
    asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];\n" ::"l"(map),
                 "r"(c0), "r"(c1)
                 : "memory");
}

// tma_2d with an L2 evict_first cache policy (createpolicy.fractional, fraction 1).
__device__ __forceinline__ void tma_2d_evict_first(unsigned dst, const TmaMap *map, int c0, int c1,
                                                   unsigned bar) {
    asm volatile(
        "{\n.reg .b64 pol;\ncreatepolicy.fractional.L2::evict_first.b64 pol, 1.0;\n"
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
        " [%0], [%1, {%2, %3}], [%4], pol;\n}\n" ::"r"(dst),
        "l"(map), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
}
template <bool kEvictFirst>
__device__ __forceinline__ void tma_2d_w(unsigned dst, const TmaMap *map, int c0, int c1,
                                         unsigned bar) {
    if constexpr (kEvictFirst)
        tma_2d_evict_first(dst, map, c0, c1, bar);
    else
        tma_2d(dst, map, c0, c1, bar);
}

// mbarrier.arrive.shared::cta.b64 (one arrival, no tx).
__device__ __forceinline__ void mbarrier_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// fence.proxy.async.global: generic-proxy global writes this thread has observed (another CTA's,
// through an acquire) become visible to the bulk copies it issues next.
__device__ __forceinline__ void fence_proxy_async_global() {
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// ldmatrix .x4 / .x2 of b16 (here: byte pairs).
__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2(unsigned (&r)[2], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(addr));
}

// Four e4m3 bytes -> two f16x2 words (bytes 0, 1 -> lo; 2, 3 -> hi; the low byte in the low half).
__device__ __forceinline__ void e4m3x4_to_f16x2x2(unsigned w, unsigned &lo, unsigned &hi) {
    asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.rn.f16x2.e4m3x2 %0, l;\n"
        "cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
        : "=r"(lo), "=r"(hi)
        : "r"(w));
}

// d = a b (+ c): mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32.
// (Not volatile: pure register operations the compiler may schedule; the ldmatrix loads stay
// volatile, so they keep their order after the stage's mbarrier wait.)
__device__ __forceinline__ void mma_f16_zero(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                             unsigned b1) {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%10, %10, %10, %10};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.f));
}
__device__ __forceinline__ void mma_f16(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                        unsigned b1) {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// wgmma.mma_async.sync.aligned.m64nNk32.f32.e4m3.e4m3 (N = 8 kNT), both operands K-major
// 128-byte-swizzled from shared memory, a fresh product (scale-d false): D[64 x N] = A B^T over
// one 32-wide K group. d[j][e] is the accumulator fragment of common/wgmma.cuh. The outputs are
// the instruction's until wgmma_wait_group retires it (then fence_operands).
#define MLA_SG_D4(i) "=f"(d[i][0]), "=f"(d[i][1]), "=f"(d[i][2]), "=f"(d[i][3])
template <int kNT>
__device__ __forceinline__ void wgmma_e4m3(float (&d)[kNT][4], unsigned long long da,
                                           unsigned long long db) {
#if MLA_WGMMA_ENABLED
    if constexpr (kNT == 1)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 "
                     "{%0, %1, %2, %3}, %4, %5, p, 1, 1;\n}\n"
                     : MLA_SG_D4(0)
                     : "l"(da), "l"(db), "r"(0));
    else if constexpr (kNT == 2)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1;\n}\n"
                     : MLA_SG_D4(0), MLA_SG_D4(1)
                     : "l"(da), "l"(db), "r"(0));
    else if constexpr (kNT == 4)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
                     ", %16, %17, p, 1, 1;\n}\n"
                     : MLA_SG_D4(0), MLA_SG_D4(1), MLA_SG_D4(2), MLA_SG_D4(3)
                     : "l"(da), "l"(db), "r"(0));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                     "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
                     ", %32, %33, p, 1, 1;\n}\n"
                     : MLA_SG_D4(0), MLA_SG_D4(1), MLA_SG_D4(2), MLA_SG_D4(3), MLA_SG_D4(4),
                       MLA_SG_D4(5), MLA_SG_D4(6), MLA_SG_D4(7)
                     : "l"(da), "l"(db), "r"(0));
#else
    (void)da, (void)db;
#pragma unroll
    for (int j = 0; j < kNT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) d[j][e] = 0.f;
    __trap();
#endif
}
#undef MLA_SG_D4

// Pins a register after wgmma_wait_group: no use of it moves above this point.
__device__ __forceinline__ void fence_operand(float &x) {
    asm volatile("" : "+f"(x)::"memory");
}

template <class Cfg>
struct Smem {
    unsigned char *base;
    __device__ __forceinline__ unsigned char *w(int s) const { return base + s * Cfg::kStageBytes; }
    __device__ __forceinline__ unsigned char *a(int s) const { return w(s) + Cfg::kWBytes; }
    __device__ __forceinline__ unsigned char *wsf(int s) const { return a(s) + Cfg::kABytes; }
    __device__ __forceinline__ unsigned char *table() const { return base + Cfg::kRingBytes; }
    __device__ __forceinline__ float *ftable() const {
        return reinterpret_cast<float *>(base + Cfg::kRingBytes + Cfg::kTableBytes);
    }
    __device__ __forceinline__ unsigned full(int s) const {
        return smem_u32(base + Cfg::kBarOffset + 8 * s);
    }
    __device__ __forceinline__ unsigned empty(int s) const {
        return smem_u32(base + Cfg::kBarOffset + 8 * (Cfg::kStages + s));
    }
};

// The producer warp's copies of flat step f = tile * steps + K-step (stage f % kStages), lane 0
// issuing them: issue_w the W rows of tile tile_n0(f / steps) and their scales (and the stage's
// full barrier armed with the whole stage's bytes, `bytes`), issue_a the A rows. Used by produce
// and Producer.
template <class Cfg, class TileN>
__device__ __forceinline__ void issue_w(const Operands &op, const Smem<Cfg> &sm, int lane, int f,
                                        const TileN &tile_n0, int steps, unsigned bytes,
                                        long long atoms_per_block) {
    const int s = f % Cfg::kStages, n0 = tile_n0(f / steps);
    if (lane == 0) {
        mbarrier_arrive_expect_tx(sm.full(s), bytes);
        const int k = op.w_k0 + (f % steps) * Cfg::kKS;
        for (int at = 0; at < Cfg::kAtoms; ++at)
            tma_2d_w<Cfg::kWEvictFirst>(smem_u32(sm.w(s) + at * Cfg::kWBox), &op.maps->w,
                                        k + 128 * at, n0, sm.full(s));
        // The SfAtom blocks (128 rows x 4 groups, 512 B) of the tile's rows, K-atoms k / 128..
        tma_2d_w<Cfg::kWEvictFirst>(smem_u32(sm.wsf(s)), &op.maps->sf, 0,
                                    (int)((n0 / 128) * atoms_per_block + k / 128), sm.full(s));
    }
}
template <class Cfg>
__device__ __forceinline__ void issue_a(const Operands &op, const Smem<Cfg> &sm, int lane, int f,
                                        int steps) {
    const int s = f % Cfg::kStages;
    if (lane == 0) {
        const int k = op.a_col0 + (f % steps) * Cfg::kKS;
        for (int at = 0; at < Cfg::kAtoms; ++at)
            tma_2d(smem_u32(sm.a(s) + at * Cfg::kABox), &op.maps->a, k + 128 * at, 0, sm.full(s));
    }
}

// The producer warp after the W of the first pre steps is issued: ready() (every lane), their A,
// then every later step's W and A (issue_w(f), issue_a(f)) as the consumers release stages.
template <class Cfg, class Ready, class IssueW, class IssueA>
__device__ __forceinline__ void produce_rest(const Smem<Cfg> &sm, int pre, int total, Ready ready,
                                             const IssueW &issue_w, const IssueA &issue_a) {
    ready();                                            // every lane (lane 0 issues the copies)
    __syncwarp();
    fence_proxy_async_global();
    for (int f = 0; f < pre; ++f) issue_a(f);
    for (int f = pre; f < total; ++f) {
        mbarrier_wait_parity(sm.empty(f % Cfg::kStages), (unsigned)((f / Cfg::kStages - 1) & 1));
        issue_w(f);
        issue_a(f);
    }
}

// The producer warp's copies of a stream GEMM (its tiles tile_n0(0..count-1), its ring), in
// order of flat step f (issue_w, issue_a), in two parts: start() issues the W of the first
// kStages steps (it depends on nothing), finish(ready) the rest (produce_rest). A kernel that
// streams two GEMMs through two rings may start both before finishing either. (produce below
// issues the same copies in one piece, not through this struct: written through it, it changed
// the attention's sm_90a SASS.)
template <class Cfg, class TileN>
struct Producer {
    const Operands &op;
    TileN tile_n0;
    const Smem<Cfg> &sm;
    int lane, steps, total, pre;
    unsigned bytes;
    long long atoms_per_block;
    __device__ __forceinline__ Producer(const Operands &op_, int count, TileN tile_n0_,
                                        const Smem<Cfg> &sm_)
        : op(op_), tile_n0(tile_n0_), sm(sm_) {
        lane = (int)(threadIdx.x % 32);
        steps = op.k_len / Cfg::kKS, total = count * steps;
        // Whole boxes count, their rows past T (read as zeros) included.
        bytes = Cfg::kWBytes + Cfg::kABytes + Cfg::kWSfBytes;
        atoms_per_block = (op.w_kb + 3) / 4;                // SfAtom: K-atoms per 128-row block
        pre = total < Cfg::kStages ? total : Cfg::kStages;
    }
    __device__ __forceinline__ void issue_w(int f) const {
        sgemm::issue_w<Cfg>(op, sm, lane, f, tile_n0, steps, bytes, atoms_per_block);
    }
    __device__ __forceinline__ void issue_a(int f) const {
        sgemm::issue_a<Cfg>(op, sm, lane, f, steps);
    }
    __device__ __forceinline__ void start() const {
        for (int f = 0; f < pre; ++f) issue_w(f);
    }
    // L2 prefetches of the W boxes of steps [pre, pre + n) (cp.async.bulk.prefetch.tensor: no
    // shared memory, nothing waits for them), e.g. while the stream waits on ready().
    __device__ __forceinline__ void prefetch_w(int n) const {
        if (lane != 0) return;
        const int end = pre + n < total ? pre + n : total;
        for (int f = pre; f < end; ++f) {
            const int n0 = tile_n0(f / steps), k = op.w_k0 + (f % steps) * Cfg::kKS;
            for (int at = 0; at < Cfg::kAtoms; ++at)
                tma_prefetch_2d(&op.maps->w, k + 128 * at, n0);
        }
    }
    template <class Ready>
    __device__ __forceinline__ void finish(Ready ready) const {
        produce_rest<Cfg>(
            sm, pre, total, ready, [this](int f) { issue_w(f); }, [this](int f) { issue_a(f); });
    }
};

// The producer warp: the copies of every (tile, K-step) in order (flat step f = tile * steps +
// K-step, stage f % kStages), W first (the first kStages steps' W before ready()), then A.
template <class Cfg, class TileN, class Ready>
__device__ __forceinline__ void produce(const Operands &op, int count, TileN tile_n0,
                                        const Smem<Cfg> &sm, Ready ready) {
    const int lane = (int)(threadIdx.x % 32);
    const int steps = op.k_len / Cfg::kKS, total = count * steps;
    // Whole boxes count, their rows past T (read as zeros) included.
    const unsigned bytes = Cfg::kWBytes + Cfg::kABytes + Cfg::kWSfBytes;
    const long long atoms_per_block = (op.w_kb + 3) / 4;    // SfAtom: K-atoms per 128-row block
    auto issue_w = [&](int f) {
        sgemm::issue_w<Cfg>(op, sm, lane, f, tile_n0, steps, bytes, atoms_per_block);
    };
    auto issue_a = [&](int f) { sgemm::issue_a<Cfg>(op, sm, lane, f, steps); };
    const int pre = total < Cfg::kStages ? total : Cfg::kStages;
    for (int f = 0; f < pre; ++f) issue_w(f);
    produce_rest<Cfg>(sm, pre, total, ready, issue_w, issue_a);
}

// 2^(b - 127) for byte `byte` (0..3) of a word of ue8m0 scales: the byte moved to the exponent
// field (prmt + shift). Exact for 1 <= b <= 254; b = 0 gives 0 (not 2^-127) and b = 255 gives
// +inf (not NaN), which real MXFP8 data does not hold (quantizer scales are clamped to
// [-127, 127] + 127, and a scale of 2^-127 scales values below 2^-118).
__device__ __forceinline__ float ue8m0_of(unsigned word, int byte) {
    return __uint_as_float(__byte_perm(word, 0u, 0x0444u | ((unsigned)byte << 12)) >> 1);
}

// One consumer warp over all K-steps: acc[i][j] is its 16-row tile i x 8-token tile j.
// f0: the flat step of the tile's first K-step.
template <class Cfg>
__device__ __forceinline__ void consume(const Operands &op, int n0, int f0, const Smem<Cfg> &sm,
                                        float (&acc)[Cfg::kRT][Cfg::kNT][4]) {
    const int warp = (int)(threadIdx.x / 32), lane = (int)(threadIdx.x % 32);
    const int wr = warp % Cfg::kWR, wk = warp / Cfg::kWR;
    const int steps = op.k_len / Cfg::kKS;
    const int q = lane / 8, lr = lane % 8, c = lane % 4, gr = lane / 4;
    const unsigned char *table = sm.table();
#pragma unroll
    for (int i = 0; i < Cfg::kRT; ++i)
#pragma unroll
        for (int j = 0; j < Cfg::kNT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
    // The fragments of one 32-wide group: W rows (kRT tiles of 16), tokens (kNT tiles of 8),
    // the words of scales of the thread's two W rows and two tokens per tile.
    struct Frag {
        unsigned w[Cfg::kRT][4], a[Cfg::kNT][2], sw[Cfg::kRT][2], sa[Cfg::kNT][2];
    };
    const unsigned tbase = smem_u32(table);
    for (int ks = 0; ks < steps; ++ks) {
        const int f = f0 + ks, s = f % Cfg::kStages;
        mbarrier_wait_parity(sm.full(s), (unsigned)((f / Cfg::kStages) & 1));
        const unsigned wbase = smem_u32(sm.w(s)), abase = smem_u32(sm.a(s));
        const unsigned sfbase = smem_u32(sm.wsf(s));
        // Loads of group gi of this warp (chunks 2 (g % 4), 2 (g % 4) + 1 of the 128-byte rows of
        // box g / 4, swizzled; lanes 0..15 address the .x2 loads).
        auto load = [&](int gi, Frag &fr) {
            const int g = wk * Cfg::kWarpGroups + gi, gg = g % 4;
            const int kg = ks * Cfg::kGroups + g;              // group in A's K range
#pragma unroll
            for (int j = 0; j < Cfg::kNT; ++j) {
                ldsm_x2(fr.a[j], abase + (g / 4) * Cfg::kABox + (8 * j + lr) * 128 +
                                     (((2 * gg + (q & 1)) ^ lr) * 16));
                const unsigned t0 = tbase + (8 * j + 2 * c) * Cfg::kSfRow + (kg & ~3);
                asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(fr.sa[j][0]) : "r"(t0));
                asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(fr.sa[j][1]) : "r"(t0 + Cfg::kSfRow));
            }
#pragma unroll
            for (int i = 0; i < Cfg::kRT; ++i) {
                const int row0 = wr * Cfg::kWarpRows + 16 * i;
                ldsm_x4(fr.w[i], wbase + (g / 4) * Cfg::kWBox + (row0 + lr + 8 * (q & 1)) * 128 +
                                     (((2 * gg + q / 2) ^ lr) * 16));
                // SfAtom: row n of the 128-row block has its K-atom's four scales in the word at
                // (n % 32) * 16 + ((n % 128) / 32) * 4 of the atom's 512-byte block.
                const int n_a = n0 % 128 + row0 + gr, n_b = n_a + 8;
                const unsigned blk = sfbase + (g / 4) * 512;
                asm volatile("ld.shared.u32 %0, [%1];\n"
                             : "=r"(fr.sw[i][0]) : "r"(blk + (n_a % 32) * 16 + (n_a / 32) * 4));
                asm volatile("ld.shared.u32 %0, [%1];\n"
                             : "=r"(fr.sw[i][1]) : "r"(blk + (n_b % 32) * 16 + (n_b / 32) * 4));
            }
        };
        auto compute = [&](int gi, const Frag &fr) {
            const int g = wk * Cfg::kWarpGroups + gi, gg = g % 4;
            const int kg = ks * Cfg::kGroups + g;
            unsigned b[Cfg::kNT][4];
            float sa[Cfg::kNT][2];
#pragma unroll
            for (int j = 0; j < Cfg::kNT; ++j) {
                e4m3x4_to_f16x2x2(fr.a[j][0], b[j][0], b[j][1]);
                e4m3x4_to_f16x2x2(fr.a[j][1], b[j][2], b[j][3]);
                sa[j][0] = ue8m0_of(fr.sa[j][0], kg & 3);
                sa[j][1] = ue8m0_of(fr.sa[j][1], kg & 3);
            }
#pragma unroll
            for (int i = 0; i < Cfg::kRT; ++i) {
                unsigned a0[4], a1[4];
                e4m3x4_to_f16x2x2(fr.w[i][0], a0[0], a0[2]);
                e4m3x4_to_f16x2x2(fr.w[i][1], a0[1], a0[3]);
                e4m3x4_to_f16x2x2(fr.w[i][2], a1[0], a1[2]);
                e4m3x4_to_f16x2x2(fr.w[i][3], a1[1], a1[3]);
                const float sw0 = ue8m0_of(fr.sw[i][0], gg), sw1 = ue8m0_of(fr.sw[i][1], gg);
#pragma unroll
                for (int j = 0; j < Cfg::kNT; ++j) {
                    float p[4];
                    mma_f16_zero(p, a0, b[j][0], b[j][1]);
                    mma_f16(p, a1, b[j][2], b[j][3]);
                    acc[i][j][0] = fmaf(p[0], sw0 * sa[j][0], acc[i][j][0]);
                    acc[i][j][1] = fmaf(p[1], sw0 * sa[j][1], acc[i][j][1]);
                    acc[i][j][2] = fmaf(p[2], sw1 * sa[j][0], acc[i][j][2]);
                    acc[i][j][3] = fmaf(p[3], sw1 * sa[j][1], acc[i][j][3]);
                }
            }
        };
        // Software pipeline over the warp's groups: group gi + 1's loads before group gi's math.
        Frag fr[2];
        load(0, fr[0]);
#pragma unroll
        for (int gi = 0; gi < Cfg::kWarpGroups; ++gi) {
            if (gi + 1 < Cfg::kWarpGroups) load(gi + 1, fr[(gi + 1) % 2]);
            compute(gi, fr[gi % 2]);
        }
        __syncwarp();
        if (lane == 0) mbarrier_arrive(sm.empty(s));
    }
}

// The wgmma consumer (sm_90a): warpgroup wk of the consumers over all K-steps, its groups
// g = wk * kWarpGroups .. of every stage, all kBN rows (kMB 64-row blocks as the wgmma's M =
// W rows, A operand), the kTP tokens as N (B operand). Per 32-wide group: one
// m64nNk32 e4m3 wgmma per row block into a fresh fp32 partial, then (after the chunk's wait)
// acc += partial x 2^(sw - 127) 2^(sa - 127), as in consume. acc[mb][j][e] is row
// 64 mb + 16 (warp % 4) + lane / 4 + 8 (e / 2), token 8 j + 2 (lane % 4) + e % 2.
// Descriptors: the W box of atom g / 4 (8-row atoms of 1024 B: SBO 1024), start advanced by 32
// bytes per group inside the 128-byte row (as a k16 step of 16-bit data in common/wgmma.cuh),
// 8192 bytes per 64-row block; the A box of the atom likewise (kTP = N rows).
template <class Cfg>
__device__ __forceinline__ void consume_wg(const Operands &op, int n0, int f0, const Smem<Cfg> &sm,
                                           float (&acc)[Cfg::kMB][Cfg::kNT][4]) {
    const int warp = (int)(threadIdx.x / 32), lane = (int)(threadIdx.x % 32);
    const int wk = warp / 4, w4 = warp % 4;
    const int steps = op.k_len / Cfg::kKS;
    const int c = lane % 4, gr = lane / 4;
    const unsigned tbase = smem_u32(sm.table());
#pragma unroll
    for (int i = 0; i < Cfg::kMB; ++i)
#pragma unroll
        for (int j = 0; j < Cfg::kNT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
    for (int ks = 0; ks < steps; ++ks) {
        const int f = f0 + ks, s = f % Cfg::kStages;
        mbarrier_wait_parity(sm.full(s), (unsigned)((f / Cfg::kStages) & 1));
        __syncwarp();                                   // converged for the .aligned wgmma
        const unsigned wbase = smem_u32(sm.w(s)), abase = smem_u32(sm.a(s));
        const unsigned sfbase = smem_u32(sm.wsf(s));
#pragma unroll
        for (int c0 = 0; c0 < Cfg::kWarpGroups; c0 += Cfg::kChunk) {
            float p[Cfg::kChunk][Cfg::kMB][Cfg::kNT][4];
            wgmma_fence();
#pragma unroll
            for (int ci = 0; ci < Cfg::kChunk; ++ci) {
                const int g = wk * Cfg::kWarpGroups + c0 + ci, at = g / 4, gg = g % 4;
                const unsigned long long db =
                    wgmma_desc_sw128(abase + at * Cfg::kABox + gg * 32, 16, 1024);
#pragma unroll
                for (int mb = 0; mb < Cfg::kMB; ++mb)
                    wgmma_e4m3<Cfg::kNT>(
                        p[ci][mb],
                        wgmma_desc_sw128(wbase + at * Cfg::kWBox + mb * 8192 + gg * 32, 16, 1024),
                        db);
            }
            wgmma_commit_group();
            // The scales of the chunk's groups while the products run.
            unsigned swd[Cfg::kChunk][Cfg::kMB][2], sad[Cfg::kChunk][Cfg::kNT][2];
#pragma unroll
            for (int ci = 0; ci < Cfg::kChunk; ++ci) {
                const int g = wk * Cfg::kWarpGroups + c0 + ci, at = g / 4;
                const int kg = ks * Cfg::kGroups + g;
#pragma unroll
                for (int j = 0; j < Cfg::kNT; ++j) {
                    const unsigned t0 = tbase + (8 * j + 2 * c) * Cfg::kSfRow + (kg & ~3);
                    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(sad[ci][j][0]) : "r"(t0));
                    asm volatile("ld.shared.u32 %0, [%1];\n"
                                 : "=r"(sad[ci][j][1]) : "r"(t0 + Cfg::kSfRow));
                }
#pragma unroll
                for (int mb = 0; mb < Cfg::kMB; ++mb) {
                    // Rows past kBN (kBN 32) read a valid word of the block and are discarded.
                    const int n_a = (n0 % 128 + 64 * mb + 16 * w4 + gr) % 128, n_b = (n_a + 8) % 128;
                    const unsigned blk = sfbase + at * 512;
                    asm volatile("ld.shared.u32 %0, [%1];\n"
                                 : "=r"(swd[ci][mb][0]) : "r"(blk + (n_a % 32) * 16 + (n_a / 32) * 4));
                    asm volatile("ld.shared.u32 %0, [%1];\n"
                                 : "=r"(swd[ci][mb][1]) : "r"(blk + (n_b % 32) * 16 + (n_b / 32) * 4));
                }
            }
            wgmma_wait_group<0>();
#pragma unroll
            for (int ci = 0; ci < Cfg::kChunk; ++ci)
#pragma unroll
                for (int mb = 0; mb < Cfg::kMB; ++mb)
#pragma unroll
                    for (int j = 0; j < Cfg::kNT; ++j)
#pragma unroll
                        for (int e = 0; e < 4; ++e) fence_operand(p[ci][mb][j][e]);
#pragma unroll
            for (int ci = 0; ci < Cfg::kChunk; ++ci) {
                const int g = wk * Cfg::kWarpGroups + c0 + ci, gg = g % 4;
                const int kg = ks * Cfg::kGroups + g;
                float sa[Cfg::kNT][2];
#pragma unroll
                for (int j = 0; j < Cfg::kNT; ++j) {
                    sa[j][0] = ue8m0_of(sad[ci][j][0], kg & 3);
                    sa[j][1] = ue8m0_of(sad[ci][j][1], kg & 3);
                }
#pragma unroll
                for (int mb = 0; mb < Cfg::kMB; ++mb) {
                    const float sw0 = ue8m0_of(swd[ci][mb][0], gg);
                    const float sw1 = ue8m0_of(swd[ci][mb][1], gg);
#pragma unroll
                    for (int j = 0; j < Cfg::kNT; ++j) {
                        acc[mb][j][0] = fmaf(p[ci][mb][j][0], sw0 * sa[j][0], acc[mb][j][0]);
                        acc[mb][j][1] = fmaf(p[ci][mb][j][1], sw0 * sa[j][1], acc[mb][j][1]);
                        acc[mb][j][2] = fmaf(p[ci][mb][j][2], sw1 * sa[j][0], acc[mb][j][2]);
                        acc[mb][j][3] = fmaf(p[ci][mb][j][3], sw1 * sa[j][1], acc[mb][j][3]);
                    }
                }
            }
        }
        __syncwarp();
        if (lane == 0) mbarrier_arrive(sm.empty(s));
    }
}

// The wgmma-rows consumer (kMathWgmmaRows, sm_90a): consumer warpgroup wg multiplies rows
// 64 wg .. 64 wg + 63 of the tile over every group of every stage, one
// wgmma.m64nNk32.e4m3 per 32-wide group into a fresh fp32 partial (two partials in turn), the
// next group's wgmma issued before the current one's promotion (acc += partial x 2^(sw - 127)
// 2^(sa - 127)), so that the tensor cores and the promotion's FMAs overlap; a stage is released
// once its last group's product has retired. The A scales come from the float table (ftable,
// [group][token]). acc[j][e] is row 64 wg + 16 (warp % 4) + lane / 4 + 8 (e / 2), token
// 8 j + 2 (lane % 4) + e % 2. Descriptors as in consume_wg.
template <class Cfg>
__device__ __forceinline__ void consume_wgr(const Operands &op, int n0, int f0, const Smem<Cfg> &sm,
                                            float (&acc)[Cfg::kNT][4]) {
    const int warp = (int)(threadIdx.x / 32), lane = (int)(threadIdx.x % 32);
    const int wg = warp / 4, w4 = warp % 4;
    const int steps = op.k_len / Cfg::kKS;
    const int c = lane % 4, gr = lane / 4;
    const float *ftab = sm.ftable();
    // The thread's two rows in the SfAtom block: row n's four scales of a K-atom in the word at
    // (n % 32) * 16 + ((n % 128) / 32) * 4 of the atom's 512-byte block.
    const int n_a = n0 % 128 + 64 * wg + 16 * w4 + gr, n_b = n_a + 8;
    const unsigned sf_a = (unsigned)((n_a % 32) * 16 + (n_a / 32) * 4);
    const unsigned sf_b = (unsigned)((n_b % 32) * 16 + (n_b / 32) * 4);
#pragma unroll
    for (int j = 0; j < Cfg::kNT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
    float p[2][Cfg::kNT][4];
    // Group g (0 .. kGroups - 1) of stage s into partial d.
    auto issue = [&](int s, int g, float (&d)[Cfg::kNT][4]) {
        const int at = g / 4, gg = g % 4;
        const unsigned wbase = smem_u32(sm.w(s)), abase = smem_u32(sm.a(s));
        wgmma_fence();
        wgmma_e4m3<Cfg::kNT>(
            d, wgmma_desc_sw128(wbase + at * Cfg::kWBox + wg * 8192 + gg * 32, 16, 1024),
            wgmma_desc_sw128(abase + at * Cfg::kABox + gg * 32, 16, 1024));
        wgmma_commit_group();
    };
    for (int ks = 0; ks < steps; ++ks) {
        const int f = f0 + ks, s = f % Cfg::kStages;
        mbarrier_wait_parity(sm.full(s), (unsigned)((f / Cfg::kStages) & 1));
        __syncwarp();
        issue(s, 0, p[0]);
        const unsigned sfbase = smem_u32(sm.wsf(s));
        unsigned swd_a = 0u, swd_b = 0u;
        // No branch or loop while a product is in flight (ptxas serializes the wgmmas of a
        // region it cannot follow): the stage's last group waits for everything, and the next
        // stage's barrier is waited for before its first product.
#pragma unroll
        for (int g = 0; g < Cfg::kGroups; ++g) {
            if (g + 1 < Cfg::kGroups) issue(s, g + 1, p[(g + 1) % 2]);
            // The group's scales while the products run.
            if (g % 4 == 0) {
                const unsigned blk = sfbase + (g / 4) * 512;
                asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(swd_a) : "r"(blk + sf_a));
                asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(swd_b) : "r"(blk + sf_b));
            }
            const int kg = ks * Cfg::kGroups + g;
            float2 sa[Cfg::kNT];
#pragma unroll
            for (int j = 0; j < Cfg::kNT; ++j)
                sa[j] = *reinterpret_cast<const float2 *>(ftab + kg * Cfg::kTP + 8 * j + 2 * c);
            const float sw0 = ue8m0_of(swd_a, g % 4), sw1 = ue8m0_of(swd_b, g % 4);
            if (g + 1 < Cfg::kGroups)
                wgmma_wait_group<1>();
            else
                wgmma_wait_group<0>();
            float (&d)[Cfg::kNT][4] = p[g % 2];
#pragma unroll
            for (int j = 0; j < Cfg::kNT; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) fence_operand(d[j][e]);
#pragma unroll
            for (int j = 0; j < Cfg::kNT; ++j) {
                acc[j][0] = fmaf(d[j][0], sw0 * sa[j].x, acc[j][0]);
                acc[j][1] = fmaf(d[j][1], sw0 * sa[j].y, acc[j][1]);
                acc[j][2] = fmaf(d[j][2], sw1 * sa[j].x, acc[j][2]);
                acc[j][3] = fmaf(d[j][3], sw1 * sa[j].y, acc[j][3]);
            }
        }
        __syncwarp();                                   // every product of the stage retired
        if (lane == 0) mbarrier_arrive(sm.empty(s));
    }
}

// The diagnostic consumer (kMathNone): every stage waited for and released unread.
template <class Cfg>
__device__ __forceinline__ void consume_none(int f0, int steps, const Smem<Cfg> &sm) {
    for (int ks = 0; ks < steps; ++ks) {
        const int f = f0 + ks, s = f % Cfg::kStages;
        mbarrier_wait_parity(sm.full(s), (unsigned)((f / Cfg::kStages) & 1));
        __syncwarp();
        if (threadIdx.x % 32 == 0) mbarrier_arrive(sm.empty(s));
    }
}

// A consumer warp's mma.sync accumulators (kRT row tiles of 16 rows in its row slab wr, kNT
// groups of 8 tokens, m16n8 fragments) into its slab of the reduction buffer: mine[r kDPitch + t].
// Shared with the bf16 sibling (dsv4/stream_bf16.cuh), whose Cfg has the same fragment fields.
template <class Cfg>
__device__ __forceinline__ void store_acc(float *mine, const float (&acc)[Cfg::kRT][Cfg::kNT][4],
                                          int wr, int lane) {
#pragma unroll
    for (int it = 0; it < Cfg::kRT; ++it)
#pragma unroll
        for (int j = 0; j < Cfg::kNT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = wr * Cfg::kWarpRows + 16 * it + lane / 4 + 8 * (e / 2);
                const int t = 8 * j + 2 * (lane % 4) + e % 2;
                mine[r * Cfg::kDPitch + t] = acc[it][j][e];
            }
}

// A wgmma-rows consumer thread's accumulators (consume_wgr: warp w's 16 rows of its warpgroup's
// 64, kNT groups of 8 tokens) into the reduction buffer: mine[r kDPitch + t].
template <class Cfg>
__device__ __forceinline__ void store_acc_wgr(float *mine, const float (&acc)[Cfg::kNT][4],
                                              int warp, int lane) {
#pragma unroll
    for (int j = 0; j < Cfg::kNT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int r = 16 * warp + lane / 4 + 8 * (e / 2);
            const int t = 8 * j + 2 * (lane % 4) + e % 2;
            mine[r * Cfg::kDPitch + t] = acc[j][e];
        }
}

// With kWK > 1 K-split warps: red[w][r][t] summed over w in order 0, 1, ... into red[0], then a
// barrier of the consumers (none needed, and none done, with one).
template <class Cfg>
__device__ __forceinline__ void sum_k_warps(float *red, int tid) {
    if (Cfg::kWK > 1) {
        for (int x = tid; x < Cfg::kBN * Cfg::kDPitch; x += Cfg::kConsumers) {
            float v = red[x];
#pragma unroll
            for (int w = 1; w < Cfg::kWK; ++w) v += red[w * Cfg::kBN * Cfg::kDPitch + x];
            red[x] = v;
        }
        named_barrier_sync(1, Cfg::kConsumers);
    }
}

// The consumers' A scale table (threads tid < kConsumers): ready() by thread 0, then rows t < T
// from global (written by other CTAs or an earlier kernel, after ready()), rows T..kTP-1 zero,
// between two barriers of the consumers.
template <class Cfg, class Ready>
__device__ __forceinline__ void load_a_table(const Operands &op, const Smem<Cfg> &sm, int tid,
                                             Ready ready) {
    if (tid == 0) ready();
    named_barrier_sync(1, Cfg::kConsumers);
    const int words = op.k_len / 32 / 4;                // k_len / 32 is a multiple of 4
    for (int i = tid; i < Cfg::kTP * (Cfg::kSfRow / 4); i += Cfg::kConsumers) {
        const int t = i / (Cfg::kSfRow / 4), wd = i % (Cfg::kSfRow / 4);
        unsigned v = 0u;
        if (t < op.T && wd < words)
            v = __ldcg(reinterpret_cast<const unsigned int *>(op.a_sf + t * op.lda_sf) + wd);
        reinterpret_cast<unsigned int *>(sm.table())[i] = v;
    }
    if constexpr (Cfg::kWgR) {  // only the wgmma-rows consumer reads it (the mma.sync fallback
                                // keeps the room, so that the shared memory is arch-independent)
        named_barrier_sync(1, Cfg::kConsumers);
        for (int i = tid; i < Cfg::kTP * Cfg::kSfRow; i += Cfg::kConsumers) {
            const int g = i / Cfg::kTP, t = i % Cfg::kTP;
            const unsigned w = reinterpret_cast<const unsigned int *>(
                sm.table())[(t * Cfg::kSfRow + g) / 4];
            sm.ftable()[i] = ue8m0_of(w, g % 4);
        }
    }
    named_barrier_sync(1, Cfg::kConsumers);
}

// For a kernel that runs the ring pieces itself (two rings in one CTA): the ring's barriers
// (thread 0 of the block; a __syncthreads must follow before any use) and their invalidation
// once every copy has landed and every wait is done (one thread); the 1024-byte aligned base of
// a ring in dynamic shared memory.
template <class Cfg>
__device__ __forceinline__ void init_ring(const Smem<Cfg> &sm) {
    for (int s = 0; s < Cfg::kStages; ++s) {
        mbarrier_init(sm.full(s), 1);
        mbarrier_init(sm.empty(s), Cfg::kConsumerWarps);
    }
}
template <class Cfg>
__device__ __forceinline__ void inval_ring(const Smem<Cfg> &sm) {
    for (int s = 0; s < 2 * Cfg::kStages; ++s)
        asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(
                         smem_u32(sm.base + Cfg::kBarOffset + 8 * s))
                     : "memory");
}
__device__ __forceinline__ unsigned char *ring_base(unsigned char *smem_in) {
    return smem_in + ((1024u - (smem_u32(smem_in) & 1023u)) & 1023u);
}

// The consumers' part of run_tiles (threads tid < kConsumers, after the ring's barriers are
// initialized and the prologue is done): ready(), the A scale table, then every tile's K loop,
// K-part sum and epilogue(i, n0, D, T), for a kernel that runs the ring pieces itself. run_tiles
// keeps its own copy of the tile loop: calling this from it changed the attention's sm_90a SASS,
// and so did the loop body as a shared consume_tile (the stream kinds' SASS).
template <class Cfg, class TileN, class Ready, class Epilogue>
__device__ __forceinline__ void consume_tiles(const Operands &op, int count, const TileN &tile_n0,
                                              const Smem<Cfg> &sm, const Ready &ready,
                                              const Epilogue &epilogue) {
    const int tid = (int)threadIdx.x;
    // The A scale table (ready() first).
    load_a_table<Cfg>(op, sm, tid, ready);
    float *red = reinterpret_cast<float *>(sm.base + Cfg::kRedOffset);
    const int steps = op.k_len / Cfg::kKS;
    const int warp = tid / 32, lane = tid % 32;
    const int wr = warp % Cfg::kWR;
    const int wk = Cfg::kWgR ? 0 : (Cfg::kWg ? warp / 4 : warp / Cfg::kWR);
    for (int i = 0; i < count; ++i) {
        const int n0 = tile_n0(i);
        // red[wk][r][t], summed over wk in order 0, 1, ... into red[0]. The first barrier: every
        // consumer is past the previous epilogue (and, with one tile, done with the ring).
        float *mine = red + wk * Cfg::kBN * Cfg::kDPitch;
        if constexpr (Cfg::kWgR) {
            float acc[Cfg::kNT][4];
            consume_wgr<Cfg>(op, n0, i * steps, sm, acc);
            named_barrier_sync(1, Cfg::kConsumers);
            store_acc_wgr<Cfg>(mine, acc, warp, lane);
        } else if constexpr (Cfg::kWg) {
            float acc[Cfg::kMB][Cfg::kNT][4];
            consume_wg<Cfg>(op, n0, i * steps, sm, acc);
            named_barrier_sync(1, Cfg::kConsumers);
#pragma unroll
            for (int mb = 0; mb < Cfg::kMB; ++mb)
#pragma unroll
                for (int j = 0; j < Cfg::kNT; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int r = 64 * mb + 16 * (warp % 4) + lane / 4 + 8 * (e / 2);
                        const int t = 8 * j + 2 * (lane % 4) + e % 2;
                        if (r < Cfg::kBN) mine[r * Cfg::kDPitch + t] = acc[mb][j][e];
                    }
        } else if constexpr (Cfg::kMath == kMathNone) {
            consume_none<Cfg>(i * steps, steps, sm);
            named_barrier_sync(1, Cfg::kConsumers);
        } else {
            float acc[Cfg::kRT][Cfg::kNT][4];
            consume<Cfg>(op, n0, i * steps, sm, acc);
            named_barrier_sync(1, Cfg::kConsumers);
            store_acc<Cfg>(mine, acc, wr, lane);
        }
        named_barrier_sync(1, Cfg::kConsumers);
        sum_k_warps<Cfg>(red, tid);
        epilogue(i, n0, static_cast<const float *>(red), op.T);
    }
}

// The tiles tile_n0(0), ..., tile_n0(count - 1) of this CTA (W rows n0 .. n0 + BN - 1 each,
// the same A and K range) through one ring: the next tile's copies are in flight while the
// current one is reduced and handed to epilogue(i, n0, D, T). count > 1 needs Cfg::kMulti. All
// threads of the block call it (at least Cfg::kThreads; warps past the producer return at once).
struct NoPrologue {
    __device__ __forceinline__ void operator()() const {}
};

template <class Cfg, class TileN, class Ready, class Epilogue, class Prologue = NoPrologue>
__device__ __forceinline__ void run_tiles(const Operands &op, int count, TileN tile_n0,
                                          unsigned char *smem_in, Ready ready, Epilogue epilogue,
                                          Prologue prologue = Prologue()) {
    unsigned char *smem = smem_in + ((1024u - (smem_u32(smem_in) & 1023u)) & 1023u);
    const Smem<Cfg> sm{smem};
    const int tid = (int)threadIdx.x;
    if (!Cfg::kMulti && count > 1) __trap();
    if (tid == 0) {
        for (int s = 0; s < Cfg::kStages; ++s) {
            mbarrier_init(sm.full(s), 1);
            mbarrier_init(sm.empty(s), Cfg::kConsumerWarps);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (tid >= Cfg::kConsumers + 32) return;            // idle warps of a larger block
    if (tid >= Cfg::kConsumers) {                       // the producer warp
        if (count > 0) produce<Cfg>(op, count, tile_n0, sm, ready);
        return;
    }
    if (count <= 0) return;
    // The consumers' own work before they need A (the producer streams W meanwhile).
    prologue();
    // The A scale table (ready() first).
    load_a_table<Cfg>(op, sm, tid, ready);
    float *red = reinterpret_cast<float *>(smem + Cfg::kRedOffset);
    const int steps = op.k_len / Cfg::kKS;
    const int warp = tid / 32, lane = tid % 32;
    const int wr = warp % Cfg::kWR;
    const int wk = Cfg::kWgR ? 0 : (Cfg::kWg ? warp / 4 : warp / Cfg::kWR);
    for (int i = 0; i < count; ++i) {
        const int n0 = tile_n0(i);
        // red[wk][r][t], summed over wk in order 0, 1, ... into red[0]. The first barrier: every
        // consumer is past the previous epilogue (and, with one tile, done with the ring).
        float *mine = red + wk * Cfg::kBN * Cfg::kDPitch;
        if constexpr (Cfg::kWgR) {
            float acc[Cfg::kNT][4];
            consume_wgr<Cfg>(op, n0, i * steps, sm, acc);
            named_barrier_sync(1, Cfg::kConsumers);
            store_acc_wgr<Cfg>(mine, acc, warp, lane);
        } else if constexpr (Cfg::kWg) {
            float acc[Cfg::kMB][Cfg::kNT][4];
            consume_wg<Cfg>(op, n0, i * steps, sm, acc);
            named_barrier_sync(1, Cfg::kConsumers);
#pragma unroll
            for (int mb = 0; mb < Cfg::kMB; ++mb)
#pragma unroll
                for (int j = 0; j < Cfg::kNT; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int r = 64 * mb + 16 * (warp % 4) + lane / 4 + 8 * (e / 2);
                        const int t = 8 * j + 2 * (lane % 4) + e % 2;
                        if (r < Cfg::kBN) mine[r * Cfg::kDPitch + t] = acc[mb][j][e];
                    }
        } else if constexpr (Cfg::kMath == kMathNone) {
            consume_none<Cfg>(i * steps, steps, sm);
            named_barrier_sync(1, Cfg::kConsumers);
        } else {
            float acc[Cfg::kRT][Cfg::kNT][4];
            consume<Cfg>(op, n0, i * steps, sm, acc);
            named_barrier_sync(1, Cfg::kConsumers);
            store_acc<Cfg>(mine, acc, wr, lane);
        }
        named_barrier_sync(1, Cfg::kConsumers);
        sum_k_warps<Cfg>(red, tid);
        epilogue(i, n0, static_cast<const float *>(red), op.T);
    }
    // Every copy has landed and every wait is done: the barriers' memory may be reused.
    named_barrier_sync(1, Cfg::kConsumers);
    if (tid == 0)
        for (int s = 0; s < 2 * Cfg::kStages; ++s)
            asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(
                             smem_u32(smem + Cfg::kBarOffset + 8 * s))
                         : "memory");
}

// One tile (rows n0 ..): run_tiles with count 1; epilogue(D, T).
template <class Cfg, class Ready, class Epilogue, class Prologue = NoPrologue>
__device__ __forceinline__ void run(const Operands &op, int n0, unsigned char *smem, Ready ready,
                                    Epilogue epilogue, Prologue prologue = Prologue()) {
    run_tiles<Cfg>(
        op, 1, [n0](int) { return n0; }, smem, ready,
        [&](int, int, const float *D, int T) { epilogue(D, T); }, prologue);
}

}  // namespace sgemm
}  // namespace mla
