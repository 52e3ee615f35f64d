"""What one step of a run does, as the planner sees it: roles in order, who trains, who receives
the weights, and the knobs the recipe lets the planner turn.

The scheduler layer knows no algorithm: a recipe describes its step with these types (its
``placement_workflow`` hook), and the simulator (:mod:`.simulate`) and the search
(:mod:`.search`) only read them.

* :class:`Stage`: a role that processes every sample of the step once (generation, scoring,
  log-probs, training). Consecutive stages on disjoint devices stream chunks of samples; on
  shared devices the next one waits for the whole batch.
* :class:`Loop`: two roles that take turns ``iterations`` times per sample (a simulator and the
  policy that acts in it); ``pipeline_stages`` groups of samples can alternate so that one group's
  simulator step overlaps another group's policy step.

Example (a math GRPO step: generate, score, train; the actor sends weights to the rollout):

    >>> wf = Workflow(flow=(Stage("rollout"), Stage("reward"), Stage("actor")), trainer="actor",
    ...               receivers=("rollout",), lookahead=(0, 1, 2), lookahead_key="algorithm.max_head_offpolicyness")
    >>> wf.roles()
    ('rollout', 'reward', 'actor')
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Loop", "Stage", "Workflow"]


@dataclass(frozen=True)
class Stage:
    """A role that processes every sample of the step once; ``whole_batch``: it starts only when
    the whole batch is there, even from a producer on other devices (a training update)."""

    role: str
    whole_batch: bool = False


@dataclass(frozen=True)
class Loop:
    """Two roles taking turns ``iterations`` times per sample (``roles[0]`` first: the simulator)."""

    roles: tuple[str, str]
    iterations: int = 1


@dataclass(frozen=True)
class Workflow:
    """One step of a run.

    Attributes:
        flow: the stages and loops in step order; each feeds the next.
        trainer: the role whose weights change in the step.
        receivers: the roles that get the trainer's weights at the end of the step.
        lookahead: the depths the recipe allows: how many steps the receivers may run ahead of the
            trainer (0: synchronous). Depths above 0 are tried only where the receivers and the
            trainer share no device (on shared devices they take turns anyway).
        lookahead_key: the config key that sets the depth (written by ``--out``).
        lookahead_values: the config value per depth (default: the depth itself).
        pipeline_stages: the group counts a loop may use (1: no pipelining).
        pipeline_key: the config key that sets the group count.
        chunks: how many pieces a batch streams in between roles on disjoint devices.
        external_waits: roles whose calls wait for things outside the run (tool calls, HTTP, a
            sandbox): a measured profile gives only these a ``wait_s_per_step`` (wall minus CPU
            seconds); any other role's wall minus CPU is waiting for cores or for other ranks,
            which the simulation models itself.
        samples_per_step: the config's samples per step (the profile's default).
        lookahead_now, pipeline_stages_now: the config's own depth and group count.
    """

    flow: tuple[Stage | Loop, ...]
    trainer: str
    receivers: tuple[str, ...] = ()
    lookahead: tuple[int, ...] = (0,)
    lookahead_key: str | None = None
    lookahead_values: tuple | None = None
    pipeline_stages: tuple[int, ...] = (1,)
    pipeline_key: str | None = None
    chunks: int = 8
    external_waits: tuple[str, ...] = ()
    samples_per_step: int | None = None
    lookahead_now: int = 0
    pipeline_stages_now: int = 1

    def roles(self) -> tuple[str, ...]:
        """Every role of the flow, in order, once each."""
        out: list[str] = []
        for item in self.flow:
            for role in (item.roles if isinstance(item, Loop) else (item.role,)):
                if role not in out:
                    out.append(role)
        return tuple(out)

    def lookahead_setting(self, depth: int):
        """The config value for lookahead ``depth``."""
        if self.lookahead_values is None:
            return depth
        return self.lookahead_values[self.lookahead.index(depth)]
