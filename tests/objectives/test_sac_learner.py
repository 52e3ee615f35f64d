"""SACLearner: SAC, CrossQ and RLPD updates learn a one-step continuous bandit; the actor step
leaves the critic alone; targets follow by Polyak; a resumed learner continues identically."""

from __future__ import annotations

import math

import pytest
import torch

from rlinf.objectives.sac import SACLearner, SACSettings


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """One torch thread: these networks are tiny, and two threads on a loaded 2-core machine spend
    their time waiting on each other (300 bandit updates: 18-75 s with two threads, 1-5.5 s with
    one, the same numbers)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _bandit_batch(g: torch.Generator, n: int = 128) -> dict:
    """One-step episodes: the best action is 0.5 * obs[0]; reward -(a - best)^2; always terminal."""
    obs = torch.rand(n, 2, generator=g) * 2 - 1
    act = torch.rand(n, 1, generator=g) * 2 - 1
    reward = -(act[:, 0] - 0.5 * obs[:, 0]) ** 2
    return {"obs": obs, "action": act, "reward": reward, "next_obs": obs, "terminated": torch.ones(n, dtype=torch.bool),
            "discount": torch.full((n,), 0.9)}


@pytest.mark.slow
@pytest.mark.parametrize("kind", [
    dict(),                                                                     # SAC, twin Q
    dict(q_head_type="crossq", num_q_heads=2),                                  # CrossQ
    dict(q_head_type="layernorm", num_q_heads=4, critic_subsample_size=2, agg_q="mean", backup_entropy=False),  # RLPD
])
def test_each_variant_learns_the_bandit(kind):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    learner = SACLearner(2, 1, SACSettings(hidden_sizes=(32, 32), actor_lr=1e-3, critic_lr=1e-3, alpha_lr=1e-3,
                                           initial_alpha=0.05, **kind), generator=torch.Generator().manual_seed(1))
    probe = torch.linspace(-1, 1, 9)[:, None].repeat(1, 2)

    def error() -> float:   # mean |greedy action - best action| over the probe states
        with torch.no_grad():
            return float((learner.actor(probe, deterministic=True)[0][:, 0] - 0.5 * probe[:, 0]).abs().mean())

    before = error()
    for _ in range(300):
        metrics = learner.update(_bandit_batch(g))
    after = error()
    assert after < 0.12 and after < 0.5 * before
    assert metrics["critic_loss"] < 0.05 and metrics["alpha"] > 0


def test_the_actor_step_leaves_the_critic_and_targets_follow_by_polyak():
    torch.manual_seed(0)
    learner = SACLearner(2, 1, SACSettings(hidden_sizes=(8,), tau=0.5, critic_lr=0.0))
    critic0 = [p.clone() for p in learner.critic.parameters()]
    target0 = [p.clone() for p in learner.target.parameters()]
    learner.update(_bandit_batch(torch.Generator().manual_seed(0), 16))
    assert all(torch.equal(a, b) for a, b in zip(critic0, learner.critic.parameters()))   # lr 0, and no actor leak
    # target <- 0.5 critic + 0.5 target, with target == critic at start: unchanged
    assert all(torch.allclose(a, b) for a, b in zip(target0, learner.target.parameters()))
    with torch.no_grad():
        for p in learner.critic.parameters():
            p.add_(1.0)
    learner.settings = SACSettings(hidden_sizes=(8,), tau=0.5, critic_lr=0.0)
    learner.update(_bandit_batch(torch.Generator().manual_seed(1), 16))
    assert all(torch.allclose(t, a + 0.5) for a, t in zip(target0, learner.target.parameters()))


def test_critic_actor_ratio_updates_the_actor_every_kth_call():
    learner = SACLearner(2, 1, SACSettings(hidden_sizes=(8,), critic_actor_ratio=3))
    g = torch.Generator().manual_seed(0)
    updated = []
    for _ in range(6):
        before = [p.clone() for p in learner.actor.parameters()]
        learner.update(_bandit_batch(g, 8))
        updated.append(any(not torch.equal(a, b) for a, b in zip(before, learner.actor.parameters())))
    assert updated == [False, False, True, False, False, True]


def test_targets_follow_every_kth_critic_step_and_the_critic_has_its_own_widths():
    learner = SACLearner(2, 1, SACSettings(hidden_sizes=(8,), critic_hidden_sizes=(6, 5), target_update_freq=2,
                                           tau=1.0))
    assert [m.out_features for m in learner.critic.heads[0] if isinstance(m, torch.nn.Linear)] == [6, 5, 1]
    g = torch.Generator().manual_seed(0)
    same = []
    for _ in range(4):
        learner.update(_bandit_batch(g, 8))
        same.append(all(torch.equal(a, b) for a, b in zip(learner.critic.parameters(), learner.target.parameters())))
    assert same == [False, True, False, True]  # tau 1: a target update copies the critic


def test_resume_continues_with_the_same_numbers():
    def make():
        return SACLearner(2, 1, SACSettings(hidden_sizes=(8,)), generator=torch.Generator().manual_seed(5))

    a = make()
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        a.update(_bandit_batch(g, 8))
    b = make()
    b.load_state_dict(a.state_dict())
    b.generator.set_state(a.generator.get_state())
    batch = _bandit_batch(g, 8)
    got, want = b.update(batch), a.update(batch)
    # not bit-equal: the first update of a fresh process may take other CPU kernels (seen: actor
    # loss 0.76332 vs 0.76341, a difference of two terms), so 1e-3 relative
    assert got.keys() == want.keys() and all(got[k] == pytest.approx(want[k], rel=1e-3, abs=1e-5) for k in want)
    fresh = make().update(batch)   # a learner that did not resume is far off
    assert abs(fresh["critic_loss"] - want["critic_loss"]) > 1e-3


def test_bad_settings_name_the_key():
    with pytest.raises(ValueError, match="tau"):
        SACLearner(2, 1, SACSettings(tau=0.0))
    with pytest.raises(ValueError, match="initial_alpha"):
        SACLearner(2, 1, SACSettings(initial_alpha=0.0))
    with pytest.raises(ValueError, match="critic_actor_ratio"):
        SACLearner(2, 1, SACSettings(critic_actor_ratio=0))
    with pytest.raises(ValueError, match="target_update_freq"):
        SACLearner(2, 1, SACSettings(target_update_freq=0))


def test_gradient_norms_are_skipped_on_request_unless_they_clip():
    """``norms=False`` leaves the unclipped norms out (NaN) and the update itself unchanged;
    with clip_grad set the norm is computed (the clip needs it) and the gradient is clipped."""
    batch = _bandit_batch(torch.Generator().manual_seed(2), 16)

    def make(**kw) -> SACLearner:
        torch.manual_seed(0)
        return SACLearner(2, 1, SACSettings(hidden_sizes=(8,), **kw), generator=torch.Generator().manual_seed(1))

    a, b = make(), make()
    with_norms, without = a.update(batch), b.update(batch, norms=False)
    assert with_norms["critic_grad_norm"] > 0 and with_norms["actor_grad_norm"] > 0
    assert math.isnan(without["critic_grad_norm"]) and math.isnan(without["actor_grad_norm"])
    assert without["critic_loss"] == with_norms["critic_loss"]
    assert all(torch.equal(p, q) for p, q in zip(a.critic.parameters(), b.critic.parameters()))
    clipped = make(clip_grad=1e-6).update(batch, norms=False)
    assert clipped["critic_grad_norm"] == pytest.approx(with_norms["critic_grad_norm"])
