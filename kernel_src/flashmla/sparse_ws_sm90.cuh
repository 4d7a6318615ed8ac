// The warp-specialized sm_90a path of the FlashMLA-compatible sparse kernels: one query token's
// 64 heads against its own list of KV rows, with a producer warpgroup that gathers (and for fp8
// rows converts) each 64-key tile into a ring of two bf16 K tiles, so that the two consumer
// warpgroups only run the products and the softmax. Families as in sparse_sm90.cuh (Params,
// kFp8, count, list, q_row, kv_row, any, store); same math as the portable kernels
// (sparse_attn.cuh) and the ping-pong kernel (sparse_sm90.cuh); results agree up to fp32
// summation order.
//
// CTA: 384 threads. Warpgroup 0 (warps 0-3) computes every tile's S = Q K^T (36
// wgmma.m64n64k16, Q and K from shared memory), the online softmax, P to shared memory (sS) with
// the factor each row's O takes (sScale), and O[:, :256] += P V_L (P from registers); warpgroup
// 1 (warps 4-7) only scales O[:, 256:] by sScale and adds sS V_R; warpgroup 2 (warps 8-11) is
// the producer. Registers (setmaxnreg): 208 / 168 / 128, the pair 208 / 160 / 136 (launch: 168
// each; ptxas: no spills).
//
// Tile t lives in buffer b = t % 2 (K0, K1). Per tile:
//   producer: waits free[b] (t >= 2), writes the bf16 tile and its validity byte-mask, fences,
//             arrives on full[b] (128 arrivals plus 128 cp.async noinc ones: the RoPE, or
//             the bf16 rows; the pair: 128 arrivals).
//   WG0:      waits full[b] (before issuing QK(t), at the end of tile t - 1), S -> softmax; waits
//             S_FREE (WG1 done with sS of tile t - 1), writes sS and sScale, arrives S_READY;
//             issues P V_L, retires it, arrives free[b], then waits full[b ^ 1] and issues
//             QK(t + 1) (releasing b first keeps two tiles in flight: with QK(t + 1) queued
//             behind P V_L before the release, the producer could start tile t + 2 only once
//             tile t + 1 was complete; measured 7-9 % slower, docs/perf-notes.md).
//   WG1:      waits S_READY, scales O_R, sS V_R, arrives free[b] and S_FREE.
// So the producer fills tile t + 2 while the consumers work on tile t + 1.
// fp8 rows: the producer holds the raw bytes of the next tile in registers (each round's loads
// issued right after that round of the current tile is stored): lane (row 16 w + 8 rd + lane / 4,
// part j = lane % 4) of producer warp w reads e4m3 chunks j + 4 i (i = 0..7; the 4 lanes of a row
// read 64 contiguous bytes per instruction) and the row's 4 scales; each 16 e4m3 values become
// two 16-byte bf16 chunks (dequant16: the scale in fp32, then rounded) of piece i, stored to the
// swizzled tile (a store phase holds two rows of opposite swizzle parity: conflict free); the
// RoPE goes by cp.async. bf16 rows: cp.async of whole 128-byte lines. Validity: bit r of the
// buffer's 64-bit mask = row r valid (an invalid entry is never read, its row zero); WG0 masks
// its S with it. Optional (F::prefetch): an L2 prefetch of the rows of the tile after next.
// The CTA pair (kPair, fp8, h_q > 64; a cluster of 2 along x, CTA rank m = the head block): the
// producer of CTA c converts round c of every tile (half the rows) into its own buffer and sends
// it into the peer's, completing bytes on the peer's peer-full[b] (36864 bytes a tile, which the
// peer's producer posts with expect_tx after its own free wait), by 9 bulk copies of 1024 bytes
// per warp (st.async of each 16-byte chunk measured 17 % slower: each holds its registers until
// the remote store has read them); the RoPE of those rows too (read into registers with the rest
// of the row: no global load between free and full); the mask of all 64 rows it writes locally.
// With one round per thread it keeps two tiles in registers (tile t + 2's loads issued when tile
// t is stored). free[b] then counts the 8 consumer warps of both CTAs (lane 0 of each arrives on
// both); the consumers wait full[b] and peer-full[b];
// cluster barriers after the mbarrier init and before exit. kPair 1: the waits on free and the
// arrivals on the peer's at cluster scope (validated on the GPU; ptxas adds an L1 invalidation
// after each wait and a GPU-scope fence before each arrival); kPair 2: CTA scope (pair_wait).
//
// Shared memory (from a 1024-aligned base): Q 0 (73728, all 9 pieces), K0 73728, K1 147456 (the
// 64 x 576 tile layout of decode_sm90.cu), sS 221184 (8192), sScale 229376 (64 floats), sL
// 229632 (l, m: 2 x 64 floats), masks 230144 (2 x 8 bytes), mbarriers 230160 (full 0, 1, free
// 0, 1, peer-full 0, 1): 230208 bytes, within the ping-pong kernel's 231488 (+ 1024 alignment).
#pragma once

#include "flashmla/sparse_sm90.cuh"

namespace mla {
namespace flashmla {
namespace sparse {
namespace ws {

constexpr int kThreadsWs = 384;
constexpr int kFp8ScaleOff = 512, kFp8RopeOff = 528, kKvRowBytes = 656;  // fp8 rows
constexpr int kPieceBytes = sm90::kPieceBytes;
constexpr int kSmemQ = 0;
constexpr int kSmemK0 = sm90::kTileBytes90;
constexpr int kSmemK1 = 2 * sm90::kTileBytes90;
constexpr int kSmemS = 3 * sm90::kTileBytes90;
constexpr int kSmemScale = kSmemS + kPieceBytes;
constexpr int kSmemL = kSmemScale + kBlockM * 4;
constexpr int kSmemMaskW = kSmemL + 2 * kBlockM * 4;
constexpr int kSmemBarW = kSmemMaskW + 2 * 8;
constexpr int kSmemUsedW = kSmemBarW + 6 * 8;  // full 0, 1, free 0, 1, peer-full 0, 1
static_assert(kSmemUsedW == 230208 && kSmemUsedW + 1024 <= sm90s::kSmemBytesS,
              "fits the sparse sm90 kinds' dynamic shared memory");
static_assert(kSmemS % 1024 == 0, "sS swizzle atoms 1024-aligned");

// Named barriers (0 is __syncthreads): S_READY / S_FREE between warpgroups 0 and 1 (256
// threads), L_READY (the row sums, at the end), Q (warpgroup 0's Q load).
enum : int { kBarSReady = 1, kBarSFree = 2, kBarLReady = 3, kBarQ = 4 };
// The pair's producer holds two tiles of raw rows and their RoPE: 8 more registers for it, 8
// fewer for warpgroup 1 (no spills either way, ptxas).
constexpr int kRegs0 = 208, kRegs1 = 168, kRegsP = 128;  // kRegs1: as launched
constexpr int kRegs1Pair = 160, kRegsPPair = 136;
static_assert(kRegs0 + kRegs1 + kRegsP <= 3 * 168 && kRegs0 + kRegs1Pair + kRegsPPair <= 3 * 168,
              "the registers the CTA was launched with");

// setmaxnreg_inc / setmaxnreg_dec: common/wgmma.cuh.

// mbarrier.arrive.shared::cta.b64 (release): one arrival.
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// The CTA pair (kPair: the two head blocks of an h_q 128 token in a cluster of 2): the peer's
// shared::cluster address of a local shared address; an arrival on the peer's mbarrier
// (release at cluster scope); a wait at cluster scope; the cluster barrier; the fence that
// publishes mbarrier.init to the cluster.
__device__ __forceinline__ unsigned peer_addr(unsigned addr, unsigned rank) {
    unsigned r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}
__device__ __forceinline__ void mbar_arrive_peer(unsigned peer_bar) {
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(peer_bar)
                 : "memory");
}
__device__ __forceinline__ void mbar_wait_cluster(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAITC:\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAITC;\n"
        "}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}
// kPair 1: the waits on barriers that the peer completes (free, peer-full) acquire at cluster
// scope and the arrivals on the peer's free release at cluster scope (ptxas: each wait is
// followed by CCTL.IVALL, each arrival preceded by MEMBAR.ALL.GPU); kPair 2: CTA scope, as
// CUTLASS's cluster pipelines (the peer's bytes are tracked by the transaction count; the
// arrival on the peer's free only has to follow the warp's completed wgmma reads).
__device__ __forceinline__ void mbar_arrive_peer_cta(unsigned peer_bar) {
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(peer_bar) : "memory");
}
template <int kPair>
__device__ __forceinline__ void pair_wait(unsigned bar, unsigned parity) {
    if constexpr (kPair == 1) mbar_wait_cluster(bar, parity);
    else mbarrier_wait_parity(bar, parity);
}
template <int kPair>
__device__ __forceinline__ void pair_arrive_peer(unsigned peer_bar) {
    if constexpr (kPair == 1) mbar_arrive_peer(peer_bar);
    else mbar_arrive_peer_cta(peer_bar);
}
// cp.async.bulk.shared::cluster.shared::cta: bytes (a multiple of 16) from local shared memory
// src to the peer's dst (shared::cluster), completing them on the peer's mbarrier peer_bar.
__device__ __forceinline__ void bulk_copy_peer(unsigned peer_dst, unsigned src, unsigned bytes,
                                               unsigned peer_bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, "
        "[%3];\n" ::"r"(peer_dst),
        "r"(src), "r"(bytes), "r"(peer_bar)
        : "memory");
}
__device__ __forceinline__ void cluster_sync_all() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void fence_mbarrier_init_cluster() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// ld.global.nc.L1::no_allocate of 16 / 4 bytes (the cache rows: read-only during the kernel,
// shared with the token's other head-block CTA through L2, not L1).
// The 16-byte loads carry the .L2::256B hint (the 256-byte block around the address brought into
// L2 at the first miss, so the row's other loads hit there; measured about 1 % faster on the pair).
__device__ __forceinline__ uint4 ldg_16(const unsigned char *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}
__device__ __forceinline__ float ldg_f32(const unsigned char *p) {
    float v;
    asm volatile("ld.global.nc.L1::no_allocate.f32 %0, [%1];\n" : "=f"(v) : "l"(p));
    return v;
}

// The raw part of one fp8 row a producer lane holds: e4m3 chunks j + 4 i (i = 0..7, j = lane
// % 4: 16 values each) and the row's 4 scales (the RoPE goes by cp.async once the buffer is free).
struct RawPart {
    uint4 nope[8];
    float4 sc;
};

// Loads lane part j of the fp8 row src (null: zeros, nothing read). The 4 lanes of a row read 64
// contiguous bytes per instruction (8 rows a warp: 16 whole sectors).
__device__ __forceinline__ void fetch_part(const unsigned char *src, int j, RawPart &r) {
    if (src != nullptr) {
#pragma unroll
        for (int i = 0; i < 8; i++) r.nope[i] = ldg_16(src + 16 * j + 64 * i);
        const uint4 v = ldg_16(src + kFp8ScaleOff);
        r.sc = make_float4(__uint_as_float(v.x), __uint_as_float(v.y), __uint_as_float(v.z),
                           __uint_as_float(v.w));
    } else {
#pragma unroll
        for (int i = 0; i < 8; i++) r.nope[i] = make_uint4(0, 0, 0, 0);
        r.sc = make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

// Converts and stores part j of row r into the bf16 tile buf (generic pointer): e4m3 chunk
// j + 4 i (columns 64 i + 16 j, scale i / 2) -> bf16 chunks 2 j, 2 j + 1 of piece i; and issues
// the cp.async of the row's RoPE chunks j, j + 4 (src null: zero fill) to piece 8. The 8 lanes of
// a store phase hold rows 2 g, 2 g + 1 (swizzles of opposite parity): conflict free.
__device__ __forceinline__ void store_nope(unsigned char *buf, int r, int j, const RawPart &raw) {
    const int sw = r & 7;
    const float sc[4] = {raw.sc.x, raw.sc.y, raw.sc.z, raw.sc.w};
#pragma unroll
    for (int i = 0; i < 8; i++) {
        uint4 lo, hi;
        dequant16(raw.nope[i], sc[i >> 1], lo, hi);
        const int off = i * kPieceBytes + r * 128;
        const int o_lo = off + (((2 * j) ^ sw) << 4), o_hi = off + (((2 * j + 1) ^ sw) << 4);
        *reinterpret_cast<uint4 *>(buf + o_lo) = lo;
        *reinterpret_cast<uint4 *>(buf + o_hi) = hi;
    }
}
__device__ __forceinline__ void store_rope(unsigned char *buf, int r, int j,
                                           const unsigned char *src, const void *any) {
    unsigned char *row = buf + r * 128;
    const int sw = r & 7;
#pragma unroll
    for (int k = 0; k < 2; k++)
        cp_async_16(smem_addr(row + 8 * kPieceBytes + (((j + 4 * k) ^ sw) << 4)),
                    src ? src + kFp8RopeOff + 16 * (j + 4 * k) : any, src != nullptr);
}
__device__ __forceinline__ void store_part(unsigned char *buf, int r, int j, const RawPart &raw,
                                           const unsigned char *src, const void *any) {
    store_nope(buf, r, j, raw);
    store_rope(buf, r, j, src, any);
}

// The pair: lane part j of the fp8 row src's RoPE (chunks j, j + 4; null: zeros, nothing read),
// loaded with the rest of the row; stored to piece 8 of row r of buf (2-way bank conflict: the
// two rows of a store phase hold the same chunk set).
__device__ __forceinline__ void fetch_rope(const unsigned char *src, int j, uint4 (&rope)[2]) {
#pragma unroll
    for (int k = 0; k < 2; k++)
        rope[k] = src ? ldg_16(src + kFp8RopeOff + 16 * (j + 4 * k)) : make_uint4(0, 0, 0, 0);
}
__device__ __forceinline__ void store_rope_local(unsigned char *buf, int r, int j,
                                                 const uint4 (&rope)[2]) {
#pragma unroll
    for (int k = 0; k < 2; k++)
        *reinterpret_cast<uint4 *>(buf + 8 * kPieceBytes + r * 128 + (((j + 4 * k) ^ (r & 7)) << 4)) =
            rope[k];
}

// Writes the validity byte of rows 16 pw + 8 rd + [0, 8): lane 4 k holds row 16 pw + 8 rd + k.
__device__ __forceinline__ void write_valid8(unsigned char *mask, bool valid, int pw, int rd,
                                             int lane) {
    const unsigned bits = __ballot_sync(0xffffffffu, valid);
    if (lane == 0) {
        unsigned v = 0;
#pragma unroll
        for (int k = 0; k < 8; k++) v |= ((bits >> (4 * k)) & 1u) << k;
        mask[2 * pw + rd] = (unsigned char)v;
    }
}

// The producer warpgroup (wt: thread in it).
template <class F>
__device__ __forceinline__ void produce(const typename F::Params &p, unsigned char *smem,
                                        int token, int wt) {
    const int lane = wt & 31, pw = wt >> 5;
    const unsigned base = smem_addr(smem);
    const unsigned bars = base + kSmemBarW;  // full 0, full 1, free 0, free 1
    const int *list = F::list(p, token);
    const int n = F::count(p, token), n_tiles = (n + kBlockN - 1) / kBlockN;
    const bool l2_prefetch = F::prefetch(p);
    if constexpr (F::kFp8) {
        // Lane (row 16 pw + 8 rd + lane / 4, part j = lane % 4) of rounds rd = 0, 1. Indices two
        // tiles ahead (i1: the next tile's, i2: the one after), the next tile's rows in registers.
        const int j = lane & 3;
        const int rows[2] = {pw * 16 + (lane >> 2), pw * 16 + 8 + (lane >> 2)};
        const void *any = F::any(p);
        RawPart raw[2];
        const unsigned char *src[2];
        int i1[2], i2[2];
        if (n_tiles > 0) {
#pragma unroll
            for (int rd = 0; rd < 2; rd++) {
                src[rd] = F::kv_row(p, sm90s::fetch_entry(list, rows[rd], n));
                i1[rd] = sm90s::fetch_entry(list, kBlockN + rows[rd], n);
                i2[rd] = sm90s::fetch_entry(list, 2 * kBlockN + rows[rd], n);
                fetch_part(src[rd], j, raw[rd]);
            }
        }
        for (int t = 0; t < n_tiles; t++) {
            const int b = t & 1;
            if (t >= 2) mbarrier_wait_parity(bars + 16 + 8 * b, ((t >> 1) + 1) & 1);
            unsigned char *buf = smem + (b ? kSmemK1 : kSmemK0);
#pragma unroll
            for (int rd = 0; rd < 2; rd++) {
                store_part(buf, rows[rd], j, raw[rd], src[rd], any);
                write_valid8(smem + kSmemMaskW + 8 * b, src[rd] != nullptr, pw, rd, lane);
                if (t + 1 < n_tiles) {  // this round's rows of the next tile, in flight at once
                    src[rd] = F::kv_row(p, i1[rd]);
                    fetch_part(src[rd], j, raw[rd]);
                    const unsigned char *pf = F::kv_row(p, i2[rd]);
                    if (l2_prefetch && j == 0 && pf != nullptr) prefetch_l2_bulk(pf, kKvRowBytes);
                    i1[rd] = i2[rd];
                    i2[rd] = sm90s::fetch_entry(list, (t + 3) * kBlockN + rows[rd], n);
                }
            }
            cp_async_mbarrier_arrive_noinc(bars + 8 * b);  // the RoPE
            fence_proxy_async_shared();
            mbar_arrive(bars + 8 * b);
        }
        cp_async_wait<0>();  // no cp.async left in flight at exit
    } else {
        // bf16 rows: warp pw copies rows [16 pw, +16), per instruction 4 rows x 8 chunks; lane
        // (rl = lane / 8, ch = lane % 8) rows 16 pw + rl + 4 i. Indices a tile ahead; lanes 0-15
        // also hold row 16 pw + lane's index of this tile (vidx, the mask) and of the tile after
        // next (pidx, the L2 prefetch).
        const int rl = lane >> 3, ch = lane & 7;
        const unsigned char *any = static_cast<const unsigned char *>(F::any(p));
        int idx[4];
#pragma unroll
        for (int i = 0; i < 4; i++) idx[i] = sm90s::fetch_entry(list, pw * 16 + rl + 4 * i, n);
        int vidx = sm90s::fetch_entry(list, pw * 16 + (lane & 15), n);
        int pidx = sm90s::fetch_entry(list, 2 * kBlockN + pw * 16 + (lane & 15), n);
        if (l2_prefetch && lane < 16 && n_tiles > 1) {
            const unsigned char *pf =
                F::kv_row(p, sm90s::fetch_entry(list, kBlockN + pw * 16 + lane, n));
            if (pf != nullptr) prefetch_l2_bulk(pf, F::kRowBytes);
        }
        for (int t = 0; t < n_tiles; t++) {
            const int b = t & 1;
            if (t >= 2) mbarrier_wait_parity(bars + 16 + 8 * b, ((t >> 1) + 1) & 1);
            const unsigned buf = base + (b ? kSmemK1 : kSmemK0);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int r = pw * 16 + rl + 4 * i;
                const unsigned char *src = F::kv_row(p, idx[i]);
#pragma unroll
                for (int pc = 0; pc < sm90::kPieces; pc++)
                    cp_async_16(sm90s::slot_addr(buf, pc, r, ch ^ (r & 7)),
                                src ? src + (pc * 8 + ch) * 16 : any, src != nullptr);
            }
            cp_async_mbarrier_arrive_noinc(bars + 8 * b);
            // lanes 0-15: rows 16 pw + lane
            const unsigned bits = __ballot_sync(0xffffffffu, F::kv_row(p, vidx) != nullptr);
            if (lane == 0)
                *reinterpret_cast<unsigned short *>(smem + kSmemMaskW + 8 * b + 2 * pw) =
                    (unsigned short)(bits & 0xffffu);
            mbar_arrive(bars + 8 * b);
            if (t + 1 < n_tiles) {
#pragma unroll
                for (int i = 0; i < 4; i++)
                    idx[i] = sm90s::fetch_entry(list, (t + 1) * kBlockN + pw * 16 + rl + 4 * i, n);
                vidx = sm90s::fetch_entry(list, (t + 1) * kBlockN + pw * 16 + (lane & 15), n);
                const unsigned char *pf = F::kv_row(p, pidx);
                if (l2_prefetch && lane < 16 && pf != nullptr) prefetch_l2_bulk(pf, F::kRowBytes);
                pidx = sm90s::fetch_entry(list, (t + 3) * kBlockN + pw * 16 + (lane & 15), n);
            }
        }
        cp_async_wait<0>();  // no cp.async left in flight at exit
    }
}

// The producer of CTA c of a pair (fp8 rows): it converts round c (rows 16 pw + 8 c + lane / 4)
// of every tile, RoPE included, into its own buffer and, by bulk copies, the peer's (which
// converts the other round), so each row is gathered and converted once for both head blocks;
// the validity mask of all 64 rows it writes locally. With half the rows per thread it keeps two
// tiles in registers (raw[t % 2], rope[t % 2]): tile t + 2's loads are issued as soon as tile t
// is stored.
// Buffer b is free for tile t once both CTAs' consumers released tile t - 2 (free[b] counts the
// 8 consumer warps of each CTA); the peer's bytes complete this CTA's peer-full[b], whose
// expected bytes this producer posts after that wait.
// Loads tile t2 (if t2 < n_tiles) into raw / rope: this round's row parts, the addresses of both
// rounds' rows (src, for the validity mask) from the indices fetched before (inext), which then
// become those of tile t2 + 1.
template <class F>
__device__ __forceinline__ void pair_load(const typename F::Params &p, int t2, int n_tiles, int n,
                                          const int *list, const int (&rows)[2], int c, int j,
                                          RawPart &raw, uint4 (&rope)[2],
                                          const unsigned char *(&src)[2], int (&inext)[2]) {
    if (t2 < n_tiles) {
#pragma unroll
        for (int rd = 0; rd < 2; rd++) {
            src[rd] = F::kv_row(p, inext[rd]);
            inext[rd] = sm90s::fetch_entry(list, (t2 + 1) * kBlockN + rows[rd], n);
        }
        fetch_part(c ? src[1] : src[0], j, raw);
        fetch_rope(c ? src[1] : src[0], j, rope);
    }
}

// One tile t of the pair's producer, then the loads of tile t + 2 into raw / rope.
template <class F, int kPair>
__device__ __forceinline__ void produce_step(const typename F::Params &p, unsigned char *smem,
                                             unsigned peer_base, int t, int n_tiles, int n,
                                             const int *list, const int (&rows)[2], int c,
                                             int j, int wt, RawPart &raw, uint4 (&rope)[2],
                                             const unsigned char *(&src)[2], int (&inext)[2]) {
    const int lane = wt & 31, pw = wt >> 5, b = t & 1;
    const unsigned base = smem_addr(smem), bars = base + kSmemBarW;
    // t < 2: parity 1, the phase before a fresh barrier's first, counts as complete (no wait);
    // unconditional, so that no branch joins the loop's paths here (ptxas drained every load's
    // scoreboard at such a join).
    pair_wait<kPair>(bars + 16 + 8 * b, ((t >> 1) + 1) & 1);
    if (wt == 0)  // the peer's 32 rows of all 9 pieces
        mbarrier_arrive_expect_tx(bars + 32 + 8 * b, 32 * sm90::kPieces * kPieceBytes / kBlockM);
    const int buf_off = b ? kSmemK1 : kSmemK0;
    const unsigned peer_bar = peer_base + kSmemBarW + 32 + 8 * b;
    store_nope(smem + buf_off, rows[0] + 8 * c, j, raw);
    store_rope_local(smem + buf_off, rows[0] + 8 * c, j, rope);
#pragma unroll
    for (int rd = 0; rd < 2; rd++)
        write_valid8(smem + kSmemMaskW + 8 * b, src[rd] != nullptr, pw, rd, lane);
    fence_proxy_async_shared();
    // This warp's rows 16 pw + 8 c + [0, 8) of pieces 0-8 to the peer: 1024 contiguous bytes a
    // piece, one bulk copy a lane (lanes 0-8), after every lane's fence.
    __syncwarp();
    if (lane < sm90::kPieces) {
        const int off = buf_off + lane * kPieceBytes + (16 * pw + 8 * c) * 128;
        bulk_copy_peer(peer_base + off, base + off, 8 * 128, peer_bar);
    }
    mbar_arrive(bars + 8 * b);
    pair_load<F>(p, t + 2, n_tiles, n, list, rows, c, j, raw, rope, src, inext);
}

template <class F, int kPair>
__device__ __forceinline__ void produce_pair(const typename F::Params &p, unsigned char *smem,
                                             int token, int c, int wt) {
    static_assert(F::kFp8, "the pair shares converted fp8 tiles");
    const int lane = wt & 31, pw = wt >> 5, j = lane & 3;
    const int *list = F::list(p, token);
    const int n = F::count(p, token), n_tiles = (n + kBlockN - 1) / kBlockN;
    const unsigned peer_base = peer_addr(smem_addr(smem), (unsigned)(c ^ 1));
    const int rows[2] = {pw * 16 + (lane >> 2), pw * 16 + 8 + (lane >> 2)};
    RawPart raw[2];
    uint4 rope[2][2];
    const unsigned char *src[2][2];
    int inext[2];
#pragma unroll
    for (int tp = 0; tp < 2; tp++) {
#pragma unroll
        for (int rd = 0; rd < 2; rd++)
            src[tp][rd] = F::kv_row(p, sm90s::fetch_entry(list, tp * kBlockN + rows[rd], n));
        // (past the last tile the rows are null: zeros, nothing read)
        fetch_part(c ? src[tp][1] : src[tp][0], j, raw[tp]);
        fetch_rope(c ? src[tp][1] : src[tp][0], j, rope[tp]);
    }
#pragma unroll
    for (int rd = 0; rd < 2; rd++)
        inext[rd] = sm90s::fetch_entry(list, 2 * kBlockN + rows[rd], n);
    for (int t = 0; t < n_tiles; t += 2) {
        produce_step<F, kPair>(p, smem, peer_base, t, n_tiles, n, list, rows, c, j, wt, raw[0],
                               rope[0], src[0], inext);
        if (t + 1 >= n_tiles) break;
        produce_step<F, kPair>(p, smem, peer_base, t + 1, n_tiles, n, list, rows, c, j, wt,
                               raw[1], rope[1], src[1], inext);
    }
    cp_async_wait<0>();  // no cp.async left in flight
}

// Scales S to base-2 logits and masks the invalid keys (bit c of mask: key c valid); key c of
// the thread's S is 8 j + 2 (lane % 4) + e % 2.
__device__ __forceinline__ void scale_mask_bits(float (&s)[8][4], unsigned long long mask,
                                                float scale, int lane) {
    if (mask == ~0ull) {
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[j][e] *= scale;
        return;
    }
    const unsigned long long m = mask >> (2 * (lane & 3));
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const bool valid = (m >> (8 * j + (e & 1))) & 1ull;
            s[j][e] = valid ? s[j][e] * scale : -inf_f32();
        }
}

// A consumer warpgroup is done with buffer b: one arrival per thread on free[b]; in a pair one
// per warp on free[b] of both CTAs.
template <int kPair>
__device__ __forceinline__ void release(unsigned bars, int b, unsigned peer_bars, int lane) {
    if constexpr (kPair) {
        __syncwarp();
        if (lane == 0) {
            mbar_arrive(bars + 16 + 8 * b);
            pair_arrive_peer<kPair>(peer_bars + 16 + 8 * b);
        }
    } else {
        mbar_arrive(bars + 16 + 8 * b);
    }
}

// Waits for tile t in buffer b (and, in a pair, the peer's half of it).
template <int kPair>
__device__ __forceinline__ void wait_full(unsigned bars, int b, int t) {
    if constexpr (kPair) {
        pair_wait<kPair>(bars + 8 * b, (t >> 1) & 1);
        pair_wait<kPair>(bars + 32 + 8 * b, (t >> 1) & 1);
    } else {
        mbarrier_wait_parity(bars + 8 * b, (t >> 1) & 1);
    }
}

// The consumers' addresses (layout above): the base, K0, K1, the mbarriers, sScale and sL;
// bound by name: const auto [base, k0, k1, bars, sscale, sl] = smem_ws(smem);
struct SmemWs {
    unsigned base, k0, k1, bars;
    float *sscale, *sl;
};
__device__ __forceinline__ SmemWs smem_ws(unsigned char *smem) {
    const unsigned base = smem_addr(smem);
    return {base, base + kSmemK0, base + kSmemK1, base + kSmemBarW,
            reinterpret_cast<float *>(smem + kSmemScale), reinterpret_cast<float *>(smem + kSmemL)};
}

// Warpgroup 0 (wt: thread in it; wm its warp): S, softmax, P V_L.
template <class F, int kPair>
__device__ __forceinline__ void consume0(const typename F::Params &p, unsigned char *smem,
                                         int token, int m, int wt, unsigned peer_bars) {
    using namespace sm90;
    const int lane = wt & 31, wm = wt >> 5;
    const auto [base, k0, k1, bars, sscale, sl] = smem_ws(smem);
    const unsigned q = base + kSmemQ;
    const unsigned long long *masks =
        reinterpret_cast<const unsigned long long *>(smem + kSmemMaskW);
    {  // Q rows: 2 threads a row
        const int r = wt >> 1;
        const unsigned char *src = F::q_row(p, token, m * kBlockM + r);
        const bool valid = src != nullptr;
        if (!valid) src = static_cast<const unsigned char *>(F::any(p));
        for (int c = wt & 1; c < kRowChunks; c += 2)
            cp_async_16(q + tile_off(r, c), src + c * 16, valid);
        cp_async_commit();
    }
    const int n = F::count(p, token), n_tiles = (n + kBlockN - 1) / kBlockN;
    const int r0 = wm * 16 + (lane >> 2);
    RowState st;
    float o[32][4];
    row_state_init(st, o);
    float s[8][4];
    unsigned pa[4][4];
    cp_async_wait<0>();
    fence_proxy_async_shared();
    named_barrier_sync(kBarQ, kWgThreads);
    if (n_tiles > 0) {
        wait_full<kPair>(bars, 0, 0);
        wgmma_fence();
        sm90s::qk_pieces<0, kPieces>(s, q, k0);
        wgmma_commit_group();
    }
    for (int t = 0; t < n_tiles; t++) {
        const int b = t & 1;
        wgmma_wait_group<0>();
        reg_fence(s);
        scale_mask_bits(s, masks[b], p.scale_log2, lane);
        float mx[2], mu[2], f[2];
        row_max64(s, mx);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const float m_new = fmaxf(st.m[h], mx[h]);
            mu[h] = m_new == -inf_f32() ? 0.f : m_new;
            f[h] = ex2(st.m[h] - mu[h]);
            st.m[h] = m_new;
            st.l[h] *= f[h];
        }
        exp_rows(s, mu, st.l);
        if (t > 0) named_barrier_sync(kBarSFree, 2 * kWgThreads);  // WG1 done with sS, sScale
        if ((lane & 3) == 0) sscale[r0] = f[0], sscale[r0 + 8] = f[1];
        store_p<false>(smem + kSmemS, s, wm, lane);
        fence_proxy_async_shared();
        named_barrier_arrive(kBarSReady, 2 * kWgThreads);
        p_fragments<false>(s, pa);
        scale_o(o, f);
        wgmma_fence();
        pv_issue_rs<false>(o, pa, b ? k1 : k0, 0);
        wgmma_commit_group();
        // Buffer b released before tile t + 1 is awaited: the producer fills tile t + 2 while
        // the consumers work on t + 1 (the ring's two tiles in flight), at the cost of QK(t + 1)
        // issued only once P V_L(t) has retired.
        wgmma_wait_group<0>();
        reg_fence(o);
        release<kPair>(bars, b, peer_bars, lane);  // V_L of buffer b consumed
        if (t + 1 < n_tiles) {
            wait_full<kPair>(bars, b ^ 1, t + 1);
            wgmma_fence();
            sm90s::qk_pieces<0, kPieces>(s, q, b ? k0 : k1);
            wgmma_commit_group();
        }
    }
    wgmma_wait_group<0>();  // (nothing in flight: tells ptxas so for the paths it cannot follow)
    reg_fence(s);
    // The row sums (this warpgroup holds all of P) and maxima for warpgroup 1.
#pragma unroll
    for (int h = 0; h < 2; h++) st.l[h] = quad_sum(st.l[h]);
    if ((lane & 3) == 0) {
        sl[r0] = st.l[0], sl[r0 + 8] = st.l[1];
        sl[kBlockM + r0] = st.m[0], sl[kBlockM + r0 + 8] = st.m[1];
    }
    named_barrier_arrive(kBarLReady, 2 * kWgThreads);
    F::store(p, o, st, token, m);
}

// Warpgroup 1: O_R scaled by sScale, += sS V_R.
template <class F, int kPair>
__device__ __forceinline__ void consume1(const typename F::Params &p, unsigned char *smem,
                                         int token, int m, int wt, unsigned peer_bars) {
    using namespace sm90;
    const int lane = wt & 31, wm = wt >> 5;
    const auto [base, k0, k1, bars, sscale, sl] = smem_ws(smem);
    const int n = F::count(p, token), n_tiles = (n + kBlockN - 1) / kBlockN;
    const int r0 = wm * 16 + (lane >> 2);
    RowState st;
    float o[32][4];
    row_state_init(st, o);
    for (int t = 0; t < n_tiles; t++) {
        const int b = t & 1;
        named_barrier_sync(kBarSReady, 2 * kWgThreads);
        // Already complete (WG0 waited for it): orders the producer's tile for this warpgroup.
        wait_full<kPair>(bars, b, t);
        const float f[2] = {sscale[r0], sscale[r0 + 8]};
        scale_o(o, f);
        wgmma_fence();
        pv_issue_ss<false>(o, base + kSmemS, b ? k1 : k0, 1);
        wgmma_commit_group();
        wgmma_wait_group<0>();
        reg_fence(o);
        release<kPair>(bars, b, peer_bars, lane);  // V_R of buffer b consumed
        if (t + 1 < n_tiles) named_barrier_arrive(kBarSFree, 2 * kWgThreads);
    }
    named_barrier_sync(kBarLReady, 2 * kWgThreads);
#pragma unroll
    for (int h = 0; h < 2; h++) st.l[h] = sl[r0 + 8 * h], st.m[h] = sl[kBlockM + r0 + 8 * h];
    F::store(p, o, st, token, m);
}

// The body of the warp-specialized kernels: the CTA of a flat grid (token major, ceil(h_q / 64)
// CTAs a token) on the dynamic shared memory, aligned to 1024 bytes. kPair (fp8, h_q > 64, a
// cluster of 2 along x: CTA rank m of token x / 2): the two head blocks share the converted
// tiles; 1 with cluster-scope waits and arrivals, 2 with CTA-scope ones (pair_wait).
template <class F, int kPair = 0>
__device__ __forceinline__ void attend_cta_ws(const typename F::Params &p) {
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char *smem = align_smem_1024(smem_raw);
    const int nm = (p.h_q + kBlockM - 1) / kBlockM;
    const int token = blockIdx.x / nm, m = blockIdx.x % nm;
    const unsigned bars = smem_addr(smem) + kSmemBarW;
    if (threadIdx.x == 0) {
        // full: the producer's 128 threads and their 128 cp.async arrivals; free: the 256
        // consumer threads (pair: the 8 consumer warps of each CTA); peer-full: this CTA's
        // producer posting the peer's bytes.
        constexpr int kFull = kPair ? 128 : 256;  // the pair: no cp.async, no noinc arrivals
        mbarrier_init(bars, kFull);
        mbarrier_init(bars + 8, kFull);
        mbarrier_init(bars + 16, kPair ? 16 : 256);
        mbarrier_init(bars + 24, kPair ? 16 : 256);
        mbarrier_init(bars + 32, 1);
        mbarrier_init(bars + 40, 1);
        if (kPair) fence_mbarrier_init_cluster();
    }
    if constexpr (kPair) cluster_sync_all();  // the peer's barriers exist before any remote use
    else __syncthreads();
    const unsigned peer_bars = kPair ? peer_addr(bars, (unsigned)(m ^ 1)) : 0u;
    const int wg = threadIdx.x >> 7, wt = threadIdx.x & 127;
    if (wg == 2) {
        setmaxnreg_dec<kPair ? kRegsPPair : kRegsP>();
        if constexpr (kPair) produce_pair<F, kPair>(p, smem, token, m, wt);
        else produce<F>(p, smem, token, wt);
    } else if (wg == 0) {
        setmaxnreg_inc<kRegs0>();
        consume0<F, kPair>(p, smem, token, m, wt, peer_bars);
    } else {
        if constexpr (kPair) setmaxnreg_dec<kRegs1Pair>();
        consume1<F, kPair>(p, smem, token, m, wt, peer_bars);
    }
    // No CTA of a pair leaves while its peer may still write into its shared memory or arrive on
    // its barriers.
    if constexpr (kPair) cluster_sync_all();
}

}  // namespace ws
}  // namespace sparse
}  // namespace flashmla
}  // namespace mla
