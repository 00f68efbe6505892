"""The policy call of the step loops: the same data as ``policy(tensordict)``, cheaper.

Calling a ``TensorDictModule`` goes through ``nn.Module.__call__``, the tensordict
dispatch and skip-existing wrappers and a generic output writer before and after the
wrapped module runs: about 20 us per call, as much as a small MLP itself. For a plain
``TensorDictModule`` (its class does not change how it is called or what ``forward``
does, its keys are plain) :func:`policy_caller` returns a :class:`ModuleCall` that reads
the input tensors, calls the wrapped module and writes its outputs directly. Whatever
could make the generic call behave differently is checked: the module's configuration
once, when the caller is made (once per rollout), and on every call the hooks (the
module's and the global ones), the skip-existing mode, tracing, a compiled module and the
input's type; any of them sends that call through ``policy(tensordict)``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from textwrap import indent
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictModuleBase, skip_existing
from torch import Tensor, nn
from torch.nn.modules import module as _torch_module

__all__ = ["ModuleCall", "policy_caller"]

_get_tracing_state = torch._C._get_tracing_state


def _plain_key(key: Any) -> bool:
    return type(key) is str or (type(key) is tuple and all(type(part) is str for part in key))


def _is_plain_module(policy: Any) -> bool:
    """Whether calling ``policy`` is exactly: read ``in_keys``, call ``module``, write ``out_keys``."""
    cls = type(policy)
    if not isinstance(policy, TensorDictModule):
        return False
    if (
        cls.forward is not TensorDictModule.forward
        or cls.__call__ is not nn.Module.__call__
        or cls._call_impl is not nn.Module._call_impl
        or cls._wrapped_call_impl is not nn.Module._wrapped_call_impl
        or "forward" in policy.__dict__
        or getattr(cls, "module", None) is not None
    ):
        return False
    if (
        policy._kwargs is not None
        or policy.inplace is not True
        or policy.method is not None
        or policy.method_kwargs
        or policy._get_kwargs
    ):
        return False
    in_keys, out_keys = policy.in_keys, policy.out_keys_source
    if list(out_keys) != list(policy.out_keys) or "_" in out_keys or not out_keys:
        return False
    return all(map(_plain_key, in_keys)) and all(map(_plain_key, out_keys))


def _hooked(policy: nn.Module) -> bool:
    """Whether a hook would run around ``policy``'s forward (or its call is replaced)."""
    return bool(
        policy._forward_hooks
        or policy._forward_pre_hooks
        or policy._backward_hooks
        or policy._backward_pre_hooks
        or _torch_module._global_forward_hooks
        or _torch_module._global_forward_pre_hooks
        or _torch_module._global_backward_hooks
        or _torch_module._global_backward_pre_hooks
        or policy._compiled_call_impl is not None
        or skip_existing()
        or _get_tracing_state()
    )


def _failure_context(policy: TensorDictModule, module: Any) -> str:
    """The context the generic call attaches to an error raised by the wrapped module."""
    if not isinstance(module, nn.Module):
        try:
            module = inspect.getsource(module)
        except Exception:  # noqa: BLE001 - the source is only shown when available
            pass
    module = indent(str(module), 4 * " ")
    in_keys = indent(f"in_keys={policy.in_keys}", 4 * " ")
    out_keys = indent(f"out_keys={policy.out_keys}", 4 * " ")
    return f"TensorDictModule failed with operation\n{module}\n{in_keys}\n{out_keys}."


class ModuleCall:
    """Calls a plain ``TensorDictModule`` on a tensordict without its generic dispatch.

    Produces exactly what ``policy(tensordict)`` produces (the outputs written into the
    input, which is returned); a call that the shortcut cannot reproduce is made as
    ``policy(tensordict)``.

    Args:
        policy: a ``TensorDictModule`` for which :func:`policy_caller` chose this path.
    """

    def __init__(self, policy: TensorDictModule) -> None:
        self.policy = policy
        self.in_keys = tuple(policy.in_keys)
        self.out_keys = tuple(policy.out_keys_source)
        self._str_in = all(type(key) is str for key in self.in_keys)
        self._str_out = all(type(key) is str for key in self.out_keys)

    def _inputs(self, tensordict: TensorDictBase) -> list | None:
        """The input tensors, or None when one is missing or not a plain tensor."""
        if self._str_in:
            source = tensordict._tensordict
            inputs = [source.get(key) for key in self.in_keys]
        else:
            inputs = [tensordict.get(key, None) for key in self.in_keys]
        for value in inputs:
            if not isinstance(value, Tensor):
                return None
        return inputs

    def direct_module(self) -> Any:
        """The wrapped module when calling it directly reproduces the generic call now, else None.

        None when a hook, the skip-existing mode, tracing or a compiled module would make
        ``policy(tensordict)`` do more than call the module (re-checked at every call).
        """
        policy = self.policy
        if _hooked(policy):
            return None
        modules = policy._modules
        module = modules["module"] if "module" in modules else policy.module
        if isinstance(module, TensorDictModuleBase):
            return None
        return module

    def call_module(self, module: Any, inputs: list) -> Any:
        """``module(*inputs)``, an error carrying the context the generic call gives it."""
        try:
            return module(*inputs)
        except Exception as err:
            # the generic call chains the same context on the error the module raised
            raise err from RuntimeError(_failure_context(self.policy, module))

    def tensor_outputs(self, outputs: Any) -> tuple | None:
        """The module's outputs as one tensor per out key, or None for any other layout."""
        if type(outputs) is Tensor:
            return (outputs,) if len(self.out_keys) == 1 else None
        if (
            type(outputs) is tuple
            and len(outputs) == len(self.out_keys)
            and all(type(value) is Tensor for value in outputs)
        ):
            return outputs
        return None

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        """``policy(tensordict)``."""
        policy = self.policy
        if type(tensordict) is not TensorDict:
            return policy(tensordict)
        module = self.direct_module()
        if module is None:
            return policy(tensordict)
        inputs = self._inputs(tensordict)
        if inputs is None:
            return policy(tensordict)
        outputs = self.call_module(module, inputs)
        out_keys = self.out_keys
        if type(outputs) is Tensor and len(out_keys) == 1:
            if self._str_out:
                tensordict._set_str(out_keys[0], outputs, inplace=False, validated=False)
            else:
                tensordict.set(out_keys[0], outputs)
            return tensordict
        values = self.tensor_outputs(outputs)
        if values is not None:
            for key, value in zip(out_keys, values):
                tensordict.set(key, value)
            return tensordict
        return self.write_other(tensordict, outputs)

    def write_other(self, tensordict: TensorDictBase, outputs: Any) -> TensorDictBase:
        """Outputs other than tensors (a mapping, None, tensor collections): the generic writer."""
        policy = self.policy
        if outputs is None:
            outputs = ()
        if (
            type(outputs) is not Tensor
            and type(outputs) is not tuple
            and isinstance(outputs, (dict, TensorDictBase))
            and all(key in outputs for key in policy.out_keys_source)
        ):
            if isinstance(outputs, dict):
                from tensordict import unravel_key_list

                outputs = dict(zip(unravel_key_list(list(outputs.keys())), outputs.values()))
            outputs = tuple(outputs.get(key) for key in policy.out_keys_source)
        if not isinstance(outputs, tuple):
            outputs = (outputs,)
        return policy._write_to_tensordict(tensordict, outputs)


def policy_caller(
    policy: Callable[[TensorDictBase], TensorDictBase],
) -> Callable[[TensorDictBase], TensorDictBase]:
    """The callable a step loop calls for ``policy``: a :class:`ModuleCall` or ``policy``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> policy = TensorDictModule(torch.nn.Linear(3, 1), in_keys=["x"], out_keys=["y"])
        >>> call = policy_caller(policy)
        >>> type(call).__name__
        'ModuleCall'
        >>> call(TensorDict(x=torch.ones(3)))["y"].shape
        torch.Size([1])
    """
    if _is_plain_module(policy):
        return ModuleCall(policy)
    return policy
