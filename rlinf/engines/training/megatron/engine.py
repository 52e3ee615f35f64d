"""Megatron training engine: megatron-core ``GPTModel`` with tensor / pipeline / sequence
parallelism, Megatron DDP and (distributed) optimizer, behind :class:`TrainingEngine`.

The caller (the actor worker) initialises ``torch.distributed`` first; every rank of the default
group builds one :class:`MegatronEngine` and calls the collective methods together. The world is
split into ``dp = world / (tp * pp)`` data-parallel replicas of ``tp * pp`` ranks (megatron's
rank order: tensor ranks consecutive, then replicas, then pipeline stages). **Every rank of a
replica passes the same batch** (the actor worker gathers its group's shards,
:func:`rlinf.engines.training.megatron.inputs.gather_replica_batch`); replicas pass their own.

Weights come from a converted checkpoint (``actor.model.megatron_checkpoint``) or from
``model_path`` converted on the first run and cached (``actor.megatron.use_hf_ckpt``,
:mod:`rlinf.engines.training.megatron.hf_cache`). Architecture keys of ``actor.model`` must agree
with the HF config; the parallel and recompute keys, precision and fusions become
``TransformerConfig`` fields.

Log-probs are computed from vocabulary-parallel logits without gathering the vocabulary
(:mod:`rlinf.engines.training.megatron.logprobs`); the loss is the same :data:`LossFn` as the
FSDP engine's, weighted so that the update is the token-mean over the whole minibatch however it
is split over replicas and micro-batches. Pipeline stages run megatron's 1F1B schedule (forward
only for log-probs). Offload moves weights, gradient buffers and optimizer state to host memory
in place (:mod:`rlinf.engines.training.megatron.offload`).

megatron-core needs CUDA; :func:`rlinf.engines.training.megatron.runtime.require_megatron` fails
at construction on a CPU-only process (the tests run it on the CPU through a test-only shim).
"""

from __future__ import annotations

import functools
import os

import torch
import torch.distributed as dist

from rlinf.config.actor import ActorConfig
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.engines.training.base import LossFn, TrainingEngine
from rlinf.engines.training.common import dummy_batch, parse_dtype, reduce_metrics, to_float
from rlinf.engines.training.lr_schedule import schedule_from_config
from rlinf.engines.training.megatron import engine_setup as setup
from rlinf.engines.training.megatron.inputs import ModelInputs, model_inputs
from rlinf.engines.training.megatron.logprobs import vocab_parallel_logprobs
from rlinf.engines.training.megatron.offload import StorageOffloader
from rlinf.engines.training.megatron.optimizer import (
    build_optimizer,
    load_optimizer_state,
    main_tensors,
    optimizer_state,
    optimizer_step,
    set_lr,
)
from rlinf.engines.training.megatron.runtime import init_model_parallel, require_megatron
from rlinf.engines.training.megatron.weight_sync import gather_hf_state


class MegatronEngine(TrainingEngine):
    """megatron-core GPTModel + Adam + LR schedule over the default process group.

    Args:
        model_path: HF model folder (config, tokenizer files; weights when converting).
        cfg: the ``actor`` section.
        temperature: sampling temperature; logits are divided by it before the log-softmax.
        device: this rank's device; default ``cuda:LOCAL_RANK`` when CUDA is available, else CPU.
        total_steps: optimizer steps of the whole run (LR warm-up fraction, default decay length).
        train_entropy: pass the token entropy (with grad) to the loss function.
        trainable: False builds a frozen model without DDP and optimizer (the reference policy).
    """

    def __init__(self, model_path: str, cfg: ActorConfig, *, temperature: float = 1.0,
                 device: torch.device | None = None, total_steps: int | None = None,
                 train_entropy: bool = True, trainable: bool = True, token_weighted: bool = True) -> None:
        if device is None:
            local_rank = int(os.environ.get("LOCAL_RANK", "0"))
            device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
        self.device = torch.device(device)
        require_megatron(self.device)
        if not dist.is_initialized():
            raise RuntimeError("MegatronEngine needs torch.distributed initialised by the caller")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.cfg, self.model_path, self.temperature = cfg, model_path, float(temperature)
        self.train_entropy, self.trainable = train_entropy, trainable
        m = cfg.model
        self.layout = init_model_parallel(m.llm.tensor_model_parallel_size, m.llm.pipeline_model_parallel_size,
                                          cfg.seed, cfg.megatron.distributed_timeout_minutes)
        self.hf_config = setup.load_hf_config(model_path, cfg)
        self.checkpoint = setup.weights_folder(model_path, cfg, self.device)
        self.meta = setup.checkpoint_meta(self.checkpoint, model_path, self.layout)
        self.vocab_size = int(self.meta["vocab_size"])
        self.vocab_padded = int(self.meta["padded_vocab_size"])
        self.pad_token_id = int(getattr(self.hf_config, "pad_token_id", None) or 0)
        self.params_dtype = parse_dtype(m.precision)
        self.sequence_parallel = m.llm.sequence_parallel and self.layout.tp > 1

        torch.manual_seed(cfg.seed)
        self.module = setup.build_stage(self.hf_config, cfg, self.layout, self.meta, self.params_dtype,
                                        self.checkpoint, self.device)
        self.tf_config = self.module.config
        self.model = self.module  # what the schedules run: the DDP wrapper when trainable
        self.optimizer = None
        #: micro-batch weights: share of valid tokens (True) or equal (algorithm.use_valid_token_scale)
        self.token_weighted = token_weighted
        if trainable:
            self.model = setup.wrap_ddp(self.module, cfg)
            self.schedule = schedule_from_config(cfg.optim, cfg.lr_sched, total_steps)
            self.optimizer = build_optimizer(self.model, cfg.optim, self.params_dtype, self.schedule.lr_at(0))
            setup.connect_schedule_hooks(self.tf_config, self.model, self.optimizer, cfg)
        else:
            self.module.requires_grad_(False)
        self.step = 0  #: optimizer steps taken (the LR schedule position)
        self._offloaded: dict[str, StorageOffloader] = {}

    @property
    def num_params(self) -> int:
        """Parameters of the whole model (summed over this replica's tensor x pipeline ranks)."""
        local = torch.tensor([sum(p.numel() for p in self.module.parameters())], dtype=torch.float64)
        group = self.model_parallel_group
        if group is not None:
            local = local.to(self.device)
            dist.all_reduce(local, group=group)
        return int(local.item())

    @property
    def model_parallel_group(self):
        """The process group of this rank's data-parallel replica (its tensor x pipeline ranks,
        which must pass the same batches); None when a replica is one rank."""
        if self.layout.tp * self.layout.pp == 1:
            return None
        # lazy: optional extra (megatron)
        from megatron.core import parallel_state as ps

        return ps.get_model_parallel_group()

    # ---- forward ----------------------------------------------------------------------------------
    def _inputs(self, mbs: list[RolloutBatch]) -> list[ModelInputs]:
        """Device inputs of ``mbs``; one common shape when the pipeline needs fixed shapes."""
        multiple = self.layout.tp if self.sequence_parallel else 1
        fixed = self.layout.pp > 1 and not self.cfg.model.llm.variable_seq_lengths
        length = max(mb.prompt_ids.shape[1] + mb.response_ids.shape[1] for mb in mbs) if fixed else None
        if fixed and len({mb.batch_size for mb in mbs}) > 1:
            raise ValueError("actor.model.variable_seq_lengths=false with pipeline parallelism needs "
                             "micro-batches of one size; got sizes "
                             f"{sorted({mb.batch_size for mb in mbs})} (set it to true)")
        out = [model_inputs(mb, self.pad_token_id, self.device, seq_multiple=multiple, seq_length=length)
               for mb in mbs]
        limit = self.cfg.model.llm.seq_length
        if limit is not None and max(x.shape[1] for x in out) > limit:
            raise ValueError(f"a micro-batch holds {max(x.shape[1] for x in out)} tokens, more than "
                             f"actor.model.seq_length={limit}")
        return out

    def _token_logprobs(self, output: torch.Tensor, x: ModelInputs, with_entropy: bool):
        """fp32 ``(logprobs, entropy or None)`` ``[b, R]`` of the response tokens from the last
        stage's vocabulary-parallel logits ``[b, s, V / tp]``, 0 outside ``response_mask``."""
        # lazy: optional extra (megatron)
        from megatron.core import parallel_state as ps

        mb = x.batch
        P, R = mb.prompt_ids.shape[1], mb.response_ids.shape[1]
        logits = output[:, P - 1:P - 1 + R].float() / self.temperature
        local = logits.shape[-1]
        logp, entropy = vocab_parallel_logprobs(
            logits, mb.response_ids, vocab_start=self.layout.tp_rank * local, vocab_size=self.vocab_size,
            tp_size=self.layout.tp, tp_group=ps.get_tensor_model_parallel_group(), with_entropy=with_entropy)
        mask = mb.response_mask.bool()
        logp = torch.where(mask, logp, torch.zeros_like(logp))
        if entropy is not None:
            entropy = torch.where(mask, entropy, torch.zeros_like(entropy))
        return logp, entropy

    def _run(self, inputs: list[ModelInputs], loss_func_for, forward_only: bool) -> list:
        """One pass of megatron's schedule (1F1B when pipelined) over ``inputs``; returns what the
        last stage's loss functions collected (``[]`` on other stages)."""
        # lazy: optional extra (megatron)
        from megatron.core.pipeline_parallel import get_forward_backward_func

        data = iter(inputs)

        def forward_step(data_iterator, model):
            x = next(data_iterator)
            output = model(x.input_ids, x.position_ids, x.attention_mask)
            return output, functools.partial(loss_func_for, x)

        return get_forward_backward_func()(
            forward_step_func=forward_step, data_iterator=data, model=[self.model],
            num_microbatches=len(inputs), seq_length=max(x.shape[1] for x in inputs),
            micro_batch_size=max(x.shape[0] for x in inputs), forward_only=forward_only,
            collect_non_loss_data=forward_only)

    def compute_logprobs(self, batch: RolloutBatch, micro_batch_size: int,
                         with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs (and entropies) ``[B, R]`` of the response tokens, on the CPU, fp32, 0 outside
        ``response_mask``. Collective over this replica's ranks, which pass the same batch."""
        if micro_batch_size < 1:
            raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
        B, R = batch.batch_size, batch.response_ids.shape[1]
        if B == 0:
            return torch.zeros(0, R), (torch.zeros(0, R) if with_entropy else None)
        self.onload()
        self.model.eval()
        mbs = [batch.select(range(s, min(s + micro_batch_size, B))) for s in range(0, B, micro_batch_size)]

        def collect(x, output, non_loss_data=True):
            logp, ent = self._token_logprobs(output, x, with_entropy)
            return logp.cpu(), (ent.cpu() if ent is not None else None)

        with torch.no_grad():
            results = self._run(self._inputs(mbs), collect, forward_only=True)
        results = self._from_last_stage(results)
        logp = torch.cat([lp for lp, _ in results])
        entropy = torch.cat([e for _, e in results]) if with_entropy else None
        return logp, entropy

    def _from_last_stage(self, results: list) -> list:
        """The last pipeline stage's collected results, on every stage."""
        if self.layout.pp == 1:
            return results
        # lazy: optional extra (megatron)
        from megatron.core import parallel_state as ps

        box = [results if self.layout.is_last_stage else None]
        dist.broadcast_object_list(box, group=ps.get_pipeline_model_parallel_group(),
                                   group_src=self.layout.pp - 1, device=self.device)
        return box[0]

    # ---- training ---------------------------------------------------------------------------------
    def train_minibatch(self, micro_batches: list[RolloutBatch], loss_fn: LossFn,
                        num_tokens_total: int) -> dict[str, float]:
        """One optimizer step over this replica's ``micro_batches``.

        ``num_tokens_total`` counts the trained response tokens of the WHOLE minibatch (all replicas).
        ``loss_fn`` returns each micro-batch's token-mean loss; the schedule backpropagates
        ``loss * dp * n_micro * mb_tokens / num_tokens_total`` (megatron divides by the number of
        micro-batches, its DDP averages over the ``dp`` replicas), so the reduced gradient is that
        of ``sum_mb loss_mb * mb_tokens / num_tokens_total``: the same as the FSDP engine's.

        Then: global gradient norm, clipping (``optim.clip_grad``), the Adam step at the scheduled
        LR (skipped when the norm is not finite or fp16 overflowed; the schedule advances anyway).
        Returns ``loss_fn``'s metrics averaged over all micro-batches, ``loss`` (token-weighted),
        ``grad_norm`` (before clipping) and ``lr``; the same on every rank.
        """
        if not self.trainable:
            raise RuntimeError("this MegatronEngine was built with trainable=False")
        local_tokens = sum(mb.num_train_tokens for mb in micro_batches)
        if num_tokens_total < local_tokens:
            raise ValueError(f"num_tokens_total={num_tokens_total} is below this replica's {local_tokens} "
                             "trained tokens; pass the minibatch's token count summed over all ranks")
        self.onload()
        self.model.train()
        self.model.zero_grad_buffer()
        self.optimizer.zero_grad()
        total = max(num_tokens_total, 1)
        mbs = list(micro_batches) or [dummy_batch(self.pad_token_id)]
        n, scale = len(mbs), self.layout.dp * len(mbs)

        def loss_func(x, output):
            logp, ent = self._token_logprobs(output, x, self.train_entropy)
            loss, metrics = loss_fn(logp, ent, x.batch)
            if not micro_batches:
                weight = 0.0
            elif self.token_weighted:
                weight = x.batch.num_train_tokens / total
            else:  # algorithm.use_valid_token_scale false: each micro-batch weighs the same
                weight = 1.0 / scale
            return loss * (weight * scale), {"loss": weight * to_float(loss), "metrics": metrics}

        collected = self._run(self._inputs(mbs), loss_func, forward_only=False)
        lr = self.schedule.lr_at(self.step)
        set_lr(self.optimizer, lr)
        _, grad_norm = optimizer_step(self.optimizer, self.cfg.optim.clip_grad)
        self.step += 1

        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        loss_sum = 0.0
        if self.layout.reports and micro_batches:
            for item in collected[:n]:
                loss_sum += item["loss"]
                for k, v in item["metrics"].items():
                    sums[k] = sums.get(k, 0.0) + to_float(v)
                    counts[k] = counts.get(k, 0) + 1
        out = reduce_metrics(sums, counts, loss_sum)
        out.update(grad_norm=grad_norm, lr=lr)
        return out

    # ---- weights and checkpoints ------------------------------------------------------------------
    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Full weights with HF names on the CPU, on global rank 0 (``{}`` elsewhere); the model's
        dtype. Collective."""
        self.onload()
        self._sync_params()
        return gather_hf_state(self.module, self.layout, self.hf_config, list(self.meta["layers_per_stage"]),
                               bool(self.meta.get("hf_has_lm_head", False)), self.device)

    def weight_source(self) -> dict[str, torch.Tensor]:
        """What an actor -> rollout sync sends: :meth:`full_state_dict` (HF names; Megatron's
        fused and split layouts are converted back whole on rank 0). Collective."""
        return self.full_state_dict()

    def _sync_params(self) -> None:
        """With overlapped parameter gathers the updated weights reach the model at its next
        forward; force them in before the weights are read."""
        if self.trainable and self.cfg.optim.overlap_param_gather:
            self.model.start_param_sync(force_sync=True)

    def save_checkpoint(self, path: str) -> None:
        """One file per rank (model shard, optimizer state, step) plus the layout. Resume needs the
        same tensor / pipeline / data-parallel sizes. Collective."""
        self.onload()
        self._sync_params()
        setup.save_rank_state(path, self.layout, {
            "model": self.module.state_dict(), "step": self.step,
            "optimizer": optimizer_state(self.optimizer) if self.optimizer is not None else None})

    def load_checkpoint(self, path: str) -> None:
        """Restore :meth:`save_checkpoint`'s state. Collective."""
        self.onload()
        state = setup.load_rank_state(path, self.layout)
        self.module.load_state_dict(state["model"], strict=True)
        if self.optimizer is not None and state["optimizer"] is not None:
            load_optimizer_state(self.optimizer, state["optimizer"])
        self.step = int(state["step"])

    def export_hf(self, path: str) -> None:
        """Rank 0 writes an HF folder (config, safetensors weights, the model folder's other
        files). Collective."""
        # lazy: fsdp_checkpoint pulls torch.distributed.checkpoint (~0.25 s); only when an HF folder is written
        from rlinf.engines.training.fsdp_checkpoint import write_hf_folder

        state = self.full_state_dict()
        if dist.get_rank() == 0:
            write_hf_folder(state, self.hf_config, self.model_path, path)
        dist.barrier()

    # ---- offloading -------------------------------------------------------------------------------
    def offload(self, weights: bool = True, grads: bool = True, optimizer: bool = True) -> None:
        """Move the named state to host memory in place (views stay valid; see
        :mod:`rlinf.engines.training.megatron.offload`). Gradients are dropped, not copied: they
        are zeroed before every step. Compute methods call :meth:`onload` themselves."""
        pin = self.cfg.optim.optimizer_enable_pin and self.device.type == "cuda"
        self._sync_params()
        wanted = []
        if weights:
            wanted.append(("weights", list(self.module.parameters()), True))
        if grads and self.trainable:
            buffers = self.model.buffers + self.model.expert_parallel_buffers
            wanted.append(("grads", [b.grad_data for b in buffers], False))
        if optimizer and self.optimizer is not None:
            wanted.append(("optimizer", main_tensors(self.optimizer), True))
        # a storage in two groups (fp32 main weights are the model weights) moves with the first
        taken: set[int] = set()
        offloaders = {}
        for name, tensors, keep in wanted:
            if name in self._offloaded:
                continue
            mine = [t for t in tensors if t.untyped_storage().data_ptr() not in taken]
            taken.update(t.untyped_storage().data_ptr() for t in mine)
            offloaders[name] = StorageOffloader(mine, pin_memory=pin, keep_values=keep)
        for name, offloader in offloaders.items():
            offloader.offload()
            self._offloaded[name] = offloader
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def onload(self) -> None:
        """Bring back what :meth:`offload` moved."""
        for offloader in self._offloaded.values():
            offloader.onload()
        self._offloaded.clear()
