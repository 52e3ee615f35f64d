"""Group call fan-out: ``group.noop().wait()`` vs. the same 8 raw Ray actor calls.

Run: ``python bench/bench_group_call.py [--quick]`` (default about 20 s on 2 cores, 12 s of it
starting 8 worker processes; ``--quick`` about 15 s). Not a test: numbers depend on the machine.

Setup: a fresh embedded local Ray (``Cluster(num_nodes=1, accelerators_per_node=8,
address="local")``: 8 logical slots) and one WorkerGroup of 8 workers placed on "0-7", whose
``noop()`` returns ``None``. Timed from the driver with ``time.perf_counter`` around each call:

* group      -- ``group.noop().wait()``: rlinf's path (``WorkerGroup.execute`` -> one
                ``_rlinf_call`` per rank -> ``GroupCall.wait``, which settles ranks one by one
                so the first failure raises at once).
* raw        -- ``ray.get([a.noop.remote() for a in group.actors])`` on the same actors.
* diagnostic -- ``ray.get([a._rlinf_call.remote("noop") for a in group.actors])``: rlinf's
                per-rank wrapper with raw Ray waiting, to split the overhead between the wrapper
                and ``GroupCall.wait``.

Method: WARM untimed iterations of every path, then ITERS iterations in which the three paths run
back to back in an order that rotates every iteration (interleaved A/B/C), so drift hits all of
them alike. Reported: median, 10th and 90th percentile per path; ratio group/raw of the medians
and the overhead (difference of medians) per group call and per rank.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from rlinf.scheduler import Cluster, Worker, WorkerGroup, plan_placement

WORLD = 8


class Noop(Worker):
    def noop(self):
        return None


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny runs (seconds), for smoke tests")
    args = parser.parse_args()
    iters, warm = (30, 10) if args.quick else (300, 50)
    started = time.monotonic()

    import ray

    # address="local": always a fresh embedded Ray, never someone else's cluster on this machine.
    cluster = Cluster(num_nodes=1, accelerators_per_node=WORLD, address="local")
    plan = plan_placement({"noop": f"0-{WORLD - 1}"}, cluster.shape)
    group = WorkerGroup.launch(cluster, Noop, plan.component("noop"))
    actors = group.actors
    launched = time.monotonic() - started

    def group_path():
        group.noop().wait()

    def raw_path():
        ray.get([a.noop.remote() for a in actors])

    def wrapper_path():
        ray.get([a._rlinf_call.remote("noop") for a in actors])

    paths = {"group": group_path, "raw": raw_path, "diagnostic: raw + _rlinf_call": wrapper_path}
    names = list(paths)
    for _ in range(warm):
        for fn in paths.values():
            fn()
    times: dict[str, list[float]] = {n: [] for n in names}
    for i in range(iters):
        for name in names[i % len(names):] + names[:i % len(names)]:
            t0 = time.perf_counter()
            paths[name]()
            times[name].append(time.perf_counter() - t0)

    med = {n: statistics.median(v) for n, v in times.items()}
    print(f"# bench_group_call{' --quick' if args.quick else ''}: {os.cpu_count()} CPU(s), "
          f"ray {ray.__version__}, {WORLD} workers on one node (launched in {launched:.0f} s), "
          f"timed from the driver; {iters} interleaved iterations per path after {warm} warm-up")
    print()
    print("| path | median µs | p10 µs | p90 µs | vs raw |")
    print("|---|---:|---:|---:|---:|")
    for name in names:
        v = times[name]
        print(f"| {name} | {med[name] * 1e6:.0f} | {pct(v, 0.1) * 1e6:.0f} | {pct(v, 0.9) * 1e6:.0f} | "
              f"{med[name] / med['raw']:.2f} |")
    overhead = med["group"] - med["raw"]
    print()
    print(f"- group/raw median ratio = {med['group'] / med['raw']:.2f}; overhead = "
          f"{overhead * 1e6:.0f} µs per group call ({overhead * 1e6 / WORLD:.0f} µs per rank)")
    wrapper = med["diagnostic: raw + _rlinf_call"] - med["raw"]
    print(f"- of which the per-rank _rlinf_call wrapper: {wrapper * 1e6:.0f} µs; "
          f"GroupCall/execute/wait bookkeeping: {(overhead - wrapper) * 1e6:.0f} µs")
    print(f"\n# total {time.monotonic() - started:.0f} s")
    group.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main()
