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

// A value the host optimiser must take as it is: an empty asm that "may change" it, at
// no run-time cost. Keeps a rounded product from being fused into the add that follows
// it: g++ narrows (float)((double)a * (double)b) to a * b, which is exact, and then
// contracts a * b + c into one FMA wherever the target has one (-ffp-contract=fast, its
// default). Where no register constraint is known, a volatile round trip does the same.
template <typename T>
inline __attribute__((always_inline)) T host_opaque(T v) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  asm("" : "+x"(v));
#elif defined(__GNUC__) && defined(__aarch64__)
  asm("" : "+w"(v));
#else
  volatile T stored = v;
  v = stored;
#endif
  return v;
}
