// Shared-memory barriers (mbarrier, PTX ISA 9.7.13.15), the TMA copies that complete on them
// (cp.async.bulk.tensor, 9.7.9.25) and named CTA barriers (bar.sync / bar.arrive, 9.7.13.1), each
// PTX instruction wrapped once and named after it. sm_80 and later (try_wait, expect_tx and TMA:
// sm_90 and later), so every target of the library.
//
// An mbarrier counts arrivals of one phase; when the expected count is reached the phase
// completes and the barrier's phase parity flips. A waiter names the parity of the phase it waits
// for (0 for the first, then alternating). cp.async's arrive form lets the copies themselves
// arrive: the arrive happens when every cp.async the thread issued before it has landed.
//
// Named barriers 1..15 (0 is __syncthreads) let a producer group arrive without waiting while a
// consumer group waits: bar.arrive by P threads plus bar.sync by C threads completes once
// P + C = count threads have reached it.
#pragma once

namespace mla {

// mbarrier.init.shared::cta.b64: a barrier of `count` expected arrivals per phase.
__device__ __forceinline__ void mbarrier_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// mbarrier.arrive.shared::cta.b64: one arrival of this thread on bar.
__device__ __forceinline__ void mbarrier_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// cp.async.mbarrier.arrive.noinc.shared::cta.b64: one arrival on bar once this thread's earlier
// cp.async have landed (noinc: the arrival is part of the count given at init).
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(unsigned bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// mbarrier.arrive.expect_tx.shared::cta.b64: one arrival that also expects `bytes` more bytes of
// asynchronous copies (cp.async.bulk complete_tx) before the phase can complete.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}

// cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint:
// the TMA copy of the box at coordinates (c0, c1, c2, c3) (innermost first; out-of-range parts
// read as zeros) of the tensor described by tmap (a kernel parameter's address) to dst,
// completing its bytes on bar, read under the L2 policy (createpolicy).
__device__ __forceinline__ void tma_load_4d(unsigned dst, const void *tmap, unsigned bar, int c0,
                                            int c1, int c2, int c3, unsigned long long policy) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
        " [%0], [%1, {%2, %3, %4, %5}], [%6], %7;\n" ::"r"(dst),
        "l"(tmap), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar), "l"(policy)
        : "memory");
}

// mbarrier.try_wait.parity.shared::cta.b64 in a loop: returns once the phase of parity `parity`
// has completed.
__device__ __forceinline__ void mbarrier_wait_parity(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT;\n"
        "}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}

// bar.sync id, count: waits until `count` threads have arrived at named barrier id.
__device__ __forceinline__ void named_barrier_sync(int id, int count) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// bar.arrive id, count: arrives at named barrier id without waiting.
__device__ __forceinline__ void named_barrier_arrive(int id, int count) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

}  // namespace mla
