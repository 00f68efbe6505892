"""Stateless tensor functions behind the transforms that work on whole trajectories.

:func:`cat_frames` builds, for every step of a sequence, the stack of its ``N``
neighbouring frames: the last ``N`` ones (history windows, what ``CatFrames`` does
in an env) or the next ``N`` ones (``future=True``). Slots that fall before the
start (or after the end) of a trajectory are filled by padding.
"""

from __future__ import annotations

import torch

__all__ = ["cat_frames"]

PADDINGS = ("same", "constant")


def _validate(x: torch.Tensor, N: int, dim: int, time_dim: int, padding: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"cat_frames x: expected a torch.Tensor, got {type(x).__name__}")
    if isinstance(N, bool) or not isinstance(N, int) or N < 1:
        raise ValueError(f"cat_frames N: expected a positive int, got {N!r}")
    if dim >= 0:
        raise ValueError(
            f"cat_frames: dim must be < 0 (counted from the last dim of x), got dim={dim}"
        )
    if time_dim >= 0:
        raise ValueError(
            f"cat_frames: time_dim must be < 0 (counted from the last dim of x), "
            f"got time_dim={time_dim}"
        )
    if not -x.ndim <= time_dim < dim:
        raise ValueError(
            f"cat_frames: expected -x.ndim <= time_dim < dim (the frames are concatenated "
            f"along a feature dim after time), got time_dim={time_dim}, dim={dim} for x of "
            f"shape {tuple(x.shape)}"
        )
    if padding not in PADDINGS:
        raise ValueError(f"cat_frames: padding must be one of {list(PADDINGS)}, got {padding!r}")


def window_offsets(N: int, future: bool, device: torch.device | None = None) -> torch.Tensor:
    """Time offsets of the ``N`` slots of a window, oldest slot first."""
    offsets = torch.arange(N, device=device)
    return offsets if future else offsets - (N - 1)


def source_slots(padded: torch.Tensor, future: bool) -> torch.Tensor:
    """For each slot of ``padded`` (``[..., N]``), the slot whose frame it shows.

    A real slot shows itself; a padded one shows the nearest real slot on the side of
    the window's own step (later slots for history windows, earlier ones for future
    windows). The window's own step is used when no slot is real.
    """
    N = padded.shape[-1]
    slots = torch.arange(N, device=padded.device).expand_as(padded)
    if future:
        marked = torch.where(padded, -1, slots)
        return marked.cummax(-1).values.clamp(min=0)
    marked = torch.where(padded, N, slots)
    return marked.flip(-1).cummin(-1).values.flip(-1).clamp(max=N - 1)


def gather_windows(data: torch.Tensor, positions: torch.Tensor, lead_ndim: int) -> torch.Tensor:
    """``data[..., positions[..., t, k], ...]`` along the time dim of ``data``.

    ``data`` has shape ``[*L, T, *F]`` (``lead_ndim == len(L)``) and ``positions``
    ``[*L, T, K]``; the result has shape ``[*L, T, K, *F]``.
    """
    lead = data.shape[:lead_ndim]
    steps = data.shape[lead_ndim]
    features = data.shape[lead_ndim + 1 :]
    flat = data.reshape(-1, steps, *features)
    index = positions.expand(*lead, steps, positions.shape[-1]).reshape(flat.shape[0], steps, -1)
    rows = torch.arange(flat.shape[0], device=data.device).view(-1, 1, 1)
    out = flat[rows, index]
    return out.reshape(*lead, steps, index.shape[-1], *features)


def merge_windows(frames: torch.Tensor, lead_ndim: int, dim: int) -> torch.Tensor:
    """``[*L, T, N, *F]`` -> ``[*L, T, *F]`` with the ``N`` frames concatenated along ``dim``."""
    feature_dim = frames.ndim + dim
    frames = frames.movedim(lead_ndim + 1, feature_dim - 1)
    return frames.flatten(feature_dim - 1, feature_dim)


def stack_windows(
    data: torch.Tensor,
    padded: torch.Tensor,
    *,
    dim: int,
    padding: str,
    padding_value: float,
    future: bool,
) -> torch.Tensor:
    """Windows of ``data`` (``[*L, T, *F]``) given which slots are padding (``[*L, T, N]``)."""
    lead_ndim = padded.ndim - 2
    N = padded.shape[-1]
    length = data.shape[lead_ndim]
    steps = torch.arange(length, device=data.device).unsqueeze(-1)
    offsets = window_offsets(N, future, data.device)
    if padding == "same":
        positions = steps + offsets[source_slots(padded, future)]
    else:
        positions = (steps + offsets).clamp(0, length - 1).expand(padded.shape)
    frames = gather_windows(data, positions, lead_ndim)
    if padding == "constant":
        mask = padded.reshape(*padded.shape, *(1,) * (data.ndim - lead_ndim - 1))
        fill = torch.as_tensor(padding_value, dtype=frames.dtype, device=frames.device)
        frames = torch.where(mask, fill, frames)
    return merge_windows(frames, lead_ndim, dim)


def cat_frames(
    x: torch.Tensor,
    N: int,
    dim: int,
    time_dim: int,
    padding: str = "same",
    padding_value: float = 0,
    done_mask: torch.Tensor | None = None,
    *,
    future: bool = False,
) -> torch.Tensor:
    """Concatenate, for every step of a sequence, the frames of its ``N``-step window.

    The window of step ``t`` holds steps ``t-N+1 ... t`` (or ``t ... t+N-1`` with
    ``future=True``), oldest first, concatenated along ``dim``. Slots outside the
    sequence, or flagged in ``done_mask``, are padding: a copy of the nearest real
    frame towards ``t`` (``padding="same"``) or ``padding_value`` (``"constant"``).
    Without ``done_mask`` the whole time axis is one trajectory.

    Args:
        x: the frames, of shape ``[*lead, T, *features]``.
        N: the window length.
        dim: the (negative) feature dim along which the frames are concatenated.
        time_dim: the (negative) dim of ``x`` that is time; must come before ``dim``.
        padding: ``"same"`` or ``"constant"``.
        padding_value: the fill value of ``padding="constant"``.
        done_mask: optional boolean mask of shape ``[*lead, T, ..., N]``, True where a
            slot lies in another trajectory (dims between ``T`` and ``N`` are reduced
            with ``any``).

    Keyword Args:
        future: use the next ``N`` steps instead of the last ``N``.

    Returns:
        A tensor shaped like ``x`` with ``x.shape[dim] * N`` entries along ``dim``.

    Examples:
        >>> import torch
        >>> from tdrl.envs.transforms.functional import cat_frames
        >>> frames = torch.arange(4.0).unsqueeze(-1)  # 4 steps of one feature
        >>> cat_frames(frames, N=2, dim=-1, time_dim=-2)
        tensor([[0., 0.],
                [0., 1.],
                [1., 2.],
                [2., 3.]])
        >>> cat_frames(frames, N=2, dim=-1, time_dim=-2, future=True, padding="constant")
        tensor([[0., 1.],
                [1., 2.],
                [2., 3.],
                [3., 0.]])
    """
    _validate(x, N, dim, time_dim, padding)
    time_pos = x.ndim + time_dim
    lead = x.shape[:time_pos]
    steps = x.shape[time_pos]
    positions = torch.arange(steps, device=x.device).unsqueeze(-1) + window_offsets(
        N, future, x.device
    )
    padded = ((positions < 0) | (positions >= steps)).expand(*lead, steps, N)
    if done_mask is not None:
        padded = padded | _reduce_mask(done_mask, lead, steps, N)
    return stack_windows(
        x, padded, dim=dim, padding=padding, padding_value=padding_value, future=future
    )


def _reduce_mask(done_mask: torch.Tensor, lead: torch.Size, steps: int, N: int) -> torch.Tensor:
    expected = (*lead, steps)
    if (
        done_mask.dtype is not torch.bool
        or done_mask.ndim < len(expected) + 1
        or tuple(done_mask.shape[: len(expected)]) != expected
        or done_mask.shape[-1] != N
    ):
        raise ValueError(
            f"cat_frames done_mask: expected a bool tensor of shape {(*expected, '...', N)}, "
            f"got {done_mask.dtype} of shape {tuple(done_mask.shape)}"
        )
    return done_mask.reshape(*expected, -1, N).any(-2)
