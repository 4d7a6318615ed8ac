// Fake-quant MLA decode, sm_90a path (kind "fakequant_decode_sm90"): both products on wgmma, the
// raw cache tiles loaded by TMA into 128-byte-swizzled shared memory, K and V quantized there into
// their codes, P from registers. The numerics are decode_mma.cu's (spec/fakequant.md §2.1-2.5:
// codes exact in 16 bits, the per-tensor factors qk_eff and pv_eff applied to the fp32 results,
// the 32-token tiles, the fixed split schedule with the running max restarting per split, P
// quantized after the row sum, the open 16-token V tail, chunks of splits folded into one
// accumulator and merged by decode.cu's combine; P-quantized chunks of >= 128 tiles here), with
// two differences. (1) In the tile alternation on 64-key tiles (run_alt64, below) the two spec
// tiles of a 64-key tile enter one P V product, the P codes of each half times 2^(e - R) (its
// exponent against the tile's larger one) rounded to the cache dtype: exact where that factor is
// 1, else an error of at most 2^-9 (bf16) of those P values. (2) With p_qdq none, P enters
// P V rounded once to the cache dtype (upstream's `p.to(v.dtype) @ v`, FlashMLA's bf16 P) instead
// of decode_mma.cu's hi + lo halves, and the schedule of those calls does not depend on
// num_kv_splits: the running max restarts every 64 tiles (a "virtual split" of 2048 tokens from
// token 0) and a CTA takes G = ceil(ceil(tiles / 64) / S) of them, so that num_kv_splits changes
// nothing but the fp32 order of the final merge (without P quantization the split schedule is
// not part of the numerics, spec §2.4).
//
// Template parameters as decode_mma.cu's: kF16 (cache and MMA type float16, else bfloat16), kK,
// kV, kP the QdqMode of K, V, P; then kQ32 (q is fp32: without K and V quantization the feature
// split instead of the alternation, for the residual product of an inexact q). Shapes: kv_lora_rank 512, qk_rope_head_dim 64, page_size % 8 == 0
// (the host runs decode_mma.cu otherwise). Kernel parameters: MmaDecodeParams and the TMA
// descriptor of the cache (runtime/fakequant_decode.c: the 4-D tensor (576 columns, 1, page,
// num_blocks), boxes of 64 columns x R rows, R = min(largest power of two dividing page_size, 32),
// 128-byte swizzle).
//
// CTA: 64 heads of one request and chunk (grid: head blocks, slots, batch), two warpgroups. With a
// 16-bit q they take alternate 64-key tiles (run_alt64, below, with its own shared-memory layout;
// K and V quantized there through the dense fake-quant kernel's code hooks); with an fp32 q (the
// feature split, run_chunk) each computes a *partial* S of the whole 64 x 32 tile over half of the 576 features (warpgroup w:
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
//   stage) 229376 | 229408 bytes (the alternation's layout: 230960) + 1024 for alignment.
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
constexpr int kMxOff = kBarOff + 4 * 8;         // row maxima / sums of both warpgroups [2][64]
constexpr int kSmemUsed = kMxOff + 2 * kHeads * 4;
constexpr int kSmemBytes = 230960 + 1024;       // the larger layout (the alternation's, below)
constexpr int kKSteps = kD / 16 / 2;            // 18 k16 steps per warpgroup
constexpr int kVirtualTiles = 64;               // p none: the running max restarts every 64 tiles
// P quantized: chunks of >= 128 tiles (4096 keys; runtime/fakequant_kinds.h
// MLA__FQ_SM90_P_CHUNK_TILES, the host's slots): 64 measured 8 % (4k) / 17 % (16k) slower on the
// H200 (more CTA starts and partials), 256 the same as 128 at b 128 with half the CTAs for few
// long requests (docs/perf-notes.md).
constexpr int kPChunkTiles = 128;
static_assert(kSmemBytes == 231984, "runtime/fakequant_kinds.h MLA__FQ_DECODE_SM90_SMEM");
static_assert(kSmemUsed + 1024 <= kSmemBytes, "the feature split's layout fits");
static_assert(kSmemBytes <= 232448, "fits the sm_90 shared memory of one CTA");
static_assert(kStageOff % 1024 == 0 && kTileB % 1024 == 0, "swizzle atoms 1024-aligned");

// The feature split's named barriers: X both partials of a tile written; Y both read (the buffer
// may be written again); kBarWg + w: warpgroup w alone.
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
    if constexpr (kP != kNone) {   // decode_mma.cu's chunk_tiles with chunks of >= kPChunkTiles
        const int nt = (s + kTile - 1) / kTile;
        tps = nt ? (nt + splits - 1) / splits : 1;
        const int g = tps >= kPChunkTiles ? 1 : (kPChunkTiles + tps - 1) / tps;
        const long long b = (long long)c * g * tps, e = b + (long long)g * tps;
        begin = b < nt ? (int)b : nt;
        end = e < nt ? (int)e : nt;
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

// S = Q K^T over the k16 steps [ss0, ss0 + kSS) (Q from shared memory) and RoPE steps [32 + rope0,
// + kRope) (Q from registers, q8), K from the tile at kbuf; issued and committed, not waited on.
// The feature split: warpgroup w's partial (ss0 16 w, 16 steps, rope0 2 w, 2 steps, kstep_of);
// tile alternation: the full S (0, 32, 0, 4).
template <bool kF16, int kSS, int kRope>
__device__ __forceinline__ void issue_qk(float (&s)[4][4], const unsigned (&q8)[kRope][4],
                                         unsigned q, unsigned kbuf, int ss0, int rope0) {
    const unsigned long long qd0 = wgmma_desc_sw128(q, 16, 1024);
    const unsigned long long kd0 = wgmma_desc_sw128(kbuf, 16, 1024);
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < kSS; j++) {
        const int ks = ss0 + j, pc = ks >> 2, k = ks & 3;
        unsigned long long qd = qd0, kd = kd0;
        flashmla::sm90::opaque(qd), flashmla::sm90::opaque(kd);
        wgmma_m64n32k16_ss<kF16, 0>(s, qd + ((pc * kQPiece + k * 32) >> 4),
                                    kd + ((pc * kTPiece + k * 32) >> 4), j > 0);
    }
    unsigned long long kd = kd0;
    flashmla::sm90::opaque(kd);
#pragma unroll
    for (int j = 0; j < kRope; j++)
        wgmma_m64n32k16_rs<kF16, 0>(s, q8[j], kd + ((8 * kTPiece + (rope0 + j) * 32) >> 4), 1);
    wgmma_commit_group();
}

// The residual product of an fp32 q that is not exact in 16 bits (not the NVFP4 carrier):
// d = (q - fl16(q)) K^T over warpgroup w's features, the residuals read from global memory, by
// mma.sync m16n8k16 (its C fragment of warp wi is the wgmma accumulator layout of the warp's 16
// rows) with K fragments by ldmatrix from the swizzled tile at kbuf. Slow, outside the recipe.
template <bool kF16, bool kAll = false>   // kAll: all 36 k16 steps (else warpgroup w's 18)
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
    for (int j = 0; j < (kAll ? 2 * kKSteps : kKSteps); j++) {
        const int ks = kAll ? j : kstep_of(w, j);
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
#pragma unroll
        for (int it = 0; it < kTile * 36 / kWg; it++) {   // 9 chunks per thread, independent
            const int i = wt + it * kWg;
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
#pragma unroll
        for (int it = 0; it < kTile * 32 / kWg; it++) {   // 8 chunks per thread, independent
            const int i = wt + it * kWg;
            const int r = i / 32, c = 32 * w + i % 32;
            const unsigned off = toff(r, c);
            *reinterpret_cast<uint4 *>(raw + off) =
                mmadec::fp8_codes8<kF16>(*reinterpret_cast<const uint4 *>(raw + off), p.v_scale, rv);
        }
    } else if constexpr (kV == kNvfp4) {
        const float v6 = __fmul_rn(6.f, p.v_scale), rv6 = __frcp_rn(v6);
        // thread wt: features 256 w + 2 wt, + 1 (chunk 32 w + wt / 4, bytes 4 (wt % 4) and + 2),
        // one (group, feature) at a time (16 values: the register budget of the P V warpgroups)
        const int c = 32 * w + (wt >> 2), wb = (wt & 3) * 4;
#pragma unroll 1
        for (int it = 0; it < 4; it++) {
            const int g = it >> 1, fo = wb + 2 * (it & 1);
            float x[16], m = 0.f;
#pragma unroll
            for (int rr = 0; rr < 16; rr++) {
                const unsigned short u =
                    *reinterpret_cast<const unsigned short *>(raw + toff(16 * g + rr, c) + fo);
                x[rr] = mmadec::h2f<kF16>(u);
                m = fmaxf(m, fabsf(x[rr]));
            }
            const Nvfp4Scale sc = nvfp4_scale(m, p.v_scale, v6, rv6);
            const bool fast = nvfp4_fast(sc);
#pragma unroll
            for (int rr = 0; rr < 16; rr++) {
                const float v = fast ? nvfp4_code_fast(x[rr], sc) : nvfp4_code(x[rr], sc);
                *reinterpret_cast<unsigned short *>(raw + toff(16 * g + rr, c) + fo) =
                    (unsigned short)mmadec::f2h<kF16>(v);
            }
        }
    }
    fence_proxy_async_shared();
    named_barrier_sync(kBarWg + w, kWg);
}

// S to base-2 logits (times qk_eff), -inf for keys >= s_end (the selects only in a tile that
// reaches s_end); the row maxima over the quad into mx.
__device__ __forceinline__ void scale_mask(float (&x)[4][4], int tile, int s_end, float qk_eff,
                                           int lane, float (&mx)[2]) {
    mx[0] = mx[1] = neg_inf();
    if (tile * kTile + kTile <= s_end) {
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                x[j][e] = __fmul_rn(x[j][e], qk_eff);
                mx[e >> 1] = fmaxf(mx[e >> 1], x[j][e]);
            }
    } else {
        const int t0 = tile * kTile + (lane & 3) * 2;
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                x[j][e] = t0 + 8 * j + (e & 1) < s_end ? __fmul_rn(x[j][e], qk_eff) : neg_inf();
                mx[e >> 1] = fmaxf(mx[e >> 1], x[j][e]);
            }
    }
    mx[0] = quad_max(mx[0]), mx[1] = quad_max(mx[1]);
}

// A row's split bookkeeping (decode_mma.cu's), for the thread's two rows: mu the split's running
// max, E the exponent O and L are kept in, M the row's max so far.
struct RowSplit {
    float mu[2], E[2], M[2];
};

// A chunk's start: O zeroed (fenced before any product is issued), no row state, no row sums.
__device__ __forceinline__ void init_chunk(float (&o)[32][4], RowSplit &rs, float (&L)[2]) {
#pragma unroll
    for (int j = 0; j < 32; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    flashmla::sm90::reg_fence(o);
#pragma unroll
    for (int h = 0; h < 2; h++) rs.mu[h] = rs.E[h] = rs.M[h] = neg_inf(), L[h] = 0.f;
}

// One tile of row maxima mx (-inf: no key): the state moves on; f (the factor O and L take before
// the tile is added) and mu_e (the exponent the tile's p are taken against, +inf when the tile is
// not added: no key, or more than kSkip below the row's max) come back.
__device__ __forceinline__ void split_step(RowSplit &st, const float (&mx)[2], bool split_start,
                                           float (&f)[2], float (&mu_e)[2]) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        f[h] = 1.f;
        if (split_start) st.mu[h] = neg_inf();
        const float mn = fmaxf(st.mu[h], mx[h]);
        st.mu[h] = mn;
        bool use = mn != neg_inf();
        if (use) {
            if (st.E[h] == neg_inf()) {
                st.E[h] = st.M[h] = mn;
            } else if (fmaxf(st.M[h], mn) - mn > mmadec::kSkip) {
                use = false;
            } else {
                f[h] = exp2f(st.E[h] - mn);
                st.E[h] = mn, st.M[h] = fmaxf(st.M[h], mn);
            }
        }
        mu_e[h] = use ? mn : __int_as_float(0x7f800000);
    }
}

// p = 2^(x - mu_e) in place (0 for x = -inf and for every key of a tile not added: x - inf; the
// flush of subnormal p to 0 changes no quantization code and no sum beyond 2^-126), the
// unquantized row sums added to l.
__device__ __forceinline__ void exp_tile(float (&x)[4][4], const float (&mu_e)[2], float (&l)[2]) {
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            x[j][e] = flashmla::ex2(x[j][e] - mu_e[e >> 1]);
            l[e >> 1] += x[j][e];
        }
}

// P codes (after the row sum) of the tile's p as the A fragments of the two k16 steps of P V:
// pa[kk] holds keys [16 kk, +16) (8-key blocks 2 kk and 2 kk + 1), rows r and r + 8.
template <bool kF16, int kP>
__device__ __forceinline__ void p_codes(float (&x)[4][4], const MmaDecodeParams &p, float rp,
                                        float p6, float rp6, unsigned (&pa)[2][4]) {
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
}

// The chunk's partial (E, l, O pv_eff) of warpgroup w's O columns to the workspace (E, l: the
// thread's two rows, the same in both warpgroups; warpgroup 0 stores them).
__device__ __forceinline__ void store_partial(const MmaDecodeParams &p, const float (&o)[32][4],
                                              const float (&E)[2], const float (&l)[2], int b,
                                              int h0, int chunk, int w, int wi, int lane) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int r = wi * 16 + (lane >> 2) + 8 * h, head = h0 + r;
        if (head >= p.heads) continue;
        const long long row = ((long long)b * p.heads + head) * p.slots + chunk;
        float *acc = p.ws_acc + row * kRank + w * 256 + (lane & 3) * 2;
#pragma unroll
        for (int j = 0; j < 32; j++)
            *reinterpret_cast<float2 *>(acc + 8 * j) =
                make_float2(__fmul_rn(o[j][2 * h], p.pv_eff), __fmul_rn(o[j][2 * h + 1], p.pv_eff));
        if (w == 0 && (lane & 3) == 0) {
            const bool any = E[h] != neg_inf() && l[h] > 0.f;
            p.ws_ml[row * 2] = any ? E[h] : neg_inf();
            p.ws_ml[row * 2 + 1] = any ? l[h] : 0.f;
        }
    }
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
    float o[32][4], L[2];
    RowSplit rs;
    init_chunk(o, rs, L);
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
        issue_qk<kF16, 16, 2>(sn, q8, q_a, kb, 16 * w, 2 * w);
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

        // Scores (log2 domain), -inf past s; the row maxima over the quad.
        float mx[2];
        scale_mask(x, tile, s, p.qk_eff, lane, mx);
        float f[2], mu_e[2];
        split_step(rs, mx, tile % tps == 0, f, mu_e);
        L[0] *= f[0], L[1] *= f[1];
        exp_tile(x, mu_e, L);
        unsigned pa[2][4];
        p_codes<kF16, kP>(x, p, rp, p6, rp6, pa);

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

    // L is the whole row's in both warpgroups (the quad's sum).
    const float l[2] = {quad_sum(L[0]), quad_sum(L[1])};
    store_partial(p, o, rs.E, l, b, h0, chunk, w, wi, lane);
}

// ---- K and V not quantized (the kernel's kAlt): tile alternation on 64-key tiles ----------------
// A 64-key tile holds two spec tiles (its halves, keys [0, 32) and [32, 64)); the split
// bookkeeping runs per half (split_step64) and each half's P is quantized against its own split
// running max, as the spec's schedule says; the two halves then enter one P V product over the 64
// keys, each half's P codes times the factor g that brings it to the tile's common exponent R (the
// larger of the two halves' exponents; the other half's g is 1): P' = [QP(p_0) g_0, QP(p_1) g_1],
// rounded to the cache dtype. That rounding is exact where g is 1 (a half whose running max is
// R: the second half whenever no split starts in it and the first half has no larger max) and
// otherwise an error of at most 2^-9 (bf16; fp16 2^-11) of that half's P values (g <= 1, so no
// code overflows fp16). Shared memory (bytes, from the 1024-aligned base): Q 64 x 512 (8 pieces of
// 8192) 0 | tile buffers K0, K1 (9 pieces of 64 rows each, 73728) 65536, 139264 | P tiles sP0, sP1
// (64 x 64) 212992, 221184 | row maxima of warpgroup 0's tile [2 halves][64] 229376, of warpgroup
// 1's tile [2 pair parities][2 halves][64] 229888 | mbarriers K0 pieces 0-3, K0 pieces 4-8, K1
// pieces 0-3, K1 pieces 4-8 230912 | mbarriers R0, R1 (K quantized: the raw V reload of warpgroup
// 0's / 1's tile) 230944 | 230960.
constexpr int kAPiece = flashmla::sm90::kPieceBytes;   // 8192: 64 rows x 128 bytes
constexpr int kATileB = 9 * kAPiece;                    // 73728
constexpr int kAK0 = kHeads * kRank * 2;                // 65536
constexpr int kAK1 = kAK0 + kATileB;                    // 139264
constexpr int kAP0 = kAK1 + kATileB;                    // 212992
constexpr int kAP1 = kAP0 + kAPiece;                    // 221184
constexpr int kAMx0 = kAP1 + kAPiece;                   // 229376
constexpr int kAMx1 = kAMx0 + 2 * kHeads * 4;           // 229888
constexpr int kABar = kAMx1 + 4 * kHeads * 4;           // 230912
constexpr int kARBar = kABar + 4 * 8;                   // 230944: R0, R1 (K quantized)
constexpr int kAUsed = kARBar + 2 * 8;                  // 230960
static_assert(kAK0 % 1024 == 0 && kAK1 % 1024 == 0 && kAP0 % 1024 == 0 && kAP1 % 1024 == 0,
              "swizzle atoms 1024-aligned");
static_assert(kAUsed + 1024 <= kSmemBytes, "the launch's shared memory holds the alternation");

// Named barriers of the alternation: M0 / M1 the row maxima of warpgroup 0's / 1's tile written,
// P0 / P1 its P tile written, P0F warpgroup 1 done with sP0 (arrived by one warpgroup, waited for
// by the other); 6 and 7 are flashmla::sm90::zero_tail_rows'; E0, E1 the final row-sum exchange;
// Q0 warpgroup 0's S of the pair done (kAltSkew).
enum AltBarrier : int { kAM0 = 1, kAM1 = 2, kAP0Bar = 3, kAP1Bar = 4, kAP0Free = 5, kAE0 = 8,
                        kAE1 = 9, kAQ0 = 10 };
// Skew: warpgroup 1 issues its Q K^T once warpgroup 0's is done (barrier Q0), so that it runs
// under warpgroup 0's softmax and P codes, and warpgroup 1's under warpgroup 0's first P V,
// instead of both products together and both softmaxes together with the tensor cores idle.
constexpr bool kAltSkew = true;
// K and / or V quantized with a 16-bit q: the alternation too (its hooks, run_alt64), else the
// feature split (A/B switch).
constexpr bool kAltKv = true;
// Lazy rescaling of the alternation's O (split_step64's kLz; A/B switch).
constexpr bool kAltLazy = true;
// The factors F and g of split_step64 by ex2.approx (flashmla::ex2, as p itself: 2 ulp, subnormal
// results flushed: a factor below 2^-126 of O or of a half's P) instead of exp2f (its scaling
// steps for subnormal results: 3 more instructions each, 24 factors a pair and thread). A/B switch.
constexpr bool kAltFastEx2 = true;
__device__ __forceinline__ float alt_ex2(float x) {
    if constexpr (kAltFastEx2) return flashmla::ex2(x);
    else return exp2f(x);
}

// The key row thread wt of a warpgroup supplies for the 64-key tile at key t0 (row wt / 2): its
// block (-1: t >= t_stop, read as zeros) and its row in the page (the block-table read is issued
// here, a pair ahead of its TMA).
__device__ __forceinline__ BoxRef row_ref64(const MmaDecodeParams &p, const int *bt_row, int t0,
                                            int t_stop, int wt) {
    const int t = t0 + (wt >> 1);
    BoxRef r = {-1, 0};
    if (t < t_stop) {
        const int page = t / p.page_size;
        r.row = t - page * p.page_size;
        if (page < p.max_blocks) r.blk = bt_row[page];
    }
    return r;
}

// Pieces [kLo, kHi) of a 64-key tile into buf by TMA, completing on bar: the threads wt = 2 k R
// of the warpgroup (R the box rows, a power of two <= 32 dividing the page size, so that a box
// never straddles a page or a spec tile) issue the boxes of rows [k R, k R + R), thread 0 posts the
// bytes. kEvictFirst false: an evict_normal L2 policy (K quantized: the tile's raw V is read again
// by its reload after the Q K^T).
template <int kLo, int kHi, bool kEvictFirst = true>
__device__ __forceinline__ void load64(const MmaDecodeParams &p, const TmaDesc &tk, unsigned buf,
                                       unsigned bar, BoxRef r, int wt) {
    const int rows = min(p.page_size & -p.page_size, kTile);
    if (wt == 0) mbarrier_arrive_expect_tx(bar, (kHi - kLo) * kAPiece);
    if ((wt & (2 * rows - 1)) == 0) {
        const unsigned dst = buf + (wt >> 1) * 128;
        const unsigned long long policy = kEvictFirst
                                              ? flashmla::l2_policy_evict_first()
                                              : flashmla::sm90::l2_policy_evict_normal();
#pragma unroll
        for (int pc = kLo; pc < kHi; pc++)
            tma_load_4d(dst + pc * kAPiece, &tk, bar, pc * 64, 0, r.row, r.blk, policy);
    }
}

// S of the 64-key tile at key t0 to base-2 logits (times qk_eff), -inf for keys >= s_end; the row
// maxima of each half over the quad into mx[half][row].
__device__ __forceinline__ void scale_mask64(float (&x)[8][4], int t0, int s_end, float qk_eff,
                                             int lane, float (&mx)[2][2]) {
    mx[0][0] = mx[0][1] = mx[1][0] = mx[1][1] = neg_inf();
    if (t0 + 64 <= s_end) {
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                x[j][e] = __fmul_rn(x[j][e], qk_eff);
                mx[j >> 2][e >> 1] = fmaxf(mx[j >> 2][e >> 1], x[j][e]);
            }
    } else {
        const int c0 = t0 + (lane & 3) * 2;
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                x[j][e] = c0 + 8 * j + (e & 1) < s_end ? __fmul_rn(x[j][e], qk_eff) : neg_inf();
                mx[j >> 2][e >> 1] = fmaxf(mx[j >> 2][e >> 1], x[j][e]);
            }
    }
#pragma unroll
    for (int k = 0; k < 2; k++) mx[k][0] = quad_max(mx[k][0]), mx[k][1] = quad_max(mx[k][1]);
}

// The split bookkeeping of a 64-key tile, for the thread's two rows: its halves k (spec tiles;
// valid[k] false: past the chunk, no step; start[k]: a split starts there) move the split's running
// max mu and the row's max M as split_step does for one tile each (the same decisions: a half more
// than kSkip below M is not added), e[k] the exponent half k's p are taken against (+inf: not
// added); the tile's exponent R is the largest e of its added halves, g[k] = 2^(e[k] - R) (0: not
// added) the factor of half k's P and row sum, F = 2^(E - R) (1 for the chunk's first keys) the
// factor O and L take before the tile is added, and E = R after it.
// kLz > 0 (lazy rescaling, as flashmla/decode_sm90.cu's kLazyMax): E moves to R only when R
// exceeds it by more than kLz (or E is -inf), so that F is 1 and O's rescale is skipped on nearly
// every tile (with the exact E it ran on every tile: the split maxima move with the data); g[k] =
// 2^(e[k] - E) <= 2^kLz then. E is only the reference exponent of O and L (out = O / L, lse = E +
// log2 L), so the result does not depend on it but for the rounding of P' = QP(p) g to the MMA
// type, which is now one rounding of most P' values (at most 2^-9 of them in bf16, 2^-11 in
// fp16; the upstream kernels round QP(p) p_scale to the cache dtype once as well).
template <int kLz = 0>
__device__ __forceinline__ void split_step64(RowSplit &st, const float (&mx)[2][2],
                                             const bool (&start)[2], const bool (&valid)[2],
                                             float (&F)[2], float (&e)[2][2], float (&g)[2][2]) {
    // Branch-free (selects): a data-dependent branch here, between a P V product's issue and its
    // wait, made ptxas serialize the wgmma (C7520).
    const float pinf = __int_as_float(0x7f800000);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float R = neg_inf();
        bool use[2];
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const float mn = fmaxf(start[k] ? neg_inf() : st.mu[h], mx[k][h]);
            st.mu[h] = select(valid[k], mn, st.mu[h]);
            // the first added keys (M = -inf) pass the test: max(M, mn) - mn = 0
            use[k] = valid[k] && mn != neg_inf() && !(fmaxf(st.M[h], mn) - mn > mmadec::kSkip);
            st.M[h] = select(use[k], fmaxf(st.M[h], mn), st.M[h]);
            e[k][h] = select(use[k], mn, pinf);
            R = select(use[k], fmaxf(R, mn), R);
        }
        const bool any = R != neg_inf();
        if constexpr (kLz > 0) {
            const bool move = any && !(R <= st.E[h] + float(kLz));   // E = -inf: moves
            F[h] = select(move && st.E[h] != neg_inf(), alt_ex2(st.E[h] - R), 1.f);
            st.E[h] = select(move, R, st.E[h]);
            R = st.E[h];
        } else {
            F[h] = select(any && st.E[h] != neg_inf(), alt_ex2(st.E[h] - R), 1.f);
            st.E[h] = select(any, R, st.E[h]);
        }
#pragma unroll
        for (int k = 0; k < 2; k++) g[k][h] = select(use[k], alt_ex2(e[k][h] - R), 0.f);
    }
}

// nvfp4_code of a p in [0, 1] with a finite 1 / sb or sb = 0 (the host runs this kernel with P
// NVFP4 only for p_scale >= 2^-100, so sb = sc p_scale >= 2^-109 when not 0): nvfp4_code_fast's
// steps without the sign and the infinite-quotient case (p rsb <= 2^109), and 0 for sb = 0 by a
// select, so no branch per element.
__device__ __forceinline__ float p_code_nvfp4(float x, const Nvfp4Scale &s) {
    const float q0 = __fmul_rn(x, s.rsb);
    const float q1 = __fmaf_rn(__fmaf_rn(-q0, s.sb, x), s.rsb, q0);
    return select(s.sb == 0.f, 0.f, e2m1_mag_fast(q1) * s.sc);
}

// p = 2^(x - e) of each half in place, the unquantized row sums of the halves times g added to lw,
// then the P codes (after the row sum) times g, rounded to the MMA type of P V (kF16M: float16,
// with V quantized, whose codes are fp16; else the cache dtype), as the A fragments of the 4 k16
// steps of P V (pa[kk]: keys [16 kk, +16), rows r and r + 8). kF16: the cache dtype (NVFP4 P's
// carrier).
template <bool kF16, int kP, bool kF16M = kF16>
__device__ __forceinline__ void p_codes64(float (&x)[8][4], const float (&e)[2][2],
                                          const float (&g)[2][2], const MmaDecodeParams &p,
                                          float rp, float p6, float rp6, float (&lw)[2],
                                          unsigned (&pa)[4][4]) {
    float l[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int c = 0; c < 4; c++) {
            x[j][c] = flashmla::ex2(x[j][c] - e[j >> 2][c >> 1]);
            l[j >> 2][c >> 1] += x[j][c];
        }
#pragma unroll
    for (int h = 0; h < 2; h++) lw[h] += g[0][h] * l[0][h] + g[1][h] * l[1][h];
#pragma unroll
    for (int h = 0; h < 2; h++) {
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {   // keys [16 kk, +16): 8-key blocks 2 kk, 2 kk + 1
            Nvfp4Scale bs = {0.f, 0.f, 0.f};
            if constexpr (kP == kNvfp4) {   // one NVFP4 block (16 keys)
#pragma unroll
                for (int j = 2 * kk; j < 2 * kk + 2; j++)
#pragma unroll
                    for (int c = 2 * h; c < 2 * h + 2; c++)
                        x[j][c] = mmadec::h2f<kF16>(mmadec::f2h<kF16>(x[j][c]));
                const float bam = quad_max(fmaxf(fmaxf(x[2 * kk][2 * h], x[2 * kk][2 * h + 1]),
                                                 fmaxf(x[2 * kk + 1][2 * h], x[2 * kk + 1][2 * h + 1])));
                bs = nvfp4_scale(bam, p.p_scale, p6, rp6);
            }
#pragma unroll
            for (int j = 2 * kk; j < 2 * kk + 2; j++) {
                const float x0 = x[j][2 * h], x1 = x[j][2 * h + 1], gg = g[j >> 2][h];
                float c0, c1;
                if constexpr (kP == kFp8) {
                    const unsigned u = e4m3x2_f16x2(fp8_scaled(x0, p.p_scale, rp),
                                                    fp8_scaled(x1, p.p_scale, rp));
                    c0 = mmadec::h2f<true>(u), c1 = mmadec::h2f<true>(u >> 16);
                } else if constexpr (kP == kNvfp4) {
                    c0 = p_code_nvfp4(x0, bs), c1 = p_code_nvfp4(x1, bs);
                } else {
                    c0 = x0, c1 = x1;
                }
                pa[kk][(j & 1) * 2 + h] = mmadec::pack2<kF16M>(c0 * gg, c1 * gg);
            }
        }
    }
}

// The P fragments pa into the swizzled 64 x 64 P tile (rows r0 and r0 + 8 of the thread).
__device__ __forceinline__ void store_pa(unsigned char *tile, const unsigned (&pa)[4][4], int r0,
                                         int lane) {
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = r0 + 8 * h;
            *reinterpret_cast<unsigned *>(tile + r * 128 + ((j ^ (r & 7)) << 4) + (lane & 3) * 4) =
                pa[j >> 1][(j & 1) * 2 + h];
        }
}

// The kernel's first two 64-key tiles of the chunk (spec tiles [t_begin, t_begin + n)), warpgroup
// 0 loading pieces 0-3 of both, warpgroup 1 pieces 4-8; mbarriers initialized (kEvictFirst:
// load64's).
template <bool kEvictFirst>
__device__ __forceinline__ void alt_prologue(const MmaDecodeParams &p, const TmaDesc &tk,
                                             unsigned base, int s, int t_begin, int n, int b) {
    const int wt = threadIdx.x & (kWg - 1), w = threadIdx.x >> 7;
    const int *bt_row = p.block_table + (long long)b * p.bt_stride;
    const int key0 = t_begin * kTile, s_eff = min(s, (t_begin + n) * kTile);
    const BoxRef ra = row_ref64(p, bt_row, key0, s_eff, wt);
    const BoxRef rb = row_ref64(p, bt_row, key0 + 64, s_eff, wt);
    const unsigned k0 = base + kAK0, k1 = base + kAK1, bar = base + kABar;
    if (w == 0) {
        load64<0, 4, kEvictFirst>(p, tk, k0, bar, ra, wt);
        if (n > 2) load64<0, 4, kEvictFirst>(p, tk, k1, bar + 16, rb, wt);
    } else {
        load64<4, 9, kEvictFirst>(p, tk, k0, bar + 8, ra, wt);
        if (n > 2) load64<4, 9, kEvictFirst>(p, tk, k1, bar + 24, rb, wt);
    }
}

// The chunk's 64-key tiles go in pairs, as in the dense decode (flashmla/decode_sm90.cu
// attend_chunk90): tile a = 2 j in K0 (warpgroup 0 computes its S), tile b = 2 j + 1 in K1
// (warpgroup 1); warpgroup w owns O columns [256 w, +256). Per pair:
//   WG0: maxima of a's halves -> M0; bookkeeping of a; O_L *= F_a; P'_a -> sP0 (once warpgroup 1
//        freed it, P0F), P0; O_L += P'_a V_a,L (P from registers); after M1 the bookkeeping of b,
//        O_L *= F_b, O_L += sP1 V_b,L; the next S_a.
//   WG1: maxima of b's halves (published after M0, so that a barrier's arrivals never cross a
//        pair); after M0 the bookkeeping of a and b; O_R *= F_a; P'_b -> sP1, P1; O_R += sP0
//        V_a,R; O_R *= F_b; O_R += P'_b V_b,R (registers); the next S_b.
// Both run the bookkeeping of both tiles in the same order (identical state); each keeps the row
// sums of its own tiles (scaled by the same factors), added at the end. A buffer's pieces are
// refilled as soon as their last reader is done: K0 pieces 0-3 by warpgroup 0 after P'_a V_a,L,
// pieces 4-8 by warpgroup 1 after sP0 V_a,R; K1 pieces 0-3 by warpgroup 0 after sP1 V_b,L,
// pieces 4-8 by warpgroup 1 after P'_b V_b,R. V rows past the chunk's keys of a tail tile are
// zeroed before P V (TMA reads whole boxes).
// K and V quantized (kK, kV; the hooks of flashmla/decode_sm90.cu attend_chunk90_fq, whose
// quantizers they call): the warpgroup that computes a tile's S writes the K codes of its 9
// pieces in place once each share has landed (qk_tile's hook), and after its S reloads the tile's
// raw V (pieces 0-7, mbarrier R0 / R1; the tile loads then keep an evict_normal L2 policy), waited
// for (and its tail rows zeroed) before its P is published, so that the other warpgroup's P V
// reads raw V too; each warpgroup writes the V codes (fp16) of its own O columns of a tile right
// before its P V on them, and P V runs in fp16 (P' rounded to fp16 instead of the cache dtype).
// The factors k_scale and p_scale v_scale are qk_eff's and pv_eff's, as in run_chunk.
template <bool kF16, int kK, int kV, int kP>
__device__ __forceinline__ void run_alt64(const MmaDecodeParams &p, const TmaDesc &tk,
                                          unsigned char *smem, const unsigned (&q8)[4][4], int s,
                                          int t_begin, int n, int tps, int b, int h0, int chunk) {
    constexpr bool kKq = kK != kNone;
    constexpr bool kF16P = kV != kNone || kF16;   // P and V of P V (V codes: fp16)
    constexpr bool kEF = !kKq;                    // evict_first tile loads (read once)
    // Lazy E (split_step64) with P quantized: P' = QP(p) g <= max code 2^kLz, within fp16's range
    // where P V is fp16 (fp8 codes <= 448: 2^7; NVFP4 codes <= 2688: 2^4). Not without P
    // quantization: E would then carry over the virtual splits a chunk folds, and the rounding
    // of P' with it, so that num_kv_splits (which sets the folding) would move the results by
    // more than the merge order (test splits_only_reorder_no_quant).
    constexpr int kLz = !kAltLazy || kP == kNone ? 0 : !kF16P ? 8 : kP == kFp8 ? 7 : 4;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wi = warp & 3, w = warp >> 2;
    const int wt = tid & (kWg - 1);
    const unsigned base = flashmla::smem_addr(smem);
    const unsigned q_a = base + kQOff, k0 = base + kAK0, k1 = base + kAK1;
    const unsigned bar0 = base + kABar, bar1 = bar0 + 16;
    float *mx0s = reinterpret_cast<float *>(smem + kAMx0);
    float *mx1s = reinterpret_cast<float *>(smem + kAMx1);
    const int *bt_row = p.block_table + (long long)b * p.bt_stride;
    const int key0 = t_begin * kTile, s_eff = min(s, (t_begin + n) * kTile);
    const int n64 = (n + 1) / 2;
    const int r0 = wi * 16 + (lane >> 2);
    float o[32][4], L[2];
    RowSplit rs;
    init_chunk(o, rs, L);
    const float rp = __frcp_rn(p.p_scale);
    const float p6 = __fmul_rn(6.f, p.p_scale), rp6 = __frcp_rn(p6);
    unsigned phase[2] = {0, 0};

    // K / V quantization: this warpgroup's tile and its reload mbarrier (R0 / R1, parity rphase).
    unsigned char *const own = smem + (w == 0 ? kAK0 : kAK1);
    const unsigned own_addr = w == 0 ? k0 : k1, rbar = base + kARBar + 8 * w;
    unsigned rphase = 0;
    BoxRef rl = {-1, 0};   // the rows of the own tile (its reload)
    if constexpr (kKq) rl = row_ref64(p, bt_row, key0 + 64 * w, s_eff, wt);
    // K codes of the own tile's pieces [lo, hi), after their mbarrier (qk_tile's hook)
    auto k_codes = [&](int lo, int hi) {
        flashmla::sm90::quantize_k_pieces<kF16, kK>(own, lo, hi, p.k_scale, wt, w, p.codes_quick & 1);
    };
    // K quantized: once the own S is done, the own tile's raw V again
    auto reload = [&] {
        if constexpr (kKq) load64<0, 8, false>(p, tk, own_addr, rbar, rl, wt);
    };
    // K quantized: waits for that raw V (before the own P is published), then zeroes its rows past
    // the chunk (the tile at key t0)
    auto raw_v_back = [&](int t0) {
        if constexpr (kKq) {
            mbarrier_wait_parity(rbar, rphase);
            rphase ^= 1;
            if (t0 + 64 > s_eff) flashmla::sm90::zero_tail_rows(own, s_eff - t0, w, wt);
        }
    };
    // V quantized: the codes of this warpgroup's V columns of the tile at buf
    auto v_codes = [&](unsigned char *buf) {
        flashmla::sm90::quantize_v_half<kF16, kV>(buf, w, p.v_scale, wt, w, (p.codes_quick & 2) != 0);
    };

    for (int ta = 0; ta < n64; ta += 2) {
        const int tb = ta + 1, par = (ta >> 1) & 1;
        const bool has_b = tb < n64, next_a = ta + 2 < n64, next_b = tb + 2 < n64;
        // The next pair's block-table entries, a pair ahead of their loads.
        BoxRef na = {-1, 0}, nb = {-1, 0};
        if (next_a) na = row_ref64(p, bt_row, key0 + (ta + 2) * 64, s_eff, wt);
        if (next_b) nb = row_ref64(p, bt_row, key0 + (tb + 2) * 64, s_eff, wt);
        // The spec tiles of the halves: a's are 2 ta, 2 ta + 1 of the chunk, b's 2 tb, 2 tb + 1.
        const int sa = t_begin + 2 * ta, sb = sa + 2;
        const bool va[2] = {true, 2 * ta + 1 < n}, vb[2] = {has_b, 2 * tb + 1 < n};
        const bool sta[2] = {sa % tps == 0, (sa + 1) % tps == 0};
        const bool stb[2] = {sb % tps == 0, (sb + 1) % tps == 0};
        float Fa[2], ea[2][2], ga[2][2], Fb[2], eb[2][2], gb[2][2], mxa[2][2], mxb[2][2];
        float lw[2] = {0.f, 0.f}, sc[8][4];
        unsigned pa[4][4];
        // This warpgroup's S (at the top of the pair, not at the end of the last one: ptxas
        // serialized every wgmma of the kernel, C7520, with a first S before the loop).
        if (w == 0) {
            flashmla::sm90::qk_tile<kF16, false>(sc, q8, q_a, k0, bar0, phase[0], k_codes);
            phase[0] ^= 1;
            if (kAltSkew) named_barrier_arrive(kAQ0, kThreads);
            reload();
        } else {
            if (kAltSkew) named_barrier_sync(kAQ0, kThreads);   // warpgroup 0's S done
            if (has_b) {
                flashmla::sm90::qk_tile<kF16, false>(sc, q8, q_a, k1, bar1, phase[1], k_codes);
                phase[1] ^= 1;
                reload();
            }
        }
        if constexpr (kKq) rl = w == 0 ? na : nb;
        if (w == 0) {
            const int t0 = key0 + ta * 64;
            if (!kKq && t0 + 64 > s_eff)
                flashmla::sm90::zero_tail_rows(smem + kAK0, s_eff - t0, 0, wt);
            scale_mask64(sc, t0, s_eff, p.qk_eff, lane, mxa);
            if ((lane & 3) == 0) {
#pragma unroll
                for (int k = 0; k < 2; k++)
                    mx0s[k * kHeads + r0] = mxa[k][0], mx0s[k * kHeads + r0 + 8] = mxa[k][1];
            }
            named_barrier_arrive(kAM0, kThreads);
            split_step64<kLz>(rs, mxa, sta, va, Fa, ea, ga);
            flashmla::sm90::scale_o(o, Fa);
            p_codes64<kF16, kP, kF16P>(sc, ea, ga, p, rp, p6, rp6, lw, pa);
            raw_v_back(t0);
            if (ta > 0) named_barrier_sync(kAP0Free, kThreads);   // the last pair's sP0 read
            store_pa(smem + kAP0, pa, r0, lane);
            fence_proxy_async_shared();
            named_barrier_arrive(kAP0Bar, kThreads);
            v_codes(smem + kAK0);
            flashmla::sm90::reg_fence(o);
            wgmma_fence();
            flashmla::sm90::pv_issue_rs<kF16P>(o, pa, k0, 0);
            wgmma_commit_group();
            named_barrier_sync(kAM1, kThreads);   // tile b's maxima (and its Q K^T done)
            const float *m1 = mx1s + par * 2 * kHeads;
#pragma unroll
            for (int k = 0; k < 2; k++)
                mxb[k][0] = m1[k * kHeads + r0], mxb[k][1] = m1[k * kHeads + r0 + 8];
            split_step64<kLz>(rs, mxb, stb, vb, Fb, eb, gb);
#pragma unroll
            for (int h = 0; h < 2; h++) L[h] = (L[h] * Fa[h] + lw[h]) * Fb[h];
            wgmma_wait_group<0>();
            flashmla::sm90::reg_fence(o);
            if (next_a) load64<0, 4, kEF>(p, tk, k0, bar0, na, wt);   // V_a,L consumed
            flashmla::sm90::scale_o(o, Fb);
            if (has_b)
                flashmla::sm90::pv_remote<kF16P>(o, kAP1Bar, base + kAP1, k1, 0,
                                                 [&] { v_codes(smem + kAK1); });
            if (next_b) load64<0, 4, kEF>(p, tk, k1, bar1, nb, wt);   // V_b,L consumed
        } else {
            const int t0 = key0 + tb * 64;
            mxb[0][0] = mxb[0][1] = mxb[1][0] = mxb[1][1] = neg_inf();
            if (has_b) {
                if (!kKq && t0 + 64 > s_eff)
                    flashmla::sm90::zero_tail_rows(smem + kAK1, s_eff - t0, 1, wt);
                scale_mask64(sc, t0, s_eff, p.qk_eff, lane, mxb);
            }
            float *m1 = mx1s + par * 2 * kHeads;
            if ((lane & 3) == 0) {
#pragma unroll
                for (int k = 0; k < 2; k++)
                    m1[k * kHeads + r0] = mxb[k][0], m1[k * kHeads + r0 + 8] = mxb[k][1];
            }
            named_barrier_sync(kAM0, kThreads);   // tile a's maxima (and its Q K^T done)
            named_barrier_arrive(kAM1, kThreads);
#pragma unroll
            for (int k = 0; k < 2; k++)
                mxa[k][0] = mx0s[k * kHeads + r0], mxa[k][1] = mx0s[k * kHeads + r0 + 8];
            split_step64<kLz>(rs, mxa, sta, va, Fa, ea, ga);
            split_step64<kLz>(rs, mxb, stb, vb, Fb, eb, gb);
            flashmla::sm90::scale_o(o, Fa);
            if (has_b) {
                p_codes64<kF16, kP, kF16P>(sc, eb, gb, p, rp, p6, rp6, lw, pa);
                raw_v_back(t0);
                store_pa(smem + kAP1, pa, r0, lane);
                fence_proxy_async_shared();
                named_barrier_arrive(kAP1Bar, kThreads);
            }
            flashmla::sm90::pv_remote<kF16P>(o, kAP0Bar, base + kAP0, k0, 1,
                                             [&] { v_codes(smem + kAK0); });
            if (next_a) {
                named_barrier_arrive(kAP0Free, kThreads);
                load64<4, 9, kEF>(p, tk, k0, bar0 + 8, na, wt);   // V_a,R consumed
            }
#pragma unroll
            for (int h = 0; h < 2; h++) L[h] = L[h] * Fa[h] * Fb[h] + lw[h];
            flashmla::sm90::scale_o(o, Fb);
            if (has_b) {
                v_codes(smem + kAK1);
                flashmla::sm90::pv_rs_wait<kF16P>(o, pa, k1, 1);
            }
            if (next_b) load64<4, 9, kEF>(p, tk, k1, bar1 + 8, nb, wt);   // V_b,R consumed
        }
    }
    // Row sums: both warpgroups' parts, added in the same order (mx0s free once both are here).
    const float lq[2] = {quad_sum(L[0]), quad_sum(L[1])};
    named_barrier_sync(kAE0, kThreads);
    if ((lane & 3) == 0) mx0s[w * kHeads + r0] = lq[0], mx0s[w * kHeads + r0 + 8] = lq[1];
    named_barrier_sync(kAE1, kThreads);
    const float l[2] = {mx0s[r0] + mx0s[kHeads + r0], mx0s[r0 + 8] + mx0s[kHeads + r0 + 8]};
    store_partial(p, o, rs.E, l, b, h0, chunk, w, wi, lane);
}

}  // namespace sm90dec

// Grid (heads / 64, slots, batch), 256 threads, dynamic shared memory sm90dec::kSmemBytes.
// kQ32: q is fp32 (the NVFP4 carrier, or a plain fp32 q, whose residual product only the feature
// split has).
template <bool kF16, int kK, int kV, int kP, bool kQ32>
__global__ void __launch_bounds__(sm90dec::kThreads, 1) decode_sm90_kernel(
    const __grid_constant__ mmadec::MmaDecodeParams p, const __grid_constant__ sm90dec::TmaDesc tk) {
    using namespace sm90dec;
    constexpr int kStages = kK == kNone ? 4 : 3;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char *smem = flashmla::align_smem_1024(smem_raw);
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
    // The structure: tile alternation on 64-key tiles (run_alt64) with a 16-bit q (K and V
    // quantized too with kAltKv: each warpgroup quantizes the V columns it multiplies, of both
    // tiles; all fp8 at L 4096 measured 864 us there against 1984 on decode_mma.cu, tenth
    // session), else the feature split (run_chunk: with an fp32 q it adds the residual product
    // of a q not exact in 16 bits, which in the alternation made ptxas serialize every wgmma,
    // C7520).
    constexpr bool kAlt = (kAltKv || (kK == kNone && kV == kNone)) && !kQ32;
    if constexpr (kAlt) {   // the first two 64-key tiles (a 16-bit q needs no vote)
        if (tid < 6) mbarrier_init(base + kABar + tid * 8, 1);   // K0, K1 shares; R0, R1
        __syncthreads();
        alt_prologue<kK == kNone>(p, tk, base, s, t_begin, n, b);
    } else {
        if (tid < kStages) mbarrier_init(base + kBarOff + tid * 8, 1);
        __syncthreads();
        if ((tid >> 5) == 0)
            for (int i = 0; i < kStages && i < n; i++)
                issue_tile(p, tk, box_of(p, p.block_table + (long long)b * p.bt_stride, s,
                                         t_begin + i, tid & 31),
                           base + kStageOff + i * kTileB, base + kBarOff + i * 8, tid & 31);
    }

    // Q rows of heads h0.. (16-bit; fp32 q rounded, with the vote on exactness): features 0-511
    // swizzled in shared memory, the RoPE features of warpgroup w's two k16 steps (kstep_of) as
    // A fragments in registers (the alternation: all four).
    bool inexact = false;
    const int qa = p.q_fp32 ? 4 : 8;   // elements of 16 bytes
    const bool q16 = (reinterpret_cast<unsigned long long>(p.q) & 15) == 0 &&
                     p.q_stride_b % qa == 0 && p.q_stride_h % qa == 0;
    if (q16 && !p.q_fp32) {   // 16-bit q: cp.async, all 16 chunks of a thread in flight at once
        const unsigned short *q = static_cast<const unsigned short *>(p.q) + (long long)b * p.q_stride_b;
#pragma unroll
        for (int i = tid; i < kHeads * (kRank / 8); i += kThreads) {
            const int r = i / (kRank / 8), c = i - r * (kRank / 8);
            const bool ok = h0 + r < p.heads;
            flashmla::cp_async_16(base + kQOff + flashmla::sm90::tile_off(r, c),
                                  q + (long long)(ok ? h0 + r : 0) * p.q_stride_h + c * 8, ok);
        }
        flashmla::cp_async_commit();
    } else if (q16) {
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
    constexpr int kQ8 = kAlt ? 4 : 2;
    unsigned q8[kQ8][4];
    {
        const int w = tid >> 7, wi = (tid >> 5) & 3, lane = tid & 31;
        const int ra = wi * 16 + (lane >> 2), fb = (lane & 3) * 2;
#pragma unroll
        for (int j = 0; j < kQ8; j++) {
            const int f = (kAlt ? 32 + j : kstep_of(w, 16 + j)) * 16 + fb;
            q8[j][0] = mmadec::q_pair<kF16>(p, b, h0 + ra, f, inexact);
            q8[j][1] = mmadec::q_pair<kF16>(p, b, h0 + ra + 8, f, inexact);
            q8[j][2] = mmadec::q_pair<kF16>(p, b, h0 + ra, f + 8, inexact);
            q8[j][3] = mmadec::q_pair<kF16>(p, b, h0 + ra + 8, f + 8, inexact);
        }
    }
    flashmla::cp_async_wait<0>();
    fence_proxy_async_shared();
    const bool need_lo = __syncthreads_or(inexact) != 0;
    if constexpr (kAlt)
        run_alt64<kF16, kK, kV, kP>(p, tk, smem, q8, s, t_begin, n, tps, b, h0, chunk);
    else
        run_chunk<kF16, kK, kV, kP>(p, tk, smem, q8, s, t_begin, n, tps, b, h0, chunk, need_lo);
}

}  // namespace fakequant
}  // namespace mla
