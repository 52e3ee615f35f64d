"""``actor:`` — the trained policy: model, optimizer, LR schedule, FSDP / Megatron settings."""

from __future__ import annotations

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
from rlinf.config.model import ActorModelConfig, LLMModelConfig, PolicyModelConfig  # noqa: F401 - re-exported
from rlinf.config.rollout import ChannelRef
from rlinf.utils.typed_config import check, rule


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
            optimizer steps (embodied PPO / GRPO: training steps x update_epochs x global batches
            per step, counted as if no update stopped early at target_kl).
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
    m, ml, o, mg = cfg.model, cfg.model.llm, cfg.optim, cfg.megatron
    check(cfg.mcore_gpt, f"{path}.mcore_gpt", "the Megatron backend builds megatron-core's GPTModel; set true")
    check(cfg.spec_name == "decoder_gpt", f"{path}.spec_name",
          f"only decoder_gpt (megatron-core's GPT layer spec) is built, got {cfg.spec_name!r}")
    check(not cfg.enable_dp_load_balance, f"{path}.enable_dp_load_balance",
          "not implemented by the Megatron backend; set false")
    check(not m.gradient_checkpointing, f"{path}.model.gradient_checkpointing",
          "is the FSDP backend's switch; with megatron set actor.model.recompute_granularity instead")
    check(not m.is_lora, f"{path}.model.is_lora", "LoRA is not supported by the Megatron backend")
    check(not (ml.sequence_parallel and ml.tensor_model_parallel_size > 1), f"{path}.model.sequence_parallel",
          "not supported: the Megatron backend builds megatron-core's local layer spec, whose RMSNorm "
          "(torch) refuses sequence parallelism (it needs Transformer Engine layers); set false")
    if ml.recompute_granularity == "full":
        check(ml.recompute_method is not None, f"{path}.model.recompute_method",
              "recompute_granularity full needs recompute_method uniform or block")
        check(ml.recompute_num_layers is not None and ml.recompute_num_layers >= 1,
              f"{path}.model.recompute_num_layers",
              f"recompute_granularity full needs recompute_num_layers >= 1, got {ml.recompute_num_layers}")
    if ml.recompute_granularity == "selective":
        check(ml.recompute_num_layers is None, f"{path}.model.recompute_num_layers",
              "must be null with recompute_granularity selective")
    check(ml.seq_length is None or ml.seq_length >= 1, f"{path}.model.seq_length",
          f"must be >= 1 or null, got {ml.seq_length}")
    check(ml.encoder_seq_length in (None, ml.seq_length), f"{path}.model.encoder_seq_length",
          f"{ml.encoder_seq_length}: the Megatron backend builds decoder-only GPTs (no encoder); leave it null "
          f"or equal to actor.model.seq_length ({ml.seq_length})")
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
    check(mg.use_hf_ckpt != (ml.megatron_checkpoint is not None), f"{path}.megatron.use_hf_ckpt",
          "set exactly one weight source: use_hf_ckpt: true (convert actor.model.model_path) or "
          "actor.model.megatron_checkpoint (an already converted folder)")
    ck = mg.ckpt_config(f"{path}.megatron")
    for name in ("tensor_model_parallel_size", "pipeline_model_parallel_size"):
        value = getattr(ck, name)
        check(value is None or value == getattr(ml, name), f"{path}.megatron.ckpt.{name}",
              f"{value} differs from actor.model.{name} ({getattr(ml, name)}); the converted "
              "checkpoint must have the training sizes")
