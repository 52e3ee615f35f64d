"""Hand-checked tests for GAE, including masked padding at the end and in the middle."""

import math

import pytest
import torch

from rlinf.algorithms import compute_gae_advantages


def close(actual, expected, atol=1e-5):
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


def test_gae_full_mask():
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[1.0, 2.0, 3.0]])
    adv, ret = compute_gae_advantages(rewards, values, torch.ones(1, 3), gamma=0.9, lam=0.8, normalize_advantages=False)
    # t=2: delta = 1 + 0 - 3 = -2; A2 = -2
    # t=1: delta = 0 + 0.9*3 - 2 = 0.7; A1 = 0.7 + 0.72*(-2) = -0.74
    # t=0: delta = 0 + 0.9*2 - 1 = 0.8; A0 = 0.8 + 0.72*(-0.74) = 0.2672
    close(adv, [[0.2672, -0.74, -2.0]])
    close(ret, [[1.2672, 1.26, 1.0]])  # A + V


def test_gae_padding_at_end_is_ignored():
    rewards = torch.tensor([[0.0, 1.0, 50.0]])
    values = torch.tensor([[1.0, 2.0, 99.0]])
    adv, ret = compute_gae_advantages(
        rewards, values, torch.tensor([[1, 1, 0]]), gamma=0.9, lam=0.8, normalize_advantages=False
    )
    # t=1 is the last valid token: delta = 1 + 0 - 2 = -1; A1 = -1
    # t=0: delta = 0 + 0.9*2 - 1 = 0.8; A0 = 0.8 + 0.72*(-1) = 0.08
    close(adv, [[0.08, -1.0, 0.0]])
    close(ret, [[1.08, 1.0, 0.0]])


def test_gae_middle_hole_is_skipped():
    rewards = torch.tensor([[0.0, 50.0, 1.0]])
    values = torch.tensor([[1.0, 99.0, 3.0]])
    adv, ret = compute_gae_advantages(
        rewards, values, torch.tensor([[1, 0, 1]]), gamma=0.9, lam=0.8, normalize_advantages=False
    )
    # t=2: delta = 1 - 3 = -2; A2 = -2
    # t=0 bootstraps from t=2 with one discount step: delta = 0 + 0.9*3 - 1 = 1.7; A0 = 1.7 + 0.72*(-2) = 0.26
    close(adv, [[0.26, 0.0, -2.0]])
    close(ret, [[1.26, 0.0, 1.0]])


def test_gae_lambda_limits():
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[1.0, 2.0, 3.0]])
    mask = torch.ones(1, 3)
    # gamma = lam = 1: Monte-Carlo, A_t = (sum of rewards from t) - V_t = [1-1, 1-2, 1-3]
    adv, _ = compute_gae_advantages(rewards, values, mask, 1.0, 1.0, normalize_advantages=False)
    close(adv, [[0.0, -1.0, -2.0]])
    # lam = 0: TD error, A_t = r_t + gamma V_{t+1} - V_t = [0 + 2 - 1, 0 + 3 - 2, 1 + 0 - 3]
    adv, _ = compute_gae_advantages(rewards, values, mask, 1.0, 0.0, normalize_advantages=False)
    close(adv, [[1.0, 1.0, -2.0]])


def test_gae_whitening_keeps_returns_raw():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    values = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [0, 0, 0]])
    adv, ret = compute_gae_advantages(rewards, values, mask, 0.9, 0.8, normalize_advantages=True, eps=0.0)
    # raw advantages [0.2672, -0.74, -2] (see test_gae_full_mask); mean -2.4728 / 3
    raw = [0.2672, -0.74, -2.0]
    mean = sum(raw) / 3
    std = math.sqrt(sum((a - mean) ** 2 for a in raw) / 2)  # unbiased
    close(adv, [[(a - mean) / std for a in raw], [0.0, 0.0, 0.0]])
    close(ret, [[1.2672, 1.26, 1.0], [0.0, 0.0, 0.0]])


def test_gae_single_token_and_fully_masked_row():
    adv, ret = compute_gae_advantages(
        torch.tensor([[1.0], [5.0]]), torch.tensor([[0.25], [7.0]]), torch.tensor([[1], [0]]),
        normalize_advantages=False,
    )
    # single token: A = 1 - 0.25 = 0.75, return 1; masked row: zeros
    close(adv, [[0.75], [0.0]])
    close(ret, [[1.0], [0.0]])


def test_gae_outputs_are_detached():
    values = torch.tensor([[1.0, 2.0]], requires_grad=True)
    adv, ret = compute_gae_advantages(torch.zeros(1, 2), values, torch.ones(1, 2))
    assert not adv.requires_grad and not ret.requires_grad


@pytest.mark.parametrize(
    "kwargs, match",
    [({"gamma": 1.5}, "gamma"), ({"lam": -0.1}, "lam"), ({"eps": -1.0}, "eps")],
)
def test_gae_invalid_scalars(kwargs, match):
    with pytest.raises(ValueError, match=match):
        compute_gae_advantages(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), **kwargs)


def test_gae_shape_mismatch_names_argument():
    with pytest.raises(ValueError, match="values"):
        compute_gae_advantages(torch.zeros(1, 2), torch.zeros(1, 3), torch.ones(1, 2))
