"""``actor.fsdp_config`` and ``actor.megatron``: the two training backends' own sections (the
reference writes both in one file; the idle one's keys are named in a start-up note)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from rlinf.utils.typed_config import check, parse_section, rule

Dtype = Literal["fp32", "fp16", "bf16", "float32", "float16", "bfloat16"]


@dataclass(frozen=True)
class MixedPrecisionConfig:
    """``actor.fsdp_config.mixed_precision``.

    Attributes:
        param_dtype: compute dtype of the gathered weights (FSDP2 ``MixedPrecisionPolicy``).
        reduce_dtype: dtype of the gradient reduction.
        buffer_dtype: dtype the model's floating-point buffers (e.g. rotary frequencies) are
            cast to before sharding (FSDP2's policy has no buffer dtype, so the engine casts).
    """

    param_dtype: Dtype = "fp32"
    reduce_dtype: Dtype = "fp32"
    buffer_dtype: Dtype = "fp32"


@dataclass(frozen=True)
class AmpConfig:
    """``actor.fsdp_config.amp_autocast``.

    Attributes:
        enabled: run the forward pass under ``torch.autocast``.
        precision: autocast dtype.
    """

    enabled: bool = False
    precision: Dtype = "bf16"


@dataclass(frozen=True)
class GradScalerConfig:
    """``actor.fsdp_config.grad_scaler``.

    Attributes:
        enabled: fp16 dynamic loss scaling; the FSDP2 engine does not support it (use bf16), so
            only false is accepted.
        init_scale: initial loss scale; only the default (there is no loss scaler to set).
        growth_interval: steps without overflow before the loss scale grows; only the default.
    """

    enabled: bool = rule(False, only=(False,), reason="fp16 loss scaling is not available with the FSDP2 "
                         "engine; train in bf16 (mixed_precision.param_dtype: bf16)")
    init_scale: float = rule(65536.0, only=(65536.0,), reason="there is no fp16 loss scaler "
                             "(grad_scaler.enabled must be false) for it to set")
    growth_interval: int = rule(2000, only=(2000,), reason="there is no fp16 loss scaler "
                                "(grad_scaler.enabled must be false) for it to set")

    def validate(self, path: str) -> None:
        check(self.init_scale > 0, f"{path}.init_scale", f"must be > 0, got {self.init_scale}")
        check(self.growth_interval >= 1, f"{path}.growth_interval", f"must be >= 1, got {self.growth_interval}")


@dataclass(frozen=True)
class FsdpConfig:
    """``actor.fsdp_config`` (FSDP2 through ``fully_shard``; ``strategy: fsdp`` is accepted and
    runs the same FSDP2 path).

    Attributes:
        strategy: fsdp or fsdp2 (any case); both run FSDP2.
        sharding_strategy: full_shard: shard over all ranks (or HSDP, see fsdp_size);
            shard_grad_op: the same, but parameters stay gathered between forward and backward;
            hybrid_shard: shard within groups of fsdp_size ranks, replicate across groups;
            no_shard: replicated weights, all-reduced gradients (DDP-like).
        cpu_offload: keep sharded weights, gradients and the optimizer step on the CPU.
        offload_pin_memory: pin the CPU copies when cpu_offload is on.
        reshard_after_forward: free gathered parameters after the forward pass (forced off by
            shard_grad_op).
        enable_gradient_accumulation: true = reduce gradients once after the last micro-batch;
            false = after every micro-batch (less memory, more communication).
        forward_prefetch: each layer's forward pass starts the all-gather of the next layer's
            weights (FSDP2 ``set_modules_to_forward_prefetch``); more memory, more overlap.
        limit_all_gathers: FSDP1's cap on in-flight all-gathers; FSDP2 always bounds them (it
            waits on the previous all-gather before issuing the next), so true is what happens
            anyway and false cannot be granted (noted at start).
        use_orig_params: FSDP1's flat parameters vs the originals; FSDP2 always shards the
            original parameters (DTensor per parameter), so false cannot be granted (noted).
        backward_prefetch: pre: in the backward pass each layer starts the all-gather of the
            layer before it while its own gradients are computed (FSDP2
            ``set_modules_to_backward_prefetch``); post / null: FSDP2's default (the all-gather is
            issued when the previous layer's backward starts).
        use_liger_kernel: patch the model with Liger's Triton kernels (GPU only).
        fsdp_size: shard group size: -1 or the world size = all ranks; a divisor d of the world
            size = shard within d consecutive ranks, replicate across groups (HSDP).
        mixed_precision: compute and gradient-reduction dtypes.
        amp_autocast: autocast of the forward pass.
        grad_scaler: fp16 loss scaling.
    """

    strategy: str = "fsdp2"
    sharding_strategy: Literal["full_shard", "shard_grad_op", "hybrid_shard", "no_shard"] = "full_shard"
    cpu_offload: bool = False
    offload_pin_memory: bool = False
    reshard_after_forward: bool = True
    enable_gradient_accumulation: bool = True
    forward_prefetch: bool = False
    limit_all_gathers: bool = rule(True, note=((False,), "FSDP2 always bounds in-flight all-gathers; "
                                                "false (unbounded) cannot be granted"))
    backward_prefetch: Literal["pre", "post"] | None = None
    use_orig_params: bool = rule(True, note=((False,), "FSDP2 always shards the original parameters "
                                             "(no flat parameters); false cannot be granted"))
    use_liger_kernel: bool = False
    fsdp_size: int = -1
    mixed_precision: MixedPrecisionConfig = field(default_factory=MixedPrecisionConfig)
    amp_autocast: AmpConfig = field(default_factory=AmpConfig)
    grad_scaler: GradScalerConfig = field(default_factory=GradScalerConfig)

    def validate(self, path: str) -> None:
        check(self.strategy.lower() in ("fsdp", "fsdp2"), f"{path}.strategy",
              f"expected fsdp or fsdp2, got {self.strategy!r}")
        check(self.fsdp_size == -1 or self.fsdp_size >= 1, f"{path}.fsdp_size",
              f"must be -1 (all ranks) or >= 1, got {self.fsdp_size}")

    def check_world(self, world_size: int, path: str = "actor.fsdp_config") -> None:
        """``fsdp_size`` must be -1 or divide the actor's ``world_size`` processes."""
        check(self.fsdp_size in (-1, world_size) or world_size % self.fsdp_size == 0, f"{path}.fsdp_size",
              f"{self.fsdp_size} does not divide the actor's {world_size} processes (its placement); "
              "use -1 or a divisor")


@dataclass(frozen=True)
class MegatronCkptConfig:
    """``actor.megatron.ckpt``: the HF -> Megatron conversion done on the first run when
    ``actor.megatron.use_hf_ckpt`` is true (kept as a mapping in :class:`MegatronConfig` and
    checked against this class).

    Attributes:
        model: model name recorded with the converted checkpoint (metadata only).
        hf_model_path: HF folder to convert; null = actor.model.model_path.
        save_path: cache folder of converted checkpoints; each conversion lands in a sub-folder
            named by a content hash of the HF checkpoint and the parallel sizes, and is reused
            while both are unchanged. null = ``~/.cache/rlinf/megatron``.
        use_gpu_num: GPUs the conversion uses; only 0 (it runs on the CPU of actor rank 0).
        use_gpu_index: GPU the conversion uses; only null (it runs on the CPU).
        process_num: CPU threads the conversion's tensor work uses (torch threads of actor
            rank 0 while it converts).
        tensor_model_parallel_size, pipeline_model_parallel_size: sizes of the converted
            checkpoint; null = actor.model's; when set they must equal actor.model's.
    """

    model: str | None = None
    hf_model_path: str | None = None
    save_path: str | None = None
    use_gpu_num: int = rule(0, only=(0,), reason="the conversion runs on the CPU of actor rank 0")
    use_gpu_index: int | None = rule(None, only=(None,), reason="the conversion runs on the CPU of actor rank 0")
    process_num: int = 1
    tensor_model_parallel_size: int | None = None
    pipeline_model_parallel_size: int | None = None

    def validate(self, path: str) -> None:
        check(self.process_num >= 1, f"{path}.process_num", f"must be >= 1, got {self.process_num}")


@dataclass(frozen=True)
class MegatronConfig:
    """``actor.megatron`` (read by the Megatron backend; see docs/megatron_backend.md).

    Attributes:
        ddp_bucket_size: gradient bucket size (elements) of Megatron's DDP; null = Megatron's
            default.
        distributed_backend: torch.distributed backend of the actor group on GPUs (the CPU test
            path always uses gloo).
        distributed_timeout_minutes: timeout of collective operations (>= 1).
        ckpt_format: format of the actor's training checkpoints: torch (one file per rank;
            resume needs the same tensor / pipeline / data-parallel sizes).
        use_dist_ckpt: distributed (resharding) checkpoints; not implemented, only false is
            accepted with training_backend megatron.
        tp_comm_bootstrap_backend: backend that bootstraps tensor-parallel communication overlap;
            that overlap (tp_comm_overlap_cfg) is not run, so a value other than the default is
            noted at start as having nothing to bootstrap.
        tp_comm_overlap_cfg: tensor-parallel communication overlap settings (Transformer Engine
            userbuffers); not used by this backend, only null is accepted with megatron.
        use_hf_ckpt: convert the HF checkpoint (model_path) to Megatron format on the first run
            and start from it; the conversion is cached (see ckpt).
        ckpt: the conversion settings (unknown keys and bad values are rejected): model
            (metadata), hf_model_path (null = actor.model.model_path), save_path (cache folder,
            null = ~/.cache/rlinf/megatron), tensor_model_parallel_size /
            pipeline_model_parallel_size (null or equal to actor.model's), use_gpu_num (0),
            use_gpu_index (null), process_num (torch threads of the conversion).
    """

    ddp_bucket_size: int | None = None
    distributed_backend: Literal["nccl", "gloo"] = "nccl"
    distributed_timeout_minutes: int = 30
    ckpt_format: Literal["torch"] = "torch"
    use_dist_ckpt: bool = False
    tp_comm_bootstrap_backend: Literal["nccl", "mpi", "gloo"] = rule("nccl", note=(
        ("mpi", "gloo"), "tensor-parallel communication overlap is not run, so there is nothing to bootstrap"))
    tp_comm_overlap_cfg: str | None = None
    use_hf_ckpt: bool = False
    ckpt: dict[str, Any] = field(default_factory=dict)

    def validate(self, path: str) -> None:
        self.ckpt_config(path)
        check(self.distributed_timeout_minutes >= 1, f"{path}.distributed_timeout_minutes",
              f"must be >= 1, got {self.distributed_timeout_minutes}")
        check(self.ddp_bucket_size is None or self.ddp_bucket_size > 0, f"{path}.ddp_bucket_size",
              f"must be > 0 or null, got {self.ddp_bucket_size}")

    def ckpt_config(self, path: str = "actor.megatron") -> MegatronCkptConfig:
        """``ckpt`` parsed into :class:`MegatronCkptConfig` (raises ``ConfigError`` naming the key)."""
        return parse_section(MegatronCkptConfig, self.ckpt, f"{path}.ckpt")
