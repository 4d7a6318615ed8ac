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
// The line of length T = C_b is cut into P parts at the boundaries B_0 = 0 <= B_1 <= ... <= B_P = T;
// part p owns positions [B_p, B_{p+1}). With pl = ceil(T / P):
//   normal: B_p is the grid point x = p pl, or, when a request starts at most delta positions
//           after it, that request's start (snapped; delta < pl keeps B strictly increasing below
//           T). Part p gets the units whose position falls in its range, so a request is split
//           where a boundary falls inside its units: n_i = part(last unit) - part(first unit) + 1
//           and sum n_i <= b + P - 1. delta is chosen per call among (0, 1, 2, 3) (pl - 1) / 3 to
//           minimize the modelled makespan: the largest part load, a part of range [s, e)
//           costing 5 + e' - max(s, C_i + 5) (i the request at s; e' = e, or C_j when e falls in
//           the overhead of request j), plus kSplitPenalty when some request is split (the
//           combine's work); ties go to the larger delta. delta 0 is the balanced cut; at equal
//           lengths a snapped cut keeps requests whole when each part can take whole requests at
//           little cost in balance (b 128, P 66: two whole requests per part and no combine work
//           up to s_k 8192).
//   batch-invariant: part p gets the whole chunks whose start position falls in [p pl, (p+1) pl);
//           chunk boundaries depend on the request's own length only, so its result does not
//           depend on its batch mates. If sum n_i > max_splits the call falls back to the normal
//           mode.
// Every unit of every request belongs to exactly one part; within a request the parts come in
// order, so chunk indices are consecutive.
//
// Buffers: seqlens [b] int32; sched [P, 8] int32 (written); num_splits [b + 1] int32 (written;
// it holds C_i as scratch while the parts are cut). Positions are computed in 64 bits; C_i is
// stored as int32 (sum over the batch of units + 5 per chunk must stay below 2^31).
//
// mla_attention_decode's dense path launches it as a programmatic dependent of the stream's
// previous kernel (runtime/fakequant_decode.c), so it waits for that kernel before reading
// anything; it does not release its own dependent (the decode) early (measured slower).

#include "common/pdl.cuh"
#include "flashmla/params.cuh"

namespace mla {
namespace flashmla {

constexpr int kSnapChoices = 4;              // snapping distances tried: (0 .. 3) (pl - 1) / 3
constexpr int kSplitPenalty = kSplitOverhead;  // modelled cost of the combine's work, in units

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

// The normal mode's cut of the cost line C[0..b] (C[b] = T) into P parts: grid step pl,
// snapping distance delta (header).
struct Cut {
    const int *C;
    int b, P;
    long long T, pl, delta;
};

// First i in [0, b] with C[i] >= x (x <= T = C[b]).
__device__ __forceinline__ int first_start_at_or_after(const int *C, int b, long long x) {
    int lo = 0, hi = b;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if ((long long)C[mid] >= x) hi = mid; else lo = mid + 1;
    }
    return lo;
}

// B_p: 0 for p = 0, T for p >= P or a grid point at or past T, else the grid point p pl or the
// start of a request at most delta after it.
__device__ __forceinline__ long long boundary(const Cut &k, int p) {
    if (p <= 0) return 0;
    const long long x = (long long)p * k.pl;
    if (p >= k.P || x >= k.T) return k.T;
    const long long c = k.C[first_start_at_or_after(k.C, k.b, x)];
    return c - x <= k.delta ? c : x;
}

// The part whose range holds position x < T: the largest p < P with B_p <= x.
__device__ __forceinline__ int part_of(const Cut &k, long long x) {
    int lo = 0, hi = k.P - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (boundary(k, mid) <= x) lo = mid; else hi = mid - 1;
    }
    return lo;
}

// Modelled load of part p (header); *splits: its first boundary falls inside a request's units.
__device__ __forceinline__ long long part_load(const Cut &k, int p, bool *splits) {
    const long long s = boundary(k, p), e = boundary(k, p + 1);
    *splits = false;
    if (s >= e) return 0;
    const int i = find_request(k.C, k.b, s), j = find_request(k.C, k.b, e - 1);
    *splits = p > 0 && s > (long long)k.C[i] + kSplitOverhead;
    const long long first = max(s, (long long)k.C[i] + kSplitOverhead);
    const long long last = e - k.C[j] <= kSplitOverhead ? (long long)k.C[j] : e;
    return first < last ? kSplitOverhead + last - first : 0;
}

// Block-wide maximum (every thread gets it). Every thread must call it.
template <int kThreads>
__device__ long long block_max(long long v) {
    __shared__ long long warp_max[kThreads / 32];
    for (int d = 16; d > 0; d >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, d));
    if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = v;
    __syncthreads();
    long long all = warp_max[0];
    for (int w = 1; w < kThreads / 32; w++) all = max(all, warp_max[w]);
    __syncthreads();  // warp_max may be reused by the next call
    return all;
}

// The snapping distance of the normal mode (header): block-uniform.
template <int kThreads>
__device__ long long choose_delta(Cut k) {
    long long best_cost = 0, best_delta = 0;
    for (int c = 0; c < kSnapChoices; c++) {
        k.delta = c * (k.pl - 1) / (kSnapChoices - 1);
        long long load = 0;
        bool split = false;
        for (int part = threadIdx.x; part < k.P; part += kThreads) {
            bool s;
            load = max(load, part_load(k, part, &s));
            split |= s;
        }
        const long long cost = block_max<kThreads>(load) +
                               (__syncthreads_or(split) ? kSplitPenalty : 0);
        if (c == 0 || cost <= best_cost) best_cost = cost, best_delta = k.delta;
    }
    return best_delta;
}

// Normal mode: the units of part p's positions [B_p, B_{p+1}) (C = the cost line, in num_splits).
__device__ void cut_part_normal(const Cut &k, int part, int *rec) {
    const int *C = k.C;
    const int b = k.b;
    const long long start = boundary(k, part), end = boundary(k, part + 1);
    if (start >= end) return write_record(rec, 0, 0, -1, 0, 0, 0);
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
    const int first_part_of_i = part_of(k, (long long)C[i] + kSplitOverhead);
    write_record(rec, i, (int)(first_pos - C[i] - kSplitOverhead), i2, (int)eu,
                 part - first_part_of_i, 0);
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

// part_of from the boundaries the cut stored in the records (field kBeginPos), once the cost
// line in num_splits is being overwritten.
__device__ __forceinline__ int part_of_stored(const int *sched, int P, long long x) {
    int lo = 0, hi = P - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if ((long long)sched[(long long)mid * kRecordInts + kBeginPos] <= x) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// Chunks of request i (cost line position c, u units).
__device__ __forceinline__ int request_chunks(const int *sched, int P, long long c, int u,
                                              int cu) {
    if (cu > 0) return (int)ceil_div_ll(u, cu);
    return part_of_stored(sched, P, c + kSplitOverhead + u - 1) -
           part_of_stored(sched, P, c + kSplitOverhead) + 1;
}

template <int kThreads>
__global__ void __launch_bounds__(kThreads) metadata_kernel(const MetadataParams p) {
    pdl::wait();  // a programmatic dependent (header): the previous kernel is done
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
    Cut k = {p.num_splits, p.b, p.num_parts, total, pl, 0};
    if (cu == 0) k.delta = choose_delta<kThreads>(k);  // block-uniform
    for (int part = threadIdx.x; part < p.num_parts; part += kThreads) {
        int *rec = p.sched + (long long)part * kRecordInts;
        const long long start = part * pl, end = start + pl < total ? start + pl : total;
        if (cu > 0) {
            if (start >= total) write_record(rec, 0, 0, -1, 0, 0, 0);
            else cut_part_chunks(p.num_splits, p.b, cu, start, end, rec);
        } else {
            cut_part_normal(k, part, rec);
            rec[kBeginPos] = (int)boundary(k, part);  // read by request_chunks
        }
    }
    __syncthreads();  // every part has read the cost line before it is overwritten, and the
                      // records' boundaries are visible
    long long n = 0;
    c = c_base;
    for (int i = i0; i < i1; i++) {
        const int u = units_of(p.seqlens[i]);
        n += request_chunks(p.sched, p.num_parts, c, u, cu);
        c += request_cost(u, cu);
    }
    long long splits = block_exclusive_scan<kThreads>(n, &total);
    c = c_base;
    for (int i = i0; i < i1; i++) {
        const int u = units_of(p.seqlens[i]);
        p.num_splits[i] = (int)splits;
        splits += request_chunks(p.sched, p.num_parts, c, u, cu);
        c += request_cost(u, cu);
    }
    if (threadIdx.x == 0) p.num_splits[p.b] = (int)total;
}

}  // namespace flashmla
}  // namespace mla
