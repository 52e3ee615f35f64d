"""``build_policy``: ``actor.model`` + what the env provides -> an :class:`EmbodiedPolicy`.

Keys read per ``actor.model.model_type``:

* ``mlp`` (state observations): action_dim, num_action_chunks, value_type, add_value_head,
  policy_hidden_sizes, critic_hidden_sizes, init_log_std; ``obs_spec.state_dim`` sizes the input.
* ``cnn`` (camera images): the same plus image_size (resize target, default 64 x 64), center_crop,
  hidden_size (feature width, default 256), shared_critic_encoder, use_proprio (also feed the
  state), num_images_in_input (2 = main + wrist camera).
* ``openvla_oft``: model_path (a folder written by ``toolkits/embodied/make_tiny_vla.py`` or
  ``OpenVLAOFTPolicy.save_pretrained``; required), precision, attn_implementation, unnorm_key,
  value_type, center_crop, num_images_in_input, do_sample, gradient_checkpointing, is_lora,
  lora_rank, lora_path; action_dim, num_action_chunks, use_proprio, image_size, hidden_size and
  vocab_size, when set, must match the folder.

mlp / cnn: with model_path set, the weights come from a folder their ``save_pretrained`` wrote;
they always run in fp32 (``precision`` applies to openvla_oft). ``do_sample`` is exposed as
``policy.do_sample``; ``act(deterministic=...)`` alone decides whether a call samples.

Example:
    >>> from rlinf.config.actor import ActorModelConfig
    >>> cfg = ActorModelConfig(model_type="mlp", action_dim=2, num_action_chunks=3,
    ...                        policy_hidden_sizes=(16,))
    >>> policy = build_policy(cfg, ObsSpec(state_dim=5))
    >>> type(policy).__name__, policy.num_action_chunks
    ('MLPPolicy', 3)
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping

from rlinf.config.actor import ActorModelConfig
from rlinf.models.embodied.base import EmbodiedPolicy, ObsSpec, check_value_type
from rlinf.utils.typed_config import ConfigError, parse_section

PATH = "actor.model"
MODEL_TYPES = ("mlp", "cnn", "openvla_oft")

_DTYPES = {"fp32": "float32", "float32": "float32", "fp16": "float16", "float16": "float16",
           "bf16": "bfloat16", "bfloat16": "bfloat16"}


def _require(value: Any, key: str, what: str) -> Any:
    if value is None:
        raise ConfigError(f"{PATH}.{key}", f"required for {what}")
    return value


def _value_type(cfg: ActorModelConfig) -> str:
    try:
        return check_value_type(cfg.value_type)
    except ValueError as err:
        raise ConfigError(f"{PATH}.value_type", str(err)) from None


def _image_size(cfg: ActorModelConfig, default: tuple[int, int]) -> tuple[int, int]:
    size = tuple(cfg.image_size)
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
    if model_type == "mlp":
        return _build_mlp(cfg, obs_spec)
    if model_type == "cnn":
        return _build_cnn(cfg, obs_spec)
    if model_type == "openvla_oft":
        return _build_openvla_oft(cfg, obs_spec, temperature)
    raise ConfigError(f"{PATH}.model_type", f"embodied policies are {', '.join(MODEL_TYPES)}; got {cfg.model_type!r}")


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
    from rlinf.models.embodied.mlp_policy import MLPPolicy, MLPPolicyConfig

    _no_lora(cfg, "mlp")
    action_dim = _require(cfg.action_dim, "action_dim", "model_type mlp")
    if obs.state_dim < 1:
        raise ConfigError(f"{PATH}.model_type", "mlp needs state observations (obs_spec.state_dim >= 1)")
    low, high = obs.bounds(action_dim)
    config = MLPPolicyConfig(
        state_dim=obs.state_dim, action_dim=action_dim, num_action_chunks=cfg.num_action_chunks or 1,
        hidden_sizes=cfg.policy_hidden_sizes or (256, 256, 256), critic_hidden_sizes=cfg.critic_hidden_sizes,
        init_log_std=cfg.init_log_std, value_type=_value_type(cfg), add_value_head=cfg.add_value_head,
        action_low=tuple(low.tolist()), action_high=tuple(high.tolist()))
    policy = _load_or_build(MLPPolicy, config, cfg.model_path)
    policy.do_sample = cfg.do_sample
    return policy


def _build_cnn(cfg: ActorModelConfig, obs: ObsSpec) -> EmbodiedPolicy:
    from rlinf.models.embodied.cnn_policy import CNNPolicy, CNNPolicyConfig

    _no_lora(cfg, "cnn")
    action_dim = _require(cfg.action_dim, "action_dim", "model_type cnn")
    if obs.image_shape is None:
        raise ConfigError(f"{PATH}.model_type", "cnn needs camera images (obs_spec.image_shape)")
    if cfg.num_images_in_input not in (1, 2):
        raise ConfigError(f"{PATH}.num_images_in_input", f"must be 1 or 2, got {cfg.num_images_in_input}")
    if cfg.num_images_in_input == 2 and not obs.has_wrist:
        raise ConfigError(f"{PATH}.num_images_in_input", "2 needs a wrist camera (obs_spec.has_wrist)")
    if cfg.use_proprio and obs.state_dim < 1:
        raise ConfigError(f"{PATH}.use_proprio", "the env gives no state (obs_spec.state_dim = 0)")
    low, high = obs.bounds(action_dim)
    config = CNNPolicyConfig(
        action_dim=action_dim, num_action_chunks=cfg.num_action_chunks or 1,
        image_size=_image_size(cfg, (64, 64)), num_images=cfg.num_images_in_input,
        state_dim=obs.state_dim if cfg.use_proprio else 0, feature_dim=cfg.hidden_size or 256,
        hidden_sizes=cfg.policy_hidden_sizes or (256,), critic_hidden_sizes=cfg.critic_hidden_sizes,
        shared_encoder=cfg.shared_critic_encoder,
        center_crop=cfg.center_crop, init_log_std=cfg.init_log_std, value_type=_value_type(cfg),
        add_value_head=cfg.add_value_head, action_low=tuple(low.tolist()), action_high=tuple(high.tolist()))
    try:
        policy = _load_or_build(CNNPolicy, config, cfg.model_path)
    except ValueError as err:
        if isinstance(err, ConfigError):
            raise
        raise ConfigError(f"{PATH}.image_size", str(err)) from None
    policy.do_sample = cfg.do_sample
    return policy


def _build_openvla_oft(cfg: ActorModelConfig, obs: ObsSpec, temperature: float) -> EmbodiedPolicy:
    import torch

    from rlinf.models.embodied.openvla_oft.modeling import OpenVLAOFTPolicy

    model_path = _require(cfg.model_path, "model_path", "model_type openvla_oft (a saved VLA folder)")
    if not (Path(model_path) / "config.json").is_file():
        raise ConfigError(f"{PATH}.model_path", f"{model_path!r} is not a model folder (no config.json); "
                          "write one with toolkits/embodied/make_tiny_vla.py or save_pretrained")
    kwargs: dict[str, Any] = {"dtype": getattr(torch, _DTYPES[cfg.precision])}
    if cfg.attn_implementation:
        kwargs["attn_implementation"] = cfg.attn_implementation
    try:
        policy = OpenVLAOFTPolicy.from_pretrained(model_path, **kwargs)
    except (OSError, ValueError) as err:
        raise ConfigError(f"{PATH}.model_path",
                          f"cannot load an openvla_oft model from {model_path!r}: {err}") from None
    mc = policy.config
    for key, have in (("action_dim", mc.action_dim), ("num_action_chunks", mc.num_action_chunks),
                      ("hidden_size", mc.text_config.hidden_size), ("vocab_size", mc.text_config.vocab_size)):
        want = getattr(cfg, key)
        if want is not None and want != have:
            raise ConfigError(f"{PATH}.{key}", f"{want} does not match the model folder ({have})")
    if cfg.use_proprio != mc.use_proprio:
        raise ConfigError(f"{PATH}.use_proprio",
                          f"{cfg.use_proprio} does not match the model folder ({mc.use_proprio})")
    if cfg.use_proprio and obs.state_dim != mc.proprio_dim:
        raise ConfigError(f"{PATH}.use_proprio",
                          f"the model reads {mc.proprio_dim} state values, the env gives {obs.state_dim}")
    size = tuple(mc.vision_config.image_size) if not isinstance(mc.vision_config.image_size, int) else (
        mc.vision_config.image_size,) * 2
    if cfg.image_size and _image_size(cfg, size) != size:
        raise ConfigError(f"{PATH}.image_size",
                          f"{list(cfg.image_size)} does not match the model's vision tower ({list(size)})")
    if cfg.num_images_in_input not in (1, 2):
        raise ConfigError(f"{PATH}.num_images_in_input", f"must be 1 or 2, got {cfg.num_images_in_input}")
    if cfg.num_images_in_input == 2 and not obs.has_wrist:
        raise ConfigError(f"{PATH}.num_images_in_input", "2 needs a wrist camera (obs_spec.has_wrist)")
    if cfg.add_value_head and not mc.add_value_head:
        raise ConfigError(f"{PATH}.add_value_head", "the model folder has no value head")
    policy.use_value_head = cfg.add_value_head
    mc.num_images_in_input = cfg.num_images_in_input
    mc.center_crop = cfg.center_crop
    mc.value_type = policy.value_type = _value_type(cfg)
    policy.temperature = float(temperature)
    policy.do_sample = cfg.do_sample
    policy.unnorm_key = cfg.unnorm_key
    try:
        policy.action_norm_stats()
    except KeyError as err:
        raise ConfigError(f"{PATH}.unnorm_key", str(err.args[0])) from None
    if obs.action_low is not None or obs.action_high is not None:
        policy.set_action_bounds(obs.action_low, obs.action_high)
    if cfg.gradient_checkpointing:
        policy.gradient_checkpointing_enable()
    if cfg.is_lora:
        policy.enable_lora(rank=cfg.lora_rank, lora_path=cfg.lora_path)
    elif cfg.lora_path is not None:
        raise ConfigError(f"{PATH}.lora_path", "set is_lora: true to load a LoRA adapter")
    policy.train()
    return policy
