"""Q-head ensembles (default / LayerNorm / CrossQ batch renorm) and the squashed actor."""

from __future__ import annotations

import pytest
import torch

from rlinf.algorithms.sac import squashed_gaussian_logprob
from rlinf.models.embodied.q_heads import BatchRenorm1d, QEnsemble, SquashedGaussianActor


def test_batch_renorm_is_batch_norm_in_warmup_then_corrects_toward_running_stats():
    torch.manual_seed(0)
    x = torch.randn(256, 4) * 3 + 1
    warm = BatchRenorm1d(4, warmup_steps=10)
    ref = torch.nn.BatchNorm1d(4, eps=1e-3, momentum=0.01)
    assert torch.allclose(warm(x), ref(x), atol=1e-5)           # r = 1, d = 0 during warm-up
    assert torch.allclose(warm.running_mean, ref.running_mean, atol=1e-6)
    after = BatchRenorm1d(4, warmup_steps=0)                     # running stats 0 / 1: r, d clip
    y = after(x)
    mean, std = x.mean(0), torch.sqrt(x.var(0, unbiased=False) + 1e-3)
    running_std = torch.sqrt(torch.tensor(1 + 1e-3))
    r = (std / running_std).clamp(1 / 3, 3)
    d = (mean / running_std).clamp(-5, 5)
    assert torch.allclose(y, (x - mean) / std * r + d, atol=1e-5)
    after.eval()                                                 # evaluation: the running statistics
    rm, rv = after.running_mean, after.running_var
    assert torch.allclose(after(x), (x - rm) / torch.sqrt(rv + 1e-3), atol=1e-5)


@pytest.mark.parametrize("head_type", ["default", "layernorm", "crossq"])
def test_ensemble_heads_are_independent(head_type):
    torch.manual_seed(0)
    q = QEnsemble(6, 2, (32, 32), num_heads=4, head_type=head_type)
    obs, act = torch.randn(16, 6), torch.randn(16, 2)
    out = q(obs, act)
    assert out.shape == (4, 16) and len({round(float(v), 5) for v in out.detach()[:, 0]}) == 4
    out[1].sum().backward()
    grads = [sum(p.grad.abs().sum() for p in h.parameters() if p.grad is not None) for h in q.heads]
    assert grads[1] > 0 and grads[0] == grads[2] == grads[3] == 0
    kinds = {type(m).__name__ for m in q.heads[0].modules()}
    assert ("LayerNorm" in kinds) == (head_type == "layernorm")
    assert ("BatchRenorm1d" in kinds) == (head_type == "crossq")


def test_crossq_joint_forward_shares_batch_statistics():
    """Evaluating (s, a) and (s', a') together normalises with the statistics of both halves."""
    torch.manual_seed(0)
    q = QEnsemble(3, 1, (8,), num_heads=1, head_type="crossq")
    s, a = torch.randn(8, 3), torch.randn(8, 1)
    s2, a2 = torch.randn(8, 3) + 5, torch.randn(8, 1)
    joint = q(torch.cat([s, s2]), torch.cat([a, a2]))[:, :8]
    alone = q(s, a)
    assert not torch.allclose(joint, alone)


def test_bad_head_settings_name_the_key():
    with pytest.raises(ValueError, match="q_head_type"):
        QEnsemble(2, 1, head_type="transformer")
    with pytest.raises(ValueError, match="num_q_heads"):
        QEnsemble(2, 1, num_heads=0)


def test_actor_log_prob_is_the_squashed_gaussians_and_actions_fit_the_bounds():
    torch.manual_seed(0)
    low, high = torch.tensor([-0.5, 0.0]), torch.tensor([0.5, 4.0])
    actor = SquashedGaussianActor(4, 2, (16,), low=low, high=high)
    obs = torch.randn(32, 4)
    a, logp = actor(obs, generator=torch.Generator().manual_seed(1))
    assert ((a >= low) & (a <= high)).all()
    squashed = (a - actor.bias) / actor.scale
    mean, log_std = actor.distribution(obs)
    expected = squashed_gaussian_logprob(torch.atanh(squashed.clamp(-1 + 1e-6, 1 - 1e-6)), mean, log_std)
    assert torch.allclose(logp, expected, atol=1e-3)
    assert ((log_std >= -5) & (log_std <= 2)).all()
    greedy, _ = actor(obs, deterministic=True)
    assert torch.allclose(greedy, torch.tanh(mean) * actor.scale + actor.bias)
