"""Episode videos: frames of ``N`` environments tiled into one mp4, optionally with step / reward /
success written on each environment's tile (``env.<split>.video_cfg``).

Uses imageio with its bundled ffmpeg (imageio-ffmpeg) and PIL for text; no OpenCV.

Example:
    >>> import tempfile, imageio.v2 as imageio
    >>> rec = VideoRecorder(tempfile.mkdtemp(), fps=5, info_on_video=True)
    >>> for t in range(6):
    ...     rec.add(np.zeros((2, 32, 48, 3), np.uint8), rewards=[0.0, 1.0], successes=[False, t > 3])
    >>> path = rec.save("episode_0")
    >>> reader = imageio.get_reader(path); n = reader.count_frames(); frame = reader.get_data(0); reader.close()
    >>> n, frame.shape   # 2 tiles of 32 x 48 side by side
    (6, (32, 96, 3))
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["VideoRecorder", "draw_text", "tile_frames", "write_video"]


def draw_text(frame: np.ndarray, lines: Sequence[str]) -> np.ndarray:
    """``frame`` ``[H, W, 3]`` uint8 with ``lines`` written top-left on a dark band (a copy).

    >>> out = draw_text(np.zeros((40, 80, 3), np.uint8), ["step 3", "r 0.50"])
    >>> out.shape, bool(out.any())
    ((40, 80, 3), True)
    """
    # lazy: imageio / Pillow (embodied extra) only when a video is written
    from PIL import Image, ImageDraw, ImageFont

    image = Image.fromarray(np.ascontiguousarray(frame))
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default()
    line_h = 11
    draw.rectangle((0, 0, frame.shape[1], line_h * len(lines) + 2), fill=(0, 0, 0))
    for i, line in enumerate(lines):
        draw.text((2, 1 + i * line_h), line, fill=(255, 255, 255), font=font)
    return np.asarray(image)


def tile_frames(frames: np.ndarray, cols: int | None = None) -> np.ndarray:
    """``[N, H, W, 3]`` -> one ``[rows * H, cols * W, 3]`` image (row-major, black padding).

    >>> tile_frames(np.ones((3, 2, 2, 3), np.uint8)).shape
    (4, 4, 3)
    """
    n, h, w, c = frames.shape
    cols = cols or math.ceil(math.sqrt(n))
    rows = math.ceil(n / cols)
    out = np.zeros((rows * h, cols * w, c), dtype=frames.dtype)
    for i in range(n):
        r, k = divmod(i, cols)
        out[r * h:(r + 1) * h, k * w:(k + 1) * w] = frames[i]
    return out


def write_video(path: str | Path, frames: Sequence[np.ndarray], fps: int = 10) -> Path:
    """Write ``[H, W, 3]`` uint8 frames as an H.264 mp4 (odd sizes are padded to even)."""
    # lazy: imageio / Pillow (embodied extra) only when a video is written
    import imageio.v2 as imageio

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with imageio.get_writer(path, fps=fps, codec="libx264", macro_block_size=1,
                            ffmpeg_params=["-pix_fmt", "yuv420p"]) as writer:
        for frame in frames:
            h, w = frame.shape[:2]
            if h % 2 or w % 2:
                frame = np.pad(frame, ((0, h % 2), (0, w % 2), (0, 0)))
            writer.append_data(np.ascontiguousarray(frame, dtype=np.uint8))
    return path


class VideoRecorder:
    """Buffers tiled frames of a batch of environments; :meth:`save` writes them as one mp4.

    Args:
        video_base_dir: folder of the videos.
        fps: frames per second.
        info_on_video: write ``step``, ``reward`` and success on each tile.
    """

    def __init__(self, video_base_dir: str | Path, fps: int = 10, info_on_video: bool = True):
        self.video_base_dir = Path(video_base_dir)
        self.fps = fps
        self.info_on_video = info_on_video
        self._frames: list[np.ndarray] = []

    def add(self, frames: np.ndarray, rewards: Sequence[float] | None = None,
            successes: Sequence[bool] | None = None) -> None:
        """Append one step: ``frames`` ``[N, H, W, 3]`` (e.g. ``VectorEnv.render()``) and, for
        the text, each environment's reward and success at this step."""
        frames = np.asarray(frames)
        if self.info_on_video:
            step = len(self._frames)
            tiles = []
            for i, frame in enumerate(frames):
                lines = [f"step {step}"]
                if rewards is not None:
                    lines.append(f"r {float(rewards[i]):.2f}")
                if successes is not None and bool(successes[i]):
                    lines.append("success")
                tiles.append(draw_text(frame, lines))
            frames = np.stack(tiles)
        self._frames.append(tile_frames(frames))

    def __len__(self) -> int:
        return len(self._frames)

    def save(self, name: str) -> Path:
        """Write ``<video_base_dir>/<name>.mp4`` from the buffered steps and clear the buffer."""
        if not self._frames:
            raise ValueError("no frames to save")
        path = write_video(self.video_base_dir / f"{name}.mp4", self._frames, fps=self.fps)
        self._frames = []
        return path
