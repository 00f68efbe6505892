"""Baselines shared by the replay-buffer benchmarks (imported by the scripts next to it)."""

from __future__ import annotations

from collections.abc import Callable

import torch


def bare_gather(rb, batch: int, pool: int) -> Callable[[], list]:
    """One ``index_select`` per stored tensor of ``rb`` at ``batch`` pre-drawn random indices.

    The index sets cycle through a pool of ``pool`` draws: a pool large enough that rows are
    not revisited while still cached behaves like a sampler's fresh draws, and a small one
    makes the baseline warmer.
    """
    leaves = [rb.storage.content.get(key) for key in rb.storage.stored_keys]
    length = len(rb)
    indices = [torch.randint(length, (batch,)) for _ in range(pool)]
    state = {"i": 0}

    def gather() -> list:
        state["i"] = (state["i"] + 1) % pool
        index = indices[state["i"]]
        return [leaf.index_select(0, index) for leaf in leaves]

    return gather
