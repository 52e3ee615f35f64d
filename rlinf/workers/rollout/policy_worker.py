"""The embodied rollout worker: serves actions to its env workers, stage by stage, and records
the trajectory (observations, sampled actions, log-probs, values, rewards, episode ends).

Rollout rank ``r`` of ``R`` serves env ranks ``r, r + R, r + 2R, ...``, one pipe to each
(:data:`~rlinf.workers.env.messages.ENV_POLICY_PIPE`). In each policy step it visits every
(env rank, stage) slot in order: receive the slot's observations, compute the action chunk, send
it back. While it computes one stage, the env worker steps the other.

With ``rollout.normalize_states`` the worker keeps running statistics of the state observations
(:class:`~rlinf.algorithms.running_norm.RunningMoments`): in a recorded (train) rollout every
received observation batch first updates them, then every state the policy sees (and the
trajectory records) is ``clamp((s - mean) / std, +-state_norm_clip)``; evaluation uses them
frozen. ``state_norm_state`` / ``load_state_norm`` move them to and from checkpoints.

An evaluation round (``run(..., eval_batch=P)``; the env workers send each row's episode seed,
:class:`~rlinf.utils.eval_episodes.EvalRound`) acts on each row so that an episode's actions do
not depend on which slot plays it or beside which others. A row's floating-point result can depend
on the batch shape and on the row's position in the batch (the matrix kernels treat the rows of a
partial block differently: measured here on the CPU, an MLP action moved by up to 2e-9 between
positions of a 6-row batch, enough to change a 10-step PushCube return from 0.739 to 0.784), but
not on the other rows' values. So the rows of real episodes go through the policy in forward
passes of exactly ``P`` rows, episode seed ``s`` at position ``s mod P`` (the rest filled with
copies; consecutive episodes share a pass), and policies that draw noise even when acting
deterministically (flow / π0: the initial noise) act one row at a time with the noise of that
episode and step (:func:`~rlinf.utils.eval_episodes.noise_seed`). Padding rows get zeros.
"""

from __future__ import annotations

import dataclasses
import traceback

import torch

from rlinf.algorithms.running_norm import RunningMoments
from rlinf.config.actor import ActorModelConfig
from rlinf.data.embodied_batch import Trajectory
from rlinf.engines.simulators.base import EnvObs
from rlinf.models.embodied import build_policy
from rlinf.models.embodied.base import ObsSpec, PolicyOutput
from rlinf.models.embodied.factory import PI0_TYPES
from rlinf.scheduler import Worker
from rlinf.utils.eval_episodes import noise_seed
from rlinf.workers.env.messages import ENV_POLICY_PIPE, ObsMessage, action_key, obs_key
from rlinf.workers.links import POLICY_LINK

#: policies whose deterministic action still starts from drawn noise (the flow's initial ``x_0``)
NOISY_AT_EVAL = ("flow_mlp",) + PI0_TYPES


def select_rows(inputs: dict, rows: list[int]) -> dict:
    """The rows ``rows`` (in that order, repeats allowed) of policy keyword arguments.

    >>> select_rows({"states": torch.arange(3.).view(3, 1), "instructions": ["a", "b", "c"], "images": None},
    ...             [2, 2])
    {'states': tensor([[2.],
            [2.]]), 'instructions': ['c', 'c'], 'images': None}
    """
    out = {}
    for k, v in inputs.items():
        if isinstance(v, torch.Tensor):
            out[k] = v[torch.as_tensor(rows, device=v.device)]
        elif isinstance(v, list):
            out[k] = [v[r] for r in rows]
        else:
            out[k] = v
    return out


def eval_passes(seeds: list[int], batch: int) -> list[list[int | None]]:
    """The forward passes of an evaluation slot: each a list of ``batch`` positions holding the
    index (into ``seeds``) of the row acted on there, or None (filler); the row of episode seed
    ``s`` sits at position ``s mod batch``, so its result is the same in every layout.

    >>> eval_passes([1003, 1004, 1005], 4)
    [[1, 2, None, 0]]
    >>> eval_passes([1003, 1004, 1005], 2)
    [[1, 0], [None, 2]]
    """
    passes: list[list[int | None]] = []
    for i, seed in enumerate(seeds):
        pos = seed % batch
        free = next((p for p in passes if p[pos] is None), None)
        if free is None:
            free = [None] * batch
            passes.append(free)
        free[pos] = i
    return passes


def policy_inputs(obs: EnvObs) -> dict:
    """``EmbodiedPolicy`` keyword arguments of an observation batch: the first camera is the
    main image, the second (if any) the wrist image."""
    cams = list(obs.images)
    return {"states": obs.states, "images": obs.images[cams[0]] if cams else None,
            "wrist_images": obs.images[cams[1]] if len(cams) > 1 else None,
            "instructions": obs.task_descriptions}


class _SlotRecord:
    """What one (env rank, stage) slot produced during a rollout."""

    def __init__(self):
        self.states, self.images, self.raw, self.logprobs, self.values = [], [], [], [], []
        self.rewards, self.dones, self.terminations, self.bootstrap = [], [], [], []
        self.instructions: list[list[str]] | None = None
        self.reset_state_ids = None

    def observe(self, obs: EnvObs) -> None:
        if obs.states is not None:
            self.states.append(obs.states.cpu())
        cams = list(obs.images)
        names = ["main", "wrist"][:len(cams)]
        self.images.append({n: obs.images[c].cpu() for n, c in zip(names, cams)})
        if obs.task_descriptions is not None:
            self.instructions = (self.instructions or []) + [list(obs.task_descriptions)]

    def trajectory(self) -> Trajectory:
        stack = lambda xs: torch.stack(xs) if xs else None  # noqa: E731
        return Trajectory(
            raw_actions=stack(self.raw), logprobs=stack(self.logprobs), rewards=stack(self.rewards),
            dones=stack(self.dones), terminations=stack(self.terminations),
            bootstrap_values=stack(self.bootstrap), states=stack(self.states),
            images={k: torch.stack([im[k] for im in self.images]) for k in (self.images[0] if self.images else {})},
            instructions=self.instructions, values=stack(self.values), reset_state_ids=self.reset_state_ids)


class PolicyRolloutWorker(Worker):
    """One rollout process of an embodied run.

    Args:
        model: ``actor.model`` (the same policy the actor trains).
        obs_spec: what the simulators give.
        env_world_size: number of env processes.
        stages: ``rollout.pipeline_stage_num``.
        temperature: sampling temperature (VLA bins).
        state_norm_clip: normalise state observations with running statistics, clipped to
            +-this (``rollout.state_norm_clip`` when ``rollout.normalize_states``); None = off.
    """

    def __init__(self, model: ActorModelConfig, obs_spec: ObsSpec, env_world_size: int, stages: int,
                 temperature: float = 1.0, state_norm_clip: float | None = None,
                 max_prompt_length: int | None = None):
        self.state_norm_clip = state_norm_clip
        self.state_norm = (RunningMoments.create(obs_spec.state_dim)
                           if state_norm_clip is not None and obs_spec.state_dim > 0 else None)
        self.policy = build_policy(model, obs_spec, temperature=temperature)
        self.policy.max_prompt_length = max_prompt_length  # VLAs: runner.max_prompt_length
        self.policy.to(self.device).eval()
        self.forward_batch = model.policy.val_micro_batch_size  # actor.model.val_micro_batch_size
        self.env_ranks = list(range(self.rank, env_world_size, self.world_size))
        self.stages = stages
        self.policy_version = 0
        self.noisy_at_eval = (model.model_type or "").lower() in NOISY_AT_EVAL

    def run(self, tag: str, num_steps: int, seed: int, deterministic: bool = False,
            record: bool = True, eval_batch: int | None = None) -> Trajectory | None:
        """Serve ``num_steps`` policy steps to this worker's env slots; returns the trajectory of
        all its environments (slots joined along the env axis) when ``record``. ``eval_batch``:
        an evaluation round acted on at that fixed forward shape (see the module docstring;
        deterministic, nothing recorded)."""
        if eval_batch is not None and (record or not deterministic or eval_batch < 1):
            raise ValueError(f"an evaluation round acts deterministically at a forward batch >= 1 and records "
                             f"nothing; got record={record}, deterministic={deterministic}, eval_batch={eval_batch}")
        return self._serve_env_pipes(self._serve, tag, num_steps, seed, deterministic, record, eval_batch)

    def _serve_env_pipes(self, serve, *args):
        """``serve(pipes, *args)`` over this worker's env pipes; an error is first sent down every
        pipe (so the env workers waiting on this worker stop with its reason), then raised."""
        pipes = self.pipes(ENV_POLICY_PIPE)
        try:
            return serve(pipes, *args)
        except BaseException as exc:
            reason = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            for pipe in pipes.values():
                pipe.send_error(f"rollout worker {self.rank}: {reason}")
            raise

    @torch.no_grad()
    def _serve(self, pipes: dict, tag: str, num_steps: int, seed: int, deterministic: bool,
               record: bool, eval_batch: int | None = None) -> Trajectory | None:
        gen = torch.Generator(device=self.device).manual_seed(seed * 1000 + self.rank)
        slots = [(e, s) for e in self.env_ranks for s in range(self.stages)]
        records = {slot: _SlotRecord() for slot in slots}
        episode_seeds: dict[tuple[int, int], torch.Tensor | None] = {}
        has_values = None
        for t in range(num_steps + 1):
            for slot in slots:
                msg: ObsMessage = self._normalized(pipes[slot[0]].recv(key=obs_key(tag, *slot)),
                                                   update=record)
                rec = records[slot]
                inputs = {k: (v.to(self.device) if isinstance(v, torch.Tensor) else v)
                          for k, v in policy_inputs(msg.obs).items()}
                if t == 0:
                    rec.reset_state_ids = msg.reset_state_ids
                    episode_seeds[slot] = msg.episode_seeds
                else:
                    rec.rewards.append(msg.rewards)
                    rec.dones.append(msg.dones)
                    rec.terminations.append(msg.terminations)
                    rec.bootstrap.append(self._bootstrap(msg, has_values))
                if record:
                    rec.observe(msg.obs)
                if t < num_steps and eval_batch is not None and episode_seeds[slot] is not None:
                    actions = self._act_episodes(inputs, episode_seeds[slot].tolist(), t, eval_batch)
                    pipes[slot[0]].send(actions.cpu(), key=action_key(tag, *slot))
                elif t < num_steps:
                    out = self._act(inputs, deterministic, gen)
                    pipes[slot[0]].send(out.actions.cpu(), key=action_key(tag, *slot))
                    has_values = out.values is not None
                    if record:
                        rec.raw.append(out.raw_actions.cpu())
                        rec.logprobs.append(out.logprobs.float().cpu())
                        if has_values:
                            rec.values.append(out.values.float().cpu())
                elif record and has_values:
                    rec.values.append(self.policy.value(**inputs).float().cpu())
        if not record:
            return None
        return Trajectory.concat_envs([records[slot].trajectory() for slot in slots])

    def _act(self, inputs: dict, deterministic: bool, gen) -> PolicyOutput:
        """``policy.act`` on at most ``actor.model.val_micro_batch_size`` envs per forward pass."""
        n = next(v.shape[0] for v in inputs.values() if isinstance(v, torch.Tensor))
        size = self.forward_batch
        if not size or n <= size:
            return self.policy.act(**inputs, deterministic=deterministic, generator=gen)
        outs = []
        for s in range(0, n, size):
            part = {k: (v[s:s + size] if isinstance(v, torch.Tensor) or isinstance(v, list) else v)
                    for k, v in inputs.items()}
            outs.append(self.policy.act(**part, deterministic=deterministic, generator=gen))
        return PolicyOutput(*(None if getattr(outs[0], f) is None else torch.cat([getattr(o, f) for o in outs])
                              for f in ("actions", "raw_actions", "logprobs", "values", "entropy")))

    def _act_episodes(self, inputs: dict, seeds: list[int], step: int, batch: int) -> torch.Tensor:
        """Deterministic actions ``[n, K, A]`` of an evaluation round's rows, each independent of
        the layout (see the module docstring); ``seeds``: the rows' episode seeds (-1: padding,
        given zeros)."""
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # the thread count changes a row's last bits (6 MLP rows: 4.5e-8 at 1 vs 2
        try:                      # threads), and it follows the layout (and, locally, the last group started)
            return self._act_episodes_one_thread(inputs, seeds, step, batch)
        finally:
            torch.set_num_threads(threads)

    def _act_episodes_one_thread(self, inputs: dict, seeds: list[int], step: int, batch: int) -> torch.Tensor:
        rows = [r for r, s in enumerate(seeds) if s >= 0] or [0]  # all padding: act on one for the shape
        acted: dict[int, torch.Tensor] = {}  # row -> its action chunk [K, A]
        if self.noisy_at_eval:  # one row at a time, with its episode's noise
            for r in rows:
                gen = torch.Generator(device=self.device).manual_seed(noise_seed(max(seeds[r], 0), step))
                acted[r] = self.policy.act(**select_rows(inputs, [r]), deterministic=True, generator=gen).actions[0]
        else:  # forward passes of exactly `batch` rows, each episode at its own position
            for placed in eval_passes([max(seeds[r], 0) for r in rows], batch):
                at = [None if i is None else rows[i] for i in placed]
                filler = next(r for r in at if r is not None)
                gen = torch.Generator(device=self.device).manual_seed(step)  # unused by these policies
                out = self.policy.act(**select_rows(inputs, [filler if r is None else r for r in at]),
                                      deterministic=True, generator=gen).actions
                acted.update({r: out[pos] for pos, r in enumerate(at) if r is not None})
        some = next(iter(acted.values()))
        actions = torch.zeros((len(seeds), *some.shape), dtype=some.dtype, device=some.device)
        for r, action in acted.items():
            if seeds[r] >= 0:
                actions[r] = action
        return actions

    def _normalized(self, msg: ObsMessage, update: bool) -> ObsMessage:
        """``msg`` with normalised states (obs and final_obs) when state normalisation is on;
        ``update``: merge ``msg.obs.states`` into the statistics first."""
        if self.state_norm is None or msg.obs.states is None:
            return msg
        if update:
            self.state_norm.update(msg.obs.states)
        norm = lambda o: None if o is None else dataclasses.replace(  # noqa: E731
            o, states=self.state_norm.normalize(o.states.float(), self.state_norm_clip))
        return dataclasses.replace(msg, obs=norm(msg.obs), final_obs=norm(msg.final_obs))

    def state_norm_state(self) -> dict[str, torch.Tensor] | None:
        """The running state statistics (None when normalisation is off)."""
        return None if self.state_norm is None else self.state_norm.state_dict()

    def load_state_norm(self, state: dict[str, torch.Tensor] | None) -> None:
        """Restore statistics from :meth:`state_norm_state` (ignored when off or None)."""
        if self.state_norm is not None and state is not None:
            self.state_norm = RunningMoments.from_state_dict(state)

    def _bootstrap(self, msg: ObsMessage, has_values: bool | None) -> torch.Tensor:
        """``[n]`` value of the last observation of episodes cut by the time limit (0 elsewhere)."""
        n = msg.dones.shape[0]
        if not has_values or msg.final_obs is None or not bool(msg.truncated.any()):
            return torch.zeros(n)
        inputs = {k: (v.to(self.device) if isinstance(v, torch.Tensor) else v)
                  for k, v in policy_inputs(msg.final_obs).items()}
        values = self.policy.value(**inputs).float().cpu()
        if values.dim() > 1:  # action-level values: the first action position of the chunk
            values = values[:, 0]
        return values * msg.truncated.float()

    def offload(self) -> None:
        """Move the policy to the CPU (``rollout.enable_offload``, when the actor shares this
        GPU). A no-op on a CPU device."""
        if self.device.type != "cpu":
            self.policy.to("cpu")
            torch.cuda.empty_cache()

    def onload(self) -> None:
        if self.device.type != "cpu":
            self.policy.to(self.device)

    def receive_weights(self, version: int | None = None) -> int:
        """Load the actor's weights from the policy link, in place; returns the new version (the
        runner's step, which the policy also gets as its ``global_step``)."""
        state = self.recv_tensors(POLICY_LINK)
        self.onload()
        self.policy.load_state_dict({k: v.to(self.device) for k, v in state.items()})
        self.policy_version = self.policy_version + 1 if version is None else version
        self.policy.set_global_step(self.policy_version)  # schedules over training (noise_anneal)
        return self.policy_version
