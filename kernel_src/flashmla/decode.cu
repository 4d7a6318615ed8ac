// FlashMLA-compatible dense paged decode (mla_flash_with_kvcache without indices): the portable
// tensor-core path (mma.sync m16n8k16, ldmatrix, cp.async), correct on sm_90a and sm_100a.
//
// Template parameters (the spec "flashmla_decode" fixes them):
//   kKV        0: bf16 q / k_cache / out; 1: fp16; 2: fp8 e4m3 q / k_cache (converted exactly to
//              fp16 in shared memory), bf16 out, logits and out scaled by the descales
//   kPageClass 0: any page size (one block-table lookup per key); 1: page_size % 64 == 0 (a
//              64-key tile lies in one page: one lookup per tile)
//   kCausal    bottom-right causal mask (s_q > 1)
//
// Math (spec/flashmla.md §1.2, 1.5-1.7). Request i, len = max(cache_seqlens[i], 0), kv head g,
// query token j < s_q, q head h = g * (h_q / h_kv) + hg:
//   s_t   = softmax_scale * descale_q * descale_k * (q[i, j, h, :] . K_t)   t < len_j,
//   len_j = causal ? min(len, len - s_q + j + 1) : len,  K_t = k_cache[page(t), t % page, g, :]
//   lse   = ln(sum_t exp(s_t)),  out[i, j, h, :] = descale_k * sum_t exp(s_t - lse) V_t,
//   V_t   = K_t[:512], page(t) = block_table[i, t / page_size];
//   no key (len_j <= 0): out = 0, lse = +inf.
// The softmax runs in base 2 (scale_log2 = softmax_scale * log2 e) and lse is returned in
// natural log. The attention probabilities enter P V as 16-bit values (as in FlashMLA).
//
// Launch: a programmatic dependent of the stream's previous kernel (runtime/flashmla_decode.c):
// a CTA waits for it (pdl::wait) before reading anything, and lets the combine launch at once
// (the combine waits for this grid before reading its results).
//
// Work split: grid (P, h_kv, ceil(s_q * h_q / h_kv / 64)); CTA (part, g, m) takes the 64 query
// rows [64 m, 64 m + 64) of kv head g (row r = j * (h_q / h_kv) + hg) for every request chunk of
// sm-part `part` of the schedule (params.cuh). A chunk of a request of one chunk writes out and
// softmax_lse; otherwise it writes its normalized partial to split slot num_splits[i] + chunk:
//   o_accum   [split_cap, s_q * h_q, 512] float32, row j * h_q + h (scaled by descale_k)
//   lse_accum [split_cap, s_q * h_q] float32, natural log, -inf for a row with no key in the chunk
// and combine.cu merges the slots. Slots >= split_cap are never written.
//
// Buffers (element strides, last dimension contiguous, 16-byte aligned rows):
//   q         [b, s_q, h_q, 576]          out        [b, s_q, h_q, 512]
//   k_cache   [num_blocks, page, h_kv, 576]  block_table [b, max_blocks] int32, row stride
//   softmax_lse [b, h_q, s_q] float32 contiguous
// Keys at t >= len are never read; a block-table entry outside [0, num_blocks) or a page index
// >= max_blocks reads zeros instead of memory (the result is then meaningless, never a fault).
//
// CTA: 8 warps. Warp w owns S columns [32 (w / 4), +32) and O columns [256 (w / 4), +256) of the
// rows [16 (w % 4), +16). Row maxima and sums are exchanged between the two warps of a row slab
// through shared memory. Shared memory (bytes): Q tile 64 x 576 x 2 (73728), two K tiles (16-bit
// KV: double buffer; fp8: one 16-bit tile and two fp8 staging tiles of 36864), P 64 x 64 x 2,
// row exchange 2 x 64 x 4. 16-bit tiles are XOR-swizzled in 16-byte chunks (chunk ^ (row & 7)).

#include "common/pdl.cuh"
#include "flashmla/attn_tile.cuh"
#include "flashmla/params.cuh"

namespace mla {
namespace flashmla {

constexpr int kD = 576;
constexpr int kRowBytes = kD * 2;                       // a 16-bit tile row
constexpr int kRowChunks = kRowBytes / 16;              // 72
constexpr int kTileBytes = kBlockN * kRowBytes;         // 73728
constexpr int kFp8TileBytes = kBlockN * kD;             // 36864
constexpr int kSmemQ = 0;
constexpr int kSmemK = kSmemQ + kTileBytes;             // two 16-bit tiles, or one + fp8 stages
constexpr int kSmemStage = kSmemK + kTileBytes;         // fp8 staging tiles
constexpr int kSmemP = kSmemK + 2 * kTileBytes;
constexpr int kSmemRed = kSmemP + kBlockM * kBlockN * 2;
constexpr int kSmemBytes = kSmemRed + 2 * kBlockM * 4;  // 229888
static_assert(kSmemStage + 2 * kFp8TileBytes <= kSmemP, "fp8 stages fit the second K tile");
static_assert(kUnitKeys == kBlockN, "a schedule unit is one KV tile");

// kKV -> element types and MMA kind.
template <int kKV> struct KvTraits;
template <> struct KvTraits<0> { static constexpr bool kF16 = false, kFp8 = false, kOutF16 = false; };
template <> struct KvTraits<1> { static constexpr bool kF16 = true, kFp8 = false, kOutF16 = true; };
template <> struct KvTraits<2> { static constexpr bool kF16 = true, kFp8 = true, kOutF16 = false; };

// ---- loads ------------------------------------------------------------------------------------

// Page of key t (t / page_size; a shift when the page size is a power of two).
__device__ __forceinline__ int page_of(const DecodeParams &p, int t) {
    return p.page_shift >= 0 ? t >> p.page_shift : t / p.page_size;
}

// Address of row `row` of cache block blk, kv head g (elements of elem_bytes), or null when blk
// is out of range.
__device__ __forceinline__ const unsigned char *cache_row(const DecodeParams &p, int blk, int row,
                                                         int g, int elem_bytes) {
    if (blk < 0 || blk >= p.num_blocks) return nullptr;
    const long long e = (long long)blk * p.k_stride_block + (long long)row * p.k_stride_tok +
                        (long long)g * p.k_stride_head;
    return static_cast<const unsigned char *>(p.k) + e * elem_bytes;
}

// Address of key t (t < len) of kv head g of request req, or null when its page is out of range.
template <int kKV, int kPageClass>
__device__ __forceinline__ const unsigned char *key_row(const DecodeParams &p, int req, int g,
                                                        int t, int tile_t0) {
    constexpr int kElemBytes = KvTraits<kKV>::kFp8 ? 1 : 2;
    int page, row;
    if constexpr (kPageClass == 1) {
        page = page_of(p, tile_t0);
        row = tile_t0 - page * p.page_size + (t - tile_t0);
    } else {
        page = page_of(p, t);
        row = t - page * p.page_size;
    }
    if (page >= p.max_blocks) return nullptr;
    return cache_row(p, p.block_table[(long long)req * p.bt_stride + page], row, g, kElemBytes);
}

// Issues the cp.async of one 64-key tile (keys [t0, t0 + 64), those >= t_end zero-filled):
// 16-bit KV into the swizzled tile at dst, fp8 KV into the row-major staging tile at dst.
// Thread tid copies row tid / 4, chunks tid % 4, tid % 4 + 4, ...
template <int kKV, int kPageClass>
__device__ __forceinline__ void load_kv_tile(const DecodeParams &p, unsigned dst, int req, int g,
                                             int t0, int t_end) {
    constexpr bool kFp8 = KvTraits<kKV>::kFp8;
    constexpr int kChunks = kFp8 ? kD / 16 : kRowChunks;
    const int r = threadIdx.x >> 2, t = t0 + r;
    const unsigned char *src = t < t_end ? key_row<kKV, kPageClass>(p, req, g, t, t0) : nullptr;
    const bool valid = src != nullptr;
    if (!valid) src = static_cast<const unsigned char *>(p.k);
    for (int c = threadIdx.x & 3; c < kChunks; c += 4) {
        const unsigned off = kFp8 ? (unsigned)(r * kD + c * 16) : swz(r, c, kRowBytes);
        cp_async_16(dst + off, src + c * 16, valid);
    }
}

// Address of Q row r of CTA row block m (row 64 m + r of kv head g: query token j, head h;
// elements of elem_bytes), or null past the rows.
__device__ __forceinline__ const unsigned char *q_row(const DecodeParams &p, int req, int g, int m,
                                                      int rows, int r, int elem_bytes) {
    const int rr = m * kBlockM + r;
    if (rr >= rows) return nullptr;
    const int j = rr / p.heads_per_kv, h = g * p.heads_per_kv + rr % p.heads_per_kv;
    return static_cast<const unsigned char *>(p.q) +
           ((long long)req * p.q_stride_b + (long long)j * p.q_stride_s +
            (long long)h * p.q_stride_h) * elem_bytes;
}

// Issues the cp.async of the 64 query rows of CTA row block m (rows >= rows zero-filled), into
// the swizzled Q tile (16-bit) or the first fp8 staging tile.
template <int kKV>
__device__ __forceinline__ void load_q_tile(const DecodeParams &p, unsigned dst, int req, int g,
                                            int m, int rows) {
    constexpr bool kFp8 = KvTraits<kKV>::kFp8;
    constexpr int kChunks = kFp8 ? kD / 16 : kRowChunks;
    const int r = threadIdx.x >> 2;
    const unsigned char *src = q_row(p, req, g, m, rows, r, kFp8 ? 1 : 2);
    const bool valid = src != nullptr;
    if (!valid) src = static_cast<const unsigned char *>(p.q);
    for (int c = threadIdx.x & 3; c < kChunks; c += 4) {
        const unsigned off = kFp8 ? (unsigned)(r * kD + c * 16) : swz(r, c, kRowBytes);
        cp_async_16(dst + off, src + c * 16, valid);
    }
}

// fp8: converts the staging chunks this thread copied (same pattern as the loads, so no barrier
// is needed between its cp.async wait and this) into the swizzled fp16 tile.
__device__ __forceinline__ void convert_fp8_tile(const unsigned char *stage, unsigned char *tile) {
    const int r = threadIdx.x >> 2;
    for (int c = threadIdx.x & 3; c < kD / 16; c += 4) {
        const uint4 v = *reinterpret_cast<const uint4 *>(stage + r * kD + c * 16);
        const uint2 a = e4m3x4_to_f16x4(v.x), b = e4m3x4_to_f16x4(v.y);
        const uint2 d = e4m3x4_to_f16x4(v.z), e = e4m3x4_to_f16x4(v.w);
        *reinterpret_cast<uint4 *>(tile + swz(r, 2 * c, kRowBytes)) = make_uint4(a.x, a.y, b.x, b.y);
        *reinterpret_cast<uint4 *>(tile + swz(r, 2 * c + 1, kRowBytes)) =
            make_uint4(d.x, d.y, e.x, e.y);
    }
}

// ---- online softmax ---------------------------------------------------------------------------

// The end of the keys [.., t_end) of request (len) that some row of CTA row block m sees.
template <bool kCausal>
__device__ __forceinline__ int chunk_key_stop(const DecodeParams &p, int m, int rows, int len,
                                              int t_end) {
    if constexpr (!kCausal) return t_end;
    const int j_last = (min(rows, (m + 1) * kBlockM) - 1) / p.heads_per_kv;
    return min(t_end, len - p.s_q + j_last + 1);
}

// Empties the thread's two rows and O, sets the rows' key limits (keys t < limit[h] are visible;
// causal: each row's own) and returns the end of the keys some row of the CTA sees.
template <bool kCausal>
__device__ __forceinline__ int chunk_rows_init(const DecodeParams &p, RowState &st,
                                               float (&o)[32][4], int (&limit)[2], int m,
                                               int rows, int len, int t_end, int wm, int lane) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        st.m[h] = -inf_f32(), st.l[h] = 0.f;
        const int rr = m * kBlockM + wm * 16 + (lane >> 2) + 8 * h;
        const int j = (rr < rows ? rr : rows - 1) / p.heads_per_kv;
        limit[h] = kCausal ? min(t_end, len - p.s_q + j + 1) : t_end;
    }
#pragma unroll
    for (int jt = 0; jt < 32; jt++) o[jt][0] = o[jt][1] = o[jt][2] = o[jt][3] = 0.f;
    return chunk_key_stop<kCausal>(p, m, rows, len, t_end);
}

// Scales S to base-2 logits and masks the keys t0 + col >= limit[row] to -inf.
__device__ __forceinline__ void scale_and_mask_limit(float (&s)[4][4], const int (&limit)[2],
                                                     float scale, int t0, int wn, int lane) {
    scale_and_mask(s, scale, wn, lane, [&](int c, int h) { return t0 + c < limit[h]; });
}

// ---- outputs ----------------------------------------------------------------------------------

// Writes the chunk's rows: out / softmax_lse when the request has one chunk, else split slot.
template <int kKV>
__device__ __forceinline__ void store_rows(const DecodeParams &p, const float (&o)[32][4],
                                           const RowState &st, int req, int g, int m, int rows,
                                           bool direct, int slot, float v_scale, int wm, int wn,
                                           int lane) {
    constexpr bool kOutF16 = KvTraits<kKV>::kOutF16;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int rr = m * kBlockM + wm * 16 + (lane >> 2) + 8 * h;
        if (rr >= rows) continue;
        const int j = rr / p.heads_per_kv, head = g * p.heads_per_kv + rr % p.heads_per_kv;
        const float l = st.l[h];
        const float inv = l > 0.f ? v_scale / l : 0.f;
        const float lse = l > 0.f ? row_lse_ln(st.m[h], l) : (direct ? inf_f32() : -inf_f32());
        const int col0 = wn * 256 + (lane & 3) * 2;
        if (direct) {
            unsigned char *dst = static_cast<unsigned char *>(p.out) +
                                 ((long long)req * p.o_stride_b + (long long)j * p.o_stride_s +
                                  (long long)head * p.o_stride_h + col0) * 2;
#pragma unroll
            for (int jt = 0; jt < 32; jt++)
                *reinterpret_cast<unsigned *>(dst + jt * 16) =
                    pack2<kOutF16>(o[jt][2 * h] * inv, o[jt][2 * h + 1] * inv);
            if (wn == 0 && (lane & 3) == 0)
                p.lse[((long long)req * p.h_q + head) * p.s_q + j] = lse;
        } else {
            const long long row = (long long)slot * p.s_q * p.h_q + (long long)j * p.h_q + head;
            float *dst = p.o_accum + row * kDV + col0;
            const unsigned long long keep = l2_policy_evict_last();  // the combine reads it next
#pragma unroll
            for (int jt = 0; jt < 32; jt++)
                st_global_v2_hint(dst + jt * 8, o[jt][2 * h] * inv, o[jt][2 * h + 1] * inv, keep);
            if (wn == 0 && (lane & 3) == 0) p.lse_accum[row] = lse;
        }
    }
}

// ---- the chunk loop ---------------------------------------------------------------------------

// Attention of the CTA's rows over keys [t_begin, t_end) of request req: pipelined tiles, online
// softmax, then the rows' outputs. Q is in shared memory (its cp.async may still be in flight).
template <int kKV, int kPageClass, bool kCausal>
__device__ void attend_chunk(const DecodeParams &p, unsigned char *smem, int req, int g, int m,
                             int rows, int len, int t_begin, int t_end, bool direct, int slot) {
    using T = KvTraits<kKV>;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wm = warp & 3, wn = warp >> 2;
    const unsigned base = smem_addr(smem);
    float *red = reinterpret_cast<float *>(smem + kSmemRed);
    const float scale = T::kFp8 ? p.scale_log2 * *p.descale_q * *p.descale_k : p.scale_log2;
    RowState st;
    float o[32][4];
    int limit[2];
    // keys no row of the CTA sees are not loaded
    const int t_stop = chunk_rows_init<kCausal>(p, st, o, limit, m, rows, len, t_end, wm, lane);
    const int n_tiles = t_stop > t_begin ? (t_stop - t_begin + kBlockN - 1) / kBlockN : 0;
    const unsigned load_base = T::kFp8 ? base + kSmemStage : base + kSmemK;
    const int load_bytes = T::kFp8 ? kFp8TileBytes : kTileBytes;
    if (n_tiles > 0) load_kv_tile<kKV, kPageClass>(p, load_base, req, g, t_begin, t_stop);
    cp_async_commit();
    for (int it = 0; it < n_tiles; it++) {
        const int t0 = t_begin + it * kBlockN;
        if (it + 1 < n_tiles) {
            load_kv_tile<kKV, kPageClass>(p, load_base + ((it + 1) & 1) * load_bytes, req, g,
                                          t0 + kBlockN, t_stop);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        unsigned k_tile = base + kSmemK;
        if constexpr (T::kFp8)
            convert_fp8_tile(smem + kSmemStage + (it & 1) * kFp8TileBytes, smem + kSmemK);
        else
            k_tile += (it & 1) * kTileBytes;
        __syncthreads();  // tile it (and Q) visible to every warp
        float s[4][4];
        qk_mma<kD, T::kF16>(s, base + kSmemQ, k_tile, wm, wn, lane);
        scale_and_mask_limit(s, limit, scale, t0, wn, lane);
        online_softmax_update<T::kF16>(s, o, st, red, smem + kSmemP, wm, wn, lane);
        __syncthreads();  // P visible
        pv_mma<kD, T::kF16>(o, base + kSmemP, k_tile, wm, wn, lane);
        __syncthreads();  // tile it and P consumed before they are overwritten
    }
    cp_async_wait<0>();
    finish_row_sums(st, red, wm, wn, lane);
    store_rows<kKV>(p, o, st, req, g, m, rows, direct, slot, T::kFp8 ? *p.descale_k : 1.f, wm,
                    wn, lane);
}

// Loads Q of (req, g, m); fp8 converts it (waits for it first).
template <int kKV>
__device__ __forceinline__ void stage_q(const DecodeParams &p, unsigned char *smem, int req, int g,
                                        int m, int rows) {
    const unsigned base = smem_addr(smem);
    if constexpr (KvTraits<kKV>::kFp8) {
        load_q_tile<kKV>(p, base + kSmemStage, req, g, m, rows);
        cp_async_commit();
        cp_async_wait<0>();
        convert_fp8_tile(smem + kSmemStage, smem + kSmemQ);
        __syncthreads();  // the staging tile is free again before K tiles land there
    } else {
        load_q_tile<kKV>(p, base + kSmemQ, req, g, m, rows);
        cp_async_commit();
    }
}

template <int kKV, int kPageClass, bool kCausal>
__global__ void __launch_bounds__(kThreads, 1) decode_kernel(const DecodeParams p) {
    extern __shared__ __align__(128) unsigned char smem[];
    pdl::wait();  // the previous kernel (metadata, the caller's producers of q / k_cache) is done
    pdl::launch_dependents();
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
        stage_q<kKV>(p, smem, req, g, m, rows);
        for (int u0 = lo; u0 < hi;) {
            const int u1 = cu > 0 ? min(hi, (u0 / cu + 1) * cu) : hi;
            if (cu > 0) chunk = u0 / cu;
            const int slot = split0 + chunk;
            const bool direct = n_splits == 1;
            if (direct || (slot >= 0 && slot < p.split_cap))
                attend_chunk<kKV, kPageClass, kCausal>(p, smem, req, g, m, rows, len,
                                                       u0 * kBlockN, min(u1 * kBlockN, len),
                                                       direct, slot);
            chunk++, u0 = u1;
        }
        cp_async_wait<0>();
        __syncthreads();  // Q consumed before the next request's Q lands
    }
}

}  // namespace flashmla
}  // namespace mla
