"""The off-policy embodied run's config (SAC, CrossQ, RLPD on a replay buffer): the embodied root
config with RLinf's SAC keys under ``algorithm:`` and ``runner:``, checked before Ray.

An embodied YAML selects this recipe with ``algorithm.loss_type: embodied_sac`` (or ``adv_type``,
as RLinf writes both); :func:`embodied_config_class` says which root a raw tree parses into.
Sizes of the buffer are counted in transitions (one env step of one environment); RLinf counts
its ``cache_size`` / ``sample_window_size`` / ``min_buffer_size`` in trajectories (one rollout
epoch of one env worker), so ``cache_size`` is refused in favour of ``replay_buffer.capacity``.

Example:
    >>> raw = {"cluster": {"num_nodes": 1, "accelerators_per_node": 1,
    ...                    "component_placement": {"env,rollout,actor": "all"}},
    ...        "runner": {"task_type": "embodied"}, "algorithm": {"loss_type": "embodied_sac", "tau": 1.5},
    ...        "env": {"train": {"env_type": "toy", "total_num_envs": 4, "auto_reset": True},
    ...                "eval": {"env_type": "toy", "total_num_envs": 4}},
    ...        "actor": {"model": {"model_type": "sac_mlp", "action_dim": 2}, "global_batch_size": 8}}
    >>> embodied_config_class(raw).__name__
    'OffPolicyEmbodiedConfig'
    >>> OffPolicyEmbodiedConfig.from_dict(raw)
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: algorithm.tau: must be in (0, 1], got 1.5
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from rlinf.config.actor import FsdpConfig, LrSchedConfig
from rlinf.config.embodied import EmbodiedConfig
from rlinf.config.reward import CriticConfig
from rlinf.config.runner import RunnerConfig
from rlinf.scheduler.placement import PlacementPlan
from rlinf.utils.typed_config import BACKEND_SCOPES, ConfigError, check, check_scopes, collect_notes, rule

#: the value of ``algorithm.loss_type`` / ``adv_type`` that selects the off-policy recipe (RLinf's)
OFFPOLICY_LOSS = "embodied_sac"
#: policies with Q heads (the only ones the off-policy recipe trains)
Q_HEAD_POLICIES = ("sac_mlp",)


@dataclass(frozen=True)
class AlphaOptimConfig:
    """``algorithm.entropy_tuning.optim``: the temperature's optimiser (Adam).

    Attributes:
        lr: learning rate of the temperature.
        clip_grad: gradient-norm clip; 0 = off.
        lr_scheduler: RLinf's scheduler name; only a constant rate (torch_constant) exists here.
    """

    lr: float = 3e-4
    clip_grad: float = 0.0
    lr_scheduler: str = rule("torch_constant", only=("torch_constant",),
                             reason="the temperature's learning rate is constant")

    def validate(self, path: str) -> None:
        check(self.lr > 0, f"{path}.lr", f"must be > 0, got {self.lr}")
        check(self.clip_grad >= 0, f"{path}.clip_grad", f"must be >= 0 (0 = off), got {self.clip_grad}")


@dataclass(frozen=True)
class EntropyTuningConfig:
    """``algorithm.entropy_tuning`` (RLinf's keys): the SAC temperature ``alpha``.

    Attributes:
        alpha_type: ``exp`` (alpha = exp(p)) or ``softplus`` (alpha = softplus(p)): tuned toward
            ``target_entropy``; ``fixed_alpha``: alpha stays ``initial_alpha``.
        initial_alpha: alpha at the start (> 0).
        target_entropy: the entropy alpha is tuned toward; null = -action_dim.
        optim: see :class:`AlphaOptimConfig`.
    """

    alpha_type: Literal["exp", "softplus", "fixed_alpha"] = "exp"
    initial_alpha: float = 1.0
    target_entropy: float | None = None
    optim: AlphaOptimConfig = field(default_factory=AlphaOptimConfig)

    def validate(self, path: str) -> None:
        check(self.initial_alpha > 0, f"{path}.initial_alpha", f"must be > 0, got {self.initial_alpha}")


@dataclass(frozen=True)
class ReplayBufferConfig:
    """``algorithm.replay_buffer``: the learner's buffer of transitions (a preallocated ring in
    the actor process's memory; its size is in the start-up lines and in ``buffer/memory_mb``).

    Attributes:
        capacity: transitions kept; the oldest are overwritten first (our key; RLinf sizes its
            cache in trajectories with ``cache_size``).
        min_buffer_size: transitions held before the first update (learning starts); counted in
            transitions here, in trajectories by RLinf.
        sample_window_size: sample only the newest this many transitions; null = all held.
        on_damaged_buffer: a resume whose saved buffer cannot be read: ``stop`` (the resume fails,
            naming the file) or ``empty`` (it goes on with an empty buffer, said in the log).
        enable_cache: RLinf: keep trajectories in memory (else read back from disk); this buffer
            always lives in memory, so only true.
        cache_size: RLinf's in-memory size in trajectories; refused: set ``capacity``.
        auto_save: RLinf: write every trajectory to disk as it arrives; the buffer is saved with
            each checkpoint instead, so only false.
    """

    capacity: int = 1_000_000
    min_buffer_size: int = 1000
    sample_window_size: int | None = None
    on_damaged_buffer: Literal["stop", "empty"] = "stop"
    enable_cache: bool = rule(True, only=(True,), reason="this buffer always lives in memory (its size is "
                              "replay_buffer.capacity)")
    cache_size: int | None = rule(None, only=(None,), reason="RLinf counts its cache in trajectories; this "
                                  "buffer holds transitions: set replay_buffer.capacity (transitions) instead")
    auto_save: bool = rule(False, only=(False,), reason="the buffer is saved with every checkpoint "
                           "(runner.save_interval), atomically, and resumed from it")

    def validate(self, path: str) -> None:
        check(self.capacity >= 1, f"{path}.capacity", f"must be >= 1, got {self.capacity}")
        check(self.min_buffer_size >= 0, f"{path}.min_buffer_size", f"must be >= 0, got {self.min_buffer_size}")
        check(self.min_buffer_size <= self.capacity, f"{path}.min_buffer_size",
              f"{self.min_buffer_size} exceeds replay_buffer.capacity ({self.capacity}): learning would never start")
        check(self.sample_window_size is None or self.sample_window_size >= 1, f"{path}.sample_window_size",
              f"must be >= 1 or null, got {self.sample_window_size}")


@dataclass(frozen=True)
class DemoBufferConfig:
    """``algorithm.demo_buffer`` (RLPD): demonstrations in ManiSkill's trajectory format (HDF5 +
    JSON sidecar; ``python -m toolkits.embodied.make_demos`` writes them), loaded before Ray and
    mixed into every batch.

    Attributes:
        load_path: the ``.h5`` file (its ``.json`` sidecar beside it is read when present); RLinf's
            key (there: a folder of saved trajectories).
        demo_fraction: share of each batch drawn from the demonstrations (RLPD: 0.5, symmetric
            sampling; our key).
        max_episodes: load at most this many episodes (file order); null = all (our key).
        only_success: load only episodes whose last step succeeded (our key).
        min_buffer_size: the file must give at least this many transitions (RLinf: trajectories).
        enable_cache, cache_size, sample_window_size, auto_save: RLinf's disk-cache keys; the
            demonstrations sit in memory and are sampled uniformly, so only their defaults.
    """

    load_path: str | None = None
    demo_fraction: float = 0.5
    max_episodes: int | None = None
    only_success: bool = False
    min_buffer_size: int = 1
    enable_cache: bool = rule(True, only=(True,), reason="the demonstrations always live in memory")
    cache_size: int | None = rule(None, only=(None,), reason="every loaded demonstration is kept (limit them "
                                  "with demo_buffer.max_episodes)")
    sample_window_size: int | None = rule(None, only=(None,), reason="demonstrations are sampled uniformly "
                                          "from all that were loaded")
    auto_save: bool = rule(False, only=(False,), reason="demonstrations are read from load_path, not saved")

    def validate(self, path: str) -> None:
        check(self.load_path is not None, f"{path}.load_path", "missing: the demonstration file (.h5)")
        check(0 < self.demo_fraction < 1, f"{path}.demo_fraction", f"must be in (0, 1), got {self.demo_fraction}")
        check(self.max_episodes is None or self.max_episodes >= 1, f"{path}.max_episodes",
              f"must be >= 1 or null, got {self.max_episodes}")
        check(self.min_buffer_size >= 0, f"{path}.min_buffer_size", f"must be >= 0, got {self.min_buffer_size}")


@dataclass(frozen=True)
class SACAlgorithmConfig:
    """``algorithm`` of an off-policy run (RLinf's SAC / CrossQ / RLPD keys, plus a few of ours).

    Attributes:
        adv_type, loss_type: ``embodied_sac`` (RLinf's names; either selects this recipe).
        loss_agg_func: RLinf writes token-mean; the losses are means over the batch of
            transitions, so only that.
        group_size: 1 (batches come from the buffer; there are no groups).
        update_epoch: gradient updates (critic steps) per training step.
        critic_actor_ratio: critic updates per actor (and temperature) update (CrossQ: 2 or 3).
        agg_q: ``min`` or ``mean`` over the target heads in the critic target.
        actor_agg_q: ``min`` or ``mean`` over the heads in the actor loss; null = agg_q (RLPD:
            mean).
        backup_entropy: keep ``- alpha log pi(a'|s')`` in the target (RLPD: false).
        critic_subsample_size: target heads drawn at random per update (RLPD / REDQ: 2 of 10);
            null or -1 = all heads.
        q_head_type: the Q heads (RLinf writes it here and under actor.model); when set it must
            equal actor.model.q_head_type.
        bootstrap_type: ``standard``: a termination ends the target's bootstrap, a time-limit cut
            does not; ``always``: every transition bootstraps (ManiSkill's ``bootstrap_at_done``).
        gamma: discount per env step.
        tau: Polyak rate of the target networks, in (0, 1] (CrossQ has no targets).
        target_update_freq: Polyak-update the targets every this many critic updates.
        n_step: n-step returns (1 = one-step TD); folded per environment by the rollout workers,
            stopping at episode ends (our key).
        uniform_warmup: act uniformly at random in the action bounds until the buffer holds
            replay_buffer.min_buffer_size transitions (ManiSkill's / CleanRL's learning_starts;
            our key).
        entropy_tuning: see :class:`EntropyTuningConfig`.
        replay_buffer: see :class:`ReplayBufferConfig`.
        demo_buffer: see :class:`DemoBufferConfig` (RLPD); null = no demonstrations.
        auto_reset, ignore_terminations: the episode rules env splits inherit when set (as in the
            on-policy config).
    """

    adv_type: Literal["embodied_sac"] = OFFPOLICY_LOSS
    loss_type: Literal["embodied_sac"] = OFFPOLICY_LOSS
    loss_agg_func: str = rule("token-mean", only=("token-mean",),
                              reason="SAC losses are means over the batch of transitions (no tokens)")
    group_size: int = rule(1, only=(1,), reason="batches are drawn from the replay buffer; there are no groups")
    update_epoch: int = 32
    critic_actor_ratio: int = 1
    agg_q: Literal["min", "mean"] = "min"
    actor_agg_q: Literal["min", "mean"] | None = None
    backup_entropy: bool = True
    critic_subsample_size: int | None = None
    q_head_type: Literal["default", "layernorm", "crossq"] | None = None
    bootstrap_type: Literal["standard", "always"] = "standard"
    gamma: float = 0.8
    tau: float = 0.01
    target_update_freq: int = 1
    n_step: int = 1
    uniform_warmup: bool = False
    entropy_tuning: EntropyTuningConfig = field(default_factory=EntropyTuningConfig)
    replay_buffer: ReplayBufferConfig = field(default_factory=ReplayBufferConfig)
    demo_buffer: DemoBufferConfig | None = None
    auto_reset: bool | None = None
    ignore_terminations: bool | None = None

    @property
    def subsample_size(self) -> int | None:
        """``critic_subsample_size`` with RLinf's -1 read as null (all heads)."""
        return None if self.critic_subsample_size in (None, -1) else self.critic_subsample_size

    def validate(self, path: str) -> None:
        for key in ("update_epoch", "critic_actor_ratio", "target_update_freq", "n_step"):
            value = getattr(self, key)
            check(value >= 1, f"{path}.{key}", f"must be >= 1, got {value}")
        check(0 < self.tau <= 1, f"{path}.tau", f"must be in (0, 1], got {self.tau}")
        check(0 < self.gamma <= 1, f"{path}.gamma", f"must be in (0, 1], got {self.gamma}")
        check(self.critic_subsample_size is None or self.critic_subsample_size == -1
              or self.critic_subsample_size >= 1, f"{path}.critic_subsample_size",
              f"must be >= 1, or -1 / null for all heads, got {self.critic_subsample_size}")


@dataclass(frozen=True)
class OffPolicyRunnerConfig(RunnerConfig):
    """``runner`` of an off-policy run: the shared keys plus

    Attributes:
        weight_sync_interval: the rollout workers get the actor's weights after every this many
            training steps (RLinf's key; a step is ``algorithm.update_epoch`` updates).
        rollout_mode: ``sync``: collect ``env.train.max_steps_per_rollout_epoch`` steps of every
            env, then update; ``async``: the rollout workers keep simulating and acting while the
            actor updates, picking up pushed weights between policy steps (RLinf: the
            ``train_async.py`` entry; our key).
        learner_threads: torch threads of the actor process (the learner's updates); null: in
            sync mode every core of its node (env and rollout workers wait while it updates), in
            async mode its slots' share of the node's cores (they simulate meanwhile). Our key.
        deterministic: async mode in a fixed lockstep: collection k+1 runs while update k does,
            acting with the weights of update k-1, and update k takes exactly the transitions of
            collections 0..k, so a run repeats itself given its seed (sync mode is such a
            lockstep already; there the key only adds the checks). Refuses ``max_minutes``.
            Our key (docs/offpolicy.md, "Deterministic mode").
    """

    weight_sync_interval: int = 1
    rollout_mode: Literal["sync", "async"] = "sync"
    learner_threads: int | None = None
    deterministic: bool = False

    def validate(self, path: str) -> None:
        check(self.weight_sync_interval >= 1, f"{path}.weight_sync_interval",
              f"must be >= 1, got {self.weight_sync_interval}")
        check(self.learner_threads is None or self.learner_threads >= 1, f"{path}.learner_threads",
              f"must be >= 1 or null (chosen from the mode), got {self.learner_threads}")
        check(not (self.deterministic and self.max_minutes is not None), f"{path}.max_minutes",
              f"{self.max_minutes}: a wall-time limit stops after however many steps fit, which "
              f"{path}.deterministic: true cannot repeat; set null and bound the run with max_steps")


def _no_changes(section: Any, default: Any, path: str, reason: str) -> None:
    """Refuse the first leaf of ``section`` that differs from ``default``, naming its key."""
    if section == default:
        return
    for f in dataclasses.fields(section):
        a, b = getattr(section, f.name), getattr(default, f.name)
        if a != b:
            if dataclasses.is_dataclass(a) and dataclasses.is_dataclass(b):
                _no_changes(a, b, f"{path}.{f.name}", reason)
            raise ConfigError(f"{path}.{f.name}", f"{a!r} has no effect here: {reason}; remove it")


@dataclass(frozen=True)
class OffPolicyEmbodiedConfig(EmbodiedConfig):
    """The root of an off-policy embodied run (see the module docstring): ``EmbodiedConfig``'s
    sections with :class:`SACAlgorithmConfig` and :class:`OffPolicyRunnerConfig`.

    What the shared sections mean here: ``actor.global_batch_size`` is the SAC batch (one learner
    process; ``micro_batch_size`` null or equal), ``actor.optim.lr`` the actor's learning rate,
    ``actor.optim.value_lr`` the critic's (null = lr), ``actor.optim.clip_grad`` both networks'
    clip (0 = off), ``adam_beta1`` / ``adam_beta2`` / ``adam_eps`` both optimisers';
    ``actor.seed`` + ``runner.seed`` seed the learner; ``env.train.max_steps_per_rollout_epoch``
    the policy steps of every env per collection (sync: per training step).
    """

    runner: OffPolicyRunnerConfig = field(default_factory=lambda: OffPolicyRunnerConfig(task_type="embodied"))
    algorithm: SACAlgorithmConfig = field(default_factory=SACAlgorithmConfig)

    RUN_KIND = "an off-policy embodied run"

    #: the key scopes an off-policy embodied run reads (``actor.fsdp_config`` takes only what
    #: describes one unsharded learner; see :meth:`validate`)
    active_scopes = frozenset({"embodied", "offpolicy", "fsdp"})

    @classmethod
    def prepare_raw(cls, raw: dict[str, Any]) -> dict[str, Any]:
        raw = super().prepare_raw(raw)
        algo = raw.get("algorithm")
        if isinstance(algo, Mapping) and algo.get("critic_subsample_size") == -1:
            raw = {**raw, "algorithm": {**algo, "critic_subsample_size": None}}
        return raw

    def notes(self) -> list[str]:
        return check_scopes(self, self.active_scopes, soft=BACKEND_SCOPES) + collect_notes(self)

    @property
    def rollout_steps(self) -> int:
        """Policy steps of every train env per collection (``env.train.max_steps_per_rollout_epoch``;
        null = one episode, ``max_episode_steps``)."""
        return self.env.train.max_steps_per_rollout_epoch or self.env.train.episode_steps or 50

    @property
    def q_head_type(self) -> str:
        return self.actor.model.policy.q_head_type

    def validate(self, path: str) -> None:
        self.check_component_names()
        check(self.runner.task_type == "embodied", "runner.task_type", "must be embodied for this entry point")
        check_scopes(self, self.active_scopes, soft=BACKEND_SCOPES)
        for key, channel in (("env", self.env.channel), ("rollout", self.rollout.channel),
                             ("actor", self.actor.channel)):
            check(channel.queue_size == 0, f"{key}.channel.queue_size",
                  f"{channel.queue_size}: the transitions queue is unbounded (the buffer bounds the data); leave 0")
        algo, model, actor = self.algorithm, self.actor.model, self.actor
        model_type = (model.model_type or "").lower()
        check(model.model_type is not None, "actor.model.model_type", "missing")
        check(model_type in Q_HEAD_POLICIES, "actor.model.model_type",
              f"{model.model_type} has no Q head: SAC (algorithm.loss_type {OFFPOLICY_LOSS}) trains "
              f"{', '.join(Q_HEAD_POLICIES)} (an MLP actor with Q heads; RLinf: mlp_policy with add_q_head)")
        check(model.policy.action_dim is not None, "actor.model.action_dim", "missing")
        check(model.policy.num_action_chunks in (None, 1), "actor.model.num_action_chunks",
              f"{model.policy.num_action_chunks}: a SAC actor takes one action per step; set 1")
        check(model.precision in ("fp32", "float32"), "actor.model.precision",
              f"{model.precision}: the SAC learner and actor run in fp32")
        check(algo.q_head_type is None or algo.q_head_type == model.policy.q_head_type, "algorithm.q_head_type",
              f"{algo.q_head_type} differs from actor.model.q_head_type ({model.policy.q_head_type}); set one of them")
        sub = algo.subsample_size
        check(sub is None or sub <= model.policy.num_q_heads, "algorithm.critic_subsample_size",
              f"{sub} exceeds actor.model.num_q_heads ({model.policy.num_q_heads})")
        check(not self.critic.use_critic_model, "critic.use_critic_model",
              "SAC's critic is the Q ensemble of actor.model (num_q_heads, q_head_type), not a value model; set false")
        _no_changes(self.critic, CriticConfig(), "critic", "the critic is the Q ensemble of actor.model")
        _no_changes(actor.lr_sched, LrSchedConfig(), "actor.lr_sched", "the SAC learner's learning rates are "
                    "constant")
        # RLinf's SAC files write strategy fsdp + sharding_strategy no_shard: one unsharded copy, which
        # is what the single learner process is; anything else would have no effect
        check(actor.fsdp_config.sharding_strategy in ("no_shard", "full_shard"), "actor.fsdp_config.sharding_strategy",
              f"{actor.fsdp_config.sharding_strategy}: the SAC learner is one process (nothing to shard); "
              "write no_shard or remove it")
        fc, plain = actor.fsdp_config, FsdpConfig()
        _no_changes(dataclasses.replace(fc, strategy=plain.strategy, sharding_strategy=plain.sharding_strategy,
                                        limit_all_gathers=plain.limit_all_gathers,  # noted keys: accepted
                                        use_orig_params=plain.use_orig_params),
                    plain, "actor.fsdp_config", "the SAC learner is plain torch in one process (no FSDP)")
        check(actor.optim.weight_decay == 0, "actor.optim.weight_decay",
              f"{actor.optim.weight_decay}: the SAC learner's Adam has no weight decay; set 0")
        check(actor.optim.min_lr == 0, "actor.optim.min_lr", "the SAC learner's learning rates are constant; set 0")
        check(actor.global_batch_size is not None and actor.global_batch_size >= 1, "actor.global_batch_size",
              "missing: the SAC batch size (transitions per update)")
        check(actor.micro_batch_size in (None, actor.global_batch_size), "actor.micro_batch_size",
              f"{actor.micro_batch_size}: the learner takes each batch of actor.global_batch_size "
              f"({actor.global_batch_size}) at once; set null or equal")
        buf = algo.replay_buffer
        check(actor.global_batch_size <= buf.capacity, "actor.global_batch_size",
              f"{actor.global_batch_size} transitions per batch, but algorithm.replay_buffer.capacity holds at most "
              f"{buf.capacity}")
        check(self.runner.max_prompt_length is None, "runner.max_prompt_length",
              "a SAC policy reads no prompt; remove it")
        for key, on in (("env.enable_offload", self.env.enable_offload),
                        ("actor.enable_offload", actor.enable_offload),
                        ("rollout.enable_offload", self.rollout.enable_offload)):
            check(not on, key, "must be false: the buffer and the live episodes stay where they are between "
                               "collections")
        check(not self.rollout.normalize_states, "rollout.normalize_states",
              "the replay buffer keeps raw states (statistics that move would change old transitions); set false")
        train, evals = self.env.train, self.env.eval
        check(train.auto_reset, "env.train.auto_reset",
              "must be true: off-policy collection runs the episodes on across collections")
        check(train.total_num_envs is not None, "env.train.total_num_envs", "missing: how many environments in all")
        check(evals.total_num_envs is not None, "env.eval.total_num_envs", "missing: how many environments in all")
        steps = evals.max_steps_per_rollout_epoch
        check(steps is None or steps == evals.episode_steps, "env.eval.max_steps_per_rollout_epoch",
              f"{steps}: an evaluation plays one whole episode per env (max_episode_steps {evals.episode_steps}); "
              "set null or that")
        check(self.rollout.backend == "huggingface", "rollout.backend",
              "embodied policies are served by the huggingface (plain torch) backend")
        if self.cluster.accelerators_per_node is not None:
            self.check_against_plan(self.cluster.plan())

    def check_against_plan(self, plan: PlacementPlan) -> None:
        env_ws, roll_ws = plan.component("env").world_size, plan.component("rollout").world_size
        stages = self.rollout.pipeline_stage_num
        check(plan.component("actor").world_size == 1, "cluster.component_placement.actor",
              f"{plan.component('actor').world_size} processes: the SAC learner and its buffer are one process; "
              "place the actor on one accelerator slot")
        check(env_ws % roll_ws == 0, "cluster.component_placement.rollout",
              f"each rollout process serves whole env processes: {env_ws} env processes are not "
              f"divisible by {roll_ws} rollout processes")
        for split in ("train", "eval"):
            n = getattr(self.env, split).total_num_envs
            check(n % (env_ws * stages) == 0, f"env.{split}.total_num_envs",
                  f"{n} environments do not split evenly over {env_ws} env processes x "
                  f"{stages} pipeline stages (rollout.pipeline_stage_num)")


def offpolicy_requested(raw: Any) -> bool:
    """Whether a raw config (dict or Hydra ``DictConfig``) asks for the off-policy recipe:
    ``algorithm.loss_type`` or ``algorithm.adv_type`` is ``embodied_sac``."""
    algo = raw.get("algorithm") if isinstance(raw, Mapping) or hasattr(raw, "get") else None
    if algo is None or not hasattr(algo, "get"):
        return False
    return OFFPOLICY_LOSS in (algo.get("loss_type"), algo.get("adv_type"))


def embodied_config_class(raw: Any) -> type[EmbodiedConfig]:
    """The root config an embodied YAML parses into: :class:`OffPolicyEmbodiedConfig` when it
    asks for SAC (:func:`offpolicy_requested`), else :class:`~rlinf.config.embodied.EmbodiedConfig`."""
    return OffPolicyEmbodiedConfig if offpolicy_requested(raw) else EmbodiedConfig
