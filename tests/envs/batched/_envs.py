"""Small envs for the batched-env tests (importable by worker processes)."""

from __future__ import annotations

import os
import warnings

import torch
from tensordict import TensorDict, tensorclass

from tdrl.data import Bounded, Categorical, Composite, NonTensor, Unbounded
from tdrl.envs import EnvBase
from tests.mocks import CountingEnv


class _Settings:
    """An object held by a sub-env, to read its attributes through a batched env."""

    def __init__(self, size: int) -> None:
        self.size = size

    def doubled(self) -> int:
        return 2 * self.size


class SizedEnv(CountingEnv):
    """A counting env whose observation has ``size`` entries (heterogeneous batches)."""

    def __init__(self, size: int = 4, max_steps: int = 5, batch_size=()):
        super().__init__(max_steps=max_steps, batch_size=batch_size)
        self.size = size
        self.observation_spec = Composite(
            observation=Unbounded((*self.batch_size, size)), shape=self.batch_size
        )
        self._ones = torch.ones((*self.batch_size, size))

    def describe(self, suffix: str = "") -> str:
        return f"size={self.size}{suffix}"

    @property
    def settings(self) -> _Settings:
        return _Settings(self.size)

    def pid(self) -> int:
        return os.getpid()

    def warn_count(self) -> int:
        with warnings.catch_warnings(record=True) as caught:
            warnings.warn("a warning from the sub-env", UserWarning, stacklevel=1)
        return len(caught)


class FailingEnv(CountingEnv):
    """Raises ``ValueError`` in ``_step`` after ``fail_after`` steps (or at construction)."""

    def __init__(self, fail_after: int = 0, fail_at_init: bool = False):
        if fail_at_init:
            raise ValueError("cannot build this env: boom at construction")
        super().__init__(max_steps=100)
        self.fail_after = fail_after
        self.steps = 0

    def _step(self, tensordict):
        self.steps += 1
        if self.steps > self.fail_after:
            raise ValueError(f"boom at step {self.steps}")
        return super()._step(tensordict)


class MisspecifiedEnv(CountingEnv):
    """Declares a 3-float observation but returns 4 floats."""

    def __init__(self):
        super().__init__()
        self.observation_spec = Composite(observation=Unbounded((3,)))


class DriftingSpecEnv(CountingEnv):
    """Each instance built in a new process gets a different observation size."""

    def __init__(self, parent_pid: int):
        super().__init__()
        if os.getpid() != parent_pid:
            self.observation_spec = Composite(observation=Unbounded((7,)))


class TextEnv(EnvBase):
    """An env with a non-tensor ``"text"`` observation next to a tensor one."""

    def __init__(self, prefix: str = "t", max_steps: int = 1000):
        super().__init__()
        self.prefix = prefix
        self.max_steps = max_steps
        self.observation_spec = Composite(observation=Unbounded((1,)), text=NonTensor(shape=()))
        self.action_spec = Bounded(-1.0, 1.0, (1,))
        self.reward_spec = Unbounded((1,))
        self.done_spec = Categorical(2, (1,), dtype=torch.bool)
        self.count = 0

    def _reset(self, tensordict=None, **kwargs):
        self.count = 0
        data = TensorDict(observation=torch.zeros(1), done=torch.zeros(1, dtype=torch.bool))
        data.set_non_tensor("text", f"{self.prefix}0")
        return data

    def _step(self, tensordict):
        self.count += 1
        data = TensorDict(
            observation=torch.full((1,), float(self.count)),
            reward=torch.zeros(1),
            done=torch.tensor([self.count >= self.max_steps]),
        )
        data.set_non_tensor("text", f"{self.prefix}{self.count}")
        return data

    def _set_seed(self, seed):
        pass


class SleepyEnv(CountingEnv):
    """A counting env whose step sleeps ``delay`` seconds (a slow simulator)."""

    def __init__(self, delay: float = 0.0):
        super().__init__(max_steps=100)
        self.delay = delay

    def _step(self, tensordict):
        import time

        time.sleep(self.delay)
        return super()._step(tensordict)


class NoActionEnv(EnvBase):
    """An env with no action and no state: only done flags and a step counter observation."""

    def __init__(self, max_steps: int = 3):
        super().__init__()
        self.max_steps = max_steps
        self.observation_spec = Composite(steps=Unbounded((1,)))
        self.steps = 0

    def _reset(self, tensordict=None, **kwargs):
        self.steps = 0
        return TensorDict(steps=torch.zeros(1))

    def _step(self, tensordict):
        self.steps += 1
        return TensorDict(
            steps=torch.full((1,), float(self.steps)),
            reward=torch.zeros(1),
            done=torch.tensor([self.steps >= self.max_steps]),
        )

    def _set_seed(self, seed):
        pass


class EchoEnv(EnvBase):
    """Reads its previous observation back from the step input (as a stateless env or a
    transform keeping a history in the data would), without declaring it as a state."""

    def __init__(self, words: int = 0):
        super().__init__()
        self.observation_spec = Composite(total=Unbounded((1,)))
        if words:
            self.observation_spec = Composite(total=Unbounded((1,)), words=NonTensor(shape=(-1,)))
        self.action_spec = Bounded(0.0, 1.0, (1,))
        self.reward_spec = Unbounded((1,))
        self.done_spec = Categorical(2, (1,), dtype=torch.bool)
        self.words = words

    def _reset(self, tensordict=None, **kwargs):
        data = TensorDict(total=torch.zeros(1), done=torch.zeros(1, dtype=torch.bool))
        if self.words:
            data.set_non_tensor("words", ["w"])
        return data

    def _step(self, tensordict):
        data = TensorDict(
            total=tensordict["total"] + tensordict["action"],
            reward=torch.zeros(1),
            done=torch.zeros(1, dtype=torch.bool),
        )
        if self.words:
            data.set_non_tensor("words", [*tensordict["words"], "w"])
        return data

    def _set_seed(self, seed):
        pass


@tensorclass
class Reading:
    """A tensorclass observation: a label and a value."""

    label: str
    value: torch.Tensor


class TensorclassEnv(CountingEnv):
    """A counting env that also observes a :class:`Reading` (a spec with ``data_cls``)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.observation_spec["reading"] = Composite(
            label=NonTensor(example_data="0", shape=()),
            value=Unbounded(shape=()),
            data_cls=Reading,
        )

    def _reset(self, tensordict=None, **kwargs):
        out = super()._reset(tensordict, **kwargs)
        return out.set("reading", Reading("0", torch.zeros(())))

    def _step(self, tensordict):
        out = super()._step(tensordict)
        count = out["observation"][0]
        return out.set("reading", Reading(str(int(count)), count.clone()))


@tensorclass
class Gauge:
    """A tensorclass observation holding tensors only."""

    level: torch.Tensor


class GaugeEnv(CountingEnv):
    """A counting env that also observes a :class:`Gauge` (tensor fields only)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.observation_spec["gauge"] = Composite(level=Unbounded(shape=()), data_cls=Gauge)

    def _reset(self, tensordict=None, **kwargs):
        out = super()._reset(tensordict, **kwargs)
        return out.set("gauge", Gauge(self.count[0].clone()))

    def _step(self, tensordict):
        out = super()._step(tensordict)
        return out.set("gauge", Gauge(self.count[0].clone()))


class MarkedEnv(SizedEnv):
    """A SizedEnv that leaves a file in ``folder`` when built and when closed (names hold
    the worker index and the pid), and can fail at construction."""

    def __init__(self, index: int, folder: str, size: int = 4, fail: bool = False):
        self.index = index
        self.folder = folder
        with open(os.path.join(folder, f"built-{index}-{os.getpid()}"), "w"):
            pass
        if fail:
            raise RuntimeError(f"sub-env {index} refuses to be built")
        super().__init__(size=size)

    def close(self, *, raise_if_closed: bool = True) -> None:
        with open(os.path.join(self.folder, f"closed-{self.index}-{os.getpid()}"), "w"):
            pass
        super().close(raise_if_closed=raise_if_closed)


class SlowCloseEnv(SizedEnv):
    """A SizedEnv whose ``close`` takes ``delay`` seconds."""

    def __init__(self, delay: float = 10.0):
        super().__init__()
        self.delay = delay

    def close(self, *, raise_if_closed: bool = True) -> None:
        import time

        time.sleep(self.delay)
        super().close(raise_if_closed=raise_if_closed)
