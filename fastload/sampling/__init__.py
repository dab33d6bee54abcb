"""Sampling: the order of samples (per-epoch seeded shuffle, DDP rank split, resume).

- order.py: make_order and the orders it makes (Order: torch's order on one process or
  the seeded global permutation dealt to ranks), IndexOrder;
- user_order.py: UserOrder, a user's sampler or batch_sampler (any batch size), resumable;
- layout.py: the step layout of an epoch (lockstep steps, padding, dealing to ranks);
- distributed.py: rank and world size, the `distributed` and `uneven` arguments;
- rng.py: GlobalStream, the global RNG's stream of shuffle seeds replayed after a resume;
- state.py: the state's version, its common checks, generator states as base64 text.

Nothing is imported here; import the module that has the job.
"""
