// The CPU kernels' compiler macros and vector types, and how their loops are built once
// per instruction set.
//
// The row loops (resample_float_cpu_impl.h, resample_pil_cpu_impl.h,
// color_stage_cpu_impl.h) are plain C++ with GCC vector extensions, compiled twice: for
// baseline x86-64 (SSE2) in the module's own .cpp, and for AVX2 + FMA in its *_avx2.cpp,
// each build in its own namespace (`baseline`, `avx2`); crop_resize_flip_normalize_cpu.cpp
// picks one set per process (a table of their entry points). The wheel must run on any
// x86-64, so -march=native is not an option.
//
// The AVX2 translation units are not compiled with -mavx2 -mfma (torch.utils.cpp_extension
// gives every source the same flags anyway): every inline function of a shared header
// (torch's, the standard library's, the per-pixel math of this folder) that such a unit
// emits out of line would be AVX2 code, and the linker keeps one copy of each for the
// whole module, maybe that one (an illegal instruction on an older CPU); FMA contraction
// would reach the header math too. Instead an implementation file includes its headers
// first, at the baseline ISA, then opens `#pragma GCC target("avx2,fma")`
// (FASTLOAD_AVX2_BEGIN, when FASTLOAD_ISA_AVX2 is 1) around its own namespace only: what
// the loops inline from the headers is compiled for AVX2 there, as with
// `__attribute__((target))`, and nothing else is.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__GNUC__) && !defined(__INTEL_COMPILER)
#define FASTLOAD_VECTOR_EXT 1
#define FASTLOAD_INLINE __attribute__((always_inline)) inline
// On a lambda: g++ compiles a lambda it does not inline for the baseline ISA even inside
// an AVX2 function, so the per-row sinks and casts are always inlined.
#define FASTLOAD_INLINE_LAMBDA __attribute__((always_inline))
#else
#define FASTLOAD_INLINE inline
#define FASTLOAD_INLINE_LAMBDA
#endif
// g++ >= 12 and clang: the 8-float horizontal pass (assembling it through memory instead
// is 4x slower: store-forwarding stalls); older compilers take the 4-float one.
#if defined(FASTLOAD_VECTOR_EXT) && defined(__has_builtin)
#if __has_builtin(__builtin_shufflevector)
#define FASTLOAD_SHUFFLEVECTOR 1
#endif
#endif
// The loops have an AVX2 + FMA build beside the baseline one. FASTLOAD_AVX2_BEGIN /
// FASTLOAD_AVX2_END enclose the functions of that build (g++'s target pragma, clang's
// attribute push: clang ignores the former).
#if defined(__x86_64__) && defined(FASTLOAD_VECTOR_EXT)
#define FASTLOAD_HAVE_AVX2_PATH 1
#if defined(__clang__)
#define FASTLOAD_AVX2_BEGIN \
  _Pragma("clang attribute push(__attribute__((target(\"avx2,fma\"))), apply_to = function)")
#define FASTLOAD_AVX2_END _Pragma("clang attribute pop")
#else
#define FASTLOAD_AVX2_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma\")")
#define FASTLOAD_AVX2_END _Pragma("GCC pop_options")
#endif
#endif

namespace fastload::augment {

#if defined(FASTLOAD_VECTOR_EXT)
typedef float Float4 __attribute__((vector_size(16)));
typedef float Float8 __attribute__((vector_size(32)));

// A vector of lanes from p (unaligned): the float and the fixed-point passes' loads.
template <typename V, typename T>
FASTLOAD_INLINE V load_lanes(const T* p) {
  V v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
FASTLOAD_INLINE Float4 load4(const float* p) { return load_lanes<Float4>(p); }
FASTLOAD_INLINE void load8(Float8& v, const float* p) { std::memcpy(&v, p, sizeof(v)); }
#endif

}  // namespace fastload::augment
