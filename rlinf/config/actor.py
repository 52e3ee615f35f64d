"""``actor:`` — the trained policy: model, optimizer, LR schedule, FSDP / Megatron settings."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from rlinf.config.backends import (  # noqa: F401 - re-exported: actor.fsdp_config / actor.megatron
    AmpConfig,
    Dtype,
    FsdpConfig,
    GradScalerConfig,
    MegatronCkptConfig,
    MegatronConfig,
    MixedPrecisionConfig,
)
from rlinf.config.rollout import ChannelRef
from rlinf.utils.typed_config import check, rule


@dataclass(frozen=True)
class ActorModelConfig:
    """``actor.model``: the HF checkpoint, plus the reference's Megatron model keys.

    The Megatron keys (``megatron_checkpoint``, ``tensor_model_parallel_size`` ...
    ``use_cpu_initialization``) are read by the Megatron backend only (docs/megatron_backend.md);
    the FSDP backend ignores them. With ``training_backend: megatron`` the cross-key rules are
    checked once by :meth:`ActorConfig.validate`. Embodied keys (``action_dim``,
    ``num_action_chunks``, ...) are read by embodied policies.

    Attributes:
        model_path: local HF model folder the policy starts from; null = rollout.model.model_path
            (one of the two must be set). Megatron reads its config, and converts its weights
            when actor.megatron.use_hf_ckpt is true.
        megatron_checkpoint: Megatron: a converted checkpoint folder (the converter's layout, same
            tensor / pipeline sizes) to start from instead of converting model_path.
        model_type: math runs: architecture tag as the reference writes it (qwen2.5, llama ...),
            checked before start against the folder's ``config.json``; embodied runs: the policy
            (mlp, cnn, openvla, openvla_oft).
        precision: dtype of the loaded (master) weights. Megatron: dtype of the model weights;
            bf16 / fp16 need the matching actor.optim.bf16 / fp16 (fp32 main weights in the
            optimizer).
        add_bias_linear: Megatron: biases in the linear layers (must match the HF architecture).
        add_qkv_bias: Megatron: biases on the query / key / value projections; null = the HF
            architecture's (Qwen2 true, Llama and Qwen3 false); when set it must match it (checked
            when the engine reads the HF config).
        tensor_model_parallel_size: Megatron: tensor-parallel size (>= 1; divides the attention
            heads and the key-value heads).
        pipeline_model_parallel_size: Megatron: pipeline-parallel size (>= 1; at most the number
            of layers).
        activation: Megatron: MLP activation (must match the HF architecture; silu-gated = swiglu).
        sequence_parallel: Megatron: sequence parallelism; ignored at tensor_model_parallel_size
            1 (as in Megatron-LM); not supported above 1 (megatron-core's local layer spec, which
            this backend builds, has no sequence-parallel RMSNorm).
        recompute_method: Megatron: activation recomputation method (uniform or block); needed by
            recompute_granularity full.
        recompute_granularity: Megatron: activation recomputation granularity (full or selective);
            null = off.
        recompute_num_layers: Megatron: layers recomputed per stage (block) or per chunk
            (uniform); >= 1 with full, null with selective.
        seq_length: Megatron: longest prompt + response a micro-batch may hold (the reference sets
            ``${runner.seq_length}``); null = no limit (rotary embeddings need none).
        encoder_seq_length: Megatron: encoder length of encoder-decoder models; the backend builds
            decoder-only GPTs, so only null or seq_length (as the reference writes it) is accepted.
        normalization: Megatron: normalisation layer (must match the HF architecture).
        position_embedding_type: Megatron: position embeddings (must match the HF architecture).
        apply_rope_fusion: Megatron: fused RoPE kernel (needs Transformer Engine or apex).
        bias_dropout_fusion: Megatron: fuse bias add and dropout.
        persist_layer_norm: Megatron: persistent fused layer-norm kernel (needs apex).
        bias_activation_fusion: Megatron: fuse bias add and activation.
        attention_softmax_in_fp32: Megatron: attention softmax in fp32.
        batch_p2p_comm: Megatron: batch the pipeline send / receive operations.
        variable_seq_lengths: Megatron, pipeline_model_parallel_size > 1: stages exchange each
            micro-batch's shape; false pads every micro-batch of a pass to one shape.
        gradient_accumulation_fusion: Megatron: fused weight-gradient accumulation (needs apex or
            Transformer Engine).
        moe_token_dispatcher_type: Megatron: MoE token dispatcher (MoE models only).
        use_cpu_initialization: Megatron: initialise weights on the CPU before loading.
        gradient_checkpointing: recompute activations in the backward pass (HF gradient
            checkpointing).
        action_dim: embodied: action dimensions.
        num_action_chunks: embodied: actions predicted per step (action chunk length).
        use_proprio: embodied: feed proprioceptive state to the policy.
        unnorm_key: embodied: dataset statistics used to un-normalise actions.
        value_type: embodied: level of the value head's estimates (per action or per chunk).
        val_micro_batch_size: embodied: largest batch of one rollout-worker forward pass (envs
            per policy call are split into chunks of this size); null = all at once.
        center_crop: embodied: centre-crop input images.
        do_sample: embodied: sample actions (else greedy).
        vocab_size: embodied: the policy's vocabulary size.
        hidden_size: embodied: the policy's hidden size (openvla_oft: checked against the model
            folder's LM width; cnn: width of the image / state features, null = 256).
        policy_setup: embodied: SimplerEnv's robot setup (widowx_bridge, google_robot); the
            simulators here define their robots themselves, so it is only recorded (noted at start).
        image_size: embodied: input image size.
        is_lora: train LoRA adapters instead of the full weights (math: FSDP2 actors, PEFT layers
            on lora_target_modules, everything else frozen, only the adapter in the optimizer;
            weight sync and the HF export send merged weights; checkpoints also hold the adapter
            in PEFT's layout. Embodied: openvla_oft, RLinf's adapter layout).
        lora_rank: LoRA rank r.
        lora_path: a PEFT LoRA adapter folder to start from (its rank, alpha and targets win).
        lora_alpha: math: LoRA alpha (the update is scaled by alpha / r); null = lora_rank.
        lora_target_modules: math: names (last dotted part) of the Linear layers that get LoRA.
        num_images_in_input: embodied: images per observation.
        attn_implementation: HF ``attn_implementation`` (e.g. sdpa, flash_attention_2); null = the
            model's default.
        low_cpu_mem_usage: HF ``low_cpu_mem_usage`` when loading an HF checkpoint (LLM actor,
            reference and rollout models).
        trust_remote_code: allow custom modelling code from the model folder.
        policy_hidden_sizes: embodied mlp / cnn: widths of the actor's hidden layers; null = the
            policy's default (mlp: 256, 256, 256; cnn: 256).
        critic_hidden_sizes: embodied mlp / cnn: widths of the critic's hidden layers; null =
            policy_hidden_sizes.
        init_log_std: embodied mlp / cnn: initial log standard deviation of the Gaussian actions.
        shared_critic_encoder: embodied cnn: the critic reads the actor's image encoder (else it
            has its own).
        add_value_head: embodied: build a value head (actor-critic, PPO); false for critic-free
            algorithms (GRPO), then values are null.
    """

    model_path: str | None = None
    megatron_checkpoint: str | None = rule(None, scope="megatron")
    model_type: str | None = None
    precision: Dtype = "fp32"
    add_bias_linear: bool = rule(False, scope="megatron")
    add_qkv_bias: bool | None = rule(None, scope="megatron")
    tensor_model_parallel_size: int = rule(1, scope="megatron")
    pipeline_model_parallel_size: int = rule(1, scope="megatron")
    activation: Literal["swiglu", "gelu", "squared_relu"] = rule("swiglu", scope="megatron")
    sequence_parallel: bool = rule(False, scope="megatron")
    recompute_method: Literal["uniform", "block"] | None = rule(None, scope="megatron")
    recompute_granularity: Literal["full", "selective"] | None = rule(None, scope="megatron")
    recompute_num_layers: int | None = rule(None, scope="megatron")
    seq_length: int | None = rule(None, scope="megatron")
    encoder_seq_length: int | None = rule(None, scope="megatron")
    normalization: Literal["rmsnorm", "RMSNorm", "layernorm", "LayerNorm"] = rule("rmsnorm", scope="megatron")
    position_embedding_type: Literal["rope", "learned_absolute", "none"] = rule("rope", scope="megatron")
    apply_rope_fusion: bool = rule(False, scope="megatron")
    bias_dropout_fusion: bool = rule(False, scope="megatron")
    persist_layer_norm: bool = rule(False, scope="megatron")
    bias_activation_fusion: bool = rule(False, scope="megatron")
    attention_softmax_in_fp32: bool = rule(True, scope="megatron")
    batch_p2p_comm: bool = rule(False, scope="megatron")
    variable_seq_lengths: bool = rule(True, scope="megatron")
    gradient_accumulation_fusion: bool = rule(False, scope="megatron")
    moe_token_dispatcher_type: Literal["allgather", "alltoall", "flex"] = rule("alltoall", scope="megatron")
    use_cpu_initialization: bool = rule(False, scope="megatron")
    gradient_checkpointing: bool = False
    # embodied policies
    action_dim: int | None = rule(None, scope="embodied")
    num_action_chunks: int | None = rule(None, scope="embodied")
    use_proprio: bool = rule(False, scope="embodied")
    unnorm_key: str | None = rule(None, scope="embodied")
    value_type: str | None = rule(None, scope="embodied")
    val_micro_batch_size: int | None = rule(None, scope="embodied")
    center_crop: bool = rule(False, scope="embodied")
    do_sample: bool = rule(False, scope="embodied")
    vocab_size: int | None = rule(None, scope="embodied")
    hidden_size: int | None = rule(None, scope="embodied")
    policy_setup: str | None = rule(None, scope="embodied", note=(
        ("widowx_bridge", "google_robot"), "selects SimplerEnv's robot; ManiSkill and LIBERO define their own, "
        "so it is only recorded"))
    image_size: tuple[int, ...] = rule((), scope="embodied")
    is_lora: bool = False
    lora_rank: int = 32
    lora_path: str | None = None
    lora_alpha: float | None = rule(None, scope="math")
    lora_target_modules: tuple[str, ...] = rule(("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                 "down_proj"), scope="math")
    num_images_in_input: int = rule(1, scope="embodied")
    attn_implementation: str | None = None
    low_cpu_mem_usage: bool = True
    trust_remote_code: bool = False
    policy_hidden_sizes: tuple[int, ...] | None = rule(None, scope="embodied")
    critic_hidden_sizes: tuple[int, ...] | None = rule(None, scope="embodied")
    init_log_std: float = rule(0.0, scope="embodied")
    shared_critic_encoder: bool = rule(True, scope="embodied")
    add_value_head: bool = rule(True, scope="embodied")


@dataclass(frozen=True)
class OptimConfig:
    """``actor.optim``.

    Attributes:
        optimizer: adam or adamw: both build AdamW (decoupled weight decay, the update
            Megatron's adam runs); the engines read it when they build the optimizer.
        bf16, fp16: Megatron: bf16 / fp16 mixed-precision training with fp32 main weights in the
            optimizer (at most one may be true; must match actor.model.precision); fp16 adds
            dynamic loss scaling.
        lr: peak learning rate unless lr_sched.max_lr is set; must be > 0.
        value_lr: critic learning rate when critic.lr is null; null = lr.
        adam_beta1, adam_beta2, adam_eps: Adam moment coefficients and epsilon.
        min_lr: final learning rate of a linear / cosine decay unless lr_sched.min_lr is set.
        weight_decay: decoupled weight decay (Megatron: on every parameter, as FSDP does).
        use_distributed_optimizer: Megatron: shard the optimizer state over data-parallel ranks.
        overlap_grad_reduce: Megatron: overlap the gradient reduction with the backward pass.
        overlap_param_gather: Megatron: overlap the parameter all-gather with the forward pass
            (needs use_distributed_optimizer).
        optimizer_enable_pin: Megatron: pin the host memory of offloaded weights, gradients and
            optimizer state.
        overlap_param_gather_with_optimizer_step: Megatron: overlap the parameter all-gather with
            the optimizer step; needs virtual pipeline stages, which this backend does not build,
            so only false is accepted with training_backend megatron.
        clip_grad: maximum gradient norm; 0 = no clipping.
        loss_scale_window: Megatron fp16 dynamic loss scaling: steps without overflow before the
            scale grows (>= 1).
    """

    optimizer: Literal["adam", "adamw"] = "adam"
    bf16: bool = rule(False, scope="megatron")
    fp16: bool = rule(False, scope="megatron")
    lr: float = 1e-6
    value_lr: float | None = None
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    min_lr: float = 0.0
    weight_decay: float = 0.0
    use_distributed_optimizer: bool = rule(False, scope="megatron")
    overlap_grad_reduce: bool = rule(False, scope="megatron")
    overlap_param_gather: bool = rule(False, scope="megatron")
    optimizer_enable_pin: bool = rule(False, scope="megatron")
    overlap_param_gather_with_optimizer_step: bool = rule(False, scope="megatron")
    clip_grad: float = 1.0
    loss_scale_window: int = rule(1000, scope="megatron")

    def validate(self, path: str) -> None:
        check(self.lr > 0, f"{path}.lr", f"must be > 0, got {self.lr}")
        check(self.clip_grad >= 0, f"{path}.clip_grad", f"must be >= 0 (0 = off), got {self.clip_grad}")
        check(not (self.bf16 and self.fp16), f"{path}.fp16", "set at most one of bf16 / fp16")
        check(self.loss_scale_window >= 1, f"{path}.loss_scale_window",
              f"must be >= 1, got {self.loss_scale_window}")
        for name in ("adam_beta1", "adam_beta2"):
            value = getattr(self, name)
            check(0 <= value < 1, f"{path}.{name}", f"must be in [0, 1), got {value}")
        check(self.adam_eps > 0, f"{path}.adam_eps", f"must be > 0, got {self.adam_eps}")
        check(self.weight_decay >= 0, f"{path}.weight_decay", f"must be >= 0, got {self.weight_decay}")
        check(0 <= self.min_lr <= self.lr, f"{path}.min_lr",
              f"must be in [0, lr={self.lr}], got {self.min_lr}")
        check(self.value_lr is None or self.value_lr > 0, f"{path}.value_lr",
              f"must be > 0 or null, got {self.value_lr}")


@dataclass(frozen=True)
class LrSchedConfig:
    """``actor.lr_sched``: warm-up then decay (constant, linear or cosine).

    Attributes:
        lr_warmup_fraction: warm-up length as a fraction of the run's optimizer steps, in [0, 1);
            used when lr_warmup_iters is 0.
        lr_warmup_init: learning rate at the first warm-up step.
        lr_warmup_iters: warm-up length in optimizer steps; > 0 takes precedence over
            lr_warmup_fraction.
        max_lr: peak learning rate; null = actor.optim.lr.
        min_lr: final learning rate of a linear / cosine decay; null = actor.optim.min_lr.
        lr_decay_style: schedule after the warm-up.
        lr_decay_iters: optimizer step at which the decay reaches min_lr; null = the run's total
            optimizer steps.
    """

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
        check(self.lr_warmup_iters >= 0, f"{path}.lr_warmup_iters", f"must be >= 0, got {self.lr_warmup_iters}")
        check(self.lr_warmup_init >= 0, f"{path}.lr_warmup_init", f"must be >= 0, got {self.lr_warmup_init}")
        check(self.max_lr is None or self.max_lr > 0, f"{path}.max_lr", f"must be > 0 or null, got {self.max_lr}")
        check(self.min_lr is None or self.min_lr >= 0, f"{path}.min_lr", f"must be >= 0 or null, got {self.min_lr}")
        check(self.lr_decay_iters is None or self.lr_decay_iters >= 1, f"{path}.lr_decay_iters",
              f"must be >= 1 or null, got {self.lr_decay_iters}")


@dataclass(frozen=True)
class TokenizerConfig:
    """``actor.tokenizer``: where the tokenizer lives (default: the model folder).

    Attributes:
        tokenizer_model: tokenizer folder; null = the model folder.
        tokenizer_type: tokenizer class family; only HuggingFaceTokenizer (the folder's HF
            tokenizer) exists here.
        extra_vocab_size: extra vocabulary entries added to the embedding; only 0: the
            embedding size is the checkpoint's ``vocab_size`` (resize the checkpoint instead).
        use_fast: load the fast (Rust) tokenizer; false loads the slow (Python) one, which the
            folder must have.
        trust_remote_code: allow custom tokenizer code from the folder.
        padding_side: the tokenizer's padding side. Prompts are tokenised one at a time (no
            padding), and batches are always laid out as left-padded prompts + right-padded
            responses, so left only sets the tokenizer attribute (noted at start).
    """

    tokenizer_model: str | None = None
    tokenizer_type: str = rule("HuggingFaceTokenizer", only=("HuggingFaceTokenizer",),
                               reason="only HF tokenizers (the folder's tokenizer files) are loaded")
    extra_vocab_size: int = rule(0, only=(0,), reason="the embedding size is the checkpoint's vocab_size; "
                                 "resize the checkpoint's embeddings instead")
    use_fast: bool = True
    trust_remote_code: bool = False
    padding_side: Literal["left", "right"] = rule("right", note=(("left",), "prompts are tokenised one at a "
                                                  "time and batches are always left-padded prompts + "
                                                  "right-padded responses; only the tokenizer attribute changes"))


@dataclass(frozen=True)
class ActorConfig:
    """``actor``.

    Attributes:
        group_name: worker group name (names the group in logs and error lines).
        training_backend: fsdp or megatron.
        seed: init / dropout seed.
        offload_optimizer, offload_weight, offload_grad: offload between phases when collocated.
        enable_offload: embodied spelling of "offload everything between phases".
        micro_batch_size, global_batch_size: embodied batch sizes.
        mcore_gpt, spec_name, enable_dp_load_balance: Megatron keys (checked by the Megatron
            backend: true, decoder_gpt, false).
        calculate_flops: log the model FLOPs of each update (``actor/tflops``: 6 x parameters x
            prompt + response tokens of the process's shard) and the throughput
            ``actor/tflops_per_s`` over the update's wall time (per actor process; math runs).
        model, optim, lr_sched, tokenizer, fsdp_config, megatron, channel: sub-sections.
    """

    group_name: str = "ActorGroup"
    training_backend: Literal["fsdp", "megatron"] = "fsdp"
    seed: int = 1234
    offload_optimizer: bool = rule(False, scope="math")
    offload_weight: bool = rule(False, scope="math")
    offload_grad: bool = rule(False, scope="math")
    enable_offload: bool = rule(False, scope="embodied")
    micro_batch_size: int | None = rule(None, scope="embodied")
    global_batch_size: int | None = rule(None, scope="embodied")
    mcore_gpt: bool = rule(True, scope="megatron")
    spec_name: str = rule("decoder_gpt", scope="megatron")
    enable_dp_load_balance: bool = rule(False, scope="megatron")
    calculate_flops: bool = False
    model: ActorModelConfig = field(default_factory=ActorModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    lr_sched: LrSchedConfig = field(default_factory=LrSchedConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    fsdp_config: FsdpConfig = rule(factory=FsdpConfig, scope="fsdp")
    megatron: MegatronConfig = rule(factory=MegatronConfig, scope="megatron")
    channel: ChannelRef = rule(factory=ChannelRef, scope="embodied")

    def validate(self, path: str) -> None:
        m = self.model
        for name in ("tensor_model_parallel_size", "pipeline_model_parallel_size"):
            check(getattr(m, name) >= 1, f"{path}.model.{name}", f"must be >= 1, got {getattr(m, name)}")
        check(m.lora_rank >= 1, f"{path}.model.lora_rank", f"must be >= 1, got {m.lora_rank}")
        for key in ("action_dim", "num_action_chunks", "num_images_in_input", "hidden_size", "vocab_size"):
            value = getattr(m, key)
            check(value is None or value >= 1, f"{path}.model.{key}", f"must be >= 1 or null, got {value}")
        for key in ("policy_hidden_sizes", "critic_hidden_sizes", "image_size"):
            for i, width in enumerate(getattr(m, key) or ()):
                check(width >= 1, f"{path}.model.{key}[{i}]", f"must be >= 1, got {width}")
        check(math.isfinite(m.init_log_std), f"{path}.model.init_log_std", f"must be finite, got {m.init_log_std}")
        for key in ("micro_batch_size", "global_batch_size"):
            value = getattr(self, key, None)
            check(value is None or value >= 1, f"{path}.{key}", f"must be >= 1, got {value}")
        if self.training_backend == "megatron":
            check_megatron(self, path)


def check_megatron(cfg: ActorConfig, path: str) -> None:
    """Cross-key rules of ``training_backend: megatron`` (run by :meth:`ActorConfig.validate`).

    Architecture keys (heads divisible by the tensor-parallel size, activation, ...) need the HF
    config and are checked when the engine starts.
    """
    m, o, mg = cfg.model, cfg.optim, cfg.megatron
    check(cfg.mcore_gpt, f"{path}.mcore_gpt", "the Megatron backend builds megatron-core's GPTModel; set true")
    check(cfg.spec_name == "decoder_gpt", f"{path}.spec_name",
          f"only decoder_gpt (megatron-core's GPT layer spec) is built, got {cfg.spec_name!r}")
    check(not cfg.enable_dp_load_balance, f"{path}.enable_dp_load_balance",
          "not implemented by the Megatron backend; set false")
    check(not m.gradient_checkpointing, f"{path}.model.gradient_checkpointing",
          "is the FSDP backend's switch; with megatron set actor.model.recompute_granularity instead")
    check(not m.is_lora, f"{path}.model.is_lora", "LoRA is not supported by the Megatron backend")
    check(not (m.sequence_parallel and m.tensor_model_parallel_size > 1), f"{path}.model.sequence_parallel",
          "not supported: the Megatron backend builds megatron-core's local layer spec, whose RMSNorm "
          "(torch) refuses sequence parallelism (it needs Transformer Engine layers); set false")
    if m.recompute_granularity == "full":
        check(m.recompute_method is not None, f"{path}.model.recompute_method",
              "recompute_granularity full needs recompute_method uniform or block")
        check(m.recompute_num_layers is not None and m.recompute_num_layers >= 1,
              f"{path}.model.recompute_num_layers",
              f"recompute_granularity full needs recompute_num_layers >= 1, got {m.recompute_num_layers}")
    if m.recompute_granularity == "selective":
        check(m.recompute_num_layers is None, f"{path}.model.recompute_num_layers",
              "must be null with recompute_granularity selective")
    check(m.seq_length is None or m.seq_length >= 1, f"{path}.model.seq_length",
          f"must be >= 1 or null, got {m.seq_length}")
    check(m.encoder_seq_length in (None, m.seq_length), f"{path}.model.encoder_seq_length",
          f"{m.encoder_seq_length}: the Megatron backend builds decoder-only GPTs (no encoder); leave it null "
          f"or equal to actor.model.seq_length ({m.seq_length})")
    half = {"bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16"}.get(m.precision)
    for flag in ("bf16", "fp16"):
        check(getattr(o, flag) == (half == flag), f"{path}.optim.{flag}",
              f"must be {str(half == flag).lower()} with actor.model.precision {m.precision} (Megatron "
              "trains fp32 main weights in the optimizer exactly when the model is bf16 / fp16)")
    check(not o.overlap_param_gather or o.use_distributed_optimizer, f"{path}.optim.overlap_param_gather",
          "needs actor.optim.use_distributed_optimizer: true")
    check(not o.overlap_param_gather_with_optimizer_step, f"{path}.optim.overlap_param_gather_with_optimizer_step",
          "needs virtual pipeline stages, which the Megatron backend does not build; set false")
    check(not mg.use_dist_ckpt, f"{path}.megatron.use_dist_ckpt",
          "distributed (resharding) checkpoints are not implemented; set false (checkpoints are one "
          "torch file per rank)")
    check(mg.tp_comm_overlap_cfg is None, f"{path}.megatron.tp_comm_overlap_cfg",
          "tensor-parallel communication overlap needs Transformer Engine userbuffers, which this "
          "backend does not use; set null")
    check(mg.use_hf_ckpt != (m.megatron_checkpoint is not None), f"{path}.megatron.use_hf_ckpt",
          "set exactly one weight source: use_hf_ckpt: true (convert actor.model.model_path) or "
          "actor.model.megatron_checkpoint (an already converted folder)")
    ck = mg.ckpt_config(f"{path}.megatron")
    for name in ("tensor_model_parallel_size", "pipeline_model_parallel_size"):
        value = getattr(ck, name)
        check(value is None or value == getattr(m, name), f"{path}.megatron.ckpt.{name}",
              f"{value} differs from actor.model.{name} ({getattr(m, name)}); the converted "
              "checkpoint must have the training sizes")
