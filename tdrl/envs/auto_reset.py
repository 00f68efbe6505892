"""Support for envs whose ``_step`` resets done elements by itself (auto-resetting envs).

Such an env returns, with a ``done`` flag, the *first* observation of the next
episode. :class:`AutoResetHandler` stashes those observations, optionally
replaces them in the step output with a fill value (NaN for floats), and hands
them out on the next (partial) reset so that no real reset is run.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.envs._keys import as_tuple
from tdrl.envs._partial import align_mask
from tdrl.envs._td_fast import any_true

__all__ = ["AutoResetHandler"]


class AutoResetHandler:
    """Stash-and-replace logic shared by auto-resetting envs and ``AutoResetTransform``.

    Call :meth:`on_step` on each step output and :meth:`on_reset` to build the
    output of a reset from what was stashed.

    Args:
        replace: replace the observations of done elements in the step output.
        fill_float: fill value for floating entries (``"nan"`` or a number).
        fill_int: fill value for integer entries.
        fill_bool: fill value for boolean entries.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> handler = AutoResetHandler()
        >>> step = TensorDict(observation=torch.tensor([[1.0], [2.0]]),
        ...                   done=torch.tensor([[False], [True]]), batch_size=[2])
        >>> step = handler.on_step(step, ["observation"], ["done"])
        >>> step["observation"].squeeze(-1)
        tensor([1., nan])
        >>> reset = handler.on_reset(TensorDict(done=torch.zeros(2, 1, dtype=torch.bool),
        ...                                     batch_size=[2]))
        >>> reset["observation"].squeeze(-1)
        tensor([1., 2.])
    """

    def __init__(
        self,
        *,
        replace: bool = True,
        fill_float: float | str = "nan",
        fill_int: int = -1,
        fill_bool: bool = False,
    ) -> None:
        self.replace = replace
        self.fill_float = float(fill_float)
        self.fill_int = int(fill_int)
        self.fill_bool = bool(fill_bool)
        self._stash: dict = {}

    def has_stash(self) -> bool:
        """Whether observations from a step are waiting to be used by a reset."""
        return bool(self._stash)

    def _fill(self, dtype: torch.dtype) -> Any:
        if dtype == torch.bool:
            return self.fill_bool
        if dtype.is_floating_point or dtype.is_complex:
            return self.fill_float
        return self.fill_int

    @staticmethod
    def _done_for(key: Any, done_keys: list) -> Any:
        key_t = as_tuple(key)
        best, best_len = None, -1
        for done_key in done_keys:
            prefix = as_tuple(done_key)[:-1]
            if key_t[: len(prefix)] == prefix and len(prefix) > best_len:
                best, best_len = done_key, len(prefix)
        return best

    def on_step(
        self, next_tensordict: TensorDictBase, observation_keys: list, done_keys: list
    ) -> TensorDictBase:
        """Stash the observations of ``next_tensordict``; replace those of done elements.

        Args:
            next_tensordict: the output of ``_step`` (not nested under ``"next"``).
            observation_keys: the entries to stash (and replace).
            done_keys: the ``"done"`` entry of each done level.
        """
        stash = {}
        for key in observation_keys:
            value = next_tensordict.get(key, None)
            if value is not None:
                stash[key] = value
        self._stash = stash
        if not self.replace:
            return next_tensordict
        dones = {}
        for done_key in done_keys:
            done = next_tensordict.get(done_key, None)
            if done is not None and any_true(done):
                dones[done_key] = done
        if not dones:
            return next_tensordict
        for key, value in stash.items():
            done_key = self._done_for(key, list(dones))
            if done_key is None or not isinstance(value, torch.Tensor):
                continue
            mask = align_mask(dones[done_key], value.shape, "done", done_key, key)
            fill = torch.full((), self._fill(value.dtype), dtype=value.dtype, device=value.device)
            next_tensordict.set(key, torch.where(mask, fill, value))
        return next_tensordict

    def on_reset(self, tensordict_reset: TensorDictBase) -> TensorDictBase:
        """Write the stashed observations into ``tensordict_reset`` and clear the stash."""
        for key, value in self._stash.items():
            tensordict_reset.set(key, value)
        self._stash = {}
        return tensordict_reset
