// FlashMLA-compatible sparse decode over the fp8 cache of 656-byte rows, sm_90a paths: the
// ping-pong wgmma pipeline of sparse_sm90.cuh (the dense decode's two warpgroups on alternate
// tiles, the gathered rows staged by cp.async and dequantized in shared memory; the default) and
// the warp-specialized kernels of sparse_ws_sm90.cuh (a producer warpgroup converting into a
// ring of bf16 tiles; one CTA per head block, or the CTA pair). Same math, buffers and outputs as
// the portable kernel (sparse_decode.cu, whose loads' addressing, entry count and stores this
// file reuses); results agree up to fp32 summation order. The template parameter kWs (below)
// picks the structure; each specialization is its own kind, launched on sm_90a only.
//
// Grid (b * s_q * ceil(h_q / 64)): CTA x takes heads [64 m, +64), m = x % ceil(h_q / 64), of
// token t = x / ceil(h_q / 64) (request t / s_q, query t % s_q): the head blocks of a token are
// neighbours in launch order and share its gathered rows through L2 (the pair: a cluster). 256
// or 384 threads, dynamic shared memory sparse::sm90s::kSmemBytesS.

#include "flashmla/sparse_decode.cu"
#include "flashmla/sparse_sm90.cuh"
#include "flashmla/sparse_ws_sm90.cuh"

namespace mla {
namespace flashmla {
namespace sparse {

struct DecodeFamily90 {
    using Params = SparseDecodeParams;
    static constexpr bool kFp8 = true;
    static constexpr int kRowBytes = kKvRowBytes;
    __device__ static bool prefetch(const Params &p) { return p.l2_prefetch != 0; }
    __device__ static int count(const Params &p, int t) { return entry_count(p, t / p.s_q); }
    __device__ static const int *list(const Params &p, int t) {
        return p.indices + (long long)(t / p.s_q) * p.i_stride_b +
               (long long)(t % p.s_q) * p.i_stride_s;
    }
    __device__ static const unsigned char *q_row(const Params &p, int t, int h) {
        if (h >= p.h_q) return nullptr;
        return static_cast<const unsigned char *>(p.q) +
               ((long long)(t / p.s_q) * p.q_stride_b + (long long)(t % p.s_q) * p.q_stride_s +
                (long long)h * p.q_stride_h) * 2;
    }
    __device__ static const unsigned char *kv_row(const Params &p, int idx) {
        return entry_row(p, idx);
    }
    __device__ static const void *any(const Params &p) { return p.k; }
    __device__ static void store(const Params &p, const float (&o)[32][4], const RowState &st,
                                 int t, int m) {
        store_rows(p, o, st, t / p.s_q, t % p.s_q, m);
    }
};

// kWs 0: the two-warpgroup ping-pong kernel (sparse_sm90.cuh, 256 threads;
// "flashmla_sparse_decode_sm90"); 1: the warp-specialized kernel (sparse_ws_sm90.cuh, 384;
// "flashmla_sparse_decode_sm90ws"); 2, 3: the same with the two head blocks of a token (h_q > 64)
// in a cluster sharing the converted tiles, cluster-scope / CTA-scope barrier semantics
// ("flashmla_sparse_decode_sm90x2", "flashmla_sparse_decode_sm90x2c").
template <int kWs>
__global__ void __launch_bounds__(kWs ? ws::kThreadsWs : kThreads, 1)
    sparse_decode_sm90_kernel(const __grid_constant__ SparseDecodeParams p) {
    if constexpr (kWs >= 2) ws::attend_cta_ws<DecodeFamily90, kWs - 1>(p);
    else if constexpr (kWs == 1) ws::attend_cta_ws<DecodeFamily90>(p);
    else sm90s::attend_cta<DecodeFamily90>(p);
}

}  // namespace sparse
}  // namespace flashmla
}  // namespace mla
