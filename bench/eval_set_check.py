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

import dataclasses
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import single_file_sac as sf

#: the single file's own evaluation (main() swaps ``sf.evaluate`` for one that plays both sets)
EVALUATE = sf.evaluate


def our_eval_ids(seed: int = 1000, ranks: int = 2, per_rank: int = 16) -> list[int]:
    """The ManiSkill seeds of our eval episodes (EpisodeVectorEnv's draw after ``reset(seed *
    1000 + rank)``, one pipeline stage).

    >>> len(our_eval_ids()), our_eval_ids()[0]
    (32, 1453380691)
    """
    return np.concatenate([np.random.default_rng(seed * 1000 + r).integers(0, 2**31 - 1, size=per_rank,
                                                                           dtype=np.int64)
                           for r in range(ranks)]).tolist()


class _FromIds:
    """``sf.Envs`` whose ``reset(k)`` starts environment ``i`` from ManiSkill seed ``ids[k + i]``,
    so the single file's own ``evaluate`` plays a given list of initial states."""

    def __init__(self, envs: sf.Envs, ids: list[int]):
        self.inner, self.ids, self.envs = envs, ids, envs.envs

    def reset(self, k: int) -> torch.Tensor:
        self.inner.t = 0
        return torch.cat([e.reset(seed=int(self.ids[k + i]))[0].float() for i, e in enumerate(self.envs)])

    def step(self, actions: torch.Tensor):
        return self.inner.step(actions)


def success_on(actor, envs: sf.Envs, args: sf.Args, ids: list[int]) -> float:
    """``success_once`` of deterministic episodes from the given ManiSkill seeds (the single
    file's ``evaluate``, its resets mapped onto ``ids``)."""
    return EVALUATE(actor, _FromIds(envs, ids), dataclasses.replace(args, eval_seed=0, eval_episodes=len(ids)))


def main(argv=None) -> None:
    ids_b = our_eval_ids()

    def both(actor, envs, args):
        a = EVALUATE(actor, envs, args)
        print(json.dumps({"set_A": a, "set_B": success_on(actor, envs, args, ids_b), "t": time.strftime("%H:%M:%S")}),
              flush=True)
        return a

    sf.evaluate = both
    sf.main(argv)


if __name__ == "__main__":
    main()
