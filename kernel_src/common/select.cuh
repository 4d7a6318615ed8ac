// Branch-free select (PTX setp + selp.f32). The compiler turns a C ternary whose operands are
// computed only for it into a branch with a reconvergence point (BSSY/BSYNC in the SASS); this
// wrapper takes both values already computed and selects in one instruction, for per-element code
// whose lanes would otherwise diverge.
#pragma once

namespace mla {

// c ? a : b with a and b both evaluated.
__device__ __forceinline__ float select(bool c, float a, float b) {
    float r;
    asm("{\n\t.reg .pred p;\n\tsetp.ne.u32 p, %1, 0;\n\tselp.f32 %0, %2, %3, p;\n\t}"
        : "=f"(r)
        : "r"((unsigned)c), "f"(a), "f"(b));
    return r;
}

}  // namespace mla
