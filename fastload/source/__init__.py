"""Where samples and their bytes are: the source stage (see README.md in this folder).

Each module is imported where it is used (`fastload.source.index`, `.tar_index`,
`.remote`, ...): importing the package loads none of them, so `import fastload` stays
light and a dataset of local files never imports fsspec.
"""
