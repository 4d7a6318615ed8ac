// Inline PTX of the FlashMLA-compatible kernels, each instruction wrapped once and named after it.
// Portable to every target with mma.sync (sm_80+); the fp8 conversion needs sm_89+ (sm_90a and
// sm_100a, the targets of this family).
//
// (These belong in common/ once the families share them; kept here while common/ is owned by
// another family's work.)
#pragma once

namespace mla {
namespace flashmla {

// Shared-memory address of a generic pointer into shared memory (for ldmatrix and cp.async).
__device__ __forceinline__ unsigned smem_addr(const void *p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

// The first 1024-byte aligned byte at or after p in shared memory: the start of the sm_90a
// kernels' layouts, whose 128-byte swizzle atoms and TMA boxes begin on 1024-byte boundaries
// (their kinds allocate 1024 bytes of dynamic shared memory beyond the layout for this).
__device__ __forceinline__ unsigned char *align_smem_1024(unsigned char *p) {
    return p + ((1024u - (smem_addr(p) & 1023u)) & 1023u);
}

// cp.async.cg.shared.global: copies 16 bytes global -> shared, or writes 16 zero bytes (src-size
// 0: nothing is read) when !valid.
__device__ __forceinline__ void cp_async_16(unsigned dst, const void *src, bool valid) {
    const int src_size = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_size)
                 : "memory");
}

// cp.async.bulk.prefetch.L2.global: starts bringing `bytes` (a multiple of 16, 16-byte aligned
// src) into L2; no result, nothing to wait for (sm_90 and later).
__device__ __forceinline__ void prefetch_l2_bulk(const void *src, unsigned bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
}

// createpolicy.fractional.L2::evict_first / evict_last .b64 (fraction 1): an L2 cache policy for
// the .L2::cache_hint forms below (sm_80 and later). evict_first: streamed data read once (the KV
// cache); evict_last: split partials the combine reads right after the decode.
__device__ __forceinline__ unsigned long long l2_policy_evict_first() {
    unsigned long long policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
    return policy;
}
__device__ __forceinline__ unsigned long long l2_policy_evict_last() {
    unsigned long long policy;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
    return policy;
}

// st.global.L2::cache_hint.v2.f32: stores (a, b) to dst (8-byte aligned) under an L2 policy.
__device__ __forceinline__ void st_global_v2_hint(float *dst, float a, float b,
                                                  unsigned long long policy) {
    asm volatile("st.global.L2::cache_hint.v2.f32 [%0], {%1, %2}, %3;\n" ::"l"(dst), "f"(a),
                 "f"(b), "l"(policy)
                 : "memory");
}

// ld.global.L2::cache_hint.v4.f32: loads 16 bytes (16-byte aligned) under an L2 policy.
__device__ __forceinline__ float4 ld_global_v4_hint(const float *src, unsigned long long policy) {
    float4 v;
    asm volatile("ld.global.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "l"(src), "l"(policy)
                 : "memory");
    return v;
}

// cp.async.commit_group
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// cp.async.wait_group N: all but the N most recent groups of this thread have landed.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ldmatrix.sync.aligned.m8n8.x4.shared.b16: four 8x8 b16 matrices, lane l addresses row l % 8 of
// matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4(unsigned addr, unsigned (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16: the same, each matrix transposed.
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned addr, unsigned (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}: d += a * b, fp32 accumulators.
template <bool kF16>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                             unsigned b1) {
    if constexpr (kF16) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// Clusters of CTAs (sm_90 and later; the dense decode's CTA pair, decode_sm90x2.cu):
// mapa.shared::cluster.u32: the shared::cluster address of local shared address addr in the
// shared memory of CTA `rank` of the cluster.
__device__ __forceinline__ unsigned cluster_map_shared(unsigned addr, unsigned rank) {
    unsigned r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}

// mbarrier.arrive.shared::cluster.b64: one arrival on the mbarrier at shared::cluster address
// bar (another CTA's; release at CTA scope, as CUTLASS's cluster pipelines release a buffer).
__device__ __forceinline__ void mbarrier_arrive_cluster(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes, predicated on on: `bytes`
// (a multiple of 16, 16-byte aligned) from local shared memory src to dst in another CTA's
// shared memory (shared::cluster), completing them on that CTA's mbarrier bar (shared::cluster).
// Predicated rather than branched on, so that it can sit between wgmma of a warpgroup without a
// divergent path (ptxas serializes wgmma across those, C7520).
__device__ __forceinline__ void bulk_copy_to_cluster_if(bool on, unsigned dst, unsigned src,
                                                        unsigned bytes, unsigned bar) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %4, 0;\n"
        "@p cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], "
        "%2, [%3];\n"
        "}\n" ::"r"(dst),
        "r"(src), "r"(bytes), "r"(bar), "r"((int)on)
        : "memory");
}

// mbarrier.arrive.expect_tx.shared::cta.b64, predicated on on (as above): one arrival that also
// expects `bytes` more bytes of asynchronous copies.
__device__ __forceinline__ void mbarrier_arrive_expect_tx_if(bool on, unsigned bar,
                                                             unsigned bytes) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %2, 0;\n"
        "@p mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
        "}\n" ::"r"(bar),
        "r"(bytes), "r"((int)on)
        : "memory");
}

// barrier.cluster.arrive.release + barrier.cluster.wait.acquire: every thread of the cluster.
__device__ __forceinline__ void cluster_barrier_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// fence.mbarrier_init.release.cluster: this thread's mbarrier.init visible to the cluster.
__device__ __forceinline__ void fence_mbarrier_init_release_cluster() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// +inf (NVRTC has no math.h INFINITY).
__device__ __forceinline__ float inf_f32() { return __int_as_float(0x7f800000); }

// ex2.approx.ftz.f32: 2^x (2^-inf = 0).
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// cvt.rn.f16x2.e4m3x2 twice: four fp8 e4m3 bytes (little-endian in x) to four fp16 values (exact).
__device__ __forceinline__ uint2 e4m3x4_to_f16x4(unsigned x) {
    uint2 r;
    asm("{\n"
        ".reg .b16 lo, hi;\n"
        "mov.b32 {lo, hi}, %2;\n"
        "cvt.rn.f16x2.e4m3x2 %0, lo;\n"
        "cvt.rn.f16x2.e4m3x2 %1, hi;\n"
        "}\n"
        : "=r"(r.x), "=r"(r.y)
        : "r"(x));
    return r;
}

}  // namespace flashmla
}  // namespace mla
