"""PickCube SAC side by side: our off-policy runner in sync and in async mode
(``examples/embodiment/main_embodied.py --config-name maniskill_sac_mlp_cpu``) against the
CleanRL-style single-file SAC (``bench/single_file_sac.py``), same task, env count, network
sizes, batch, UTD and hyper-parameters, per seed, in one invocation.

Run: ``python bench/bench_pickcube_sac.py [--minutes 30] [--target 0.8] [--seeds 1,2,3]
[--arms single,sync,async] [--config maniskill_sac_mlp_cpu] [--set KEY=VALUE ...] [--json PATH] [--quick]``.

Each arm runs as its own process on the otherwise idle machine, one after the other (seed by
seed, arms in ``--arms`` order), until its first eval at or above ``--target`` or ``--minutes`` of
wall time. Clocks start when the process is launched (imports, Ray and simulator start-up count).
Both sides evaluate 32 deterministic episodes with fixed seeds every ~20k env steps (ours: every
``runner.val_check_interval`` = 312 steps of 8 steps x 8 envs).

Reported per arm and seed: env steps/s end to end (train env steps at the stop / wall seconds
from launch to the stop, evaluations included), minutes from launch to the first eval >= the
target, the best and the last eval, and the machine's speed just before and after the arm
(``machine_probe.probe_ms``: a fixed one-thread workload; this shared VM's speed drifts by tens
of percent over an hour with its load average unchanged, so compare arms whose probes agree).
Goals (issue 28): ours >= 1.2x the single file's env steps/s and no slower to 0.8, per seed, in
the config's mode (async; its update-to-data ratio is logged as ``replay/utd`` and was 0.49
against the single file's 0.5 at batch 128); the sync row shows what overlapping simulation and
updates changes (env steps/s and minutes to 0.8).

``--quick``: one seed, seconds of each arm with tiny sizes (the single file for 0.15 min; ours 2
steps with updates in the second and one evaluation of 8 episodes of 10 steps at the end), for the
smoke test (~2-3 min, most of it Ray and simulator start-up); its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PY = sys.executable
GOAL_SPEEDUP = 1.2
ARM_NAMES = {"single": "single-file SAC", "sync": "ours (sync)", "async": "ours (async)"}

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_pushcube_vs_single_file import JsonlTail, _stop  # noqa: E402  (the same tail and process-group stop)
from machine_probe import probe_ms  # noqa: E402


def single_file_args(config: str, overrides: list[str]) -> list[str]:
    """The single file's flags that give it our run's settings, read from the parsed config (the
    YAML plus ``--set``, as :class:`~rlinf.config.embodied_offpolicy.OffPolicyEmbodiedConfig`), so
    that both sides train with the same sizes and hyper-parameters.

    Refuses (ValueError) what the single file cannot mirror: unequal hidden sizes, a critic whose
    sizes differ from the actor's, Q heads other than twin plain MLPs, and any other algorithm
    setting it does not have.
    """
    from hydra import compose, initialize_config_dir

    from rlinf.config.embodied_offpolicy import OffPolicyEmbodiedConfig
    from rlinf.config.resolvers import register_resolvers

    os.environ.setdefault("REPO_PATH", ROOT)
    register_resolvers()
    with initialize_config_dir(os.path.join(ROOT, "examples", "embodiment", "config"), version_base="1.3"):
        cfg = OffPolicyEmbodiedConfig.from_hydra(compose(config, overrides=overrides), check_paths=False)
    model, algo, actor = cfg.actor.model.policy, cfg.algorithm, cfg.actor
    sizes = list(model.policy_hidden_sizes)
    if len(set(sizes)) != 1 or list(model.critic_hidden_sizes or sizes) != sizes:
        raise ValueError(f"the single file has equal hidden sizes for every network; got policy {sizes}, "
                         f"critic {list(model.critic_hidden_sizes or sizes)}")
    if model.q_head_type != "default" or model.num_q_heads != 2:
        raise ValueError("the single file has twin plain MLP Q heads (q_head_type default, num_q_heads 2)")
    tuning, q_lr = algo.entropy_tuning, actor.optim.value_lr or actor.optim.lr
    fixed = {"entropy_tuning.alpha_type": (tuning.alpha_type, "exp"),
             "entropy_tuning.target_entropy": (tuning.target_entropy, -model.action_dim),
             "entropy_tuning.optim.lr": (tuning.optim.lr, q_lr),
             "bootstrap_type": (algo.bootstrap_type, "always"), "backup_entropy": (algo.backup_entropy, True),
             "agg_q": (algo.agg_q, "min"),
             "critic_actor_ratio": (algo.critic_actor_ratio, 1),
             "uniform_warmup": (algo.uniform_warmup, True), "demo_buffer": (algo.demo_buffer, None)}
    for key, (got, want) in fixed.items():
        if got != want:
            raise ValueError(f"the single file has algorithm.{key} = {want}; the config sets {got}")
    envs, steps = cfg.env.train.total_num_envs, cfg.rollout_steps
    flags = {"num-envs": envs, "episode-steps": cfg.env.train.episode_steps, "training-freq": steps,
             "utd": algo.update_epoch / (envs * steps), "batch-size": actor.global_batch_size, "gamma": algo.gamma,
             "n-step": algo.n_step, "tau": algo.tau, "policy-lr": actor.optim.lr, "q-lr": q_lr, "hidden": sizes[0],
             "layers": len(sizes),
             "initial-alpha": tuning.initial_alpha, "learning-starts": algo.replay_buffer.min_buffer_size}
    return [x for k, v in flags.items() for x in (f"--{k}", str(v))]


def run_single(args, seed: int, log) -> dict:
    """The single-file SAC in its own process, with our run's settings (``single_file_args``);
    evals read from its stdout as they arrive."""
    cmd = [PY, os.path.join(ROOT, "bench", "single_file_sac.py"), *single_file_args(args.config, args.set),
           "--seed", str(seed), "--minutes", str(args.minutes), "--stop-at", str(args.target)]
    if args.quick:
        cmd += ["--minutes", "0.15", "--eval-episodes", "8", "--eval-every-steps", "256", "--learning-starts", "64"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    evals = []
    try:
        for line in proc.stdout:
            if line.startswith("{"):
                rec = json.loads(line)
                evals.append({"minutes": (time.perf_counter() - t0) / 60, "env_steps": rec["env_steps"],
                              "success": rec["eval_success"]})
                log(f"  single-file  seed {seed}  {evals[-1]['minutes']:6.2f} min  {rec['env_steps']:7d} steps  "
                    f"eval {rec['eval_success']:.3f}")
        proc.wait()
    finally:
        _stop(proc, grace_s=5.0)
    if proc.returncode != 0 or not evals:
        raise RuntimeError(f"single_file_sac.py exited with {proc.returncode}")
    return {"evals": evals, "wall_s": time.perf_counter() - t0}


def run_ours(args, seed: int, mode: str, log) -> dict:
    """Our runner in its own process; evals (and the env steps at each) read from its metrics.jsonl."""
    out_dir = tempfile.mkdtemp(prefix=f"rlinf_pickcube_sac_{mode}_")
    name = f"bench-pickcube-sac-{mode}-seed{seed}"
    cmd = [PY, os.path.join(ROOT, "examples", "embodiment", "main_embodied.py"), "--config-name", args.config,
           f"runner.seed={seed}", f"runner.output_dir={out_dir}", f"runner.experiment_name={name}",
           f"runner.rollout_mode={mode}", "runner.save_interval=-1"]
    if args.quick:  # 2 steps, updates from the second, one evaluation (8 episodes of 10 steps) at the end
        cmd += ["runner.max_epochs=2", "runner.val_check_interval=-1", "env.eval.total_num_envs=8",
                "env.eval.max_episode_steps=10", "algorithm.replay_buffer.min_buffer_size=64",
                "algorithm.update_epoch=4"]
    cmd += args.set
    env = dict(os.environ, RAY_ADDRESS="local", REPO_PATH=ROOT)
    metrics = os.path.join(out_dir, name, "metrics.jsonl")
    err_path = os.path.join(out_dir, "stderr.log")  # an unread pipe fills up and blocks the runner
    err = open(err_path, "w")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err, text=True,
                            start_new_session=True)
    evals, stop_t, steps, tail = [], None, 0, JsonlTail(metrics)
    try:
        while True:
            done = proc.poll() is not None
            for rec in tail.new():
                steps = int(rec.get("throughput/env_steps_total", steps))
                if "eval/success_rate" in rec:
                    evals.append({"minutes": (time.perf_counter() - t0) / 60, "env_steps": steps,
                                  "success": rec["eval/success_rate"]})
                    log(f"  {ARM_NAMES[mode]:12s} seed {seed}  {evals[-1]['minutes']:6.2f} min  {steps:7d} steps  "
                        f"eval {rec['eval/success_rate']:.3f}")
                    if rec["eval/success_rate"] >= args.target and int(rec["step"]) > 0 and stop_t is None:
                        stop_t = time.perf_counter()
            capped = not args.quick and (time.perf_counter() - t0) / 60 >= args.minutes  # quick: its 2 steps
            if done or stop_t is not None or capped:
                break
            time.sleep(0.2)
        wall = (stop_t or time.perf_counter()) - t0
    finally:
        _stop(proc)
        err.close()
    if proc.returncode not in (0, -signal.SIGINT, -signal.SIGKILL, 130, 1) or not evals:
        raise RuntimeError(f"our runner ({mode}) failed ({proc.returncode}):\n{open(err_path).read()[-3000:]}")
    return {"evals": evals, "wall_s": wall}


def summarize(arm: str, seed: int, res: dict, target: float) -> dict:
    """One table row of an arm's result; ``probe`` is the machine probe (ms, before / after the arm)."""
    ev = res["evals"]
    steps = ev[-1]["env_steps"] if ev else 0
    wall = ev[-1]["minutes"] * 60 if ev else res["wall_s"]  # launch -> the last eval (the stop)
    to_target = next((e["minutes"] for e in ev if e["success"] >= target and e["env_steps"] > 0), None)
    return {"arm": arm, "name": ARM_NAMES[arm], "seed": seed, "env_steps": steps, "wall_s": wall,
            "sps": steps / max(wall, 1e-9), "to_target": to_target,
            "best": max((e["success"] for e in ev), default=0.0), "last": ev[-1]["success"] if ev else 0.0,
            "probe": res.get("probe")}


def fmt_min(x):
    return "not reached" if x is None else f"{x:.2f}"


def table(rows: list[dict], target: float) -> list[str]:
    out = [f"| run | seed | env steps | wall s | env steps/s (end to end) | min to {target:g} | best eval | "
           "last eval | probe ms before / after |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        probe = "" if not r.get("probe") else "{:.1f} / {:.1f}".format(*r["probe"])
        out.append(f"| {r['name']} | {r['seed']} | {r['env_steps']} | {r['wall_s']:.0f} | {r['sps']:.1f} | "
                   f"{fmt_min(r['to_target'])} | {r['best']:.3f} | {r['last']:.3f} | {probe} |")
    by = {(r["arm"], r["seed"]): r for r in rows}
    for seed in sorted({r["seed"] for r in rows}):
        single = by.get(("single", seed))
        for arm in ("sync", "async"):
            ours = by.get((arm, seed))
            if ours is None or single is None:
                continue
            ratio = ours["sps"] / max(single["sps"], 1e-9)
            t = ("-" if ours["to_target"] is None or single["to_target"] is None
                 else f"{ours['to_target'] / single['to_target']:.2f}x")
            sp = "PASS" if ratio >= GOAL_SPEEDUP else "MISS"
            tt = ("PASS" if ours["to_target"] is not None and (single["to_target"] is None
                                                               or ours["to_target"] <= single["to_target"]) else "MISS")
            out.append(f"| {ours['name']} / single-file | {seed} | | | {ratio:.2f}x ({sp}) | {t} ({tt}) | | | |")
        sync, asy = by.get(("sync", seed)), by.get(("async", seed))
        if sync is not None and asy is not None:
            t = ("-" if sync["to_target"] is None or asy["to_target"] is None
                 else f"{asy['to_target'] / sync['to_target']:.2f}x")
            out.append(f"| async / sync | {seed} | | | {asy['sps'] / max(sync['sps'], 1e-9):.2f}x | {t} | | | |")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=30.0, help="wall-time cap per arm and seed")
    p.add_argument("--target", type=float, default=0.8, help="stop an arm at its first eval >= this")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--arms", default="single,sync,async")
    p.add_argument("--config", default="maniskill_sac_mlp_cpu")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a Hydra override for our runner (repeatable)")
    p.add_argument("--json", default=None, help="write the eval curves and the summary here")
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    if args.quick:
        args.seeds = args.seeds if "--seeds" in sys.argv else "1"
    seeds = [int(s) for s in args.seeds.split(",")]
    arms = args.arms.split(",")
    log = lambda m: print(m, flush=True)  # noqa: E731
    print(f"load before: {os.getloadavg()[0]:.2f} (1-min average)", flush=True)
    results, rows = {}, []
    for seed in seeds:
        for arm in arms:
            log(f"{ARM_NAMES[arm]}, seed {seed}: running (cap {args.minutes:g} min, stop at the first eval >= "
                f"{args.target})")
            before = probe_ms()
            res = run_single(args, seed, log) if arm == "single" else run_ours(args, seed, arm, log)
            res["probe"] = (before, probe_ms())
            log(f"  machine probe: {before:.1f} ms before, {res['probe'][1]:.1f} ms after")
            results[f"{arm}/{seed}"] = res
            rows.append(summarize(arm, seed, res, args.target))
    print(f"load after: {os.getloadavg()[0]:.2f} (1-min average)")
    print()
    for line in table(rows, args.target):
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results, "summary": rows}, f, indent=1)


if __name__ == "__main__":
    main()
