"""Plans as a whole: modes, cluster shapes from config, JSON and grid rendering."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rlinf.scheduler.placement import (
    ClusterShape,
    Mode,
    NodeGroup,
    PlacementError,
    PlacementPlan,
    parse_cluster_shape,
    plan_placement,
    plan_to_json,
    render_grid,
)

C1x8 = ClusterShape(1, 8)
HETERO_CFG = {
    "num_nodes": 4,
    "accelerators_per_node": 8,
    "node_groups": [
        {"label": "a800", "node_ranks": "0-1"},
        {"label": "small", "node_ranks": 2, "accelerators_per_node": 4},
        {"label": "sim", "node_ranks": "3", "accelerators_per_node": 0},
    ],
    "component_placement": {"ignored": "here"},
    "some_other_key": {"anything": True},
}


# ---------------------------------------------------------------- modes


def test_modes_collocated_disaggregated_hybrid():
    plan = plan_placement(
        {"actor,rollout": "0-3", "reward": "4-7", "critic": "0-3:0-7", "ref": "3-4", "inf": "0-3:0"},
        C1x8,
    )
    assert isinstance(plan, PlacementPlan)
    assert plan.modes == {
        ("actor", "rollout"): Mode.COLLOCATED,
        ("actor", "reward"): Mode.DISAGGREGATED,
        ("actor", "critic"): Mode.COLLOCATED,
        ("actor", "ref"): Mode.HYBRID,
        ("actor", "inf"): Mode.COLLOCATED,
        ("rollout", "reward"): Mode.DISAGGREGATED,
        ("rollout", "critic"): Mode.COLLOCATED,
        ("rollout", "ref"): Mode.HYBRID,
        ("rollout", "inf"): Mode.COLLOCATED,
        ("reward", "critic"): Mode.DISAGGREGATED,
        ("reward", "ref"): Mode.HYBRID,
        ("reward", "inf"): Mode.DISAGGREGATED,
        ("critic", "ref"): Mode.HYBRID,
        ("critic", "inf"): Mode.COLLOCATED,
        ("ref", "inf"): Mode.HYBRID,
    }
    assert list(plan.modes) == [(a, b) for i, a in enumerate(plan.components)
                                for b in list(plan.components)[i + 1:]]
    assert plan.mode("inf", "actor") is Mode.COLLOCATED


def test_modes_with_cpu_only_groups():
    shape = parse_cluster_shape(HETERO_CFG)
    plan = plan_placement(
        {
            "env": {"node_group": "sim", "placement": "0:0-3"},
            "sim2": {"node_group": "sim", "placement": 0},
            "actor": "all",
            "reward": {"node_group": "small", "placement": "all"},
        },
        shape,
    )
    assert plan.component("env").resources == frozenset({(3, None)})
    assert plan.mode("env", "sim2") is Mode.COLLOCATED
    assert plan.mode("env", "actor") is Mode.DISAGGREGATED
    assert plan.mode("actor", "reward") is Mode.HYBRID  # 'all' covers the small node too
    assert plan.mode("env", "reward") is Mode.DISAGGREGATED


def test_single_component_has_no_modes():
    plan = plan_placement({"actor": "all"}, C1x8)
    assert plan.modes == {}
    with pytest.raises(KeyError):
        plan.mode("actor", "actor")


def test_declaration_order_and_component_fields():
    plan = plan_placement({"zeta": "0", "alpha,beta": "1-2"}, C1x8)
    assert list(plan.components) == ["zeta", "alpha", "beta"]
    assert plan.component("beta").world_size == 2
    assert plan.component("beta").node_group is None
    assert plan.cluster == C1x8


# ---------------------------------------------------------------- cluster shape


def test_parse_cluster_shape_heterogeneous():
    shape = parse_cluster_shape(HETERO_CFG)
    assert shape == ClusterShape(4, 8, (
        NodeGroup("a800", (0, 1), 8), NodeGroup("small", (2,), 4), NodeGroup("sim", (3,), 0)))
    assert [shape.accelerators_on(n) for n in range(4)] == [8, 8, 4, 0]


def test_parse_cluster_shape_defaults_and_overrides():
    assert parse_cluster_shape({}) == ClusterShape(1, 8)
    assert parse_cluster_shape({"num_nodes": None}) == ClusterShape(1, 8)
    assert parse_cluster_shape({"num_nodes": 2, "accelerators_per_node": 4}) == ClusterShape(2, 4)
    assert parse_cluster_shape({"num_nodes": 2}, num_nodes=3, accelerators_per_node=2) == ClusterShape(3, 2)
    assert parse_cluster_shape({"accelerators_per_node": 0}) == ClusterShape(1, 0)
    # a group without its own count takes the (overridden) cluster count
    shape = parse_cluster_shape({"num_nodes": 2, "node_groups": [{"label": "g", "node_ranks": "all"}]},
                                accelerators_per_node=4)
    assert shape.node_groups == (NodeGroup("g", (0, 1), 4),)
    shape = parse_cluster_shape({"num_nodes": 4, "node_groups": [{"label": "g", "node_ranks": "3,0-1"}]})
    assert shape.node_groups[0].node_ranks == (0, 1, 3)


@pytest.mark.parametrize(
    "cfg, key, token",
    [
        ({"num_nodes": 0}, "cluster.num_nodes", "0"),
        ({"num_nodes": "2"}, "cluster.num_nodes", "'2'"),
        ({"num_nodes": True}, "cluster.num_nodes", "True"),
        ({"accelerators_per_node": -1}, "cluster.accelerators_per_node", "-1"),
        ({"accelerators_per_node": 1.5}, "cluster.accelerators_per_node", "1.5"),
        ({"node_groups": "a"}, "cluster.node_groups", "'a'"),
        ({"node_groups": ["a"]}, "cluster.node_groups[0]", "'a'"),
        ({"num_nodes": 2, "node_groups": [{"label": "a", "node_ranks": "0-2"}]},
         "cluster.node_groups[0].node_ranks", "'0-2'"),
        ({"num_nodes": 2, "node_groups": [{"label": "a", "node_ranks": 0}, {"label": "b", "node_ranks": "0-1"}]},
         "cluster.node_groups[1].node_ranks", "'0-1'"),
        ({"num_nodes": 2, "node_groups": [{"label": "a", "node_ranks": "0,0"}]},
         "cluster.node_groups[0].node_ranks", "'0'"),
        ({"num_nodes": 2, "node_groups": [{"label": "a", "node_ranks": 0}, {"label": "a", "node_ranks": 1}]},
         "cluster.node_groups[1].label", "'a'"),
        ({"node_groups": [{"label": "a", "node_ranks": 0, "gpus": 2}]}, "cluster.node_groups[0]", "'gpus'"),
        ({"node_groups": [{"node_ranks": 0}]}, "cluster.node_groups[0]", "'label'"),
        ({"node_groups": [{"label": "a"}]}, "cluster.node_groups[0]", "'node_ranks'"),
        ({"node_groups": [{"label": 3, "node_ranks": 0}]}, "cluster.node_groups[0].label", "3"),
        ({"node_groups": [{"label": "a", "node_ranks": "x"}]}, "cluster.node_groups[0].node_ranks", "'x'"),
        ({"node_groups": [{"label": "a", "node_ranks": "0:0"}]}, "cluster.node_groups[0].node_ranks", "'0:0'"),
        ({"node_groups": [{"label": "a", "node_ranks": 0, "accelerators_per_node": "4"}]},
         "cluster.node_groups[0].accelerators_per_node", "'4'"),
    ],
)
def test_parse_cluster_shape_errors(cfg, key, token):
    with pytest.raises(PlacementError) as info:
        parse_cluster_shape(cfg)
    assert info.value.key == key
    assert str(info.value).startswith(key + ": ") and token in str(info.value)


def test_parse_cluster_shape_bad_override_and_container():
    with pytest.raises(PlacementError, match="num_nodes"):
        parse_cluster_shape({}, num_nodes=0)
    with pytest.raises(PlacementError, match="^cluster: "):
        parse_cluster_shape(["x"])  # type: ignore[arg-type]


def test_node_rank_out_of_range_message():
    with pytest.raises(PlacementError) as info:
        parse_cluster_shape({"num_nodes": 2, "node_groups": [{"label": "a", "node_ranks": 5}]})
    assert str(info.value) == ("cluster.node_groups[0].node_ranks: node 5 in '5' is out of range; "
                               "valid node ranks are 0-1 (num_nodes = 2)")


def test_override_names_name_the_flag():
    names = {"num_nodes": "--nodes", "accelerators_per_node": "--accelerators-per-node"}
    with pytest.raises(PlacementError) as info:
        parse_cluster_shape({}, num_nodes="x", override_names=names)  # type: ignore[arg-type]
    assert str(info.value) == "--nodes: 'x' is not an int; use an int >= 1"
    with pytest.raises(PlacementError, match=r"^--accelerators-per-node: -1 is too small; use an int >= 0$"):
        parse_cluster_shape({}, accelerators_per_node=-1, override_names=names)
    with pytest.raises(PlacementError, match=r"^num_nodes \(override\): "):  # default naming is kept
        parse_cluster_shape({}, num_nodes=0)


def test_accelerator_counts_per_node():
    shape = parse_cluster_shape(HETERO_CFG)
    assert shape.accelerator_counts() == (8, 8, 4, 0)
    assert ClusterShape(2, 8).accelerator_counts() == (8, 8)
    with pytest.raises(IndexError, match="node 4"):
        shape.accelerators_on(4)
    with pytest.raises(IndexError, match="node -1"):
        shape.accelerators_on(-1)
    with pytest.raises(ValueError, match="node group 'g' has node 2"):
        ClusterShape(2, 8, (NodeGroup("g", (2,), 0),)).accelerator_counts()


def test_per_node_counts_have_one_source(monkeypatch):
    """Planning, the grid and ``accelerators_on`` all take per-node counts from accelerator_counts()."""
    calls: list[ClusterShape] = []
    real = ClusterShape.accelerator_counts

    def spy(self):
        calls.append(self)
        return real(self)

    monkeypatch.setattr(ClusterShape, "accelerator_counts", spy)
    shape = parse_cluster_shape(HETERO_CFG)
    plan = plan_placement({"actor": "all"}, shape)
    assert calls == [shape]
    render_grid(plan)
    assert calls == [shape, shape]
    assert shape.accelerators_on(2) == 4 and len(calls) == 3


PLACEMENT_SRC = Path(__file__).resolve().parents[2] / "rlinf" / "scheduler" / "placement"


def test_house_style_file_length_and_single_text_helpers():
    sources = {p.name: p.read_text(encoding="utf-8") for p in PLACEMENT_SRC.glob("*.py")}
    too_long = {name: src.count("\n") for name, src in sources.items() if src.count("\n") > 300}
    assert not too_long, f"files over 300 lines: {too_long}"
    # the rank-range text ('0' or '0-{n-1}') is built by text.rank_range only
    inline = re.compile(r'f"0-\{')
    assert [name for name, src in sources.items() if inline.search(src)] == ["text.py"]
    # per-node counts are built by ClusterShape.accelerator_counts only
    counts = re.compile(r"\[\s*[\w.]*accelerators_per_node\s*\]\s*\*\s*[\w.]*num_nodes")
    assert [name for name, src in sources.items() if counts.search(src)] == ["plan.py"]


# ---------------------------------------------------------------- rendering


def test_plan_to_json_exact():
    plan = plan_placement({"actor,rollout": "0-1,14", "reward": "8-11:0-1"}, ClusterShape(2, 8))
    assert plan_to_json(plan) == {
        "components": {
            "actor": [{"rank": 0, "node": 0, "accelerators": [0]}, {"rank": 1, "node": 0, "accelerators": [1]},
                      {"rank": 2, "node": 1, "accelerators": [6]}],
            "rollout": [{"rank": 0, "node": 0, "accelerators": [0]}, {"rank": 1, "node": 0, "accelerators": [1]},
                        {"rank": 2, "node": 1, "accelerators": [6]}],
            "reward": [{"rank": 0, "node": 1, "accelerators": [0, 1]},
                       {"rank": 1, "node": 1, "accelerators": [2, 3]}],
        },
        "modes": {"actor,rollout": "collocated", "actor,reward": "disaggregated",
                  "rollout,reward": "disaggregated"},
    }
    json.dumps(plan_to_json(plan))  # plain data


def test_render_grid_heterogeneous():
    shape = parse_cluster_shape(HETERO_CFG)
    plan = plan_placement(
        {"actor,rollout": "0-1", "reward": {"node_group": "small", "placement": "0-3:0-1"},
         "env": {"node_group": "sim", "placement": "0:0-3"}},
        shape,
    )
    lines = render_grid(plan).splitlines()
    assert lines[0] == ("2 nodes x 8, 1 node x 4, 1 CPU-only node; "
                        "components: actor (2), rollout (2), reward (2), env (4)")
    header, n0, n1, n2, n3 = lines[2:7]
    assert header.split()[:3] == ["node", "acc", "0"] and header.endswith("acc 7   cpu")
    assert n0.startswith("node 0 (a800)") and "actor0 rollout0" in n0 and "actor1 rollout1" in n0
    assert n0.split("   ")[-1].strip() == "-"  # unused accelerator 7
    assert n1.count("-") == 8
    assert n2.startswith("node 2 (small)") and n2.split()[-4:] == ["reward0", "reward0", "reward1", "reward1"]
    assert n3.startswith("node 3 (sim, cpu)") and n3.endswith("env0-3")
    # columns line up: every cell of column 'acc 1' starts at the same offset
    col = header.index("acc 1")
    assert n0[col:].startswith("actor1") and n2[col:].startswith("reward0")
    assert lines[8:] == [
        "modes:",
        "  actor,rollout   collocated",
        "  actor,reward    disaggregated",
        "  actor,env       disaggregated",
        "  rollout,reward  disaggregated",
        "  rollout,env     disaggregated",
        "  reward,env      disaggregated",
    ]


def test_render_grid_single_component_and_large_cluster():
    text = render_grid(plan_placement({"actor": "all:0"}, ClusterShape(1, 2)))
    assert "node 0   actor0   actor0" in text and text.endswith("modes:\n  (none: a single component)")
    plan = plan_placement({"actor,rollout,inference": "all", "reward": "0-511",
                           "env": "512-1023:0-2047", "critic": "0-1023:0-255"}, ClusterShape(128, 8))
    lines = render_grid(plan).splitlines()
    assert len(lines) == 1 + 1 + 1 + 128 + 2 + 15
    assert "actor1023 rollout1023 inference1023 env2044-2047 critic255" in lines[2 + 128]
    assert plan.component("env").world_size == 2048
    assert plan.component("critic").processes[255].accelerators == (4, 5, 6, 7)
