"""The placement planner at scale, on paper (issue 46 item 5): the profiles in
``toolkits/autoplace/profiles/`` (each derives its figures from their source in its header) planned
for 8, 64 and 512 accelerators, and the public settings whose winning mode a paper states, with
the math recipe's step (:meth:`~rlinf.runners.recipe.Recipe.placement_workflow` of
``examples/math/config/qwen2.5-1.5b-grpo-disaggregated.yaml``: rollout -> reward -> actor, lookahead
0-2, since its ``decoupled_ppo`` loss lets the planner try asynchronous splits).

Every row runs :func:`~rlinf.scheduler.autoplace.plan_search` with the profile's figures on
``nodes x 8`` accelerators and compares the best candidate with every role collocated on all
accelerators. ``docs/placement_planner.md`` holds the tables this prints, between the markers
``<!-- scale-study:begin -->`` and ``<!-- scale-study:end -->``;
``tests/toolkits/test_autoplace_scale_study.py`` keeps them equal.

    python -m toolkits.autoplace.scale_study                  # the tables, as markdown
    python -m toolkits.autoplace.scale_study --write-doc      # replace them in the doc

Example (one row: the 1.5B profile on one 8-GPU node; collocated wins, nothing to hide):

    >>> row = plan_row("r1_distill_1.5b_h100", 8)
    >>> row.label, row.mode, round(row.step_s, 1), round(row.speedup, 2)
    ('reward: all, rollout,actor: 0-7', 'collocated', 346.3, 1.0)
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from rlinf.runners.compose import REPO_ROOT
from rlinf.scheduler.autoplace import Candidate, Prediction, Profile, Workflow, plan_search, predict
from rlinf.scheduler.placement import ClusterShape, plan_placement
from toolkits.autoplace.inputs import read_profile

__all__ = ["PUBLIC", "SCALES", "STUDY", "Row", "candidate_from_label", "check_row", "doc_labels", "doc_tables",
           "plan_row", "render", "workflow"]

HERE = os.path.dirname(os.path.abspath(__file__))
PROFILES = os.path.join(HERE, "profiles")
CONFIG = os.path.join(REPO_ROOT, "examples", "math", "config", "qwen2.5-1.5b-grpo-disaggregated.yaml")
DOC = os.path.join(REPO_ROOT, "docs", "placement_planner.md")
BEGIN, END = "<!-- scale-study:begin -->", "<!-- scale-study:end -->"
#: accelerators per node of every planned cluster
PER_NODE = 8
#: the accelerator counts of the scale table
SCALES = (8, 64, 512)
#: profile -> why it is in the table
STUDY = {
    "r1_distill_1.5b_h100": "public (RLinf vs verl, 8 x H100); generation's tail inside its work",
    "r1_distill_1.5b_h100_tail": "the same, generation split into work + a tail that holds no GPU",
    "qwen2.5_math_7b_h20": "public (verl, 7B on 32/64/128 H20); measured scaling of each phase",
    "qwen2.5_0.5b_h200": "our H200 kit's actor; public offload/sync of a small model",
}
#: (profile, accelerators, the mode the publication found faster, what it found, its source)
PUBLIC = (
    ("qwen2.5_math_7b_h20", 32, "disaggregated", "fully-async split 16:16, 2.66x", "verl fully_async.md"),
    ("qwen2.5_math_7b_h20", 64, "disaggregated", "fully-async split 32:32, 1.92x", "verl fully_async.md"),
    ("qwen2.5_math_7b_h20", 128, "disaggregated", "fully-async split 64:64, 2.35x", "verl fully_async.md"),
    ("r1_distill_1.5b_h100_tail", 128, "disaggregated", "AReaL 1.5B on 16 x 8 H800: async 2.77x", "AReaL v0.3 blog"),
    ("r1_distill_1.5b_h100", 8, "collocated", "collocated: RLinf's choice for its 1-node runs (its own planner's "
     "1-node test expects it too); no split measured", "RLinf docs"),
    ("r1_distill_1.5b_h100_tail", 8, "collocated", "the same", "RLinf docs"),
)


@dataclass(frozen=True)
class Row:
    """One planned setting.

    Attributes:
        profile, accelerators: what was planned.
        label, mode: the best candidate's placement (and knobs) and its mode among the roles that
            hold accelerators (a CPU-only role such as the math reward is left out of the mode).
        step_s, collocated_s: predicted step of the best candidate and of every role on all
            accelerators; ``speedup`` = ``collocated_s / step_s``.
        bottleneck, busy: the best candidate's busiest role and its busy share of the step.
        fixed_share: share of the collocated step spent on what more accelerators do not shorten
            (phase switches, weight sync, waits, the driver).
        """

    profile: str
    accelerators: int
    label: str
    mode: str
    step_s: float
    collocated_s: float
    speedup: float
    bottleneck: str
    busy: float
    fixed_share: float


@functools.lru_cache(maxsize=1)
def workflow() -> Workflow:
    """The math recipe's step for :data:`CONFIG` (its hook, as ``python -m toolkits.autoplace`` asks it)."""
    # lazy: the config parse imports the math config tree (~2 s); the module's constants do not need it
    from rlinf.runners.memory_plan import load_config

    cfg, _, recipe = load_config(CONFIG)
    return recipe.placement_workflow(cfg)


@functools.cache
def read(name: str) -> Profile:
    """The profile ``profiles/<name>.yaml`` (the CLI's strict loader)."""
    return read_profile(os.path.join(PROFILES, f"{name}.yaml"))


def _accelerator_mode(candidate: Candidate, profile: Profile, cluster: ClusterShape) -> str:
    keep = {}
    for key, value in candidate.placement.items():
        names = [n for n in key.split(",") if profile.roles[n].accelerator]
        if names:
            keep[",".join(names)] = value
    modes = {m.value for m in plan_placement(keep, cluster).modes.values()}
    return modes.pop() if len(modes) == 1 else "hybrid" if modes else "single"


def _fixed_share(prediction) -> float:
    fixed = sum(min(end, prediction.step_s) - max(start, 0.0) for _, kind, start, end in prediction.events
                if kind != "work" and start < prediction.step_s)
    return fixed / prediction.step_s


def candidate_from_label(label: str) -> Candidate:
    """The candidate a :meth:`Candidate.label` names (placements without node groups).

    >>> candidate_from_label("actor: 6-7, reward: all, rollout: 0-5; lookahead 1")
    Candidate(placement={'actor': '6-7', 'reward': 'all', 'rollout': '0-5'}, lookahead=1, pipeline_stages=1)
    """
    head, _, knobs = label.partition("; ")
    placement = {}
    for part in head.split(", "):
        key, sep, value = part.partition(": ")
        if not sep or ":" in value:
            raise ValueError(f"not a placement label without node groups: {label!r}")
        placement[key] = value
    lookahead, stages = 0, 1
    for knob in knobs.split(", ") if knobs else ():
        words = knob.split()
        if words[0] == "lookahead":
            lookahead = int(words[1])
        elif words[1:] == ["pipeline", "stages"]:
            stages = int(words[0])
        else:
            raise ValueError(f"unknown knob {knob!r} in {label!r}")
    return Candidate(placement, lookahead, stages)


def _cluster(accelerators: int) -> ClusterShape:
    return ClusterShape(accelerators // PER_NODE, PER_NODE)


def _collocated() -> dict[str, str]:
    return {",".join(workflow().roles()): "all"}


def _row(name: str, accelerators: int, best: Candidate, pred: Prediction, collocated: Prediction) -> Row:
    profile, cluster = read(name), _cluster(accelerators)
    return Row(name, accelerators, best.label(), _accelerator_mode(best, profile, cluster), pred.step_s,
               collocated.step_s, collocated.step_s / pred.step_s, pred.bottleneck, pred.busy[pred.bottleneck],
               _fixed_share(collocated))


@functools.cache
def plan_row(name: str, accelerators: int) -> Row:
    """Search profile ``name`` on ``accelerators`` (``accelerators / 8`` nodes of 8): the best
    candidate against every role collocated on all of them."""
    result = plan_search(workflow(), read(name), _cluster(accelerators), current=_collocated())
    best = result.ranked[0]
    return _row(name, accelerators, best.candidate, best.prediction, result.current.prediction)


def check_row(name: str, accelerators: int, label: str) -> Row:
    """The row for the placement ``label`` without the search: its prediction and the collocated
    one's (what the fast test compares with the doc; :func:`plan_row` is the search)."""
    profile, cluster, wf = read(name), _cluster(accelerators), workflow()
    cand = candidate_from_label(label)
    pred = predict(plan_placement(cand.placement, cluster), profile, wf, lookahead=cand.lookahead,
                   pipeline_stages=cand.pipeline_stages)
    return _row(name, accelerators, cand, pred, predict(plan_placement(_collocated(), cluster), profile, wf))


def _line(row: Row, *extra: str) -> str:
    per = read(row.profile).samples_per_step / row.accelerators
    cells = [f"`{row.profile}`", str(row.accelerators), f"{per:g}", f"`{row.label}`", row.mode, f"{row.step_s:.1f}",
             f"{row.collocated_s:.1f}", f"{row.speedup:.2f}x", f"{row.bottleneck} ({row.busy:.0%})",
             f"{row.fixed_share:.0%}", *extra]
    return "| " + " | ".join(cells) + " |"


def render(row_for: Callable[[str, int], Row] = plan_row) -> str:
    """Both tables, as markdown (what the doc holds between its markers); ``row_for(profile,
    accelerators)`` gives each row (default: the search)."""
    head = ("| profile | accelerators | samples per accelerator | best placement | mode | step s | collocated s "
            "| speed-up | bottleneck (busy) | fixed share of collocated |")
    rule = "|---|---:|---:|---|---|---:|---:|---:|---|---:|"
    out = ["Scale study (`python -m toolkits.autoplace.scale_study`):", "", head, rule]
    out += [_line(row_for(name, n)) for name in STUDY for n in SCALES]
    out += ["", "Settings a publication reports a winner for:", "",
            head + " published | planner agrees on the mode | source |", rule + "---|---|---|"]
    for name, n, mode, found, source in PUBLIC:
        row = row_for(name, n)
        out.append(_line(row, found, "yes" if row.mode == mode else "**no**", source))
    return "\n".join(out) + "\n"


def doc_labels(tables: str) -> dict[tuple[str, int], str]:
    """``(profile, accelerators) -> best placement`` of every row of the doc's tables."""
    out = {}
    for line in tables.splitlines():
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        if len(cells) >= 4 and cells[0].startswith("`") and cells[1].isdigit():
            out[(cells[0].strip("`"), int(cells[1]))] = cells[3].strip("`")
    return out


def doc_tables(text: str) -> str:
    """The part of the doc's ``text`` between the markers."""
    try:
        start = text.index(BEGIN) + len(BEGIN) + 1
        return text[start:text.index(END, start)]
    except ValueError:
        raise ValueError(f"{DOC}: no {BEGIN} ... {END} section") from None


def main(argv: list[str] | None = None) -> int:
    """Print the tables; ``--write-doc``: put them in the doc between its markers."""
    parser = argparse.ArgumentParser(prog="python -m toolkits.autoplace.scale_study",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--write-doc", action="store_true", help=f"replace the tables in {os.path.relpath(DOC)}")
    args = parser.parse_args(argv)
    tables = render()
    if not args.write_doc:
        sys.stdout.write(tables)
        return 0
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    old = doc_tables(text)
    with open(DOC, "w", encoding="utf-8") as f:
        f.write(text.replace(BEGIN + "\n" + old, BEGIN + "\n" + tables, 1))
    print(f"wrote the tables into {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
