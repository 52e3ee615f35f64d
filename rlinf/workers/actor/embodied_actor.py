"""The embodied actor worker: an FSDP2-sharded policy (with value head) trained by PPO / GRPO.

Each rank gets an equal shard of the step's samples. Per ``algorithm.update_epochs`` pass the
shard is shuffled and cut into ``samples / actor.global_batch_size`` minibatches (one optimizer
step each), every minibatch into micro-batches of ``actor.micro_batch_size`` (gradient
accumulation). The critic's parameters use ``actor.optim.value_lr`` when set. ``actor.lr_sched``
sets the rate of every optimizer step (warm-up, then constant / linear / cosine decay over
``lr_decay_iters`` optimizer steps, or the run's planned total; the critic's rate keeps its ratio
to the actor's); ``actor/lr`` logs the rate the next step will use.

``algorithm.normalize_minibatch_advantages`` whitens each minibatch's advantages before it is cut
into micro-batches. ``algorithm.target_kl``: after a minibatch's backward passes, its approximate
KL (per action, averaged over the minibatch and, with several ranks, over ranks) is compared with
the target; above it the gradients are dropped, no step is taken and the update ends
(``actor/early_stop`` = 1, ``actor/optimizer_steps`` counts the steps taken).

``algorithm.loss_type: decoupled_ppo`` (with ``max_head_offpolicyness: 1``): before the first
epoch the shard's log-probs are recomputed under the current weights (the proximal policy, no
gradient); the loss clips the ratio to it and weights each term by ``pi_prox / pi_behav``
(:func:`~rlinf.objectives.embodied.embodied_ppo_loss`), and the ``target_kl`` test measures the
KL from it (this update's own change) instead of from the one-version-stale behaviour policy.
"""

from __future__ import annotations

import dataclasses
import os

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard

from rlinf.algorithms.embodied import aggregate_logprobs
from rlinf.algorithms.running_norm import approx_kl, whiten
from rlinf.config.actor import ActorConfig
from rlinf.config.algorithm import AlgorithmConfig
from rlinf.data.embodied_batch import EmbodiedBatch
from rlinf.engines.training.common import move_optimizer_state
from rlinf.engines.training.fsdp_checkpoint import load_sharded, save_sharded
from rlinf.engines.training.fsdp_setup import build_mesh
from rlinf.engines.training.lr_schedule import schedule_from_config
from rlinf.models.embodied import build_policy
from rlinf.models.embodied.base import ObsSpec
from rlinf.objectives.embodied import embodied_ppo_loss
from rlinf.scheduler import Worker
from rlinf.workers.links import POLICY_LINK
from rlinf.workers.memory_hints import embodied_train_step


def _is_critic(name: str) -> bool:
    return "critic" in name or "value_head" in name


class EmbodiedActorWorker(Worker):
    """One rank of the embodied actor group.

    Args:
        actor: ``actor:`` section (``model`` builds the policy; batch sizes; optimizer).
        algorithm: ``algorithm:`` section.
        obs_spec: what the simulators give (sizes the policy).
        value_clip: ``critic.value_clip``.
    """

    def __init__(self, actor: ActorConfig, algorithm: AlgorithmConfig, obs_spec: ObsSpec,
                 value_clip: float | None = 0.2, total_steps: int | None = None):
        torch.manual_seed(actor.seed)
        self.init_process_group()
        self.actor, self.algorithm, self.value_clip = actor, algorithm, value_clip
        self.obs_spec = obs_spec
        device = self.device
        policy = build_policy(actor.model, obs_spec, temperature=algorithm.sampling_params.temperature)
        policy.to(device)
        if self.world_size > 1:  # one rank: the plain module (FSDP2 would only add DTensor overhead)
            mesh = build_mesh(device.type, self.world_size, actor.fsdp_config.sharding_strategy,
                              actor.fsdp_config.fsdp_size)
            fully_shard(policy, mesh=mesh)
        self.policy = policy
        o = actor.optim
        params = [(n, p) for n, p in policy.named_parameters() if p.requires_grad]
        groups = [{"params": [p for n, p in params if not _is_critic(n)], "lr": o.lr}]
        critic = [p for n, p in params if _is_critic(n)]
        if critic:
            groups.append({"params": critic, "lr": o.value_lr if o.value_lr is not None else o.lr})
        # One rank trains a plain module: the fused kernel (CPU or CUDA) updates every tensor in one
        # call (64 small-MLP steps: 166 -> 128 ms on CPU); sharded DTensors keep the default.
        fused = True if self.world_size == 1 and device.type in ("cpu", "cuda") else None
        self.optimizer = torch.optim.AdamW(groups, betas=(o.adam_beta1, o.adam_beta2), eps=o.adam_eps,
                                           weight_decay=o.weight_decay, fused=fused)
        self.step = 0
        # actor.lr_sched: the actor's rate follows the schedule, the critic's keeps its ratio to it
        # (value_lr / lr)
        self.schedule = schedule_from_config(o, actor.lr_sched, total_steps)
        self._base_lrs = [g["lr"] * self.schedule.max_lr / o.lr for g in self.optimizer.param_groups]
        self._apply_lr()
        self.generator = torch.Generator().manual_seed(actor.seed + self.rank)

    def _apply_lr(self) -> None:
        """Set each parameter group's rate for optimizer step ``self.step`` (``actor.lr_sched``)."""
        scale = self.schedule.lr_at(self.step) / self.schedule.max_lr
        for group, base in zip(self.optimizer.param_groups, self._base_lrs):
            group["lr"] = base * scale

    @embodied_train_step
    def update(self, shard: EmbodiedBatch, num_minibatches: int) -> dict[str, float]:
        """PPO passes over this rank's shard; returns the mean of every micro-batch's metrics plus
        ``grad_norm`` (mean over optimizer steps), ``approx_kl`` (mean over minibatches),
        ``optimizer_steps`` and ``early_stop`` — the same on every rank's call order."""
        algo, mbs = self.algorithm, self.actor.micro_batch_size
        per_minibatch = shard.size // num_minibatches
        sums: dict[str, float] = {}
        count, grad_norms, kls, stopped = 0, [], [], False
        self.policy.train()
        if algo.loss_type == "decoupled_ppo":
            shard = dataclasses.replace(shard, prox_logprobs=self._proximal_logprobs(shard))
        for _ in range(algo.update_epochs):
            order = torch.randperm(shard.size, generator=self.generator)
            for b in range(num_minibatches):
                minibatch = shard.select(order[b * per_minibatch:(b + 1) * per_minibatch])
                if algo.normalize_minibatch_advantages:
                    minibatch = dataclasses.replace(minibatch, advantages=whiten(minibatch.advantages))
                micro = [minibatch.select(range(i, min(i + mbs, minibatch.size)))
                         for i in range(0, minibatch.size, mbs)]
                self.optimizer.zero_grad(set_to_none=True)
                kl_sum = torch.zeros((), dtype=torch.float64)
                for mb in micro:
                    out = self.policy(mode="evaluate", raw_actions=mb.raw_actions.to(self.device),
                                      **mb.policy_inputs(self.device))
                    dev = lambda x: None if x is None else x.to(self.device)  # noqa: E731
                    loss, metrics = embodied_ppo_loss(
                        out.logprobs, dev(mb.old_logprobs), dev(mb.advantages), algo,
                        entropy=out.entropy, values=out.values, old_values=dev(mb.old_values),
                        returns=dev(mb.returns) if out.values is not None else None,
                        value_clip=self.value_clip, prox_logprobs=dev(mb.prox_logprobs))
                    (loss / len(micro)).backward()
                    with torch.no_grad():  # the KL of this update's change (decoupled: from the proximal policy)
                        start = mb.prox_logprobs if mb.prox_logprobs is not None else mb.old_logprobs
                        kl = approx_kl(aggregate_logprobs(out.logprobs, "action_level"),
                                       aggregate_logprobs(dev(start), "action_level"))
                    kl_sum += float(kl) * mb.size
                    for k, v in metrics.items():
                        sums[k] = sums.get(k, 0.0) + v
                    count += 1
                kl_mean = self._mean_over_ranks(kl_sum / max(minibatch.size, 1))
                kls.append(kl_mean)
                if algo.target_kl is not None and kl_mean > algo.target_kl:
                    self.optimizer.zero_grad(set_to_none=True)
                    stopped = True
                    break
                grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(),
                                                           self.actor.optim.clip_grad or float("inf"))
                grad_norms.append(float(grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor")
                                        else grad_norm))
                self.optimizer.step()
                self.step += 1
                self._apply_lr()
            if stopped:
                break
        out = {f"actor/{k}": v / max(count, 1) for k, v in sums.items()}
        out["actor/grad_norm"] = sum(grad_norms) / max(len(grad_norms), 1)
        out["actor/approx_kl"] = sum(kls) / max(len(kls), 1)
        out["actor/optimizer_steps"] = float(len(grad_norms))
        out["actor/early_stop"] = float(stopped)
        out["actor/lr"] = self.optimizer.param_groups[0]["lr"]
        return out

    @torch.no_grad()
    def _proximal_logprobs(self, shard: EmbodiedBatch) -> torch.Tensor:
        """The shard's log-probs under the weights at the start of the update (``decoupled_ppo``'s
        proximal policy), one micro-batch at a time."""
        mbs, parts = self.actor.micro_batch_size, []
        for i in range(0, shard.size, mbs):
            mb = shard.select(range(i, min(i + mbs, shard.size)))
            parts.append(self.policy(mode="evaluate", raw_actions=mb.raw_actions.to(self.device),
                                     **mb.policy_inputs(self.device)).logprobs.detach().cpu())
        return torch.cat(parts)

    def _mean_over_ranks(self, value: torch.Tensor) -> float:
        """``value`` averaged over the actor ranks (every rank gets the same number)."""
        if self.world_size == 1:
            return float(value)
        t = value.detach().to(torch.float64).reshape(1)
        if dist.get_backend() == "nccl":
            t = t.to(self.device)
        dist.all_reduce(t)
        return float(t) / self.world_size

    def offload(self) -> None:
        """Move weights, gradients and optimizer state to the CPU (``actor.enable_offload``, when
        the rollout shares this GPU). A no-op on a CPU device."""
        if self.device.type != "cpu":
            self.policy.to("cpu")
            move_optimizer_state(self.optimizer, "cpu")
            torch.cuda.empty_cache()

    def onload(self) -> None:
        """Undo :meth:`offload`."""
        if self.device.type != "cpu":
            self.policy.to(self.device)
            move_optimizer_state(self.optimizer, self.device)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Full policy weights on the CPU (rank 0; ``{}`` elsewhere). Collective."""
        return get_model_state_dict(self.policy, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def send_weights(self) -> int:
        """Gather the full weights and (rank 0) send them to the rollout group; returns bytes."""
        state = self.full_state_dict()
        return self.send_tensors(POLICY_LINK, state) if self.rank == 0 else 0

    def save_checkpoint(self, path: str) -> None:
        """Sharded policy + optimizer (DCP), the optimizer-step count and this rank's RNG."""
        save_sharded(self.policy, self.optimizer, path, self.step)
        torch.save({"torch": torch.get_rng_state(), "generator": self.generator.get_state()},
                   os.path.join(path, f"rng_rank{self.rank}.pt"))

    def load_checkpoint(self, path: str) -> None:
        self.step = load_sharded(self.policy, self.optimizer, path)
        self._apply_lr()
        rng = os.path.join(path, f"rng_rank{self.rank}.pt")
        if os.path.isfile(rng):
            state = torch.load(rng, weights_only=True)
            torch.set_rng_state(state["torch"])
            self.generator.set_state(state["generator"])

    def save_policy(self, path: str) -> None:
        """Rank 0 writes the trained policy with the model's own ``save_pretrained`` (an unsharded
        copy loaded with the full weights). Collective."""
        state = self.full_state_dict()
        if self.rank == 0:
            plain = build_policy(self.actor.model, self.obs_spec,
                                 temperature=self.algorithm.sampling_params.temperature)
            plain.load_state_dict(state)
            plain.save_pretrained(path)
        dist.barrier()
