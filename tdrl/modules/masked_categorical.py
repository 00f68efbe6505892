"""A categorical distribution whose forbidden outcomes have zero probability."""

from __future__ import annotations

import torch
from torch import distributions as D

__all__ = ["MaskedCategorical"]


def _dense_mask(indices: torch.Tensor, num_classes: int, padding_value: int | None) -> torch.Tensor:
    """Builds a boolean mask of ``num_classes`` columns from a tensor of allowed indices."""
    indices = indices.long()
    if padding_value is not None:
        # Padded entries are routed to an extra column that is dropped afterwards.
        indices = torch.where(indices == padding_value, num_classes, indices)
    mask = torch.zeros(
        (*indices.shape[:-1], num_classes + 1), dtype=torch.bool, device=indices.device
    )
    mask.scatter_(-1, indices, True)
    return mask[..., :num_classes]


class MaskedCategorical(D.Categorical):
    """A categorical distribution restricted to the outcomes a mask allows.

    Masked-out outcomes get a log-probability of ``neg_inf``, so they are never
    sampled, never chosen by :attr:`mode` / :attr:`deterministic_sample`, and add
    nothing to the entropy. It plugs into ``tensordict.nn.ProbabilisticTensorDictModule``
    as ``distribution_class`` with ``in_keys={"logits": ..., "mask": ...}``.

    Args:
        logits: unnormalised log-probabilities, shape ``(*batch, n)``.
        probs: probabilities (alternative to ``logits``); masked entries are zeroed and
            the rest renormalised.

    Keyword Args:
        mask: boolean tensor broadcastable to ``(*batch, n)``; ``True`` marks an allowed
            outcome.
        indices: alternative to ``mask``: integer tensor ``(*batch, k)`` listing the allowed
            outcomes of each row.
        neg_inf: the log-probability given to masked outcomes. Defaults to ``-inf``.
        padding_value: with ``indices``, entries equal to this value are ignored
            (rows with fewer than ``k`` allowed outcomes pad with it).
        use_cross_entropy: compute :meth:`log_prob` with a fused cross-entropy kernel
            (same result, usually faster).

    Raises:
        ValueError: when neither or both of ``mask`` / ``indices`` are given, when their
            shape does not fit the logits, or when a row allows no outcome at all.

    Examples:
        >>> import torch
        >>> from tdrl.modules import MaskedCategorical
        >>> dist = MaskedCategorical(
        ...     logits=torch.zeros(2, 4),
        ...     mask=torch.tensor([[True, False, True, False], [False, False, False, True]]),
        ... )
        >>> sample = dist.sample((100,))
        >>> bool(((sample[:, 0] == 0) | (sample[:, 0] == 2)).all()), bool((sample[:, 1] == 3).all())
        (True, True)
        >>> dist.log_prob(torch.tensor([1, 3]))
        tensor([-inf, 0.])
        >>> dist.mode
        tensor([0, 3])
    """

    def __init__(
        self,
        logits: torch.Tensor | None = None,
        probs: torch.Tensor | None = None,
        *,
        mask: torch.Tensor | None = None,
        indices: torch.Tensor | None = None,
        neg_inf: float = float("-inf"),
        padding_value: int | None = None,
        use_cross_entropy: bool = True,
    ) -> None:
        if (logits is None) == (probs is None):
            raise ValueError(
                "MaskedCategorical expects exactly one of `logits` or `probs`, "
                f"got logits={'set' if logits is not None else None}, "
                f"probs={'set' if probs is not None else None}"
            )
        if (mask is None) == (indices is None):
            raise ValueError(
                "MaskedCategorical expects exactly one of `mask` or `indices`, "
                f"got mask={'set' if mask is not None else None}, "
                f"indices={'set' if indices is not None else None}"
            )
        source = logits if logits is not None else probs
        num_classes = source.shape[-1]
        if indices is not None:
            mask = _dense_mask(indices, num_classes, padding_value)
        elif mask.dtype is not torch.bool:
            raise TypeError(
                f"MaskedCategorical: `mask` must be a bool tensor, got dtype {mask.dtype}"
            )
        if mask.shape[-1:] != source.shape[-1:]:
            raise ValueError(
                "MaskedCategorical: mask shape does not fit the logits: expected last dim "
                f"{num_classes}, got mask of shape {tuple(mask.shape)}"
            )
        if not bool(mask.any(-1).all()):
            raise ValueError(
                "MaskedCategorical: every row of the mask must allow at least one outcome, "
                "got a row with none"
            )
        self._mask = mask
        self.neg_inf = neg_inf
        self.padding_value = padding_value
        self.use_cross_entropy = use_cross_entropy
        if logits is not None:
            masked = torch.where(mask, logits, torch.full_like(logits, neg_inf))
            super().__init__(logits=masked)
        else:
            masked = torch.where(mask, probs, torch.zeros_like(probs))
            super().__init__(probs=masked / masked.sum(-1, keepdim=True))

    @property
    def mask(self) -> torch.Tensor:
        """The boolean mask of allowed outcomes (``True`` = allowed)."""
        return self._mask

    @property
    def deterministic_sample(self) -> torch.Tensor:
        """The most likely allowed outcome (what deterministic exploration picks)."""
        return self.mode

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """Log-probability of ``value``; masked outcomes give ``neg_inf``."""
        if self._validate_args:
            self._validate_sample(value)
        if self.use_cross_entropy and value.ndim >= 1 and value.shape == self.batch_shape:
            logits = self.logits
            flat = logits.reshape(-1, logits.shape[-1])
            result = -torch.nn.functional.cross_entropy(
                flat, value.reshape(-1).long(), reduction="none"
            )
            return result.reshape(value.shape)
        return super().log_prob(value)

    def entropy(self) -> torch.Tensor:
        """Entropy over the allowed outcomes only."""
        logits = self.logits
        p_log_p = torch.where(self._mask, logits * self.probs, torch.zeros((), dtype=logits.dtype))
        return -p_log_p.sum(-1)
