"""The replay buffer's ring order, sampling, mixed batches, n-step folding and save / resume."""

from __future__ import annotations

import pytest
import torch

from rlinf.data.replay_buffer import NStepAccumulator, ReplayBuffer, sample_mixed, transition_spec


def _rows(start: int, n: int) -> dict:
    ids = torch.arange(start, start + n, dtype=torch.float32)
    return {"obs": ids[:, None].repeat(1, 3), "action": ids[:, None], "reward": ids,
            "next_obs": ids[:, None].repeat(1, 3) + 1, "terminated": ids % 2 == 0, "discount": torch.full((n,), 0.9)}


def test_ring_overwrites_the_oldest_and_keeps_order():
    buf = ReplayBuffer(5, transition_spec(3, 1))
    buf.add(_rows(0, 3))
    buf.add(_rows(3, 4))                   # 7 rows into 5: 0 and 1 are gone
    assert len(buf) == 5 and buf.added == 7
    assert buf.state_dict()["rows"]["reward"].tolist() == [2, 3, 4, 5, 6]   # oldest first
    buf.add(_rows(10, 9))                  # more than capacity at once: the last 5
    assert buf.state_dict()["rows"]["reward"].tolist() == [14, 15, 16, 17, 18]
    assert buf.memory_bytes == 5 * (3 + 1 + 1 + 3) * 4 + 5 * 1 + 5 * 4


def test_sampling_is_uniform_over_what_is_held_or_the_window():
    buf = ReplayBuffer(100, transition_spec(3, 1))
    buf.add(_rows(0, 10))
    g = torch.Generator().manual_seed(0)
    draws = torch.cat([buf.sample(256, g)["reward"] for _ in range(40)])
    counts = torch.bincount(draws.long(), minlength=10).float()
    assert set(draws.long().tolist()) == set(range(10))
    assert (counts / counts.sum() - 0.1).abs().max() < 0.02
    windowed = ReplayBuffer(100, transition_spec(3, 1), sample_window=3)
    windowed.add(_rows(0, 10))
    assert set(windowed.sample(500, g)["reward"].long().tolist()) == {7, 8, 9}
    batch = buf.sample(4, g)   # fields stay aligned row by row
    assert torch.equal(batch["obs"][:, 0], batch["reward"])
    assert torch.equal(batch["next_obs"][:, 0], batch["reward"] + 1)
    with pytest.raises(ValueError, match="empty"):
        ReplayBuffer(4, transition_spec(3, 1)).sample(1)


def test_mixed_batches_take_half_from_the_demos():
    online, demos = ReplayBuffer(50, transition_spec(3, 1)), ReplayBuffer(50, transition_spec(3, 1))
    online.add(_rows(0, 10))
    demos.add(_rows(100, 10))
    batch = sample_mixed(online, demos, 8, 0.5, torch.Generator().manual_seed(1))
    assert (batch["reward"][:4] >= 100).all() and (batch["reward"][4:] < 100).all()
    assert (sample_mixed(online, None, 8)["reward"] < 100).all()


def _step(rewards, terminated, truncated):
    n = len(rewards)
    return {"obs": torch.zeros(n, 1), "action": torch.zeros(n, 1), "reward": torch.tensor(rewards),
            "next_obs": torch.tensor(rewards)[:, None], "terminated": torch.tensor(terminated),
            "truncated": torch.tensor(truncated)}


def test_n_step_folds_rewards_and_flushes_at_episode_ends():
    acc = NStepAccumulator(n=3, gamma=0.5)
    # env 0: r = 1, 2, 4 (no end) -> one 3-step transition 1 + 1 + 1 = 3, discount 1/8
    # env 1: r = 8, then terminated at 16 -> 2-step 8 + 8 = 16 (terminated) and 1-step 16 (terminated)
    assert acc.push(_step([1.0, 8.0], [False, False], [False, False])) is None
    out = acc.push(_step([2.0, 16.0], [False, True], [False, False]))
    assert out["reward"].tolist() == [16.0, 16.0] and out["discount"].tolist() == [0.25, 0.5]
    assert out["terminated"].tolist() == [True, True] and out["next_obs"][:, 0].tolist() == [16.0, 16.0]
    out = acc.push(_step([4.0, 1.0], [False, False], [False, True]))   # env 1's new episode truncates at once
    assert out["reward"].tolist() == [3.0, 1.0] and out["discount"].tolist() == [0.125, 0.5]
    assert out["terminated"].tolist() == [False, False]   # truncation: the target still bootstraps


def test_save_and_resume_give_the_same_rows_and_damage_is_named(tmp_path):
    buf = ReplayBuffer(6, transition_spec(3, 1))
    buf.add(_rows(0, 8))
    path = buf.save(tmp_path / "buffer.pt")
    assert not list(tmp_path.glob(".*tmp*"))   # the temporary file was renamed
    back = ReplayBuffer(6, transition_spec(3, 1))
    back.load(path)
    assert back.added == 8 and torch.equal(back.state_dict()["rows"]["reward"], buf.state_dict()["rows"]["reward"])
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(back.sample(16, g1)["reward"], buf.sample(16, g2)["reward"])
    smaller = ReplayBuffer(4, transition_spec(3, 1))
    smaller.load(path)                      # a smaller capacity keeps the newest rows
    assert smaller.state_dict()["rows"]["reward"].tolist() == [4, 5, 6, 7]
    (tmp_path / "bad.pt").write_bytes(path.read_bytes()[:100])
    with pytest.raises(ValueError, match="bad.pt: not a readable replay buffer"):
        back.load(tmp_path / "bad.pt")
    with pytest.raises(ValueError, match="not a readable replay buffer"):
        ReplayBuffer(6, transition_spec(4, 1)).load(path)   # another observation size
