// The AVX2 + FMA build of the float resample's row loops (resample_float_cpu_impl.h).
#include "augment/simd_cpu.h"

#if defined(FASTLOAD_HAVE_AVX2_PATH)
#define FASTLOAD_ISA_AVX2 1
#include "augment/resample_float_cpu_impl.h"
#endif
