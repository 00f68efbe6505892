"""The transform that makes auto-resetting gym vector envs TED-correct."""

from __future__ import annotations

from typing import Any

from tensordict import TensorDictBase

from tdrl.envs.transforms.transform import Transform

__all__ = ["VecGymEnvTransform"]


class VecGymEnvTransform(Transform):
    """Keeps the data of an auto-resetting gym vector env TED-correct.

    A gymnasium vector env resets a finished sub-env by itself. In ``SameStep`` mode the step
    that ends an episode already returns the *reset* observation, and the last one comes in
    the info dict; :class:`GymWrapper` stores it under ``final_name`` in the step output. This
    transform moves it in place of the observation, so ``"next"`` holds the last observation of
    the episode, and drops ``final_name`` from the data and the specs. The reset observation
    reaches the root of the following step through the env's partial reset, which reuses what
    the simulator returned instead of resetting again. In ``NextStep`` mode the step output is
    already correct (the wrapper resets finished sub-envs with ``options["reset_mask"]``) and
    the transform passes data through. :class:`GymEnv` with ``num_envs`` and
    :class:`GymWrapper` of a vector env add it automatically.

    Args:
        final_name: the entry holding the last observation of each sub-env.

    Examples:
        >>> from tdrl.envs.libs.gym import GymEnv
        >>> env = GymEnv("CartPole-v1", num_envs=2, vectorization_mode="sync")
        >>> type(env.transform).__name__
        'VecGymEnvTransform'
        >>> "final" in env.observation_spec.keys(), "final" in env.base_env.observation_spec.keys()
        (False, True)
        >>> _ = env.set_seed(0)
        >>> data = env.rollout(40, break_when_any_done=False)
        >>> data.batch_size
        torch.Size([2, 40])
    """

    def __init__(self, final_name: str = "final") -> None:
        super().__init__()
        if not isinstance(final_name, str):
            raise TypeError(
                f"VecGymEnvTransform final_name: expected a str, got {type(final_name).__name__}"
            )
        self.final_name = final_name

    def _swap_final(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        final = next_tensordict.get(self.final_name, None)
        if final is None:
            return next_tensordict
        next_tensordict.del_(self.final_name)
        for key, value in final.items():
            next_tensordict.set(key, value)
        return next_tensordict

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        return self._swap_final(next_tensordict)

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        return self._swap_final(next_tensordict)

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        if tensordict_reset.get(self.final_name, None) is not None:
            tensordict_reset.del_(self.final_name)
        return tensordict_reset

    def transform_observation_spec(self, observation_spec: Any) -> Any:
        if self.final_name in observation_spec.keys():
            del observation_spec[self.final_name]
        return observation_spec

    def __repr__(self) -> str:
        return f"{type(self).__name__}(final_name={self.final_name!r})"
