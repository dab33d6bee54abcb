"""fastload: fast, drop-in input pipelines for PyTorch.

Example:
    >>> import torch
    >>> from fastload import DataLoader
    >>> loader = DataLoader(torch.utils.data.TensorDataset(torch.arange(10)), batch_size=4)
    >>> [batch[0].tolist() for batch in loader]
    [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
"""

from __future__ import annotations

__version__ = "0.1.0"

from fastload.loader import DataLoader

__all__ = ["DataLoader", "__version__"]
