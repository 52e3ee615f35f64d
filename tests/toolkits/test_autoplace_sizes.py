"""A profile measured at two sizes (issue 46, ``--measure-sizes 2``): each role's fixed cost per
unit and divisible work fitted by hand-checked figures, the extra process's cost on shared cores
that linear scaling hid, the second placement chosen, and the two runs joined into one file."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rlinf.runners.autoplace_sizes import combine_sizes
from rlinf.scheduler.autoplace import Stage, Workflow, parse_profile, predict
from rlinf.scheduler.placement import ClusterShape, plan_placement
from toolkits.autoplace.inputs import load_run
from toolkits.autoplace.ranking import rank
from toolkits.autoplace.sizes import SECOND_SUFFIX, measure_two_sizes, second_size

ROOT = Path(__file__).resolve().parents[2]
DISAGG = str(ROOT / "examples/math/config/grpo_tiny_disaggregated.yaml")


def _profile(**roles) -> dict:
    return {"samples_per_step": 100, "roles": {name: {"seconds_per_sample": s, "memory_gib": 1}
                                               for name, s in roles.items()}}


def test_two_sizes_give_a_fixed_part_and_a_divisible_part():
    # rollout: 1 unit 1.0 s, 2 units 0.6 s each -> W = 0.4 / 0.5 = 0.8, c = 0.2
    # actor: 2 units 0.5 s each, 1 unit 0.9 s -> W = 0.4 / 0.5 = 0.8, c = 0.1; b_1 measured 0.9
    # reward: 1 unit in both, 0.02 and 0.04 s -> the mean
    first = _profile(rollout=0.01, actor=0.01, reward=0.0002)
    second = _profile(rollout=0.012, actor=0.009, reward=0.0004)
    out, notes = combine_sizes(first, second, {"rollout": 1, "actor": 2, "reward": 1},
                               {"rollout": 2, "actor": 1, "reward": 1})
    assert out["roles"]["rollout"] == {"seconds_per_sample": 0.01, "memory_gib": 1, "seconds_per_sample_at": {2: 0.006}}
    assert out["roles"]["actor"] == {"seconds_per_sample": 0.009, "memory_gib": 1, "seconds_per_sample_at": {2: 0.005}}
    assert out["roles"]["reward"] == {"seconds_per_sample": 0.0003, "memory_gib": 1}
    assert notes[0] == "rollout: 1 s per unit per step on 1 unit(s), 0.6 s on 2: fixed 0.2 s per unit + 0.8 s divisible"
    assert "the mean, linear scaling assumed" in notes[2]
    assert first["roles"]["rollout"] == {"seconds_per_sample": 0.01, "memory_gib": 1}  # inputs untouched


def test_sizes_without_one_unit_noise_and_no_gain():
    # 2 units 0.6 s, 3 units 0.45 s: W = 0.15 / (1/6) = 0.9, c = 0.15, b_1 = 1.05
    out, _ = combine_sizes(_profile(r=0.012), _profile(r=0.0135), {"r": 2}, {"r": 3})
    assert out["roles"]["r"]["seconds_per_sample"] == pytest.approx(0.0105)
    assert out["roles"]["r"]["seconds_per_sample_at"] == {2: 0.006, 3: 0.0045}
    # faster than linear (2 units 0.5 s, 3 units 0.3 s): linear from the smaller, b_1 = 1.0
    out, notes = combine_sizes(_profile(r=0.01), _profile(r=0.009), {"r": 2}, {"r": 3})
    assert out["roles"]["r"]["seconds_per_sample"] == 0.01 and "faster than linear" in notes[0]
    # no faster per unit on 2 (0.5 s on 1, 0.6 s each on 2): all fixed, b_1 = 0.5
    out, notes = combine_sizes(_profile(r=0.005), _profile(r=0.012), {"r": 1}, {"r": 2})
    assert out["roles"]["r"]["seconds_per_sample"] == 0.005 and "all fixed" in notes[0]
    with pytest.raises(ValueError, match="roles differ"):
        combine_sizes(_profile(r=0.01), _profile(q=0.01), {"r": 1}, {"q": 2})


def test_a_fixed_cost_per_process_makes_a_third_process_on_two_cores_slower():
    """Linear figures predict 2 and 3 rollout processes on 2 shared cores equal (the ties the
    bench measured 5-10 % apart); the fitted ones predict the third process's cost."""
    wf = Workflow(flow=(Stage("rollout"), Stage("actor")), trainer="actor")
    base = {"accelerator_memory_gib": 10, "samples_per_step": 100, "offload_s": 0.0, "weight_sync_s": 0.0,
            "cores_per_node": 2, "accelerators_per_node": 3}
    linear = parse_profile({**base, "roles": {"rollout": {"seconds_per_sample": 0.01, "memory_gib": 1},
                                              "actor": {"seconds_per_sample": 0.001, "memory_gib": 1}}})
    fitted = parse_profile({**base, "roles": {
        "rollout": {"seconds_per_sample": 0.01, "memory_gib": 1, "seconds_per_sample_at": {2: 0.006}},
        "actor": {"seconds_per_sample": 0.001, "memory_gib": 1}}})
    shape = ClusterShape(1, 3)
    two, three = (plan_placement({"rollout": span, "actor": 0}, shape) for span in ("0-1", "0-2"))
    assert predict(two, linear, wf).step_s == pytest.approx(predict(three, linear, wf).step_s)
    assert predict(three, fitted, wf).step_s > 1.05 * predict(two, fitted, wf).step_s


def _hand_profile() -> dict:
    return {"accelerators_per_node": 3, "nodes": 1, "accelerator_memory_gib": 20, "samples_per_step": 256,
            "offload_s": 0.0, "weight_sync_s": 0.05, "cores_per_node": 2,
            "roles": {"rollout": {"seconds_per_sample": 0.004, "memory_gib": 0.04},
                      "reward": {"seconds_per_sample": 0.0001, "memory_gib": 0.0, "accelerator": False},
                      "actor": {"seconds_per_sample": 0.008, "memory_gib": 0.2, "shardable": True}}}


def test_the_second_run_changes_the_most_roles_counts_and_both_join_in_one_file(tmp_path, monkeypatch):
    """The tiny disaggregated math run (actor 2 processes, rollout 1): the second placement gives
    both other counts; the two measuring runs (stood in for by writing their profiles: the real
    runs are test_autoplace_measure's and the bench's) join into the file asked for."""
    run = load_run(DISAGG)
    prof = parse_profile(_hand_profile())
    shape = ClusterShape(1, 3)
    chosen, own, there = second_size(run, rank(run, prof, shape).ranked, shape, on_cpu=True)
    assert own == {"rollout": 1, "reward": 1, "actor": 2}
    assert there["rollout"] != 1 and there["actor"] != 2 and there["reward"] == 1

    trees = []

    def fake_measure(recipe, raw, steps, out, config="CONFIG", print_fn=print):
        trees.append(raw)
        figures = _hand_profile()
        if len(trees) == 2:  # the second size: the rollout 0.7 s per unit per step (1.024 s on 1)
            figures["roles"]["rollout"]["seconds_per_sample"] = 0.7 * there["rollout"] / 256
        Path(out).write_text("# measured by a stand-in\n# assumed: linear scaling over a role's units (measured at "
                             "one size)\n" + yaml.safe_dump(figures))
        return out

    monkeypatch.setattr("rlinf.runners.autoplace_measure.measure_profile", fake_measure)
    out = tmp_path / "profile.yaml"
    notes = measure_two_sizes(run, run.raw, 2, str(out), print_fn=lambda *_: None)
    assert trees[1]["cluster"]["component_placement"] == dict(chosen.candidate.placement)
    assert trees[1]["runner"]["experiment_name"] == run.raw["runner"]["experiment_name"] + SECOND_SUFFIX
    assert (tmp_path / f"profile{SECOND_SUFFIX}.yaml").is_file()
    text = out.read_text()
    assert "assumed: linear scaling" not in text and "# scaling: measured at two sizes" in text
    joined = parse_profile(yaml.safe_load(text))
    assert joined.roles["rollout"].seconds_per_sample_at == {there["rollout"]: pytest.approx(0.7 / 256, rel=1e-3)}
    assert joined.roles["rollout"].seconds_per_sample == pytest.approx(0.004)  # measured on 1 unit
    assert len(notes) == 3 and ("rollout: 1.02 s per unit per step on 1 unit(s), 0.7 s on 2: fixed 0.376 s per unit "
                                "+ 0.648 s divisible") in notes


def test_a_waiting_role_gets_its_wait_at_both_sizes_and_the_simulation_uses_the_one_of_its_units():
    # the tool agent's rollout under load: 2.65 s of waiting a step on 1 process, 1.06 s on 2
    first, second = _profile(rollout=0.01), _profile(rollout=0.006)
    first["roles"]["rollout"]["wait_s_per_step"], second["roles"]["rollout"]["wait_s_per_step"] = 2.65, 1.06
    out, notes = combine_sizes(first, second, {"rollout": 1}, {"rollout": 2})
    assert out["roles"]["rollout"]["wait_s_per_step"] == 2.65
    assert out["roles"]["rollout"]["wait_s_per_step_at"] == {2: 1.06}
    assert notes[1] == "rollout: waits 2.65 s per step on 1 unit(s), 1.06 s on 2"
    # neither size 1: 1.0 s on 2, 0.8 s on 3 -> exponent log(0.8)/log(1.5), continued down to 1
    first["roles"]["rollout"]["wait_s_per_step"], second["roles"]["rollout"]["wait_s_per_step"] = 1.0, 0.8
    out, _ = combine_sizes(first, second, {"rollout": 2}, {"rollout": 3})
    assert out["roles"]["rollout"]["wait_s_per_step"] == pytest.approx(2 ** 0.5503, abs=1e-3)
    assert out["roles"]["rollout"]["wait_s_per_step_at"] == {2: 1.0, 3: 0.8}

    wf = Workflow(flow=(Stage("rollout"), Stage("actor")), trainer="actor", receivers=("rollout",))
    roles = {"rollout": {"seconds_per_sample": 0.01, "memory_gib": 1, "wait_s_per_step": 2.0},
             "actor": {"seconds_per_sample": 0.002, "memory_gib": 1}}
    base = {"accelerator_memory_gib": 10, "samples_per_step": 100, "offload_s": 0.0, "weight_sync_s": 0.0}
    flat = parse_profile({**base, "roles": roles})
    measured = parse_profile({**base, "roles": {**roles, "rollout": {**roles["rollout"],
                                                                     "wait_s_per_step_at": {2: 0.5}}}})
    plan = plan_placement({"rollout,actor": "0-1"}, ClusterShape(1, 2))  # the step waits for its slowest sample
    assert predict(plan, flat, wf).step_s - predict(plan, measured, wf).step_s == pytest.approx(1.5)
    one = plan_placement({"rollout": 0, "actor": 1}, ClusterShape(1, 2))
    assert predict(one, flat, wf).step_s == pytest.approx(predict(one, measured, wf).step_s)
