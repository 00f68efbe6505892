"""UnaryTransform and Hash (tdrl/envs/transforms/unary.py)."""

from __future__ import annotations

import pytest
import torch
from tensordict import NonTensorStack, TensorDict

from tdrl.data import NonTensor, Unbounded
from tdrl.envs import (
    Compose,
    GymEnv,
    Hash,
    SerialEnv,
    TransformedEnv,
    UnaryTransform,
    check_env_specs,
)
from tests.mocks import CountingEnv


@pytest.fixture
def pendulum():
    env = GymEnv("Pendulum-v1")
    env.set_seed(0)
    yield env
    env.close()


# ----------------------------------------------------------------- unary
def test_unary_tensor_and_inverse(pendulum):
    env = TransformedEnv(
        pendulum,
        UnaryTransform(
            ["observation"],
            ["obs_sum"],
            in_keys_inv=["action"],
            out_keys_inv=["action_half"],
            fn=lambda x: x.sum(-1, keepdim=True),
            inv_fn=lambda a: a * 2,
        ),
    )
    assert env.observation_spec["obs_sum"].shape == (1,)
    assert "action_half" in env.action_keys
    td = env.reset()
    td["action_half"] = torch.full((1,), 0.25)
    td["action"] = torch.zeros(1)
    env.step(td)
    assert torch.allclose(td["obs_sum"], td["observation"].sum(-1, keepdim=True))


def test_unary_non_tensor_outputs(pendulum):
    text = UnaryTransform(["observation"], ["text"], fn=lambda x: str(x.tolist()))
    env = TransformedEnv(pendulum, text)
    assert isinstance(env.observation_spec["text"], NonTensor)
    rollout = env.rollout(3)
    assert isinstance(rollout.get("text"), NonTensorStack)
    assert rollout[0]["text"].startswith("[")


def test_unary_raw_nontensor_and_errors():
    t = UnaryTransform(["s"], ["n"], fn=len, use_raw_nontensor=True)
    assert t(TensorDict({"s": "hello"}, []))["n"] == 5
    with pytest.raises(TypeError, match="callable"):
        UnaryTransform(["a"], ["b"], fn=3)


# ------------------------------------------------------------------ hash
def test_hash_is_reproducible_and_seeded():
    a = Hash.reproducible_hash("abc")
    assert a.dtype == torch.uint8 and a.shape == (32,)
    assert torch.equal(a, Hash.reproducible_hash("abc"))
    assert not torch.equal(a, Hash.reproducible_hash("abc", seed=1))


def test_hash_on_env_with_inverse(pendulum):
    env = TransformedEnv(
        pendulum,
        Compose(
            UnaryTransform(["observation"], ["text"], fn=lambda x: str(x.tolist())),
            Hash(["text"], ["hash"]),
        ),
    )
    spec = env.observation_spec["hash"]
    assert spec.shape == (32,) and spec.dtype == torch.uint8
    td = env.reset()
    assert torch.equal(td["hash"], Hash.reproducible_hash(td["text"]))
    hasher = Hash(["text"], ["hash"], in_keys_inv=["text"], out_keys_inv=["hash"])
    data = hasher(TensorDict({"text": "hello"}, []))
    back = hasher.inv(TensorDict({"hash": data["hash"]}, []))
    assert back["text"] == "hello"


def test_hash_batched_nontensor_and_errors():
    hasher = Hash(["text"], ["hash"], repertoire={})
    td = TensorDict({"text": NonTensorStack("a", "b")}, [2])
    out = hasher(td)
    assert out["hash"].shape == (2, 32)
    assert hasher.get_input_from_hash(out["hash"]) == ["a", "b"]
    with pytest.raises(KeyError, match="repertoire"):
        hasher.get_input_from_hash(torch.zeros(32, dtype=torch.uint8))
    with pytest.raises(RuntimeError, match="repertoire"):
        Hash(["a"], ["b"]).get_input_from_hash(torch.zeros(32, dtype=torch.uint8))
    with pytest.raises(ValueError, match="together"):
        Hash(["a"], ["b"], in_keys_inv=["a"])


def test_hash_items_follow_the_tensordict_batch():
    hasher = Hash(["text"], ["hash"], repertoire={})
    # in an unbatched tensordict the list is one item: one hash, its input is the list
    single = hasher(TensorDict({"text": ["a", "b"]}, []))["hash"]
    assert single.shape == (32,)
    assert hasher.get_input_from_hash(single) == ["a", "b"]
    assert hasher.hash_to_repertoire_key(single) in hasher._repertoire
    # in a batch of 2, each string is an item
    batched = hasher(TensorDict({"text": NonTensorStack("a", "b")}, [2]))["hash"]
    assert torch.equal(batched[1], Hash.reproducible_hash("b"))


def test_hash_default_on_a_batched_env_of_strings():
    def make():
        return TransformedEnv(
            CountingEnv(), UnaryTransform(["observation"], ["text"], fn=lambda x: str(x.tolist()))
        )

    env = TransformedEnv(SerialEnv(2, make), Hash(["text"], ["hash"]))
    try:
        assert env.observation_spec["hash"].shape == (2, 32)
        check_env_specs(env)
        td = env.reset()
        assert torch.equal(td["hash"][1], Hash.reproducible_hash(td["text"][1]))
    finally:
        env.close()


def test_hash_custom_fn_receives_the_whole_entry():
    seen = []

    def per_item(items):
        seen.append(items)
        return torch.stack([Hash.reproducible_hash(item) for item in items])

    hasher = Hash(["text"], ["hash"], hash_fn=per_item)
    out = hasher(TensorDict({"text": NonTensorStack("x", "y", "z")}, [3]))
    assert seen == [["x", "y", "z"]] and out["hash"].shape == (3, 32)
    assert "Hash(in_keys=['text']" in repr(hasher)  # no recursion through the bound method


def test_hash_custom_fn_spec():
    env = TransformedEnv(
        CountingEnv(),
        Hash(["observation"], ["h"], hash_fn=lambda x: torch.as_tensor(x).sum(-1, keepdim=True)),
    )
    assert env.observation_spec["h"].shape == (1,)
    check_env_specs(env)
    assert isinstance(env.observation_spec["h"], Unbounded)


def test_hash_tensor_observation_on_gym(pendulum):
    env = TransformedEnv(pendulum, Hash(["observation"], ["h"]))
    check_env_specs(env)
    td = env.reset()
    expected = Hash.reproducible_hash(td["observation"].numpy().tobytes())
    assert torch.equal(td["h"], expected)
