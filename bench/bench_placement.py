"""Time :func:`plan_placement` on growing clusters; prints median plan time over 20 runs.

Run: ``python bench/bench_placement.py``. Not a test: numbers depend on the machine.
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


def main() -> None:
    print(f"{'cluster':>10}  {'accelerators':>12}  {'components':>10}  {'processes':>9}  {'median ms':>9}")
    for nodes in (1, 8, 32, 128):
        cluster = ClusterShape(num_nodes=nodes, accelerators_per_node=8)
        cfg = components_for(nodes, 8)
        plan = plan_placement(cfg, cluster)
        procs = sum(c.world_size for c in plan.components.values())
        ms = median_ms(cfg, cluster)
        print(f"{nodes:>5} x 8  {nodes * 8:>12}  {len(plan.components):>10}  {procs:>9}  {ms:>9.2f}")


if __name__ == "__main__":
    main()
