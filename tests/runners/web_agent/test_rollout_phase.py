"""A rollout phase on the real stack, without Ray: the shipped sites, two browser servers (two
"env ranks"), episodes driven by a scripted policy through the batching policy, the rule judge,
incremental saves, resume without redoing saved tasks, the straggler cut-off, malformed replies
and a site that does not answer."""

from __future__ import annotations

import asyncio
import os
import re
import time

import pytest

pytest.importorskip("playwright")
from rlinf.engines.web.browser import find_chromium

try:
    find_chromium(None)
except Exception as exc:  # noqa: BLE001
    pytest.skip(f"no Chromium: {exc}", allow_module_level=True)

from rlinf.data.web_tasks import load_tasks
from rlinf.engines.web.service import start_service_thread
from rlinf.envs.web_sites import SiteServer
from rlinf.rewards.web_judges import RuleEvaluator
from rlinf.runners.trajectory_store import load_iteration
from rlinf.runners.web_agent.episode import EpisodeSettings
from rlinf.runners.web_agent.metrics import rollout_metrics
from rlinf.runners.web_agent.policy import BatchingPolicy, Reply
from rlinf.runners.web_agent.rollout import PhaseLimits, run_phase, split_tasks

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "web_agent", "data", "train.jsonl")


class ScriptedBackend:
    """Reads the prompt like a careful agent: click the product's link (or Next page), answer the
    price on the product page. ``garble`` products get one unparseable reply first."""

    max_batch = 8

    def __init__(self, garble=()):
        self.garble = set(garble)
        self.seen: list[str] = []
        self.garbled: set[str] = set()

    def act(self, prompt: str) -> str:
        product = re.search(r"price of the (.+?)\?", prompt).group(1)
        if product in self.garble and product not in self.garbled:
            self.garbled.add(product)
            return "I am not sure what to do"
        link = re.search(r'\[(\d+)\] link "' + re.escape(product) + '"', prompt)
        if link:
            return f"click [{link.group(1)}]"
        price = re.search(r"Price: (\$[\d.,]+)", prompt)
        if price and f'heading "{product}"' in prompt:
            return f'answer "{price.group(1)}"'
        nxt = re.search(r'\[(\d+)\] link "Next page"', prompt)
        return f"click [{nxt.group(1)}]" if nxt else "goback"

    async def generate_batch(self, texts):
        self.seen.extend(texts)
        return [Reply(text=self.act(t), prompt_ids=[1, 2], response_ids=[3], logprobs=[-0.1]) for t in texts]


TOKEN = "phase-service-token-" + "3" * 32


@pytest.fixture(scope="module")
def stack():
    sites = [SiteServer(seed=0), SiteServer(seed=0)]
    bases = [s.start() for s in sites]
    services = [start_service_thread(server_size=3, operation_timeout=20, wait_timeout=60, token=TOKEN,
                                     origin_tokens={base: site.token}) for site, base in zip(sites, bases)]
    yield [{"browser": url, "site": base} for (url, _), base in zip(services, bases)]
    for _, stop in services:
        stop()
    for s in sites:
        s.stop()


def _settings(**kw):
    return EpisodeSettings(max_steps={"easy": 4, "medium": 6, "hard": 8}, prompt_version="vanilla", **kw)


def _limits(**kw):
    base = dict(server_size=4, http_pools={}, operation_timeout=20, wait_timeout=60, max_retries=1,
                completion_threshold=1.0, completion_grace_period=1.0, task_timeout_minutes=2,
                checkpoint_interval=0.5)
    base.update(kw)
    return PhaseLimits(**base)


def _tasks(n):
    return [dict(t, repeat=0) for t in load_tasks(DATA) if t["family"] == "shop_price"][:n]


def test_split_tasks_by_weight():
    shares = split_tasks(list(range(10)), [1.0, 4.0])
    assert [len(s) for s in shares] == [2, 8] and sum(shares, []) == list(range(10))


@pytest.mark.slow
def test_phase_solves_saves_judges_and_resumes(stack, tmp_path):
    tasks = _tasks(6)
    backend = ScriptedBackend(garble={tasks[0]["instruction"].split("the ")[-1].rstrip("?")})
    policy = BatchingPolicy(backend, max_in_flight=2)
    lines = []
    trajs = asyncio.run(run_phase(tasks, stack, policy, _settings(save_screenshots=True),
                                  _limits(verbose=True, screenshot_comparison_workers=2), str(tmp_path), 0,
                                  judge=RuleEvaluator(), log=lines.append, token=TOKEN))
    assert len([line for line in lines if "answered after" in line]) == 6  # verbose: a line per episode
    clicks = [s for t in trajs for s in t["steps"] if (s["action"] or {}).get("type") == "click"]
    assert clicks and all(s["page_unchanged"] is False for s in clicks)  # every click opened a page
    assert all((tmp_path / s["screenshot"]).is_file() for t in trajs for s in t["steps"])
    assert len(trajs) == 6 and {t["rank"] for t in trajs} == {0, 1}
    assert all(t["status"] == "answered" and t["reward"] == 1.0 for t in trajs), [
        (t["task"]["task_id"], t["status"], t["answer"], t["error"]) for t in trajs]
    garbled = next(t for t in trajs if t["task"]["task_id"] == tasks[0]["task_id"])
    assert garbled["steps"][0]["action"]["type"] == "invalid" and len(garbled["steps"]) == 3
    m = rollout_metrics(trajs)
    assert m["success_rate"] == 1.0 and m["crashed_rate"] == 0.0
    assert m["invalid_action_rate"] == pytest.approx(1 / sum(len(t["steps"]) for t in trajs))
    assert max(policy.batches) > 1  # concurrent episodes shared engine calls
    # the prompt shows the page as a path, never the server's port
    assert all(":" not in re.search(r"Page: .*\((.*)\)", p).group(1) for p in backend.seen)
    saved = load_iteration(str(tmp_path), 0)
    assert sorted(t["task"]["task_id"] for t in saved) == sorted(t["task_id"] for t in tasks)
    assert all(t["reward"] == 1.0 for t in saved)  # verdicts saved too
    # a restarted phase runs nothing again
    _check_report_in_browser(str(tmp_path), expected=6)
    again = ScriptedBackend()
    trajs2 = asyncio.run(run_phase(tasks, stack, BatchingPolicy(again), _settings(), _limits(), str(tmp_path), 0,
                                   judge=RuleEvaluator(), token=TOKEN))
    assert again.seen == [] and len(trajs2) == 6


def _check_report_in_browser(folder, expected):
    """The trajectory viewer's HTML, opened in headless Chromium: one block per episode, every
    screenshot loads (naturalWidth > 0), the actions are shown."""
    from playwright.sync_api import sync_playwright

    from rlinf.runners.trajectory_viewer import write_report

    path = write_report(folder, 0)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=find_chromium(None), headless=True)
        page = browser.new_page()
        page.goto(f"file://{path}")
        assert page.locator("div.episode").count() == expected
        assert page.locator("div.episode.ok").count() == expected  # every episode was rewarded
        widths = page.eval_on_selector_all("img", "imgs => imgs.map(i => i.complete ? i.naturalWidth : 0)")
        assert widths and all(w > 0 for w in widths), widths
        assert "click" in page.locator("div.action").first.inner_text()
        browser.close()


@pytest.mark.slow
def test_stragglers_are_cut_after_the_grace_period_and_kept(stack, tmp_path):
    tasks = _tasks(5) + [dict(_tasks(6)[5], task_id="hung", start_url="/_test/hang")]  # a page that never loads
    started = time.monotonic()
    trajs = asyncio.run(run_phase(tasks, stack[:1], BatchingPolicy(ScriptedBackend(), max_in_flight=2),
                                  _settings(), _limits(completion_threshold=0.8, completion_grace_period=0.5),
                                  str(tmp_path), 1, judge=RuleEvaluator(), token=TOKEN))
    assert time.monotonic() - started < 25
    by_id = {t["task"]["task_id"]: t for t in trajs}
    assert by_id["hung"]["status"] == "straggler" and by_id["hung"]["reward"] == 0.0
    assert sum(t["status"] == "answered" for t in trajs) == 5
    assert len(load_iteration(str(tmp_path), 1)) == 6  # the straggler is saved as such


def test_a_site_that_does_not_answer_is_a_crash_not_a_hang(stack, tmp_path):
    task = dict(_tasks(1)[0], task_id="dead", start_url="http://127.0.0.1:9/shop/", repeat=0)
    started = time.monotonic()
    trajs = asyncio.run(run_phase([task], stack[:1], BatchingPolicy(ScriptedBackend()), _settings(),
                                  _limits(), str(tmp_path), 0, judge=RuleEvaluator(), token=TOKEN))
    assert time.monotonic() - started < 30
    (traj,) = trajs
    assert traj["status"] == "crashed" and traj["steps"][0]["action"]["type"] == "invalid_url"
    assert rollout_metrics(trajs)["crashed_rate"] == 1.0
