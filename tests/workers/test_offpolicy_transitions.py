"""Off-policy transitions are exact across auto-resets: the env side reports the observation each
episode ended in (``final_states``), and the rollout side makes ``(s, a, r, s', terminated)``
from it, with n-step folding, without Ray."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from rlinf.config.env import EnvConfig
from rlinf.engines.simulators import make_vector_env
from rlinf.workers.env.env_worker import _ChunkRun
from rlinf.workers.env.messages import EpisodeStats, ObsMessage
from rlinf.workers.rollout.offpolicy_rollout import OffPolicyRolloutWorker


def _chunk(env, actions) -> ObsMessage:
    run = _ChunkRun(env, 0, 1, None, EpisodeStats(), None)
    run.start(actions)
    return run.finish()


def test_final_states_hold_where_each_episode_ended_not_the_next_episodes_start():
    cfg = dict(env_type="toy", max_episode_steps=3)
    resetting = make_vector_env(EnvConfig(**cfg, auto_reset=True), num_envs=3)
    plain = make_vector_env(EnvConfig(**cfg, auto_reset=False), num_envs=3)  # the same episodes, no reset
    try:
        resetting.reset(seed=7)
        plain.reset(seed=7)
        for t in range(3):
            actions = torch.full((3, 1, 2), 0.3 * (t + 1))
            msg = _chunk(resetting, actions)
            ended = plain.step(actions[:, 0])
            if t < 2:
                assert not bool(msg.dones.any()) and msg.final_states is None
        assert bool(msg.dones.all()) and not bool(msg.terminations.any())  # the time limit cut all three
        assert torch.allclose(msg.final_states, ended.obs.states)          # where they ended ...
        assert not torch.allclose(msg.obs.states, ended.obs.states)        # ... not the new episodes' start
    finally:
        resetting.close()
        plain.close()


def _worker(n_step: int, gamma: float = 0.5):
    return SimpleNamespace(n_step=n_step, gamma=gamma, _folds={})


def _msg(states, rewards, dones, terminations, final_states=None) -> ObsMessage:
    from rlinf.engines.simulators.base import EnvObs

    return ObsMessage(obs=EnvObs(states=torch.tensor(states, dtype=torch.float32)),
                      rewards=torch.tensor(rewards, dtype=torch.float32).unsqueeze(1),
                      dones=torch.tensor(dones), terminations=torch.tensor(terminations),
                      final_states=None if final_states is None else torch.tensor(final_states, dtype=torch.float32))


def test_transitions_take_s_prime_from_the_final_states_where_an_episode_ended():
    w = _worker(1, gamma=0.9)
    acted = (torch.tensor([[0.0], [1.0]]), torch.tensor([[0.5], [-0.5]]), 3)
    # env 0 goes on; env 1's episode ended (terminated) in state 9 and was reset to state 5
    msg = _msg([[2.0], [5.0]], [0.1, 1.0], [False, True], [False, True], final_states=[[2.0], [9.0]])
    rows = OffPolicyRolloutWorker._transitions(w, (0, 0), acted, msg, msg.obs.states)
    assert rows["next_obs"].tolist() == [[2.0], [9.0]]
    assert rows["obs"].tolist() == [[0.0], [1.0]] and rows["action"].tolist() == [[0.5], [-0.5]]
    assert rows["terminated"].tolist() == [False, True] and torch.allclose(rows["discount"], torch.tensor([0.9, 0.9]))
    assert torch.allclose(rows["reward"], torch.tensor([0.1, 1.0]))


def test_n_step_folding_stops_at_a_time_limit_cut_which_still_bootstraps():
    w = _worker(2, gamma=0.5)
    s = lambda v: torch.tensor([[v]])  # noqa: E731 - one env
    a = torch.zeros(1, 1)
    assert OffPolicyRolloutWorker._transitions(w, (0, 0), (s(0.0), a, 1), _msg([[1.0]], [1.0], [False], [False]),
                                               s(1.0)) is None
    rows = OffPolicyRolloutWorker._transitions(w, (0, 0), (s(1.0), a, 1),
                                               _msg([[0.0]], [2.0], [True], [False], final_states=[[7.0]]), s(0.0))
    # s0 -> (1 + 0.5 * 2, gamma^2, s'=7); s1 -> (2, gamma, s'=7); the cut is not a termination
    assert rows["obs"].flatten().tolist() == [0.0, 1.0] and rows["next_obs"].flatten().tolist() == [7.0, 7.0]
    assert rows["reward"].tolist() == [2.0, 2.0] and rows["discount"].tolist() == [0.25, 0.5]
    assert rows["terminated"].tolist() == [False, False]
