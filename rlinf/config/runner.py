"""``runner:`` — the training loop's schedule, logging and checkpoints."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rlinf.utils.typed_config import check, rule


@dataclass(frozen=True)
class LoggerConfig:
    """``runner.logger``.

    Attributes:
        log_path: base directory for logs.
        project_name: project name for experiment tracking.
        experiment_name: run name.
        logger_backends: any of tensorboard, wandb, swanlab (wandb/swanlab run offline when no
            network).
    """

    log_path: str = "results/logs"
    project_name: str = "rlinf"
    experiment_name: str = "default"
    logger_backends: tuple[Literal["tensorboard", "wandb", "swanlab"], ...] = ("tensorboard",)


@dataclass(frozen=True)
class RunnerConfig:
    """``runner``.

    Attributes:
        task_type: math, embodied or tool_agent.
        logger: see :class:`LoggerConfig`.
        max_epochs: passes over the training data.
        max_steps: trainer steps; -1 = derived from max_epochs.
        val_check_interval: steps between validation rollouts; -1 disables.
        save_interval: steps between checkpoints; -1 disables.
        seq_length: prompt + response tokens fed to the models.
        resume_dir: checkpoint folder to resume from.
        resume_unverified: load a checkpoint that has no manifest.json (saved before checkpoints
            carried one) or holds files its manifest does not list; false (the default) refuses
            it before Ray, naming the file. Said in a start-up note when used (our key).
        experiment_name: run name (also used in output paths).
        output_dir: where checkpoints, logs and exports go.
        enable_dynamic_batch_size: pack micro-batches by token budget.
        max_tokens_per_mbs: token budget of one micro-batch when packing.
        only_eval: run validation only.
        max_prompt_length: embodied VLA policies (openvla, openvla_oft): the longest instruction
            prompt in tokens; a task whose prompt is longer stops the run with the key named;
            with algorithm.length_params.max_length, prompt + action tokens must fit in it. Math
            runs: use data.max_prompt_length.
        seed: global seed.
        recover_mode: disabled, auto, fault or resume (AReaL's key): resume from / restart at the
            run's latest complete checkpoint by itself (see :mod:`rlinf.runners.recovery`).
        recover_retries: restarts allowed after failures (fault / auto).
        save_interval_secs: also checkpoint when this many seconds have passed since the last
            checkpoint (or the start), checked after each step; null = by step count only.
        max_minutes: stop training once this much wall time has passed since the start of the
            fit (evaluating and, with save_interval > 0, saving after that last step); null =
            no limit (our key).
        export_hf: write the trained policy as an HF safetensors folder
            (``<output_dir>/<experiment_name>/huggingface``) at the end of training (our key).
        plot_curves: save ``curves.png`` (reward, accuracy, length per step) in
            ``logger.log_path`` at the end (our key).
        rollout_mode: math and tool-agent runs: ``sync`` (generate a batch, then train on it),
            ``async`` (the lookahead queue: whole batches generated up to
            ``algorithm.max_head_offpolicyness`` steps ahead) or ``fully_async`` (generation
            never stops: rollout workers keep ``rollout.max_concurrent_rollouts`` episodes in
            flight, a step trains on ``data.rollout_batch_size`` finished groups, new weights
            reach generations in flight, no group is trained more than
            ``algorithm.max_head_offpolicyness`` versions after it started; needs
            ``algorithm.loss_type: decoupled_ppo`` and actor and rollout on separate
            accelerators). null = ``async`` when ``algorithm.max_head_offpolicyness > 0``, else
            ``sync``; ``sync`` with max_head_offpolicyness > 0 and ``async`` with 0 are refused.
            Read the resolved value from ``MathConfig.rollout_mode``. The off-policy embodied
            recipe has a ``rollout_mode`` of its own (sync / async); embodied PPO refuses the key
            (it runs ahead with ``algorithm.max_head_offpolicyness: 1``).
    """

    task_type: Literal["math", "embodied", "tool_agent"] = "math"
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    max_epochs: int = 1
    max_steps: int = -1
    val_check_interval: int = 1
    save_interval: int = -1
    seq_length: int = 2048
    resume_dir: str | None = None
    resume_unverified: bool = False
    experiment_name: str = "default"
    output_dir: str = "results"
    enable_dynamic_batch_size: bool = False
    max_tokens_per_mbs: int = 2048
    only_eval: bool = False
    max_prompt_length: int | None = rule(None, scope="embodied")
    seed: int = 1234
    recover_mode: Literal["disabled", "auto", "fault", "resume"] = "disabled"
    recover_retries: int = 3
    save_interval_secs: float | None = None
    max_minutes: float | None = None
    export_hf: bool = True
    plot_curves: bool = True
    rollout_mode: Literal["sync", "async", "fully_async"] | None = rule(None, scope="math")

    def validate(self, path: str) -> None:
        check(self.max_epochs >= 1, f"{path}.max_epochs", f"must be >= 1, got {self.max_epochs}")
        check(self.max_steps == -1 or self.max_steps >= 1, f"{path}.max_steps",
              f"must be -1 (derive from max_epochs) or >= 1, got {self.max_steps}")
        for key in ("val_check_interval", "save_interval"):
            value = getattr(self, key)
            check(value == -1 or value >= 1, f"{path}.{key}", f"must be -1 (off) or >= 1, got {value}")
        check(self.seq_length >= 2, f"{path}.seq_length", f"must be >= 2, got {self.seq_length}")
        check(self.recover_retries >= 0, f"{path}.recover_retries", f"must be >= 0, got {self.recover_retries}")
        check(self.max_minutes is None or self.max_minutes > 0, f"{path}.max_minutes",
              f"must be > 0 (or null: no limit), got {self.max_minutes}")
        check(self.save_interval_secs is None or self.save_interval_secs > 0, f"{path}.save_interval_secs",
              f"must be > 0 or null, got {self.save_interval_secs}")
        check(self.max_tokens_per_mbs >= 1, f"{path}.max_tokens_per_mbs",
              f"must be >= 1, got {self.max_tokens_per_mbs}")
