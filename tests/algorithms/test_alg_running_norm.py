"""Running observation statistics, per-minibatch whitening and the approximate KL (hand-checked)."""

from __future__ import annotations

import math

import torch

from rlinf.algorithms.running_norm import RunningMoments, approx_kl, whiten


def test_merging_batches_gives_the_moments_of_all_rows():
    rm = RunningMoments.create(1, initial_count=0.0)
    rm.update(torch.tensor([[1.0], [3.0]]))        # mean 2, var 1
    rm.update(torch.tensor([[5.0], [7.0], [9.0]]))  # all five rows: mean 5, var 8
    assert rm.count == 5
    assert math.isclose(float(rm.mean), 5.0, abs_tol=1e-12)
    assert math.isclose(float(rm.var), 8.0, abs_tol=1e-12)


def test_the_tiny_prior_count_barely_moves_the_first_batch():
    rm = RunningMoments.create(2)  # count 1e-4 of mean 0 / var 1
    rm.update(torch.tensor([[2.0, -4.0], [4.0, -2.0]]))
    assert torch.allclose(rm.mean, torch.tensor([3.0, -3.0], dtype=torch.float64), atol=1e-3)
    assert torch.allclose(rm.var, torch.tensor([1.0, 1.0], dtype=torch.float64), atol=1e-3)


def test_normalize_centres_scales_and_clips():
    rm = RunningMoments(torch.tensor([1.0, 0.0], dtype=torch.float64), torch.tensor([4.0, 1.0], dtype=torch.float64),
                        10.0)
    out = rm.normalize(torch.tensor([[5.0, 30.0]]), clip=10.0, eps=0.0)
    assert out.tolist() == [[2.0, 10.0]]  # (5 - 1) / 2; 30 clipped
    assert out.dtype == torch.float32


def test_state_dict_round_trip():
    rm = RunningMoments.create(3)
    rm.update(torch.randn(7, 3))
    again = RunningMoments.from_state_dict(rm.state_dict())
    assert torch.equal(again.mean, rm.mean) and torch.equal(again.var, rm.var) and again.count == rm.count


def test_whiten_uses_the_sample_std():
    out = whiten(torch.tensor([1.0, 2.0, 3.0]), eps=0.0)  # mean 2, sample std 1
    assert out.tolist() == [-1.0, 0.0, 1.0]
    assert whiten(torch.tensor([5.0])).tolist() == [0.0]


def test_approx_kl_is_the_k3_estimator():
    # ratios 2 and 0.5: ((2 - 1) - ln 2 + (0.5 - 1) - ln 0.5) / 2 = 0.25
    lp = torch.log(torch.tensor([2.0, 0.5]))
    assert math.isclose(float(approx_kl(lp, torch.zeros(2))), 0.25, rel_tol=1e-6)
    assert float(approx_kl(torch.zeros(3), torch.zeros(3))) == 0.0
