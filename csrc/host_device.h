// FASTLOAD_HD marks per-pixel math shared by the CPU and CUDA kernels, so that the CPU
// test suite checks the very functions the GPU runs.
#pragma once

#if defined(__CUDACC__)
#define FASTLOAD_HD __host__ __device__ __forceinline__
#define FASTLOAD_HD_INLINE __host__ __device__ __forceinline__
#elif defined(__GNUC__)
#define FASTLOAD_HD inline
// The tiny helpers of the kernels' per-pixel loops, always inlined on the host as on the
// device: inside a large kernel function g++'s inliner stops at its growth limits and
// leaves them as calls, three per pixel for a blend.
#define FASTLOAD_HD_INLINE inline __attribute__((always_inline))
#else
#define FASTLOAD_HD inline
#define FASTLOAD_HD_INLINE inline
#endif
