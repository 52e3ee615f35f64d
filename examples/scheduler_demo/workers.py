"""Worker classes of the scheduler demo: toy env, linear policy, data-parallel trainer."""

from __future__ import annotations

import torch

from rlinf.scheduler import Channel, Worker


class ToyEnv(Worker):
    """Emits observation batches and reads back the actions the policy chose."""

    def run(self, channel: Channel, steps: int, num_envs: int, obs_dim: int) -> float:
        gen = torch.Generator().manual_seed(self.rank)
        total_reward = 0.0
        for step in range(steps):
            obs = torch.randn(num_envs, obs_dim, generator=gen)
            channel.put({"env_rank": self.rank, "step": step, "obs": obs}, key="obs")
            actions = channel.get(key=f"actions/{self.rank}", timeout=120)
            total_reward += float(-(actions ** 2).mean())  # reward: small actions are good
        return total_reward / steps


class LinearPolicy(Worker):
    """Maps observations to actions with weights received from the trainer."""

    def __init__(self, obs_dim: int, action_dim: int):
        self.weight = torch.zeros(action_dim, obs_dim)
        self.version = -1

    def sync_weights(self) -> int:
        state = self.recv_tensors("policy_weights")
        self.weight = state["weight"].clone()
        self.version = int(state["version"].item())
        return self.version

    def serve(self, channel: Channel, num_batches: int) -> int:
        served = 0
        for _ in range(num_batches):
            item = channel.get(key="obs", timeout=120)
            actions = item["obs"] @ self.weight.T
            channel.put(actions, key=f"actions/{item['env_rank']}")
            channel.put({"obs": item["obs"], "actions": actions, "version": self.version},
                        key="replay", weight=item["obs"].shape[0])
            served += 1
        return served


class Trainer(Worker):
    """Data-parallel over its ranks (gloo all-reduce), pulls replay batches by weight (env count)."""

    def __init__(self, obs_dim: int, action_dim: int):
        torch.manual_seed(0)
        self.weight = torch.randn(action_dim, obs_dim) * 0.1
        self.version = 0

    def weights_norm(self) -> float:
        return float(self.weight.norm())

    def push_weights(self) -> int:
        return self.send_tensors("policy_weights", {"weight": self.weight,
                                                    "version": torch.tensor([self.version])})

    def train(self, channel: Channel, updates: int, envs_per_update: int) -> list[float]:
        self.init_process_group()
        import torch.distributed as dist

        losses = []
        for _ in range(updates):
            batch = channel.get_batch(key="replay", target_weight=envs_per_update, timeout=120)
            obs = torch.cat([b["obs"] for b in batch])
            w = self.weight.clone().requires_grad_(True)
            loss = ((obs @ w.T) ** 2).mean()  # push actions toward 0
            loss.backward()
            loss = loss.detach()
            dist.all_reduce(w.grad)
            self.weight -= 0.5 * w.grad / self.world_size
            self.version += 1
            losses.append(loss.item())
        return losses
