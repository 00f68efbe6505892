""":class:`LLMHashingEnv`: token-by-token text generation whose observation is a hash of the text."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict, TensorDictBase
from torch import nn

from tdrl.data import Categorical, Composite, NonTensor, Unbounded
from tdrl.envs.common import EnvBase

__all__ = ["LLMHashingEnv"]


class TokenChainHash(nn.Module):
    """Hashes each row of an integer tensor to one int64 (BLAKE2b, 8 bytes of digest).

    ``[..., k]`` integers become ``[...]`` hashes; equal rows give equal hashes in every
    process and session.

    Examples:
        >>> import torch
        >>> hash_rows = TokenChainHash()
        >>> out = hash_rows(torch.tensor([[1, 2], [1, 2], [2, 1]]))
        >>> out.shape, bool(out[0] == out[1]), bool(out[0] == out[2])
        (torch.Size([3]), True, False)
    """

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        """Hash the last dim of ``rows``."""
        flat = rows.detach().to("cpu", torch.int64).reshape(-1, rows.shape[-1]).contiguous()
        digests = [
            int.from_bytes(
                hashlib.blake2b(row.numpy().tobytes(), digest_size=8).digest(),
                "little",
                signed=True,
            )
            for row in flat
        ]
        return torch.tensor(digests, dtype=torch.int64, device=rows.device).reshape(rows.shape[:-1])


def _flat_texts(value: Any) -> list[str]:
    """The strings of a non-tensor entry (a string, or a stack of any shape), flattened."""
    if isinstance(value, NonTensorStack):
        value = value.tolist()
    elif isinstance(value, NonTensorData):
        value = value.data
    if isinstance(value, str):
        return [value]
    out: list[str] = []
    for item in value:
        out.extend(_flat_texts(item))
    return out


class LLMHashingEnv(EnvBase):
    """Text generation one token at a time, where the observation identifies the token chain.

    The state is a hash of the sequence of tokens produced so far: each action (a token id)
    is hashed together with the current observation, so equal token chains always lead to
    equal observations and a tree of generations can be stored with hashes as node ids.
    With ``text_output``, the decoded text is carried along as a non-tensor entry.

    A generation starts from :meth:`make_tensordict` (a prompt's hash and text) passed to
    :meth:`reset`; a reset without input starts from the empty chain. Rewards are zero and
    episodes never end: wrap the env with transforms (e.g. a
    :class:`~tdrl.envs.StepCounter`) to score or stop them. The env is batch-unlocked: the
    data passed to ``reset`` decides the batch size.

    Args:
        vocab_size: the number of token ids (defaults to the tokenizer's size).

    Keyword Args:
        hashing_module: maps ``[..., 2]`` int64 rows ``(observation, token)`` to ``[...]``
            int64 hashes (default: :class:`TokenChainHash`).
        observation_key: where the hash is written.
        text_output: carry the decoded text (needs a tokenizer).
        tokenizer: a tokenizer with ``encode``, ``decode`` and ``batch_decode`` (e.g. a
            ``transformers`` tokenizer).
        text_key: where the text is written.
        device: the device of the data.

    Examples:
        >>> class Letters:  # a character-level tokenizer
        ...     def encode(self, text): return [ord(c) - 97 for c in text]
        ...     def decode(self, ids): return "".join(chr(i + 97) for i in ids)
        ...     def batch_decode(self, ids): return [self.decode(row) for row in ids]
        >>> env = LLMHashingEnv(vocab_size=26, tokenizer=Letters())
        >>> start = env.reset(env.make_tensordict("ab"))
        >>> td = start.clone().set("action", torch.tensor(2))
        >>> out = env.step(td)["next"]
        >>> out["text"], bool(out["observation"] == env.make_tensordict("abc")["observation"])
        ('abc', True)
    """

    batch_locked = False

    def __init__(
        self,
        vocab_size: int | None = None,
        *,
        hashing_module: Callable[[torch.Tensor], torch.Tensor] | None = None,
        observation_key: Any = "observation",
        text_output: bool = True,
        tokenizer: Any = None,
        text_key: Any = "text",
        device: Any = None,
    ) -> None:
        super().__init__(device=device, batch_size=())
        if vocab_size is None:
            if tokenizer is None:
                raise ValueError("LLMHashingEnv needs vocab_size, or a tokenizer to read it from")
            vocab_size = len(tokenizer) if hasattr(tokenizer, "__len__") else tokenizer.vocab_size
        if int(vocab_size) < 1:
            raise ValueError(f"vocab_size must be a positive integer, got {vocab_size}")
        if text_output and tokenizer is None:
            raise ValueError("LLMHashingEnv: text_output=True needs a tokenizer (to decode tokens)")
        self.vocab_size = int(vocab_size)
        self.hashing_module = hashing_module if hashing_module is not None else TokenChainHash()
        self.observation_key = observation_key
        self.text_output = bool(text_output)
        self.tokenizer = tokenizer
        self.text_key = text_key
        observation = Composite({observation_key: Unbounded((), dtype=torch.int64)})
        if self.text_output:
            observation[text_key] = NonTensor(shape=())
        self.observation_spec = observation
        self.state_spec = observation.clone()
        self.action_spec = Categorical(self.vocab_size, shape=(), dtype=torch.int64)
        self.reward_spec = Unbounded((1,), dtype=torch.float32)

    # -- hashing ----------------------------------------------------------------------------------
    def _chain(self, previous: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
        rows = torch.stack([previous.long(), token.long()], -1)
        return torch.as_tensor(self.hashing_module(rows), device=previous.device).long()

    def _hash_tokens(self, tokens: Sequence[int]) -> torch.Tensor:
        value = torch.zeros((), dtype=torch.int64)
        for token in tokens:
            value = self._chain(value, torch.tensor(int(token)))
        return value

    def make_tensordict(self, input: str | list[str]) -> TensorDict:
        """The start of a generation from a prompt (or a list of prompts): its hash and text."""
        if self.tokenizer is None:
            raise ValueError(
                "LLMHashingEnv.make_tensordict needs a tokenizer (to encode the prompt)"
            )
        single = isinstance(input, str)
        prompts = [input] if single else list(input)
        hashes = torch.stack([self._hash_tokens(self.tokenizer.encode(p)) for p in prompts])
        data = TensorDict(
            {self.observation_key: hashes}, batch_size=[len(prompts)], device=self.device
        )
        if self.text_output:
            data.set(self.text_key, NonTensorStack(*(NonTensorData(p) for p in prompts)))
        return data[0] if single else data

    # -- env protocol ---------------------------------------------------------------------------
    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        batch = tensordict.batch_size if tensordict is not None else torch.Size(())
        hashes = None if tensordict is None else tensordict.get(self.observation_key, None)
        if hashes is None:
            hashes = torch.zeros(batch, dtype=torch.int64, device=self.device)
        out = TensorDict(
            {
                self.observation_key: hashes.clone(),
                "done": torch.zeros((*batch, 1), dtype=torch.bool, device=self.device),
                "terminated": torch.zeros((*batch, 1), dtype=torch.bool, device=self.device),
            },
            batch_size=batch,
            device=self.device,
        )
        if self.text_output:
            text = None if tensordict is None else tensordict.get(self.text_key, None)
            if text is None:
                text = self._nontensor([""] * batch.numel(), batch) if batch else NonTensorData("")
            out.set(self.text_key, text)
        return out

    @staticmethod
    def _nontensor(texts: list[str], batch: torch.Size) -> Any:
        if not batch:
            return NonTensorData(texts[0])
        stack = NonTensorStack(*(NonTensorData(t) for t in texts))
        return stack.reshape(batch) if len(batch) > 1 else stack

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        batch = tensordict.batch_size
        action = tensordict.get("action")
        hashes = self._chain(tensordict.get(self.observation_key), action)
        out = TensorDict(
            {
                self.observation_key: hashes,
                "reward": torch.zeros((*batch, 1), dtype=torch.float32, device=self.device),
                "done": torch.zeros((*batch, 1), dtype=torch.bool, device=self.device),
                "terminated": torch.zeros((*batch, 1), dtype=torch.bool, device=self.device),
            },
            batch_size=batch,
            device=self.device,
        )
        if self.text_output:
            previous = _flat_texts(tensordict.get(self.text_key))
            pieces = self.tokenizer.batch_decode(action.reshape(-1, 1).tolist())
            texts = [before + piece for before, piece in zip(previous, pieces)]
            out.set(self.text_key, self._nontensor(texts, batch))
        return out

    def _set_seed(self, seed: int | None) -> None:
        """Nothing to seed: the env is deterministic."""
