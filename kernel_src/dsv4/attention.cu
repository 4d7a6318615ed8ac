// DeepSeek-V4 MLA decode/verify layer up to the sparse attention: one persistent, cooperatively
// launched kernel (grid = number of SMs, 256 threads, all CTAs co-resident), four phases separated
// by grid barriers. The math is spec/dsv4.md §2.2-§2.4 with activation quantization on (A1).
//
// Template parameters (the spec "dsv4_attention" fixes them):
//   kH           hidden size (a multiple of 128; K of the wq_a / wkv / kv_gate GEMMs)
//   kPage        rows per kv_cache page (a power of two)
//   kDraft       tokens per request in verify (0: unknown); a request's tokens are the aligned
//                groups of kDraft consecutive tokens, else any token may share its request
//   kHca         1 on HCA layers (kv_gate GEMM, c128 compressor, compressed rows), 0 on SWA
//
// Constants: QL 1024 (q_lora), KVL 512, 64 heads x 512 dims (448 NoPE + 64 RoPE), ring 128.
//
// Phase 1 (tiles of 64 tokens x 64 outputs, GEMM of common/gemm.cuh):
//   qa[t]      = bf16(mxq(x[t]) @ Wd_qa^T)          [T, 1024] bf16  (workspace qa)
//   kv[t]      = bf16(mxq(x[t]) @ Wd_kv^T)          [T, 512]  bf16  (workspace kv)
//   HCA: g[t]  = x[t] @ wkv_gate^T (fp32)           [T, 1024] fp32  (workspace kv_gate)
//   With one m-tile (T <= 64) the 24 (HCA 40) tiles are fewer than the CTAs: split-K, each tile's
//   K cut into up to 8 slices so that tiles * slices <= gridDim.x; a slice writes its fp32
//   partial to part_k, the tile's last slice (bank counter) sums them in slice order and stores.
//   T <= 64 (H <= 8192): the weight-streaming GEMMs instead (phase_projections_stream below).
// --- barrier 0 (T > 16; at T <= 16 each phase-2 item waits for the phase-1 blocks it reads,
//     counted on bank words 6..8)
// Phase 2 (a warp per token row; a CTA per firing token):
//   qr[t]      = mxq(bf16(rmsnorm(qa[t], q_norm_weight, q_eps)))      [T, 1024] bf16 (workspace qr)
//   kv_cache row swa_loc[t] (skipped if < 0) = fp8 row of
//                bf16(rope(bf16(rmsnorm(kv[t], kv_norm_weight, kv_eps))[448:], freqs_real[p]))
//   HCA, tokens with p % 128 == 127 and c128_out_loc[t] >= 0: the compressor over ring rows
//                base + j (base = kv_gate_ring_row[t] - 127, position p - 127 + j), each taken
//                from g[u] when token u of this launch (same request: same ring base) has that
//                position, else from kv_score_ring (older launches): A5's sequential semantics.
//                pooled = bf16(sum_j softmax_j(score + c128_ape[j]) * kv) per channel, then
//                RMSNorm (c128_norm_weight, kv_eps), RoPE at c128_freqs_real[p - 127], fp8 row
//                into c128_pool at c128_out_loc[t].
// --- barrier 1 (T > 16; at T <= 16 phase 3 waits on a count of the qr rows instead)
// Phase 3: q[t] = bf16(qr[t] @ Wd_qb^T) into q_or_x [T, 32768].
//          Tiles of 64 x 64 (T <= 64: 64 x 128), a CTA's tiles through one carried pipeline;
//          T <= 64: the weight-streaming GEMM (kQStreamTokens).
// --- barrier 2 (all KV / c128 writes and all q are visible: A6)
// HCA: kv_score_ring row kv_gate_ring_row[t] = g[t] (of two tokens on one row, the later
//          position wins), after every compressor has read the ring.
// Phase 4: work items (token t, head group of 16 (T <= 16) or 32, split s) per the split-KV
//          contract of runtime/internal.h:
//          Q = bf16(rope(rmsnorm(q_h, eps q_eps)[448:], freqs_real[p]));
//          rows g < rows: SWA slots of the plan (slot0 + g if g < len0, else slot1 + g - len0),
//          rows..rows + c128_attn_len[t]: c128 row j at c128_page_table[t, j / B] * B + j % B;
//          scores = sm_scale * Q K^T over fp8-dequantized rows (K == V), one softmax with the sink;
//          unsplit tokens: O (normalized with the sink) -> q_or_x[t] bf16; split tokens: part_o,
//          part_lse (no sink). The last CTA to leave zeroes the barrier bank if reset_barriers.
//
// Buffers (all device pointers; the kernel never reads through the non-coherent path what it
// writes itself):
//   q_or_x     bf16 [T, 32768] contiguous: q staging, then O of unsplit tokens.
//   x          bf16 row t at x + t * x_stride, H columns, 16-byte aligned rows.
//   kv_cache   page P at kv_cache + P * kv_page_bytes: kPage rows x 576 B (448 e4m3 | 64 bf16),
//              then kPage 8-byte scale slots (7 ue8m0 bytes of the 64-wide NoPE tiles, pad 0).
//   c128_pool  the same layout with 2^c128_page_shift rows and c128_page_bytes per page.
//   wq_a / wkv / wq_b  e4m3 [N, K] with SfAtom ue8m0 scales (§3.3); wkv_gate bf16 [1024, H].
//   kv_score_ring fp32 [R, 1024] ([kv | score], raw); c128_ape fp32 [128, 512].
//   freqs_real / c128_freqs_real fp32 [max_pos, 64] interleaved (cos, sin).
//   plan       int4 [T] (slot0, len0, slot1, rows) of this kind (mla_attention_plan).
//   bank       the kind's barrier bank: words 0..2 the phase barriers, word 3 the exit count,
//              word 4 the x-quantized count, word 5 the qr-row count (T <= 16), words 6..8 the
//              qa / kv / kv_gate blocks done (words 4..8 zeroed by block 0 after barrier 2),
//              words 64..127 the phase-1 split-K tile / block counters (each back to 0 after
//              its tile).
//   part_o     fp32 [T, S, 64, 512], part_lse fp32 [T, S, 64] (split launches: T <= 16, S =
//              p.split parts per token, runtime/internal.h's mla__dsv4_kv_splits).
//   part_k     fp32 [slices, T, 2560] phase-1 split-K partials ([qa | kv | kv_gate] columns).
#include <cuda_bf16.h>

#include "common/bf16.cuh"
#include "common/fp8.cuh"
#include "common/gemm.cuh"
#include "common/stream_gemm.cuh"
#include "common/grid_barrier.cuh"
#include "common/pdl.cuh"
#include "dsv4/stream_bf16.cuh"
#include "dsv4/trace.cuh"
#include "common/ptx_mma.cuh"
#include "common/rope.cuh"
#include "common/softmax.cuh"

namespace mla {
namespace dsv4 {

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kQL = 1024, kKVL = 512, kHeads = 64, kHeadDim = 512, kNope = 448;
constexpr int kQCols = kHeads * kHeadDim;
constexpr int kRowBytes = 576, kSlotBytes = 8;  // one KV row, one scale slot
constexpr int kBarriers = 3, kExitWord = kBarriers;  // bank words: barriers, exit count
constexpr int kSmemBudget = 190464;             // DSV4_ATTN_SMEM of runtime/dsv4_attention.c

__host__ __device__ constexpr int ilog2(int v) { return v <= 1 ? 0 : 1 + ilog2(v / 2); }

// The kernel's argument, field for field runtime/dsv4_attention.c's attention_params.
struct Params {
    __nv_bfloat16 *q_or_x;
    const __nv_bfloat16 *x;
    long long x_stride;
    unsigned char *kv_cache;
    long long kv_page_bytes;
    const int *positions;
    const float *freqs;
    const unsigned char *wq_a, *wq_a_sf;
    const __nv_bfloat16 *q_norm_w;
    const unsigned char *wq_b, *wq_b_sf;
    const unsigned char *wkv, *wkv_sf;
    const __nv_bfloat16 *kv_norm_w;
    const int *swa_loc;
    const float *attn_sink;
    const int4 *plan;
    unsigned *bank;
    __nv_bfloat16 *qa, *kv, *qr;
    float *kv_gate, *part_o, *part_lse, *part_k;
    const __nv_bfloat16 *wkv_gate;
    float *ring;
    const int *ring_row;
    const float *ape;
    const __nv_bfloat16 *c128_norm_w;
    const float *c128_freqs;
    const int *c128_out_loc;
    unsigned char *c128_pool;
    long long c128_page_bytes;
    const int *c128_page_table;
    long long c128_pt_stride;
    const int *c128_attn_len;
    int T, split, reset_barriers, c128_page_shift;  // split: KV parts per token (0: unsplit)
    float sm_scale, q_eps, kv_eps;
    int params_bytes;
};

// ---- row helpers (a warp holds one 512-wide row, 16 values per lane: dims 16 lane ..) ------

// In place: v = bf16(rmsnorm(v) * gain); then the RoPE lanes (28..31, dims 448..511) get
// v = bf16(rope(v, f_row)).
__device__ __forceinline__ void norm_gain_rope_row(float (&v)[16], const __nv_bfloat16 *gain,
                                                   float eps, const float *f_row, int lane) {
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) ss += v[i] * v[i];
    ss = group_sum<32>(ss);
    const float r = 1.0f / sqrtf(ss / kKVL + eps);
    float w[16];
    load_bf16<16>(gain + lane * 16, w);
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = round_bf16(v[i] * r * w[i]);
    if (lane >= kNope / 16) {
        rope_apply<16>(v, f_row, (lane - kNope / 16) * 16);
#pragma unroll
        for (int i = 0; i < 16; ++i) v[i] = round_bf16(v[i]);
    }
}

// Writes a warp's row (bf16 values) as the fp8 KV row of slot (§3.1): lanes 0..27 quantize 16
// NoPE values each (4 lanes per 64-wide tile share its ue8m0 scale), lanes 28..31 store 16 bf16
// RoPE values each, lane 0 writes the 8-byte scale slot (pad byte 0, A8).
__device__ __forceinline__ void write_kv_row(unsigned char *cache, long long page_bytes,
                                             int block_shift, int slot, const float (&v)[16],
                                             int lane) {
    unsigned char *base = cache + (long long)(slot >> block_shift) * page_bytes;
    const int row = slot & ((1 << block_shift) - 1);
    unsigned char *data = base + row * kRowBytes;
    unsigned char *scales = base + ((long long)kRowBytes << block_shift) + row * kSlotBytes;
    unsigned q[4];
    const unsigned sf = fp8::quantize_group<64, 16>(v, q);  // all lanes (RoPE lanes: unused)
    if (lane < kNope / 16)
        *reinterpret_cast<uint4 *>(data + lane * 16) = make_uint4(q[0], q[1], q[2], q[3]);
    else
        store_bf16<16>(data + kNope + (lane - kNope / 16) * 32, v);
    unsigned long long slot8 = 0;
#pragma unroll
    for (int c = 0; c < kNope / 64; ++c)
        slot8 |= (unsigned long long)__shfl_sync(0xffffffffu, sf, 4 * c) << (8 * c);
    if (lane == 0) *reinterpret_cast<unsigned long long *>(scales) = slot8;
}

// ---- phase 1: projections ------------------------------------------------------------------

// The three GEMM kinds: 64 x 64 tiles, 2 x 4 warps of 32 x 16, as deep a cp.async pipeline as
// fits the 16-head attention phase's shared memory (stages of 24,832 B, 32,768 B for bf16 W; at
// most 165,376 B < 166,848 B), so that 4..5 K-steps of W are in flight per SM.
template <gemm::AKind kA, int kStages, gemm::WKind kW = gemm::WKind::kFp8>
using TileCfg = gemm::Config<64, 64, 2, 4, kStages, kA, kW>;
using CfgQkv = TileCfg<gemm::AKind::kBf16Mxq, 6>;                    // mxq(x) @ Wd_qa^T, Wd_kv^T
using CfgGate = TileCfg<gemm::AKind::kBf16, 5, gemm::WKind::kBf16>;  // x @ wkv_gate^T
using CfgQb = TileCfg<gemm::AKind::kBf16, 6>;                        // qr @ Wd_qb^T
// Phase 3 at T <= 64 (one m-tile): 64 x 128 tiles, 2 x 4 warps of 32 x 32, 4 stages (33,280 B
// each + the 32 KB bf16 W tile = 165,888 B): half the tiles and K-steps per CTA of 64 x 64, each
// step twice the W; the same MMAs per accumulator in the same order, so the same q bits.
using CfgQbWide = gemm::Config<64, 128, 2, 4, 4, gemm::AKind::kBf16>;
constexpr bool kWideQ = true;                   // false: 64 x 64 tiles at every T
// T <= kQStreamTokens: phase 3 on the weight-streaming GEMM (q_projection_stream), 4 consumer
// warps + 1 producer warp, one ring over the CTA's tiles. T <= 16: 128-row tiles (the tiles of
// prefetch_q_weights) on mma.sync; 8 tokens: 4 stages, 16 tokens: 3. 16 < T <= 64: 64 tokens a
// stage on 64-row tiles (the consumer warpgroup's rows) on the wgmma-rows consumer (sm_90a; on
// sm_100a mma.sync, 4 row groups of 16), one pass (the mma.sync path of 32 tokens a pass, run
// twice above 32, measured 47 µs at T 64 against the tiled GEMM's 45.5, request dsv4p/3).
constexpr int kQStreamTokens = 64;              // DSV4_Q_STREAM_TOKENS (16 or 64)
static_assert(kQStreamTokens == 16 || kQStreamTokens == 64, "1 or 2 token tiles of 8, or 64");
// kL2EvictFirst: the stream GEMMs' weight copies (phases 1 and 3) with an L2 evict_first policy.
constexpr bool kL2EvictFirst = true;
using CfgQbStream1 =
    sgemm::Config<128, 1, 256, 4, 2, kQL / 32, 4, true, sgemm::kMathAuto, kL2EvictFirst>;
using CfgQbStream2 =
    sgemm::Config<128, 2, 256, 3, 2, kQL / 32, 4, true, sgemm::kMathAuto, kL2EvictFirst>;
using CfgQbStream8 =
    sgemm::Config<64, 8, 256, 4, 4, kQL / 32, 4, true, sgemm::kMathWgmmaRows, kL2EvictFirst>;
static_assert(CfgQbStream1::kThreads <= kThreads && CfgQbStream2::kThreads <= kThreads &&
                  CfgQbStream8::kThreads <= kThreads,
              "the stream GEMM's warps fit the block");
constexpr int kBM = CfgQkv::kBM, kBN = CfgQkv::kBN;

struct StoreBf16 {
    __nv_bfloat16 *out;
    int ld;
    __device__ void operator()(int m, int n, float a, float b) const {
        *reinterpret_cast<unsigned *>(out + (long long)m * ld + n) = pack_bf16x2(a, b);
    }
};
struct StoreF32 {
    float *out;
    int ld;
    __device__ void operator()(int m, int n, float a, float b) const {
        *reinterpret_cast<float2 *>(out + (long long)m * ld + n) = make_float2(a, b);
    }
};

// Calls f(r, c, v0, v1) for each pair of adjacent accumulators (tile row r < rows, tile
// columns c, c + 1) this thread holds.
template <class Cfg, class F>
__device__ __forceinline__ void for_each_pair(const gemm::Accum<Cfg> &acc, int rows, F f) {
    using Acc = gemm::Accum<Cfg>;
#pragma unroll
    for (int mt = 0; mt < Cfg::kMT; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int r = Acc::row(mt, half);
            if (r >= rows) continue;
#pragma unroll
            for (int nt = 0; nt < Cfg::kNT; ++nt)
                f(r, Acc::col(nt, 0), acc.c[mt][nt][2 * half], acc.c[mt][nt][2 * half + 1]);
        }
}

// The K range one CTA sums for a tile: [k0, k0 + len). With count > 1 the tile's K is split
// (phase 1 at T <= 64): this CTA is slice `index` of `count`; its fp32 partial goes to
// part_k[index][m][col + c] (m < T), and the last slice to arrive on `counter` sums them.
struct Slice {
    int k0, len, index, count, col;
    unsigned *counter;
};

// Split-K partial rows: fp32 [count][T][kPartCols], columns of the joint [qa | kv | kv_gate]
// output (MLA__DSV4_PART_K_COLS); the tile counters are bank words kSplitWord0 + tile.
constexpr int kPartCols = kQL + kKVL + 2 * kKVL;
constexpr int kKSlices = 8;                     // MLA__DSV4_KSLICES: most slices per tile
constexpr int kSplitWord0 = 64;                 // bank words [64, 64 + tiles): tile counters

// This CTA's slice partial into part_k; the last of the tile's slices sums the partials in slice
// order (deterministic) and stores the result. Uses no shared memory.
template <class Cfg, class Store>
__device__ void store_split(const Params &p, const gemm::Accum<Cfg> &acc, int m0, int n0,
                            int rows, const Slice &sl, Store store) {
    float *part = p.part_k + sl.col;
    const long long slice_stride = (long long)p.T * kPartCols;
    for_each_pair<Cfg>(acc, rows, [&](int r, int c, float v0, float v1) {
        *reinterpret_cast<float2 *>(part + sl.index * slice_stride + (long long)(m0 + r) *
                                    kPartCols + c) = make_float2(v0, v1);
    });
    if (!gemm::splitk_arrive(sl.counter, sl.count)) return;
    for (int i = threadIdx.x; i < rows * Cfg::kBN / 2; i += kThreads) {
        const int r = i / (Cfg::kBN / 2), c = 2 * (i % (Cfg::kBN / 2));
        const float *src = part + (long long)(m0 + r) * kPartCols + c;
        float2 sum = __ldcg(reinterpret_cast<const float2 *>(src));
        for (int j = 1; j < sl.count; ++j) {
            const float2 v = __ldcg(reinterpret_cast<const float2 *>(src + j * slice_stride));
            sum.x += v.x, sum.y += v.y;
        }
        store(m0 + r, n0 + c, sum.x, sum.y);
    }
}

// The tile (m0, n0) of A @ W^T over the slice's K range, A bf16 [T, K] (row stride lda) and W
// [N, K] (fp8 with SfAtom scales, or bf16): each pair of adjacent outputs (m, n), (m, n + 1)
// with m < T goes to store(m, n, v0, v1) (split: by the tile's last slice). smem is free on
// return (mma_tile ends with the block synchronized; the stores use none).
template <class Cfg, class Store>
__device__ void gemm_tile(const Params &p, const __nv_bfloat16 *a, long long lda,
                          const unsigned char *w, const unsigned char *w_sf, int k, int m0,
                          int n0, const Slice &sl, unsigned char *smem, Store store) {
    constexpr int kWBytes = Cfg::kW == gemm::WKind::kFp8 ? 1 : 2;
    gemm::Operands op;
    op.a = a + sl.k0, op.a_sf = nullptr, op.lda = lda, op.lda_sf = 0;
    op.w = w, op.w_sf = w_sf, op.ldw = (long long)k * kWBytes, op.w_kb = k / 32;
    op.w_k0 = sl.k0, op.k_len = sl.len;
    const int rows = min(p.T - m0, Cfg::kBM);
    gemm::Accum<Cfg> acc;
    gemm::mma_tile<Cfg>(op, m0, n0, rows, smem, acc);
    if (sl.count > 1) {
        store_split<Cfg>(p, acc, m0, n0, rows, sl, store);
        return;
    }
    for_each_pair<Cfg>(acc, rows, [&](int r, int c, float v0, float v1) {
        store(m0 + r, n0 + c, v0, v1);
    });
}

// Output tile n0 of the joint [wq_a; wkv] projection (N = 1536) for tokens m0..m0+63.
template <int kH>
__device__ void qkv_tile(const Params &p, int m0, int n0, const Slice &sl, unsigned char *smem) {
    if (n0 < kQL)
        gemm_tile<CfgQkv>(p, p.x, p.x_stride, p.wq_a, p.wq_a_sf, kH, m0, n0, sl, smem,
                          StoreBf16{p.qa, kQL});
    else
        gemm_tile<CfgQkv>(p, p.x, p.x_stride, p.wkv, p.wkv_sf, kH, m0, n0 - kQL, sl, smem,
                          StoreBf16{p.kv, kKVL});
}

// Output tile n0 of the kv_gate projection (bf16 x bf16, fp32 out, no quantization: A14).
template <int kH>
__device__ void gate_tile(const Params &p, int m0, int n0, const Slice &sl, unsigned char *smem) {
    gemm_tile<CfgGate>(p, p.x, p.x_stride, reinterpret_cast<const unsigned char *>(p.wkv_gate),
                       nullptr, kH, m0, n0, sl, smem, StoreF32{p.kv_gate, 2 * kKVL});
}

// Slices per tile of phase 1: with one m-tile (T <= 64) the tiles are fewer than the CTAs, so
// each tile's K steps are cut into count slices of `steps` steps (the last one may be shorter),
// count <= kKSlices and tiles * count <= gridDim.x; otherwise count 1 (no split).
struct KSplit {
    int count, steps;
};
__device__ __forceinline__ KSplit projection_split(int m_tiles, int tiles, int ksteps) {
    int s = m_tiles == 1 ? min((int)gridDim.x / tiles, kKSlices) : 1;
    s = max(1, min(s, ksteps));
    const int steps = (ksteps + s - 1) / s;
    return {(ksteps + steps - 1) / steps, steps};
}

// With one m-tile (T <= 64): asks L2 for the wq_b rows and SfAtom scale block of every phase-3
// tile this CTA will compute (the tiles of q_projection_tiles at T <= 64 and of
// q_projection_stream), so that the 32 MB weight stream overlaps phase 1, barrier 0, phase 2
// (and barrier 1), during which DRAM is otherwise nearly idle at small T; phase 3 then reads
// them from L2. Threads tid = 0 .. n - 1 of the calling ones share the lines. A hint only.
__device__ void prefetch_q_weights(const Params &p, int tid, int n) {
    if (p.T > kBM) return;
    constexpr int kTileN = kWideQ ? CfgQbWide::kBN : CfgQb::kBN;
    constexpr int kAtomBytes = (kQL / 32 + 3) / 4 * 512;  // one 128-row SfAtom block over all K
    for (int tile = blockIdx.x; tile < kQCols / kTileN; tile += gridDim.x) {
        const long long n0 = (long long)tile * kTileN;
        const unsigned char *w = p.wq_b + n0 * kQL, *sf = p.wq_b_sf + n0 / 128 * kAtomBytes;
        for (long long i = (long long)tid * 128; i < (long long)kTileN * kQL; i += n * 128LL)
            gemm::prefetch_l2(w + i);
        for (int i = tid * 128; i < kAtomBytes; i += n * 128) gemm::prefetch_l2(sf + i);
    }
}

// kEarlyPrefetch (T <= kP1StreamTokens): the L2 hints above are issued at the kernel's start
// by the warps phase 1's stream GEMMs leave idle (threads kP1Idle..255, once their first
// phase-1 item has started; CTAs without a phase-1 item after phase 1, all threads), instead of
// by all threads after phase 1: the wq_b stream then runs beside phase 1's 6 MB rather than
// after it. The same warps also ask L2 for the KV rows and scale slots of the CTA's phase-4
// items (head group 0 items only: the other groups read the same rows).
constexpr bool kEarlyPrefetch = false;        // measured no faster (dsv4a/1)
constexpr bool kQHints = true;                  // false: no wq_b L2 hints at all
// T <= 16 (no barrier 0): no wq_b L2 hints either (measured without them in request dsv4a/3:
// SWA T1 80.41 -> 79.83 us, T16 101.03 -> 99.99, HCA T1 90.67 -> 90.11; with the weight copies
// evict_first the hinted lines only displace others).
constexpr bool kQHintsNoB0 = false;
constexpr int kP1Idle = 160;                    // CfgP1 / CfgP1Gate: 4 consumer warps + producer
template <int kPage, bool kHca>
__device__ void prefetch_kv_rows(const Params &p, int tid, int n);  // phase 4 below

// ---- phase 1 for T <= kP1StreamTokens (64): the weight-streaming GEMMs ----------------------------
//
// x is quantized once (mxq: e4m3 codes + ue8m0 scales, the bits the tiled path's mxq(x) rounds
// to) by all CTAs, a thread per 32-wide group, into the part_o region (free until phase 4: row t
// at part_o + t * (H + H / 32), H code bytes then H / 32 scale bytes); each CTA then counts itself
// on bank word kXReadyWord. The GEMM items are blocks of 64 rows of [wq_a; wkv] (24 blocks,
// common/stream_gemm.cuh on the codes) and, on HCA layers, of wkv_gate (16 blocks of bf16 rows,
// dsv4/stream_bf16.cuh on x itself), each block's K cut into slices (fp32 partials in part_k,
// the last slice sums them in slice order: the tiled path's split-K contract, counters at bank
// words kSplitWord0 + block). A slice streams its W rows once; its producer starts the W copies
// at once and the x-code copies once every CTA has counted (ready), so the wait overlaps the
// W stream. Block 0 zeroes kXReadyWord after barrier 0 (nobody reads it after that).
constexpr int kP1StreamTokens = 64;             // DSV4_P1_STREAM_TOKENS (16, 32 or 64)
static_assert(kP1StreamTokens == 16 || kP1StreamTokens == 32 || kP1StreamTokens == 64,
              "8 kNT token rows, kNT in {2, 4, 8}");
constexpr int kP1BN = 64;
constexpr int kP1MaxH = 8192;                   // larger H: the tiled path at every T
constexpr int kXReadyWord = 4;                  // bank word: CTAs done quantizing x
// T <= kQStreamTokens: bank word counting the qr rows phase 2 has written; phase 3's stream GEMM
// waits on it (its W copies start at once) instead of a grid barrier 1. Zeroed by block 0 after
// barrier 2.
constexpr int kQrReadyWord = 5;
// T <= kQStreamTokens (and the stream phase 1): no grid barrier 0. Each phase-1 block's last slice
// counts the block on one of these words after its stores (release), and phase 2's items wait for
// the blocks they read (acquire): a qr row for the kQL / kP1BN qa blocks, a kv row for the
// kKVL / kP1BN kv blocks, a compressor (HCA) for the 2 kKVL / kP1BN kv_gate blocks. So CTAs go
// on to phase 3 (whose W copies start at once) as soon as their own work is done, and qr waits
// for neither the kv / kv_gate blocks nor the L2 hints. Zeroed by block 0 after barrier 2 (read
// before it only); above kQStreamTokens barrier 0 stays and the counts are not read.
constexpr int kQaDoneWord = 6, kKvDoneWord = 7, kGateDoneWord = 8;
constexpr bool kNoBarrier0 = true;             // false: barrier 0 at every T (counts unread)

__device__ __forceinline__ void wait_count(const unsigned *word, unsigned n) {
    while (ld_acquire_gpu(word) < n) __nanosleep(32);
}
// 32 < T <= 64: [wq_a; wkv] in one pass of 64 tokens on the wgmma-rows consumer (CfgP1W) on
// HCA layers where its float scale table fits the launch (H <= kP1OnePassMaxH), else in two
// token halves of 32 on mma.sync (qa2 / kv2 descriptors for the second), each (block, half)
// counting its block, so that the qa / kv counts of a complete phase 1 are the blocks times
// p1_halves. SWA keeps the halves: the one pass measured SWA T 64 118.7 -> 122.9 us, HCA T 64
// 196.7 -> 187.4 (docs/perf-notes.md, thirteenth session).
constexpr int kP1OnePassMaxH = 4096;            // DSV4_P1_ONE_PASS_MAX_H
template <int kH, bool kHca>
__host__ __device__ constexpr bool p1_one_pass() { return kHca && kH <= kP1OnePassMaxH; }
static_assert(kQStreamTokens <= kP1StreamTokens, "no barrier 0 needs the stream phase 1's counts");
template <int kH, bool kHca>
__device__ __forceinline__ unsigned p1_halves(int T) {
    return T > 32 && !p1_one_pass<kH, kHca>() ? 2u : 1u;
}
// 4 consumer warps: 2 row groups x 2 K parts, from 32 tokens 4 row groups (registers).
template <int kH, int kNT>
using CfgP1 = sgemm::Config<kP1BN, kNT, 128, 8, kNT >= 4 ? 4 : 2, kH / 32, 4, false,
                            sgemm::kMathAuto, kL2EvictFirst>;  // codes
template <int kH>
using CfgP1W = sgemm::Config<kP1BN, 8, 128, 8, 4, kH / 32, 4, false, sgemm::kMathWgmmaRows,
                             kL2EvictFirst>;  // 64 tokens, one pass (p1_one_pass)
template <int kNT>
using CfgP1Gate =  // wkv_gate bf16 (64 tokens: 5 stages fit 172,032 B)
    bstream::Config<kP1BN, kNT, 256, kNT == 8 ? 5 : 6, kNT >= 4 ? 4 : 2, 4, kL2EvictFirst>;
static_assert(CfgP1<128, 2>::kThreads <= kThreads && CfgP1Gate<2>::kThreads <= kThreads,
              "the stream GEMMs' warps fit the block");

// The TMA descriptors of phase 1 (runtime/dsv4_attention.c, p1_maps): qa / kv: W = wq_a / wkv,
// A = the x codes (T rows of H bytes, row stride H + H / 32), sf = wq_a_sf / wkv_sf (1 K-atom per
// stage); gate_w = wkv_gate bytes {2 H, 1024} box {128, 64}, gate_x = x bytes {2 H, T} box
// {128, 8 kNT}, kNT = 1, 2, 4, 8 for T <= 8, 16, 32, 64. Zeroed and unused when
// T > kP1StreamTokens.
// T > 32 on HCA layers with H <= kP1OnePassMaxH (p1_one_pass): qa / kv boxes of 64 token rows
// (one pass, CfgP1W); otherwise [wq_a; wkv] runs in two token halves of 32 (kNT 4: the mma.sync
// kNT 8 consumer does not fit the kernel's registers), qa / kv for tokens 0..31 and qa2 / kv2 (A
// from x code row 32 on) for the rest (zeroed and unused in the one pass).
struct alignas(64) P1Maps {
    sgemm::Maps qa, kv;
    sgemm::TmaMap gate_w, gate_x;
    sgemm::Maps qa2, kv2;
};

template <int kH>
__host__ __device__ constexpr int xq_ld() { return kH + kH / 32; }

// mxq(x) codes and scales into the part_o region, then this CTA counts itself on kXReadyWord.
template <int kH>
__device__ void quantize_x(const Params &p) {
    constexpr int kG = kH / 32;
    unsigned char *xq = reinterpret_cast<unsigned char *>(p.part_o);
    for (int g = (int)(blockIdx.x * kThreads + threadIdx.x); g < p.T * kG;
         g += (int)(gridDim.x * kThreads)) {
        const int t = g / kG, j = g % kG;
        float v[32];
        load_bf16<32>(p.x + t * p.x_stride + j * 32, v);
        unsigned q[8];
        const unsigned sf = fp8::quantize_group<32, 32>(v, q);
        unsigned char *row = xq + (long long)t * xq_ld<kH>();
        uint4 *dst = reinterpret_cast<uint4 *>(row + j * 32);
        dst[0] = make_uint4(q[0], q[1], q[2], q[3]);
        dst[1] = make_uint4(q[4], q[5], q[6], q[7]);
        row[kH + j] = (unsigned char)sf;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        red_add_release_gpu(p.bank + kXReadyWord, 1u);
    }
}

// The epilogue of a streamed phase-1 slice (the consumer threads of Cfg, D[r * kDPitch + t], the
// tile's tokens t0 + t): with one slice store(t0 + t, n0 + r, v0, v1) for row pairs (r, r + 1)
// straight from D; with several the slice's fp32 partial goes to part_k[slice][t0 + t][col + r],
// and the last slice to arrive on counter sums the partials in slice order and stores.
// The block's stores done (every consumer thread): its count on `done` (release).
template <class Cfg>
__device__ __forceinline__ void p1_count_block(unsigned *done) {
    __threadfence();
    named_barrier_sync(1, Cfg::kConsumers);
    if (threadIdx.x == 0) red_add_release_gpu(done, 1u);
}

template <class Cfg, class Store>
__device__ void p1_store(const Params &p, const float *D, int T, int t0, int n0, const Slice &sl,
                         unsigned *done, Store store) {
    constexpr int kP = Cfg::kDPitch, kBN = Cfg::kBN;
    const int tid = (int)threadIdx.x;
    if (sl.count == 1) {
        for (int x = tid; x < T * kBN / 2; x += Cfg::kConsumers) {
            const int t = x / (kBN / 2), r = 2 * (x % (kBN / 2));
            store(t0 + t, n0 + r, D[r * kP + t], D[(r + 1) * kP + t]);
        }
        p1_count_block<Cfg>(done);
        return;
    }
    __shared__ unsigned s_last;
    float *part = p.part_k + sl.col + (long long)t0 * kPartCols;
    const long long slice_stride = (long long)p.T * kPartCols;
    for (int x = tid; x < T * kBN; x += Cfg::kConsumers) {
        const int t = x / kBN, r = x % kBN;
        part[sl.index * slice_stride + (long long)t * kPartCols + r] = D[r * kP + t];
    }
    __threadfence();
    named_barrier_sync(1, Cfg::kConsumers);
    if (tid == 0) {
        const bool last = atom_add_acq_rel_gpu(sl.counter, 1u) == (unsigned)sl.count - 1u;
        if (last) *sl.counter = 0u;          // every slice has arrived; nobody touches it again
        s_last = last;
    }
    named_barrier_sync(1, Cfg::kConsumers);
    if (!s_last) return;
    for (int x = tid; x < T * kBN / 2; x += Cfg::kConsumers) {
        const int t = x / (kBN / 2), r = 2 * (x % (kBN / 2));
        const float *src = part + (long long)t * kPartCols + r;
        float2 sum = __ldcg(reinterpret_cast<const float2 *>(src));
        for (int j = 1; j < sl.count; ++j) {
            const float2 v = __ldcg(reinterpret_cast<const float2 *>(src + j * slice_stride));
            sum.x += v.x, sum.y += v.y;
        }
        store(t0 + t, n0 + r, sum.x, sum.y);
    }
    p1_count_block<Cfg>(done);
}

// Slice sl of the 64-row block `block` of [wq_a; wkv] on the x codes of tokens 32 half ..
// (half 1 only with kNT 4 at T > 32); Cfg: CfgP1<kH, kNT>, or CfgP1W<kH> (one pass of 64).
template <int kH, class Cfg>
__device__ void qkv_stream(const Params &p, const P1Maps &maps, int block, int half,
                           const Slice &sl, unsigned char *smem) {
    const int n = block * kP1BN;
    const bool is_q = n < kQL;
    const int t0 = 32 * half;
    const unsigned char *xq =
        reinterpret_cast<const unsigned char *>(p.part_o) + (long long)t0 * xq_ld<kH>();
    sgemm::Operands op;
    op.a = xq + sl.k0, op.a_sf = xq + kH + sl.k0 / 32;
    op.lda = xq_ld<kH>(), op.lda_sf = xq_ld<kH>();
    op.w = is_q ? p.wq_a : p.wkv, op.w_sf = is_q ? p.wq_a_sf : p.wkv_sf;
    op.ldw = kH, op.w_kb = kH / 32;
    op.w_k0 = sl.k0, op.k_len = sl.len, op.T = min(p.T - t0, Cfg::kTP);
    op.a_col0 = sl.k0;
    op.maps = half ? (is_q ? &maps.qa2 : &maps.kv2) : (is_q ? &maps.qa : &maps.kv);
    const int n0 = is_q ? n : n - kQL;
    unsigned *ready = p.bank + kXReadyWord;
    sgemm::run<Cfg>(
        op, n0, smem,
        [&] {
            while (ld_acquire_gpu(ready) < gridDim.x) __nanosleep(32);
            if (threadIdx.x == 0) trace::mark_first(trace::kP1Ready);
        },
        [&](const float *D, int T) {
            if (threadIdx.x == 0) trace::mark_first(trace::kP1Epi);
            if (is_q)
                p1_store<Cfg>(p, D, T, t0, n0, sl, p.bank + kQaDoneWord, StoreBf16{p.qa, kQL});
            else
                p1_store<Cfg>(p, D, T, t0, n0, sl, p.bank + kKvDoneWord, StoreBf16{p.kv, kKVL});
        });
}

// Slice sl of the 64-row block `block` of wkv_gate (bf16) on x (bf16).
template <int kH, int kNT>
__device__ void gate_stream(const Params &p, const P1Maps &maps, int block, const Slice &sl,
                            unsigned char *smem) {
    using Cfg = CfgP1Gate<kNT>;
    bstream::Operands op;
    op.w = &maps.gate_w, op.x = &maps.gate_x;
    op.k0_bytes = 2 * sl.k0, op.k_bytes = 2 * sl.len, op.T = p.T;
    const int n0 = block * kP1BN;
    bstream::run<Cfg>(op, n0, smem, [&](const float *D, int T) {
        if (threadIdx.x == 0) trace::mark_first(trace::kP1Epi);
        p1_store<Cfg>(p, D, T, 0, n0, sl, p.bank + kGateDoneWord, StoreF32{p.kv_gate, 2 * kKVL});
    });
}

// K slices of `blocks` row blocks of `ksteps` steps of `step` columns over at most `ctas` CTAs.
struct P1Split {
    int count, steps;
};
__device__ __forceinline__ P1Split p1_split(int ctas, int blocks, int ksteps) {
    int s = min(max(ctas / blocks, 1), min(kKSlices, ksteps));
    const int steps = (ksteps + s - 1) / s;
    return {(ksteps + steps - 1) / steps, steps};
}

// Returns true (CTA-uniform) when this CTA had an item: its idle warps then called early(tid, n).
template <int kH, bool kHca, int kNT, class Early>
__device__ bool phase_projections_stream(const Params &p, const P1Maps &maps,
                                         unsigned char *smem, Early early) {
    constexpr int kQBlocks = (kQL + kKVL) / kP1BN, kGBlocks = kHca ? 2 * kKVL / kP1BN : 0;
    // [wq_a; wkv]: one pass (kNT <= 4, or 64 tokens on CfgP1W) or two halves of 32 tokens
    constexpr bool kOne = kNT == 8 && p1_one_pass<kH, kHca>();
    constexpr int kHalves = kNT == 8 && !kOne ? 2 : 1, kQNT = kNT == 8 && !kOne ? 4 : kNT;
    using CfgQ = typename sgemm::PickConfig<kOne, CfgP1W<kH>, CfgP1<kH, kQNT>>::type;
    constexpr int kQSteps = kH / 128;                                // CfgP1: 128 columns a step
    constexpr int kGSteps = 2 * kH / CfgP1Gate<kNT>::kKS;            // 256 bytes = 128 columns
    static_assert(CfgQ::kSmemBytes <= kSmemBudget && CfgP1Gate<kNT>::kSmemBytes <= kSmemBudget,
                  "phase 1's stream GEMMs fit the launch's shared memory");
    // Counters below word 128 (output_proj's split counters start there).
    static_assert(kSplitWord0 + kQBlocks * kHalves + kGBlocks <= 128, "slice counters fit");
    static_assert(CfgQ::kThreads <= kP1Idle && CfgP1Gate<kNT>::kThreads <= kP1Idle,
                  "the early hints' warps are idle in phase 1");
    quantize_x<kH>(p);
    trace::mark0(trace::kXQuant);
    // HCA: the CTAs shared by bytes (fp8 W 6 MB, bf16 gate 8 MB): 3/7 of them to [wq_a; wkv].
    const int grid = (int)gridDim.x;
    const P1Split qs = p1_split(kHca ? grid * 3 / 7 : grid, kQBlocks * kHalves, kQSteps);
    const P1Split gs = kHca ? p1_split(grid - kQBlocks * qs.count, kGBlocks, kGSteps)
                            : P1Split{0, 1};
    const int q_items = kQBlocks * kHalves * qs.count, items = q_items + kGBlocks * gs.count;
    for (int item = (int)blockIdx.x; item < items; item += grid) {
        if (item < q_items) {
            const int block = item % kQBlocks, rest = item / kQBlocks;
            const int half = rest % kHalves, slice = rest / kHalves;
            const int k0 = slice * qs.steps * 128;
            const Slice sl = {k0, min(kH - k0, qs.steps * 128), slice, qs.count, block * kP1BN,
                              p.bank + kSplitWord0 + block + kQBlocks * half};
            qkv_stream<kH, CfgQ>(p, maps, block, half, sl, smem);
        } else {
            const int it = item - q_items, block = it % kGBlocks, slice = it / kGBlocks;
            const int k0 = slice * gs.steps * 128;
            const Slice sl = {k0, min(kH - k0, gs.steps * 128), slice, gs.count,
                              kQL + kKVL + block * kP1BN,
                              p.bank + kSplitWord0 + kQBlocks * kHalves + block};
            gate_stream<kH, kNT>(p, maps, block, sl, smem);
        }
        // The warps the stream GEMMs leave idle (they return at once): the early L2 hints.
        if (kEarlyPrefetch && item == (int)blockIdx.x && (int)threadIdx.x >= kP1Idle)
            early((int)threadIdx.x - kP1Idle, kThreads - kP1Idle);
        __syncthreads();                    // smem free for the next item
    }
    return kEarlyPrefetch && (int)blockIdx.x < items;
}

// T <= kP1StreamTokens: the kNT = ceil(T / 8) rounded up to a power of two instantiation.
template <int kH, bool kHca, class Early>
__device__ bool phase_projections_stream_t(const Params &p, const P1Maps &maps,
                                           unsigned char *smem, Early early) {
    if (p.T <= 8) return phase_projections_stream<kH, kHca, 1>(p, maps, smem, early);
    if (p.T <= 16) return phase_projections_stream<kH, kHca, 2>(p, maps, smem, early);
    if (p.T <= 32 && kP1StreamTokens >= 32)
        return phase_projections_stream<kH, kHca, 4>(p, maps, smem, early);
    return phase_projections_stream<kH, kHca, 8>(p, maps, smem, early);
}

template <int kH, bool kHca>
__device__ void phase_projections_tiled(const Params &p, unsigned char *smem) {
    const int mt = (p.T + kBM - 1) / kBM;
    constexpr int n_qkv = (kQL + kKVL) / kBN;
    constexpr int n_gate = kHca ? 2 * kKVL / kBN : 0;
    constexpr int kSteps = kH / CfgQkv::kBK;
    static_assert(kSplitWord0 + n_qkv + n_gate <= 256, "tile counters fit the barrier bank");
    const int tiles = mt * (n_qkv + n_gate);
    const KSplit ks = projection_split(mt, tiles, kSteps);
    // Items: slice-major, tiles fastest, tokens fastest within a tile column (W reuse in L2).
    for (int item = blockIdx.x; item < tiles * ks.count; item += gridDim.x) {
        const int tile = item % tiles, slice = item / tiles;
        const int nt = tile / mt, m0 = (tile % mt) * kBM;
        const int k0 = slice * ks.steps * CfgQkv::kBK;
        const Slice sl = {k0, min(kH - k0, ks.steps * CfgQkv::kBK), slice, ks.count, nt * kBN,
                          p.bank + kSplitWord0 + tile};
        if (nt < n_qkv)
            qkv_tile<kH>(p, m0, nt * kBN, sl, smem);
        else
            gate_tile<kH>(p, m0, (nt - n_qkv) * kBN, sl, smem);
    }
}

// Phase 1: the stream GEMMs up to kP1StreamTokens tokens (H <= kP1MaxH: the A scale table of a
// 64-token stage holds a whole slice's groups, at most H / 32 bytes a row), else the tiles.
// Returns true when early(tid, n) was called by this CTA's idle warps (kEarlyPrefetch).
template <int kH, bool kHca, class Early>
__device__ bool phase_projections(const Params &p, const P1Maps &maps, unsigned char *smem,
                                  Early early) {
    if constexpr (kH <= kP1MaxH) {
        if (p.T <= kP1StreamTokens) return phase_projections_stream_t<kH, kHca>(p, maps, smem, early);
    }
    phase_projections_tiled<kH, kHca>(p, smem);
    return false;
}

// ---- phase 2: token rows and the compressor ------------------------------------------------

// qr[t] = mxq(bf16(rmsnorm(qa[t], q_norm_weight))): one warp, 32 values (one group) per lane.
// halves > 0: no barrier 0 (T <= kQStreamTokens), the qa blocks' count (times phase 1's token
// halves, p1_halves) first.
__device__ void qr_row(const Params &p, int t, int lane, unsigned halves) {
    if (halves) {  // the gain's lines asked for first (a weight: likely out of L2 by now)
        if (lane < kQL * 2 / 128) gemm::prefetch_l2(p.q_norm_w + lane * 64);
        wait_count(p.bank + kQaDoneWord, kQL / kP1BN * halves);
    }
    float v[32], w[32];
    load_bf16<32>(p.qa + (long long)t * kQL + lane * 32, v);
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; ++i) ss += v[i] * v[i];
    ss = group_sum<32>(ss);
    const float r = 1.0f / sqrtf(ss / kQL + p.q_eps);
    load_bf16<32>(p.q_norm_w + lane * 32, w);
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] = round_bf16(v[i] * r * w[i]);
    if (p.T <= kQStreamTokens) {
        // mxq's codes and scales (what fp8::mxq rounds v to), for the stream GEMM of phase 3:
        // token row t of the qr region holds its 1024 e4m3 codes, then its 32 ue8m0 scales.
        unsigned int q[8];
        const unsigned int sf = fp8::quantize_group<32, 32>(v, q);
        unsigned char *row = reinterpret_cast<unsigned char *>(p.qr) + (long long)t * kQL * 2;
        uint4 *dst = reinterpret_cast<uint4 *>(row + lane * 32);
        dst[0] = make_uint4(q[0], q[1], q[2], q[3]);
        dst[1] = make_uint4(q[4], q[5], q[6], q[7]);
        row[kQL + lane] = (unsigned char)sf;
        __syncwarp();                       // the warp's stores, then one release count
        if (lane == 0) {
            __threadfence();
            red_add_release_gpu(p.bank + kQrReadyWord, 1u);
        }
        return;
    }
    fp8::mxq<32, 32>(v);
    store_bf16<32>(p.qr + (long long)t * kQL + lane * 32, v);
}

// The new SWA row of token t into kv_cache (skipped if swa_loc[t] < 0: A15).
template <int kPage>
__device__ void kv_row(const Params &p, int t, int lane, unsigned halves) {
    const int loc = p.swa_loc[t];
    if (loc < 0) return;
    if (halves) {  // the gain's and the RoPE row's lines first
        if (lane < kKVL * 2 / 128)
            gemm::prefetch_l2(p.kv_norm_w + lane * 64);
        else if (lane < kKVL * 2 / 128 + 2)
            gemm::prefetch_l2(p.freqs + (long long)p.positions[t] * 64 + (lane - 8) * 32);
        wait_count(p.bank + kKvDoneWord, kKVL / kP1BN * halves);
    }
    float v[16];
    load_bf16<16>(p.kv + (long long)t * kKVL + lane * 16, v);
    norm_gain_rope_row(v, p.kv_norm_w, p.kv_eps, p.freqs + (long long)p.positions[t] * 64, lane);
    write_kv_row(p.kv_cache, p.kv_page_bytes, ilog2(kPage), loc, v, lane);
}

// The tokens that may share token t's request: [*lo, *hi).
template <int kDraft>
__device__ __forceinline__ void request_range(const Params &p, int t, int *lo, int *hi) {
    *lo = kDraft > 0 ? t - t % kDraft : 0;
    *hi = kDraft > 0 ? *lo + kDraft : p.T;
}

// map[j] = the launch token whose fresh kv_gate row is window row j (position first + j of the
// request whose ring starts at base), or -1 (the ring holds it). Ends with __syncthreads.
template <int kDraft>
__device__ void build_window_map(const Params &p, int t, int base, int first, int *map) {
    for (int j = threadIdx.x; j < 128; j += kThreads) map[j] = -1;
    __syncthreads();
    int lo, hi;
    request_range<kDraft>(p, t, &lo, &hi);
    for (int u = lo + threadIdx.x; u < hi; u += kThreads) {
        const int q = p.positions[u];
        if (q >= first && q < first + 128 && p.ring_row[u] - (q & 127) == base) map[q - first] = u;
    }
    __syncthreads();
}

// pooled[c] = bf16(sum_j softmax_j(score[j][c] + ape[j][c]) * kv[j][c]), c = 0..511, in fp32.
__device__ void pool_window(const Params &p, const int *map, int base, float *pooled) {
    for (int c = threadIdx.x; c < kKVL; c += kThreads) {
        float m = neg_inf(), l = 0.0f, acc = 0.0f;
        for (int j = 0; j < 128; ++j) {
            const int u = map[j];
            const float *row = u >= 0 ? p.kv_gate + (long long)u * 2 * kKVL
                                      : p.ring + (long long)(base + j) * 2 * kKVL;
            const float kv = row[c], s = row[kKVL + c] + p.ape[j * kKVL + c];
            if (s > m) {
                const float a = expf(m - s);
                l = l * a + 1.0f;
                acc = acc * a + kv;
                m = s;
            } else {
                const float e = expf(s - m);
                l += e;
                acc += e * kv;
            }
        }
        pooled[c] = round_bf16(acc / l);
    }
}

// The c128 compressor of token t if it fires (p % 128 == 127, c128_out_loc[t] >= 0).
template <int kDraft>
__device__ void compress_token(const Params &p, int t, unsigned char *smem, bool wait) {
    const int pos = p.positions[t], loc = p.c128_out_loc[t];
    if ((pos & 127) != 127 || loc < 0) return;  // uniform across the CTA
    if (wait) {                                 // no barrier 0: the kv_gate blocks' count
        if (threadIdx.x == 0) {
            wait_count(p.bank + kGateDoneWord, 2 * kKVL / kP1BN);
            __threadfence();
        }
        __syncthreads();
    }
    int *map = reinterpret_cast<int *>(smem);
    float *pooled = reinterpret_cast<float *>(smem + 128 * sizeof(int));
    const int base = p.ring_row[t] - 127, first = pos - 127;
    build_window_map<kDraft>(p, t, base, first, map);
    pool_window(p, map, base, pooled);
    __syncthreads();
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        float v[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) v[i] = pooled[lane * 16 + i];
        norm_gain_rope_row(v, p.c128_norm_w, p.kv_eps, p.c128_freqs + (long long)first * 64,
                           lane);
        write_kv_row(p.c128_pool, p.c128_page_bytes, p.c128_page_shift, loc, v, lane);
    }
    __syncthreads();
}

// halves > 0: no barrier 0 before it (T <= kQStreamTokens): each item waits for the phase-1
// blocks it reads (halves: phase 1's token halves, p1_halves).
template <int kPage, int kDraft, bool kHca>
__device__ void phase_token_rows(const Params &p, unsigned char *smem, unsigned halves) {
    // The warp items on the CTAs from the last one down (at T <= 16 those have no phase-1 slice:
    // they reach phase 2 first), the compressors from the first one up.
    if (kHca)
        for (int t = blockIdx.x; t < p.T; t += gridDim.x)
            compress_token<kDraft>(p, t, smem, halves != 0);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int item = ((int)gridDim.x - 1 - (int)blockIdx.x) * kWarps + warp; item < 2 * p.T;
         item += gridDim.x * kWarps) {
        if (item < p.T)
            qr_row(p, item, lane, halves);
        else
            kv_row<kPage>(p, item - p.T, lane, halves);
    }
}

// ---- phase 3: q projection and the ring update ----------------------------------------------

// kv_score_ring[kv_gate_ring_row[u]] = g[u], unless a later position of the launch maps there.
template <int kDraft>
__device__ void ring_write(const Params &p, int u) {
    const int row = p.ring_row[u], q = p.positions[u];
    int lo, hi;
    request_range<kDraft>(p, u, &lo, &hi);
    bool superseded = false;
    for (int v = lo + threadIdx.x; v < hi; v += kThreads) {
        const int qv = p.positions[v];
        superseded |= v != u && p.ring_row[v] == row && (qv > q || (qv == q && v > u));
    }
    if (__syncthreads_or(superseded)) return;
    const float4 *src = reinterpret_cast<const float4 *>(p.kv_gate + (long long)u * 2 * kKVL);
    float4 *dst = reinterpret_cast<float4 *>(p.ring + (long long)row * 2 * kKVL);
    for (int i = threadIdx.x; i < 2 * kKVL / 4; i += kThreads) dst[i] = src[i];
}

// q = bf16(qr @ Wd_qb^T): this CTA's tiles blockIdx.x, + gridDim.x, ... (m-tiles fastest)
// through one pipeline that carries over from tile to tile (gemm::mma_tiles), so it ramps up once.
template <class Cfg>
__device__ void q_projection_tiles(const Params &p, unsigned char *smem) {
    const int mt = (p.T + Cfg::kBM - 1) / Cfg::kBM;
    const int tiles = mt * (kQCols / Cfg::kBN);
    const int count = (int)blockIdx.x < tiles ? (tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1
                                              : 0;
    gemm::Operands op;
    op.a = p.qr, op.a_sf = nullptr, op.lda = kQL, op.lda_sf = 0;
    op.w = p.wq_b, op.w_sf = p.wq_b_sf, op.ldw = kQL, op.w_kb = kQL / 32;
    op.w_k0 = 0, op.k_len = kQL;
    const StoreBf16 store{p.q_or_x, kQCols};
    gemm::mma_tiles<Cfg>(
        op, count,
        [&](int i) {
            const int tile = (int)blockIdx.x + i * (int)gridDim.x;
            const int m0 = (tile % mt) * Cfg::kBM;
            return gemm::TileCoord{m0, (tile / mt) * Cfg::kBN, min(p.T - m0, Cfg::kBM)};
        },
        smem,
        [&](int, const gemm::TileCoord &c, const gemm::Accum<Cfg> &acc) {
            for_each_pair<Cfg>(acc, c.m_valid, [&](int r, int col, float v0, float v1) {
                store(c.m0 + r, c.n0 + col, v0, v1);
            });
        });
}

// T <= 16: q = bf16(qr @ Wd_qb^T) by the weight-streaming GEMM (common/stream_gemm.cuh) on qr's
// e4m3 codes and scales (phase 2 wrote them into the qr region): this CTA's 128-row blocks of
// wq_b (the tiles of prefetch_q_weights) through one TMA ring, 4 consumer warps and a producer
// warp (warps 5..7 wait at the next grid barrier). The kernel's second parameter holds the TMA
// descriptors: W = wq_b [32768, 1024], A = the qr region's codes (T rows of 1024 bytes, row
// stride 2048), sf = wq_b_sf (runtime/dsv4_attention.c; zeroed and unused when T > 16).
template <class Cfg>
__device__ void q_projection_stream(const Params &p, const sgemm::Maps &maps, int t0,
                                    unsigned char *smem) {
    constexpr int kTiles = kQCols / Cfg::kBN;
    const int count = (int)blockIdx.x < kTiles ? (kTiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1
                                               : 0;
    const unsigned char *qr = reinterpret_cast<const unsigned char *>(p.qr) + (long long)t0 * 2 * kQL;
    sgemm::Operands op;
    op.a = qr, op.a_sf = qr + kQL, op.lda = 2 * kQL, op.lda_sf = 2 * kQL;
    op.w = p.wq_b, op.w_sf = p.wq_b_sf, op.ldw = kQL, op.w_kb = kQL / 32;
    op.w_k0 = 0, op.k_len = kQL, op.T = min(p.T - t0, Cfg::kTP);
    op.a_col0 = 0, op.maps = &maps;
    sgemm::run_tiles<Cfg>(
        op, count, [](int i) { return ((int)blockIdx.x + i * (int)gridDim.x) * Cfg::kBN; }, smem,
        [&] {
            while (ld_acquire_gpu(p.bank + kQrReadyWord) < (unsigned)p.T) __nanosleep(32);
            if (threadIdx.x == 0) trace::mark_first(trace::kP3Ready);
        },
        [&](int, int n0, const float *D, int T) {
            if (threadIdx.x == 0) trace::mark_first(trace::kP3Epi);
            for (int x = (int)threadIdx.x; x < T * Cfg::kBN / 2; x += Cfg::kConsumers) {
                const int t = x / (Cfg::kBN / 2), r = 2 * (x % (Cfg::kBN / 2));
                *reinterpret_cast<unsigned *>(p.q_or_x + (long long)(t0 + t) * kQCols + n0 + r) =
                    pack_bf16x2(D[r * Cfg::kDPitch + t], D[(r + 1) * Cfg::kDPitch + t]);
            }
        });
}

template <int kDraft, bool kHca>
__device__ void phase_q_projection(const Params &p, const sgemm::Maps &maps,
                                   unsigned char *smem) {
    if (p.T <= 8) {
        q_projection_stream<CfgQbStream1>(p, maps, 0, smem);
    } else if (p.T <= 16) {
        q_projection_stream<CfgQbStream2>(p, maps, 0, smem);
    } else if (kQStreamTokens > 16 && p.T <= kQStreamTokens) {
        if constexpr (kQStreamTokens > 16) q_projection_stream<CfgQbStream8>(p, maps, 0, smem);
    } else if (kWideQ && p.T <= CfgQbWide::kBM) {
        q_projection_tiles<CfgQbWide>(p, smem);
    } else {
        q_projection_tiles<CfgQb>(p, smem);
    }
}

// ---- phase 4: sparse attention --------------------------------------------------------------

namespace attn {
constexpr int kRows = 64;                   // KV rows per tile
constexpr int kLd = kHeadDim + 8;           // bf16 per row of sQ and sKV (1040 B)
constexpr int kSLd = kRows + 4;             // fp32 per row of sS
constexpr int kPLd = kRows + 8;             // bf16 per row of sP (144 B)
constexpr int kRawBytes = kRows * (kRowBytes + kSlotBytes);
// Heads per work item: 32 (two M tiles sharing each dequantized tile) in unsplit launches, where
// 16-head items made two or more waves that each dequantized the same rows, and in HCA split
// launches of 8 < T <= 16 (kWideHcaSplitT), where the runtime doubles the parts per token
// instead (mla__dsv4_kv_splits), so that an item has half the rows of a 16-head one (HCA T 16:
// 3 tiles of 32 heads a CTA instead of 6 of 16, measured 96.7 -> 94.4 us); 16 (one MMA M tile)
// in SWA split launches (at most 128 rows: the parts give the parallelism; 32-head items with 4
// parts measured 3.5..4.7 us slower at T 4 / 16) and HCA ones of T <= 8 (at T 4, 32-head items
// in 16 parts of one tile measured 77.3 -> 80.6 us against 16-head ones in 8 parts of two).
template <int kHG>
struct Layout {
    static_assert(kHG == 16 || kHG == 32, "16 or 32 heads per item");
    static constexpr int kMT = kHG / 16;    // MMA M tiles
    static constexpr int kGroups = kHeads / kHG;
    static constexpr int kOffQ = 0;
    static constexpr int kOffKV = kOffQ + kHG * kLd * 2;
    static constexpr int kOffRaw = kOffKV + kRows * kLd * 2;     // 2 raw tiles (double buffer)
    static constexpr int kOffTbl = kOffRaw + 2 * kRawBytes;      // [2][2][kRows] row, slot pointers
    static constexpr int kOffS = kOffTbl + 2 * 2 * kRows * 8;
    static constexpr int kOffP = kOffS + kHG * kSLd * 4;
    static constexpr int kOffStat = kOffP + kHG * kPLd * 2;      // corr, m, l [kHG] each
    static constexpr int kSmemBytes = kOffStat + 3 * kHG * 4;
    static_assert(kRawBytes % 16 == 0 && kOffTbl % 16 == 0 && kOffS % 16 == 0, "16-byte regions");
};
constexpr int kSmemBytes = Layout<32>::kSmemBytes > Layout<16>::kSmemBytes
                               ? Layout<32>::kSmemBytes : Layout<16>::kSmemBytes;
}  // namespace attn

// The launch's phase-4 head group (the rule above).
constexpr int kWideHcaSplitT = 8;   // HCA split launches of more tokens: 32-head items
template <bool kHca>
__device__ __forceinline__ bool wide_items(const Params &p) {
    return !p.split || (kHca && p.T > kWideHcaSplitT);
}

// Work items of a launch with kHG heads per item.
template <int kHG>
__device__ __forceinline__ int item_count(const Params &p) {
    return p.T * attn::Layout<kHG>::kGroups * (p.split ? p.split : 1);
}

// One work item: token t, heads kHG hg .. kHG hg + kHG - 1, virtual rows [begin, end) of the
// token's row set (SWA rows then compressed rows).
struct Item {
    int t, hg, split, begin, end;
    int4 plan;
};

template <int kHG>
__device__ __forceinline__ Item item_of(const Params &p, int index, bool has_c128) {
    constexpr int kGroups = attn::Layout<kHG>::kGroups;
    const int nsplit = p.split ? p.split : 1;
    Item it;
    it.t = index / (kGroups * nsplit);
    const int rem = index % (kGroups * nsplit);
    it.hg = rem / nsplit;
    it.split = rem % nsplit;
    it.plan = p.plan[it.t];
    const int rows = it.plan.w > 0 ? it.plan.w : 0;
    const int c128 = has_c128 ? max(p.c128_attn_len[it.t], 0) : 0;
    const int total = rows + c128, chunk = (total + nsplit - 1) / nsplit;
    it.begin = p.split ? min(total, it.split * chunk) : 0;
    it.end = p.split ? min(total, it.begin + chunk) : total;
    return it;
}

// Device address of virtual row g of an item's row set and of its scale slot.
template <int kPage, bool kHca>
__device__ __forceinline__ void row_source(const Params &p, const Item &it, int g,
                                           const unsigned char **data,
                                           const unsigned char **scales) {
    if (!kHca || g < it.plan.w) {
        const int slot = g < it.plan.y ? it.plan.x + g : it.plan.z + (g - it.plan.y);
        const unsigned char *base =
            p.kv_cache + (long long)(slot >> ilog2(kPage)) * p.kv_page_bytes;
        *data = base + (slot & (kPage - 1)) * kRowBytes;
        *scales = base + kPage * kRowBytes + (slot & (kPage - 1)) * kSlotBytes;
    } else {
        const int j = g - it.plan.w, shift = p.c128_page_shift;
        const int page = p.c128_page_table[it.t * p.c128_pt_stride + (j >> shift)];
        const unsigned char *base = p.c128_pool + (long long)page * p.c128_page_bytes;
        *data = base + (j & ((1 << shift) - 1)) * kRowBytes;
        *scales = base + ((long long)kRowBytes << shift) + (j & ((1 << shift) - 1)) * kSlotBytes;
    }
}

// Row and scale-slot addresses of the tile's rows g0.. (null beyond the item's end).
template <int kPage, bool kHca>
__device__ void fill_row_table(const Params &p, const Item &it, int g0,
                               const unsigned char **tbl) {
    if (threadIdx.x < attn::kRows) {
        const int g = g0 + threadIdx.x;
        const unsigned char *d = nullptr, *s = nullptr;
        if (g < it.end) row_source<kPage, kHca>(p, it, g, &d, &s);
        tbl[threadIdx.x] = d;
        tbl[attn::kRows + threadIdx.x] = s;
    }
}

// cp.async of a tile's raw rows (576 B each) and scale slots; missing rows are zero-filled.
__device__ void load_kv_tile(const unsigned char *const *tbl, unsigned char *raw,
                             const void *dummy) {
    constexpr int chunks = kRowBytes / 16;
    for (int i = threadIdx.x; i < attn::kRows * chunks; i += kThreads) {
        const int r = i / chunks, c = i % chunks;
        const unsigned char *d = tbl[r];
        cp_async_16(raw + r * kRowBytes + c * 16, d ? d + c * 16 : dummy, d != nullptr);
    }
    if (threadIdx.x < attn::kRows) {
        const unsigned char *s = tbl[attn::kRows + threadIdx.x];
        cp_async_8(raw + attn::kRows * kRowBytes + threadIdx.x * kSlotBytes, s ? s : dummy,
                   s != nullptr);
    }
}

// Raw fp8 rows -> bf16 K/V tile (exact): 28 e4m3 chunks of 16 values and 8 bf16 chunks per row.
__device__ void dequant_kv_tile(const unsigned char *raw, unsigned char *kv) {
    constexpr int chunks = kRowBytes / 16;
    for (int i = threadIdx.x; i < attn::kRows * chunks; i += kThreads) {
        const int r = i / chunks, c = i % chunks;
        const uint4 q = *reinterpret_cast<const uint4 *>(raw + r * kRowBytes + c * 16);
        unsigned char *dst = kv + r * attn::kLd * 2;
        if (c < kNope / 16) {
            const int e = (int)raw[attn::kRows * kRowBytes + r * kSlotBytes + c / 4] - 127;
            const unsigned w[4] = {q.x, q.y, q.z, q.w};
            float v[16];
            fp8::decode_e4m3<16>(w, e, v);
            store_bf16<16>(dst + c * 32, v);
        } else {
            *reinterpret_cast<uint4 *>(dst + kNope * 2 + (c - kNope / 16) * 16) = q;
        }
    }
}

// sQ[h] = bf16(rope(rmsnorm(q_h, no gain, q_eps))) for the item's kHG heads (A2); warp w:
// kHG / 8 heads.
template <int kHG>
__device__ void load_q(const Params &p, const Item &it, unsigned char *sq) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const float *f_row = p.freqs + (long long)p.positions[it.t] * 64;
#pragma unroll
    for (int hh = 0; hh < kHG / kWarps; ++hh) {
        const int hl = warp * (kHG / kWarps) + hh;
        const __nv_bfloat16 *src =
            p.q_or_x + (long long)it.t * kQCols + (it.hg * kHG + hl) * kHeadDim + lane * 16;
        float v[16];
        load_bf16<16>(src, v);
        float ss = 0.0f;
#pragma unroll
        for (int i = 0; i < 16; ++i) ss += v[i] * v[i];
        const float r = 1.0f / sqrtf(group_sum<32>(ss) / kHeadDim + p.q_eps);
#pragma unroll
        for (int i = 0; i < 16; ++i) v[i] *= r;
        if (lane >= kNope / 16) rope_apply<16>(v, f_row, (lane - kNope / 16) * 16);
        store_bf16<16>(sq + hl * attn::kLd * 2 + lane * 32, v);
    }
}

// sS[h][r] = scale2 * Q[h] . K[r] (log2 units), -inf for rows >= nvalid; warp w: rows 8w..8w+7
// of every M tile (heads 16 mt ..), each K fragment loaded once for the kMT tiles.
template <int kMT>
__device__ void qk_scores(const unsigned char *sq, const unsigned char *skv, float *ss,
                          int nvalid, float scale2) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float c0[kMT][4] = {}, c1[kMT][4] = {};
#pragma unroll 4
    for (int k = 0; k < kHeadDim; k += 32) {
        unsigned b[4];
        ldmatrix_x4(b, skv + (8 * warp + lane % 8) * attn::kLd * 2 + (k + (lane / 8) * 8) * 2);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
            const unsigned char *qa = sq + (16 * mt + lane % 16) * attn::kLd * 2;
            unsigned a0[4], a1[4];
            ldmatrix_x4(a0, qa + (k + (lane / 16) * 8) * 2);
            ldmatrix_x4(a1, qa + (k + 16 + (lane / 16) * 8) * 2);
            mma_bf16_16816(c0[mt], a0, b[0], b[1]);
            mma_bf16_16816(c1[mt], a1, b[2], b[3]);
        }
    }
    const int r = 8 * warp + (lane % 4) * 2, h = lane / 4;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = r + (i & 1), head = 16 * mt + h + 8 * (i >> 1);
            ss[head * attn::kSLd + row] =
                row < nvalid ? (c0[mt][i] + c1[mt][i]) * scale2 : neg_inf();
        }
}

// Online softmax over one tile: warp w, half j owns head 2w + j of each M tile (4 rows per
// lane); updates its (m, l), writes P (bf16) and the head's rescale factor.
template <int kMT>
__device__ void softmax_tile(const float *ss, unsigned char *sp, float *corr, float (&m)[kMT],
                             float (&l)[kMT]) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int r0 = (lane % 16) * 4;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
        const int h = 16 * mt + 2 * warp + lane / 16;
        const float4 s = *reinterpret_cast<const float4 *>(ss + h * attn::kSLd + r0);
        const float m_new = fmaxf(m[mt], group_max<16>(fmaxf(fmaxf(s.x, s.y), fmaxf(s.z, s.w))));
        const float base = softmax_base(m_new), a = softmax_rescale(m[mt], m_new);
        const unsigned p01 = pack_bf16x2(exp2_fast(s.x - base), exp2_fast(s.y - base));
        const unsigned p23 = pack_bf16x2(exp2_fast(s.z - base), exp2_fast(s.w - base));
        const float psum = bf16_lo(p01) + bf16_hi(p01) + bf16_lo(p23) + bf16_hi(p23);
        l[mt] = l[mt] * a + group_sum<16>(psum);
        m[mt] = m_new;
        *reinterpret_cast<uint2 *>(sp + (h * attn::kPLd + r0) * 2) = make_uint2(p01, p23);
        if (lane % 16 == 0) corr[h] = a;
    }
}

// o = o * corr + P V for this warp's 64 dims (64 w ..), each M tile's 16 heads:
// o[M tile][n-tile][C fragment]; each V fragment loaded once for the kMT tiles.
template <int kMT>
__device__ void pv_accumulate(const unsigned char *sp, const unsigned char *skv,
                              const float *corr, float (&o)[kMT][8][4]) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
        const float c_lo = corr[16 * mt + lane / 4], c_hi = corr[16 * mt + lane / 4 + 8];
#pragma unroll
        for (int n = 0; n < 8; ++n) {
            o[mt][n][0] *= c_lo, o[mt][n][1] *= c_lo, o[mt][n][2] *= c_hi, o[mt][n][3] *= c_hi;
        }
    }
#pragma unroll
    for (int k = 0; k < attn::kRows; k += 16) {
        unsigned a[kMT][4];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
            ldmatrix_x4(a[mt], sp + (16 * mt + lane % 16) * attn::kPLd * 2 +
                                   (k + (lane / 16) * 8) * 2);
#pragma unroll
        for (int nj = 0; nj < 4; ++nj) {
            unsigned b[4];
            ldmatrix_x4_trans(b, skv + (k + ((lane / 8) % 2) * 8 + lane % 8) * attn::kLd * 2 +
                                     (64 * warp + nj * 16 + (lane / 16) * 8) * 2);
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt) {
                mma_bf16_16816(o[mt][2 * nj], a[mt], b[0], b[1]);
                mma_bf16_16816(o[mt][2 * nj + 1], a[mt], b[2], b[3]);
            }
        }
    }
}

// Writes the item's result: O (normalized with the sink, bf16) into q_or_x for an unsplit token,
// else the part's normalized O and natural LSE into part_o / part_lse.
template <int kMT>
__device__ void store_output(const Params &p, const Item &it, const float *sm, const float *sl,
                             const float (&o)[kMT][8][4]) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int hl = 16 * mt + lane / 4 + 8 * half, head = it.hg * 16 * kMT + hl;
            const float m = sm[hl], l = sl[hl];
            const int d0 = 64 * warp + (lane % 4) * 2;
            if (p.split) {
                const long long row = ((long long)it.t * p.split + it.split) * kHeads + head;
                const float f = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
                for (int n = 0; n < 8; ++n)
                    *reinterpret_cast<float2 *>(p.part_o + row * kHeadDim + d0 + 8 * n) =
                        make_float2(o[mt][n][2 * half] * f, o[mt][n][2 * half + 1] * f);
                if (warp == 0 && lane % 4 == 0) p.part_lse[row] = softmax_lse(m, l);
            } else {
                const bool sink = p.attn_sink != nullptr;
                const float f = softmax_out_scale(m, l, sink, sink ? p.attn_sink[head] : 0.0f);
                __nv_bfloat16 *dst = p.q_or_x + (long long)it.t * kQCols + head * kHeadDim + d0;
#pragma unroll
                for (int n = 0; n < 8; ++n)
                    *reinterpret_cast<unsigned *>(dst + 8 * n) =
                        pack_bf16x2(o[mt][n][2 * half] * f, o[mt][n][2 * half + 1] * f);
            }
        }
}

constexpr bool kLateDependents = true;   // false: dependents allowed at the kernel's start

template <int kPage, bool kHca, int kHG>
__device__ void attention_item(const Params &p, const Item &it, unsigned char *smem) {
    using namespace attn;
    using L = Layout<kHG>;
    constexpr int kMT = L::kMT;
    unsigned char *sq = smem + L::kOffQ, *skv = smem + L::kOffKV, *sp = smem + L::kOffP;
    float *ss = reinterpret_cast<float *>(smem + L::kOffS);
    float *corr = reinterpret_cast<float *>(smem + L::kOffStat), *sm = corr + kHG, *sl = sm + kHG;
    const unsigned char **tbl = reinterpret_cast<const unsigned char **>(smem + L::kOffTbl);
    unsigned char *raw = smem + L::kOffRaw;
    const float scale2 = p.sm_scale * kLog2e;
    const int ntiles = (it.end - it.begin + kRows - 1) / kRows;
    float m[kMT], l[kMT], o[kMT][8][4] = {};
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) m[mt] = neg_inf(), l[mt] = 0.0f;
    // The first tile's copies first, then Q (its loads and math overlap the copies; the loop's
    // barriers order sQ before its first use).
    if (ntiles > 0) {
        fill_row_table<kPage, kHca>(p, it, it.begin, tbl);
        __syncthreads();
        load_kv_tile(tbl, raw, p.kv_cache);
    }
    cp_async_commit();
    load_q<kHG>(p, it, sq);
    if (kLateDependents) pdl::launch_dependents();
    if (threadIdx.x == 0) trace::mark_first(trace::kP4Q);
    for (int k = 0; k < ntiles; ++k) {
        const bool more = k + 1 < ntiles;
        const unsigned char **next_tbl = tbl + ((k + 1) & 1) * 2 * kRows;
        if (more) fill_row_table<kPage, kHca>(p, it, it.begin + (k + 1) * kRows, next_tbl);
        __syncthreads();  // the table is ready; the previous tile's sKV, sP are free
        if (more) load_kv_tile(next_tbl, raw + ((k + 1) & 1) * kRawBytes, p.kv_cache);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        if (threadIdx.x == 0) trace::mark_first(trace::kP4Kv);
        dequant_kv_tile(raw + (k & 1) * kRawBytes, skv);
        __syncthreads();
        if (threadIdx.x == 0) trace::mark_first(trace::kP4Deq);
        qk_scores<kMT>(sq, skv, ss, min(kRows, it.end - it.begin - k * kRows), scale2);
        __syncthreads();
        if (threadIdx.x == 0) trace::mark_first(trace::kP4Qk);
        softmax_tile<kMT>(ss, sp, corr, m, l);
        __syncthreads();
        if (threadIdx.x == 0) trace::mark_first(trace::kP4Sm);
        pv_accumulate<kMT>(sp, skv, corr, o);
        if (threadIdx.x == 0) trace::mark_first(trace::kP4Tile);
    }
    cp_async_wait<0>();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane % 16 == 0)
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
            const int h = 16 * mt + 2 * warp + lane / 16;
            sm[h] = m[mt], sl[h] = l[mt];
        }
    __syncthreads();
    store_output<kMT>(p, it, sm, sl, o);
    __syncthreads();
}

template <int kPage, bool kHca, int kHG>
__device__ void phase_attention_hg(const Params &p, unsigned char *smem) {
    const int items = item_count<kHG>(p);
    for (int i = blockIdx.x; i < items; i += gridDim.x) {
        attention_item<kPage, kHca, kHG>(p, item_of<kHG>(p, i, kHca), smem);
        if (threadIdx.x == 0) trace::mark_first(trace::kP4First);
    }
}

template <int kPage, bool kHca>
__device__ void phase_attention(const Params &p, unsigned char *smem) {
    if (wide_items<kHca>(p)) phase_attention_hg<kPage, kHca, 32>(p, smem);
    else phase_attention_hg<kPage, kHca, 16>(p, smem);
    trace::mark0(trace::kP4Done);
}

// L2 hints for the KV rows and scale slots of this CTA's phase-4 items (head group 0 only; T <=
// kBM): threads tid = 0 .. n - 1 of the calling ones. Rows of this launch (phase 2 writes them)
// are hinted before they are written: harmless, L2 is coherent.
template <int kPage, bool kHca, int kHG>
__device__ void prefetch_kv_rows_hg(const Params &p, int tid, int n) {
    constexpr int kLines = 7;                   // offsets 0, 128, .., 512, 575 of the row; slot
    const int items = item_count<kHG>(p);
    for (int i = blockIdx.x; i < items; i += gridDim.x) {
        const Item it = item_of<kHG>(p, i, kHca);
        if (it.hg != 0) continue;
        for (int x = tid; x < (it.end - it.begin) * kLines; x += n) {
            const unsigned char *d, *sc;
            row_source<kPage, kHca>(p, it, it.begin + x / kLines, &d, &sc);
            const int part = x % kLines;
            gemm::prefetch_l2(part == kLines - 1 ? sc : d + min(part * 128, kRowBytes - 1));
        }
    }
}

template <int kPage, bool kHca>
__device__ void prefetch_kv_rows(const Params &p, int tid, int n) {
    if (p.T > kBM) return;
    if (wide_items<kHca>(p)) prefetch_kv_rows_hg<kPage, kHca, 32>(p, tid, n);
    else prefetch_kv_rows_hg<kPage, kHca, 16>(p, tid, n);
}

// ---- the kernel -----------------------------------------------------------------------------

__host__ __device__ constexpr int cmax(int a, int b) { return a > b ? a : b; }
constexpr int kGemmSmemBytes =
    cmax(cmax(cmax(CfgQkv::kSmemBytes, CfgGate::kSmemBytes),
              cmax(CfgQb::kSmemBytes, CfgQbWide::kSmemBytes)),
         cmax(cmax(cmax(CfgQbStream1::kSmemBytes, CfgQbStream2::kSmemBytes),
                   CfgQbStream8::kSmemBytes),
              cmax(cmax(CfgP1<kP1MaxH, 4>::kSmemBytes, CfgP1W<kP1OnePassMaxH>::kSmemBytes),
                   CfgP1Gate<8>::kSmemBytes)));
constexpr int kSmemBytes =
    cmax(cmax(kGemmSmemBytes, attn::kSmemBytes), 128 * 4 + kKVL * 4 /* compressor */);
static_assert(kSmemBytes <= kSmemBudget, "raise DSV4_ATTN_SMEM in runtime/dsv4_attention.c");
static_assert(CfgQkv::kThreads == kThreads && CfgGate::kThreads == kThreads &&
                  CfgQb::kThreads == kThreads && CfgQbWide::kThreads == kThreads,
              "one block size");

template <int kH, int kPage, int kDraft, int kHca>
__global__ void __launch_bounds__(kThreads, 1) attention_kernel(
    const Params p, const __grid_constant__ sgemm::Maps qmaps,
    const __grid_constant__ P1Maps p1maps) {
    static_assert(kH % 128 == 0 && kH > 0, "H: a positive multiple of 128");
    static_assert(kPage > 0 && (kPage & (kPage - 1)) == 0, "page_size: a power of two");
    static_assert(kDraft >= 0 && (kHca == 0 || kHca == 1), "draft_tokens >= 0, hca 0 or 1");
    extern __shared__ __align__(128) unsigned char smem[];
    if (p.params_bytes != (int)sizeof(Params) || gemm::dynamic_smem_bytes() < (unsigned)kSmemBytes)
        __trap();  // the host's argument struct or smem size drifted from this file
    // mla_output_proj's kernel A is launched as a programmatic dependent: its CTAs may take the
    // SMs this grid's CTAs leave (they wait for this grid's completion before reading anything).
    // kLateDependents: a CTA with phase-4 items allows them only once its first item's Q and
    // KV loads are issued (CTAs without items by leaving), so that kernel A's weight copies do
    // not queue in front of those loads.
    if (!kLateDependents) pdl::launch_dependents();
    trace::begin(p.T);
    auto hints = [&](int tid, int n) {
        prefetch_kv_rows<kPage, kHca != 0>(p, tid, n);
        prefetch_q_weights(p, tid, n);
    };
    const bool hinted = phase_projections<kH, kHca != 0>(p, p1maps, smem, hints);
    trace::mark0(trace::kP1Done);
    // The wq_b L2 hints after phase 1 (before barrier 0, or without it after phase 2, so that
    // the phase-2 rows do not wait behind them).
    auto late_hints = [&] {
        if (!kQHints) return;
        if (!kEarlyPrefetch)
            prefetch_q_weights(p, (int)threadIdx.x, kThreads);
        else if (!hinted)
            hints((int)threadIdx.x, kThreads);
    };
    // T <= kQStreamTokens on the stream phase 1: no barrier 0 (phase 2 waits on block counts).
    const bool no_b0 = kNoBarrier0 && kH <= kP1MaxH && p.T <= kQStreamTokens;
    if (!no_b0) {
        late_hints();
        trace::mark0(trace::kPrefetch);
        grid_barrier(p.bank + 0);
    }
    trace::mark0(trace::kB0);
    phase_token_rows<kPage, kDraft, kHca != 0>(p, smem, no_b0 ? p1_halves<kH, kHca != 0>(p.T) : 0u);
    trace::mark0(trace::kP2Done);
    if (no_b0 && kQHintsNoB0) late_hints();
    // T <= kQStreamTokens: phase 3 waits for the qr rows alone (kQrReadyWord), no barrier 1.
    if (p.T > kQStreamTokens) grid_barrier(p.bank + 1);
    phase_q_projection<kDraft, kHca != 0>(p, qmaps, smem);
    trace::mark0(trace::kP3Done);
    grid_barrier(p.bank + 2);
    trace::mark0(trace::kB2);
    if (blockIdx.x == 0 && threadIdx.x < kGateDoneWord - kXReadyWord + 1)  // words 4..8: read
        p.bank[kXReadyWord + threadIdx.x] = 0u;                          // before barrier 2 only
    // HCA: the ring rows of this launch's tokens, after every compressor of phase 2 has read the
    // ring (barrier 2; with T <= kQStreamTokens there is no barrier 1), by the last CTAs (the
    // ones with the fewest phase-4 items).
    if (kHca)
        for (int u = (int)gridDim.x - 1 - (int)blockIdx.x; u < p.T; u += (int)gridDim.x)
            ring_write<kDraft>(p, u);
    phase_attention<kPage, kHca != 0>(p, smem);
    if (p.reset_barriers) grid_exit_reset(p.bank + kExitWord, p.bank, kExitWord + 1);
    trace::finish(p.T, kHca);
}

}  // namespace dsv4
}  // namespace mla
