"""The run layer asks recipes (docs/design.md "Recipes"): every shipped config names exactly one
recipe (:func:`rlinf.runners.registry.recipe_for`), and ``python -m rlinf.scheduler.placement CONFIG
--memory`` prints each recipe's estimate from its own hook (one shipped YAML per recipe; the
off-policy plan holds its replay buffer). No Ray."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlinf.data.replay_buffer import transition_bytes
from rlinf.runners.memory_plan import load_config
from rlinf.runners.registry import all_recipes, recipe_for
from rlinf.scheduler.memory import fmt_bytes
from rlinf.scheduler.placement.__main__ import main as placement_main
from rlinf.utils.typed_config import ConfigError

ROOT = Path(__file__).resolve().parents[2]
#: the example folders whose config/*.yaml are whole runs, and the recipe each file is for
#: (off-policy embodied: the SAC family's files)
FOLDERS = {"math": "math", "tool_agent": "tool_agent", "web_agent": "web_agent", "embodiment": "embodied"}
OFFPOLICY = ("_sac_", "_rlpd_", "_crossq_")


def test_every_recipe_is_found_once_by_its_folder():
    names = [r.name for r in all_recipes()]
    assert sorted(names) == ["embodied", "embodied_offpolicy", "math", "tool_agent", "web_agent"]


def _shipped() -> list[tuple[Path, str]]:
    out = []
    for folder, name in FOLDERS.items():
        for path in sorted((ROOT / "examples" / folder / "config").glob("*.yaml")):
            expected = "embodied_offpolicy" if any(k in path.name for k in OFFPOLICY) else name
            out.append((path, expected))
    return out


@pytest.mark.slow
def test_every_shipped_config_names_exactly_one_recipe(monkeypatch):
    """The composed tree (Hydra defaults followed) of each example YAML claims one recipe, the
    one its entry runs."""
    from hydra import compose, initialize_config_dir

    monkeypatch.setenv("REPO_PATH", str(ROOT))
    shipped = _shipped()
    assert len(shipped) > 30
    wrong = []
    for folder in {p.parent for p, _ in shipped}:
        with initialize_config_dir(str(folder), version_base="1.3"):
            for path, expected in (s for s in shipped if s[0].parent == folder):
                got = recipe_for(compose(path.stem)).name  # unresolved: the names are literal
                if got != expected:
                    wrong.append(f"{path.relative_to(ROOT)}: {got}, expected {expected}")
    assert not wrong, "\n".join(wrong)


def test_a_config_that_names_no_recipe_or_two_is_one_line_on_runner_task_type():
    with pytest.raises(ConfigError, match=r"^runner\.task_type: 'chess' names no recipe; expected one of "
                                          r"embodied, math, tool_agent, or WebGym's layout"):
        recipe_for({"runner": {"task_type": "chess"}})
    with pytest.raises(ConfigError, match=r"^runner\.task_type: 'math' is claimed by several recipes "
                                          r"\(math, web_agent\)"):
        recipe_for({"runner": {"task_type": "math"}, "env_config": {}})
    assert recipe_for({"runner": "oops"}).name == "math"  # the typed config names the bad section
    assert recipe_for({"runner": {"task_type": "embodied"}, "algorithm": {"adv_type": "embodied_sac"}}).name == \
        "embodied_offpolicy"


#: one shipped YAML per recipe, with the components its plan places
PER_RECIPE = {
    "math": ("examples/math/config/grpo_tiny_cpu.yaml", {"actor", "rollout", "reward"}),
    "tool_agent": ("examples/tool_agent/config/calc_tiny_cpu.yaml", {"actor", "rollout", "reward"}),
    "embodied": ("examples/embodiment/config/toy_ppo_mlp.yaml", {"env", "rollout", "actor"}),
    "embodied_offpolicy": ("examples/embodiment/config/maniskill_sac_mlp_cpu.yaml", {"env", "rollout", "actor"}),
    "web_agent": ("examples/web_agent/config/web_agent_tiny_cpu.yaml", {"env", "rollout", "actor"}),
}


@pytest.mark.parametrize("name", sorted(PER_RECIPE))
def test_the_memory_cli_works_for_every_recipe(name, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    path, components = PER_RECIPE[name]
    cfg, _, recipe = load_config(path)
    assert recipe.name == name and type(cfg) is recipe.config_cls
    assert placement_main([path, "--memory", "--cpu"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    estimate = out.split("memory estimate (per rank):\n", 1)[1]
    for component in components:
        assert f"\n  {component} (" in "\n" + estimate, (component, out)
    assert "device peaks (CPU run: this node's RAM):" in out
    if name == "embodied":  # sized from the config alone: the MLP's parameters, no model folder
        assert "weights" in estimate and "~0.03M params (mlp/cnn)" in estimate and "not estimated" not in out
    if name == "embodied_offpolicy":  # PickCube from state: 42 numbers, 4-dim actions, 300 000 transitions
        row = transition_bytes(42, 4)
        line = next(s for s in estimate.splitlines() if s.strip().startswith("replay buffer"))
        assert fmt_bytes(300_000 * row) in line and f"300000 transitions x {row} B (42-number states)" in line
        assert "(host)" in line
    if name in ("math", "tool_agent", "web_agent"):  # sized from the model folder's config.json, when present
        key = "policy_config.base_model" if name == "web_agent" else "actor.model.model_path"
        folder = getattr(cfg.policy_config, "base_model", None) if name == "web_agent" else cfg.actor.model.model_path
        if not os.path.isfile(os.path.join(folder, "config.json")):
            assert f"{key}: cannot read {folder}/config.json" in out
        else:
            assert "weights" in estimate
