"""``actor:`` — the trained policy: model, optimizer, LR schedule, FSDP / Megatron settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from rlinf.config.rollout import ChannelRef
from rlinf.utils.typed_config import check

Dtype = Literal["fp32", "fp16", "bf16", "float32", "float16", "bfloat16"]


@dataclass(frozen=True)
class ActorModelConfig:
    """``actor.model``: the HF checkpoint, plus the reference's Megatron model keys.

    The Megatron keys (``tensor_model_parallel_size`` ... ``moe_token_dispatcher_type``) are read
    by the Megatron backend only; the FSDP backend ignores them. Embodied keys (``action_dim``,
    ``num_action_chunks``, ...) are read by embodied policies.
    """

    model_path: str | None = None
    megatron_checkpoint: str | None = None
    model_type: str | None = None
    precision: Dtype = "fp32"
    add_bias_linear: bool = False
    add_qkv_bias: bool = True
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    activation: str = "swiglu"
    sequence_parallel: bool = False
    recompute_method: str | None = None
    recompute_granularity: str | None = None
    recompute_num_layers: int | None = None
    seq_length: int | None = None
    encoder_seq_length: int | None = None
    normalization: str = "rmsnorm"
    position_embedding_type: str = "rope"
    apply_rope_fusion: bool = False
    bias_dropout_fusion: bool = False
    persist_layer_norm: bool = False
    bias_activation_fusion: bool = False
    attention_softmax_in_fp32: bool = True
    batch_p2p_comm: bool = False
    variable_seq_lengths: bool = True
    gradient_accumulation_fusion: bool = False
    moe_token_dispatcher_type: str = "alltoall"
    use_cpu_initialization: bool = False
    gradient_checkpointing: bool = False
    # embodied policies
    action_dim: int | None = None
    num_action_chunks: int | None = None
    use_proprio: bool = False
    unnorm_key: str | None = None
    value_type: str | None = None
    val_micro_batch_size: int | None = None
    center_crop: bool = False
    do_sample: bool = False
    vocab_size: int | None = None
    hidden_size: int | None = None
    policy_setup: str | None = None
    image_size: tuple[int, ...] = ()
    is_lora: bool = False
    lora_rank: int = 32
    lora_path: str | None = None
    num_images_in_input: int = 1
    attn_implementation: str | None = None
    low_cpu_mem_usage: bool = True
    trust_remote_code: bool = False


@dataclass(frozen=True)
class OptimConfig:
    """``actor.optim``."""

    optimizer: Literal["adam", "adamw"] = "adam"
    bf16: bool = False
    fp16: bool = False
    lr: float = 1e-6
    value_lr: float | None = None
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    min_lr: float = 0.0
    weight_decay: float = 0.0
    use_distributed_optimizer: bool = False
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    optimizer_enable_pin: bool = False
    overlap_param_gather_with_optimizer_step: bool = False
    clip_grad: float = 1.0
    loss_scale_window: int = 1000

    def validate(self, path: str) -> None:
        check(self.lr > 0, f"{path}.lr", f"must be > 0, got {self.lr}")
        check(self.clip_grad >= 0, f"{path}.clip_grad", f"must be >= 0 (0 = off), got {self.clip_grad}")
        check(not (self.bf16 and self.fp16), f"{path}.fp16", "set at most one of bf16 / fp16")


@dataclass(frozen=True)
class LrSchedConfig:
    """``actor.lr_sched``: warm-up then decay (constant, linear or cosine)."""

    lr_warmup_fraction: float = 0.0
    lr_warmup_init: float = 0.0
    lr_warmup_iters: int = 0
    max_lr: float | None = None
    min_lr: float | None = None
    lr_decay_style: Literal["constant", "linear", "cosine"] = "constant"
    lr_decay_iters: int | None = None

    def validate(self, path: str) -> None:
        check(0 <= self.lr_warmup_fraction < 1, f"{path}.lr_warmup_fraction",
              f"must be in [0, 1), got {self.lr_warmup_fraction}")


@dataclass(frozen=True)
class TokenizerConfig:
    """``actor.tokenizer``: where the tokenizer lives (default: the model folder)."""

    tokenizer_model: str | None = None
    tokenizer_type: str = "HuggingFaceTokenizer"
    extra_vocab_size: int = 0
    use_fast: bool = True
    trust_remote_code: bool = False
    padding_side: Literal["left", "right"] = "right"


@dataclass(frozen=True)
class MixedPrecisionConfig:
    """``actor.fsdp_config.mixed_precision``."""

    param_dtype: Dtype = "fp32"
    reduce_dtype: Dtype = "fp32"
    buffer_dtype: Dtype = "fp32"


@dataclass(frozen=True)
class AmpConfig:
    """``actor.fsdp_config.amp_autocast``."""

    enabled: bool = False
    precision: Dtype = "bf16"


@dataclass(frozen=True)
class GradScalerConfig:
    """``actor.fsdp_config.grad_scaler``."""

    enabled: bool = False
    init_scale: float = 65536.0
    growth_interval: int = 2000


@dataclass(frozen=True)
class FsdpConfig:
    """``actor.fsdp_config`` (FSDP2 through ``fully_shard``; ``strategy: fsdp`` is accepted and
    runs the same FSDP2 path)."""

    strategy: str = "fsdp2"
    sharding_strategy: Literal["full_shard", "shard_grad_op", "hybrid_shard", "no_shard"] = "full_shard"
    cpu_offload: bool = False
    offload_pin_memory: bool = False
    reshard_after_forward: bool = True
    enable_gradient_accumulation: bool = True
    forward_prefetch: bool = False
    limit_all_gathers: bool = False
    backward_prefetch: Literal["pre", "post"] | None = None
    use_orig_params: bool = True
    use_liger_kernel: bool = False
    fsdp_size: int = -1
    mixed_precision: MixedPrecisionConfig = field(default_factory=MixedPrecisionConfig)
    amp_autocast: AmpConfig = field(default_factory=AmpConfig)
    grad_scaler: GradScalerConfig = field(default_factory=GradScalerConfig)

    def validate(self, path: str) -> None:
        check(self.strategy.lower() in ("fsdp", "fsdp2"), f"{path}.strategy",
              f"expected fsdp or fsdp2, got {self.strategy!r}")


@dataclass(frozen=True)
class MegatronConfig:
    """``actor.megatron`` (read by the Megatron backend; see its guide)."""

    ddp_bucket_size: int | None = None
    distributed_backend: Literal["nccl", "gloo"] = "nccl"
    distributed_timeout_minutes: int = 30
    ckpt_format: str = "torch"
    use_dist_ckpt: bool = False
    tp_comm_bootstrap_backend: str = "nccl"
    tp_comm_overlap_cfg: str | None = None
    use_hf_ckpt: bool = False
    ckpt: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ActorConfig:
    """``actor``.

    Attributes:
        group_name: worker group name.
        training_backend: fsdp or megatron.
        seed: init / dropout seed.
        offload_optimizer, offload_weight, offload_grad: offload between phases when collocated.
        enable_offload: embodied spelling of "offload everything between phases".
        micro_batch_size, global_batch_size: embodied batch sizes.
        mcore_gpt, spec_name, enable_dp_load_balance, calculate_flops: Megatron / bookkeeping keys.
        model, optim, lr_sched, tokenizer, fsdp_config, megatron, channel: sub-sections.
    """

    group_name: str = "ActorGroup"
    training_backend: Literal["fsdp", "megatron"] = "fsdp"
    seed: int = 1234
    offload_optimizer: bool = False
    offload_weight: bool = False
    offload_grad: bool = False
    enable_offload: bool = False
    micro_batch_size: int | None = None
    global_batch_size: int | None = None
    mcore_gpt: bool = True
    spec_name: str = "decoder_gpt"
    enable_dp_load_balance: bool = False
    calculate_flops: bool = False
    model: ActorModelConfig = field(default_factory=ActorModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    lr_sched: LrSchedConfig = field(default_factory=LrSchedConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    fsdp_config: FsdpConfig = field(default_factory=FsdpConfig)
    megatron: MegatronConfig = field(default_factory=MegatronConfig)
    channel: ChannelRef = field(default_factory=ChannelRef)
