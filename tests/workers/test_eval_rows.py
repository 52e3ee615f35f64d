"""An evaluation round's actions do not depend on the layout: a row's deterministic action is the
same whatever slot plays it and whatever rows share its slot (fixed forward shape, each episode at
its own position; flow policies with their episode's noise), and padding rows get zeros."""

from __future__ import annotations

import pytest
import torch

from rlinf.config.actor import ActorModelConfig
from rlinf.models.embodied.base import ObsSpec
from rlinf.utils.typed_config import parse_section
from rlinf.workers.rollout.policy_worker import PolicyRolloutWorker, eval_passes


def _worker(model: dict, state_dim: int) -> PolicyRolloutWorker:
    worker = PolicyRolloutWorker.__new__(PolicyRolloutWorker)
    worker.__dict__["_rlinf_env"] = {"RANK": "0", "WORLD_SIZE": "1"}
    torch.manual_seed(0)
    worker.__init__(parse_section(ActorModelConfig, model, "actor.model"), ObsSpec(state_dim=state_dim), 1, 1)
    return worker


def _slot(rows: dict[int, torch.Tensor], n: int) -> dict:
    """Policy inputs of ``n`` rows of random states with ``rows`` (row -> state) placed."""
    out = torch.randn(n, 35) * 3
    for r, s in rows.items():
        out[r] = s
    return {"states": out}


def test_eval_passes_put_each_seed_at_its_position_and_split_collisions():
    assert eval_passes([5, 6, 7], 6) == [[1, 2, None, None, None, 0]]
    assert eval_passes([4, 10], 6) == [[None, None, None, None, 0, None], [None, None, None, None, 1, None]]


@pytest.mark.parametrize("model_type", ["mlp", "flow_mlp"])
def test_a_rows_action_is_the_same_in_any_slot_beside_any_rows(model_type):
    model = {"model_type": model_type, "action_dim": 8, "num_action_chunks": 1, "policy_hidden_sizes": [32, 32]}
    worker = _worker(model, 35)
    state = torch.randn(35) * 3
    # episode seed 1003 at row 0 of a 2-row slot, at row 4 of a 6-row slot (with padding after it);
    # forward passes of 6 rows: on this CPU rows 4-5 of a 6-row matrix product (a partial block)
    # come out up to 2e-9 apart from rows 0-3, so each episode keeps one position (1003 mod 6)
    a = worker._act_episodes(_slot({0: state}, 2), [1003, 1004], 4, 6)
    b = worker._act_episodes(_slot({4: state}, 6), [999, 1000, 1001, 1002, 1003, -1], 4, 6)
    assert torch.equal(a[0], b[4])
    assert torch.equal(b[5], torch.zeros_like(b[5]))  # a padding row
    other_step = worker._act_episodes(_slot({0: state}, 2), [1003, 1004], 5, 6)
    other_seed = worker._act_episodes(_slot({0: state}, 2), [1009, 1004], 4, 6)
    if model_type == "flow_mlp":  # its deterministic action starts from the episode's noise at that step
        assert not torch.equal(a[0], other_step[0]) and not torch.equal(a[0], other_seed[0])
    else:  # the Gaussian mean: a function of the state alone
        assert torch.equal(a[0], other_step[0]) and torch.equal(a[0], other_seed[0])
