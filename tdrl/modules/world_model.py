"""WorldModelWrapper: a transition model and a reward model run one after the other."""

from __future__ import annotations

from tensordict.nn import TensorDictModuleBase, TensorDictSequential

__all__ = ["WorldModelWrapper"]


class WorldModelWrapper(TensorDictSequential):
    """The world model of a model-based env: the transition model, then the reward model.

    Calling it runs ``transition_model`` (which writes the next latent state) and then
    ``reward_model`` (which reads it and writes the reward) on the same tensordict,
    which is what :class:`~tdrl.envs.ModelBasedEnvBase` expects of its world model.
    Each part stays reachable on its own, e.g. to train it separately.

    Args:
        transition_model: a TensorDict module computing the next (latent) state.
        reward_model: a TensorDict module computing the reward from that state.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> model = WorldModelWrapper(
        ...     TensorDictModule(torch.nn.Linear(3, 3), in_keys=["state"], out_keys=["state"]),
        ...     TensorDictModule(torch.nn.Linear(3, 1), in_keys=["state"], out_keys=["reward"]),
        ... )
        >>> sorted(model(TensorDict(state=torch.zeros(3))).keys())
        ['reward', 'state']
        >>> model.get_reward_operator().out_keys
        ['reward']
    """

    def __init__(
        self, transition_model: TensorDictModuleBase, reward_model: TensorDictModuleBase
    ) -> None:
        super().__init__(transition_model, reward_model)

    def get_transition_model_operator(self) -> TensorDictModuleBase:
        """The transition model (first module)."""
        return self.module[0]

    def get_reward_operator(self) -> TensorDictModuleBase:
        """The reward model (second module)."""
        return self.module[1]
