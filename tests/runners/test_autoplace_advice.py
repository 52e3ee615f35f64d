"""The end of every run (issue 46): the measured phase times, the profile written to the run folder,
and, on Ray, one advice line only when the planner predicts another placement >= 15 % faster (the
decision checked on a hand profile; a local-backend run gets none). The advice never fails a run."""

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


def test_a_local_run_prints_its_measured_step_and_writes_its_profile_without_advice(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    model = tiny_model_with_tokenizer(tmp_path / "model")
    lines, run_dir = run(tmp_path, model, "bad", {"actor,rollout,reward": 0})
    measured = [line for line in lines if line.startswith("[rlinf] measured per step (steps 2-3): ")]
    assert len(measured) == 1, lines
    for part in ("busy: rollout ", "reward ", "actor ", "weight sync ", "driver ", "predicted for this placement ",
                 "no placement advice on the local backend"):
        assert part in measured[0]
    assert not [line for line in lines if "placement advice:" in line], lines
    profile = parse_profile(load_yaml(str(run_dir / PROFILE_FILE)))  # the CLI's strict reader accepts it
    assert sorted(profile.roles) == ["actor", "reward", "rollout"] and profile.samples_per_step == 16
    assert profile.cores_per_node >= 1 and profile.roles["actor"].shardable
    text = (run_dir / PROFILE_FILE).read_text()
    assert "step 1 of 3 skipped: warm-up" in text and "local backend" in text


def test_the_advice_names_the_fastest_accepted_placement_only_when_15_percent_faster():
    from rlinf.runners.autoplace_profile import advice_line
    from rlinf.scheduler.autoplace import Stage, Workflow, plan_search
    from rlinf.scheduler.placement import ClusterShape

    wf = Workflow(flow=(Stage("rollout"), Stage("actor", whole_batch=True)), trainer="actor", receivers=("rollout",))
    prof = parse_profile({"accelerator_memory_gib": 80, "samples_per_step": 64, "offload_s": 10.0, "weight_sync_s": 0.5,
                          "roles": {"rollout": {"seconds_per_sample": 0.2, "memory_gib": 30},
                                    "actor": {"seconds_per_sample": 0.1, "memory_gib": 60}}})
    bad = plan_search(wf, prof, ClusterShape(1, 4), current={"actor,rollout": "0-3"})  # two 10 s switches a step
    line = advice_line(bad, lambda r: True, "cfg.yaml", "run/p.yaml")
    best = bad.ranked[0]
    assert line == (f"[rlinf] placement advice: {best.candidate.label()} ({best.mode}) is predicted "
                    f"{bad.speedup(best):.2f}x faster ({best.prediction.step_s:.3g} s per step, bottleneck "
                    f"{best.prediction.bottleneck}); check: python -m toolkits.autoplace cfg.yaml --profile run/p.yaml")
    assert bad.speedup(best) >= 1.15
    second = bad.ranked[1]  # the config refuses the best: the next one it accepts is named
    assert second.candidate.label() in advice_line(bad, lambda r: r is not best, "c", "p")
    good = plan_search(wf, prof, ClusterShape(1, 4), current=dict(best.candidate.placement),
                       current_lookahead=best.candidate.lookahead)
    assert advice_line(good, lambda r: True, "c", "p") is None  # the run's own is the best
    assert advice_line(bad, lambda r: False, "c", "p") is None  # nothing the config accepts


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
