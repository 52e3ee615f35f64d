"""Placement that plans itself: a profile of each role, every placement the grammar allows, an
event simulation of one step for each, and a ranked table (docs/placement_planner.md).

Pure Python, no Ray, no torch, nothing about RL: a recipe describes its step as a
:class:`Workflow`; the profile (:func:`parse_profile`) gives each role's seconds per sample and
memory on one accelerator; :func:`plan_search` ranks the candidates.

    >>> from rlinf.scheduler.autoplace import Stage, Workflow, parse_profile, plan_search
    >>> from rlinf.scheduler.placement import ClusterShape
    >>> prof = parse_profile({"accelerator_memory_gib": 80, "samples_per_step": 64, "offload_s": 3.0,
    ...     "weight_sync_s": 0.5, "roles": {"rollout": {"seconds_per_sample": 0.2, "memory_gib": 30},
    ...     "actor": {"seconds_per_sample": 0.1, "memory_gib": 60}}})
    >>> wf = Workflow(flow=(Stage("rollout"), Stage("actor")), trainer="actor", receivers=("rollout",))
    >>> plan_search(wf, prof, ClusterShape(1, 4), current={"actor,rollout": "0-3"}).ranked[0].mode
    'disaggregated'
"""

from rlinf.scheduler.autoplace.candidates import Candidate, enumerate_candidates
from rlinf.scheduler.autoplace.profile import NodeGroupFigures, Profile, ProfileError, RoleFigures, parse_profile
from rlinf.scheduler.autoplace.search import Ranked, SearchResult, check_profile, peak_memory, plan_search
from rlinf.scheduler.autoplace.simulate import Prediction, predict
from rlinf.scheduler.autoplace.workflow import Loop, Stage, Workflow

__all__ = ["Candidate", "Loop", "NodeGroupFigures", "Prediction", "Profile", "ProfileError", "Ranked", "RoleFigures",
           "SearchResult", "Stage", "Workflow", "check_profile", "enumerate_candidates", "parse_profile",
           "peak_memory", "plan_search", "predict"]
