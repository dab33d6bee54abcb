// Four uint8 values a step as floats, for the whole-image ops of the uint8 stage
// (autoaugment_cpu.cpp, augmix_cpu.cpp): GCC vector types (SSE2 lanes in the baseline
// build), products rounded where they are made (host_opaque, as color.h's mul_rn) so that
// no build fuses them into the add after them.
#pragma once

#include <cstdint>

#include "../host_device.h"

namespace fastload::augment {

using Float4 = float __attribute__((vector_size(16)));
using Int4 = int32_t __attribute__((vector_size(16)));

// The float of every byte value.
struct ByteFloats {
  float value[256];
  constexpr ByteFloats() : value() {
    for (int v = 0; v < 256; ++v) value[v] = static_cast<float>(v);
  }
};
constexpr ByteFloats kByteFloats{};
constexpr const float* kByteFloat = kByteFloats.value;

// Bytes become floats through the table: cvtsi2ss would chain every value to the last
// one's register.
inline Float4 load4(const uint8_t* p) {
  return Float4{kByteFloat[p[0]], kByteFloat[p[1]], kByteFloat[p[2]], kByteFloat[p[3]]};
}

inline Float4 mul4(Float4 a, Float4 b) { return host_opaque(a * b); }

inline Float4 at4(const float* p) {  // four floats, unaligned
  Float4 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace fastload::augment
