"""fastload in place of torch's DataLoader: a global swap of the name never recurses (the
generic path builds on torch's own class, kept at import)."""

import subprocess
import sys

import pytest
import torch
import torch.utils.data

import fastload
from fastload.generic import TorchDataLoader
from loader_datasets import Squares

TORCH_CLASS = torch.utils.data.dataloader.DataLoader


@pytest.fixture
def swapped():
    """torch.utils.data.DataLoader (both names) bound to fastload's class, as a user may do."""
    saved = torch.utils.data.DataLoader, torch.utils.data.dataloader.DataLoader
    torch.utils.data.DataLoader = torch.utils.data.dataloader.DataLoader = fastload.DataLoader
    try:
        yield
    finally:
        torch.utils.data.DataLoader, torch.utils.data.dataloader.DataLoader = saved


def test_fastload_keeps_torchs_own_class():
    assert TorchDataLoader is TORCH_CLASS and fastload.DataLoader.__bases__[0] is TORCH_CLASS


@pytest.mark.parametrize("num_workers", [0, 1])
def test_a_global_swap_does_not_recurse(swapped, num_workers):
    loader = torch.utils.data.DataLoader(Squares(5), batch_size=2, num_workers=num_workers)
    assert type(loader) is fastload.DataLoader and loader.path.startswith("generic: ")
    assert [b[1].tolist() for b in loader] == [[0, 1], [2, 0], [1]]
    assert type(loader._inner) is TORCH_CLASS  # the generic path's inner loader is torch's own


def test_the_class_is_found_when_the_name_was_swapped_before_fastload_loaded():
    """A process that bound the name to a subclass before importing fastload."""
    code = ("import torch.utils.data as d\n"
            "class Other(d.DataLoader): pass\n"
            "torch_class = d.DataLoader\n"
            "d.DataLoader = d.dataloader.DataLoader = Other\n"
            "import fastload.generic\n"
            "assert fastload.generic.TorchDataLoader is torch_class, fastload.generic.TorchDataLoader\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_timm_prefetcher_loader_under_a_global_swap(swapped, image_folder):
    timm_loader = pytest.importorskip("timm.data.loader", reason="timm is not installed (make setup installs it)")
    torchvision = pytest.importorskip("torchvision")
    dataset = torchvision.datasets.ImageFolder(image_folder)
    loader = timm_loader.create_loader(dataset, input_size=(3, 16, 16), batch_size=4, is_training=False,
                                       use_prefetcher=True, device=torch.device("cpu"), num_workers=0)
    assert type(loader.loader) is fastload.DataLoader
    batches = list(loader)
    assert [tuple(x.shape) for x, _ in batches] == [(4, 3, 16, 16)] * 2
    assert torch.cat([y for _, y in batches]).tolist() == dataset.targets
