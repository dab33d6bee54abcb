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
    >>> analysis.trace.mask_table.path(2) == os.path.join(root, "2.png")
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


class MaskTable:
    """The engine's mask file per sample: `index`, a SampleIndex over a TracedFiles filled
    in place (an untraced sample reads `first`, entry 0, as its image reads the image's).

    Args:
        n: the number of samples.
        capacity: path bytes reserved up front (grown when exceeded).
        first: the mask file an untraced sample points at.
    """

    def __init__(self, n: int, capacity: int, first: str):
        self.first = first
        self.files = TracedFiles(capacity, n + 2)
        zeros = np.zeros(n, dtype=np.int64)
        self.index = SampleIndex(self.files.strings, zeros, zeros.copy(), np.full(n, -1, dtype=np.int64),
                                 zeros.copy())
        self.files.add(first)

    def reset(self) -> None:
        """Empty for a new epoch (every sample at `first` again)."""
        self.files.reset()
        self.index.file_ids[:] = 0
        self.files.add(self.first)

    def put(self, i: int, path: str) -> None:
        """Sample i's mask is the file at `path`."""
        self.index.file_ids[i] = self.files.add(path)

    def path(self, i: int) -> str:
        """Sample i's mask file (a placeholder's bytes for a sample that falls back)."""
        return self.index.files[int(self.index.file_ids[i])]

    def point_at_placeholder(self, i: int) -> None:
        """Sample i's mask made the 8x8 placeholder of the placeholder image's size (added
        once per epoch): its own __getitem__ makes the sample."""
        if self.files.placeholder_id < 0:
            self.files.placeholder_id = self.files.add(placeholder_mask())
        self.index.file_ids[i] = self.files.placeholder_id


class MaskedTrace(LazyTrace):
    """A LazyTrace whose samples also read a mask file (`first.masks`): `mask_index`, the
    engine's mask file per sample (`mask_table`), filled as indexes are traced.

    Args:
        dataset, probes: as LazyTrace's (index 0's sample has one mask).
    """

    def __init__(self, dataset: Any, probes: Probe):
        super().__init__(dataset, probes)
        longest = max(len(path.encode("utf-8", "surrogateescape")) for s in probes.samples.values()
                      for path, _ in s.masks)
        self.mask_table = MaskTable(self.n, int(self.n * longest * _PATH_SLACK) + 4096, self.first.masks[0][0])
        self.mask_index = self.mask_table.index

    def renew(self, keep: bool = False) -> bool:
        traced = self.traced
        if not super().renew(keep):
            return False
        if traced and not self.done.any():  # a new epoch: the mask table empty again, as the image's
            with self._lock:
                self.mask_table.first = self.first.masks[0][0]
                self.mask_table.reset()
        return True

    def attach(self, runner: Any, only: bool = False) -> None:
        super().attach(runner, only)
        self.mask_table.files.attach(runner, only)

    def _keep(self, i: int, sample: Any) -> None:
        super()._keep(i, sample)
        self.mask_table.put(i, sample.masks[0][0])

    def _point_at_placeholder(self, i: int) -> None:
        super()._point_at_placeholder(i)
        self.mask_table.point_at_placeholder(i)

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
