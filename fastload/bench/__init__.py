"""fastload-bench: the benchmark command (`fastload-bench` or `python -m fastload.bench`).

Modules: dataset (generated, cached ImageNet-like JPEGs), contenders (the loaders raced,
one class each), measure (one contender in a fresh process: img/s, first batch, memory),
procfs (process-tree memory and CPU from /proc), micro (decode-only and thread scaling),
report (machine description, table, JSON). Nothing here is imported by `import fastload`.
"""
