"""Write expert demonstrations in ManiSkill's trajectory format, without downloads: the scripted
PickCube-v1 expert (:mod:`toolkits.embodied.pickcube_expert`) plays episodes on the CPU simulator
with state observations and ``pd_ee_delta_pos`` control, and each episode it solves is recorded
(observations, actions, rewards, terminated / truncated / success, env states, reset seed).

Usage:
    python -m toolkits.embodied.make_demos --env PickCube-v1 --num 100 --out results/demos/pickcube \\
        [--seed 0] [--keep-failures] [--reward-mode normalized_dense]

Writes ``<out>/trajectory.h5`` and ``<out>/trajectory.json`` (load them with
:func:`rlinf.data.maniskill_trajectory.load_demos`; ManiSkill's own tools read them too), and prints
one line with the episodes written and the expert's success rate over the episodes it played.
Episode ``i`` is reset with seed ``seed + i``. ``--num`` counts episodes written: failures are
skipped (``--keep-failures`` writes them too) and playing stops after ``2 * num + 10`` tries. A bad
argument or a simulator that cannot start exits 2 with one ``error:`` line.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from toolkits.embodied.pickcube_expert import CONTROL_MODE, ENV_ID, PickCubeExpert

EXPERTS = {ENV_ID: PickCubeExpert}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m toolkits.embodied.make_demos",
                                description="Scripted-expert demonstrations in ManiSkill's trajectory format.")
    p.add_argument("--env", default=ENV_ID, help=f"task id; scripted experts exist for {', '.join(EXPERTS)}")
    p.add_argument("--num", type=int, default=100, help="episodes to write")
    p.add_argument("--out", required=True, help="folder for trajectory.h5 and trajectory.json")
    p.add_argument("--seed", type=int, default=0, help="reset seed of the first episode (then +1 each)")
    p.add_argument("--keep-failures", action="store_true", help="also write episodes the expert did not solve")
    p.add_argument("--reward-mode", default="normalized_dense", help="ManiSkill reward recorded with each step")
    return p


def _state_dict(env: Any) -> dict:
    """``env.get_state_dict()`` of one environment as nested numpy arrays without the batch axis."""
    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items()}
        arr = value.cpu().numpy() if hasattr(value, "cpu") else np.asarray(value)
        return arr[0]
    return strip(env.unwrapped.get_state_dict())


def _stack(states: list[dict]) -> dict:
    first = states[0]
    return {k: _stack([s[k] for s in states]) if isinstance(first[k], dict) else np.stack([s[k] for s in states])
            for k in first}


def _flat(x: Any) -> np.ndarray:
    arr = x.cpu().numpy() if hasattr(x, "cpu") else np.asarray(x)
    return np.asarray(arr, dtype=np.float32).reshape(-1)


def play_episode(env: Any, expert: Any, seed: int) -> dict:
    """One episode of ``expert`` from reset seed ``seed`` until termination or the time limit;
    returns the arrays :meth:`~rlinf.data.maniskill_trajectory.TrajectoryWriter.add_episode` takes."""
    obs, _ = env.reset(seed=seed)
    expert.reset()
    observations, states = [_flat(obs)], [_state_dict(env)]
    actions, rewards, terminated, truncated, success = [], [], [], [], []
    while True:
        action = expert.act()
        obs, reward, term, trunc, info = env.step(action)
        observations.append(_flat(obs))
        states.append(_state_dict(env))
        actions.append(action)
        rewards.append(float(_flat(reward)[0]))
        terminated.append(bool(_flat(term)[0]))
        truncated.append(bool(_flat(trunc)[0]))
        success.append(bool(_flat(info.get("success", False))[0]))
        if terminated[-1] or truncated[-1]:
            break
    return dict(obs=np.stack(observations), actions=np.stack(actions), rewards=rewards, terminated=terminated,
                truncated=truncated, success=success, env_states=_stack(states), seed=seed)


def make_demos(env_id: str, num: int, out: str | os.PathLike, seed: int = 0, keep_failures: bool = False,
               reward_mode: str = "normalized_dense", print_fn=print) -> dict:
    """Play and record (see the module docstring); returns ``{"written", "played", "solved",
    "success_rate", "h5", "json", "seconds"}``."""
    import gymnasium as gym

    from rlinf.data.maniskill_trajectory import TrajectoryWriter
    from rlinf.engines.simulators.maniskill import _default_steps as default_steps
    from rlinf.engines.simulators.maniskill import _import_maniskill

    _import_maniskill()
    env_kwargs = {"obs_mode": "state", "control_mode": CONTROL_MODE, "reward_mode": reward_mode,
                  "sim_backend": "cpu", "num_envs": 1}
    env = gym.make(env_id, **env_kwargs)
    expert = EXPERTS[env_id](env)
    folder = Path(out)
    start = time.monotonic()
    played = solved = 0
    try:
        with TrajectoryWriter(folder / "trajectory.h5", env_id=env_id, env_kwargs=env_kwargs,
                              max_episode_steps=default_steps(env_id), source_type="scripted",
                              source_desc=f"rlinf toolkits.embodied.make_demos ({EXPERTS[env_id].__name__})") as writer:
            while writer.num_episodes < num and played < 2 * num + 10:
                episode = play_episode(env, expert, seed + played)
                played += 1
                ok = bool(episode["success"][-1])
                solved += ok
                if ok or keep_failures:
                    writer.add_episode(control_mode=CONTROL_MODE, **episode)
            written = writer.num_episodes
    finally:
        env.close()
    result = {"written": written, "played": played, "solved": solved, "success_rate": solved / max(played, 1),
              "h5": str(folder / "trajectory.h5"), "json": str(folder / "trajectory.json"),
              "seconds": round(time.monotonic() - start, 1)}
    print_fn(f"[make_demos] {written} episodes of {env_id} in {result['h5']} (+ .json); expert solved "
             f"{solved}/{played} ({100 * result['success_rate']:.0f} %) in {result['seconds']} s")
    return result


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.env not in EXPERTS:
        print(f"error: --env {args.env}: no scripted expert; one exists for {', '.join(EXPERTS)}", file=sys.stderr)
        return 2
    if args.num < 1:
        print(f"error: --num must be >= 1, got {args.num}", file=sys.stderr)
        return 2
    try:
        make_demos(args.env, args.num, args.out, seed=args.seed, keep_failures=args.keep_failures,
                   reward_mode=args.reward_mode)
    except (RuntimeError, ImportError) as exc:  # no Vulkan device, ManiSkill missing, bad reward mode
        text = str(exc).strip().splitlines()
        print(f"error: {args.env}: {text[0] if text else type(exc).__name__}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
