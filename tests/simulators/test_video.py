"""Episode videos: a playable mp4 with the expected frames, text drawn when asked."""

from __future__ import annotations

import imageio.v2 as imageio
import numpy as np
import pytest

from rlinf.engines.simulators.video import VideoRecorder, draw_text, write_video


def read_frames(path) -> list[np.ndarray]:
    reader = imageio.get_reader(path)
    try:
        return [frame for frame in reader]
    finally:
        reader.close()


def test_recorder_writes_a_playable_mp4_of_tiled_envs(tmp_path):
    rec = VideoRecorder(tmp_path / "video" / "train", fps=10, info_on_video=True)
    rng = np.random.default_rng(0)
    for t in range(12):
        rec.add(rng.integers(0, 255, size=(3, 40, 50, 3), dtype=np.uint8),
                rewards=[0.1 * t] * 3, successes=[False, t > 5, False])
    path = rec.save("step_0")
    assert path == tmp_path / "video" / "train" / "step_0.mp4" and len(rec) == 0
    frames = read_frames(path)
    assert len(frames) == 12
    assert frames[0].shape == (80, 100, 3)  # 3 envs tiled 2 x 2
    with pytest.raises(ValueError, match="no frames"):
        rec.save("empty")


def test_odd_sizes_are_padded_and_text_is_visible(tmp_path):
    frames = [np.full((33, 45, 3), 128, np.uint8)] * 4
    assert read_frames(write_video(tmp_path / "odd.mp4", frames, fps=4))[0].shape == (34, 46, 3)
    plain = np.zeros((64, 64, 3), np.uint8)
    marked = draw_text(plain, ["step 1", "success"])
    assert marked[:12].any() and not marked[40:].any() and not plain.any()
