"""Scheduler demo: place three worker groups from one YAML, stream through a channel, sync weights.

    python examples/scheduler_demo/main_demo.py                      # CPU, local Ray
    python examples/scheduler_demo/main_demo.py demo.steps=40        # Hydra overrides
    python examples/scheduler_demo/main_demo.py cluster.backend=local  # every group in this process
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workers import LinearPolicy, ToyEnv, Trainer

from rlinf.runners.launch import local_fold_note
from rlinf.scheduler import Channel, Cluster, TensorLink, WorkerGroup
from rlinf.scheduler.config import ClusterConfig
from rlinf.scheduler.placement import render_grid


@hydra.main(version_base=None, config_path="config", config_name="demo_cpu")
def main(cfg: DictConfig) -> None:
    raw = OmegaConf.to_container(cfg, resolve=True)
    try:
        cluster_cfg = ClusterConfig.from_dict(raw["cluster"])  # before Ray starts
    except ValueError as exc:  # ConfigError / PlacementError: one line naming the key
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    demo = raw["demo"]

    t0 = time.perf_counter()
    cluster = Cluster.from_config(cluster_cfg)
    print(cluster.origin, flush=True)
    folded = local_fold_note(cluster_cfg, cluster.shape)  # cluster.backend=local: each group one process
    if folded is not None:
        print(f"note: {folded}", flush=True)
    plan = cluster_cfg.plan(cluster.shape)
    print(render_grid(plan), flush=True)

    dims = dict(obs_dim=demo["obs_dim"], action_dim=demo["action_dim"])
    env = WorkerGroup.launch(cluster, ToyEnv, plan.component("env"))
    policy = WorkerGroup.launch(cluster, LinearPolicy, plan.component("policy"), kwargs=dims)
    trainer = WorkerGroup.launch(cluster, Trainer, plan.component("trainer"), kwargs=dims)
    TensorLink.connect("policy_weights", trainer, 0, policy)
    channel = Channel.create(demo["channel"]["name"])
    channel.declare_queue("obs", demo["channel"]["queue_size"])
    print(f"\nstarted {env.world_size + policy.world_size + trainer.world_size} workers "
          f"in {time.perf_counter() - t0:.1f} s", flush=True)

    def sync() -> None:
        receiving = policy.sync_weights()
        trainer.execute("push_weights", ranks=[0]).wait(timeout=120)
        versions = receiving.wait(timeout=120)
        print(f"  weight sync trainer[0] -> policy[0-{policy.world_size - 1}]: version {versions[0]}")

    sync()
    steps, n_env = demo["steps"], demo["envs_per_worker"]
    batches = steps * env.world_size
    per_policy = [batches // policy.world_size + (r < batches % policy.world_size)
                  for r in range(policy.world_size)]
    rounds = max(1, steps // demo["sync_every"])
    envs_per_update = n_env * env.world_size * steps // (rounds * demo["sync_every"])

    t1 = time.perf_counter()
    env_call = env.run(channel, steps, n_env, demo["obs_dim"])
    serve_calls = [policy.execute("serve", channel, n, ranks=[r]) for r, n in enumerate(per_policy)]
    for round_ in range(rounds):
        # Each trainer rank takes an equal share of the replay stream.
        share = envs_per_update // trainer.world_size
        losses = trainer.train(channel, demo["sync_every"], share).wait(timeout=300)
        print(f"round {round_}: trainer loss {losses[0][0]:.4f} -> {losses[0][-1]:.4f}", flush=True)
        sync()
    rewards = env_call.wait(timeout=300)
    for call in serve_calls:
        call.wait(timeout=300)
    elapsed = time.perf_counter() - t1

    moved = batches * n_env * demo["obs_dim"] * 4 * 2 / 2**20  # obs to policy and to replay
    print(f"\n{batches} observation batches streamed env -> policy -> trainer in {elapsed:.1f} s "
          f"({batches / elapsed:.1f} batches/s, {moved:.0f} MiB of observations)")
    print(f"mean env reward per worker: {[round(r, 4) for r in rewards]}")
    print(f"channel stats: {channel.stats()}")


if __name__ == "__main__":
    main()
