"""FSDP2 training engine: a Hugging Face causal LM sharded with ``torch.distributed.fsdp.fully_shard``.

The caller (the actor worker) initialises ``torch.distributed`` first; every rank of the default
group builds one :class:`FSDPEngine` and calls the collective methods together. World size 1
works too.

``actor.fsdp_config`` keys:

- ``sharding_strategy``: ``full_shard`` = 1-D mesh over the world (or HSDP, see ``fsdp_size``);
  ``shard_grad_op`` = the same with ``reshard_after_forward=False`` (parameters stay gathered
  between forward and backward); ``hybrid_shard`` = HSDP with shard groups of ``fsdp_size``
  (``fsdp_size=-1``: one group = the world, i.e. full sharding); ``no_shard`` = replicated
  weights with all-reduced gradients (DDP-like): ``fully_shard`` on a ``(world, 1)`` mesh.
- ``fsdp_size``: -1 or the world size = shard over all ranks; a divisor ``d`` of the world size =
  2-D mesh ``(world // d, d)``, shard within ``d`` consecutive ranks, replicate across groups.
- ``reshard_after_forward``: passed to ``fully_shard`` (forced False by ``shard_grad_op``).
- ``mixed_precision.param_dtype`` / ``reduce_dtype``: ``MixedPrecisionPolicy`` (compute dtype of
  the gathered weights / gradient-reduction dtype); master weights keep ``actor.model.precision``
  (fp32 by default). ``mixed_precision.buffer_dtype``: floating-point buffers (e.g. rotary
  frequencies) are cast to it before sharding (FSDP2's policy has no buffer dtype).
- ``cpu_offload`` (+ ``offload_pin_memory``): ``CPUOffloadPolicy`` (sharded weights, gradients and
  the optimizer step on the CPU); no effect when the device is already the CPU.
- ``enable_gradient_accumulation``: True = gradients of all micro-batches accumulate locally and
  are reduced once after the last micro-batch (``set_requires_gradient_sync``); False = reduce
  after every micro-batch (less memory, more communication). Same result either way.
- ``amp_autocast.enabled`` / ``precision``: forward under ``torch.autocast``.
- ``use_liger_kernel``: GPU only (ValueError on a CPU device); patches the model with
  ``liger_kernel``'s ``apply_liger_kernel_to_<model_type>`` (written, not run on CPU CI).
- ``grad_scaler.*``: only the defaults are accepted (the config refuses fp16 loss scaling; use bf16).
- ``strategy`` (fsdp / fsdp2): both run this FSDP2 path.
- ``forward_prefetch``: decoder layer i's forward issues layer i+1's all-gather;
  ``backward_prefetch: pre``: layer i's backward issues layer i-1's all-gather (FSDP2's
  ``set_modules_to_forward_prefetch`` / ``set_modules_to_backward_prefetch``); post / null keep
  FSDP2's implicit one-ahead prefetch. Same numbers, another overlap.
- ``limit_all_gathers`` false / ``use_orig_params`` false: cannot be granted (FSDP2 bounds its
  all-gathers and shards the original parameters by design): named in a start-up note.

Micro-batch weights: the ``token_weighted`` argument (the actor passes
``algorithm.use_valid_token_scale``): True = each micro-batch weighs its share of the minibatch's
response tokens; False = every micro-batch of every rank weighs the same.

Also read: ``actor.model.precision`` (master dtype), ``gradient_checkpointing``,
``attn_implementation``, ``trust_remote_code``, ``low_cpu_mem_usage``; ``actor.optim`` (AdamW for both ``adam`` and
``adamw``, as Megatron's Adam is decoupled; ``lr``, ``adam_beta1/2``, ``adam_eps``,
``weight_decay``, ``clip_grad`` with 0 = no clipping); ``actor.lr_sched`` (see
:mod:`rlinf.engines.training.lr_schedule`); ``actor.seed``.
"""

from __future__ import annotations

import math
import os

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import FSDPModule

from rlinf.config.actor import ActorConfig
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.engines.training.base import LossFn, TrainingEngine
from rlinf.engines.training.collective_save import on_rank0
from rlinf.engines.training.common import (
    batch_to,
    build_optimizer,
    clip_grad_norm,
    dummy_batch,
    max_over_ranks,
    move_grads,
    move_optimizer_state,
    parse_dtype,
    reduce_metrics,
    response_logprobs,
    sum_over_ranks,
    to_float,
)
from rlinf.engines.training.fsdp_checkpoint import load_sharded, save_sharded, write_hf_folder
from rlinf.engines.training.fsdp_setup import apply_liger, check_config, shard_model
from rlinf.engines.training.fsdp_weights import GatheredWeights
from rlinf.engines.training.lora import inject_lora, merge_lora_state, write_adapter
from rlinf.engines.training.lr_schedule import schedule_from_config


class FSDPEngine(TrainingEngine):
    """HF causal LM + AdamW + LR schedule, sharded with FSDP2 over the default process group.

    Args:
        model_path: HF model folder (weights, config, tokenizer files).
        cfg: the ``actor`` section.
        temperature: sampling temperature; logits are divided by it before the log-softmax.
        device: this rank's device; default ``cuda:LOCAL_RANK`` when CUDA is available, else CPU.
        total_steps: optimizer steps of the whole run (for ``lr_warmup_fraction`` and as the
            default ``lr_decay_iters``).
        train_entropy: pass the token entropy (with grad) to the loss function in
            :meth:`train_minibatch`; False passes None and saves the memory.
        token_weighted: micro-batch weights in :meth:`train_minibatch`
            (``algorithm.use_valid_token_scale``): share of the minibatch's response tokens
            (True) or equal.
    """

    def __init__(self, model_path: str, cfg: ActorConfig, *, temperature: float = 1.0,
                 device: torch.device | None = None, total_steps: int | None = None,
                 train_entropy: bool = True, token_weighted: bool = True) -> None:
        # lazy: transformers (~2 s) only when the model is built; importing the engine does not
        from transformers import AutoConfig

        if device is None:
            local_rank = int(os.environ.get("LOCAL_RANK", "0"))
            device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
        self.device = torch.device(device)
        check_config(cfg, self.device)
        if not dist.is_initialized():
            raise RuntimeError("FSDPEngine needs torch.distributed initialised by the caller "
                               "(world size 1 is fine)")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.cfg, self.model_path, self.temperature = cfg, model_path, float(temperature)
        self.train_entropy = train_entropy
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        fc = cfg.fsdp_config
        torch.manual_seed(cfg.seed)

        self.hf_config = AutoConfig.from_pretrained(model_path, trust_remote_code=cfg.model.trust_remote_code)
        kwargs = {"attn_implementation": cfg.model.attn_implementation} if cfg.model.attn_implementation else {}
        model = self._load_model(model_path, dtype=parse_dtype(cfg.model.precision),
                                 trust_remote_code=cfg.model.trust_remote_code,
                                 low_cpu_mem_usage=cfg.model.low_cpu_mem_usage, **kwargs)
        self.num_params = sum(p.numel() for p in model.parameters())
        self.pad_token_id = int(getattr(model.config, "pad_token_id", None) or 0)
        self.lora_config = None  # actor.model.is_lora: PEFT layers in place, the rest frozen
        if cfg.model.is_lora:
            self.lora_config = inject_lora(model, cfg.model.lora_rank, cfg.model.llm.lora_alpha,
                                           cfg.model.llm.lora_target_modules, cfg.model.lora_path)
        self._set_trainable(model)
        if fc.use_liger_kernel:
            apply_liger(model)
        model.config.use_cache = False
        if cfg.model.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})

        self.mesh = shard_model(model, fc, self.device, self.world_size)
        self.model = model
        self.autocast_dtype = parse_dtype(fc.amp_autocast.precision) if fc.amp_autocast.enabled else None
        # nothing to move when everything already lives on the CPU
        self._offload_noop = self.device.type == "cpu" or fc.cpu_offload
        self._offloaded: set[str] = set()

        self.schedule = schedule_from_config(cfg.optim, cfg.lr_sched, total_steps)
        self.optimizer = build_optimizer([p for p in model.parameters() if p.requires_grad], cfg.optim,
                                         self.schedule.lr_at(0))
        self.token_weighted = token_weighted
        self.step = 0  #: optimizer steps taken (the LR schedule position)

    # ---- what the model is and what its forward returns (a value engine overrides both) ----------
    def _load_model(self, model_path: str, **kwargs) -> torch.nn.Module:
        """The HF model to train: a causal LM."""
        # lazy: transformers (~2 s) only when the model is built; importing the engine does not
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(model_path, **kwargs)

    def _set_trainable(self, model: torch.nn.Module) -> None:
        """After loading (and LoRA): mark the parameters the optimizer must not see (default: keep
        what loading and LoRA set; a vision-language engine freezes its vision tower)."""

    def _response_forward(self, mb: RolloutBatch, with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per response token ``[b, R]``: the log-prob (and entropy) of ``mb`` (on the device)."""
        return response_logprobs(self.model, mb, self.temperature, with_entropy, self.autocast_dtype)

    # ---- forward --------------------------------------------------------------------------------
    def _fsdp_modules(self) -> list[FSDPModule]:
        return [m for m in self.model.modules() if isinstance(m, FSDPModule)]

    def _reshard(self) -> None:
        """Free gathered weights (the root stays gathered after a no-grad forward)."""
        for m in self._fsdp_modules():
            m.reshard()

    def compute_logprobs(self, batch: RolloutBatch, micro_batch_size: int,
                         with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs (and entropies) ``[B, R]`` of the response tokens, on the CPU, fp32, 0 outside
        ``response_mask``. Collective: ranks may hold different batch sizes; ranks with fewer
        micro-batches run dummy forwards to join the other ranks' all-gathers."""
        if micro_batch_size < 1:
            raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
        self.onload()
        self.model.eval()
        B, R = batch.batch_size, batch.response_ids.shape[1]
        chunks = [batch.select(range(s, min(s + micro_batch_size, B))) for s in range(0, B, micro_batch_size)]
        logps, ents = [], []
        with torch.no_grad():
            for i in range(max_over_ranks(len(chunks), self.device)):
                mb = chunks[i] if i < len(chunks) else dummy_batch(self.pad_token_id)
                lp, ent = self._response_forward(batch_to(mb, self.device), with_entropy and i < len(chunks))
                if i < len(chunks):
                    logps.append(lp.cpu())
                    ents.append(ent.cpu() if ent is not None else None)
        self._reshard()
        empty = torch.zeros(0, R)
        logp = torch.cat(logps) if logps else empty
        entropy = (torch.cat(ents) if ents else empty) if with_entropy else None
        return logp, entropy

    # ---- training -------------------------------------------------------------------------------
    def train_minibatch(self, micro_batches: list[RolloutBatch], loss_fn: LossFn,
                        num_tokens_total: int) -> dict[str, float]:
        """One optimizer step over this rank's ``micro_batches``.

        ``num_tokens_total`` is the number of trained response tokens (``train_mask``) of the
        WHOLE minibatch, summed over all ranks. ``loss_fn`` returns each micro-batch's loss
        normalised by that micro-batch's own token count (token-mean); the engine backpropagates
        ``loss * world_size * mb_tokens / num_tokens_total``. FSDP averages gradients over the
        ``world_size`` ranks, so the reduced gradient is that of
        ``sum_mb loss_mb * mb_tokens / num_tokens_total``, i.e. the token-mean loss of the whole
        minibatch however the samples are split over ranks and micro-batches.

        Ranks may hold different numbers of micro-batches; the shorter ones run zero-weight dummy
        passes so that every rank joins the same FSDP collectives. After the backward passes:
        gradient clipping (``optim.clip_grad``; 0 = off), the AdamW step at the scheduled LR
        (skipped when the gradient norm is not finite; the schedule still advances), zero_grad.

        Returns ``loss_fn``'s metrics averaged over all micro-batches of all ranks, plus ``loss``
        (the token-weighted minibatch loss), ``grad_norm`` (before clipping) and ``lr``; the same
        values on every rank.
        """
        self.onload()
        self.model.train()
        local_tokens = sum(mb.num_train_tokens for mb in micro_batches)
        if num_tokens_total < local_tokens:
            raise ValueError(f"num_tokens_total={num_tokens_total} is below this rank's {local_tokens} "
                             "trained tokens; pass the minibatch's token count summed over all ranks")
        total = max(num_tokens_total, 1)
        if not self.token_weighted:  # every micro-batch of every rank weighs the same
            total_mbs = sum_over_ranks(float(len(micro_batches)), self.device)
        accumulate = self.cfg.fsdp_config.enable_gradient_accumulation
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        loss_sum = 0.0
        n = max_over_ranks(len(micro_batches), self.device)
        for i in range(n):
            self.model.set_requires_gradient_sync(not accumulate or i == n - 1)
            if i < len(micro_batches):
                mb = batch_to(micro_batches[i], self.device)
                logp, ent = self._response_forward(mb, self.train_entropy)
                loss, metrics = loss_fn(logp, ent, mb)
                weight = (micro_batches[i].num_train_tokens / total if self.token_weighted
                          else 1.0 / total_mbs)
                loss_sum += weight * to_float(loss)
                for k, v in metrics.items():
                    sums[k] = sums.get(k, 0.0) + to_float(v)
                    counts[k] = counts.get(k, 0) + 1
            else:
                logp, _ = self._response_forward(batch_to(dummy_batch(self.pad_token_id), self.device), False)
                loss, weight = logp.sum() * 0.0, 0.0
            (loss * (weight * self.world_size)).backward()
        self.model.set_requires_gradient_sync(True)

        grad_norm = clip_grad_norm(self.model, self.cfg.optim.clip_grad, self.device)
        lr = self.schedule.lr_at(self.step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        if math.isfinite(grad_norm):
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        out = reduce_metrics(sums, counts, loss_sum)
        out.update(grad_norm=grad_norm, lr=lr)
        return out

    # ---- weights and checkpoints ----------------------------------------------------------------
    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Full weights with HF names, on the CPU, in the master dtype. Collective; rank 0 gets the
        tensors, other ranks get ``{}``."""
        self.onload()
        state = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if self.lora_config is not None and state:
            state = merge_lora_state(state, self.lora_config)
        return state

    def weight_source(self) -> GatheredWeights | dict[str, torch.Tensor]:
        """What an actor -> rollout sync sends: the weights gathered one tensor at a time as the
        link packs them (:class:`~rlinf.engines.training.fsdp_weights.GatheredWeights`), or with
        LoRA the merged :meth:`full_state_dict`. Every rank calls it; see ``GatheredWeights``."""
        self.onload()
        if self.lora_config is not None:
            return self.full_state_dict()
        return GatheredWeights(self.model)

    def adapter_state_dict(self) -> dict[str, torch.Tensor]:
        """The LoRA tensors, unsharded, on the CPU (collective; every rank gets them)."""
        out = {}
        for name, p in self.model.named_parameters():
            if ".lora_" in name:
                full = p.full_tensor() if hasattr(p, "full_tensor") else p
                out[name] = full.detach().cpu()
        return out

    def save_checkpoint(self, path: str) -> None:
        """Sharded DCP checkpoint of model + optimizer in ``path`` (a folder every rank can reach),
        plus the step counter (= LR-schedule position). Collective."""
        self.onload()
        save_sharded(self.model, self.optimizer, path, self.step)
        if self.lora_config is not None:  # the adapter alone, in PEFT's layout, next to the shards
            adapter = self.adapter_state_dict()
            on_rank0(lambda: write_adapter(adapter, self.lora_config, os.path.join(path, "lora_adapter")))

    def load_checkpoint(self, path: str) -> None:
        """Restore :meth:`save_checkpoint`'s state (DCP reshards, so the world size may differ).
        Collective."""
        self.onload()
        self.step = load_sharded(self.model, self.optimizer, path)

    def export_hf(self, path: str) -> None:
        """Rank 0 writes an HF folder: config + safetensors weights (master dtype) + the other
        non-weight files of ``model_path`` (tokenizer, generation config, chat template).
        Collective."""
        state = self.full_state_dict()
        if self.rank == 0:
            write_hf_folder(state, self.hf_config, self.model_path, path)
        dist.barrier()

    # ---- offloading -----------------------------------------------------------------------------
    def offload(self, weights: bool = True, grads: bool = True, optimizer: bool = True) -> None:
        """Move the named state to the CPU (GPU devices). No-op on a CPU device and with
        ``cpu_offload`` (the state already lives on the CPU). Moving the weights moves their
        gradients too. Compute methods call :meth:`onload` themselves."""
        if self._offload_noop:
            return
        self._reshard()
        if weights:
            self.model.to("cpu")
            self._offloaded.add("weights")
        if grads:
            move_grads(self.model, "cpu")
            self._offloaded.add("grads")
        if optimizer:
            move_optimizer_state(self.optimizer, "cpu")
            self._offloaded.add("optimizer")
        torch.cuda.synchronize(self.device)
        torch.cuda.empty_cache()

    def onload(self) -> None:
        """Move what :meth:`offload` moved back to the device."""
        if not self._offloaded:
            return
        if "weights" in self._offloaded:
            self.model.to(self.device)
        if "grads" in self._offloaded:
            move_grads(self.model, self.device)
        if "optimizer" in self._offloaded:
            move_optimizer_state(self.optimizer, self.device)
        self._offloaded.clear()
        torch.cuda.synchronize(self.device)
