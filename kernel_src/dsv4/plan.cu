// DeepSeek-V4 attention plan: each token's SWA window compressed into at most two KV runs.
//
// Template parameter (the spec "dsv4_attention_plan" fixes it):
//   kThreads  threads per block; one thread per token, grid = ceil(T / kThreads).
//
// Math (spec/dsv4.md §3.2, A7, §5), for token t with L = clamp(topk_lengths ? topk_lengths[t]
// : topk, 0, topk) and idx = kv_indices[t, 0..L):
//   a run continues at row g when idx[g] == idx[g-1] + step and both lie on one page
//   (page = slot >> page_shift, an arithmetic shift: floor division by page_size, so -1 padding
//   is page -1 and never breaks the arithmetic);
//   <= 2 runs -> (lowest slot of run 0, len0, lowest slot of run 1 or slot0 + len0, L);
//   >  2 runs -> (idx[0], 1, idx[0], 1)   (cut to the first row);
//   L == 0    -> (idx[0], 0, idx[0], 0)   (empty window; column 0 is always present, topk >= 1).
// The lowest slot of a run is its first slot for step +1 and first - (len - 1) for step -1.
//
// Buffers:
//   kv_indices    int32, row t at kv_indices + t * row_stride, unit column stride, topk columns.
//   topk_lengths  int32 [T] or null (every token attends over topk rows).
//   plan_out      int4 [T] (slot0, len0, slot1, rows) in the workspace's plan slot of the kind.
//   barrier_bank  barrier_words 32-bit words of the kind's barrier bank; block 0 zeroes them.
//
// Slot arithmetic is done in 32-bit two's complement (unsigned), like the int32 outputs; the
// comparison "idx[g] == idx[g-1] + step" is done in 64 bits so a run never wraps at INT_MAX.

namespace mla {
namespace dsv4 {

struct plan_runs {
    int first0, len0;  // run 0: first slot in window order, length
    int first1, len1;  // run 1
    int count;         // runs found, 3 meaning "more than two"
};

// True when slot s continues the run that ended at prev.
__device__ __forceinline__ bool run_continues(int prev, int s, int step, int page_shift) {
    return (long long)s == (long long)prev + step && (s >> page_shift) == (prev >> page_shift);
}

// Scans idx[0..L) (L >= 1) into at most two runs; stops early at the third.
__device__ __forceinline__ plan_runs scan_runs(const int *idx, int L, int step, int page_shift) {
    plan_runs r;
    r.first0 = idx[0];
    r.len0 = 1;
    r.first1 = 0;
    r.len1 = 0;
    r.count = 1;
    int prev = r.first0;
    for (int g = 1; g < L; ++g) {
        int s = idx[g];
        if (run_continues(prev, s, step, page_shift)) {
            if (r.count == 1) ++r.len0; else ++r.len1;
        } else if (r.count == 1) {
            r.count = 2;
            r.first1 = s;
            r.len1 = 1;
        } else {
            r.count = 3;
            break;
        }
        prev = s;
    }
    return r;
}

// Lowest slot of a run given its first slot in window order (A7).
__device__ __forceinline__ int run_low(int first, int len, int step) {
    return step == 1 ? first : (int)((unsigned)first - (unsigned)(len - 1));
}

__device__ __forceinline__ int4 plan_row(const int *idx, int L, int step, int page_shift) {
    int idx0 = idx[0];
    if (L == 0) return make_int4(idx0, 0, idx0, 0);
    plan_runs r = scan_runs(idx, L, step, page_shift);
    if (r.count > 2) return make_int4(idx0, 1, idx0, 1);
    int slot0 = run_low(r.first0, r.len0, step);
    int slot1 = r.count == 2 ? run_low(r.first1, r.len1, step)
                             : (int)((unsigned)slot0 + (unsigned)r.len0);
    return make_int4(slot0, r.len0, slot1, L);
}

__device__ __forceinline__ void zero_barrier_bank(unsigned *bank, int words) {
    for (int i = threadIdx.x; i < words; i += blockDim.x) bank[i] = 0u;
}

template <int kThreads>
__global__ void __launch_bounds__(kThreads)
plan_kernel(const int *kv_indices, long long row_stride, const int *topk_lengths, int T,
            int topk, int page_shift, int step, int4 *plan_out, unsigned *barrier_bank,
            int barrier_words) {
    if (blockIdx.x == 0) zero_barrier_bank(barrier_bank, barrier_words);
    int t = blockIdx.x * kThreads + threadIdx.x;
    if (t >= T) return;
    int L = topk_lengths != nullptr ? topk_lengths[t] : topk;
    L = L < 0 ? 0 : (L > topk ? topk : L);
    plan_out[t] = plan_row(kv_indices + t * row_stride, L, step, page_shift);
}

}  // namespace dsv4
}  // namespace mla
