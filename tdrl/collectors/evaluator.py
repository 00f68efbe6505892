"""Evaluator: roll a policy out for whole episodes and report return, length and speed.

An evaluation runs ``num_trajectories`` complete episodes from fresh resets (through a
collector with ``trajs_per_batch``) and returns a dict of metrics under a prefix
(``"eval/reward"``, ``"eval/episode_length"``, ``"eval/num_episodes"``, ``"eval/fps"``,
``"eval/step"``). It runs in the calling thread (:meth:`Evaluator.evaluate`) or in the
background (:meth:`Evaluator.trigger_eval`, then :meth:`Evaluator.poll` /
:meth:`Evaluator.wait`); with ``backend="process"`` the env and policy live in a worker process.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.collectors.base import Policy
from tdrl.envs.utils import ExplorationType

__all__ = ["Evaluator"]

_BACKENDS = ("thread", "process")
_BUSY_POLICIES = ("error", "queue")


class Evaluator:
    """Evaluate a policy on whole episodes, blocking or in the background.

    Args:
        env: an env, or a callable building one (required for ``backend="process"``).
        policy: the policy to evaluate (a random policy of the env when None).
        policy_factory: a callable building the policy (instead of ``policy``).
        num_trajectories: the episodes each evaluation runs.
        max_steps: the longest episode (longer ones are truncated); None: the env's own limit.
        frames_per_batch: the steps collected per chunk while episodes run.
        backend: ``"thread"`` (this process) or ``"process"`` (a worker process).
        busy_policy: what :meth:`trigger_eval` does while an evaluation is pending:
            ``"error"`` raises, ``"queue"`` runs it after the pending ones.
        on_result: called with each result as a flat TensorDict of the metrics.
        metric_prefix: the prefix of the metric names.
        exploration_type: the exploration type set while the policy runs.

    Examples:
        >>> from tdrl.collectors import Evaluator
        >>> from tdrl.envs import PendulumEnv
        >>> evaluator = Evaluator(PendulumEnv, num_trajectories=1, max_steps=20)
        >>> result = evaluator.evaluate()
        >>> result["eval/episode_length"], result["eval/num_episodes"], result["eval/step"]
        (20.0, 1, 1)
        >>> evaluator.shutdown()
    """

    def __init__(
        self,
        env: Any,
        policy: Policy | None = None,
        *,
        policy_factory: Callable[[], Policy] | None = None,
        num_trajectories: int = 1,
        max_steps: int | None = None,
        frames_per_batch: int = 200,
        backend: str = "thread",
        busy_policy: str = "error",
        on_result: Callable[[TensorDictBase], Any] | None = None,
        metric_prefix: str = "eval",
        exploration_type: ExplorationType = ExplorationType.DETERMINISTIC,
    ) -> None:
        if backend not in _BACKENDS:
            raise ValueError(f"backend: expected one of {list(_BACKENDS)}, got {backend!r}")
        if busy_policy not in _BUSY_POLICIES:
            raise ValueError(
                f"busy_policy: expected one of {list(_BUSY_POLICIES)}, got {busy_policy!r}"
            )
        if isinstance(num_trajectories, bool) or not isinstance(num_trajectories, int):
            raise TypeError(
                f"num_trajectories: expected an int, got {type(num_trajectories).__name__}"
            )
        if num_trajectories < 1:
            raise ValueError(f"num_trajectories: expected a positive int, got {num_trajectories}")
        self.num_trajectories = num_trajectories
        self.backend = backend
        self.busy_policy = busy_policy
        self.on_result = on_result
        self.metric_prefix = metric_prefix
        options = {
            "frames_per_batch": frames_per_batch,
            "trajs_per_batch": num_trajectories,
            "traj_format": "cat",
            "max_frames_per_traj": max_steps,
            "exploration_type": exploration_type,
        }
        if backend == "process":
            from tdrl.collectors.multi import MultiSyncDataCollector

            if not callable(env) or isinstance(env, torch.nn.Module):
                raise TypeError(
                    "env: backend='process' needs a callable building the env, got "
                    f"{type(env).__name__}"
                )
            self._collector: Any = MultiSyncDataCollector(
                [env], policy, policy_factory=policy_factory, **options
            )
        else:
            from tdrl.collectors.sync import SyncDataCollector

            self._collector = SyncDataCollector(
                env, policy, policy_factory=policy_factory, **options
            )
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="tdrl-evaluator"
        )
        self._pending: deque[concurrent.futures.Future] = deque()
        self._step = 0
        # one rollout at a time: evaluate() and background evaluations share the collector
        self._lock = threading.Lock()
        self.closed = False

    # ------------------------------------------------------------- evaluation
    def evaluate(self, weights: Any = None, step: int | None = None) -> dict[str, Any]:
        """Run the episodes now and return the metrics.

        Args:
            weights: new policy weights first (a module, a TensorDict or a state dict).
            step: the step reported with the result (the evaluation count by default).
        """
        self._check_open()
        return self._run(self._snapshot(weights), step)

    def trigger_eval(self, weights: Any = None, step: int | None = None) -> None:
        """Start an evaluation in the background (see ``busy_policy``).

        The weights are copied now, so training may go on changing them.

        Raises:
            RuntimeError: with ``busy_policy="error"``, when an evaluation is pending.
        """
        self._check_open()
        if self._pending and not self._pending[-1].done() and self.busy_policy == "error":
            raise RuntimeError(
                "trigger_eval: an evaluation is still running; collect it with poll() or "
                "wait() first, or build the Evaluator with busy_policy='queue'"
            )
        self._pending.append(self._executor.submit(self._run, self._snapshot(weights), step))

    def poll(self, timeout: float | None = 0) -> dict[str, Any] | None:
        """The oldest pending result, or None when it is not ready within ``timeout`` seconds."""
        if not self._pending:
            return None
        future = self._pending[0]
        try:
            result = future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            return None
        self._pending.popleft()
        return result

    def wait(self, timeout: float | None = None) -> dict[str, Any] | None:
        """Block until the oldest pending result is ready and return it (None if none pending).

        Raises:
            TimeoutError: when it is not ready within ``timeout`` seconds.
        """
        if not self._pending:
            return None
        result = self.poll(timeout=timeout)
        if result is None:
            raise TimeoutError(f"wait: the evaluation did not finish within {timeout}s")
        return result

    def shutdown(self) -> None:
        """Wait for pending evaluations, then release the env (and worker process)."""
        if self.closed:
            return
        self.closed = True
        self._executor.shutdown(wait=True)
        self._collector.shutdown()

    # --------------------------------------------------------------- helpers
    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("Evaluator is shut down: build a new one to evaluate again")

    @staticmethod
    def _snapshot(weights: Any) -> Any:
        if weights is None:
            return None
        if isinstance(weights, torch.nn.Module):
            return TensorDict.from_module(weights).data.clone()
        if isinstance(weights, TensorDictBase):
            return weights.data.clone() if weights.requires_grad else weights.clone()
        return {key: value.detach().clone() for key, value in dict(weights).items()}

    def _run(self, weights: Any, step: int | None) -> dict[str, Any]:
        with self._lock:
            return self._run_locked(weights, step)

    def _run_locked(self, weights: Any, step: int | None) -> dict[str, Any]:
        collector = self._collector
        if weights is not None:
            collector.update_policy_weights_(weights)
        collector.reset()
        start = time.perf_counter()
        data = next(iter(collector))
        elapsed = time.perf_counter() - start
        self._step += 1
        result = self._metrics(data, elapsed, self._step if step is None else step)
        if self.on_result is not None:
            self.on_result(TensorDict({k: torch.tensor(v) for k, v in result.items()}, []))
        return result

    def _metrics(self, data: TensorDictBase, elapsed: float, step: int) -> dict[str, Any]:
        ids = data.get(("collector", "traj_ids")).reshape(-1)
        reward = data.get(("next", "reward")).reshape(ids.shape[0], -1).sum(-1)
        _, inverse, lengths = torch.unique(ids, return_inverse=True, return_counts=True)
        returns = torch.zeros(lengths.shape[0], dtype=reward.dtype).index_add_(0, inverse, reward)
        prefix = self.metric_prefix
        return {
            f"{prefix}/reward": float(returns.mean()),
            f"{prefix}/episode_length": float(lengths.float().mean()),
            f"{prefix}/num_episodes": int(lengths.shape[0]),
            f"{prefix}/fps": float(ids.shape[0] / max(elapsed, 1e-9)),
            f"{prefix}/step": int(step),
        }

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
