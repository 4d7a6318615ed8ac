// FlashMLA-compatible sparse prefill (mla_flash_sparse_fwd, d_qk 576), sm_90a paths over each
// token's gathered bf16 kv rows, cp.async straight into the swizzled tiles: the warp-specialized
// kernel of sparse_ws_sm90.cuh (a producer warpgroup filling a ring of two tiles; the default)
// and the ping-pong pipeline of sparse_sm90.cuh (the dense decode's two warpgroups on alternate
// tiles). Same math, buffers and outputs as the portable kernel (sparse_prefill.cu, whose entry
// count and stores this file reuses); results agree up to fp32 summation order. The template
// parameter kWs (below) picks the structure; each specialization is its own kind, launched on
// sm_90a for d_qk 576 (d_qk 512 stays on the portable kernel).
//
// Grid (s_q * ceil(h_q / 64)): CTA x takes heads [64 m, +64), m = x % ceil(h_q / 64), of token
// x / ceil(h_q / 64): the head blocks of a token are neighbours in launch order and share its
// gathered rows through L2. 384 or 256 threads, dynamic shared memory sparse::sm90s::kSmemBytesS.

#include "flashmla/sparse_prefill.cu"
#include "flashmla/sparse_sm90.cuh"
#include "flashmla/sparse_ws_sm90.cuh"

namespace mla {
namespace flashmla {
namespace sparse {

struct PrefillFamily90 {
    using Params = SparsePrefillParams;
    static constexpr bool kFp8 = false;
    static constexpr int kRowBytes = 576 * 2;
    __device__ static bool prefetch(const Params &p) { return p.l2_prefetch != 0; }
    __device__ static int count(const Params &p, int t) { return entry_count(p, t); }
    __device__ static const int *list(const Params &p, int t) {
        return p.indices + (long long)t * p.i_stride_s;
    }
    __device__ static const unsigned char *q_row(const Params &p, int t, int h) {
        if (h >= p.h_q) return nullptr;
        return static_cast<const unsigned char *>(p.q) +
               ((long long)t * p.q_stride_s + (long long)h * p.q_stride_h) * 2;
    }
    __device__ static const unsigned char *kv_row(const Params &p, int idx) {
        if (idx < 0 || idx >= p.s_kv) return nullptr;
        return static_cast<const unsigned char *>(p.kv) + (long long)idx * p.kv_stride_s * 2;
    }
    __device__ static const void *any(const Params &p) { return p.kv; }
    __device__ static void store(const Params &p, const float (&o)[32][4], const RowState &st,
                                 int t, int m) {
        store_rows(p, o, st, t, m);
    }
};

// kWs 0: the two-warpgroup ping-pong kernel (sparse_sm90.cuh, 256 threads;
// "flashmla_sparse_prefill_sm90"); 1: the warp-specialized one (sparse_ws_sm90.cuh, 384;
// "flashmla_sparse_prefill_sm90ws").
template <int kWs>
__global__ void __launch_bounds__(kWs ? ws::kThreadsWs : kThreads, 1)
    sparse_prefill_sm90_kernel(const __grid_constant__ SparsePrefillParams p) {
    if constexpr (kWs) ws::attend_cta_ws<PrefillFamily90>(p);
    else sm90s::attend_cta<PrefillFamily90>(p);
}

}  // namespace sparse
}  // namespace flashmla
}  // namespace mla
