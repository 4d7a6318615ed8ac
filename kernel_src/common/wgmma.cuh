// Warpgroup matrix multiply (wgmma, sm_90a) and what it needs, each PTX instruction wrapped once
// and named after it. PTX ISA 9.7.15 (asynchronous warpgroup-level matrix instructions).
//
// The instructions exist on sm_90a only: elsewhere (sm_100a, sm_XY) the wrappers compile to a
// trap, so a kernel that includes this header still builds for every target; the runtime selects
// such a kernel on sm_90a only.
//
// Shared-memory operands (PTX ISA 9.7.15.5.1.2, "matrix descriptor"): a 64-bit descriptor with
//   bits  0-13 (start address & 0x3ffff) >> 4      bits 16-29 leading dimension byte offset >> 4
//   bits 32-45 stride dimension byte offset >> 4    bits 49-51 base offset (0: the operand's
//   bits 62-63 swizzle mode (1: 128-byte swizzle)   swizzle atoms start on 1024-byte boundaries)
// The 128-byte swizzle permutes the 16-byte chunks of each 128-byte row: physical address bits
// [4, 7) are the logical ones XOR bits [7, 10), so an atom is 8 rows of 128 bytes, 1024-aligned.
//   K-major operand (rows along M or N, 64 16-bit K values per 128-byte row): SBO = byte offset
//     between groups of 8 rows; LBO unused (encoded 1). A k16 step inside the atom advances the
//     start address by 32 bytes.
//   MN-major operand (transposed; rows along K, 64 16-bit M/N values per 128-byte row):
//     LBO = byte offset between 64-value M/N blocks, SBO = byte offset between groups of 8 K rows.
//
// Accumulator fragment (fp32, PTX ISA figure "WGMMA .m64nNk16 register fragment layout for
// accumulator matrix D"): warp w of the warpgroup (w = warp % 4) holds rows [16 w, 16 w + 16);
// its lane l holds d[j][e] = D[16 w + l / 4 + 8 (e / 2)][8 j + 2 (l % 4) + e % 2] for the N / 8
// column blocks j. This is the mma.sync m16n8 C fragment of each 8-column block.
//
// Ordering: registers the wgmma reads or writes that other instructions touched need
// wgmma_fence() first; shared memory written by ordinary stores or cp.async needs
// fence_proxy_async_shared() in each writing thread, then a barrier, before a wgmma reads it;
// accumulators and operands are the wgmma's until wgmma_wait_group<N> retires its group.
#pragma once

namespace mla {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MLA_WGMMA_ENABLED 1
#else
#define MLA_WGMMA_ENABLED 0
#endif

// The descriptor of a 128-byte-swizzled operand whose atoms start at 1024-byte boundaries.
__device__ __forceinline__ unsigned long long wgmma_desc_sw128(unsigned smem_addr, unsigned lbo,
                                                               unsigned sbo) {
    return (unsigned long long)((smem_addr & 0x3ffffu) >> 4) |
           ((unsigned long long)((lbo & 0x3ffffu) >> 4) << 16) |
           ((unsigned long long)((sbo & 0x3ffffu) >> 4) << 32) | (1ull << 62);
}

// wgmma.fence.sync.aligned
__device__ __forceinline__ void wgmma_fence() {
#if MLA_WGMMA_ENABLED
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
    __trap();
#endif
}

// wgmma.commit_group.sync.aligned
__device__ __forceinline__ void wgmma_commit_group() {
#if MLA_WGMMA_ENABLED
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
    __trap();
#endif
}

// wgmma.wait_group.sync.aligned N: at most N of this warpgroup's committed groups still pending.
template <int N>
__device__ __forceinline__ void wgmma_wait_group() {
#if MLA_WGMMA_ENABLED
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#else
    __trap();
#endif
}

// fence.proxy.async.shared::cta: this thread's generic-proxy shared-memory writes become visible
// to the async proxy (wgmma operand reads), after a barrier.
__device__ __forceinline__ void fence_proxy_async_shared() {
#if MLA_WGMMA_ENABLED
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

#define MLA_WGMMA_D4(i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
// The accumulator operands of the m64n64 (32 registers) and m64n256 (128 registers) forms: the
// register list of the instruction text and its "+f" constraints.
#define MLA_WGMMA_D32_REGS                                                                         \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n"                     \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define MLA_WGMMA_D32_OUTS                                                                         \
    MLA_WGMMA_D4(0), MLA_WGMMA_D4(1), MLA_WGMMA_D4(2), MLA_WGMMA_D4(3),                            \
    MLA_WGMMA_D4(4), MLA_WGMMA_D4(5), MLA_WGMMA_D4(6), MLA_WGMMA_D4(7)
// The m64n32 forms' accumulator (16 registers).
#define MLA_WGMMA_D16_REGS                                                                         \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define MLA_WGMMA_D16_OUTS MLA_WGMMA_D4(0), MLA_WGMMA_D4(1), MLA_WGMMA_D4(2), MLA_WGMMA_D4(3)
#define MLA_WGMMA_D128_REGS                                                                        \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n"                     \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,\n"            \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,\n"            \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,\n"            \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,\n"            \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,\n"            \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111,\n" \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define MLA_WGMMA_D128_OUTS                                                                        \
    MLA_WGMMA_D4(0), MLA_WGMMA_D4(1), MLA_WGMMA_D4(2), MLA_WGMMA_D4(3),                            \
    MLA_WGMMA_D4(4), MLA_WGMMA_D4(5), MLA_WGMMA_D4(6), MLA_WGMMA_D4(7),                            \
    MLA_WGMMA_D4(8), MLA_WGMMA_D4(9), MLA_WGMMA_D4(10), MLA_WGMMA_D4(11),                          \
    MLA_WGMMA_D4(12), MLA_WGMMA_D4(13), MLA_WGMMA_D4(14), MLA_WGMMA_D4(15),                        \
    MLA_WGMMA_D4(16), MLA_WGMMA_D4(17), MLA_WGMMA_D4(18), MLA_WGMMA_D4(19),                        \
    MLA_WGMMA_D4(20), MLA_WGMMA_D4(21), MLA_WGMMA_D4(22), MLA_WGMMA_D4(23),                        \
    MLA_WGMMA_D4(24), MLA_WGMMA_D4(25), MLA_WGMMA_D4(26), MLA_WGMMA_D4(27),                        \
    MLA_WGMMA_D4(28), MLA_WGMMA_D4(29), MLA_WGMMA_D4(30), MLA_WGMMA_D4(31)

// wgmma.mma_async.sync.aligned.m64n64k16.f32.{f16,bf16}: D[64 x 64] (+)= A[64 x 16] B[16 x 64],
// A from shared memory (descriptor, K-major), B from shared memory, K-major (kTransB 0) or
// N-major (1); scale_d 0: D = A B.
#define MLA_WGMMA_M64N64_SS(TY)                                                                    \
    asm volatile(                                                                                  \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                               \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY "\n"                               \
        MLA_WGMMA_D32_REGS ",\n"                                                                   \
        "%32, %33, p, 1, 1, 0, %35;\n}\n"                                                          \
        : MLA_WGMMA_D32_OUTS                                                                       \
        : "l"(a_desc), "l"(b_desc), "r"(scale_d), "n"(kTransB))
template <bool kF16, int kTransB>
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[8][4], unsigned long long a_desc,
                                                  unsigned long long b_desc, int scale_d) {
#if MLA_WGMMA_ENABLED
    if constexpr (kF16)
        MLA_WGMMA_M64N64_SS("f16");
    else
        MLA_WGMMA_M64N64_SS("bf16");
#else
    __trap();
#endif
}
#undef MLA_WGMMA_M64N64_SS

// wgmma.mma_async.sync.aligned.m64n64k16.f32.{f16,bf16}: D[64 x 64] (+)= A[64 x 16] B[16 x 64],
// A from registers (the mma.sync m16n8k16 A fragment of the warp's 16 rows: a[0] rows r, k 0-7;
// a[1] rows r + 8, k 0-7; a[2], a[3] the same for k 8-15), B from shared memory, K-major
// (kTransB 0) or N-major (1); scale_d 0: D = A B.
#define MLA_WGMMA_M64N64_RS(TY)                                                                    \
    asm volatile(                                                                                  \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                               \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY "\n"                               \
        MLA_WGMMA_D32_REGS ",\n"                                                                   \
        "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"                                            \
        : MLA_WGMMA_D32_OUTS                                                                       \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(scale_d), "n"(kTransB))
template <bool kF16, int kTransB>
__device__ __forceinline__ void wgmma_m64n64k16_rs(float (&d)[8][4], const unsigned (&a)[4],
                                                  unsigned long long b_desc, int scale_d) {
#if MLA_WGMMA_ENABLED
    if constexpr (kF16)
        MLA_WGMMA_M64N64_RS("f16");
    else
        MLA_WGMMA_M64N64_RS("bf16");
#else
    __trap();
#endif
}
#undef MLA_WGMMA_M64N64_RS

// wgmma.mma_async.sync.aligned.m64n32k16.f32.{f16,bf16}: D[64 x 32] (+)= A[64 x 16] B[16 x 32],
// A from shared memory (descriptor, K-major), B from shared memory, K-major (kTransB 0) or
// N-major (1); scale_d 0: D = A B.
#define MLA_WGMMA_M64N32_SS(TY)                                                                    \
    asm volatile(                                                                                  \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"                                               \
        "wgmma.mma_async.sync.aligned.m64n32k16.f32." TY "." TY "\n"                               \
        MLA_WGMMA_D16_REGS ",\n"                                                                   \
        "%16, %17, p, 1, 1, 0, %19;\n}\n"                                                          \
        : MLA_WGMMA_D16_OUTS                                                                       \
        : "l"(a_desc), "l"(b_desc), "r"(scale_d), "n"(kTransB))
template <bool kF16, int kTransB>
__device__ __forceinline__ void wgmma_m64n32k16_ss(float (&d)[4][4], unsigned long long a_desc,
                                                  unsigned long long b_desc, int scale_d) {
#if MLA_WGMMA_ENABLED
    if constexpr (kF16)
        MLA_WGMMA_M64N32_SS("f16");
    else
        MLA_WGMMA_M64N32_SS("bf16");
#else
    __trap();
#endif
}
#undef MLA_WGMMA_M64N32_SS

// wgmma.mma_async.sync.aligned.m64n32k16.f32.{f16,bf16}: D[64 x 32] (+)= A[64 x 16] B[16 x 32],
// A from registers (the fragment of the m64n64 RS form), B from shared memory, K-major
// (kTransB 0) or N-major (1); scale_d 0: D = A B.
#define MLA_WGMMA_M64N32_RS(TY)                                                                    \
    asm volatile(                                                                                  \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"                                               \
        "wgmma.mma_async.sync.aligned.m64n32k16.f32." TY "." TY "\n"                               \
        MLA_WGMMA_D16_REGS ",\n"                                                                   \
        "{%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n"                                            \
        : MLA_WGMMA_D16_OUTS                                                                       \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(scale_d), "n"(kTransB))
template <bool kF16, int kTransB>
__device__ __forceinline__ void wgmma_m64n32k16_rs(float (&d)[4][4], const unsigned (&a)[4],
                                                  unsigned long long b_desc, int scale_d) {
#if MLA_WGMMA_ENABLED
    if constexpr (kF16)
        MLA_WGMMA_M64N32_RS("f16");
    else
        MLA_WGMMA_M64N32_RS("bf16");
#else
    __trap();
#endif
}
#undef MLA_WGMMA_M64N32_RS

// wgmma.mma_async.sync.aligned.m64n256k16.f32.{f16,bf16}: D[64 x 256] (+)= A[64 x 16] B[16 x 256],
// A from shared memory (descriptor, K-major), B from shared memory, K-major (kTransB 0) or
// N-major (1); scale_d 0: D = A B.
#define MLA_WGMMA_M64N256_SS(TY)                                                                   \
    asm volatile(                                                                                  \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                              \
        "wgmma.mma_async.sync.aligned.m64n256k16.f32." TY "." TY "\n"                              \
        MLA_WGMMA_D128_REGS ",\n"                                                                  \
        "%128, %129, p, 1, 1, 0, %131;\n}\n"                                                       \
        : MLA_WGMMA_D128_OUTS                                                                      \
        : "l"(a_desc), "l"(b_desc), "r"(scale_d), "n"(kTransB))
template <bool kF16, int kTransB>
__device__ __forceinline__ void wgmma_m64n256k16_ss(float (&d)[32][4], unsigned long long a_desc,
                                                   unsigned long long b_desc, int scale_d) {
#if MLA_WGMMA_ENABLED
    if constexpr (kF16)
        MLA_WGMMA_M64N256_SS("f16");
    else
        MLA_WGMMA_M64N256_SS("bf16");
#else
    __trap();
#endif
}
#undef MLA_WGMMA_M64N256_SS

// wgmma.mma_async.sync.aligned.m64n256k16.f32.{f16,bf16}: D[64 x 256] (+)= A[64 x 16] B[16 x 256],
// A from registers (the mma.sync m16n8k16 A fragment of the warp's 16 rows: a[0] rows r, k 0-7;
// a[1] rows r + 8, k 0-7; a[2], a[3] the same for k 8-15), B from shared memory, K-major
// (kTransB 0) or N-major (1); scale_d 0: D = A B.
#define MLA_WGMMA_M64N256_RS(TY)                                                                   \
    asm volatile(                                                                                  \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"                                              \
        "wgmma.mma_async.sync.aligned.m64n256k16.f32." TY "." TY "\n"                              \
        MLA_WGMMA_D128_REGS ",\n"                                                                  \
        "{%128, %129, %130, %131}, %132, p, 1, 1, %134;\n}\n"                                      \
        : MLA_WGMMA_D128_OUTS                                                                      \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(scale_d), "n"(kTransB))
template <bool kF16, int kTransB>
__device__ __forceinline__ void wgmma_m64n256k16_rs(float (&d)[32][4], const unsigned (&a)[4],
                                                   unsigned long long b_desc, int scale_d) {
#if MLA_WGMMA_ENABLED
    if constexpr (kF16)
        MLA_WGMMA_M64N256_RS("f16");
    else
        MLA_WGMMA_M64N256_RS("bf16");
#else
    __trap();
#endif
}
#undef MLA_WGMMA_M64N256_RS


#define MLA_WGMMA_D64_REGS                                                                         \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n"                     \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,\n"            \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,\n"            \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define MLA_WGMMA_D64_OUTS                                                                         \
    MLA_WGMMA_D4(0), MLA_WGMMA_D4(1), MLA_WGMMA_D4(2), MLA_WGMMA_D4(3),                            \
    MLA_WGMMA_D4(4), MLA_WGMMA_D4(5), MLA_WGMMA_D4(6), MLA_WGMMA_D4(7),                            \
    MLA_WGMMA_D4(8), MLA_WGMMA_D4(9), MLA_WGMMA_D4(10), MLA_WGMMA_D4(11),                          \
    MLA_WGMMA_D4(12), MLA_WGMMA_D4(13), MLA_WGMMA_D4(14), MLA_WGMMA_D4(15)

// wgmma.mma_async.sync.aligned.m64n128k16.f32.{f16,bf16}: D[64 x 128] (+)= A[64 x 16] B[16 x 128],
// A from registers (the mma.sync m16n8k16 A fragment of the warp's 16 rows, as the m64n64 form),
// B from shared memory, K-major (kTransB 0) or N-major (1); scale_d 0: D = A B.
#define MLA_WGMMA_M64N128_RS(TY)                                                                   \
    asm volatile(                                                                                  \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                               \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY "\n"                              \
        MLA_WGMMA_D64_REGS ",\n"                                                                   \
        "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"                                            \
        : MLA_WGMMA_D64_OUTS                                                                       \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(scale_d), "n"(kTransB))
template <bool kF16, int kTransB>
__device__ __forceinline__ void wgmma_m64n128k16_rs(float (&d)[16][4], const unsigned (&a)[4],
                                                   unsigned long long b_desc, int scale_d) {
#if MLA_WGMMA_ENABLED
    if constexpr (kF16)
        MLA_WGMMA_M64N128_RS("f16");
    else
        MLA_WGMMA_M64N128_RS("bf16");
#else
    __trap();
#endif
}
#undef MLA_WGMMA_M64N128_RS

// setmaxnreg.{inc,dec}.sync.aligned.u32 N: the executing warpgroup's per-thread register budget
// raised (waiting for registers the other warpgroups release) or lowered to N (24..256, a
// multiple of 8). Every warp of the warpgroup executes it. sm_90a only: elsewhere a no-op.
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
#if MLA_WGMMA_ENABLED
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
#if MLA_WGMMA_ENABLED
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}

#undef MLA_WGMMA_D4
#undef MLA_WGMMA_D16_REGS
#undef MLA_WGMMA_D16_OUTS
#undef MLA_WGMMA_D32_REGS
#undef MLA_WGMMA_D32_OUTS
#undef MLA_WGMMA_D128_REGS
#undef MLA_WGMMA_D128_OUTS
#undef MLA_WGMMA_D64_REGS
#undef MLA_WGMMA_D64_OUTS

}  // namespace mla
