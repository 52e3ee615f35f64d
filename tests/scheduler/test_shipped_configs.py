"""Every shipped cluster config and example config plans without error, and the modes are as named."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rlinf.scheduler.config import ClusterConfig

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "config" / "cluster").glob("*.yaml")) + sorted(
    (ROOT / "examples").glob("*/config/*.yaml"))


def cluster_section(path: Path) -> dict:
    """The ``cluster:`` of a shipped file; example configs are composed with Hydra (their
    placement may come from a ``cluster/`` config group)."""
    raw = yaml.safe_load(path.read_text())
    if path.parent.name != "config" or "defaults" not in raw:
        return raw["cluster"]
    import os

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    os.environ.setdefault("REPO_PATH", str(ROOT))  # embodied configs find config/env/ through it

    with initialize_config_dir(str(path.parent), version_base="1.3"):
        return OmegaConf.to_container(compose(path.stem).cluster)


@pytest.mark.slow
@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_config_plans(path):
    plan = ClusterConfig.from_dict(cluster_section(path)).plan()
    assert plan.components


def test_modes_match_the_file_names():
    def modes(name):
        raw = yaml.safe_load((ROOT / "config" / "cluster" / name).read_text())
        return ClusterConfig.from_dict(raw["cluster"]).plan()

    assert modes("collocated_1x8.yaml").mode("actor", "rollout").value == "collocated"
    assert modes("disaggregated_1x8.yaml").mode("actor", "rollout").value == "disaggregated"
    assert modes("disaggregated_1x8.yaml").mode("rollout", "reward").value == "collocated"
    hybrid = modes("hybrid_2x8.yaml")
    assert hybrid.mode("actor", "rollout").value == "hybrid"
    assert [p.accelerators for p in hybrid.component("rollout").processes] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    sim = modes("gpu_plus_cpu_sim_nodes.yaml")
    env = sim.component("env").processes
    assert [(p.node, p.accelerators, p.local_rank) for p in env[:2]] == [(2, (), 0), (2, (), 1)]
    assert env[-1].node == 3 and sim.mode("env", "actor").value == "disaggregated"


def test_config_errors_name_the_key():
    with pytest.raises(ValueError, match=r"^cluster\.num_nodes: expected an int >= 1"):
        ClusterConfig.from_dict({"num_nodes": 0, "component_placement": {"a": "0"}})
    with pytest.raises(ValueError, match=r"^cluster\.component_placement: missing"):
        ClusterConfig.from_dict({"num_nodes": 1})
    with pytest.raises(ValueError, match=r"cluster\.component_placement\.actor.*out of range"):
        ClusterConfig.from_dict({"num_nodes": 1, "accelerators_per_node": 2,
                                 "component_placement": {"actor": "0-2"}})
