// FlashMLA-compatible dense paged decode, sm_90a, the CTA pair for the cp.async path (page sizes
// that are not multiples of 8, page 1 above all): the two head-block CTAs of a part (m = 2 z and
// 2 z + 1, the same key rows) run as a cluster of 2, each copying half of every K tile's rows with
// cp.async and sending that half into the peer's buffer by bulk copies (shared::cta ->
// shared::cluster), so that each CTA issues half the copies and reads half the bytes from L2.
// Everything else (math, schedule walk, the two warpgroups on alternate tiles, outputs) is
// decode_sm90.cu's page class 0 (its header has the pipeline); only the loads and their
// barriers differ. Non-causal only (both CTAs must stop at the same key; causal calls keep
// decode_sm90.cu), an even number of head blocks. Run on request only
// (MLAJIT_FLASHMLA_DECODE=pair): measured slower than decode_sm90.cu's one-CTA page class 0 (403
// against 312 us at b 128, s_k 4096, page 1; docs/perf-notes.md).
//
// Template parameter (the spec "flashmla_decode_sm90x2" fixes it): kKV 0 bf16, 1 fp16.
// Grid (2 P, h_kv, ceil(s_q h_q / h_kv / 64) / 2), clusters of 2 along x: CTA rank c = x % 2 of
// part x / 2 takes head block m = 2 z + c. 256 threads, 231560 bytes of dynamic shared memory.
//
// A tile's shares are decode_sm90.cu's: buffer b (K0, K1), share s = lo (K0: pieces 0-3, K1:
// pieces 0-3 and 8, by warpgroup 0) or hi (K0: pieces 4-8, K1: 4-7, by warpgroup 1). CTA c owns
// rows [32 c, 32 c + 32) of every tile: warp w of the issuing warpgroup copies rows 32 c + 8 w +
// [0, 8) of the share's pieces (2 cp.async of 4 rows x 8 chunks a piece and thread). Barriers of
// share (b, s), each of one phase per fill:
//   landed[b][s] (decode_sm90.cu's share mbarrier): 128 cp.async arrivals, this CTA's half;
//   peer[b][s]: the peer's half, 1 arrival (this CTA's expect_tx of the share's peer bytes) +
//     the bytes of the peer's bulk copies;
//   free[b][s]: the peer is done with the previous fill of the share (4 arrivals, lane 0 of each
//     warp of the peer's issuing warpgroup, at the release point where decode_sm90.cu refills);
//   rope_free: the peer's warpgroup 1 is done with the previous fill of K1 (4 arrivals by the
//     peer's warpgroup 0 at M1): K1's piece 8 is refilled at M1, before the peer releases the
//     rest of K1's lo share (after P1 V1_L), so waiting on free there would deadlock the pair.
// Issue of fill k of a share (the warpgroup that releases it, at decode_sm90.cu's refill point):
// arrive on the peer's free (this CTA has released fill k - 1, made only when fill k - 1 was
// consumed here), wait own free for phase k - 1 (the peer released fill k - 1: its buffer may be
// written, and this CTA's outgoing copy of fill k - 1, which the peer waited for, has read the
// rows the new fill overwrites), cp.async of the half, arrival on landed.
// Consumption (the Q K^T of the share's warpgroup): lanes 0..n-1 of its warp 0 wait landed,
// fence, and each send one piece's half (4096 contiguous bytes: 32 rows of 128 bytes, the
// swizzle being within the rows) to the peer, completing on the peer's peer[b][s]; lane 0 posts
// the expected bytes on its own peer[b][s]; then the warpgroup waits landed and peer and runs the
// share's products. The forward thus sits where the consumer waits for the data anyway.
// Cluster barriers after the mbarrier init and before exit.
//
// Shared memory: decode_sm90.cu's layout (230464 bytes), then peer[4] 230464 and free[4] 230496
// (index 2 b + s), rope_free 230528: 230536 bytes + 1024 for alignment.

#include "flashmla/decode_sm90.cu"

namespace mla {
namespace flashmla {
namespace sm90x2 {

using namespace sm90;

constexpr int kHalfRows = kBlockN / 2;                    // 32 rows a CTA
constexpr int kHalfPieceBytes = kHalfRows * 128;          // 4096
constexpr int kSmemPeer = kSmemUsed;                      // peer[4]
constexpr int kSmemFree = kSmemPeer + 4 * 8;              // free[4]
constexpr int kSmemRopeFree = kSmemFree + 4 * 8;         // rope_free (K1's piece 8)
constexpr int kSmemUsedX2 = kSmemRopeFree + 8;            // 230536
constexpr int kSmemBytesX2 = kSmemUsedX2 + 1024;          // 231560
static_assert(kSmemBytesX2 <= 232448, "fits the sm_90 shared memory of one CTA");
static_assert(kSmemPeer % 8 == 0, "mbarriers 8-aligned");

// The pair's barrier addresses of share (b, s), local and the peer's (bar: base + kSmemBar, the
// landed barriers decode_sm90.cu calls bar0 / bar1).
struct PairBars {
    unsigned landed, peer, free_, peer_peer, peer_free;
};
__device__ __forceinline__ PairBars pair_bars(unsigned base, unsigned peer_base, int b, int s) {
    const unsigned i = (unsigned)(2 * b + s) * 8;
    return {base + kSmemBar + i, base + kSmemPeer + i, base + kSmemFree + i,
            peer_base + kSmemPeer + i, peer_base + kSmemFree + i};
}

// The key row thread wt (of a warpgroup) supplies for the tile at t0 in CTA c: row 32 c + wt / 4
// (fetch_row's rules).
__device__ __forceinline__ RowRef fetch_row_x2(const DecodeParams &p, int req, int t0,
                                               int t_stop, int c, int wt) {
    const int t = t0 + kHalfRows * c + (wt >> 2);
    RowRef r = {-1, 0};
    if (t < t_stop) {
        const int page = page_of(p, t);
        r.row = t - page * p.page_size;
        if (page < p.max_blocks) r.blk = p.block_table[(long long)req * p.bt_stride + page];
    }
    return r;
}

// cp.async of pieces [kLo, kHi) of this CTA's rows of a tile by the 128 threads of a
// warpgroup (warp w: rows 32 c + 8 w + [0, 8), 4 rows x 8 chunks an instruction), not arrived.
// Thread wt computed the source of row 32 c + wt / 4 (src, null: zero fill).
template <int kLo, int kHi>
__device__ __forceinline__ void copy_half(const DecodeParams &p, unsigned buf,
                                          const unsigned char *src, int c, int wt) {
    const int lane = wt & 31, ch = lane & 7;
    const unsigned char *rs[2];
    int r[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int rl = 4 * i + (lane >> 3);  // row within the warp's 8
        rs[i] = reinterpret_cast<const unsigned char *>(
            __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(src), 4 * rl));
        r[i] = kHalfRows * c + 8 * (wt >> 5) + rl;
    }
#pragma unroll
    for (int pc = kLo; pc < kHi; pc++) {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const bool valid = rs[i] != nullptr;
            const unsigned char *g = valid ? rs[i] + (pc * 8 + ch) * 16
                                           : static_cast<const unsigned char *>(p.k);
            cp_async_16(buf + pc * kPieceBytes + r[i] * 128 + ((ch ^ (r[i] & 7)) << 4), g, valid);
        }
    }
}

// This warpgroup has released the fill of a share that it consumed (its last reads done): one
// arrival per warp on the peer's free.
__device__ __forceinline__ void release_share(const PairBars &pb, int lane) {
    __syncwarp();
    if (lane == 0) mbarrier_arrive_cluster(pb.peer_free);
}

// Issues this CTA's half of pieces [kLo, kHi) of a share's next fill (issue parity ip: the
// parity of the fills of this buffer issued so far), after the peer released the previous one;
// kArrive: then arrives on landed (else a later issue of the same fill arrives for these copies).
// K1's piece 8 alone (kLo 8, no arrival: warpgroup 0 at M1) waits on rope_free instead (the
// peer's warpgroup 1 done with the previous fill's Q K^T, which waited for this CTA's outgoing
// copy of it), since the peer releases the rest of that share only after its P1 V1_L.
template <int kLo, int kHi, bool kArrive>
__device__ __forceinline__ void issue_share(const DecodeParams &p, unsigned buf,
                                            const PairBars &pb, RowRef r, int g, int c, int wt,
                                            unsigned ip) {
    constexpr bool kRopeAlone = kLo == kPieces - 1 && !kArrive;
    // (K1's lo share: pb.landed = base + kSmemBar + 16)
    const unsigned wait_bar = kRopeAlone ? pb.landed - (kSmemBar + 16) + kSmemRopeFree : pb.free_;
    mbarrier_wait_parity(wait_bar, ip ^ 1u);  // fill 0: parity 1 of a fresh barrier, no wait
    copy_half<kLo, kHi>(p, buf, row_src(p, g, r), c, wt);
    if constexpr (kArrive) cp_async_mbarrier_arrive_noinc(pb.landed);
}

// The forward of this CTA's half of a share of kN pieces (kLo, kLo + 1, ...; kRope: the last is
// piece 8) to the peer: the consumer warpgroup waits for its landing here and makes it visible
// to the async proxy (and so to wgmma), lanes 0..kN-1 of its warp 0 (wt < kN) each send one
// piece's half, lane 0 posts the peer's bytes on this CTA's peer barrier; then the warpgroup
// waits for the peer's half (phase `parity`). The copies and the post are predicated, not
// branched (no divergent path between the warpgroup's wgmma).
template <int kLo, int kN, bool kRope>
__device__ __forceinline__ void forward_and_wait(unsigned buf, unsigned peer_buf,
                                                 const PairBars &pb, unsigned parity, int c,
                                                 int wt) {
    mbarrier_wait_parity(pb.landed, parity);
    fence_proxy_async_shared();  // the cp.async data (generic proxy) to the bulk copy and wgmma
    const int pc = kRope && wt == kN - 1 ? kPieces - 1 : kLo + wt;
    const unsigned off = (unsigned)(pc * kPieceBytes + c * kHalfPieceBytes);
    bulk_copy_to_cluster_if(wt < kN, peer_buf + off, buf + off, kHalfPieceBytes, pb.peer_peer);
    mbarrier_arrive_expect_tx_if(wt == 0, pb.peer, kN * kHalfPieceBytes);
    mbarrier_wait_parity(pb.peer, parity);
}

// S = Q K^T for the tile in buffer b (qk_tile's products and order; kRopeFirst: K1, whose lo
// share holds piece 8), each share forwarded and waited for before its products.
template <bool kF16, bool kRopeFirst>
__device__ __forceinline__ void qk_tile_x2(float (&s)[8][4], const unsigned (&q8)[4][4],
                                           unsigned q, unsigned buf, unsigned peer_buf,
                                           unsigned base, unsigned peer_base, int b,
                                           unsigned parity, int c, int wt) {
    const unsigned long long qd0 = wgmma_desc_sw128(q, 16, 1024);
    const unsigned long long kd0 = wgmma_desc_sw128(buf, 16, 1024);
    const PairBars lo = pair_bars(base, peer_base, b, 0), hi = pair_bars(base, peer_base, b, 1);
    wgmma_fence();
#pragma unroll
    for (int pc = 0; pc < kPieces - 1; pc++) {
        if (kRopeFirst && pc == kVPieces) qk_rope<kF16>(s, q8, kd0);  // piece 8 came with 0-3
        if (pc == 0) forward_and_wait<0, kVPieces + kRopeFirst, kRopeFirst>(buf, peer_buf, lo,
                                                                             parity, c, wt);
        if (pc == kVPieces)
            forward_and_wait<kVPieces, kPieces - kVPieces - kRopeFirst, false>(buf, peer_buf, hi,
                                                                              parity, c, wt);
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

// attend_chunk90 (decode_sm90.cu) of page class 0, non-causal, with the pair's loads: the same
// order of products, exchanges and refill points; ip: this thread's issue parities (bit b:
// fills of buffer b issued so far, mod 2; both warpgroups issue one share of every fill).
template <int kKV>
__device__ bool attend_chunk_x2(const DecodeParams &p, unsigned char *smem, unsigned peer_base,
                                unsigned (&q8)[4][4], bool &q_pending, unsigned (&phase)[2],
                                unsigned &ip, int part, int c, int req, int g, int m, int rows,
                                int len, int t_begin, int t_end, bool direct, int slot,
                                bool preloaded) {
    constexpr bool kF16 = KvTraits<kKV>::kF16;
    const auto [lane, warp, wm, wg, wt] = thread90();
    const auto [base, q, k0, k1, bar0, bar1, sm0, sm1, red] = smem90(smem);
    const volatile NextChunk *nx = reinterpret_cast<const volatile NextChunk *>(smem + kSmemNext);
    const unsigned pk0 = peer_base + kSmemK0, pk1 = peer_base + kSmemK1;
    // this warpgroup's shares of K0 and K1 (lo for warpgroup 0, hi for warpgroup 1)
    const PairBars s0 = pair_bars(base, peer_base, 0, wg), s1 = pair_bars(base, peer_base, 1, wg);
    RowState st;
    float o[32][4];
    int limit[2];
    const int t_stop = chunk_rows_init<false>(p, st, o, limit, m, rows, len, t_end, wm, lane);
    const int n_tiles = t_stop > t_begin ? (t_stop - t_begin + kBlockN - 1) / kBlockN : 0;
    const int r0 = wm * 16 + (lane >> 2);
    float s[8][4];
    unsigned pa[4][4];

    if (n_tiles > 0 && !preloaded) {
        const RowRef ra = fetch_row_x2(p, req, t_begin, t_stop, c, wt);
        const RowRef rb = fetch_row_x2(p, req, t_begin + kBlockN, t_stop, c, wt);
        if (wg == 0) {
            issue_share<0, kVPieces, true>(p, k0, s0, ra, g, c, wt, ip & 1u);
            if (n_tiles > 1) {
                issue_share<kPieces - 1, kPieces, false>(p, k1, s1, rb, g, c, wt, ip >> 1);
                issue_share<0, kVPieces, true>(p, k1, s1, rb, g, c, wt, ip >> 1);
            }
        } else {
            issue_share<kVPieces, kPieces, true>(p, k0, s0, ra, g, c, wt, ip & 1u);
            if (n_tiles > 1) issue_share<kVPieces, kPieces - 1, true>(p, k1, s1, rb, g, c, wt,
                                                                      ip >> 1);
        }
        ip ^= n_tiles > 1 ? 3u : 1u;
    }
    if (q_pending) wait_q(), q_pending = false;
    if (n_tiles > 0) {
        if (wg == 0) {
            qk_tile_x2<kF16, false>(s, q8, q, k0, pk0, base, peer_base, 0, phase[0], c, wt);
            phase[0] ^= 1;
        } else if (n_tiles > 1) {
            qk_tile_x2<kF16, true>(s, q8, q, k1, pk1, base, peer_base, 1, phase[1], c, wt);
            phase[1] ^= 1;
        }
    }

    bool pre_q = false;
    for (int it = 0; it < n_tiles; it += 2) {
        const int ta = t_begin + it * kBlockN, tb = ta + kBlockN;
        const bool has_b = it + 1 < n_tiles;
        const bool next_a = it + 2 < n_tiles, next_b = it + 3 < n_tiles;
        RowRef na, nb;
        bool load_a = next_a, load_b = next_b;
        if (next_a) {
            na = fetch_row_x2(p, req, ta + 2 * kBlockN, t_stop, c, wt);
            nb = fetch_row_x2(p, req, tb + 2 * kBlockN, t_stop, c, wt);
        } else {
            const int nt = nx->n_tiles, nreq = nx->req, nt0 = nx->t_begin, nstop = nx->t_stop;
            pre_q = nt >= 0 && nx->new_req;
            if (pre_q) load_q8(p, q8, nreq, g, m, rows);
            prefetch_walk(p, nt, nreq, part);
            load_a = nt > 0, load_b = nt > 1;
            na = fetch_row_x2(p, max(nreq, 0), nt0, load_a ? nstop : nt0, c, wt);
            nb = fetch_row_x2(p, max(nreq, 0), nt0 + kBlockN, load_b ? nstop : nt0, c, wt);
        }
        if (wg == 0) {
            const float sc = scale_mask64(s, limit, p.scale_log2, ta, lane);
            float m_a[2], f[2];
            pair_wg0_pv<kF16>(s, st, o, pa, m_a, f, sm0, smem, k0, r0, wm, lane, it > 0, sc);
            named_barrier_sync(kBarM1, 2 * kWgThreads);
            if (has_b) {  // warpgroup 1's Q K^T on K1 done (M1): the peer may refill its piece 8
                __syncwarp();
                if (lane == 0) mbarrier_arrive_cluster(peer_base + kSmemRopeFree);
            }
            load_next_q<0, kVPieces>(pre_q, p, q, nx, g, m, rows, wt);
            if (load_b)  // K1's piece 8, read by warpgroup 1's Q K^T (M1)
                issue_share<kPieces - 1, kPieces, false>(p, k1, s1, nb, g, c, wt, ip >> 1);
            pair_wg0_beta(st, f, m_a, sm1, r0);
            wgmma_wait_group<0>();
            reg_fence(o);
            release_share(s0, lane);  // V0_L consumed
            if (load_a) issue_share<0, kVPieces, true>(p, k0, s0, na, g, c, wt, ip & 1u);
            scale_o(o, f);
            if (has_b) {
                pv_remote<kF16>(o, kBarP1, base + kSmemP1, k1, 0);
                release_share(s1, lane);  // V1_L consumed
            }
            if (load_b) issue_share<0, kVPieces, true>(p, k1, s1, nb, g, c, wt, ip >> 1);
            ip ^= (load_a ? 1u : 0u) | (load_b ? 2u : 0u);
            if (next_a) {
                qk_tile_x2<kF16, false>(s, q8, q, k0, pk0, base, peer_base, 0, phase[0], c, wt);
                phase[0] ^= 1;
            }
        } else {
            float mx[2] = {-inf_f32(), -inf_f32()}, m_a[2], m_b[2], f[2], sc = 1.f;
            if (has_b) {
                sc = scale_mask64(s, limit, p.scale_log2, tb, lane);
                row_max64(s, mx, sc);
            }
            named_barrier_sync(kBarM0, 2 * kWgThreads);
            load_next_q<kVPieces, kPieces - 1>(pre_q, p, q, nx, g, m, rows, wt);
            pair_wg1_max(st, o, mx, m_a, m_b, f, sm0, sm1, r0, lane);
            float l_b[2] = {0.f, 0.f};
            if (has_b) pair_wg1_p1<kF16>(s, m_b, l_b, pa, smem, wm, lane, sc);
            pv_remote<kF16>(o, kBarP0, base + kSmemP0, k0, 1);
            if (next_a) named_barrier_arrive(kBarP0Free, 2 * kWgThreads);
            release_share(s0, lane);  // V0_R read
            if (load_a) issue_share<kVPieces, kPieces, true>(p, k0, s0, na, g, c, wt, ip & 1u);
            pair_wg1_beta(st, o, f, m_a, m_b, l_b);
            if (has_b) {
                pv_rs_wait<kF16>(o, pa, k1, 1);
                release_share(s1, lane);  // V1_R consumed
            }
            if (load_b)
                issue_share<kVPieces, kPieces - 1, true>(p, k1, s1, nb, g, c, wt, ip >> 1);
            ip ^= (load_a ? 1u : 0u) | (load_b ? 2u : 0u);
            if (next_b) {
                qk_tile_x2<kF16, true>(s, q8, q, k1, pk1, base, peer_base, 1, phase[1], c, wt);
                phase[1] ^= 1;
            }
        }
    }

    finish_row_sums(st, red, wm, wg, lane);
    store_rows90<kKV>(p, o, st, req, g, m, rows, direct, slot, wm, wg, lane);
    return n_tiles > 0;
}

}  // namespace sm90x2

// decode_sm90_kernel's chunk walk for the pair (header above).
template <int kKV>
__global__ void __launch_bounds__(kThreads, 1) decode_sm90x2_kernel(
    const __grid_constant__ DecodeParams p) {
    static_assert(kKV == 0 || kKV == 1, "the sm_90a decode takes 16-bit KV");
    using namespace sm90;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char *smem = align_smem_1024(smem_raw);
    pdl::wait();
    pdl::launch_dependents();
    const int part = blockIdx.x >> 1, c = blockIdx.x & 1, g = blockIdx.y;
    const int m = 2 * blockIdx.z + c;
    const int *rec = p.sched + (long long)part * kRecordInts;
    const int rows = p.s_q * p.heads_per_kv;
    const unsigned base = smem_addr(smem);
    if (threadIdx.x < 13) {  // landed[4] (128 cp.async), peer[4] (1 + bytes), free[4] and
                             // rope_free (4 warps)
        const unsigned i = threadIdx.x & 3, kind = threadIdx.x >> 2;
        const unsigned at = kind == 0   ? kSmemBar
                            : kind == 1 ? sm90x2::kSmemPeer
                            : kind == 2 ? sm90x2::kSmemFree
                                        : sm90x2::kSmemRopeFree;
        mbarrier_init(base + at + i * 8, kind == 0 ? kWgThreads : kind == 1 ? 1 : 4);
        fence_mbarrier_init_release_cluster();
    }
    __syncthreads();
    cluster_barrier_sync();  // the peer's barriers exist before any remote arrival or copy
    // The same offsets in the peer's shared memory (its base is 1024-aligned like this one, and
    // both CTAs run the same code, so the alignment offset is the same).
    const unsigned peer_base = cluster_map_shared(base, (unsigned)(c ^ 1));
    unsigned phase[2] = {0, 0};
    unsigned ip = 0;
    unsigned q8[4][4];
    bool q_pending = false, preloaded = false;
    int q_req = -1;
    sm90::Chunk cur;
    bool have = sm90::find_chunk(p, rec, max(rec[kBeginReq], 0), -1, cur);
    while (have) {
        sm90::Chunk nxt;
        const bool have_next = sm90::find_chunk(p, rec, cur.req, cur.u1, nxt);
        __syncthreads();
        if (cur.req != q_req) {
            const int after = have_next && nxt.req != cur.req ? nxt.req : -1;
            if (!preloaded) sm90::load_q_tile90(p, base + kSmemQ90, q8, cur.req, g, m, rows, after);
            else sm90::prefetch_q_l2(p, after, g, m, rows);
            q_pending = true, q_req = cur.req;
        }
        sm90::publish_next<false>(p, smem, m, rows, have_next, nxt, cur.req);  // non-causal
        __syncthreads();
        preloaded = sm90x2::attend_chunk_x2<kKV>(p, smem, peer_base, q8, q_pending, phase, ip,
                                                 part, c, cur.req, g, m, rows, cur.len,
                                                 cur.t_begin, cur.t_end, cur.direct, cur.slot,
                                                 preloaded);
        cur = nxt, have = have_next;
    }
    if (q_pending || preloaded) cp_async_wait<0>();
    // No CTA of the pair leaves while its peer may still copy into its shared memory or arrive
    // on its barriers.
    cluster_barrier_sync();
}

}  // namespace flashmla
}  // namespace mla
