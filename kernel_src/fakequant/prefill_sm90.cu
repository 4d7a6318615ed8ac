// Fake-quant MLA prefill on wgmma (sm_90a; elsewhere the wgmma wrappers trap and the runtime
// never selects it): the numerics of prefill_mma.cu (codes, per-tensor factors on the fp32
// results, masks, N:M, block_n schedule of P, LSE; its score, softmax-chunk and store steps are
// used as they are) in a FlashAttention-3-like warp-specialized CTA.
//
// Template parameters (spec "fakequant_prefill_sm90"): kF16 (else bf16), kQ, kK, kP, kV
// (QdqMode), kM (0, 4, 8), kDqk (64, 128, 192), kDv (64, 128).
//
// CTA: 3 warpgroups over 128 rows of one (sequence, kv head) (rows as prefill_mma.cu: (query,
// head of the group), query-major; same grid and tile walk, 128-row tiles):
//   warpgroup 0, warp 0, one lane: the producer. For each 64-key KV tile it waits for the ring
//     stage to be empty (mbarrier `empty`, 256 consumer arrivals), then loads K (kDqk / 64 boxes
//     of 64 keys x 64 features) and V (kDv / 64 boxes) by TMA into the stage, completing on the
//     `full_k` / `full_v` mbarriers (expect_tx). Keys past the tensor's end read as zeros.
//   warpgroup 0, warps 1-3 (96 threads), only when K or V is quantized: the quantizers. They wait
//     for `full_k` (`full_v`), replace the tile by its codes in shared memory (once per CTA and
//     tile; V: rows past k_len zeroed first, so the NVFP4 tail group pads with 0), and arrive on
//     `ready_k` (`ready_v`), which the consumers then wait for instead.
//   warpgroups 1 and 2: the consumers, 64 rows each. Q (64 rows, zero past the last) arrives by
//     cp.async into the warpgroup's own swizzled slabs and is quantized there (q_quant). Per KV
//     tile: S = Qc Kc^T by kDqk / 16 wgmma.m64n64k16 (both operands 128-byte-swizzled K-major
//     shared memory), the scores, the softmax per 16-key chunk (prefill_mma.cu's pm_scores and
//     pm_chunk_p: the S accumulator of warp w is the mma.sync C fragment of rows 16 w .. 16 w +
//     15), each chunk's P (quantized or 16-bit) as the register A operand of one
//     wgmma.m64n{kDv}k16 with V from shared memory through the transposed (N-major) descriptor,
//     then one arrival per thread on `empty`. With one P tile per KV tile (P not quantized or
//     block_n >= 64) the loop is software-pipelined: S(n + 1) and P V(n) are issued together and
//     the softmax of n + 1 runs under them (its O rescale factors applied before P V(n + 1)),
//     and the two warpgroups issue their products in turns (ping-pong, named barriers 4 and 5).
//     A warpgroup skips the products of tiles wholly past its causal bound (it still waits for
//     and releases the stage, and takes its turns).
//
// Shared memory (1024-byte aligned; every slab is 64 rows x 128 bytes, 128-byte swizzle as TMA
// writes it): Q [2 warpgroups][kDqk / 64 slabs], then kStages x K [kDqk / 64 slabs], kStages x V
// [kDv / 64 slabs], then the mbarriers. Requirements (host): as prefill_mma.cu, plus the K and V
// tensor maps (runtime/fakequant_prefill.c).
#include "fakequant/prefill_mma.cu"

#include "common/mbarrier.cuh"
#include "common/select.cuh"
#include "common/wgmma.cuh"
#include "fakequant/decode_mma_codes.cuh"
#include "flashmla/ptx.cuh"

namespace mla {
namespace fakequant {
namespace sm90p {

// The CUtensorMap of a kernel parameter (128 bytes, 64-byte aligned).
struct alignas(64) TmaDesc {
    unsigned long long bytes[16];
};

constexpr int kBN = 64;            // keys of a KV tile
constexpr int kWg = 128;           // threads of a warpgroup
constexpr int kThreads = 3 * kWg;  // producer / quantizer warpgroup, two consumer warpgroups
constexpr int kSlab = 64 * 128;    // bytes of a 64-row, 128-byte-swizzled slab
constexpr int kQuantThreads = 96;  // warps 1-3 of warpgroup 0
constexpr int kSmemMax = 232448;   // the H100/H200 per-block opt-in maximum
// The two consumer warpgroups issue their products in turns (named barriers 4 and 5): while one
// issues S(n + 1) and P V(n), the other runs its softmax.
constexpr bool kPingPong = true;

template <int kDqk, int kDv>
struct Layout {
    static constexpr int kQSlabs = kDqk / 64, kVSlabs = kDv / 64;
    static constexpr int kQBytes = kQSlabs * kSlab;  // one warpgroup's Q
    static constexpr int kKBytes = kQSlabs * kSlab, kVBytes = kVSlabs * kSlab;
    static constexpr int kAvail = kSmemMax - 1024 - 256 - 2 * kQBytes;
    static constexpr int kStages =
        kAvail / (kKBytes + kVBytes) > 4 ? 4 : kAvail / (kKBytes + kVBytes);
    static constexpr int kK = 2 * kQBytes, kV = kK + kStages * kKBytes;
    static constexpr int kBar = kV + kStages * kVBytes;
    static constexpr int kBytes = kBar + 5 * kStages * 8 + 1024;  // + alignment slack
    static_assert(kStages >= 2, "two stages at least");
};

// Keeps the compiler from moving accesses of a wgmma accumulator across the asm that waits for it.
template <int N>
__device__ __forceinline__ void acc_fence(float (&d)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) asm volatile("" : "+f"(d[i][e])::"memory");
}

// Byte offset of 16-byte chunk c of row r in a 128-byte-swizzled slab.
__device__ __forceinline__ unsigned sw(int r, int c) { return swz(r, c, 128); }

// x / b from y = 1 / b (finite) as decode_mma_codes.cuh's div_rcp, without its branch for an
// infinite reciprocal (the host runs this kernel only when the scales' reciprocals are finite).
__device__ __forceinline__ float div_rcp_finite(float x, float b, float y) {
    const float q0 = __fmul_rn(x, y);
    const float q1 = __fmaf_rn(__fmaf_rn(-q0, b, x), y, q0);
    return fabsf(q0) == __int_as_float(0x7f800000) ? q0 : q1;
}

// The scales a quantizer of 16-bit values needs (decode_mma_codes.cuh): fp8: sc and 1 / sc;
// nvfp4: gs, fl32(6 gs) and its reciprocal.
struct QScale {
    float s, r, g6, r6;
};
template <int kMode>
__device__ __forceinline__ QScale qscale(float s) {
    QScale q;
    q.s = s, q.r = __frcp_rn(s);
    q.g6 = __fmul_rn(6.f, s), q.r6 = __frcp_rn(q.g6);
    return q;
}

// The NVFP4 block scale of a block with absolute maximum bamax: nvfp4_scale's steps
// (decode_mma_codes.cuh) without branches; sb is 0 or normal (gs >= 2^-100), so 1 / sb is
// finite wherever sb != 0.
__device__ __forceinline__ Nvfp4Scale nvfp4_scale_nb(float bamax, const QScale &q) {
    Nvfp4Scale sc;
    sc.sc = e4m3_rn(fminf(div_rcp_finite(bamax, q.g6, q.r6), kE4M3Max));
    sc.sb = __fmul_rn(sc.sc, q.s);
    sc.rsb = __frcp_rn(sc.sb);
    return sc;
}

// The NVFP4 code of element x of a block with scale s: nvfp4_code_fast (decode_mma_codes.cuh)
// where sb != 0, else 0 (nvfp4_code's value), without branches.
__device__ __forceinline__ float nvfp4_code_nb(float x, const Nvfp4Scale &s) {
    const float a = fabsf(x), q0 = __fmul_rn(a, s.rsb);
    const float q1 = __fmaf_rn(__fmaf_rn(-q0, s.sb, a), s.rsb, q0);
    const float r = e2m1_mag_fast(q0 == __int_as_float(0x7f800000) ? q0 : q1) * s.sc;
    return select(s.sb != 0.f, x < 0.f ? -r : r, 0.f);
}

// NVFP4 codes of a 16-value block of 16-bit inputs in place (decode_mma_codes.cuh: quant.cuh's
// decisions through reciprocals with one correction step), without branches.
__device__ __forceinline__ void nvfp4_codes16(float (&v)[16], const QScale &q) {
    float bamax = 0.f;
#pragma unroll
    for (int i = 0; i < 16; i++) bamax = fmaxf(bamax, fabsf(v[i]));
    const Nvfp4Scale sc = nvfp4_scale_nb(bamax, q);
#pragma unroll
    for (int i = 0; i < 16; i++) v[i] = nvfp4_code_nb(v[i], sc);
}

// The fp8 codes of a packed pair of 16-bit values, packed in the same type.
template <bool kF16>
__device__ __forceinline__ unsigned fp8_codes2(unsigned w, const QScale &q) {
    const unsigned h =
        e4m3x2_f16x2(fminf(fmaxf(div_rcp_finite(pm_to_f32<kF16>(w & 0xffff), q.s, q.r), -kE4M3Max), kE4M3Max),
                     fminf(fmaxf(div_rcp_finite(pm_to_f32<kF16>(w >> 16), q.s, q.r), -kE4M3Max), kE4M3Max));
    if constexpr (kF16) return h;
    else   // E4M3 values are exact in bf16
        return pack2<false>(__half2float(__ushort_as_half((unsigned short)(h & 0xffff))),
                            __half2float(__ushort_as_half((unsigned short)(h >> 16))));
}

// In-place codes of the 64 rows of a tile of kD features (kD / 64 slabs at t) by kN threads
// (tid < kN): fp8 per 16-byte chunk, nvfp4 per 16-feature block (two chunks of one row).
template <bool kF16, int kMode, int kN, int kD>
__device__ __forceinline__ void quant_rows(unsigned char *t, int tid, float scale) {
    const QScale q = qscale<kMode>(scale);
    if constexpr (kMode == kNvfp4) {
        constexpr int kPer = kD / 16, kItems = 64 * kPer;
#pragma unroll 2
        for (int it = 0; it < (kItems + kN - 1) / kN; it++) {
            const int b = it * kN + tid;
            if (kItems % kN != 0 && b >= kItems) break;
            const int r = b / kPer, blk = b % kPer, slab = blk / 4, c0 = (blk % 4) * 2;
            uint4 *x0 = reinterpret_cast<uint4 *>(t + slab * kSlab + sw(r, c0));
            uint4 *x1 = reinterpret_cast<uint4 *>(t + slab * kSlab + sw(r, c0 + 1));
            uint4 w[2] = {*x0, *x1};
            unsigned short *h = reinterpret_cast<unsigned short *>(w);
            float v[16];
#pragma unroll
            for (int i = 0; i < 16; i++) v[i] = pm_to_f32<kF16>(h[i]);
            nvfp4_codes16(v, q);
            unsigned *u = reinterpret_cast<unsigned *>(w);
#pragma unroll
            for (int i = 0; i < 8; i++) u[i] = pack2<kF16>(v[2 * i], v[2 * i + 1]);
            *x0 = w[0], *x1 = w[1];
        }
    } else if constexpr (kMode == kFp8) {
        constexpr int kPer = kD / 8, kItems = 64 * kPer;
#pragma unroll 2
        for (int it = 0; it < (kItems + kN - 1) / kN; it++) {
            const int e = it * kN + tid;
            if (kItems % kN != 0 && e >= kItems) break;
            const int r = e / kPer, ch = e % kPer;
            uint4 *x = reinterpret_cast<uint4 *>(t + (ch / 8) * kSlab + sw(r, ch % 8));
            uint4 w = *x;
            w.x = fp8_codes2<kF16>(w.x, q), w.y = fp8_codes2<kF16>(w.y, q);
            w.z = fp8_codes2<kF16>(w.z, q), w.w = fp8_codes2<kF16>(w.w, q);
            *x = w;
        }
    }
}

// V codes of a 64-key tile (kDv / 64 slabs at t) in place by kN threads: fp8 elementwise, nvfp4
// per feature over the 16 keys of each group (an item: two adjacent features of one group).
template <bool kF16, int kMode, int kN, int kDv>
__device__ __forceinline__ void quant_v(unsigned char *t, int tid, float scale) {
    if constexpr (kMode == kNvfp4) {
        const QScale q = qscale<kMode>(scale);
        constexpr int kItems = (kDv / 2) * (kBN / 16);
#pragma unroll 1
        for (int it = 0; it < (kItems + kN - 1) / kN; it++) {
            const int c = it * kN + tid;
            if (kItems % kN != 0 && c >= kItems) break;
            const int f = (c % (kDv / 2)) * 2, g = c / (kDv / 2);
            unsigned char *col = t + (f / 64) * kSlab + (f % 8) * 2;
            const int ch = (f % 64) / 8;
            float v0[16], v1[16];
#pragma unroll
            for (int i = 0; i < 16; i++) {
                const unsigned w = *reinterpret_cast<const unsigned *>(col + sw(16 * g + i, ch));
                v0[i] = pm_to_f32<kF16>(w & 0xffff), v1[i] = pm_to_f32<kF16>(w >> 16);
            }
            nvfp4_codes16(v0, q);
            nvfp4_codes16(v1, q);
#pragma unroll
            for (int i = 0; i < 16; i++)
                *reinterpret_cast<unsigned *>(col + sw(16 * g + i, ch)) = pack2<kF16>(v0[i], v1[i]);
        }
    } else if constexpr (kMode == kFp8) {
        quant_rows<kF16, kFp8, kN, kDv>(t, tid, scale);
    }
}

// Zeroes rows [first, 64) of a tile of kD features (kD / 64 slabs at t) by kN threads.
template <int kN, int kD>
__device__ __forceinline__ void zero_rows(unsigned char *t, int first, int tid) {
    constexpr int kPer = kD / 8;
    for (int e = first * kPer + tid; e < 64 * kPer; e += kN) {
        const int r = e / kPer, ch = e % kPer;
        *reinterpret_cast<uint4 *>(t + (ch / 8) * kSlab + sw(r, ch % 8)) = make_uint4(0, 0, 0, 0);
    }
}

// Calls f(n, it) for every KV tile n of every 128-row tile the CTA takes (the consumers' walk:
// tiles - 1 - x, tiles - 1 - x - gridDim.x, ...), it counting them from 0 (the ring position).
template <class F>
__device__ __forceinline__ void for_each_kv_tile(const PrefillMmaParams &p, const SeqInfo &seq,
                                                 int tiles, int rows, F f) {
    int it = 0;
    for (int tile = tiles - 1 - (int)blockIdx.x; tile >= 0; tile -= (int)gridDim.x) {
        const int n_tiles = (key_end(p, seq, min(tile * 128 + 128, rows) - 1) + kBN - 1) / kBN;
        for (int n = 0; n < n_tiles; n++, it++) f(n, it);
    }
}

// O += P V for one 16-key chunk: P as the A fragment, V rows [16 c, 16 c + 16) of the stage
// through the N-major descriptor (LBO: the next 64-feature slab, SBO: the next 8 keys).
template <bool kF16, int kDv>
__device__ __forceinline__ void pv_chunk(float (&o)[kDv / 8][4], const unsigned (&a)[4],
                                         unsigned v, int c) {
    const unsigned long long d = wgmma_desc_sw128(v + c * 16 * 128, kSlab, 1024);
    if constexpr (kDv == 128) wgmma_m64n128k16_rs<kF16, 1>(o, a, d, 1);
    else wgmma_m64n64k16_rs<kF16, 1>(o, a, d, 1);
}



// The A fragment (a packed 16-bit pair) of two probabilities of one row: fp8 codes of p / sp,
// or p rounded to the data type (P not quantized). Decisions as quant_code.cuh's fp8_code
// (decode_mma_codes.cuh: the reciprocal with one correction, E4M3 by cvt.rn.satfinite).
template <bool kF16, int kP>
__device__ __forceinline__ unsigned p_pair(float p0, float p1, const QScale &ps) {
    if constexpr (kP == kFp8) {
        const unsigned h =
            e4m3x2_f16x2(fminf(div_rcp_finite(p0, ps.s, ps.r), kE4M3Max),
                         fminf(div_rcp_finite(p1, ps.s, ps.r), kE4M3Max));   // p >= 0
        if constexpr (kF16) return h;
        else
            return pack2<false>(__half2float(__ushort_as_half((unsigned short)(h & 0xffff))),
                                __half2float(__ushort_as_half((unsigned short)(h >> 16))));
    } else {
        return pack2<kF16>(p0, p1);
    }
}

// One KV tile's softmax without branches (one P tile of 64 keys): the running max m moves over
// the tile's scores s (this lane's rows h = 0, 1), corr[h] is the factor the caller applies to O
// (1 where m did not move), l takes the unquantized p = exp2(s - mu) in prefill_mma.cu's order,
// and a[c] is the A fragment of P V's k-step c (keys 16 c .. 16 c + 15): P rounded to the data
// type, or its fp8 codes, or its NVFP4 codes (p rounded to the carrier, blocks of the row's 16
// keys of the chunk: 4 here, 12 in the quad). The numerics of pm_chunk_p with nb 4.
template <bool kF16, int kP>
__device__ __forceinline__ void tile_softmax(const float (&s)[8][4], float (&m)[2], float (&l)[2],
                                             float (&corr)[2], unsigned (&a)[4][4],
                                             const QScale &ps) {
    float mu[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float mx = fmaxf(s[0][2 * h], s[0][2 * h + 1]);
#pragma unroll
        for (int j = 1; j < 8; j++) mx = fmaxf(mx, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
        const float m_new = fmaxf(m[h], quad_max(mx));
        mu[h] = m_new == neg_inf() ? 0.f : m_new;
        corr[h] = m_new == m[h] ? 1.f : exp2_fast(m[h] - mu[h]);   // m = -inf: 0
        l[h] *= corr[h];
        m[h] = m_new;
    }
#pragma unroll
    for (int c = 0; c < 4; c++) {
        float pv[2][4];
        pm_chunk_exp(s, c, mu, l, pv);
        if constexpr (kP == kNvfp4) {
            pm_p_carrier<kF16>(pv);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const Nvfp4Scale sc = nvfp4_scale_nb(pm_p_block_max(pv, h), ps);
#pragma unroll
                for (int e = 0; e < 2; e++)
#pragma unroll
                    for (int k = 2 * h; k < 2 * h + 2; k++)
                        pv[e][k] = nvfp4_code_nb(pv[e][k], sc);
            }
            a[c][0] = pack2<kF16>(pv[0][0], pv[0][1]), a[c][1] = pack2<kF16>(pv[0][2], pv[0][3]);
            a[c][2] = pack2<kF16>(pv[1][0], pv[1][1]), a[c][3] = pack2<kF16>(pv[1][2], pv[1][3]);
        } else {
            a[c][0] = p_pair<kF16, kP>(pv[0][0], pv[0][1], ps);
            a[c][1] = p_pair<kF16, kP>(pv[0][2], pv[0][3], ps);
            a[c][2] = p_pair<kF16, kP>(pv[1][0], pv[1][1], ps);
            a[c][3] = p_pair<kF16, kP>(pv[1][2], pv[1][3], ps);
        }
    }
}

}  // namespace sm90p

template <bool kF16, int kQ, int kK, int kP, int kV, int kM, int kDqk, int kDv>
__global__ void __launch_bounds__(sm90p::kThreads, 1)
    prefill_sm90_kernel(const __grid_constant__ PrefillMmaParams p,
                        const __grid_constant__ sm90p::TmaDesc tk,
                        const __grid_constant__ sm90p::TmaDesc tv) {
    using namespace sm90p;
    using L = Layout<kDqk, kDv>;
    constexpr int kS = L::kStages, kOn = kDv / 8;
    constexpr bool kQuantKV = kK != kNone || kV != kNone;
    static_assert(kDv == 64 || kDv == 128, "dv 64 or 128");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char *smem = flashmla::align_smem_1024(smem_raw);
    const unsigned base = smem_addr(smem);
    const unsigned bar_full_k = base + L::kBar, bar_full_v = bar_full_k + 8 * kS;
    const unsigned bar_ready_k = bar_full_v + 8 * kS, bar_ready_v = bar_ready_k + 8 * kS;
    const unsigned bar_empty = bar_ready_v + 8 * kS;

    // the warpgroup, warp-uniform to the compiler (shuffled from lane 0), so that what derives
    // from it (shared-memory addresses, wgmma descriptors) can live in uniform registers
    const int b = blockIdx.z, hk = blockIdx.y, wg = __shfl_sync(0xffffffffu, threadIdx.x / kWg, 0);
    SeqInfo seq;
    if (!seq_info(p, b, seq)) return;
    const int rows = seq.q_len * seq.G, tiles = (rows + 127) / 128;

    if (threadIdx.x < kS) {
        mbarrier_init(bar_full_k + 8 * threadIdx.x, 1);
        mbarrier_init(bar_full_v + 8 * threadIdx.x, 1);
        mbarrier_init(bar_ready_k + 8 * threadIdx.x, kQuantThreads);
        mbarrier_init(bar_ready_v + 8 * threadIdx.x, kQuantThreads);
        mbarrier_init(bar_empty + 8 * threadIdx.x, 2 * kWg);
    }
    __syncthreads();

    // registers: the producer (and quantizer) warpgroup gives most of its 168 to the consumers
    // (what one warpgroup releases, two take: high - 168 <= (168 - low) / 2)
    constexpr int kRegsLow = kQuantKV ? 72 : 24, kRegsHigh = kQuantKV ? 216 : 240;
    static_assert(2 * (kRegsHigh - 168) <= 168 - kRegsLow, "register budget of the CTA");
    if (wg == 0) {
        setmaxnreg_dec<kRegsLow>();
        if (threadIdx.x == 0) {  // the producer
            const unsigned long long policy = flashmla::l2_policy_evict_last();
            for_each_kv_tile(p, seq, tiles, rows, [&](int n, int it) {
                const int s = it % kS;
                mbarrier_wait_parity(bar_empty + 8 * s, ((it / kS) & 1) ^ 1);
                const int key = (int)seq.k0 + n * kBN;
                mbarrier_arrive_expect_tx(bar_full_k + 8 * s, L::kKBytes);
#pragma unroll
                for (int c = 0; c < L::kQSlabs; c++)
                    tma_load_4d(base + L::kK + s * L::kKBytes + c * kSlab, &tk, bar_full_k + 8 * s,
                                c * 64, hk, key, 0, policy);
                mbarrier_arrive_expect_tx(bar_full_v + 8 * s, L::kVBytes);
#pragma unroll
                for (int c = 0; c < L::kVSlabs; c++)
                    tma_load_4d(base + L::kV + s * L::kVBytes + c * kSlab, &tv, bar_full_v + 8 * s,
                                c * 64, hk, key, 0, policy);
            });
        } else if (kQuantKV && threadIdx.x >= 32) {  // the quantizers
            const int tid = threadIdx.x - 32;
            for_each_kv_tile(p, seq, tiles, rows, [&](int n, int it) {
                const int s = it % kS;
                const unsigned ph = (it / kS) & 1;
                if constexpr (kK != kNone) {
                    mbarrier_wait_parity(bar_full_k + 8 * s, ph);
                    quant_rows<kF16, kK, kQuantThreads, kDqk>(smem + L::kK + s * L::kKBytes, tid,
                                                              p.k_scale);
                    fence_proxy_async_shared();
                    mbarrier_arrive(bar_ready_k + 8 * s);
                }
                if constexpr (kV != kNone) {
                    mbarrier_wait_parity(bar_full_v + 8 * s, ph);
                    unsigned char *vt = smem + L::kV + s * L::kVBytes;
                    const int valid = seq.k_len - n * kBN;
                    if (valid < kBN) {
                        zero_rows<kQuantThreads, kDv>(vt, valid, tid);
                        // every quantizer's zeros land before any reads the tile's groups
                        named_barrier_sync(3, kQuantThreads);
                    }
                    quant_v<kF16, kV, kQuantThreads, kDv>(vt, tid, p.v_scale);
                    fence_proxy_async_shared();
                    mbarrier_arrive(bar_ready_v + 8 * s);
                }
            });
        }
        return;
    }

    // consumers
    setmaxnreg_inc<kRegsHigh>();
    const int cw = wg - 1, wt = threadIdx.x % kWg, warp = wt / 32, lane = threadIdx.x & 31;
    const int g = lane >> 2;
    const int nb = kP != kNone && p.block_n < kBN ? p.block_n / 16 : 4;
    const unsigned q_s = base + cw * L::kQBytes;
    const unsigned bar_k = kK != kNone ? bar_ready_k : bar_full_k;
    const unsigned bar_v = kV != kNone ? bar_ready_v : bar_full_v;
    int it = 0;
    for (int tile = tiles - 1 - (int)blockIdx.x; tile >= 0; tile -= (int)gridDim.x) {
        const int r0 = tile * 128, r0w = r0 + 64 * cw;
        const int end = key_end(p, seq, min(r0 + 128, rows) - 1);
        const int n_tiles = (end + kBN - 1) / kBN;
        const int end_w = r0w < rows ? key_end(p, seq, min(r0w + 64, rows) - 1) : 0;
        const int n_w = (end_w + kBN - 1) / kBN;
        const int i_first = r0w / seq.G;

        // Q rows [r0w, r0w + 64) (zero past the last row) into the warpgroup's slabs
        {
            constexpr int kPer = kDqk / 8;
            const unsigned short *gq = static_cast<const unsigned short *>(p.q);
#pragma unroll 4
            for (int e = wt; e < 64 * kPer; e += kWg) {
                const int r = e / kPer, ch = e % kPer, rr = r0w + r;
                const bool ok = rr < rows;
                const unsigned short *src =
                    ok ? gq + q_row_offset(p, seq, hk, rr) + ch * 8
                       : gq;
                cp_async_16(smem + cw * L::kQBytes + (ch / 8) * kSlab + sw(r, ch % 8), src, ok);
            }
            cp_async_commit();
            cp_async_wait<0>();
            if constexpr (kQ != kNone) {
                named_barrier_sync(1 + cw, kWg);
                quant_rows<kF16, kQ, kWg, kDqk>(smem + cw * L::kQBytes, wt, p.q_scale);
            }
            fence_proxy_async_shared();
            named_barrier_sync(1 + cw, kWg);
        }

        const int ra = r0w + warp * 16 + g, rb = ra + 8;
        const int ia = ra / seq.G, ib = rb / seq.G;
        float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.f, 0.f};
        float o[kOn][4];
#pragma unroll
        for (int j = 0; j < kOn; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;

        float sc[8][4];
        // S = Qc Kc^T of the K tile at kt into sc, committed, not waited for
        auto issue_s = [&](unsigned kt) {
            const unsigned long long qd = wgmma_desc_sw128(q_s, 16, 1024);
            const unsigned long long kd = wgmma_desc_sw128(kt, 16, 1024);
            wgmma_fence();
#pragma unroll
            for (int c = 0; c < L::kQSlabs; c++)
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const unsigned off16 = (c * kSlab + k * 32) >> 4;
                    wgmma_m64n64k16_ss<kF16, 0>(sc, qd + off16, kd + off16, c + k > 0);
                }
            wgmma_commit_group();
        };
        // the scores of tile n in sc: scaled, masked, N:M
        auto scores = [&](int n) {
            const int j0 = n * kBN;
            const bool masked = j0 + kBN > seq.k_len || (p.causal && j0 + kBN - 1 > i_first + seq.off);
            pm_scores<kM>(sc, p, seq, j0, masked, ia, ib);
        };
        // waits for V of tile n in stage s; rows past k_len belong to another sequence (or lie
        // past the tensor: zeros): their P is 0, but a non-finite value would still reach O, so
        // they are zeroed (with V quantized, the quantizers did it)
        auto wait_v = [&](int n, int s, unsigned ph) {
            mbarrier_wait_parity(bar_v + 8 * s, ph);
            if (kV == kNone && n * kBN + kBN > seq.k_len) {
                zero_rows<kWg, kDv>(smem + L::kV + s * L::kVBytes, seq.k_len - n * kBN, wt);
                fence_proxy_async_shared();
                named_barrier_sync(1 + cw, kWg);
            }
        };
        auto k_tile = [&](int s) { return base + L::kK + s * L::kKBytes; };
        auto v_tile = [&](int s) { return base + L::kV + s * L::kVBytes; };

        if (nb == 4) {
            // One P tile per KV tile: software-pipelined. In turn t = n + 1 a warpgroup issues
            // S(n + 1) and P V(n), then runs the softmax of tile n + 1 under P V(n) (and under
            // the other warpgroup's products: the turns alternate between the two warpgroups,
            // named barriers 4 and 5); its O factors are applied before P V(n + 1). Turns:
            // 0 (S(0)), one per tile after it and one per skipped tile, n_tiles + 1 in all for
            // both warpgroups. No branch lies between a product's issue and its wait (ptxas
            // would serialize the products), and the two P fragments alternate (unrolled by 2).
            const QScale ps = qscale<kP>(p.p_scale);
            unsigned a0[4][4], a1[4][4];
            float corr[2] = {1.f, 1.f};
            auto turn_begin = [&]() {
                if (kPingPong) named_barrier_sync(4 + cw, 2 * kWg);
            };
            auto turn_end = [&]() {
                if (kPingPong) named_barrier_arrive(5 - cw, 2 * kWg);
            };
            auto rescale_o = [&]() {   // skipped (exactly: x * 1 = x) where no row's max moved
                if (__any_sync(0xffffffffu, corr[0] != 1.f || corr[1] != 1.f)) {
#pragma unroll
                    for (int j = 0; j < kOn; j++)
                        o[j][0] *= corr[0], o[j][1] *= corr[0], o[j][2] *= corr[1], o[j][3] *= corr[1];
                }
            };
            // turn n + 1 with more tiles after n: S(n + 1) and P V(n) from pa, softmax into pn
            auto step = [&](int n, unsigned (&pa)[4][4], unsigned (&pn)[4][4]) {
                const int s = (it + n) % kS, s1 = (it + n + 1) % kS;
                wait_v(n, s, ((it + n) / kS) & 1);
                mbarrier_wait_parity(bar_k + 8 * s1, ((it + n + 1) / kS) & 1);
                rescale_o();
                turn_begin();
                issue_s(k_tile(s1));
                wgmma_fence();
#pragma unroll
                for (int c = 0; c < 4; c++) pv_chunk<kF16, kDv>(o, pa[c], v_tile(s), c);
                wgmma_commit_group();
                turn_end();
                wgmma_wait_group<1>();   // S(n + 1)
                acc_fence(sc);
                scores(n + 1);
                tile_softmax<kF16, kP>(sc, m, l, corr, pn, ps);
                wgmma_wait_group<0>();   // P V(n)
                acc_fence(o);
                mbarrier_arrive(bar_empty + 8 * s);
            };
            // the last tile's turn: P V(n) only
            auto last = [&](int n, unsigned (&pa)[4][4]) {
                const int s = (it + n) % kS;
                wait_v(n, s, ((it + n) / kS) & 1);
                rescale_o();
                turn_begin();
                wgmma_fence();
#pragma unroll
                for (int c = 0; c < 4; c++) pv_chunk<kF16, kDv>(o, pa[c], v_tile(s), c);
                wgmma_commit_group();
                turn_end();
                wgmma_wait_group<0>();
                acc_fence(o);
                mbarrier_arrive(bar_empty + 8 * s);
            };
            if (kPingPong && cw == 1) named_barrier_arrive(4, 2 * kWg);  // warpgroup 0 starts
            if (n_w > 0) {
                mbarrier_wait_parity(bar_k + 8 * (it % kS), (it / kS) & 1);
                turn_begin();   // turn 0
                issue_s(k_tile(it % kS));
                turn_end();
                wgmma_wait_group<0>();
            } else {
                turn_begin();
                turn_end();
            }
            if (n_w > 0) {
                acc_fence(sc);
                scores(0);
                tile_softmax<kF16, kP>(sc, m, l, corr, a0, ps);
                int n = 0;
                for (; n + 2 < n_w; n += 2) {
                    step(n, a0, a1);
                    step(n + 1, a1, a0);
                }
                if (n + 1 < n_w) {
                    step(n, a0, a1);
                    last(n + 1, a1);
                } else {
                    last(n, a0);
                }
            }
            for (int n = n_w; n < n_tiles; n++) {  // wholly past this warpgroup's causal bound
                const int s = (it + n) % kS;
                mbarrier_wait_parity(bar_k + 8 * s, ((it + n) / kS) & 1);
                mbarrier_arrive(bar_empty + 8 * s);
                turn_begin();
                turn_end();
            }
            if (kPingPong && cw == 0) named_barrier_sync(4, 2 * kWg);   // warpgroup 1's last turn
            it += n_tiles;
        } else {
            // P tiles of 16 or 32 keys (quantized P): the running max moves inside the KV tile,
            // so O is rescaled between the chunks' products; no overlap
            for (int n = 0; n < n_tiles; n++, it++) {
                const int s = it % kS;
                const unsigned ph = (it / kS) & 1;
                mbarrier_wait_parity(bar_k + 8 * s, ph);
                if (n >= n_w) {  // wholly past this warpgroup's causal bound: release only
                    mbarrier_arrive(bar_empty + 8 * s);
                    continue;
                }
                issue_s(k_tile(s));
                wgmma_wait_group<0>();
                acc_fence(sc);
                scores(n);
                wait_v(n, s, ph);
                float mu[2];
                unsigned a[4][4];
#pragma unroll
                for (int c = 0; c < 4; c++) {   // pm_chunk_p may rescale o: each product waited
                    pm_chunk_p<kF16, kP, kOn>(sc, c, nb, m, l, mu, o, p.p_scale, a[c]);
                    wgmma_fence();
                    pv_chunk<kF16, kDv>(o, a[c], v_tile(s), c);
                    wgmma_commit_group();
                    wgmma_wait_group<0>();
                    acc_fence(o);
                }
                mbarrier_arrive(bar_empty + 8 * s);
            }
        }

        pm_store<kF16, kOn>(p, seq, o, m, l, ra, rows, hk);
    }
}

}  // namespace fakequant
}  // namespace mla
