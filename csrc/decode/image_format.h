// What format a file's bytes are in, from its signature: the one place that knows each
// format's magic bytes (the engine's decode dispatch, the decoders' "not a JPEG / PNG"
// messages).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace fastload {

enum class ImageFormat : int { kUnknown = 0, kJpeg = 1, kPng = 2 };

// JPEG: an SOI marker and another marker (FF D8 FF).
bool is_jpeg(const uint8_t* data, size_t size);

// PNG: the 8-byte signature 89 50 4E 47 0D 0A 1A 0A.
bool is_png(const uint8_t* data, size_t size);

// kJpeg, kPng, or kUnknown (any other format, or too few bytes to tell).
ImageFormat sniff_format(const uint8_t* data, size_t size);

// "N bytes starting with 89 50 4E 47 (a PNG file)": the size, the first 4 bytes in hex
// and the format they look like (PNG, JPEG, GIF, WebP, BMP), for "expected X, got ..."
// messages.
std::string describe_prefix(const uint8_t* data, size_t size);

}  // namespace fastload
