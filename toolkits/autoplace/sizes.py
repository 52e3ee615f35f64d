"""Measuring a profile at two sizes (``--measure-steps K``, ``--measure-sizes 2``, the default):
K steps with the config's placement, then K steps with the placement the planner ranks fastest
among those that give the most roles another unit count, and one profile from both
(:func:`~rlinf.runners.autoplace_sizes.combine_sizes`: each role's fixed cost per unit and its
divisible work). Where no placement changes a count (a local-backend run: one process per group;
a cluster of one accelerator), the profile stays measured at one size and its header says so.

Example (from the repository root; two real runs of 3 steps)::

    from toolkits.autoplace.inputs import load_run
    from toolkits.autoplace.sizes import measure_two_sizes
    run = load_run("examples/math/config/grpo_tiny_disaggregated.yaml")
    measure_two_sizes(run, run.raw, 3, "/tmp/profile.yaml")   # doctest: +SKIP
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Mapping

from rlinf.runners.autoplace_sizes import combine_sizes, placement_units
from rlinf.scheduler.autoplace import Ranked
from rlinf.scheduler.placement import ClusterShape
from toolkits.autoplace.inputs import LoadedRun, load_yaml, planning_profile, read_profile, resolve_cluster
from toolkits.autoplace.ranking import rank, set_dotted

__all__ = ["SECOND_SUFFIX", "measure_two_sizes", "second_size"]

#: the second run's experiment (and profile file) name suffix
SECOND_SUFFIX = "_size2"
#: the header line a one-size profile carries, replaced when two sizes were measured
ONE_SIZE_LINE = "assumed: linear scaling over a role's units (measured at one size)"


def second_size(run: LoadedRun, ranked: tuple[Ranked, ...], shape: ClusterShape,
                on_cpu: bool) -> tuple[Ranked, dict[str, int], dict[str, int]] | None:
    """``(candidate, units as placed, units there)``: among ``ranked`` (fastest first, the ones
    the config accepts), the first that changes the unit count of the most roles; None when none
    changes any."""
    roles = run.workflow.roles()
    placed = run.cfg.cluster.component_placement
    own = placement_units(placed, shape, roles, on_cpu)
    best, best_changed = None, 0
    for r in ranked:
        units = placement_units(r.candidate.placement, shape, roles, on_cpu)
        changed = sum(units[role] != own[role] for role in roles)
        if changed > best_changed:
            best, best_changed = (r, own, units), changed
    return best


def _read_header(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line[2:].rstrip("\n") for line in f if line.startswith("# ")]


def measure_two_sizes(run: LoadedRun, raw: Mapping, steps: int, out: str,
                      print_fn: Callable = print) -> list[str]:
    """Measure ``raw`` (``run``'s config tree, maybe with its run folder names changed) as placed
    into ``out``, then at a second size when one exists (see the module docstring) and rewrite
    ``out`` with both; returns the notes the header got. A measuring run that fails raises what
    its run raises (:func:`~rlinf.runners.autoplace_measure.measure_profile`)."""
    # lazy: the run layer (torch, the workers) only when measuring
    from rlinf.runners.autoplace_measure import measure_profile
    from rlinf.runners.autoplace_profile import write_profile

    measure_profile(run.recipe, raw, steps, out, config=run.path, print_fn=print_fn)
    first = load_yaml(out)
    header = _read_header(out)
    if run.cfg.cluster.backend == "local":
        return _one_size(out, first, header, "the local backend runs every group as one process")
    profile, _ = planning_profile(read_profile(out), run.workflow)
    shape = resolve_cluster(run, profile, None, None).shape
    on_cpu = "cores_per_node" in first
    pick = second_size(run, rank(run, profile, shape).ranked, shape, on_cpu)
    if pick is None:
        return _one_size(out, first, header, "no placement the config accepts gives a role another unit count")
    chosen, units_first, units_second = pick
    tree = copy.deepcopy(dict(raw))
    for key, value in chosen.candidate.settings(run.workflow).items():
        set_dotted(tree, key, value)
    runner = tree.setdefault("runner", {})
    runner["experiment_name"] = f"{runner.get('experiment_name', 'autoplace')}{SECOND_SUFFIX}"
    if isinstance(runner.get("logger"), dict) and runner["logger"].get("log_path"):
        runner["logger"] = {**runner["logger"], "log_path": runner["logger"]["log_path"] + SECOND_SUFFIX}
    root, ext = os.path.splitext(out)
    second_path = f"{root}{SECOND_SUFFIX}{ext}"
    print_fn(f"[autoplace] second size: {chosen.candidate.label()} "
             f"({', '.join(f'{k} {units_first[k]} -> {units_second[k]}' for k in units_first)})")
    measure_profile(run.recipe, tree, steps, second_path, config=run.path, print_fn=print_fn)
    combined, notes = combine_sizes(first, load_yaml(second_path), units_first, units_second)
    unit = "process(es)" if on_cpu else "accelerator(s)"
    lines = [line for line in header if line != ONE_SIZE_LINE]
    lines += [f"scaling: measured at two sizes; the second run: {chosen.candidate.label()} ({second_path}); "
              f"units are {unit}; b_n = c + W / n per role (rlinf/runners/autoplace_sizes.py)"]
    lines += [f"scaling: {note}" for note in notes]
    write_profile(out, combined, lines)
    return notes


def _one_size(out: str, profile: Mapping, header: list[str], why: str) -> list[str]:
    from rlinf.runners.autoplace_profile import write_profile

    note = f"scaling measured at one size: {why}"
    write_profile(out, profile, [*header, note])
    return [note]
