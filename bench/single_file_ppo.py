"""A CleanRL-style single-file PPO on ManiSkill3 PushCube-v1 (state observations, CPU simulation):
the reference that ``bench_pushcube_vs_single_file.py`` runs our runner against.

Everything in one process: ``num_envs`` ManiSkill CPU environments stepped one after the other,
a running mean / std observation normaliser (clipped to +-clip_obs), separate tanh actor and
critic MLPs (orthogonal init, actor output gain 0.01, critic output gain 1), a state-independent
log-std, clipped Gaussian actions, GAE with truncated episodes bootstrapped with V(final obs),
PPO clip with per-minibatch advantage normalisation and a target-KL early stop, Adam.

Every episode lasts ``episode_steps`` steps (success does not end it: ``ignore_terminations``), so
all environments reset together; a rollout is ``num_steps`` steps of every environment.
Evaluation: ``eval_episodes`` deterministic episodes with fixed seeds (``eval_seed`` + i), the
same initial states every time, ``success_once``.

Run on its own: ``python bench/single_file_ppo.py --minutes 15``; prints one JSON line per eval.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn


@dataclass
class Args:
    """Hyper-parameters (the defaults are the ones the bench compares)."""

    env_id: str = "PushCube-v1"
    control_mode: str = "pd_joint_delta_pos"
    num_envs: int = 8
    num_steps: int = 50
    episode_steps: int = 50
    gamma: float = 0.8
    gae_lambda: float = 0.9
    lr: float = 3e-4
    adam_eps: float = 1e-5
    update_epochs: int = 8
    num_minibatches: int = 8
    clip_coef: float = 0.2
    vf_coef: float = 0.5
    ent_coef: float = 0.0
    max_grad_norm: float = 0.5
    target_kl: float | None = 0.1
    hidden: int = 256
    init_log_std: float = -0.5
    clip_obs: float = 10.0
    eval_episodes: int = 32
    eval_seed: int = 1000
    eval_every: int = 10
    seed: int = 1
    minutes: float = 15.0
    stop_at: float | None = None


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
        self.T = args.episode_steps
        self.t = 0
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


class RunningNorm(nn.Module):
    """Running mean / variance of the observations (parallel-merge update), applied clipped."""

    def __init__(self, dim: int, clip: float):
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("var", torch.ones(dim))
        self.register_buffer("count", torch.tensor(1e-4))
        self.clip = clip

    def update(self, x: torch.Tensor) -> None:
        bm, bv, bc = x.mean(0), x.var(0, unbiased=False), x.shape[0]
        delta, tot = bm - self.mean, self.count + bc
        m2 = self.var * self.count + bv * bc + delta.pow(2) * self.count * bc / tot
        self.mean += delta * bc / tot
        self.var = m2 / tot
        self.count = tot

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ((x - self.mean) / torch.sqrt(self.var + 1e-8)).clamp(-self.clip, self.clip)


def layer(i: int, o: int, gain: float) -> nn.Linear:
    lin = nn.Linear(i, o)
    nn.init.orthogonal_(lin.weight, gain)
    nn.init.zeros_(lin.bias)
    return lin


class Agent(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, args: Args):
        super().__init__()
        h, g = args.hidden, np.sqrt(2)
        self.critic = nn.Sequential(layer(obs_dim, h, g), nn.Tanh(), layer(h, h, g), nn.Tanh(),
                                    layer(h, h, g), nn.Tanh(), layer(h, 1, 1.0))
        self.actor = nn.Sequential(layer(obs_dim, h, g), nn.Tanh(), layer(h, h, g), nn.Tanh(),
                                   layer(h, h, g), nn.Tanh(), layer(h, act_dim, 0.01))
        self.log_std = nn.Parameter(torch.full((act_dim,), args.init_log_std))

    def value(self, x):
        return self.critic(x).squeeze(-1)

    def dist(self, x):
        mean = self.actor(x)
        return torch.distributions.Normal(mean, self.log_std.exp().expand_as(mean))


def evaluate(agent: Agent, norm: RunningNorm, envs: Envs, args: Args) -> float:
    """Success rate (success_once) of ``eval_episodes`` deterministic episodes, fixed seeds."""
    wins = []
    n = len(envs.envs)
    for start in range(0, args.eval_episodes, n):
        obs = envs.reset(args.eval_seed + start)
        once = torch.zeros(n, dtype=torch.bool)
        done = False
        while not done:
            with torch.no_grad():
                act = torch.maximum(torch.minimum(agent.actor(norm(obs)), envs.high), envs.low)
            obs, _, succ, done = envs.step(act)
            once |= succ
        wins += once.tolist()
    return float(np.mean(wins[:args.eval_episodes]))


def train(args: Args, log=lambda m: print(m, flush=True)) -> list[dict]:
    """Train until ``minutes`` of wall time (from the call) or ``stop_at`` eval success; returns
    the eval records ``{iteration, env_steps, minutes, eval_success}``."""
    t_start = time.perf_counter()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    envs, eval_envs = Envs(args, args.num_envs), Envs(args, args.num_envs)
    obs = envs.reset(args.seed * 1000)
    obs_dim, act_dim = obs.shape[1], envs.low.shape[0]
    agent, norm = Agent(obs_dim, act_dim, args), RunningNorm(obs_dim, args.clip_obs)
    opt = torch.optim.Adam(agent.parameters(), lr=args.lr, eps=args.adam_eps)
    N, T = args.num_envs, args.num_steps
    batch = N * T
    mb = batch // args.num_minibatches
    records, env_steps, it, episode = [], 0, 0, 1

    def record():
        rec = {"iteration": it, "env_steps": env_steps,
               "minutes": (time.perf_counter() - t_start) / 60, "eval_success": evaluate(agent, norm, eval_envs, args)}
        records.append(rec)
        log(json.dumps(rec))
        return rec["eval_success"]

    while True:
        if it % args.eval_every == 0:
            sr = record()
            if args.stop_at is not None and sr >= args.stop_at:
                break
        if (time.perf_counter() - t_start) / 60 >= args.minutes:
            break
        b_obs, b_act = torch.zeros(T, N, obs_dim), torch.zeros(T, N, act_dim)
        b_logp, b_rew, b_val = torch.zeros(T, N), torch.zeros(T, N), torch.zeros(T + 1, N)
        b_done, b_boot = torch.zeros(T, N), torch.zeros(T, N)
        for t in range(T):
            norm.update(obs)
            x = norm(obs)
            with torch.no_grad():
                d = agent.dist(x)
                raw = d.sample()
                b_logp[t], b_val[t] = d.log_prob(raw).sum(-1), agent.value(x)
            b_obs[t], b_act[t] = x, raw
            obs, rew, _, over = envs.step(torch.maximum(torch.minimum(raw, envs.high), envs.low))
            b_rew[t] = rew
            env_steps += N
            if over:  # time limit: bootstrap with V(final obs), then start new episodes
                with torch.no_grad():
                    b_boot[t] = agent.value(norm(obs))
                b_done[t] = 1.0
                obs = envs.reset(args.seed * 1000 + episode * N)
                episode += 1
        with torch.no_grad():
            b_val[T] = agent.value(norm(obs))
        adv, last = torch.zeros(T, N), torch.zeros(N)
        for t in reversed(range(T)):
            nxt = (1 - b_done[t]) * b_val[t + 1]
            delta = b_rew[t] + args.gamma * (b_boot[t] + nxt) - b_val[t]
            last = delta + args.gamma * args.gae_lambda * (1 - b_done[t]) * last
            adv[t] = last
        ret = adv + b_val[:T]
        f_obs, f_act = b_obs.reshape(batch, -1), b_act.reshape(batch, -1)
        f_logp, f_adv, f_ret = b_logp.reshape(-1), adv.reshape(-1), ret.reshape(-1)
        stop = False
        for _ in range(args.update_epochs):
            perm = torch.randperm(batch)
            for s in range(0, batch, mb):
                idx = perm[s:s + mb]
                d = agent.dist(f_obs[idx])
                logratio = d.log_prob(f_act[idx]).sum(-1) - f_logp[idx]
                ratio = logratio.exp()
                approx_kl = ((ratio - 1) - logratio).mean()
                if args.target_kl is not None and approx_kl > args.target_kl:
                    stop = True
                    break
                a = f_adv[idx]
                a = (a - a.mean()) / (a.std() + 1e-8)
                pg = torch.max(-a * ratio, -a * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)).mean()
                v_loss = 0.5 * (agent.value(f_obs[idx]) - f_ret[idx]).pow(2).mean()
                loss = pg - args.ent_coef * d.entropy().sum(-1).mean() + args.vf_coef * v_loss
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                opt.step()
            if stop:
                break
        it += 1
    return records


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for k, v in asdict(Args()).items():
        kind = float if k in ("target_kl", "stop_at") else type(v)
        p.add_argument(f"--{k.replace('_', '-')}", type=kind, default=v)
    train(Args(**vars(p.parse_args())))


if __name__ == "__main__":
    main()
