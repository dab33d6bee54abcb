"""Compatibility: other libraries' datasets and transforms mapped onto fastload's native pipeline."""
