"""The whole math-RL config: every section typed, cross-section rules checked before workers start.

Example:
    >>> cfg = MathConfig.from_dict({
    ...     "cluster": {"num_nodes": 1, "accelerators_per_node": 2,
    ...                 "component_placement": {"actor,rollout,reward": "all"}},
    ...     "algorithm": {"group_size": 4},
    ...     "data": {"train_data_paths": [], "rollout_batch_size": 3},
    ... }, check_paths=False)
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: data.train_data_paths: give at least one JSONL file
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from rlinf.config.actor import ActorConfig
from rlinf.config.algorithm import AlgorithmConfig
from rlinf.config.data import DataConfig
from rlinf.config.reward import CriticConfig, InferenceConfig, RewardConfig
from rlinf.config.rollout import RolloutConfig
from rlinf.config.root import RootConfig
from rlinf.config.runner import RunnerConfig
from rlinf.scheduler.config import ClusterConfig
from rlinf.scheduler.placement import PlacementPlan
from rlinf.utils.typed_config import BACKEND_SCOPES, ConfigError, check, check_scopes, collect_notes

#: Components a math run can place; actor and rollout are required.
MATH_COMPONENTS = ("actor", "rollout", "inference", "reward", "critic")


@dataclass(frozen=True)
class MathConfig(RootConfig):
    """The root of a math run's config (``hydra:`` is Hydra's own and is dropped before parsing).

    Attributes:
        cluster: nodes, accelerators and where each component runs.
        data: prompt datasets.
        runner: the training loop's schedule, logging and checkpoints.
        algorithm: advantage estimator, policy loss, KL and sampling.
        rollout: the generation engine.
        actor: the trained policy: model, optimizer, LR schedule, training backend.
        reward: the rule-based reward.
        critic: the value model (needed by ``adv_type: gae``).
        inference: the group that computes reference / old log-probs when placed apart.
    """

    cluster: ClusterConfig
    data: DataConfig
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    inference: InferenceConfig = field(default_factory=InferenceConfig)

    COMPONENTS = MATH_COMPONENTS
    REQUIRED = ("actor", "rollout")
    RUN_KIND = "a math run"
    TASK_TYPE = "math"
    PLACEMENT_EXAMPLE = "{actor,rollout,reward: all}"

    @property
    def model_path(self) -> str | None:
        """The HF checkpoint the run starts from (actor.model.model_path, else rollout's)."""
        return self.actor.model.model_path or self.rollout.model.model_path

    @property
    def tokenizer_path(self) -> str | None:
        """The tokenizer folder: ``actor.tokenizer.tokenizer_model``, else :attr:`model_path`."""
        return self.actor.tokenizer.tokenizer_model or self.model_path

    @property
    def rollout_mode(self) -> str:
        """``runner.rollout_mode`` resolved: as written, or (null) ``async`` when
        ``algorithm.max_head_offpolicyness > 0``, else ``sync``.

        >>> raw = {"cluster": {"num_nodes": 1, "accelerators_per_node": 2,
        ...                    "component_placement": {"actor": 0, "rollout,reward": 1}},
        ...        "data": {"train_data_paths": ["train.jsonl"], "rollout_batch_size": 8},
        ...        "algorithm": {"group_size": 4, "max_head_offpolicyness": 2, "loss_type": "decoupled_ppo"},
        ...        "actor": {"model": {"model_path": "models/tiny"}}}
        >>> MathConfig.from_dict(raw, check_paths=False).rollout_mode
        'async'
        >>> cfg = MathConfig.from_dict({**raw, "runner": {"rollout_mode": "fully_async"}}, check_paths=False)
        >>> cfg.rollout_mode, cfg.max_concurrent_rollouts, cfg.max_groups_in_flight
        ('fully_async', 32, 8)
        """
        if self.runner.rollout_mode is not None:
            return self.runner.rollout_mode
        return "async" if self.algorithm.max_head_offpolicyness > 0 else "sync"

    @property
    def max_concurrent_rollouts(self) -> int:
        """Episodes in flight over all rollout ranks (fully_async): ``rollout.max_concurrent_rollouts``,
        null = ``data.rollout_batch_size * algorithm.group_size``."""
        written = self.rollout.max_concurrent_rollouts
        return written if written is not None else self.data.rollout_batch_size * self.algorithm.group_size

    @property
    def max_groups_in_flight(self) -> int:
        """Groups in flight at once (fully_async): :attr:`max_concurrent_rollouts` // group_size
        (a group starts whole; validation keeps it >= 1)."""
        return self.max_concurrent_rollouts // self.algorithm.group_size

    @property
    def active_scopes(self) -> set[str]:
        """The key scopes this run reads (see :func:`~rlinf.utils.typed_config.rule`)."""
        return {"math", self.actor.training_backend}

    def notes(self) -> list[str]:
        """Start-up lines for accepted keys that do nothing more here (the idle training
        backend's section, FSDP1-only settings, ...)."""
        notes = check_scopes(self, self.active_scopes, soft=BACKEND_SCOPES) + collect_notes(self)
        group, written = self.algorithm.group_size, self.rollout.max_concurrent_rollouts
        if self.rollout_mode == "fully_async" and written is not None and written % group:
            notes.append(f"rollout.max_concurrent_rollouts: {written}: groups of algorithm.group_size {group} "
                         f"start whole, so at most {self.max_groups_in_flight * group} episodes run at once")
        return notes

    def validate(self, path: str) -> None:
        names = self.check_component_names()
        prompt, new = self.data.max_prompt_length, self.algorithm.sampling_params.max_new_tokens
        check(prompt + new <= self.runner.seq_length, "algorithm.sampling_params.max_new_tokens",
              f"data.max_prompt_length ({prompt}) + max_new_tokens ({new}) exceeds "
              f"runner.seq_length ({self.runner.seq_length})")
        check(self.runner.task_type == self.TASK_TYPE, "runner.task_type",
              f"must be {self.TASK_TYPE} for this entry point")
        check_scopes(self, self.active_scopes, soft=BACKEND_SCOPES)
        check(self.algorithm.max_head_offpolicyness == 0 or self.algorithm.loss_type == "decoupled_ppo",
              "algorithm.loss_type", "async rollout (max_head_offpolicyness > 0) needs decoupled_ppo")
        self.check_rollout_mode()
        estimator = self.algorithm.estimator("llm")
        check(not estimator.needs_critic or self.critic.use_critic_model, "critic.use_critic_model",
              f"adv_type {estimator.name} needs a value model: set it to true")
        check(estimator.needs_critic or not self.critic.use_critic_model, "critic.use_critic_model",
              f"adv_type {estimator.name} uses no value model; set false (or adv_type: gae)")
        check(not self.critic.use_critic_model or self.actor.training_backend == "fsdp",
              "actor.training_backend", "the value model trains with FSDP2 only; use fsdp with a critic")
        check("critic" not in names or self.critic.use_critic_model, "cluster.component_placement.critic",
              "a critic is placed but critic.use_critic_model is false")
        check(self.model_path is not None, "actor.model.model_path",
              "missing: set actor.model.model_path (or rollout.model.model_path) to an HF folder")
        if self.cluster.accelerators_per_node is not None:
            self.check_against_plan(self.cluster.plan())

    def check_rollout_mode(self) -> None:
        """``runner.rollout_mode`` against ``algorithm.max_head_offpolicyness`` and the loss, and
        the fully_async keys of ``rollout`` (refused in the other modes, where nothing reads them)."""
        mode, k = self.runner.rollout_mode, self.algorithm.max_head_offpolicyness
        check(mode != "sync" or k == 0, "runner.rollout_mode",
              f"sync contradicts algorithm.max_head_offpolicyness = {k} (> 0 lets rollout run ahead); set "
              "it to 0, or rollout_mode async / fully_async (null: derived from it)")
        check(mode != "async" or k > 0, "runner.rollout_mode",
              "async (the lookahead queue) runs rollout up to algorithm.max_head_offpolicyness steps ahead, "
              "which is 0; set it >= 1, or rollout_mode sync / fully_async (null: derived from it)")
        ro, resolved = self.rollout, self.rollout_mode
        if resolved != "fully_async":
            for key, default in (("max_concurrent_rollouts", None), ("pause_grace_period", 0.0),
                                 ("partial_rollout", True)):
                value = getattr(ro, key)
                check(value == default, f"rollout.{key}",
                      f"{value!r} has no effect: read only when runner.rollout_mode is fully_async (this run "
                      f"is {resolved}, which generates whole batches between weight updates); remove it")
            return
        check(self.algorithm.loss_type == "decoupled_ppo", "algorithm.loss_type",
              "ppo cannot correct samples from older policy versions, which runner.rollout_mode fully_async "
              "trains on; use decoupled_ppo")
        penalty = self.algorithm.sampling_params.frequency_penalty
        check(penalty == 0, "algorithm.sampling_params.frequency_penalty",
              f"{penalty} counts the response tokens of one generate call, and "
              "runner.rollout_mode fully_async continues interrupted sequences in new calls (the penalty would forget "
              "their earlier tokens); set it to 0")
        check(not self.algorithm.dynamic_sampling, "algorithm.dynamic_sampling",
              "true refills a batch by generating more prompts on demand, while runner.rollout_mode fully_async "
              "generates continuously and takes finished groups as they come; set it false (or use rollout_mode "
              "sync / async)")
        group = self.algorithm.group_size
        check(self.max_concurrent_rollouts >= group, "rollout.max_concurrent_rollouts",
              f"{self.max_concurrent_rollouts} is fewer than one group (algorithm.group_size = {group}), "
              "which starts whole; set it >= group_size")
        placed = {n.strip(): str(v) for key, v in self.cluster.component_placement.items() for n in str(key).split(",")}
        check(placed.get("actor") is None or placed.get("actor") != placed.get("rollout"), "runner.rollout_mode",
              f"fully_async needs actor and rollout on separate accelerators (cluster.component_placement "
              f"places both on {placed.get('actor')!r}, collocated): generation would stop for every update; "
              "place them apart")

    def check_against_plan(self, plan: PlacementPlan) -> None:
        """Batch-size rules that depend on how many processes each group has."""
        actor_dp = plan.component("actor").world_size
        self.rollout.check_mode(plan.mode("actor", "rollout").value)
        if self.actor.training_backend == "fsdp":
            self.actor.fsdp_config.check_world(actor_dp)
        else:  # megatron: tensor x pipeline parallel ranks fill the actor's processes
            tp, pp = self.actor.model.llm.tensor_model_parallel_size, self.actor.model.llm.pipeline_model_parallel_size
            local = " (cluster.backend local runs each group as one process)" if self.cluster.backend == "local" else ""
            check(actor_dp % (tp * pp) == 0, "actor.model.tensor_model_parallel_size",
                  f"{tp} x pipeline_model_parallel_size {pp} = {tp * pp} ranks do not divide the actor's "
                  f"{actor_dp} process(es){local}; set them to fit its placement")
        samples = self.data.rollout_batch_size * self.algorithm.group_size
        check(samples % actor_dp == 0, "data.rollout_batch_size",
              f"rollout_batch_size * algorithm.group_size = {samples} is not divisible by the "
              f"actor's data-parallel size {actor_dp} (its placement)")
        per_rank = samples // actor_dp
        n_mb = self.algorithm.n_minibatches
        check(per_rank % n_mb == 0, "algorithm.n_minibatches",
              f"each actor rank gets {per_rank} samples per step, not divisible into {n_mb} minibatches")
        placed = plan.mode("actor", "rollout").value
        check(self.rollout_mode != "fully_async" or placed == "disaggregated", "runner.rollout_mode",
              f"fully_async needs actor and rollout on separate accelerators (cluster.component_placement makes "
              f"them {placed}): generation would stop for every update; place them apart")
        if self.algorithm.max_head_offpolicyness > 0:
            check(plan.mode("actor", "rollout").value == "disaggregated",
                  "algorithm.max_head_offpolicyness",
                  "rollout can run ahead of training only when actor and rollout are placed on "
                  f"different accelerators (they are {plan.mode('actor', 'rollout').value})")
        mb, micro = per_rank // n_mb, self.algorithm.training_batch_size_per_gpu
        check(self.runner.enable_dynamic_batch_size or mb % micro == 0,
              "algorithm.training_batch_size_per_gpu",
              f"a minibatch of {mb} samples per rank is not divisible into micro-batches of {micro}")

    def check_paths(self) -> None:
        """Model and data paths must exist (raised before any worker starts)."""
        for key, value in (("actor.model.model_path", self.actor.model.model_path),
                           ("rollout.model.model_path", self.rollout.model.model_path)):
            if value is not None and not os.path.isfile(os.path.join(value, "config.json")):
                raise ConfigError(key, f"{value!r} is not an HF model folder (no config.json)")
        for key, paths in (("data.train_data_paths", self.data.train_data_paths),
                           ("data.val_data_paths", self.data.val_data_paths)):
            for i, p in enumerate(paths):
                if not os.path.isfile(p):
                    raise ConfigError(f"{key}[{i}]", f"{p!r} does not exist")
