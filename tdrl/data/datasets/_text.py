"""Text entries of datasets: stored as integer ids into a vocabulary, returned as strings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import NonTensorData, NonTensorStack, TensorDictBase

from tdrl.envs.transforms.transform import NestedKey, Transform


class TextLookup(Transform):
    """Replaces integer text ids by their strings (a non-tensor entry) in sampled data.

    Args:
        vocabularies: for each entry holding ids, the strings the ids index.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> lookup = TextLookup({"instruction": ["pick", "place"]})
        >>> lookup(TensorDict({"instruction": torch.tensor([1, 0])}, [2])).get("instruction").tolist()
        ['place', 'pick']
    """

    def __init__(self, vocabularies: dict[Any, Sequence[str]]) -> None:
        keys = [tuple(key.split("/")) if isinstance(key, str) else key for key in vocabularies]
        super().__init__(in_keys=keys, out_keys=keys)
        self.vocabularies = {key: list(words) for key, words in zip(keys, vocabularies.values())}

    def _lookup(self, key: NestedKey, ids: torch.Tensor) -> Any:
        words = self.vocabularies[key if isinstance(key, tuple) else (key,)]
        flat = [words[i] for i in ids.reshape(-1).tolist()]
        if ids.ndim == 0:
            return NonTensorData(flat[0])
        stack = NonTensorStack(*(NonTensorData(word) for word in flat))
        return stack.reshape(ids.shape) if ids.ndim > 1 else stack

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        for key in self.in_keys:
            ids = next_tensordict.get(key, None)
            if isinstance(ids, torch.Tensor):
                next_tensordict.set(key, self._lookup(key, ids))
        return next_tensordict

    def __repr__(self) -> str:
        return f"{type(self).__name__}(keys={self.in_keys})"
