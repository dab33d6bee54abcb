"""Augment stage: transform specs (specs.py), their fusion into one plan (plan.py), and
their plain-PyTorch application (pipeline.py) for the generic path."""
