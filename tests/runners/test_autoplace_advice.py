"""The end of every run (issue 46): the measured phase times, the profile written to the run folder,
and one advice line only when the planner predicts another placement >= 15 % faster. Tiny math
runs on the local backend (decoupled PPO, so rollout may run ahead of training where it has its
own slot): all roles taking turns on one slot get the line; rollout and actor apart with the
lookahead do not. The advice never fails a run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rlinf.runners.autoplace_profile import PROFILE_FILE, StepMeter, advise
from rlinf.scheduler.autoplace import parse_profile
from rlinf.scheduler.placement.__main__ import load_yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workers"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_generation_worker import tiny_model_with_tokenizer
from test_math_runner_features import base_config

pytestmark = pytest.mark.slow  # end-to-end runs on the local backend (no Ray)


def run(tmp_path, model, name, placement, **algorithm) -> tuple[list[str], Path]:
    from rlinf.runners.math.recipe import run_math

    (tmp_path / name).mkdir()
    cfg = base_config(tmp_path / name, model, placement, 2, runner={"seq_length": 40},
                      algorithm={"loss_type": "decoupled_ppo", "n_minibatches": 2,
                                 "sampling_params": {"max_new_tokens": 32, "min_new_tokens": 32}, **algorithm})
    cfg["cluster"]["backend"] = "local"
    cfg["data"]["val_data_paths"] = []
    lines: list[str] = []
    run_math(cfg, print_fn=lambda *a: lines.append(" ".join(map(str, a))))
    return lines, tmp_path / name / "out" / "t"


def test_a_bad_placement_gets_one_advice_line_and_a_good_one_none(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    model = tiny_model_with_tokenizer(tmp_path / "model")
    lines, run_dir = run(tmp_path, model, "bad", {"actor,rollout,reward": 0})
    measured = [line for line in lines if line.startswith("[rlinf] measured per step (steps 2-3): ")]
    assert len(measured) == 1, lines
    for part in ("busy: rollout ", "reward ", "actor ", "weight sync ", "driver ", "predicted for this placement "):
        assert part in measured[0]
    advice = [line for line in lines if "placement advice" in line]
    assert len(advice) == 1, lines
    assert "; lookahead 1" in advice[0] or "; lookahead 2" in advice[0]  # rollout runs ahead where it is apart
    assert f"--profile {run_dir / PROFILE_FILE}" in advice[0] and "python -m toolkits.autoplace CONFIG" in advice[0]
    speedup = float(advice[0].split("is predicted ")[1].split("x faster")[0])
    assert speedup >= 1.15
    profile = parse_profile(load_yaml(str(run_dir / PROFILE_FILE)))  # the CLI's strict reader accepts it
    assert sorted(profile.roles) == ["actor", "reward", "rollout"] and profile.samples_per_step == 16
    assert profile.cores_per_node >= 1 and profile.roles["actor"].shardable
    text = (run_dir / PROFILE_FILE).read_text()
    assert "step 1 of 3 skipped: warm-up" in text and "local backend" in text

    lines, _ = run(tmp_path, model, "good", {"rollout,reward": 0, "actor": 1}, max_head_offpolicyness=1)
    assert any(line.startswith("[rlinf] measured per step") for line in lines), lines
    assert not [line for line in lines if "placement advice" in line or "no placement advice" in line], lines


def test_the_advice_never_fails_a_run():
    class Broken:
        def placement_workflow(self, cfg):
            raise RuntimeError("the hook\nbroke")

    lines: list[str] = []
    meter = StepMeter(cluster=None)
    assert advise(Broken(), {}, None, None, None, meter, None, lines.append) is None
    assert lines == ["[rlinf] note: no placement advice: the hook broke"]
    meter.begin()  # a meter that cannot read the groups stops measuring, without raising
    assert meter.error is not None and meter.steps == []
