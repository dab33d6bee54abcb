// The AVX2 + FMA build of the passes of Pillow's 8-bit resample (resample_pil_cpu_impl.h).
#include "augment/simd_cpu.h"

#if defined(FASTLOAD_HAVE_AVX2_PATH)
#define FASTLOAD_ISA_AVX2 1
#include "augment/resample_pil_cpu_impl.h"
#endif
