// The AVX2 + FMA build of the colour steps' row loops (color_stage_cpu_impl.h).
#include "augment/simd_cpu.h"

#if defined(FASTLOAD_HAVE_AVX2_PATH)
#define FASTLOAD_ISA_AVX2 1
#include "augment/color_stage_cpu_impl.h"
#endif
