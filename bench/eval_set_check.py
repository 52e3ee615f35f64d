"""Do our eval set and the single file's differ in difficulty? The single-file SAC
(``bench/single_file_sac.py``, deterministic per seed in env steps) trained as in the PickCube bench,
and at each of its evaluations the same policy also played our eval set.

* set A: the single file's own eval: ManiSkill seeds 1000..1031 (the one its stop rule reads);
* set B: the initial states our eval envs draw (``env.eval.seed`` 1000, two env workers x 16
  envs: ``numpy.random.default_rng(1000 * 1000 + rank).integers(0, 2**31 - 1, 16)``, ranks 0, 1).

Run with the single file's flags, e.g. those ``bench_pickcube_sac.single_file_args`` gives:
``python bench/eval_set_check.py --num-envs 8 --batch-size 128 --n-step 3 --tau 0.05 --layers 2
--initial-alpha 0.01 --seed 2 --minutes 40 --stop-at 0.95`` (prints ``{"set_A", "set_B"}`` per
eval next to the single file's own line). Set B's extra episodes use separate environments and no
random numbers, so training is the single file's (set A reads exactly as in the bench).
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import single_file_sac as sf


def our_eval_ids(seed: int = 1000, ranks: int = 2, per_rank: int = 16) -> list[int]:
    """The ManiSkill seeds of our eval episodes (EpisodeVectorEnv's draw after ``reset(seed *
    1000 + rank)``, one pipeline stage).

    >>> len(our_eval_ids()), our_eval_ids()[0]
    (32, 1453380691)
    """
    return np.concatenate([np.random.default_rng(seed * 1000 + r).integers(0, 2**31 - 1, size=per_rank,
                                                                           dtype=np.int64)
                           for r in range(ranks)]).tolist()


def success_on(actor, envs: sf.Envs, ids: list[int]) -> float:
    """``success_once`` of deterministic episodes from the given ManiSkill seeds."""
    wins, n = [], len(envs.envs)
    for start in range(0, len(ids), n):
        obs = torch.cat([e.reset(seed=int(ids[start + i]))[0].float() for i, e in enumerate(envs.envs)])
        envs.t = 0
        once, done = torch.zeros(n, dtype=torch.bool), False
        while not done:
            with torch.no_grad():
                act, _ = actor(obs, deterministic=True)
            obs, _, succ, done = envs.step(act)
            once |= succ
        wins += once.tolist()
    return float(np.mean(wins))


def main(argv=None) -> None:
    ids_b, own = our_eval_ids(), sf.evaluate

    def both(actor, envs, args):
        a = own(actor, envs, args)
        print(json.dumps({"set_A": a, "set_B": success_on(actor, envs, ids_b), "t": time.strftime("%H:%M:%S")}),
              flush=True)
        return a

    sf.evaluate = both
    sf.main(argv)


if __name__ == "__main__":
    main()
