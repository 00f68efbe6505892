"""tdrl: TensorDict-native reinforcement-learning environments and replay buffers.

The public API mirrors the ``envs`` and ``data`` namespaces of the established
TensorDict RL API, so code written for it runs by changing the import::

    from tdrl.envs import GymEnv
    from tdrl.data import ReplayBuffer, LazyTensorStorage

Importing :mod:`tdrl` itself is cheap: no simulator library is imported until a
wrapper that needs it is built.
"""

from __future__ import annotations

from tdrl._settings import auto_unwrap_transformed_env, set_auto_unwrap_transformed_env

__version__ = "0.1.0"

#: When True (the default), batched-env worker processes silence Python warnings.
filter_warnings_subprocess: bool = True

__all__ = [
    "__version__",
    "auto_unwrap_transformed_env",
    "filter_warnings_subprocess",
    "set_auto_unwrap_transformed_env",
]
