// The sm_90a path of the FlashMLA-compatible sparse kernels: one query token's 64 heads against
// its own list of KV rows, on the dense wgmma decode's pipeline (decode_sm90.cu, whose products,
// softmax pieces, shared-memory layout and barrier names this file reuses). The sparse decode
// (sparse_decode_sm90.cu: gathered 656-byte fp8 rows) and the sparse prefill
// (sparse_prefill_sm90.cu: gathered bf16 rows of 576) instantiate it through a family class:
//   using Params;  static constexpr bool kFp8;          (656-byte fp8 rows, else bf16 rows of 576)
//   count(p, token), list(p, token)                       entries looked at, the index list
//   q_row(p, token, head)                                 Q row address, null past h_q
//   kv_row(p, idx)                                        KV row address, null when idx is invalid
//   any(p)                                                a readable address (zero-fill source)
//   store(p, o, st, token, m)                             the outputs of the CTA's rows
//   prefetch(p), kRowBytes                                rows prefetched to L2, their size
// Same math as the portable kernels (sparse_attn.cuh); results agree up to fp32 summation order.
//
// CTA: 256 threads, warpgroups 0 and 1 over the 64 query rows (heads [64 m, 64 m + 64) of the
// token; rows >= h_q are zero Q rows, never stored). The token's entries go 64 per tile, tiles in
// pairs: tile a = 2 j into buffer K0, tile b = 2 j + 1 into K1, exactly the dense decode's
// schedule (decode_sm90.cu, header): warpgroup 0 computes S0 = Q K0^T and owns O[:, :256],
// warpgroup 1 computes S1 = Q K1^T and owns O[:, 256:], maxima through sM0 / sM1, P tiles through
// sP0 / sP1, named barriers M0, M1, P0, P1, P0_FREE. A buffer's share is refilled by its loader as
// soon as its last reader is done (warpgroup 0: pieces 0-3 after its product with V_L; warpgroup 1:
// pieces 4-8 after its product with V_R), completing the share's mbarrier (128 cp.async arrivals).
//
// Gather: each thread reads the index of row wt / 2 (wt = thread in its warpgroup) of both tiles of
// the next pair a pair ahead of their loads; its warp's lanes get the row addresses by shuffle.
// An invalid entry is zero-filled (never read) and its key masked: the loader warpgroup of a
// tile's consumer share (warpgroup 0 for K0, 1 for K1) writes the tile's validity bits (ballots,
// 4 words: word w, bits 2 k and 2 k + 1 = row 16 w + k) at the load; the consumer's warpgroup
// barrier before its QK orders them.
//   bf16 rows (prefill): cp.async straight into the swizzled tile; warpgroup 0 copies bytes
//     [0, 512) (pieces 0-3), warpgroup 1 bytes [512, 1152) (pieces 4-8), whole 128-byte lines.
//   fp8 rows (decode): warpgroup 0 copies bytes [0, 256) (e4m3 columns 0-255), warpgroup 1 bytes
//     [256, 656) (e4m3 256-511, the 4 scales, the RoPE). Row r's e4m3 bytes are staged in row r of
//     pieces 2, 3 (columns 0-127, 128-255) and 6, 7 (256-383, 384-511), chunk j at slot
//     j ^ fsw(r); its scales in row r of piece 5 at slot r & 7; its RoPE straight to piece 8.
//     The consumer warpgroup waits for both shares and dequantizes the tile in place (row r by
//     one warp: the lanes of a row read all of its staged bytes, __syncwarp, then write the bf16
//     row over them, so no other row's data is touched), fences, syncs the warpgroup, then QK.
//
// Shared memory: the dense decode's layout (decode_sm90.cu) plus the validity words of K0 and K1
// (2 x 16 bytes) after the mbarriers: 230464 bytes + 1024 for alignment.
#pragma once

#include "flashmla/decode_sm90.cu"

namespace mla {
namespace flashmla {
namespace sparse {
namespace sm90s {

constexpr int kPieceBytes = sm90::kPieceBytes;       // 8192: 64 rows x 128 bytes
constexpr int kSmemMask = sm90::kSmemBar + 2 * 2 * 8;  // after the 4 mbarriers: K0 words, K1 words
constexpr int kSmemUsedS = kSmemMask + 2 * 16;         // 230464
constexpr int kSmemBytesS = kSmemUsedS + 1024;         // 231488
static_assert(kSmemBytesS == 231488, "runtime/flashmla_sparse.h MLA__FLASHMLA_SPARSE_SM90_SMEM");
constexpr int kWgThreads = sm90::kWgThreads;
static_assert(kSmemBytesS <= 232448, "fits the sm_90 shared memory of one CTA");
static_assert(kSmemMask % 16 == 0, "validity words 16-byte aligned");

// Slot permutation of the staged e4m3 chunks of row r: rows 2 k and 2 k + 1 differ in bit 2, so
// the dequantization's 8-lane phases (4 chunks of each of two rows) read distinct banks.
__device__ __forceinline__ int fsw(int r) { return (r & 7) ^ ((r & 1) << 2); }

// Index of entry k of a token's list, -1 (invalid) for k >= n.
__device__ __forceinline__ int fetch_entry(const int *list, int k, int n) {
    return k < n ? list[k] : -1;
}

// The validity words of a tile: warp w of the loader warpgroup writes word w (ballot of its
// lanes' rows: lanes 2 k, 2 k + 1 hold row 16 w + k).
__device__ __forceinline__ void write_mask(unsigned *words, bool valid, int wt) {
    const unsigned b = __ballot_sync(0xffffffffu, valid);
    if ((wt & 31) == 0) words[wt >> 5] = b;
}

// The shared-memory address of 16-byte slot `slot` of row r in piece pc of buf.
__device__ __forceinline__ unsigned slot_addr(unsigned buf, int pc, int r, int slot) {
    return buf + pc * kPieceBytes + r * 128 + (slot << 4);
}

// cp.async of warpgroup share kShare (0 or 1) of one tile into buf by the 128 threads of the
// warpgroup, arriving on the share's mbarrier (bars + 8 kShare). src: the row of this thread
// (row wt / 2), null for an invalid entry (zero fill). Warp w copies its rows [16 w, 16 w + 16).
template <class F, int kShare>
__device__ __forceinline__ void load_share(const typename F::Params &p, unsigned buf,
                                           unsigned bars, const unsigned char *src, int wt) {
    const int lane = wt & 31, w16 = (wt >> 5) * 16;
    const unsigned char *any = static_cast<const unsigned char *>(F::any(p));
    auto row_of = [&](int rl) {  // the address of warp row rl (lane 2 rl holds it)
        return reinterpret_cast<const unsigned char *>(__shfl_sync(
            0xffffffffu, reinterpret_cast<unsigned long long>(src), 2 * rl));
    };
    if constexpr (F::kFp8) {
        // e4m3 bytes [256 kShare, +256): 2 rows x 16 chunks per instruction.
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int rl = 2 * i + (lane >> 4), c = lane & 15, r = w16 + rl;
            const unsigned char *rs = row_of(rl);
            const int pc = (kShare == 0 ? 2 : 6) + (c >> 3);
            cp_async_16(slot_addr(buf, pc, r, (c & 7) ^ fsw(r)),
                        rs ? rs + kShare * 256 + c * 16 : any, rs != nullptr);
        }
        if constexpr (kShare == 1) {
            // Bytes [512, 656): the scales (chunk 0) and the RoPE (chunks 1-8), 3 rows x 9 chunks.
            const int c = lane % 9, rsub = lane / 9;  // lanes 27-31 idle
#pragma unroll
            for (int i = 0; i < 6; i++) {
                const int rl = 3 * i + rsub, r = w16 + rl;
                const unsigned char *rs = row_of(rl < 16 ? rl : 0);
                if (lane < 27 && rl < 16) {
                    const unsigned dst = c == 0 ? slot_addr(buf, 5, r, r & 7)
                                                : buf + sm90::tile_off(r, 64 + c - 1);
                    cp_async_16(dst, rs ? rs + 512 + c * 16 : any, rs != nullptr);
                }
            }
        }
    } else {
        // bf16 pieces [0, 4) or [4, 9): 4 rows x 8 chunks (one 128-byte line each) per instruction.
        constexpr int kLo = kShare == 0 ? 0 : 4, kHi = kShare == 0 ? 4 : 9;
        const int ch = lane & 7;
        const unsigned char *rs[4];
        int r[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int rl = 4 * i + (lane >> 3);
            rs[i] = row_of(rl);
            r[i] = w16 + rl;
        }
#pragma unroll
        for (int pc = kLo; pc < kHi; pc++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                cp_async_16(slot_addr(buf, pc, r[i], ch ^ (r[i] & 7)),
                            rs[i] ? rs[i] + (pc * 8 + ch) * 16 : any, rs[i] != nullptr);
    }
    cp_async_mbarrier_arrive_noinc(bars + 8 * kShare);
}

// Column group g (e4m3 columns [128 g, +128): bf16 pieces 2 g, 2 g + 1) of the bf16 K tile from
// the staged fp8 rows of buf (generic pointer t), by the 4 warps of the consumer warpgroup: warp
// wm converts rows [16 wm, +16), 4 rows per pass; lane: row 2 (lane / 16) + (lane / 4) % 2 of the
// pass, chunk j = lane % 4 + 4 ((lane / 8) % 2) of the group's 8. Each bf16 value is e4m3 * scale
// in float32, rounded to bf16 (dequant16). Groups go in order 0..3: group 0 writes pieces 0, 1
// (no staged bytes there), group 1 pieces 2, 3 (group 0's raw bytes, read before, and its own),
// group 2 pieces 4, 5 (the scales: group 3's are kept in sc3), group 3 pieces 6, 7. A pass reads
// its 4 rows' staged bytes, then __syncwarp, then writes over them: no other warp's row is
// touched, so the groups need no barrier among themselves. !store: nothing is written (the
// buffer holds no new tile and may still be read by the other warpgroup's P V).
template <int g>
__device__ __forceinline__ void dequant_group(unsigned char *t, int wm, int lane, float (&sc3)[4],
                                              bool store) {
    const int j = (lane & 3) + 4 * ((lane >> 3) & 1);
    const int rq = 2 * (lane >> 4) + ((lane >> 2) & 1);
    constexpr int kRawPiece = g < 2 ? 2 + g : 4 + g;  // 2, 3, 6, 7
#pragma unroll
    for (int pass = 0; pass < 4; pass++) {
        const int r = 16 * wm + 4 * pass + rq;
        unsigned char *row = t + r * 128;
        const float *sc = reinterpret_cast<const float *>(row + 5 * kPieceBytes + ((r & 7) << 4));
        const uint4 raw = *reinterpret_cast<const uint4 *>(row + kRawPiece * kPieceBytes +
                                                           ((j ^ fsw(r)) << 4));
        float scale;
        if constexpr (g < 3) scale = sc[g];
        else scale = sc3[pass];
        if constexpr (g == 2) sc3[pass] = sc[3];
        if constexpr (g > 0) __syncwarp();  // the pass's staged bytes read before any is overwritten
        uint4 lo, hi;
        dequant16(raw, scale, lo, hi);
        unsigned char *dst = row + (2 * g + (j >> 2)) * kPieceBytes;
        const int c0 = (2 * j) & 7;
        if (store) {
            *reinterpret_cast<uint4 *>(dst + ((c0 ^ (r & 7)) << 4)) = lo;
            *reinterpret_cast<uint4 *>(dst + (((c0 + 1) ^ (r & 7)) << 4)) = hi;
        }
    }
}

// Scales S to base-2 logits and masks the invalid keys of the tile (validity words w); key c of
// the thread's S (c = 8 j + 2 (lane % 4) + e % 2) is row c of the tile.
__device__ __forceinline__ void scale_mask_words(float (&s)[8][4], const unsigned *words,
                                                 float scale, int lane) {
    const uint4 w = *reinterpret_cast<const uint4 *>(words);
    if ((w.x & w.y & w.z & w.w) == 0xffffffffu) {  // uniform: every key valid
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[j][e] *= scale;
        return;
    }
    const int sh = 4 * (lane & 3);
    const unsigned ws[4] = {w.x >> sh, w.y >> sh, w.z >> sh, w.w >> sh};
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const bool valid = (ws[j >> 1] >> (16 * (j & 1) + 2 * (e & 1))) & 1u;
            s[j][e] = valid ? s[j][e] * scale : -inf_f32();
        }
}

// Issues S (+)= Q K^T over pieces [kLo, kHi) of the tile in buf (4 wgmma.m64n64k16 a piece, Q
// from shared memory; with kFirst the first product overwrites S). Not committed.
template <int kLo, int kHi, bool kFirst = kLo == 0>
__device__ __forceinline__ void qk_pieces(float (&s)[8][4], unsigned q, unsigned buf) {
    unsigned long long qd = wgmma_desc_sw128(q, 16, 1024), kd = wgmma_desc_sw128(buf, 16, 1024);
    sm90::opaque(qd), sm90::opaque(kd);
#pragma unroll
    for (int pc = kLo; pc < kHi; pc++)
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const unsigned off = (pc * kPieceBytes + k * 32) >> 4;
            wgmma_m64n64k16_ss<false, 0>(s, qd + off, kd + off, !kFirst || pc > kLo || k > 0);
        }
}

// Issues S (+)= Q_rope K_rope^T (piece 8; Q's RoPE columns from registers, q8; with kFirst the
// first product overwrites S). Not committed.
template <bool kFirst = false>
__device__ __forceinline__ void qk_rope(float (&s)[8][4], const unsigned (&q8)[4][4],
                                        unsigned buf) {
    unsigned long long kd = wgmma_desc_sw128(buf, 16, 1024);
    sm90::opaque(kd);
#pragma unroll
    for (int k = 0; k < 4; k++)
        wgmma_m64n64k16_rs<false, 0>(
            s, q8[k], kd + (((sm90::kPieces - 1) * kPieceBytes + k * 32) >> 4), !kFirst || k > 0);
}

// Waits for the tile in buf (both shares, phase `parity`; !loaded: the last pair of an odd count
// has no tile b, and warpgroup 1 then computes a product on whatever K1 holds, which is not used,
// so that each warpgroup has one call site; K1 is then not written, as warpgroup 0 may still be
// reading its V_L), then returns with S = Q K^T complete.
// fp8 rows: the RoPE products first (that piece needs no conversion), then the column groups are
// dequantized one after the other, each made visible to the warpgroup (fence, warpgroup barrier)
// and its products issued before the next group is converted, so the conversion runs under the
// tensor cores. bf16 rows: the products of pieces 0-3 start once warpgroup 0's share has landed.
// A warpgroup barrier before the softmax reads them orders the tile's validity words.
template <class F>
__device__ __forceinline__ void prep_qk(float (&s)[8][4], const unsigned (&q8)[4][4], unsigned q,
                                        unsigned char *smem, int buf_off, unsigned bars,
                                        unsigned parity, int wg, int wm, int lane,
                                        bool loaded = true) {
    const unsigned buf = smem_addr(smem) + buf_off;
    const int bar = 6 + wg;
    // Without a load the wait is for the phase before, which has completed (or, on a barrier that
    // never completed one, counts as completed): no branch around the waits.
    const unsigned wait_parity = loaded ? parity : parity ^ 1;
    if constexpr (F::kFp8) {
        unsigned char *t = smem + buf_off;
        float sc3[4];
        mbarrier_wait_parity(bars, wait_parity);
        mbarrier_wait_parity(bars + 8, wait_parity);
        fence_proxy_async_shared();  // the RoPE piece (cp.async, seen through the mbarrier)
        wgmma_fence();
        qk_rope<true>(s, q8, buf);  // that piece needs no conversion
        wgmma_commit_group();
        dequant_group<0>(t, wm, lane, sc3, loaded);
        fence_proxy_async_shared();
        named_barrier_sync(bar, kWgThreads);
        wgmma_fence();
        qk_pieces<0, 2, false>(s, q, buf);
        wgmma_commit_group();
        dequant_group<1>(t, wm, lane, sc3, loaded);
        fence_proxy_async_shared();
        named_barrier_sync(bar, kWgThreads);
        wgmma_fence();
        qk_pieces<2, 4>(s, q, buf);
        wgmma_commit_group();
        dequant_group<2>(t, wm, lane, sc3, loaded);
        fence_proxy_async_shared();
        named_barrier_sync(bar, kWgThreads);
        wgmma_fence();
        qk_pieces<4, 6>(s, q, buf);
        wgmma_commit_group();
        dequant_group<3>(t, wm, lane, sc3, loaded);
        fence_proxy_async_shared();
        named_barrier_sync(bar, kWgThreads);
        wgmma_fence();
        qk_pieces<6, 8>(s, q, buf);
        wgmma_commit_group();
    } else {
        mbarrier_wait_parity(bars, wait_parity);
        fence_proxy_async_shared();  // cp.async data, seen through the mbarrier
        named_barrier_sync(bar, kWgThreads);
        wgmma_fence();
        qk_pieces<0, 4>(s, q, buf);
        wgmma_commit_group();
        mbarrier_wait_parity(bars + 8, wait_parity);
        fence_proxy_async_shared();
        wgmma_fence();
        qk_pieces<4, 8>(s, q, buf);
        qk_rope(s, q8, buf);
        wgmma_commit_group();
    }
    wgmma_wait_group<0>();
    sm90::reg_fence(s);
}

// The L2 prefetch of a gathered row (one thread per row: even wt), for the tile after next of the
// thread's warpgroup (F::prefetch): its cp.async a pair later then reads L2 instead of DRAM.
template <class F>
__device__ __forceinline__ void prefetch_row(const typename F::Params &p, int idx, int wt) {
    const unsigned char *row = F::kv_row(p, idx);
    if ((wt & 1) == 0 && row != nullptr) prefetch_l2_bulk(row, F::kRowBytes);
}

// Attention of the 64 rows (heads [64 m, +64)) of one token over its entries. smem: 1024-aligned.
template <class F>
__device__ __forceinline__ void attend_token(const typename F::Params &p, unsigned char *smem,
                                             int token, int m) {
    using namespace sm90;
    const auto [lane, warp, wm, wg, wt] = thread90();
    const auto [base, q, k0, k1, bar0, bar1, sm0, sm1, red] = smem90(smem);
    unsigned *mask0 = reinterpret_cast<unsigned *>(smem + kSmemMask), *mask1 = mask0 + 4;

    // Q rows (cp.async, one group), then the mbarriers (before any cp.async arrives on them).
    {
        const int r = threadIdx.x >> 2;
        const unsigned char *src = F::q_row(p, token, m * kBlockM + r);
        const bool valid = src != nullptr;
        if (!valid) src = static_cast<const unsigned char *>(F::any(p));
        for (int c = threadIdx.x & 3; c < kRowChunks; c += 4)
            cp_async_16(q + tile_off(r, c), src + c * 16, valid);
        cp_async_commit();
    }
    if (threadIdx.x < 4) mbarrier_init(bar0 + threadIdx.x * 8, kWgThreads);
    __syncthreads();

    const int *list = F::list(p, token);
    const int n = F::count(p, token), n_tiles = (n + kBlockN - 1) / kBlockN;
    const int r0 = wm * 16 + (lane >> 2);
    RowState st;
    float o[32][4];
    row_state_init(st, o);
    float s[8][4];
    unsigned pa[4][4], q8[4][4];
    unsigned phase[2] = {0, 0};

    // Prologue: tiles 0 and 1, both shares, issued before the wait for Q; the index of the row
    // this thread prefetches for pair 1 (warpgroup 0 tile 2, warpgroup 1 tile 3) read with theirs.
    const bool l2_prefetch = F::prefetch(p);
    const int i_pf = l2_prefetch ? fetch_entry(list, (2 + wg) * kBlockN + (wt >> 1), n) : -1;
    if (n_tiles > 0) {
        const int i0 = fetch_entry(list, wt >> 1, n), i1 = fetch_entry(list, kBlockN + (wt >> 1), n);
        const unsigned char *ra = F::kv_row(p, i0);
        const unsigned char *rb = F::kv_row(p, i1);
        if (wg == 0) {
            write_mask(mask0, ra != nullptr, wt);
            load_share<F, 0>(p, k0, bar0, ra, wt);
            if (n_tiles > 1) load_share<F, 0>(p, k1, bar1, rb, wt);
        } else {
            load_share<F, 1>(p, k0, bar0, ra, wt);
            if (n_tiles > 1) {
                write_mask(mask1, rb != nullptr, wt);
                load_share<F, 1>(p, k1, bar1, rb, wt);
            }
        }
    }
    // The rows of pair 1 to L2; pair j + 2's go during pair j (index read at the pair's top,
    // prefetched after the pair's loads).
    if (l2_prefetch) prefetch_row<F>(p, i_pf, wt);
    finish_q(base, q8);

    for (int it = 0; it < n_tiles; it += 2) {
        const bool has_b = it + 1 < n_tiles;
        const bool next_a = it + 2 < n_tiles, next_b = it + 3 < n_tiles;
        // The next pair's rows, fetched a pair ahead of their loads.
        const int ia = fetch_entry(list, (it + 2) * kBlockN + (wt >> 1), n);
        const int ib = fetch_entry(list, (it + 3) * kBlockN + (wt >> 1), n);
        const int ip = l2_prefetch ? fetch_entry(list, (it + 4 + wg) * kBlockN + (wt >> 1), n) : -1;
        if (wg == 0) {
            prep_qk<F>(s, q8, q, smem, kSmemK0, bar0, phase[0], wg, wm, lane);
            phase[0] ^= 1;
            scale_mask_words(s, mask0, p.scale_log2, lane);
            float m_a[2], f[2];
            pair_wg0_pv<false>(s, st, o, pa, m_a, f, sm0, smem, k0, r0, wm, lane, it > 0, 1.f);
            // beta = 2^(m_a - m_b) brings O_L to the pair's final max.
            named_barrier_sync(kBarM1, 2 * kWgThreads);
            pair_wg0_beta(st, f, m_a, sm1, r0);
            wgmma_wait_group<0>();
            reg_fence(o);
            if (next_a) {  // V0_L consumed
                const unsigned char *ra = F::kv_row(p, ia);
                write_mask(mask0, ra != nullptr, wt);
                load_share<F, 0>(p, k0, bar0, ra, wt);
            }
            if (l2_prefetch) prefetch_row<F>(p, ip, wt);
            scale_o(o, f);
            if (has_b) {
                pv_remote<false>(o, kBarP1, base + kSmemP1, k1, 0);  // V1_L: K1 pieces 0-3
                if (next_b) load_share<F, 0>(p, k1, bar1, F::kv_row(p, ib), wt);  // V1_L consumed
            }
        } else {
            float mx[2] = {-inf_f32(), -inf_f32()}, m_a[2], m_b[2], f[2];
            // Without tile b (the last pair of an odd count) the product runs on whatever K1
            // holds and is not used: one QK call site, the same path for both cases.
            prep_qk<F>(s, q8, q, smem, kSmemK1, bar1, phase[1], wg, wm, lane, has_b);
            phase[1] ^= has_b;
            if (has_b) {
                scale_mask_words(s, mask1, p.scale_log2, lane);
                row_max64(s, mx);
            }
            named_barrier_sync(kBarM0, 2 * kWgThreads);
            pair_wg1_max(st, o, mx, m_a, m_b, f, sm0, sm1, r0, lane);
            float l_b[2] = {0.f, 0.f};
            if (has_b) pair_wg1_p1<false>(s, m_b, l_b, pa, smem, wm, lane, 1.f);
            pv_remote<false>(o, kBarP0, base + kSmemP0, k0, 1);  // V0_R: K0 pieces 4-7
            if (next_a) {
                named_barrier_arrive(kBarP0Free, 2 * kWgThreads);
                load_share<F, 1>(p, k0, bar0, F::kv_row(p, ia), wt);  // V0_R consumed
            }
            if (l2_prefetch) prefetch_row<F>(p, ip, wt);
            pair_wg1_beta(st, o, f, m_a, m_b, l_b);
            if (has_b) {
                pv_rs_wait<false>(o, pa, k1, 1);
                if (next_b) {  // V1_R consumed
                    const unsigned char *rb = F::kv_row(p, ib);
                    write_mask(mask1, rb != nullptr, wt);
                    load_share<F, 1>(p, k1, bar1, rb, wt);
                }
            }
        }
    }

    finish_row_sums(st, red, wm, wg, lane);
    F::store(p, o, st, token, m);
}

// The body of both kernels: the CTA of a flat grid (token major, ceil(h_q / 64) CTAs a token)
// runs attend_token on the dynamic shared memory, aligned to 1024 bytes.
template <class F>
__device__ __forceinline__ void attend_cta(const typename F::Params &p) {
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char *smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
    const int nm = (p.h_q + kBlockM - 1) / kBlockM;
    attend_token<F>(p, smem, blockIdx.x / nm, blockIdx.x % nm);
}

}  // namespace sm90s
}  // namespace sparse
}  // namespace flashmla
}  // namespace mla
