"""The rollout worker of an off-policy run: acts with the SAC actor on its env workers' simulators
and streams transitions ``(s, a, r, s', terminated)`` (n-step folded) to the learner over the
run's channel, instead of returning a trajectory.

One :meth:`OffPolicyRolloutWorker.collect` is a *segment* of ``num_steps`` policy steps (the
env workers' ``run(..., reset=False)``: episodes go on across segments, so a segment may be as
short as a few steps). For each step of each (env rank, stage) slot it keeps the observation it
acted on and the action the env executed; the next message completes the transition with the
chunk's reward, the termination flag and ``s'``: the next observation, or, where an episode
ended, the observation it ended in (``ObsMessage.final_states``; with auto-reset the next
observation already belongs to the next episode). A time-limit cut is not a termination (the
target bootstraps through it). At the end of the segment one item goes on the channel:
``{"rows": transition fields, "versions": policy version per row, "env_steps": n, "chunk": the
segment's number, "rank": this worker's}`` (the learner orders what it takes in by the last two).

Weights arrive by the tensor link (``receive_weights``, sync mode) or on the channel
(:meth:`poll_weights`, async mode: checked before every policy step, so the simulation never
waits for the learner). Before learning starts the worker may act uniformly at random
(``algorithm.uniform_warmup``). Evaluation uses the base class's ``run`` (deterministic actions).
"""

from __future__ import annotations

from typing import Any

import torch

from rlinf.config.actor import ActorModelConfig
from rlinf.data.replay_buffer import TRANSITION_FIELDS, NStepAccumulator
from rlinf.models.embodied.base import ObsSpec
from rlinf.workers.env.messages import ObsMessage, action_key, obs_key
from rlinf.workers.links import weights_key
from rlinf.workers.rollout.policy_worker import PolicyRolloutWorker, policy_inputs


class OffPolicyRolloutWorker(PolicyRolloutWorker):
    """One rollout process of an off-policy run (see the module docstring).

    Args:
        model: ``actor.model`` (``sac_mlp``).
        obs_spec: what the simulators give.
        env_world_size: env processes.
        stages: ``rollout.pipeline_stage_num``.
        channel: the run's channel; transitions go to key ``queue``.
        queue: ``actor.channel.queue_name``.
        n_step, gamma: ``algorithm.n_step`` / ``algorithm.gamma`` (n-step folding).
        seed: seeds the uniform warm-up actions.
    """

    def __init__(self, model: ActorModelConfig, obs_spec: ObsSpec, env_world_size: int, stages: int,
                 channel: Any, queue: str, n_step: int = 1, gamma: float = 0.99, seed: int = 0):
        super().__init__(model, obs_spec, env_world_size, stages)
        self.channel, self.queue = channel, queue
        self.n_step, self.gamma = int(n_step), float(gamma)
        self._folds: dict[tuple[int, int], NStepAccumulator] = {}
        low, high = obs_spec.bounds(int(model.policy.action_dim))
        self.low, self.high = low.float(), high.float()
        self._uniform = torch.Generator().manual_seed(seed * 7919 + self.rank)

    def poll_weights(self) -> int:
        """Load the newest weights pushed for this worker on the channel (async mode), if any;
        returns the policy version it acts with."""
        key = weights_key(self.rank)
        waiting = self.channel.qsize(key)
        if waiting:
            newest = self.channel.get_batch(key=key, count=waiting)[-1]
            self.policy.load_state_dict({k: v.to(self.device) for k, v in newest["state"].items()})
            self.policy_version = int(newest["version"])
        return self.policy_version

    def collect(self, tag: str, num_steps: int, seed: int, random_actions: bool = False,
                poll: bool = False, chunk: int = -1) -> dict[str, int]:
        """Serve one segment of ``num_steps`` policy steps to this worker's env slots (their env
        workers run ``run(split="train", tag, num_steps, ..., reset=False)``) and put its
        transitions on the channel; ``random_actions``: uniform actions in the env's bounds;
        ``poll``: :meth:`poll_weights` before each step; ``chunk``: the segment's number (sent
        with it). Returns the transitions, env steps and the policy version it acted with."""
        return self._serve_env_pipes(self._collect, tag, num_steps, seed, random_actions, poll, chunk)

    @torch.no_grad()
    def _collect(self, pipes: dict, tag: str, num_steps: int, seed: int, random_actions: bool,
                 poll: bool, chunk: int = -1) -> dict[str, int]:
        gen = torch.Generator(device=self.device).manual_seed(seed * 1000 + self.rank)
        slots = [(e, s) for e in self.env_ranks for s in range(self.stages)]
        acted: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor, int]] = {}
        rows: list[dict[str, torch.Tensor]] = []
        versions: list[torch.Tensor] = []
        env_steps = 0
        for t in range(num_steps + 1):
            if poll and t < num_steps:
                self.poll_weights()
            for slot in slots:
                msg: ObsMessage = pipes[slot[0]].recv(key=obs_key(tag, *slot))
                if msg.obs.states is None:
                    raise ValueError("the off-policy recipe learns from state observations; the env gives none")
                states = msg.obs.states.float().cpu()
                if t > 0:
                    folded = self._transitions(slot, acted[slot], msg, states)
                    if folded is not None:
                        rows.append(folded)
                        versions.append(torch.full((int(folded["reward"].shape[0]),), acted[slot][2]))
                    env_steps += int(states.shape[0]) * int(msg.rewards.shape[1])
                if t < num_steps:
                    actions = self._actions(msg, random_actions, gen)
                    pipes[slot[0]].send(actions, key=action_key(tag, *slot))
                    acted[slot] = (states, actions[:, 0].float(), self.policy_version)
        out = {k: torch.cat([r[k] for r in rows]) for k in TRANSITION_FIELDS} if rows else \
            {k: torch.zeros(0) for k in TRANSITION_FIELDS}
        self.channel.put({"rows": out, "env_steps": env_steps, "chunk": int(chunk), "rank": self.rank,
                          "versions": torch.cat(versions) if versions else torch.zeros(0, dtype=torch.long)},
                         key=self.queue)
        return {"transitions": int(out["reward"].shape[0]), "env_steps": env_steps, "version": self.policy_version}

    def _actions(self, msg: ObsMessage, random_actions: bool, gen: torch.Generator) -> torch.Tensor:
        """``[n, 1, A]`` env actions: the policy's sample, or uniform in the bounds."""
        if random_actions:
            n = msg.obs.num_envs
            u = torch.rand(n, 1, self.low.shape[0], generator=self._uniform)
            return self.low + (self.high - self.low) * u
        inputs = {k: (v.to(self.device) if isinstance(v, torch.Tensor) else v)
                  for k, v in policy_inputs(msg.obs).items()}
        return self._act(inputs, False, gen).actions.float().cpu()

    def _transitions(self, slot: tuple[int, int], acted: tuple[torch.Tensor, torch.Tensor, int], msg: ObsMessage,
                     states: torch.Tensor) -> dict[str, torch.Tensor] | None:
        """The transitions completed by ``msg`` for ``slot`` (n-step folded; None: none yet)."""
        obs, action, _ = acted
        dones = msg.dones.bool().cpu()
        next_obs = states.clone()
        if bool(dones.any()) and msg.final_states is not None:
            next_obs[dones] = msg.final_states.float().cpu()[dones]
        terminated = msg.terminations.bool().cpu()
        step = {"obs": obs, "action": action, "reward": msg.rewards.float().cpu().sum(-1), "next_obs": next_obs,
                "terminated": terminated, "truncated": dones & ~terminated}
        if self.n_step == 1:
            step.pop("truncated")
            return {**step, "discount": torch.full_like(step["reward"], self.gamma)}
        fold = self._folds.setdefault(slot, NStepAccumulator(self.n_step, self.gamma))
        return fold.push(step)
