// FlashMLA-compatible split schedule (mla_get_metadata), computed on the device from
// cache_seqlens so that it can be captured in a CUDA graph.
//
// Template parameter: kThreads, threads of the single block (grid = 1).
//
// Math (record layout and units: params.cuh). Requests are laid on a cost line in batch order;
// request i occupies C_i .. C_{i+1} with
//   normal mode            cost_i = 5 + units_i            (its overhead first, then its units)
//   batch-invariant mode   cost_i = n_i * 5 + units_i,  n_i = ceil(units_i / chunk_units)
//                          (chunk k: 5 overhead positions, then units [k c, min((k+1) c, units_i)))
// The line of length T = C_b is cut into P parts of pl = ceil(T / P) positions; part p owns
// positions [p pl, (p + 1) pl).
//   normal: part p gets the units whose position falls in its range, so a request is split where
//           a part boundary crosses its units: n_i = part(last unit) - part(first unit) + 1 and
//           sum n_i <= b + P - 1.
//   batch-invariant: part p gets the whole chunks whose start position falls in its range; chunk
//           boundaries depend on the request's own length only, so its result does not depend on
//           its batch mates. If sum n_i > max_splits the call falls back to the normal mode.
// Every unit of every request belongs to exactly one part; within a request the parts come in
// order, so chunk indices are consecutive.
//
// Buffers: seqlens [b] int32; sched [P, 8] int32 (written); num_splits [b + 1] int32 (written;
// it holds C_i as scratch while the parts are cut). Positions are computed in 64 bits; C_i is
// stored as int32 (sum over the batch of units + 5 per chunk must stay below 2^31).

#include "flashmla/params.cuh"

namespace mla {
namespace flashmla {

__device__ __forceinline__ long long ceil_div_ll(long long a, long long b) { return (a + b - 1) / b; }

// Cost of a request of u units: its overhead (one per chunk) and its units.
__device__ __forceinline__ long long request_cost(int u, int chunk_units) {
    const long long chunks = chunk_units > 0 ? ceil_div_ll(u, chunk_units) : 1;
    return chunks * kSplitOverhead + u;
}

// Exclusive prefix sum over the block; *total gets the sum. Every thread must call it.
template <int kThreads>
__device__ long long block_exclusive_scan(long long v, long long *total) {
    __shared__ long long warp_sums[kThreads / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    long long incl = v;
    for (int d = 1; d < 32; d <<= 1) {
        const long long up = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += up;
    }
    if (lane == 31) warp_sums[warp] = incl;
    __syncthreads();
    long long before = 0, all = 0;
    for (int w = 0; w < kThreads / 32; w++) {
        if (w < warp) before += warp_sums[w];
        all += warp_sums[w];
    }
    __syncthreads();  // warp_sums may be reused by the next scan
    *total = all;
    return before + incl - v;
}

// Largest i in [0, b) with C[i] <= pos (C nondecreasing, C[0] = 0 <= pos).
__device__ __forceinline__ int find_request(const int *C, int b, long long pos) {
    int lo = 0, hi = b - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if ((long long)C[mid] <= pos) lo = mid; else hi = mid - 1;
    }
    return lo;
}

__device__ __forceinline__ void write_record(int *rec, int br, int bu, int er, int eu, int bc,
                                             int cu) {
    rec[kBeginReq] = br, rec[kBeginUnit] = bu, rec[kEndReq] = er, rec[kEndUnit] = eu;
    rec[kBeginChunk] = bc, rec[kChunkUnits] = cu, rec[6] = 0, rec[7] = 0;
}

// Normal mode: the units of positions [start, end) (C = the cost line, in num_splits).
__device__ void cut_part_normal(const int *C, int b, int part, long long pl, long long start,
                                long long end, int *rec) {
    const int i = find_request(C, b, start);
    const long long first_pos = start > (long long)C[i] + kSplitOverhead
                                    ? start : (long long)C[i] + kSplitOverhead;
    if (first_pos >= end) return write_record(rec, 0, 0, -1, 0, 0, 0);
    int i2 = find_request(C, b, end - 1);
    long long eu = end - 1 - C[i2] - kSplitOverhead + 1;
    if (eu <= 0) {  // end - 1 is in i2's overhead: the part ends with request i2 - 1
        i2 -= 1;
        eu = (long long)C[i2 + 1] - C[i2] - kSplitOverhead;
    }
    const long long first_part_of_i = ((long long)C[i] + kSplitOverhead) / pl;
    write_record(rec, i, (int)(first_pos - C[i] - kSplitOverhead), i2, (int)eu,
                 (int)(part - first_part_of_i), 0);
}

// Batch-invariant mode: the chunks whose start position lies in [start, end).
__device__ void cut_part_chunks(const int *C, int b, int cu, long long start, long long end,
                                int *rec) {
    const long long span = kSplitOverhead + cu;
    int i = find_request(C, b, start);
    long long j = ceil_div_ll(start - C[i], span);
    if (j >= ceil_div_ll((long long)C[i + 1] - C[i], span)) {
        if (++i >= b) return write_record(rec, 0, 0, -1, 0, 0, 0);
        j = 0;
    }
    if ((long long)C[i] + j * span >= end) return write_record(rec, 0, 0, -1, 0, 0, 0);
    const int i2 = find_request(C, b, end - 1);
    const long long j2 = (end - 1 - C[i2]) / span;
    const long long cost2 = (long long)C[i2 + 1] - C[i2];
    const long long units2 = cost2 - ceil_div_ll(cost2, span) * kSplitOverhead;
    const long long eu = (j2 + 1) * cu < units2 ? (j2 + 1) * cu : units2;
    write_record(rec, i, (int)(j * cu), i2, (int)eu, (int)j, cu);
}

// Chunks of request i (cost line position c, u units).
__device__ __forceinline__ int request_chunks(long long c, int u, int cu, long long pl) {
    if (cu > 0) return (int)ceil_div_ll(u, cu);
    return (int)((c + kSplitOverhead + u - 1) / pl - (c + kSplitOverhead) / pl + 1);
}

template <int kThreads>
__global__ void __launch_bounds__(kThreads) metadata_kernel(const MetadataParams p) {
    const int per = (p.b + kThreads - 1) / kThreads;
    const int i0 = min(p.b, (int)threadIdx.x * per), i1 = min(p.b, i0 + per);
    int cu = p.chunk_units;
    long long total = 0;
    if (cu > 0) {  // block-uniform: fall back when the chunks do not fit the split slots
        long long n = 0;
        for (int i = i0; i < i1; i++) n += ceil_div_ll(units_of(p.seqlens[i]), cu);
        block_exclusive_scan<kThreads>(n, &total);
        if (total > p.max_splits) cu = 0;
    }
    long long c = 0;
    for (int i = i0; i < i1; i++) c += request_cost(units_of(p.seqlens[i]), cu);
    const long long c_base = block_exclusive_scan<kThreads>(c, &total);
    c = c_base;
    for (int i = i0; i < i1; i++) {
        p.num_splits[i] = (int)c;
        c += request_cost(units_of(p.seqlens[i]), cu);
    }
    if (threadIdx.x == 0) p.num_splits[p.b] = (int)total;
    __syncthreads();
    const long long pl = total > p.num_parts ? ceil_div_ll(total, p.num_parts) : 1;
    for (int part = threadIdx.x; part < p.num_parts; part += kThreads) {
        int *rec = p.sched + (long long)part * kRecordInts;
        const long long start = part * pl, end = start + pl < total ? start + pl : total;
        if (start >= total) write_record(rec, 0, 0, -1, 0, 0, 0);
        else if (cu > 0) cut_part_chunks(p.num_splits, p.b, cu, start, end, rec);
        else cut_part_normal(p.num_splits, p.b, part, pl, start, end, rec);
    }
    __syncthreads();  // every part has read the cost line before it is overwritten
    long long n = 0;
    c = c_base;
    for (int i = i0; i < i1; i++) {
        const int u = units_of(p.seqlens[i]);
        n += request_chunks(c, u, cu, pl);
        c += request_cost(u, cu);
    }
    long long splits = block_exclusive_scan<kThreads>(n, &total);
    c = c_base;
    for (int i = i0; i < i1; i++) {
        const int u = units_of(p.seqlens[i]);
        p.num_splits[i] = (int)splits;
        splits += request_chunks(c, u, cu, pl);
        c += request_cost(u, cu);
    }
    if (threadIdx.x == 0) p.num_splits[p.b] = (int)total;
}

}  // namespace flashmla
}  // namespace mla
