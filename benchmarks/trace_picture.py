"""Draws a torch.profiler Chrome trace as a timeline picture: one row per thread, the
loader's ranges coloured by stage, the model's top-level work in grey.

    python examples/train_amp.py --tiny --profile /tmp/trace.json
    python benchmarks/trace_picture.py /tmp/trace.json docs/trace.png

Perfetto (https://ui.perfetto.dev) shows the same trace interactively; this picture is
for documents. Needs matplotlib.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from typing import Dict, List, Tuple

COLOURS = {
    "fastload.wait": "#d64545",  # the training loop waiting for data: the stall
    "fastload.read": "#8fb8de",
    "fastload.decode": "#2b6cb0",
    "fastload.augment": "#38a169",
    "fastload.native_batch": "#f6ad55",
    "fastload.transfer": "#805ad5",
    "fastload.fetch": "#2b6cb0",
    "fastload.collate": "#38a169",
}
MODEL = "#a0aec0"


def spans(trace: dict) -> Dict[Tuple[int, int], List[Tuple[str, float, float]]]:
    """(pid, tid) -> [(name, start us, duration us)] of the complete events worth drawing:
    fastload's ranges and the main thread's top-level model ops (autograd and aten)."""
    rows: Dict[Tuple[int, int], List[Tuple[str, float, float]]] = defaultdict(list)
    for event in trace.get("traceEvents", []):
        if event.get("ph") != "X" or "dur" not in event:
            continue
        name = event.get("name", "")
        if name.startswith("fastload.") or name.startswith("aten::") or name.startswith("autograd::"):
            rows[(event.get("pid", 0), event.get("tid", 0))].append((name, float(event["ts"]), float(event["dur"])))
    return rows


def draw(trace_path: str, out_path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.patches as patches
    import matplotlib.pyplot as plt

    with open(trace_path) as f:
        rows = spans(json.load(f))
    if not rows:
        raise SystemExit(f"{trace_path}: no fastload or aten ranges in the trace")
    start = min(ts for events in rows.values() for _, ts, _ in events)
    # The main thread (the one with fastload.wait) first, then engine threads by their work.
    order = sorted(rows, key=lambda k: (not any(n == "fastload.wait" for n, _, _ in rows[k]),
                                        -sum(d for _, _, d in rows[k])))
    figure, axis = plt.subplots(figsize=(12, 0.55 * len(order) + 1.6))
    for y, key in enumerate(order):
        # Widest first, so nested ranges (an aten op inside another) stay visible on top.
        for name, ts, dur in sorted(rows[key], key=lambda e: -e[2]):
            colour = COLOURS.get(name, MODEL if not name.startswith("fastload.") else "#718096")
            axis.broken_barh([((ts - start) / 1e3, dur / 1e3)], (y - 0.4, 0.8), facecolors=colour, linewidth=0)
    labels = []
    for key in order:
        names = {n for n, _, _ in rows[key]}
        labels.append("main thread" if "fastload.wait" in names else
                      "engine thread" if names & {"fastload.decode", "fastload.read"} else f"thread {key[1]}")
    axis.set_yticks(range(len(order)), labels)
    axis.invert_yaxis()
    axis.set_xlabel("ms")
    legend = [patches.Patch(color=c, label=n.removeprefix("fastload.")) for n, c in COLOURS.items()
              if any(n == e[0] for events in rows.values() for e in events)]
    legend.append(patches.Patch(color=MODEL, label="model (aten ops)"))
    axis.legend(handles=legend, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=len(legend), fontsize=8,
                frameon=False)
    axis.set_title("torch.profiler trace: where a training step's input time goes", fontsize=10)
    figure.tight_layout()
    figure.savefig(out_path, dpi=110)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", help="a Chrome trace written by torch.profiler (export_chrome_trace)")
    parser.add_argument("out", help="picture to write (.png, .svg)")
    args = parser.parse_args()
    draw(args.trace, args.out)


if __name__ == "__main__":
    main()
