"""Incremental trajectory saves: checkpoint cadence and file contents, crash + resume without
duplicates, atomic writes (a partial write or a stray temporary file is never read), screenshots,
multi-rank merge and one-line errors."""

from __future__ import annotations

import pytest
import torch

from rlinf.runners.trajectory_store import PNG_MAGIC, TrajectoryStore, load_iteration, trajectory_file


def _traj(i, repeat=0, rank=0):
    return {"task": {"task_id": f"shop-price-{i:04d}", "difficulty": "easy"}, "repeat": repeat,
            "steps": [{"index": 0, "action": {"type": "answer", "text": f"${i}.50"}, "screenshot": None}],
            "answer": f"${i}.50", "status": "answered", "blocked": False, "reward": 1.0, "judge": None,
            "error": None, "seconds": 0.5, "rank": rank, "iteration": 2}


def _saved(folder, iteration=2, rank=0):
    data = TrajectoryStore.load(folder, iteration, rank)
    return None if data is None else [t["task"]["task_id"] for t in data["trajectories"]]


def test_checkpoints_after_each_quarter_with_their_content(tmp_path):
    store = TrajectoryStore(tmp_path, iteration=2, rank=0, total=8, checkpoint_interval=0.25,
                            metadata={"split": "train", "model": "tiny"})
    expected_after = {1: None, 2: 2, 3: 2, 4: 4, 5: 4, 6: 6, 7: 6, 8: 8}
    for n in range(1, 9):
        assert store.add(_traj(n - 1))
        saved = _saved(tmp_path)
        if expected_after[n] is None:
            assert saved is None and not store.path.exists()
        else:
            assert saved == [f"shop-price-{i:04d}" for i in range(expected_after[n])], n
    assert store.writes == 4
    meta = TrajectoryStore.load(tmp_path, 2, 0)["metadata"]
    assert (meta["count"], meta["complete"], meta["total"], meta["split"], meta["rank"]) == (8, False, 8, "train", 0)
    assert store.finish() == tmp_path / "iteration2_rank_0.pt"
    data = TrajectoryStore.load(tmp_path, 2, 0)
    assert data["metadata"]["complete"] is True and data["trajectories"] == [_traj(i) for i in range(8)]


def test_crash_then_resume_without_duplicates(tmp_path):
    first = TrajectoryStore(tmp_path, iteration=2, rank=0, total=8, checkpoint_interval=0.25)
    for i in range(5):
        first.add(_traj(i))
    del first                                           # the process dies: the 5th was never written
    assert _saved(tmp_path) == [f"shop-price-{i:04d}" for i in range(4)]
    again = TrajectoryStore(tmp_path, iteration=2, rank=0, total=8, checkpoint_interval=0.25)
    assert again.resumed == 4 and len(again.trajectories) == 4
    assert again.done_keys() == {(f"shop-price-{i:04d}", 0) for i in range(4)}
    todo = [i for i in range(8) if (f"shop-price-{i:04d}", 0) not in again.done_keys()]
    assert todo == [4, 5, 6, 7]
    for i in todo:
        assert again.add(_traj(i))
    assert not again.add(_traj(0))                      # a key already held is ignored
    again.finish()
    saved = _saved(tmp_path)
    assert saved == [f"shop-price-{i:04d}" for i in range(8)] and len(set(saved)) == 8
    fresh = TrajectoryStore(tmp_path, iteration=2, rank=0, total=8, resume=False)
    assert fresh.done_keys() == set()


def test_repeats_are_distinct_keys(tmp_path):
    store = TrajectoryStore(tmp_path, 0, 0, total=2, checkpoint_interval=1.0)
    assert store.add(_traj(1, repeat=0)) and store.add(_traj(1, repeat=1)) and not store.add(_traj(1, repeat=1))
    assert sorted(TrajectoryStore(tmp_path, 0, 0).done_keys()) == [("shop-price-0001", 0), ("shop-price-0001", 1)]


def test_a_partial_write_leaves_the_previous_file_and_tmp_files_are_never_read(tmp_path, monkeypatch):
    store = TrajectoryStore(tmp_path, iteration=2, rank=0, total=4, checkpoint_interval=0.5)
    store.add(_traj(0))
    store.add(_traj(1))
    real_save = torch.save

    def dying_save(obj, f):
        f.write(b"PK\x03\x04 half a zip")
        raise OSError("No space left on device")

    monkeypatch.setattr(torch, "save", dying_save)
    store.add(_traj(2))
    with pytest.raises(OSError, match="No space left"):
        store.add(_traj(3))
    monkeypatch.setattr(torch, "save", real_save)
    assert _saved(tmp_path) == ["shop-price-0000", "shop-price-0001"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["iteration2_rank_0.pt"]   # no tmp left behind
    (tmp_path / ".iteration2_rank_0.pt.tmp999").write_bytes(b"garbage")
    (tmp_path / "iteration2_rank_0.pt.tmp").write_bytes(b"garbage")
    (tmp_path / "iteration2_rank_1.pt.partial").write_bytes(b"garbage")
    assert _saved(tmp_path) == ["shop-price-0000", "shop-price-0001"]
    assert [t["task"]["task_id"] for t in load_iteration(tmp_path, 2)] == ["shop-price-0000", "shop-price-0001"]


def test_a_damaged_file_is_an_error_naming_it(tmp_path):
    trajectory_file(tmp_path, 4, 0).write_bytes(b"\x00not torch")
    with pytest.raises(ValueError, match=r"iteration4_rank_0\.pt: not a readable trajectory file"):
        TrajectoryStore(tmp_path, 4, 0, total=2)
    torch.save({"something": "else"}, trajectory_file(tmp_path, 5, 0))
    with pytest.raises(ValueError, match=r"iteration5_rank_0\.pt: expected a dict with 'trajectories'"):
        TrajectoryStore.load(tmp_path, 5, 0)


def test_multi_rank_merge(tmp_path):
    for rank, ids in [(10, [7]), (0, [0, 1]), (2, [4, 5])]:
        store = TrajectoryStore(tmp_path, iteration=1, rank=rank, total=len(ids))
        for i in ids:
            store.add(_traj(i, rank=rank))
        store.finish()
    other = TrajectoryStore(tmp_path, iteration=11, rank=0, total=1)
    other.add(_traj(99))
    other.finish()
    merged = load_iteration(tmp_path, 1)
    assert [(t["rank"], t["task"]["task_id"]) for t in merged] == [
        (0, "shop-price-0000"), (0, "shop-price-0001"), (2, "shop-price-0004"), (2, "shop-price-0005"),
        (10, "shop-price-0007")]
    assert load_iteration(tmp_path, 3) == []
    with pytest.raises(FileNotFoundError, match="no such trajectory folder"):
        load_iteration(tmp_path / "missing", 1)


def test_screenshots_next_to_the_file(tmp_path):
    store = TrajectoryStore(tmp_path, iteration=2, rank=1, total=1)
    png = PNG_MAGIC + b"\x00\x00\x00\rIHDR" + bytes(range(40))
    rel = store.save_screenshot(("wiki/Page 1", 0), 3, png)
    assert rel == "iteration2_rank_1_screens/wiki_Page_1_r0_s003.png"
    assert (tmp_path / rel).read_bytes() == png
    assert store.save_screenshot("plain", 12, png) == "iteration2_rank_1_screens/plain_r0_s012.png"
    with pytest.raises(ValueError, match=r"screenshot of 'plain' step 1: expected PNG bytes"):
        store.save_screenshot("plain", 1, b"GIF89a....")


def test_no_checkpoints_without_an_interval_and_bad_input(tmp_path):
    store = TrajectoryStore(tmp_path, 0, 0, total=4, checkpoint_interval=None)
    for i in range(4):
        store.add(_traj(i))
    assert not store.path.exists()
    store.finish()
    assert len(_saved(tmp_path, 0)) == 4
    with pytest.raises(ValueError, match=r"checkpoint_interval: expected a fraction in \(0, 1\].*got 25"):
        TrajectoryStore(tmp_path, 0, 0, total=4, checkpoint_interval=25)
    with pytest.raises(ValueError, match=r"trajectory: expected a dict with task.task_id.*repeat=None"):
        store.add({"task": {"task_id": "x"}})
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ValueError, match="afile: the trajectory folder is a file"):
        TrajectoryStore(tmp_path / "afile", 0, 0)
