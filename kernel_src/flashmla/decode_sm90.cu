// FlashMLA-compatible dense paged decode, sm_90a path: the QK^T and PV products on wgmma (warpgroup
// MMA, operands in shared memory through 128-byte-swizzle descriptors, fp32 accumulators in
// registers). Same math, grid, schedule, work split, softmax and outputs as the portable kernel
// (decode.cu, whose helpers this file reuses); only the shared-memory tile layout and the two
// matrix products differ, so both produce the same numbers up to fp32 summation order.
//
// Template parameters (the spec "flashmla_decode_sm90" fixes them):
//   kKV        0: bf16 q / k_cache / out; 1: fp16 (fp8 stays on the portable kernel)
//   kPageClass 0: any page size; 1: page_size % 64 == 0 (one block-table lookup per tile)
//   kCausal    bottom-right causal mask (s_q > 1)
//
// CTA: 256 threads = 2 warpgroups; warpgroup wn (= warp / 4), warp wm = warp % 4 inside it.
//   S[64 rows x 64 keys] = Q K^T: warpgroup wn computes keys [32 wn, 32 wn + 32) with 36
//     wgmma.m64n32k16 (A = Q, B = K rows, both K-major);
//   O[64 x 512] += P V: warpgroup wn owns columns [256 wn, 256 wn + 256), 4 wgmma.m64n256k16 per
//     tile (A = P K-major, B = V = K[:, :512] read N-major, "transposed").
// The wgmma accumulator layout gives each thread exactly the S and O elements the portable
// kernel's warp (wm, wn) holds in its mma.sync fragments (wgmma.cuh), so the softmax, the row
// exchange and the stores are decode.cu's.
//
// Shared memory (bytes, from a 1024-aligned base): a 64 x 576 16-bit tile is 9 column blocks of
// 64 values (128-byte rows); block b holds rows 0..63 at 128-byte pitch, 8192 bytes, 16-byte chunk
// c of row r at chunk c ^ (r & 7) (the hardware 128-byte swizzle). Element (r, k):
//   (k / 64) * 8192 + r * 128 + (((k % 64) / 8) ^ (r & 7)) * 16 + (k % 8) * 2.
//   Q 0 (73728), K tiles 73728 and 147456 (double buffer), P 221184 (64 x 64, one block: the
//   portable kernel's P layout), row exchange 229376 (512); 229888 bytes + 1024 for alignment.

#include "common/wgmma.cuh"
#include "flashmla/decode.cu"

namespace mla {
namespace flashmla {
namespace sm90 {

constexpr int kBlockBytes = kBlockM * 128;               // one 64-row column block: 8192
constexpr int kTileBytes90 = (kD / 64) * kBlockBytes;    // 73728
constexpr int kSmemQ90 = 0;
constexpr int kSmemK90 = kTileBytes90;
constexpr int kSmemP90 = kSmemK90 + 2 * kTileBytes90;    // 221184
constexpr int kSmemRed90 = kSmemP90 + kBlockM * kBlockN * 2;
constexpr int kSmemUsed = kSmemRed90 + 2 * kBlockM * 4;  // 229888
constexpr int kSmemBytes90 = kSmemUsed + 1024;           // + alignment slack: 230912
static_assert(kSmemP90 % 1024 == 0 && kSmemK90 % 1024 == 0, "swizzle atoms 1024-aligned");
static_assert(kTileBytes90 == kTileBytes, "same tile size as the portable kernel");

// Byte offset of 16-byte chunk c (of 72) of row r in a 64 x 576 tile.
__device__ __forceinline__ unsigned tile_off(int r, int c) {
    return (unsigned)((c >> 3) * kBlockBytes + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// cp.async of one 64-key tile (keys [t0, t0 + 64), those >= t_end zero-filled) into dst.
// Thread tid copies row tid / 4, chunks tid % 4, tid % 4 + 4, ...
template <int kKV, int kPageClass>
__device__ __forceinline__ void load_kv_tile90(const DecodeParams &p, unsigned dst, int req,
                                               int g, int t0, int t_end) {
    const int r = threadIdx.x >> 2, t = t0 + r;
    const unsigned char *src = t < t_end ? key_row<kKV, kPageClass>(p, req, g, t, t0) : nullptr;
    const bool valid = src != nullptr;
    if (!valid) src = static_cast<const unsigned char *>(p.k);
    for (int c = threadIdx.x & 3; c < kRowChunks; c += 4)
        cp_async_16(dst + tile_off(r, c), src + c * 16, valid);
}

// cp.async of the Q rows [64 m, 64 m + 64) of kv head g (rows >= rows zero-filled).
__device__ __forceinline__ void load_q_tile90(const DecodeParams &p, unsigned dst, int req, int g,
                                              int m, int rows) {
    const int r = threadIdx.x >> 2, rr = m * kBlockM + r;
    const bool valid = rr < rows;
    const unsigned char *src = static_cast<const unsigned char *>(p.q);
    if (valid) {
        const int j = rr / p.heads_per_kv, h = g * p.heads_per_kv + rr % p.heads_per_kv;
        src += ((long long)req * p.q_stride_b + (long long)j * p.q_stride_s +
                (long long)h * p.q_stride_h) * 2;
    }
    for (int c = threadIdx.x & 3; c < kRowChunks; c += 4)
        cp_async_16(dst + tile_off(r, c), src + c * 16, valid);
}

// Makes this thread's landed cp.async / st.shared data visible to the wgmma of every warp.
__device__ __forceinline__ void publish_smem_to_wgmma() {
    fence_proxy_async_shared();
    __syncthreads();
}

// S[64 rows][32 keys of half wn] = Q K^T over 576 dims (36 k16 steps; waits for the result).
template <bool kF16>
__device__ __forceinline__ void qk_wgmma(float (&s)[4][4], unsigned q_tile, unsigned k_tile,
                                         int wn) {
#pragma unroll
    for (int n = 0; n < 4; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;  // defined inputs
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kD / 16; kk++) {
        const unsigned koff = (kk >> 2) * kBlockBytes + (kk & 3) * 32;
        const unsigned long long a = wgmma_desc_sw128(q_tile + koff, 16, 1024);
        const unsigned long long b = wgmma_desc_sw128(k_tile + koff + wn * 32 * 128, 16, 1024);
        wgmma_m64n32k16<kF16, 0>(s, a, b, kk > 0);
    }
    wgmma_commit_group();
    wgmma_wait_group<0>();
}

// O[64 rows][256 columns of half wn] += P V over the 64 keys (4 k16 steps; waits).
template <bool kF16>
__device__ __forceinline__ void pv_wgmma(float (&o)[32][4], unsigned p_tile, unsigned k_tile,
                                         int wn) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; kk++) {
        const unsigned long long a = wgmma_desc_sw128(p_tile + kk * 32, 16, 1024);
        const unsigned long long b =
            wgmma_desc_sw128(k_tile + kk * 16 * 128 + wn * 4 * kBlockBytes, kBlockBytes, 1024);
        wgmma_m64n256k16<kF16, 1>(o, a, b, 1);
    }
    wgmma_commit_group();
    wgmma_wait_group<0>();
}

// Attention of the CTA's rows over keys [t_begin, t_end) of request req (decode.cu's
// attend_chunk with the wgmma products). Q's cp.async may still be in flight.
template <int kKV, int kPageClass, bool kCausal>
__device__ void attend_chunk90(const DecodeParams &p, unsigned char *smem, int req, int g, int m,
                               int rows, int len, int t_begin, int t_end, bool direct, int slot) {
    using T = KvTraits<kKV>;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wm = warp & 3, wn = warp >> 2;
    const unsigned base = smem_addr(smem);
    float *red = reinterpret_cast<float *>(smem + kSmemRed90);
    RowState st;
    float o[32][4];
    int limit[2];
    const int t_stop = chunk_rows_init<kCausal>(p, st, o, limit, m, rows, len, t_end, wm, lane);
    const int n_tiles = t_stop > t_begin ? (t_stop - t_begin + kBlockN - 1) / kBlockN : 0;
    const unsigned k_base = base + kSmemK90;
    if (n_tiles > 0) load_kv_tile90<kKV, kPageClass>(p, k_base, req, g, t_begin, t_stop);
    cp_async_commit();
    for (int it = 0; it < n_tiles; it++) {
        const int t0 = t_begin + it * kBlockN;
        if (it + 1 < n_tiles) {
            load_kv_tile90<kKV, kPageClass>(p, k_base + ((it + 1) & 1) * kTileBytes90, req, g,
                                            t0 + kBlockN, t_stop);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        const unsigned k_tile = k_base + (it & 1) * kTileBytes90;
        publish_smem_to_wgmma();  // tile it (and Q) visible to every warpgroup
        float s[4][4];
        qk_wgmma<T::kF16>(s, base + kSmemQ90, k_tile, wn);
        scale_and_mask_limit(s, limit, p.scale_log2, t0, wn, lane);
        online_softmax_update<T::kF16>(s, o, st, red, smem + kSmemP90, wm, wn, lane);
        publish_smem_to_wgmma();  // P visible
        pv_wgmma<T::kF16>(o, base + kSmemP90, k_tile, wn);
        __syncthreads();  // tile it and P consumed before they are overwritten
    }
    cp_async_wait<0>();
    finish_row_sums(st, red, wm, wn, lane);
    store_rows<kKV>(p, o, st, req, g, m, rows, direct, slot, 1.f, wm, wn, lane);
}

}  // namespace sm90

// Same grid, block (256 threads) and schedule walk as decode_kernel; dynamic shared memory
// sm90::kSmemBytes90.
template <int kKV, int kPageClass, bool kCausal>
__global__ void __launch_bounds__(kThreads, 1) decode_sm90_kernel(const DecodeParams p) {
    static_assert(kKV == 0 || kKV == 1, "the sm_90a decode takes 16-bit KV");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char *smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
    const int part = blockIdx.x, g = blockIdx.y, m = blockIdx.z;
    const int *rec = p.sched + (long long)part * kRecordInts;
    const int begin_req = rec[kBeginReq], end_req = min(rec[kEndReq], p.b - 1);
    const int cu = rec[kChunkUnits];
    const int rows = p.s_q * p.heads_per_kv;
    for (int req = max(begin_req, 0); req <= end_req; req++) {
        const int len = max(p.seqlens[req], 0);
        const int lo = req == begin_req ? max(rec[kBeginUnit], 0) : 0;
        const int hi = req == end_req ? rec[kEndUnit] : units_of(len);
        const int split0 = p.num_splits[req], n_splits = p.num_splits[req + 1] - split0;
        int chunk = req == begin_req ? rec[kBeginChunk] : 0;
        sm90::load_q_tile90(p, smem_addr(smem) + sm90::kSmemQ90, req, g, m, rows);
        cp_async_commit();
        for (int u0 = lo; u0 < hi;) {
            const int u1 = cu > 0 ? min(hi, (u0 / cu + 1) * cu) : hi;
            if (cu > 0) chunk = u0 / cu;
            const int slot = split0 + chunk;
            const bool direct = n_splits == 1;
            if (direct || (slot >= 0 && slot < p.split_cap))
                sm90::attend_chunk90<kKV, kPageClass, kCausal>(p, smem, req, g, m, rows, len,
                                                               u0 * kBlockN,
                                                               min(u1 * kBlockN, len), direct,
                                                               slot);
            chunk++, u0 = u1;
        }
        cp_async_wait<0>();
        __syncthreads();  // Q consumed before the next request's Q lands
    }
}

}  // namespace flashmla
}  // namespace mla
