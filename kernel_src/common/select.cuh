// Branch-free selects (PTX setp + selp.f32). The compiler turns a C ternary whose operands are
// computed only for it into a branch with a reconvergence point (BSSY/BSYNC in the SASS); these
// wrappers take both values already computed and select in one instruction, for per-element code
// whose lanes would otherwise diverge.
#pragma once

namespace mla {

// x < y ? a : b (false when x or y is NaN), setp.lt.f32 + selp.f32.
__device__ __forceinline__ float select_lt(float x, float y, float a, float b) {
    float r;
    asm("{\n\t.reg .pred p;\n\tsetp.lt.f32 p, %1, %2;\n\tselp.f32 %0, %3, %4, p;\n\t}"
        : "=f"(r)
        : "f"(x), "f"(y), "f"(a), "f"(b));
    return r;
}

// x != y ? a : b (true when x or y is NaN), setp.neu.f32 + selp.f32.
__device__ __forceinline__ float select_ne(float x, float y, float a, float b) {
    float r;
    asm("{\n\t.reg .pred p;\n\tsetp.neu.f32 p, %1, %2;\n\tselp.f32 %0, %3, %4, p;\n\t}"
        : "=f"(r)
        : "f"(x), "f"(y), "f"(a), "f"(b));
    return r;
}

}  // namespace mla
