"""nvJPEG orchestration for decode_on="gpu": bytes in, whole decoded images on the device out.

One batch: the engine reads every sample's bytes (C++, GIL released), Python sniffs which
are JPEGs, nvJPEG decodes those in one batched call, and whatever nvJPEG rejects is
decoded by libjpeg-turbo on the CPU (counted as gpu_cpu_fallback). PNGs, which nvJPEG does
not read, are decoded by the native PNG decoder on the CPU (counted there too) where the
build has one. A sample that neither decodes gets a per-sample status and message; the
runner's repair step handles it.

Example (the CPU decoder standing in for nvJPEG, as the tests do):
    >>> import torch
    >>> from fastload.decode.nvjpeg import NvjpegDecoder, looks_like_jpeg
    >>> looks_like_jpeg(torch.tensor([0xFF, 0xD8, 0xFF, 0xE0], dtype=torch.uint8))
    True
    >>> def read(samples):  # BatchEngine.read_samples: (bytes, error) per sample
    ...     return [torch.tensor([1, 2, 3], dtype=torch.uint8), torch.empty(0, dtype=torch.uint8)], ["", "no file"]
    >>> decoder = NvjpegDecoder(read, channels=3, max_pixels=1 << 20, device="cpu")
    >>> status, messages, images, cpu_fallbacks = decoder.decode(torch.tensor([0, 1]))
    >>> status.tolist(), messages, images, cpu_fallbacks
    ([2, 3], ['', 'no file'], [None, None], 0)
"""

from __future__ import annotations

import functools
from typing import Callable, List, Optional, Sequence, Tuple

import torch

from fastload import _contract as contract
from fastload import _ext
from fastload.decode.header import PNG_SIGNATURE


def looks_like_jpeg(data: torch.Tensor) -> bool:
    """True when uint8 `data` starts like a JPEG file (SOI, then a marker)."""
    return data.numel() >= 3 and data[:3].tolist() == [0xFF, 0xD8, 0xFF]


def looks_like_png(data: torch.Tensor) -> bool:
    """True when uint8 `data` starts with the PNG signature (header.PNG_SIGNATURE)."""
    return data.numel() >= len(PNG_SIGNATURE) and bytes(data[:len(PNG_SIGNATURE)].tolist()) == PNG_SIGNATURE


def nvjpeg_decode(datas: List[torch.Tensor], channels: int, device: torch.device, max_pixels: int
                  ) -> Tuple[List[torch.Tensor], torch.Tensor]:
    """(uint8 [H, W, channels] images on `device`, cpu_fallback bool [N]); raises
    RuntimeError when a sample is undecodable or over `max_pixels`."""
    from fastload import _ops as ops

    return ops.decode_jpeg_cuda(datas, channels, device, max_pixels=max_pixels)


class NvjpegDecoder:
    """Reads and decodes the samples of one batch to whole images on `device`.

    Args:
        read_samples: BatchEngine.read_samples: samples -> (bytes per sample, error per
            sample, "" when read).
        channels: 3 (RGB) or 1 (grayscale).
        max_pixels: the plan's decompression-bomb limit.
        device: where the images are decoded.

    Attributes:
        batch_decode: the batched decode, `(datas, channels, device) -> (images,
            cpu_fallback bool [N])`, raising RuntimeError when some sample does not
            decode; nvJPEG by default. Tests substitute a CPU decoder to check the rest
            of the GPU mode on a CPU.
    """

    def __init__(self, read_samples: Callable[[torch.Tensor], Tuple[Sequence[torch.Tensor], Sequence[str]]], *,
                 channels: int, max_pixels: int, device: torch.device):
        self._read = read_samples
        self.channels = channels
        self.max_pixels = max_pixels
        self.device = torch.device(device)
        self.batch_decode: Callable = functools.partial(nvjpeg_decode, max_pixels=max_pixels)

    def decode(self, samples: torch.Tensor) -> Tuple[torch.Tensor, List[str], List[Optional[torch.Tensor]], int]:
        """(status int32 [N], messages, images (None where status says why), number of
        images the CPU decoded because nvJPEG rejected them)."""
        from fastload import _ops as ops

        datas, errors = self._read(samples)
        status = torch.zeros(len(samples), dtype=torch.int32)
        messages = list(errors)
        decodable, pngs = [], []
        for slot, (data, error) in enumerate(zip(datas, errors)):
            if error:
                status[slot] = contract.READ_ERROR
            elif looks_like_jpeg(data):
                decodable.append(slot)
            elif looks_like_png(data) and _ext.has_png():
                pngs.append(slot)
            else:
                status[slot] = contract.NOT_JPEG
        images: List[Optional[torch.Tensor]] = [None] * len(samples)
        cpu_fallbacks = 0
        for slot in pngs:  # whole images, like nvJPEG's; "L" is PIL's convert("L"), as the PIL fallback's
            try:
                images[slot] = ops.decode_png(datas[slot], mode="RGB" if self.channels == 3 else "L",
                                              max_pixels=self.max_pixels).to(self.device)
                cpu_fallbacks += 1
            except RuntimeError as error:
                status[slot], messages[slot] = contract.DECODE_ERROR, str(error)
        if not decodable:
            return status, messages, images, cpu_fallbacks
        try:
            decoded, cpu_fallback = self.batch_decode([datas[s] for s in decodable], self.channels, self.device)
            cpu_fallbacks += int(cpu_fallback.sum())
            for slot, image in zip(decodable, decoded):
                images[slot] = image
        except RuntimeError:
            # Some sample neither nvJPEG nor libjpeg decodes: find which, one by one on the
            # CPU; the error policy then handles those slots.
            for slot in decodable:
                try:
                    images[slot] = ops.decode_jpeg(datas[slot], channels=self.channels,
                                                   max_pixels=self.max_pixels).to(self.device)
                    cpu_fallbacks += 1
                except RuntimeError as error:
                    status[slot], messages[slot] = contract.DECODE_ERROR, str(error)
        return status, messages, images, cpu_fallbacks
