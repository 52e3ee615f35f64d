"""Embodied rollout throughput: the env / policy pipeline (``rollout.pipeline_stage_num`` 1 and 2)
against the ideal computed from env time and policy time measured alone in the same run.

Run: ``python bench/bench_env_pipeline.py [--env toy|maniskill] [--policy mlp|cnn|vla] [--envs N]
[--steps T] [--obs state|rgb] [--quick]`` (``--quick``: toy env, 4 envs, 8 steps, < 60 s, most of it
Ray start-up; its numbers mean little). Not a test: numbers depend on the machine.

Setup: a fresh embedded local Ray (``Cluster(num_nodes=1, accelerators_per_node=2,
address="local")``), env on slot 0 and rollout on slot 1 as in
``examples/embodiment/config/maniskill_ppo_mlp_cpu.yaml`` (the actor, needed only to launch the
groups, on slot 0 alone) and the real runtime path:
``EmbodiedConfig.from_dict`` -> ``launch_embodied_groups`` (EnvWorker, PolicyRolloutWorker,
actor) -> ``EmbodiedRunner(cfg, groups).rollout("train", seed, record=True)``: the env worker
steps each stage's ``VectorEnv``, the rollout worker acts, observations and actions cross the
env -> rollout pipe (``rlinf.scheduler.pipe``, one TCP connection per env worker). ``N`` train envs,
episode length ``T`` = the rollout's policy steps (K = 1 action per step).

For each stage count S (1, then 2), three paths, each warmed up once untimed and then timed in
``--repeats`` interleaved rounds (env alone, policy alone, pipeline; so background load hits all
three alike); every figure is the median over the rounds:

1. env alone -- the driver builds the same ``VectorEnv``s the env worker holds (``make_vector_env``
   with the same config, ``N / S`` envs per stage, the same ranks), resets each stage and steps
   them T times, stage after stage, with precomputed uniform random actions: no policy, no
   messages. ``env_s`` = seconds of resets + T steps of all stages.
2. policy alone -- ``build_policy`` (same model config, same observation spec, random weights,
   1 torch thread like a Ray worker) on the observation batches recorded in 1.: per stage T
   ``act()`` calls plus one ``value()`` (what the rollout worker computes at the end).
3. pipeline -- the groups launched with S stages; one rollout; measured steps/s = N x T /
   rollout seconds.

Ideal rollout seconds: ``env_s + policy_s`` for S = 1 (one waits for the other); ``max(env_s,
policy_s)`` for S = 2 (the env steps one stage while the policy computes the other). Ideal
steps/s = N x T / ideal seconds; ratio = measured / ideal. Goal: ratio >= 0.91 (within 1.1x of the
ideal) for 2 stages; the 1-stage row is printed for comparison (PASS / MISS against the same bar).

The overhead column is (measured - ideal seconds) / T: what the pipeline adds per policy step.
Diagnostic under the table (the profile of that overhead): two bare workers on the env and
rollout slots exchange one real observation message of a stage (an ``ObsMessage`` built from the
recorded observations) and an action, 100 round trips after 10 warm-up (20 with ``--quick``), no
env, no policy -- the transport every stage of every policy step pays -- once through a pipe (what
the runtime uses) and once through a Channel (the broker it used before); medians are printed
with stages x them per policy step.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

from rlinf.scheduler import Worker  # noqa: E402

GOAL_RATIO = 0.91


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def env_section(args) -> dict:
    if args.env == "toy":
        params = {}
        if args.obs == "rgb":
            params = {"camera_heights": args.image, "camera_widths": args.image}
        base = {"env_type": "toy", "init_params": params}
    else:
        params = {"id": args.task, "obs_mode": args.obs, "control_mode": "pd_joint_delta_pos",
                  "sim_backend": "cpu"}
        if args.obs == "rgb":
            params.update(camera_heights=args.image, camera_widths=args.image)
        base = {"env_type": "maniskill", "init_params": params}
    return {"total_num_envs": args.envs, "auto_reset": True, "ignore_terminations": False,
            "max_episode_steps": args.steps, **base}


def model_section(args, action_dim: int) -> dict:
    common = {"action_dim": action_dim, "num_action_chunks": 1, "value_type": "chunk_level"}
    if args.policy == "mlp":
        return {"model_type": "mlp", "policy_hidden_sizes": [256, 256, 256], **common}
    if args.policy == "cnn":
        return {"model_type": "cnn", "image_size": [args.image, args.image], **common}
    return {"model_type": "openvla_oft", "model_path": args.vla_path, "precision": "fp32",
            "use_proprio": False, **common}


def build_config(args, stages: int, action_dim: int):
    from rlinf.config.embodied import EmbodiedConfig

    samples = args.envs * args.steps
    env = env_section(args)
    raw = {
        "cluster": {"num_nodes": 1, "accelerators_per_node": 2,
                    "component_placement": {"env": 0, "rollout": 1, "actor": 0}},
        "runner": {"task_type": "embodied", "max_epochs": 1, "seed": 1},
        "algorithm": {"adv_type": "gae", "update_epochs": 1},
        "env": {"train": env, "eval": dict(env, auto_reset=False)},
        "rollout": {"backend": "huggingface", "pipeline_stage_num": stages},
        "actor": {"training_backend": "fsdp", "micro_batch_size": samples, "global_batch_size": samples,
                  "model": model_section(args, action_dim)},
        "critic": {"use_critic_model": True},
    }
    return EmbodiedConfig.from_dict(raw)


class EnvAlone:
    """The VectorEnvs the env worker holds (same config, ``N / S`` envs per stage, same ranks),
    stepped by the driver with precomputed uniform random actions: no policy, no messages."""

    def __init__(self, cfg, stages: int, steps: int, seed: int):
        import torch

        from rlinf.engines.simulators import make_vector_env

        per_stage = cfg.env.train.total_num_envs // stages
        self.envs = [make_vector_env(cfg.env.train, per_stage, rank=s) for s in range(stages)]
        self.steps, self.seed = steps, seed
        env0 = self.envs[0]
        gen = torch.Generator().manual_seed(seed)
        low = torch.as_tensor(env0.action_low, dtype=torch.float32)
        high = torch.as_tensor(env0.action_high, dtype=torch.float32)
        self.actions = [[low + (high - low) * torch.rand(per_stage, low.numel(), generator=gen)
                         for _ in range(steps)] for _ in range(stages)]

    def one_pass(self) -> tuple[float, list]:
        """Seconds of resets + T steps of every stage, and the observation batches seen."""
        seen = [[] for _ in self.envs]
        t0 = time.perf_counter()
        for s, env in enumerate(self.envs):
            seen[s].append(env.reset(seed=self.seed * 1000 + s))
        for t in range(self.steps):
            for s, env in enumerate(self.envs):
                seen[s].append(env.step(self.actions[s][t]).obs)
        return time.perf_counter() - t0, seen

    def obs_spec(self, obs):
        from rlinf.workers.env.env_worker import obs_spec_of

        return obs_spec_of(self.envs[0], obs)

    def close(self) -> None:
        for env in self.envs:
            env.close()


class PolicyAlone:
    """``build_policy`` (same model config and observation spec, random weights) on recorded
    observation batches: per stage T ``act()`` calls plus one ``value()``, on 1 torch thread like
    a Ray worker (OMP_NUM_THREADS=1)."""

    def __init__(self, cfg, spec, seed: int):
        import torch

        from rlinf.models.embodied import build_policy

        self.policy = build_policy(cfg.actor.model, spec).eval()
        self.gen = torch.Generator().manual_seed(seed)

    def one_pass(self, observations) -> float:
        import torch

        from rlinf.workers.rollout.policy_worker import policy_inputs

        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            with torch.no_grad():
                t0 = time.perf_counter()
                for seen in observations:
                    for obs in seen[:-1]:
                        out = self.policy.act(**policy_inputs(obs), deterministic=False, generator=self.gen)
                        out.actions.cpu()
                    self.policy.value(**policy_inputs(seen[-1]))
                return time.perf_counter() - t0
        finally:
            torch.set_num_threads(threads)


class Pipeline:
    """The real path: ``launch_embodied_groups`` + ``EmbodiedRunner.rollout('train', ..., record=True)``."""

    def __init__(self, cfg, cluster):
        from rlinf.runners.embodied.loop import EmbodiedRunner, launch_embodied_groups

        plan = cfg.cluster.plan(cluster.shape)
        cfg.check_against_plan(plan)
        self.cfg, self.groups, self.runner, self.rollouts = cfg, launch_embodied_groups(cfg, cluster, plan), None, 0
        self.runner = EmbodiedRunner(cfg, self.groups, None)

    def one_pass(self) -> float:
        self.rollouts += 1
        t0 = time.perf_counter()
        trajs, _ = self.runner.rollout("train", seed=self.rollouts, record=True)
        elapsed = time.perf_counter() - t0
        assert sum(t.num_envs for t in trajs) == self.cfg.env.train.total_num_envs
        return elapsed

    def close(self) -> None:
        self.runner.close()
        self.groups.shutdown()


def measure(cfg, cluster, stages: int, steps: int, repeats: int, seed: int):
    """One untimed warm-up pass of each path, then ``repeats`` rounds of (env alone, policy alone,
    pipeline), interleaved so background load hits all three alike. Returns the per-round seconds
    of each path, the last observation batches and the observation spec."""
    env = EnvAlone(cfg, stages, steps, seed)
    pipeline = None
    try:
        _, observations = env.one_pass()
        spec = env.obs_spec(observations[0][0])
        policy = PolicyAlone(cfg, spec, seed)
        policy.one_pass(observations)
        pipeline = Pipeline(cfg, cluster)
        pipeline.one_pass()
        times = {"env": [], "policy": [], "pipeline": []}
        for rep in range(repeats):
            e, observations = env.one_pass()
            p = policy.one_pass(observations)
            m = pipeline.one_pass()
            for k, v in (("env", e), ("policy", p), ("pipeline", m)):
                times[k].append(v)
            log(f"  {stages} stage(s), round {rep + 1}: env alone {e:.3f} s, policy alone {p:.3f} s, "
                f"pipeline {m:.3f} s")
        return times, observations, spec
    finally:
        if pipeline is not None:
            pipeline.close()
        env.close()


class _EnvSide(Worker):
    """Diagnostic: plays the env worker's part of one stage's exchange with no simulator."""

    def exchange(self, channel, message, n: int) -> list[float]:
        """Seconds of each of ``n`` send(observation message) + receive(action) round trips,
        through ``channel`` or (None) through the pipe to the policy side."""
        pipe = self.pipe("bench", 0) if channel is None else None
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            if pipe is None:
                channel.put(message, key="obs")
                channel.get(key="act")
            else:
                pipe.send(message, key="obs")
                pipe.recv(key="act")
            out.append(time.perf_counter() - t0)
        return out


class _PolicySide(Worker):
    """Diagnostic: plays the rollout worker's part with no policy (answers a fixed action)."""

    def serve(self, channel, action, n: int) -> int:
        pipe = self.pipe("bench", 0) if channel is None else None
        for _ in range(n):
            if pipe is None:
                channel.get(key="obs")
                channel.put(action, key="act")
            else:
                pipe.recv(key="obs")
                pipe.send(action, key="act")
        return n


def time_transport(cluster, message, action, n: int) -> dict[str, list[float]]:
    """Round trips of one real observation message and one action between two workers on the
    env and rollout slots (0 and 1), through a pipe and through a Channel: the transport of one
    stage of one policy step."""
    import ray

    from rlinf.scheduler import Channel, PipeLink, WorkerGroup, plan_placement

    plan = plan_placement({"envside": "0", "policyside": "1"}, cluster.shape)
    env_side = WorkerGroup.launch(cluster, _EnvSide, plan.component("envside"), name="envside")
    policy_side = WorkerGroup.launch(cluster, _PolicySide, plan.component("policyside"), name="policyside")
    channel = Channel.create(f"bench-transport-{os.getpid()}")
    try:
        PipeLink.connect("bench", env_side, policy_side, pairs=[(0, 0)])
        out = {}
        for name, via in (("pipe", None), ("channel", channel)):
            serving = policy_side.serve(via, action, n + 10)
            out[name] = env_side.exchange(via, message, n + 10).wait()[0][10:]  # 10 warm-up
            serving.wait()
        return out
    finally:
        ray.kill(channel._actor)
        env_side.shutdown()
        policy_side.shutdown()


def spec_action_dim(spec) -> int:
    return len(spec.action_low) if spec.action_low is not None else 1


def message_bytes(message) -> int:
    import pickle

    return len(pickle.dumps(message, protocol=5))


def make_tiny_vla(args, action_dim: int) -> str:
    from toolkits.embodied.make_tiny_vla import main as make

    out = os.path.join(tempfile.mkdtemp(prefix="bench_vla_"), "tiny_vla")
    make(["--out", out, "--action-dim", str(action_dim), "--image-size", str(args.image), "--identity-stats"])
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", choices=["toy", "maniskill"], default="toy")
    p.add_argument("--task", default="PushCube-v1", help="ManiSkill task id")
    p.add_argument("--policy", choices=["mlp", "cnn", "vla"], default="mlp")
    p.add_argument("--obs", choices=["state", "rgb"], default=None,
                   help="observations (default: rgb for cnn / vla, state for mlp)")
    p.add_argument("--image", type=int, default=64, help="camera size (rgb), also the policy's input size")
    p.add_argument("--envs", type=int, default=8, help="train envs (N), split over the stages")
    p.add_argument("--steps", type=int, default=50, help="policy steps per rollout (T = episode length)")
    p.add_argument("--repeats", type=int, default=3, help="timed passes of each measurement")
    p.add_argument("--stages", default="1,2", help="pipeline_stage_num values to run")
    p.add_argument("--vla-path", default=None, help="--policy vla: an OpenVLA-OFT folder (default: a "
                   "tiny random one written by toolkits/embodied/make_tiny_vla.py)")
    p.add_argument("--quick", action="store_true", help="toy env, 4 envs, 8 steps, 1 repeat (smoke test)")
    args = p.parse_args(argv)
    if args.quick:
        args.env, args.envs, args.steps, args.repeats = "toy", 4, 8, 1
    if args.obs is None:
        args.obs = "state" if args.policy == "mlp" else "rgb"
    if args.policy != "mlp" and args.obs != "rgb":
        p.error(f"--policy {args.policy} needs --obs rgb")
    stage_counts = [int(s) for s in args.stages.split(",")]
    for s in stage_counts:
        if args.envs % s:
            p.error(f"--envs {args.envs} does not split into {s} stages")

    import ray
    import torch

    from rlinf.scheduler import Cluster

    start = time.perf_counter()
    # The action dimension (and a VLA folder) before any config: a one-env probe.
    from rlinf.config.env import EnvConfig
    from rlinf.engines.simulators import make_vector_env
    from rlinf.utils.typed_config import parse_section

    with make_vector_env(parse_section(EnvConfig, env_section(args), "env.train"), 1) as probe:
        action_dim = int(probe.action_dim)
    if args.policy == "vla" and args.vla_path is None:
        args.vla_path = make_tiny_vla(args, action_dim)

    cluster = Cluster(num_nodes=1, accelerators_per_node=2, address="local")
    rows = []
    try:
        for stages in stage_counts:
            cfg = build_config(args, stages, action_dim)
            log(f"# {stages} stage(s)")
            times, observations, spec = measure(cfg, cluster, stages, args.steps, args.repeats, seed=7)
            env_s, policy_s = statistics.median(times["env"]), statistics.median(times["policy"])
            measured = statistics.median(times["pipeline"])
            ideal = env_s + policy_s if stages == 1 else max(env_s, policy_s)
            rows.append((stages, env_s, policy_s, measured, ideal))
            last = (observations, stages)
        # Diagnostic: the transport cost of one stage of one policy step, with a real message.

        from rlinf.workers.env.messages import ObsMessage

        observations, stages = last
        n_stage = args.envs // stages
        message = ObsMessage(obs=observations[0][1], rewards=torch.zeros(n_stage, 1),
                             dones=torch.zeros(n_stage, dtype=torch.bool),
                             terminations=torch.zeros(n_stage, dtype=torch.bool),
                             truncated=torch.zeros(n_stage, dtype=torch.bool),
                             reset_state_ids=torch.zeros(n_stage, dtype=torch.long))
        action = torch.zeros(n_stage, 1, spec_action_dim(spec))
        rtts = time_transport(cluster, message, action, 20 if args.quick else 100)
        transport = ({k: statistics.median(v) for k, v in rtts.items()}, n_stage, message_bytes(message))
    finally:
        ray.shutdown()

    n_steps = args.envs * args.steps
    try:
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        load = "n/a"
    obs = f"{args.obs} {args.image}x{args.image}" if args.obs == "rgb" else args.obs
    print(f"# bench_env_pipeline: {os.cpu_count()} CPU(s), torch {torch.__version__}, ray {ray.__version__}; "
          f"env {args.env}{' ' + args.task if args.env == 'maniskill' else ''} ({obs}), policy {args.policy}, "
          f"N={args.envs} envs, T={args.steps} steps per rollout, {args.repeats} timed round(s)"
          + (" (--quick: numbers mean little)" if args.quick else ""))
    print(f"# env alone = resets + T steps of every stage, policy alone = T act() + 1 value() per stage, "
          f"medians of interleaved rounds; load average at the end: {load}")
    print()
    print("| stages | env alone s | policy alone s | measured s | ideal s | measured steps/s | "
          "ideal steps/s | measured/ideal | overhead ms / policy step | goal >= 0.91 |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for stages, env_s, policy_s, measured, ideal in rows:
        ratio = ideal / measured
        verdict = ("PASS" if ratio >= GOAL_RATIO else "MISS") + ("" if stages > 1 else " (reference)")
        print(f"| {stages} | {env_s:.3f} | {policy_s:.3f} | {measured:.3f} | {ideal:.3f} | "
              f"{n_steps / measured:.1f} | {n_steps / ideal:.1f} | {ratio:.2f} | "
              f"{1000 * (measured - ideal) / args.steps:.1f} | {verdict} |")
    print()
    rtts, n_stage, nbytes = transport
    for name, rtt in rtts.items():
        used = "what the runtime uses" if name == "pipe" else "the broker used before, for comparison"
        print(f"- transport, diagnostic ({name}, {used}): one stage's observation message ({n_stage} envs, "
              f"{nbytes / 1024:.0f} KiB pickled) env slot -> rollout slot and an action back, no env, no "
              f"policy: median {1000 * rtt:.2f} ms per round trip; x stages per policy step: "
              + ", ".join(f"{s} stage(s) {1000 * rtt * s:.2f} ms" for s, *_ in rows))
    by_stage = {r[0]: r for r in rows}
    if 1 in by_stage and 2 in by_stage:
        print(f"- 2 stages vs 1 stage, measured: {by_stage[1][3] / by_stage[2][3]:.2f}x the steps/s")
    print(f"# total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
