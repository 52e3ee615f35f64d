"""Small-message latency: channel ping-pong vs a raw Ray actor round trip, between two workers.

Run: ``python bench/bench_latency.py [--quick]`` (default about 15 s on 2 cores; ``--quick`` about
10 s, most of it Ray start-up). Not a test: numbers depend on the machine.

Setup: a fresh embedded local Ray (``Cluster(num_nodes=1, accelerators_per_node=2,
address="local")``), worker A (group "a", slot 0) and worker B (group "b", slot 1): two processes,
plus the channel's actor. The message is a 64-byte ``bytes`` object. Everything is timed inside
worker A with ``time.perf_counter`` around each single round trip (the driver only starts blocks):

* channel -- A ``put``s the message on key ``ping`` and ``get``s from key ``pong``; B loops
             ``get(ping)`` -> ``put(pong)``. The default path: A, B and the channel's actor share
             a node, so every call goes over the channel actor's Unix-domain socket.
* channel via RPC (forced) -- the same ping-pong on ``channel.rpc_only()`` handles: every call is
             a Ray actor call to the channel's actor (the path across nodes, and the one
             ``RLINF_CHANNEL_FAST_PATH=0`` forces).
* raw     -- A calls ``ray.get(B.echo.remote(msg))`` on B's raw Ray actor handle
             (``group_b.actors[0]``); no rlinf code on the path.
* diagnostic row -- A calls ``ray.get(channel_actor.info.remote())``: one Ray call to the
             channel's (async) actor, the unit the RPC path is built from.

Method: one untimed warm-up block of every path, then BLOCKS blocks of ROUND_TRIPS round trips per
path, the order of paths rotating from block to block so drift hits all of them alike. Reported:
the median (and 10th / 90th percentile) over all timed round trips of a path.

Goal (printed under the table): channel round trip (default path) no worse than raw (median ratio
<= 1.0). A line under the goal counts the items that went over the socket, to show the default
path really took it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from rlinf.scheduler import Channel, Cluster, Worker, WorkerGroup, plan_placement

MSG = b"x" * 64
GOAL_RATIO = 1.0


class Pinger(Worker):
    def channel_rtts(self, channel: Channel, n: int) -> list[float]:
        """Seconds of each of ``n`` put(ping) + get(pong) round trips."""
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            channel.put(MSG, key="ping")
            reply = channel.get(key="pong")
            out.append(time.perf_counter() - t0)
            assert reply == MSG
        return out

    def raw_rtts(self, ponger, n: int) -> list[float]:
        """Seconds of each of ``n`` direct actor calls ``ponger.echo.remote(msg)``."""
        import ray

        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            reply = ray.get(ponger.echo.remote(MSG))
            out.append(time.perf_counter() - t0)
            assert reply == MSG
        return out

    def channel_actor_rtts(self, channel: Channel, n: int) -> list[float]:
        """Seconds of each of ``n`` ping() calls to the channel's actor (one hop there and back)."""
        import ray

        actor = channel._actor
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            ray.get(actor.info.remote())
            out.append(time.perf_counter() - t0)
        return out


class Ponger(Worker):
    def echo(self, msg):
        return msg

    def serve_channel(self, channel: Channel, n: int) -> int:
        for _ in range(n):
            channel.put(channel.get(key="ping"), key="pong")
        return n


def run_block(path: str, a: WorkerGroup, b: WorkerGroup, channel: Channel, n: int) -> list[float]:
    if path.startswith("channel via RPC"):
        channel, path = channel.rpc_only(), "channel"
    if path == "channel":
        serving = b.serve_channel(channel, n)
        rtts = a.channel_rtts(channel, n).wait()[0]
        serving.wait()
        return rtts
    if path == "raw":
        return a.raw_rtts(b.actors[0], n).wait()[0]
    return a.channel_actor_rtts(channel, n).wait()[0]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny runs (seconds), for smoke tests")
    args = parser.parse_args()
    blocks, round_trips, warm = (1, 50, 20) if args.quick else (5, 100, 100)
    started = time.monotonic()

    import ray

    # address="local": always a fresh embedded Ray, never someone else's cluster on this machine.
    cluster = Cluster(num_nodes=1, accelerators_per_node=2, address="local")
    plan = plan_placement({"a": "0", "b": "1"}, cluster.shape)
    a = WorkerGroup.launch(cluster, Pinger, plan.component("a"))
    b = WorkerGroup.launch(cluster, Ponger, plan.component("b"))
    channel = Channel.create("bench-latency")

    paths = ["channel", "channel via RPC (forced)", "raw", "channel actor ping"]
    for path in paths:  # warm-up
        run_block(path, a, b, channel, warm)
    rtts: dict[str, list[float]] = {p: [] for p in paths}
    for i in range(blocks):
        order = paths[i % len(paths):] + paths[:i % len(paths)]
        for path in order:
            rtts[path] += run_block(path, a, b, channel, round_trips)

    print(f"# bench_latency{' --quick' if args.quick else ''}: {os.cpu_count()} CPU(s), "
          f"ray {ray.__version__}, 64-byte bytes message, measured inside worker A; "
          f"{blocks} block(s) x {round_trips} round trips per path after {warm} warm-up")
    print()
    print("| path | round trips | median µs | p10 µs | p90 µs | hops per round trip |")
    print("|---|---:|---:|---:|---:|---|")
    hops = {
        "channel": "socket: A→ch put, ch→B get reply, B→ch put, ch→A get reply (+2 put acks, "
                   "+1 get request, +2 get acks)",
        "channel via RPC (forced)": "Ray calls: A→ch put, ch→B get reply, B→ch put, ch→A get reply "
                                    "(+2 put acks, +1 get request)",
        "raw": "A→B call, B→A reply",
        "channel actor ping": "A→ch, ch→A (diagnostic: one channel-actor call)",
    }
    for path in paths:
        v = rtts[path]
        print(f"| {path} | {len(v)} | {statistics.median(v) * 1e6:.0f} | {pct(v, 0.1) * 1e6:.0f} | "
              f"{pct(v, 0.9) * 1e6:.0f} | {hops[path]} |")
    ratio = statistics.median(rtts["channel"]) / statistics.median(rtts["raw"])
    print()
    print(f"Goal: channel round trip no worse than a raw Ray actor round trip (ratio <= {GOAL_RATIO})")
    print(f"- channel/raw median ratio = {ratio:.2f} -> {'PASS' if ratio <= GOAL_RATIO else 'MISS'}")
    rpc_ratio = statistics.median(rtts["channel via RPC (forced)"]) / statistics.median(rtts["raw"])
    print(f"- for comparison, channel via RPC (forced)/raw median ratio = {rpc_ratio:.2f}")
    counts = channel.stats()
    print("- items over the socket (put, got): "
          + ", ".join(f"{k} {counts[k]['socket_put']}/{counts[k]['total_put']}, "
                      f"{counts[k]['socket_got']}/{counts[k]['total_got']}" for k in ("ping", "pong")))
    print(f"\n# total {time.monotonic() - started:.0f} s")
    a.shutdown()
    b.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main()
