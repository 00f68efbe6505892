import pytest
import torch
from tensordict import TensorDict

from tdrl.data import Bounded, Composite, Unbounded
from tdrl.modules import SafeModule


def _linear(out_features=2, fill=10.0):
    linear = torch.nn.Linear(3, out_features)
    torch.nn.init.constant_(linear.weight, fill)
    torch.nn.init.zeros_(linear.bias)
    return linear


def test_unsafe_module_keeps_out_of_bounds_outputs():
    module = SafeModule(
        _linear(), in_keys=["obs"], out_keys=["action"], spec=Bounded(-1.0, 1.0, (2,))
    )
    out = module(TensorDict(obs=torch.ones(3)))
    assert (out["action"] == 30.0).all()
    assert isinstance(module.spec, Composite)
    assert module.spec["action"].shape == (2,)


def test_safe_module_projects_onto_the_spec():
    module = SafeModule(
        _linear(fill=-10.0),
        in_keys=["obs"],
        out_keys=["action"],
        spec=Bounded(-1.0, 1.0, (2,)),
        safe=True,
    )
    out = module(TensorDict(obs=torch.ones(4, 3), batch_size=[4]))
    assert (out["action"] == -1.0).all()


def test_in_domain_outputs_are_left_alone():
    module = SafeModule(
        _linear(fill=0.01),
        in_keys=["obs"],
        out_keys=["action"],
        spec=Bounded(-1.0, 1.0, (2,)),
        safe=True,
    )
    out = module(TensorDict(obs=torch.ones(3)))
    assert torch.allclose(out["action"], torch.full((2,), 0.03))


def test_composite_spec_may_leave_outputs_unconstrained():
    class TwoHeads(torch.nn.Module):
        def forward(self, obs):
            return obs * 5, obs * 5

    module = SafeModule(
        TwoHeads(),
        in_keys=["obs"],
        out_keys=["clipped", "free"],
        spec=Composite(clipped=Bounded(0.0, 1.0, (3,))),
        safe=True,
    )
    out = module(TensorDict(obs=torch.ones(3)))
    assert (out["clipped"] == 1.0).all() and (out["free"] == 5.0).all()


def test_keyword_call_returns_tensors():
    module = SafeModule(
        _linear(), in_keys=["obs"], out_keys=["action"], spec=Bounded(-1.0, 1.0, (2,)), safe=True
    )
    action = module(obs=torch.ones(3))
    assert isinstance(action, torch.Tensor) and (action == 1.0).all()


def test_bad_specs_are_rejected():
    with pytest.raises(ValueError, match="safe=True needs a spec"):
        SafeModule(_linear(), in_keys=["obs"], out_keys=["action"], safe=True)
    with pytest.raises(ValueError, match=r"exactly one out_key, got out_keys=\['a', 'b'\]"):
        SafeModule(_linear(), in_keys=["obs"], out_keys=["a", "b"], spec=Unbounded((2,)))
    with pytest.raises(KeyError, match=r"keys \['other'\] are not among the out_keys"):
        SafeModule(
            _linear(), in_keys=["obs"], out_keys=["action"], spec=Composite(other=Unbounded(()))
        )
