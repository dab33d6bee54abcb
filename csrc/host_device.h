// FASTLOAD_HD marks per-pixel math shared by the CPU and CUDA kernels, so that the CPU
// test suite checks the very functions the GPU runs.
#pragma once

#if defined(__CUDACC__)
#define FASTLOAD_HD __host__ __device__ __forceinline__
#else
#define FASTLOAD_HD inline
#endif
