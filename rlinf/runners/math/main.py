"""Everything a math run does between a Hydra config and its result, in order.

    config -> typed config (fails before any worker starts) -> Ray cluster + placement plan
    -> tokenizer and prompt loaders -> worker groups -> runner (resume?) -> fit / only_eval
    -> HF export, curve PNG, summary

``examples/math/main_grpo.py`` is a thin Hydra wrapper around :func:`run_math`.
"""

from __future__ import annotations

from typing import Any

from rlinf.config.math import MathConfig
from rlinf.data.prompt_dataset import PromptDataset, PromptLoader
from rlinf.data.readers import read_rows
from rlinf.data.tokenizer import prompt_encoder
from rlinf.utils.typed_config import ConfigError


def build_loaders(cfg: MathConfig, tokenizer) -> tuple[PromptLoader, PromptLoader | None]:
    """Train and validation prompt loaders from ``data:`` (prompts longer than
    ``data.max_prompt_length`` tokens are dropped; a validation batch is at most the whole set).

    Raises:
        ConfigError: a data file lacks the prompt / answer key, no prompt fits, or the train set
            has fewer usable prompts than ``data.rollout_batch_size``.
    """
    d = cfg.data
    try:
        encode = prompt_encoder(tokenizer, d.apply_chat_template)
    except ValueError as exc:
        raise ConfigError("data.apply_chat_template", str(exc).replace("data.apply_chat_template is ", "")) from None
    loaders = []
    for paths, key in ((d.train_data_paths, "data.train_data_paths"), (d.val_data_paths, "data.val_data_paths")):
        if not paths:
            loaders.append(None)
            continue
        try:
            dataset = PromptDataset(read_rows(paths, d.prompt_key, d.answer_key, d.messages_key), encode,
                                    d.max_prompt_length, num_workers=d.num_workers)
        except ValueError as exc:
            raise ConfigError(key, str(exc)) from None
        loaders.append(dataset)
    train_set, val_set = loaders
    if d.rollout_batch_size > len(train_set):
        raise ConfigError("data.rollout_batch_size", f"{d.rollout_batch_size} exceeds the "
                          f"{len(train_set)} usable prompts of data.train_data_paths")
    train = PromptLoader(train_set, d.rollout_batch_size, shuffle=d.shuffle, seed=d.seed)
    val = None
    if val_set is not None:
        size = min(d.val_rollout_batch_size or d.rollout_batch_size, len(val_set))
        val = PromptLoader(val_set, size, shuffle=d.validation_shuffle, seed=d.seed, drop_last=False)
    return train, val


def run_math(raw: Any, print_fn=print) -> dict[str, float]:
    """Run the math RL job described by ``raw`` (a Hydra ``DictConfig`` or a plain dict), under
    ``runner.recover_mode`` (:func:`~rlinf.runners.recovery.run_with_recovery`).

    Everything checkable before Ray is checked first (:func:`~rlinf.runners.preflight.prepare_math`).

    Returns the runner's summary: ``steps`` and, when validating, ``val/first_accuracy`` and
    ``val/last_accuracy``.
    """
    from rlinf.runners.recovery import run_with_recovery

    return run_with_recovery(raw, _run_math_once, print_fn)


def _run_math_once(raw: Any, print_fn=print) -> dict[str, float]:
    from rlinf.runners.preflight import prepare_math

    start = prepare_math(raw)
    cfg, tokenizer, train, val = start.cfg, start.tokenizer, start.train, start.val

    from rlinf.runners.math.groups import launch_math_groups
    from rlinf.runners.math.loop import MathGRPORunner, total_training_steps
    from rlinf.runners.launch import open_logger, start_cluster

    cluster, plan = start_cluster(cfg, print_fn)
    total = total_training_steps(cfg, train.batches_per_epoch)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    lg = cfg.runner.logger
    logger = open_logger(cfg.runner, start.resume_step)
    print_fn(f"[rlinf] {total} steps of {cfg.data.rollout_batch_size} prompts x "
             f"{cfg.algorithm.group_size}; placement: " +
             ", ".join(f"{c}={plan.mode(a, c).value}" for a, c in [("actor", "rollout")]) +
             f"; rollout backend {cfg.rollout.engine_backend}; logs in {lg.log_path}")
    print_fn(f"[rlinf] groups {cfg.actor.group_name} (actor), {cfg.rollout.group_name} (rollout)"
             + "".join(f", {getattr(cfg, c).group_name} ({c})" for c in ("reward", "inference", "critic")
                       if c in plan.components))
    groups = launch_math_groups(cfg, cluster, plan, total)
    runner = MathGRPORunner(cfg, groups, train, val, pad, logger)
    if cfg.rollout.recompute_logprobs:
        why = runner.pipeline.recompute_reason
        print_fn("[rlinf] old log-probs: " + ("the update's own (one on-policy optimizer step per batch: no "
                                              "separate pass)" if why is None else f"recomputed by the actor ({why})"))
    try:
        return runner.run(print_fn)
    finally:
        runner.close()
        groups.shutdown()
        logger.close()
