"""The scale study's tables in docs/placement_planner.md are what the code prints (issue 46): every
row's figures are the prediction for the placement it names, the search picks that placement, and
the rows are the study's settings."""

from __future__ import annotations

import pytest

from toolkits.autoplace import scale_study as study


@pytest.fixture(scope="module")
def tables() -> str:
    study.workflow()  # the math config's parse (~2 s, once): setup, not the checks
    with open(study.DOC, encoding="utf-8") as f:
        return study.doc_tables(f.read())


def test_every_row_is_the_prediction_for_the_placement_it_names(tables):
    labels = study.doc_labels(tables)
    wanted = {(name, n) for name in study.STUDY for n in study.SCALES} | {(p[0], p[1]) for p in study.PUBLIC}
    assert set(labels) == wanted, "rerun: python -m toolkits.autoplace.scale_study --write-doc"
    # the placement of each row predicted again (no search): every cell of every row must match
    assert study.render(lambda name, n: study.check_row(name, n, labels[(name, n)])) == tables


def test_the_search_picks_the_placement_the_doc_names_where_it_is_quick(tables):
    # searches of up to 64 accelerators take 0.05-0.1 s each; the 8- and 512-accelerator rows
    # (0.4 and 3 s each) are checked by the slow test below
    labels = study.doc_labels(tables)
    quick = [(name, n) for name, n in labels if 8 < n <= 64]
    assert len(quick) == 5
    for name, n in quick:
        assert study.plan_row(name, n).label == labels[(name, n)], (name, n)


@pytest.mark.slow
def test_the_whole_study_regenerates_the_doc(tables):
    assert study.render() == tables, "rerun: python -m toolkits.autoplace.scale_study --write-doc"


def test_a_label_round_trips_and_a_bad_one_is_refused():
    label = "actor: 392-511, reward: all, rollout: 0-391; lookahead 1"
    assert study.candidate_from_label(label).label() == label
    assert study.candidate_from_label("reward: all, rollout,actor: 0-7").placement == {
        "reward": "all", "rollout,actor": "0-7"}
    with pytest.raises(ValueError, match="node groups"):
        study.candidate_from_label("env: sim:0-1, actor: 0-3")
