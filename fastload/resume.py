"""Resume: where a loader is in its epochs. One module, one job.

The invariant every method below keeps: at any moment, `Cursor.state_dict()` names the
batch right after the last one `__next__` delivered, as (epoch, batches_consumed, the
order's state). Prefetched batches do not count; a pass that delivered its last batch
(or was iterated to its end) names the next epoch's start; a pass that has not drawn its
order yet names the state it started from; after `set_epoch(e)` between passes (before
the first, after a load or a finished pass), it names epoch e's start. `load_state_dict(sd)` makes the next pass
start exactly there, and a state saved right after that load (before iterating) is `sd`
again. A refused state changes nothing.

What a user of fastload.DataLoader sees (its docstring points here):

- Epochs: the first iteration is epoch 0; every later `iter(loader)` (after a finished or
  abandoned one) is the next epoch, unless `set_epoch(e)` or `load_state_dict()` was
  called in between, which selects the epoch explicitly. A user's sampler or
  batch_sampler is never driven by the automatic count (call `sampler.set_epoch` as with
  torch, or `loader.set_epoch`, which forwards to it).
- Resume: `state_dict()` is plain data ({"version", "epoch", "batches_consumed", "order",
  "native_seed", "dataset"}: a dict that prints short, `LoaderState`) counting the
  batches delivered by __next__ (not those prefetched); after `load_state_dict(sd)` the
  next iteration continues right after the last delivered batch, and len(loader) stays
  the whole epoch's batch count (as torch's), so a resumed epoch yields
  len(loader) - batches_consumed batches. A state saved after an epoch's last batch
  resumes at the next epoch's start. Without a generator, the epochs after a resumed one
  are shuffled with the seeds the uninterrupted run drew from the global RNG (the state
  carries that RNG's stream), not from the new process's. IterableDataset and
  batch_size=None leave the order to torch: their state only counts epochs (a resumed
  epoch restarts from its beginning). With in_order=False the count is of batches
  received, so a resume may repeat or skip the few batches that were reordered.
  Per-worker random seeds (for random augmentation in workers) are torch's and are not
  restored by a resume.

The cursor's model (the loader delegates every epoch and resume decision to it):

- Between passes the cursor holds the epoch the next `iter(loader)` runs: set by
  `set_epoch(e)` or `load_state_dict()`, else the one after the last pass (0 at first).
  A pending resume (epoch, batches already consumed) is kept until a pass of that epoch
  starts; `set_epoch` of another epoch drops it.
- `begin()` starts a pass (what `iter(loader)` does) and returns its `Pass`: the epoch,
  the batches consumed before it (a resume), how many it delivered, how many it yields
  once its order is drawn (`total`), and whether it finished. Its batches come from
  `batches()` (torch's batch_sampler on the generic path, the native feed's indices),
  which draws the order only at the first next(), as torch's samplers do.
- The state carries a fingerprint of the dataset ("dataset": its length and a hash of
  its first and last samples' names) so that a state saved over other data is refused.
- A single-process map-style order follows a dataset that grows or shrinks between
  epochs, like torch's samplers, which re-read len(dataset) at every len() and iter().
- A user's sampler that keeps its own epoch (DistributedSampler, Accelerate's samplers:
  an int `epoch` beside set_epoch), when it was set since the last pass (or before the
  first), names the epoch of a pass nobody chose one for through the loader, so the
  native path's random parameters follow the epoch the loop or framework set there.

Example:
    >>> from fastload.sampling.order import make_order
    >>> order = make_order(dataset_len=5, batch_size=2, shuffle=False,
    ...                             drop_last=False, distributed=False)
    >>> cursor = Cursor(order, list(range(5)))
    >>> current = cursor.begin(); batches = cursor.batches(); next(batches)
    [0, 1]
    >>> current.delivered = 1  # the loader delivered it
    >>> sd = cursor.state_dict(); sd["epoch"], sd["batches_consumed"]
    (0, 1)
    >>> cursor.load_state_dict(sd); current = cursor.begin(); list(cursor.batches())
    [[2, 3], [4]]
"""

from __future__ import annotations

import base64
import binascii
import collections
import copy
import hashlib
import os
import weakref
from typing import Any, Dict, Iterator, List, Optional, Tuple

from fastload.native.protocol import Runner
from fastload.sampling.order import Order
from fastload.datasets.base import NativeDataset

# The version of the loader's state (the order's nested state has its own,
# fastload.sampling.state.ORDER_STATE_VERSION): 2 added "dataset" (a fingerprint of the
# data the state was saved over); version 1 states still load, without that check.
STATE_VERSION = 2
_STATE_VERSIONS = (1, 2)
_PREFIX = "fastload.DataLoader"


# A str value longer than this prints as "<key (base64), N bytes>" in a LoaderState's repr.
_SHORT = 64


class LoaderState(dict):
    """What state_dict() returns: a dict of plain data (ints, strs, None, lists, dicts),
    printed short. Its generator states (~5 KB of base64 text) print as
    "<rng (base64), 5056 bytes>"; the dict holds the full text.

    It pickles (torch.save, pickle) as a collections.OrderedDict of the same items: torch.load's default weights_only=True
    accepts that without fastload, and the loaded state is an OrderedDict == the saved
    one, which load_state_dict accepts (it prints in full). json.dumps writes it as any
    dict; copy.copy and copy.deepcopy keep a LoaderState.

    Example:
        >>> state = LoaderState(epoch=0, order={"rng": "QUJD" * 40})
        >>> state
        {'epoch': 0, 'order': {'rng': <rng (base64), 120 bytes>}}
        >>> state["order"]["rng"][:8], type(copy.deepcopy(state)).__name__
        ('QUJDQUJD', 'LoaderState')
    """

    def __repr__(self) -> str:
        return _short_repr(self, None)

    def __reduce__(self) -> Any:
        return (collections.OrderedDict, (list(self.items()),))

    def __copy__(self) -> "LoaderState":
        return LoaderState(self)

    def __deepcopy__(self, memo: Dict[int, Any]) -> "LoaderState":
        return LoaderState(copy.deepcopy(dict(self), memo))


def _short_repr(value: Any, key: Any) -> str:
    """repr(value), with every str longer than _SHORT shown by its size."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_short_repr(v, k)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_short_repr(v, key) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    if isinstance(value, str) and len(value) > _SHORT:
        try:
            size = len(base64.b64decode(value, validate=True))
        except (binascii.Error, ValueError):
            return f"<{key} (text), {len(value)} characters>"
        return f"<{key} (base64), {size} bytes>"
    return repr(value)


class Pass:
    """Bookkeeping of one iteration (epoch pass), for state_dict()."""

    __slots__ = ("epoch", "offset", "delivered", "total", "finished", "set_epoch", "resumed_from")

    def __init__(self, epoch: int, offset: int, set_epoch: Optional[int], resumed_from: Optional[dict] = None):
        self.epoch = epoch
        self.offset = offset  # batches of this epoch consumed before a resume
        self.delivered = 0  # order positions delivered by __next__ in this pass
        self.total: Optional[int] = None  # batches this pass yields, once known
        self.finished = False
        self.set_epoch = set_epoch  # epoch to select in the order when the pass starts
        self.resumed_from = resumed_from  # the loaded state this pass continues, if any


class Cursor:
    """The one owner of a loader's epoch and position (see the module docstring).

    Args:
        order: the loader's sampling order (fastload.sampling.order), or None when the
            order is torch's (IterableDataset, batch_size=None, DataPipe, no __len__):
            states then only count epochs.
        dataset: the user's dataset (fingerprinted in states; its length is followed).
        runner: the native path's runner (its `plan.seed` is saved as "native_seed" and
            restored with `set_seed`), or None.
        user_sampler: the user gave a sampler or batch_sampler (the automatic epoch count
            does not drive it; an explicit set_epoch does).
        persistent_workers: torch draws its workers' base seed once per worker lifetime
            instead of once per epoch (a resumed order replays those draws).
    """

    def __init__(self, order: Any, dataset: Any, *, runner: Optional[Runner] = None, user_sampler: bool = False,
                 persistent_workers: bool = False):
        self.order = order
        self.dataset = dataset
        self.runner = runner
        self.user_sampler = user_sampler
        self.persistent_workers = persistent_workers
        self.current: Optional[Pass] = None  # the pass begun last (None: none since creation or a load)
        self.passes = 0  # passes begun on this loader
        self._epoch: Optional[int] = None  # the next pass's epoch, when set_epoch/load chose it
        self._explicit = False  # chosen by set_epoch: drives a user's sampler too
        self._last_epoch: Optional[int] = None
        self._resume: Optional[Tuple[int, int]] = None  # (epoch, batches consumed) to continue
        self._loaded: Optional[dict] = None  # the loaded state, until its pass starts
        self._selected: Optional[dict] = None  # the state after set_epoch, until a pass starts
        self._sampler_epoch: Optional[int] = None  # a user's sampler's own epoch when the last pass began

    # -- epochs ---------------------------------------------------------------------------
    def next_epoch(self) -> int:
        """The epoch the next pass runs."""
        if self._epoch is not None:
            return self._epoch
        return 0 if self._last_epoch is None else self._last_epoch + 1

    def set_epoch(self, epoch: int) -> None:
        """Selects the next pass's epoch; keeps a pending resume of that epoch, drops another.
        Until the pass starts, state_dict() names that epoch's start."""
        if not isinstance(epoch, int) or isinstance(epoch, bool):
            raise TypeError(f"{_PREFIX}.set_epoch: expected an int epoch, got {epoch!r}.")
        if epoch < 0:
            raise ValueError(f"{_PREFIX}.set_epoch: expected a non-negative epoch, got {epoch}.")
        if self._resume is not None and self._resume[0] == epoch:
            self._epoch = epoch
            return
        # Between passes (none yet, a loaded state, or the last one finished) the state
        # moves to the selected epoch; a pass still in its epoch keeps naming its position
        # (its iterator may go on: set_epoch takes effect at the next iter()).
        current = self.current
        between = current is None or current.finished or (
            current.total is not None and current.delivered >= current.total)
        before = self._position_state() if between else None
        self._resume = None
        self._epoch = epoch
        self._explicit = True
        if before is None:
            return  # the next begin() selects it in the order (batches() at its first draw)
        if self.order is not None:
            self.order.set_epoch(epoch)  # a pending resume of another epoch is dropped
        if before["batches_consumed"] == 0:
            # At an epoch's start: the same state (its order part carries the generator or
            # RNG stream the next epoch draws from), for the selected epoch; a load selects
            # that epoch in the order.
            before["epoch"] = epoch
            self._selected = before
        else:
            # A loaded state in an epoch's middle: the selected epoch from its start.
            self._selected = self._state(epoch, 0, self.order.state_dict(0) if self.order is not None else None)

    def begin(self) -> Pass:
        """Starts a pass (iter(loader)): adopts the dataset's length if followed, takes the
        pending epoch and resume; returns the new pass."""
        self.follow_dataset_len(starting=True)
        epoch = self.next_epoch()
        kept = getattr(self.order, "sampler_epoch", None) if self.user_sampler else None
        if kept is not None and self._epoch is None and (self.passes == 0 or kept != self._sampler_epoch):
            # A user's sampler that keeps its epoch (DistributedSampler, Accelerate's), set by
            # the loop or a framework since the last pass, names the pass's epoch: a loader a
            # framework builds for the rest of an epoch draws that epoch's parameters. One
            # nobody sets leaves the count (new random parameters every pass, as torch's).
            epoch = kept
        self._sampler_epoch = kept
        resume = self._resume if self._resume is not None and self._resume[0] == epoch else None
        set_epoch = None
        if self.order is not None and resume is None and (self._explicit or not self.user_sampler):
            set_epoch = epoch
        loaded = self._loaded if resume is not None else None
        self._epoch, self._explicit, self._resume, self._loaded, self._selected = None, False, None, None, None
        self._last_epoch = epoch
        self.current = Pass(epoch, resume[1] if resume else 0, set_epoch, loaded)
        self.passes += 1
        return self.current

    def batches(self) -> Iterator[List[int]]:
        """The current pass's batches of sample indices. A generator: the order selects its
        epoch and draws its permutation at the first next(), not before (torch's iterator
        calls iter() on its batch_sampler before drawing its workers' base seed from the
        same generator, and RandomSampler draws lazily too)."""
        current = self.current
        if current.set_epoch is not None:
            self.order.set_epoch(current.set_epoch)
        current.total = len(self.order)
        yield from self.order

    def batch_sampler(self) -> "OrderBatches":
        """The current pass's batches as torch's DataLoader takes a batch_sampler."""
        return OrderBatches(self)

    def epoch_batches(self) -> int:
        """The whole epoch's batch count, what len(loader) reports (needs an order).

        Also while a resumed epoch yields only its rest (as torch's and torchdata's):
        training loops size an epoch with it. Over the dataset's current length when the
        next pass will adopt it, without adopting it here: the pass before still counts
        against its own length."""
        return self.order.epoch_batches(self._dataset_len_to_follow(starting=False))

    def follow_dataset_len(self, starting: bool) -> None:
        """torch's RandomSampler and SequentialSampler re-read len(dataset) at every len()
        and iter(), so a map-style dataset that grows (or shrinks) between epochs is
        followed; fastload's own single-process order does the same. Not while an epoch
        runs, is abandoned or waits to be resumed (its order and resume state are drawn
        for the length it started with; the next iter() takes the new one), not under DDP
        (every rank must agree, and DistributedSampler fixes its length too). The native
        path follows it as well: the loader chooses its path anew for a dataset whose
        length changed before the pass begins (DataLoader._renew_path)."""
        dataset_len = self._dataset_len_to_follow(starting)
        if dataset_len is not None and dataset_len != self.order.dataset_len:
            self.order.dataset_len = dataset_len

    def _dataset_len_to_follow(self, starting: bool) -> Optional[int]:
        """The dataset's length if the order follows it now (see follow_dataset_len), else None."""
        order = self.order
        if not isinstance(order, Order) or order.distributed:
            return None
        if self._resume is not None or (not starting and self.current is not None and not self.current.finished):
            return None
        return len(self.dataset)

    # -- state ----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Where the loader is: {"version", "epoch", "batches_consumed", "order",
        "native_seed", "dataset"} (see fastload.DataLoader.state_dict)."""
        state = self._position_state()
        # A loaded state handed back before its epoch starts is re-saved as this version's.
        state["version"] = STATE_VERSION
        state["dataset"] = dataset_fingerprint(self.dataset)
        return LoaderState(state)

    def _position_state(self) -> dict:
        if self._selected is not None:
            return copy.deepcopy(self._selected)
        current = self.current
        if current is None:
            if self._loaded is not None:
                return copy.deepcopy(self._loaded)
            return self._state(self.next_epoch(), 0, None)
        if current.total is None and not current.finished:
            # iter() ran but the pass has not drawn its order yet: the state is still the
            # one it started from.
            if current.resumed_from is not None:
                return copy.deepcopy(current.resumed_from)
            # The order still describes the pass before: its state carries the stream that
            # draws this epoch's shuffle seed (the epoch itself is restarted on load).
            return self._state(current.epoch, 0, self.order.state_dict(0) if self.order is not None else None)
        finished = current.finished or (current.total is not None and current.delivered >= current.total)
        order_state = None
        if self.order is not None and current.total is not None:
            order_state = self.order.state_dict(current.delivered)
        if not finished:
            return self._state(current.epoch, current.offset + current.delivered, order_state)
        if order_state is not None and order_state.get("segments", []) == [] and not order_state.get("perm"):
            # The next epoch from its start: nothing in it depends on the finished pass's
            # length, so it is labelled with the dataset's length now, as the fingerprint is
            # (a dataset that grew between epochs still resumes).
            now = _dataset_len(self.dataset)
            if now is not None:
                order_state["dataset_len"] = now
        return self._state(current.epoch + 1, 0, order_state)

    def _state(self, epoch: int, consumed: int, order_state: Optional[dict]) -> dict:
        return {"version": STATE_VERSION, "epoch": epoch, "batches_consumed": consumed, "order": order_state,
                "native_seed": self.runner.plan.seed if self.runner is not None else None}

    def load_state_dict(self, state_dict: dict) -> None:
        """Checks the whole state, then applies it: the next pass continues after its last
        batch. A refused state (ValueError/TypeError) leaves the cursor as it was."""
        where = f"{_PREFIX}.load_state_dict"
        if not isinstance(state_dict, dict):
            raise TypeError(f"{where}: expected a dict from state_dict(), got {type(state_dict).__name__}.")
        version = state_dict.get("version")
        if type(version) is not int or version not in _STATE_VERSIONS:
            raise ValueError(f"{where}: expected version {' or '.join(map(str, _STATE_VERSIONS))}, got {version!r}. "
                             "Resume with the fastload version that saved the state.")
        epoch, consumed = state_dict.get("epoch"), state_dict.get("batches_consumed")
        for name, value in (("epoch", epoch), ("batches_consumed", consumed)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{where}: expected a non-negative int {name}, got {value!r}.")
        native_seed = state_dict.get("native_seed")
        if native_seed is not None and (not isinstance(native_seed, int) or isinstance(native_seed, bool)
                                        or not -2 ** 63 <= native_seed < 2 ** 63):
            raise ValueError(f"{where}: expected native_seed to be None or a 64-bit int, got {native_seed!r}.")
        _check_dataset(state_dict.get("dataset"), self.dataset, where)
        order_state = state_dict.get("order")
        if self.order is not None and order_state is not None:
            self.order.check_state_dict(order_state)

        # Checked: apply it.
        if self.runner is not None and native_seed is not None:
            self.runner.set_seed(native_seed)  # the same crops and flips as before the restart
        self._resume = None
        if self.order is not None and order_state is not None:
            if hasattr(self.order, "base_seed_draws"):
                # Draws from the global RNG before each epoch's shuffle: torch's iterator
                # (or the native loop) draws a base seed per epoch, once with persistent workers.
                self.order.base_seed_draws = 0 if self.persistent_workers else 1
            self.order.load_state_dict(order_state)
            if consumed == 0:
                # The start of an epoch (a finished one's successor, or nothing consumed
                # yet): nothing to skip; a user's sampler gets that epoch too.
                self.order.set_epoch(epoch)
            else:
                self._resume = (epoch, consumed)
        self._epoch = epoch
        self._explicit = False
        self.current = None
        self._loaded = copy.deepcopy(state_dict)
        self._selected = None


class OrderBatches:
    """torch's batch_sampler (and the native feed's batches): the cursor's current pass.

    A generator per iter(), so nothing happens before the first next() (see Cursor.batches).
    """

    def __init__(self, cursor: Cursor):
        # A weak reference: torch's DataLoader (kept by persistent workers) holds this
        # batch sampler, and a strong one back to the loader would make loader and workers
        # a reference cycle. The garbage collector then closes the workers' index queues
        # (weakref finalizers run before __del__) before torch's iterator can send them the
        # shutdown message, and torch waits 5 s per worker before killing it. The cursor
        # holds nothing of the loader; the weak reference keeps that true whatever it holds.
        self._cursor_ref = weakref.ref(cursor)

    def __deepcopy__(self, memo: dict) -> "OrderBatches":
        # A copy of the loader (copy.deepcopy after iterating, with the kept inner torch
        # loader) must iterate its own order, not keep pointing at the original.
        cursor = self._cursor_ref()
        copied = object.__new__(OrderBatches)
        memo[id(self)] = copied
        copied._cursor_ref = weakref.ref(copy.deepcopy(cursor, memo)) if cursor is not None else self._cursor_ref
        return copied

    @property
    def _cursor(self) -> Cursor:
        cursor = self._cursor_ref()
        if cursor is None:
            raise RuntimeError(f"{_PREFIX}: the loader this batch sampler belongs to was garbage-collected; "
                               "keep a reference to the DataLoader while iterating.")
        return cursor

    def __iter__(self) -> Iterator[List[int]]:
        yield from self._cursor.batches()

    def __len__(self) -> int:
        return len(self._cursor.order)


# ---------------------------------------------------------------------------------------
# The dataset fingerprint


def dataset_fingerprint(dataset: Any) -> Optional[dict]:
    """{"len": N, "keys": hash of the first and last samples' names and labels, or None}.

    Names come only from what is already in memory: a fastload dataset's index (the
    last two parts of a file's path, e.g. "dog/001.jpg", or a tar shard's file name and
    member), or a torchvision-style `samples` list of (path, label). Other datasets get
    only their length: reading samples to fingerprint them could cost a lot (remote
    storage, decoding) and need not be deterministic. Paths are cut to their last parts
    so that moving the data to another root still resumes. None without a len().
    """
    n = _dataset_len(dataset)
    if n is None:
        return None
    names = _sample_names(dataset, n) if n > 0 else None
    keys = hashlib.sha256("\0".join(names).encode("utf-8", "surrogateescape")).hexdigest()[:16] if names else None
    return {"len": n, "keys": keys}

def _dataset_len(dataset: Any) -> Optional[int]:
    """len(dataset), or None when it has none that works (an IterableDataset's __len__ may
    raise anything, e.g. NotImplementedError): a resume check is never a new way to fail."""
    try:
        n = len(dataset)
    except Exception:
        return None
    return n if isinstance(n, int) and n >= 0 else None

def _check_dataset(saved: Any, dataset: Any, where: str) -> None:
    if saved is None:
        return
    if not (isinstance(saved, dict) and type(saved.get("len")) is int
            and (saved.get("keys") is None or isinstance(saved.get("keys"), str))):
        raise ValueError(f"{where}: expected 'dataset' to be None or {{'len': int, 'keys': str or None}}, got "
                         f"{saved!r}. Load a state saved by fastload.DataLoader.state_dict().")
    current = dataset_fingerprint(dataset)
    if current is None:
        return
    fix = ("Resume with the dataset the state was saved over (the same samples in the same order), or start "
           "afresh without load_state_dict; to resume over this data anyway, delete the state's 'dataset' entry.")
    if saved["len"] != current["len"]:
        raise ValueError(f"{where}: the state was saved over a dataset of {saved['len']} samples, this loader's "
                         f"has {current['len']}. {fix}")
    if saved["keys"] is not None and current["keys"] is not None and saved["keys"] != current["keys"]:
        first, last = _sample_names(dataset, current["len"])
        raise ValueError(f"{where}: the state was saved over another dataset of the same length "
                         f"({current['len']} samples): its first and last samples differ from this dataset's "
                         f"(now {first!r} and {last!r}; fingerprint {saved['keys']} saved, {current['keys']} "
                         f"now). {fix}")




def _last_parts(path: str) -> str:
    """"class/file.jpg" of a path: the same on every machine and under any data root."""
    return f"{os.path.basename(os.path.dirname(path))}/{os.path.basename(path)}"


def _sample_names(dataset: Any, n: int) -> Optional[Tuple[str, str]]:
    """Names and labels of the first and last samples, from memory only (or None)."""
    index = getattr(dataset, "index", None) if isinstance(dataset, NativeDataset) else None
    try:
        if index is not None and len(index) == n:
            def name(i: int) -> str:
                path = index.files[int(index.file_ids[i])]
                if index.remote is not None:  # a shard read by range: its URL, not the cache's file
                    path = index.remote.source(path) or path
                if index.members is not None:  # a tar shard: its file name and the member
                    where = f"{os.path.basename(path)}:{index.members[i]}"
                else:
                    where = _last_parts(path)
                return f"{where} (label {int(index.labels[i])})"
            return name(0), name(n - 1)
        samples = getattr(dataset, "samples", None)
        if isinstance(samples, (list, tuple)) and len(samples) == n:
            def name_of(item: Any) -> Optional[str]:
                if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
                    path = item[0]
                    return f"{_last_parts(path)} (label {item[1]!r})"
                return None
            first, last = name_of(samples[0]), name_of(samples[-1])
            if first is not None and last is not None:
                return first, last
    except Exception:  # a fingerprint is a check, never a new way to fail a resume
        return None
    return None
