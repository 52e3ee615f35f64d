"""One web episode: observe, ask the policy, act, until an answer, the step budget or a stop.

The episode fills the trajectory dict it is given as it goes (docs/web_agent.md, "Data shapes"),
so a caller that has to cancel it (straggler cut-off, task timeout) still holds every step taken.

Failures are recorded, never raised: a start page that cannot be opened is an ``invalid_url``
first action; an unparseable reply is an ``invalid`` action (the page is left as it was and the
episode goes on); an action the page refuses is the step's ``exec_error``; a lost browser
instance or a server that stopped answering ends the episode with a dummy step (``action``
None) and status ``crashed``.

Example (needs a browser server and a policy)::

    traj = new_trajectory(task, repeat=0)
    await run_episode(task, browser, policy, settings, asyncio.Event(), traj)   # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from rlinf.data.web_tasks import resolve_url
from rlinf.engines.web.actions import format_action, parse_action
from rlinf.runners.web_agent.observation import observe
from rlinf.runners.web_agent.prompts import render_prompt, reply_action_text


@dataclass(frozen=True)
class EpisodeSettings:
    """What an episode needs from the config (built by the runner).

    Attributes:
        max_steps: step budget per difficulty (``{train,test}_difficulty_max_steps``).
        mode: ``context_config.interaction_mode``.
        rich_tree: ``env_config.use_rich_actree``.
        prompt_version, model_type: ``model_config``.
        history_length, max_observation_chars: ``context_config``.
        observation: ``context_config.observation`` (``text``, ``screenshot``, ``both``): what
            :func:`~rlinf.runners.web_agent.observation.observe` gives the policy.
        site_base: base URL of the shipped sites (relative start URLs join it; URLs on it are
            shown as paths); None when the sites are not served.
        save_screenshots: take a screenshot at every step (``env_config.save_screenshots``).
        operation_timeout: seconds a navigation may take (``env_config.operation_timeout``).
    """

    max_steps: dict[str, int]
    mode: str = "set_of_marks"
    rich_tree: bool = False
    prompt_version: str = "vanilla"
    model_type: str = "qwen3-instruct"
    history_length: int = 4
    max_observation_chars: int = 6000
    observation: str = "text"
    site_base: str | None = None
    save_screenshots: bool = False
    operation_timeout: float = 120.0
    extra: dict[str, Any] = field(default_factory=dict)


def new_trajectory(task: dict, repeat: int = 0, rank: int = 0, iteration: int = 0) -> dict:
    """An empty trajectory record for ``task``."""
    return {"task": dict(task), "repeat": repeat, "steps": [], "answer": None, "status": "error",
            "blocked": False, "reward": None, "judge": None, "error": None, "seconds": 0.0,
            "rank": rank, "iteration": iteration}


async def run_episode(task: dict, browser, policy, settings: EpisodeSettings, stop: asyncio.Event,
                      traj: dict, save_screenshot: Callable[[int, bytes], Awaitable[str] | str] | None = None) -> dict:
    """Run ``task`` in one browser instance of ``browser`` (a
    :class:`~rlinf.engines.web.client.BrowserClient`) with ``policy`` (``await
    policy.generate(text)`` -> reply with ``text``, ``prompt_ids``, ``response_ids``,
    ``logprobs``; with a screenshot observation ``await policy.generate(text, images=[png])``);
    fills and returns ``traj``. ``stop`` set = end after the current step with status
    ``straggler``. A step's ``observation`` record keeps url, title and text; the screenshot the
    policy saw is what ``save_screenshot`` saves (``screenshot`` holds its path)."""
    # lazy: the browser client imports playwright and httpx (~2.8 s), an optional extra; only a running episode needs it
    from rlinf.engines.web.client import InstanceLost, OperationFailed

    started = time.monotonic()
    budget = settings.max_steps[task["difficulty"]]
    history: list[str] = []
    iid = None
    try:
        iid = await browser.allocate()
        url = resolve_url(task["start_url"], settings.site_base) if settings.site_base else task["start_url"]
        nav = await browser.navigate(iid, url)
        if not nav.get("ok", True):
            traj["steps"].append(_step(0, {"url": url, "title": "", "text": ""}, None, None,
                                       {"type": "invalid_url", "url": url, "error": nav.get("error")}, None, 0.0))
            traj["status"], traj["error"] = "crashed", f"start page {url}: {nav.get('error')}"
            return traj
        for index in range(budget):
            if stop.is_set():
                traj["status"] = "straggler"
                return traj
            t0 = time.monotonic()
            observation = await observe(browser, iid, settings)
            png = observation.pop("screenshot")  # the record keeps url, title, text; the PNG is saved
            shot = None
            if settings.save_screenshots and save_screenshot is not None:
                saved = png if png is not None else await browser.screenshot(
                    iid, marks=settings.mode == "set_of_marks")
                shot = save_screenshot(index, saved)
                if asyncio.iscoroutine(shot):
                    shot = await shot
            prompt = render_prompt(settings.prompt_version, task["instruction"], observation,
                                   history[-settings.history_length:] if settings.history_length else [],
                                   budget - index, mode=settings.mode, site_base=settings.site_base,
                                   max_observation_chars=settings.max_observation_chars, screenshot=png is not None)
            reply = await (policy.generate(prompt) if png is None else policy.generate(prompt, images=[png]))
            action = parse_action(reply_action_text(reply.text, settings.model_type), settings.mode)
            step = _step(index, observation, shot, reply, action.to_dict(), None, 0.0)
            traj["steps"].append(step)
            if action.type == "answer":
                traj["answer"], traj["status"] = action.text, "answered"
                step["seconds"] = time.monotonic() - t0
                return traj
            history.append(format_action(action) if action.type != "invalid" else "invalid")
            if action.type != "invalid":
                result = await browser.execute(iid, action.to_dict())
                if not result.get("ok", True):
                    step["exec_error"] = result.get("error")
            step["seconds"] = time.monotonic() - t0
        traj["status"] = "max_steps"
        return traj
    except (InstanceLost, OperationFailed) as exc:
        traj["steps"].append(_step(len(traj["steps"]), None, None, None, None, str(exc), 0.0))
        traj["status"], traj["error"] = "crashed", str(exc)
        return traj
    finally:
        traj["seconds"] = time.monotonic() - started
        if iid is not None:
            try:
                await browser.release(iid)
            except Exception:  # noqa: BLE001 - the instance may already be gone with its browser
                pass


def _step(index, observation, screenshot, reply, action, exec_error, seconds) -> dict:
    step = {"index": index, "observation": observation, "screenshot": screenshot,
            "response": None if reply is None else reply.text, "action": action,
            "exec_error": exec_error, "seconds": seconds}
    if reply is not None and getattr(reply, "response_ids", None):
        step.update(prompt_ids=list(reply.prompt_ids), response_ids=list(reply.response_ids),
                    logprobs=list(reply.logprobs or []), policy_version=getattr(reply, "policy_version", 0))
    return step
