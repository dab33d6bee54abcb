"""Filling the slots of a batch that the engine could not.

A slot fails when its sample is not a JPEG (NOT_JPEG), cannot be read or decoded, or its
geometry has no pixels to sample. In that order of resort:

1. PIL decodes other formats (WebP, BMP, ...; PNG without libpng; fastload.decode.pil), and the engine then
   augments the decoded pixels into the slot like any JPEG's (counted as pil_fallback);
2. the error policy (fastload.errors.ErrorPolicy): "raise" raises fastload.DecodeError
   naming the sample and its file; "skip" fills the slot with the next readable sample in
   dataset order (ErrorPolicy.replacements: the rule of every path, the generic one too),
   so the batch keeps its size, trying at most MAX_SKIP_ATTEMPTS samples.

Each distinct unreadable sample counts once per pass in stats["skipped"], however many
batches' replacement searches pass it, and is listed once, with its file and what failed,
in `skipped_samples` (fastload.stats.SkippedSamples: a UserWarning names it the first time).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Set, Tuple

import torch

from fastload.errors import DecodeError, ErrorPolicy, TarShardError
from fastload import _contract as contract
from fastload.stats import SkippedSamples

# How many replacement candidates on_error="skip" tries for one bad sample before
# concluding that the dataset is mostly unreadable (the same on every path).
MAX_SKIP_ATTEMPTS = ErrorPolicy.MAX_REPLACEMENTS


class Repair:
    """The failed slots of one runner's batches: PIL fallback, then the error policy.

    Args:
        engine: the runner's BatchEngine (one-sample refills run on it).
        index: the SampleIndex (bytes and file names of the samples).
        plan: the fused plan (channels, output size and dtype, pixel limit).
        policy: what to do with a sample nothing can decode.
        stats: the runner's counters; "skipped" and "pil_fallback" are added to.

    Attributes:
        skipped_samples: the samples replaced under "skip" (SkippedSamples; its `warn` is
            False in a worker process, whose parent warns).
    """

    def __init__(self, engine: Any, index: Any, plan: Any, policy: ErrorPolicy, stats: Dict[str, Any], *,
                 image_views: int = 1):
        self._engine, self._index, self._plan = engine, index, plan
        # With several outputs per sample, a batch is a list (image views, then masks).
        self._image_views = image_views
        self.policy = policy
        self._stats = stats
        # The unreadable samples already counted in "skipped" this pass: a replacement
        # search may pass the same bad sample from several batches (or slots).
        self._skipped_seen: Set[int] = set()
        self._skipped_epoch: Optional[int] = None
        self.skipped_samples = SkippedSamples()

    def start_pass(self) -> None:
        """A new pass over the data begins: its bad samples are counted afresh, even when
        it repeats an epoch number."""
        self._skipped_seen = set()
        self._skipped_epoch = None

    def fill(self, samples: torch.Tensor, status: torch.Tensor, messages: List[str], out: torch.Tensor,
             epoch: int) -> torch.Tensor:
        """Repairs every slot of `out` whose status is not OK; returns the samples the batch
        now holds (a copy of `samples` when a slot was replaced)."""
        failed: Set[int] = set()  # distinct unreadable samples met while filling this batch
        slots = torch.nonzero(status != contract.OK).flatten().tolist()
        if slots:
            samples = samples.clone()  # the caller's indices may share its memory
            for slot in slots:
                self._repair(slot, int(samples[slot]), int(status[slot]), messages[slot], samples, out, epoch, failed)
        self.count_skipped(failed, epoch)
        return samples

    def replace(self, slot: int, sample: int, samples: torch.Tensor, out: torch.Tensor, epoch: int,
                failed: Set[int], reason: str = "") -> None:
        """Fills out[slot] with the next readable sample after `sample`, which failed after
        decoding (in a hybrid pipeline's Python tail, saying `reason`); samples[slot] becomes
        that sample. `sample` and the unreadable ones passed are added to `failed` (count them
        with count_skipped) and listed in skipped_samples. Only under on_error="skip"."""
        self._repair(slot, sample, contract.DECODE_ERROR, reason, samples, out, epoch, failed)

    def count_skipped(self, failed: Set[int], epoch: int) -> None:
        """Counts in stats["skipped"] the samples of `failed` not yet counted this pass."""
        if epoch != self._skipped_epoch:
            self._skipped_seen, self._skipped_epoch = set(), epoch
        self._stats["skipped"] += len(failed - self._skipped_seen)
        self._skipped_seen |= failed

    def _repair(self, slot: int, sample: int, status: int, message: str, samples: torch.Tensor,
                out: torch.Tensor, epoch: int, failed: Set[int]) -> None:
        candidate = sample
        for _ in range(MAX_SKIP_ATTEMPTS):
            if status == contract.NOT_JPEG:
                status, message = self._decode_with_pil(slot, candidate, out, epoch)
                if status == contract.OK:
                    samples[slot] = candidate
                    return
            if not self.policy.skips:
                raise DecodeError(message, candidate, self._index.source(candidate))
            failed.add(candidate)
            self.skipped_samples.add(candidate, self._index.source(candidate), message)
            candidate = (candidate + 1) % len(self._index)  # ErrorPolicy.replacements' order
            trace = getattr(self, "trace", None)  # a lazily traced dataset: the replacement traced first
            if trace is not None:
                trace.prepare([candidate])
            status, message = self._run_one(slot, candidate, out, epoch)
            if status == contract.OK:
                samples[slot] = candidate
                return
        raise DecodeError(f"{MAX_SKIP_ATTEMPTS} consecutive samples failed to decode; last: {message}",
                          candidate, self._index.source(candidate))

    def _run_one(self, slot: int, sample: int, out: torch.Tensor, epoch: int,
                 predecoded: Optional[torch.Tensor] = None) -> Tuple[int, str]:
        """Fills out[slot] with one sample on the CPU engine (then copied to the device)."""
        remote = getattr(self._index, "remote", None)
        if remote is None:
            return self._run_engine(slot, sample, out, epoch, predecoded)
        # A sample of a remote shard: its bytes fetched first, and held while the engine reads them.
        try:
            with remote.holding(self._index, [sample]):
                return self._run_engine(slot, sample, out, epoch, predecoded)
        except TarShardError as e:
            return int(contract.READ_ERROR), str(e)

    def _run_engine(self, slot: int, sample: int, out: torch.Tensor, epoch: int,
                    predecoded: Optional[torch.Tensor]) -> Tuple[int, str]:
        extra = {0: predecoded} if predecoded is not None else {}
        if isinstance(out, list):  # several outputs per sample (CPU only): every one's slot
            k = self._image_views
            ticket = self._engine.submit(torch.tensor([sample]), out[0][slot:slot + 1], epoch, extra,
                                         views=[t[slot:slot + 1] for t in out[1:k]],
                                         masks=[t[slot:slot + 1] for t in out[k:]])
            status, messages = self._engine.wait(ticket)
            return int(status[0]), messages[0]
        if out.device.type == "cpu":
            target = out[slot:slot + 1]
        else:
            target = torch.empty((1, self._plan.channels, *self._plan.out_size), dtype=self._plan.dtype)
        ticket = self._engine.submit(torch.tensor([sample]), target, epoch, extra)
        status, messages = self._engine.wait(ticket)
        if out.device.type != "cpu" and int(status[0]) == contract.OK:
            out[slot:slot + 1].copy_(target)
        return int(status[0]), messages[0]

    def _decode_with_pil(self, slot: int, sample: int, out: torch.Tensor, epoch: int) -> Tuple[int, str]:
        from fastload.decode.pil import decode_to_tensor

        try:
            image = decode_to_tensor(self._index.read(sample), index=sample, source=self._index.source(sample),
                                     channels=self._plan.channels, max_pixels=self._plan.max_pixels)
        except (DecodeError, OSError) as error:
            return contract.DECODE_ERROR, getattr(error, "reason", str(error))
        self._stats["pil_fallback"] += 1
        return self._run_one(slot, sample, out, epoch, predecoded=image)
