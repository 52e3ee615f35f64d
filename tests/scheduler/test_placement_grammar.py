"""The placement grammar: every value form, the process ratio, node groups, and every error."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlinf.scheduler.placement import (
    ClusterShape,
    NodeGroup,
    PlacementError,
    parse_cluster_shape,
    plan_placement,
)

PREFIX = "cluster.component_placement"
C1x8 = ClusterShape(num_nodes=1, accelerators_per_node=8)
C2x8 = ClusterShape(num_nodes=2, accelerators_per_node=8)
# nodes 0-1: 8 accelerators (a800), node 2: 4 (small), node 3: CPU-only (sim)
HETERO = ClusterShape(
    num_nodes=4,
    accelerators_per_node=8,
    node_groups=(
        NodeGroup("a800", (0, 1), 8),
        NodeGroup("small", (2,), 4),
        NodeGroup("sim", (3,), 0),
    ),
)


def procs(value, cluster=C1x8, name="actor"):
    """(node, accelerators, global_ranks, local_rank, local_world_size) per process, rank order."""
    comp = plan_placement({name: value}, cluster).component(name)
    assert [p.rank for p in comp.processes] == list(range(comp.world_size))
    return [(p.node, p.accelerators, p.global_ranks, p.local_rank, p.local_world_size) for p in comp.processes]


def accs(value, cluster=C1x8):
    return [p[1] for p in procs(value, cluster)]


# ---------------------------------------------------------------- valid forms


def test_all_on_one_node():
    assert procs("all") == [(0, (i,), (i,), i, 8) for i in range(8)]


def test_single_rank_string_and_int():
    assert procs("5") == [(0, (5,), (5,), 0, 1)]
    assert procs(5) == [(0, (5,), (5,), 0, 1)]
    assert procs(0) == [(0, (0,), (0,), 0, 1)]


def test_range_and_list_keep_listed_order():
    assert accs("0-3,5,14", C2x8) == [(0,), (1,), (2,), (3,), (5,), (6,)]
    got = procs("0-3,5,14", C2x8)
    assert [g[0] for g in got] == [0, 0, 0, 0, 0, 1]
    assert [g[2] for g in got] == [(0,), (1,), (2,), (3,), (5,), (14,)]
    assert [(g[3], g[4]) for g in got] == [(0, 5), (1, 5), (2, 5), (3, 5), (4, 5), (0, 1)]
    # listed order, not sorted order
    assert accs("5,1-2") == [(5,), (1,), (2,)]


def test_whitespace_inside_value_is_allowed():
    assert accs(" 0 - 1 , 3 ") == [(0,), (1,), (3,)]


def test_rank_14_on_two_nodes_is_node_1_local_6():
    assert procs("14", C2x8) == [(1, (6,), (14,), 0, 1)]


def test_all_spans_nodes_with_per_node_local_ranks():
    got = procs("all", C2x8)
    assert len(got) == 16
    assert got[8] == (1, (0,), (8,), 0, 8)
    assert got[15] == (1, (7,), (15,), 7, 8)


def test_more_processes_than_resources():
    assert procs("0-3:0-7") == [
        (0, (0,), (0,), 0, 8), (0, (0,), (0,), 1, 8),
        (0, (1,), (1,), 2, 8), (0, (1,), (1,), 3, 8),
        (0, (2,), (2,), 4, 8), (0, (2,), (2,), 5, 8),
        (0, (3,), (3,), 6, 8), (0, (3,), (3,), 7, 8),
    ]


def test_fewer_processes_than_resources():
    assert procs("0-7:0-3") == [
        (0, (0, 1), (0, 1), 0, 4), (0, (2, 3), (2, 3), 1, 4),
        (0, (4, 5), (4, 5), 2, 4), (0, (6, 7), (6, 7), 3, 4),
    ]
    assert procs("all:0", C1x8) == [(0, tuple(range(8)), tuple(range(8)), 0, 1)]


def test_ratio_one_to_one_and_multiple_parts():
    assert accs("0-3:0-3,4-7:4-7") == [(i,) for i in range(8)]
    # parts may come in any order as long as the ranks are exactly 0..n-1
    assert accs("4-7:4-7,0-3:0-3") == [(i,) for i in range(8)]
    assert accs("0:0-1,3:2") == [(0,), (0,), (3,)]


def test_ratio_across_nodes_per_node_groups():
    got = procs("all:0-3", C2x8)
    assert got == [
        (0, (0, 1, 2, 3), (0, 1, 2, 3), 0, 2),
        (0, (4, 5, 6, 7), (4, 5, 6, 7), 1, 2),
        (1, (0, 1, 2, 3), (8, 9, 10, 11), 0, 2),
        (1, (4, 5, 6, 7), (12, 13, 14, 15), 1, 2),
    ]


def test_composite_key_gives_each_component_the_same_placement():
    plan = plan_placement({"actor, rollout ,reward": "0-1", "critic": "2"}, C1x8)
    assert list(plan.components) == ["actor", "rollout", "reward", "critic"]
    for name in ("actor", "rollout", "reward"):
        comp = plan.component(name)
        assert comp.name == name
        assert [p.accelerators for p in comp.processes] == [(0,), (1,)]


# ---------------------------------------------------------------- node groups


def test_heterogeneous_global_numbering_without_group():
    # 8 + 8 + 4 accelerators; the CPU-only node adds none
    assert procs("16-19", HETERO) == [(2, (i,), (16 + i,), i, 4) for i in range(4)]
    assert procs("all", HETERO)[-1] == (2, (3,), (19,), 3, 4)
    assert len(procs("all", HETERO)) == 20


def test_accelerator_group_counts_within_group():
    value = {"node_group": "small", "placement": "0-3:0-1"}
    assert procs(value, HETERO) == [(2, (0, 1), (16, 17), 0, 2), (2, (2, 3), (18, 19), 1, 2)]
    plan = plan_placement({"r": value}, HETERO)
    assert plan.component("r").node_group == "small"
    assert {p.node_group for p in plan.component("r").processes} == {"small"}
    value = {"node_group": "a800", "placement": "9"}
    assert procs(value, HETERO) == [(1, (1,), (9,), 0, 1)]


def test_group_of_non_contiguous_nodes():
    cluster = ClusterShape(3, 2, (NodeGroup("odd", (0, 2), 2),))
    value = {"node_group": "odd", "placement": "all"}
    assert procs(value, cluster) == [
        (0, (0,), (0,), 0, 2), (0, (1,), (1,), 1, 2),
        (2, (0,), (4,), 0, 2), (2, (1,), (5,), 1, 2),
    ]


def test_cpu_only_group_ranks_are_nodes():
    cluster = ClusterShape(4, 8, (NodeGroup("sim", (1, 3), 0),))
    assert procs({"node_group": "sim", "placement": "all"}, cluster) == [
        (1, (), (), 0, 1), (3, (), (), 0, 1)]
    assert procs({"node_group": "sim", "placement": "1:0-2"}, cluster) == [
        (3, (), (), 0, 3), (3, (), (), 1, 3), (3, (), (), 2, 3)]
    assert procs({"node_group": "sim", "placement": "0-1:0-3"}, cluster) == [
        (1, (), (), 0, 2), (1, (), (), 1, 2), (3, (), (), 0, 2), (3, (), (), 1, 2)]
    # nodes 1 and 3 are CPU-only: accelerator ranks skip them (0-7 node 0, 8-15 node 2)
    assert procs("8", cluster) == [(2, (0,), (8,), 0, 1)]


# ---------------------------------------------------------------- errors


def err(value, cluster=C1x8, name="actor"):
    with pytest.raises(PlacementError) as info:
        plan_placement({name: value}, cluster)
    e = info.value
    assert "\n" not in str(e)
    assert isinstance(e, ValueError)
    return e


@pytest.mark.parametrize(
    "value, token",
    [
        ("x", "'x'"),
        ("1.5", "'1.5'"),
        (1.5, "1.5"),
        ("0-", "'0-'"),
        ("-1", "'-1'"),
        (-1, "'-1'"),
        ("", "''"),
        ("   ", "'   '"),
        ("0,,1", "'0,,1'"),
        ("0,", "'0,'"),
        (None, "None"),
        (True, "True"),
        (False, "False"),
        ([0, 1], "[0, 1]"),
        ("ALL", "'ALL'"),
        ("0-3:all", "'0-3:all'"),
        ("0:1:2", "'0:1:2'"),
        ("1e3", "'1e3'"),
        ("1234567890", "'1234567890'"),
        ("٣", "'٣'"),
    ],
)
def test_malformed_values(value, token):
    e = err(value)
    assert e.key == f"{PREFIX}.actor"
    assert str(e).startswith(f"{PREFIX}.actor: ")
    assert token in str(e)


@pytest.mark.parametrize("value, token", [("010", "'010'"), ("0-07", "'07'"), ("00", "'00'"), ("01:0", "'01'"),
                                          ("0:00-1", "'00'")])
def test_leading_zeros_are_rejected_naming_the_text(value, token):
    # YAML 1.1 reads an unquoted 010 as octal 8: a rank with a leading zero is ambiguous, never 10 or 8.
    e = err(value)
    assert str(e).startswith(f"{PREFIX}.actor: {token} in ") and "leading zero" in str(e)
    assert "'8'" not in str(e)
    with pytest.raises(PlacementError, match=r"node_ranks: '01' in '01' has a leading zero"):
        parse_cluster_shape({"num_nodes": 2, "node_groups": [{"label": "a", "node_ranks": "01"}]})
    assert accs("0,10", ClusterShape(2, 8)) == [(0,), (2,)]


def test_out_of_range_message_names_valid_range():
    e = err("0-16", C2x8)
    assert str(e) == (
        "cluster.component_placement.actor: accelerator rank 16 in '0-16' is out of range; "
        "valid accelerator ranks are 0-15 (2 nodes x 8)"
    )
    assert (e.key, e.token) == ("cluster.component_placement.actor", "0-16")
    assert "accelerator rank 20 in '20-30'" in str(err("20-30", C2x8))
    assert "'8'" in str(err(8)) and "0-7" in str(err(8))
    assert "0-19 (2 nodes x 8, 1 node x 4, 1 CPU-only node)" in str(err("20", HETERO))


def test_out_of_range_in_groups():
    e = err({"node_group": "small", "placement": "4"}, HETERO)
    assert e.key == f"{PREFIX}.actor.placement"
    assert "'4'" in str(e) and "node group 'small' are 0-3" in str(e)
    e = err({"node_group": "sim", "placement": "1"}, HETERO)
    assert "node rank 1 in '1'" in str(e) and "CPU-only node group 'sim'" in str(e)


def test_no_accelerators_at_all():
    e = err("all", ClusterShape(2, 0))
    assert "'all'" in str(e) and "no accelerators" in str(e)


def test_descending_range():
    e = err("3-1")
    assert "'3-1'" in str(e) and "descending" in str(e) and "'1-3'" in str(e)


@pytest.mark.parametrize("value, token", [("0-3,2", "'2'"), ("1,1", "'1'"), ("all,0", "'0'"),
                                          ("0-3:0-3,0-3:4-7", "'0-3:4-7'")])
def test_duplicate_resources(value, token):
    e = err(value)
    assert token in str(e) and "already used" in str(e)


@pytest.mark.parametrize("value", ["0-2:0-3", "0-3:0-2", "0-5:0-3", "0-7:0-2"])
def test_ratio_that_does_not_divide(value):
    e = err(value)
    assert repr(value) in str(e) and "multiple" in str(e)


def test_process_spanning_nodes():
    e = err("6-9:0", C2x8)
    assert "'6-9:0'" in str(e) and "span nodes 0,1" in str(e)
    # 6 accelerators, 2 per process: each process stays on its node
    assert [p[0] for p in procs("all:0-2", ClusterShape(3, 2))] == [0, 1, 2]
    e = err("0-5:0-1", ClusterShape(3, 2))
    assert "'0-5:0-1'" in str(e) and "span nodes 0,1" in str(e)
    cluster = ClusterShape(3, 0, (NodeGroup("sim", (0, 1, 2), 0),))
    e = err({"node_group": "sim", "placement": "0-1:0"}, cluster)
    assert "'0-1:0'" in str(e) and "span nodes 0,1" in str(e)


def test_mixed_colon_and_plain_parts():
    e = err("0-3:0-3,4")
    assert "'0-3:0-3,4'" in str(e) and "mixes" in str(e)


def test_process_rank_gap_and_overlap():
    e = err("0-3:0-3,4-7:5-8")
    assert "'0-3:0-3,4-7:5-8'" in str(e) and "gap at 4" in str(e)
    e = err("0-3:1-4")
    assert "gap at 0" in str(e)
    e = err("0-3:0-3,4-7:3-6")
    assert "'4-7:3-6'" in str(e) and "process rank 3" in str(e)


def test_unknown_node_group_lists_known_labels():
    e = err({"node_group": "h100", "placement": "0"}, HETERO)
    assert e.key == f"{PREFIX}.actor.node_group"
    assert "'h100'" in str(e) and "a800, small, sim" in str(e)
    e = err({"node_group": "h100", "placement": "0"}, C1x8)
    assert "no node groups are declared" in str(e)


@pytest.mark.parametrize(
    "value, token",
    [
        ({"placement": "0"}, "node_group"),
        ({"node_group": "a800"}, "placement"),
        ({"node_group": "a800", "placement": "0", "extra": 1}, "extra"),
        ({"node_group": 3, "placement": "0"}, "3"),
        ({"node_group": None, "placement": "0"}, "None"),
    ],
)
def test_bad_mapping_values(value, token):
    e = err(value, HETERO)
    assert f"{PREFIX}.actor" in str(e) and token in str(e)


def test_component_listed_twice():
    with pytest.raises(PlacementError) as info:
        plan_placement({"actor,rollout": "0", "actor": "1"}, C1x8)
    assert info.value.key == f"{PREFIX}.actor"
    assert "'actor'" in str(info.value) and f"{PREFIX}['actor,rollout']" in str(info.value)
    with pytest.raises(PlacementError) as info:
        plan_placement({"actor,actor": "0"}, C1x8)
    assert info.value.key == f"{PREFIX}['actor,actor']" and "twice" in str(info.value)


@pytest.mark.parametrize("key, token", [("actor,", "''"), ("1actor", "'1actor'"), ("a-b", "'a-b'"),
                                        (3, "3"), ("", "''")])
def test_bad_component_names(key, token):
    with pytest.raises(PlacementError) as info:
        plan_placement({key: "0"}, C1x8)
    assert str(info.value).startswith(f"{PREFIX}[") and token in str(info.value)


def test_composite_key_is_named_in_value_errors():
    with pytest.raises(PlacementError) as info:
        plan_placement({"actor,rollout": "9"}, C1x8)
    assert str(info.value).startswith("cluster.component_placement['actor,rollout']: ")


def test_key_prefix_and_bad_container():
    with pytest.raises(PlacementError) as info:
        plan_placement({"actor": "x"}, C1x8, key_prefix="cfg.cp")
    assert info.value.key == "cfg.cp.actor"
    with pytest.raises(PlacementError, match="no components"):
        plan_placement({}, C1x8)
    with pytest.raises(PlacementError, match="expected a mapping"):
        plan_placement(["actor"], C1x8)  # type: ignore[arg-type]


# ---------------------------------------------------------------- properties


@st.composite
def disjoint_ranges(draw, n=16):
    """A shuffled list of disjoint inclusive ranges within 0..n-1."""
    cuts = sorted(draw(st.sets(st.integers(0, n), min_size=2, max_size=10)))
    spans = [(a, b - 1) for a, b in zip(cuts, cuts[1:])]
    spans = draw(st.permutations(spans))
    keep = draw(st.lists(st.booleans(), min_size=len(spans), max_size=len(spans)))
    chosen = [s for s, k in zip(spans, keep) if k] or spans[:1]
    return chosen


@settings(max_examples=60, deadline=None)
@given(disjoint_ranges())
def test_property_range_lists_cover_exactly_their_ranks_in_order(spans):
    value = ",".join(f"{a}-{b}" if a != b else str(a) for a, b in spans)
    expected = [r for a, b in spans for r in range(a, b + 1)]
    got = procs(value, C2x8)
    assert [g[2] for g in got] == [(r,) for r in expected]
    assert [(g[0], g[1]) for g in got] == [(r // 8, (r % 8,)) for r in expected]
    for node in (0, 1):
        on_node = [g for g in got if g[0] == node]
        assert [g[3] for g in on_node] == list(range(len(on_node)))
        assert {g[4] for g in on_node} <= {len(on_node)}


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 7), st.sampled_from([1, 2, 4, 8]), st.integers(1, 4), st.booleans())
def test_property_ratio_splits(start, count, per, more_procs):
    count = min(count, 8 - start) or 1
    while count & (count - 1):  # keep a power of two so the split divides
        count -= 1
    res = f"{start}-{start + count - 1}"
    if more_procs:
        got = accs(f"{res}:0-{count * per - 1}")
        assert len(got) == count * per
        assert got == [(start + i // per,) for i in range(count * per)]
    else:
        nproc = max(count // per, 1)
        if count % nproc:
            return
        width = count // nproc
        got = accs(f"{res}:0-{nproc - 1}")
        assert got == [tuple(range(start + i * width, start + (i + 1) * width)) for i in range(nproc)]


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.one_of(
    st.text(alphabet="0123456789-:, all", max_size=14),
    st.text(max_size=8),
    st.integers(-5, 40),
    st.floats(allow_nan=True),
    st.none(), st.booleans(),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.sampled_from(["node_group", "placement", "x"]),
                    st.one_of(st.sampled_from(["sim", "a800", "0-1", "all"]), st.integers(0, 3)), max_size=3),
))
def test_property_junk_raises_only_placement_error(value):
    try:
        plan = plan_placement({"actor": value}, HETERO)
    except PlacementError as e:
        assert "\n" not in str(e) and str(e).startswith(f"{PREFIX}.actor")
    else:
        assert plan.component("actor").world_size >= 1
