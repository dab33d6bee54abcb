"""Decode stage: JPEG in C++ (libjpeg-turbo, fastload.ops.decode_jpeg), other formats
through PIL (pillow or pillow-simd), one error type (fastload.DecodeError)."""
