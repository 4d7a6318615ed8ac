// Fake-quant MLA decode, sm_90a path (kind "fakequant_decode_sm90"): both products on wgmma, the
// raw cache tiles loaded by TMA into 128-byte-swizzled shared memory, K and V quantized there into
// their codes, P from registers. The numerics are decode_mma.cu's (spec/fakequant.md §2.1-2.5:
// codes exact in 16 bits, the per-tensor factors qk_eff and pv_eff applied to the fp32 results,
// the 32-token tiles, the fixed split schedule with the running max restarting per split, P
// quantized after the row sum, the open 16-token V tail, chunks of splits folded into one
// accumulator and merged by decode.cu's combine), with one difference: with p_qdq none, P enters
// P V rounded once to the cache dtype (upstream's `p.to(v.dtype) @ v`, FlashMLA's bf16 P) instead
// of decode_mma.cu's hi + lo halves, and the schedule of those calls does not depend on
// num_kv_splits: the running max restarts every 64 tiles (a "virtual split" of 2048 tokens from
// token 0) and a CTA takes G = ceil(ceil(tiles / 64) / S) of them, so that num_kv_splits changes
// nothing but the fp32 order of the final merge (without P quantization the split schedule is
// not part of the numerics, spec §2.4).
//
// Template parameters as decode_mma.cu's: kF16 (cache and MMA type float16, else bfloat16), kK,
// kV, kP the QdqMode of K, V, P. Shapes: kv_lora_rank 512, qk_rope_head_dim 64, page_size % 8 == 0
// (the host runs decode_mma.cu otherwise). Kernel parameters: MmaDecodeParams and the TMA
// descriptor of the cache (runtime/fakequant_decode.c: the 4-D tensor (576 columns, 1, page,
// num_blocks), boxes of 64 columns x R rows, R = min(largest power of two dividing page_size, 32),
// 128-byte swizzle).
//
// CTA: 64 heads of one request and chunk (grid: head blocks, slots, batch), two warpgroups; each
// computes a *partial* S of the whole 64 x 32 tile over half of the 576 features (warpgroup w:
// features [256 w, +256) with Q from shared memory, and [512 + 32 w, +32) of the RoPE part with
// Q from registers: 18 wgmma.m64n32k16, K from shared memory), the two partials are exchanged
// through shared memory and summed in the same order by both, so both hold the same S and run the
// same softmax, the same split bookkeeping and the same P quantization (no maxima or P exchange).
// Warpgroup w then owns O columns [256 w, +256) (the V columns of its own K features): O += P V_w
// as 2 wgmma.m64n256k16 with P from registers (the S accumulator layout is the A fragment layout)
// and V N-major from the tile. Pipeline per tile i (per warpgroup):
//   wait for all products (O); issue the partial S of tile i + 1 (under this tile's softmax);
//   barrier of both warpgroups (X: the partials of tile i in sS); warp 0 issues the TMA of tile
//   i - 1 + kStages into tile i - 1's stage (both warpgroups are done with it); S_i = sum;
//   softmax, P codes; the tail tile's V rows past s zeroed and V quantized in place (own
//   columns); wait for the partial S of tile i + 1, barrier Y (both read sS), store it to sS;
//   O rescaled, O += P V_i issued; [K quantized: K codes of tile i + 2 (own features) into Kc,
//   under that P V].
// K none keeps 4 raw stages (tiles i + 1 .. i + 3 load under tile i); K quantized 3 stages plus
// the code tile Kc. Rows past s: K rows give -inf scores (masked), V rows are zeroed before V is
// quantized or read (TMA reads whole boxes; boxes of pages past s read zeros).
//
// Shared memory (bytes, from a 1024-aligned base; tiles are pieces of 64 columns, 128-byte rows,
// element (r, k) at (k / 64) * piece + r * 128 + (((k % 64) / 8) ^ (r & 7)) * 16 + (k % 8) * 2):
//   Q 64 x 512 (pieces of 8192) 0 | raw stages 4 x 32 x 576 (pieces of 4096) 65536 (K quantized:
//   3 stages, then Kc) | sS [2 warpgroups][16 floats][128 threads] 212992 | mbarriers (one per
//   stage) 229376 | 229408 bytes + 1024 for alignment.
#include "common/mbarrier.cuh"
#include "common/wgmma.cuh"
#include "fakequant/decode_mma.cu"
#include "flashmla/decode_sm90.cu"

namespace mla {
namespace fakequant {
namespace sm90dec {

using mmadec::kD;
using mmadec::kHeads;
using mmadec::kRank;
using mmadec::kThreads;
using mmadec::kTile;
using mmadec::MmaDecodeParams;
using mmadec::neg_inf;
using flashmla::sm90::TmaDesc;

constexpr int kWg = 128;                        // threads of a warpgroup
constexpr int kQPiece = kHeads * 128;           // 8192
constexpr int kTPiece = kTile * 128;            // 4096
constexpr int kTileB = (kD / 64) * kTPiece;     // 36864
constexpr int kQOff = 0;                        // Q features 0-511 (8 pieces)
constexpr int kStageOff = kHeads * kRank * 2;   // 65536
constexpr int kSOff = kStageOff + 4 * kTileB;   // 212992
constexpr int kSBytes = 2 * 16 * kWg * 4;       // 16384
constexpr int kBarOff = kSOff + kSBytes;        // 229376
constexpr int kSmemUsed = kBarOff + 4 * 8;
constexpr int kSmemBytes = kSmemUsed + 1024;    // 230432
constexpr int kKSteps = kD / 16 / 2;            // 18 k16 steps per warpgroup
constexpr int kVirtualTiles = 64;               // p none: the running max restarts every 64 tiles
static_assert(kSmemBytes == 230432, "runtime/fakequant_kinds.h MLA__FQ_DECODE_SM90_SMEM");
static_assert(kSmemBytes <= 232448, "fits the sm_90 shared memory of one CTA");
static_assert(kStageOff % 1024 == 0 && kTileB % 1024 == 0, "swizzle atoms 1024-aligned");

// X: both partials of a tile written; Y: both read (the buffer may be written again); kBarWg + w:
// warpgroup w alone.
enum Barrier : int { kBarX = 1, kBarY = 2, kBarWg = 3 };

// The j-th (of 18) k16 step of warpgroup w: features [256 w, +256) (pieces 4 w .. 4 w + 3, Q from
// shared memory), then [512 + 32 w, +32) (the RoPE piece, Q from registers).
__device__ __forceinline__ int kstep_of(int w, int j) { return j < 16 ? 16 * w + j : 16 + 2 * w + j; }

// Byte offset of 16-byte chunk c (of 72) of row r in a 32-row tile (pieces of 4096 bytes).
__device__ __forceinline__ unsigned toff(int r, int c) {
    return (unsigned)((c >> 3) * kTPiece + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// Tiles [begin, end) of chunk c and the split length tps (the running max restarts at tiles
// t % tps == 0): decode_mma.cu's chunk_tiles for a quantized P, the virtual splits otherwise.
template <int kP>
__device__ __forceinline__ void chunk_of(int s, int splits, int c, int &tps, int &begin,
                                         int &end) {
    if constexpr (kP != kNone) {
        mmadec::chunk_tiles(s, splits, c, tps, begin, end);
    } else {
        const int nt = (s + kTile - 1) / kTile;
        const int nv = (nt + kVirtualTiles - 1) / kVirtualTiles;
        const int g = nv > 0 ? (nv + splits - 1) / splits : 1;
        const long long b = (long long)c * g * kVirtualTiles, e = b + (long long)g * kVirtualTiles;
        tps = kVirtualTiles;
        begin = b < nt ? (int)b : nt;
        end = e < nt ? (int)e : nt;
    }
}

// mmadec::q_chunk by 16-byte loads (q and its strides 16-byte aligned).
template <bool kF16>
__device__ __forceinline__ uint4 q_chunk16(const MmaDecodeParams &p, int b, int h, int c,
                                           bool &inexact) {
    if (h >= p.heads) return make_uint4(0u, 0u, 0u, 0u);
    const long long off = (long long)b * p.q_stride_b + (long long)h * p.q_stride_h + c * 8;
    if (!p.q_fp32)
        return *reinterpret_cast<const uint4 *>(static_cast<const unsigned short *>(p.q) + off);
    const float4 *qf = reinterpret_cast<const float4 *>(static_cast<const float *>(p.q) + off);
    const float4 lo = qf[0], hi = qf[1];
    const float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    unsigned w[4];
#pragma unroll
    for (int e = 0; e < 4; e++) {
        w[e] = mmadec::pack2<kF16>(v[2 * e], v[2 * e + 1]);
        inexact |= mmadec::h2f<kF16>(w[e]) != v[2 * e] || mmadec::h2f<kF16>(w[e] >> 16) != v[2 * e + 1];
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// The box lane `lane` of warp 0 loads for tile `tile` (absolute index): lane i < 32 / R takes rows
// [i R, i R + R) of the tile, from block blk (-1: past s or the block table, read as zeros) at row
// `row` of its page. The block-table read is issued here and used only by issue_tile, so that a
// box fetched a tile ahead hides its latency.
struct BoxRef {
    int blk, row;
};
__device__ __forceinline__ BoxRef box_of(const MmaDecodeParams &p, const int *bt_row, int s,
                                         int tile, int lane) {
    const int rows = min(p.page_size & -p.page_size, kTile);
    const int t = tile * kTile + lane * rows;
    BoxRef r = {-1, 0};
    if (lane < kTile / rows && t < s) {
        const int page = t / p.page_size;
        r.row = t - page * p.page_size;
        if (page < p.max_blocks) r.blk = bt_row[page];
    }
    return r;
}

// Warp 0 (all lanes): the TMA of a tile (the lanes' boxes, box_of) into the stage at smem
// address dst, completing on bar; lane 0 posts the 36864 bytes first.
__device__ __forceinline__ void issue_tile(const MmaDecodeParams &p, const TmaDesc &tk, BoxRef r,
                                           unsigned dst, unsigned bar, int lane) {
    const int rows = min(p.page_size & -p.page_size, kTile);
    if (lane == 0) mbarrier_arrive_expect_tx(bar, kTileB);
    __syncwarp();
    if (lane < kTile / rows) {
        const unsigned long long policy = flashmla::l2_policy_evict_first();
#pragma unroll
        for (int pc = 0; pc < kD / 64; pc++)
            tma_load_4d(dst + pc * kTPiece + lane * rows * 128, &tk, bar, pc * 64, 0, r.row, r.blk,
                        policy);
    }
}

// Warpgroup w's partial S = Q K^T over its features (kstep_of), Q pieces from shared memory and
// its RoPE part from registers (q8), K from the tile at kbuf; issued and committed, not waited on.
template <bool kF16>
__device__ __forceinline__ void issue_qk(float (&s)[4][4], const unsigned (&q8)[2][4], unsigned q,
                                         unsigned kbuf, int w) {
    const unsigned long long qd0 = wgmma_desc_sw128(q, 16, 1024);
    const unsigned long long kd0 = wgmma_desc_sw128(kbuf, 16, 1024);
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const int ks = 16 * w + j, pc = ks >> 2, k = ks & 3;
        unsigned long long qd = qd0, kd = kd0;
        flashmla::sm90::opaque(qd), flashmla::sm90::opaque(kd);
        wgmma_m64n32k16_ss<kF16, 0>(s, qd + ((pc * kQPiece + k * 32) >> 4),
                                    kd + ((pc * kTPiece + k * 32) >> 4), j > 0);
    }
    unsigned long long kd = kd0;
    flashmla::sm90::opaque(kd);
#pragma unroll
    for (int j = 0; j < 2; j++)
        wgmma_m64n32k16_rs<kF16, 0>(s, q8[j], kd + ((8 * kTPiece + (2 * w + j) * 32) >> 4), 1);
    wgmma_commit_group();
}

// The residual product of an fp32 q that is not exact in 16 bits (not the NVFP4 carrier):
// d = (q - fl16(q)) K^T over warpgroup w's features, the residuals read from global memory, by
// mma.sync m16n8k16 (its C fragment of warp wi is the wgmma accumulator layout of the warp's 16
// rows) with K fragments by ldmatrix from the swizzled tile at kbuf. Slow, outside the recipe.
template <bool kF16>
__device__ __forceinline__ void qk_residual(float (&d)[4][4], const MmaDecodeParams &p,
                                            unsigned kbuf, int w, int b, int h0, int lane, int wi) {
#pragma unroll
    for (int j = 0; j < 4; j++) d[j][0] = d[j][1] = d[j][2] = d[j][3] = 0.f;
    const float *qf = static_cast<const float *>(p.q) + (long long)b * p.q_stride_b;
    const int ha = h0 + wi * 16 + (lane >> 2), hb = ha + 8, f0 = (lane & 3) * 2;
    const float *qa = qf + (long long)(ha < p.heads ? ha : 0) * p.q_stride_h;
    const float *qb = qf + (long long)(hb < p.heads ? hb : 0) * p.q_stride_h;
    const float za = ha < p.heads ? 1.f : 0.f, zb = hb < p.heads ? 1.f : 0.f;
#pragma unroll 1
    for (int j = 0; j < kKSteps; j++) {
        const int ks = kstep_of(w, j);
        unsigned a[4];
        mmadec::q_lo_frag<kF16>(qa, qb, za, zb, ks * 16 + f0, a);
#pragma unroll
        for (int np = 0; np < 2; np++) {
            unsigned bb[4];
            const int kr = np * 16 + (lane & 7) + ((lane >> 4) << 3);
            flashmla::ldmatrix_x4(kbuf + toff(kr, 2 * ks + ((lane >> 3) & 1)), bb);
            flashmla::mma_m16n8k16<kF16>(d[2 * np], a, bb[0], bb[1]);
            flashmla::mma_m16n8k16<kF16>(d[2 * np + 1], a, bb[2], bb[3]);
        }
    }
}

// K codes of the raw tile (warpgroup w's features: chunks [32 w, +32) and [64 + 4 w, +4)) into
// kc, same layout; then visible to the warpgroup's wgmma.
template <bool kF16, int kK>
__device__ __forceinline__ void quantize_k(const MmaDecodeParams &p, const unsigned char *raw,
                                           unsigned char *kc, int w, int wt) {
    if constexpr (kK == kFp8) {
        const float rk = __frcp_rn(p.k_scale);
        for (int i = wt; i < kTile * 36; i += kWg) {
            const int r = i / 36, c = i % 36 < 32 ? 32 * w + i % 36 : 64 + 4 * w + i % 36 - 32;
            const unsigned off = toff(r, c);
            *reinterpret_cast<uint4 *>(kc + off) =
                mmadec::fp8_codes8<kF16>(*reinterpret_cast<const uint4 *>(raw + off), p.k_scale, rk);
        }
    } else if constexpr (kK == kNvfp4) {
        const float k6 = __fmul_rn(6.f, p.k_scale), rk6 = __frcp_rn(k6);
        for (int i = wt; i < kTile * 18; i += kWg) {
            const int r = i / 18, j = kstep_of(w, i % 18);   // the block of 16 features
            const unsigned o0 = toff(r, 2 * j), o1 = toff(r, 2 * j + 1);
            const uint4 a = *reinterpret_cast<const uint4 *>(raw + o0);
            const uint4 c = *reinterpret_cast<const uint4 *>(raw + o1);
            unsigned u[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
            float x[16], bamax = 0.f;
#pragma unroll
            for (int e = 0; e < 8; e++) {
                x[2 * e] = mmadec::h2f<kF16>(u[e]), x[2 * e + 1] = mmadec::h2f<kF16>(u[e] >> 16);
                bamax = fmaxf(bamax, fmaxf(fabsf(x[2 * e]), fabsf(x[2 * e + 1])));
            }
            const Nvfp4Scale bs = nvfp4_scale(bamax, p.k_scale, k6, rk6);
            if (nvfp4_fast(bs)) {
#pragma unroll
                for (int e = 0; e < 8; e++)
                    u[e] = mmadec::pack2<kF16>(nvfp4_code_fast(x[2 * e], bs),
                                               nvfp4_code_fast(x[2 * e + 1], bs));
            } else {
#pragma unroll
                for (int e = 0; e < 8; e++)
                    u[e] = mmadec::pack2<kF16>(nvfp4_code(x[2 * e], bs), nvfp4_code(x[2 * e + 1], bs));
            }
            *reinterpret_cast<uint4 *>(kc + o0) = make_uint4(u[0], u[1], u[2], u[3]);
            *reinterpret_cast<uint4 *>(kc + o1) = make_uint4(u[4], u[5], u[6], u[7]);
        }
    }
    fence_proxy_async_shared();
    named_barrier_sync(kBarWg + w, kWg);
}

// The V columns [256 w, +256) of the raw tile at `raw`: rows [valid, 32) zeroed (the tail tile;
// valid >= 32: none), then quantized in place (kV: fp8 elementwise; NVFP4 along the two 16-token
// groups of each feature, the zeroed rows not raising the open group's amax); then visible to
// the warpgroup's wgmma. Nothing (not even the barrier) when there is nothing to do.
template <bool kF16, int kV>
__device__ __forceinline__ void prepare_v(const MmaDecodeParams &p, unsigned char *raw, int valid,
                                          int w, int wt) {
    if (kV == kNone && valid >= kTile) return;
    for (int i = wt; i < (kTile - min(max(valid, 0), kTile)) * 32; i += kWg) {
        const int r = max(valid, 0) + i / 32, c = 32 * w + i % 32;
        *reinterpret_cast<uint4 *>(raw + toff(r, c)) = make_uint4(0, 0, 0, 0);
    }
    if constexpr (kV != kNone) named_barrier_sync(kBarWg + w, kWg);   // zeros before the reads
    if constexpr (kV == kFp8) {
        const float rv = __frcp_rn(p.v_scale);
#pragma unroll 4
        for (int i = wt; i < kTile * 32; i += kWg) {
            const int r = i / 32, c = 32 * w + i % 32;
            const unsigned off = toff(r, c);
            *reinterpret_cast<uint4 *>(raw + off) =
                mmadec::fp8_codes8<kF16>(*reinterpret_cast<const uint4 *>(raw + off), p.v_scale, rv);
        }
    } else if constexpr (kV == kNvfp4) {
        const float v6 = __fmul_rn(6.f, p.v_scale), rv6 = __frcp_rn(v6);
        // thread wt: features 256 w + 2 wt, + 1 (chunk 32 w + wt / 4, byte 4 (wt % 4)), both groups
        const int c = 32 * w + (wt >> 2), wb = (wt & 3) * 4;
#pragma unroll 1
        for (int g = 0; g < 2; g++) {
            float x0[16], x1[16], m0 = 0.f, m1 = 0.f;
#pragma unroll
            for (int rr = 0; rr < 16; rr++) {
                const unsigned u = *reinterpret_cast<const unsigned *>(raw + toff(16 * g + rr, c) + wb);
                x0[rr] = mmadec::h2f<kF16>(u), x1[rr] = mmadec::h2f<kF16>(u >> 16);
                m0 = fmaxf(m0, fabsf(x0[rr])), m1 = fmaxf(m1, fabsf(x1[rr]));
            }
            const Nvfp4Scale s0 = nvfp4_scale(m0, p.v_scale, v6, rv6);
            const Nvfp4Scale s1 = nvfp4_scale(m1, p.v_scale, v6, rv6);
            const bool fast = nvfp4_fast(s0) && nvfp4_fast(s1);
#pragma unroll
            for (int rr = 0; rr < 16; rr++) {
                const unsigned u = fast ? mmadec::pack2<kF16>(nvfp4_code_fast(x0[rr], s0),
                                                              nvfp4_code_fast(x1[rr], s1))
                                        : mmadec::pack2<kF16>(nvfp4_code(x0[rr], s0),
                                                              nvfp4_code(x1[rr], s1));
                *reinterpret_cast<unsigned *>(raw + toff(16 * g + rr, c) + wb) = u;
            }
        }
    }
    fence_proxy_async_shared();
    named_barrier_sync(kBarWg + w, kWg);
}

// Everything after the setup of a CTA's chunk: tiles [t_begin, t_begin + n) of request b for
// heads h0.. (the first tiles loading, Q features 0-511 in shared memory, q8 its RoPE part of
// this warpgroup; need_lo: add the residual products of an fp32 q). The partial S of tile i + 1
// is issued before tile i's softmax and stored to sS once waited for, so that no accumulator is
// touched while its product is in flight and no S accumulator lives across iterations; every
// product is issued and waited for outside any branch (after the last tile on whatever the next
// stage holds, unused). K quantized: the K codes of tile i + 2 are made at the end of step i
// (under its P V), once the partial S of tile i + 1 has read the code tile.
template <bool kF16, int kK, int kV, int kP>
__device__ __forceinline__ void run_chunk(const MmaDecodeParams &p, const TmaDesc &tk,
                                          unsigned char *smem, const unsigned (&q8)[2][4], int s,
                                          int t_begin, int n, int tps, int b, int h0, int chunk,
                                          bool need_lo) {
    constexpr int kStages = kK == kNone ? 4 : 3;
    constexpr int kKcOff = kStageOff + 3 * kTileB;   // K quantized: the fourth stage holds Kc
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wi = warp & 3, w = warp >> 2;
    const int wt = tid & (kWg - 1);
    const unsigned base = flashmla::smem_addr(smem);
    const unsigned q_a = base + kQOff, bar0 = base + kBarOff;
    const int *bt_row = p.block_table + (long long)b * p.bt_stride;
    float o[32][4];
#pragma unroll
    for (int j = 0; j < 32; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    flashmla::sm90::reg_fence(o);
    float E[2] = {neg_inf(), neg_inf()}, M[2] = {neg_inf(), neg_inf()};
    float mu[2] = {neg_inf(), neg_inf()}, L[2] = {0.f, 0.f};
    const float rp = __frcp_rn(p.p_scale);
    const float p6 = __fmul_rn(6.f, p.p_scale), rp6 = __frcp_rn(p6);
    float4 *sS = reinterpret_cast<float4 *>(smem + kSOff);

    // K quantized: tile t's K codes into the code tile (t < n; its raw stage landed first).
    auto codes = [&](int t) {
        if constexpr (kK != kNone) {
            if (t < n) {
                mbarrier_wait_parity(bar0 + (t % kStages) * 8, (t / kStages) & 1);
                quantize_k<kF16, kK>(p, smem + kStageOff + (t % kStages) * kTileB, smem + kKcOff,
                                     w, wt);
            }
        }
    };
    // The partial S of tile i + 1, issued; with need_lo its residual product (synchronous) into
    // slo.
    auto issue_next = [&](float (&sn)[4][4], float (&slo)[4][4], int i) {
        const int sn1 = (i + 1) % kStages;
        if (kK == kNone && i + 1 < n) mbarrier_wait_parity(bar0 + sn1 * 8, ((i + 1) / kStages) & 1);
        const unsigned kb = kK != kNone ? base + kKcOff : base + kStageOff + sn1 * kTileB;
        issue_qk<kF16>(sn, q8, q_a, kb, w);
        if (need_lo) qk_residual<kF16>(slo, p, kb, w, b, h0, lane, wi);
    };
    // ... waited for (with everything else in flight) and stored as warpgroup w's partial of tile
    // i + 1, once both warpgroups have read the partials of tile i (Y).
    auto store_next = [&](float (&sn)[4][4], const float (&slo)[4][4]) {
        wgmma_wait_group<0>();
        flashmla::sm90::reg_fence(sn);
        flashmla::sm90::reg_fence(o);
        named_barrier_sync(kBarY, kThreads);
        float4 *mine = sS + w * 4 * kWg;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float4 v = make_float4(sn[j][0], sn[j][1], sn[j][2], sn[j][3]);
            if (need_lo) v.x += slo[j][0], v.y += slo[j][1], v.z += slo[j][2], v.w += slo[j][3];
            mine[j * kWg + wt] = v;
        }
    };

    BoxRef nbox = {-1, 0};   // warp 0: the boxes of the next tile to load (t_begin + kStages)
    if (warp == 0) nbox = box_of(p, bt_row, s, t_begin + kStages, lane);
    float sn[4][4], slo[4][4];
    codes(0);
    issue_next(sn, slo, -1);
    store_next(sn, slo);
    codes(1);
    for (int i = 0; i < n; i++) {
        const int tile = t_begin + i, st = i % kStages;
        wgmma_wait_group<0>();
        flashmla::sm90::reg_fence(o);
        issue_next(sn, slo, i);   // under this tile's softmax
        // Both partials of tile i are in sS; tile i - 1's stage is free in both warpgroups.
        named_barrier_sync(kBarX, kThreads);
        if (warp == 0 && i >= 1 && i - 1 + kStages < n) {
            const int sf = (i - 1) % kStages;
            issue_tile(p, tk, nbox, base + kStageOff + sf * kTileB, bar0 + sf * 8, lane);
            nbox = box_of(p, bt_row, s, tile + kStages, lane);   // the next one, a tile ahead
        }
        float x[4][4];
        const float4 *s0 = sS, *s1 = sS + 4 * kWg;
#pragma unroll
        for (int j = 0; j < 4; j++) {   // the same sum in both warpgroups
            const float4 y0 = s0[j * kWg + wt], y1 = s1[j * kWg + wt];
            x[j][0] = y0.x + y1.x, x[j][1] = y0.y + y1.y, x[j][2] = y0.z + y1.z, x[j][3] = y0.w + y1.w;
        }

        // Scores (log2 domain), -inf past s (the tail tile only); the row maxima over the quad.
        float mx[2] = {neg_inf(), neg_inf()};
        if (tile * kTile + kTile <= s) {
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    x[j][e] = __fmul_rn(x[j][e], p.qk_eff);
                    mx[e >> 1] = fmaxf(mx[e >> 1], x[j][e]);
                }
        } else {
            const int t0 = tile * kTile + (lane & 3) * 2;
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    x[j][e] = t0 + 8 * j + (e & 1) < s ? __fmul_rn(x[j][e], p.qk_eff) : neg_inf();
                    mx[e >> 1] = fmaxf(mx[e >> 1], x[j][e]);
                }
        }
        mx[0] = quad_max(mx[0]), mx[1] = quad_max(mx[1]);
        // Split bookkeeping (decode_mma.cu's): mu the split's running max, E the exponent O and
        // L are kept in, M the row's max so far; p unquantized into L.
        const bool split_start = tile % tps == 0;
        float f[2] = {1.f, 1.f};
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if (split_start) mu[h] = neg_inf();
            const float mn = fmaxf(mu[h], mx[h]);
            mu[h] = mn;
            bool use = mn != neg_inf();
            if (use) {
                if (E[h] == neg_inf()) {
                    E[h] = M[h] = mn;
                } else if (fmaxf(M[h], mn) - mn > mmadec::kSkip) {
                    use = false;
                } else {
                    f[h] = exp2f(E[h] - mn);
                    E[h] = mn, M[h] = fmaxf(M[h], mn);
                    L[h] *= f[h];
                }
            }
            // p = 2^(x - mn), 0 for x = -inf and for every key of an unused tile (x - inf); the
            // flush of subnormal p to 0 changes no quantization code and no sum beyond 2^-126.
            const float mu_e = use ? mn : __int_as_float(0x7f800000);
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 2 * h; e < 2 * h + 2; e++) {
                    const float pj = flashmla::ex2(x[j][e] - mu_e);
                    L[h] += pj;
                    x[j][e] = pj;
                }
        }

        // P codes (after the row sum) as the A fragments of the two k16 steps: pa[kk] holds keys
        // [16 kk, +16) (8-key blocks 2 kk and 2 kk + 1), rows r and r + 8.
        unsigned pa[2][4];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            Nvfp4Scale bs[2] = {{0.f, 0.f, 0.f}, {0.f, 0.f, 0.f}};
            if constexpr (kP == kNvfp4) {   // blocks of 16 keys: 8-key blocks {0, 1} and {2, 3}
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int e = 2 * h; e < 2 * h + 2; e++)
                        x[j][e] = mmadec::h2f<kF16>(mmadec::f2h<kF16>(x[j][e]));
#pragma unroll
                for (int kk = 0; kk < 2; kk++) {
                    float bam = fmaxf(fmaxf(x[2 * kk][2 * h], x[2 * kk][2 * h + 1]),
                                      fmaxf(x[2 * kk + 1][2 * h], x[2 * kk + 1][2 * h + 1]));
                    bam = quad_max(bam);
                    bs[kk] = nvfp4_scale(bam, p.p_scale, p6, rp6);
                }
            }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float x0 = x[j][2 * h], x1 = x[j][2 * h + 1];
                unsigned u;
                if constexpr (kP == kFp8) {
                    u = mmadec::fp8_code2<kF16>(x0, x1, p.p_scale, rp);
                } else if constexpr (kP == kNvfp4) {
                    const Nvfp4Scale &q = bs[j >> 1];
                    u = nvfp4_fast(q) ? mmadec::pack2<kF16>(nvfp4_code_fast(x0, q), nvfp4_code_fast(x1, q))
                                      : mmadec::pack2<kF16>(nvfp4_code(x0, q), nvfp4_code(x1, q));
                } else {
                    u = mmadec::pack2<kF16>(x0, x1);
                }
                pa[j >> 1][(j & 1) * 2 + h] = u;
            }
        }

        // V: the tail's rows past s zeroed, V quantized (own columns), then O += P V.
        prepare_v<kF16, kV>(p, smem + kStageOff + st * kTileB, s - tile * kTile, w, wt);
        store_next(sn, slo);
        flashmla::sm90::scale_o(o, f);
        flashmla::sm90::reg_fence(o);
        wgmma_fence();
        const unsigned vb = base + kStageOff + st * kTileB + w * 4 * kTPiece;
#pragma unroll
        for (int kk = 0; kk < 2; kk++)
            wgmma_m64n256k16_rs<kF16, 1>(o, pa[kk], wgmma_desc_sw128(vb + kk * 16 * 128, kTPiece, 1024), 1);
        wgmma_commit_group();
        codes(i + 2);   // under this tile's P V
    }
    wgmma_wait_group<0>();
    flashmla::sm90::reg_fence(o);

    // The chunk's partial (E, L, O pv_eff): warpgroup w stores its columns; L is the whole row's
    // in both (the quad's sum).
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int r = wi * 16 + (lane >> 2) + 8 * h, head = h0 + r;
        const float l = quad_sum(L[h]);
        if (head >= p.heads) continue;
        const long long row = ((long long)b * p.heads + head) * p.slots + chunk;
        float *acc = p.ws_acc + row * kRank + w * 256 + (lane & 3) * 2;
#pragma unroll
        for (int j = 0; j < 32; j++)
            *reinterpret_cast<float2 *>(acc + 8 * j) =
                make_float2(__fmul_rn(o[j][2 * h], p.pv_eff), __fmul_rn(o[j][2 * h + 1], p.pv_eff));
        if (w == 0 && (lane & 3) == 0) {
            const bool any = E[h] != neg_inf() && l > 0.f;
            p.ws_ml[row * 2] = any ? E[h] : neg_inf();
            p.ws_ml[row * 2 + 1] = any ? l : 0.f;
        }
    }
}

}  // namespace sm90dec

// Grid (heads / 64, slots, batch), 256 threads, dynamic shared memory sm90dec::kSmemBytes.
template <bool kF16, int kK, int kV, int kP>
__global__ void __launch_bounds__(sm90dec::kThreads, 1) decode_sm90_kernel(
    const __grid_constant__ mmadec::MmaDecodeParams p, const __grid_constant__ sm90dec::TmaDesc tk) {
    using namespace sm90dec;
    constexpr int kStages = kK == kNone ? 4 : 3;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char *smem = smem_raw + ((1024u - (flashmla::smem_addr(smem_raw) & 1023u)) & 1023u);
    const unsigned base = flashmla::smem_addr(smem);
    const int chunk = blockIdx.y, h0 = blockIdx.x * kHeads, b = blockIdx.z;
    const int tid = threadIdx.x;
    const long long cap = (long long)p.max_blocks * p.page_size;
    int s = p.seq_len[b] < 0 ? 0 : p.seq_len[b];
    if ((long long)s > cap) s = (int)cap;
    int tps, t_begin, t_end;
    chunk_of<kP>(s, p.splits, chunk, tps, t_begin, t_end);
    if (t_begin >= t_end) {   // no tile: an empty slot
        if (tid < kHeads && h0 + tid < p.heads) {
            float *ml = p.ws_ml + (((long long)b * p.heads + h0 + tid) * p.slots + chunk) * 2;
            ml[0] = neg_inf(), ml[1] = 0.f;
        }
        return;
    }
    const int n = t_end - t_begin;
    if (tid < kStages) mbarrier_init(base + kBarOff + tid * 8, 1);
    __syncthreads();
    if ((tid >> 5) == 0)
        for (int i = 0; i < kStages && i < n; i++)
            issue_tile(p, tk, box_of(p, p.block_table + (long long)b * p.bt_stride, s, t_begin + i,
                                     tid & 31),
                       base + kStageOff + i * kTileB, base + kBarOff + i * 8, tid & 31);

    // Q rows of heads h0.. (16-bit; fp32 q rounded, with the vote on exactness): features 0-511
    // swizzled in shared memory, the RoPE features of warpgroup w's two k16 steps (kstep_of) as
    // A fragments in registers.
    bool inexact = false;
    const int qa = p.q_fp32 ? 4 : 8;   // elements of 16 bytes
    if ((reinterpret_cast<unsigned long long>(p.q) & 15) == 0 && p.q_stride_b % qa == 0 &&
        p.q_stride_h % qa == 0) {
#pragma unroll 4
        for (int i = tid; i < kHeads * (kRank / 8); i += kThreads) {
            const int r = i / (kRank / 8), c = i - r * (kRank / 8);
            *reinterpret_cast<uint4 *>(smem + kQOff + flashmla::sm90::tile_off(r, c)) =
                q_chunk16<kF16>(p, b, h0 + r, c, inexact);
        }
    } else {
        for (int i = tid; i < kHeads * (kRank / 8); i += kThreads) {
            const int r = i / (kRank / 8), c = i - r * (kRank / 8);
            *reinterpret_cast<uint4 *>(smem + kQOff + flashmla::sm90::tile_off(r, c)) =
                mmadec::q_chunk<kF16>(p, b, h0 + r, c, inexact);
        }
    }
    unsigned q8[2][4];
    {
        const int w = tid >> 7, wi = (tid >> 5) & 3, lane = tid & 31;
        const int ra = wi * 16 + (lane >> 2), fb = (lane & 3) * 2;
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int f = kstep_of(w, 16 + j) * 16 + fb;
            q8[j][0] = mmadec::q_pair<kF16>(p, b, h0 + ra, f, inexact);
            q8[j][1] = mmadec::q_pair<kF16>(p, b, h0 + ra + 8, f, inexact);
            q8[j][2] = mmadec::q_pair<kF16>(p, b, h0 + ra, f + 8, inexact);
            q8[j][3] = mmadec::q_pair<kF16>(p, b, h0 + ra + 8, f + 8, inexact);
        }
    }
    fence_proxy_async_shared();
    const bool need_lo = __syncthreads_or(inexact) != 0;
    run_chunk<kF16, kK, kV, kP>(p, tk, smem, q8, s, t_begin, n, tps, b, h0, chunk, need_lo);
}

}  // namespace fakequant
}  // namespace mla
