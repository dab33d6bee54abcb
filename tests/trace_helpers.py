"""What the tracer's tests (tests/trace/) share: the normalisation they use, the tolerance
of the engine's resize against torchvision + PIL, torchvision's evaluation pipeline, the
`file:line` a fallback's reason names, and batches compared with torch's."""

from __future__ import annotations

import inspect
import os

import pytest
import torch

from fastload import _ext

needs_ops = pytest.mark.skipif(not _ext.has_ops(), reason="fastload._C is not built")

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
# Native vs torchvision + PIL, same crop: two uint8 levels of resize rounding (values in
# [0, 1] after ToTensor), and the same through Normalize's 1/std (as tests/test_hybrid.py).
RESIZE_ATOL = 2.5 / 255
EVAL_ATOL = RESIZE_ATOL / min(STD)


def eval_v1():
    """torchvision's (v1) evaluation pipeline at 32 x 32, normalised."""
    from torchvision import transforms as T

    return T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor(), T.Normalize(MEAN, STD)])


def line_of(function, text):
    """`file:line` of the first line of `function` that contains `text` (the file by its
    name, as a fallback's reason names the user's line)."""
    lines, first = inspect.getsourcelines(function)
    here = os.path.basename(inspect.getsourcefile(function))
    return f"{here}:{first + next(k for k, line in enumerate(lines) if text in line)}"


def assert_same_batches(ours, theirs, *, atol=None):
    """(images, labels) batches: as many, the same dtypes, shapes and labels; the images
    equal within `atol` (None: not compared)."""
    assert len(ours) == len(theirs)
    for (images, labels), (want_images, want_labels) in zip(ours, theirs):
        assert (images.dtype, images.shape) == (want_images.dtype, want_images.shape)
        assert labels.dtype == want_labels.dtype and torch.equal(labels, want_labels)
        if atol is not None:
            assert torch.allclose(images.float(), want_images.float(), atol=atol), \
                (images.float() - want_images.float()).abs().max()


def assert_same_structure(ours, theirs):
    """The same nesting of dicts (same keys, in order), lists and tuples, with tensors of
    the same dtypes and shapes at the leaves."""
    assert type(ours) is type(theirs), (type(ours), type(theirs))
    if isinstance(theirs, dict):
        assert list(ours) == list(theirs)
        for key in theirs:
            assert_same_structure(ours[key], theirs[key])
    elif isinstance(theirs, (list, tuple)):
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            assert_same_structure(a, b)
    else:
        assert isinstance(theirs, torch.Tensor)
        assert (ours.dtype, ours.shape) == (theirs.dtype, theirs.shape)
