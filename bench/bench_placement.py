"""Time :func:`plan_placement` on growing clusters; prints median plan time over 20 runs.

Run: ``python bench/bench_placement.py``. Goal (issue "Runtime core"): 128 nodes x 8 accelerators
with 6 components plans in well under 100 ms. The reference column is the time to merely build
the list of every (node, accelerator) pair in Python, the floor any planner pays.
"""

from __future__ import annotations

import statistics
import time

from rlinf.scheduler.placement import ClusterShape, plan_placement

RUNS = 20


def components_for(num_nodes: int, per_node: int) -> dict[str, str]:
    """Six components on ``num_nodes x per_node`` accelerators.

    actor, rollout and inference share everything; reward takes the first half; env runs four
    processes per accelerator on the second half; critic gives each process four accelerators.
    """
    total = num_nodes * per_node
    half = total // 2
    return {
        "actor,rollout,inference": "all",
        "reward": f"0-{half - 1}",
        "env": f"{half}-{total - 1}:0-{4 * half - 1}",
        "critic": f"0-{total - 1}:0-{total // 4 - 1}",
    }


def median_ms(component_placement: dict[str, str], cluster: ClusterShape) -> float:
    """Median wall time of one plan, in milliseconds."""
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        plan_placement(component_placement, cluster)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


GOAL_MS = 100.0


def floor_ms(num_nodes: int, per_node: int, processes: int) -> float:
    """Median time to build one tuple per process and per accelerator (a planner's lower bound)."""
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        [(n, a) for n in range(num_nodes) for a in range(per_node)]
        [(p, p % per_node) for p in range(processes)]
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    print("| cluster | accelerators | components | processes | plan median ms | floor ms | plan/floor "
          "| goal < 100 ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for nodes in (1, 8, 32, 128):
        cluster = ClusterShape(num_nodes=nodes, accelerators_per_node=8)
        cfg = components_for(nodes, 8)
        plan = plan_placement(cfg, cluster)
        procs = sum(c.world_size for c in plan.components.values())
        ms = median_ms(cfg, cluster)
        floor = floor_ms(nodes, 8, procs)
        verdict = "PASS" if ms < GOAL_MS else "MISS"
        print(f"| {nodes} x 8 | {nodes * 8} | {len(plan.components)} | {procs} | {ms:.2f} | "
              f"{floor:.3f} | {ms / floor:.0f} | {verdict} |")


if __name__ == "__main__":
    main()
