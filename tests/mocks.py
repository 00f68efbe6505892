"""Small mock environments shared by the env tests."""

from __future__ import annotations

import torch
from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase

from tdrl.data import Binary, Bounded, Categorical, Composite, Unbounded
from tdrl.envs import EnvBase


class CountingEnv(EnvBase):
    """Stateful counter: the 4-float observation is the step count; done after ``max_steps``.

    Honors ``"_reset"`` masks (only masked elements restart counting).
    """

    def __init__(self, max_steps: int = 5, batch_size=(), device=None, **kwargs):
        super().__init__(device=device, batch_size=batch_size, **kwargs)
        self.max_steps = max_steps
        self.observation_spec = Composite(
            observation=Unbounded((*self.batch_size, 4)), shape=self.batch_size
        )
        self.action_spec = Bounded(-1.0, 1.0, (*self.batch_size, 1))
        self.reward_spec = Unbounded((*self.batch_size, 1))
        self.done_spec = Categorical(2, (*self.batch_size, 1), dtype=torch.bool)
        self.count = torch.zeros((*self.batch_size, 1))
        self._ones = torch.ones((*self.batch_size, 4))
        self.seed_value = None

    def _reset(self, tensordict=None, **kwargs):
        reset = None if tensordict is None else tensordict.get("_reset", None)
        if reset is None:
            self.count = torch.zeros_like(self.count)
        else:
            self.count = torch.where(reset, 0.0, self.count)
        done = self.count >= self.max_steps
        return TensorDict(
            {"observation": self.count * self._ones, "done": done},
            batch_size=self.batch_size,
            device=self.device,
        )

    def _step(self, tensordict):
        self.count = self.count + 1
        done = self.count >= self.max_steps
        return TensorDict(
            {
                "observation": self.count * self._ones,
                "reward": tensordict.get("action").clone(),
                "done": done,
            },
            batch_size=self.batch_size,
            device=self.device,
        )

    def _set_seed(self, seed):
        self.seed_value = seed


class StatelessCountingEnv(EnvBase):
    """Batch-unlocked counter whose state (``"count"``) travels in the data."""

    _batch_locked = False

    def __init__(self, max_steps: int = 5):
        super().__init__()
        self.max_steps = max_steps
        self.observation_spec = Composite(count=Unbounded((1,)), observation=Unbounded((4,)))
        self.state_spec = Composite(count=Unbounded((1,)))
        self.action_spec = Bounded(-1.0, 1.0, (1,))
        self.reward_spec = Unbounded((1,))
        self.full_done_spec = Composite(
            terminated=Categorical(2, (1,), dtype=torch.bool),
            truncated=Categorical(2, (1,), dtype=torch.bool),
        )

    def _reset(self, tensordict=None, **kwargs):
        batch = tensordict.batch_size if tensordict is not None else torch.Size([])
        count = torch.zeros((*batch, 1))
        false = torch.zeros((*batch, 1), dtype=torch.bool)
        return TensorDict(
            count=count,
            observation=count.expand(*batch, 4).clone(),
            terminated=false,
            truncated=false.clone(),
            batch_size=batch,
        )

    def _step(self, tensordict):
        count = tensordict.get("count") + 1
        batch = tensordict.batch_size
        return TensorDict(
            count=count,
            observation=count.expand(*batch, 4).clone(),
            reward=tensordict.get("action") * 0 + 1,
            terminated=count >= self.max_steps,
            truncated=torch.zeros((*batch, 1), dtype=torch.bool),
            batch_size=batch,
        )

    def _set_seed(self, seed):
        pass


class MultiAgentCountingEnv(EnvBase):
    """Counting env with an ``"agents"`` group (per-agent action, observation, reward, done)
    and a shared root done, built like the multi-agent seeds example (specs stacked
    with ``torch.stack``). Agent ``i`` is done after ``max_steps + i`` steps; the root
    done is the ``all`` of the agents."""

    def __init__(self, n_agents: int = 3, max_steps: int = 3, batch_size=()):
        super().__init__(batch_size=batch_size)
        self.n_agents = n_agents
        self.max_steps = max_steps
        batch = self.batch_size
        action_specs = [Bounded(-1.0, 1.0, (*batch, 2)) for _ in range(n_agents)]
        reward_specs = [Unbounded((*batch, 1)) for _ in range(n_agents)]
        observation_specs = [Unbounded((*batch, 3)) for _ in range(n_agents)]
        done_specs = [Categorical(2, (*batch, 1), dtype=torch.bool) for _ in range(n_agents)]
        agents_shape = (*batch, n_agents)
        self.action_spec = Composite(
            {
                "agents": Composite(
                    {"action": torch.stack(action_specs, dim=len(batch))}, shape=agents_shape
                )
            },
            shape=batch,
        )
        self.reward_spec = Composite(
            {
                "agents": Composite(
                    {"reward": torch.stack(reward_specs, dim=len(batch))}, shape=agents_shape
                )
            },
            shape=batch,
        )
        self.observation_spec = Composite(
            {
                "agents": Composite(
                    {"observation": torch.stack(observation_specs, dim=len(batch))},
                    shape=agents_shape,
                ),
                "state": Unbounded((*batch, 2)),
            },
            shape=batch,
        )
        self.full_done_spec = Composite(
            {
                "done": Categorical(2, (*batch, 1), dtype=torch.bool),
                "agents": Composite(
                    {"done": torch.stack(done_specs, dim=len(batch))}, shape=agents_shape
                ),
            },
            shape=batch,
        )
        self.count = torch.zeros((*batch, n_agents, 1))
        self.limits = (torch.arange(n_agents, dtype=torch.float32) + max_steps).unsqueeze(-1)

    def _data(self):
        batch = self.batch_size
        agents_done = self.count >= self.limits
        return {
            "agents": TensorDict(
                {
                    "observation": self.count.expand(*batch, self.n_agents, 3).clone(),
                    "done": agents_done,
                },
                batch_size=(*batch, self.n_agents),
            ),
            "state": self.count.sum(-2).expand(*batch, 2).clone(),
            "done": agents_done.all(-2),
        }

    def _reset(self, tensordict=None, **kwargs):
        root = None if tensordict is None else tensordict.get("_reset", None)
        nested = None if tensordict is None else tensordict.get(("agents", "_reset"), None)
        if root is not None:
            mask = root.unsqueeze(-2)
        elif nested is not None:
            mask = nested
        else:
            mask = torch.ones_like(self.count, dtype=torch.bool)
        self.count = torch.where(mask, 0.0, self.count)
        return TensorDict(self._data(), batch_size=self.batch_size)

    def _step(self, tensordict):
        self.count = self.count + 1
        data = self._data()
        data["agents"].set("reward", tensordict.get(("agents", "action")).sum(-1, keepdim=True))
        return TensorDict(data, batch_size=self.batch_size)

    def _set_seed(self, seed):
        pass


class ZeroResetEnv(EnvBase):
    """Returns zeros after reset, with done levels at the root and in ``agent0`` / ``agent1``
    (the env of the partial-reset seeds examples: ``"val"`` entries of shape (2,))."""

    def __init__(self):
        super().__init__()
        val = Unbounded((2,), dtype=torch.int64)
        done = Categorical(2, (2,), dtype=torch.bool)
        self.observation_spec = Composite(
            val=val, agent0=Composite(val=val.clone()), agent1=Composite(val=val.clone())
        )
        self.action_spec = Categorical(2, (1,))
        self.reward_spec = Unbounded((1,))
        self.full_done_spec = Composite(
            done=done, agent0=Composite(done=done.clone()), agent1=Composite(done=done.clone())
        )

    def _reset(self, tensordict=None, **kwargs):
        zeros = torch.zeros(2, dtype=torch.int64)
        false = torch.zeros(2, dtype=torch.bool)
        return TensorDict(
            {
                "val": zeros,
                "done": false,
                "agent0": {"val": zeros.clone(), "done": false.clone()},
                "agent1": {"val": zeros.clone(), "done": false.clone()},
            }
        )

    def _step(self, tensordict):
        out = self._reset()
        out.set("reward", torch.zeros(1))
        return out

    def _set_seed(self, seed):
        pass


class EnvWithDynamicSpec(EnvBase):
    """The dynamic-spec env of the seeds (observation of shape (3, -1, 2))."""

    def __init__(self, max_count=5):
        super().__init__(batch_size=())
        self.observation_spec = Composite(observation=Unbounded(shape=(3, -1, 2)))
        self.action_spec = Bounded(low=-1, high=1, shape=(2,))
        self.full_done_spec = Composite(
            done=Binary(1, shape=(1,), dtype=torch.bool),
            terminated=Binary(1, shape=(1,), dtype=torch.bool),
            truncated=Binary(1, shape=(1,), dtype=torch.bool),
        )
        self.reward_spec = Unbounded((1,), dtype=torch.float)
        self.count = 0
        self.max_count = max_count

    def _reset(self, tensordict=None):
        self.count = 0
        data = TensorDict(
            {"observation": torch.full((3, self.count + 1, 2), self.count, dtype=torch.float32)}
        )
        data.update(self.done_spec.zero())
        return data

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self.count += 1
        done = self.count >= self.max_count
        observation = TensorDict(
            {"observation": torch.full((3, self.count + 1, 2), self.count, dtype=torch.float32)}
        )
        done = self.full_done_spec.zero() | done
        reward = self.full_reward_spec.zero()
        return observation.update(done).update(reward)

    def _set_seed(self, seed):
        self.manual_seed = seed
        return seed


class AutoResettingCountingEnv(CountingEnv):
    """A counting env whose ``_step`` restarts done elements by itself (next episode's
    first observation is returned with the done flag)."""

    def _step(self, tensordict):
        out = super()._step(tensordict)
        done = out.get("done")
        if bool(done.any()):
            self.count = torch.where(done, 0.0, self.count)
            out.set("observation", self.count * self._ones)
        return out


class HeterogeneousAgentsEnv(EnvBase):
    """Two agents in an ``"agents"`` group whose actions and observations differ in size
    (3 and 2), so the group specs are stacks of different specs and the group data is a
    lazy stack. Each agent's observation counts the steps; done after ``max_steps``."""

    sizes = (3, 2)

    def __init__(self, max_steps: int = 4, batch_size=()):
        super().__init__(batch_size=batch_size)
        batch = self.batch_size
        self.max_steps = max_steps
        self.full_action_spec_unbatched = Composite(
            agents=torch.stack([Composite(action=Bounded(-1.0, 1.0, (n,))) for n in self.sizes])
        )
        self.full_observation_spec_unbatched = Composite(
            agents=torch.stack([Composite(obs=Unbounded((n,))) for n in self.sizes])
        )
        self.full_reward_spec_unbatched = Composite(
            agents=torch.stack([Composite(reward=Unbounded((1,))) for _ in self.sizes])
        )
        self.count = torch.zeros(*batch, 1)

    def _agents(self, **extra):
        batch = self.batch_size
        parts = [
            TensorDict(
                {
                    "obs": self.count.expand(*batch, n).clone(),
                    **{k: v[i] for k, v in extra.items()},
                },
                batch_size=batch,
            )
            for i, n in enumerate(self.sizes)
        ]
        return LazyStackedTensorDict.lazy_stack(parts, len(batch))

    def _reset(self, tensordict=None, **kwargs):
        self.count = torch.zeros_like(self.count)
        return TensorDict(agents=self._agents(), batch_size=self.batch_size)

    def _step(self, tensordict):
        self.count = self.count + 1
        actions = tensordict["agents"].tensordicts
        rewards = [part["action"].sum(-1, keepdim=True) for part in actions]
        return TensorDict(
            agents=self._agents(reward=rewards),
            done=self.count >= self.max_steps,
            batch_size=self.batch_size,
        )

    def _set_seed(self, seed):
        pass
