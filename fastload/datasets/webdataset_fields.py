"""What a webdataset pipeline is read into: its fields, the `Recipe` of the native view, and `NotMapped`.

Example:
    >>> Field(("jpg", "png")).kind
    'image'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from fastload.datasets.tar import IMAGE_EXTS, PREPARED_IMAGE_EXTS

# What TarShards reads as images.
IMAGE_EXTS_READ = IMAGE_EXTS + PREPARED_IMAGE_EXTS
META_KEYS = ("__key__", "__url__", "__local_path__")
# webdataset image decodes and the torchvision transform that turns its PIL RGB image into
# the same value ("" : none, the PIL image itself).
DECODES = {"pil": "", "pilrgb": "", "torchrgb8": "PILToTensor", "torchrgb": "ToTensor", "torch": "ToTensor"}
FIX = ("use the stages fastload maps (see fastload/datasets/webdataset.py), or leave the pipeline as it is "
        "(it runs on torch's machinery)")


class NotMapped(Exception):
    """A stage, field or argument of a webdataset pipeline that fastload does not map."""


def is_pipeline(obj: Any) -> bool:
    """True for a webdataset DataPipeline (WebDataset, DataPipeline, WebLoader, FluidWrapper),
    told by its class's module: webdataset itself is never imported to find out."""
    return any(c.__module__.split(".")[0] == "webdataset" for c in type(obj).__mro__) \
        and isinstance(getattr(obj, "pipeline", None), list)


# ---- reading the stage list -------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    """One value of a sample: where it comes from and the callables applied to it."""

    source: Tuple[str, ...]  # alternatives: image extensions ("jpg", "png"), ("cls",) or a meta name
    fns: Tuple[Any, ...] = ()

    @property
    def kind(self) -> str:
        if self.source[0] in META_KEYS:
            return self.source[0]
        return "cls" if self.source == ("cls",) else "image"


@dataclass
class Recipe:
    """What a pipeline does, as fastload runs it."""

    urls: List[str]
    shuffle: bool = False
    decode: Optional[str] = None  # webdataset imagespec, or None (bytes)
    tuple_fields: Optional[List[Field]] = None  # a tuple sample; None: a dict sample
    dict_fields: Dict[str, Field] = field(default_factory=dict)  # explicit names of a dict sample
    dict_rest: bool = True  # the dict also holds every other member of the sample
    removed: set = field(default_factory=set)  # members renamed away (not in the dict any more)
    predicates: List[Tuple[Any, str, bool]] = field(default_factory=list)  # (predicate, where, after decode)
    batch: Optional[Tuple[int, bool]] = None  # (n, partial)
    epoch_items: Optional[int] = None  # with_epoch / repeat: items per process and epoch
    repeat_passes: Optional[int] = None
    stages: List[str] = field(default_factory=list)

    def fields(self) -> List[Field]:
        return list(self.tuple_fields) if self.tuple_fields is not None else list(self.dict_fields.values())


def field_named(name: str, refuse: Callable[[str], NotMapped]) -> Field:
    """The Field of a key ("jpg;png" for alternatives); refuse(why) for one the index does not keep."""
    alternatives = tuple(name.split(";"))
    if len(alternatives) == 1 and alternatives[0] in META_KEYS + ("cls",):
        return Field(alternatives)
    if all(a in IMAGE_EXTS_READ for a in alternatives):
        return Field(alternatives)
    raise refuse(f"the field {name!r}: fastload's index keeps the image ({'/'.join(IMAGE_EXTS_READ)}), "
                 f"the .cls label and {', '.join(META_KEYS)}")


def lookup(recipe: Recipe, name: Any, refuse: Callable[[str], NotMapped]) -> Field:
    """The Field a sample's key `name` holds at this point of the pipeline."""
    if isinstance(name, (list, tuple)) and all(isinstance(n, str) for n in name):
        name = ";".join(name)  # (getfirst takes a list of alternatives too)
    for alternative in name.split(";"):
        if alternative in recipe.dict_fields:
            return recipe.dict_fields[alternative]
    alternatives = [a for a in name.split(";") if a not in recipe.removed]
    if not recipe.dict_rest or not alternatives:
        raise refuse(f"the field {name!r} is not in the sample")
    return field_named(";".join(alternatives), refuse)
