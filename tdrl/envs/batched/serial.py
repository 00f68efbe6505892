"""SerialEnv: a batch of sub-envs run one after the other in the current process."""

from __future__ import annotations

from typing import Any

from tdrl.envs.batched._base import BatchedEnvBase
from tdrl.envs.batched._runner import EnvRunner

__all__ = ["BatchedEnvBase", "SerialEnv"]

_COMMANDS = {
    "step": EnvRunner.step,
    "step_reset": EnvRunner.step_and_maybe_reset,
    "reset": EnvRunner.reset,
    "seed": EnvRunner.seed,
    "getattr": EnvRunner.get_attribute,
    "setattr": EnvRunner.set_attribute,
    "call": EnvRunner.call,
}


class SerialEnv(BatchedEnvBase):
    """Runs ``num_workers`` sub-envs serially in this process, as one batched env.

    Same API and same data as :class:`ParallelEnv` (for the same seeds), without
    worker processes: useful for tests, debugging and cheap envs. Sub-envs write
    their outputs into preallocated buffers, so a step costs the sub-env steps
    plus one copy per entry. See :class:`BatchedEnvBase` for the arguments.

    Examples:
        >>> from tdrl.envs import GymEnv, SerialEnv
        >>> env = SerialEnv(2, lambda: GymEnv("Pendulum-v1", g=9.81))
        >>> env.batch_size
        torch.Size([2])
        >>> _ = env.set_seed(0)
        >>> env.rollout(3)["next", "observation"].shape
        torch.Size([2, 3, 3])
        >>> env.g
        [9.81, 9.81]
        >>> env.close()
    """

    def _start(self) -> None:
        runners = []
        shared = self._layout is not None
        try:
            for w in range(self.num_workers):
                runners.append(
                    EnvRunner(
                        w,
                        self.create_env_fn[w],
                        self.create_env_kwargs[w],
                        self._arena if shared else None,
                        self._layout,
                        (self.meta_data[w].output_spec, self.meta_data[w].input_spec),
                    )
                )
        except BaseException:
            for runner in runners:
                runner.close()
            raise
        self._runners = runners

    def _shutdown(self) -> None:
        runners = self.__dict__.pop("_runners", [])
        for runner in runners:
            runner.close()

    def _run(
        self,
        command: str,
        payload: Any = None,
        workers: list[int] | None = None,
        payloads: list | None = None,
    ) -> list:
        runners = self._runners
        if workers is None:
            workers = range(self.num_workers)
        try:
            method = _COMMANDS[command]
        except KeyError:
            raise ValueError(
                f"unknown command: expected one of {sorted(_COMMANDS)}, got {command!r}"
            ) from None
        if payloads is None:
            return [method(runners[w], payload) for w in workers]
        return [method(runners[w], p) for w, p in zip(workers, payloads)]
