"""A reusable conformance suite for EnvBase subclasses.

Inherit :class:`EnvConformance` in a test class and define ``make_env(self)``;
optionally override ``reset_input(self, env)`` (the tensordict given to the
first ``reset``, e.g. a batch size for batch-unlocked envs) and
``rollout_steps``. Every test builds a fresh env and closes it afterwards.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.envs import check_env_specs, step_mdp
from tdrl.envs._keys import as_tuple


def _shape_fits(expected, got) -> bool:
    return len(expected) == len(got) and all(e in (-1, g) for e, g in zip(expected, got))


class EnvConformance:
    """Checks every env must pass: specs match data, done completion, seeding, partial resets."""

    rollout_steps = 5
    #: set to False for envs whose data does not stack contiguously (dynamic specs)
    contiguous = True
    #: set to False for envs whose step does not depend on a seed
    seeded = True

    def make_env(self):
        raise NotImplementedError("conformance test classes must define make_env(self)")

    def reset_input(self, env) -> TensorDictBase | None:
        return None

    def _env(self):
        env = self.make_env()
        self._envs = [*getattr(self, "_envs", []), env]
        return env

    def teardown_method(self, method):
        for env in getattr(self, "_envs", []):
            env.close()
        self._envs = []

    def _check_against(self, env, data, spec, keys, prefix=()):
        lead = tuple(data.batch_size)
        ndim = len(env.batch_size)
        for key in keys:
            full = (*prefix, *as_tuple(key))
            value = data.get(full, None)
            assert value is not None, f"entry {full} declared in the specs is missing"
            expected = (*lead, *tuple(spec[key].shape[ndim:]))
            assert _shape_fits(expected, tuple(value.shape)), (full, expected, value.shape)
            assert value.dtype == spec[key].dtype, (full, value.dtype, spec[key].dtype)

    # ------------------------------------------------------------------ tests
    def test_check_env_specs(self):
        env = self._env()
        check_env_specs(
            env, return_contiguous=self.contiguous, seed=0, tensordict=self.reset_input(env)
        )

    def test_specs_are_locked_and_batched(self):
        env = self._env()
        assert env.input_spec.is_locked and env.output_spec.is_locked
        batch = tuple(env.batch_size)
        for spec in (
            env.full_observation_spec,
            env.full_action_spec,
            env.full_reward_spec,
            env.full_done_spec,
        ):
            for key in spec.keys(True, True):
                assert tuple(spec[key].shape[: len(batch)]) == batch, key

    def test_leaf_accessors(self):
        env = self._env()
        if len(env.action_keys) == 1:
            assert env.action_spec == env.full_action_spec[env.action_key]
        if len(env.reward_keys) == 1:
            assert env.reward_spec == env.output_spec["full_reward_spec"][env.reward_key]
        assert (
            env.observation_spec is env.full_observation_spec
            or env.observation_spec == env.full_observation_spec
        )

    def test_done_completion(self):
        env = self._env()
        for group in env.done_keys_groups:
            names = {as_tuple(k)[-1] for k in group}
            assert {"done", "terminated"} <= names, group
        data = env.reset(self.reset_input(env))
        for key in env.done_keys:
            assert data.get(key, None) is not None, key
        data = env.rand_step(data)
        for key in env.done_keys:
            assert data.get(("next", *as_tuple(key)), None) is not None, key
        assert len(env.reset_keys) == len(env.done_keys_groups)

    def test_reset_matches_specs(self):
        env = self._env()
        data = env.reset(self.reset_input(env))
        self._check_against(env, data, env.full_observation_spec, env.observation_keys)
        self._check_against(env, data, env.full_done_spec, env.done_keys)
        for key in env.done_keys:
            if as_tuple(key)[-1] == "done":
                assert not data.get(key).any(), key
        assert all(data.get(k, None) is None for k in env.reset_keys)

    def test_step_writes_next(self):
        env = self._env()
        data = env.rand_step(env.reset(self.reset_input(env)))
        assert isinstance(data.get("next"), TensorDictBase)
        self._check_against(env, data, env.full_action_spec, env.action_keys)
        self._check_against(env, data, env.full_observation_spec, env.observation_keys, ("next",))
        self._check_against(env, data, env.full_reward_spec, env.reward_keys, ("next",))
        self._check_against(env, data, env.full_done_spec, env.done_keys, ("next",))

    def test_rollout_time_dim(self):
        env = self._env()
        init = self.reset_input(env)
        data = env.rollout(self.rollout_steps, return_contiguous=self.contiguous, tensordict=init)
        assert data.names[-1] == "time"
        assert 1 <= data.batch_size[-1] <= self.rollout_steps
        steps = data.batch_size[-1]
        if self.contiguous and steps > 1:
            time_dim = data.batch_dims - 1
            for key in env.observation_keys:
                root = data.get(key).narrow(time_dim, 1, steps - 1)
                nxt = data.get(("next", *as_tuple(key))).narrow(time_dim, 0, steps - 1)
                torch.testing.assert_close(root, nxt, equal_nan=True)

    def test_rollout_without_break(self):
        env = self._env()
        data = env.rollout(
            self.rollout_steps * 2,
            break_when_any_done=False,
            return_contiguous=self.contiguous,
            tensordict=self.reset_input(env),
        )
        assert data.batch_size[-1] == self.rollout_steps * 2

    def test_step_and_maybe_reset_loop(self):
        env = self._env()
        data_ = env.reset(self.reset_input(env))
        for _ in range(self.rollout_steps * 2):
            data, data_ = env.step_and_maybe_reset(env.rand_action(data_))
            assert data.get("next", None) is not None
            for key in env.done_keys_groups[0]:
                if as_tuple(key)[-1] == "done":
                    assert not data_.get(key).any(), "the next input must not be done"
            assert all(data_.get(k, None) is None for k in env.reset_keys)

    def test_step_mdp_brings_next_to_root(self):
        env = self._env()
        data = env.rand_step(env.reset(self.reset_input(env)))
        nxt = step_mdp(
            data, reward_keys=env.reward_keys, action_keys=env.action_keys, done_keys=env.done_keys
        )
        for key in env.observation_keys:
            torch.testing.assert_close(
                nxt.get(key), data.get(("next", *as_tuple(key))), equal_nan=True
            )
        assert "next" not in nxt.keys()

    def test_seeding_determinism(self):
        env = self._env()
        assert env.set_seed(3) == env.set_seed(3)
        assert env.set_seed(3, static_seed=True) == 3
        if not self.seeded:
            return
        outs = []
        for _ in range(2):
            env.set_seed(0)
            torch.manual_seed(0)
            outs.append(
                env.rollout(
                    self.rollout_steps,
                    return_contiguous=self.contiguous,
                    tensordict=self.reset_input(env),
                )
            )
        assert (outs[0] == outs[1]).all() if self.contiguous else True

    def test_fake_tensordict_layout(self):
        env = self._env()
        fake = env.fake_tensordict()
        assert fake.batch_size == env.batch_size
        for key in env.observation_keys:
            assert fake.get(("next", *as_tuple(key)), None) is not None, key
        for key in env.reward_keys:
            assert fake.get(("next", *as_tuple(key)), None) is not None, key
        for key in env.action_keys:
            assert fake.get(key, None) is not None, key

    def test_partial_reset_keeps_unreset_elements(self):
        env = self._env()
        data = env.rand_step(env.reset(self.reset_input(env)))
        data_ = step_mdp(
            data, reward_keys=env.reward_keys, action_keys=env.action_keys, done_keys=env.done_keys
        )
        reset_key = env.reset_keys[0]
        flag = next(k for k in env.done_keys_groups[0] if as_tuple(k)[-1] == "done")
        mask = torch.zeros_like(data_.get(flag))
        partial = data_.batch_dims > 0 and data_.batch_size[0] > 1
        if partial:
            mask[0] = True
        before = {
            k: data_.get(k).clone()
            for k in env.observation_keys
            if isinstance(data_.get(k), torch.Tensor)
        }
        data_.set(reset_key, mask)
        out = env.reset(data_)
        assert out.get(reset_key, None) is None
        for key, value in before.items():
            if partial:
                torch.testing.assert_close(out.get(key)[1:], value[1:], equal_nan=True)
            else:
                torch.testing.assert_close(out.get(key), value, equal_nan=True)
        if partial:
            assert not out.get(flag)[0].any()

    def test_rand_action_in_spec(self):
        env = self._env()
        data = env.rand_action(env.reset(self.reset_input(env)))
        for key in env.action_keys:
            value = data.get(key)
            spec = env.full_action_spec[key]
            lead = value.shape[: value.ndim - spec.ndim + len(env.batch_size)]
            if lead:
                spec = spec.expand(*lead, *spec.shape[len(env.batch_size) :])
            assert spec.is_in(value), key

    def test_repr_names_class(self):
        env = self._env()
        assert type(env).__name__ in repr(env)


def partial_reset_input(env, batch: int) -> TensorDict:
    """A helper for batch-unlocked envs: an empty tensordict with the given batch size."""
    return TensorDict(batch_size=[batch], device=env.device)
