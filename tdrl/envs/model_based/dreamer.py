"""Dreamer imagination: :class:`DreamerEnv` (latent rollouts) and :class:`DreamerDecoder`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from tdrl.data import Composite, Unbounded
from tdrl.envs.common import EnvBase
from tdrl.envs.model_based.common import ModelBasedEnvBase
from tdrl.envs.transforms.transform import MISSING_KEY_ERROR, Transform
from tdrl.envs.transforms.transformed_env import TransformedEnv

__all__ = ["DreamerDecoder", "DreamerEnv"]

NO_DECODER_ERROR = (
    "{owner}: expected an observation decoder, got obs_decoder=None; "
    "pass obs_decoder=<TensorDict module> to DreamerEnv"
)
NO_ENV_ERROR = (
    "DreamerDecoder: expected to belong to an env with an obs_decoder (a DreamerEnv wrapped in "
    "a TransformedEnv), got no env"
)
PARTIAL_STATE_ERROR = (
    "DreamerEnv.reset: expected all latent state keys {expected} in the tensordict (to start "
    "imagination from them) or none (to start from zeros), got only {got}"
)
DECODER_OUTPUT_ERROR = (
    "DreamerDecoder: expected the obs_decoder to write {key!r}, got keys {keys}; "
    "set out_keys to the decoder's output keys"
)


def _shape(value: Any) -> torch.Size:
    return torch.Size((value,) if isinstance(value, int) else value)


class DreamerEnv(ModelBasedEnvBase):
    """Imagination rollouts in the latent space of a Dreamer world model.

    The latent state is ``"state"`` (the stochastic prior, ``prior_shape``) and
    ``"belief"`` (the deterministic recurrent state, ``belief_shape``); they are
    both the observations and the state inputs of the env. The world model maps
    ``("state", "belief", "action")`` to the next ``("state", "belief")`` and a
    ``"reward"``. Action, reward and done specs usually come from the real env
    through :meth:`set_specs_from_env`.

    ``reset`` with a tensordict holding ``"state"`` and ``"belief"`` (e.g. posterior
    states of a batch of real data) starts imagination from them; without them,
    it steps the world model once from zero latents and a zero action.

    Args:
        world_model: the TensorDict module computing the next latent state and reward.
        prior_shape: shape of the ``"state"`` entry (without batch dims).
        belief_shape: shape of the ``"belief"`` entry (without batch dims).
        obs_decoder: a TensorDict module decoding latents into observations
            (used by :meth:`decode_obs` and :class:`DreamerDecoder`).
        device: the device of the env, its world model and its decoder.
        batch_size: the env batch size; the env is batch-unlocked.

    Keyword Args:
        params: weights to run the world model with (see :class:`ModelBasedEnvBase`).
        buffers: buffers to run the world model with.
        run_type_checks: check actions and outputs against the specs at each step.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule, TensorDictSequential
        >>> from tdrl.envs import PendulumEnv
        >>> from tdrl.envs.model_based.dreamer import DreamerEnv
        >>> world_model = TensorDictSequential(
        ...     TensorDictModule(nn.Bilinear(6, 1, 6), in_keys=["belief", "action"], out_keys=["belief"]),
        ...     TensorDictModule(nn.Linear(6, 4), in_keys=["belief"], out_keys=["state"]),
        ...     TensorDictModule(nn.Linear(4, 1), in_keys=["state"], out_keys=["reward"]),
        ... )
        >>> decoder = TensorDictModule(
        ...     nn.Sequential(nn.Linear(6, 12), nn.Unflatten(-1, (3, 2, 2))),
        ...     in_keys=["belief"],
        ...     out_keys=["reco_pixels"],
        ... )
        >>> env = DreamerEnv(world_model, prior_shape=(4,), belief_shape=(6,), obs_decoder=decoder)
        >>> env.set_specs_from_env(PendulumEnv())
        >>> rollout = env.rollout(5)
        >>> rollout["next", "state"].shape, rollout["next", "belief"].shape
        (torch.Size([5, 4]), torch.Size([5, 6]))
        >>> env.decode_obs(rollout)["reco_pixels"].shape
        torch.Size([5, 3, 2, 2])
        >>> posterior = TensorDict(state=torch.zeros(8, 4), belief=torch.zeros(8, 6), batch_size=[8])
        >>> env.rollout(5, tensordict=posterior).batch_size
        torch.Size([8, 5])
    """

    def __init__(
        self,
        world_model: nn.Module,
        prior_shape: Sequence[int] | int,
        belief_shape: Sequence[int] | int,
        obs_decoder: Callable[[TensorDictBase], TensorDictBase] | None = None,
        device: Any = "cpu",
        batch_size: Any = None,
        *,
        params: TensorDictBase | Mapping[str, torch.Tensor] | None = None,
        buffers: TensorDictBase | Mapping[str, torch.Tensor] | None = None,
        run_type_checks: bool = False,
    ) -> None:
        super().__init__(
            world_model,
            params=params,
            buffers=buffers,
            device=device,
            batch_size=batch_size,
            run_type_checks=run_type_checks,
        )
        if (
            obs_decoder is not None
            and self.device is not None
            and isinstance(obs_decoder, nn.Module)
        ):
            obs_decoder = obs_decoder.to(self.device)
        self.obs_decoder = obs_decoder
        self.prior_shape = _shape(prior_shape)
        self.belief_shape = _shape(belief_shape)
        self._set_latent_specs()

    def _set_latent_specs(self) -> None:
        batch = self.batch_size
        latent = Composite(
            state=Unbounded((*batch, *self.prior_shape), device=self.device),
            belief=Unbounded((*batch, *self.belief_shape), device=self.device),
            shape=batch,
            device=self.device,
        )
        self.full_observation_spec = latent
        self.state_spec = latent.clone()

    def set_specs_from_env(self, env: EnvBase) -> None:
        """Take the action, reward and done specs of ``env``; observations and state are latent.

        The observation and state specs both become ``"state"`` (``prior_shape``) and
        ``"belief"`` (``belief_shape``), whatever ``env`` observes.
        """
        super().set_specs_from_env(env)
        self._set_latent_specs()

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        state_keys = self.state_keys
        keys = list(dict.fromkeys([*self.observation_keys, *state_keys]))
        if tensordict is not None:
            present = [key for key in state_keys if tensordict.get(key, None) is not None]
            if len(present) == len(state_keys):
                return tensordict.select(*keys, strict=False)
            if present:
                raise ValueError(PARTIAL_STATE_ERROR.format(expected=state_keys, got=present))
        shape = self._rand_shape(tensordict)
        start = self.full_state_spec.zero(shape)
        start.update(self.full_action_spec.zero(shape))
        return self._run_world_model(start).select(*keys, strict=False)

    def decode_obs(
        self, tensordict: TensorDictBase, compute_latents: bool = False
    ) -> TensorDictBase:
        """Run ``obs_decoder`` on ``tensordict`` (written in place) and return it.

        Args:
            tensordict: data holding the latent entries the decoder reads.
            compute_latents: first run the world model on ``tensordict`` (to compute
                the latents from the previous ones and the action).

        Raises:
            ValueError: when the env has no ``obs_decoder``.
        """
        if self.obs_decoder is None:
            raise ValueError(NO_DECODER_ERROR.format(owner=f"{type(self).__name__}.decode_obs"))
        if compute_latents:
            tensordict = self._run_world_model(tensordict)
        return self.obs_decoder(tensordict)


def _probe(decoder: Callable[[TensorDictBase], TensorDictBase], data: TensorDictBase) -> Any:
    """Run ``decoder`` once in eval mode without gradients, restoring its modes after."""
    modules = list(decoder.modules()) if isinstance(decoder, nn.Module) else []
    modes = [module.training for module in modules]
    try:
        for module in modules:
            module.training = False
        with torch.no_grad():
            return decoder(data)
    finally:
        for module, mode in zip(modules, modes):
            module.training = mode


class DreamerDecoder(Transform):
    """Decode the latent states of a :class:`DreamerEnv` into observations, at each step.

    The transform runs the ``obs_decoder`` of the env it belongs to on the
    ``in_keys`` entries of every reset and step output (and on data passed to it
    directly, once it belongs to an env) and writes the decoder's ``out_keys``
    entries. The observation spec gains one :class:`~tdrl.data.Unbounded` entry per
    out key, with the shape and dtype found by decoding one zero latent when the
    specs are computed (in eval mode, without gradients): a declared entry lets
    spec checks, collectors and later transforms see the decoded observations.

    Args:
        in_keys: the latent entries given to the decoder. Defaults to
            ``["state", "belief"]``.
        out_keys: the decoder outputs to keep. Defaults to ``["reco_pixels"]``.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tensordict.nn import TensorDictModule, TensorDictSequential
        >>> from tdrl.envs import PendulumEnv, TransformedEnv
        >>> from tdrl.envs.model_based.dreamer import DreamerDecoder, DreamerEnv
        >>> world_model = TensorDictSequential(
        ...     TensorDictModule(nn.Bilinear(6, 1, 6), in_keys=["belief", "action"], out_keys=["belief"]),
        ...     TensorDictModule(nn.Linear(6, 4), in_keys=["belief"], out_keys=["state"]),
        ...     TensorDictModule(nn.Linear(4, 1), in_keys=["state"], out_keys=["reward"]),
        ... )
        >>> decoder = TensorDictModule(
        ...     nn.Bilinear(4, 6, 12), in_keys=["state", "belief"], out_keys=["reco_pixels"]
        ... )
        >>> env = DreamerEnv(world_model, prior_shape=(4,), belief_shape=(6,), obs_decoder=decoder)
        >>> env.set_specs_from_env(PendulumEnv())
        >>> env = TransformedEnv(env, DreamerDecoder())
        >>> env.observation_spec["reco_pixels"].shape
        torch.Size([12])
        >>> env.rollout(3)["next", "reco_pixels"].shape
        torch.Size([3, 12])
    """

    def __init__(
        self,
        in_keys: Sequence[Any] | None = None,
        out_keys: Sequence[Any] | None = None,
    ) -> None:
        super().__init__(
            in_keys=["state", "belief"] if in_keys is None else in_keys,
            out_keys=["reco_pixels"] if out_keys is None else out_keys,
        )

    def _base_env(self) -> EnvBase | None:
        env = self.container
        while isinstance(env, TransformedEnv):
            env = env.base_env
        return env

    def _decoder(self) -> Callable[[TensorDictBase], TensorDictBase]:
        env = self._base_env()
        if env is None:
            raise ValueError(NO_ENV_ERROR)
        decoder = getattr(env, "obs_decoder", None)
        if decoder is None:
            raise ValueError(NO_DECODER_ERROR.format(owner=type(self).__name__))
        return decoder

    def _decoded(self, decoded: TensorDictBase, key: Any) -> torch.Tensor:
        value = decoded.get(key, None)
        if value is None:
            keys = list(decoded.keys(include_nested=True, leaves_only=True))
            raise KeyError(DECODER_OUTPUT_ERROR.format(key=key, keys=keys))
        return value

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        decoder = self._decoder()
        for key in self.in_keys:
            if next_tensordict.get(key, None) is None:
                if self.missing_tolerance:
                    return next_tensordict
                keys = list(next_tensordict.keys(include_nested=True, leaves_only=True))
                raise KeyError(
                    MISSING_KEY_ERROR.format(owner=type(self).__name__, key=key, keys=keys)
                )
        decoded = decoder(next_tensordict.select(*self.in_keys))
        for key in self.out_keys:
            next_tensordict.set(key, self._decoded(decoded, key))
        return next_tensordict

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return self._call(tensordict_reset)

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        """Add the decoded entries, with the shape and dtype of one decoded zero latent."""
        if self._base_env() is None:
            return observation_spec
        decoder = self._decoder()
        available = list(observation_spec.keys(True, True))
        latents = {}
        for key in self.in_keys:
            spec = observation_spec.get(key, None)
            if spec is None:
                raise KeyError(
                    f"DreamerDecoder: expected latent key {key!r} in the observation spec, "
                    f"got keys {available}"
                )
            latents[key] = spec.zero((1,))
        probe = TensorDict(latents, batch_size=(1, *observation_spec.shape))
        decoded = _probe(decoder, probe)
        for key in self.out_keys:
            value = self._decoded(decoded, key)
            observation_spec[key] = Unbounded(
                value.shape[1:], dtype=value.dtype, device=observation_spec.device
            )
        return observation_spec
