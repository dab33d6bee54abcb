"""fastload's own datasets: a sample index (fastload.source) plus transforms.

- base.py: NativeDataset, the base (transforms cut into the native prefix and the Python
  tail; `dataset[i]` decodes with PIL and runs the plain-PyTorch twin);
- folder.py: ImageFolder (torchvision's scan order and classes) and FileList;
- tar.py: TarShards, WebDataset shards read by member offsets (index: fastload.source);
- write.py: write_shards, a folder or a dataset to WebDataset shards;
- segmentation.py: SegmentationDataset, (image, mask) file pairs.

Nothing is imported here, so `import fastload` stays light; the public names are
fastload.ImageFolder, fastload.FileList, fastload.TarShards, fastload.write_shards,
fastload.SegmentationDataset.
"""
