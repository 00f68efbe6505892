import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from tdrl.data import Composite, Unbounded
from tdrl.envs import ModelBasedEnvBase, check_env_specs
from tdrl.modules import SafeModule, WorldModelWrapper


class _Merge(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(5, 4)

    def forward(self, latent, action):
        return self.linear(torch.cat([latent, action], -1))


def _world_model():
    return WorldModelWrapper(
        SafeModule(_Merge(), in_keys=["latent", "action"], out_keys=["latent"]),
        TensorDictModule(torch.nn.Linear(4, 1), in_keys=["latent"], out_keys=["reward"]),
    )


class LatentEnv(ModelBasedEnvBase):
    def __init__(self, world_model, batch_size=()):
        super().__init__(world_model, batch_size=batch_size)
        shape = self.batch_size
        self.observation_spec = Composite(latent=Unbounded((*shape, 4)), shape=shape)
        self.state_spec = Composite(latent=Unbounded((*shape, 4)), shape=shape)
        self.action_spec = Unbounded((*shape, 1))
        self.reward_spec = Unbounded((*shape, 1))

    def _reset(self, tensordict=None, **kwargs):
        shape = self.batch_size if tensordict is None else tensordict.batch_size
        return TensorDict(latent=torch.zeros(*shape, 4), batch_size=shape)


def test_parts_run_in_order_and_stay_reachable():
    model = _world_model()
    out = model(TensorDict(latent=torch.zeros(2, 4), action=torch.ones(2, 1), batch_size=[2]))
    assert out["latent"].shape == (2, 4) and out["reward"].shape == (2, 1)
    transition = model.get_transition_model_operator()
    assert transition.out_keys == ["latent"]
    expected = model.get_reward_operator()(TensorDict(latent=out["latent"]))["reward"]
    assert torch.allclose(out["reward"], expected)


def test_drives_a_model_based_env():
    env = LatentEnv(_world_model(), batch_size=[3])
    check_env_specs(env)
    rollout = env.rollout(5)
    assert rollout["next", "latent"].shape == (3, 5, 4)
    assert rollout["next", "reward"].shape == (3, 5, 1)
