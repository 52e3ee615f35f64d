"""Screenshot observations on real Chromium and a shipped site page (one browser for the module):
the marks drawn on the screenshot sit on the elements' bounding boxes in the page and carry the
text tree's ``[n]``; coordinates mode gives the plain screenshot; an episode with
``observation: screenshot`` hands the policy the marked PNG and no tree. Skips without
Playwright or a Chromium binary (scripts/setup_system_browser.sh)."""

from __future__ import annotations

import asyncio
import io
import re
from dataclasses import replace

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("playwright.async_api", reason="playwright is not installed (scripts/setup_system_browser.sh)")

from rlinf.engines.web.browser import BrowserHost, BrowserStartError, find_chromium

try:
    CHROMIUM = find_chromium()
except BrowserStartError as err:
    pytest.skip(str(err), allow_module_level=True)

from rlinf.engines.web.mark_image import draw_marks
from rlinf.envs.web_sites import SiteServer
from rlinf.runners.web_agent.episode import EpisodeSettings, new_trajectory, run_episode
from rlinf.runners.web_agent.observation import observe
from rlinf.runners.web_agent.policy import Reply


@pytest.fixture(scope="module")
def stack():
    with SiteServer(seed=0) as site:
        loop = asyncio.new_event_loop()
        host = BrowserHost(executable_path=CHROMIUM, origin_tokens={site.base_url: site.token})
        loop.run_until_complete(host.start())
        yield host, site, loop
        loop.run_until_complete(host.close())
        loop.close()


def settings(observation: str, mode: str = "set_of_marks") -> EpisodeSettings:
    return EpisodeSettings(max_steps={"easy": 2, "medium": 2, "hard": 2}, mode=mode, observation=observation,
                           prompt_version="vanilla")


def rgb(png: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(png)) as image:
        return np.asarray(image.convert("RGB"))


def test_marks_on_the_screenshot_sit_on_the_page_elements(stack):
    host, site, loop = stack

    async def body():
        iid = await host.allocate()
        try:
            await host.navigate(iid, site.base_url + "/shop/", timeout_s=10)
            tree = await host.ac_tree(iid, "set_of_marks", False)
            plain = await host.screenshot(iid, marks=False)
            page = host._instances[iid].page  # the test reads the page's own geometry
            boxes = {e["id"]: await page.locator(f'[data-rlinf-mark="{e["id"]}"]').bounding_box()
                     for e in tree["elements"]}
            seen = await observe(host, iid, settings("screenshot"))
            both = await observe(host, iid, settings("both", "coordinates"))
            text = await observe(host, iid, settings("text"))
            return tree, plain, boxes, seen, both, text
        finally:
            await host.release(iid)

    tree, plain, boxes, seen, both, text = loop.run_until_complete(asyncio.wait_for(body(), 60))
    elements = tree["elements"]
    assert len(elements) >= 5
    marks_in_text = [int(n) for n in re.findall(r"^\[(\d+)\]", tree["text"], re.MULTILINE)]
    assert marks_in_text == [e["id"] for e in elements]
    assert seen["text"] == "" and seen["screenshot"][:4] == b"\x89PNG"
    marked, before = rgb(seen["screenshot"]), rgb(plain)
    assert marked.shape == before.shape
    expected, placed = draw_marks(Image.fromarray(before), elements)
    assert np.array_equal(marked, np.asarray(expected))  # observe drew exactly these marks on this page
    assert {p.mark for p in placed} == set(marks_in_text)
    height, width = before.shape[:2]
    for p in placed:
        box = boxes[p.mark]  # where Chromium lays the element out, in screenshot pixels
        x0, y0 = max(0, box["x"]), max(0, box["y"])
        x1, y1 = min(width, box["x"] + box["width"]) - 1, min(height, box["y"] + box["height"]) - 1
        assert all(abs(a - b) <= 1 for a, b in zip(p.frame, (x0, y0, x1, y1))), (p, box)
        fx0, fy0, fx1, fy1 = p.frame
        ring = [(fy0 + 1, x) for x in range(fx0 + 1, fx1)] + [(y, fx0 + 1) for y in range(fy0 + 1, fy1)]
        changed = sum(bool((marked[y, x] != before[y, x]).any()) for y, x in ring)
        assert changed >= 0.9 * len(ring), p
    # coordinates mode: the tree with centres, and the screenshot without marks
    assert "@(" in both["text"] and "[1]" not in both["text"]
    assert np.array_equal(rgb(both["screenshot"]), before)
    assert text["screenshot"] is None and text["text"] == tree["text"]


class SeeingPolicy:
    """Records what it is given; answers at once."""

    def __init__(self):
        self.calls = []

    async def generate(self, text, images=None):
        self.calls.append((text, images))
        return Reply(text='answer "done"')


def test_a_screenshot_episode_gives_the_policy_the_marked_png(stack):
    host, site, loop = stack
    policy, saved = SeeingPolicy(), {}
    task = {"task_id": "t", "instruction": "Say done", "start_url": site.base_url + "/shop/", "difficulty": "easy"}
    traj = new_trajectory(task)
    loop.run_until_complete(asyncio.wait_for(
        run_episode(task, host, policy, replace(settings("screenshot"), save_screenshots=True), asyncio.Event(), traj,
                    save_screenshot=lambda index, png: saved.setdefault(index, png) and f"shot_{index}.png"), 60))
    assert traj["status"] == "answered" and traj["answer"] == "done"
    (prompt, images), = policy.calls
    assert "(the page is shown in the screenshot)" in prompt and not re.search(r"^\[\d+\]", prompt, re.MULTILINE)
    assert len(images) == 1 and images[0] == saved[0]  # the saved screenshot is the one the policy saw
    step = traj["steps"][0]
    assert step["screenshot"] == "shot_0.png" and set(step["observation"]) == {"url", "title", "text"}
    assert step["observation"]["text"] == ""
