// DeepSeek-V4 attention plan: each token's SWA window compressed into at most two KV runs.
//
// Template parameter (the spec "dsv4_attention_plan" fixes it):
//   kThreads  threads per block; one warp per token, kThreads / 32 tokens per block,
//             grid = ceil(T / (kThreads / 32)). The warp reads the window 32 slots at a time
//             (coalesced) and finds run starts with a ballot.
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

// True when slot s continues the run that ended at prev.
__device__ __forceinline__ bool run_continues(int prev, int s, int step, int page_shift) {
    return (long long)s == (long long)prev + step && (s >> page_shift) == (prev >> page_shift);
}

// Lowest slot of a run given its first slot in window order (A7).
__device__ __forceinline__ int run_low(int first, int len, int step) {
    return step == 1 ? first : (int)((unsigned)first - (unsigned)(len - 1));
}

// Where run 1 starts in a window: the second run start (row 0 is the first), or L if the window
// is one run, or -1 if it has more than two runs. All lanes of the warp return the same value;
// *first1 gets the slot at that row.
__device__ __forceinline__ int find_run_break(const int *idx, int L, int step, int page_shift,
                                              int *first1) {
    const unsigned lane = threadIdx.x & 31u;
    int carry = 0, brk1 = L, starts = 0;
    for (int base = 0; base < L; base += 32) {
        const int g = base + (int)lane;
        const bool valid = g < L;
        const int s = valid ? idx[g] : 0;
        int prev = __shfl_up_sync(0xffffffffu, s, 1);
        if (lane == 0) prev = carry;
        const bool start = valid && (g == 0 || !run_continues(prev, s, step, page_shift));
        unsigned mask = __ballot_sync(0xffffffffu, start);
        if (base == 0) mask &= ~1u;                            // row 0 starts run 0
        if (mask != 0u && starts == 0) {
            const int src = __ffs(mask) - 1;
            brk1 = base + src;
            *first1 = __shfl_sync(0xffffffffu, s, src);
            mask &= mask - 1u;
            starts = 1;
        }
        if (mask != 0u) return -1;                             // a third run
        carry = __shfl_sync(0xffffffffu, s, 31);
    }
    return brk1;
}

__device__ __forceinline__ int4 plan_row(const int *idx, int L, int step, int page_shift) {
    const int idx0 = idx[0];
    if (L == 0) return make_int4(idx0, 0, idx0, 0);
    int first1 = 0;
    const int brk = find_run_break(idx, L, step, page_shift, &first1);
    if (brk < 0) return make_int4(idx0, 1, idx0, 1);
    const int slot0 = run_low(idx0, brk, step);
    const int slot1 = brk < L ? run_low(first1, L - brk, step)
                              : (int)((unsigned)slot0 + (unsigned)brk);
    return make_int4(slot0, brk, slot1, L);
}

__device__ __forceinline__ void zero_barrier_bank(unsigned *bank, int words) {
    for (int i = threadIdx.x; i < words; i += blockDim.x) bank[i] = 0u;
}

template <int kThreads>
__global__ void __launch_bounds__(kThreads)
plan_kernel(const int *kv_indices, long long row_stride, const int *topk_lengths, int T,
            int topk, int page_shift, int step, int4 *plan_out, unsigned *barrier_bank,
            int barrier_words) {
    static_assert(kThreads % 32 == 0, "whole warps");
    if (blockIdx.x == 0) zero_barrier_bank(barrier_bank, barrier_words);
    const int t = blockIdx.x * (kThreads / 32) + (int)(threadIdx.x / 32);
    if (t >= T) return;                                        // whole warps leave together
    int L = topk_lengths != nullptr ? topk_lengths[t] : topk;
    L = L < 0 ? 0 : (L > topk ? topk : L);
    const int4 row = plan_row(kv_indices + t * row_stride, L, step, page_shift);
    if ((threadIdx.x & 31u) == 0) plan_out[t] = row;
}

}  // namespace dsv4
}  // namespace mla
