// Programmatic dependent launch (PDL) from inside a kernel, as PTX (NVRTC has no
// cudaGridDependencySynchronize). A kernel launched with the launch attribute
// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION may start while the previous kernel of
// its stream still runs; it must call wait() before it reads anything that kernel writes.
//
//   wait()               griddepcontrol.wait: blocks until every prerequisite grid has completed
//                        and its memory operations are visible. Returns at once when the kernel
//                        was launched without the attribute (or has no prerequisite).
//   launch_dependents()  griddepcontrol.launch_dependents: this CTA allows the dependent grid to
//                        be scheduled; the dependent launches once every CTA of this grid has
//                        called it or exited. It carries no memory ordering: the dependent still
//                        calls wait() before it reads this grid's results.
// Both are no-ops below sm_90 (the instructions need it; nothing is overlapped there).
//
// Dependencies between the CTAs of one grid, in ticket order (the decoupled look-back rule):
//   claim_ticket(counter)  the CTA's work item, in the order CTAs actually start (an atomic
//                          counter, zero before the launch), not blockIdx: a CTA that waits only
//                          on items with smaller tickets waits on CTAs already running, so it can
//                          never deadlock, whatever the residency.
//   signal_add(word, n)    after the whole CTA's writes (it synchronizes the block first):
//                          makes them visible at gpu scope, then adds n to word.
//   wait_at_least(word, n) the whole CTA waits until word >= n (acquire at gpu scope), after
//                          which every thread may read what the signalling CTAs wrote.
#pragma once

namespace mla {
namespace pdl {

__device__ __forceinline__ void wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

__device__ __forceinline__ long long claim_ticket(unsigned int *counter) {
    __shared__ unsigned int ticket;
    if (threadIdx.x == 0) ticket = atomicAdd(counter, 1u);
    __syncthreads();
    return (long long)ticket;
}

__device__ __forceinline__ void signal_add(unsigned int *word, unsigned int n) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(word, n);
    }
}

// ld.acquire.gpu.global.u32
__device__ __forceinline__ unsigned int load_acquire(const unsigned int *p) {
    unsigned int v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void wait_at_least(const unsigned int *word, unsigned int n) {
    if (threadIdx.x == 0)
        while (load_acquire(word) < n) __nanosleep(64);
    __syncthreads();
}

}  // namespace pdl
}  // namespace mla
