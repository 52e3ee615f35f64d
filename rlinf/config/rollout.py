"""``rollout:`` — the generation engine (HF generate, vLLM, SGLang)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from rlinf.utils.typed_config import check, rule


@dataclass(frozen=True)
class ModelRef:
    """``<section>.model`` of rollout / inference: which HF checkpoint to load.

    Attributes:
        model_path: local HF model folder.
        model_type: architecture tag as the reference writes it (qwen2.5, qwen2, llama, ...);
            checked before start against the folder's ``config.json`` ``model_type`` (qwen2.5 and
            qwen2 name the same architecture).
    """

    model_path: str | None = None
    model_type: str | None = None


@dataclass(frozen=True)
class ChannelRef:
    """``<section>.channel``: the channel a component reads or writes (name, key, capacity).

    Math runs stream rollout results to the driver through ``rollout.channel`` when actor and
    rollout sit apart. Embodied runs move observations, actions and trajectories over direct
    pipes instead (one per env worker), so there the three ``channel`` blocks (env, rollout,
    actor) label those links in the start-up summary and in errors, and take no capacity.

    Attributes:
        name: channel name (math: the streaming channel is ``<name>-<run id>``; embodied: the
            label of the link).
        queue_name: the queue inside the channel (math: each step's results go to
            ``<queue_name>-<step>``; embodied: the label of the direction).
        queue_size: capacity of each queue in items (math: rollout chunks waiting for the
            driver; a full queue makes the rollout workers wait); 0 = unbounded. Embodied pipes
            hold one message per env worker in flight, so only 0.
    """

    name: str = "rlinf_channel"
    queue_name: str = "default"
    queue_size: int = 0

    def validate(self, path: str) -> None:
        check(self.queue_size >= 0, f"{path}.queue_size", f"must be >= 0 (0 = unbounded), got {self.queue_size}")


@dataclass(frozen=True)
class RolloutConfig:
    """``rollout``.

    Attributes:
        group_name: worker group name (names the group in logs and error lines).
        backend: huggingface (HF generate), vllm, or sglang (GPU only).
        rollout_backend: the same choice under the name some math configs use; when set it wins
            (``backend`` may then only be left at huggingface or name the same engine). Read
            :attr:`engine_backend` for the effective one.
        model: see :class:`ModelRef`.
        recompute_logprobs: the PPO "old" log-probs are the actor's (true) or the rollout
            engine's (false). When the update is provably on-policy (one optimizer step per
            batch, synchronous, same weights, no dropout; the start-up line says which) the
            actor's are exactly those its update computes, and no separate pass runs.
        hf_decode: huggingface backend: lean runs the decode steps in rlinf's own loop over the HF
            model (same processors and sampling rule, no per-step ``generate`` overhead) for the
            Llama family (qwen2, qwen3, llama, mistral), falling back to ``generate`` for other
            models; generate always calls ``model.generate``.
        gpu_memory_utilization: vLLM / SGLang GPU memory fraction.
        enforce_eager: disable CUDA graphs (vLLM).
        distributed_executor_backend: vLLM executor (mp, ray or uni).
        disable_log_stats: vLLM: no periodic engine statistics in the log.
        detokenize: the rollout workers decode every response to text and return it with the
            token ids (the reward then scores those texts instead of decoding again).
        print_outputs: the rollout workers print each generation batch's first prompt and
            response (text and token ids) to their log.
        padding, eos: token id overrides (null = the tokenizer's).
        attention_backend: engine attention kernels.
        tensor_parallel_size, pipeline_parallel_size: parallelism inside the engine.
        validate_weight: after the first weight sync, every rollout worker compares a checksum of
            each received tensor with the actor's and stops the run naming the first tensor that
            differs.
        validate_save_dir: with validate_weight, rollout rank 0 also writes the weights it
            received at the first sync to this folder (``rollout_weights.safetensors``).
        sglang_decode_log_interval, max_running_requests, cuda_graph_max_bs, use_torch_compile,
            torch_compile_max_bs: engine knobs as in the reference (``max_running_requests``: the
            sequences one engine decodes at once).
        max_concurrent_rollouts: ``runner.rollout_mode: fully_async``: episodes (sequences; a
            group is ``algorithm.group_size`` of them and starts whole) in flight over all rollout
            ranks at once; null = ``data.rollout_batch_size * algorithm.group_size`` (one step's
            worth). At least ``algorithm.group_size``. Unlike ``max_running_requests`` (an engine's
            decode batch) it bounds how many episodes have started and not finished, tool waits
            included (AReaL's key; AReaL counts prompts, we count sequences).
        pause_grace_period: fully_async: seconds generation goes on after new weights arrive
            before it pauses at a token boundary to load them (>= 0; AReaL's key).
        partial_rollout: fully_async: true: sequences in flight when new weights arrive continue
            under them (re-prefilled; each token keeps the version and log-prob of the policy
            that sampled it); false: the weights load once the episodes in flight have finished
            on the old ones (no episode mixes versions; our key).
        kv_cache_space_gb: vLLM on CPU: KV cache GiB (VLLM_CPU_KVCACHE_SPACE).
        enable_offload: the rollout engine (math) or policy (embodied) leaves the device while a
            collocated actor trains; null = yes for math runs (collocated placements), no for
            embodied runs. Math with false keeps the engine resident (faster turns, needs the
            memory of both). Has no effect when rollout and actor sit apart.
        mode: collocate / disaggregate / hybrid, as the reference writes it; the placement decides
            the mode, and a mode that contradicts it is refused.
        pipeline_stage_num: embodied: env/rollout pipeline stages.
        normalize_states: embodied: the rollout worker normalises state observations with
            running statistics (mean / variance of every train observation it has served, updated
            before each policy step; frozen during evaluation) before the policy sees them; the
            trajectory records the normalised states, so the actor trains on what the policy
            saw. Each rollout worker keeps its own statistics (our key).
        state_norm_clip: embodied: normalised states are clipped to [-clip, clip] (our key).
        channel: see :class:`ChannelRef`.
    """

    group_name: str = "RolloutGroup"
    backend: Literal["huggingface", "vllm", "sglang"] = "huggingface"
    rollout_backend: Literal["huggingface", "vllm", "sglang"] | None = None
    model: ModelRef = field(default_factory=ModelRef)
    recompute_logprobs: bool = rule(True, scope="math")
    hf_decode: Literal["lean", "generate"] = rule("lean", scope="math")
    gpu_memory_utilization: float = 0.55
    enforce_eager: bool = True
    distributed_executor_backend: Literal["mp", "ray", "uni"] = "mp"
    disable_log_stats: bool = True
    detokenize: bool = False
    padding: int | None = None
    eos: int | None = None
    attention_backend: str | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    validate_weight: bool = False
    validate_save_dir: str | None = None
    print_outputs: bool = False
    sglang_decode_log_interval: int = 500000
    max_running_requests: int = 64
    max_concurrent_rollouts: int | None = rule(None, scope="math")
    pause_grace_period: float = rule(0.0, scope="math")
    partial_rollout: bool = rule(True, scope="math")
    cuda_graph_max_bs: int = 128
    use_torch_compile: bool = False
    torch_compile_max_bs: int = 128
    kv_cache_space_gb: float = 1.0
    enable_offload: bool | None = None
    mode: Literal["collocate", "disaggregate", "hybrid"] | None = None
    pipeline_stage_num: int = rule(1, scope="embodied")
    normalize_states: bool = rule(False, scope="embodied")
    state_norm_clip: float = rule(10.0, scope="embodied")
    channel: ChannelRef = field(default_factory=ChannelRef)

    @property
    def engine_backend(self) -> str:
        """The generation engine to build (``rollout_backend`` if set, else ``backend``)."""
        return self.rollout_backend or self.backend

    def check_mode(self, placed: str, path: str = "rollout.mode") -> None:
        """``mode`` (when set) must name what the placement makes of rollout and actor
        (``placed``: collocated, disaggregated or hybrid)."""
        names = {"collocate": "collocated", "disaggregate": "disaggregated", "hybrid": "hybrid"}
        check(self.mode is None or names[self.mode] == placed, path,
              f"{self.mode!r} contradicts cluster.component_placement, which makes rollout and actor "
              f"{placed}; the placement decides: remove rollout.mode or change the placement")

    def validate(self, path: str) -> None:
        check(not self.validate_weight or self.engine_backend == "huggingface", f"{path}.validate_weight",
              f"reads the engine's weights back by HF name, which only the huggingface engine offers "
              f"(this run uses {self.engine_backend})")
        check(self.validate_save_dir is None or self.validate_weight, f"{path}.validate_save_dir",
              "is where validate_weight writes the first sync's weights; set validate_weight: true too")
        check(self.rollout_backend is None or self.backend in ("huggingface", self.rollout_backend),
              f"{path}.rollout_backend", f"{self.rollout_backend!r} disagrees with "
              f"{path}.backend={self.backend!r}; set one of them")
        check(self.hf_decode == "lean" or self.engine_backend == "huggingface", f"{path}.hf_decode",
              f"chooses the huggingface engine's decode loop; this run uses {self.engine_backend}")
        check(0 < self.gpu_memory_utilization <= 1, f"{path}.gpu_memory_utilization",
              f"must be in (0, 1], got {self.gpu_memory_utilization}")
        check(self.state_norm_clip > 0, f"{path}.state_norm_clip", f"must be > 0, got {self.state_norm_clip}")
        check(self.max_concurrent_rollouts is None or self.max_concurrent_rollouts >= 1,
              f"{path}.max_concurrent_rollouts", f"must be >= 1 or null (one step's worth), "
              f"got {self.max_concurrent_rollouts}")
        check(math.isfinite(self.pause_grace_period) and self.pause_grace_period >= 0, f"{path}.pause_grace_period",
              f"must be >= 0 seconds, got {self.pause_grace_period}")
        check(self.kv_cache_space_gb > 0, f"{path}.kv_cache_space_gb", f"must be > 0, got {self.kv_cache_space_gb}")
        for key in ("tensor_parallel_size", "pipeline_parallel_size", "pipeline_stage_num",
                    "max_running_requests", "cuda_graph_max_bs", "torch_compile_max_bs"):
            value = getattr(self, key)
            check(value >= 1, f"{path}.{key}", f"must be >= 1, got {value}")
