"""``python -m toolkits.autoplace`` (issue 46): the ranked table and its JSON against the planner's
own prediction, the cluster precedence, ``--out`` (a self-contained config that validates, with
the candidate's knobs, and runs), ``--png``, and every bad input as one line with exit status 2."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
import yaml

from rlinf.runners.recipe import run_once
from rlinf.scheduler.autoplace import Candidate, parse_profile, plan_search, predict
from rlinf.scheduler.placement import ClusterShape, plan_placement
from toolkits.autoplace.__main__ import main
from toolkits.autoplace.inputs import load_run
from toolkits.autoplace.ranking import _ConfigCheck, set_dotted

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "toolkits/autoplace/profiles/grpo_tiny_cpu.yaml"
TINY = str(ROOT / "examples/math/config/grpo_tiny_cpu.yaml")
DISAGG = str(ROOT / "examples/math/config/grpo_tiny_disaggregated.yaml")  # defaults: grpo_tiny_cpu + cluster
TOY = str(ROOT / "examples/embodiment/config/toy_ppo_mlp.yaml")
SAC = str(ROOT / "examples/embodiment/config/maniskill_sac_mlp_cpu.yaml")


def cli(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def base_profile() -> dict:
    """The shipped example profile without its cluster figures (the config's then count)."""
    raw = yaml.safe_load(PROFILE.read_text())
    for key in ("nodes", "accelerators_per_node"):
        raw.pop(key)
    return raw


def write_profile(tmp_path: Path, raw: dict, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw))
    return path


def as_json(capsys, *argv) -> dict:
    rc, out, err = cli(capsys, *argv, "--json")
    assert (rc, err) == (0, "")
    return json.loads(out)


# ---- the table and its JSON ---------------------------------------------------------------------

def test_the_table_ranks_by_predicted_step_marks_the_configs_own_and_says_what_was_dropped(capsys):
    ray_before = "ray" in sys.modules
    args = (DISAGG, "--profile", PROFILE, "--accelerators-per-node", 3)
    data = as_json(capsys, *args)
    rc, out, err = cli(capsys, *args, "--top", 3)
    assert (rc, err) == (0, "")
    assert ray_before or "ray" not in sys.modules  # nothing started

    cands = data["candidates"]
    steps = [c["step_s"] for c in cands]
    assert steps == sorted(steps) and [c["rank"] for c in cands] == list(range(1, len(cands) + 1))
    # the JSON holds every candidate the core enumerates: ranked, dropped for memory or by the config
    run, prof = load_run(DISAGG), parse_profile(yaml.safe_load(PROFILE.read_text()))
    prof = dataclasses.replace(prof, samples_per_step=run.workflow.samples_per_step)
    core = plan_search(run.workflow, prof, ClusterShape(1, 3), current=run.raw["cluster"]["component_placement"])
    assert len(cands) + len(data["dropped"]) == len(core.ranked) + len(core.dropped)
    # the best row is the simulator's prediction of that placement with the config's batch (256)
    best = cands[0]
    assert data["samples_per_step"] == 256 and data["samples_from"] == "config"
    assert best["step_s"] == pytest.approx(predict(plan_placement(best["placement"], ClusterShape(1, 3)), prof,
                                                   run.workflow).step_s)
    # the config's own placement (actor: 0-1, rollout,reward: 2) is the ranked row that places the same
    own = data["current"]
    marked = [c for c in cands if c["is_current"]]
    assert len(marked) == 1 and marked[0]["rank"] == own["rank"] and own["is_current"]
    assert marked[0]["step_s"] == pytest.approx(own["step_s"]) and own["speedup"] == pytest.approx(1.0)
    assert best["speedup"] == pytest.approx(own["step_s"] / best["step_s"])
    # a 3-process actor cannot split 256 samples: the config refuses it, the candidate is dropped
    refused = [d for d in data["dropped"] if "data.rollout_batch_size" in d["dropped"]]
    assert refused and all("step_s" in d for d in refused)
    assert all(not any(k.split(",").count("actor") and v == "0-2" for k, v in c["placement"].items()) for c in cands)

    lines = out.splitlines()
    table = lines[lines.index("") + 1:]
    assert table[0].split()[:3] == ["rank", "placement", "mode"]
    for row, cand in zip(table[1:4], cands[:3]):
        assert row.split()[0].rstrip("*") == str(cand["rank"]) and cand["label"] in row
        assert f"{cand['speedup']:.2f}x" in row and cand["mode"] in row and cand["bottleneck"] in row
    own_row = next(r for r in table if r.split()[0] == f"{own['rank']}*")
    assert own["label"] in own_row and "1.00x" in own_row
    assert f"dropped: {len(data['dropped'])} candidate(s) ({len(refused)} refused by the config)" in out
    assert data["dropped"][0]["label"] in out
    assert "linear scaling" in out  # the assumptions


def test_candidates_that_do_not_fit_in_memory_are_dropped_with_the_figure(capsys, tmp_path):
    raw = base_profile()
    raw.update(offload_s=None)  # everything placed on an accelerator is resident at once
    raw["roles"]["rollout"]["memory_gib"] = 2.5
    raw["roles"]["actor"]["memory_gib"] = 2.5  # 5 GiB together > 4: rollout and actor must be apart
    data = as_json(capsys, TINY, "--profile", write_profile(tmp_path, raw))
    memory = [d for d in data["dropped"] if "step_s" not in d]
    assert memory and all("GiB" in d["dropped"] and d["peak_gib_per_device"] > 4 for d in memory)
    assert all(c["peak_gib_per_device"] <= 4 for c in data["candidates"])
    assert data["current"]["dropped"].startswith("needs 5.1 GiB")  # actor,rollout,reward: all
    assert data["current"]["rank"] is None and not any(c["is_current"] for c in data["candidates"])


def test_cluster_and_samples_precedence_flags_then_profile_then_config(capsys, tmp_path):
    plain = write_profile(tmp_path, base_profile(), "plain.yaml")
    sized = write_profile(tmp_path, {**base_profile(), "accelerators_per_node": 2, "nodes": 1, "samples_per_step": 64},
                          "sized.yaml")
    got = as_json(capsys, DISAGG, "--profile", plain)
    assert (got["cluster"]["accelerators_per_node"], got["cluster"]["accelerators_from"]) == (3, "config")
    assert (got["samples_per_step"], got["samples_from"]) == (256, "config")
    got = as_json(capsys, DISAGG, "--profile", sized)
    assert (got["cluster"]["accelerators_per_node"], got["cluster"]["accelerators_from"]) == (2, "profile")
    assert (got["cluster"]["nodes"], got["cluster"]["nodes_from"]) == (1, "profile")
    assert (got["samples_per_step"], got["samples_from"]) == (64, "profile")
    got = as_json(capsys, DISAGG, "--profile", sized, "--accelerators-per-node", 1, "--nodes", 2)
    assert (got["cluster"]["accelerators_per_node"], got["cluster"]["accelerators_from"]) == (
        1, "--accelerators-per-node")
    assert (got["cluster"]["nodes"], got["cluster"]["nodes_from"]) == (2, "--nodes")
    assert {str(v) for c in got["candidates"] for v in c["placement"].values()} <= {"0", "1", "0-1"}



def test_a_collocated_decoupled_ppo_config_is_offered_a_split_with_lookahead(capsys, tmp_path):
    # the config's rule "lookahead only where actor and rollout are apart" is checked against the
    # candidate's placement, not the config's own (collocated) one
    run = load_run(TINY)  # actor,rollout,reward: all on 2 slots
    set_dotted(run.written, "algorithm.loss_type", "decoupled_ppo")  # may run ahead of training
    config = tmp_path / "dppo.yaml"
    config.write_text(yaml.safe_dump(run.written))
    raw = base_profile()
    raw.pop("cores_per_node")  # accelerators of their own: the phase switch is what a split saves
    raw.update(offload_s=2.0)
    raw["roles"]["actor"]["seconds_per_sample"] = 0.03
    data = as_json(capsys, config, "--profile", write_profile(tmp_path, raw))
    best, own = data["candidates"][0], data["current"]
    assert best["lookahead"] >= 1 and best["settings"]["algorithm.max_head_offpolicyness"] == best["lookahead"]
    assert plan_placement(best["placement"], ClusterShape(1, 2)).mode("actor", "rollout").value != "collocated"
    assert own["lookahead"] == 0 and own["rank"] > 1 and best["speedup"] > 1
    assert not [d for d in data["dropped"] if "max_head_offpolicyness" in d["dropped"]]
    # a lookahead still needs the candidate's own actor and rollout apart
    loaded = load_run(str(config))
    check = _ConfigCheck(loaded, ClusterShape(1, 2))
    split, together = best["placement"], {"actor,rollout,reward": "all"}
    assert check.refusal(Candidate(split, 1)) is None
    why = check.refusal(Candidate(together, 1))
    assert why.startswith("the config refuses it: algorithm.max_head_offpolicyness:") and "collocated" in why
    assert check.refusal(Candidate(together, 0)) is None


def test_the_configs_own_placement_is_matched_on_the_roles_that_hold_accelerators(capsys, tmp_path):
    # a rule reward (accelerator: false) keeps the config's slot 2 in every candidate; the config
    # puts it beside the rollout (rollout,reward: 2), a candidate may have it beside the actor
    raw = base_profile()
    raw["roles"]["reward"].update(accelerator=False)
    data = as_json(capsys, DISAGG, "--profile", write_profile(tmp_path, raw), "--accelerators-per-node", 3)
    own = data["current"]
    assert own["note"] == "" and own["rank"] is not None
    marked = [c for c in data["candidates"] if c["is_current"]]
    assert len(marked) == 1 and marked[0]["rank"] == own["rank"]
    shape = ClusterShape(1, 3)
    plan = plan_placement(marked[0]["placement"], shape)
    assert (plan.component("actor").world_size, plan.component("rollout").world_size) == (2, 1)
    assert plan.mode("actor", "rollout").value == "disaggregated"
    assert marked[0]["placement"]["reward"] == 2 and "rollout,reward" not in marked[0]["placement"]
    assert marked[0]["step_s"] == pytest.approx(own["step_s"]) and own["speedup"] == pytest.approx(1.0)



def test_a_cluster_larger_than_the_configs_own_is_planned_with_the_config_resized(capsys, tmp_path):
    # the config's rules see the cluster planned for (2 x 2 slots), not its own 1 x 3
    raw = base_profile()
    raw.pop("cores_per_node")
    data = as_json(capsys, DISAGG, "--profile", write_profile(tmp_path, raw), "--nodes", 2,
                   "--accelerators-per-node", 2)
    used = {r for c in data["candidates"] for v in c["placement"].values() for r in _ranks(v)}
    assert used == {0, 1, 2, 3}


def _ranks(value) -> set[int]:
    first, _, last = str(value).partition("-")
    return set(range(int(first), int(last or first) + 1))


# ---- --out and --png ----------------------------------------------------------------------------

def test_out_writes_a_self_contained_config_with_the_best_placement_that_validates(capsys, tmp_path):
    out_path = tmp_path / "placed.yaml"
    data = as_json(capsys, DISAGG, "--profile", PROFILE, "--accelerators-per-node", 3, "--out", out_path)
    written = yaml.safe_load(out_path.read_text())
    # the defaults list composed in: only Hydra's own logging choice is left
    assert written["defaults"] == [{"override hydra/job_logging": "stdout"}, "_self_"]
    assert written["cluster"]["component_placement"] == data["candidates"][0]["placement"]
    assert written["cluster"]["accelerators_per_node"] == 3  # planned for the flag's size
    assert written["runner"]["experiment_name"] == "grpo-tiny-disaggregated"  # the file's own, over its default's
    back = load_run(str(out_path))  # composed, parsed, its step asked again
    back.cfg.check_against_plan(back.cfg.cluster.plan())
    assert back.workflow == load_run(DISAGG).workflow
    rc, out, _ = cli(capsys, DISAGG, "--profile", PROFILE, "--accelerators-per-node", 3, "--out", out_path)
    assert rc == 0 and f"--config-path {tmp_path} --config-name placed" in out
    assert "examples/math/main_grpo.py" in out
    assert [p.name for p in tmp_path.iterdir()] == ["placed.yaml"]  # no temporary file left


@pytest.mark.slow
def test_out_sets_the_best_knobs_and_the_written_config_runs_a_step_on_the_local_backend(capsys, tmp_path):
    raw = {"accelerator_memory_gib": 4, "cores_per_node": 2, "offload_s": None, "weight_sync_s": 0.01,
           "roles": {"env": {"seconds_per_sample": 0.001, "memory_gib": 0.2},
                     "rollout": {"seconds_per_sample": 0.0005, "memory_gib": 0.1},
                     "actor": {"seconds_per_sample": 0.002, "memory_gib": 0.3}}}
    out_path = tmp_path / "toy_placed.yaml"
    data = as_json(capsys, TOY, "--profile", write_profile(tmp_path, raw), "--out", out_path)
    best = data["candidates"][0]
    assert set(best["settings"]) == {"cluster.component_placement", "algorithm.max_head_offpolicyness",
                                     "rollout.pipeline_stage_num"}
    written = yaml.safe_load(out_path.read_text())
    assert written["cluster"]["component_placement"] == best["placement"]
    assert written["algorithm"]["max_head_offpolicyness"] == best["lookahead"]
    assert written["rollout"]["pipeline_stage_num"] == best["pipeline_stages"]
    run = load_run(str(out_path))
    for key, value in {"cluster.backend": "local", "runner.max_epochs": 1, "runner.max_steps": 1,
                       "runner.val_check_interval": -1, "runner.output_dir": str(tmp_path / "results")}.items():
        set_dotted(run.raw, key, value)
    set_dotted(run.raw, "runner.logger.log_path", str(tmp_path / "results" / "log"))
    assert run_once(run.recipe, run.raw, print_fn=lambda *a: None)["steps"] == 1


def test_png_draws_the_best_and_the_configs_own_timeline(capsys, tmp_path):
    png = tmp_path / "timeline.png"
    rc, out, err = cli(capsys, DISAGG, "--profile", PROFILE, "--accelerators-per-node", 3, "--png", png)
    assert (rc, err) == (0, "") and f"wrote {png} (2 timeline(s))" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---- bad input: one line, exit 2, nothing written -----------------------------------------------

def _edit(**changes):
    def make(raw: dict) -> dict:
        for key, value in changes.items():
            if value is _DROP:
                target = raw
                for part in key.split(".")[:-1]:
                    target = target[part]
                target.pop(key.split(".")[-1])
            else:
                set_dotted(raw, key, value)
        return raw
    return make


_DROP = object()

BAD_PROFILES = {
    "missing figure": (_edit(**{"roles.actor.memory_gib": _DROP}), "profile.roles.actor.memory_gib: missing"),
    "negative figure": (_edit(**{"roles.rollout.seconds_per_sample": -2.0}),
                        "profile.roles.rollout.seconds_per_sample: must be a finite number > 0, got -2.0"),
    "negative sync": (_edit(weight_sync_s=-1), "profile.weight_sync_s"),
    "missing offload": (_edit(offload_s=_DROP), "profile.offload_s: missing"),
    "unknown key": (_edit(**{"roles.actor.speed": 2}), "profile.roles.actor"),
    "role the config lacks": (_edit(**{"roles.critic": {"seconds_per_sample": 1.0, "memory_gib": 1}}),
                              "profile.roles.critic: the config has no role 'critic'"),
    "placed role not profiled": (_edit(**{"roles.reward": _DROP}), "the config places role 'reward'"),
    "role larger than a device": (_edit(**{"roles.actor.memory_gib": 10}),
                                  "profile.roles.actor.memory_gib: 10 GiB does not fit one accelerator of 4 GiB"),
    "nothing fits": (_edit(offload_s=None, **{"roles.actor.memory_gib": 3, "roles.rollout.memory_gib": 3,
                                             "accelerators_per_node": 1}), "no placement of"),
    "not a decimal int": (_edit(nodes="0x2"), "profile.nodes"),
}


@pytest.mark.parametrize("case", sorted(BAD_PROFILES))
def test_a_bad_profile_is_one_line_and_exit_2(capsys, tmp_path, case):
    make, expected = BAD_PROFILES[case]
    path = write_profile(tmp_path, make(yaml.safe_load(PROFILE.read_text())))
    if case == "not a decimal int":  # as a user writes it (safe_dump quotes the string)
        path.write_text(path.read_text().replace("'0x2'", "0x2"))
    rc, out, err = cli(capsys, TINY, "--profile", path, "--out", tmp_path / "placed.yaml")
    assert (rc, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith("error: ") and expected in err, err
    assert not (tmp_path / "placed.yaml").exists()


def test_figures_for_a_placed_role_the_step_does_not_use_are_refused(capsys, tmp_path):
    run = load_run(str(ROOT / "examples/math/config/grpo_tiny_dapo.yaml"))  # inference placed on slot 2
    assert "inference" in run.workflow.roles()
    set_dotted(run.written, "algorithm.kl_beta", 0.0)  # no reference log-probs: inference unused
    config = tmp_path / "no_kl.yaml"
    config.write_text(yaml.safe_dump(run.written))
    raw = base_profile()
    raw["roles"]["inference"] = {"seconds_per_sample": 0.01, "memory_gib": 0.6}
    rc, out, err = cli(capsys, config, "--profile", write_profile(tmp_path, raw))
    assert (rc, out) == (2, "") and err.startswith("error: profile.roles.inference: the config places 'inference' "
                                                   "but its math step does not use it")
    del raw["roles"]["inference"]
    data = as_json(capsys, config, "--profile", write_profile(tmp_path, raw))
    assert all("inference" not in key for c in data["candidates"] for key in c["placement"])


def test_a_candidate_on_which_the_step_would_change_is_dropped(capsys, tmp_path):
    # DAPO places inference apart (reference log-probs in their own group); on the actor's devices
    # no inference group starts, so such a candidate is not the step the prediction is of
    raw = base_profile()
    raw["roles"]["inference"] = {"seconds_per_sample": 0.004, "memory_gib": 0.6}
    data = as_json(capsys, ROOT / "examples/math/config/grpo_tiny_dapo.yaml", "--profile",
                   write_profile(tmp_path, raw), "--accelerators-per-node", 2)
    shape = ClusterShape(1, 2)
    changed = [d for d in data["dropped"] if d["dropped"].startswith("the step changes on it")]
    assert changed and all(plan_placement(d["placement"], shape).mode("actor", "inference").value != "disaggregated"
                           for d in changed)
    assert all(plan_placement(c["placement"], shape).mode("actor", "inference").value == "disaggregated"
               for c in data["candidates"])


def test_other_bad_input_is_one_line_and_exit_2(capsys, tmp_path):
    dup = tmp_path / "dup.yaml"
    dup.write_text(PROFILE.read_text() + "offload_s: 1.0\n")
    own = tmp_path / "own.yaml"
    own.write_text(Path(TOY).read_text())
    cases = [
        ((own, "--profile", PROFILE, "--out", own), "that is the config itself"),
        ((TINY, "--profile", dup), "key 'offload_s' is given on lines"),
        ((TINY,), "--profile P.yaml is required"),
        ((TINY, "--profile", PROFILE, "--top", 0), "--top"),
        ((TINY, "--profile", PROFILE, "--nodes", 0), "--nodes"),
        ((TINY, "--profile", PROFILE, "--accelerators-per-node", "two"), "--accelerators-per-node"),
        ((TINY, "--profile", PROFILE, "--out", tmp_path / "placed.yml"), "--out"),
        ((TINY, "--profile", PROFILE, "--png", tmp_path / "no" / "t.png"), "does not exist"),
        ((str(tmp_path / "none.yaml"), "--profile", PROFILE), "no such file"),
        ((TINY, "--profile", tmp_path / "none.yaml"), "cannot read"),
        ((SAC, "--profile", PROFILE), "the planner does not plan embodied_offpolicy runs"),
    ]
    for argv, expected in cases:
        rc, out, err = cli(capsys, *argv)
        assert (rc, out) == (2, ""), argv
        assert err.count("\n") == 1 and err.startswith("error: ") and expected in err, (argv, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dup.yaml", "own.yaml"]
    assert own.read_text() == Path(TOY).read_text()
