"""One rank of an Accelerate job under torchrun (gloo, CPU), started by
tests/test_frameworks.py: `torchrun --nproc_per_node 2 -m fastload run accelerate_ranks.py
ROOT OUT`.

`python -m fastload run` patched torch's DataLoader, so accelerator.prepare builds its
DataLoaderShard over fastload's loader. The rank runs, over the same dataset and seeds, three times: "torch" (fastload.unpatch()
first: prepare over torch's own DataLoader), "prepared" (still unpatched: prepare given a
fastload.DataLoader) and "fastload" (patched: the script's torch.utils.data.DataLoader is
fastload's): two epochs, then
save_state after STEPS steps of epoch 1, a fresh prepare, load_state and
accelerator.skip_first_batches: the rest of epoch 1. Per step it records this rank's
labels and gather_for_metrics of them; rank 0 writes everything to OUT as JSON.
"""

import json
import sys

import torch

import fastload
import fastload.patch
from fastload import ops

from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration, set_seed

STEPS = 1  # steps of epoch 1 before save_state
BATCH = 2


def make_loader(root, loader_class):
    dataset = fastload.ImageFolder(root, ops=[ops.Resize((24, 32)), ops.Normalize((0.5,) * 3, (0.5,) * 3)])
    set_seed(0)  # the sampler's generator is seeded from the global RNG at prepare
    return loader_class(dataset, batch_size=BATCH, shuffle=True)


def epoch(accelerator, loader, number, stop=None):
    loader.set_epoch(number)
    steps = []
    for step, (images, labels) in enumerate(loader):
        if stop is not None and step == stop:
            break
        gathered = accelerator.gather_for_metrics(labels)
        steps.append({"labels": labels.tolist(), "gathered": gathered.tolist(),
                      "images": float(images.double().sum())})
    return steps


def run(accelerator, root, out, loader_class):
    """Two epochs, then a resume of epoch 1 after STEPS steps from a saved state."""
    result = {}
    loader = accelerator.prepare(make_loader(root, loader_class))
    result["base"] = type(loader.base_dataloader).__name__
    result["path"] = getattr(loader.base_dataloader, "path", None)
    result["epochs"] = [epoch(accelerator, loader, e) for e in range(2)]

    interrupted = accelerator.prepare(make_loader(root, loader_class))
    epoch(accelerator, interrupted, 0)
    epoch(accelerator, interrupted, 1, stop=STEPS)
    accelerator.save_state(out)
    fresh = accelerator.prepare(make_loader(root, loader_class))  # as a new process would
    accelerator.load_state(out)
    fresh.set_epoch(1)
    skipped = accelerator.skip_first_batches(fresh, STEPS)
    result["resume_base"] = type(skipped.base_dataloader).__name__
    result["resume_path"] = getattr(skipped.base_dataloader, "path", None)
    result["resume"] = epoch(accelerator, skipped, 1)
    return result


def main():
    root, out = sys.argv[1], sys.argv[2]
    # A seedable sampler: each epoch's shuffle is a function of (seed, epoch), so that a
    # resumed epoch is the one that was interrupted (Accelerate's own resume recipe).
    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True))
    fastload.patch.unpatch()
    torch_class = torch.utils.data.DataLoader
    result = {"world": accelerator.num_processes, "torch": run(accelerator, root, out + ".torch", torch_class)}
    # A fastload loader given to prepare() without the patch.
    result["prepared"] = run(accelerator, root, out + ".prepared", fastload.DataLoader)
    fastload.patch()
    result["fastload"] = run(accelerator, root, out + ".fastload", torch.utils.data.DataLoader)
    if accelerator.is_main_process:
        with open(out, "w") as f:
            json.dump(result, f)
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main()
