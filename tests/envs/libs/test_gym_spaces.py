from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import NonTensorData, TensorDict

from tdrl.data import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    NonTensor,
    OneHot,
    Unbounded,
)
from tdrl.envs.libs._gym_spaces import make_space_codec
from tdrl.envs.libs.gym import gym_space_to_spec, spec_to_gym_space

gymnasium = pytest.importorskip("gymnasium")
spaces = gymnasium.spaces


def test_box_bounded_keeps_dtype_and_bounds():
    space = spaces.Box(low=np.array([-1.0, 0.0]), high=np.array([1.0, 5.0]), dtype=np.float64)
    spec = gym_space_to_spec(space)
    assert isinstance(spec, Bounded)
    assert spec.dtype == torch.float64
    assert spec.shape == torch.Size([2])
    torch.testing.assert_close(spec.low, torch.tensor([-1.0, 0.0], dtype=torch.float64))
    torch.testing.assert_close(spec.high, torch.tensor([1.0, 5.0], dtype=torch.float64))


def test_box_unbounded_and_scalar_shape():
    spec = gym_space_to_spec(spaces.Box(-np.inf, np.inf, shape=(3, 2), dtype=np.float32))
    assert isinstance(spec, Unbounded)
    assert spec.shape == torch.Size([3, 2])
    scalar = gym_space_to_spec(spaces.Box(-1.0, 1.0, shape=(), dtype=np.float32))
    assert scalar.shape == torch.Size([1])


def test_box_integer_dtype_is_bounded():
    spec = gym_space_to_spec(spaces.Box(0, 255, shape=(4, 4, 3), dtype=np.uint8))
    assert isinstance(spec, Bounded)
    assert spec.dtype == torch.uint8
    assert int(spec.high.max()) == 255


def test_discrete_one_hot_by_default_and_categorical_on_request():
    space = spaces.Discrete(4)
    one_hot = gym_space_to_spec(space)
    assert isinstance(one_hot, OneHot)
    assert one_hot.shape == torch.Size([4])
    categorical = gym_space_to_spec(space, categorical_action_encoding=True)
    assert isinstance(categorical, Categorical)
    assert categorical.n == 4
    assert categorical.shape == torch.Size([])


def test_discrete_with_start_round_trips():
    space = spaces.Discrete(3, start=-1)
    codec = make_space_codec(space, categorical_action_encoding=True)
    assert codec.read(np.int64(-1)).item() == 0
    assert codec.write(torch.tensor(2)) == 1
    one_hot = make_space_codec(space)
    assert one_hot.read(1).tolist() == [0, 0, 1]
    assert one_hot.write(torch.tensor([0, 1, 0])) == 0


def test_multi_discrete():
    space = spaces.MultiDiscrete([2, 3])
    spec = gym_space_to_spec(space)
    assert isinstance(spec, MultiOneHot)
    assert spec.shape == torch.Size([5])
    codec = make_space_codec(space)
    encoded = codec.read(np.array([1, 2]))
    assert encoded.tolist() == [0, 1, 0, 0, 1]
    assert codec.write(encoded).tolist() == [1, 2]
    categorical = gym_space_to_spec(space, categorical_action_encoding=True)
    assert isinstance(categorical, MultiCategorical)
    assert categorical.shape == torch.Size([2])


def test_multi_binary():
    spec = gym_space_to_spec(spaces.MultiBinary(5))
    assert isinstance(spec, Binary)
    assert spec.shape == torch.Size([5])
    assert spec.dtype == torch.int8


def test_dict_nested_gives_composite():
    space = spaces.Dict(
        {
            "position": spaces.Box(-1, 1, shape=(2,)),
            "inner": spaces.Dict({"flag": spaces.Discrete(2)}),
        }
    )
    spec = gym_space_to_spec(space, categorical_action_encoding=True)
    assert isinstance(spec, Composite)
    assert isinstance(spec["inner", "flag"], Categorical)
    codec = make_space_codec(space, categorical_action_encoding=True)
    data = codec.read({"position": np.zeros(2, np.float32), "inner": {"flag": 1}})
    assert isinstance(data, TensorDict)
    assert data["inner", "flag"].item() == 1
    assert spec.is_in(data)


def test_tuple_homogeneous_is_stacked_and_mixed_is_composite():
    same = spaces.Tuple((spaces.Box(-1, 1, (3,)), spaces.Box(-1, 1, (3,))))
    spec = gym_space_to_spec(same)
    assert spec.shape == torch.Size([2, 3])
    codec = make_space_codec(same)
    value = codec.read((np.ones(3, np.float32), np.zeros(3, np.float32)))
    assert value.shape == torch.Size([2, 3])
    mixed = spaces.Tuple((spaces.Discrete(2), spaces.Box(-1, 1, (3,))))
    mixed_spec = gym_space_to_spec(mixed, categorical_action_encoding=True)
    assert isinstance(mixed_spec, Composite)
    assert set(mixed_spec.keys()) == {"0", "1"}
    written = make_space_codec(mixed, categorical_action_encoding=True).write(mixed_spec.zero())
    assert isinstance(written, tuple) and len(written) == 2


def test_text_and_sequence_are_non_tensor():
    assert isinstance(gym_space_to_spec(spaces.Text(8)), NonTensor)
    assert isinstance(gym_space_to_spec(spaces.Sequence(spaces.Discrete(3))), NonTensor)
    codec = make_space_codec(spaces.Text(8))
    assert isinstance(codec.read("abc"), NonTensorData)


def test_batched_codec_for_vector_envs():
    codec = make_space_codec(spaces.Discrete(3), batch_size=(2,))
    assert codec.spec.shape == torch.Size([2, 3])
    assert codec.read(np.array([0, 2])).tolist() == [[1, 0, 0], [0, 0, 1]]
    assert codec.write(torch.tensor([[0, 1, 0], [0, 0, 1]])).tolist() == [1, 2]


def test_box_read_shares_memory():
    codec = make_space_codec(spaces.Box(-1, 1, shape=(4,), dtype=np.float32))
    array = np.zeros(4, dtype=np.float32)
    tensor = codec.read(array)
    array[0] = 1.0
    assert tensor[0].item() == 1.0


def test_unsupported_space_raises_type_error():
    class Weird(spaces.Space):
        pass

    with pytest.raises(TypeError, match="unsupported gym space"):
        gym_space_to_spec(Weird())


@pytest.mark.parametrize(
    ("spec", "space_type"),
    [
        (Bounded(-1.0, 1.0, (3,)), "Box"),
        (Unbounded((2,)), "Box"),
        (Categorical(4), "Discrete"),
        (OneHot(4), "Discrete"),
        (MultiOneHot(torch.tensor([2, 3])), "MultiDiscrete"),
        (Binary(3), "MultiBinary"),
        (Composite(a=Unbounded((1,))), "Dict"),
    ],
)
def test_spec_to_space(spec, space_type):
    space = spec_to_gym_space(spec, spaces)
    assert type(space).__name__ == space_type


@pytest.mark.parametrize(
    "space, value",
    [
        (spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32), np.array([0.1, 0.2, 0.3])),
        (spaces.Box(-1.0, 1.0, shape=(), dtype=np.float32), np.float64(0.7)),
        (spaces.Box(0, 9, shape=(2, 2), dtype=np.int64), np.arange(4).reshape(2, 2)),
    ],
)
def test_box_numpy_converters_match_the_tensor_ones(space, value):
    codec = make_space_codec(space, (), False, torch.device("cpu"))
    expected = codec.read(value)
    out = torch.zeros_like(expected)
    codec.read_into(out.numpy(), value)
    assert torch.equal(out, expected)
    action = codec.spec.rand()
    assert np.array_equal(codec.write_numpy(action.numpy()), codec.write(action))


def test_discrete_numpy_writer_matches_the_tensor_one():
    codec = make_space_codec(spaces.Discrete(4, start=2), (), False, torch.device("cpu"))
    action = codec.spec.rand()
    assert codec.write_numpy(action.numpy()) == codec.write(action)
    assert codec.read_into is None
    batched = make_space_codec(spaces.Discrete(4), (2,), False, torch.device("cpu"))
    assert batched.write_numpy is None
