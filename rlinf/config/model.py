"""``actor.model``: the checkpoint every run loads, plus two sections written in the same mapping.

Seed 003 writes every model key flat under ``actor.model`` (Megatron's architecture switches next
to a VLA's ``action_dim``). The YAML keeps that layout; the parser routes each key to the section
that reads it (:func:`rlinf.utils.typed_config.flat`), and errors still name
``actor.model.<key>``:

* :class:`ActorModelConfig` — what every run reads: where the weights are, their dtype, LoRA, HF
  loading switches.
* :class:`LLMModelConfig` (``actor.model.llm`` in Python) — the LLM backends' keys: Megatron's
  architecture and parallelism switches, and the math-only LoRA placement.
* :class:`PolicyModelConfig` (``actor.model.policy`` in Python) — the embodied policy's keys:
  action space, image input, MLP / CNN widths, value head.

Example:
    >>> from rlinf.utils.typed_config import parse_section
    >>> m = parse_section(ActorModelConfig, {"model_type": "mlp", "action_dim": 4,
    ...                                      "tensor_model_parallel_size": 2}, "actor.model")
    >>> (m.model_type, m.policy.action_dim, m.llm.tensor_model_parallel_size)
    ('mlp', 4, 2)
    >>> parse_section(ActorModelConfig, {"action_dim": 0}, "actor.model")
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: actor.model.action_dim: must be >= 1 or null, got 0
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from rlinf.config.backends import Dtype
from rlinf.utils.typed_config import check, flat, rule


@dataclass(frozen=True)
class LLMModelConfig:
    """``actor.model`` keys of the LLM backends (Python: ``actor.model.llm``).

    The Megatron keys are read by the Megatron backend only (docs/megatron_backend.md); with
    ``training_backend: megatron`` their cross-key rules are checked once by
    :func:`rlinf.config.actor.check_megatron`.

    Attributes:
        megatron_checkpoint: Megatron: a converted checkpoint folder (the converter's layout, same
            tensor / pipeline sizes) to start from instead of converting model_path.
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
        lora_alpha: math: LoRA alpha (the update is scaled by alpha / r); null = lora_rank.
        lora_target_modules: math: names (last dotted part) of the Linear layers that get LoRA.
        vision_tower: math, a vision-language model (Qwen2.5-VL, Qwen3-VL): ``frozen`` keeps the
            vision tower's weights as loaded (out of the optimizer; LoRA layers inside it stay
            frozen too), ``trained`` updates it with the language model. ``trained`` with a
            text-only model is refused before start (it has no vision tower).
    """

    megatron_checkpoint: str | None = rule(None, scope="megatron")
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
    lora_alpha: float | None = rule(None, scope="math")
    lora_target_modules: tuple[str, ...] = rule(("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                 "down_proj"), scope="math")
    vision_tower: Literal["frozen", "trained"] = rule("frozen", scope="math")

    def validate(self, path: str) -> None:
        for name in ("tensor_model_parallel_size", "pipeline_model_parallel_size"):
            value = getattr(self, name)
            check(value >= 1, f"{path}.{name}", f"must be >= 1, got {value}")
        check(self.lora_alpha is None or self.lora_alpha > 0, f"{path}.lora_alpha",
              f"must be > 0 or null, got {self.lora_alpha}")


@dataclass(frozen=True)
class PolicyModelConfig:
    """``actor.model`` keys of embodied policies (Python: ``actor.model.policy``); read by
    :func:`rlinf.models.embodied.factory.build_policy` and the policy workers.

    Attributes:
        action_dim: action dimensions.
        num_action_chunks: actions predicted per step (action chunk length).
        use_proprio: feed proprioceptive state to the policy.
        unnorm_key: dataset statistics used to un-normalise actions.
        value_type: level of the value head's estimates (per action or per chunk).
        val_micro_batch_size: largest batch of one rollout-worker forward pass (envs per policy
            call are split into chunks of this size); null = all at once.
        center_crop: centre-crop input images.
        do_sample: sample actions (else greedy).
        vocab_size: the policy's vocabulary size.
        hidden_size: the policy's hidden size (openvla_oft: checked against the model folder's LM
            width; cnn: width of the image / state features, null = 256).
        policy_setup: SimplerEnv's robot setup (widowx_bridge, google_robot); the simulators here
            define their robots themselves, so it is only recorded (noted at start).
        image_size: input image size.
        num_images_in_input: images per observation.
        policy_hidden_sizes: mlp / cnn: widths of the actor's hidden layers; null = the policy's
            default (mlp: 256, 256, 256; cnn: 256).
        critic_hidden_sizes: mlp / cnn: widths of the critic's hidden layers; null =
            policy_hidden_sizes. pi0 / pi05: the value head's (null = RLinf's 512, 256, 128 for
            π0 and 1024, 512, 256 for π0.5, or the checkpoint's stored head).
        init_log_std: mlp / cnn: initial log standard deviation of the Gaussian actions.
        shared_critic_encoder: cnn: the critic reads the actor's image encoder (else it has its
            own). flow_mlp: the value head reads the state encoder's features (else the critic
            is its own Tanh MLP on the state, as mlp's, and the encoder is the actor's alone). mlp
            always has a separate critic.
        add_value_head: build a value head (actor-critic, PPO); false for critic-free algorithms
            (GRPO), then values are null.
        noise_method: flow_mlp / pi0 / pi05: πRL's exploration, flow_sde (one stochastic
            denoising step per call, diffusion ``noise_level``) or flow_noise (every step, learned
            std).
        noise_level: flow_mlp / pi0 / pi05 flow_sde: the diffusion level ``a`` (without noise_anneal;
            with it, only its default 0.5 is accepted).
        noise_anneal: flow_mlp / pi0 / pi05 flow_sde: the level follows RLinf's linear schedule
            ``start + (end - start) * min(step, anneal_steps) / anneal_steps`` over noise_params at
            the training step of the rollout's weights; the update recomputes each sample's
            log-prob at the level it was sampled with (stored beside its chain).
        noise_params: ``[start, end, anneal_steps]`` of noise_anneal (RLinf's default
            ``[0.7, 0.3, 400]``); levels > 0, anneal_steps an integer >= 1; another value without
            noise_anneal is refused.
        noise_logvar_range: flow_mlp / pi0 / pi05 flow_noise: ``[min_std, max_std]`` of the noise
            head.
        num_steps: flow_mlp / pi0 / pi05: denoising steps.
        action_chunk: actions executed per chunk (RLinf's name); flow_mlp executes the whole
            chunk, pi0 / pi05 the first num_action_chunks of the checkpoint's ``H``: null or
            num_action_chunks.
        joint_logprob: flow_mlp / pi0 / pi05: log-prob = mean over ``[x_0, stochastic steps]``
            (Flow-Noise's joint form) instead of the stochastic step's alone.
        ignore_last: flow_mlp / pi0 / pi05 flow_sde: never sample the last denoising step.
        detach_critic_input: flow_mlp: the value head's gradient stops at the state encoder;
            pi0 / pi05: at its input (the expert's or the VLM's output).
        residual_velocity: flow_mlp: the velocity field is ``x_t - MLP(x_t, t, features)`` (a skip
            connection from the point to the velocity) instead of ``MLP(...)``: the untrained
            policy then shrinks the initial noise by ``(1 - 1/N)^N`` over its ``N`` Euler steps
            rather than passing it into the action.
        action_env_dim: pi0 / pi05: the env's action dimensions, taken from the model's padded 32
            (RLinf's name); null = action_dim, which it must equal when set.
        action_horizon: pi0 / pi05: actions the checkpoint predicts per chunk (``H``; null =
            config.json's action_horizon / LeRobot's chunk_size, else 50). Not visible in the
            weights: set it for a folder without config.json (π0.5 LIBERO: 10).
        value_after_vlm: pi0 / pi05: the value head reads the mean of the VLM's prefix output (the
            π0.5 configs) instead of the action expert's output at the first denoising step.
        train_expert_only: pi0 / pi05: freeze the PaliGemma part (SigLIP, projector, Gemma); the
            action expert, its projections and the heads train.
        discrete_state_input: pi05: the state in the prompt (``Task: ..., State: ...;``); null =
            openpi's default (true); openpi's pi05_libero and RLinf's π0.5 configs set false.
        tokenizer_path: pi0 / pi05: PaliGemma's SentencePiece ``paligemma_tokenizer.model``; null =
            that file (or tokenizer.model) inside model_path.
        extra_delta_transform: pi0 / pi05: the checkpoint predicts its first 6 action dimensions
            relative to the first 6 state values (openpi's / RLinf's pi0_libero preset): the env
            action adds them back.
        num_q_heads: sac_mlp: Q heads of the critic ensemble (2 = SAC's twin Q; RLPD: 10).
        q_head_type: sac_mlp: ``default`` (MLP heads), ``layernorm`` (RLPD's LayerNorm critics) or
            ``crossq`` (batch renormalisation, no target networks: CrossQ).
    """

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
    num_images_in_input: int = rule(1, scope="embodied")
    policy_hidden_sizes: tuple[int, ...] | None = rule(None, scope="embodied")
    critic_hidden_sizes: tuple[int, ...] | None = rule(None, scope="embodied")
    init_log_std: float = rule(0.0, scope="embodied")
    shared_critic_encoder: bool = rule(True, scope="embodied")
    add_value_head: bool = rule(True, scope="embodied")
    noise_method: Literal["flow_sde", "flow_noise"] = rule("flow_sde", scope="embodied")
    noise_level: float = rule(0.5, scope="embodied")
    noise_anneal: bool = rule(False, scope="embodied")
    noise_params: tuple[float, float, float] = rule((0.7, 0.3, 400.0), scope="embodied")
    noise_logvar_range: tuple[float, float] = rule((0.08, 0.16), scope="embodied")
    num_steps: int = rule(4, scope="embodied")
    action_chunk: int | None = rule(None, scope="embodied")
    joint_logprob: bool = rule(False, scope="embodied")
    ignore_last: bool = rule(False, scope="embodied")
    detach_critic_input: bool = rule(False, scope="embodied")
    residual_velocity: bool = rule(False, scope="embodied")
    action_env_dim: int | None = rule(None, scope="embodied")
    action_horizon: int | None = rule(None, scope="embodied")
    value_after_vlm: bool = rule(False, scope="embodied")
    train_expert_only: bool = rule(False, scope="embodied")
    discrete_state_input: bool | None = rule(None, scope="embodied")
    tokenizer_path: str | None = rule(None, scope="embodied")
    extra_delta_transform: bool = rule(False, scope="embodied")
    num_q_heads: int = rule(2, scope="offpolicy")
    q_head_type: Literal["default", "layernorm", "crossq"] = rule("default", scope="offpolicy")

    def noise_schedule(self) -> tuple[float, float, int]:
        """``noise_params`` as the flow policies take it: ``(start, end, anneal_steps)``.

        >>> PolicyModelConfig().noise_schedule()
        (0.7, 0.3, 400)
        """
        start, end, steps = self.noise_params
        return (float(start), float(end), int(steps))

    def validate(self, path: str) -> None:
        for key in ("action_dim", "num_action_chunks", "num_images_in_input", "hidden_size", "vocab_size",
                    "val_micro_batch_size", "action_env_dim", "action_horizon"):
            value = getattr(self, key)
            check(value is None or value >= 1, f"{path}.{key}", f"must be >= 1 or null, got {value}")
        for key in ("policy_hidden_sizes", "critic_hidden_sizes", "image_size"):
            for i, width in enumerate(getattr(self, key) or ()):
                check(width >= 1, f"{path}.{key}[{i}]", f"must be >= 1, got {width}")
        check(math.isfinite(self.init_log_std), f"{path}.init_log_std", f"must be finite, got {self.init_log_std}")
        check(self.num_steps >= 1, f"{path}.num_steps", f"must be >= 1, got {self.num_steps}")
        check(math.isfinite(self.noise_level) and self.noise_level > 0, f"{path}.noise_level",
              f"must be > 0, got {self.noise_level}")
        check(self.action_chunk is None or self.action_chunk >= 1, f"{path}.action_chunk",
              f"must be >= 1 or null, got {self.action_chunk}")
        check(self.num_q_heads >= 1, f"{path}.num_q_heads", f"must be >= 1, got {self.num_q_heads}")


@dataclass(frozen=True)
class ActorModelConfig:
    """``actor.model``: the checkpoint and how it is loaded; the LLM-backend and embodied-policy
    keys sit in the same YAML mapping (the reference's layout) and are parsed into
    :class:`LLMModelConfig` (``.llm``) and :class:`PolicyModelConfig` (``.policy``).

    Attributes:
        model_path: local HF model folder the policy starts from; null = rollout.model.model_path
            (one of the two must be set). Megatron reads its config, and converts its weights
            when actor.megatron.use_hf_ckpt is true.
        model_type: math runs: architecture tag as the reference writes it (qwen2.5, llama ...),
            checked before start against the folder's ``config.json``; embodied runs: the policy
            (mlp, cnn, flow_mlp, openvla, openvla_oft, pi0, pi05; sac_mlp for the off-policy recipe).
        precision: dtype of the loaded (master) weights. Megatron: dtype of the model weights;
            bf16 / fp16 need the matching actor.optim.bf16 / fp16 (fp32 main weights in the
            optimizer).
        gradient_checkpointing: recompute activations in the backward pass (HF gradient
            checkpointing).
        is_lora: train LoRA adapters instead of the full weights (math: FSDP2 actors, PEFT layers
            on lora_target_modules, everything else frozen, only the adapter in the optimizer;
            weight sync and the HF export send merged weights; checkpoints also hold the adapter
            in PEFT's layout. Embodied: openvla_oft, RLinf's adapter layout).
        lora_rank: LoRA rank r.
        lora_path: a PEFT LoRA adapter folder to start from (its rank, alpha and targets win).
        attn_implementation: HF ``attn_implementation`` (e.g. sdpa, flash_attention_2); null = the
            model's default.
        low_cpu_mem_usage: HF ``low_cpu_mem_usage`` when loading an HF checkpoint (LLM actor,
            reference and rollout models).
        trust_remote_code: allow custom modelling code from the model folder.
        llm: the LLM backends' keys, written directly under actor.model.
        policy: the embodied policy's keys, written directly under actor.model.
    """

    model_path: str | None = None
    model_type: str | None = None
    precision: Dtype = "fp32"
    gradient_checkpointing: bool = False
    is_lora: bool = False
    lora_rank: int = 32
    lora_path: str | None = None
    attn_implementation: str | None = None
    low_cpu_mem_usage: bool = True
    trust_remote_code: bool = False
    llm: LLMModelConfig = flat(LLMModelConfig, "LLM-backend keys")
    policy: PolicyModelConfig = flat(PolicyModelConfig, "embodied-policy keys")

    def validate(self, path: str) -> None:
        check(self.lora_rank >= 1, f"{path}.lora_rank", f"must be >= 1, got {self.lora_rank}")
