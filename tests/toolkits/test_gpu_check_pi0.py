"""The GPU kit's ``pi0_ppo`` check on the CPU: its real sizes are openpi's π0 (counted on the meta
device, nothing allocated), and at tiny sizes it runs one rollout and two πRL PPO updates in bf16
with every figure the GPU run reports."""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("transformers")

from toolkits.gpu_check import CHECKS
from toolkits.gpu_check.checks_pi0 import real_spec, run
from toolkits.gpu_check.runner import Context


def test_the_real_size_is_openpis_pi0():
    from rlinf.models.embodied.pi0.modeling import Pi0Model

    spec = real_spec()
    with torch.device("meta"):
        model = Pi0Model(spec)
    pg = model.paligemma_with_expert.paligemma
    total = sum(p.numel() for p in model.parameters())
    vision = sum(p.numel() for p in pg.model.vision_tower.parameters())
    vlm = sum(p.numel() for p in pg.parameters())
    assert 3.2e9 < total < 3.3e9                 # PaliGemma 3B + the 300M expert
    assert 4.0e8 < vision < 4.2e8                # SigLIP So400m/14
    assert 3.1e8 < total - vlm < 3.2e8           # gemma_300m, the projections and time MLPs
    assert spec.vision.tokens == 256 and spec.vlm.vocab == 257152 and spec.action_horizon == 50
    assert next(s for s in CHECKS if s.name == "pi0_ppo").cap_s >= 120


def test_the_check_runs_at_tiny_size_on_the_cpu(tmp_path):
    out = run(Context("cpu", True, str(tmp_path / "w"), str(tmp_path / "o")))
    assert out["status"] == "pass", out["failed"]
    f = out["figures"]
    assert f["dtype"] == "bf16" and f["dry_run"] is True and f["peak_memory_gib"] is None
    assert f["params_trained"] < f["params"]     # train_expert_only: PaliGemma frozen
    assert f["logprob_max_abs_diff"] < 0.05      # the first update recomputes the rollout's log-probs
    assert all(math.isfinite(x) for x in f["losses"]) and f["grad_norm"] > 0
    for key in ("build_seconds", "rollout_seconds", "update_seconds", "update_seconds_steady"):
        assert f[key] > 0, key
