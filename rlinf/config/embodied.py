"""The whole embodied-RL config: sections typed, cross-section rules checked before workers start.

Example:
    >>> cfg = EmbodiedConfig.from_dict({
    ...     "cluster": {"num_nodes": 1, "accelerators_per_node": 2,
    ...                 "component_placement": {"env": 0, "rollout": 1, "actor": "0-1"}},
    ...     "runner": {"task_type": "embodied"},
    ...     "algorithm": {"adv_type": "gae"},
    ...     "env": {"train": {"env_type": "toy", "total_num_envs": 4},
    ...             "eval": {"env_type": "toy", "total_num_envs": 4}},
    ...     "actor": {"model": {"model_type": "mlp", "action_dim": 2, "num_action_chunks": 1},
    ...               "micro_batch_size": 4, "global_batch_size": 8},
    ... })
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: critic.use_critic_model: adv_type gae needs a value head: set it to true
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rlinf.config.actor import ActorConfig
from rlinf.config.algorithm import AlgorithmConfig
from rlinf.config.env import EnvSectionConfig
from rlinf.config.reward import CriticConfig
from rlinf.config.rollout import RolloutConfig
from rlinf.config.root import RootConfig
from rlinf.config.runner import RunnerConfig
from rlinf.scheduler.config import ClusterConfig
from rlinf.scheduler.placement import PlacementPlan
from rlinf.utils.typed_config import BACKEND_SCOPES, ConfigError, check, check_scopes, collect_notes

#: Components an embodied run places; all three are required.
EMBODIED_COMPONENTS = ("env", "rollout", "actor")


@dataclass(frozen=True)
class EmbodiedConfig(RootConfig):
    """The root of an embodied run's config (``hydra:`` / ``defaults:`` are dropped first).

    Attributes:
        cluster: placement of env, rollout and actor workers.
        env: the env worker group and its ``train`` / ``eval`` simulators.
        runner: schedule, logging, checkpoints (``task_type: embodied``).
        algorithm: ppo with ``adv_type: gae`` (value head) or grpo; reward / log-prob levels.
        rollout: the policy-serving workers (``pipeline_stage_num``, ``backend: huggingface``).
        actor: the policy model (``actor.model``), batch sizes, optimizer.
        critic: ``use_critic_model`` turns on the policy's value head (needed by gae).
    """

    cluster: ClusterConfig
    env: EnvSectionConfig
    runner: RunnerConfig = field(default_factory=lambda: RunnerConfig(task_type="embodied"))
    algorithm: AlgorithmConfig = field(default_factory=lambda: AlgorithmConfig(adv_type="gae"))
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)

    COMPONENTS = EMBODIED_COMPONENTS
    REQUIRED = EMBODIED_COMPONENTS
    RUN_KIND = "an embodied run"
    PLACEMENT_EXAMPLE = "{env,rollout,actor: all}"

    @classmethod
    def prepare_raw(cls, raw: dict[str, Any]) -> dict[str, Any]:
        """Episode rules inherited by the env splits; Megatron refused before the actor's own
        Megatron rules, which would name a secondary key."""
        raw = inherit_episode_rules(raw)
        actor = raw.get("actor")
        if isinstance(actor, Mapping) and actor.get("training_backend") == "megatron":
            raise ConfigError("actor.training_backend", "embodied policies train with FSDP2 (fsdp); the "
                                                        "Megatron backend serves LLM runs")
        return raw

    @property
    def chunk_steps(self) -> int:
        """Policy steps (action chunks) of one training rollout epoch: the train episode length
        divided by ``actor.model.num_action_chunks`` (rounded up)."""
        steps = self.env.train.episode_steps or 50
        return -(-steps // (self.actor.model.policy.num_action_chunks or 1))

    @property
    def planned_optimizer_steps(self) -> int:
        """Optimizer steps of the whole run when no update stops early (``target_kl``):
        training steps x ``update_epochs`` x global batches per step; what ``actor.lr_sched``
        takes as the run's length (``lr_warmup_fraction``, ``lr_decay_iters: null``)."""
        samples = self.env.train.total_num_envs * self.chunk_steps * self.algorithm.rollout_epoch
        steps = self.runner.max_steps if self.runner.max_steps > 0 else self.runner.max_epochs
        return steps * self.algorithm.update_epochs * max(samples // self.actor.global_batch_size, 1)

    #: the key scopes an embodied run reads (see :func:`~rlinf.utils.typed_config.rule`)
    active_scopes = frozenset({"embodied", "fsdp"})

    def notes(self) -> list[str]:
        """Start-up lines for accepted keys that do nothing more here (Megatron keys, labels
        of other simulators' settings, ...)."""
        return check_scopes(self, self.active_scopes, soft=BACKEND_SCOPES) + collect_notes(self)

    def validate(self, path: str) -> None:
        self.check_component_names()
        check(self.runner.task_type == "embodied", "runner.task_type", "must be embodied for this entry point")
        check_scopes(self, self.active_scopes, soft=BACKEND_SCOPES)
        for key, channel in (("env", self.env.channel), ("rollout", self.rollout.channel),
                             ("actor", self.actor.channel)):
            check(channel.queue_size == 0, f"{key}.channel.queue_size",
                  f"{channel.queue_size}: embodied links are direct pipes holding one message per env "
                  "worker in flight, so there is nothing to bound; leave 0")
        self.check_token_budgets()
        algo, model = self.algorithm, self.actor.model
        estimator = algo.estimator("embodied")
        check(not estimator.needs_critic or self.critic.use_critic_model, "critic.use_critic_model",
              f"adv_type {estimator.name} needs a value head: set it to true")
        check(estimator.needs_critic or not self.critic.use_critic_model, "critic.use_critic_model",
              f"{estimator.name} trains no value head: set it to false")
        check(algo.kl_beta == 0, "algorithm.kl_beta", "a KL term to a reference policy is not "
              "available for embodied runs yet; set 0")
        check(algo.loss_type == "ppo" or algo.max_head_offpolicyness == 1, "algorithm.loss_type",
              "decoupled_ppo needs algorithm.max_head_offpolicyness 1: on-policy data's proximal policy "
              "is the one that acted, so it would equal ppo; use ppo")
        check(algo.max_head_offpolicyness in (0, 1), "algorithm.max_head_offpolicyness",
              f"embodied runs take 0 (synchronous) or 1 (the next rollout overlaps the update), "
              f"got {algo.max_head_offpolicyness}")
        if algo.max_head_offpolicyness:
            check(algo.rollout_epoch == 1, "algorithm.rollout_epoch",
                  "must be 1 with max_head_offpolicyness 1 (one rollout runs ahead of each update)")
            for key, on in (("env.enable_offload", self.env.enable_offload),
                            ("actor.enable_offload", self.actor.enable_offload),
                            ("rollout.enable_offload", self.rollout.enable_offload)):
                check(not on, key, "must be false with algorithm.max_head_offpolicyness 1 (the rollout "
                                   "runs during the update, so no group can give its memory away)")
        for key, value in (("model_type", model.model_type), ("action_dim", model.policy.action_dim),
                           ("num_action_chunks", model.policy.num_action_chunks)):
            check(value is not None, f"actor.model.{key}", "missing")
        check((model.model_type or "").lower() != "sac_mlp", "actor.model.model_type",
              "sac_mlp (an actor with Q heads, no value head) trains with SAC: set algorithm.loss_type: "
              "embodied_sac, or use mlp for PPO / GRPO")
        if estimator.needs_groups:
            train = self.env.train
            check(train.use_fixed_reset_state_ids, "env.train.use_fixed_reset_state_ids",
                  "grpo compares episodes that start from the same state: set it to true")
            check(train.group_size > 1, "env.train.group_size",
                  f"grpo needs groups of > 1 environments, got {train.group_size}")
            check(train.group_size == algo.group_size, "env.train.group_size",
                  f"{train.group_size} differs from algorithm.group_size {algo.group_size} "
                  "(write group_size: ${algorithm.group_size})")
        for split in ("train", "eval"):
            check(getattr(self.env, split).total_num_envs is not None, f"env.{split}.total_num_envs",
                  "missing: how many environments in all")
        for key in ("micro_batch_size", "global_batch_size"):
            check(getattr(self.actor, key) is not None and getattr(self.actor, key) >= 1,
                  f"actor.{key}", "missing or < 1")
        check(self.rollout.backend == "huggingface", "rollout.backend",
              "embodied policies are served by the huggingface (plain torch) backend")
        if self.cluster.accelerators_per_node is not None:
            self.check_against_plan(self.cluster.plan())

    def check_token_budgets(self) -> None:
        """``algorithm.length_params`` and ``runner.max_prompt_length`` against the policy: VLAs
        emit exactly ``action_dim x num_action_chunks`` tokens per step; mlp / cnn emit none."""
        model, lp = self.actor.model, self.algorithm.length_params
        vla = (model.model_type or "").lower() in ("openvla", "openvla_oft")
        if not vla:
            defaults = type(lp)()
            for key in ("max_new_token", "max_length", "min_length"):
                check(getattr(lp, key) == getattr(defaults, key), f"algorithm.length_params.{key}",
                      f"{model.model_type} policies emit no tokens; only the VLAs (openvla, openvla_oft) "
                      "read token budgets: remove it")
            check(self.runner.max_prompt_length is None, "runner.max_prompt_length",
                  f"{model.model_type} policies read no prompt; only the VLAs do: remove it")
            return
        tokens = (model.policy.action_dim or 7) * (model.policy.num_action_chunks or 1)
        check(lp.max_new_token in (None, tokens), "algorithm.length_params.max_new_token",
              f"{lp.max_new_token}, but the VLA emits exactly action_dim x num_action_chunks = {tokens} "
              "tokens per step; set null or that")
        check(lp.min_length <= tokens, "algorithm.length_params.min_length",
              f"{lp.min_length} exceeds the {tokens} action tokens a VLA step always emits, so no "
              "sequence could be that short or shorter; set <= that")
        prompt = self.runner.max_prompt_length
        check(prompt is None or prompt + tokens <= lp.max_length, "algorithm.length_params.max_length",
              f"{lp.max_length} is less than runner.max_prompt_length ({prompt}) + {tokens} action tokens")

    def check_against_plan(self, plan: PlacementPlan) -> None:
        """Env counts and batch sizes that depend on each group's process count."""
        env_ws, roll_ws = plan.component("env").world_size, plan.component("rollout").world_size
        actor_ws = plan.component("actor").world_size
        stages = self.rollout.pipeline_stage_num
        self.rollout.check_mode(plan.mode("rollout", "actor").value)
        self.actor.fsdp_config.check_world(actor_ws)
        check(env_ws % roll_ws == 0, "cluster.component_placement.rollout",
              f"each rollout process serves whole env processes: {env_ws} env processes are not "
              f"divisible by {roll_ws} rollout processes")
        for split in ("train", "eval"):
            n = getattr(self.env, split).total_num_envs
            check(n % (env_ws * stages) == 0, f"env.{split}.total_num_envs",
                  f"{n} environments do not split evenly over {env_ws} env processes x "
                  f"{stages} pipeline stages (rollout.pipeline_stage_num)")
            group = getattr(self.env, split).group_size
            check((n // (env_ws * stages)) % group == 0, f"env.{split}.group_size",
                  f"each stage of each env process holds {n // (env_ws * stages)} environments, "
                  f"not a multiple of group_size {group}")
        samples = self.env.train.total_num_envs * self.chunk_steps * self.algorithm.rollout_epoch
        gbs, mbs = self.actor.global_batch_size, self.actor.micro_batch_size
        check(samples % gbs == 0, "actor.global_batch_size",
              f"a training step collects {samples} samples (total_num_envs x chunk steps x "
              f"rollout_epoch), not divisible into global batches of {gbs}")
        check(gbs % (mbs * actor_ws) == 0, "actor.micro_batch_size",
              f"a global batch of {gbs} does not split into micro-batches of {mbs} on each of "
              f"{actor_ws} actor processes")


def inherit_episode_rules(raw: Mapping[str, Any]) -> dict[str, Any]:
    """``algorithm.auto_reset`` / ``ignore_terminations``, when set, are the episode rules the env
    splits inherit (the reference's env files write ``auto_reset: ${algorithm.auto_reset}``, and a
    split may override it, as its eval block does): a split without its own value takes it. A
    value that no split inherits (every split sets a different one) is refused: it would have no
    effect.

    >>> inherit_episode_rules({"algorithm": {"auto_reset": True}, "env": {"train": {}}})["env"]
    {'train': {'auto_reset': True}}
    """
    algo = raw.get("algorithm")
    env = raw.get("env")
    if not isinstance(algo, Mapping) or not isinstance(env, Mapping):
        return dict(raw)
    env = dict(env)
    for key in ("auto_reset", "ignore_terminations"):
        value = algo.get(key)
        if value is None:
            continue
        splits = [s for s in ("train", "eval") if isinstance(env.get(s), Mapping)]
        for split in splits:
            if env[split].get(key) is None:
                env[split] = {**env[split], key: value}
        if splits and all(env[s][key] != value for s in splits):
            raise ConfigError(f"algorithm.{key}", f"{value}, but every env split sets its own "
                              f"({', '.join(f'env.{s}.{key}: {env[s][key]}' for s in splits)}), so it "
                              f"would have no effect; write {key}: ${{algorithm.{key}}} in a split or drop it")
    return {**raw, "env": env}
