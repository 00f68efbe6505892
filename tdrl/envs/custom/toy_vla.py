"""A tiny synthetic env with the key layout of vision-language-action (VLA) robot data."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data import Bounded, Categorical, Composite, NonTensor, Unbounded
from tdrl.envs.common import EnvBase

__all__ = ["ToyVLAEnv"]

#: half the side of the square drawn for the action / target markers, in pixels
_MARKER = 1


class ToyVLAEnv(EnvBase):
    """A synthetic VLA env: camera image and state under ``"observation"``, an instruction.

    Every reset and step emits a random ``uint8`` camera image
    (``("observation", "image")``, ``image_shape``), the proprioceptive state
    (``("observation", "state")``) and the episode's ``"language_instruction"``
    (a string). The state echoes the executed action in its first ``action_dim``
    entries (zeros elsewhere), so chunked or multi-step policies can be watched
    acting; the reward is minus the action's norm and the episode never ends.

    With ``success_steps``, the env becomes a tracking task: each episode draws a
    target in ``[-0.5, 0.5] ** action_dim``, shown in the state right after the
    echoed action (``state[..., action_dim:2 * action_dim]``); the reward is minus
    the distance between action and target, a step hits when every action entry is
    within ``success_tol`` of the target, and ``success_steps`` consecutive hits set
    ``"success"`` and terminate the episode. ``group_repeats`` replays each target for
    that many episodes and numbers them in ``"group_id"`` (from ``group_id_offset``),
    for methods comparing episodes that share an initial state. ``from_pixels`` adds
    a ``"pixels"`` frame (``render_size`` square, channels last) with the executed
    action as a red marker and the target as a green one. With a batch, a
    ``"_step"`` mask in the input steps only the marked elements: the others keep
    their state and success, and get a zero reward.

    Args:
        action_dim: the number of action entries (each in ``[-1, 1]``).
        state_dim: the number of state entries (at least ``action_dim``; at least
            ``2 * action_dim`` with ``success_steps``).
        image_shape: the shape of the camera image.
        instruction: the instruction of every episode.
        success_steps: consecutive hits that end an episode (None: no tracking task).
        success_tol: how far (per entry) an action may be from the target to hit,
            in ``(0, 0.5]``.
        group_repeats: episodes sharing one target (needs ``success_steps`` and a
            single env).
        group_id_offset: the ``"group_id"`` of the first group.
        from_pixels: add a rendered ``"pixels"`` frame.
        render_size: the side of that frame, in pixels.
        seed: the seed of the env's random generator.
        batch_size: the batch size of the env.
        device: the device of its data.

    Examples:
        >>> env = ToyVLAEnv(action_dim=2, state_dim=4, success_steps=2, seed=0)
        >>> data = env.reset()
        >>> data["observation", "image"].dtype, data["language_instruction"]
        (torch.uint8, 'reach the target')
        >>> def oracle(data):  # reads the target back from the state
        ...     return data.set("action", data["observation", "state"][..., 2:4])
        >>> rollout = env.rollout(10, oracle)
        >>> rollout.batch_size, bool(rollout["next", "success"][-1])
        (torch.Size([2]), True)
    """

    def __init__(
        self,
        action_dim: int = 4,
        state_dim: int = 8,
        image_shape: tuple[int, ...] = (3, 16, 16),
        instruction: str = "reach the target",
        *,
        success_steps: int | None = None,
        success_tol: float = 0.1,
        group_repeats: int = 1,
        group_id_offset: int = 0,
        from_pixels: bool = False,
        render_size: int = 32,
        seed: int | None = None,
        batch_size: Any = (),
        device: Any = None,
    ) -> None:
        _check_arguments(
            action_dim, state_dim, success_steps, success_tol, group_repeats, render_size
        )
        super().__init__(device=device, batch_size=batch_size)
        if group_repeats > 1 and self.batch_size.numel() != 1:
            raise ValueError(
                "group_repeats > 1 replays one target per episode for a single environment; "
                f"got batch_size={tuple(self.batch_size)}"
            )
        self.action_dim = action_dim
        self.state_dim = state_dim
        self.image_shape = tuple(image_shape)
        self.instruction = instruction
        self.success_steps = success_steps
        self.success_tol = float(success_tol)
        self.group_repeats = group_repeats
        self.group_id_offset = group_id_offset
        self.from_pixels = from_pixels
        self.render_size = render_size
        self.__dict__["_generator"] = torch.Generator()
        if seed is not None:
            self._generator.manual_seed(seed)
        self.__dict__["_episodes"] = 0
        batch = self.batch_size
        observation = Composite(
            image=Bounded(0, 255, (*batch, *self.image_shape), dtype=torch.uint8),
            state=Unbounded((*batch, state_dim)),
            shape=batch,
        )
        specs: dict[str, Any] = {
            "observation": observation,
            "language_instruction": NonTensor(shape=batch, example_data=instruction),
        }
        if success_steps is not None:
            specs["success"] = Categorical(2, (*batch, 1), dtype=torch.bool)
        if group_repeats > 1:
            specs["group_id"] = Unbounded((*batch, 1), dtype=torch.int64)
        if from_pixels:
            specs["pixels"] = Bounded(
                0, 255, (*batch, render_size, render_size, 3), dtype=torch.uint8
            )
        self.observation_spec = Composite(specs, shape=batch)
        self.action_spec = Bounded(-1.0, 1.0, (*batch, action_dim))
        self.reward_spec = Unbounded((*batch, 1))
        # the episode state: buffers, so that env.to(device) moves it (not saved)
        self.register_buffer("_target", torch.zeros(*batch, action_dim), persistent=False)
        self.register_buffer("_streak", torch.zeros(*batch, 1, dtype=torch.int64), persistent=False)

    # ------------------------------------------------------------------ protocol
    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        batch = self.batch_size
        mask = None if tensordict is None else tensordict.get("_reset", None)
        rows = torch.ones(batch, dtype=torch.bool) if mask is None else mask.reshape(batch).cpu()
        rows = rows.to(self._target.device)
        if self.success_steps is not None:
            if self.group_repeats == 1 or self._episodes % self.group_repeats == 0:
                fresh = torch.rand(*batch, self.action_dim, generator=self._generator) - 0.5
                self._target = torch.where(rows.unsqueeze(-1), fresh.to(self._target), self._target)
            self._streak = torch.where(rows.unsqueeze(-1), 0, self._streak)
        group = self._episodes // self.group_repeats
        self.__dict__["_episodes"] += 1
        action = torch.zeros(*batch, self.action_dim, device=self._target.device)
        success = torch.zeros(*batch, 1, dtype=torch.bool, device=self._target.device)
        return self._observe(action, success, group)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        batch = self.batch_size
        action = tensordict.get("action").to(self._target.device)
        stepped = tensordict.get("_step", None)
        active = (
            torch.ones(*batch, 1, dtype=torch.bool, device=action.device)
            if stepped is None
            else stepped.reshape(*batch, 1).to(action.device)
        )
        if self.success_steps is None:
            reward = -action.norm(dim=-1, keepdim=True)
            success = torch.zeros(*batch, 1, dtype=torch.bool, device=action.device)
            terminated = success
        else:
            reward = -(action - self._target).norm(dim=-1, keepdim=True)
            was_done = self._streak >= self.success_steps
            # elements that already succeeded (inside a partial step) keep their streak
            active = active & ~was_done
            hit = ((action - self._target).abs() <= self.success_tol).all(-1, keepdim=True)
            streak = torch.where(hit, self._streak + 1, 0)
            self._streak = torch.where(active, streak, self._streak)
            success = self._streak >= self.success_steps
            terminated = success
        reward = torch.where(active, reward, 0.0)
        group = (self._episodes - 1) // self.group_repeats
        out = self._observe(action, success, group)
        out.set("reward", reward)
        out.set("done", terminated.clone())
        out.set("terminated", terminated)
        return out

    def _set_seed(self, seed: int | None) -> None:
        if seed is not None:
            self._generator.manual_seed(seed)

    # ------------------------------------------------------------------ helpers
    def _observe(self, action: torch.Tensor, success: torch.Tensor, group: int) -> TensorDict:
        """The observation entries for an executed ``action``."""
        batch = self.batch_size
        device = self._target.device
        state = torch.zeros(*batch, self.state_dim, device=device)
        state[..., : self.action_dim] = action
        if self.success_steps is not None:
            state[..., self.action_dim : 2 * self.action_dim] = self._target
        image = torch.randint(
            0, 256, (*batch, *self.image_shape), generator=self._generator, dtype=torch.uint8
        )
        out = TensorDict(
            {
                "observation": {"image": image.to(device), "state": state},
                "language_instruction": self.instruction,
            },
            batch_size=batch,
            device=self.device,
        )
        if self.success_steps is not None:
            out.set("success", success)
        if self.group_repeats > 1:
            group_id = torch.full((*batch, 1), self.group_id_offset + group, device=device)
            out.set("group_id", group_id)
        if self.from_pixels:
            out.set("pixels", self._render(action))
        return out

    def _render(self, action: torch.Tensor) -> torch.Tensor:
        """A black frame with the action (red) and the target (green) as squares."""
        size = self.render_size
        batch = self.batch_size
        frame = torch.zeros(*batch, size, size, 3, dtype=torch.uint8, device=action.device)
        flat = frame.reshape(-1, size, size, 3)
        markers = [(action, 0)]
        if self.success_steps is not None:
            markers.append((self._target, 1))
        for position, channel in markers:
            # the first two entries (x, y) in [-1, 1] map to pixel columns and rows
            xy = (
                position[..., :2]
                if position.shape[-1] > 1
                else position[..., :1].repeat_interleave(2, -1)
            )
            pixels = ((xy.reshape(-1, 2).clamp(-1, 1) + 1) / 2 * (size - 1)).round().long()
            for i, (col, row) in enumerate(pixels.tolist()):
                top, left = max(row - _MARKER, 0), max(col - _MARKER, 0)
                flat[i, top : row + _MARKER + 1, left : col + _MARKER + 1, channel] = 255
        return frame


def _check_arguments(
    action_dim: int,
    state_dim: int,
    success_steps: int | None,
    success_tol: float,
    group_repeats: int,
    render_size: int,
) -> None:
    if action_dim < 1:
        raise ValueError(f"action_dim: expected a positive int, got {action_dim}")
    if state_dim < action_dim:
        raise ValueError(
            f"state_dim: expected at least action_dim ({action_dim}) entries to echo the "
            f"action, got {state_dim}"
        )
    if render_size < 1:
        raise ValueError(f"render_size: expected a positive number of pixels, got {render_size}")
    if group_repeats < 1:
        raise ValueError(f"group_repeats must be >= 1, got {group_repeats}")
    if success_steps is None:
        if group_repeats > 1:
            raise ValueError(
                "group_repeats replays the target of the tracking task: pass success_steps too"
            )
        return
    if success_steps < 1:
        raise ValueError(f"success_steps: expected a positive int, got {success_steps}")
    if not 0 < success_tol <= 0.5:
        raise ValueError(f"success_tol: expected a value in (0, 0.5], got {success_tol}")
    if state_dim < 2 * action_dim:
        raise ValueError(
            f"state_dim: the tracking task shows the target after the action, which needs "
            f"state_dim >= 2 * action_dim = {2 * action_dim}; got {state_dim}"
        )
