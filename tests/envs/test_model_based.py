import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn

from tdrl.data import Bounded, Categorical, Composite, Unbounded
from tdrl.envs import (
    ModelBasedEnvBase,
    PendulumEnv,
    SerialEnv,
    TransformedEnv,
    check_env_specs,
)
from tdrl.envs.model_based.dreamer import DreamerDecoder, DreamerEnv
from tests.envs.conformance import EnvConformance

SEED_WARNING = "ignore:.*seeding a model based env has no effect"


class MyMBEnv(ModelBasedEnvBase):
    """The reference example: a 4-dim hidden observation driven by a 1-dim action."""

    def __init__(self, world_model, params=None, buffers=None, device="cpu", batch_size=None):
        super().__init__(world_model, params, buffers, device=device, batch_size=batch_size)
        self.observation_spec = Composite(hidden_observation=Unbounded((4,)))
        self.state_spec = Composite(hidden_observation=Unbounded((4,)))
        self.action_spec = Unbounded((1,))
        self.reward_spec = Unbounded((1,))

    def _reset(self, tensordict=None):
        shape = self.batch_size if tensordict is None else tensordict.batch_size
        data = TensorDict(batch_size=shape, device=self.device)
        data.update(self.state_spec.rand(shape))
        data.update(self.observation_spec.rand(shape))
        return data


def hidden_world_model():
    torch.manual_seed(0)
    return TensorDictSequential(
        TensorDictModule(
            nn.Bilinear(4, 1, 4),
            in_keys=["hidden_observation", "action"],
            out_keys=["hidden_observation"],
        ),
        TensorDictModule(nn.Linear(4, 1), in_keys=["hidden_observation"], out_keys=["reward"]),
    )


def step_input(batch=()):
    return TensorDict(
        hidden_observation=torch.randn(*batch, 4), action=torch.randn(*batch, 1), batch_size=batch
    )


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(10, 12)
        self.norm = nn.BatchNorm1d(12)

    def forward(self, state, belief):
        x = self.linear(torch.cat([state, belief], -1))
        lead = x.shape[:-1]
        x = self.norm(x.reshape(-1, 12)).reshape(*lead, 12)
        return x.unflatten(-1, (3, 2, 2))


def latent_world_model():
    torch.manual_seed(0)
    return TensorDictSequential(
        TensorDictModule(nn.Bilinear(6, 1, 6), in_keys=["belief", "action"], out_keys=["belief"]),
        TensorDictModule(nn.Linear(6, 4), in_keys=["belief"], out_keys=["state"]),
        TensorDictModule(nn.Linear(4, 1), in_keys=["state"], out_keys=["reward"]),
    )


def make_decoder():
    return TensorDictModule(Decoder(), in_keys=["state", "belief"], out_keys=["reco_pixels"])


def make_dreamer(decoder=True, **kwargs):
    env = DreamerEnv(
        latent_world_model(),
        prior_shape=(4,),
        belief_shape=(6,),
        obs_decoder=make_decoder() if decoder else None,
        **kwargs,
    )
    env.set_specs_from_env(PendulumEnv())
    return env


def posterior(batch=8):
    return TensorDict(state=torch.randn(batch, 4), belief=torch.randn(batch, 6), batch_size=[batch])


# ---------------------------------------------------------------- conformance
@pytest.mark.filterwarnings(SEED_WARNING)
class TestMyMBEnvConformance(EnvConformance):
    def make_env(self):
        return MyMBEnv(hidden_world_model())


@pytest.mark.filterwarnings(SEED_WARNING)
class TestMyMBEnvBatchedConformance(EnvConformance):
    def make_env(self):
        return MyMBEnv(hidden_world_model())

    def reset_input(self, env):
        return TensorDict(batch_size=[3])


@pytest.mark.filterwarnings(SEED_WARNING)
class TestDreamerConformance(EnvConformance):
    def make_env(self):
        return make_dreamer()

    def reset_input(self, env):
        return TensorDict(batch_size=[3])


@pytest.mark.filterwarnings(SEED_WARNING)
class TestDreamerDecoderConformance(EnvConformance):
    def make_env(self):
        return TransformedEnv(make_dreamer(), DreamerDecoder())

    def reset_input(self, env):
        return TensorDict(batch_size=[2])


# ------------------------------------------------------------ ModelBasedEnvBase
@pytest.mark.parametrize("batch", [(), (3,), (2, 5)])
def test_batch_unlocked_rollouts(batch):
    env = MyMBEnv(hidden_world_model())
    assert not env.batch_locked and env.batch_size == ()
    data = env.rollout(4, tensordict=TensorDict(batch_size=batch))
    assert data.batch_size == (*batch, 4)
    assert data["next", "hidden_observation"].shape == (*batch, 4, 4)
    assert data["next", "reward"].shape == (*batch, 4, 1)
    assert data["next", "done"].shape == (*batch, 4, 1)
    assert not data["next", "done"].any() and not data["next", "terminated"].any()
    torch.testing.assert_close(
        data["hidden_observation"][..., 1:, :], data["next", "hidden_observation"][..., :-1, :]
    )


def test_step_runs_world_model_without_mutating_input():
    world_model = hidden_world_model()
    env = MyMBEnv(world_model)
    data = step_input((3,))
    before = data.clone()
    data = env.step(data)
    assert set(data.keys()) == {"hidden_observation", "action", "next"}
    assert (data.exclude("next") == before).all()
    expected = world_model(before.clone())
    torch.testing.assert_close(data["next", "hidden_observation"], expected["hidden_observation"])
    torch.testing.assert_close(data["next", "reward"], expected["reward"])
    assert set(data["next"].keys()) == {"hidden_observation", "reward", "done", "terminated"}


def test_done_filled_with_batch_shape_when_model_omits_it():
    env = MyMBEnv(hidden_world_model())
    nxt = env.step(step_input((2, 5)))["next"]
    assert nxt["done"].shape == (2, 5, 1) and nxt["done"].dtype == torch.bool
    assert not nxt["done"].any() and not nxt["terminated"].any()


def test_done_of_the_input_is_not_carried_over():
    env = MyMBEnv(hidden_world_model())
    data = step_input((3,))
    data.set("done", torch.ones(3, 1, dtype=torch.bool))
    data.set("terminated", torch.ones(3, 1, dtype=torch.bool))
    nxt = env.step(data)["next"]
    assert not nxt["done"].any() and not nxt["terminated"].any()
    assert data["done"].all()


class CountEnv(ModelBasedEnvBase):
    def __init__(self, world_model, done_spec=None):
        super().__init__(world_model)
        self.observation_spec = Composite(count=Unbounded((1,)))
        self.state_spec = Composite(count=Unbounded((1,)))
        self.action_spec = Unbounded((1,))
        self.reward_spec = Unbounded((1,))
        if done_spec is not None:
            self.done_spec = done_spec

    def _reset(self, tensordict=None):
        shape = self.batch_size if tensordict is None else tensordict.batch_size
        return TensorDict(count=torch.zeros(*shape, 1), batch_size=shape)


def count_model(flag):
    return TensorDictSequential(
        TensorDictModule(lambda c: c + 1, in_keys=["count"], out_keys=["count"]),
        TensorDictModule(lambda c: c.sum(-1, keepdim=True), in_keys=["count"], out_keys=["reward"]),
        TensorDictModule(lambda c: c >= 3, in_keys=["count"], out_keys=[flag]),
    )


def test_done_from_model_stops_rollout():
    env = CountEnv(count_model("done"))
    data = env.rollout(10, break_when_any_done=True)
    assert data.batch_size == (3,)
    assert data["next", "done"].squeeze(-1).tolist() == [False, False, True]
    assert (data["next", "terminated"] == data["next", "done"]).all()


def test_terminated_from_model_completes_done_and_truncated():
    flag = Categorical(2, (1,), dtype=torch.bool)
    spec = Composite(done=flag, terminated=flag.clone(), truncated=flag.clone())
    env = CountEnv(count_model("terminated"), done_spec=spec)
    data = env.rollout(10, tensordict=TensorDict(batch_size=[2]))
    assert data.batch_size == (2, 3)
    assert (data["next", "done"] == data["next", "terminated"]).all()
    assert data["next", "done"][:, -1].all() and not data["next", "truncated"].any()


def test_params_tensordict_replace_the_weights():
    world_model = hidden_world_model()
    params = TensorDict.from_module(world_model).data.clone()
    params.apply_(lambda p: p.zero_())
    data = step_input((3,))
    default = MyMBEnv(world_model).step(data.clone())["next"]
    swapped = MyMBEnv(world_model, params=params).step(data.clone())["next"]
    assert (default["reward"] != 0).all()
    assert (swapped["reward"] == 0).all() and (swapped["hidden_observation"] == 0).all()
    # the module keeps its own weights
    again = MyMBEnv(world_model).step(data.clone())["next"]
    torch.testing.assert_close(again["reward"], default["reward"])


def test_params_gradients_reach_the_given_params():
    world_model = hidden_world_model()
    params = TensorDict.from_module(world_model).data.clone().requires_grad_()
    env = MyMBEnv(world_model, params=params)
    env.step(step_input((3,)))["next", "reward"].sum().backward()
    for name, param in world_model.named_parameters():
        assert param.grad is None, name
    assert all(g is not None for g in params.grad.values(True, True))


class ScaledLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 1)
        self.register_buffer("scale", torch.ones(1))

    def forward(self, hidden):
        return self.linear(hidden) * self.scale


def scaled_world_model():
    torch.manual_seed(0)
    return TensorDictSequential(
        TensorDictModule(
            nn.Bilinear(4, 1, 4), ["hidden_observation", "action"], ["hidden_observation"]
        ),
        TensorDictModule(ScaledLinear(), in_keys=["hidden_observation"], out_keys=["reward"]),
    )


@pytest.mark.parametrize("kind", ["tensordict", "dict"])
def test_params_and_buffers(kind):
    world_model = scaled_world_model()
    params = {k: v.detach() * 2 for k, v in world_model.named_parameters()}
    buffers = {k: torch.full_like(v, 3.0) for k, v in world_model.named_buffers()}
    if kind == "tensordict":
        params = TensorDict(params).unflatten_keys(".")
        buffers = TensorDict(buffers).unflatten_keys(".")
    data = step_input((2,))
    with torch.no_grad():
        expected = torch.func.functional_call(
            world_model,
            (
                {k: v.detach() * 2 for k, v in world_model.named_parameters()},
                {k: torch.full_like(v, 3.0) for k, v in world_model.named_buffers()},
            ),
            (data.clone(),),
        )
        out = MyMBEnv(world_model, params=params, buffers=buffers).step(data.clone())["next"]
        default = MyMBEnv(world_model).step(data.clone())["next"]
    torch.testing.assert_close(out["reward"], expected["reward"])
    assert not torch.allclose(out["reward"], default["reward"])
    assert world_model[1].module.scale.item() == 1.0


class KeywordModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = []

    def forward(self, tensordict, params=None, buffers=None):
        self.calls.append((params, buffers))
        hidden = tensordict["hidden_observation"] * params["scale"] + buffers["shift"]
        tensordict["hidden_observation"] = hidden
        tensordict["reward"] = hidden.sum(-1, keepdim=True)
        return tensordict


def test_world_model_receives_params_when_it_names_them():
    model = KeywordModel()
    params, buffers = {"scale": torch.tensor(2.0)}, {"shift": torch.tensor(1.0)}
    env = MyMBEnv(model, params=params, buffers=buffers)
    data = step_input((3,))
    nxt = env.step(data)["next"]
    assert model.calls == [(params, buffers)]
    torch.testing.assert_close(nxt["hidden_observation"], data["hidden_observation"] * 2 + 1)


def test_plain_function_world_model_with_params():
    def world_model(tensordict, params=None):
        tensordict["hidden_observation"] = tensordict["hidden_observation"] * params["scale"]
        tensordict["reward"] = tensordict["hidden_observation"].sum(-1, keepdim=True)
        return tensordict

    env = MyMBEnv(world_model, params={"scale": torch.tensor(3.0)})
    data = step_input((2,))
    nxt = env.step(data)["next"]
    torch.testing.assert_close(nxt["hidden_observation"], data["hidden_observation"] * 3)


def test_bad_params_type():
    with pytest.raises(TypeError, match="params: expected None, a TensorDict or a mapping"):
        MyMBEnv(hidden_world_model(), params=[torch.zeros(1)])


def test_set_specs_from_env_copies_pendulum_specs():
    pendulum = PendulumEnv()
    env = MyMBEnv(hidden_world_model())
    env.set_specs_from_env(pendulum)
    assert env.observation_keys == pendulum.observation_keys
    assert env.state_keys == pendulum.state_keys
    assert env.full_action_spec == pendulum.full_action_spec.to("cpu")
    assert env.full_reward_spec == pendulum.full_reward_spec.to("cpu")
    assert env.done_keys == pendulum.done_keys
    assert env.full_observation_spec.device == torch.device("cpu")
    assert isinstance(env.action_spec, Bounded)


def test_set_specs_from_env_rebatches():
    batched = SerialEnv(2, PendulumEnv)
    try:
        env = MyMBEnv(hidden_world_model())
        env.set_specs_from_env(batched)
        assert env.full_observation_spec["th"].shape == ()
        assert env.action_spec.shape == (1,)
        wide = DreamerEnv(latent_world_model(), 4, 6, batch_size=(3,))
        wide.set_specs_from_env(PendulumEnv())
        assert wide.action_spec.shape == (3, 1) and wide.reward_spec.shape == (3, 1)
        assert wide.full_observation_spec["state"].shape == (3, 4)
        data = wide.rollout(2, tensordict=TensorDict(batch_size=[5, 3]))
        assert data["next", "belief"].shape == (5, 3, 2, 6)
    finally:
        batched.close()
    with pytest.raises(TypeError, match="expected an EnvBase, got dict"):
        env.set_specs_from_env({})


def test_reset_must_be_implemented():
    class NoReset(ModelBasedEnvBase):
        pass

    env = NoReset(hidden_world_model())
    with pytest.raises(NotImplementedError, match="NoReset must implement _reset"):
        env.reset()


def test_set_seed_warns_and_returns_next_seed():
    env = MyMBEnv(hidden_world_model())
    with pytest.warns(UserWarning, match="seeding a model based env has no effect"):
        assert env.set_seed(3, static_seed=True) == 3
    with pytest.warns(UserWarning, match="seeding"):
        assert env._set_seed(5) == 5


def test_world_model_attributes_and_device():
    world_model = hidden_world_model()
    params = TensorDict.from_module(world_model).data
    env = MyMBEnv(world_model, params=params)
    assert env.world_model is world_model
    assert env.world_model_params is params and env.world_model_buffers is None
    assert env.device == torch.device("cpu")
    assert env.to("cpu") is env


# ------------------------------------------------------------------ DreamerEnv
def test_dreamer_specs_from_env():
    env = make_dreamer()
    assert set(env.observation_keys) == {"state", "belief"}
    assert set(env.state_keys) == {"state", "belief"}
    assert env.full_observation_spec["state"].shape == (4,)
    assert env.full_state_spec["belief"].shape == (6,)
    assert env.action_spec == PendulumEnv().action_spec.to("cpu")
    assert env.reward_spec.shape == (1,)
    assert env.prior_shape == (4,) and env.belief_shape == (6,)
    check_env_specs(env)


def test_dreamer_reset_without_tensordict_steps_from_zeros():
    env = make_dreamer()
    data = env.reset()
    assert data["state"].shape == (4,) and data["belief"].shape == (6,)
    assert not data["done"].any()
    start = TensorDict(state=torch.zeros(4), belief=torch.zeros(6), action=torch.zeros(1))
    expected = env.world_model(start)
    torch.testing.assert_close(data["belief"], expected["belief"])
    torch.testing.assert_close(data["state"], expected["state"])


def test_dreamer_reset_from_given_latents():
    env = make_dreamer()
    start = posterior(8)
    data = env.reset(start.clone())
    torch.testing.assert_close(data["state"], start["state"])
    torch.testing.assert_close(data["belief"], start["belief"])
    assert data["done"].shape == (8, 1) and not data["done"].any()
    zeros = env.reset(TensorDict(batch_size=[5]))
    assert zeros["state"].shape == (5, 4)
    with pytest.raises(ValueError, match=r"expected all latent state keys .* got only \['state'\]"):
        env.reset(TensorDict(state=torch.zeros(2, 4), batch_size=[2]))


def test_dreamer_rollout_shapes():
    env = make_dreamer()
    data = env.rollout(5)
    assert data.batch_size == (5,)
    assert data["next", "state"].shape == (5, 4) and data["next", "reward"].shape == (5, 1)
    data = env.rollout(5, tensordict=posterior(8))
    assert data.batch_size == (8, 5)
    assert data["next", "belief"].shape == (8, 5, 6)
    assert data["action"].shape == (8, 5, 1)


def test_dreamer_decode_obs():
    env = make_dreamer()
    data = env.rollout(5)
    decoded = env.decode_obs(data)
    assert decoded["reco_pixels"].shape == (5, 3, 2, 2)
    start = posterior(3).set("action", torch.zeros(3, 1))
    latents = env.decode_obs(start.clone(), compute_latents=True)
    expected = env.world_model(start.clone())
    torch.testing.assert_close(latents["state"], expected["state"])
    torch.testing.assert_close(
        latents["reco_pixels"], env.obs_decoder(expected.clone())["reco_pixels"]
    )
    with pytest.raises(ValueError, match="expected an observation decoder, got obs_decoder=None"):
        make_dreamer(decoder=False).decode_obs(data)


def test_dreamer_decoder_transform():
    base = make_dreamer()
    base.obs_decoder.train()
    running_mean = base.obs_decoder.module.norm.running_mean.clone()
    env = TransformedEnv(base, DreamerDecoder())
    spec = env.observation_spec["reco_pixels"]
    assert isinstance(spec, Unbounded) and spec.shape == (3, 2, 2)
    # the shape probe leaves the decoder's modes and statistics alone
    assert all(m.training for m in base.obs_decoder.modules())
    torch.testing.assert_close(base.obs_decoder.module.norm.running_mean, running_mean)
    base.obs_decoder.eval()
    data = env.rollout(5, tensordict=posterior(4))
    assert data["reco_pixels"].shape == (4, 5, 3, 2, 2)
    assert data["next", "reco_pixels"].shape == (4, 5, 3, 2, 2)
    expected = base.obs_decoder(data["next"].select("state", "belief"))["reco_pixels"]
    torch.testing.assert_close(data["next", "reco_pixels"], expected)
    assert env.transform(data["next"].exclude("reco_pixels"))["reco_pixels"].shape == (
        4,
        5,
        3,
        2,
        2,
    )
    check_env_specs(env, tensordict=TensorDict(batch_size=[2]))


def test_dreamer_decoder_errors():
    with pytest.raises(ValueError, match="expected an observation decoder"):
        TransformedEnv(make_dreamer(decoder=False), DreamerDecoder())
    with pytest.raises(ValueError, match="got no env"):
        DreamerDecoder()(posterior(2))
    with pytest.raises(KeyError, match="expected the obs_decoder to write 'pixels'"):
        TransformedEnv(make_dreamer(), DreamerDecoder(out_keys=["pixels"]))
    with pytest.raises(KeyError, match="expected latent key 'latent'"):
        TransformedEnv(make_dreamer(), DreamerDecoder(in_keys=["latent"]))
    transform = DreamerDecoder()
    assert transform.in_keys == ["state", "belief"] and transform.out_keys == ["reco_pixels"]
