"""How a role scales, from two measured sizes (issue 46): one profile measured with the config's
placement and one with another placement that gives the roles other unit counts
(``python -m toolkits.autoplace CONFIG --measure-steps K``, ``--measure-sizes 2``, the default).

A role measured on ``a`` units spends ``b_a`` busy seconds per step in its busiest unit (a profile's
``seconds_per_sample`` is ``b x units / samples_per_step``). Two sizes fit a fixed part and a
divisible part, ``b_n = c + W / n``: ``c`` is what every unit pays whatever its share (the per-call
and per-decode-step overhead of a small model, a collective), ``W`` the work that splits. Written:

* ``seconds_per_sample = b_1 / samples_per_step``, with ``b_1 = c + W`` (measured when one of the
  sizes is 1); a fit with ``c < 0`` (faster than linear: noise) keeps linear scaling from the
  smaller size, and one with ``W <= 0`` (no faster per unit on more) puts all of it in ``c``;
* ``seconds_per_sample_at = {n: b_n / samples_per_step}`` for the measured sizes above 1, which
  the planner interpolates in log-log (:meth:`~rlinf.scheduler.autoplace.RoleFigures.speedup`);
* a role that waits outside the run (``wait_s_per_step``: the tool agent's rollout waiting for its
  tools) waits for the slowest of fewer samples on more units: ``wait_s_per_step`` on one unit and
  ``wait_s_per_step_at`` at the measured sizes above 1
  (:meth:`~rlinf.scheduler.autoplace.RoleFigures.wait_on`).

On shared cores a role's processes then cost ``n x b_n`` CPU seconds, more than ``b_1`` when ``c >
0``: the cost of an extra process that linear scaling hides (measured on the tiny math run, where
placements that differ only in the rollout's process count were predicted equal).

A role measured at the same size twice gets the mean of the two. Figures of the run (weight sync,
phase switches, driver, cluster) are the first profile's: they belong to the config's placement.

Example:
    >>> first = {"samples_per_step": 100, "roles": {"rollout": {"seconds_per_sample": 0.01, "memory_gib": 1}}}
    >>> second = {"samples_per_step": 100, "roles": {"rollout": {"seconds_per_sample": 0.012, "memory_gib": 1}}}
    >>> out, notes = combine_sizes(first, second, {"rollout": 1}, {"rollout": 2})
    >>> out["roles"]["rollout"]
    {'seconds_per_sample': 0.01, 'memory_gib': 1, 'seconds_per_sample_at': {2: 0.006}}
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping

from rlinf.scheduler.placement import ClusterShape, plan_placement

__all__ = ["combine_sizes", "placement_units"]


def _fig(x: float) -> float:
    return float(f"{x:.4g}")


def placement_units(placement: Mapping[str, object], shape: ClusterShape, roles: tuple[str, ...],
                    on_cpu: bool) -> dict[str, int]:
    """Each role's units under ``placement``: processes on a CPU run, accelerators otherwise (as
    a measured profile counts them).

    >>> placement_units({"actor": "0-1", "rollout,reward": 2}, ClusterShape(1, 3), ("actor", "rollout"), True)
    {'actor': 2, 'rollout': 1}
    """
    plan = plan_placement(dict(placement), shape)
    out = {}
    for role in roles:
        comp = plan.component(role)
        devices = [r for r in comp.resources if r[1] is not None] if comp.resources else []
        out[role] = comp.world_size if on_cpu or not devices else len(devices)
    return out


def _fit(a: int, b_a: float, b: int, b_b: float) -> tuple[float, float, str]:
    """``(b_1, fixed c, how)`` from busy seconds per unit ``b_a`` on ``a`` units and ``b_b`` on
    ``b`` (``a < b``)."""
    divisible = (b_a - b_b) / (1 / a - 1 / b)
    fixed = b_a - divisible / a
    if divisible <= 0:
        return b_a, b_a, "no faster per unit on more: all fixed"
    if fixed < 0:
        return b_a * a, 0.0, "faster than linear (noise): linear from the smaller size"
    return (b_a if a == 1 else fixed + divisible), fixed, f"fixed {fixed:.3g} s per unit + {divisible:.3g} s divisible"


def _waits(a: int, w_a: float, b: int, w_b: float) -> tuple[float, dict[int, float]]:
    """``(wait on 1 unit, {units: wait})`` from the waits measured on ``a < b`` units: on 1 the
    measured one when ``a`` is 1, else the two points' log-log line continued down to 1 (its
    exponent held between flat and ``1/n``); above ``b`` the planner holds ``b``'s."""
    if a == 1:
        one = w_a
    elif w_a > 0 and w_b > 0:
        slope = min(0.0, max(-1.0, math.log(w_b / w_a) / math.log(b / a)))
        one = w_a * a ** -slope
    else:
        one = w_a
    return _fig(one), {n: _fig(w) for n, w in ((a, w_a), (b, w_b)) if n > 1}


def combine_sizes(first: Mapping, second: Mapping, units_first: Mapping[str, int],
                  units_second: Mapping[str, int]) -> tuple[dict, list[str]]:
    """One profile from two measured ones (see the module docstring); ``units_*``: each role's
    units in the run that measured it. Returns ``(profile mapping, header notes)``.

    Raises:
        ValueError: the two disagree on ``samples_per_step`` or on the roles.
    """
    if first.get("samples_per_step") != second.get("samples_per_step"):
        raise ValueError(f"samples_per_step differs: {first.get('samples_per_step')} vs "
                         f"{second.get('samples_per_step')}")
    if set(first["roles"]) != set(second["roles"]):
        raise ValueError(f"the roles differ: {sorted(first['roles'])} vs {sorted(second['roles'])}")
    samples = first["samples_per_step"]
    out = copy.deepcopy(dict(first))
    notes = []
    for role, figures in out["roles"].items():
        other = second["roles"][role]
        n1, n2 = units_first[role], units_second[role]
        b1 = figures["seconds_per_sample"] * samples / n1
        b2 = other["seconds_per_sample"] * samples / n2
        if n1 == n2:
            figures["seconds_per_sample"] = _fig((figures["seconds_per_sample"] + other["seconds_per_sample"]) / 2)
            if "wait_s_per_step" in figures or "wait_s_per_step" in other:
                figures["wait_s_per_step"] = _fig((figures.get("wait_s_per_step", 0.0)
                                                   + other.get("wait_s_per_step", 0.0)) / 2)
            notes.append(f"{role}: measured on {n1} unit(s) in both runs ({b1:.3g} and {b2:.3g} s per unit "
                         "per step): the mean, linear scaling assumed")
            continue
        (a, b_a), (b, b_b) = sorted(((n1, b1), (n2, b2)))
        one, fixed, how = _fit(a, b_a, b, b_b)
        figures["seconds_per_sample"] = _fig(one / samples)
        figures["seconds_per_sample_at"] = {n: _fig(s / samples) for n, s in ((a, b_a), (b, b_b)) if n > 1}
        notes.append(f"{role}: {b_a:.3g} s per unit per step on {a} unit(s), {b_b:.3g} s on {b}: {how}")
        waits = {n1: figures.get("wait_s_per_step", 0.0), n2: other.get("wait_s_per_step", 0.0)}
        if any(waits.values()):
            figures["wait_s_per_step"], figures["wait_s_per_step_at"] = _waits(a, waits[a], b, waits[b])
            notes.append(f"{role}: waits {waits[a]:.3g} s per step on {a} unit(s), {waits[b]:.3g} s on {b}")
    return out, notes
