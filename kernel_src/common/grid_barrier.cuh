// Grid-wide barriers for persistent, cooperatively launched kernels (all CTAs co-resident).
//
// Each barrier is its own 32-bit arrival counter in global memory, zero before the launch and
// used once per launch: a CTA arrives with red.release.gpu.add after __syncthreads (so its
// threads' writes happen before the arrival) and waits with ld.acquire.gpu until all gridDim.x
// CTAs have arrived, then __syncthreads (so its threads' reads happen after). An exit counter
// tells the last CTA to leave, which may then zero the counters for the next launch.
#pragma once

namespace mla {

// red.release.gpu.global.add.u32
__device__ __forceinline__ void red_add_release_gpu(unsigned *p, unsigned v) {
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// ld.acquire.gpu.global.u32
__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// atom.acq_rel.gpu.global.add.u32: returns the old value.
__device__ __forceinline__ unsigned atom_add_acq_rel_gpu(unsigned *p, unsigned v) {
    unsigned old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;"
                 : "=r"(old) : "l"(p), "r"(v) : "memory");
    return old;
}

// Waits until every CTA of the grid has called it on this counter.
__device__ __forceinline__ void grid_barrier(unsigned *counter) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        red_add_release_gpu(counter, 1u);
        while (ld_acquire_gpu(counter) < gridDim.x) __nanosleep(64);
        __threadfence();
    }
    __syncthreads();
}

// Counts this CTA out on exit_counter; the last CTA to leave zeroes counters[0..n) (exit_counter
// among them). Every CTA must call it once, after its last barrier.
__device__ __forceinline__ void grid_exit_reset(unsigned *exit_counter, unsigned *counters, int n) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        if (atom_add_acq_rel_gpu(exit_counter, 1u) == gridDim.x - 1u) {
            for (int i = 0; i < n; ++i) counters[i] = 0u;
            __threadfence();
        }
    }
}

}  // namespace mla
