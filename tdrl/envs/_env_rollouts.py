"""The rollout half of :class:`~tdrl.envs.EnvBase`: rollouts, ``step_mdp``, random actions.

:class:`EnvRollouts` holds the env methods built on the step / reset protocol (the loops
themselves are the free functions of :mod:`tdrl.envs.rollout`, shared with batched and
transformed envs and the collector) and the hooks by which an env offers cheaper paths
producing the same data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.envs import rollout as _rollout
from tdrl.envs._step_mdp import merge_next
from tdrl.envs._td_fast import fast_set

if TYPE_CHECKING:
    from tdrl.envs._columnar import Handover

__all__ = ["EnvRollouts"]


class EnvRollouts:
    """Rollouts, ``step_mdp``, ``maybe_reset`` and random actions of an env (a mixin of EnvBase).

    Examples:
        >>> from tdrl.envs import EnvBase, PendulumEnv
        >>> issubclass(EnvBase, EnvRollouts)
        True
        >>> PendulumEnv().rollout(3).batch_size
        torch.Size([3])
    """

    def step_and_maybe_reset(
        self, tensordict: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        """Step, then build the input of the next step, resetting the done elements.

        Returns ``(tensordict, tensordict_)``: the stepped input (with ``"next"``)
        and the data for the next step (``step_mdp`` output, partially reset).
        """
        return _rollout.step_and_maybe_reset(self, tensordict)

    def step_mdp(self, tensordict: TensorDictBase) -> TensorDictBase:
        """The input of the next step: ``tensordict["next"]`` merged over its root.

        The rewards are left out; actions, done flags and the other root entries
        are kept (see :func:`~tdrl.envs.utils.step_mdp` for the other choices).
        """
        return merge_next(tensordict, self._cache.mdp_excluded, True, keep_empty=True)

    def _post_step_hooks(self) -> tuple:
        """Callables ``hook(tensordict, next_input)`` the step loops run after ``step_mdp``.

        Empty for plain envs; a :class:`TransformedEnv` lists the ``_post_step_mdp``
        methods of its transforms.
        """
        return ()

    def maybe_reset(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Reset the elements of ``tensordict`` whose done flags are set, if any."""
        return _rollout.maybe_reset(self, tensordict)

    def rollout(
        self,
        max_steps: int,
        policy: Callable[[TensorDictBase], TensorDictBase] | None = None,
        callback: Callable[..., Any] | None = None,
        auto_reset: bool = True,
        auto_cast_to_device: bool = False,
        break_when_any_done: bool | None = None,
        break_when_all_done: bool | None = None,
        return_contiguous: bool | None = None,
        tensordict: TensorDictBase | None = None,
        set_truncated: bool = False,
        out: TensorDictBase | None = None,
        actions: Iterable | None = None,
        storing_device: Any = None,
        set_state: bool | None = None,
    ) -> TensorDictBase:
        """Run up to ``max_steps`` steps and stack them along a trailing ``"time"`` dim.

        Automatic garbage collection is paused while the steps run (and restored
        afterwards, also on error) so that long rollouts do not pay for repeated
        walks over the steps they keep; no garbage is lost. A plain ``TensorDictModule``
        policy is called without its generic dispatch (a hook, the skip-existing mode or
        tracing sends the call through it). Without a callback, ``out`` or
        ``break_when_all_done``, an env may produce the same data on a cheaper path: a
        plain single :class:`~tdrl.envs.GymEnv` with no policy, or with such a policy
        reading only observations, keeps the steps in columns instead of one tensordict
        per step (and hands over to the step loop at the step where the direct call stops
        applying); a batched env rolled out without early stop or callback steps and
        resets its done sub-envs in one round trip. The data is the same either way.

        Args:
            max_steps: the maximum number of steps.
            policy: a callable writing the action in a tensordict (random actions if None).
                A policy returning a new tensordict (e.g. holding only the action) has
                its output merged into the step's data; a plain ``nn.Module`` on tensors
                reads the observations (by argument name, or the single one) and writes
                the action.
            callback: called as ``callback(env, tensordict)`` after each step.
            auto_reset: reset the env first (with ``tensordict`` as input if given).
            auto_cast_to_device: move data to the policy's device and back.
            break_when_any_done: stop when any element is done (default unless
                ``break_when_all_done`` is set).
            break_when_all_done: step only unfinished elements and stop when all are done.
            return_contiguous: stack into one tensordict; False gives a lazy stack. By
                default, contiguous unless a spec has a dynamic (``-1``) dim; True with
                dynamic specs raises a RuntimeError.
            tensordict: the initial data (required when ``auto_reset=False``).
            set_truncated: mark the last step as truncated (and done).
            out: a tensordict to write the stacked result into.
            actions: instead of a policy, the actions to take: tensors (for the single
                action key) or tensordicts. A sized iterable caps ``max_steps`` to its
                length; the rollout also ends when the iterable runs out.
            storing_device: the device of the returned data (default: the env's).
            set_state: passed to the initial :meth:`reset` (True: reset to the state
                ``tensordict`` holds; see ``reset``). Needs ``auto_reset``.
        """
        return _rollout.rollout(
            self,
            max_steps,
            policy=policy,
            callback=callback,
            auto_reset=auto_reset,
            auto_cast_to_device=auto_cast_to_device,
            break_when_any_done=break_when_any_done,
            break_when_all_done=break_when_all_done,
            return_contiguous=return_contiguous,
            tensordict=tensordict,
            set_truncated=set_truncated,
            out=out,
            actions=actions,
            storing_device=storing_device,
            set_state=set_state,
        )

    def _random_rollout(
        self, max_steps: int, break_when_any_done: bool, set_truncated: bool
    ) -> TensorDictBase | None:
        """A faster equivalent of ``rollout(max_steps)`` with random actions, or None.

        Envs that can produce exactly the data of the generic loop more cheaply (same
        random draws, same resets) override this; None means "use the generic loop".
        """
        return None

    def _policy_rollout(
        self,
        call: Callable[[TensorDictBase], TensorDictBase],
        tensordict: TensorDictBase,
        max_steps: int,
        break_when_any_done: bool,
        set_truncated: bool,
    ) -> TensorDictBase | Handover | None:
        """A faster equivalent of the rollout loop driven by the policy call ``call``, or None.

        ``tensordict`` is the first step's input (reset already). Envs that can produce
        exactly the generic loop's data more cheaply override this; they may also stop at
        a step the generic loop must take and return a
        :class:`~tdrl.envs._columnar.Handover` from which the loop goes on. None means
        "use the generic loop".
        """
        return None

    def _direct_stepper(
        self, action: torch.Tensor, outputs: dict[Any, torch.Tensor]
    ) -> Callable[[], bool] | None:
        """A step writing straight into preallocated ``outputs`` buffers, or None.

        Batched envs offer each sub-env the views of its buffers (``action`` to read,
        ``outputs`` mapping each step-output key to its buffer); an env whose step can
        fill them in place, with exactly what ``step`` would produce, returns a callable
        that does so and returns the done flag. None (the default) keeps the generic path.
        """
        return None

    def _direct_resetter(self, outputs: dict[Any, torch.Tensor]) -> Callable[[], None] | None:
        """A full reset writing straight into preallocated ``outputs`` buffers, or None.

        The reset counterpart of :meth:`_direct_stepper`: the callable writes exactly
        what ``reset()`` would return. None (the default) keeps the generic path.
        """
        return None

    def rand_action(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """Write a random action (sampled from the action spec) in ``tensordict`` and return it."""
        cache = self._cache
        if tensordict is None:
            shape = None
            tensordict = TensorDict({}, batch_size=self._batch_size, device=self._device)
        else:
            shape = None if self._batch_locked else self._rand_shape(tensordict)
        if len(cache.action_keys) == 1 and type(cache.action_keys[0]) is str:
            fast_set(tensordict, cache.action_keys[0], cache.action_leaf.rand(shape))
        else:
            # nested keys: the sample carries the nested levels with their own batch dims
            tensordict.update(self.full_action_spec.rand(shape))
        return tensordict

    def rand_step(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """Take a step with a random action."""
        return self.step(self.rand_action(tensordict))
