// A block-scaled GEMM building block, portable (mma.sync, ldmatrix, cp.async; sm_80 and up, so
// sm_90a and sm_100a alike): one CTA computes one output tile
//
//   C[m0 + r, n0 + c] = sum_k A[m0 + r, k] * Wd[n0 + c, w_k0 + k]       (fp32 accumulation)
//   for r < BM, c < BN, k < k_len,
//
// A     either bf16 (AKind::kBf16): element (m, k) at a[m * lda + k],
//       or bf16 replaced by mxq(A) (AKind::kBf16Mxq): the same bf16 A, quantized group-32 along
//       K (e4m3 / ue8m0, common/fp8.cuh) in shared memory before the MMAs (exact in bf16),
//       or fp8 e4m3 with group-32 ue8m0 scales (AKind::kFp8): byte (m, k) at a[m * lda + k], the
//       scale of A(m, 32j .. 32j + 31) at a_sf[m * lda_sf + j] (row-major [M, K / 32]);
//       rows m0 + r with r >= m_valid are never read and count as zero;
// Wd    either fp8 e4m3 W (WKind::kFp8, byte (n, k) at w[n * ldw + k]) times its ue8m0 scales in
//       SfAtom order over the whole W (w_kb = W's K / 32 blocks per row; see common/fp8.cuh),
//       or bf16 W (WKind::kBf16, element (n, k) at byte w + n * ldw + 2 k, no scales);
//       all BN rows valid.
//
// Method (PTX wrappers: common/ptx_mma.cuh): a kStages-deep cp.async pipeline brings raw K-steps
// of BK = 128 (one SfAtom K-atom: four scales per row, one 32-bit word) into shared memory; each
// K-step's fp8 tiles are dequantized to bf16 tiles in shared memory (exact: e4m3 x ue8m0 values
// are bf16 values), kBf16Mxq A is replaced in its stage by mxq(A), then every warp runs
// ldmatrix + mma.sync.m16n8k16 bf16 over its kWarpM x kWarpN sub-tile: for each 16-wide k of
// the K-step in order, one MMA per (m16, n8) tile, so each accumulator sums its K in ascending
// order whatever the tile shape. bf16 operands are copied into the stage already in the tile
// layout and multiplied from there. bf16 tiles are [rows][128] with 16-byte chunk c of row r
// stored at chunk c ^ (r % 8) (conflict-free ldmatrix).
//
// Use (inside any kernel whose block has exactly Cfg::kThreads threads, e.g. a persistent loop
// over tiles): every thread calls mma_tile<Cfg>(ops, m0, n0, m_valid, smem, acc) with the same
// arguments and Cfg::kSmemBytes bytes of 128-byte aligned shared memory; it returns with acc
// holding the tile (see Accum for which thread holds which element), every cp.async drained and
// the block synchronized, so smem may be reused at once. Requirements: k_len % 128 == 0,
// w_k0 % 128 == 0, lda (bytes for fp8, elements * 2 for bf16) and ldw multiples of 16, lda_sf a
// multiple of 4, 16-byte aligned a and w, 4-byte aligned a_sf and w_sf. Only the A rows of warps
// that own a row < m_valid are loaded and converted (a_rows_used), so small m_valid costs little.
//
// mma_tiles runs a CTA's sequence of tiles (same operands, same K range) through one pipeline
// that carries over from tile to tile, handing each finished tile to an epilogue.
//
// Also here: splitk_arrive, the last-slice handshake of split-K tiles (fp32 partials summed in a
// fixed slice order), and prefetch_l2 / prefetch_l2_range (prefetch.global.L2 hints).
#pragma once

#include <cuda_bf16.h>

#include "common/bf16.cuh"
#include "common/fp8.cuh"
#include "common/grid_barrier.cuh"
#include "common/ptx_mma.cuh"

namespace mla {
namespace gemm {

// mov.u32 %dynamic_smem_size: bytes of dynamic shared memory this launch gave the CTA.
__device__ __forceinline__ unsigned int dynamic_smem_bytes() {
    unsigned int n;
    asm volatile("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(n));
    return n;
}

enum class AKind { kBf16, kBf16Mxq, kFp8 };
enum class WKind { kFp8, kBf16 };

// Tile shape, warp grid, pipeline depth and operand kinds. Cfg::kSmemBytes is the shared memory
// mma_tile needs.
template <int kBM_, int kBN_, int kWarpsM_, int kWarpsN_, int kStages_, AKind kA_,
          WKind kW_ = WKind::kFp8>
struct Config {
    static constexpr int kBM = kBM_, kBN = kBN_, kWarpsM = kWarpsM_, kWarpsN = kWarpsN_;
    static constexpr int kStages = kStages_;
    static constexpr AKind kA = kA_;
    static constexpr WKind kW = kW_;
    static constexpr int kBK = 128;                      // one SfAtom K-atom
    static constexpr int kThreads = kWarpsM * kWarpsN * 32;
    static constexpr int kWarpM = kBM / kWarpsM, kWarpN = kBN / kWarpsN;
    static constexpr int kMT = kWarpM / 16, kNT = kWarpN / 8;  // mma tiles per warp
    static_assert(kBM % (16 * kWarpsM) == 0, "warp rows: a multiple of 16");
    static_assert(kBN % (16 * kWarpsN) == 0, "warp columns: a multiple of 16 (ldmatrix.x4 pairs)");
    static_assert(kStages >= 2, "at least double buffering");
    // One pipeline stage: raw A (bf16 in tile layout, or fp8 bytes), A scales, raw W (likewise),
    // W scales.
    static constexpr int kARawBytes = kA == AKind::kFp8 ? kBM * kBK : kBM * kBK * 2;
    static constexpr int kASfBytes = kA == AKind::kFp8 ? kBM * 4 : 0;
    static constexpr int kWRawBytes = kW == WKind::kFp8 ? kBN * kBK : kBN * kBK * 2;
    static constexpr int kWSfBytes = kW == WKind::kFp8 ? kBN * 4 : 0;
    static constexpr int kStageBytes = kARawBytes + kASfBytes + kWRawBytes + kWSfBytes;
    static_assert(kStageBytes % 128 == 0, "stages stay 128-byte aligned");
    // The bf16 tiles the MMAs read (bf16 operands are read in their stage).
    static constexpr int kATileBytes = kA == AKind::kFp8 ? kBM * kBK * 2 : 0;
    static constexpr int kWTileBytes = kW == WKind::kFp8 ? kBN * kBK * 2 : 0;
    static constexpr int kSmemBytes = kStages * kStageBytes + kATileBytes + kWTileBytes;
};

// Rows of the A tile that any MMA reads: the rows of the warps that own a row < m_valid (a warp
// whose rows all lie past m_valid skips the MMAs). Only these rows are loaded and converted; the
// ones among them past m_valid are zero-filled, so every computed C row >= m_valid is zero.
template <class Cfg>
__device__ __forceinline__ int a_rows_used(int m_valid) {
    const int r = (m_valid + Cfg::kWarpM - 1) / Cfg::kWarpM * Cfg::kWarpM;
    return r < Cfg::kBM ? r : Cfg::kBM;
}

// Where the operands are; see the top of the file.
struct Operands {
    const void *a;
    const unsigned char *a_sf;   // AKind::kFp8 only
    long long lda, lda_sf;       // A row stride in elements, scale row stride in bytes
    const unsigned char *w;
    const unsigned char *w_sf;   // SfAtom over the whole W (WKind::kFp8 only)
    long long ldw;               // W row stride in bytes
    int w_kb;                    // W's K / 32 (the SfAtom's blocks per row)
    int w_k0;                    // first W column of the tile's K range
    int k_len;                   // K of the tile, a multiple of 128
};

// The fp32 accumulators of one thread. Element c[mt][nt][i] is C at tile row
// row(mt, i / 2) and tile column col(nt, i % 2): m16n8 fragment layout, rows lane / 4 (+8),
// columns 2 * (lane % 4) (+1) of the warp's sub-tile.
template <class Cfg>
struct Accum {
    float c[Cfg::kMT][Cfg::kNT][4];

    __device__ __forceinline__ static int warp_row0() {
        return (int)(threadIdx.x / 32) / Cfg::kWarpsN * Cfg::kWarpM;
    }
    __device__ __forceinline__ static int warp_col0() {
        return (int)(threadIdx.x / 32) % Cfg::kWarpsN * Cfg::kWarpN;
    }
    // Tile row of c[mt][*][2 * half + *].
    __device__ __forceinline__ static int row(int mt, int half) {
        return warp_row0() + mt * 16 + (int)(threadIdx.x % 32) / 4 + 8 * half;
    }
    // Tile column of c[*][nt][2 * * + j].
    __device__ __forceinline__ static int col(int nt, int j) {
        return warp_col0() + nt * 8 + 2 * (int)(threadIdx.x % 4) + j;
    }
    __device__ __forceinline__ void zero() {
#pragma unroll
        for (int mt = 0; mt < Cfg::kMT; ++mt)
#pragma unroll
            for (int nt = 0; nt < Cfg::kNT; ++nt)
#pragma unroll
                for (int i = 0; i < 4; ++i) c[mt][nt][i] = 0.f;
    }
};

// ---- shared memory map ------------------------------------------------------------------------

// Byte offset of 16-byte chunk c (0..15) of row r in a [rows][128] bf16 tile.
__device__ __forceinline__ int tile_offset(int r, int c) { return (r * 16 + (c ^ (r & 7))) * 16; }

template <class Cfg>
struct Smem {
    unsigned char *base;
    __device__ __forceinline__ unsigned char *stage(int s) const {
        return base + s * Cfg::kStageBytes;
    }
    __device__ __forceinline__ unsigned char *a_raw(int s) const { return stage(s); }
    __device__ __forceinline__ unsigned int *a_sf(int s) const {
        return reinterpret_cast<unsigned int *>(stage(s) + Cfg::kARawBytes);
    }
    __device__ __forceinline__ unsigned char *w_raw(int s) const {
        return stage(s) + Cfg::kARawBytes + Cfg::kASfBytes;
    }
    __device__ __forceinline__ unsigned int *w_sf(int s) const {
        return reinterpret_cast<unsigned int *>(stage(s) + Cfg::kARawBytes + Cfg::kASfBytes +
                                                Cfg::kWRawBytes);
    }
    // The bf16 A tile the MMAs read: stage s itself for bf16 A.
    __device__ __forceinline__ unsigned char *a_tile(int s) const {
        if constexpr (Cfg::kA == AKind::kFp8) return base + Cfg::kStages * Cfg::kStageBytes;
        return stage(s);
    }
    // The bf16 W tile the MMAs read: stage s itself for bf16 W.
    __device__ __forceinline__ unsigned char *w_tile(int s) const {
        if constexpr (Cfg::kW == WKind::kFp8)
            return base + Cfg::kStages * Cfg::kStageBytes + Cfg::kATileBytes;
        return w_raw(s);
    }
};

// ---- one K-step: load, dequantize, multiply ---------------------------------------------------

// Issues the cp.async copies of K-step ks into stage s (not committed).
template <class Cfg>
__device__ __forceinline__ void load_stage(const Operands &op, const Smem<Cfg> &sm, int s, int ks,
                                           int m0, int n0, int m_valid) {
    const int k = ks * Cfg::kBK;
    const int tid = (int)threadIdx.x;
    const int a_rows = a_rows_used<Cfg>(m_valid);
    if constexpr (Cfg::kA == AKind::kFp8) {
        const unsigned char *a = static_cast<const unsigned char *>(op.a);
        for (int i = tid; i < a_rows * 8; i += Cfg::kThreads) {
            const int r = i / 8, c = i % 8;
            const bool ok = r < m_valid;
            mla::cp_async_16(sm.a_raw(s) + r * 128 + c * 16,
                             a + (m0 + (ok ? r : 0)) * op.lda + k + c * 16, ok);
        }
        for (int r = tid; r < a_rows; r += Cfg::kThreads) {
            const bool ok = r < m_valid;
            mla::cp_async_4(sm.a_sf(s) + r, op.a_sf + (m0 + (ok ? r : 0)) * op.lda_sf + k / 32, ok);
        }
    } else {
        const __nv_bfloat16 *a = static_cast<const __nv_bfloat16 *>(op.a);
        for (int i = tid; i < a_rows * 16; i += Cfg::kThreads) {
            const int r = i / 16, c = i % 16;
            const bool ok = r < m_valid;
            mla::cp_async_16(sm.a_raw(s) + tile_offset(r, c),
                             a + (m0 + (ok ? r : 0)) * op.lda + k + c * 8, ok);
        }
    }
    const long long wk = op.w_k0 + k;
    if constexpr (Cfg::kW == WKind::kFp8) {
        for (int i = tid; i < Cfg::kBN * 8; i += Cfg::kThreads) {
            const int r = i / 8, c = i % 8;
            mla::cp_async_16(sm.w_raw(s) + r * 128 + c * 16,
                             op.w + (n0 + r) * op.ldw + wk + c * 16, true);
        }
        for (int r = tid; r < Cfg::kBN; r += Cfg::kThreads)
            mla::cp_async_4(sm.w_sf(s) + r,
                            op.w_sf + fp8::sfatom_offset(n0 + r, wk / 32, op.w_kb), true);
    } else {
        for (int i = tid; i < Cfg::kBN * 16; i += Cfg::kThreads) {
            const int r = i / 16, c = i % 16;
            mla::cp_async_16(sm.w_raw(s) + tile_offset(r, c),
                             op.w + (n0 + r) * op.ldw + (wk + c * 8) * 2, true);
        }
    }
}

// Dequantizes rows 0..rows-1 of a raw fp8 [rows][128] tile with one 32-bit word of four ue8m0
// scales per row (byte j for columns 32j..32j+31) into a bf16 tile.
template <int kThreads>
__device__ __forceinline__ void dequant_tile(const unsigned char *raw, const unsigned int *sf,
                                             unsigned char *tile, int rows) {
    for (int i = (int)threadIdx.x; i < rows * 8; i += kThreads) {
        const int r = i / 8, c = i % 8;                   // 16 bytes: columns 16c..16c+15
        const uint4 q = *reinterpret_cast<const uint4 *>(raw + r * 128 + c * 16);
        const float scale = fp8::ue8m0_decode((sf[r] >> (8 * (c / 2))) & 0xffu);
        const unsigned int words[4] = {q.x, q.y, q.z, q.w};
        unsigned int out[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const unsigned short two = (unsigned short)(words[j / 2] >> (16 * (j % 2)));
            const float2 f = fp8::unpack_e4m3x2(two);
            __nv_bfloat162 b = __floats2bfloat162_rn(f.x * scale, f.y * scale);
            out[j] = *reinterpret_cast<unsigned int *>(&b);
        }
        *reinterpret_cast<uint4 *>(tile + tile_offset(r, 2 * c)) =
            make_uint4(out[0], out[1], out[2], out[3]);
        *reinterpret_cast<uint4 *>(tile + tile_offset(r, 2 * c + 1)) =
            make_uint4(out[4], out[5], out[6], out[7]);
    }
}

// In place: the bf16 A tile's rows r < m_valid become mxq(A). Each thread takes one 16-byte
// chunk (8 values) per step, the 4 lanes of an aligned lane quad one 32-wide group (scale by a
// quad shuffle), a warp two rows; warps stop after the warp holding row m_valid - 1 (the rows
// they cover past m_valid are zero and stay so: mxq(0) = 0), so no thread idles while a few
// others quantize a whole row.
template <int kRows, int kThreads>
__device__ __forceinline__ void mxq_tile(unsigned char *tile, int m_valid) {
    static_assert(kRows % 2 == 0 && kThreads % 32 == 0, "whole warps of two rows");
    const int chunks = (m_valid + 1) / 2 * 2 * 16;        // a multiple of 32: whole warps
    for (int i = (int)threadIdx.x; i < chunks; i += kThreads) {
        const int r = i / 16, c = i % 16;                 // columns 8c..8c+7
        float v[8];
        unpack_bf16x8(*reinterpret_cast<const uint4 *>(tile + tile_offset(r, c)), v);
        fp8::mxq<32, 8>(v);
        *reinterpret_cast<uint4 *>(tile + tile_offset(r, c)) = pack_bf16x8(v);
    }
}

// The warp's MMAs over one 128-wide K-step of the bf16 tiles.
template <class Cfg>
__device__ __forceinline__ void mma_step(const unsigned char *a_tile, const unsigned char *w_tile,
                                         Accum<Cfg> &acc) {
    const int lane = (int)(threadIdx.x % 32);
    const int wr = Accum<Cfg>::warp_row0(), wc = Accum<Cfg>::warp_col0();
#pragma unroll
    for (int kk = 0; kk < Cfg::kBK / 16; ++kk) {
        unsigned int a[Cfg::kMT][4], b[Cfg::kNT][2];
#pragma unroll
        for (int mt = 0; mt < Cfg::kMT; ++mt)
            mla::ldmatrix_x4(a[mt], a_tile + tile_offset(wr + mt * 16 + (lane & 15),
                                                         2 * kk + (lane >> 4)));
#pragma unroll
        for (int np = 0; np < Cfg::kNT / 2; ++np) {
            unsigned int r[4];
            const int n = wc + np * 16 + (lane & 7) + ((lane >> 4) << 3);
            mla::ldmatrix_x4(r, w_tile + tile_offset(n, 2 * kk + ((lane >> 3) & 1)));
            b[2 * np][0] = r[0], b[2 * np][1] = r[1];
            b[2 * np + 1][0] = r[2], b[2 * np + 1][1] = r[3];
        }
#pragma unroll
        for (int mt = 0; mt < Cfg::kMT; ++mt)
#pragma unroll
            for (int nt = 0; nt < Cfg::kNT; ++nt)
                mla::mma_bf16_16816(acc.c[mt][nt], a[mt], b[nt][0], b[nt][1]);
    }
}

// ---- the tile ---------------------------------------------------------------------------------

// Converts the K-step in stage s for the MMAs (fp8 A and W to bf16, bf16 A to mxq(A)), then this
// warp's MMAs of it into acc (warps whose rows all lie past m_valid skip them: their rows are
// zero). Starts after the block barrier that follows the stage's cp.async wait.
template <class Cfg>
__device__ __forceinline__ void convert_and_mma(const Smem<Cfg> &sm, int s, int m_valid,
                                                Accum<Cfg> &acc) {
    if constexpr (Cfg::kA == AKind::kFp8)
        dequant_tile<Cfg::kThreads>(sm.a_raw(s), sm.a_sf(s), sm.a_tile(s),
                                    a_rows_used<Cfg>(m_valid));
    if constexpr (Cfg::kA == AKind::kBf16Mxq)
        mxq_tile<Cfg::kBM, Cfg::kThreads>(sm.a_tile(s), m_valid);
    if constexpr (Cfg::kW == WKind::kFp8)
        dequant_tile<Cfg::kThreads>(sm.w_raw(s), sm.w_sf(s), sm.w_tile(s), Cfg::kBN);
    if constexpr (Cfg::kA != AKind::kBf16 || Cfg::kW != WKind::kBf16)
        __syncthreads();                          // the converted tiles are complete
    if (Accum<Cfg>::warp_row0() < m_valid) mma_step<Cfg>(sm.a_tile(s), sm.w_tile(s), acc);
}

// Computes one BM x BN tile into acc (see the top of the file). All kThreads threads call it.
template <class Cfg>
__device__ __forceinline__ void mma_tile(const Operands &op, int m0, int n0, int m_valid,
                                         unsigned char *smem, Accum<Cfg> &acc) {
    const Smem<Cfg> sm{smem};
    const int ksteps = op.k_len / Cfg::kBK;
    acc.zero();
#pragma unroll
    for (int s = 0; s < Cfg::kStages - 1; ++s) {
        if (s < ksteps) load_stage<Cfg>(op, sm, s, s, m0, n0, m_valid);
        mla::cp_async_commit();
    }
    for (int ks = 0; ks < ksteps; ++ks) {
        const int s = ks % Cfg::kStages;
        mla::cp_async_wait<Cfg::kStages - 2>();   // K-step ks has landed (this thread's part)
        __syncthreads();                          // ... everyone's, and the last MMAs are done
        const int next = ks + Cfg::kStages - 1;   // refill the stage consumed at ks - 1
        if (next < ksteps) load_stage<Cfg>(op, sm, next % Cfg::kStages, next, m0, n0, m_valid);
        mla::cp_async_commit();
        convert_and_mma<Cfg>(sm, s, m_valid, acc);
    }
    mla::cp_async_wait<0>();
    __syncthreads();
}

// ---- a CTA's sequence of tiles through one pipeline -------------------------------------------

// One tile of a sequence: its origin and its rows that exist (as m_valid of mma_tile).
struct TileCoord {
    int m0, n0, m_valid;
};

// Computes the tiles tile_of(0), ..., tile_of(count - 1) (TileCoord each; all with the operands
// and K range of op) as one flat sequence of count * ksteps K-steps through one cp.async
// pipeline: the copies of tile i + 1's first K-steps are in flight while tile i's last ones are
// converted and multiplied, so the pipeline ramps up once per sequence rather than once per
// tile. After tile i's last K-step every thread calls epilogue(i, coord, acc) with acc holding
// the tile exactly as mma_tile would (the same MMAs in the same order); the epilogue may write
// global memory but must neither touch smem nor synchronize the block (other stages are in
// flight). All kThreads threads call mma_tiles with the same arguments; it returns with every
// cp.async drained and the block synchronized.
template <class Cfg, class TileOf, class Epilogue>
__device__ __forceinline__ void mma_tiles(const Operands &op, int count, TileOf tile_of,
                                          unsigned char *smem, Epilogue epilogue) {
    const Smem<Cfg> sm{smem};
    const int ksteps = op.k_len / Cfg::kBK;
    const int total = count * ksteps;
#pragma unroll
    for (int s = 0; s < Cfg::kStages - 1; ++s) {
        if (s < total) {
            const TileCoord c = tile_of(s / ksteps);
            load_stage<Cfg>(op, sm, s, s % ksteps, c.m0, c.n0, c.m_valid);
        }
        mla::cp_async_commit();
    }
    Accum<Cfg> acc;
    acc.zero();
    TileCoord cur = count > 0 ? tile_of(0) : TileCoord{0, 0, 0};
    for (int j = 0, tile = 0, ks = 0; j < total; ++j) {
        const int s = j % Cfg::kStages;
        mla::cp_async_wait<Cfg::kStages - 2>();   // flat K-step j has landed (this thread's part)
        __syncthreads();                          // ... everyone's, and the last MMAs are done
        const int next = j + Cfg::kStages - 1;    // refill the stage consumed at j - 1
        if (next < total) {
            const TileCoord c = tile_of(next / ksteps);
            load_stage<Cfg>(op, sm, next % Cfg::kStages, next % ksteps, c.m0, c.n0, c.m_valid);
        }
        mla::cp_async_commit();
        convert_and_mma<Cfg>(sm, s, cur.m_valid, acc);
        if (++ks == ksteps) {                     // tile done: hand it over, start the next
            epilogue(tile, cur, acc);
            acc.zero();
            ks = 0;
            if (++tile < count) cur = tile_of(tile);
        }
    }
    mla::cp_async_wait<0>();
    __syncthreads();
}

// ---- L2 prefetch ------------------------------------------------------------------------------

// prefetch.global.L2: asks L2 for the 128-byte line holding p (a hint: nothing is returned and
// nothing waits for it).
__device__ __forceinline__ void prefetch_l2(const void *p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// Asks L2 for bytes [p, p + n), one line per thread and step; every thread of the block calls it.
template <int kThreads>
__device__ __forceinline__ void prefetch_l2_range(const unsigned char *p, long long n) {
    for (long long i = (long long)threadIdx.x * 128; i < n; i += (long long)kThreads * 128)
        prefetch_l2(p + i);
}

// ---- split-K ----------------------------------------------------------------------------------

// A tile whose K is cut into `slices` slices, each computed by its own CTA: every CTA stores its
// fp32 partial tile, then all its threads call splitk_arrive on the tile's counter (a zeroed
// uint32 word). It returns true in every thread of the CTA that arrives last, which may then read
// all partials (ld.global.cg: they were written by other CTAs of the launch) and sum them in
// slice order 0, 1, ... (deterministic whichever CTA is last). The last CTA also sets the counter
// back to 0, so it is zero again for the next launch. Ends with the block synchronized.
__device__ __forceinline__ bool splitk_arrive(unsigned int *counter, int slices) {
    __threadfence();                     // this thread's partial stores, at gpu scope
    __syncthreads();
    int last = 0;
    if (threadIdx.x == 0) {
        last = mla::atom_add_acq_rel_gpu(counter, 1u) == (unsigned int)slices - 1u;
        if (last) *counter = 0u;         // every slice has arrived; nobody touches it again
    }
    last = __syncthreads_or(last);
    if (last) __threadfence();
    return last != 0;
}

}  // namespace gemm
}  // namespace mla
