"""Shared test configuration: tests/ on sys.path for the helper modules, and the `cuda`
mark skipped where no GPU is visible (GPU tests run in scripts/gpu_check.sh)."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run scripts/gpu_check.sh on one)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
