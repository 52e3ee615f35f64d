"""Everything a web-agent run does between a Hydra config and its result, in order.

    config -> typed config + task files + model / browser checks (before Ray)
    -> Ray cluster + placement plan -> env ranks (browser servers, sites) + rollout + actor groups
    -> runner (resume?) -> iterations -> summary

``examples/web_agent/main.py`` is the Hydra wrapper. A config without an ``actor`` placement is a
rollout-only phase (seed 004's ``rollout.py``: one rollout of ``env_config.split``, saved and
judged); with one it is the online loop.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from rlinf.engines.web.browser_errors import BrowserStartError, find_chromium
from rlinf.utils.typed_config import ConfigError


@dataclass
class WebStart:
    cfg: Any
    tasks: dict
    tokenizer: Any
    model_path: str | None
    executable: str
    resume_iteration: int


def find_browser(configured: str | None) -> str:
    """The Chromium binary the browser servers launch (``env_config.browser.executable_path``)."""
    try:
        return find_chromium(configured)
    except BrowserStartError as err:
        raise ConfigError("env_config.browser.executable_path", str(err)) from None


def prepare_web(raw: Any) -> WebStart:
    """All checks of a web run before Ray; raises :class:`ConfigError` naming the key."""
    from rlinf.config.web import WebAgentConfig
    from rlinf.data.tokenizer import load_tokenizer
    from rlinf.engines.web.tasks import load_tasks
    from rlinf.runners.preflight import check_hf_folder
    from rlinf.scheduler.cluster import check_cluster_before_start

    cfg = (WebAgentConfig.from_dict(raw, check_paths=True) if isinstance(raw, dict)
           else WebAgentConfig.from_hydra(raw, check_paths=True))
    tasks = {"train": [], "test": []}
    for split in cfg.needed_splits():
        try:
            tasks[split] = load_tasks(cfg.task_path(split))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"env_config.{split}_tasks", str(exc)) from None
        cfg.check_tasks(tasks[split], split)
    model_path = cfg.policy_config.weights_path
    tokenizer = None
    if not cfg.external_server or cfg.trains:  # our own workers load the folder
        key = "policy_config.checkpoint_path" if cfg.policy_config.checkpoint_path else "policy_config.base_model"
        check_hf_folder(model_path, key, tokenizer=True)
        tokenizer = load_tokenizer(model_path, None)
    elif model_path is not None and os.path.isfile(os.path.join(model_path, "tokenizer_config.json")):
        tokenizer = load_tokenizer(model_path, None)  # an external server: its steps get token ids too
    if cfg.trains and cfg.algorithm_config.backend == "deepspeed":
        check_deepspeed_file(cfg)
    env = cfg.env_config
    executable = find_browser(env.browser.executable_path)
    resume = _resume_iteration(cfg)
    check_cluster_before_start(cfg.cluster)
    return WebStart(cfg, tasks, tokenizer, model_path, executable, resume)


def check_deepspeed_file(cfg) -> None:
    """Resolve the DeepSpeed JSON as the actor will (every key honoured, filled, noted or
    refused), so a bad file stops the run before Ray starts."""
    import torch

    from rlinf.engines.training.deepspeed_config import load_ds_config, resolve_ds_config
    from rlinf.runners.web_agent.groups import actor_section

    a = cfg.algorithm_config
    path = a.deepspeed_path()
    ranks = cfg.plan().component("actor").world_size if cfg.cluster.accelerators_per_node is not None else 1
    try:
        resolve_ds_config(load_ds_config(str(path)), actor_section(cfg, cfg.policy_config.weights_path or ""),
                          world_size=ranks, device_type="cuda" if torch.cuda.is_available() else "cpu",
                          micro_batch_size=a.per_device_train_batch_size,
                          gradient_accumulation_steps=a.gradient_accumulation_steps, source=path.name)
    except ConfigError as exc:
        raise ConfigError("algorithm_config.deepspeed_config_filename", str(exc)) from None


def _resume_iteration(cfg) -> int:
    """The iterations already finished in ``save_path`` (``runner.resume: auto``); a fresh run
    (``resume: null``) refuses a ``save_path`` that already holds saved iterations."""
    import glob

    from rlinf.runners import checkpoint as ckpt

    folder = os.path.join(cfg.save_path, "checkpoints")
    saved = glob.glob(os.path.join(cfg.save_path, "*_trajectories", "iteration*_rank_*.pt"))
    if cfg.runner.resume != "auto":
        if saved or os.path.isdir(folder):
            raise ConfigError("runner.resume", f"null, but save_path {cfg.save_path!r} already holds a run "
                              "(trajectories or checkpoints); set auto to continue it, or choose another save_path")
        return 0
    if not cfg.trains:  # a rollout-only run continues after its last complete batch
        done = [int(os.path.basename(p)[len("iteration"):].split("_")[0]) for p in saved
                if os.path.basename(os.path.dirname(p)) == f"{cfg.env_config.split}_trajectories"]
        return max(done) if done else 0
    if not os.path.isdir(folder):
        return 0
    try:
        step_dir = ckpt.resolve_resume_dir(folder)
    except ConfigError:
        return 0
    return int(ckpt.read_trainer_state(step_dir)["step"])


def run_web(raw: Any, print_fn=print) -> dict[str, float]:
    """Run the web-agent job described by ``raw`` (a Hydra ``DictConfig`` or a dict). Returns a
    summary: ``steps`` (train iterations run) and the first / last evaluation success rates
    (``val/first_success_rate``, ``val/last_success_rate``)."""
    start = prepare_web(raw)
    cfg = start.cfg
    from rlinf.runners.launch import start_cluster
    from rlinf.runners.web_agent.groups import launch_web_groups

    cluster, plan = start_cluster(cfg, print_fn)
    groups = launch_web_groups(cfg, cluster, plan, start)
    try:
        return _drive(start, groups, print_fn)
    finally:
        groups.shutdown()


def _wandb_env(log_cfg) -> None:
    """wandb reads its key and entity from the environment: ``log_config.wandb_key_env_var``
    names the variable holding the key (unset = offline), ``entity_name`` the team."""
    key = os.environ.get(log_cfg.wandb_key_env_var)
    if key:
        os.environ["WANDB_API_KEY"] = key
        os.environ.setdefault("WANDB_MODE", "online")
    else:
        os.environ["WANDB_MODE"] = "offline"
    if log_cfg.entity_name:
        os.environ["WANDB_ENTITY"] = log_cfg.entity_name


def _drive(start: WebStart, groups, print_fn) -> dict[str, float]:
    from rlinf.runners.web_agent.build import build_runner
    from rlinf.utils.metric_logger import MetricLogger

    cfg = start.cfg
    os.makedirs(cfg.save_path, exist_ok=True)
    if cfg.algorithm_config.report_to == "wandb":
        _wandb_env(cfg.log_config)
    backends = ([cfg.algorithm_config.report_to] if cfg.algorithm_config.report_to != "none" else [])
    logger = MetricLogger(cfg.save_path, cfg.log_config.project_name, cfg.log_config.run_name, backends,
                          resume_step=start.resume_iteration or None)
    runner = build_runner(start, groups, logger, print_fn)
    try:
        if groups.actor is not None and start.resume_iteration:
            from rlinf.runners import checkpoint as ckpt

            folder = ckpt.step_folder(runner.checkpoints, start.resume_iteration)
            groups.actor.execute("load_checkpoint", os.path.join(folder, "actor")).wait()
            runner.sync_weights(start.resume_iteration)
            print_fn(f"[web] resumed after iteration {start.resume_iteration} ({folder})")
        runner.fit(start.resume_iteration)
    finally:
        logger.close()
    tests = [h for h in runner.history if any(k.startswith("test/") for k in h)]
    out = {"steps": float(sum(1 for h in runner.history if any(k.startswith("train/") for k in h)))}
    if tests:  # named val/ for the entry point's first -> last line
        out["val/first_success_rate"] = tests[0].get("test/success_rate", 0.0)
        out["val/last_success_rate"] = tests[-1].get("test/success_rate", 0.0)
    return out
