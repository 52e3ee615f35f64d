"""DeepSpeed ZeRO training engine: a Hugging Face causal LM trained with ``deepspeed.initialize``
(ZeRO stage 0-3) over the caller's ``torch.distributed`` group, offering the methods of
:class:`~rlinf.engines.training.fsdp.FSDPEngine` the actors use.

WebGym (seed 000) trains with ``algorithm_config.deepspeed_config_filename`` (a ZeRO-1/2/3 JSON);
:mod:`rlinf.engines.training.deepspeed_config` turns such a file into DeepSpeed's config dict
(every key honoured, filled in, noted or refused). The optimizer is always ``torch.optim.AdamW``
built from ``actor.optim`` and the learning rate is set on it before every step from
``actor.lr_sched`` (:mod:`rlinf.engines.training.lr_schedule`), as the FSDP engine does.

No C++ build: DeepSpeed JIT-compiles its shared-memory all-reduce (``deepspeed_shm_comm``) when it
wraps the process group, minutes on a small CPU machine. That op serves only DeepSpeed-inference's
``inference_all_reduce``, never ZeRO training, so the engine marks it unavailable before the first
``deepspeed.initialize`` (:func:`skip_shm_comm_build`); torch's AdamW replaces DeepSpeedCPUAdam.
Nothing is compiled on the CPU path (docs/deepspeed.md has the timings).

The caller initialises ``torch.distributed`` (gloo on the CPU, NCCL on GPUs); DeepSpeed wraps that
default group (``dist_init_required=False``). ``LOCAL_RANK`` is set to the device index when the
caller's launcher did not set it (DeepSpeed requires it).
"""

from __future__ import annotations

import logging
import math
import os

import torch
import torch.distributed as dist

from rlinf.config.actor import ActorConfig
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.engines.training.base import LossFn, TrainingEngine
from rlinf.engines.training.common import (
    batch_to,
    build_optimizer,
    dummy_batch,
    max_over_ranks,
    parse_dtype,
    reduce_metrics,
    response_logprobs,
    sum_over_ranks,
    to_float,
)
from rlinf.engines.training.deepspeed_checkpoint import load_ds_checkpoint, save_ds_checkpoint
from rlinf.engines.training.deepspeed_config import (
    ResolvedDsConfig,
    import_deepspeed,
    load_ds_config,
    resolve_ds_config,
)
from rlinf.engines.training.fsdp_checkpoint import write_hf_folder
from rlinf.engines.training.lr_schedule import schedule_from_config

logger = logging.getLogger(__name__)


def skip_shm_comm_build() -> None:
    """Mark DeepSpeed's ``deepspeed_shm_comm`` op unavailable so that wrapping the process group
    does not JIT-compile it (it only serves DeepSpeed-inference's all-reduce)."""
    import_deepspeed()
    # lazy: optional extra (deepspeed)
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


class DeepSpeedEngine(TrainingEngine):
    """HF causal LM + AdamW + LR schedule under DeepSpeed ZeRO over the default process group.

    Args:
        model_path: HF model folder (weights, config, tokenizer files).
        actor: the ``actor`` section (``model.precision``, ``gradient_checkpointing``,
            ``attn_implementation``, ``trust_remote_code``; ``optim``; ``lr_sched``; ``seed``).
        ds_config: the DeepSpeed JSON object, or the path of the JSON file.
        temperature: logits are divided by it before the log-softmax.
        total_steps: optimizer steps of the run (warm-up fraction, default decay length).
        train_entropy: pass the token entropy (with grad) to the loss function.
        token_weighted: micro-batch weights in :meth:`train_minibatch`: share of the minibatch's
            response tokens (True) or equal.
        micro_batch_size, gradient_accumulation_steps: the web config's
            ``per_device_train_batch_size`` / ``gradient_accumulation_steps`` (authoritative over
            the JSON); they set DeepSpeed's batch bookkeeping, while :meth:`train_minibatch` steps
            once per call over the micro-batches it is given.
        device: default ``cuda:LOCAL_RANK`` when CUDA is available, else the CPU.

    Example (needs DeepSpeed, a model folder and an initialised process group):
        >>> eng = DeepSpeedEngine("model", ActorConfig(), "ds_config_b200_zero2.json",
        ...                       total_steps=10)  # doctest: +SKIP
        >>> logp, _ = eng.compute_logprobs(batch, micro_batch_size=4)  # doctest: +SKIP
        >>> eng.train_minibatch(micro_batches, loss_fn, num_tokens_total)  # doctest: +SKIP
        {'loss': ..., 'grad_norm': ..., 'lr': ...}
    """

    def __init__(self, model_path: str, actor: ActorConfig, ds_config: dict | str, *, temperature: float = 1.0,
                 total_steps: int | None = None, train_entropy: bool = False, token_weighted: bool = True,
                 micro_batch_size: int | None = None, gradient_accumulation_steps: int | None = None,
                 device: torch.device | None = None) -> None:
        # lazy: transformers (~2 s) only when the model is built; importing the engine does not
        from transformers import AutoConfig

        if not dist.is_initialized():
            raise RuntimeError("DeepSpeedEngine needs torch.distributed initialised by the caller "
                               "(world size 1 is fine)")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if actor.model.is_lora:
            raise ValueError("actor.model.is_lora: LoRA is not supported by the DeepSpeed engine; "
                             "use the fsdp training backend")
        if device is None:
            local_rank = int(os.environ.get("LOCAL_RANK", "0"))
            device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
        self.device = torch.device(device)
        source = "ds_config"
        if not isinstance(ds_config, dict):
            source, ds_config = os.path.basename(str(ds_config)), load_ds_config(str(ds_config))
        self.cfg, self.model_path, self.temperature = actor, model_path, float(temperature)
        self.train_entropy, self.token_weighted = train_entropy, token_weighted
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.hf_config = AutoConfig.from_pretrained(model_path, trust_remote_code=actor.model.trust_remote_code)
        self.ds: ResolvedDsConfig = resolve_ds_config(
            ds_config, actor, world_size=self.world_size, device_type=self.device.type,
            micro_batch_size=micro_batch_size, gradient_accumulation_steps=gradient_accumulation_steps,
            hidden_size=getattr(self.hf_config, "hidden_size", None), source=source)
        self.notes = list(self.ds.notes)
        if self.rank == 0:
            for note in self.notes:
                logger.warning("note: %s", note)
        self.schedule = schedule_from_config(actor.optim, actor.lr_sched, total_steps)
        self._offloaded = False
        self.engine = self._initialize(model_path, actor)
        self.optimizer = self.engine.optimizer
        self.step = 0  #: optimizer steps taken (the LR schedule position)

    def _initialize(self, model_path: str, actor: ActorConfig):
        # lazy: transformers (~2 s) only when the model is built; importing the engine does not
        from transformers import AutoModelForCausalLM

        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        os.environ.setdefault("LOCAL_RANK", str(self.device.index or 0))
        skip_shm_comm_build()
        # lazy: optional extra (deepspeed)
        import deepspeed

        torch.manual_seed(actor.seed)
        kwargs = {"attn_implementation": actor.model.attn_implementation} if actor.model.attn_implementation else {}
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=parse_dtype(actor.model.precision),
                                                     trust_remote_code=actor.model.trust_remote_code,
                                                     low_cpu_mem_usage=actor.model.low_cpu_mem_usage, **kwargs)
        self.num_params = sum(p.numel() for p in model.parameters())
        self.pad_token_id = int(getattr(model.config, "pad_token_id", None) or 0)
        model.config.use_cache = False
        if actor.model.gradient_checkpointing or self.ds.activation_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.to(self.device)
        optimizer = build_optimizer([p for p in model.parameters() if p.requires_grad], actor.optim,
                                    self.schedule.lr_at(0))
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=self.ds.config,
                                               dist_init_required=False)
        return engine

    @property
    def model(self) -> torch.nn.Module:
        """The trained HF module (under ZeRO-3 its parameters are partitioned)."""
        return self.engine.module

    # ---- forward --------------------------------------------------------------------------------
    def compute_logprobs(self, batch: RolloutBatch, micro_batch_size: int,
                         with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs (and entropies) ``[B, R]`` of the response tokens, on the CPU, fp32, 0 outside
        ``response_mask``. Collective: ranks with fewer micro-batches run dummy forwards (ZeRO-3
        gathers parameters in every forward)."""
        if micro_batch_size < 1:
            raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
        self.onload()
        self.engine.eval()
        B, R = batch.batch_size, batch.response_ids.shape[1]
        chunks = [batch.select(range(s, min(s + micro_batch_size, B))) for s in range(0, B, micro_batch_size)]
        logps, ents = [], []
        with torch.no_grad():
            for i in range(max_over_ranks(len(chunks), self.device)):
                mb = chunks[i] if i < len(chunks) else dummy_batch(self.pad_token_id)
                lp, ent = response_logprobs(self.engine, batch_to(mb, self.device), self.temperature,
                                            with_entropy and i < len(chunks))
                if i < len(chunks):
                    logps.append(lp.cpu())
                    ents.append(ent.cpu() if ent is not None else None)
        empty = torch.zeros(0, R)
        logp = torch.cat(logps) if logps else empty
        entropy = (torch.cat(ents) if ents else empty) if with_entropy else None
        return logp, entropy

    # ---- training -------------------------------------------------------------------------------
    def train_minibatch(self, micro_batches: list[RolloutBatch], loss_fn: LossFn,
                        num_tokens_total: int) -> dict[str, float]:
        """One optimizer step over this rank's ``micro_batches``; the FSDP engine's contract.

        ``num_tokens_total`` is the number of trained response tokens of the WHOLE minibatch summed over
        all ranks; ``loss_fn`` returns each micro-batch's token-mean loss. The engine backpropagates
        ``loss * world_size * mb_tokens / num_tokens_total`` (``engine.backward`` without
        DeepSpeed's division by the accumulation steps); DeepSpeed averages gradients over the
        ranks, so the update is that of the token-mean loss of the whole minibatch however it is
        split. With ``token_weighted=False`` every micro-batch of every rank weighs the same.

        The accumulation boundary is the last micro-batch of this call
        (``set_gradient_accumulation_boundary``); ranks with fewer micro-batches run zero-weight
        dummy passes so every rank joins the same reductions. Then DeepSpeed's step: gradient
        clipping (``gradient_clipping`` = ``actor.optim.clip_grad``), AdamW at the scheduled LR
        (DeepSpeed skips it when the gradients are not finite; the schedule still advances).

        Returns ``loss_fn``'s metrics averaged over all micro-batches of all ranks, plus ``loss``
        (token-weighted minibatch loss), ``grad_norm`` (before clipping) and ``lr``.
        """
        self.onload()
        self.engine.train()
        local_tokens = sum(mb.num_train_tokens for mb in micro_batches)
        if num_tokens_total < local_tokens:
            raise ValueError(f"num_tokens_total={num_tokens_total} is below this rank's {local_tokens} "
                             "trained tokens; pass the minibatch's token count summed over all ranks")
        total = max(num_tokens_total, 1)
        if not self.token_weighted:
            total_mbs = sum_over_ranks(float(len(micro_batches)), self.device)
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        loss_sum = 0.0
        n = max_over_ranks(len(micro_batches), self.device)
        lr = self.schedule.lr_at(self.step)
        for i in range(n):
            self.engine.set_gradient_accumulation_boundary(i == n - 1)
            if i < len(micro_batches):
                mb = batch_to(micro_batches[i], self.device)
                logp, ent = response_logprobs(self.engine, mb, self.temperature, self.train_entropy)
                loss, metrics = loss_fn(logp, ent, mb)
                weight = (micro_batches[i].num_train_tokens / total if self.token_weighted
                          else 1.0 / total_mbs)
                loss_sum += weight * to_float(loss)
                for k, v in metrics.items():
                    sums[k] = sums.get(k, 0.0) + to_float(v)
                    counts[k] = counts.get(k, 0) + 1
            else:
                logp, _ = response_logprobs(self.engine, batch_to(dummy_batch(self.pad_token_id), self.device),
                                            self.temperature, False)
                loss, weight = logp.sum() * 0.0, 0.0
            self.engine.backward(loss * (weight * self.world_size), scale_wrt_gas=False)
        grad_norm = 0.0
        if n:
            for group in self.engine.optimizer.param_groups:
                group["lr"] = lr
            self.engine.step()
            norm = self.engine.get_global_grad_norm()
            grad_norm = float(norm) if norm is not None else math.nan
        self.engine.set_gradient_accumulation_boundary(False)
        self.step += 1
        out = reduce_metrics(sums, counts, loss_sum)
        out.update(grad_norm=grad_norm, lr=lr)
        return out

    # ---- weights and checkpoints ----------------------------------------------------------------
    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Full weights with HF names (every name of ``state_dict()``, tied names included), on
        the CPU: the optimizer's fp32 master weights of trained parameters (gathered from the ZeRO
        partitions), the module's values for the rest. Collective; rank 0 gets the tensors, other
        ranks ``{}``."""
        # lazy: optional extra (deepspeed)
        from deepspeed.utils import safe_get_full_fp32_param

        self.onload()
        out: dict[str, torch.Tensor] = {}
        done: dict[int, torch.Tensor] = {}  # tied names share one tensor: gathered once
        for name, tensor in self.model.state_dict(keep_vars=True).items():
            if id(tensor) not in done:
                value = safe_get_full_fp32_param(tensor) if isinstance(tensor, torch.nn.Parameter) else None
                if value is None:
                    value = self._gathered(tensor)
                done[id(tensor)] = value.detach().to("cpu", copy=True) if self.rank == 0 else value
            if self.rank == 0:
                out[name] = done[id(tensor)]
        return out

    def _gathered(self, tensor: torch.Tensor) -> torch.Tensor:
        """The full value of a module tensor (ZeRO-3 gathers a partitioned parameter)."""
        if hasattr(tensor, "ds_id"):
            # lazy: optional extra (deepspeed)
            import deepspeed

            with deepspeed.zero.GatheredParameters([tensor], modifier_rank=None):
                return tensor.data.clone()
        return tensor.data

    def weight_source(self) -> dict[str, torch.Tensor]:
        """What an actor -> rollout sync sends: :meth:`full_state_dict` (rank 0; ``{}`` elsewhere).
        Collective."""
        return self.full_state_dict()

    def save_checkpoint(self, path: str) -> None:
        """DeepSpeed's checkpoint (model, ZeRO partitions of the optimizer) in ``path``, then a
        completion record ``engine_state.json`` (step, world size, stage, every file and its
        size) written last, atomically. Collective."""
        self.onload()
        save_ds_checkpoint(self.engine, path, step=self.step, stage=self.ds.stage)

    def load_checkpoint(self, path: str) -> None:
        """Restore :meth:`save_checkpoint`; refuses a folder without a complete record (an
        interrupted save), with a missing or resized file, or saved by another world size or ZeRO
        stage. Collective."""
        self.onload()
        self.step = load_ds_checkpoint(self.engine, path, stage=self.ds.stage)

    def export_hf(self, path: str) -> None:
        """Rank 0 writes an HF folder (config, safetensors fp32 weights, the tokenizer and other
        non-weight files of ``model_path``). Collective."""
        state = self.full_state_dict()
        if self.rank == 0:
            write_hf_folder(state, self.hf_config, self.model_path, path)
        dist.barrier()

    # ---- offloading -----------------------------------------------------------------------------
    def offload(self, weights: bool = True, grads: bool = True, optimizer: bool = True) -> None:
        """GPU: move the named states to the CPU (``engine.offload_states``; weights = the module's
        and the optimizer's master copies). No-op on a CPU device. Compute methods call
        :meth:`onload` themselves."""
        if self.device.type == "cpu":
            return
        # lazy: optional extra (deepspeed)
        from deepspeed.runtime.zero.offload_config import OffloadStateTypeEnum as S

        include = ([S.lp_params, S.hp_params] if weights else []) + \
                  ([S.lp_grads, S.contiguous_grad_buffer] if grads else []) + \
                  ([S.optim_states] if optimizer else [])
        if include:
            self.engine.offload_states(include=include)
            self._offloaded = True

    def onload(self) -> None:
        """Undo :meth:`offload` (``engine.reload_states``); no-op on a CPU device."""
        if self._offloaded:
            self.engine.reload_states()
            self._offloaded = False
