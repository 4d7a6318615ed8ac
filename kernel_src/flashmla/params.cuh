// What the FlashMLA-compatible kernels share: the split schedule's record layout and units, and
// the kernel parameter blocks. The parameter blocks are mirrored field for field by the C structs
// of runtime/flashmla_kinds.h (same order, same sizes; both sides assert the size).
//
// The schedule (written by metadata.cu, read by decode.cu and combine.cu)
// -----------------------------------------------------------------------
// A request of len = max(cache_seqlens[i], 0) keys has units(i) = max(ceil(len / 64), 1) units of
// 64 keys (a zero-length request keeps one empty unit, so that some CTA writes its empty rows).
// Its units are cut into chunks; chunk c of request i owns split slot num_splits[i] + c of the
// partials, and a request of one chunk writes out / softmax_lse directly.
//   tile_scheduler_metadata [P, 8] int32, one record per sm-part (CTA column of the decode grid):
//     [0] begin_req   first request of the part
//     [1] begin_unit  its first unit
//     [2] end_req     last request of the part (inclusive); -1: the part has no work
//     [3] end_unit    one past the last unit of end_req
//     [4] begin_chunk chunk index of (begin_req, begin_unit)
//     [5] chunk_units 0: the part's range within a request is one chunk (splits follow the part
//                     boundaries); c > 0: chunks are units [k c, (k + 1) c) of each request
//                     (batch-invariant mode)
//     [6] begin_pos   chunk_units 0: the part's first position on the metadata's cost line
//                     (metadata.cu; the decode does not read it); else 0
//     [7] 0
//   num_splits [b + 1] int32: exclusive prefix sum of the chunk counts, num_splits[b] the total.
#pragma once

#include "flashmla/ptx.cuh"

namespace mla {
namespace flashmla {

constexpr int kUnitKeys = 64;       // keys per schedule unit (= the decode's KV tile)
constexpr int kSplitOverhead = 5;   // a chunk costs this many units extra (FlashMLA's estimate)
constexpr int kRecordInts = 8;      // int32 per schedule record

enum SchedField {
    kBeginReq = 0, kBeginUnit = 1, kEndReq = 2, kEndUnit = 3, kBeginChunk = 4, kChunkUnits = 5,
    kBeginPos = 6,
};

__device__ __forceinline__ int units_of(int seqlen) {
    const int len = seqlen > 0 ? seqlen : 0;
    const int u = (len + kUnitKeys - 1) / kUnitKeys;
    return u > 0 ? u : 1;
}

// mla_get_metadata.
struct MetadataParams {
    const int *seqlens;   // [b]
    int *sched;           // [num_parts, 8]
    int *num_splits;      // [b + 1]
    int b, num_parts;
    int chunk_units;      // 0: splits follow the parts; > 0: batch-invariant chunks
    int max_splits;       // batch-invariant: more chunks than this fall back to chunk_units 0
};
static_assert(sizeof(MetadataParams) == 40, "MetadataParams must match the C mirror");

// The dense decode (decode.cu). Strides in elements; pointers of the k_cache dtype.
struct DecodeParams {
    const void *q;
    long long q_stride_b, q_stride_s, q_stride_h;
    const void *k;
    long long k_stride_block, k_stride_tok, k_stride_head;
    const int *block_table;
    long long bt_stride;
    const int *seqlens;
    const int *sched;
    const int *num_splits;
    const float *descale_q;   // fp8: [1]; else null
    const float *descale_k;
    void *out;
    long long o_stride_b, o_stride_s, o_stride_h;
    float *lse;               // [b, h_q, s_q] contiguous
    float *o_accum;           // [split_cap, s_q * h_q, 512]
    float *lse_accum;         // [split_cap, s_q * h_q]
    int b, s_q, h_q, h_kv;
    int heads_per_kv;         // h_q / h_kv
    int page_size, max_blocks, num_blocks;
    int num_parts, split_cap;
    float scale_log2;         // softmax_scale * log2(e) (descales not included)
    int page_shift;           // log2(page_size) when a power of two, else -1
};
static_assert(sizeof(DecodeParams) == 224, "DecodeParams must match the C mirror");

// The split combine (combine.cu).
struct CombineParams {
    const float *o_accum;
    const float *lse_accum;
    const int *num_splits;
    void *out;
    long long o_stride_b, o_stride_s, o_stride_h;
    float *lse;
    int b, s_q, h_q, split_cap;
    const int *seqlens;       // [b]: read by the kEmptyNegInf combine only
};
static_assert(sizeof(CombineParams) == 88, "CombineParams must match the C mirror");

}  // namespace flashmla
}  // namespace mla
