"""``build_policy``: ``actor.model`` + what the env provides -> an :class:`EmbodiedPolicy`.

Keys read per ``actor.model.model_type``:

* ``mlp`` (state observations): action_dim, num_action_chunks, value_type, add_value_head,
  policy_hidden_sizes, critic_hidden_sizes, init_log_std; ``obs_spec.state_dim`` sizes the input.
* ``cnn`` (camera images): the same plus image_size (resize target, default 64 x 64), center_crop,
  hidden_size (feature width, default 256), shared_critic_encoder, use_proprio (also feed the
  state), num_images_in_input (2 = main + wrist camera).
* ``flow_mlp`` (state observations, :mod:`rlinf.models.embodied.flow_policy`): action_dim,
  num_action_chunks (the flow's horizon; action_chunk null or equal), add_value_head,
  policy_hidden_sizes (velocity MLP, default 256, 256), hidden_size (state encoder width, default
  256), critic_hidden_sizes, shared_critic_encoder (false: the critic is its own Tanh MLP on the
  state, as mlp's, instead of a head on the state encoder), residual_velocity (``v = x_t - MLP``), and
  the πRL keys noise_method, noise_level, noise_anneal, noise_params, noise_logvar_range,
  num_steps, joint_logprob, ignore_last, detach_critic_input (refused for every type but
  flow_mlp, pi0 and pi05); value_type chunk_level; model_path: a folder its ``save_pretrained``
  wrote.
* ``sac_mlp`` (state observations; the off-policy recipe: SAC / CrossQ / RLPD): action_dim,
  num_action_chunks (1), policy_hidden_sizes (the tanh-Gaussian actor, default 256 x 3),
  critic_hidden_sizes (each Q head, default policy_hidden_sizes), num_q_heads, q_head_type
  (``default``; ``crossq``: batch-renormalised heads without targets; ``layernorm``: RLPD's).
  :func:`build_policy` gives the acting side (:class:`~rlinf.models.embodied.sac_policy.SACActorPolicy`);
  :func:`sac_network_sizes` the sizes the learner builds its actor and Q ensemble with. Its
  weights start random (model_path is refused: resume a run with runner.resume_dir).
* ``openvla`` / ``openvla_oft``: model_path (a real OpenVLA / OpenVLA-OFT folder, see
  :mod:`rlinf.models.embodied.openvla`; required), action_dim (default 7), num_action_chunks
  (default 1), precision, attn_implementation, unnorm_key, value_type, add_value_head,
  center_crop, num_images_in_input, use_proprio (the env's state feeds OFT's proprio token),
  do_sample, gradient_checkpointing, is_lora, lora_rank (with lora_path: must equal the
  adapter's ``r``), lora_path; image_size, hidden_size and
  vocab_size (the tokenizer's vocabulary as seed 003 writes it, e.g. 32000, or the padded LM
  size), when set, must match the folder.
* ``pi0`` / ``pi05`` (camera images, instructions, state; :mod:`rlinf.models.embodied.pi0.build`,
  policy :class:`~rlinf.models.embodied.pi0.rl_policy.Pi0RLPolicy`): model_path (an openpi,
  RLinf or LeRobot π0 / π0.5 folder; required; its weights must be of that type), unnorm_key (the
  statistics' asset id, e.g. ``physical-intelligence/libero``; null = the only set), tokenizer_path
  (PaliGemma's SentencePiece file; null = in the folder), action_horizon (``H`` when the folder
  has no config.json), discrete_state_input (pi05's state prompt), precision, action_dim /
  action_env_dim (the env's dimensions of the padded 32, default 7), num_action_chunks /
  action_chunk (the first ``K`` of the ``H`` actions go to the env), num_images_in_input (1 main
  camera, 2 + wrist), the πRL keys above (noise_method, noise_level, noise_anneal, noise_params,
  noise_logvar_range, num_steps, joint_logprob, ignore_last, detach_critic_input), add_value_head, value_after_vlm,
  critic_hidden_sizes (the value head's widths), train_expert_only, extra_delta_transform,
  value_type chunk_level, do_sample. RLinf's ``value_head.*`` / ``noise_head.*`` tensors in the
  folder start the heads; the trained policy is written back in the folder's layout. The π0 keys
  (action_env_dim, action_horizon, value_after_vlm, train_expert_only, discrete_state_input,
  tokenizer_path, extra_delta_transform) are refused for every other type. :func:`check_policy_fits`
  and :func:`check_model_folder` read the folder's metadata only (no weights).

mlp / cnn: with model_path set, the weights come from a folder their ``save_pretrained`` wrote;
they always run in fp32 (``precision`` applies to the VLAs). ``do_sample`` is exposed as
``policy.do_sample``; ``act(deterministic=...)`` alone decides whether a call samples.

Example:
    >>> cfg = {"model_type": "mlp", "action_dim": 2, "num_action_chunks": 3, "policy_hidden_sizes": [16]}
    >>> policy = build_policy(cfg, ObsSpec(state_dim=5))  # the actor.model mapping, or its parsed config
    >>> type(policy).__name__, policy.num_action_chunks
    ('MLPPolicy', 3)
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from rlinf.config.actor import ActorModelConfig
from rlinf.config.model import PolicyModelConfig
from rlinf.models.embodied.base import EmbodiedPolicy, ObsSpec, check_value_type
from rlinf.models.embodied.cnn_policy import CNNPolicy, CNNPolicyConfig
from rlinf.models.embodied.mlp_policy import MLPPolicy, MLPPolicyConfig
from rlinf.models.embodied.sac_policy import SACActorPolicy
from rlinf.utils.typed_config import ConfigError, field_default, parse_section

PATH = "actor.model"
MODEL_TYPES = ("mlp", "cnn", "flow_mlp", "sac_mlp", "openvla", "openvla_oft", "pi0", "pi05")
#: the π0 / π0.5 policies (:mod:`rlinf.models.embodied.pi0.build`)
PI0_TYPES = ("pi0", "pi05")

#: πRL keys only the flow policies read (flow_mlp, pi0, pi05; refused elsewhere)
FLOW_KEYS = ("noise_method", "noise_level", "noise_anneal", "noise_params", "noise_logvar_range", "num_steps",
             "action_chunk", "joint_logprob", "ignore_last", "detach_critic_input")
#: keys only flow_mlp reads (refused elsewhere, π0 / π0.5 included: their velocity is the checkpoint's)
FLOW_MLP_KEYS = ("residual_velocity",)
#: keys only pi0 / pi05 read (refused elsewhere)
PI0_KEYS = ("action_env_dim", "action_horizon", "value_after_vlm", "train_expert_only", "discrete_state_input",
            "tokenizer_path", "extra_delta_transform")

_DTYPES = {"fp32": "float32", "float32": "float32", "fp16": "float16", "float16": "float16",
           "bf16": "bfloat16", "bfloat16": "bfloat16"}


def _require(value: Any, key: str, what: str) -> Any:
    if value is None:
        raise ConfigError(f"{PATH}.{key}", f"required for {what}")
    return value


def _value_type(cfg: ActorModelConfig) -> str:
    try:
        return check_value_type(cfg.policy.value_type)
    except ValueError as err:
        raise ConfigError(f"{PATH}.value_type", str(err)) from None


def _image_size(cfg: ActorModelConfig, default: tuple[int, int]) -> tuple[int, int]:
    size = tuple(cfg.policy.image_size)
    if not size:
        return default
    if len(size) == 1:
        return (size[0], size[0])
    if len(size) != 2:
        raise ConfigError(f"{PATH}.image_size", f"expected [height, width], got {list(size)}")
    return size  # type: ignore[return-value]


def build_policy(model_cfg: ActorModelConfig | Mapping[str, Any], obs_spec: ObsSpec,
                 *, temperature: float = 1.0) -> EmbodiedPolicy:
    """Builds the policy ``actor.model.model_type`` names (see the module docstring).

    Args:
        model_cfg: the ``actor.model`` section, typed or as a plain mapping.
        obs_spec: what the env gives (state length, image shape, wrist camera, action bounds).
        temperature: sampling temperature of the VLA's bin distribution (log-probs are those of the
            tempered distribution); ignored by the Gaussian policies.

    Returns:
        The policy, in training mode, on the CPU.

    Raises:
        ConfigError: a key is missing, unknown or inconsistent with the model folder / obs_spec.
    """
    cfg = model_cfg if isinstance(model_cfg, ActorModelConfig) else parse_section(ActorModelConfig, model_cfg, PATH)
    model_type = (cfg.model_type or "").lower()
    if model_type in MODEL_TYPES:
        _no_flow_keys(cfg, model_type)
        check_noise_schedule(cfg)
    if model_type == "flow_mlp":
        return _build_flow(cfg, obs_spec)
    if model_type in PI0_TYPES:
        from rlinf.models.embodied.pi0.build import build as build_pi0  # lazy: loads the pi0 package (~0.3 s)

        return build_pi0(cfg, obs_spec, model_type)
    if model_type == "mlp":
        return _build_mlp(cfg, obs_spec)
    if model_type == "sac_mlp":
        return _build_sac_mlp(cfg, obs_spec)
    if model_type == "cnn":
        return _build_cnn(cfg, obs_spec)
    if model_type in ("openvla", "openvla_oft"):
        return _build_openvla(cfg, obs_spec, temperature, model_type)
    raise ConfigError(f"{PATH}.model_type", f"embodied policies are {', '.join(MODEL_TYPES)}; got {cfg.model_type!r}")


def check_policy_fits(model_cfg: ActorModelConfig | Mapping[str, Any], obs_spec: ObsSpec,
                      env_label: str = "the env") -> None:
    """Every check :func:`build_policy` makes, without loading a VLA's weights: ``model_type``
    known, ``action_dim`` equal to the env's, the observation kind the policy needs (state for
    mlp, images for cnn / VLAs), a VLA folder's format, statistics (``unnorm_key``) and LoRA
    adapter. mlp / cnn policies are small and simply built (and dropped).

    Raises:
        ConfigError: naming the ``actor.model`` key at fault.

    Example:
        >>> cfg = {"model_type": "mlp", "action_dim": 3, "num_action_chunks": 1}
        >>> check_policy_fits(cfg, ObsSpec(state_dim=4, action_low=(-1.0,) * 2, action_high=(1.0,) * 2))
        Traceback (most recent call last):
        ...
        rlinf.utils.typed_config.ConfigError: actor.model.action_dim: 3, but the env takes 2-dimensional actions
    """
    cfg = model_cfg if isinstance(model_cfg, ActorModelConfig) else parse_section(ActorModelConfig, model_cfg, PATH)
    model_type = (cfg.model_type or "").lower()
    if model_type not in MODEL_TYPES:
        raise ConfigError(f"{PATH}.model_type",
                          f"embodied policies are {', '.join(MODEL_TYPES)}; got {cfg.model_type!r}")
    vla = model_type in ("openvla", "openvla_oft")
    pi0 = model_type in PI0_TYPES
    action_key = "action_env_dim" if pi0 and cfg.policy.action_env_dim is not None else "action_dim"
    action_dim = cfg.policy.action_dim or (cfg.policy.action_env_dim if pi0 else None) or (7 if vla or pi0 else None)
    if action_dim is None:
        raise ConfigError(f"{PATH}.action_dim", f"required for model_type {model_type}")
    env_dim = len(obs_spec.action_low) if obs_spec.action_low is not None else None
    if env_dim is not None and env_dim != action_dim:
        raise ConfigError(f"{PATH}.{action_key}", f"{action_dim}, but {env_label} takes {env_dim}-dimensional "
                          "actions")
    if pi0:  # the folder's metadata and the env: no weights are read
        from rlinf.models.embodied.pi0.build import check_fits, plan_from_config  # lazy: the pi0 package (~0.3 s)

        _no_flow_keys(cfg, model_type)
        check_fits(cfg, plan_from_config(cfg, model_type), obs_spec, env_label)
        return
    if not vla:
        build_policy(cfg, obs_spec)
        return
    _no_flow_keys(cfg, model_type)
    _openvla_precheck(cfg, obs_spec, model_type)
    _openvla_folder_check(cfg, action_dim)


def _openvla_folder_check(cfg: ActorModelConfig, action_dim: int) -> None:
    """The folder, its statistics for ``unnorm_key`` and the LoRA adapter, from metadata only."""
    # lazy: the openvla package (~0.3 s of modules) only for the openvla types
    from rlinf.models.embodied.openvla.action_tokens import select_stats
    from rlinf.models.embodied.openvla.checkpoint import CheckpointError, inspect_folder

    try:
        folder = inspect_folder(cfg.model_path)
    except CheckpointError as err:
        raise ConfigError(f"{PATH}.model_path", str(err)) from None
    if folder.norm_stats:
        try:
            _, stats = select_stats(folder.norm_stats, cfg.policy.unnorm_key)
        except KeyError as err:
            raise ConfigError(f"{PATH}.unnorm_key", str(err.args[0])) from None
        q01 = stats.get("action", stats).get("q01")
        if q01 is not None and len(q01) != action_dim:
            raise ConfigError(f"{PATH}.action_dim", f"{action_dim} does not match the checkpoint's statistics "
                              f"({len(q01)} values)")
    if cfg.is_lora and cfg.lora_path is not None:
        adapter = Path(cfg.lora_path) / "adapter_config.json"
        if not adapter.is_file():
            raise ConfigError(f"{PATH}.lora_path", f"{cfg.lora_path!r} has no adapter_config.json (a PEFT LoRA folder)")
        rank = _adapter_rank(cfg.lora_path)
        if rank is not None and rank != cfg.lora_rank:
            raise ConfigError(f"{PATH}.lora_rank", f"{cfg.lora_rank} differs from the rank of the adapter in "
                              f"lora_path ({rank}); set lora_rank: {rank}")


def _openvla_precheck(cfg: ActorModelConfig, obs: ObsSpec, model_type: str) -> str:
    """The VLA keys checkable against the env alone; returns the model folder."""
    model_path = _require(cfg.model_path, "model_path", f"model_type {model_type} (an OpenVLA checkpoint folder)")
    if cfg.policy.num_images_in_input not in (1, 2):
        raise ConfigError(f"{PATH}.num_images_in_input", f"must be 1 or 2, got {cfg.policy.num_images_in_input}")
    if cfg.policy.num_images_in_input == 2 and not obs.has_wrist:
        raise ConfigError(f"{PATH}.num_images_in_input", "2 needs a wrist camera (obs_spec.has_wrist)")
    if obs.image_shape is None:
        raise ConfigError(f"{PATH}.model_type", f"{model_type} needs camera images (obs_spec.image_shape)")
    if cfg.policy.use_proprio and obs.state_dim < 1:
        raise ConfigError(f"{PATH}.use_proprio", "the env gives no state (obs_spec.state_dim = 0)")
    if cfg.lora_path is not None and not cfg.is_lora:
        raise ConfigError(f"{PATH}.lora_path", "set is_lora: true to load a LoRA adapter")
    return model_path


def _no_lora(cfg: ActorModelConfig, model_type: str) -> None:
    if cfg.is_lora:
        raise ConfigError(f"{PATH}.is_lora", f"LoRA applies to openvla_oft only, not {model_type}")


def _load_or_build(cls, config, model_path: str | None):
    if model_path is None:
        return cls(config)
    overrides = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    try:
        return cls.from_pretrained(model_path, **overrides)
    except FileNotFoundError as err:
        raise ConfigError(f"{PATH}.model_path", f"no saved {cls.__name__} in {model_path!r} ({err})") from None


def _build_mlp(cfg: ActorModelConfig, obs: ObsSpec) -> EmbodiedPolicy:
    _no_lora(cfg, "mlp")
    action_dim = _require(cfg.policy.action_dim, "action_dim", "model_type mlp")
    if obs.state_dim < 1:
        raise ConfigError(f"{PATH}.model_type", "mlp needs state observations (obs_spec.state_dim >= 1)")
    low, high = obs.bounds(action_dim)
    config = MLPPolicyConfig(
        state_dim=obs.state_dim, action_dim=action_dim, num_action_chunks=cfg.policy.num_action_chunks or 1,
        hidden_sizes=cfg.policy.policy_hidden_sizes or (256, 256, 256),
        critic_hidden_sizes=cfg.policy.critic_hidden_sizes,
        init_log_std=cfg.policy.init_log_std, value_type=_value_type(cfg), add_value_head=cfg.policy.add_value_head,
        action_low=tuple(low.tolist()), action_high=tuple(high.tolist()))
    policy = _load_or_build(MLPPolicy, config, cfg.model_path)
    policy.do_sample = cfg.policy.do_sample
    return policy


def sac_network_sizes(model_cfg: ActorModelConfig | Mapping[str, Any]) -> dict[str, Any]:
    """What the SAC learner builds for ``sac_mlp``: ``hidden_sizes`` (actor), ``critic_hidden_sizes``
    (each Q head), ``num_q_heads`` and ``q_head_type``.

    >>> sac_network_sizes({"model_type": "sac_mlp", "action_dim": 2, "policy_hidden_sizes": [8],
    ...                    "num_q_heads": 10, "q_head_type": "layernorm"})
    {'hidden_sizes': (8,), 'critic_hidden_sizes': (8,), 'num_q_heads': 10, 'q_head_type': 'layernorm'}
    """
    cfg = model_cfg if isinstance(model_cfg, ActorModelConfig) else parse_section(ActorModelConfig, model_cfg, PATH)
    p = cfg.policy
    hidden = tuple(p.policy_hidden_sizes or (256, 256, 256))
    return {"hidden_sizes": hidden, "critic_hidden_sizes": tuple(p.critic_hidden_sizes or hidden),
            "num_q_heads": p.num_q_heads, "q_head_type": p.q_head_type}


def _build_sac_mlp(cfg: ActorModelConfig, obs: ObsSpec) -> EmbodiedPolicy:
    _no_lora(cfg, "sac_mlp")
    p = cfg.policy
    action_dim = _require(p.action_dim, "action_dim", "model_type sac_mlp")
    if obs.state_dim < 1:
        raise ConfigError(f"{PATH}.model_type", "sac_mlp needs state observations (obs_spec.state_dim >= 1)")
    if (p.num_action_chunks or 1) != 1:
        raise ConfigError(f"{PATH}.num_action_chunks", f"{p.num_action_chunks}: a SAC actor takes one action per "
                          "step; set 1")
    if cfg.model_path is not None:
        raise ConfigError(f"{PATH}.model_path", "sac_mlp starts from random weights (a run resumes from its "
                          "checkpoint with runner.resume_dir); remove it")
    for key in ("init_log_std", "value_type", "shared_critic_encoder", "use_proprio", "unnorm_key", "center_crop",
                "hidden_size", "image_size", "vocab_size"):
        default = field_default(next(f for f in dataclasses.fields(PolicyModelConfig) if f.name == key))
        if getattr(p, key) != default:
            raise ConfigError(f"{PATH}.{key}", "sac_mlp does not read it (its log-std is learned within [-5, 2], "
                              "its critic is the Q ensemble); remove it")
    low, high = obs.bounds(action_dim)
    sizes = sac_network_sizes(cfg)
    policy = SACActorPolicy(obs.state_dim, action_dim, hidden_sizes=sizes["hidden_sizes"], action_low=low,
                            action_high=high)
    policy.do_sample = p.do_sample
    return policy


def check_model_folder(model_cfg: ActorModelConfig | Mapping[str, Any]) -> None:
    """The checks of the model folder that need no env, for the preflight to run before it asks the
    simulators (π0 / π0.5: the layout, the weights' model type, the statistics, the action sizes
    against the padded width; from metadata only). Other model types: nothing.

    Raises:
        ConfigError: naming the ``actor.model`` key at fault.
    """
    cfg = model_cfg if isinstance(model_cfg, ActorModelConfig) else parse_section(ActorModelConfig, model_cfg, PATH)
    model_type = (cfg.model_type or "").lower()
    if model_type in PI0_TYPES:
        from rlinf.models.embodied.pi0.build import plan_from_config  # lazy: the pi0 package (~0.3 s)

        _no_flow_keys(cfg, model_type)
        check_noise_schedule(cfg)
        plan_from_config(cfg, model_type)


def _no_flow_keys(cfg: ActorModelConfig, model_type: str) -> None:
    """Refuses a πRL key (or a π0 key) set away from its default for a policy that does not read it."""
    groups = ((FLOW_KEYS, ("flow_mlp",) + PI0_TYPES), (PI0_KEYS, PI0_TYPES), (FLOW_MLP_KEYS, ("flow_mlp",)))
    for keys, readers in groups:
        if model_type in readers:
            continue
        for key in keys:
            if getattr(cfg.policy, key) != field_default(_policy_field(key)):
                raise ConfigError(f"{PATH}.{key}", f"only model_type {', '.join(readers)} read it, not "
                                  f"{model_type}; remove it")


def check_noise_schedule(cfg: ActorModelConfig) -> None:
    """``noise_anneal`` / ``noise_params`` (the flow policies' Flow-SDE schedule): three values,
    levels > 0, an integer number of steps; flow_sde only; ``noise_level`` left at its default
    beside the schedule; ``noise_params`` away from RLinf's default only with ``noise_anneal``."""
    p = cfg.policy
    params = tuple(p.noise_params)
    if len(params) != 3 or not all(math.isfinite(v) for v in params) or min(params[:2]) <= 0:
        raise ConfigError(f"{PATH}.noise_params", f"must be [start, end, anneal_steps] with levels > 0, "
                          f"got {list(params)}")
    if params[2] < 1 or not float(params[2]).is_integer():
        raise ConfigError(f"{PATH}.noise_params", f"anneal_steps (the third value) must be an integer >= 1, "
                          f"got {params[2]}")
    if not p.noise_anneal:
        if params != field_default(_policy_field("noise_params")):
            raise ConfigError(f"{PATH}.noise_params", "has no effect without noise_anneal: true")
        return
    if p.noise_method != "flow_sde":
        raise ConfigError(f"{PATH}.noise_anneal", "anneals the Flow-SDE noise level; flow_noise learns its std "
                          "(noise_logvar_range)")
    if p.noise_level != field_default(_policy_field("noise_level")):
        raise ConfigError(f"{PATH}.noise_level", "noise_anneal replaces it by noise_params' schedule; remove one "
                          "of the two")


def _policy_field(name: str) -> dataclasses.Field:
    return next(f for f in dataclasses.fields(PolicyModelConfig) if f.name == name)


def _build_flow(cfg: ActorModelConfig, obs: ObsSpec) -> EmbodiedPolicy:
    # lazy: flow_policy pulls rlinf.algorithms.flow_logprob (~0.3 s); only model_type flow_mlp
    from rlinf.models.embodied.flow_policy import FlowPolicy, FlowPolicyConfig

    _no_lora(cfg, "flow_mlp")
    p = cfg.policy
    action_dim = _require(p.action_dim, "action_dim", "model_type flow_mlp")
    if obs.state_dim < 1:
        raise ConfigError(f"{PATH}.model_type", "flow_mlp needs state observations (obs_spec.state_dim >= 1)")
    chunks = p.num_action_chunks or 1
    if p.action_chunk is not None and p.action_chunk != chunks:
        raise ConfigError(f"{PATH}.action_chunk", f"{p.action_chunk}: flow_mlp executes its whole chunk, so it "
                          f"must equal num_action_chunks ({chunks}) or be null")
    if _value_type(cfg) != "chunk_level":
        raise ConfigError(f"{PATH}.value_type", "flow_mlp has one value per chunk: chunk_level")
    rng = tuple(p.noise_logvar_range)
    if len(rng) != 2 or not 0 < rng[0] <= rng[1]:
        raise ConfigError(f"{PATH}.noise_logvar_range", f"must be [min_std, max_std] with 0 < min_std <= max_std, "
                          f"got {list(rng)}")
    if p.ignore_last and p.num_steps < 2:
        raise ConfigError(f"{PATH}.ignore_last", "needs num_steps >= 2 (one step besides the last to sample)")
    if p.detach_critic_input and not p.shared_critic_encoder:
        raise ConfigError(f"{PATH}.detach_critic_input", "with shared_critic_encoder false the critic has its own "
                          "network on the state, so there is no encoder to detach; remove one of the two")
    low, high = obs.bounds(action_dim)
    hidden = p.policy_hidden_sizes or (256, 256)
    config = FlowPolicyConfig(
        state_dim=obs.state_dim, action_dim=action_dim, num_action_chunks=chunks,
        encoder_sizes=(p.hidden_size or 256,) * 2, hidden_sizes=hidden,
        critic_hidden_sizes=p.critic_hidden_sizes or hidden, num_steps=p.num_steps, noise_method=p.noise_method,
        noise_level=p.noise_level, noise_anneal=p.noise_anneal, noise_params=p.noise_schedule(),
        noise_logvar_range=tuple(p.noise_logvar_range), joint_logprob=p.joint_logprob,
        ignore_last=p.ignore_last, add_value_head=p.add_value_head, detach_critic_input=p.detach_critic_input,
        separate_critic=not p.shared_critic_encoder, residual_velocity=p.residual_velocity,
        action_low=tuple(low.tolist()), action_high=tuple(high.tolist()))
    policy = _load_or_build(FlowPolicy, config, cfg.model_path)
    policy.do_sample = p.do_sample
    return policy


def _build_cnn(cfg: ActorModelConfig, obs: ObsSpec) -> EmbodiedPolicy:
    _no_lora(cfg, "cnn")
    action_dim = _require(cfg.policy.action_dim, "action_dim", "model_type cnn")
    if obs.image_shape is None:
        raise ConfigError(f"{PATH}.model_type", "cnn needs camera images (obs_spec.image_shape)")
    if cfg.policy.num_images_in_input not in (1, 2):
        raise ConfigError(f"{PATH}.num_images_in_input", f"must be 1 or 2, got {cfg.policy.num_images_in_input}")
    if cfg.policy.num_images_in_input == 2 and not obs.has_wrist:
        raise ConfigError(f"{PATH}.num_images_in_input", "2 needs a wrist camera (obs_spec.has_wrist)")
    if cfg.policy.use_proprio and obs.state_dim < 1:
        raise ConfigError(f"{PATH}.use_proprio", "the env gives no state (obs_spec.state_dim = 0)")
    low, high = obs.bounds(action_dim)
    config = CNNPolicyConfig(
        action_dim=action_dim, num_action_chunks=cfg.policy.num_action_chunks or 1,
        image_size=_image_size(cfg, (64, 64)), num_images=cfg.policy.num_images_in_input,
        state_dim=obs.state_dim if cfg.policy.use_proprio else 0, feature_dim=cfg.policy.hidden_size or 256,
        hidden_sizes=cfg.policy.policy_hidden_sizes or (256,), critic_hidden_sizes=cfg.policy.critic_hidden_sizes,
        shared_encoder=cfg.policy.shared_critic_encoder,
        center_crop=cfg.policy.center_crop, init_log_std=cfg.policy.init_log_std, value_type=_value_type(cfg),
        add_value_head=cfg.policy.add_value_head, action_low=tuple(low.tolist()), action_high=tuple(high.tolist()))
    try:
        policy = _load_or_build(CNNPolicy, config, cfg.model_path)
    except ValueError as err:
        if isinstance(err, ConfigError):
            raise
        raise ConfigError(f"{PATH}.image_size", str(err)) from None
    policy.do_sample = cfg.policy.do_sample
    return policy


def _adapter_rank(lora_path: str | None) -> int | None:
    """``r`` of the PEFT ``adapter_config.json`` in ``lora_path`` (None when there is none to read;
    :func:`enable_lora` then reports the folder)."""
    if lora_path is None:
        return None
    try:
        return int(json.loads((Path(lora_path) / "adapter_config.json").read_text())["r"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _build_openvla(cfg: ActorModelConfig, obs: ObsSpec, temperature: float, model_type: str) -> EmbodiedPolicy:
    # lazy: the openvla package (~0.3 s of modules) only for the openvla types
    from rlinf.models.embodied.openvla import CheckpointError, OpenVLAOptions, enable_lora, load_openvla

    model_path = _openvla_precheck(cfg, obs, model_type)
    action_dim = cfg.policy.action_dim or 7
    options = OpenVLAOptions(
        model_type=model_type, action_dim=action_dim, num_action_chunks=cfg.policy.num_action_chunks or 1,
        unnorm_key=cfg.policy.unnorm_key, value_type=_value_type(cfg), add_value_head=cfg.policy.add_value_head,
        use_proprio=cfg.policy.use_proprio, proprio_dim=obs.state_dim if cfg.policy.use_proprio else None,
        num_images_in_input=cfg.policy.num_images_in_input, center_crop=cfg.policy.center_crop, temperature=temperature)
    try:
        policy = load_openvla(model_path, options, dtype=getattr(torch, _DTYPES[cfg.precision]),
                              attn_implementation=cfg.attn_implementation)
    except CheckpointError as err:
        raise ConfigError(f"{PATH}.model_path", str(err)) from None
    except KeyError as err:
        raise ConfigError(f"{PATH}.unnorm_key", str(err.args[0])) from None
    stats = policy.action_stats()
    if stats is not None and len(stats["q01"]) != action_dim:
        raise ConfigError(f"{PATH}.action_dim", f"{action_dim} does not match the checkpoint's statistics "
                          f"({len(stats['q01'])} values for {policy.unnorm_key!r})")
    text = policy.language_model.config
    if cfg.policy.hidden_size is not None and cfg.policy.hidden_size != text.hidden_size:
        raise ConfigError(f"{PATH}.hidden_size", f"{cfg.policy.hidden_size} does not match the checkpoint "
                          f"({text.hidden_size})")
    # seed 003 writes the tokenizer's vocabulary (Llama-2: 32000); the LM's padded size (32064) is
    # accepted as well
    vocabs = (policy.tokens.base_vocab, text.vocab_size)
    if cfg.policy.vocab_size is not None and cfg.policy.vocab_size not in vocabs:
        raise ConfigError(f"{PATH}.vocab_size", f"{cfg.policy.vocab_size} does not match the checkpoint "
                          f"({vocabs[0]} tokens, {vocabs[1]} with padding)")
    size = (policy.vision_backbone.image_size,) * 2
    if cfg.policy.image_size and _image_size(cfg, size) != size:
        raise ConfigError(f"{PATH}.image_size", f"{list(cfg.policy.image_size)} does not match the checkpoint's "
                          f"vision towers ({list(size)})")
    try:
        low, high = obs.bounds(action_dim)
    except ValueError as err:
        raise ConfigError(f"{PATH}.action_dim", f"{err} (the env's action space)") from None
    if obs.action_low is not None or obs.action_high is not None:
        policy.set_action_bounds(low.tolist(), high.tolist())
    policy.do_sample = cfg.policy.do_sample
    if cfg.gradient_checkpointing:
        policy.language_model.gradient_checkpointing_enable()
    if cfg.is_lora:
        adapter_rank = _adapter_rank(cfg.lora_path)
        if adapter_rank is not None and adapter_rank != cfg.lora_rank:
            raise ConfigError(f"{PATH}.lora_rank", f"{cfg.lora_rank} differs from the rank of the adapter in "
                              f"lora_path ({adapter_rank}); set lora_rank: {adapter_rank}")
        try:
            enable_lora(policy, rank=cfg.lora_rank, lora_path=cfg.lora_path)
        except (OSError, ValueError) as err:
            raise ConfigError(f"{PATH}.lora_path" if cfg.lora_path else f"{PATH}.is_lora", str(err)) from None
    policy.train()
    return policy
