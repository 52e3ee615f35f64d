"""Hand-checked tests for dynamic sampling, overlong penalty and math reward scaling."""

import pytest
import torch

from rlinf.algorithms import dynamic_sampling_filter, overlong_penalty, scale_math_rewards


def test_dynamic_sampling_filter_and_tolerance():
    rewards = torch.tensor([1, 1, 1, 0, 1, 0, 0, 0, 0, 0.5, 0.5, 0.5000001], dtype=torch.float64)
    res = dynamic_sampling_filter(rewards, group_size=3)
    # spreads: 0, 1, 0, 1e-7 (<= atol 1e-6) -> only group 1 kept
    assert res.group_mask.tolist() == [False, True, False, False]
    assert res.sample_indices.tolist() == [3, 4, 5]
    assert res.sample_mask.tolist() == [False] * 3 + [True] * 3 + [False] * 6
    assert res.num_kept_groups == 1
    exact = dynamic_sampling_filter(rewards, group_size=3, atol=0.0)
    assert exact.group_mask.tolist() == [False, True, False, True]
    assert exact.sample_indices.tolist() == [3, 4, 5, 9, 10, 11]
    assert exact.num_kept_groups == 2


def test_dynamic_sampling_filter_int_rewards_and_none_kept():
    res = dynamic_sampling_filter(torch.tensor([1, 1, 0, 0]), group_size=2)
    assert res.num_kept_groups == 0 and res.sample_indices.numel() == 0
    with pytest.raises(ValueError, match="group_size"):
        dynamic_sampling_filter(torch.ones(5), group_size=2)
    with pytest.raises(ValueError, match="atol"):
        dynamic_sampling_filter(torch.ones(4), group_size=2, atol=-1.0)


def test_overlong_penalty_boundaries():
    lengths = torch.tensor([0, 15, 16, 18, 20, 21, 100])
    out = overlong_penalty(lengths, max_length=20, cache_length=5)
    # soft start 20 - 5 = 15: <= 15 -> 0; 16 -> (15 - 16) / 5 = -0.2; 18 -> -0.6; 20 -> -1; > 20 -> -1
    torch.testing.assert_close(out, torch.tensor([0.0, 0.0, -0.2, -0.6, -1.0, -1.0, -1.0]))
    half = overlong_penalty(lengths, 20, 5, penalty_factor=0.5)
    torch.testing.assert_close(half, torch.tensor([0.0, 0.0, -0.1, -0.3, -0.5, -0.5, -0.5]))


def test_overlong_penalty_degenerate_buffers():
    lengths = torch.tensor([0, 1, 10, 11])
    # no buffer: hard -1 only past max_length
    torch.testing.assert_close(overlong_penalty(lengths, 10, 0), torch.tensor([0.0, 0.0, 0.0, -1.0]))
    # buffer = max_length: soft start 0; 1 -> -1/10; 10 -> -1
    torch.testing.assert_close(overlong_penalty(lengths, 10, 10), torch.tensor([0.0, -0.1, -1.0, -1.0]))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"max_length": 0, "cache_length": 0}, "max_length"),
        ({"max_length": 10, "cache_length": 11}, "cache_length"),
        ({"max_length": 10, "cache_length": -1}, "cache_length"),
        ({"max_length": 10, "cache_length": 2, "penalty_factor": -1.0}, "penalty_factor"),
    ],
)
def test_overlong_penalty_invalid(kwargs, match):
    with pytest.raises(ValueError, match=match):
        overlong_penalty(torch.tensor([1]), **kwargs)


def test_scale_math_rewards():
    torch.testing.assert_close(scale_math_rewards([True, False, True], 2.0), torch.tensor([2.0, -2.0, 2.0]))
    torch.testing.assert_close(scale_math_rewards(torch.tensor([1, 0])), torch.tensor([1.0, -1.0]))
    torch.testing.assert_close(scale_math_rewards(torch.tensor([1.0, 0.0]), 0.5), torch.tensor([0.5, -0.5]))
    with pytest.raises(ValueError, match="0/1"):
        scale_math_rewards(torch.tensor([2, 0]))
    with pytest.raises(ValueError, match="reward_scale"):
        scale_math_rewards([True], reward_scale=-1.0)
