"""Weight sync at real size: actor -> rollout on a Qwen2.5-0.5B-shaped model, vs a plain copy.

Run: ``python bench/bench_weight_sync.py [--receivers hf,vllm] [--rounds 3] [--quick]``
(about 3 minutes on 2 cores with both receivers; ``--quick`` uses a 2-layer model of the same
width with an 8192-token vocabulary, for smoke tests). Not a test: numbers depend on the machine.

What one sync is: exactly what the math runner does between steps (``receive_weights`` on every
rollout rank, ``send_weights`` on every actor rank; the FSDP actor gathers each tensor as the
link packs it, the rollout engine copies each tensor into place as it arrives).

Model: Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 heads / 2 KV heads, MLP 4864, vocab
151936, tied embeddings; 494M parameters), random weights built here once (cached under
``bench/results/``), fp32 in the actor and in the HF rollout engine (CPU defaults).

Rows (same run, one Ray, interleaved rounds, medians):

* reference -- ``dst.load_state_dict(src.state_dict())`` between two copies of the model in one
  process (the plain state-dict copy), and a 256 MiB ``copy_`` (memcpy) for bandwidth.
* process-group bandwidth -- one 256 MiB gloo broadcast between processes on slots 0 and 1:
  what a link across hosts moves per second.
* per receiver (HF, vLLM) x placement (collocated ``actor,rollout: 0``; disaggregated
  ``actor: 0, rollout: 1``) x path (``one-host``: the default here, receivers reading the
  actor's memory in place where the kernel allows it, else the two-slot shared-memory staging;
  ``pg``: the process-group path a link across hosts takes): sync seconds, bytes sent, and the
  extra peak resident memory (VmHWM, reset before each timed sync) of the actor and rollout
  processes over what they held before it. Each path's first (warm-up) sync allocates what the
  link keeps (two 64 MiB buckets per side on the pg path, the staging file); it is not timed.

Goals (printed under the table): collocated sync (its default path) <= 2 x the plain copy;
disaggregated sync within 2 x (bytes / bandwidth of its path: memcpy one-host, the gloo broadcast
across hosts); no full extra copy of the model in any receiver (extra peak < the model's bytes).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlinf.scheduler import Cluster, TensorLink, Worker, WorkerGroup, plan_placement  # noqa: E402

RESULTS = ROOT / "bench" / "results"
COPY_MIB = 256


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def make_model_dir(quick: bool) -> Path:
    """Qwen2.5-0.5B-shaped random model + the tiny-math tokenizer, built once."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from toolkits.tiny_math.make_model import save_model
    from toolkits.tiny_math.tokenizer import build_tokenizer

    out = RESULTS / ("wsync_qwen05b_2layers_8k_vocab" if quick else "wsync_qwen05b")
    if (out / "config.json").exists():
        return out
    tok = build_tokenizer()
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=8192 if quick else 151936, hidden_size=896, intermediate_size=4864,
                         num_hidden_layers=2 if quick else 24, num_attention_heads=14, num_key_value_heads=2,
                         max_position_embeddings=4096, rope_theta=1e6, tie_word_embeddings=True,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)
    log(f"building {out.name} ...")
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    return save_model(model, tok, out)


class LinkProbe(Worker):
    """Measures the process-group path's bandwidth: one big gloo broadcast between two workers."""

    def join(self, rank: int, port: int) -> None:
        import datetime

        import torch.distributed as dist

        store = dist.TCPStore("127.0.0.1", port, 2, is_master=rank == 0, timeout=datetime.timedelta(seconds=120))
        self.group = dist.ProcessGroupGloo(store, rank, 2, datetime.timedelta(seconds=120))
        self.link_rank = rank

    def broadcast_seconds(self, nbytes: int, rounds: int) -> list[float]:
        import torch

        buf = torch.ones(nbytes, dtype=torch.uint8)
        self.group.broadcast(buf, 0).wait()  # warm: pages touched, connection up
        out = []
        for _ in range(rounds):
            self.group.barrier().wait()
            t0 = time.perf_counter()
            self.group.broadcast(buf, 0).wait()
            self.group.barrier().wait()
            out.append(time.perf_counter() - t0)
        return out


def process_group_gbps(cluster) -> float:
    from rlinf.scheduler.cluster import free_port_on

    plan = plan_placement({"probe": "0-1"}, cluster.shape)
    group = WorkerGroup.launch(cluster, LinkProbe, plan.component("probe"))
    try:
        port = free_port_on(cluster.node(0))
        calls = [group.execute("join", r, port, ranks=[r]) for r in (0, 1)]
        for c in calls:
            c.wait(timeout=120)
        times = group.broadcast_seconds(COPY_MIB << 20, 5).wait(timeout=300)[0]
        return (COPY_MIB << 20) / statistics.median(times) / 1e9
    finally:
        group.shutdown()


def reference_copy(model_dir: Path, rounds: int) -> tuple[float, int, float]:
    """(median seconds of a plain state-dict copy between two fp32 copies of the model in one
    process, every distinct tensor once; model bytes; memcpy GB/s)."""
    import torch
    from transformers import AutoModelForCausalLM

    src = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    dst = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    src_state, dst_state = src.state_dict(), dst.state_dict()
    pairs, seen = [], set()
    for name, tensor in src_state.items():
        if tensor.data_ptr() not in seen:  # the tied LM head is the embedding: copied once
            seen.add(tensor.data_ptr())
            pairs.append((dst_state[name], tensor))
    nbytes = sum(t.numel() * t.element_size() for _, t in pairs)
    times = []
    with torch.no_grad():
        for _ in range(rounds + 2):
            t0 = time.perf_counter()
            for target, value in pairs:
                target.copy_(value)
            times.append(time.perf_counter() - t0)
    a, b = torch.ones(COPY_MIB << 20, dtype=torch.uint8), torch.zeros(COPY_MIB << 20, dtype=torch.uint8)
    b.copy_(a)
    copies = []
    for _ in range(5):
        t0 = time.perf_counter()
        b.copy_(a)
        copies.append(time.perf_counter() - t0)
    del src, dst, src_state, dst_state, pairs
    return statistics.median(times[1:]), nbytes, (COPY_MIB << 20) / statistics.median(copies) / 1e9


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def reset_peak(pid: int) -> int:
    """Reset the process's peak RSS (VmHWM) to its current RSS; returns that RSS in KiB."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return _status_kb(pid, "VmRSS")


def pids_of(group: WorkerGroup) -> list[int]:
    return [pid for _, pid in group._execute("_rlinf_ping").wait(timeout=60)]


class Setup:
    """An actor group and a rollout group of one receiver kind and placement."""

    def __init__(self, cluster, model_dir: Path, receiver: str, placement: str):
        from rlinf.config.math import MathConfig
        from rlinf.workers.actor.fsdp_actor import FSDPActorWorker
        from rlinf.workers.rollout.generation_worker import GenerationWorker

        self.receiver, self.placement = receiver, placement
        where = {"actor,rollout": "0"} if placement == "collocated" else {"actor": "0", "rollout": "1"}
        cfg = MathConfig.from_dict({
            "cluster": {"num_nodes": 1, "accelerators_per_node": 2, "component_placement": where},
            "data": {"train_data_paths": [str(ROOT / "examples" / "math" / "data" / "train.jsonl")]},
            "actor": {"model": {"model_path": str(model_dir)}},
            "rollout": {"backend": "vllm" if receiver == "vllm" else "huggingface",
                        **({"kv_cache_space_gb": 1} if receiver == "vllm" else {})},
            "algorithm": {"kl_beta": 0.0, "group_size": 2},
        })
        plan = cfg.cluster.plan()
        self.actor = WorkerGroup.launch(cluster, FSDPActorWorker, plan.component("actor"), name="ActorGroup",
                                        args=(cfg.model_path, cfg.actor, cfg.algorithm, 1, None, False))
        self.rollout = WorkerGroup.launch(cluster, GenerationWorker, plan.component("rollout"), name="RolloutGroup",
                                          args=(cfg.model_path, cfg.rollout, cfg.tokenizer_path, cfg.actor.tokenizer))
        self.pids = {"actor": pids_of(self.actor)[0], "rollout": pids_of(self.rollout)[0]}
        self.path = None

    def use_path(self, path: str) -> str:
        """Reconnect the weight link on the one-host path (the default here) or the process-group
        path (what a link across hosts takes); returns how the link moves tensors."""
        from rlinf.workers.links import WEIGHT_LINK

        if path != self.path:
            TensorLink.connect(WEIGHT_LINK, self.actor, 0, self.rollout, shared_memory=path == "one-host")
            self.path = path
        return self.actor._execute("_rlinf_link_path", WEIGHT_LINK).wait(timeout=60)[0]

    def sync(self) -> dict:
        before = {k: reset_peak(pid) for k, pid in self.pids.items()}
        t0 = time.perf_counter()
        receiving = self.rollout.execute("receive_weights")
        sent = self.actor.send_weights().wait(timeout=600)[0]
        receiving.wait(timeout=600)
        seconds = time.perf_counter() - t0
        extra = {k: (_status_kb(pid, "VmHWM") - before[k]) * 1024 for k, pid in self.pids.items()}
        return {"seconds": seconds, "bytes": sent, "extra_actor": extra["actor"], "extra_rollout": extra["rollout"]}

    def close(self) -> None:
        self.actor.shutdown()
        self.rollout.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--receivers", default="hf,vllm")
    parser.add_argument("--placements", default="collocated,disaggregated")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="2-layer model, 1 round (smoke test)")
    args = parser.parse_args()
    rounds = 1 if args.quick else args.rounds
    started = time.monotonic()
    import ray
    import torch

    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # vLLM logs to stdout (the table's stream)
    model_dir = make_model_dir(args.quick)
    log("reference copy ...")
    copy_s, model_bytes, memcpy_gbps = reference_copy(model_dir, rounds)
    cluster = Cluster(num_nodes=1, accelerators_per_node=2, address="local")
    log("process-group bandwidth ...")
    pg_gbps = process_group_gbps(cluster)
    rows = []
    for receiver in args.receivers.split(","):
        for placement in args.placements.split(","):
            log(f"{receiver} / {placement}: starting groups ...")
            setup = Setup(cluster, model_dir, receiver, placement)
            try:
                results: dict[str, list[dict]] = {"one-host": [], "pg": []}
                how: dict[str, str] = {}
                for block in range(2):  # one-host, pg, then pg, one-host: drift hits both alike
                    for path in (["one-host", "pg"] if block == 0 else ["pg", "one-host"]):
                        how[path] = setup.use_path(path)  # a fresh link: its first sync warms it
                        warm = setup.sync()
                        log(f"  block {block} {path}: warm-up {warm['seconds']:.3f} s")
                        for _ in range(max(1, rounds // 2) if block == 0 else max(1, rounds - rounds // 2)):
                            r = setup.sync()
                            log(f"  block {block} {path}: {r['seconds']:.3f} s")
                            results[path].append(r)
                for path, rs in results.items():
                    rows.append({"receiver": receiver, "placement": placement, "path": path, "how": how[path],
                                 **{k: statistics.median(r[k] for r in rs) for k in rs[0]}})
            finally:
                setup.close()

    load = os.getloadavg()
    print(f"# bench_weight_sync{' --quick' if args.quick else ''}: {os.cpu_count()} CPU(s), torch {torch.__version__}, "
          f"ray {ray.__version__}; model {model_dir.name}: {model_bytes / 1e9:.3f} GB fp32 (tied embedding once); "
          f"{rounds} timed sync(s) per row in two blocks (one-host, pg, pg, one-host), each after one warm-up "
          f"sync; load average at the end "
          f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}")
    print()
    print(f"reference: plain state-dict copy (each distinct tensor copy_'d once) {copy_s:.3f} s "
          f"({model_bytes / copy_s / 1e9:.2f} GB/s); "
          f"memcpy {memcpy_gbps:.2f} GB/s ({COPY_MIB} MiB copy_); process-group (gloo broadcast, "
          f"{COPY_MIB} MiB) {pg_gbps:.2f} GB/s")
    print()
    print("| receiver | placement | path (how) | sync s | GB sent | sync / copy | bytes at path bandwidth s | "
          "sync / that | actor extra peak GB | rollout extra peak GB |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        bw = memcpy_gbps if r["path"] == "one-host" else pg_gbps
        ideal = r["bytes"] / bw / 1e9
        r["ratio_copy"], r["ratio_bw"] = r["seconds"] / copy_s, r["seconds"] / ideal
        print(f"| {r['receiver']} | {r['placement']} | {r['path']} ({r['how']}) | {r['seconds']:.3f} "
              f"| {r['bytes'] / 1e9:.3f} | "
              f"{r['ratio_copy']:.2f} | {ideal:.3f} | {r['ratio_bw']:.2f} | {r['extra_actor'] / 1e9:.3f} | "
              f"{r['extra_rollout'] / 1e9:.3f} |")
    print()
    print("Goals: collocated sync (its default one-host path) <= 2 x the plain copy; disaggregated sync <= 2 x "
          "(bytes / its path's bandwidth: memcpy one-host, the gloo broadcast across hosts); no receiver holds a "
          "full extra copy (extra peak < model bytes)")
    for r in rows:
        name = f"{r['receiver']} / {r['placement']} / {r['path']} ({r['how']})"
        if r["placement"] == "collocated" and r["path"] == "one-host":
            verdict = "PASS" if r["ratio_copy"] <= 2.0 else "MISS"
            print(f"- {name}: sync / copy = {r['ratio_copy']:.2f} -> {verdict}")
        elif r["placement"] == "disaggregated":
            verdict = "PASS" if r["ratio_bw"] <= 2.0 else "MISS"
            print(f"- {name}: sync / (bytes / bandwidth) = {r['ratio_bw']:.2f} -> {verdict}")
        else:
            print(f"- {name}: the cross-host path on collocated workers, shown for reference")
        mem = "PASS" if r["extra_rollout"] < model_bytes else "MISS"
        print(f"  rollout extra peak {r['extra_rollout'] / 1e9:.3f} GB vs model {model_bytes / 1e9:.3f} GB -> {mem}")
    print(f"\n# total {time.monotonic() - started:.0f} s")
    ray.shutdown()


if __name__ == "__main__":
    main()
