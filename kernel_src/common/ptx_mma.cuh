// Warp-level tensor-core and async-copy PTX, wrapped once (portable: sm_80 and later, including
// sm_90a and sm_100a): mma.sync m16n8k16 bf16, ldmatrix (plain and .trans), cp.async with
// zero fill.
//
// Fragments of mma.m16n8k16 (g = lane / 4, c = lane % 4):
//   A (16 x 16, row major): a0 (g, 2c..2c+1), a1 (g+8, 2c..), a2 (g, 2c+8..), a3 (g+8, 2c+8..)
//   B (16 x 8, k x n):      b0 (k 2c..2c+1, n g), b1 (k 2c+8..2c+9, n g)
//   C (16 x 8, fp32):       c0, c1 (g, 2c..2c+1), c2, c3 (g+8, 2c..2c+1)
#pragma once

namespace mla {

__device__ __forceinline__ unsigned smem_addr(const void *p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// ldmatrix.sync.aligned.m8n8.x4.shared.b16: lanes 8j..8j+7 give the row addresses of matrix j.
__device__ __forceinline__ void ldmatrix_x4(unsigned r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

// ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: c += a * b.
__device__ __forceinline__ void mma_bf16_16816(float c[4], const unsigned a[4], unsigned b0,
                                               unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// cp.async.cg.shared.global 16 bytes (L2 only); zero-fills the destination when !valid.
__device__ __forceinline__ void cp_async_16(void *dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0) : "memory");
}

// cp.async.ca.shared.global of 8 or 4 bytes; zero-fills when !valid.
__device__ __forceinline__ void cp_async_8(void *dst, const void *src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;"
                 ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 8 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_4(void *dst, const void *src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;"
                 ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 4 : 0) : "memory");
}

// cp.async.commit_group / cp.async.wait_group n
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int n>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(n) : "memory");
}

}  // namespace mla
