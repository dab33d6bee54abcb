"""A lazily traced segmentation dataset: the image's and the mask's file tables, filled as indexes are traced.

A dataset whose index 0 reads a mask file beside its image and passes both to one joint
transform call (fastload/trace/masks.py) runs on the engine as one image view and one
`fastload.augment.views.Mask` following its geometry (the engine's views: one decode of
the image, the mask decoded from its own file; csrc/augment/views.h). `MaskedTrace` is the
LazyTrace of such a dataset: beside the image's file table it keeps the mask's
(`mask_index`, a SampleIndex over a TracedFiles filled in place), which the runner hands
the engine with the views (fastload/native/select.py). Each traced index adds its mask
file; an index that falls back points its mask at an 8x8 placeholder of the placeholder
image's size. Batches come out in the dataset's own structure (the engine's image batch
where the image was, its mask batch where the mask was), collated as torch collates them.

Example:
    >>> import os, tempfile, torch
    >>> from PIL import Image
    >>> from torchvision import tv_tensors
    >>> from torchvision.transforms import v2
    >>> from fastload.adapters import analyse
    >>> root = tempfile.mkdtemp()
    >>> for k in range(3):
    ...     Image.new("RGB", (8, 8)).save(os.path.join(root, f"{k}.jpg"))
    ...     Image.new("L", (8, 8)).save(os.path.join(root, f"{k}.png"))
    >>> class Pairs(torch.utils.data.Dataset):
    ...     def __init__(self, transforms): self.transforms = transforms
    ...     def __len__(self): return 3
    ...     def __getitem__(self, i):
    ...         image = Image.open(os.path.join(root, f"{i}.jpg")).convert("RGB")
    ...         mask = tv_tensors.Mask(Image.open(os.path.join(root, f"{i}.png")))
    ...         return self.transforms(image, mask)
    >>> pairs = Pairs(v2.Compose([v2.CenterCrop(4), v2.ToImage()]))
    >>> analysis = analyse(pairs)
    >>> analysis.trace.prepare([2])
    >>> analysis.trace.mask_index.files[int(analysis.trace.mask_index.file_ids[2])] == os.path.join(root, "2.png")
    True
    >>> analysis.outputs.masks
    (Mask(follows=0, fill=0, dtype=torch.uint8, sampling='tensor', channel_dim=True),)
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from fastload.compat.conversion import Analysis
from fastload.source.index import SampleIndex
from fastload.trace.files import TracedFiles
from fastload.trace.lazy import LazyTrace
from fastload.trace.placeholder import placeholder_mask
from fastload.trace.probes import Probe

# Path bytes reserved per sample beyond the probes' longest mask path (grown when exceeded).
_PATH_SLACK = 1.25


class MaskedTrace(LazyTrace):
    """A LazyTrace whose samples also read a mask file (`first.masks`): `mask_index`, the
    engine's mask file per sample, filled as indexes are traced.

    Args:
        dataset, probes: as LazyTrace's (index 0's sample has one mask).
    """

    def __init__(self, dataset: Any, probes: Probe):
        super().__init__(dataset, probes)
        n = self.n
        longest = max(len(path.encode("utf-8", "surrogateescape")) for s in probes.samples.values()
                      for path, _ in s.masks)
        self.mask_files = TracedFiles(int(n * longest * _PATH_SLACK) + 4096, n + 2)
        zeros = np.zeros(n, dtype=np.int64)
        self.mask_index = SampleIndex(self.mask_files.strings, zeros, zeros.copy(), np.full(n, -1, dtype=np.int64),
                                      zeros.copy())
        self.mask_files.add(self.first.masks[0][0])  # (what an untraced index reads, as its image is file 0)

    def renew(self, keep: bool = False) -> bool:
        traced = self.traced
        if not super().renew(keep):
            return False
        if traced and not self.done.any():  # a new epoch: the mask table empty again, as the image's
            with self._lock:
                self.mask_files.reset()
                self.mask_index.file_ids[:] = 0
                self.mask_files.add(self.first.masks[0][0])
        return True

    def attach(self, runner: Any, only: bool = False) -> None:
        super().attach(runner, only)
        self.mask_files.attach(runner, only)

    def _keep(self, i: int, sample: Any) -> None:
        super()._keep(i, sample)
        self.mask_index.file_ids[i] = self.mask_files.add(sample.masks[0][0])

    def _point_at_placeholder(self, i: int) -> None:
        super()._point_at_placeholder(i)
        if self.mask_files.placeholder_id < 0:
            self.mask_files.placeholder_id = self.mask_files.add(placeholder_mask())
        self.mask_index.file_ids[i] = self.mask_files.placeholder_id

    def export(self, indices: Any) -> Any:
        raise NotImplementedError("fastload: a traced dataset with masks runs fully natively (no worker processes)")

    adopt = export


def masks_not_native(trace: MaskedTrace, out: Analysis) -> Optional[str]:
    """Why a traced dataset with a mask cannot run on the engine, or None with
    `out.outputs` set (one image view, its mask): the joint transform's image part must
    be fully native (no Python tail: the mask takes the engine's geometry)."""
    from fastload.augment.views import Outputs

    if out.pipeline.tail:
        return (f"passes the image and its mask to {type(trace.first.transform).__name__}, whose image transforms "
                f"are not all native ({'; '.join(out.pipeline.blockers)}), and the mask takes the engine's geometry")
    out.outputs = Outputs.of_views([list(out.pipeline.native)], [mask for _, mask in trace.first.masks])
    return None
