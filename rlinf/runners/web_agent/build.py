"""From the typed config to the runner's parts: the policy the episodes call, the judge, and the
per-split episode settings and limits."""

from __future__ import annotations

from rlinf.rewards.web_judges import make_judge
from rlinf.runners.web_agent.episode import EpisodeSettings
from rlinf.runners.web_agent.groups import sampling_params
from rlinf.runners.web_agent.loop import WebAgentRunner
from rlinf.runners.web_agent.policy import BatchingPolicy, RolloutGroupBackend, ServerBackend
from rlinf.runners.web_agent.rollout import PhaseLimits


def episode_settings(cfg, split: str) -> EpisodeSettings:
    e, c, m = cfg.env_config, cfg.context_config, cfg.model_config
    steps = e.train_difficulty_max_steps if split == "train" else e.test_difficulty_max_steps
    return EpisodeSettings(max_steps={"easy": steps.easy, "medium": steps.medium, "hard": steps.hard},
                           mode=c.interaction_mode, rich_tree=e.use_rich_actree, prompt_version=m.prompt_version,
                           model_type=m.model_type, history_length=c.history_length,
                           max_observation_chars=c.max_observation_chars, observation=c.observation, site_base=None,
                           save_screenshots=e.save_screenshots, operation_timeout=e.operation_timeout)


def phase_limits(cfg) -> PhaseLimits:
    e = cfg.env_config
    interval = e.save_fraction
    return PhaseLimits(server_size=e.server_size, http_pools=e.http_pools.as_dict(),
                       operation_timeout=e.operation_timeout, wait_timeout=e.wait_timeout, max_retries=e.max_retries,
                       completion_threshold=e.completion_threshold, completion_grace_period=e.completion_grace_period,
                       task_timeout_minutes=e.task_timeout_minutes, checkpoint_interval=interval,
                       rank_load_weight=tuple(e.rank_load_weight), verbose=e.verbose,
                       screenshot_comparison_workers=e.screenshot_comparison_workers if e.save_screenshots else 0)


def make_policy(cfg, groups, tokenizer, split: str = "train") -> BatchingPolicy:
    """The policy the episodes of ``split`` call (evaluation samples at ``test_temperature``)."""
    e = cfg.env_config
    sampling = sampling_params(cfg, cfg.policy_config.test_temperature if split == "test" else None)
    if e.vllm_server_url is not None:
        backend = ServerBackend(e.vllm_server_url, cfg.policy_config.base_model or "policy", sampling,
                                timeout_s=e.vllm_timeout, max_batch=e.server_size, tokenizer=tokenizer,
                                max_connections=e.server_size)
        return BatchingPolicy(backend, max_in_flight=1, gather_s=0.0)
    backend = RolloutGroupBackend(groups.rollout, tokenizer, sampling, max_batch=e.server_size,
                                  seed=cfg.runner.seed or 0)
    return BatchingPolicy(backend, max_in_flight=groups.rollout.world_size)


def make_web_judge(cfg):
    o = cfg.openai_config
    if o.evaluator == "rule":
        return make_judge("rule")
    return make_judge("llm", openai_config=o, evaluation_workers=cfg.env_config.evaluation_workers,
                      timeout_s=o.timeout_s, max_retries=o.max_retries, on_failure=o.on_failure)


def build_runner(start, groups, logger, print_fn) -> WebAgentRunner:
    cfg = start.cfg
    tok = start.tokenizer
    pad = None if tok is None else (tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
    limits = phase_limits(cfg)
    policies = {split: make_policy(cfg, groups, tok, split) for split in ("train", "test")}
    return WebAgentRunner(cfg, groups.env_urls, policies, groups.actor, groups.rollout,
                          make_web_judge(cfg), start.tasks,
                          {"train": episode_settings(cfg, "train"), "test": episode_settings(cfg, "test")},
                          {"train": limits, "test": limits}, pad, logger=logger, log=print_fn,
                          start_iteration=start.resume_iteration, service_token=groups.service_token)
