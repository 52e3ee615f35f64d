"""A CleanRL-style single-file SAC on ManiSkill3 PickCube-v1 (state observations, CPU simulation):
the reference that the off-policy bench runs our SAC against (same task, env count, networks,
batch, update-to-data ratio and hyper-parameters).

Everything in one process: ``num_envs`` ManiSkill CPU environments stepped one after the other,
fixed-length episodes (``episode_steps``; success does not end one, and every transition
bootstraps, ManiSkill's ``bootstrap_at_done: always``), a preallocated replay buffer on the CPU,
``n_step`` returns folded within each episode (the last ``n - 1`` steps of an episode bootstrap
from its final observation with the shorter discount), twin ReLU Q networks (``layers`` x
``hidden``) with Polyak-averaged targets (``tau``), a tanh-Gaussian actor of the same size with
log-std squashed into [-5, 2], automatic entropy tuning of log(alpha) from ``initial_alpha`` to
``-|A|``, Adam. After ``learning_starts`` env steps (random actions until then) every
``training_freq`` vectorised steps run ``training_freq * num_envs * utd`` gradient updates.

Evaluation: ``eval_episodes`` deterministic episodes (the tanh of the mean) with fixed seeds
(``eval_seed + i``), ``success_once``.

Run on its own: ``python bench/single_file_sac.py --minutes 30``; prints one JSON line per eval.
``bench/bench_pickcube_sac.py`` gives it the flags of the config it compares (its
``single_file_args``), so the defaults here only matter when it runs alone.
Self-contained on purpose (CleanRL style): the environment loop repeats the one of
``single_file_ppo.py`` rather than importing it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class Args:
    """Hyper-parameters (defaults: ManiSkill's SAC baseline scaled to 8 CPU envs; the bench passes its config's)."""

    env_id: str = "PickCube-v1"
    control_mode: str = "pd_ee_delta_pos"
    num_envs: int = 8
    episode_steps: int = 50
    buffer_size: int = 300_000
    batch_size: int = 256
    learning_starts: int = 2_000
    training_freq: int = 8
    utd: float = 0.5
    gamma: float = 0.8
    n_step: int = 1  # rewards summed over n steps, bootstrapped with gamma**n (shorter at an episode's end)
    tau: float = 0.01
    policy_lr: float = 3e-4
    q_lr: float = 3e-4
    hidden: int = 256
    layers: int = 3  # hidden layers of every network (actor and both Qs)
    initial_alpha: float = 1.0  # the entropy coefficient at the start (ManiSkill: 1; RLinf's SAC: 0.01)
    log_std_min: float = -5.0
    log_std_max: float = 2.0
    eval_episodes: int = 32
    eval_seed: int = 1000
    eval_every_steps: int = 20_000
    seed: int = 1
    minutes: float = 30.0
    stop_at: float | None = None
    threads: int = 0  # 0: torch's default, every core (CleanRL leaves it; 2 threads update 1.4x faster here)


def make_env(args: Args):
    """One raw ManiSkill CPU environment (no gymnasium wrappers)."""
    os.environ.setdefault("MS_SKIP_ASSET_DOWNLOAD_PROMPT", "1")
    import gymnasium as gym
    import mani_skill.envs  # noqa: F401

    return gym.make(args.env_id, num_envs=1, obs_mode="state", control_mode=args.control_mode,
                    reward_mode="normalized_dense", sim_backend="cpu").unwrapped


class Envs:
    """``n`` environments stepped in turn; numpy in, torch out; fixed-length episodes."""

    def __init__(self, args: Args, n: int):
        self.envs = [make_env(args) for _ in range(n)]
        self.T, self.t = args.episode_steps, 0
        space = self.envs[0].single_action_space
        self.low = torch.as_tensor(space.low, dtype=torch.float32)
        self.high = torch.as_tensor(space.high, dtype=torch.float32)

    def reset(self, seed: int) -> torch.Tensor:
        self.t = 0
        return torch.cat([e.reset(seed=seed + i)[0].float() for i, e in enumerate(self.envs)])

    def step(self, actions: torch.Tensor):
        obs, rew, succ = [], [], []
        for e, a in zip(self.envs, actions.numpy()):
            o, r, _, _, info = e.step(a)
            obs.append(o.float())
            rew.append(float(r.reshape(-1)[0]))
            succ.append(bool(info["success"].reshape(-1)[0]))
        self.t += 1
        return torch.cat(obs), torch.tensor(rew), torch.tensor(succ), self.t >= self.T


def mlp(i: int, o: int, h: int, layers: int) -> nn.Sequential:
    dims = [i] + [h] * layers
    hidden = [m for a, b in zip(dims, dims[1:]) for m in (nn.Linear(a, b), nn.ReLU())]
    return nn.Sequential(*hidden, nn.Linear(h, o))


class Actor(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, args: Args, low: torch.Tensor, high: torch.Tensor):
        super().__init__()
        self.net = mlp(obs_dim, 2 * act_dim, args.hidden, args.layers)
        self.lo, self.hi = args.log_std_min, args.log_std_max
        self.register_buffer("scale", (high - low) / 2)
        self.register_buffer("bias", (high + low) / 2)

    def forward(self, obs: torch.Tensor, deterministic: bool = False):
        mean, raw = self.net(obs).chunk(2, dim=-1)
        log_std = self.lo + 0.5 * (self.hi - self.lo) * (torch.tanh(raw) + 1)
        u = mean if deterministic else mean + log_std.exp() * torch.randn_like(mean)
        y = torch.tanh(u)
        logp = (-0.5 * ((u - mean) / log_std.exp()) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
                - 2 * (math.log(2) - u - F.softplus(-2 * u)) - torch.log(self.scale)).sum(-1)
        return y * self.scale + self.bias, logp


class Buffer:
    def __init__(self, size: int, obs_dim: int, act_dim: int):
        self.obs = torch.zeros(size, obs_dim)
        self.next_obs = torch.zeros(size, obs_dim)
        self.act = torch.zeros(size, act_dim)
        self.rew = torch.zeros(size)
        self.disc = torch.zeros(size)
        self.size, self.n, self.i = size, 0, 0

    def add(self, obs, act, rew, next_obs, disc):
        k = obs.shape[0]
        idx = (self.i + torch.arange(k)) % self.size
        self.obs[idx], self.act[idx], self.rew[idx], self.next_obs[idx] = obs, act, rew, next_obs
        self.disc[idx] = disc
        self.i, self.n = (self.i + k) % self.size, min(self.n + k, self.size)

    def sample(self, b: int):
        idx = torch.randint(0, self.n, (b,))
        return self.obs[idx], self.act[idx], self.rew[idx], self.next_obs[idx], self.disc[idx]


def fold_n_step(window: list, gamma: float):
    """The transition of the window's first step: (obs, act, sum of gamma**k * reward_k, the last
    step's next_obs, gamma**len(window)). A window is the last ``n`` vectorised steps
    ``(obs, act, rew, next_obs)`` of one episode (all envs end episodes together here).

    >>> t = lambda v: torch.tensor([float(v)])
    >>> _, _, r, o2, d = fold_n_step([(t(0), t(0), t(1), t(1)), (t(1), t(0), t(2), t(2))], 0.5)
    >>> r.tolist(), o2.tolist(), d
    ([2.0], [2.0], 0.25)
    """
    reward = sum(gamma ** k * step[2] for k, step in enumerate(window))
    return window[0][0], window[0][1], reward, window[-1][3], gamma ** len(window)


def n_step_transitions(window: list, step: tuple, done: bool, n: int, gamma: float) -> list:
    """Append ``step`` to the episode's ``window`` and return the transitions it completes: the
    window's first once it holds ``n`` steps; at the episode's end (``done``) every one left, with
    shorter windows (each bootstraps from the final observation)."""
    window.append(step)
    out = []
    if len(window) == n:
        out.append(fold_n_step(window, gamma))
        window.pop(0)
    while done and window:
        out.append(fold_n_step(window, gamma))
        window.pop(0)
    return out


def evaluate(actor: Actor, envs: Envs, args: Args) -> float:
    wins, n = [], len(envs.envs)
    for start in range(0, args.eval_episodes, n):
        obs, once, done = envs.reset(args.eval_seed + start), torch.zeros(n, dtype=torch.bool), False
        while not done:
            with torch.no_grad():
                act, _ = actor(obs, deterministic=True)
            obs, _, succ, done = envs.step(act)
            once |= succ
        wins += once.tolist()
    return float(np.mean(wins[:args.eval_episodes]))


def train(args: Args, log=lambda m: print(m, flush=True)) -> list[dict]:
    """Train until ``minutes`` of wall time or ``stop_at`` eval success; returns the eval records
    ``{env_steps, updates, minutes, eval_success, env_steps_per_s}``."""
    t_start = time.perf_counter()
    torch.manual_seed(args.seed)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    envs, eval_envs = Envs(args, args.num_envs), Envs(args, args.num_envs)
    obs = envs.reset(args.seed * 1000)
    obs_dim, act_dim = obs.shape[1], envs.low.shape[0]
    actor = Actor(obs_dim, act_dim, args, envs.low, envs.high)
    qs, q_targets = [mlp(obs_dim + act_dim, 1, args.hidden, args.layers) for _ in range(2)], []
    for q in qs:
        q_targets.append(mlp(obs_dim + act_dim, 1, args.hidden, args.layers))
        q_targets[-1].load_state_dict(q.state_dict())
    q_opt = torch.optim.Adam([p for q in qs for p in q.parameters()], lr=args.q_lr)
    pi_opt = torch.optim.Adam(actor.parameters(), lr=args.policy_lr)
    log_alpha = torch.tensor(math.log(args.initial_alpha), requires_grad=True)
    a_opt = torch.optim.Adam([log_alpha], lr=args.q_lr)
    target_entropy = -float(act_dim)
    buf = Buffer(args.buffer_size, obs_dim, act_dim)
    records, steps, updates, episode, next_eval = [], 0, 0, 0, args.eval_every_steps
    window: list = []  # the episode's last n_step vectorised steps
    while True:
        for _ in range(args.training_freq):
            if steps < args.learning_starts:
                act = envs.low + (envs.high - envs.low) * torch.rand(args.num_envs, act_dim)
            else:
                with torch.no_grad():
                    act, _ = actor(obs)
            next_obs, rew, _, done = envs.step(act)
            for transition in n_step_transitions(window, (obs, act, rew, next_obs), done, args.n_step, args.gamma):
                buf.add(*transition)
            steps += args.num_envs
            obs = next_obs
            if done:
                episode += 1
                obs = envs.reset(args.seed * 1000 + episode * args.num_envs)
        if steps >= args.learning_starts:
            for _ in range(int(args.training_freq * args.num_envs * args.utd)):
                o, a, r, o2, disc = buf.sample(args.batch_size)
                alpha = log_alpha.exp().detach()
                with torch.no_grad():
                    a2, logp2 = actor(o2)
                    x2 = torch.cat([o2, a2], -1)
                    q_next = torch.min(q_targets[0](x2), q_targets[1](x2)).squeeze(-1) - alpha * logp2
                    y = r + disc * q_next   # bootstrap at every done (time limits only)
                x = torch.cat([o, a], -1)
                q_loss = sum(F.mse_loss(q(x).squeeze(-1), y) for q in qs)
                q_opt.zero_grad()
                q_loss.backward()
                q_opt.step()
                a_pi, logp = actor(o)
                x_pi = torch.cat([o, a_pi], -1)
                pi_loss = (alpha * logp - torch.min(qs[0](x_pi), qs[1](x_pi)).squeeze(-1)).mean()
                pi_opt.zero_grad()
                pi_loss.backward()
                pi_opt.step()
                a_loss = -(log_alpha.exp() * (logp.detach() + target_entropy)).mean()
                a_opt.zero_grad()
                a_loss.backward()
                a_opt.step()
                with torch.no_grad():
                    for q, qt in zip(qs, q_targets):
                        for p, pt in zip(q.parameters(), qt.parameters()):
                            pt.mul_(1 - args.tau).add_(p, alpha=args.tau)
                updates += 1
        minutes = (time.perf_counter() - t_start) / 60
        if steps >= next_eval or minutes >= args.minutes:
            next_eval += args.eval_every_steps
            success = evaluate(actor, eval_envs, args)
            rec = {"env_steps": steps, "updates": updates, "minutes": round((time.perf_counter() - t_start) / 60, 3),
                   "eval_success": success, "alpha": round(float(log_alpha.exp()), 4),
                   "env_steps_per_s": round(steps / (time.perf_counter() - t_start), 1)}
            records.append(rec)
            log(json.dumps(rec))
            if (args.stop_at is not None and success >= args.stop_at) or minutes >= args.minutes:
                return records


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, value in asdict(Args()).items():
        kind = type(value) if value is not None else float
        parser.add_argument(f"--{name.replace('_', '-')}", type=kind, default=value)
    args = Args(**vars(parser.parse_args(argv)))
    train(args)


if __name__ == "__main__":
    main()
