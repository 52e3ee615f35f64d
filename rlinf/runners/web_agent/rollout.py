"""One rollout phase of a web run (seed 004's ``rollout.py``, as a function).

``tasks`` are split over the env ranks in proportion to ``env_config.rank_load_weight``; each
rank runs its share with at most its share of ``server_size`` episodes in flight, through its own
client (its share of every ``http_pools`` entry), with the straggler cut-off
(``completion_threshold`` + ``completion_grace_period``) and ``task_timeout_minutes``. Finished
trajectories are saved as they come (``iteration{K}_rank_{r}.pt`` every ``checkpoint_interval``
of the rank's share); a restarted phase loads what was saved and runs only the rest. Then every
trajectory without a verdict is judged.

Example (needs env ranks and a policy)::

    trajs = await run_phase(tasks, envs, policy, settings, limits, folder, iteration=3, token=token)  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, replace

from rlinf.engines.web.client import BrowserClient, split_for_rank
from rlinf.runners.trajectory_store import TrajectoryStore
from rlinf.runners.web_agent.collector import collect
from rlinf.runners.web_agent.episode import EpisodeSettings, new_trajectory, run_episode
from rlinf.runners.web_agent.screens import mark_unchanged_steps
from rlinf.scheduler.errors import SchedulerError


@dataclass(frozen=True)
class PhaseLimits:
    """The env_config limits of a phase (see seed 000 for each key)."""

    server_size: int
    http_pools: dict
    operation_timeout: float
    wait_timeout: float
    max_retries: int
    completion_threshold: float
    completion_grace_period: float
    task_timeout_minutes: float
    checkpoint_interval: float | None  # None: no incremental saves (save_traj_progress false)
    rank_load_weight: tuple[float, ...] = ()
    verbose: bool = False  # a line per finished episode
    screenshot_comparison_workers: int = 0  # > 0: compare consecutive screenshots (page_unchanged)


def split_tasks(tasks: list, weights: list[float]) -> list[list]:
    """Contiguous shares of ``tasks`` in proportion to ``weights`` (largest remainder)."""
    total = sum(weights)
    exact = [len(tasks) * w / total for w in weights]
    counts = [int(x) for x in exact]
    for i in sorted(range(len(weights)), key=lambda i: exact[i] - counts[i], reverse=True)[: len(tasks) - sum(counts)]:
        counts[i] += 1
    out, start = [], 0
    for c in counts:
        out.append(tasks[start:start + c])
        start += c
    return out


def task_key(task: dict) -> tuple[str, int]:
    return (task["task_id"], int(task.get("repeat", 0)))


async def run_phase(tasks: list[dict], envs: list[dict], policy, settings: EpisodeSettings, limits: PhaseLimits,
                    folder: str, iteration: int, judge=None, log=print, token: str | None = None) -> list[dict]:
    """Run ``tasks`` on the env ranks ``envs`` (``[{"browser": url, "site": url}, ...]``, whose
    browser servers take the bearer ``token``); returns every trajectory (loaded or new), judged
    when ``judge`` is given."""
    weights = list(limits.rank_load_weight) or [1.0] * len(envs)
    shares = split_tasks(tasks, weights)
    stores = await asyncio.gather(*(
        _run_rank(rank, shares[rank], envs[rank], policy, settings, limits, folder, iteration, weights, log, token)
        for rank in range(len(envs))))
    trajectories = [t for store in stores for t in store.trajectories]
    if limits.screenshot_comparison_workers > 0:
        await asyncio.to_thread(mark_unchanged_steps, trajectories, folder, limits.screenshot_comparison_workers)
    if judge is not None:
        todo = [t for t in trajectories if t.get("reward") is None]
        if todo:
            verdicts = await asyncio.to_thread(judge.evaluate_many, [(t["task"], t) for t in todo])
            for traj, verdict in zip(todo, verdicts):
                apply_verdict(traj, verdict)
    for store in stores:  # the saved files get the verdicts and comparisons too
        store.finish()
    return trajectories


def apply_verdict(traj: dict, verdict) -> None:
    """Write a judge's :class:`~rlinf.rewards.web_judges.JudgeResult` into the trajectory."""
    traj["reward"] = float(verdict.reward)
    traj["judge"] = {"success": bool(verdict.success), "reason": verdict.reason, "error": verdict.error}
    traj["blocked"] = bool(verdict.blocked)


async def _run_rank(rank, tasks, env, policy, settings, limits, folder, iteration, weights, log,
                    token) -> TrajectoryStore:
    pools, server_size = split_for_rank(limits.http_pools, limits.server_size, weights, rank)
    store = TrajectoryStore(folder, iteration, rank, total=len(tasks), checkpoint_interval=limits.checkpoint_interval)
    done = store.done_keys()
    todo = [t for t in tasks if task_key(t) not in done]
    if store.resumed:
        log(f"[web] {os.path.basename(folder)} iteration {iteration} rank {rank}: {len(tasks) - len(todo)} "
            f"trajectories already saved, {len(todo)} to run")
    if not todo:
        return store
    rank_settings = replace(settings, site_base=env.get("site") or settings.site_base)
    client = BrowserClient(env["browser"], pools, operation_timeout=limits.operation_timeout,
                           wait_timeout=limits.wait_timeout, max_retries=limits.max_retries, token=token)
    partial: dict[int, dict] = {}

    async def run_one(item, stop):
        index, task = item
        traj = partial[index] = new_trajectory(task, task.get("repeat", 0), rank, iteration)
        save = ((lambda step, png: store.save_screenshot(task_key(task), step, png))
                if settings.save_screenshots else None)
        return await run_episode(task, client, policy, rank_settings, stop, traj, save)

    def make_record(item, status, error):
        """An episode that was cancelled keeps the steps it had taken."""
        traj = partial.get(item[0]) or new_trajectory(item[1], item[1].get("repeat", 0), rank, iteration)
        traj["status"], traj["error"] = status, error
        return traj

    def on_finished(item, traj):
        store.add(traj)
        if limits.verbose:
            log(f"[web] rank {rank} {traj['task']['task_id']}#{traj.get('repeat', 0)}: {traj['status']} after "
                f"{len(traj['steps'])} steps, answer {traj.get('answer')!r}"
                + (f", error {traj['error']}" if traj.get("error") else ""))

    try:
        await collect(list(enumerate(todo)), run_one, concurrency=server_size,
                      completion_threshold=limits.completion_threshold,
                      grace_period_s=limits.completion_grace_period,
                      task_timeout_s=limits.task_timeout_minutes * 60.0,
                      on_finished=on_finished, make_record=make_record, fatal=(SchedulerError,))
    finally:
        store.finish()
        await client.aclose()
    return store
