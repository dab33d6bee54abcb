"""Decode stage: JPEG in C++ (libjpeg-turbo, fastload.ops.decode_jpeg; nvJPEG for
decode_on="gpu", orchestrated by nvjpeg.py), other formats through PIL (pil.py, pillow or
pillow-simd), headers read without decoding (header.py: size, mode, EXIF orientation), one
error type (fastload.DecodeError). See README.md."""
