"""What the loader may ask of one kind of dataset: the `Adapter` protocol.

The loader never names a library. It asks `fastload.adapters.adapter_for(dataset)` once
and calls the answer's methods; each kind of dataset (torchvision folders, fastload's own
datasets, a webdataset pipeline, a Hugging Face dataset, a class of the user's own run
under the tracer) is one `Adapter` in `fastload/adapters/registry.py`, and every one
returns the same `fastload.compat.conversion.Analysis`.

Example:
    >>> class Numbers(Adapter):
    ...     name = "numbers"
    ...     def claims(self, dataset): return isinstance(dataset, range)
    ...     def analyse(self, dataset, *, wrapped): return Analysis("range").refuse("no images")
    >>> Numbers().claims(range(3)), Numbers().analyse(range(3), wrapped=False).reasons
    (True, ['no images'])
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

from fastload.compat.conversion import Analysis


class Adopted(NamedTuple):
    """A dataset the loader runs in place of the user's (an iterable pipeline seen as a
    map-style view of its shards), with the batching arguments that come with it."""

    dataset: Any
    batch_size: Optional[int]
    shuffle: Optional[bool]
    drop_last: bool


class Adapter:
    """One kind of dataset. Subclasses set `name` and override what applies to them.

    The methods are cheap to call on a dataset of another kind (`claims` first): an
    adapter of an optional package looks its classes up in `sys.modules`, so no package
    is imported to find out that an object is not one of its classes.
    """

    name = "dataset"
    # Rows always go through the loader's collate probe (fastload.trace.collate), even
    # with torch's default collate_fn: they may keep objects default_collate refuses.
    rows_through_collate = False

    def claims(self, dataset: Any) -> bool:
        """This adapter is the one for `dataset`."""
        return False

    def analyse(self, dataset: Any, *, wrapped: bool) -> Analysis:
        """What the dataset is: its index and pipeline, or every reason it has none.
        `wrapped`: it sits inside a Subset or ConcatDataset."""
        raise NotImplementedError

    def adopt(self, dataset: Any, *, batch_size: Optional[int], shuffle: Optional[bool], drop_last: bool,
              on_error: str, accelerate: Any, distributed: Any) -> Optional[Adopted]:
        """Before torch's checks run: a dataset to run instead of `dataset`, or None."""
        return None

    def for_ranks(self, dataset: Any, distributed: Any) -> Any:
        """The dataset each DDP rank iterates (an iterable dataset split between the
        ranks as fastload splits a map-style one), or `dataset` itself."""
        return dataset

    def generic_reason(self, dataset: Any) -> Optional[str]:
        """"generic: <why>" for an iterable dataset of this kind the engine does not run."""
        return None
