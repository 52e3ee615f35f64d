"""Launch the worker groups of a math run from its config and placement plan."""

from __future__ import annotations

from dataclasses import dataclass

from rlinf.config.math import MathConfig
from rlinf.engines.training.megatron.runtime import megatron_import_error
from rlinf.scheduler import Cluster, Mode, PlacementPlan, TensorLink, WorkerGroup
from rlinf.utils.typed_config import ConfigError
from rlinf.workers.actor.fsdp_actor import FSDPActorWorker
from rlinf.workers.actor.megatron_actor import MegatronActorWorker
from rlinf.workers.critic.fsdp_critic import FSDPCriticWorker
from rlinf.workers.inference.reference_worker import ReferenceWorker
from rlinf.workers.links import WEIGHT_LINK
from rlinf.workers.reward.math_reward_worker import MathRewardWorker
from rlinf.workers.rollout.generation_worker import GenerationWorker


@dataclass
class MathGroups:
    """The launched groups; ``reward`` is a local worker object when no reward group is placed;
    ``inference`` (reference log-probs) exists when it is placed and ``kl_beta > 0``; ``critic``
    (the value model) when ``critic.use_critic_model``."""

    actor: WorkerGroup
    rollout: WorkerGroup
    reward: WorkerGroup | MathRewardWorker
    actor_rollout_mode: Mode
    inference: WorkerGroup | None = None
    critic: WorkerGroup | None = None

    def shutdown(self) -> None:
        for group in (self.actor, self.rollout, self.reward, self.inference, self.critic):
            if group is None:
                continue
            if isinstance(group, WorkerGroup):
                group.shutdown()
            else:
                group.close()


def launch_math_groups(cfg: MathConfig, cluster: Cluster, plan: PlacementPlan, total_steps: int,
                       rollout_worker: type = GenerationWorker, rollout_extra: tuple = ()) -> MathGroups:
    """Start actor, rollout, reward and inference groups where the plan puts them; link actor ->
    rollout. Reference log-probs (``kl_beta > 0``) come from a separate inference group when
    ``inference`` is placed apart from the actor, else from a frozen copy inside the actor (as for
    the reference's ``actor,inference,rollout: all``). ``rollout_worker`` (a
    :class:`GenerationWorker` subclass, e.g. a tool agent's) takes ``rollout_extra`` after the
    generation worker's arguments.

    All groups' processes are requested first and then awaited together, so their start-up
    (interpreter, imports, model load) overlaps; if any fails, every started group is shut down."""
    actor_worker = actor_worker_class(cfg, plan)
    max_tokens = cfg.runner.max_tokens_per_mbs if cfg.runner.enable_dynamic_batch_size else None
    use_inference = (cfg.algorithm.kl_beta > 0 and "inference" in plan.components
                     and plan.mode("actor", "inference") == Mode.DISAGGREGATED)
    launched: list[WorkerGroup] = []

    def launch(worker_cls, component, name, args, threads: int = 1) -> WorkerGroup:
        group = WorkerGroup.launch(cluster, worker_cls, component, name=name, args=args, wait=False,
                                   max_concurrency=threads)
        launched.append(group)
        return group

    try:
        actor = launch(actor_worker, plan.component("actor"), cfg.actor.group_name,
                       (cfg.model_path, cfg.actor, cfg.algorithm, total_steps, max_tokens, not use_inference))
        inference = None
        if use_inference:
            inference = launch(ReferenceWorker, plan.component("inference"), cfg.inference.group_name,
                               (cfg.model_path, cfg.actor, cfg.algorithm))
        rollout_model = cfg.rollout.model.model_path or cfg.model_path
        rollout = launch(rollout_worker, plan.component("rollout"), cfg.rollout.group_name,
                         (rollout_model, cfg.rollout, cfg.actor.tokenizer.tokenizer_model, cfg.actor.tokenizer,
                          *rollout_extra),
                         # fully_async: the stream holds one call thread; weights and validation use the other
                         threads=2 if cfg.rollout_mode == "fully_async" else 1)
        overlong = (cfg.algorithm.sampling_params.max_new_tokens, cfg.algorithm.overlong_buffer_len,
                    cfg.algorithm.overlong_penalty_factor, cfg.tokenizer_path, cfg.actor.tokenizer)
        if "reward" in plan.components:
            reward = launch(MathRewardWorker, plan.component("reward"), cfg.reward.group_name, (cfg.reward, *overlong))
        else:
            reward = MathRewardWorker(cfg.reward, *overlong)
        critic = None
        if cfg.critic.use_critic_model:  # on the actor's devices unless placed
            where = plan.component("critic") if "critic" in plan.components else plan.component("actor")
            critic = launch(FSDPCriticWorker, where, cfg.critic.group_name,
                            (cfg.critic.model.model_path or cfg.model_path, cfg.actor, cfg.critic, cfg.algorithm,
                             total_steps, max_tokens))
        for group in launched:
            group.wait_started()
        TensorLink.connect(WEIGHT_LINK, actor, 0, rollout)
    except BaseException:
        for group in launched:
            group.shutdown()
        raise
    return MathGroups(actor, rollout, reward, plan.mode("actor", "rollout"), inference, critic)


def actor_worker_class(cfg: MathConfig, plan: PlacementPlan) -> type:
    """The actor worker of ``actor.training_backend``; Megatron's needs megatron-core (checked
    here, before any worker starts; that tensor x pipeline ranks divide the actor's processes is
    ``MathConfig.check_against_plan``'s rule; a worker without GPUs fails at start with the reason)."""
    if cfg.actor.training_backend == "fsdp":
        return FSDPActorWorker
    problem = megatron_import_error()
    if problem:
        raise ConfigError("actor.training_backend", problem)
    return MegatronActorWorker
