"""Held-out success of a web policy, offline: the shipped sites, real Chromium, HF ``generate``.

No Ray and no browser server: one :class:`~rlinf.envs.web_sites.server.SiteServer`, one
in-process :class:`~rlinf.engines.web.browser.BrowserHost`, and the runner's own episode function
(:func:`rlinf.runners.web_agent.episode.run_episode`), so prompts are rendered and replies parsed
exactly as in a training run. Prompts are encoded with
:func:`rlinf.runners.web_agent.policy.chat_ids`. Generation is one prompt per call (no padding,
so greedy results do not depend on which episodes happen to share a batch); several episodes
run at once and their browser work overlaps the model's.

Success is the rule evaluator's verdict (:func:`rlinf.rewards.web_judges.match_answer`, the
demo's reward); ``exact`` also counts answers equal to the reference after normalising
whitespace and case only.

Example (the demo's held-out tasks, 4 sampled episodes each; prints the first replies' counts)::

    python -m toolkits.web_tasks.evaluate --model results/tiny_web/warm --family shop_category \
        --tasks examples/web_agent/data/test_shop_category.jsonl --temperature 1 --repeats 4
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from rlinf.runners.web_agent.episode import EpisodeSettings, new_trajectory, run_episode
from rlinf.runners.web_agent.policy import BatchingPolicy, Reply, chat_ids

#: the config of the tiny CPU demo, whose episode settings the demonstrations and checks use
TINY_CONFIG = "web_agent_tiny_cpu"
ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = ROOT / "examples" / "web_agent" / "config"
TEST_TASKS = ROOT / "examples" / "web_agent" / "data" / "test.jsonl"
TRAIN_TASKS = ROOT / "examples" / "web_agent" / "data" / "train.jsonl"


def tiny_settings(split: str = "train", config_name: str = TINY_CONFIG, **overrides) -> EpisodeSettings:
    """The episode settings a run of ``config_name`` (``examples/web_agent/config``) uses for
    ``split``, built by the runner's own :func:`rlinf.runners.web_agent.build.episode_settings`;
    ``overrides`` replace fields. Screenshots are never taken here.

    Example:
        >>> s = tiny_settings()
        >>> s.mode, s.max_steps["easy"], s.save_screenshots
        ('set_of_marks', 4, False)
    """
    from hydra import compose, initialize_config_dir

    from rlinf.config.web import WebAgentConfig
    from rlinf.runners.web_agent.build import episode_settings

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        raw = compose(config_name=config_name)
    cfg = WebAgentConfig.from_hydra(raw, check_paths=False)
    return replace(episode_settings(cfg, split), save_screenshots=False, **overrides)


def normalise_ws(text) -> str:
    """Whitespace-collapsed, case-folded text (``None`` -> empty).

    Example:
        >>> normalise_ws("  $12.50 ") == normalise_ws("$12.50")
        True
    """
    return " ".join(str(text or "").split()).casefold()


def judge(task: dict, answer) -> dict:
    """``{"success", "exact"}`` of an answer to ``task``.

    Example:
        >>> judge({"reference_answer": "$12.50", "answer_type": "exact"}, "$12.5")
        {'success': True, 'exact': False}
    """
    from rlinf.rewards.web_judges import match_answer

    reference = task["reference_answer"]
    refs = reference if isinstance(reference, list) else [reference]
    blank = answer is None or not str(answer).strip()
    success = not blank and any(match_answer(str(answer), str(r), task.get("answer_type", "exact")) for r in refs)
    return {"success": bool(success), "exact": not blank and any(normalise_ws(answer) == normalise_ws(r) for r in refs)}


def select_tasks(path: str | Path, family: str | None = None, limit: int = 0) -> list[dict]:
    """Tasks of ``path`` (validated by ``load_tasks``), of one ``family`` (None: all), first ``limit``."""
    from rlinf.data.web_tasks import load_tasks

    tasks = [t for t in load_tasks(str(path)) if family is None or t.get("family") == family]
    if not tasks:
        raise ValueError(f"{path}: no tasks of family {family!r}")
    return tasks[:limit] if limit else tasks


class Web:
    """The sites and one browser, started together (see :func:`open_web`); ``browser`` has the
    operations :func:`run_episode` calls."""

    def __init__(self, sites, host, base_url: str, timeout_s: float = 30.0):
        self.sites, self.host, self.base_url, self.timeout_s = sites, host, base_url, timeout_s

    async def allocate(self) -> str:
        return await self.host.allocate(timeout_s=self.timeout_s)

    async def release(self, iid: str) -> None:
        await self.host.release(iid, timeout_s=self.timeout_s)

    async def navigate(self, iid: str, url: str) -> dict:
        return await self.host.navigate(iid, url, timeout_s=self.timeout_s)

    async def page_metadata(self, iid: str) -> dict:
        return await self.host.page_metadata(iid, timeout_s=self.timeout_s)

    async def ac_tree(self, iid: str, mode: str = "set_of_marks", rich: bool = False) -> dict:
        return await self.host.ac_tree(iid, mode=mode, rich=rich, timeout_s=self.timeout_s)

    async def screenshot(self, iid: str, marks: bool = False) -> bytes:
        return await self.host.screenshot(iid, marks=marks, timeout_s=self.timeout_s)

    async def execute(self, iid: str, action: dict) -> dict:
        return await self.host.execute(iid, action, timeout_s=self.timeout_s)


@asynccontextmanager
async def open_web(site_seed: int = 0, executable_path: str | None = None,
                   timeout_s: float = 30.0) -> AsyncIterator[Web]:
    """Start the shipped sites and headless Chromium; stop both on exit. Every browser operation
    is bounded by ``timeout_s``.

    Example (needs Chromium)::

        async with open_web() as web:                     # doctest: +SKIP
            iid = await web.allocate()
    """
    from rlinf.engines.web.browser import BrowserHost
    from rlinf.envs.web_sites.server import SiteServer

    sites = SiteServer(seed=site_seed)
    base = sites.start()
    host = BrowserHost(executable_path=executable_path, origin_tokens={base: sites.token})
    try:
        await host.start()
        yield Web(sites, host, base, timeout_s)
    finally:
        try:
            await host.close()
        finally:
            sites.stop()


@dataclass
class LocalBackend:
    """HF ``generate`` on one prompt at a time for :class:`BatchingPolicy` (greedy when
    ``temperature`` is 0; sampled replies are seeded from ``seed`` and the prompt)."""

    model: object
    tokenizer: object
    temperature: float = 0.0
    max_new_tokens: int = 24
    seed: int = 0
    max_batch: int = 1

    def __post_init__(self):
        self._seen: dict[str, int] = {}
        self.calls = 0
        self.seconds = 0.0

    def reply(self, text: str) -> Reply:
        """One reply (synchronous)."""
        ids = chat_ids(self.tokenizer, text)
        sample = self.temperature > 0
        if sample:
            count = self._seen.get(text, 0)
            self._seen[text] = count + 1
            digest = hashlib.sha256(f"{self.seed}:{count}:{text}".encode()).digest()
            torch.manual_seed(int.from_bytes(digest[:8], "little") & 0x7FFFFFFF)
        started = time.perf_counter()
        with torch.no_grad():
            out = self.model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                      do_sample=sample, temperature=self.temperature if sample else None,
                                      top_k=0 if sample else None, top_p=1.0 if sample else None,
                                      max_new_tokens=self.max_new_tokens, eos_token_id=self.tokenizer.eos_token_id,
                                      pad_token_id=self.tokenizer.pad_token_id)
        self.seconds += time.perf_counter() - started
        self.calls += 1
        response = out[0, len(ids):].tolist()
        return Reply(text=self.tokenizer.decode(response, skip_special_tokens=True), prompt_ids=ids,
                     response_ids=response)

    async def generate_batch(self, texts: list[str]) -> list[Reply]:
        return [await asyncio.to_thread(self.reply, t) for t in texts]


async def run_tasks(web: Web, tasks: list[dict], episode_for, settings: EpisodeSettings,
                    concurrency: int = 4) -> list[dict]:
    """Run every task once, at most ``concurrency`` at a time. ``episode_for(task, repeat) ->
    (browser, policy)`` gives the browser view and the policy of one episode (``repeat`` from the
    task, default 0). Returns the trajectories in task order, each with :func:`judge`'s verdict."""
    settings = replace(settings, site_base=web.base_url)
    slots = asyncio.Semaphore(concurrency)

    async def one(task: dict) -> dict:
        async with slots:
            traj = new_trajectory(task, task.get("repeat", 0))
            browser, policy = episode_for(task, task.get("repeat", 0))
            try:
                await run_episode(task, browser, policy, settings, asyncio.Event(), traj)
            except Exception as exc:  # noqa: BLE001 - a lost browser instance ends this episode only
                traj["status"], traj["error"] = "crashed", (f"{type(exc).__name__}: "
                                                            f"{str(exc).splitlines()[0] if str(exc) else ''}")
            verdict = judge(task, traj["answer"])
            traj["reward"] = float(verdict["success"])
            traj["judge"] = verdict
            return traj

    return list(await asyncio.gather(*(one(t) for t in tasks)))


def summarise(trajectories: list[dict]) -> dict:
    """Success rate, exact rate, mean steps, invalid-action rate and status counts.

    Example:
        >>> summarise([{"judge": {"success": True, "exact": True}, "status": "answered",
        ...             "steps": [{"action": {"type": "answer"}}]}])["success_rate"]
        1.0
    """
    n = max(len(trajectories), 1)
    steps = [s for t in trajectories for s in t["steps"]]
    statuses: dict[str, int] = {}
    for t in trajectories:
        statuses[t["status"]] = statuses.get(t["status"], 0) + 1
    return {"tasks": len(trajectories),
            "success_rate": sum(t["judge"]["success"] for t in trajectories) / n,
            "exact_rate": sum(t["judge"]["exact"] for t in trajectories) / n,
            "avg_steps": len(steps) / n,
            "invalid_action_rate": (sum((s.get("action") or {}).get("type") == "invalid" for s in steps)
                                    / max(len(steps), 1)),
            "statuses": statuses}


async def evaluate_model(model_dir: str | Path, tasks: list[dict], *, temperature: float = 0.0, seed: int = 0,
                         concurrency: int = 4, settings: EpisodeSettings | None = None,
                         max_new_tokens: int = 24, site_seed: int = 0) -> dict:
    """Run the model in ``model_dir`` on ``tasks``; returns :func:`summarise`'s dict plus
    ``trajectories``, ``seconds`` and ``generate_seconds``."""
    from transformers import AutoModelForCausalLM

    from rlinf.data.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
    backend = LocalBackend(model, tokenizer, temperature, max_new_tokens, seed)
    policy = BatchingPolicy(backend, max_in_flight=1, gather_s=0.0)
    started = time.perf_counter()
    try:
        async with open_web(site_seed) as web:
            trajectories = await run_tasks(web, tasks, lambda task, repeat: (web, policy),
                                           settings or tiny_settings(), concurrency)
    finally:
        policy.close()
    out = summarise(trajectories)
    out.update(trajectories=trajectories, seconds=time.perf_counter() - started, generate_seconds=backend.seconds)
    return out


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    p = argparse.ArgumentParser(description="Success of a web policy on held-out tasks (real browser).")
    p.add_argument("--model", required=True, help="HF model folder")
    p.add_argument("--tasks", default=str(TEST_TASKS))
    p.add_argument("--family", default="shop_price", help="task family ('all' for every family)")
    p.add_argument("--limit", type=int, default=0)
    p.add_argument("--repeats", type=int, default=1, help="episodes per task (sampled replies differ)")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--show", type=int, default=3, help="print this many trajectories")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    tasks = [dict(t, repeat=r) for t in select_tasks(a.tasks, None if a.family == "all" else a.family, a.limit)
             for r in range(a.repeats)]
    res = asyncio.run(evaluate_model(a.model, tasks, temperature=a.temperature, seed=a.seed))
    for traj in res["trajectories"][: a.show]:
        acts = " | ".join(str(s.get("response")) for s in traj["steps"])
        print(f"  {traj['task']['task_id']}: {acts} -> {traj['answer']!r} (ref {traj['task']['reference_answer']!r})")
    firsts = Counter(str(t["steps"][0].get("response")) if t["steps"] else "-" for t in res["trajectories"])
    print("first replies:", ", ".join(f"{text!r} x{n}" for text, n in firsts.most_common(6)))
    print(json.dumps({k: v for k, v in res.items() if k != "trajectories"}))


if __name__ == "__main__":
    main()
