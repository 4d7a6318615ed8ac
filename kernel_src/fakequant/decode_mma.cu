// Fake-quant MLA decode on tensor cores (spec/fakequant.md §2.1-2.4; the numerics study is
// docs/fakequant-tensorcore-plan.md). The same results as decode.cu up to fp32 accumulation
// order: every fake-quantized operand is exactly 16-bit once its per-tensor factor is taken out
// (decode_mma_codes.cuh), so S = q . Kcode and O += Pcode . Vcode run as bf16/fp16 mma.sync
// m16n8k16 with fp32 accumulation and the factors go into two fp32 constants of the products:
//   qk_eff = fl32(qk_scale * sk)            (sk: K's fp8 scale or NVFP4 global scale, else 1)
//   pv_eff = fl32(sp * sv)                  (the same for P and V)
// The one operand that is not 16-bit, P with p_qdq none, is split into hi + lo 16-bit halves
// (two P V MMAs; splits_only_reorder_no_quant needs it). q is 16-bit (the cache dtype) or the fp32
// NVFP4 carrier, whose values are exact in 16 bits; a CTA whose fp32 q is not (any value, by a
// vote at load) adds a second Q K MMA on the residuals q - hi(q), read from global memory.
//
// Template parameters as decode.cu's (kind "fakequant_decode_mma"): kF16 (the cache and the MMA
// type are float16, else bfloat16), kK, kV, kP the QdqMode of K, V, P. Shapes: kv_lora_rank 512,
// qk_rope_head_dim 64 (the host falls back to decode.cu otherwise).
//
// Schedule (§2.4): tiles of 32 tokens from 0, splits of tps = ceil(ceil(s / 32) / S) tiles; within
// a split the online softmax of §2.3 restarts (running max mu from -inf), and P is quantized
// against mu, as in decode.cu. A CTA takes a chunk of G consecutive splits, G = max(1, ceil(64 /
// tps)) (at least 64 tiles, a function of s and S only, so the result never depends on the batch,
// the page size or the device), and folds its splits into one accumulator: O and L are kept in
// units of 2^E, E the row's running max over the chunk's earlier tiles or mu when that is below
// it (E >= M - 64, M the row's max so far); a tile is added as
//   mu' = max(mu, max_j s_j);  O, L *= 2^(E - mu');  E = mu';  L += sum_j p_j;  O += Pq V
//   with p_j = exp2(s_j - mu') unquantized in L and Pq = QP(p) in O,
// which is the spec's per-split loop followed by its exp2-weighted merge, up to fp32 rounding.
// A tile with mu' < M - 64 contributes below 2^-64 of the row's total and is not added (this also
// bounds O's magnitude). The CTA's (E, L, O pv_eff) go to slot `chunk` of the workspace and
// decode.cu's combine merges the slots in order (slots past a request's chunks have l = 0).
//
// CTA: 64 heads of one request and chunk (grid: head blocks, slots, batch), 8 warps; warp w = (wm
// = w % 4, wn = w / 4) holds S rows [16 wm, +16) x keys [16 wn, +16) of the 32-key tile and O rows
// [16 wm, +16) x columns [256 wn, +256) (128 fp32 per thread). Row maxima and the final row sums
// are exchanged between the two warps of a row slab (named barrier 1 + wm, 64 threads); P goes
// through shared memory (ldmatrix). With K or V quantized the kernel runs in clusters of 2 along
// x (heads h0 and h0 + 64; the host pads the head blocks to even): each CTA quantizes half of a
// tile (K rows and the V group of 16 tokens of its cluster rank) into both CTAs' code tiles, so a
// tile is quantized once per 128 heads (cluster barriers around it).
//
// Shared memory (bytes): Q 64 x 576 16-bit (73728) | raw tiles 2 x 32 x 576 (cp.async double
// buffer, rows past s zero-filled) | K codes 32 x 576 | V codes 32 x 512 | P hi, P lo 64 x 32 |
// row maxima and sums 2 x 2 x 64 fp32. Rows of 16-byte chunks, chunk c of row r at c ^ (r & 7)
// (P: c ^ ((r >> 1) & 3)). K none reads K from the raw tile, V none reads V = raw[:, :512].
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "fakequant/decode_mma_codes.cuh"
#include "common/tile16.cuh"
#include "common/warp.cuh"
#include "flashmla/ptx.cuh"

namespace mla {
namespace fakequant {
namespace mmadec {

using flashmla::cp_async_16;
using flashmla::cp_async_commit;
using flashmla::cp_async_wait;
using flashmla::ldmatrix_x4;
using flashmla::ldmatrix_x4_trans;
using flashmla::mma_m16n8k16;
using flashmla::smem_addr;

struct MmaDecodeParams {
    const void *q;
    long long q_stride_b, q_stride_h;
    const void *cache;
    long long c_stride_block, c_stride_tok;
    const int *block_table;
    long long bt_stride;
    const int *seq_len;
    float *ws_acc, *ws_ml;
    int batch, heads, page_size, max_blocks, splits, slots, q_fp32;
    float qk_eff, pv_eff, k_scale, v_scale, p_scale;
    int codes_quick;   // decode_sm90.cu's alternation: flashmla::sm90::FqScales::codes_quick (else unused)
};

constexpr int kD = 576, kRank = 512, kHeads = 64, kTile = 32, kThreads = 256;
constexpr int kChunks = kD / 8;                 // 16-byte chunks of a latent row
constexpr int kRowB = kD * 2, kVRowB = kRank * 2, kPRowB = kTile * 2;
constexpr int kRawB = kTile * kRowB;
constexpr int kQOff = 0;
constexpr int kRawOff = kQOff + kHeads * kRowB;
constexpr int kKOff = kRawOff + 2 * kRawB;
constexpr int kVOff = kKOff + kTile * kRowB;
constexpr int kPOff = kVOff + kTile * kVRowB;
constexpr int kPB = kHeads * kPRowB;
constexpr int kRedOff = kPOff + 2 * kPB;
constexpr int kSmemBytes = kRedOff + 4 * kHeads * 4;
constexpr int kMinChunkTiles = 64;
constexpr float kSkip = 64.f;
static_assert(kSmemBytes == 226304, "runtime/fakequant_kinds.h MLA__FQ_DECODE_MMA_SMEM");

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

__device__ __forceinline__ unsigned pswz(int r, int c) {
    return (unsigned)(r * kPRowB + ((c ^ ((r >> 1) & 3)) << 4));
}

// Round to the 16-bit type (nearest even) and back.
template <bool kF16>
__device__ __forceinline__ unsigned f2h(float x) {
    if constexpr (kF16) return __half_as_ushort(__float2half_rn(x));
    else return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}
template <bool kF16>
__device__ __forceinline__ float h2f(unsigned u) {
    if constexpr (kF16) return __half2float(__ushort_as_half((unsigned short)(u & 0xffffu)));
    else return __uint_as_float(u << 16);
}
template <bool kF16>
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
    return f2h<kF16>(lo) | (f2h<kF16>(hi) << 16);
}
// The residual x - hi(x), rounded to 16 bits.
template <bool kF16>
__device__ __forceinline__ float lo_part(float x) {
    return x - h2f<kF16>(f2h<kF16>(x));
}

// bar.sync of the two warps (wm, wm + 4) of a row slab.
__device__ __forceinline__ void slab_barrier(int wm) {
    asm volatile("bar.sync %0, 64;\n" ::"r"(1 + wm) : "memory");
}

// The two CTAs of a cluster (head halves h0 and h0 + 64 of one request and chunk): the peer's
// shared::cluster address of a local shared address, stores there, and the cluster barrier
// (arrive.release / wait.acquire: the CTAs' shared-memory writes before it are visible after).
__device__ __forceinline__ unsigned peer_addr(unsigned addr, unsigned rank) {
    unsigned r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}
__device__ __forceinline__ void st_peer_v4(unsigned addr, uint4 v) {
    asm volatile("st.shared::cluster.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x),
                 "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}
__device__ __forceinline__ void st_peer_u32(unsigned addr, unsigned v) {
    asm volatile("st.shared::cluster.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// Tiles [begin, end) of chunk c of a request of length s and the split length tps (§2.4).
__device__ __forceinline__ void chunk_tiles(int s, int splits, int c, int &tps, int &begin,
                                            int &end) {
    const int nt = (s + kTile - 1) / kTile;
    tps = nt ? (nt + splits - 1) / splits : 1;
    const int g = tps >= kMinChunkTiles ? 1 : (kMinChunkTiles + tps - 1) / tps;
    const long long b = (long long)c * g * tps, e = b + (long long)g * tps;
    begin = b < nt ? (int)b : nt;
    end = e < nt ? (int)e : nt;
}

// fp8 codes of two values as a 16-bit pair (from the exact fp16 pair of e4m3x2_f16x2).
template <bool kF16>
__device__ __forceinline__ unsigned fp8_code2(float lo, float hi, float sc, float rsc) {
    const unsigned h = e4m3x2_f16x2(fp8_scaled(lo, sc, rsc), fp8_scaled(hi, sc, rsc));
    if constexpr (kF16) return h;
    else return pack2<false>(h2f<true>(h), h2f<true>(h >> 16));
}

// 8 codes of 8 raw 16-bit values (one chunk) under fp8 with scale sc.
template <bool kF16>
__device__ __forceinline__ uint4 fp8_codes8(uint4 v, float sc, float rsc) {
    unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++)
        w[i] = fp8_code2<kF16>(h2f<kF16>(w[i]), h2f<kF16>(w[i] >> 16), sc, rsc);
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// Raw tile -> K and V codes (modes other than none): this CTA (cluster rank `half`) quantizes
// K rows [16 half, +16) and the V group of 16 tokens `half`, and stores each code both here and
// at the same place in the peer CTA (kc_peer, vc_peer: its K and V code tiles).
template <bool kF16, int kK, int kV>
__device__ __forceinline__ void quantize_tile(const MmaDecodeParams &p, const unsigned char *raw,
                                              unsigned char *kc, unsigned char *vc,
                                              unsigned kc_peer, unsigned vc_peer, int half) {
    const int tid = threadIdx.x;
    if constexpr (kK == kFp8) {
        const float rk = __frcp_rn(p.k_scale);
        for (int i = tid; i < 16 * kChunks; i += kThreads) {
            const int r = 16 * half + i / kChunks, c = i % kChunks;
            const unsigned off = swz(r, c, kRowB);
            const uint4 v = fp8_codes8<kF16>(*reinterpret_cast<const uint4 *>(raw + off), p.k_scale, rk);
            *reinterpret_cast<uint4 *>(kc + off) = v;
            st_peer_v4(kc_peer + off, v);
        }
    } else if constexpr (kK == kNvfp4) {
        const float k6 = __fmul_rn(6.f, p.k_scale), rk6 = __frcp_rn(k6);
        for (int i = tid; i < 16 * (kD / 16); i += kThreads) {
            const int r = 16 * half + i / (kD / 16), j = i % (kD / 16);
            const unsigned o0 = swz(r, 2 * j, kRowB), o1 = swz(r, 2 * j + 1, kRowB);
            uint4 a = *reinterpret_cast<const uint4 *>(raw + o0);
            uint4 c = *reinterpret_cast<const uint4 *>(raw + o1);
            unsigned w[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
            float x[16], bamax = 0.f;
#pragma unroll
            for (int e = 0; e < 8; e++) {
                x[2 * e] = h2f<kF16>(w[e]), x[2 * e + 1] = h2f<kF16>(w[e] >> 16);
                bamax = fmaxf(bamax, fmaxf(fabsf(x[2 * e]), fabsf(x[2 * e + 1])));
            }
            const Nvfp4Scale bs = nvfp4_scale(bamax, p.k_scale, k6, rk6);
            if (nvfp4_fast(bs)) {
#pragma unroll
                for (int e = 0; e < 8; e++)
                    w[e] = pack2<kF16>(nvfp4_code_fast(x[2 * e], bs), nvfp4_code_fast(x[2 * e + 1], bs));
            } else {
#pragma unroll
                for (int e = 0; e < 8; e++)
                    w[e] = pack2<kF16>(nvfp4_code(x[2 * e], bs), nvfp4_code(x[2 * e + 1], bs));
            }
            a = make_uint4(w[0], w[1], w[2], w[3]), c = make_uint4(w[4], w[5], w[6], w[7]);
            *reinterpret_cast<uint4 *>(kc + o0) = a, *reinterpret_cast<uint4 *>(kc + o1) = c;
            st_peer_v4(kc_peer + o0, a), st_peer_v4(kc_peer + o1, c);
        }
    }
    if constexpr (kV == kFp8) {
        const float rv = __frcp_rn(p.v_scale);
#pragma unroll
        for (int k = 0; k < 16 * (kRank / 8) / kThreads; k++) {
            const int i = tid + k * kThreads, r = 16 * half + i / (kRank / 8), c = i % (kRank / 8);
            const unsigned off = swz(r, c, kVRowB);
            const uint4 v = fp8_codes8<kF16>(*reinterpret_cast<const uint4 *>(raw + swz(r, c, kRowB)),
                                             p.v_scale, rv);
            *reinterpret_cast<uint4 *>(vc + off) = v;
            st_peer_v4(vc_peer + off, v);
        }
    } else if constexpr (kV == kNvfp4) {
        // The 16-token group `half` of the tile (absolute positions: tiles start at multiples of
        // 32), a pair of features per thread; tokens >= s were zero-filled, so the open group's
        // scale is that of its valid tokens (the tail re-quantizes as s grows).
        const int fp = tid, c = fp >> 2, wb = (fp & 3) * 4;
        float x0[16], x1[16], m0 = 0.f, m1 = 0.f;
#pragma unroll
        for (int rr = 0; rr < 16; rr++) {
            const unsigned w =
                *reinterpret_cast<const unsigned *>(raw + swz(16 * half + rr, c, kRowB) + wb);
            x0[rr] = h2f<kF16>(w), x1[rr] = h2f<kF16>(w >> 16);
            m0 = fmaxf(m0, fabsf(x0[rr])), m1 = fmaxf(m1, fabsf(x1[rr]));
        }
        const float v6 = __fmul_rn(6.f, p.v_scale), rv6 = __frcp_rn(v6);
        const Nvfp4Scale s0 = nvfp4_scale(m0, p.v_scale, v6, rv6);
        const Nvfp4Scale s1 = nvfp4_scale(m1, p.v_scale, v6, rv6);
        unsigned v[16];
        if (nvfp4_fast(s0) && nvfp4_fast(s1)) {
#pragma unroll
            for (int rr = 0; rr < 16; rr++)
                v[rr] = pack2<kF16>(nvfp4_code_fast(x0[rr], s0), nvfp4_code_fast(x1[rr], s1));
        } else {
#pragma unroll
            for (int rr = 0; rr < 16; rr++)
                v[rr] = pack2<kF16>(nvfp4_code(x0[rr], s0), nvfp4_code(x1[rr], s1));
        }
#pragma unroll
        for (int rr = 0; rr < 16; rr++) {
            const unsigned off = swz(16 * half + rr, c, kVRowB) + wb;
            *reinterpret_cast<unsigned *>(vc + off) = v[rr];
            st_peer_u32(vc_peer + off, v[rr]);
        }
    }
}

// Features f, f + 1 of q row h of request b as a 16-bit pair (0 for h past the heads); an fp32 q
// is rounded to 16 bits, and inexact set when a value is not exact there.
template <bool kF16>
__device__ __forceinline__ unsigned q_pair(const MmaDecodeParams &p, int b, int h, int f,
                                           bool &inexact) {
    if (h >= p.heads) return 0u;
    const long long base = (long long)b * p.q_stride_b + (long long)h * p.q_stride_h + f;
    if (p.q_fp32) {
        const float *qf = static_cast<const float *>(p.q) + base;
        const float x0 = qf[0], x1 = qf[1];
        const unsigned w = pack2<kF16>(x0, x1);
        inexact |= h2f<kF16>(w) != x0 || h2f<kF16>(w >> 16) != x1;
        return w;
    }
    const unsigned short *qh = static_cast<const unsigned short *>(p.q) + base;
    return qh[0] | ((unsigned)qh[1] << 16);
}

// Chunk c (8 features) of q row h of request b as 16-bit pairs (q_pair).
template <bool kF16>
__device__ __forceinline__ uint4 q_chunk(const MmaDecodeParams &p, int b, int h, int c,
                                         bool &inexact) {
    unsigned w[4];
#pragma unroll
    for (int e = 0; e < 4; e++) w[e] = q_pair<kF16>(p, b, h, c * 8 + 2 * e, inexact);
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// The A fragment (mma.sync m16n8k16 / wgmma register layout) of the residuals q - fl16(q) at
// features f, f + 1, f + 8, f + 9 of the fp32 q rows qa (fragment rows r) and qb (r + 8), each
// times za / zb (0 for a row past the heads).
template <bool kF16>
__device__ __forceinline__ void q_lo_frag(const float *qa, const float *qb, float za, float zb,
                                          int f, unsigned (&a)[4]) {
    a[0] = pack2<kF16>(za * lo_part<kF16>(qa[f]), za * lo_part<kF16>(qa[f + 1]));
    a[1] = pack2<kF16>(zb * lo_part<kF16>(qb[f]), zb * lo_part<kF16>(qb[f + 1]));
    a[2] = pack2<kF16>(za * lo_part<kF16>(qa[f + 8]), za * lo_part<kF16>(qa[f + 9]));
    a[3] = pack2<kF16>(zb * lo_part<kF16>(qb[f + 8]), zb * lo_part<kF16>(qb[f + 9]));
}

template <bool kF16, int kK, int kV, int kP>
__global__ void __launch_bounds__(kThreads, 1) decode_mma_kernel(const MmaDecodeParams p) {
    extern __shared__ __align__(128) unsigned char smem[];
    const int chunk = blockIdx.y, h0 = blockIdx.x * kHeads, b = blockIdx.z;
    const int half = blockIdx.x & 1;   // the cluster rank (clusters of 2 along x)
    constexpr bool kQuant = kK != kNone || kV != kNone;
    constexpr bool kHalfRows = kK != kNone && kV != kNone;   // only rows [16 half, +16) read
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp & 3, wn = warp >> 2;
    const long long cap = (long long)p.max_blocks * p.page_size;
    int s = p.seq_len[b] < 0 ? 0 : p.seq_len[b];
    if ((long long)s > cap) s = (int)cap;
    int tps, t_begin, t_end;
    chunk_tiles(s, p.splits, chunk, tps, t_begin, t_end);
    const long long row_base = (long long)b * p.heads;
    if (t_begin >= t_end) {   // no tile: an empty slot
        if (tid < kHeads && h0 + tid < p.heads) {
            float *ml = p.ws_ml + ((row_base + h0 + tid) * p.slots + chunk) * 2;
            ml[0] = neg_inf(), ml[1] = 0.f;
        }
        return;
    }
    unsigned char *q_s = smem + kQOff, *kc = smem + kKOff, *vc = smem + kVOff;
    float *red_max = reinterpret_cast<float *>(smem + kRedOff), *red_sum = red_max + 2 * kHeads;
    const unsigned q_a = smem_addr(q_s), raw_a = smem_addr(smem + kRawOff);
    const unsigned ph_a = smem_addr(smem + kPOff), pl_a = ph_a + kPB;
    const int *bt_row = p.block_table + (long long)b * p.bt_stride;
    const unsigned short *cache = static_cast<const unsigned short *>(p.cache);
    const int lr = tid >> 3, lc = tid & 7;   // the loader's row and first chunk

    // Raw tile -> raw buffer buf (cp.async, one group; rows past s zero-filled; with K and V
    // both quantized only the rows this CTA quantizes).
    auto load_tile = [&](int tile, int buf) {
        if (kHalfRows && (lr >> 4) != half) {
            cp_async_commit();
            return;
        }
        const int t = tile * kTile + lr;
        const bool valid = t < s;
        const unsigned short *src = cache;
        if (valid)
            src += (long long)bt_row[t / p.page_size] * p.c_stride_block +
                   (long long)(t % p.page_size) * p.c_stride_tok;
        const unsigned dst = raw_a + buf * kRawB;
#pragma unroll
        for (int k = 0; k < kChunks / 8; k++)
            cp_async_16(dst + swz(lr, lc + 8 * k, kRowB), src + (valid ? (lc + 8 * k) * 8 : 0), valid);
        cp_async_commit();
    };
    load_tile(t_begin, 0);

    // Q rows of heads h0.. (16-bit; fp32 q rounded, with the vote on exactness).
    bool inexact = false;
    for (int i = tid; i < kHeads * kChunks; i += kThreads) {
        const int r = i / kChunks, c = i - r * kChunks;
        *reinterpret_cast<uint4 *>(q_s + swz(r, c, kRowB)) = q_chunk<kF16>(p, b, h0 + r, c, inexact);
    }
    const bool need_lo = __syncthreads_or(inexact) != 0;

    float o[32][4];
#pragma unroll
    for (int j = 0; j < 32; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    float E[2] = {neg_inf(), neg_inf()}, M[2] = {neg_inf(), neg_inf()};
    float mu[2] = {neg_inf(), neg_inf()}, L[2] = {0.f, 0.f};
    const int r0 = wm * 16 + (lane >> 2);   // this thread's rows r0, r0 + 8 (CTA-local heads)
    const float rp = __frcp_rn(p.p_scale);
    const float p6 = __fmul_rn(6.f, p.p_scale), rp6 = __frcp_rn(p6);

    const unsigned kc_peer = kQuant ? peer_addr(smem_addr(kc), half ^ 1) : 0u;
    const unsigned vc_peer = kQuant ? peer_addr(smem_addr(vc), half ^ 1) : 0u;
    for (int tile = t_begin; tile < t_end; tile++) {
        const int buf = (tile - t_begin) & 1;
        cp_async_wait<0>();
        // The tile landed for all; the previous tile's reads are done, here and (quantized
        // modes: the peer writes our code tiles) in the peer; at the first tile the peer runs.
        if constexpr (kQuant) cluster_sync();
        else __syncthreads();
        if (tile + 1 < t_end) load_tile(tile + 1, buf ^ 1);
        const unsigned char *raw = smem + kRawOff + buf * kRawB;
        if constexpr (kQuant) {
            quantize_tile<kF16, kK, kV>(p, raw, kc, vc, kc_peer, vc_peer, half);
            cluster_sync();   // both halves of the code tiles, from both CTAs
        }
        const unsigned k_a = kK != kNone ? smem_addr(kc) : raw_a + buf * kRawB;
        const unsigned v_a = kV != kNone ? smem_addr(vc) : raw_a + buf * kRawB;
        constexpr int kVB = kV != kNone ? kVRowB : kRowB;

        // S = Q K^T over the 576 features: 16 rows x 16 keys per warp, as two chains (even and
        // odd k-steps, summed at the end) so that consecutive MMAs do not wait on each other.
        float sc[2][4], sx[2][4];
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) sc[n][e] = sx[n][e] = 0.f;
        const int qr = wm * 16 + (lane & 15);
        const int kr = wn * 16 + (lane & 7) + ((lane >> 4) << 3);
#pragma unroll 2
        for (int kk = 0; kk < kD / 16; kk += 2) {
            unsigned a[4], bb[4], a2[4], bb2[4];
            ldmatrix_x4(q_a + swz(qr, 2 * kk + (lane >> 4), kRowB), a);
            ldmatrix_x4(k_a + swz(kr, 2 * kk + ((lane >> 3) & 1), kRowB), bb);
            ldmatrix_x4(q_a + swz(qr, 2 * kk + 2 + (lane >> 4), kRowB), a2);
            ldmatrix_x4(k_a + swz(kr, 2 * kk + 2 + ((lane >> 3) & 1), kRowB), bb2);
            mma_m16n8k16<kF16>(sc[0], a, bb[0], bb[1]);
            mma_m16n8k16<kF16>(sc[1], a, bb[2], bb[3]);
            mma_m16n8k16<kF16>(sx[0], a2, bb2[0], bb2[1]);
            mma_m16n8k16<kF16>(sx[1], a2, bb2[2], bb2[3]);
        }
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) sc[n][e] += sx[n][e];
        if (need_lo) {   // fp32 q not exact in 16 bits: + (q - hi(q)) K^T
            const float *qf = static_cast<const float *>(p.q) + (long long)b * p.q_stride_b;
            const int ha = h0 + r0, hb = ha + 8, f0 = (lane & 3) * 2;
            const float *qa = qf + (long long)(ha < p.heads ? ha : 0) * p.q_stride_h;
            const float *qb = qf + (long long)(hb < p.heads ? hb : 0) * p.q_stride_h;
            const float za = ha < p.heads ? 1.f : 0.f, zb = hb < p.heads ? 1.f : 0.f;
            for (int kk = 0; kk < kD / 16; kk++) {
                unsigned a[4], bb[4];
                q_lo_frag<kF16>(qa, qb, za, zb, kk * 16 + f0, a);
                ldmatrix_x4(k_a + swz(kr, 2 * kk + ((lane >> 3) & 1), kRowB), bb);
                mma_m16n8k16<kF16>(sc[0], a, bb[0], bb[1]);
                mma_m16n8k16<kF16>(sc[1], a, bb[2], bb[3]);
            }
        }

        // Scores (log2 domain), -inf past s; the tile's row maxima through the slab.
        const int t0 = tile * kTile + wn * 16 + (lane & 3) * 2;
        float mx[2] = {neg_inf(), neg_inf()};
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float v = t0 + 8 * n + (e & 1) < s ? __fmul_rn(sc[n][e], p.qk_eff) : neg_inf();
                sc[n][e] = v;
                mx[e >> 1] = fmaxf(mx[e >> 1], v);
            }
        mx[0] = quad_max(mx[0]), mx[1] = quad_max(mx[1]);
        if ((lane & 3) == 0) red_max[wn * kHeads + r0] = mx[0], red_max[wn * kHeads + r0 + 8] = mx[1];
        slab_barrier(wm);
        const bool split_start = tile % tps == 0;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = r0 + 8 * h;
            const float tm = fmaxf(red_max[r], red_max[kHeads + r]);
            if (split_start) mu[h] = neg_inf();
            const float mn = fmaxf(mu[h], tm);
            mu[h] = mn;
            bool use = mn != neg_inf();
            if (use) {
                if (E[h] == neg_inf()) {
                    E[h] = M[h] = mn;
                } else if (fmaxf(M[h], mn) - mn > kSkip) {
                    use = false;
                } else {
                    const float scale = exp2f(E[h] - mn);
                    E[h] = mn, M[h] = fmaxf(M[h], mn);
                    if (scale != 1.f) {
                        L[h] *= scale;
#pragma unroll
                        for (int j = 0; j < 32; j++) o[j][2 * h] *= scale, o[j][2 * h + 1] *= scale;
                    }
                }
            }
#pragma unroll
            for (int n = 0; n < 2; n++)
#pragma unroll
                for (int e = 2 * h; e < 2 * h + 2; e++) {
                    const float x = sc[n][e];
                    const float pj = use && x != neg_inf() ? exp2f(x - mn) : 0.f;
                    L[h] += pj;
                    sc[n][e] = pj;
                }
        }

        // P codes (after the row sum) into the P tile(s).
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = r0 + 8 * h;
            Nvfp4Scale bs = {0.f, 0.f, 0.f};
            if constexpr (kP == kNvfp4) {   // the row's 16 keys of this warp: one P block
#pragma unroll
                for (int n = 0; n < 2; n++)
#pragma unroll
                    for (int e = 2 * h; e < 2 * h + 2; e++) sc[n][e] = h2f<kF16>(f2h<kF16>(sc[n][e]));
                float bam = fmaxf(fmaxf(sc[0][2 * h], sc[0][2 * h + 1]),
                                  fmaxf(sc[1][2 * h], sc[1][2 * h + 1]));
                bam = quad_max(bam);
                bs = nvfp4_scale(bam, p.p_scale, p6, rp6);
            }
#pragma unroll
            for (int n = 0; n < 2; n++) {
                const float x0 = sc[n][2 * h], x1 = sc[n][2 * h + 1];
                const unsigned off = pswz(r, 2 * wn + n) + (lane & 3) * 4;
                unsigned hi;
                if constexpr (kP == kFp8) {
                    hi = fp8_code2<kF16>(x0, x1, p.p_scale, rp);
                } else if constexpr (kP == kNvfp4) {
                    hi = nvfp4_fast(bs) ? pack2<kF16>(nvfp4_code_fast(x0, bs), nvfp4_code_fast(x1, bs))
                                        : pack2<kF16>(nvfp4_code(x0, bs), nvfp4_code(x1, bs));
                } else {
                    hi = pack2<kF16>(x0, x1);
                    *reinterpret_cast<unsigned *>(smem + kPOff + kPB + off) =
                        pack2<kF16>(lo_part<kF16>(x0), lo_part<kF16>(x1));
                }
                *reinterpret_cast<unsigned *>(smem + kPOff + off) = hi;
            }
        }
        slab_barrier(wm);

        // O += P V: 16 rows x 256 columns per warp, keys in two k-steps of 16.
        const int pr = wm * 16 + (lane & 15);
#pragma unroll
        for (int kk = 0; kk < 2; kk++) {
            unsigned a[4], al[4];
            ldmatrix_x4(ph_a + pswz(pr, 2 * kk + (lane >> 4)), a);
            if constexpr (kP == kNone) ldmatrix_x4(pl_a + pswz(pr, 2 * kk + (lane >> 4)), al);
            const int vr = kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
#pragma unroll
            for (int jj = 0; jj < 16; jj++) {
                unsigned bb[4];
                ldmatrix_x4_trans(v_a + swz(vr, wn * 32 + 2 * jj + (lane >> 4), kVB), bb);
                mma_m16n8k16<kF16>(o[2 * jj], a, bb[0], bb[1]);
                mma_m16n8k16<kF16>(o[2 * jj + 1], a, bb[2], bb[3]);
                if constexpr (kP == kNone) {
                    mma_m16n8k16<kF16>(o[2 * jj], al, bb[0], bb[1]);
                    mma_m16n8k16<kF16>(o[2 * jj + 1], al, bb[2], bb[3]);
                }
            }
        }
    }

    // Row sums of the slab's two warps, then the chunk's partial (E, L, O pv_eff).
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const float l = quad_sum(L[h]);
        if ((lane & 3) == 0) red_sum[wn * kHeads + r0 + 8 * h] = l;
    }
    slab_barrier(wm);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int r = r0 + 8 * h, head = h0 + r;
        if (head >= p.heads) continue;
        const float l = red_sum[r] + red_sum[kHeads + r];
        const long long row = (row_base + head) * p.slots + chunk;
        float *acc = p.ws_acc + row * kRank + wn * 256 + (lane & 3) * 2;
#pragma unroll
        for (int j = 0; j < 32; j++)
            *reinterpret_cast<float2 *>(acc + 8 * j) =
                make_float2(__fmul_rn(o[j][2 * h], p.pv_eff), __fmul_rn(o[j][2 * h + 1], p.pv_eff));
        if (wn == 0 && (lane & 3) == 0) {
            const bool any = E[h] != neg_inf() && l > 0.f;
            p.ws_ml[row * 2] = any ? E[h] : neg_inf();
            p.ws_ml[row * 2 + 1] = any ? l : 0.f;
        }
    }
}

}  // namespace mmadec
}  // namespace fakequant
}  // namespace mla
