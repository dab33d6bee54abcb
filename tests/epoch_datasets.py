"""Dataset classes of the shapes training scripts write when the loop changes the dataset
between epochs, opens handles in `__getitem__` or counts its calls (tests/trace/test_trace_epochs.py).
In an importable module so that worker processes can unpickle them."""

from __future__ import annotations

import io
import random
import zipfile

import torch
from PIL import Image
from torch.utils.data import Dataset, get_worker_info
from torchvision import transforms as T


def eval_transform(size: int) -> T.Compose:
    """Deterministic: fastload's values equal torch's within resize rounding."""
    return T.Compose([T.Resize(size + 8), T.CenterCrop(size), T.ToTensor()])


def train_transform(size: int) -> T.Compose:
    return T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor()])


class Photos(Dataset):
    """(transform(image), target) over a list of files; counts the calls it sees and logs
    the indexes it served (what torch's num_workers=0 loader makes: one per index and epoch)."""

    def __init__(self, files, transform=None):
        self.files = list(files)
        self.targets = [i % 5 for i in range(len(self.files))]
        self.transform = transform or eval_transform(24)
        self.calls, self.served = 0, []

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        self.calls += 1
        self.served.append(i)
        return self.transform(Image.open(self.files[i]).convert("RGB")), self.targets[i]


class Scale:
    """A Python transform with no native equivalent (the pipeline's tail runs it per sample);
    the loop may change its `factor` between epochs."""

    def __init__(self, factor):
        self.factor = factor

    def __call__(self, tensor):
        return tensor * self.factor


def tail_transform(scale: Scale) -> T.Compose:
    return T.Compose([T.Resize(32), T.CenterCrop(24), T.ToTensor(), scale])


class Curriculum(Photos):
    """Progressive size: `epoch` picks the transform (24 px, then 32 px)."""

    def __init__(self, files):
        super().__init__(files)
        self.epoch = 0
        self.sizes = {0: eval_transform(24), 1: eval_transform(32)}

    def __getitem__(self, i):
        image = Image.open(self.files[i]).convert("RGB")
        return self.sizes[min(self.epoch, 1)](image), self.targets[i]


class Resampled(Photos):
    """Per-epoch resampling: `resample(epoch)` draws the epoch's files from a pool."""

    def __init__(self, pool, n):
        super().__init__(pool[:n])
        self.pool, self.n = list(pool), n

    def resample(self, epoch):
        self.files = random.Random(epoch).choices(self.pool, k=self.n)


class TrainOrEval(Photos):
    """`train` picks a random or a deterministic transform (an evaluation pass with the same loader)."""

    def __init__(self, files):
        super().__init__(files)
        self.train = True
        self.train_transform, self.eval_transform = train_transform(24), eval_transform(24)

    def __getitem__(self, i):
        image = Image.open(self.files[i]).convert("RGB")
        return (self.train_transform if self.train else self.eval_transform)(image), self.targets[i]


class Zipped(Photos):
    """Opens its zip file lazily, on the first __getitem__ call in each process (the idiom
    that lets each worker open a handle of its own)."""

    def __init__(self, files, archive):
        super().__init__(files)
        self.archive, self.zf = archive, None

    def read(self, name):
        if self.zf is None:
            self.zf = zipfile.ZipFile(self.archive)
        return self.zf.read(name)


class ZippedLabels(Zipped):
    """The label from the zip; the image by path."""

    def __getitem__(self, i):
        label = int(self.read(f"label_{i}.txt"))
        return self.transform(Image.open(self.files[i]).convert("RGB")), label


class ZippedImages(Zipped):
    """The image decoded from a zip member (not a file on disk)."""

    def __getitem__(self, i):
        data = self.read(f"image_{i}.jpg")
        return self.transform(Image.open(io.BytesIO(data)).convert("RGB")), self.targets[i]


def image_files(root):
    """The JPEG files of an ImageFolder tree, sorted as ImageFolder sorts them."""
    import glob
    import os

    return sorted(glob.glob(os.path.join(root, "**", "*.jpg"), recursive=True))


def write_archive(path, files):
    """A zip of image_<i>.jpg (the files' bytes) and label_<i>.txt (i % 7)."""
    with zipfile.ZipFile(path, "w") as zf:
        for i, name in enumerate(files):
            with open(name, "rb") as f:
                zf.writestr(f"image_{i}.jpg", f.read())
            zf.writestr(f"label_{i}.txt", str(i % 7))


class WaitsForWorkers(Dataset):
    """Not images: each call waits until every worker process made one (torch's own
    DataLoader tests' SynchronizedSeedDataset) and returns the worker's seed."""

    def __init__(self, size, num_workers, context):
        self.count = context.Value("i", 0, lock=True)
        self.barrier = context.Semaphore(0)
        self.num_workers, self.size = num_workers, size

    def __len__(self):
        return self.size

    def __getitem__(self, i):
        with self.count.get_lock():
            self.count.value += 1
            if self.count.value == self.num_workers:
                self.barrier.release()
        self.barrier.acquire()
        self.barrier.release()
        return torch.initial_seed()


class Crashes(Dataset):
    """torch's own DataLoader tests' SegfaultDataset: __getitem__ kills its process."""

    def __init__(self, size, how):
        self.size, self.how = size, how

    def __len__(self):
        return self.size

    def __getitem__(self, i):
        import ctypes
        import os

        if self.how == "segfault":
            return ctypes.string_at(0)
        os._exit(3)


class NeedsWorkerInfo(Photos):
    """Picks its transform by worker: fails outside a worker process, as torch's would."""

    def __getitem__(self, i):
        info = get_worker_info()
        assert info is not None, "called outside a worker process"
        return super().__getitem__(i)


class OddSizes(Photos):
    """Index 13's transform makes another size: no loader can stack it with the others
    (13 is not among the tracer's probes of 18 samples, so the dataset runs natively)."""

    def __init__(self, files):
        super().__init__(files)
        self.other = eval_transform(16)

    def __getitem__(self, i):
        image = Image.open(self.files[i]).convert("RGB")
        return (self.other if i == 13 else self.transform)(image), self.targets[i]


class EveryOtherFallsBack(Photos):
    """Odd indexes draw from Python's generator outside the transforms: each of them is
    made by its own __getitem__, the even ones by the engine. 31 samples over the files:
    the tracer's probes (16 spread over 0..30) are all even, so the dataset runs natively."""

    def __init__(self, files, n=31):
        super().__init__([files[i % len(files)] for i in range(n)])

    def __getitem__(self, i):
        if i % 2 and random.random() < 2:
            return super().__getitem__(i)
        return super().__getitem__(i)
