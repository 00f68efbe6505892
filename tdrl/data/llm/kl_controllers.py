"""Schedules of the KL-penalty coefficient of RLHF rewards (fixed, or adapted to a target KL)."""

from __future__ import annotations

import abc
import math
from collections.abc import Sequence

from torch import nn

__all__ = ["AdaptiveKLController", "ConstantKLController", "KLControllerBase"]


def _check_model(model: nn.Module | None) -> None:
    if model is not None and not hasattr(model, "kl_coef"):
        raise AttributeError(
            f"the controlled model must have a 'kl_coef' attribute, got a {type(model).__name__} "
            "without one"
        )


class KLControllerBase(abc.ABC):
    """Base class of KL-coefficient controllers.

    :meth:`update` takes the KL values measured since the previous update, sets
    :attr:`coef` and, when a model is controlled, writes it to ``model.kl_coef``.
    """

    coef: float
    model: nn.Module | None

    @abc.abstractmethod
    def update(self, kl_values: Sequence[float] | float) -> float:
        """Update the coefficient from measured KL values; returns the new coefficient."""

    def _publish(self) -> float:
        if self.model is not None:
            self.model.kl_coef = self.coef
        return self.coef


class ConstantKLController(KLControllerBase):
    """Keeps the KL coefficient fixed, whatever the KL measured.

    Keyword Args:
        kl_coef: the coefficient.
        model: a module with a ``kl_coef`` attribute, set to the coefficient.

    Examples:
        >>> controller = ConstantKLController(kl_coef=0.1)
        >>> controller.update([5.0, 7.0])
        0.1
    """

    def __init__(self, *, kl_coef: float | None = None, model: nn.Module | None = None) -> None:
        _check_model(model)
        if kl_coef is None:
            if model is None:
                raise ValueError("ConstantKLController needs kl_coef (or a model with a kl_coef)")
            kl_coef = float(model.kl_coef)
        self.coef = float(kl_coef)
        self.model = model
        self._publish()

    def update(self, kl_values: Sequence[float] | float | None = None) -> float:
        """Return the fixed coefficient (the KL values are ignored)."""
        return self._publish()


class AdaptiveKLController(KLControllerBase):
    """Adapts the KL coefficient so that the measured KL tracks a target (Ziegler et al., 2019).

    After ``n`` KL measurements of mean ``kl``, the coefficient is multiplied by
    ``1 + clip(kl / target - 1, -0.2, 0.2) * n / horizon``: it grows while the policy
    drifts further than ``target`` from the reference, and shrinks otherwise.

    Keyword Args:
        init_kl_coef: the initial coefficient.
        target: the target KL value.
        horizon: how many measurements a full proportional correction is spread over.
        model: a module with a ``kl_coef`` attribute, set to the coefficient.

    Examples:
        >>> controller = AdaptiveKLController(init_kl_coef=0.2, target=6.0, horizon=10)
        >>> round(controller.update([12.0, 12.0]), 4)  # KL far above target: +20% * 2/10
        0.208
    """

    def __init__(
        self, *, init_kl_coef: float, target: float, horizon: int, model: nn.Module | None = None
    ) -> None:
        _check_model(model)
        if not target > 0:
            raise ValueError(f"target must be a positive KL value, got {target}")
        if int(horizon) < 1:
            raise ValueError(f"horizon must be a positive integer, got {horizon}")
        self.coef = float(init_kl_coef)
        self.target = float(target)
        self.horizon = int(horizon)
        self.model = model
        self._publish()

    def update(self, kl_values: Sequence[float] | float) -> float:
        """Adapt the coefficient to the mean of ``kl_values`` (a sequence or one value)."""
        values = [float(kl_values)] if isinstance(kl_values, (int, float)) else list(kl_values)
        values = [float(value) for value in values]
        if not values:
            return self._publish()
        mean = math.fsum(values) / len(values)
        error = min(max(mean / self.target - 1.0, -0.2), 0.2)
        self.coef *= 1.0 + error * len(values) / self.horizon
        return self._publish()
