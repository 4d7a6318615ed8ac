// DeepSeek-V4 output projection (mla_output_proj): kernels A (wo_a) and B (wo_b), B PDL-chained,
// or at T <= 16 both in one launch (output_proj_stream_kernel, at the end of this file).
//
// Template parameters (the specs "dsv4_output_proj_a" / "dsv4_output_proj_b" fix them):
//   kH  hidden size, a multiple of 512 in [512, 4096]
//   kG  wo_a groups: K = 32768 / kG input columns and R = 2 kH / kG output rows per group,
//       K % 512 == 0, R % 256 == 0
// Both kernels run kThreads = 128 threads (4 warps) per CTA; the runtime
// (runtime/dsv4_output_proj.c) mirrors the tile shapes and shared memory sizes below.
//
// Math (spec/dsv4.md §2.4, §2.5, §2.2, A11, A13, A16), T tokens, 64 heads of 512 dims:
//   O[t, h]      split launch (T <= 16): LSE = logsumexp_s lse_s; O = sum_s exp(lse_s - LSE) O_s,
//                times 1 / (1 + exp(sink[h] - LSE)) with a sink; every part empty -> O = 0;
//                else O = q_or_x[t, h] (bf16, normalized with the sink by the attention)
//   O[448:512]   rope^-1 with freqs_real[positions[t]]: (a, b) -> (a c + b s, -a s + b c)
//   A            bf16(O) flat [T, 32768], mxq'd: group-32 e4m3 / ue8m0 (common/fp8.cuh)
//   o_lora       bf16(A[:, gK:(g+1)K] @ Wd_oa[gR:(g+1)R, :]^T) for each group g    (kernel A)
//   out          bf16(mxq(o_lora) @ Wd_ob^T)  [T, kH]                                (kernel B)
// The GEMMs are common/gemm.cuh: fp8 A with row-major group-32 scales, fp8 W with SfAtom scales,
// both dequantized to bf16 (exact) and multiplied with mma.sync, fp32 accumulation.
//
// Kernel A, one CTA per work item, items taken in ticket order (common/pdl.cuh):
//   items [0, n_qtiles)   quantize: units (t, h) = t * 64 + h, units_per_qtile of them per item,
//                         one warp per unit (lane l: dims 16l..16l+15, two lanes per scale
//                         group): combine or load, inverse RoPE, bf16, mxq -> act_q / act_sf;
//                         then adds its unit count to ready[m-tile] of the units' tokens.
//   the next items        GEMM tiles (m-tile, n-tile) of o_lora, m-tile major, 64 x 64 each:
//                         wait until ready[m-tile] counts every unit of the m-tile's tokens,
//                         then one gemm::mma_tile over the group's K; the epilogue rounds to
//                         bf16 (o_lora) and quantizes each aligned group of 32 columns of a row
//                         (a warp holds 32 columns) -> o_lora_q / o_lora_sf: mxq(o_lora) is done
//                         here, once, instead of in every CTA of kernel B.
//   With one m-tile (T <= 64) and few tiles per SM the runtime splits each GEMM tile's K into
//   kslices slices of slice_steps K-steps: item = (tile, slice), slices of a tile adjacent; each
//   writes its fp32 partial to part, and the tile's last slice to finish (a counter at bank word
//   128 + tile, reset by that CTA) sums the partials in slice order, then runs the epilogue.
//   The ticket counter and the ready counters live in the layer kind's barrier bank (zero on
//   entry: kernel B of the previous call leaves words 0..127 zeroed; at T > 16 the runtime also
//   zeroes the bank first). At T <= 16 kernel A is launched as a programmatic dependent of the
//   previous kernel (mla_attention): its stream CTAs (one per 64-row block of wo_a) call
//   launch_dependents, start the wo_a stream (weights only), and their consumer warps call
//   griddepcontrol.wait before claiming and quantizing units (the ticket, a word the attention
//   never touches); the tiled kernel (T > 16, launched plainly, where the wait is a no-op)
//   claims its ticket, then waits.
// Kernel B, grid (kH / 32, m-tiles, K slices), launched with programmatic stream serialization:
//   griddepcontrol.wait (kernel A complete and visible); block (0, 0, 0) zeroes bank words
//   0..127 (the attention's barriers and kernel A's counters: it is left zeroed for the next
//   layer); one gemm::mma_tile of 64 x 32 over K slice blockIdx.z of 2 kH; bf16 out (split-K,
//   one m-tile only: partials and last-slice sum as in kernel A, counter at word 128 + n-tile).
//
// Buffers (row-major, byte offsets of the workspace from mla__dsv4_layout(T, kH, kG)):
//   q_or_x     bf16 [T, 32768]                  read only (unsplit launches)
//   positions  int32 [T]; freqs fp32 [max_pos, 64] interleaved (cos, sin); positions are
//              clamped to [0, max_pos) (the host cannot check device values)
//   part_o     fp32 [T, S, 64, 512], part_lse fp32 [T, S, 64] (split launches, T <= 16: S = split
//              parts per token, runtime/internal.h's mla__dsv4_kv_splits)
//   sink       fp32 [64] or null
//   act_q      e4m3 [T, 32768]; act_sf ue8m0 [T, 1024]        (group j of row t: act_sf[t*1024+j])
//   wo_a       e4m3 [2 kH, K]; wo_a_sf SfAtom over [2 kH, K / 32]
//   o_lora     bf16 [T, 2 kH]; o_lora_q e4m3 [T, 2 kH]; o_lora_sf ue8m0 [T, 2 kH / 32]
//   wo_b       e4m3 [kH, 2 kH]; wo_b_sf SfAtom over [kH, 2 kH / 32]
//   out        bf16 [T, kH]
//   bank       uint32 words: [16] ticket counter, [32 + m] ready[m] (units done of m-tile m),
//              [128 + tile] split-K counters (kernel A's tiles, then kernel B's n-tiles; each
//              back to 0 after its tile's last slice)
//   part       fp32 split-K partials [kslices][T][2 kH] (kernel A), [slices][T][kH] (kernel B)
#include <cuda_bf16.h>

#include "common/bf16.cuh"
#include "common/fp8.cuh"
#include "common/gemm.cuh"
#include "common/pdl.cuh"
#include "common/stream_gemm.cuh"
#include "dsv4/trace.cuh"

namespace mla {
namespace dsv4 {
namespace oproj {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kHeads = 64, kHeadDim = 512, kOCols = kHeads * kHeadDim, kRope0 = 448;
constexpr int kMaxSplits = 16;                           // MLA__DSV4_MAX_SPLITS
constexpr int kBM = 64;                                  // tokens per m-tile, both kernels
constexpr int kUnitsPerMTile = kBM * kHeads;
// The ticket word is one mla_attention never touches (its words: 0..5, 64..127), so kernel A may
// claim it while the attention (its PDL primary) still runs; the runtime no longer zeroes the bank
// before kernel A: kernel B leaves words [0, 128) zeroed, mla_workspace_init zeroes them first.
constexpr int kTicketWord = 16, kReadyWord0 = 32;
// The one-launch stream kernel's (output_proj_stream_kernel): CTAs whose o_lora block is stored,
// and CTAs done (the last one zeroes words [0, 128)).
constexpr int kOLoraWord = 17, kExitWord = 18;
constexpr int kSplitWord0 = 128;   // split-K tile counters: words [128, 128 + n-tiles), one m-tile

// wo_a: 64 x 64 tiles, 2 x 2 warps of 32 x 32 (a warp's 32 columns are one o_lora scale group).
using CfgA = gemm::Config<kBM, 64, 2, 2, 4, gemm::AKind::kFp8>;
// wo_b: 64 x 32 tiles, 4 x 1 warps of 16 x 32 (twice the CTAs of 64-wide tiles for small T).
using CfgB = gemm::Config<kBM, 32, 4, 1, 4, gemm::AKind::kFp8>;
static_assert(CfgA::kThreads == kThreads && CfgB::kThreads == kThreads, "one block size");
static_assert(CfgA::kWarpN % 32 == 0, "the o_lora epilogue quantizes whole 32-column groups");

// Kernel A's arguments (one struct of 8-byte fields; the runtime passes the same layout).
struct ArgsA {
    const __nv_bfloat16 *q_or_x;
    const int *positions;
    const float *freqs;
    const float *part_o;
    const float *part_lse;
    const float *sink;
    unsigned char *act_q;
    unsigned char *act_sf;
    const unsigned char *wo_a;
    const unsigned char *wo_a_sf;
    __nv_bfloat16 *o_lora;
    unsigned char *o_lora_q;
    unsigned char *o_lora_sf;
    unsigned int *bank;
    float *part;                 // split-K partials fp32 [kslices][T][2 kH] (kslices > 1 only)
    long long T, max_pos, split, units_per_qtile, n_qtiles, kslices, slice_steps;
};

struct ArgsB {
    const unsigned char *o_lora_q;
    const unsigned char *o_lora_sf;
    const unsigned char *wo_b;
    const unsigned char *wo_b_sf;
    __nv_bfloat16 *out;
    unsigned int *bank;
    float *part;                 // split-K partials fp32 [gridDim.z][T][kH] (gridDim.z > 1 only)
    long long T, bank_words, slice_steps;
    // output_proj_stream_kernel: K-steps after each ring's first prefetched to L2, of wo_a at
    // the start (while the attention's last CTAs run), of wo_b once wo_a is fully issued
    long long pf_a_steps, pf_b_steps;
};

template <int kH, int kG>
struct Shape {
    static_assert(kH % 512 == 0 && kH >= 512 && kH <= 4096, "H: a multiple of 512 up to 4096");
    static_assert(kG >= 1 && kOCols % kG == 0 && (kOCols / kG) % 512 == 0, "K % 512 == 0");
    static_assert((2 * kH) % kG == 0 && (2 * kH / kG) % 256 == 0, "R % 256 == 0");
    static constexpr int kK = kOCols / kG, kR = 2 * kH / kG, kN = 2 * kH;
    static_assert(kSplitWord0 + kN / 64 <= 256 && kSplitWord0 + kH / 32 <= 256,
                  "split-K tile counters fit the barrier bank");
};

__device__ __forceinline__ float neg_inf() { return __uint_as_float(0xff800000u); }

// Traps when the launch gave less dynamic shared memory than the tile needs.
template <int kBytes>
__device__ __forceinline__ void require_smem() {
    if (gemm::dynamic_smem_bytes() < (unsigned int)kBytes) __trap();
}

// K range [k0, k0 + len) of slice `slice` (slices of `steps` K-steps of 128, the last shorter).
struct KRange {
    int k0, len;
};
__device__ __forceinline__ KRange slice_range(long long slice, long long steps, int k) {
    const int k0 = (int)(slice * steps * 128);
    return {k0, k - k0 < (int)(steps * 128) ? k - k0 : (int)(steps * 128)};
}

// Stores this CTA's fp32 partial of tile (m0, n0) into part[slice][row][n] (rows < T, row
// stride N), arrives on the tile's counter and, in the CTA that arrives last, sums the slices'
// partials in slice order into acc (rows < T; deterministic). Returns whether this CTA is last.
template <class Cfg>
__device__ __forceinline__ bool split_reduce(gemm::Accum<Cfg> &acc, float *part, long long slice,
                                             long long slices, long long T, int m0, int n0,
                                             long long N, unsigned int *counter) {
    using Acc = gemm::Accum<Cfg>;
    const long long slice_stride = T * N;
#pragma unroll
    for (int mt = 0; mt < Cfg::kMT; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const long long row = m0 + Acc::row(mt, half);
            if (row >= T) continue;
#pragma unroll
            for (int nt = 0; nt < Cfg::kNT; ++nt)
                *reinterpret_cast<float2 *>(part + slice * slice_stride + row * N + n0 +
                                            Acc::col(nt, 0)) =
                    make_float2(acc.c[mt][nt][2 * half], acc.c[mt][nt][2 * half + 1]);
        }
    if (!gemm::splitk_arrive(counter, (int)slices)) return false;
#pragma unroll
    for (int mt = 0; mt < Cfg::kMT; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const long long row = m0 + Acc::row(mt, half);
            if (row >= T) continue;
#pragma unroll
            for (int nt = 0; nt < Cfg::kNT; ++nt) {
                const float2 *src =
                    reinterpret_cast<const float2 *>(part + row * N + n0 + Acc::col(nt, 0));
                float2 sum = __ldcg(src);
                for (long long j = 1; j < slices; ++j) {
                    const float2 v = __ldcg(src + j * slice_stride / 2);
                    sum.x += v.x, sum.y += v.y;
                }
                acc.c[mt][nt][2 * half] = sum.x, acc.c[mt][nt][2 * half + 1] = sum.y;
            }
        }
    return true;
}

// ---- kernel A, quantize items -----------------------------------------------------------------

// This lane's 16 dims of O[t, h] from the split partials (§2.4 combine, sink of A16): a.split
// parts per token (<= kMaxSplits); lane s holds part s's LSE and weight, every lane of the warp
// calls it. kWide (the T <= 8 stream kinds, where S reaches 16 and the combine is on the layer's
// critical path): the parts' values are loaded kCombineBatch at a time before any is added, the
// first batch before the weights (which wait for part_lse), so that 16 parts cost two L2 round
// trips instead of a round trip per 4 parts after the LSE's (128 more registers, which only the
// 1-token-tile kinds have to spare). Either way the parts are added in order s = 0, 1, ... (an
// empty part, weight 0, is not added), so both give the same bits.
constexpr int kCombineBatch = 8;
template <bool kWide>
__device__ __forceinline__ void combine_partials(const ArgsA &a, long long t, int h, int lane,
                                                 float (&v)[16]) {
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = 0.f;
    const int S = (int)a.split;
    const float lse = lane < S ? a.part_lse[(t * S + lane) * kHeads + h] : neg_inf();
    if constexpr (kWide) {
        const float4 *base = reinterpret_cast<const float4 *>(
            a.part_o + (t * S * kHeads + h) * kHeadDim + 16 * lane);
        constexpr long long kPartStride = (long long)kHeads * kHeadDim / 4;  // float4s a part
        float4 f[kCombineBatch][4];
        const auto load = [&](int s0) {
#pragma unroll
            for (int j = 0; j < kCombineBatch; ++j)
                if (s0 + j < S)
#pragma unroll
                    for (int q = 0; q < 4; ++q) f[j][q] = base[(s0 + j) * kPartStride + q];
        };
        load(0);
        const float m = group_max<32>(lse);
        if (m == neg_inf()) return;                          // every part empty: O = 0
        const float w = lse == neg_inf() ? 0.f : expf(lse - m);
        const float sum = group_sum<32>(w);
        float norm = 1.f / sum;
        if (a.sink != nullptr) norm /= 1.f + expf(a.sink[h] - (m + logf(sum)));
        for (int s0 = 0; s0 < S; s0 += kCombineBatch) {
            if (s0 > 0) load(s0);
#pragma unroll
            for (int j = 0; j < kCombineBatch; ++j) {
                if (s0 + j >= S) break;
                const float ws = __shfl_sync(0xffffffffu, w, s0 + j) * norm;
                if (ws == 0.f) continue;                     // empty part: not added
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    v[4 * q] += ws * f[j][q].x, v[4 * q + 1] += ws * f[j][q].y;
                    v[4 * q + 2] += ws * f[j][q].z, v[4 * q + 3] += ws * f[j][q].w;
                }
            }
        }
    } else {
        const float m = group_max<32>(lse);
        if (m == neg_inf()) return;                          // every part empty: O = 0
        const float w = lse == neg_inf() ? 0.f : expf(lse - m);
        const float sum = group_sum<32>(w);
        float norm = 1.f / sum;
        if (a.sink != nullptr) norm /= 1.f + expf(a.sink[h] - (m + logf(sum)));
#pragma unroll 4
        for (int s = 0; s < S; ++s) {
            const float ws = __shfl_sync(0xffffffffu, w, s) * norm;
            if (ws == 0.f) continue;                         // empty part: not read
            const float4 *p = reinterpret_cast<const float4 *>(
                a.part_o + ((t * S + s) * kHeads + h) * kHeadDim + 16 * lane);
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const float4 f = p[q];
                v[4 * q] += ws * f.x, v[4 * q + 1] += ws * f.y;
                v[4 * q + 2] += ws * f.z, v[4 * q + 3] += ws * f.w;
            }
        }
    }
}

// This lane's 16 dims of O[t, h] as the attention left them in q_or_x.
__device__ __forceinline__ void load_o(const ArgsA &a, long long t, int h, int lane,
                                       float (&v)[16]) {
    const uint4 *p = reinterpret_cast<const uint4 *>(a.q_or_x + t * kOCols + h * kHeadDim +
                                                     16 * lane);
#pragma unroll
    for (int q = 0; q < 2; ++q) {
        const uint4 w = p[q];
        const unsigned int words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float2 f =
                __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&words[j]));
            v[8 * q + 2 * j] = f.x, v[8 * q + 2 * j + 1] = f.y;
        }
    }
}

// rope^-1 of the pairs among this lane's dims that lie in [448, 512) (lanes 28..31).
__device__ __forceinline__ void inverse_rope(const ArgsA &a, long long t, int lane,
                                             float (&v)[16]) {
    if (16 * lane < kRope0) return;
    long long p = a.positions[t];
    p = p < 0 ? 0 : (p >= a.max_pos ? a.max_pos - 1 : p);
    const float4 *f = reinterpret_cast<const float4 *>(a.freqs + p * 64 + (16 * lane - kRope0));
#pragma unroll
    for (int q = 0; q < 4; ++q) {                            // pairs 2q, 2q+1 of this lane
        const float4 cs = f[q];                              // cos, sin, cos, sin
        const float a0 = v[4 * q], b0 = v[4 * q + 1], a1 = v[4 * q + 2], b1 = v[4 * q + 3];
        v[4 * q] = a0 * cs.x + b0 * cs.y, v[4 * q + 1] = b0 * cs.x - a0 * cs.y;
        v[4 * q + 2] = a1 * cs.z + b1 * cs.w, v[4 * q + 3] = b1 * cs.z - a1 * cs.w;
    }
}

// One unit (t, h) by one warp: O -> rope^-1 -> bf16 -> mxq -> act_q, act_sf (kWide:
// combine_partials').
template <bool kWide = false>
__device__ __forceinline__ void quantize_unit(const ArgsA &a, long long u, int lane) {
    const long long t = u / kHeads;
    const int h = (int)(u % kHeads);
    float v[16];
    if (a.split)
        combine_partials<kWide>(a, t, h, lane, v);
    else
        load_o(a, t, h, lane, v);
    inverse_rope(a, t, lane, v);
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = round_bf16(v[i]);
    unsigned int q[4];
    const unsigned int sf = fp8::quantize_group<32, 16>(v, q);
    const long long col = (long long)h * kHeadDim + 16 * lane;
    *reinterpret_cast<uint4 *>(a.act_q + t * kOCols + col) = make_uint4(q[0], q[1], q[2], q[3]);
    if (lane % 2 == 0) a.act_sf[t * (kOCols / 32) + col / 32] = (unsigned char)sf;
}

// Quantize item qt: its units, then ready[m] += its units of m-tile m (one or two m-tiles).
// Every thread of the block (kW warps) calls it.
template <int kW = kWarps>
__device__ __forceinline__ void quantize_item(const ArgsA &a, long long qt) {
    const long long units = a.T * kHeads;
    const long long u0 = qt * a.units_per_qtile;
    const long long u1 = u0 + a.units_per_qtile < units ? u0 + a.units_per_qtile : units;
    const int warp = (int)(threadIdx.x / 32), lane = (int)(threadIdx.x % 32);
    for (long long u = u0 + warp; u < u1; u += kW) quantize_unit(a, u, lane);
    for (long long m = u0 / kUnitsPerMTile; m * kUnitsPerMTile < u1; ++m) {
        const long long lo = m * kUnitsPerMTile > u0 ? m * kUnitsPerMTile : u0;
        const long long hi = (m + 1) * kUnitsPerMTile < u1 ? (m + 1) * kUnitsPerMTile : u1;
        pdl::signal_add(a.bank + kReadyWord0 + m, (unsigned int)(hi - lo));
    }
}

// ---- kernel A, GEMM items ---------------------------------------------------------------------

// o_lora tile epilogue: bf16 values, and per row and aligned 32-column group the e4m3 bytes
// and ue8m0 scale of mxq (a group is 4 n8 tiles of one warp row: 4 lanes x 8 values).
__device__ __forceinline__ void store_o_lora(const ArgsA &a, const gemm::Accum<CfgA> &acc,
                                             int m0, int n0, long long N) {
    using Acc = gemm::Accum<CfgA>;
#pragma unroll
    for (int mt = 0; mt < CfgA::kMT; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const long long row = m0 + Acc::row(mt, half);
            const bool ok = row < a.T;
#pragma unroll
            for (int g = 0; g < CfgA::kNT / 4; ++g) {
                float v[8];
#pragma unroll
                for (int j = 0; j < 8; ++j)
                    v[j] = round_bf16(acc.c[mt][4 * g + j / 2][2 * half + j % 2]);
                unsigned int q[2];
                const unsigned int sf = fp8::quantize_group<32, 8>(v, q);  // all lanes
                if (!ok) continue;
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const long long at = row * N + n0 + Acc::col(4 * g + j, 0);
                    *reinterpret_cast<__nv_bfloat162 *>(a.o_lora + at) =
                        __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
                    *reinterpret_cast<unsigned short *>(a.o_lora_q + at) =
                        (unsigned short)(q[j / 2] >> (16 * (j % 2)));
                }
                if (threadIdx.x % 4 == 0)
                    a.o_lora_sf[row * (N / 32) + (n0 + Acc::col(4 * g, 0)) / 32] =
                        (unsigned char)sf;
            }
        }
}

// GEMM item gi: K-slice gi % kslices of tile (m-tile t / n-tiles, n-tile t % n-tiles) of
// o_lora, t = gi / kslices (kslices > 1 only with one m-tile: the last slice of a tile to finish
// sums the partials and runs the epilogue).
template <int kH, int kG>
__device__ __forceinline__ void wo_a_item(const ArgsA &a, long long gi, unsigned char *smem) {
    using S = Shape<kH, kG>;
    constexpr int kNTiles = S::kN / CfgA::kBN;
    const long long tile = gi / a.kslices, slice = gi % a.kslices;
    const int mt = (int)(tile / kNTiles), n0 = (int)(tile % kNTiles) * CfgA::kBN;
    const int m0 = mt * kBM, g = n0 / S::kR;
    const long long rows = a.T - m0 < kBM ? a.T - m0 : kBM;
    pdl::wait_at_least(a.bank + kReadyWord0 + mt, (unsigned int)(rows * kHeads));
    const KRange kr = slice_range(slice, a.slice_steps, S::kK);
    gemm::Operands op;
    op.a = a.act_q + (long long)g * S::kK + kr.k0;
    op.a_sf = a.act_sf + ((long long)g * S::kK + kr.k0) / 32;
    op.lda = kOCols, op.lda_sf = kOCols / 32;
    op.w = a.wo_a, op.w_sf = a.wo_a_sf, op.ldw = S::kK, op.w_kb = S::kK / 32;
    op.w_k0 = kr.k0, op.k_len = kr.len;
    gemm::Accum<CfgA> acc;
    gemm::mma_tile<CfgA>(op, m0, n0, (int)rows, smem, acc);
    if (a.kslices > 1 && !split_reduce<CfgA>(acc, a.part, slice, a.kslices, a.T, m0, n0, S::kN,
                                             a.bank + kSplitWord0 + tile))
        return;
    store_o_lora(a, acc, m0, n0, S::kN);
}

// ---- kernel B ---------------------------------------------------------------------------------

__device__ __forceinline__ void store_out(const ArgsB &b, const gemm::Accum<CfgB> &acc, int m0,
                                          int n0, long long N) {
    using Acc = gemm::Accum<CfgB>;
#pragma unroll
    for (int mt = 0; mt < CfgB::kMT; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const long long row = m0 + Acc::row(mt, half);
            if (row >= b.T) continue;
#pragma unroll
            for (int nt = 0; nt < CfgB::kNT; ++nt)
                *reinterpret_cast<__nv_bfloat162 *>(b.out + row * N + n0 + Acc::col(nt, 0)) =
                    __floats2bfloat162_rn(acc.c[mt][nt][2 * half], acc.c[mt][nt][2 * half + 1]);
        }
}

__device__ __forceinline__ void zero_bank(unsigned int *bank, long long words) {
    for (long long i = threadIdx.x; i < words; i += kThreads) bank[i] = 0u;
}

// ---- the weight-streaming kernels (T <= 64, common/stream_gemm.cuh) ---------------------------
//
// For T <= 64 tokens both GEMMs are skinny: the runtime launches the *_stream kernels instead of
// the tiled ones, kNT = ceil(T / 8) token tiles of 8 (kNT in {1, 2, 4, 8}). Each GEMM CTA streams
// one block of W rows (kernel A: 64 rows of one wo_a group, 2H / 64 blocks; kernel B: 32 rows of
// wo_b, H / 32 blocks) over its K range exactly once: the whole K at T <= 16 (grid y 1: no
// partials), at 16 < T <= 64 one of gridDim.y K slices (fp32 partials in part, the last slice's
// sum, stream_split_reduce). At T <= 16 the runtime can launch both GEMMs as one kernel
// (output_proj_stream_kernel, below: its default at 8 < T <= 16, MLAJIT_DSV4_OUTPROJ=fused at
// any T <= 16) where the grid fits the SMs and both rings one CTA. Kernel A at T <= 8 (kNT 1)
// runs on the wgmma-rows consumer (one consumer warpgroup for its 64-row block; sm_100a:
// mma.sync, a warp per 16 rows), at 8 < T <= 16 on mma.sync (8 consumer warps; the wgmma-rows
// consumer there measured SWA T 16 75.2 -> 77.2 us in the layer, fourteenth session of
// docs/perf-notes.md, against T1 63.6 -> 61.7). The shared-memory sizes are mirrored in
// runtime/dsv4_output_proj.c (OP_S_*).
constexpr int kStreamBnA = 64, kStreamBnB = 32;
// wo_a / wo_b copies with an L2 evict_first policy: 64 MB read once per call would otherwise
// push the next layer's attention code and data out of L2 (helper dsv4a measured SWA T1
// 80.4 -> 66.1 us with it, docs/perf-notes.md).
constexpr bool kWEvictFirst = true;
template <int kNT>
constexpr int stream_stages_a() { return kNT <= 2 ? 5 : 3; }
template <int kNT>
constexpr int stream_ks_b() { return kNT <= 2 ? 512 : 256; }
template <int kNT>
constexpr int stream_stages_b() { return kNT == 1 ? 5 : (kNT == 2 ? 4 : 3); }
// 16 < T <= 64 (kNT 4 / 8): 128-row W blocks, kernel A's K in stream_slices_a<K>() slices (2,
// or 4 where K >= 16384, so that a slice's scale table stays small) and kernel B's in
// kStreamSlicesB (64 x 2 and 32 x 4 CTAs at H 4096, G 8: one per SM), on the wgmma-rows
// consumer (sm_90a; on sm_100a mma.sync, a warp per 16 rows), the A scale table sized for one
// slice, and as many stages (at most 4) as fit the shared memory (the runtime mirrors all of it:
// OP_W_*).
constexpr int kStreamBnW = 128, kStreamSlicesB = 4, kStreamKsW = 256;
constexpr int kSmemLimit = 232448;                       // sm_90 / sm_100 opt-in per block
template <int kK>
constexpr int stream_slices_a() { return kK >= 16384 ? 4 : 2; }
template <int kNT, int kSfRow>
constexpr int stream_stages_w() {
    constexpr int stage = (2 * (kStreamBnW + 8 * kNT) * 128 + 2 * 512 + 1023) / 1024 * 1024;
    constexpr int fixed = 5 * 8 * kNT * kSfRow + 1024 + 64;
    constexpr int n = (kSmemLimit - fixed) / stage;
    static_assert(n >= 2, "two stages fit");
    return n > 4 ? 4 : n;
}
template <int kH, int kG, int kNT>
using StreamCfgA = typename sgemm::PickConfig<(kNT >= 4),
                       sgemm::Config<kStreamBnW, kNT, kStreamKsW,
                                     stream_stages_w<kNT, Shape<kH, kG>::kK / 32 /
                                                              stream_slices_a<Shape<kH, kG>::kK>()>(),
                                     8, Shape<kH, kG>::kK / 32 / stream_slices_a<Shape<kH, kG>::kK>(),
                                     8, false,
                                     sgemm::kMathWgmmaRows, kWEvictFirst>,
                       sgemm::Config<kStreamBnA, kNT, 256, stream_stages_a<kNT>(),
                                     kNT == 1 ? 4 : 1, Shape<kH, kG>::kK / 32, kNT == 1 ? 4 : 8,
                                     false,
                                     kNT == 1 ? sgemm::kMathWgmmaRows : sgemm::kMathAuto,
                                     kWEvictFirst>>::type;
template <int kH, int kNT>
using StreamCfgB = typename sgemm::PickConfig<(kNT >= 4),
                       sgemm::Config<kStreamBnW, kNT, kStreamKsW,
                                     stream_stages_w<kNT, 2 * kH / 32 / kStreamSlicesB>(), 8,
                                     2 * kH / 32 / kStreamSlicesB, 8, false,
                                     sgemm::kMathWgmmaRows, kWEvictFirst>,
                       sgemm::Config<kStreamBnB, kNT, stream_ks_b<kNT>(), stream_stages_b<kNT>(),
                                     kNT <= 2 ? 1 : 2, 2 * kH / 32, 8, false, sgemm::kMathAuto,
                                     kWEvictFirst>>::type;

// The one-launch kernel's block: the larger of the two GEMMs' consumer threads, then the producer
// warp (runtime/dsv4_output_proj.c: stream_geom's threads).
template <int kH, int kG, int kNT>
__host__ __device__ constexpr int fused_threads() {
    return (StreamCfgA<kH, kG, kNT>::kConsumers > StreamCfgB<kH, kNT>::kConsumers
                ? StreamCfgA<kH, kG, kNT>::kConsumers
                : StreamCfgB<kH, kNT>::kConsumers) + 32;
}

// The quantize work of kernel A's stream GEMM CTAs (their consumer prologue: the producer warp
// streams wo_a meanwhile). The CTA's kConsumers threads claim items of kW * per units (per
// units a consumer warp) from the ticket counter (bank word 16) until none are left (or once,
// where the grid's first claims cover every unit), so that
// every unit is taken by a running CTA that finishes it without waiting (no deadlock, whatever
// the residency), then add the units they did to ready[0] (word 32: one m-tile). The T <= 16
// kinds (kNT 1, 2) take one unit a warp per claim; the 32- / 64-token kinds per = ceil(units /
// every CTA's consumer warps), one claim a CTA when the units are spread evenly (at T 64 and
// 128 CTAs, 4 units a warp: one claim instead of 4). (The T <= 16 kinds with the per loop
// measured SWA T 16 76.5 -> 85.1 µs, T 1 64.7 -> 67.0 with per = 1: not pinned down.)
template <class Cfg>
__device__ __forceinline__ void quantize_share(const ArgsA &a) {
    __shared__ unsigned int claimed;
    constexpr int kW = Cfg::kConsumerWarps;
    const int warp = (int)(threadIdx.x / 32), lane = (int)(threadIdx.x % 32);
    const long long units = a.T * kHeads;
    long long per = 1;
    if constexpr (Cfg::kNT >= 4) {
        const long long warps = (long long)gridDim.x * gridDim.y * kW;
        per = (units + warps - 1) / warps;
    }
    unsigned int done = 0;                                  // units of this CTA (thread 0)
    for (;;) {
        if (threadIdx.x == 0) claimed = atomicAdd(a.bank + kTicketWord, 1u);
        named_barrier_sync(1, Cfg::kConsumers);
        const long long u0 = (long long)claimed * kW * per;
        named_barrier_sync(1, Cfg::kConsumers);             // read before the next claim
        if (u0 >= units) break;
        if constexpr (Cfg::kNT >= 4) {
            for (long long k = 0; k < per; ++k) {
                const long long u = u0 + warp * per + k;
                if (u < units) quantize_unit(a, u, lane);
            }
        } else {
            if (u0 + warp < units) quantize_unit<Cfg::kNT == 1>(a, u0 + warp, lane);
        }
        done += (unsigned int)(units - u0 < kW * per ? units - u0 : kW * per);
        // Every CTA claims once, so when the grid's first claims cover every unit no claim is
        // left to make: the second one (a contended atomic round trip on the way to the ready
        // count) only returned "none" (T <= 16: 64 T units, 128 CTAs of 4 or 8 warps).
        if (units <= (long long)gridDim.x * gridDim.y * kW * per) break;
    }
    if (threadIdx.x == 0 && done > 0) {                     // the barrier above ordered the writes
        __threadfence();
        atomicAdd(a.bank + kReadyWord0, done);
    }
}

// The K-split stream GEMMs (16 < T <= 64: gridDim.y slices of each W block): the CTA's fp32
// partial D (rows < kBN, tokens < T, D[r * kDPitch + t]) to part[slice][t][n0 + r] (row stride N),
// then the slice handshake on counter (as gemm::splitk_arrive, with named barrier 1 of the
// consumers instead of __syncthreads: the producer warp has left). In the CTA that arrives last
// (returns true in all its consumer threads) D is overwritten with the sum of every slice's
// partial in slice order 0, 1, ... (deterministic whichever CTA is last), read with ld.global.cg.
// Both passes move 4 consecutive rows a thread (16-byte global accesses), and the sum loads
// kSumBatch such quads of every slice before adding any, so that the last CTA waits for a few L2
// round trips rather than one per element (32 in a row at kBN 128, T 64 with one quad a thread
// and slice at a time). Needs N % 4 == 0, n0 % 4 == 0 and a 16-byte aligned part.
constexpr int kSumBatch = 4, kMaxStreamSlices = 4;
template <class Cfg>
__device__ __forceinline__ bool stream_split_reduce(float *D, int T, float *part, int n0,
                                                    long long N, unsigned int *counter) {
    static_assert(Cfg::kBN % 4 == 0, "row quads");
    constexpr int kQ = Cfg::kBN / 4;                  // row quads per token
    const int tid = (int)threadIdx.x, slice = (int)blockIdx.y, slices = (int)gridDim.y;
    const long long slice_stride = (long long)T * N;
    const int quads = T * kQ;
    for (int i = tid; i < quads; i += Cfg::kConsumers) {
        const int t = i / kQ, r = 4 * (i % kQ);
        const float4 v = make_float4(D[r * Cfg::kDPitch + t], D[(r + 1) * Cfg::kDPitch + t],
                                     D[(r + 2) * Cfg::kDPitch + t], D[(r + 3) * Cfg::kDPitch + t]);
        *reinterpret_cast<float4 *>(part + slice * slice_stride + t * N + n0 + r) = v;
    }
    __shared__ unsigned int last;
    __threadfence();                                  // this thread's partial stores, gpu scope
    named_barrier_sync(1, Cfg::kConsumers);
    if (tid == 0) {
        last = mla::atom_add_acq_rel_gpu(counter, 1u) == (unsigned int)slices - 1u;
        if (last) *counter = 0u;                      // every slice has arrived
    }
    named_barrier_sync(1, Cfg::kConsumers);
    if (!last) return false;
    __threadfence();
    if (slices > kMaxStreamSlices) __trap();          // the runtime's split: at most 4
    for (int base = 0; base < quads; base += kSumBatch * Cfg::kConsumers) {
        float4 v[kSumBatch][kMaxStreamSlices];
#pragma unroll
        for (int u = 0; u < kSumBatch; ++u) {
            const int i = base + u * Cfg::kConsumers + tid;
            const int t = i / kQ, r = 4 * (i % kQ);
            const float *src = part + t * N + n0 + r;
#pragma unroll
            for (int j = 0; j < kMaxStreamSlices; ++j)
                if (i < quads && j < slices)
                    v[u][j] = __ldcg(reinterpret_cast<const float4 *>(src + j * slice_stride));
        }
#pragma unroll
        for (int u = 0; u < kSumBatch; ++u) {
            const int i = base + u * Cfg::kConsumers + tid;
            if (i >= quads) continue;
            const int t = i / kQ, r = 4 * (i % kQ);
            float4 sum = v[u][0];
#pragma unroll
            for (int j = 1; j < kMaxStreamSlices; ++j)
                if (j < slices) {
                    sum.x += v[u][j].x, sum.y += v[u][j].y;
                    sum.z += v[u][j].z, sum.w += v[u][j].w;
                }
            D[r * Cfg::kDPitch + t] = sum.x, D[(r + 1) * Cfg::kDPitch + t] = sum.y;
            D[(r + 2) * Cfg::kDPitch + t] = sum.z, D[(r + 3) * Cfg::kDPitch + t] = sum.w;
        }
    }
    named_barrier_sync(1, Cfg::kConsumers);
    return true;
}

// Spins (one thread) until the quantize items have counted every unit of the T tokens.
__device__ __forceinline__ void wait_units(const ArgsA &a) {
    const unsigned int n = (unsigned int)(a.T * kHeads);
    while (pdl::load_acquire(a.bank + kReadyWord0) < n) __nanosleep(64);
}

// o_lora epilogue of a streamed tile: D[r * kDPitch + t] is o_lora[t, n0 + r]; a lane quad per
// (token, aligned 32-column group): bf16, mxq -> o_lora, o_lora_q, o_lora_sf (the values and
// bytes store_o_lora writes). The 256 consumer threads call it.
template <class Cfg>
__device__ __forceinline__ void store_o_lora_stream(const ArgsA &a, const float *D, int n0,
                                                    long long N) {
    constexpr int kCg = Cfg::kBN / 32, kQuads = Cfg::kConsumers / 4;
    const int tid = (int)threadIdx.x, quad = tid / 4, ql = tid % 4;
    const int items = (int)a.T * kCg;
    for (int base = 0; base < items; base += kQuads) {      // the same trip count in every lane
        const int it = base + quad;
        const bool ok = it < items;
        const int t = ok ? it / kCg : 0, c0 = (ok ? it % kCg : 0) * 32 + ql * 8;
        float v[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = round_bf16(D[(c0 + j) * Cfg::kDPitch + t]);
        unsigned int q[2];
        const unsigned int sf = fp8::quantize_group<32, 8>(v, q);
        if (!ok) continue;
        const long long at = (long long)t * N + n0 + c0;
        uint4 bf;
        bf.x = pack_bf16x2(v[0], v[1]), bf.y = pack_bf16x2(v[2], v[3]);
        bf.z = pack_bf16x2(v[4], v[5]), bf.w = pack_bf16x2(v[6], v[7]);
        *reinterpret_cast<uint4 *>(a.o_lora + at) = bf;
        *reinterpret_cast<uint2 *>(a.o_lora_q + at) = make_uint2(q[0], q[1]);
        if (ql == 0) a.o_lora_sf[(long long)t * (N / 32) + (n0 + c0) / 32] = (unsigned char)sf;
    }
}

// The one-launch kernel's o_lora ready count: kernel B's part waits until every CTA (gridDim.x
// of them, all resident: the runtime launches it only when the grid fits the SMs at one CTA per
// SM) has stored its o_lora block.
__device__ __forceinline__ void wait_o_lora(const unsigned int *bank) {
    while (pdl::load_acquire(bank + kOLoraWord) < gridDim.x) __nanosleep(32);
}

}  // namespace oproj

// ---- the entry points (the names the kind builders compile) ----------------------------------

template <int kH, int kG>
__global__ void __launch_bounds__(oproj::kThreads) output_proj_a_kernel(const oproj::ArgsA a) {
    using namespace oproj;
    extern __shared__ __align__(128) unsigned char smem[];
    require_smem<CfgA::kSmemBytes>();
    const long long item = pdl::claim_ticket(a.bank + kTicketWord);
    pdl::launch_dependents();          // kernel B may take free SMs; it waits for our completion
    pdl::wait();                       // the previous kernel (mla_attention) complete and visible
    if (item < a.n_qtiles)
        quantize_item(a, item);
    else
        wo_a_item<kH, kG>(a, item - a.n_qtiles, smem);
}

template <int kH, int kG>
__global__ void __launch_bounds__(oproj::kThreads) output_proj_b_kernel(const oproj::ArgsB b) {
    using namespace oproj;
    using S = Shape<kH, kG>;
    extern __shared__ __align__(128) unsigned char smem[];
    require_smem<CfgB::kSmemBytes>();
    pdl::wait();                                     // kernel A complete, its writes visible
    if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) zero_bank(b.bank, b.bank_words);
    const int m0 = (int)blockIdx.y * kBM, n0 = (int)blockIdx.x * CfgB::kBN;
    const long long rows = b.T - m0 < kBM ? b.T - m0 : kBM;
    const KRange kr = slice_range(blockIdx.z, b.slice_steps, S::kN);
    gemm::Operands op;
    op.a = b.o_lora_q + kr.k0, op.a_sf = b.o_lora_sf + kr.k0 / 32;
    op.lda = S::kN, op.lda_sf = S::kN / 32;
    op.w = b.wo_b, op.w_sf = b.wo_b_sf, op.ldw = S::kN, op.w_kb = S::kN / 32;
    op.w_k0 = kr.k0, op.k_len = kr.len;
    gemm::Accum<CfgB> acc;
    gemm::mma_tile<CfgB>(op, m0, n0, (int)rows, smem, acc);
    if (gridDim.z > 1 && !split_reduce<CfgB>(acc, b.part, blockIdx.z, gridDim.z, b.T, m0, n0, kH,
                                             b.bank + kSplitWord0 + blockIdx.x))
        return;
    store_out(b, acc, m0, n0, kH);
}

// Kernel A for T <= 16 (kNT = ceil(T / 8)): one GEMM CTA per 64-row block of wo_a streaming it
// once; while its producer warp starts the W stream (before the attention, its PDL primary, has
// finished: W is not written by it), its consumer warps wait for the attention
// (griddepcontrol.wait), quantize a share of the units (quantize_share), then wait for all of them. Grid: 2 kH / 64 CTAs, one per SM (quantize
// CTAs of their own made 16..128 more, so that some SMs held two GEMM CTAs). maps: W = wo_a,
// A = act_q (all 32768 columns; the CTA's group starts at column g K), sf = wo_a_sf.
template <int kH, int kG, int kNT>
__global__ void __launch_bounds__(oproj::StreamCfgA<kH, kG, kNT>::kThreads)
    output_proj_a_stream_kernel(const oproj::ArgsA a, const __grid_constant__ sgemm::Maps maps) {
    using namespace oproj;
    using S = Shape<kH, kG>;
    using Cfg = StreamCfgA<kH, kG, kNT>;
    extern __shared__ __align__(128) unsigned char smem[];
    require_smem<Cfg::kSmemBytes>();
    pdl::launch_dependents();
    trace::op_begin((int)a.T);
    const int n0 = (int)blockIdx.x * Cfg::kBN, g = n0 / S::kR;
    // K slices (grid y) only in the 32- / 64-token kinds (16 < T <= 64; the runtime launches NT 1 /
    // 2 at T <= 16 with one slice), so that the T <= 16 kinds keep their code.
    constexpr bool kSplit = kNT >= 4;
    const KRange kr = kSplit ? slice_range(blockIdx.y, a.slice_steps, S::kK) : KRange{0, S::kK};
    sgemm::Operands op;
    op.a = a.act_q + (long long)g * S::kK + kr.k0;
    op.a_sf = a.act_sf + ((long long)g * S::kK + kr.k0) / 32;
    op.lda = kOCols, op.lda_sf = kOCols / 32;
    op.w = a.wo_a, op.w_sf = a.wo_a_sf, op.ldw = S::kK, op.w_kb = S::kK / 32;
    op.w_k0 = kr.k0, op.k_len = kr.len, op.T = (int)a.T;
    op.a_col0 = g * S::kK + kr.k0, op.maps = &maps;
    if (kr.len / 32 > Cfg::kSfRow) __trap();   // the slice's scales fit the table (runtime's split)
    sgemm::run<Cfg>(
        op, n0, smem,
        [&] {
            wait_units(a);
            trace::op_mark(trace::kOpReady);
        },
        [&](const float *D, int T) {
            trace::op_mark(trace::kOpEpi);
            if constexpr (kSplit)
                if (gridDim.y > 1 &&
                    !stream_split_reduce<Cfg>(const_cast<float *>(D), T, a.part, n0, S::kN,
                                              a.bank + kSplitWord0 + blockIdx.x))
                    return;
            store_o_lora_stream<Cfg>(a, D, n0, S::kN);
        },
        [&] {
            pdl::wait();   // the previous kernel (mla_attention) complete and visible
            trace::op_mark(trace::kOpWait);
            quantize_share<Cfg>(a);
            trace::op_mark(trace::kOpQuant);
        });
    trace::op_finish("OPA", (int)a.T);
}

// Kernel B for T <= 16: one CTA per 32 rows of wo_b (grid kH / 32), PDL-chained; its W copies
// start before griddepcontrol.wait (wo_b is not written by kernel A), the o_lora copies after.
// maps: W = wo_b, A = o_lora_q, sf = wo_b_sf.
template <int kH, int kG, int kNT>
__global__ void __launch_bounds__(oproj::StreamCfgB<kH, kNT>::kThreads)
    output_proj_b_stream_kernel(const oproj::ArgsB b, const __grid_constant__ sgemm::Maps maps) {
    using namespace oproj;
    using Cfg = StreamCfgB<kH, kNT>;
    extern __shared__ __align__(128) unsigned char smem[];
    require_smem<Cfg::kSmemBytes>();
    const int n0 = (int)blockIdx.x * Cfg::kBN;
    constexpr bool kSplit = kNT >= 4;                 // K slices (grid y) as in kernel A
    const KRange kr = kSplit ? slice_range(blockIdx.y, b.slice_steps, 2 * kH) : KRange{0, 2 * kH};
    sgemm::Operands op;
    op.a = b.o_lora_q + kr.k0, op.a_sf = b.o_lora_sf + kr.k0 / 32;
    op.lda = 2 * kH, op.lda_sf = 2 * kH / 32;
    op.w = b.wo_b, op.w_sf = b.wo_b_sf, op.ldw = 2 * kH, op.w_kb = 2 * kH / 32;
    op.w_k0 = kr.k0, op.k_len = kr.len, op.T = (int)b.T;
    op.a_col0 = kr.k0, op.maps = &maps;
    if (kr.len / 32 > Cfg::kSfRow) __trap();   // the slice's scales fit the table (runtime's split)
    trace::op_begin((int)b.T);
    sgemm::run<Cfg>(op, n0, smem, [] {
        pdl::wait();
        trace::op_mark(trace::kOpReady);
    }, [&](const float *D, int T) {
        trace::op_mark(trace::kOpEpi);
        if (blockIdx.x == 0 && (!kSplit || blockIdx.y == 0))  // after the wait: A is complete
            for (long long i = threadIdx.x; i < b.bank_words; i += Cfg::kConsumers) b.bank[i] = 0u;
        if constexpr (kSplit)
            if (gridDim.y > 1 &&
                !stream_split_reduce<Cfg>(const_cast<float *>(D), T, b.part, n0, kH,
                                          b.bank + kSplitWord0 + blockIdx.x))
                return;
        for (int i = (int)threadIdx.x; i < T * Cfg::kBN; i += Cfg::kConsumers) {
            const int t = i / Cfg::kBN, r = i % Cfg::kBN;
            b.out[(long long)t * kH + n0 + r] = __float2bfloat16_rn(D[r * Cfg::kDPitch + t]);
        }
    });
    trace::op_finish("OPB", (int)b.T);
}

}  // namespace dsv4
}  // namespace mla

namespace mla {
namespace dsv4 {

// Kernels A and B for T <= 16 as one launch (kNT = ceil(T / 8)), a programmatic dependent of the
// attention: CTA i streams the 64-row block i of wo_a (kernel A's CTA i) and then the 32-row
// block i of wo_b (kernel B's CTA i; 2 kH / 64 == kH / 32 CTAs), each through its own ring in
// one CTA's shared memory (StreamCfgA's, then StreamCfgB's). The producer warp first issues the
// W copies of both rings' first stages (neither depends on anything), then finishes the wo_a
// stream (its act_q copies after every unit is quantized, wait_units), then the wo_b stream (its
// o_lora_q copies once every CTA has stored its o_lora block, wait_o_lora); it asks L2 for
// b.pf_a_steps more wo_a steps at the start and b.pf_b_steps more wo_b steps once wo_a is issued
// (TMA prefetches: nothing waits for them). The consumer warps
// wait for the attention (griddepcontrol.wait), quantize their share of the units
// (quantize_share), run the wo_a block with the o_lora epilogue, count the CTA on bank word 17,
// then run the wo_b block into out. The last CTA out (word 18) zeroes bank words [0, 128).
// The wait on word 17 needs every CTA resident at once: the runtime launches this kernel only
// when 2 kH / 64 <= the SM count (one CTA per SM: the two rings take ~215 KB), else the two
// kernels above. maps_a: W = wo_a, A = act_q, sf = wo_a_sf; maps_b: W = wo_b, A = o_lora_q,
// sf = wo_b_sf. Results are bit-identical to the two kernels'.
template <int kH, int kG, int kNT>
__global__ void __launch_bounds__(oproj::fused_threads<kH, kG, kNT>())
    output_proj_stream_kernel(const oproj::ArgsA a, const oproj::ArgsB b,
                              const __grid_constant__ sgemm::Maps maps_a,
                              const __grid_constant__ sgemm::Maps maps_b) {
    using namespace oproj;
    using S = Shape<kH, kG>;
    using CA = StreamCfgA<kH, kG, kNT>;
    using CB = StreamCfgB<kH, kNT>;
    // Consumer threads [0, kC): kernel A's part runs on the first CA::kConsumers (kNT 1: one
    // warpgroup on the wgmma-rows consumer), kernel B's on the first CB::kConsumers; the warp
    // after them produces both rings.
    constexpr int kC = fused_threads<kH, kG, kNT>() - 32;
    static_assert(kC >= CA::kConsumers && kC >= CB::kConsumers, "one block for both GEMMs");
    static_assert(2 * kH / CA::kBN == kH / CB::kBN, "one wo_a block and one wo_b block per CTA");
    extern __shared__ __align__(128) unsigned char smem[];
    require_smem<CA::kSmemBytes + CB::kSmemBytes>();
    pdl::launch_dependents();
    const sgemm::Smem<CA> sma{sgemm::ring_base(smem)};
    const sgemm::Smem<CB> smb{sgemm::ring_base(smem + CA::kSmemBytes)};
    const int na = (int)blockIdx.x * CA::kBN, g = na / S::kR, nb = (int)blockIdx.x * CB::kBN;
    sgemm::Operands oa;
    oa.a = a.act_q + (long long)g * S::kK;
    oa.a_sf = a.act_sf + (long long)g * S::kK / 32;
    oa.lda = kOCols, oa.lda_sf = kOCols / 32;
    oa.w = a.wo_a, oa.w_sf = a.wo_a_sf, oa.ldw = S::kK, oa.w_kb = S::kK / 32;
    oa.w_k0 = 0, oa.k_len = S::kK, oa.T = (int)a.T;
    oa.a_col0 = g * S::kK, oa.maps = &maps_a;
    sgemm::Operands ob;
    ob.a = b.o_lora_q, ob.a_sf = b.o_lora_sf, ob.lda = 2 * kH, ob.lda_sf = 2 * kH / 32;
    ob.w = b.wo_b, ob.w_sf = b.wo_b_sf, ob.ldw = 2 * kH, ob.w_kb = 2 * kH / 32;
    ob.w_k0 = 0, ob.k_len = 2 * kH, ob.T = (int)b.T;
    ob.a_col0 = 0, ob.maps = &maps_b;
    const auto tile_a = [na](int) { return na; };
    const auto tile_b = [nb](int) { return nb; };
    const int tid = (int)threadIdx.x;
    if (tid == 0) {
        sgemm::init_ring<CA>(sma);
        sgemm::init_ring<CB>(smb);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (tid >= kC) {                                    // the producer warp
        const sgemm::Producer<CA, decltype(tile_a)> pa(oa, 1, tile_a, sma);
        const sgemm::Producer<CB, decltype(tile_b)> pb(ob, 1, tile_b, smb);
        pa.start();
        pb.start();
        // The wo_a steps after its ring's into L2 while the consumers wait for the attention and
        // the quantized units; the wo_b steps after its ring's once wo_a is issued (so that DRAM
        // keeps streaming through the switch from wo_a to wo_b).
        pa.prefetch_w((int)b.pf_a_steps);
        pa.finish([&] { wait_units(a); });
        pb.prefetch_w((int)b.pf_b_steps);
        pb.finish([&] { wait_o_lora(b.bank); });
        return;
    }
    pdl::wait();                       // the previous kernel (mla_attention) complete and visible
    if (tid < CA::kConsumers) {
        quantize_share<CA>(a);
        sgemm::consume_tiles<CA>(oa, 1, tile_a, sma, [&] { wait_units(a); },
                                 [&](int, int, const float *D, int) {
                                     store_o_lora_stream<CA>(a, D, na, S::kN);
                                 });
    }
    // Every o_lora store of the CTA issued (barrier 2: kernel A's part uses barrier 1 with its
    // own thread count, which the other consumers must not join).
    named_barrier_sync(2, kC);
    if (tid >= CB::kConsumers) return;
    if (tid == 0) {
        __threadfence();
        atomicAdd(b.bank + kOLoraWord, 1u);
    }
    sgemm::consume_tiles<CB>(ob, 1, tile_b, smb, [&] { wait_o_lora(b.bank); },
                             [&](int, int, const float *D, int T) {
                                 for (int i = tid; i < T * CB::kBN; i += CB::kConsumers) {
                                     const int t = i / CB::kBN, r = i % CB::kBN;
                                     b.out[(long long)t * kH + nb + r] =
                                         __float2bfloat16_rn(D[r * CB::kDPitch + t]);
                                 }
                             });
    // Every copy has landed and every wait is done (the producer's too: the consumers waited for
    // every stage it filled after its last bank read).
    named_barrier_sync(1, CB::kConsumers);
    if (tid == 0) {
        sgemm::inval_ring<CA>(sma);
        sgemm::inval_ring<CB>(smb);
        __threadfence();
        if (atomicAdd(b.bank + kExitWord, 1u) == gridDim.x - 1) {
            __threadfence();
            for (long long i = 0; i < b.bank_words; ++i) b.bank[i] = 0u;
        }
    }
}

}  // namespace dsv4
}  // namespace mla
