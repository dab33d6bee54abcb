"""fastload.explain(dataset): what the native pipeline makes of a dataset, without a loader.

Example:
    >>> import torch, fastload
    >>> data = torch.utils.data.Subset(torch.utils.data.TensorDataset(torch.arange(4)), [0, 2])
    >>> report = fastload.explain(data)   # prints nothing: a REPL shows the report once
    >>> print(report)
    fastload.explain: Subset -> TensorDataset
      dataset: not convertible
        - TensorDataset is not a torchvision dataset fastload recognises (...)
          change: subclass torchvision.datasets.DatasetFolder/ImageFolder without overriding __getitem__, ...
      verdict: generic path (1 blocker)
    >>> report.splitlines()[-1].strip()
    'verdict: generic path (1 blocker)'
"""

from __future__ import annotations

from typing import Any, List, Optional

_INDENT = "  "


def _arrow(items: Any) -> str:
    return " -> ".join(repr(item) for item in items) or "(none)"


class Explanation(str):
    """The text of fastload.explain: a str (splitlines, `in`, == work as on any str) whose
    repr is the text itself, so a REPL shows the report once, as lines, not as a quoted
    string with \\n in it; `print(explain(...))` prints the same."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str(self)

    def __reduce__(self) -> Any:
        return (str, (str(self),))  # pickles as the plain text


def explain(dataset: Any) -> Explanation:
    """Returns, without printing it, how fastload's loader would run `dataset`: the dataset chain
    (e.g. Subset -> torchvision ImageFolder), the native prefix of its transforms, the
    Python tail, every blocker and what to change for each. Builds no loader, reads no
    image.

    The verdict names the path a loader takes with default arguments, as `loader.path`
    begins: "native path" (the engine makes every sample; with a target_transform the
    labels go through it in Python), "hybrid path" (the engine runs the native prefix,
    the Python tail runs per sample on its output) or "generic path". The loader's own
    arguments (collate_fn, batch_sampler, accelerate=False, ...) can still choose the
    generic path; `loader.path` says what a given loader does.

    Args:
        dataset: any map-style dataset.

    Returns:
        The report, an Explanation: a str whose repr is the report itself. Nothing is
        printed: at a REPL `fastload.explain(ds)` shows the report once; in a script,
        `print(fastload.explain(ds))`.
    """
    from fastload.adapters.walk import analyse

    analysis = analyse(dataset)
    lines: List[str] = []
    size = f", {len(analysis.index)} samples" if analysis.index is not None else ""
    lines.append(f"fastload.explain: {analysis.chain}{size}")
    blockers = 0
    unfused = ""
    if analysis.reasons:
        lines.append(f"{_INDENT}dataset: not convertible")
        for reason, fix in zip(analysis.reasons, analysis.fixes):
            lines.append(f"{_INDENT * 2}- {reason}")
            if fix:
                lines.append(f"{_INDENT * 3}change: {fix}")
        blockers += len(analysis.reasons)
    trace = getattr(analysis, "trace", None)
    if trace is not None and not analysis.reasons:
        lines.append(f"{_INDENT}traced: index 0 twice and indexes spread over the dataset probed (their effects on "
                     f"the dataset undone); a loader traces each of the {trace.n} indexes as each epoch reaches it "
                     f"(loader.stats()['native']['traced'] lists the epoch's fallbacks); sample: "
                     f"{trace.first.path!r} -> {_shape_of(trace.first.template)}")
        for index, why in list(trace.fallbacks.items())[:5]:
            lines.append(f"{_INDENT * 2}- index {index} runs through its own __getitem__: {why}")
    if analysis.wrappers:
        lines.append(f"{_INDENT}transform wrappers opened: {' -> '.join(analysis.wrappers)}")
    pipeline = analysis.pipeline
    if pipeline is not None:
        lines.append(f"{_INDENT}native prefix: {_arrow(pipeline.native)}")
        # (fastload's own datasets keep their outputs; a traced one's are in its analysis)
        lines += _outputs_lines(analysis.outputs or (getattr(dataset, "outputs", None) if analysis.native_dataset
                                                     else None))
        if pipeline.tail:
            lines.append(f"{_INDENT}python tail:   {_arrow(pipeline.tail)}")
            lines.append(f"{_INDENT}blockers in the tail:")
            refused = [e for t in pipeline.tail for e in [_refusal(t)] if e is not None]
            # A prefix cut where it stopped fusing names that transform first (it has an
            # equivalent, so no refusal of its own).
            refused = [None] * (len(pipeline.blockers) - len(refused)) + refused
            for error, text in zip(refused, pipeline.blockers):
                lines.append(f"{_INDENT * 2}- {text}")
                if getattr(error, "fix", ""):
                    lines.append(f"{_INDENT * 3}change: {error.fix}")
            blockers += len(pipeline.blockers)
        if not analysis.reasons and not analysis.native_dataset:
            # The engine batches the prefix: one that does not fuse (e.g. no crop before the
            # first Python transform) sends the whole pipeline to the generic path.
            unfused = _fuses(pipeline.native)
            if unfused and pipeline.tail:
                # Where the blockers sit keeps the engine from starting: what the user wrote
                # (the tail's blockers, counted above) is what to change. It counts as one more
                # only if the native transforms would still not fuse without the blockers.
                if pipeline.native:
                    lines.append(f"{_INDENT}the native prefix does not fuse into one plan ({unfused}), so the "
                                 "Python tail has no engine output to start from")
                else:
                    lines.append(f"{_INDENT}no native transform comes before the Python tail, so it has no engine "
                                 "output to start from")
                    lines.append(f"{_INDENT * 2}change: put the blockers after a native crop or resize, or drop them")
                without = _fuses(list(pipeline.native) + _native_specs_of(pipeline.tail))
                if without:
                    lines.append(f"{_INDENT}without the blockers, the native transforms still do not fuse: {without}")
                    blockers += 1
            elif unfused and _own_size(analysis, pipeline.native):
                lines.append(f"{_INDENT}no crop: each image keeps its own size (a list of images per batch, each "
                             "image on the engine's kernels)")
            elif unfused:
                lines.append(f"{_INDENT}the native transforms do not fuse into one plan: {unfused}")
                blockers += 1
            elif pipeline.tail:
                unfused = analysis.conversion().tail_refusal() or ""
                if unfused:
                    lines.append(f"{_INDENT}{unfused}")
                    blockers += 1
    if analysis.target_transform is not None:
        from fastload.compat.conversion import callable_name

        lines.append(f"{_INDENT}labels: target_transform {callable_name(analysis.target_transform)} applied in Python "
                     "to each class index (int), then default_collate")
        lines.append(f"{_INDENT * 2}change (for the fully native path): apply it to the label batch in the "
                     "training loop instead")
        blockers += 1
    elif analysis.trace is not None and not analysis.trace.simple:
        lines.append(f"{_INDENT}labels and other fields: each index's own, as its traced __getitem__ returned them, "
                     "rebuilt around the engine's outputs in the sample's structure")
    elif analysis.index is not None:
        lines.append(f"{_INDENT}labels: the class index of each sample (int64)")
    # The verdict names the path loader.path starts with ("native:", "hybrid:", "generic:").
    plural = "s" if blockers != 1 else ""
    if blockers == 0:
        verdict = "native path"
    elif analysis.reasons or unfused:
        verdict = f"generic path ({blockers} blocker{plural})"
    elif pipeline is not None and pipeline.tail:
        verdict = f"hybrid path: native prefix, then Python per sample ({blockers} blocker{plural} to a fully native path)"
    else:
        verdict = f"native path, labels through target_transform in Python ({blockers} blocker{plural} to a fully " \
                  "native path)"
    lines.append(f"{_INDENT}verdict: {verdict}")
    return Explanation("\n".join(lines))


def _outputs_lines(outputs: Any) -> List[str]:
    """What a sample makes beyond image view 0 (the native prefix above): one line per image
    view (consecutive views alike named once: DINO's local crops), one per mask."""
    if outputs is None:
        return []
    lines, views, v = [], outputs.views, 1
    while v < len(views):
        last = v
        while last + 1 < len(views) and views[last + 1] == views[v]:
            last += 1
        lines.append(f"{_INDENT}{f'views {v}-{last}' if last > v else f'view {v}'} (from the same decode): "
                     f"{_arrow(views[v])}")
        v = last + 1
    for mask in outputs.masks:
        lines.append(f"{_INDENT}mask: view {mask.follows}'s geometry, {mask.sampling} nearest, fill {mask.fill}, "
                     f"{str(mask.dtype).replace('torch.', '')}")
    return lines


def _shape_of(template: Any) -> str:
    from fastload.trace import shape_text

    return shape_text(template)


def _refusal(transform: Any) -> Optional[ValueError]:
    """Why `transform` has no native equivalent (a NotConvertible carries .fix), or None."""
    from fastload.compat.torchvision import readable_leaf_specs

    try:
        readable_leaf_specs(transform)
    except ValueError as error:
        return error
    return None


def _native_specs_of(transforms: Any) -> List[Any]:
    """The fastload specs of those `transforms` that have a native equivalent, in order."""
    from fastload.compat.torchvision import readable_leaf_specs

    out: List[Any] = []
    for transform in transforms:
        try:
            out.extend(readable_leaf_specs(transform))
        except ValueError:
            pass
    return out


def _fuses(native: Any) -> str:
    """"" when the native specs fuse into one plan, else why not."""
    from fastload.augment.plan import fuse
    from fastload.errors import UnsupportedPipeline

    try:
        fuse(list(native))
    except (UnsupportedPipeline, ValueError) as error:
        return str(error)
    return ""


def _own_size(analysis: Any, native: Any) -> bool:
    """A traced detection dataset whose transforms keep each image's own size (the
    loader's own-size runner, fastload.native.own_size)."""
    from fastload.augment.own_size import own_size_fusion
    from fastload.errors import UnsupportedPipeline
    from fastload.trace import has_traced_boxes

    if not has_traced_boxes(getattr(analysis, "trace", None)):
        return False
    try:
        own_size_fusion(list(native))
    except (UnsupportedPipeline, ValueError):
        return False
    return True
