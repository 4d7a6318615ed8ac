// FlashMLA-compatible sparse decode (mla_flash_with_kvcache with indices) over the fp8 KV cache
// of 656-byte rows: the portable tensor-core path (sparse_attn.cuh), correct on sm_90a and
// sm_100a. No template parameters (one specialization, "flashmla_sparse_decode").
//
// Math (spec/flashmla.md §1.3, 1.4, 1.6, 1.9). Request i, query token j < s_q, head h < h_q,
// list entries k < n, n = topk_length ? clamp(topk_length[i], 0, topk) : topk:
//   idx   = indices[i, j, k]; valid iff 0 <= idx < num_blocks * page (-1 and any other
//           out-of-range value is invalid and never read); row = k_cache[idx / page, idx % page]
//   K[e]  = e4m3(row[e]) * scale[e / 128] for e < 512 (rounded to bf16), K[512 + r] = rope[r]
//   s_k   = softmax_scale * (q[i, j, h, :] . K)              over the valid entries
//   lse   = ln(sum_k exp(s_k)),  out[i, j, h, :] = sum_k exp(s_k - lse) K[:512]
//   sink  (attn_sink given): out *= 1 / (1 + exp(attn_sink[h] - lse)); lse unchanged
//   no valid entry: out = 0, lse = +inf.
// Duplicate entries count twice. The scale is applied in fp32 before rounding to bf16 (FlashMLA
// rounds the scale to bf16 first; the two agree for power-of-two scales).
//
// Buffers (element strides unless said; last dimensions contiguous):
//   q           [b, s_q, h_q, 576] bfloat16, 16-byte aligned rows
//   k_cache     [num_blocks, page, 1, 656] bytes, row r of block blk at blk * k_stride_block_bytes
//               + 656 r: [0, 512) e4m3, [512, 528) 4 float32 scales, [528, 656) 64 bfloat16 RoPE
//   indices     [b, s_q, topk] int32           topk_length [b] int32 (optional)
//   attn_sink   [h_q] float32 (optional)
//   out         [b, s_q, h_q, 512] bfloat16    softmax_lse [b, h_q, s_q] float32 contiguous
//
// Grid (b * s_q, ceil(h_q / 64)): CTA (i * s_q + j, m) takes heads [64 m, 64 m + 64) of token
// (i, j) over all its entries, 64 per tile (no split); each thread reads the index of its row one
// tile ahead of the row's cp.async, and warps whose 16-row slab is all padding (h_q < 64) skip
// the MMAs. Shared memory (bytes): Q tile 64 x 576 x 2,
// one bf16 K tile 64 x 576 x 2, one staging tile of 64 raw 656-byte rows (cp.async target of the
// next tile while the current one is used), P, row exchange, two flag arrays.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "flashmla/sparse_attn.cuh"
#include "flashmla/sparse_params.cuh"

namespace mla {
namespace flashmla {
namespace sparse {

constexpr int kD = 576;
constexpr int kKvRowBytes = 656;                    // 512 e4m3 + 4 float32 + 64 bf16
constexpr int kKvRowChunks = kKvRowBytes / 16;      // 41
constexpr int kScaleOff = 512, kRopeOff = 528;
constexpr int kDecSmemQ = 0;
constexpr int kDecSmemK = kDecSmemQ + Tile<kD>::kBytes;
constexpr int kDecSmemStage = kDecSmemK + Tile<kD>::kBytes;
constexpr int kDecSmemP = kDecSmemStage + kBlockN * kKvRowBytes;
constexpr int kDecSmemRed = kDecSmemP + kPBytes;
constexpr int kDecSmemFlags = kDecSmemRed + kRedBytes;
constexpr int kDecSmemBytes = kDecSmemFlags + 2 * kFlagBytes;   // 198656
static_assert(kKvRowBytes % 16 == 0, "656-byte rows are whole 16-byte chunks");

// Entries of token (i, j) that are looked at: topk, or topk_length[i] clamped to [0, topk].
__device__ __forceinline__ int entry_count(const SparseDecodeParams &p, int i) {
    if (p.topk_length == nullptr) return p.topk;
    return min(max(p.topk_length[i], 0), p.topk);
}

// Loads Q rows (heads 64 m + r) of token (i, j); rows >= h_q are zero-filled.
__device__ __forceinline__ void load_q_tile(const SparseDecodeParams &p, unsigned dst, int i,
                                            int j, int m) {
    const int r = threadIdx.x >> 2, h = m * kBlockM + r;
    const unsigned char *src = nullptr;
    if (h < p.h_q)
        src = static_cast<const unsigned char *>(p.q) +
              ((long long)i * p.q_stride_b + (long long)j * p.q_stride_s +
               (long long)h * p.q_stride_h) * 2;
    load_row_async<kD>(dst, r, threadIdx.x & 3, src, p.q);
}

// Index of entry k of a token's list, -1 (invalid) for k >= n. Read one tile ahead of its use, so
// that the dependent DRAM read is off the path from one tile to the next.
__device__ __forceinline__ int fetch_index(const int *list, int k, int n) {
    return k < n ? list[k] : -1;
}

// Address of the cache row that index idx names, or null when idx is invalid.
__device__ __forceinline__ const unsigned char *entry_row(const SparseDecodeParams &p, int idx) {
    if (idx < 0 || idx >= p.num_slots) return nullptr;
    const long long blk = idx / p.page_size, row = idx - blk * p.page_size;
    return p.k + blk * p.k_stride_block_bytes + row * kKvRowBytes;
}

// Issues the cp.async of the 64 rows of a tile into the staging tile (row-major raw rows, invalid
// rows zero-filled) and writes their validity flags; idx is the index of this thread's row
// (threadIdx.x / 4), from fetch_index.
__device__ __forceinline__ void load_kv_tile(const SparseDecodeParams &p, unsigned stage,
                                             int *flags, int idx) {
    const int r = threadIdx.x >> 2, part = threadIdx.x & 3;
    const unsigned char *src = entry_row(p, idx);
    if (part == 0) flags[r] = src != nullptr;
    const bool valid = src != nullptr;
    if (!valid) src = p.k;
    for (int c = part; c < kKvRowChunks; c += 4)
        cp_async_16(stage + r * kKvRowBytes + c * 16, src + c * 16, valid);
}

// Turns the staged raw rows into the swizzled bf16 K tile: NoPE chunks c (16 e4m3 values, scale
// c / 8) become bf16 chunks 2c, 2c + 1; the 8 RoPE chunks are copied to chunks 64..71.
__device__ __forceinline__ void dequant_kv_tile(const unsigned char *stage, unsigned char *tile) {
    constexpr int kRow = Tile<kD>::kRowBytes;
    const int r = threadIdx.x >> 2, part = threadIdx.x & 3;
    const unsigned char *row = stage + r * kKvRowBytes;
    const float *scales = reinterpret_cast<const float *>(row + kScaleOff);
#pragma unroll
    for (int c = part; c < kScaleOff / 16; c += 4) {
        uint4 lo, hi;
        dequant16(*reinterpret_cast<const uint4 *>(row + c * 16), scales[c / 8], lo, hi);
        *reinterpret_cast<uint4 *>(tile + swz(r, 2 * c, kRow)) = lo;
        *reinterpret_cast<uint4 *>(tile + swz(r, 2 * c + 1, kRow)) = hi;
    }
#pragma unroll
    for (int c = part; c < (kKvRowBytes - kRopeOff) / 16; c += 4)
        *reinterpret_cast<uint4 *>(tile + swz(r, kScaleOff / 8 + c, kRow)) =
            *reinterpret_cast<const uint4 *>(row + kRopeOff + c * 16);
}

// Writes out and softmax_lse of the CTA's rows (heads < h_q).
__device__ __forceinline__ void store_rows(const SparseDecodeParams &p, const float (&o)[32][4],
                                           const RowState &st, int i, int j, int m) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wm = warp & 3, wn = warp >> 2;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int head = m * kBlockM + wm * 16 + (lane >> 2) + 8 * h;
        if (head >= p.h_q) continue;
        const float l = st.l[h];
        const float lse = l > 0.f ? row_lse_ln(st.m[h], l) : inf_f32();
        const float f = l > 0.f ? sink_factor(p.attn_sink, head, lse) / l : 0.f;
        void *row = static_cast<unsigned char *>(p.out) +
                    ((long long)i * p.o_stride_b + (long long)j * p.o_stride_s +
                     (long long)head * p.o_stride_h) * 2;
        store_out_row<false>(row, o, h, f, wn, lane);
        if (wn == 0 && (lane & 3) == 0) p.lse[((long long)i * p.h_q + head) * p.s_q + j] = lse;
    }
}

__global__ void __launch_bounds__(kThreads, 1) sparse_decode_kernel(const SparseDecodeParams p) {
    extern __shared__ __align__(128) unsigned char smem[];
    const int i = blockIdx.x / p.s_q, j = blockIdx.x % p.s_q, m = blockIdx.y;
    const unsigned base = smem_addr(smem);
    int *flags = reinterpret_cast<int *>(smem + kDecSmemFlags);
    const int *list = p.indices + (long long)i * p.i_stride_b + (long long)j * p.i_stride_s;
    const int n = entry_count(p, i), n_tiles = (n + kBlockN - 1) / kBlockN;
    const int r = threadIdx.x >> 2, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const bool slab_used = m * kBlockM + (warp & 3) * 16 < p.h_q;  // else all padding rows
    float o[32][4];
    RowState st;
    row_state_init(st, o);
    load_q_tile(p, base + kDecSmemQ, i, j, m);
    int idx = fetch_index(list, r, n);
    if (n_tiles > 0) load_kv_tile(p, base + kDecSmemStage, flags, idx);
    cp_async_commit();
    idx = fetch_index(list, kBlockN + r, n);  // this thread's row of tile 1
    for (int it = 0; it < n_tiles; it++) {
        cp_async_wait<0>();
        __syncthreads();  // the staged rows (and Q) visible to every thread
        dequant_kv_tile(smem + kDecSmemStage, smem + kDecSmemK);
        __syncthreads();  // the K tile visible, the staging tile free
        if (it + 1 < n_tiles) {
            load_kv_tile(p, base + kDecSmemStage, flags + ((it + 1) & 1) * kBlockN, idx);
            idx = fetch_index(list, (it + 2) * kBlockN + r, n);
        }
        cp_async_commit();
        attend_tile<kD>(o, st, smem, kDecSmemQ, kDecSmemK, kDecSmemP, kDecSmemRed,
                        flags + (it & 1) * kBlockN, p.scale_log2, slab_used);
    }
    cp_async_wait<0>();
    finish_row_sums(st, reinterpret_cast<float *>(smem + kDecSmemRed), warp & 3, warp >> 2, lane);
    store_rows(p, o, st, i, j, m);
}

}  // namespace sparse
}  // namespace flashmla
}  // namespace mla
