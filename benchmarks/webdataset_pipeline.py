"""A webdataset pipeline as users write it, through torch's DataLoader and through
fastload.DataLoader (one changed import): img/s per epoch, in the same run.

    python benchmarks/webdataset_pipeline.py "shards/train-{0000..0007}.tar" torch
    python benchmarks/webdataset_pipeline.py "shards/train-{0000..0007}.tar" fastload

(`fastload-bench --contenders webdataset,webdataset-webloader,fastload-webdataset` makes
such shards of its generated images under fastload's cache.) Each loader runs in its own
process (run the two commands in turn, twice, and compare like epochs).
"""

import sys
import time
import warnings

import torch
import webdataset as wds
from torchvision.transforms import v2

import fastload


def main() -> None:
    urls, which = sys.argv[1], sys.argv[2]
    warnings.simplefilter("ignore")  # webdataset's shardshuffle=True advice
    transform = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(), v2.ToImage(),
                            v2.ToDtype(torch.float32, scale=True),
                            v2.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
    ds = (wds.WebDataset(urls, shardshuffle=True, nodesplitter=wds.split_by_node)
          .shuffle(1000).decode("pil").to_tuple("jpg", "cls").map_tuple(transform, int))
    loader_class = fastload.DataLoader if which == "fastload" else torch.utils.data.DataLoader
    loader = loader_class(ds, batch_size=64, num_workers=2, persistent_workers=True)
    print(which, getattr(loader, "path", "torch's DataLoader"))
    for epoch in range(3):
        start, n = time.perf_counter(), 0
        for _, labels in loader:
            n += len(labels)
        seconds = time.perf_counter() - start
        print(f"{which} epoch {epoch}: {n} images, {n / seconds:.0f} img/s, {seconds:.1f} s")


if __name__ == "__main__":
    main()
