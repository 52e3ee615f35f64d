"""``actor.model`` -> a π0 / π0.5 :class:`~.rl_policy.Pi0RLPolicy` (``model_type: pi0`` / ``pi05``),
and the checks :func:`rlinf.models.embodied.factory.check_policy_fits` and the embodied preflight
make before any weight is read.

Keys read: model_path (an openpi, RLinf or LeRobot folder, required), unnorm_key (the asset id of
the statistics; null = the folder's only set), tokenizer_path, action_horizon,
discrete_state_input (pi05), precision (the weights' dtype in memory), action_dim /
action_env_dim (the env's action dimensions, at most the padded 32 and the statistics' width),
num_action_chunks / action_chunk (the first ``K`` of the checkpoint's ``H`` actions),
num_images_in_input (1: main camera, 2: + wrist), the πRL keys (noise_method, noise_level, noise_anneal,
noise_params, noise_logvar_range, num_steps, joint_logprob, ignore_last), add_value_head, value_after_vlm,
detach_critic_input, critic_hidden_sizes (the value head's widths), train_expert_only,
extra_delta_transform, value_type (chunk_level), do_sample.

:func:`plan_from_config` reads the folder's metadata only (file headers, JSON, the tokenizer) and
raises :class:`~rlinf.utils.typed_config.ConfigError` naming the key at fault: a folder that is
not a checkpoint or lacks its statistics (``model_path``), an unknown asset id (``unnorm_key``),
``pi05`` over π0 weights or the reverse (``model_type``), an action dimension above the padded
width (``action_env_dim`` / ``action_dim``), a chunk longer than ``H``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from rlinf.config.actor import ActorModelConfig
from rlinf.models.embodied.base import ObsSpec
from rlinf.models.embodied.pi0 import Pi0CheckpointError, Pi0Options, inspect_pi0_folder, load_pi0, plan_pi0
from rlinf.utils.typed_config import ConfigError

PATH = "actor.model"
DTYPES = {"fp32": "float32", "float32": "float32", "fp16": "float16", "float16": "float16",
          "bf16": "bfloat16", "bfloat16": "bfloat16"}


def _err(key: str, message: str) -> ConfigError:
    return ConfigError(f"{PATH}.{key}", message)


def _action_key(cfg: ActorModelConfig) -> str:
    return "action_env_dim" if cfg.policy.action_env_dim is not None else "action_dim"


def action_sizes(cfg: ActorModelConfig) -> tuple[int, int]:
    """``(A, K)``: the env's action dimensions and the actions per call (keys checked for agreement)."""
    p = cfg.policy
    if p.action_env_dim is not None and p.action_dim is not None and p.action_env_dim != p.action_dim:
        raise _err("action_env_dim", f"{p.action_env_dim} differs from action_dim ({p.action_dim}); both name the "
                   "env's action dimensions: set one")
    chunks = p.num_action_chunks or p.action_chunk or 1
    if p.action_chunk is not None and p.action_chunk != chunks:
        raise _err("action_chunk", f"{p.action_chunk}: the env executes num_action_chunks ({chunks}) actions per "
                   "call; set it equal or null")
    return p.action_env_dim or p.action_dim or 7, chunks


def _options(cfg: ActorModelConfig):
    p = cfg.policy
    return Pi0Options(asset_id=p.unnorm_key, action_horizon=p.action_horizon,
                      discrete_state_input=p.discrete_state_input, tokenizer_path=p.tokenizer_path,
                      num_steps=p.num_steps)


def _no_stats(cfg: ActorModelConfig, layout: str) -> ConfigError:
    where = ("policy_postprocessor.json and its *_normalizer_processor.safetensors (LeRobot's normaliser files)"
             if layout == "lerobot" else "norm_stats.json (assets/<asset id>/ in openpi folders, <asset id>/ in "
             "RLinf's)")
    return _err("model_path", f"{cfg.model_path}: no action statistics: the env takes un-normalised actions; "
                f"expected {where}")


def plan_from_config(cfg: ActorModelConfig, model_type: str):
    """The checks that need no env (keys, the folder's metadata); returns the
    :class:`~rlinf.models.embodied.pi0.loading.Pi0Plan`.

    Raises:
        ConfigError: naming the key at fault (see the module docstring).
    """
    p = cfg.policy
    if cfg.model_path is None:
        raise _err("model_path", f"required for model_type {model_type} (a π0 / π0.5 checkpoint folder: openpi, "
                   "RLinf or LeRobot layout)")
    if cfg.is_lora:
        raise _err("is_lora", f"LoRA applies to openvla_oft only, not {model_type}")
    if p.tokenizer_path is not None and not Path(p.tokenizer_path).is_file():
        raise _err("tokenizer_path", f"{p.tokenizer_path!r} is not a file (PaliGemma's paligemma_tokenizer.model)")
    if model_type == "pi0" and p.discrete_state_input is not None:
        raise _err("discrete_state_input", "only pi05 reads it (π0 feeds the state as a token); remove it")
    rng = tuple(p.noise_logvar_range)
    if len(rng) != 2 or not 0 < rng[0] <= rng[1]:
        raise _err("noise_logvar_range", f"must be [min_std, max_std] with 0 < min_std <= max_std, got {list(rng)}")
    if p.ignore_last and p.num_steps < 2:
        raise _err("ignore_last", "needs num_steps >= 2 (one step besides the last to sample)")
    if (p.value_type or "chunk_level") != "chunk_level":
        raise _err("value_type", f"{model_type} has one value per chunk: chunk_level")
    if not 1 <= p.num_images_in_input <= 3:
        raise _err("num_images_in_input", f"must be 1 (main camera) or 2 (+ wrist), got {p.num_images_in_input}")
    action_dim, chunks = action_sizes(cfg)
    try:
        plan = plan_pi0(cfg.model_path, _options(cfg))
    except Pi0CheckpointError as err:
        raise _err("model_path", str(err)) from None
    except KeyError as err:
        folder = inspect_pi0_folder(cfg.model_path)
        if not (folder.processors if folder.layout == "lerobot" else folder.stats_files):
            raise _no_stats(cfg, folder.layout) from None
        raise _err("unnorm_key", str(err.args[0])) from None
    if plan.model_type != model_type:
        kind = "π0.5 (adaRMS expert, time_mlp_*)" if plan.spec.pi05 else "π0 (state_proj, action_time_mlp_*)"
        raise _err("model_type", f"{model_type}, but {cfg.model_path} holds {kind} weights; set model_type: "
                   f"{plan.model_type}")
    if plan.stats is None:
        raise _no_stats(cfg, plan.folder.layout)
    key = _action_key(cfg)
    if action_dim > plan.spec.action_dim:
        raise _err(key, f"{action_dim}: larger than the model's padded action width ({plan.spec.action_dim})")
    if action_dim > plan.stats.action_dim:
        raise _err(key, f"{action_dim}: the checkpoint's statistics ({plan.stats.where}) have "
                   f"{plan.stats.action_dim} action dimensions")
    if chunks > plan.spec.action_horizon:
        raise _err("num_action_chunks", f"{chunks}: the checkpoint predicts {plan.spec.action_horizon} actions per "
                   "chunk (action_horizon)")
    if p.num_images_in_input > len(plan.cameras):
        raise _err("num_images_in_input", f"{p.num_images_in_input}: the checkpoint has {len(plan.cameras)} camera "
                   "slots")
    return plan


def check_fits(cfg: ActorModelConfig, plan, obs: ObsSpec, env_label: str = "the env") -> None:
    """The checks against the env's observations (images, wrist camera, state width)."""
    p = cfg.policy
    if obs.image_shape is None:
        raise _err("model_type", f"{plan.model_type} needs camera images; {env_label} gives none "
                   "(obs_spec.image_shape)")
    if p.num_images_in_input == 2 and not obs.has_wrist:
        raise _err("num_images_in_input", f"2 needs a wrist camera; {env_label} has one camera")
    reads_state = not plan.spec.pi05 or plan.prompt_format == "pi05_state"
    if (reads_state or p.extra_delta_transform) and obs.state_dim < 1:
        raise _err("model_type", f"{plan.model_type} reads the robot state here; {env_label} gives none")
    if p.extra_delta_transform and obs.state_dim < 6:
        raise _err("extra_delta_transform", f"adds the first 6 state values to the actions; {env_label} gives "
                   f"{obs.state_dim}")
    if reads_state:
        width = plan.spec.action_dim if plan.spec.pi05 else plan.spec.state_dim
        known = plan.stats.state_dim if plan.stats is not None else None
        if known is not None and obs.state_dim != known:  # normalised with another robot's statistics
            raise _err("model_path", f"{env_label} gives {obs.state_dim} state values; the checkpoint's state "
                       f"statistics ({plan.stats.where}) have {known}")
        if obs.state_dim > width:
            raise _err("model_path", f"{env_label} gives {obs.state_dim} state values; the model reads at most "
                       f"{width}")


def build(cfg: ActorModelConfig, obs: ObsSpec, model_type: str):
    """Loads the checkpoint and wraps it (after every check of :func:`plan_from_config` and
    :func:`check_fits`)."""
    # lazy: rl_policy pulls rlinf.algorithms.flow_logprob (~0.3 s); the pre-Ray checks (plan_from_config) do not need it
    from rlinf.models.embodied.pi0.rl_policy import Pi0HeadError, Pi0RLConfig, Pi0RLPolicy

    plan = plan_from_config(cfg, model_type)
    check_fits(cfg, plan, obs)
    p = cfg.policy
    action_dim, chunks = action_sizes(cfg)
    try:
        low, high = obs.bounds(action_dim)
    except ValueError as err:
        raise _err(_action_key(cfg), f"{err} (the env's action space)") from None
    try:
        pi0 = load_pi0(cfg.model_path, _options(cfg), dtype=getattr(torch, DTYPES[cfg.precision]))
    except Pi0CheckpointError as err:
        raise _err("model_path", str(err)) from None
    except KeyError as err:
        raise _err("unnorm_key", str(err.args[0])) from None
    config = Pi0RLConfig(
        action_chunk=chunks, action_env_dim=action_dim, num_steps=p.num_steps, noise_method=p.noise_method,
        noise_level=p.noise_level, noise_anneal=p.noise_anneal, noise_params=p.noise_schedule(),
        noise_logvar_range=tuple(p.noise_logvar_range), joint_logprob=p.joint_logprob,
        ignore_last=p.ignore_last, add_value_head=p.add_value_head, value_after_vlm=p.value_after_vlm,
        detach_critic_input=p.detach_critic_input, train_expert_only=p.train_expert_only,
        num_images=p.num_images_in_input, extra_delta_transform=p.extra_delta_transform,
        value_hidden_sizes=tuple(p.critic_hidden_sizes) if p.critic_hidden_sizes else None,
        action_low=tuple(low.tolist()), action_high=tuple(high.tolist()))
    try:
        policy = Pi0RLPolicy(pi0, config)
    except Pi0HeadError as err:
        raise _err(err.key, str(err)) from None
    policy.do_sample = p.do_sample
    return policy.train()
