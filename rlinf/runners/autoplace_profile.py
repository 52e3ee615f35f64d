"""The run layer's side of the placement planner (issue 46): what the planner plans from.

* :func:`used_placement`: a config's placement without the roles its step does not use (the
  recipe's :meth:`~rlinf.runners.recipe.Recipe.placement_workflow` leaves them out).
"""

from __future__ import annotations

from collections.abc import Mapping

from rlinf.scheduler.autoplace import Workflow

__all__ = ["used_placement"]


def used_placement(placement: Mapping[str, object], workflow: Workflow) -> dict[str, object]:
    """``placement`` (a ``cluster.component_placement``) without the roles ``workflow`` does not
    use: what the planner plans from and compares against (a comma key keeps its used names).

    >>> from rlinf.scheduler.autoplace import Stage
    >>> wf = Workflow(flow=(Stage("rollout"), Stage("actor")), trainer="actor")
    >>> used_placement({"actor,inference,rollout": "all", "inference": 3}, wf)
    {'actor,rollout': 'all'}
    """
    used = set(workflow.roles())
    out: dict[str, object] = {}
    for key, value in placement.items():
        names = [n.strip() for n in str(key).split(",") if n.strip() in used]
        if names:
            out[",".join(names)] = value
    return out
