"""The first minute of every shipped tiny config (issue 44), without Ray and without running one:

* from a fresh results folder, each config's missing asset (tiny model, tiny VLA / π0 folder,
  demonstrations) is named by the recipe's preflight in one line with the command that makes it:
  made on the spot when quick (the line says so), else a ``config error`` naming the command;
* with the one override ``cluster.backend=local``, each config's placement folds to one process
  per group that keeps the accelerators its processes had (same modes: groups placed apart stay
  apart), its typed config accepts that plan, and the start-up note says what was folded.

The runs themselves are covered by the local-backend end-to-end tests
(tests/runners/test_local_backend_runs.py, tests/examples/test_embodied_configs.py,
tests/examples/test_pi0_configs.py).
"""

from __future__ import annotations

import copy
import functools
import os
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from rlinf.config.resolvers import register_resolvers
from rlinf.runners.launch import local_fold_note
from rlinf.scheduler.config import ClusterConfig
from rlinf.utils.typed_config import ConfigError

ROOT = Path(__file__).resolve().parents[2]
ENTRY_FOLDERS = ("math", "tool_agent", "web_agent", "embodiment", "scheduler_demo", "vlm")


def _is_tiny(stem: str) -> bool:
    return "tiny" in stem or stem.endswith("_cpu") or stem == "toy_ppo_mlp"


TINY = sorted((folder, p.stem) for folder in ENTRY_FOLDERS
              for p in (ROOT / "examples" / folder / "config").glob("*.yaml") if _is_tiny(p.stem))

_VLA = "python -m toolkits.embodied.make_tiny_vla --out results/"
_TINY_MATH = ("actor.model.model_path", "results/tiny_math/warm",
              "python -m toolkits.tiny_math.prepare --out results/tiny_math", True)
_TINY_TOOL = ("actor.model.model_path", "results/tiny_tool/warm",
              "python -m toolkits.tool_agent.prepare --out results/tiny_tool", False)
_PI0_LIBERO = ("actor.model.model_path", "results/tiny_pi0/pi0_libero", _VLA + "tiny_pi0/pi0_libero --model-type pi0 "
               "--layout rlinf --action-horizon 50 --asset-id physical-intelligence/libero", True)
_PI05_LIBERO = ("actor.model.model_path", "results/tiny_pi0/pi05_libero", _VLA + "tiny_pi0/pi05_libero --model-type "
                "pi05 --layout rlinf --action-horizon 10 --asset-id physical-intelligence/libero "
                "--value-after-vlm", True)
#: config -> (key, path, the command the line names, made on the spot?); None: it reads nothing to prepare
ASSETS = {
    "grpo_tiny_async": _TINY_MATH, "grpo_tiny_cpu": _TINY_MATH, "grpo_tiny_dapo": _TINY_MATH,
    "grpo_tiny_disaggregated": _TINY_MATH, "grpo_tiny_megatron_cpu": _TINY_MATH, "grpo_tiny_vllm": _TINY_MATH,
    "ppo_tiny_cpu": _TINY_MATH,
    "calc_tiny_cpu": _TINY_TOOL, "calc_tiny_disaggregated": _TINY_TOOL, "grpo_tiny_fully_async": _TINY_MATH,
    "calc_tiny_fully_async": _TINY_TOOL,
    "web_agent_tiny_cpu": ("policy_config.base_model", "results/tiny_web/warm",
                           "python -m toolkits.web_tasks.prepare --out results/tiny_web", False),
    "libero_grpo_openvlaoft_tiny_cpu": ("actor.model.model_path", "results/tiny_vla/base",
                                        _VLA + "tiny_vla/base --identity-stats", True),
    "maniskill_ppo_openvlaoft_tiny_cpu": ("actor.model.model_path", "results/tiny_vla/base",
                                          _VLA + "tiny_vla/base --identity-stats --lora-out results/tiny_vla/lora",
                                          True),
    "libero_grpo_pi0_tiny_cpu": _PI0_LIBERO, "libero_ppo_pi0_tiny_cpu": _PI0_LIBERO,
    "libero_grpo_pi05_tiny_cpu": _PI05_LIBERO, "libero_ppo_pi05_tiny_cpu": _PI05_LIBERO,
    "maniskill_ppo_pi0_tiny_cpu": ("actor.model.model_path", "results/tiny_pi0/pi0_maniskill",
                                   _VLA + "tiny_pi0/pi0_maniskill --model-type pi0 --layout rlinf --action-horizon 8 "
                                   "--state-dim 29", True),
    "maniskill_rlpd_mlp_cpu": ("algorithm.demo_buffer.load_path", "results/demos/pickcube/trajectory.h5",
                               "python -m toolkits.embodied.make_demos --env PickCube-v1 --num 100 "
                               "--out results/demos/pickcube", True),
    "toy_ppo_mlp": None, "maniskill_ppo_mlp_cpu": None, "maniskill_ppo_flow_cpu": None,
    "maniskill_ppo_flow_noise_cpu": None, "maniskill_sac_mlp_cpu": None, "maniskill_crossq_mlp_cpu": None,
    "metaworld_reach_ppo_mlp_cpu": None, "metaworld_reach_sac_mlp_cpu": None, "demo_cpu": None,
    "gymnasium_pendulum_ppo_mlp_cpu": None,
    "vlm_grpo_tiny_cpu": ("actor.model.model_path", "results/tiny_vlm/base",
                          "python -m toolkits.vlm.prepare --out results/tiny_vlm", True),
}
#: config -> what the local backend folds (None: every group is one process already)
FOLDED = {
    **{name: "actor 2 processes -> 1, rollout 2 processes -> 1, reward 2 processes -> 1"
       for name in ("grpo_tiny_cpu", "grpo_tiny_megatron_cpu", "grpo_tiny_vllm", "ppo_tiny_cpu", "calc_tiny_cpu",
                    "vlm_grpo_tiny_cpu")},
    **{name: "actor 2 processes -> 1"
       for name in ("grpo_tiny_async", "grpo_tiny_dapo", "grpo_tiny_disaggregated", "calc_tiny_disaggregated",
                    "toy_ppo_mlp", "grpo_tiny_fully_async", "calc_tiny_fully_async")},
    **{name: "env 2 processes -> 1"
       for name in ("maniskill_ppo_mlp_cpu", "maniskill_ppo_flow_cpu", "maniskill_ppo_flow_noise_cpu",
                    "maniskill_sac_mlp_cpu", "maniskill_crossq_mlp_cpu", "maniskill_rlpd_mlp_cpu",
                    "metaworld_reach_ppo_mlp_cpu", "metaworld_reach_sac_mlp_cpu")},
    "demo_cpu": "env 2 processes -> 1, policy 2 processes -> 1, trainer 2 processes -> 1",
}
#: configs the local backend cannot run, and the one line that says so before Ray
REFUSED_LOCALLY = {
    "grpo_tiny_megatron_cpu": "actor.model.tensor_model_parallel_size: 2 x pipeline_model_parallel_size 1 = 2 ranks "
                              "do not divide the actor's 1 process(es) (cluster.backend local runs each group as one "
                              "process); set them to fit its placement",
}


def _compose(folder: str, name: str) -> dict:
    """The config as the entry composes it with ``cluster.backend=local`` (a fresh copy each call)."""
    return copy.deepcopy(_composed(folder, name))


@functools.cache
def _composed(folder: str, name: str) -> dict:
    os.environ.setdefault("REPO_PATH", str(ROOT))
    register_resolvers()
    with initialize_config_dir(str(ROOT / "examples" / folder / "config"), version_base="1.3"):
        return OmegaConf.to_container(compose(name, overrides=["cluster.backend=local"]), resolve=True)


def _recipe(folder: str, raw: dict):
    from rlinf.runners.embodied_offpolicy.recipe import embodied_recipe_for
    from rlinf.runners.math.recipe import MATH_RECIPE
    from rlinf.runners.tool_agent.recipe import TOOL_AGENT_RECIPE
    from rlinf.runners.web_agent.recipe import WEB_RECIPE

    recipes = {"math": MATH_RECIPE, "vlm": MATH_RECIPE, "tool_agent": TOOL_AGENT_RECIPE, "web_agent": WEB_RECIPE}
    return recipes.get(folder) \
        or embodied_recipe_for(raw)


def test_every_shipped_tiny_config_is_listed():
    assert sorted(name for _, name in TINY) == sorted(ASSETS)
    assert set(FOLDED) <= set(ASSETS)


@pytest.mark.parametrize("folder, name", [t for t in TINY if ASSETS[t[1]] is not None])
def test_a_fresh_results_folder_gives_one_line_naming_the_command(folder, name, tmp_path, monkeypatch, capsys):
    key, path, command, made = ASSETS[name]
    raw = _compose(folder, name)
    raw["cluster"]["backend"] = "ray"  # as shipped
    ran = []

    def not_here(cmd):  # the real command is run by test_the_tiny_math_model_is_made_when_missing
        ran.append(cmd)
        raise RuntimeError("exit 9: not run in this test")

    monkeypatch.setattr("rlinf.runners.preflight.run_asset_command", not_here)
    monkeypatch.chdir(tmp_path)  # a fresh results/ folder
    with pytest.raises(ConfigError) as err:
        _recipe(folder, raw).prepare(raw)
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[rlinf]")]
    if made:
        assert ran == [command]
        assert len(printed) == 1
        assert printed[0].startswith(f"[rlinf] {key}: {path!r} does not exist: making it with `{command}` (")
        assert str(err.value) == f"{key}: {path!r} does not exist and `{command}` failed: exit 9: not run in this test"
    else:
        assert ran == [] and printed == []
        assert str(err.value).startswith(f"{key}: {path!r} does not exist: run `{command}` (")
        assert str(err.value).endswith(") to make it")


@pytest.mark.parametrize("folder, name", TINY)
def test_local_backend_folds_each_group_to_one_process_on_its_accelerators(folder, name):
    raw = _compose(folder, name)
    local = ClusterConfig.from_dict(raw["cluster"])
    ray_plan = ClusterConfig.from_dict({**raw["cluster"], "backend": "ray"}).plan()
    plan = local.plan()
    assert list(plan.components) == list(ray_plan.components)
    for comp_name, comp in plan.components.items():
        before = ray_plan.component(comp_name)
        assert comp.world_size == 1
        assert comp.processes[0].accelerators == tuple(sorted({a for p in before.processes for a in p.accelerators}))
        assert comp.resources == before.resources
    assert dict(plan.modes) == dict(ray_plan.modes)  # collocated stays collocated, apart stays apart
    note = local_fold_note(local)
    if FOLDED.get(name) is None:
        assert note is None
    else:
        assert note.startswith(f"cluster.backend local: {FOLDED[name]} in this process; each group keeps its "
                               "accelerators (")
        assert note.endswith("), so groups placed apart stay apart")
    if folder == "scheduler_demo":
        return
    recipe = _recipe(folder, raw)
    if name in REFUSED_LOCALLY:
        with pytest.raises(ConfigError) as err:
            recipe.config_cls.load(raw, check_paths=False)
        assert str(err.value) == REFUSED_LOCALLY[name]
        return
    cfg = recipe.config_cls.load(raw, check_paths=False)  # its batch / placement rules on the folded plan
    cfg.check_against_plan(plan)


@pytest.mark.parametrize("name, note", [
    ("grpo_tiny_cpu", "cluster.backend local: actor 2 processes -> 1, rollout 2 processes -> 1, reward 2 processes "
                      "-> 1 in this process; each group keeps its accelerators (actor,rollout,reward: 0,1), so groups "
                      "placed apart stay apart"),
    ("grpo_tiny_disaggregated", "cluster.backend local: actor 2 processes -> 1 in this process; each group keeps its "
                                "accelerators (actor: 0,1; rollout,reward: 2), so groups placed apart stay apart"),
    ("maniskill_sac_mlp_cpu", "cluster.backend local: env 2 processes -> 1 in this process; each group keeps its "
                              "accelerators (env: 0,1; rollout: 1; actor: 0), so groups placed apart stay apart"),
])
def test_the_start_up_note_in_full(name, note):
    folder = next(f for f, n in TINY if n == name)
    assert local_fold_note(ClusterConfig.from_dict(_compose(folder, name)["cluster"])) == note


def test_the_tiny_math_model_is_made_when_missing(tmp_path, monkeypatch, capsys):
    """The quick asset for real: from a fresh folder the math default's model is made by its
    command (a copy of the shipped warm start), and the model checks then pass."""
    from rlinf.config.math import MathConfig
    from rlinf.runners.math.preflight import MATH_ASSETS
    from rlinf.runners.preflight import check_assets, check_hf_folder

    monkeypatch.chdir(tmp_path)
    cfg = MathConfig.load(_compose("math", "grpo_tiny_cpu"), check_paths=False)
    check_assets(cfg, MATH_ASSETS)
    assert capsys.readouterr().out.startswith(
        "[rlinf] actor.model.model_path: 'results/tiny_math/warm' does not exist: making it with "
        "`python -m toolkits.tiny_math.prepare --out results/tiny_math` (")
    check_hf_folder("results/tiny_math/warm", "actor.model.model_path")
    check_assets(cfg, MATH_ASSETS)  # there now: nothing to do, nothing said
    assert capsys.readouterr().out == ""
