"""The off-policy actor worker as a plain object: learning starts at min_buffer_size, RLPD
batches mix in demonstrations, a checkpoint resumes the learner and the buffer, a damaged buffer
stops the resume or (by key) starts empty, bad buffer settings name the key."""

from __future__ import annotations

import pytest
import torch

from rlinf.objectives.sac import SACSettings
from rlinf.workers.actor.offpolicy_actor import BufferSettings, OffPolicyActorWorker


def _rows(n: int, seed: int, offset: float = 0.0) -> dict:
    g = torch.Generator().manual_seed(seed)
    obs = torch.rand(n, 3, generator=g)
    return {"obs": obs, "action": torch.rand(n, 1, generator=g) * 2 - 1, "reward": torch.rand(n, generator=g) + offset,
            "next_obs": obs, "terminated": torch.zeros(n, dtype=torch.bool), "discount": torch.full((n,), 0.8)}


def _worker(**buffer) -> OffPolicyActorWorker:
    settings = BufferSettings(**{"capacity": 64, "min_buffer_size": 20, "batch_size": 8, **buffer})
    return OffPolicyActorWorker(3, 1, SACSettings(hidden_sizes=(8,)), settings, seed=3)


def test_updates_start_at_min_buffer_size_and_report_the_buffer():
    w = _worker()
    w.add_transitions(_rows(10, 0))
    skipped = w.update(4)
    assert skipped["actor/updates"] == 0 and skipped["buffer/size"] == 10 and "actor/critic_loss" not in skipped
    w.add_transitions(_rows(10, 1))
    ran = w.update(4)
    assert ran["actor/updates"] == 4 and ran["actor/critic_loss"] > 0 and ran["buffer/memory_mb"] > 0
    # the rollout side's policy takes the weights by name and acts as the learner's actor
    from rlinf.models.embodied.sac_policy import SACActorPolicy

    policy = SACActorPolicy(3, 1, hidden_sizes=(8,))
    policy.load_state_dict(w.policy_state())
    obs = torch.rand(5, 3)
    greedy, _ = w.learner.actor(obs, deterministic=True)
    assert torch.allclose(policy.act(states=obs, deterministic=True).actions[:, 0], greedy.detach())


def test_demonstrations_fill_half_of_each_batch(monkeypatch):
    w = OffPolicyActorWorker(3, 1, SACSettings(hidden_sizes=(8,)), BufferSettings(capacity=64, min_buffer_size=1,
                             batch_size=8), seed=0, demos=_rows(12, 5, offset=100.0))
    w.add_transitions(_rows(12, 6))
    seen = []
    real = w.learner.update
    monkeypatch.setattr(w.learner, "update",
                        lambda batch, **kw: seen.append(batch["reward"].clone()) or real(batch, **kw))
    w.update(3)
    assert all(int((r >= 100).sum()) == 4 for r in seen)


def test_a_checkpoint_resumes_the_learner_and_the_buffer(tmp_path):
    a = _worker()
    a.add_transitions(_rows(30, 0))
    a.update(3)
    a.save_checkpoint(str(tmp_path / "ck"))
    b = _worker()
    b.load_checkpoint(str(tmp_path / "ck"))
    assert len(b.buffer) == 30 and b.updates == 3
    assert torch.equal(b.buffer.state_dict()["rows"]["reward"], a.buffer.state_dict()["rows"]["reward"])
    ma, mb = a.update(2), b.update(2)
    assert all(mb[k] == pytest.approx(ma[k], rel=1e-4) for k in ma)


def test_a_damaged_buffer_stops_the_resume_or_starts_empty_by_key(tmp_path):
    a = _worker()
    a.add_transitions(_rows(30, 0))
    a.save_checkpoint(str(tmp_path / "ck"))
    buffer_file = tmp_path / "ck" / "replay_buffer.pt"
    buffer_file.write_bytes(buffer_file.read_bytes()[:50])
    with pytest.raises(ValueError, match="replay_buffer.pt: not a readable replay buffer.*on_damaged_buffer: empty"):
        _worker().load_checkpoint(str(tmp_path / "ck"))
    empty = _worker(on_damaged_buffer="empty")
    empty.load_checkpoint(str(tmp_path / "ck"))
    assert len(empty.buffer) == 0 and "empty replay buffer" in empty.buffer_note


@pytest.mark.parametrize("settings, key", [
    (dict(capacity=10, min_buffer_size=20), "replay_buffer.min_buffer_size"),
    (dict(batch_size=0), "algorithm.batch_size"),
    (dict(demo_fraction=1.0), "demo_buffer.demo_fraction"),
    (dict(on_damaged_buffer="ignore"), "replay_buffer.on_damaged_buffer"),
])
def test_bad_buffer_settings_name_the_key(settings, key):
    with pytest.raises(ValueError, match=key):
        _worker(**settings)


def _segment(chunk: int, rank: int, n: int) -> dict:
    """One rollout worker's channel item for segment ``chunk`` (rewards name the item)."""
    rows = _rows(n, seed=10 * chunk + rank)
    rows["reward"] = torch.full((n,), float(10 * chunk + rank))
    return {"rows": rows, "versions": torch.zeros(n, dtype=torch.long), "env_steps": n, "chunk": chunk, "rank": rank}


def test_segments_enter_the_buffer_in_order_and_upto_holds_back_later_ones():
    """Two rollout workers' items of segments 0 and 1 arrive mixed up. With ``upto`` (sync mode and
    runner.deterministic) update 0 takes exactly segment 0, rank 0 before rank 1, although segment
    1 is already queued; without it (plain async mode) whatever is queued when the actor looks
    goes in, so what an update learns from depends on timing, the order still by segment and rank."""
    import uuid

    from rlinf.scheduler.local.channel import LocalChannel

    channel = LocalChannel.create(f"offpolicy-order-{uuid.uuid4().hex[:8]}")
    try:
        def worker(queue: str) -> OffPolicyActorWorker:
            for key in ((1, 0), (0, 1), (1, 1), (0, 0)):  # arrival order
                channel.put(_segment(*key, n=2 + key[0] + key[1]), key=queue)
            return OffPolicyActorWorker(3, 1, SACSettings(hidden_sizes=(8,)), BufferSettings(
                capacity=64, min_buffer_size=1, batch_size=4), seed=3, channel=channel, queue=queue,
                rollout_world_size=2)

        def rewards(w: OffPolicyActorWorker) -> list[float]:
            return w.buffer.data["reward"][:len(w.buffer)].tolist()

        lockstep = worker("lockstep")
        metrics = lockstep.train_step(2, upto=0)
        assert metrics["replay/items"] == 2 and rewards(lockstep) == [0.0] * 2 + [1.0] * 3
        assert metrics["replay/received"] == 5 and lockstep.chunks == 1
        assert lockstep.ingest(upto=1) == 2 and lockstep.chunks == 2
        assert rewards(lockstep) == [0.0] * 2 + [1.0] * 3 + [10.0] * 3 + [11.0] * 4

        free = worker("free")
        assert free.train_step(2, min_rows=5)["replay/items"] == 4  # segment 1 came along: it was queued
        assert rewards(free) == rewards(lockstep)
    finally:
        channel.close()
