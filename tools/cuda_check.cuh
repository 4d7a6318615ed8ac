// CK(x): the standalone device tools' check of a CUDA runtime call (tools/*.cu, built by hand with
// nvcc, not by CMake): on an error, prints the call, its line and the error's text and exits 1.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            printf("CUDA %s at %d: %s\n", #x, __LINE__, cudaGetErrorString(e_));                \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)
