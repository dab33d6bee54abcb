"""Compatibility: other libraries' transforms mapped onto fastload's native specs, and the types datasets are read into."""
