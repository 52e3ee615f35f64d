"""Screenshot comparison (seed 000's ``screenshot_comparison_workers``): did an action change
the page at all?

For every executed action (click, type, scroll, goback) whose step and next step both have a
screenshot, the two images are compared; identical pixels mean the action did nothing visible
(a click on dead text, a scroll at the end of the page). The step gets ``page_unchanged``
True / False, and :func:`noop_rate` is the share of compared actions that changed nothing. The
comparisons run on ``workers`` threads (PNG decoding releases the GIL in zlib).

Example:
    >>> trajs = [{"steps": [{"action": {"type": "click"}, "page_unchanged": True},
    ...                     {"action": {"type": "scroll"}, "page_unchanged": False},
    ...                     {"action": {"type": "answer"}}]}]
    >>> noop_rate(trajs)
    0.5
"""

from __future__ import annotations

import os
import zlib
from concurrent.futures import ThreadPoolExecutor

ACTING = ("click", "type", "scroll", "goback")


def _pixels(path: str) -> bytes:
    """The decompressed image data of a PNG (its IDAT chunks), so two encodings of the same
    pixels compare equal."""
    with open(path, "rb") as f:
        data = f.read()
    pos, idat = 8, []
    while pos + 8 <= len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        kind = data[pos + 4:pos + 8]
        if kind == b"IDAT":
            idat.append(data[pos + 8:pos + 8 + length])
        pos += 12 + length
    return zlib.decompress(b"".join(idat)) if idat else data


def mark_unchanged_steps(trajectories: list[dict], folder: str, workers: int) -> int:
    """Set ``page_unchanged`` on every comparable step of ``trajectories`` (screenshots are
    relative to ``folder``); returns the number of comparisons made."""
    pairs = []
    for traj in trajectories:
        steps = traj.get("steps") or []
        for step, nxt in zip(steps, steps[1:]):
            action = step.get("action") or {}
            if action.get("type") in ACTING and step.get("screenshot") and nxt.get("screenshot") \
                    and "page_unchanged" not in step:
                pairs.append((step, os.path.join(folder, step["screenshot"]), os.path.join(folder, nxt["screenshot"])))
    if not pairs:
        return 0

    def same(pair) -> bool:
        _, a, b = pair
        try:
            return _pixels(a) == _pixels(b)
        except OSError:
            return False

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for (step, _, _), unchanged in zip(pairs, pool.map(same, pairs)):
            step["page_unchanged"] = bool(unchanged)
    return len(pairs)


def noop_rate(trajectories: list[dict]) -> float:
    """Share of compared actions that left the page unchanged (0 when none was compared)."""
    flags = [s["page_unchanged"] for t in trajectories for s in t.get("steps") or () if "page_unchanged" in s]
    return sum(flags) / len(flags) if flags else 0.0
