"""The web recipe's checks before Ray: the typed config (WebGym's keys), the task files of the
splits the run reads, the policy's model folder and tokenizer, the DeepSpeed file (resolved as the
actor will), the Chromium binary, what ``save_path`` already holds (resume) and the cluster size.
Every failure is a :class:`~rlinf.utils.typed_config.ConfigError` naming a key the user wrote."""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import Any

from rlinf.config.web import WebAgentConfig
from rlinf.engines.web.browser_errors import BrowserStartError, find_chromium
from rlinf.runners import checkpoint as ckpt
from rlinf.runners.preflight import Asset, check_assets, check_hf_folder
from rlinf.runners.recipe import RunStart
from rlinf.runners.recovery import latest_checkpoint
from rlinf.utils.typed_config import ConfigError

#: what the tiny web config reads and the command that makes it (demonstrations in Chromium and a
#: supervised warm start: minutes, so a run that misses it stops with the command)
WEB_ASSETS = (Asset("policy_config.base_model", "results/tiny_web/warm",
                    "python -m toolkits.web_tasks.prepare --out {parent}", "about 2 minutes on 2 idle CPU cores"),)


@dataclass
class WebStart(RunStart):
    """What :func:`prepare_web` hands the web run: the typed config, the iteration to resume
    after (``resume_step``, None: a fresh run), the loaded tasks per split, the tokenizer, the
    policy's model folder and the Chromium binary."""

    tasks: dict | None = None
    tokenizer: Any = None
    model_path: str | None = None
    executable: str = ""

    @property
    def resume_iteration(self) -> int:
        """Iterations already finished (0: a fresh run)."""
        return self.resume_step or 0


def find_browser(configured: str | None) -> str:
    """The Chromium binary the browser servers launch (``env_config.browser.executable_path``)."""
    try:
        return find_chromium(configured)
    except BrowserStartError as err:
        raise ConfigError("env_config.browser.executable_path", str(err)) from None


def check_observation(cfg) -> None:
    """``context_config.observation`` other than ``text`` gives the policy a screenshot: refused
    (one line) while the policy model is text-only (its folder's config.json ``model_type`` is
    not a vision-language one, or an external server that is sent text only), and while the web
    rollout does not yet hand images to a vision-language policy."""
    seen = cfg.context_config.observation
    if seen == "text":
        return
    # lazy: the VLM loader's imports (~2 s) only for a screenshot observation
    from rlinf.models.vlm.load import PROCESSOR_CLASSES, read_model_type

    key = "context_config.observation"
    folder = cfg.policy_config.weights_path
    kinds = " or ".join(sorted(PROCESSOR_CLASSES))
    if cfg.external_server and (folder is None or not os.path.isfile(os.path.join(folder, "config.json"))):
        raise ConfigError(key, f"{seen!r} needs a vision-language policy, but the policy is the model on "
                               f"env_config.vllm_server_url, which is sent text only; set text")
    try:
        read_model_type(folder)
    except (OSError, ValueError) as err:
        raise ConfigError(key, f"{seen!r} gives the policy the page as an image, but the policy model is text-only "
                               f"({err}); set text, or use a {kinds} model") from None
    raise ConfigError(key, f"{seen!r}: the web rollout does not hand images to a vision-language policy yet "
                           "(issue 47 item 3: the VLM web policy); set text")


def prepare_web(raw: Any) -> WebStart:
    """All checks of a web run before Ray; raises :class:`ConfigError` naming the key."""
    # lazy: the tokenizer loader imports torch (~4.8 s); registry/CLI import this module without the checks
    from rlinf.data.tokenizer import load_tokenizer
    from rlinf.data.web_tasks import load_tasks
    from rlinf.scheduler.cluster import check_cluster_before_start

    cfg = WebAgentConfig.load(raw, check_paths=False)
    if "rollout" in cfg.components or cfg.trains:  # the policy's folder is read (as check_paths says)
        check_assets(cfg, WEB_ASSETS)  # the tiny policy missing: one line naming the command that makes it
    cfg.check_paths()
    check_observation(cfg)
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
    return WebStart(cfg, resume or None, tasks, tokenizer, model_path, executable)


def check_deepspeed_file(cfg) -> None:
    """Resolve the DeepSpeed JSON as the actor will (every key honoured, filled, noted or
    refused), so a bad file stops the run before Ray starts."""
    import torch  # lazy: torch (~2 s) only when called; the driver's checks before Ray import this module without it

    # lazy: groups loads the scheduler's worker-group layer (~0.2 s); needed only when a DeepSpeed file is named
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
    """The iterations already finished in ``save_path`` (``runner.resume: auto`` or
    ``recover_mode`` auto / resume: the latest checkpoint whose manifest checks out; a damaged one
    is skipped, said in one line); a fresh run refuses a ``save_path`` that already holds saved
    iterations."""
    folder = os.path.join(cfg.save_path, "checkpoints")
    saved = glob.glob(os.path.join(cfg.save_path, "*_trajectories", "iteration*_rank_*.pt"))
    if not cfg.runner.continues:
        if saved or os.path.isdir(folder):
            raise ConfigError("runner.resume", f"null, but save_path {cfg.save_path!r} already holds a run "
                              "(trajectories or checkpoints); set auto (or runner.recover_mode: auto) to continue "
                              "it, or choose another save_path")
        return 0
    if not cfg.trains:  # a rollout-only run continues after its last complete batch
        done = [int(os.path.basename(p)[len("iteration"):].split("_")[0]) for p in saved
                if os.path.basename(os.path.dirname(p)) == f"{cfg.env_config.split}_trajectories"]
        return max(done) if done else 0
    step_dir = latest_checkpoint(folder, print, "runner.resume auto",  # a damaged latest one: the one before
                                 cfg.runner.resume_unverified, key="runner.resume")
    return 0 if step_dir is None else int(ckpt.read_trainer_state(step_dir)["step"])
