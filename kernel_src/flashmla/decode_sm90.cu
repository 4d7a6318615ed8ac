// FlashMLA-compatible dense paged decode, sm_90a path: both products on wgmma (warpgroup MMA,
// fp32 accumulators in registers), the two warpgroups working on alternate KV tiles so that one's
// softmax runs under the other's MMAs. Same math, grid, schedule, work split and outputs as the
// portable kernel (decode.cu, whose loads, row limits and stores this file reuses); the results
// agree up to fp32 summation order and the 16-bit rounding of P.
//
// Template parameters (the spec "flashmla_decode_sm90" fixes them):
//   kKV        0: bf16 q / k_cache / out; 1: fp16 (fp8 stays on the portable kernel)
//   kPageClass 0: any page size, cp.async loads; 1: page_size % 8 == 0, TMA loads
//   kCausal    bottom-right causal mask (s_q > 1)
//
// CTA: 256 threads = warpgroups 0 and 1 over the same 64 query rows (warp w % 4 of each holds rows
// [16 (w % 4), +16)). A chunk's 64-key tiles go in pairs: tile a = 2 j into buffer K0, tile
// b = 2 j + 1 into K1. Warpgroup 0 computes S0 = Q K0^T and owns O columns [0, 256) (O_L);
// warpgroup 1 computes S1 = Q K1^T and owns O columns [256, 512) (O_R). Both keep the running row
// max m (identical copies) and their own part of the row sum l. Per pair:
//   WG0: m_a = max(m, rowmax S0) -> sM0; O_L, l *= 2^(m - m_a); P0 = 2^(S0 - m_a) -> sP0;
//        O_L += P0 V0_L (P0 from registers)
//   WG1: m_b = max(m_a, rowmax S1) -> sM1; O_R, l *= 2^(m - m_a); P1 = 2^(S1 - m_b) -> sP1;
//        O_R += sP0 V0_R
//   both: beta = 2^(m_a - m_b); O, l *= beta (after their first product);
//   WG0: O_L += sP1 V1_L;  WG1: O_R += P1 V1_R (registers), l += rowsum P1
// then each computes the S of its next tile. Named barriers order the exchanges (M0, M1: the row
// maxima; P0, P1: the P tiles; P0_FREE: sP0 read). A buffer's column pieces are refilled as soon
// as their last reader is done: K0 pieces 0-3 (V0_L) by warpgroup 0 after O_L += P0 V0_L, pieces
// 4-8 by warpgroup 1 after O_R += sP0 V0_R; K1 pieces 0-3 by warpgroup 0 after O_L += sP1 V1_L,
// pieces 4-8 by warpgroup 1 after O_R += P1 V1_R (page class 0: K1's piece 8 by warpgroup 0 once
// M1 shows warpgroup 1's Q K^T done, completing with pieces 0-3; kRope1ByWg0). Each warpgroup's
// share of a tile completes one mbarrier; the QK product waits for pieces 0-3, then for 4-8
// (page class 0's K1: pieces 0-3 and 8, then 4-7). Page class 1
// loads by TMA in boxes of R = min(largest power of two dividing page_size, 64) rows (8 <= R, so
// that a box starts on a 1024-byte swizzle atom): the threads wt = 2 k R of a warpgroup (which
// fetched row k R) issue the boxes of rows [k R, k R + R) of the group's pieces, thread 0 posts
// the group's bytes with expect_tx (a kernel parameter holds the descriptor); the V rows past
// the chunk of a partial last tile are zeroed before P V (TMA reads whole boxes, and boxes past
// the chunk read zeros: their block is -1, out of the tensor). Page class 0 loads by cp.async in
// whole 128-byte lines (zero fill past the chunk, the mbarrier counting 128 cp.async arrivals).
// The block-table entries of a pair's tiles are read one pair ahead.
// Chunk boundaries: the last pair of a chunk loads the next chunk's first two tiles at the same
// refill points (the kernel's chunk walk leaves the next chunk's request and key range in shared
// memory), and, when the next chunk starts another request, its Q: pieces 0-3 by warpgroup 0
// once M1 shows warpgroup 1's last Q K^T done, pieces 4-7 by warpgroup 1 once M0 shows warpgroup
// 0's, columns 512-575 into registers (q8) by every thread at the top of the pair; so the next
// chunk starts with its loads in flight. Out is stored in 16-byte stores (the quad of lanes of a
// row transposes its accumulator words).
//
// S[64 x 64] is 36 wgmma.m64n64k16: 32 with Q from shared memory, the last 4 (Q columns 512-575)
// with Q from registers, loaded from global memory once per request, so that Q's piece 8 slot
// holds sP1. O += P V is 4 wgmma.m64n256k16 per tile and warpgroup, V = K[:, :512] read N-major.
//
// Shared memory (bytes, from a 1024-aligned base). A 64 x 576 16-bit tile is 9 pieces of 64
// columns (128-byte rows, 8192 bytes), element (r, k) of piece k / 64 at
// r * 128 + (((k % 64) / 8) ^ (r & 7)) * 16 + (k % 8) * 2 (the hardware 128-byte swizzle).
//   Q 0 (73728; piece 8 = sP1, Q's columns 512-575 being in registers), K0 73728, K1 147456, sP0 221184 (8192),
//   sM0 229376 and sM1 229632 (64 floats each), row-sum exchange 229888 (2 x 64 floats),
//   mbarriers 230400 (K0: 2, K1: 2), the next chunk's descriptor 230432 (8 ints); 230464 bytes
//   + 1024 for alignment.
//
// Fake-quant K and V (decode_sm90_fq_kernel, the kind fakequant_decode_dense: mla_attention_decode
// with K and/or V quantized and P not; spec/fakequant.md 2.1-2.2, docs/FAKEQUANT.md). K and V
// quantization do not depend on the tiling, so the same pipeline runs on codes (the values
// without the per-tensor factor, exact in 16 bits: fakequant/decode_mma_codes.cuh's quantizers,
// whose decisions are quant.cuh's): S = Q Kc^T times scale_log2 = fl32(qk_scale * k_scale)
// (set by the host), out = O v_scale / l. Page class 1 (TMA) only, not causal.
//   V quantized: after the Q K^T of a tile (and its tail rows zeroed), each warpgroup turns the
//     V columns it reads ([256 wg, +256): pieces 0-3 / 4-7) into fp16 codes in place (fp8
//     elementwise; NVFP4 along 16-token groups of each column, tiles start at multiples of 64
//     keys, so groups are absolute and whole; zeroed tail rows do not raise the open group's
//     amax). P V then runs in fp16 (P rounded to fp16, the codes exact), whatever the cache dtype.
//   K quantized: the warpgroup that computes a tile's S turns all 9 pieces into K codes (cache
//     dtype) in place before its products (pieces 0-3 after their mbarrier, 4-8 after theirs,
//     under the products of 0-3), and once Q K^T is done loads the raw V pieces 0-7 of the tile
//     again by TMA (its reload mbarrier R0 / R1 at kSmemR, one phase per tile), waited for before
//     its P tile is published (so the other warpgroup, which reads the tile after the P barrier,
//     sees the raw V too); the tail rows are zeroed after the reload.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/mbarrier.cuh"
#include "common/wgmma.cuh"
#include "fakequant/decode_mma_codes.cuh"
#include "flashmla/decode.cu"

namespace mla {
namespace flashmla {
namespace sm90 {

constexpr int kPieces = kD / 64;                         // 9
constexpr int kPieceBytes = kBlockM * 128;               // 8192
constexpr int kVPieces = 4;                              // pieces of one V half (256 columns)
constexpr int kTileBytes90 = kPieces * kPieceBytes;      // 73728
constexpr int kSmemQ90 = 0;
constexpr int kSmemP1 = kSmemQ90 + 8 * kPieceBytes;      // Q piece 8
constexpr int kSmemK0 = kTileBytes90;
constexpr int kSmemK1 = 2 * kTileBytes90;
constexpr int kSmemP0 = 3 * kTileBytes90;
constexpr int kSmemM0 = kSmemP0 + kPieceBytes;
constexpr int kSmemM1 = kSmemM0 + kBlockM * 4;
constexpr int kSmemRed90 = kSmemM1 + kBlockM * 4;
constexpr int kSmemBar = kSmemRed90 + 2 * kBlockM * 4;
constexpr int kSmemNext = kSmemBar + 2 * 2 * 8;          // the next chunk (NextChunk), 8 ints
constexpr int kSmemUsed = kSmemNext + 8 * 4;             // 230464
constexpr int kSmemBytes90 = kSmemUsed + 1024;           // + alignment slack: 231488
static_assert(kSmemP0 % 1024 == 0 && kSmemP1 % 1024 == 0, "swizzle atoms 1024-aligned");
static_assert(kSmemBar % 8 == 0, "mbarriers 8-aligned");
static_assert(kTileBytes90 == kTileBytes, "same tile size as the portable kernel");
static_assert(kSmemBytes90 <= 232448, "fits the sm_90 shared memory of one CTA");
// Fake-quant K: the reload mbarriers R0 (K0's raw V, warpgroup 0) and R1 (K1's, warpgroup 1).
constexpr int kSmemR = kSmemUsed;
constexpr int kSmemBytesFq = kSmemR + 2 * 8 + 1024;      // 231504
static_assert(kSmemBytesFq <= 232448, "fits the sm_90 shared memory of one CTA");

constexpr int kWgThreads = 128;
// M0 / M1: sM0 / sM1 written; P0 / P1: sP0 / sP1 written; P0_FREE: warpgroup 1 has read sP0.
enum NamedBarrier : int { kBarM0 = 1, kBarM1 = 2, kBarP0 = 3, kBarP1 = 4, kBarP0Free = 5 };

// Where a thread of the two-warpgroup pipeline stands (lane, warp, its row slab wm = warp % 4,
// warpgroup wg, thread wt in the warpgroup) and the addresses of the layout above from the
// 1024-aligned base (bar0: K0's two share mbarriers, bar1: K1's); the kernels bind them by name:
//   const auto [lane, warp, wm, wg, wt] = thread90();
//   const auto [base, q, k0, k1, bar0, bar1, sm0, sm1, red] = smem90(smem);
struct Thread90 {
    int lane, warp, wm, wg, wt;
};
__device__ __forceinline__ Thread90 thread90() {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wm = warp & 3, wg = warp >> 2;
    const int wt = threadIdx.x & (kWgThreads - 1);
    return {lane, warp, wm, wg, wt};
}
struct Smem90 {
    unsigned base, q, k0, k1, bar0, bar1;
    float *sm0, *sm1, *red;
};
__device__ __forceinline__ Smem90 smem90(unsigned char *smem) {
    const unsigned base = smem_addr(smem);
    return {base,
            base + kSmemQ90,
            base + kSmemK0,
            base + kSmemK1,
            base + kSmemBar,
            base + kSmemBar + 2 * 8,
            reinterpret_cast<float *>(smem + kSmemM0),
            reinterpret_cast<float *>(smem + kSmemM1),
            reinterpret_cast<float *>(smem + kSmemRed90)};
}

// Byte offset of 16-byte chunk c (of 72) of row r in a 64 x 576 tile.
__device__ __forceinline__ unsigned tile_off(int r, int c) {
    return (unsigned)((c >> 3) * kPieceBytes + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// Keeps the compiler from moving accesses of a wgmma operand across the asm that waits for it.
__device__ __forceinline__ void reg_fence(float &x) { asm volatile("" : "+f"(x)::"memory"); }
template <int N>
__device__ __forceinline__ void reg_fence(float (&d)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) reg_fence(d[i][e]);
}

// cp.async of pieces [kLo, kHi) of the Q rows [64 m, 64 m + 64) of kv head g (rows >= rows
// zero-filled) by kN threads (tid < kN), not committed.
template <int kLo, int kHi, int kN>
__device__ __forceinline__ void load_q_pieces(const DecodeParams &p, unsigned dst, int req, int g,
                                              int m, int rows, int tid) {
    constexpr int kPerRow = kN / kBlockM;  // threads per row
    const int r = tid / kPerRow;
    const unsigned char *src = q_row(p, req, g, m, rows, r, 2);
    const bool valid = src != nullptr;
    if (!valid) src = static_cast<const unsigned char *>(p.q);
    for (int c = kLo * 8 + tid % kPerRow; c < kHi * 8; c += kPerRow)
        cp_async_16(dst + tile_off(r, c), src + c * 16, valid);
}

// An L2 prefetch of the Q rows of request req (req >= 0; threads < 64).
__device__ __forceinline__ void prefetch_q_l2(const DecodeParams &p, int req, int g, int m,
                                              int rows) {
    if (req >= 0 && threadIdx.x < kBlockM) {
        const unsigned char *nxt = q_row(p, req, g, m, rows, threadIdx.x, 2);
        if (nxt) prefetch_l2_bulk(nxt, kRowBytes);
    }
}

// Q columns 512-575 of request req straight from global memory into the A fragments of the four
// k16 steps of Q K^T's register part (q8[k]: rows r, r + 8 of the warp's 16, columns
// 512 + 16 k + 2 (lane % 4) + {0, 1} and + 8; zeros past the rows). Not waited on: the first
// product that reads q8 waits for the loads.
__device__ __forceinline__ void load_q8(const DecodeParams &p, unsigned (&q8)[4][4], int req,
                                        int g, int m, int rows) {
    const int lane = threadIdx.x & 31, r = ((threadIdx.x >> 5) & 3) * 16 + (lane >> 2);
    const unsigned char *r0 = q_row(p, req, g, m, rows, r, 2);
    const unsigned char *r1 = q_row(p, req, g, m, rows, r + 8, 2);
    const int c = (kDV + 2 * (lane & 3)) * 2;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        q8[k][0] = r0 ? *reinterpret_cast<const unsigned *>(r0 + c + 32 * k) : 0u;
        q8[k][1] = r1 ? *reinterpret_cast<const unsigned *>(r1 + c + 32 * k) : 0u;
        q8[k][2] = r0 ? *reinterpret_cast<const unsigned *>(r0 + c + 32 * k + 16) : 0u;
        q8[k][3] = r1 ? *reinterpret_cast<const unsigned *>(r1 + c + 32 * k + 16) : 0u;
    }
}

// cp.async of Q pieces 0-7 by all threads, committed as one group, and piece 8 into q8; an L2
// prefetch of the next request's rows (next_req >= 0).
__device__ __forceinline__ void load_q_tile90(const DecodeParams &p, unsigned dst,
                                              unsigned (&q8)[4][4], int req, int g, int m,
                                              int rows, int next_req) {
    load_q_pieces<0, kPieces - 1, kThreads>(p, dst, req, g, m, rows, threadIdx.x);
    cp_async_commit();
    load_q8(p, q8, req, g, m, rows);
    prefetch_q_l2(p, next_req, g, m, rows);
}

// The chunk the kernel attends after the current one (kSmemNext, written by the chunk walk):
// n_tiles < 0: none; new_req: it starts another request (whose Q the last pair loads).
struct NextChunk {
    int n_tiles, req, t_begin, t_stop, new_req, pad[3];
};

// Waits for Q (all threads), then loads its piece 8 (columns 512-575) into registers; piece 8 is
// sP1 from then on. (The sparse kernels' Q; the dense decode loads piece 8 with load_q8.)
__device__ __forceinline__ void finish_q(unsigned base, unsigned (&q8)[4][4]) {
    const int lane = threadIdx.x & 31, wm = (threadIdx.x >> 5) & 3;
    cp_async_wait<0>();
    fence_proxy_async_shared();
    __syncthreads();
#pragma unroll
    for (int k = 0; k < 4; k++)
        ldmatrix_x4(base + tile_off(wm * 16 + (lane & 15), 64 + 2 * k + (lane >> 4)), q8[k]);
    __syncthreads();
}

// The dense decode: waits for Q pieces 0-7 (all threads: each warpgroup loaded pieces the other
// reads); piece 8 (columns 512-575) is in registers (load_q8), its shared-memory slot is sP1.
__device__ __forceinline__ void wait_q() {
    cp_async_wait<0>();
    fence_proxy_async_shared();
    __syncthreads();
}

// The key row thread wt (of a warpgroup) supplies for the tile at t0 (row wt / 2): its block
// (-1: past the chunk, t >= t_stop, or page out of range) and its row in the page. The block-table
// read is issued here and used only by row_src, so fetching a tile ahead hides its latency.
struct RowRef {
    int blk, row;
};

template <int kPageClass>
__device__ __forceinline__ RowRef fetch_row(const DecodeParams &p, int req, int t0, int t_stop,
                                            int wt) {
    const int t = t0 + (wt >> 1);
    RowRef r = {-1, 0};
    if (t < t_stop) {
        const int page = page_of(p, t);
        r.row = t - page * p.page_size;
        if (page < p.max_blocks) r.blk = p.block_table[(long long)req * p.bt_stride + page];
    }
    return r;
}

// Address of a fetched row of kv head g, or null (zero fill).
__device__ __forceinline__ const unsigned char *row_src(const DecodeParams &p, int g, RowRef r) {
    return cache_row(p, r.blk, r.row, g, 2);
}

// cp.async of pieces [kLo, kHi) (0-3 or 4-8) of one tile by the 128 threads of a warpgroup,
// arriving on the group's mbarrier (bars: pieces 0-3, bars + 8: pieces 4-8; kArrive false: no
// arrival, a later one of the same threads counts these copies). Warp w copies its rows
// [16 w, 16 w + 16): per instruction 4 rows x 8 chunks, whole 128-byte lines. Thread wt computed
// the source of row wt / 2 (src, null: zero fill), which the copying lanes read by shuffle.
template <int kLo, int kHi, bool kArrive = true>
__device__ __forceinline__ void load_pieces(const DecodeParams &p, unsigned buf, unsigned bars,
                                            const unsigned char *src, int wt) {
    const int lane = wt & 31, ch = lane & 7;
    const unsigned char *rs[4];
    int r[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int rl = 4 * i + (lane >> 3);  // row within the warp's 16
        rs[i] = reinterpret_cast<const unsigned char *>(
            __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(src), 2 * rl));
        r[i] = (wt & ~31) / 2 + rl;
    }
#pragma unroll
    for (int pc = kLo; pc < kHi; pc++) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const bool valid = rs[i] != nullptr;
            const unsigned char *g = valid ? rs[i] + (pc * 8 + ch) * 16
                                           : static_cast<const unsigned char *>(p.k);
            cp_async_16(buf + pc * kPieceBytes + r[i] * 128 + ((ch ^ (r[i] & 7)) << 4), g, valid);
        }
    }
    if constexpr (kArrive) cp_async_mbarrier_arrive_noinc(bars + (kLo == 0 ? 0 : 8));
}

// The TMA descriptor of k_cache (page class 1), a kernel parameter: runtime/flashmla_decode.c
// encodes k_cache as the 4-D tensor (576 columns, h_kv, page, num_blocks), boxes of one 64-column
// piece of tma_box_rows keys, 128-byte swizzle (the tile layout above).
struct alignas(64) TmaDesc {
    unsigned long long bytes[16];
};

// Rows of a TMA box (page class 1): the largest power of two dividing page_size, at most 64
// (runtime/flashmla_decode.c encodes the descriptor's box with the same count).
__device__ __forceinline__ int tma_box_rows(const DecodeParams &p) {
    return min(p.page_size & -p.page_size, kBlockN);
}

// Loads pieces [kLo, kHi) of a tile into buf, thread wt holding the RowRef of row wt / 2: page
// class 1 by TMA, the threads wt = 2 k R issuing the boxes of rows [k R, k R + R) and thread 0
// posting the group's bytes on its mbarrier (a box that completes before the post leaves the
// phase open: its arrival is still pending); else by cp.async from the warpgroup.
// kEvictFirst false: an evict_normal L2 policy (fake-quant K: the tile is read again by the
// reload of its raw V).
__device__ __forceinline__ unsigned long long l2_policy_evict_normal() {
    unsigned long long policy;
    asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(policy));
    return policy;
}

template <int kLo, int kHi, int kPageClass, bool kEvictFirst = true>
__device__ __forceinline__ void load_tile(const DecodeParams &p, const TmaDesc &tk, unsigned buf,
                                          unsigned bars, RowRef r, int g, int wt) {
    if constexpr (kPageClass == 1) {
        const unsigned bar = bars + (kLo == 0 ? 0 : 8);
        if (wt == 0) mbarrier_arrive_expect_tx(bar, (kHi - kLo) * kPieceBytes);
        if ((wt & (2 * tma_box_rows(p) - 1)) == 0) {
            const unsigned dst = buf + (wt >> 1) * 128;  // row wt / 2 of each piece
            // K is read once or twice
            const unsigned long long stream =
                kEvictFirst ? l2_policy_evict_first() : l2_policy_evict_normal();
#pragma unroll
            for (int pc = kLo; pc < kHi; pc++)
                tma_load_4d(dst + pc * kPieceBytes, &tk, bar, pc * 64, g, r.row, r.blk, stream);
        }
    } else {
        load_pieces<kLo, kHi>(p, buf, bars, row_src(p, g, r), wt);
    }
}

// Page class 0: K1's piece 8 (RoPE, read only by warpgroup 1's Q K^T) is copied by warpgroup 0
// as soon as M1 shows that Q K^T done, its arrival being the one warpgroup 0 makes on K1's pieces
// 0-3 mbarrier later (an arrival counts all the thread's earlier copies); warpgroup 1's share of
// K1 is then pieces 4-7, so that the refill right before its next Q K^T is 16 copies, not 20, and
// that Q K^T runs piece 8 right after pieces 0-3, before it waits for 4-7.
template <int kPageClass>
constexpr bool kRope1ByWg0 = kPageClass == 0;

template <bool kOn>
__device__ __forceinline__ void load_rope(const DecodeParams &p, unsigned buf, RowRef r, int g,
                                          int wt) {
    if constexpr (kOn)
        load_pieces<kPieces - 1, kPieces, false>(p, buf, 0, row_src(p, g, r), wt);
}

// TMA reads whole boxes: zeroes the V rows [valid, 64) (pieces 0-7) of the tile in buf, which
// may hold anything (0 P times NaN V would poison O), then makes the zeros visible to wgmma and
// to the other threads of the warpgroup (named barrier 6 + wg).
__device__ __forceinline__ void zero_tail_rows(unsigned char *buf, int valid, int wg, int wt) {
    const int chunks = (kBlockN - valid) * 8;  // 16-byte chunks per piece
    for (int i = wt; i < chunks * (kPieces - 1); i += kWgThreads) {
        const int pc = i / chunks, c = i % chunks;
        *reinterpret_cast<uint4 *>(buf + pc * kPieceBytes + (valid + c / 8) * 128 + (c % 8) * 16) =
            make_uint4(0, 0, 0, 0);
    }
    fence_proxy_async_shared();
    named_barrier_sync(6 + wg, kWgThreads);
}

// prefetch.global.L1 of the line holding a (an address inside a live buffer).
__device__ __forceinline__ void prefetch_l1(const void *a) {
    asm volatile("prefetch.global.L1 [%0];\n" ::"l"(a));
}

// Hides v's value from the optimizer, so that descriptor sums derived from it are not hoisted
// (and kept live in registers) across the unrolled product loops.
__device__ __forceinline__ void opaque(unsigned long long &v) { asm volatile("" : "+l"(v)); }

// S = Q K^T for the tile in buf (36 wgmma.m64n64k16, the last 4 with Q from registers), waiting
// for each group's mbarrier (phase `parity`) before its products; returns with S complete.
// Descriptors: the start address field is bits 0-13 of (address >> 4), so an offset below
// 256 KiB is added to a descriptor as offset >> 4.
// The 4 products of Q K^T on piece 8, Q from registers (q8), K from the tile of descriptor kd0.
template <bool kF16>
__device__ __forceinline__ void qk_rope(float (&s)[8][4], const unsigned (&q8)[4][4],
                                        unsigned long long kd0) {
    unsigned long long kd = kd0;
    opaque(kd);
#pragma unroll
    for (int k = 0; k < 4; k++)
        wgmma_m64n64k16_rs<kF16, 0>(s, q8[k], kd + (((kPieces - 1) * kPieceBytes + k * 32) >> 4),
                                    1);
}

// A hook that does nothing (the default of the fake-quant hooks below).
struct NoHook {
    __device__ __forceinline__ void operator()() const {}
    __device__ __forceinline__ void operator()(int, int) const {}
};

// prepare(lo, hi): called after the wait for pieces [lo, hi) (fake-quant K: their codes), before
// their products.
template <bool kF16, bool kGenericLoads, bool kRopeFirst = false, class Prepare = NoHook>
__device__ __forceinline__ void qk_tile(float (&s)[8][4], const unsigned (&q8)[4][4], unsigned q,
                                        unsigned buf, unsigned bars, unsigned parity,
                                        Prepare prepare = {}) {
    const unsigned long long qd0 = wgmma_desc_sw128(q, 16, 1024);
    const unsigned long long kd0 = wgmma_desc_sw128(buf, 16, 1024);
    wgmma_fence();
#pragma unroll
    for (int pc = 0; pc < kPieces - 1; pc++) {
        if (kRopeFirst && pc == kVPieces) qk_rope<kF16>(s, q8, kd0);  // piece 8 came with 0-3
        if (pc == 0 || pc == kVPieces) {
            mbarrier_wait_parity(bars + (pc == 0 ? 0 : 8), parity);
            if (kGenericLoads) fence_proxy_async_shared();  // cp.async data, seen via the mbarrier
            prepare(pc == 0 ? 0 : kVPieces, pc == 0 ? kVPieces : kPieces);
        }
        unsigned long long qd = qd0, kd = kd0;
        opaque(qd), opaque(kd);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const unsigned off = (pc * kPieceBytes + k * 32) >> 4;
            wgmma_m64n64k16_ss<kF16, 0>(s, qd + off, kd + off, pc + k > 0);
        }
    }
    if (!kRopeFirst) qk_rope<kF16>(s, q8, kd0);
    wgmma_commit_group();
    wgmma_wait_group<0>();
    reg_fence(s);
}

// Issues O[64 x 256] += P V_half, P from registers (A fragments of the 4 k16 steps), V_half =
// columns [256 half, +256) of the tile in buf. Not committed.
template <bool kF16>
__device__ __forceinline__ void pv_issue_rs(float (&o)[32][4], const unsigned (&pa)[4][4],
                                            unsigned buf, int half) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
        wgmma_m64n256k16_rs<kF16, 1>(
            o, pa[kk],
            wgmma_desc_sw128(buf + kk * 16 * 128 + half * kVPieces * kPieceBytes, kPieceBytes,
                             1024),
            1);
}

// The same with P from the swizzled 64 x 64 tile p_tile in shared memory.
template <bool kF16>
__device__ __forceinline__ void pv_issue_ss(float (&o)[32][4], unsigned p_tile, unsigned buf,
                                            int half) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
        wgmma_m64n256k16_ss<kF16, 1>(
            o, wgmma_desc_sw128(p_tile + kk * 32, 16, 1024),
            wgmma_desc_sw128(buf + kk * 16 * 128 + half * kVPieces * kPieceBytes, kPieceBytes,
                             1024),
            1);
}

// O[:, 256 half : +256] += P V_half with the other warpgroup's P: waits for its P tile (named
// barrier bar), makes the buffer's pieces that warpgroup's loads filled visible to wgmma, and
// returns with the product complete.
// prepare(): after the barrier, before the product (fake-quant V: this half's codes).
template <bool kF16, class Prepare = NoHook>
__device__ __forceinline__ void pv_remote(float (&o)[32][4], int bar, unsigned p_tile,
                                          unsigned buf, int half, Prepare prepare = {}) {
    named_barrier_sync(bar, 2 * kWgThreads);
    prepare();
    fence_proxy_async_shared();
    wgmma_fence();
    pv_issue_ss<kF16>(o, p_tile, buf, half);
    wgmma_commit_group();
    wgmma_wait_group<0>();
    reg_fence(o);
}

// Masks keys t0 + col >= limit[row] (col = 8 j + 2 (lane % 4) + e % 2, row e / 2 of the
// thread's two) to -inf and returns the factor that takes S to base-2 logits in the exponent
// (exp_rows): the scale itself when it is positive (S stays raw: the row max of raw S times a
// positive scale is the max of the scaled row, and the scaling folds into the exponent's FFMA),
// else 1 with S scaled here (a zero or negative scale would turn -inf into NaN or max into min).
// kFold false: always scaled here (the fake-quant kinds keep the rounding of fl(S scale); the
// causal kinds, whose s_q 2 case measured 2-8 % slower folded while s_q 1 gained 1-2 %).
template <bool kFold = true>
__device__ __forceinline__ float scale_mask64(float (&s)[8][4], const int (&limit)[2],
                                              float scale, int t0, int lane) {
    const bool pre = !kFold || !(scale > 0.f);
    const float ps = pre ? scale : 1.f;
    if (__all_sync(0xffffffffu, t0 + kBlockN <= limit[0] && t0 + kBlockN <= limit[1])) {
        if (pre) {
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[j][e] *= ps;
        }
        return pre ? 1.f : scale;
    }
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int c = t0 + 8 * j + 2 * (lane & 3) + (e & 1);
            s[j][e] = c < limit[e >> 1] ? s[j][e] * ps : -inf_f32();
        }
    return pre ? 1.f : scale;
}

// Row maxima of S over the thread's two rows (quad reduction).
__device__ __forceinline__ void row_max64(const float (&s)[8][4], float (&mx)[2]) {
    mx[0] = mx[1] = -inf_f32();
#pragma unroll
    for (int j = 0; j < 8; j++) {
        mx[0] = fmaxf(mx[0], fmaxf(s[j][0], s[j][1]));
        mx[1] = fmaxf(mx[1], fmaxf(s[j][2], s[j][3]));
    }
    mx[0] = quad_max(mx[0]), mx[1] = quad_max(mx[1]);
}

// row_max64 in base-2 logits: the maxima of raw S times sc (scale_mask64's factor, > 0).
__device__ __forceinline__ void row_max64(const float (&s)[8][4], float (&mx)[2], float sc) {
    row_max64(s, mx);
    mx[0] *= sc, mx[1] *= sc;
}

// S -> P = 2^(sc S - mu) in place (mu = the row's max in base-2 logits, 0 when -inf; sc the
// factor of scale_mask64, 1 where S is scaled already); adds the row sums to l.
__device__ __forceinline__ void exp_rows(float (&s)[8][4], const float (&mu)[2], float (&l)[2],
                                         float sc = 1.f) {
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            s[j][e] = ex2(fmaf(s[j][e], sc, -mu[e >> 1]));
            l[e >> 1] += s[j][e];
        }
}

// The A fragments of P for the 4 k16 steps of P V (the S accumulator layout of 8-key blocks
// 2 kk and 2 kk + 1 is the A fragment of k16 step kk).
template <bool kF16>
__device__ __forceinline__ void p_fragments(const float (&s)[8][4], unsigned (&pa)[4][4]) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        pa[kk][0] = pack2<kF16>(s[2 * kk][0], s[2 * kk][1]);
        pa[kk][1] = pack2<kF16>(s[2 * kk][2], s[2 * kk][3]);
        pa[kk][2] = pack2<kF16>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pa[kk][3] = pack2<kF16>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
}

// Stores P (16-bit) to the swizzled 64 x 64 tile (rows of warp wm).
template <bool kF16>
__device__ __forceinline__ void store_p(unsigned char *tile, const float (&s)[8][4], int wm,
                                        int lane) {
    const int r0 = wm * 16 + (lane >> 2);
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = r0 + 8 * h;
            *reinterpret_cast<unsigned *>(tile + r * 128 + ((j ^ (r & 7)) << 4) + (lane & 3) * 4) =
                pack2<kF16>(s[j][2 * h], s[j][2 * h + 1]);
        }
}

// O *= f (per row); skipped when f is 1 for every row of the warp (the running max unchanged, the
// common case once a few tiles are in).
__device__ __forceinline__ void scale_o(float (&o)[32][4], const float (&f)[2]) {
    if (__all_sync(0xffffffffu, f[0] == 1.f && f[1] == 1.f)) return;
#pragma unroll
    for (int jt = 0; jt < 32; jt++)
        o[jt][0] *= f[0], o[jt][1] *= f[0], o[jt][2] *= f[1], o[jt][3] *= f[1];
}

// Lazy rescaling (kLazy of the pair steps below; on in the FlashMLA dense kinds): the running max
// of a row moves only when a tile's row max exceeds it by more than kLazyMax (base-2 logits), so
// P = 2^(S - m) stays <= 2^kLazyMax (exact in fp32, the same relative rounding in bf16 / fp16 P)
// and O and l are rescaled only on such a jump: after the first tiles scale_o skips nearly every
// warp (with the exact max it skipped ~none at s_k 1k, ~1/4 of the pairs at 16k: 2 x 128 FMUL a
// tile and thread). out = O / l and lse = m + log2 l do not depend on which m is used; a kernel
// that returns the max itself (the sparse prefill's max_logits) must not use it.
constexpr float kLazyMax = 8.f;
constexpr bool kLazyRescale = true;  // the FlashMLA dense kinds (A/B switch)
// The fake-quant K / V kinds (P is not quantized there, so only P's 16-bit rounding moves).
constexpr bool kLazyRescaleFq = true;

template <bool kLazy>
__device__ __forceinline__ float next_max(float m, float mx) {
    if constexpr (kLazy) return mx > m + kLazyMax ? mx : m;  // m = -inf: mx (or -inf)
    else return fmaxf(m, mx);
}

// The steps of a tile pair that this kernel and the sparse one (sparse_sm90.cuh) share:
// warpgroup 0 holds tile a, warpgroup 1 tile b; m_a is the running max after tile a, m_b after
// both, f the factor O and l take.

// Warpgroup 0, tile a (S masked, sc S its base-2 logits: scale_mask64): the running max to m_a
// (published in sm0, M0), O and l to it, P0 = 2^(sc S - m_a) to sP0 (after the last pair's
// readers freed it when p0_busy, P0) and P0 V0_L issued and committed, not waited on.
// Fake-quant hooks: before_p() runs before P0 is published (K quantized: the raw V back),
// before_pv() before P0 V0_L is issued (V quantized: V0_L's codes).
template <bool kF16, bool kLazy = false, class BeforeP = NoHook, class BeforePv = NoHook>
__device__ __forceinline__ void pair_wg0_pv(float (&s)[8][4], RowState &st, float (&o)[32][4],
                                            unsigned (&pa)[4][4], float (&m_a)[2], float (&f)[2],
                                            float *sm0, unsigned char *smem, unsigned k0, int r0,
                                            int wm, int lane, bool p0_busy, float sc,
                                            BeforeP before_p = {}, BeforePv before_pv = {}) {
    float mx[2], mu[2];
    row_max64(s, mx, sc);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        m_a[h] = next_max<kLazy>(st.m[h], mx[h]);
        mu[h] = m_a[h] == -inf_f32() ? 0.f : m_a[h];
        f[h] = ex2(st.m[h] - mu[h]);
        st.l[h] *= f[h];
    }
    if ((lane & 3) == 0) sm0[r0] = m_a[0], sm0[r0 + 8] = m_a[1];
    named_barrier_arrive(kBarM0, 2 * kWgThreads);
    scale_o(o, f);
    exp_rows(s, mu, st.l, sc);
    before_p();
    if (p0_busy) named_barrier_sync(kBarP0Free, 2 * kWgThreads);  // the last pair's sP0
    store_p<kF16>(smem + kSmemP0, s, wm, lane);
    fence_proxy_async_shared();
    named_barrier_arrive(kBarP0, 2 * kWgThreads);
    p_fragments<kF16>(s, pa);
    before_pv();
    wgmma_fence();
    pv_issue_rs<kF16>(o, pa, k0, 0);
    wgmma_commit_group();
}

// Warpgroup 0, after M1: beta = 2^(m_a - m_b) (m_b from sm1) into f, the pair's final max to st.
__device__ __forceinline__ void pair_wg0_beta(RowState &st, float (&f)[2], const float (&m_a)[2],
                                              const float *sm1, int r0) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const float m_b = sm1[r0 + 8 * h];
        f[h] = m_a[h] == -inf_f32() ? 1.f : ex2(m_a[h] - m_b);
        st.m[h] = m_b;
        st.l[h] *= f[h];
    }
}

// Warpgroup 1, after M0 (mx: tile b's row maxima, -inf without it): m_a from sm0, m_b =
// max(m_a, mx) published in sm1 (M1), O_R and l to m_a, where P0 is.
template <bool kLazy = false>
__device__ __forceinline__ void pair_wg1_max(RowState &st, float (&o)[32][4], const float (&mx)[2],
                                             float (&m_a)[2], float (&m_b)[2], float (&f)[2],
                                             const float *sm0, float *sm1, int r0, int lane) {
    float mu[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        m_a[h] = sm0[r0 + 8 * h];
        m_b[h] = next_max<kLazy>(m_a[h], mx[h]);
        mu[h] = m_a[h] == -inf_f32() ? 0.f : m_a[h];
        f[h] = ex2(st.m[h] - mu[h]);  // O_R to m_a, where P0 is
        st.m[h] = m_b[h];
        st.l[h] *= f[h];
    }
    if ((lane & 3) == 0) sm1[r0] = m_b[0], sm1[r0 + 8] = m_b[1];
    named_barrier_arrive(kBarM1, 2 * kWgThreads);
    scale_o(o, f);
}

// Warpgroup 1, tile b: P1 = 2^(sc S - m_b) (its row sums to l_b) to sP1 for warpgroup 0 (P1), its
// A fragments in pa.
// before_p(): before P1 is published (fake-quant K: the raw V of tile b back).
template <bool kF16, class BeforeP = NoHook>
__device__ __forceinline__ void pair_wg1_p1(float (&s)[8][4], const float (&m_b)[2],
                                            float (&l_b)[2], unsigned (&pa)[4][4],
                                            unsigned char *smem, int wm, int lane, float sc,
                                            BeforeP before_p = {}) {
    float mu[2];
#pragma unroll
    for (int h = 0; h < 2; h++) mu[h] = m_b[h] == -inf_f32() ? 0.f : m_b[h];
    exp_rows(s, mu, l_b, sc);
    before_p();
    store_p<kF16>(smem + kSmemP1, s, wm, lane);
    fence_proxy_async_shared();
    named_barrier_arrive(kBarP1, 2 * kWgThreads);
    p_fragments<kF16>(s, pa);
}

// Warpgroup 1: beta = 2^(m_a - m_b) brings O_R and l (plus tile b's l_b) to the pair's final max.
__device__ __forceinline__ void pair_wg1_beta(RowState &st, float (&o)[32][4], float (&f)[2],
                                              const float (&m_a)[2], const float (&m_b)[2],
                                              const float (&l_b)[2]) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        f[h] = m_a[h] == -inf_f32() ? 1.f : ex2(m_a[h] - m_b[h]);
        st.l[h] = st.l[h] * f[h] + l_b[h];
    }
    scale_o(o, f);
}

// P V of this warpgroup's own P (A from registers) on the column half of buf, waited on.
template <bool kF16>
__device__ __forceinline__ void pv_rs_wait(float (&o)[32][4], const unsigned (&pa)[4][4],
                                           unsigned buf, int half) {
    wgmma_fence();
    pv_issue_rs<kF16>(o, pa, buf, half);
    wgmma_commit_group();
    wgmma_wait_group<0>();
    reg_fence(o);
}

// The 4 x 4 transpose of 32-bit words within each quad of lanes (q = lane % 4): on entry a[e] is
// word e of lane q's row of the quad's matrix, on return a[e] is word q of lane e's row. Two
// butterfly steps (xor 1, xor 2), each lane swapping the two words whose index differs from q in
// the step's bit.
__device__ __forceinline__ void quad_transpose(unsigned (&a)[4], int q) {
#pragma unroll
    for (int k = 0; k < 2; k++) {  // xor 1: words 2 k + (1 - q % 2)
        const bool odd = q & 1;
        const unsigned r = __shfl_xor_sync(0xffffffffu, odd ? a[2 * k] : a[2 * k + 1], 1);
        if (odd) a[2 * k] = r;
        else a[2 * k + 1] = r;
    }
#pragma unroll
    for (int k = 0; k < 2; k++) {  // xor 2: words (2 - (q & 2)) + k
        const bool hi = q & 2;
        const unsigned r = __shfl_xor_sync(0xffffffffu, hi ? a[k] : a[2 + k], 2);
        if (hi) a[k] = r;
        else a[2 + k] = r;
    }
}

// Writes the chunk's rows as store_rows does (warpgroup wg holding O columns [256 wg, +256)),
// out in 16-byte stores: the quad of a row transposes its 4 x 4 words of each group of four
// 8-column blocks (4 jt), so that lane q holds the 8 consecutive columns of block 4 k + q.
// Split partials go through store_rows.
template <int kKV>
__device__ __forceinline__ void store_rows90(const DecodeParams &p, const float (&o)[32][4],
                                             const RowState &st, int req, int g, int m, int rows,
                                             bool direct, int slot, int wm, int wg, int lane,
                                             float v_scale = 1.f) {
    if (!direct) {
        store_rows<kKV>(p, o, st, req, g, m, rows, false, slot, v_scale, wm, wg, lane);
        return;
    }
    constexpr bool kOutF16 = KvTraits<kKV>::kOutF16;
    const int q = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int rr = m * kBlockM + wm * 16 + (lane >> 2) + 8 * h;
        const bool valid = rr < rows;  // uniform in a quad; every lane takes part in the shuffles
        const int rc = valid ? rr : rows - 1;
        const int j = rc / p.heads_per_kv, head = g * p.heads_per_kv + rc % p.heads_per_kv;
        const float l = st.l[h];
        const float inv = l > 0.f ? v_scale / l : 0.f;
        unsigned char *dst = static_cast<unsigned char *>(p.out) +
                             ((long long)req * p.o_stride_b + (long long)j * p.o_stride_s +
                              (long long)head * p.o_stride_h + wg * 256 + 8 * q) * 2;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            unsigned a[4];
#pragma unroll
            for (int e = 0; e < 4; e++)
                a[e] = pack2<kOutF16>(o[4 * k + e][2 * h] * inv, o[4 * k + e][2 * h + 1] * inv);
            quad_transpose(a, q);
            if (valid)
                *reinterpret_cast<uint4 *>(dst + k * 64) = make_uint4(a[0], a[1], a[2], a[3]);
        }
        if (valid && wg == 0 && q == 0)
            p.lse[((long long)req * p.h_q + head) * p.s_q + j] =
                l > 0.f ? row_lse_ln(st.m[h], l) : inf_f32();
    }
}

// ---- Fake-quant K and V (decode_sm90_fq_kernel) -----------------------------------------------

// The per-tensor scales of the quantized operands (kernel parameter): fp8 amax / 448, NVFP4 the
// global scale amax / 2688, 1 for None (runtime mla__fq_scale); unused for an unquantized one.
// chunk_units > 0: the CTA cuts its own schedule from the lengths (self_schedule: the batch-
// invariant chunks of chunk_units units, mla_attention_decode's dense path), p.sched unused and
// num_splits written by CTA (0, 0, 0) for the combine; 0: the records of p.sched (metadata.cu).
// codes_quick: bit 0 K, bit 1 V: the fp8 codes of that operand may take fl(x / sc) as fl(x * (1 /
// sc)) (runtime mla__fq_codes_quick_ok: the host found every finite 16-bit x of the cache dtype to
// get the same E4M3 code either way for this scale), skipping the quotient's correction.
struct FqScales {
    float k_scale, v_scale;
    int chunk_units;
    int codes_quick;
};
// The shortcut of FqScales::codes_quick (A/B switch: false ignores the flag).
constexpr bool kCodesQuick = true;
enum FqMode : int { kFqNone = 0, kFqFp8 = 1, kFqNvfp4 = 2 };

// A raw 16-bit pair (cache dtype) as two floats.
template <bool kF16>
__device__ __forceinline__ void raw2(unsigned w, float &lo, float &hi) {
    if constexpr (kF16) {
        lo = __half2float(__ushort_as_half((unsigned short)(w & 0xffffu)));
        hi = __half2float(__ushort_as_half((unsigned short)(w >> 16)));
    } else {
        lo = __uint_as_float(w << 16), hi = __uint_as_float(w & 0xffff0000u);
    }
}

// The quantizers of decode_mma_codes.cuh without their branches (a branch per element had the
// compiler serialize the element chains: v-fp8 2.8x none, k-fp8 9.9x in GPU request fqkv/1):
// the host runs this kernel only when every set scale is at least 2^-100, so that 1 / sc,
// 1 / (6 gs) and 1 / sb (sb = 0 or >= 2^-109) are finite where they are used.
// x / b from y = 1 / b (finite): div_rcp without its branch for an infinite reciprocal.
__device__ __forceinline__ float fq_div(float x, float b, float y) {
    const float q0 = __fmul_rn(x, y);
    const float q1 = __fmaf_rn(__fmaf_rn(-q0, b, x), y, q0);
    return select(fabsf(q0) == __int_as_float(0x7f800000), q0, q1);
}
// fp8_scaled without its clamp to +-448: the conversion it feeds (e4m3x2_f16x2,
// cvt.rn.satfinite) takes every |q| > 448 to 448, the E4M3 of the clamped value (448 rounds to
// itself; 448 < |q| < 464 would round to 448 too, beyond is satfinite's).
__device__ __forceinline__ float fq_fp8_scaled(float x, float sc, float rsc) {
    return fq_div(x, sc, rsc);
}
// nvfp4_scale (g6 = fl32(6 gs), r6 = 1 / g6).
__device__ __forceinline__ fakequant::Nvfp4Scale fq_nvfp4_scale(float bamax, float gs, float g6,
                                                                float r6) {
    fakequant::Nvfp4Scale sc;
    sc.sc = fakequant::e4m3_rn(fq_div(bamax, g6, r6));   // min(., 448): satfinite
    sc.sb = __fmul_rn(sc.sc, gs);
    sc.rsb = __frcp_rn(sc.sb);
    return sc;
}
// quant.cuh's e2m1_mag (exact RNE on {0, .5, 1, 1.5, 2, 3, 4, 6}, saturating at 6, NaN 6) for
// every q >= +0 and NaN, in 7 instructions: the grid's quantum is 0.5 below 2, 1 on [2, 4), 2 from
// 4 on, so q + M - M with M = 1.5 * 2^22 / 2^23 / 2^24 (picked by q's exponent, clamped to
// [127, 129]) rounds q to it, half to even (an fp32 sum whose ulp is the quantum), and fminf
// saturates (inf and NaN give 6). Equal to e2m1_mag for all 2^31 bit patterns >= +0 (checked on
// the CPU with IEEE fp32, docs/perf-notes.md, helper fqkn).
__device__ __forceinline__ float fq_e2m1_mag(float q) {
    const int e = min(max((int)(__float_as_uint(q) >> 23), 127), 129);
    const float mg = __int_as_float((e << 23) + ((22 << 23) | 0x400000));
    return fminf(__fadd_rn(__fadd_rn(q, mg), -mg), 6.f);
}
// nvfp4_code_fast with x's sign bit, on the corrected quotient q1 only: where q0 = |x| / sb is
// inf (sb == 0, or an overflowing quotient) q1 is inf or NaN, and fq_e2m1_mag gives 6 for both,
// as e2m1_mag_fast(q0) did; sb == 0 has sc = 0, so the code is 0 (nvfp4_code's). Equal to the
// previous select form for every 16-bit bf16 / fp16 x against the block scales of all E4M3 codes
// at 7 global scales (1.2e8 elements, the same check).
// kMagic false: the previous form (e2m1_mag_fast of q1, or of q0 where q0 is inf), the same
// values: V's codes keep it (V nvfp4 measured 4 % slower with the magic add, K 9 % faster).
// kQuick: the quotient as q0 = fl(|x| (1 / sb)) (FqScales::codes_quick, the host's proof that it
// gives q1's E2M1 magnitude for every x of the cache dtype and every block scale of the global
// scale; sb = 0 gives q0 = inf or NaN, as the exact path gives there).
template <bool kMagic = true, bool kQuick = false>
__device__ __forceinline__ float fq_nvfp4_code(float x, const fakequant::Nvfp4Scale &s) {
    const float a = fabsf(x), q0 = __fmul_rn(a, s.rsb);
    float q;
    if constexpr (kQuick) q = q0;
    else {
        const float q1 = __fmaf_rn(__fmaf_rn(-q0, s.sb, a), s.rsb, q0);
        q = kMagic ? q1 : select(q0 == __int_as_float(0x7f800000), q0, q1);
    }
    const float r = (kMagic ? fq_e2m1_mag(q) : fakequant::e2m1_mag_fast(q)) * s.sc;
    return __uint_as_float(__float_as_uint(r) | (__float_as_uint(x) & 0x80000000u));
}

// The fp8 codes of a raw pair as an fp16 pair (kOutF16) or a bf16 one (exact either way).
// kQuick: the quotient as fl(x * rsc) (FqScales::codes_quick; an infinite product saturates in the
// conversion, as the corrected quotient's inf did).
template <bool kF16, bool kOutF16, bool kQuick = false>
__device__ __forceinline__ unsigned fp8_code_pair(unsigned w, float sc, float rsc) {
    float lo, hi;
    raw2<kF16>(w, lo, hi);
    const unsigned h =
        kQuick ? fakequant::e4m3x2_f16x2(__fmul_rn(lo, rsc), __fmul_rn(hi, rsc))
               : fakequant::e4m3x2_f16x2(fq_fp8_scaled(lo, sc, rsc), fq_fp8_scaled(hi, sc, rsc));
    if constexpr (kOutF16) return h;
    else
        return pack2<false>(__half2float(__ushort_as_half((unsigned short)(h & 0xffffu))),
                            __half2float(__ushort_as_half((unsigned short)(h >> 16))));
}

template <bool kF16, bool kOutF16, bool kQuick = false>
__device__ __forceinline__ void fp8_codes_chunk(unsigned char *a, float sc, float rsc) {
    uint4 v = *reinterpret_cast<const uint4 *>(a);
    v.x = fp8_code_pair<kF16, kOutF16, kQuick>(v.x, sc, rsc);
    v.y = fp8_code_pair<kF16, kOutF16, kQuick>(v.y, sc, rsc);
    v.z = fp8_code_pair<kF16, kOutF16, kQuick>(v.z, sc, rsc);
    v.w = fp8_code_pair<kF16, kOutF16, kQuick>(v.w, sc, rsc);
    *reinterpret_cast<uint4 *>(a) = v;
}

// Makes this warpgroup's code writes visible to its wgmma (barrier 6 + wg, as zero_tail_rows).
__device__ __forceinline__ void codes_visible(int wg) {
    fence_proxy_async_shared();
    named_barrier_sync(6 + wg, kWgThreads);
}

// K codes (cache dtype) in place of pieces [lo, hi) of the tile at buf, by the 128 threads of
// warpgroup wg: fp8 elementwise (the swizzle permutes whole 16-byte chunks, so every chunk of a
// piece is one of 8 values); NVFP4 blocks of 16 features of a row, two 16-byte chunks whose
// physical positions in the row are 2 j and 2 j + 1 whatever the row's swizzle (c ^ (r & 7)
// keeps pairs c, c ^ 1 together).
// NVFP4 K codes of pieces [lo, hi) (quantize_k_pieces; kQuick: fq_nvfp4_code's).
template <bool kF16, bool kQuick>
__device__ __forceinline__ void nvfp4_k_pieces(unsigned char *buf, int lo, int hi, float ks, int wt) {
    const float k6 = __fmul_rn(6.f, ks), rk6 = __frcp_rn(k6);
#pragma unroll 1
    for (int pc = lo; pc < hi; pc++)
#pragma unroll
        for (int i = 0; i < kPieceBytes / 32 / kWgThreads; i++) {
            unsigned char *a = buf + pc * kPieceBytes + (wt + i * kWgThreads) * 32;
            const uint4 u0 = *reinterpret_cast<const uint4 *>(a);
            const uint4 u1 = *reinterpret_cast<const uint4 *>(a + 16);
            unsigned u[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w};
            float x[16], bamax = 0.f;
#pragma unroll
            for (int e = 0; e < 8; e++) {
                raw2<kF16>(u[e], x[2 * e], x[2 * e + 1]);
                bamax = fmaxf(bamax, fmaxf(fabsf(x[2 * e]), fabsf(x[2 * e + 1])));
            }
            const fakequant::Nvfp4Scale bs = fq_nvfp4_scale(bamax, ks, k6, rk6);
#pragma unroll
            for (int e = 0; e < 8; e++)
                u[e] = pack2<kF16>(fq_nvfp4_code<true, kQuick>(x[2 * e], bs),
                                   fq_nvfp4_code<true, kQuick>(x[2 * e + 1], bs));
            *reinterpret_cast<uint4 *>(a) = make_uint4(u[0], u[1], u[2], u[3]);
            *reinterpret_cast<uint4 *>(a + 16) = make_uint4(u[4], u[5], u[6], u[7]);
        }
}

// fp8 K codes of pieces [lo, hi) (quantize_k_pieces; kQuick: fp8_code_pair's).
template <bool kF16, bool kQuick>
__device__ __forceinline__ void fp8_k_pieces(unsigned char *buf, int lo, int hi, float ks,
                                             float rk, int wt) {
#pragma unroll 1
    for (int pc = lo; pc < hi; pc++)
#pragma unroll
        for (int i = 0; i < kPieceBytes / 16 / kWgThreads; i++)
            fp8_codes_chunk<kF16, kF16, kQuick>(buf + pc * kPieceBytes + (wt + i * kWgThreads) * 16,
                                                ks, rk);
}

// quick: FqScales::codes_quick's K bit (a uniform branch).
template <bool kF16, int kMode>
__device__ __forceinline__ void quantize_k_pieces(unsigned char *buf, int lo, int hi, float ks,
                                                  int wt, int wg, bool quick = false) {
    if constexpr (kMode == kFqFp8) {
        const float rk = __frcp_rn(ks);
        if (kCodesQuick && quick) fp8_k_pieces<kF16, true>(buf, lo, hi, ks, rk, wt);
        else fp8_k_pieces<kF16, false>(buf, lo, hi, ks, rk, wt);
    } else if constexpr (kMode == kFqNvfp4) {
        if (kCodesQuick && quick) nvfp4_k_pieces<kF16, true>(buf, lo, hi, ks, wt);
        else nvfp4_k_pieces<kF16, false>(buf, lo, hi, ks, wt);
    }
    if constexpr (kMode != kFqNone) codes_visible(wg);
}

// V codes (fp16) in place of the V columns [256 half, +256) (pieces 4 half .. 4 half + 3) of the
// tile at buf (raw, tail rows zeroed), by the 128 threads of warpgroup wg: fp8 elementwise;
// NVFP4 along the 4 groups of 16 rows of each column, in units of 4 columns (8 bytes) x 16 rows,
// unit u = wt, wt + 128: bytes 8 (u % 2) of logical chunk (u / 2) % 8, group (u / 16) % 4,
// piece 4 half + u / 64; first the 4 columns' amaxes, then their codes (a warp reads 2 whole
// 128-byte rows per access; 4 columns at a time for the registers: o and P are live here).
// NVFP4 V codes of the column half (quantize_v_half; kQuick: fq_nvfp4_code's).
template <bool kF16, bool kQuick>
__device__ __forceinline__ void nvfp4_v_half(unsigned char *buf, int half, float vs, int wt) {
    const float v6 = __fmul_rn(6.f, vs), rv6 = __frcp_rn(v6);
#pragma unroll 1
    for (int u = wt; u < 2 * kWgThreads; u += kWgThreads) {
        unsigned char *b = buf + (half * kVPieces + (u >> 6)) * kPieceBytes;
        const int c = (u >> 1) & 7, hb = (u & 1) * 8, r0 = ((u >> 4) & 3) * 16;
        float m[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int rr = 0; rr < 16; rr++) {
            const int r = r0 + rr;
            const uint2 v =
                *reinterpret_cast<const uint2 *>(b + r * 128 + ((c ^ (r & 7)) << 4) + hb);
            float x0, x1, x2, x3;
            raw2<kF16>(v.x, x0, x1);
            raw2<kF16>(v.y, x2, x3);
            m[0] = fmaxf(m[0], fabsf(x0)), m[1] = fmaxf(m[1], fabsf(x1));
            m[2] = fmaxf(m[2], fabsf(x2)), m[3] = fmaxf(m[3], fabsf(x3));
        }
        fakequant::Nvfp4Scale sc[4];
#pragma unroll
        for (int e = 0; e < 4; e++) sc[e] = fq_nvfp4_scale(m[e], vs, v6, rv6);
#pragma unroll 4
        for (int rr = 0; rr < 16; rr++) {
            const int r = r0 + rr;
            uint2 *a = reinterpret_cast<uint2 *>(b + r * 128 + ((c ^ (r & 7)) << 4) + hb);
            const uint2 v = *a;
            float x[4];
            raw2<kF16>(v.x, x[0], x[1]);
            raw2<kF16>(v.y, x[2], x[3]);
#pragma unroll
            for (int e = 0; e < 4; e++)
                x[e] = fq_nvfp4_code<false, kQuick>(x[e], sc[e]);
            *a = make_uint2(pack2<true>(x[0], x[1]), pack2<true>(x[2], x[3]));
        }
    }
}

// quick: FqScales::codes_quick's V bit (a uniform branch).
template <bool kF16, int kMode>
__device__ __forceinline__ void quantize_v_half(unsigned char *buf, int half, float vs, int wt,
                                                int wg, bool quick = false) {
    if constexpr (kMode == kFqFp8) {
        const float rv = __frcp_rn(vs);
        unsigned char *b = buf + half * kVPieces * kPieceBytes;
        // the two loops written out: as a helper taking b they changed the address arithmetic
        // of the kinds with fp8 V (SASS compared)
        if (kCodesQuick && quick) {
#pragma unroll 4
            for (int i = 0; i < kVPieces * kPieceBytes / 16 / kWgThreads; i++)
                fp8_codes_chunk<kF16, true, true>(b + (wt + i * kWgThreads) * 16, vs, rv);
        } else {
#pragma unroll 4
            for (int i = 0; i < kVPieces * kPieceBytes / 16 / kWgThreads; i++)
                fp8_codes_chunk<kF16, true>(b + (wt + i * kWgThreads) * 16, vs, rv);  // 16 chunks
        }
    } else if constexpr (kMode == kFqNvfp4) {
        if (kCodesQuick && quick) nvfp4_v_half<kF16, true>(buf, half, vs, wt);
        else nvfp4_v_half<kF16, false>(buf, half, vs, wt);
    }
    if constexpr (kMode != kFqNone) codes_visible(wg);
}

// Pieces of the chunk loop that attend_chunk90, attend_chunk90_fq and decode_sm90x2.cu's
// attend_chunk_x2 share. The loops themselves stay apart (they differ in their loads and hooks;
// a shared loop with no-op hooks moved registers), and so does the next pair's row fetch: as a
// helper with out-parameters it changed the loop's code (checked on the PTX).

// Tiles 0 and 1 of a chunk (warpgroup 0 loads pieces 0-3 of both, warpgroup 1 pieces 4-8;
// page class 0: K1's piece 8 by warpgroup 0), two: tile 1 exists.
template <int kPageClass, bool kEvictFirst = true>
__device__ __forceinline__ void load_first_tiles(const DecodeParams &p, const TmaDesc &tk,
                                                 unsigned k0, unsigned k1, unsigned bar0,
                                                 unsigned bar1, RowRef ra, RowRef rb, int g,
                                                 int wg, int wt, bool two) {
    if (wg == 0) {
        load_tile<0, kVPieces, kPageClass, kEvictFirst>(p, tk, k0, bar0, ra, g, wt);
        if (two) {
            load_rope<kRope1ByWg0<kPageClass>>(p, k1, rb, g, wt);
            load_tile<0, kVPieces, kPageClass, kEvictFirst>(p, tk, k1, bar1, rb, g, wt);
        }
    } else {
        load_tile<kVPieces, kPieces, kPageClass, kEvictFirst>(p, tk, k0, bar0, ra, g, wt);
        if (two)
            load_tile<kVPieces, kPieces - kRope1ByWg0<kPageClass>, kPageClass, kEvictFirst>(
                p, tk, k1, bar1, rb, g, wt);
    }
}

// S = Q K^T of the tile in buffer kB (K0 / K1, mbarriers bar, phase toggled after the wait;
// K1 of page class 0 holds piece 8 with pieces 0-3).
template <bool kF16, int kPageClass, int kB, class Prepare = NoHook>
__device__ __forceinline__ void qk_buffer(float (&s)[8][4], const unsigned (&q8)[4][4],
                                          unsigned q, unsigned buf, unsigned bar,
                                          unsigned &phase, Prepare prepare = {}) {
    qk_tile<kF16, kPageClass != 1, kB == 1 && kRope1ByWg0<kPageClass>>(s, q8, q, buf, bar, phase,
                                                                       prepare);
    phase ^= 1;
}

// A chunk's last pair: what the chunk walk reads next (the request after the next chunk's,
// nreq; nt: the next chunk's tiles, -1 for none; the sched record `part`) into L1, so that it
// does not wait on L2 at the chunk start.
__device__ __forceinline__ void prefetch_walk(const DecodeParams &p, int nt, int nreq,
                                              long long part) {
    if (threadIdx.x == 0 && nt >= 0 && nreq + 1 < p.b) {
        prefetch_l1(p.seqlens + nreq + 1);
        prefetch_l1(p.num_splits + nreq + 1);
        prefetch_l1(p.sched + part * kRecordInts);
    }
}

// pre_q: the next request's Q pieces [kLo, kHi) (free once the other warpgroup's last Q K^T is
// done), committed.
template <int kLo, int kHi>
__device__ __forceinline__ void load_next_q(bool pre_q, const DecodeParams &p, unsigned q,
                                            const volatile NextChunk *nx, int g, int m, int rows,
                                            int wt) {
    if (pre_q) {
        load_q_pieces<kLo, kHi, kWgThreads>(p, q, nx->req, g, m, rows, wt);
        cp_async_commit();
    }
}

// Attention of the CTA's rows over keys [t_begin, t_end) of request req. Q (and Q8 unless
// q_pending) are in place or on their way; preloaded: the last pair of the previous chunk issued
// this chunk's first two tiles. Returns whether this chunk's last pair issued the loads of the
// next chunk (kSmemNext): its first tiles and, for another request, its Q (then committed).
template <int kKV, int kPageClass, bool kCausal>
__device__ bool attend_chunk90(const DecodeParams &p, const TmaDesc &tk, unsigned char *smem,
                               unsigned (&q8)[4][4], bool &q_pending,
                               unsigned (&phase)[2], int req, int g, int m, int rows, int len,
                               int t_begin, int t_end, bool direct, int slot, bool preloaded) {
    constexpr bool kF16 = KvTraits<kKV>::kF16;
    const auto [lane, warp, wm, wg, wt] = thread90();
    const auto [base, q, k0, k1, bar0, bar1, sm0, sm1, red] = smem90(smem);
    const volatile NextChunk *nx = reinterpret_cast<const volatile NextChunk *>(smem + kSmemNext);
    RowState st;
    float o[32][4];
    int limit[2];
    const int t_stop = chunk_rows_init<kCausal>(p, st, o, limit, m, rows, len, t_end, wm, lane);
    const int n_tiles = t_stop > t_begin ? (t_stop - t_begin + kBlockN - 1) / kBlockN : 0;
    const int r0 = wm * 16 + (lane >> 2);
    float s[8][4];
    unsigned pa[4][4];

    // Prologue: tiles 0 and 1, issued before the wait for a request's Q so that both loads are
    // in flight together.
    if (n_tiles > 0 && !preloaded)
        load_first_tiles<kPageClass>(p, tk, k0, k1, bar0, bar1,
                                     fetch_row<kPageClass>(p, req, t_begin, t_stop, wt),
                                     fetch_row<kPageClass>(p, req, t_begin + kBlockN, t_stop, wt),
                                     g, wg, wt, n_tiles > 1);
    if (q_pending) wait_q(), q_pending = false;
    if (n_tiles > 0) {
        if (wg == 0) qk_buffer<kF16, kPageClass, 0>(s, q8, q, k0, bar0, phase[0]);
        else if (n_tiles > 1) qk_buffer<kF16, kPageClass, 1>(s, q8, q, k1, bar1, phase[1]);
    }

    bool pre_q = false;  // the last pair loads the next chunk's Q
    for (int it = 0; it < n_tiles; it += 2) {
        const int ta = t_begin + it * kBlockN, tb = ta + kBlockN;
        const bool has_b = it + 1 < n_tiles;
        const bool next_a = it + 2 < n_tiles, next_b = it + 3 < n_tiles;
        // The next pair's block-table entries, fetched a pair ahead of their loads; in the last
        // pair, those of the next chunk's first two tiles.
        RowRef na, nb;
        bool load_a = next_a, load_b = next_b;
        if (next_a) {
            na = fetch_row<kPageClass>(p, req, ta + 2 * kBlockN, t_stop, wt);
            nb = fetch_row<kPageClass>(p, req, tb + 2 * kBlockN, t_stop, wt);
        } else {
            const int nt = nx->n_tiles, nreq = nx->req, nt0 = nx->t_begin, nstop = nx->t_stop;
            pre_q = nt >= 0 && nx->new_req;
            // this chunk's Q K^T products are done: q8 takes the next request's piece 8
            if (pre_q) load_q8(p, q8, nreq, g, m, rows);
            prefetch_walk(p, nt, nreq, blockIdx.x);
            load_a = nt > 0, load_b = nt > 1;
            na = fetch_row<kPageClass>(p, max(nreq, 0), nt0, load_a ? nstop : nt0, wt);
            nb = fetch_row<kPageClass>(p, max(nreq, 0), nt0 + kBlockN, load_b ? nstop : nt0, wt);
        }
        if (wg == 0) {
            if (kPageClass == 1 && ta + kBlockN > t_stop)
                zero_tail_rows(smem + kSmemK0, t_stop - ta, 0, wt);
            const float sc = scale_mask64<!kCausal>(s, limit, p.scale_log2, ta, lane);
            float m_a[2], f[2];
            pair_wg0_pv<kF16, kLazyRescale>(s, st, o, pa, m_a, f, sm0, smem, k0, r0, wm, lane,
                                            it > 0, sc);
            // beta = 2^(m_a - m_b) brings O_L to the pair's final max.
            named_barrier_sync(kBarM1, 2 * kWgThreads);
            load_next_q<0, kVPieces>(pre_q, p, q, nx, g, m, rows, wt);  // M1: pieces 0-3 free
            if (load_b)  // K1's piece 8 read by warpgroup 1's Q K^T (M1)
                load_rope<kRope1ByWg0<kPageClass>>(p, k1, nb, g, wt);
            pair_wg0_beta(st, f, m_a, sm1, r0);
            wgmma_wait_group<0>();
            reg_fence(o);
            if (load_a)  // V0_L consumed
                load_tile<0, kVPieces, kPageClass>(p, tk, k0, bar0, na, g, wt);
            scale_o(o, f);
            if (has_b) pv_remote<kF16>(o, kBarP1, base + kSmemP1, k1, 0);  // V1_L: K1 pieces 0-3
            if (load_b)  // V1_L consumed (or K1 unused in this pair)
                load_tile<0, kVPieces, kPageClass>(p, tk, k1, bar1, nb, g, wt);
            if (next_a) qk_buffer<kF16, kPageClass, 0>(s, q8, q, k0, bar0, phase[0]);
        } else {
            float mx[2] = {-inf_f32(), -inf_f32()}, m_a[2], m_b[2], f[2], sc = 1.f;
            if (has_b) {
                if (kPageClass == 1 && tb + kBlockN > t_stop)
                    zero_tail_rows(smem + kSmemK1, t_stop - tb, 1, wt);
                sc = scale_mask64<!kCausal>(s, limit, p.scale_log2, tb, lane);
                row_max64(s, mx, sc);
            }
            named_barrier_sync(kBarM0, 2 * kWgThreads);
            load_next_q<kVPieces, kPieces - 1>(pre_q, p, q, nx, g, m, rows, wt);  // M0: 4-7 free
            pair_wg1_max<kLazyRescale>(st, o, mx, m_a, m_b, f, sm0, sm1, r0, lane);
            float l_b[2] = {0.f, 0.f};
            if (has_b) pair_wg1_p1<kF16>(s, m_b, l_b, pa, smem, wm, lane, sc);
            pv_remote<kF16>(o, kBarP0, base + kSmemP0, k0, 1);  // V0_R: K0 pieces 4-7
            if (next_a) named_barrier_arrive(kBarP0Free, 2 * kWgThreads);
            if (load_a)  // V0_R read
                load_tile<kVPieces, kPieces, kPageClass>(p, tk, k0, bar0, na, g, wt);
            pair_wg1_beta(st, o, f, m_a, m_b, l_b);
            if (has_b) pv_rs_wait<kF16>(o, pa, k1, 1);
            if (load_b)  // V1_R consumed (or K1 unused in this pair)
                load_tile<kVPieces, kPieces - kRope1ByWg0<kPageClass>, kPageClass>(p, tk, k1, bar1,
                                                                                  nb, g, wt);
            if (next_b) qk_buffer<kF16, kPageClass, 1>(s, q8, q, k1, bar1, phase[1]);
        }
    }

    // Row sums of both warpgroups (the portable kernel's exchange, warpgroup for column half),
    // then each stores its half of O.
    finish_row_sums(st, red, wm, wg, lane);
    store_rows90<kKV>(p, o, st, req, g, m, rows, direct, slot, wm, wg, lane);
    return n_tiles > 0;
}

// attend_chunk90 with fake-quant K (kKq) and / or V (kVq) (FqMode; decode_sm90_fq_kernel, the
// file comment): page class 1, not causal. A copy of attend_chunk90 with the quantization steps
// (kept apart so that the FlashMLA kinds' SASS stays what it was).
template <int kKV, int kKq, int kVq>
__device__ bool attend_chunk90_fq(const DecodeParams &p, const TmaDesc &tk, const FqScales &fq,
                                  unsigned char *smem, unsigned (&q8)[4][4], bool &q_pending,
                                  unsigned (&phase)[2], int req, int g, int m, int rows, int len,
                                  int t_begin, int t_end, bool direct, int slot, bool preloaded) {
    constexpr int kPageClass = 1;
    constexpr bool kCausal = false;
    constexpr bool kF16 = KvTraits<kKV>::kF16;
    constexpr bool kF16P = kVq != kFqNone || kF16;  // P and V of P V (V codes: fp16)
    constexpr bool kLoadFirst = kKq == kFqNone;     // evict_first for the tile loads
    const auto [lane, warp, wm, wg, wt] = thread90();
    const auto [base, q, k0, k1, bar0, bar1, sm0, sm1, red] = smem90(smem);
    const int qwg = wg, qwt = wt;  // for the lambdas below (structured bindings are not captured)
    const unsigned rbar = base + kSmemR + 8 * wg;  // R0 (warpgroup 0, K0) / R1 (warpgroup 1, K1)
    unsigned char *const own = smem + (wg == 0 ? kSmemK0 : kSmemK1);  // this warpgroup's tile
    const unsigned own_addr = wg == 0 ? k0 : k1;
    // K codes of the own tile's pieces, after their mbarrier (qk_tile's hook)
    auto k_codes = [&](int lo, int hi) {
        quantize_k_pieces<kF16, kKq>(own, lo, hi, fq.k_scale, qwt, qwg, fq.codes_quick & 1);
    };
    // K quantized: once this warpgroup's Q K^T is done, its tile's raw V again (rows of r)
    auto reload = [&](RowRef r) {
        if constexpr (kKq != kFqNone)
            load_tile<0, kPieces - 1, kPageClass>(p, tk, own_addr, rbar, r, g, qwt);
    };

    const volatile NextChunk *nx = reinterpret_cast<const volatile NextChunk *>(smem + kSmemNext);
    RowState st;
    float o[32][4];
    int limit[2];
    const int t_stop = chunk_rows_init<kCausal>(p, st, o, limit, m, rows, len, t_end, wm, lane);
    const int n_tiles = t_stop > t_begin ? (t_stop - t_begin + kBlockN - 1) / kBlockN : 0;
    const int r0 = wm * 16 + (lane >> 2);
    float s[8][4];
    unsigned pa[4][4];
    // K quantized: waits for the own tile's raw V (before its P tile is published), then zeroes
    // its rows past t_stop (the tile at t0)
    // (the reload of the own tile came after its Q K^T, which toggled phase[wg]: the reload
    // mbarrier's phase of the same count has the parity phase[wg] ^ 1)
    auto raw_v_back = [&](int t0, unsigned parity) {
        if constexpr (kKq != kFqNone) {
            mbarrier_wait_parity(rbar, parity);
            if (t0 + kBlockN > t_stop) zero_tail_rows(own, t_stop - t0, qwg, qwt);
        }
    };
    // V quantized: the codes of this warpgroup's V columns of the tile at buf
    auto v_codes = [&](unsigned char *buf) {
        quantize_v_half<kF16, kVq>(buf, qwg, fq.v_scale, qwt, qwg, (fq.codes_quick & 2) != 0);
    };

    // Prologue: tiles 0 and 1, issued before the wait for a request's Q so that both loads are
    // in flight together.
    RowRef ra{}, rb{};  // K quantized: the rows of tiles 0 and 1, for their reloads
    if constexpr (kKq == kFqNone) {
        if (n_tiles > 0 && !preloaded)
            load_first_tiles<kPageClass, kLoadFirst>(
                p, tk, k0, k1, bar0, bar1, fetch_row<kPageClass>(p, req, t_begin, t_stop, wt),
                fetch_row<kPageClass>(p, req, t_begin + kBlockN, t_stop, wt), g, wg, wt,
                n_tiles > 1);
    } else if (n_tiles > 0) {  // preloaded or not
        ra = fetch_row<kPageClass>(p, req, t_begin, t_stop, wt);
        rb = fetch_row<kPageClass>(p, req, t_begin + kBlockN, t_stop, wt);
        if (!preloaded)
            load_first_tiles<kPageClass, kLoadFirst>(p, tk, k0, k1, bar0, bar1, ra, rb, g, wg, wt,
                                                     n_tiles > 1);
    }
    RowRef rl = wg == 0 ? ra : rb;  // the rows of the tile whose reload is due
    if (q_pending) wait_q(), q_pending = false;
    if (n_tiles > 0) {
        if (wg == 0) qk_buffer<kF16, kPageClass, 0>(s, q8, q, k0, bar0, phase[0], k_codes);
        else if (n_tiles > 1) qk_buffer<kF16, kPageClass, 1>(s, q8, q, k1, bar1, phase[1], k_codes);
    }

    bool pre_q = false;  // the last pair loads the next chunk's Q
    for (int it = 0; it < n_tiles; it += 2) {
        const int ta = t_begin + it * kBlockN, tb = ta + kBlockN;
        const bool has_b = it + 1 < n_tiles;
        const bool next_a = it + 2 < n_tiles, next_b = it + 3 < n_tiles;
        // The next pair's block-table entries, fetched a pair ahead of their loads; in the last
        // pair, those of the next chunk's first two tiles.
        RowRef na, nb;
        bool load_a = next_a, load_b = next_b;
        if (next_a) {
            na = fetch_row<kPageClass>(p, req, ta + 2 * kBlockN, t_stop, wt);
            nb = fetch_row<kPageClass>(p, req, tb + 2 * kBlockN, t_stop, wt);
        } else {
            const int nt = nx->n_tiles, nreq = nx->req, nt0 = nx->t_begin, nstop = nx->t_stop;
            pre_q = nt >= 0 && nx->new_req;
            // this chunk's Q K^T products are done: q8 takes the next request's piece 8
            if (pre_q) load_q8(p, q8, nreq, g, m, rows);
            prefetch_walk(p, nt, nreq, blockIdx.x);
            load_a = nt > 0, load_b = nt > 1;
            na = fetch_row<kPageClass>(p, max(nreq, 0), nt0, load_a ? nstop : nt0, wt);
            nb = fetch_row<kPageClass>(p, max(nreq, 0), nt0 + kBlockN, load_b ? nstop : nt0, wt);
        }
        if (wg == 0 || has_b) reload(rl);
        rl = wg == 0 ? na : nb;
        if (wg == 0) {
            if (kPageClass == 1 && kKq == kFqNone && ta + kBlockN > t_stop)
                zero_tail_rows(smem + kSmemK0, t_stop - ta, 0, wt);
            scale_mask64<false>(s, limit, p.scale_log2, ta, lane);
            float m_a[2], f[2];
            pair_wg0_pv<kF16P, kLazyRescaleFq>(s, st, o, pa, m_a, f, sm0, smem, k0, r0, wm, lane,
                                               it > 0, 1.f, [&] { raw_v_back(ta, phase[0] ^ 1); },
                                               [&] { v_codes(smem + kSmemK0); });
            // beta = 2^(m_a - m_b) brings O_L to the pair's final max.
            named_barrier_sync(kBarM1, 2 * kWgThreads);
            load_next_q<0, kVPieces>(pre_q, p, q, nx, g, m, rows, wt);  // M1: pieces 0-3 free
            if (load_b)  // K1's piece 8 read by warpgroup 1's Q K^T (M1)
                load_rope<kRope1ByWg0<kPageClass>>(p, k1, nb, g, wt);
            pair_wg0_beta(st, f, m_a, sm1, r0);
            wgmma_wait_group<0>();
            reg_fence(o);
            if (load_a)  // V0_L consumed
                load_tile<0, kVPieces, kPageClass, kLoadFirst>(p, tk, k0, bar0, na, g, wt);
            scale_o(o, f);
            if (has_b)  // V1_L: K1 pieces 0-3
                pv_remote<kF16P>(o, kBarP1, base + kSmemP1, k1, 0,
                                 [&] { v_codes(smem + kSmemK1); });
            if (load_b)  // V1_L consumed (or K1 unused in this pair)
                load_tile<0, kVPieces, kPageClass, kLoadFirst>(p, tk, k1, bar1, nb, g, wt);
            if (next_a) qk_buffer<kF16, kPageClass, 0>(s, q8, q, k0, bar0, phase[0], k_codes);
        } else {
            float mx[2] = {-inf_f32(), -inf_f32()}, m_a[2], m_b[2], f[2];
            if (has_b) {
                if (kPageClass == 1 && kKq == kFqNone && tb + kBlockN > t_stop)
                    zero_tail_rows(smem + kSmemK1, t_stop - tb, 1, wt);
                scale_mask64<false>(s, limit, p.scale_log2, tb, lane);
                row_max64(s, mx);
            }
            named_barrier_sync(kBarM0, 2 * kWgThreads);
            load_next_q<kVPieces, kPieces - 1>(pre_q, p, q, nx, g, m, rows, wt);  // M0: 4-7 free
            pair_wg1_max<kLazyRescaleFq>(st, o, mx, m_a, m_b, f, sm0, sm1, r0, lane);
            float l_b[2] = {0.f, 0.f};
            if (has_b)
                pair_wg1_p1<kF16P>(s, m_b, l_b, pa, smem, wm, lane, 1.f,
                                   [&] { raw_v_back(tb, phase[1] ^ 1); });
            pv_remote<kF16P>(o, kBarP0, base + kSmemP0, k0, 1,  // V0_R: K0 pieces 4-7
                             [&] { v_codes(smem + kSmemK0); });
            if (next_a) named_barrier_arrive(kBarP0Free, 2 * kWgThreads);
            if (load_a)  // V0_R read
                load_tile<kVPieces, kPieces, kPageClass, kLoadFirst>(p, tk, k0, bar0, na, g, wt);
            pair_wg1_beta(st, o, f, m_a, m_b, l_b);
            if (has_b) {
                v_codes(smem + kSmemK1);
                pv_rs_wait<kF16P>(o, pa, k1, 1);
            }
            if (load_b)  // V1_R consumed (or K1 unused in this pair)
                load_tile<kVPieces, kPieces - kRope1ByWg0<kPageClass>, kPageClass, kLoadFirst>(
                    p, tk, k1, bar1, nb, g, wt);
            if (next_b) qk_buffer<kF16, kPageClass, 1>(s, q8, q, k1, bar1, phase[1], k_codes);
        }
    }

    // Row sums of both warpgroups (the portable kernel's exchange, warpgroup for column half),
    // then each stores its half of O.
    finish_row_sums(st, red, wm, wg, lane);
    store_rows90<kKV>(p, o, st, req, g, m, rows, direct, slot, wm, wg, lane,
                      kVq != kFqNone ? fq.v_scale : 1.f);
    return n_tiles > 0;
}

// The chunk walk of a part: the first chunk the CTA attends at or after unit u0 (-1: the part's
// first unit in req) of request req, in the order of decode_kernel's walk (chunks whose split
// slot is outside the workspace are skipped). False when none is left.
struct Chunk {
    int req, len, u1, t_begin, t_end, slot;
    bool direct;
    int split0;  // find_chunk_self: the first slot of request req
};

__device__ __forceinline__ bool find_chunk(const DecodeParams &p, const int *rec, int req, int u0,
                                           Chunk &c) {
    const int begin_req = rec[kBeginReq], end_req = min(rec[kEndReq], p.b - 1);
    const int cu = rec[kChunkUnits];
    for (; req <= end_req; req++, u0 = -1) {
        const int len = max(p.seqlens[req], 0);
        const int lo = req == begin_req ? max(rec[kBeginUnit], 0) : 0;
        const int hi = req == end_req ? rec[kEndUnit] : units_of(len);
        const int split0 = p.num_splits[req], n_splits = p.num_splits[req + 1] - split0;
        for (u0 = max(u0, lo); u0 < hi;) {
            const int u1 = cu > 0 ? min(hi, (u0 / cu + 1) * cu) : hi;
            const int chunk = cu > 0 ? u0 / cu : (req == begin_req ? rec[kBeginChunk] : 0);
            c.req = req, c.len = len, c.u1 = u1, c.slot = split0 + chunk;
            c.t_begin = u0 * kBlockN, c.t_end = min(u1 * kBlockN, len);
            c.direct = n_splits == 1;
            if (c.direct || (c.slot >= 0 && c.slot < p.split_cap)) return true;
            u0 = u1;
        }
    }
    return false;
}

// ---- The schedule cut by each CTA (decode_sm90_fq_kernel with FqScales::chunk_units > 0) ------
// metadata.cu's batch-invariant mode, computed by the 256 threads of every CTA from the lengths
// (capped at max_blocks * page_size, as mla_attention_decode documents), so that no metadata
// kernel runs before the decode: request i has u_i = units_of(len_i) units in k_i =
// ceil(u_i / cu) chunks, cost k_i * 5 + u_i on the cost line C (C_i its start, T = C_b); part
// p = blockIdx.x takes the chunks whose start C_i + j (5 + cu) lies in [p pl, (p + 1) pl), pl =
// ceil(T / P) (1 when T <= P): the parts of mla_get_metadata's records, and the chunks (hence
// the numerics) of the request's own length. Slot of chunk j of request i: N_i + j, N the
// exclusive prefix of the k_i (the host sizes the workspace for every chunk of every capped
// length, so no fallback is needed). CTA (0, 0, 0) writes num_splits = N for the combine (which
// waits for the whole grid).
__device__ __forceinline__ int capped_len(const DecodeParams &p, int req) {
    const long long cap = (long long)p.max_blocks * p.page_size;
    return (int)min((long long)max(p.seqlens[req], 0), cap);
}

// Exclusive prefix sums of (a, b) over the CTA's 256 threads (totals in ta, tb); scratch: 2 x 8
// long longs of shared memory.
__device__ __forceinline__ void scan2(long long &a, long long &b, long long &ta, long long &tb,
                                      long long *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    long long ia = a, ib = b;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const long long ua = __shfl_up_sync(0xffffffffu, ia, d);
        const long long ub = __shfl_up_sync(0xffffffffu, ib, d);
        if (lane >= d) ia += ua, ib += ub;
    }
    if (lane == 31) scratch[warp] = ia, scratch[8 + warp] = ib;
    __syncthreads();
    long long pa = 0, pb = 0;
    ta = tb = 0;
#pragma unroll
    for (int w = 0; w < kThreads / 32; w++) {
        if (w < warp) pa += scratch[w], pb += scratch[8 + w];
        ta += scratch[w], tb += scratch[8 + w];
    }
    a = pa + ia - a, b = pb + ib - b;
}

// The part's record (SchedField layout) into rec and the first slot of its first request into
// *split0; scratch: 256 bytes of shared memory not otherwise in use yet (sP0).
__device__ void self_schedule(const DecodeParams &p, int cu, unsigned char *scratch, int (&rec)[8],
                              int &split0) {
    static_assert(kThreads == 256, "scan2 sums 8 warps");
    long long *sc = reinterpret_cast<long long *>(scratch);
    unsigned long long *keys = reinterpret_cast<unsigned long long *>(scratch + 128);
    int *begin_n = reinterpret_cast<int *>(scratch + 144);
    const int b = p.b, per = (b + kThreads - 1) / kThreads;
    const int i0 = min(b, (int)threadIdx.x * per), i1 = min(b, i0 + per);
    const long long span = kSplitOverhead + cu;
    if (threadIdx.x == 0) keys[0] = ~0ull, keys[1] = 0ull;
    long long c = 0, n = 0, T, N;
    for (int i = i0; i < i1; i++) {
        const int u = units_of(capped_len(p, i)), k = (u + cu - 1) / cu;
        c += (long long)k * kSplitOverhead + u, n += k;
    }
    scan2(c, n, T, N, sc);  // its __syncthreads also orders the key initialization
    const long long pl = T > p.num_parts ? (T + p.num_parts - 1) / p.num_parts : 1;
    const long long start = (long long)blockIdx.x * pl, end = min(start + pl, T);
    const bool writer = blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0;
    int *const num_splits = const_cast<int *>(p.num_splits);  // the combine's input
    // the first and last chunk (request << 32 | chunk) whose start lies in [start, end)
    unsigned long long lo = ~0ull, hi = 0ull;
    long long ci = c, ni = n;
    for (int i = i0; i < i1; i++) {
        const int u = units_of(capped_len(p, i)), k = (u + cu - 1) / cu;
        if (writer) num_splits[i] = (int)ni;
        const long long j0 = start > ci ? (start - ci + span - 1) / span : 0;
        const long long j1 = end > ci ? min((end - 1 - ci) / span, (long long)k - 1) : -1;
        if (j0 <= j1) {
            lo = min(lo, ((unsigned long long)i << 32) | (unsigned long long)j0);
            hi = max(hi, (((unsigned long long)i << 32) | (unsigned long long)j1) + 1);
        }
        ci += (long long)k * kSplitOverhead + u, ni += k;
    }
    if (writer && threadIdx.x == 0) num_splits[b] = (int)N;
    if (lo != ~0ull) atomicMin(&keys[0], lo);
    if (hi != 0ull) atomicMax(&keys[1], hi);
    __syncthreads();
    const unsigned long long klo = keys[0], khi = keys[1] - 1;
    const int br = (int)(klo >> 32), er = (int)(khi >> 32);
    // the slot base of the first request, from the thread that holds it
    if (klo != ~0ull && br >= i0 && br < i1) {
        long long nb = n;
        for (int i = i0; i < br; i++) nb += (units_of(capped_len(p, i)) + cu - 1) / cu;
        *begin_n = (int)nb;
    }
    __syncthreads();
    rec[kBeginReq] = 0, rec[kBeginUnit] = 0, rec[kEndReq] = -1, rec[kEndUnit] = 0;
    rec[kBeginChunk] = 0, rec[kChunkUnits] = cu, rec[6] = 0, rec[7] = 0;
    split0 = 0;
    if (klo != ~0ull) {
        rec[kBeginReq] = br, rec[kBeginUnit] = (int)(klo & 0xffffffffu) * cu;
        rec[kEndReq] = er;
        rec[kEndUnit] = min(((int)(khi & 0xffffffffu) + 1) * cu, units_of(capped_len(p, er)));
        rec[kBeginChunk] = (int)(klo & 0xffffffffu);
        split0 = *begin_n;
    }
    __syncthreads();  // scratch (sP0) free again
}

// find_chunk for a self-cut schedule (chunk units cu > 0): the slots from the running slot base
// split0 of request req (advanced past the requests it walks over) instead of num_splits, the
// lengths capped as self_schedule counts them.
__device__ __forceinline__ bool find_chunk_self(const DecodeParams &p, const int (&rec)[8],
                                                int req, int u0, int split0, int cu, Chunk &c) {
    const int begin_req = rec[kBeginReq], end_req = min(rec[kEndReq], p.b - 1);
    for (; req <= end_req; req++, u0 = -1) {
        const int len = capped_len(p, req), units = units_of(len);
        const int lo = req == begin_req ? max(rec[kBeginUnit], 0) : 0;
        const int hi = req == end_req ? rec[kEndUnit] : units;
        const int n_splits = (units + cu - 1) / cu;
        for (u0 = max(u0, lo); u0 < hi;) {
            const int u1 = min(hi, (u0 / cu + 1) * cu);
            c.req = req, c.len = len, c.u1 = u1, c.slot = split0 + u0 / cu, c.split0 = split0;
            c.t_begin = u0 * kBlockN, c.t_end = min(u1 * kBlockN, len);
            c.direct = n_splits == 1;
            if (c.direct || (c.slot >= 0 && c.slot < p.split_cap)) return true;
            u0 = u1;
        }
        split0 += n_splits;
    }
    return false;
}

// Thread 0 publishes the next chunk (have_next: nxt, of request cur_req or the next) in
// kSmemNext for the last pair of the current one (NextChunk; none: n_tiles -1).
template <bool kCausal>
__device__ __forceinline__ void publish_next(const DecodeParams &p, unsigned char *smem, int m,
                                             int rows, bool have_next, const Chunk &nxt,
                                             int cur_req) {
    if (threadIdx.x == 0) {
        NextChunk *nx = reinterpret_cast<NextChunk *>(smem + kSmemNext);
        nx->n_tiles = -1, nx->req = 0, nx->t_begin = 0, nx->t_stop = 0, nx->new_req = 0;
        if (have_next) {
            const int t_stop = chunk_key_stop<kCausal>(p, m, rows, nxt.len, nxt.t_end);
            nx->n_tiles = t_stop > nxt.t_begin ? (t_stop - nxt.t_begin + kBlockN - 1) / kBlockN
                                               : 0;
            nx->req = nxt.req, nx->t_begin = nxt.t_begin, nx->t_stop = t_stop;
            nx->new_req = nxt.req != cur_req;
        }
    }
}

}  // namespace sm90

// Same grid, block (256 threads) and schedule walk as decode_kernel; dynamic shared memory
// sm90::kSmemBytes90.
template <int kKV, int kPageClass, bool kCausal>
__global__ void __launch_bounds__(kThreads, 1) decode_sm90_kernel(
    const __grid_constant__ DecodeParams p, const __grid_constant__ sm90::TmaDesc tk) {
    static_assert(kKV == 0 || kKV == 1, "the sm_90a decode takes 16-bit KV");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char *smem = align_smem_1024(smem_raw);
    pdl::wait();  // as decode_kernel: the previous kernel is done before anything is read
    pdl::launch_dependents();
    const int part = blockIdx.x, g = blockIdx.y, m = blockIdx.z;
    const int *rec = p.sched + (long long)part * kRecordInts;
    const int rows = p.s_q * p.heads_per_kv;
    const unsigned base = smem_addr(smem);
    if (threadIdx.x < 4)
        mbarrier_init(base + sm90::kSmemBar + threadIdx.x * 8,
                      kPageClass == 1 ? 1 : sm90::kWgThreads);  // TMA: one expect_tx arrival
    __syncthreads();
    unsigned phase[2] = {0, 0};  // parity of the next phase of the K0 / K1 mbarriers
    unsigned q8[4][4];           // Q columns 512-575 of q_req (load_q8)
    bool q_pending = false;      // Q of q_req issued, not waited for yet
    bool preloaded = false;      // the chunk's first tiles (and Q of a new request) are in flight
    int q_req = -1;
    sm90::Chunk cur;
    bool have = sm90::find_chunk(p, rec, max(rec[kBeginReq], 0), -1, cur);
    while (have) {
        sm90::Chunk nxt;
        const bool have_next = sm90::find_chunk(p, rec, cur.req, cur.u1, nxt);
        __syncthreads();  // the previous chunk is done with Q, sP1, K0 / K1 and kSmemNext
        if (cur.req != q_req) {
            const int after = have_next && nxt.req != cur.req ? nxt.req : -1;
            if (!preloaded)
                sm90::load_q_tile90(p, base + sm90::kSmemQ90, q8, cur.req, g, m, rows, after);
            else sm90::prefetch_q_l2(p, after, g, m, rows);
            q_pending = true, q_req = cur.req;
        }
        sm90::publish_next<kCausal>(p, smem, m, rows, have_next, nxt, cur.req);
        __syncthreads();  // kSmemNext visible
        preloaded = sm90::attend_chunk90<kKV, kPageClass, kCausal>(
            p, tk, smem, q8, q_pending, phase, cur.req, g, m, rows, cur.len, cur.t_begin,
            cur.t_end, cur.direct, cur.slot, preloaded);
        cur = nxt, have = have_next;
    }
    if (q_pending || preloaded) cp_async_wait<0>();  // no cp.async left in flight at exit
}


// Fake-quant K (kKq) and / or V (kVq) (sm90::FqMode; the kind fakequant_decode_dense): the kernel
// above at page class 1, not causal, on the codes (file comment); p.scale_log2 holds
// fl32(qk_scale * k_scale). Dynamic shared memory sm90::kSmemBytesFq.
template <int kKV, int kKq, int kVq>
__global__ void __launch_bounds__(kThreads, 1) decode_sm90_fq_kernel(
    const __grid_constant__ DecodeParams p, const __grid_constant__ sm90::TmaDesc tk,
    const __grid_constant__ sm90::FqScales fq) {
    static_assert(kKV == 0 || kKV == 1, "the sm_90a decode takes 16-bit KV");
    // kKq = kVq = none: the FlashMLA pair loop (attend_chunk90) itself, for the self-cut schedule
    constexpr bool kPlain = kKq == sm90::kFqNone && kVq == sm90::kFqNone;
    constexpr int kPageClass = 1;
    constexpr bool kCausal = false;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char *smem = align_smem_1024(smem_raw);
    pdl::wait();  // as decode_kernel: the previous kernel is done before anything is read
    pdl::launch_dependents();
    const int part = blockIdx.x, g = blockIdx.y, m = blockIdx.z;
    const int rows = p.s_q * p.heads_per_kv;
    const unsigned base = smem_addr(smem);
    if (threadIdx.x < 6)  // K0, K1 (TMA: one expect_tx arrival each), R0, R1
        mbarrier_init(base + (threadIdx.x < 4 ? sm90::kSmemBar + threadIdx.x * 8
                                              : sm90::kSmemR + (threadIdx.x - 4) * 8), 1);
    // the part's record: cut here (fq.chunk_units > 0: no metadata kernel) or read from p.sched
    // (the unquantized kind only: in the K / V kinds the schedule's code costs registers and spills)
    const int cu = kPlain ? fq.chunk_units : 0;
    int rec[kRecordInts], split0 = 0;
    if (cu > 0) {
        sm90::self_schedule(p, cu, smem + sm90::kSmemP0, rec, split0);
    } else {
#pragma unroll
        for (int f = 0; f < kRecordInts; f++) rec[f] = p.sched[(long long)part * kRecordInts + f];
    }
    auto find = [&](int req, int u0, int s0, sm90::Chunk &c) {
        return cu > 0 ? sm90::find_chunk_self(p, rec, req, u0, s0, cu, c)
                      : sm90::find_chunk(p, rec, req, u0, c);
    };
    __syncthreads();
    unsigned phase[2] = {0, 0};  // parity of the next phase of the K0 / K1 mbarriers
    unsigned q8[4][4];           // Q columns 512-575 of q_req (load_q8)
    bool q_pending = false;      // Q of q_req issued, not waited for yet
    bool preloaded = false;      // the chunk's first tiles (and Q of a new request) are in flight
    int q_req = -1;
    sm90::Chunk cur;
    bool have = find(max(rec[kBeginReq], 0), -1, split0, cur);
    while (have) {
        sm90::Chunk nxt;
        const bool have_next = find(cur.req, cur.u1, cur.split0, nxt);
        __syncthreads();  // the previous chunk is done with Q, sP1, K0 / K1 and kSmemNext
        if (cur.req != q_req) {
            const int after = have_next && nxt.req != cur.req ? nxt.req : -1;
            if (!preloaded)
                sm90::load_q_tile90(p, base + sm90::kSmemQ90, q8, cur.req, g, m, rows, after);
            else sm90::prefetch_q_l2(p, after, g, m, rows);
            q_pending = true, q_req = cur.req;
        }
        sm90::publish_next<kCausal>(p, smem, m, rows, have_next, nxt, cur.req);
        __syncthreads();  // kSmemNext visible
        if constexpr (kPlain)
            preloaded = sm90::attend_chunk90<kKV, kPageClass, kCausal>(
                p, tk, smem, q8, q_pending, phase, cur.req, g, m, rows, cur.len, cur.t_begin,
                cur.t_end, cur.direct, cur.slot, preloaded);
        else
            preloaded = sm90::attend_chunk90_fq<kKV, kKq, kVq>(
                p, tk, fq, smem, q8, q_pending, phase, cur.req, g, m, rows, cur.len, cur.t_begin,
                cur.t_end, cur.direct, cur.slot, preloaded);
        cur = nxt, have = have_next;
    }
    if (q_pending || preloaded) cp_async_wait<0>();  // no cp.async left in flight at exit
}

}  // namespace flashmla
}  // namespace mla
